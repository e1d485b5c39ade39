"""Scoring, summary and report of an oneiro-bench run: summary.json, report.md and PNG plots.

Quality (the ``evaluate`` modules shipped in ``oneiro_hf/metrics``, loaded by path, offline)
    ``rouge_l_vs_greedy`` is the ROUGE-L F1 of each answer turn against plain greedy's turn, averaged
    over turns, then over questions; ``exact_match_vs_greedy`` is the share of turns whose text equals
    greedy's (both ``spec_fidelity``). ``identical_to_greedy`` is the share of answers whose token ids equal
    greedy's in every turn (``token_identity``; text equality for records without ids).

Task scores (``spec_task_score``, only where the Spec-Bench questions file carries references)
    * ``math_reasoning`` (GSM8K): the last number in the answer equals the number after ``####`` in
      the reference solution (``answer_accuracy``).
    * ``rag`` (Natural Questions with retrieved passages): the normalised answer contains one of the
      reference aliases (``contains_answer``, SQuAD-style normalisation).
    * ``translation`` (WMT14 de-en) and ``summarization`` (CNN/DM): ROUGE-L F1 against the reference
      (``rouge_l_vs_reference``).
    * ``qa`` has no references in the file; the MT-bench categories (writing, roleplay, reasoning, math,
      coding, extraction, stem, humanities) are open-ended and judged by an LLM in MT-bench, their
      references are hints for that judge: neither is scored, and the summary says why.

Speculative steps
    Every answer record carries, for each target verification pass, the number of drafted tokens
    (``draft_lengths``) and the tokens it produced (``accept_lengths`` = accepted drafts + 1), so
    ``mean_accepted_tokens`` (tau) is new tokens per target pass and ``acceptance_by_position[j-1]`` is
    P(draft token j accepted | a draft of at least j tokens was verified).

Uncertainty
    ``speedup_interval_90`` is a 90% paired bootstrap interval of the speedup over same-kernel greedy: the
    questions are drawn with replacement and the method and its baseline are timed on the same draw. It covers
    the timing noise of one run (on a shared CPU one generate call's steps vary by tens of percent) and which
    questions were asked; a target met only below the interval's top is within that noise.
"""

from __future__ import annotations

import random
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

ONEIRO_GREEDY = "oneiro-greedy"  # plain greedy inside oneiro_hf.cpu_kernels: the same-kernel baseline
KERNELS_SUFFIX = "-kernels"  # a transformers method (hf-lookup-kernels, ...) run inside oneiro_hf.cpu_kernels
LOSSLESS = frozenset(
    {"greedy", ONEIRO_GREEDY, "hf-lookup", "hf-early-exit", "hf-assistant", "oneiro-lookup", "oneiro-latent",
     "oneiro-hybrid", "oneiro-suffix"}
)
BOOTSTRAP_DRAWS = 2000  # resamples of the questions behind each speedup interval
SAME_KERNEL_PASS_SLACK = 1.05  # speedup vs same-kernel greedy over tau above this: a pass costs less than a step
TASK_METRICS = {
    "math_reasoning": "answer_accuracy",
    "rag": "contains_answer",
    "translation": "rouge_l_vs_reference",
    "summarization": "rouge_l_vs_reference",
}
MAX_POSITIONS = 16  # acceptance by draft position is reported for positions 1..16


def base_method(method: str) -> str:
    """The method without its `@drafter` suffix (`oneiro-latent@refined` -> `oneiro-latent`)."""
    return method.split("@", 1)[0]


def is_lossless(method: str) -> bool:
    base = base_method(method).removesuffix(KERNELS_SUFFIX)
    return base in LOSSLESS or base.startswith(("oneiro-latent-fixed-", "oneiro-tree"))


def kernels_of(method: str) -> str:
    """"oneiro" for a method whose target runs inside `oneiro_hf.cpu_kernels` (oneiro-* and *-kernels), else
    "stock" (transformers' own kernels)."""
    return "oneiro" if method.startswith("oneiro-") or base_method(method).endswith(KERNELS_SUFFIX) else "stock"


def same_kernel_baseline(method: str, methods) -> str:
    """The greedy run on the kernels `method` ran: oneiro-greedy for oneiro-kernel methods when it is among
    `methods`, else greedy."""
    return ONEIRO_GREEDY if kernels_of(method) == "oneiro" and ONEIRO_GREEDY in methods else "greedy"


def is_relaxed(method: str) -> bool:
    return base_method(method).startswith(("oneiro-topk-", "oneiro-threshold-"))


# ------------------------------------------------------------------------------------------- metrics
def _task_reference(category: str, reference: Any) -> Any:
    """The first reference of a Spec-Bench question in the form ``spec_task_score`` takes, or None."""
    if not reference:
        return None
    first = reference[0] if isinstance(reference, list) else reference
    if category == "rag":
        aliases = first if isinstance(first, list) else [first]
        return [str(a) for a in aliases]
    return first if isinstance(first, str) else None


def task_scores(category: str, answers: list[list[str]], references: list[Any]) -> list[float | None]:
    """Per answer (its turns), the category's task score against its Spec-Bench reference, or None."""
    from ..metrics import load as load_metric

    if category not in TASK_METRICS:
        return [None] * len(answers)
    usable = [i for i, (a, r) in enumerate(zip(answers, references)) if a and _task_reference(category, r)]
    scores: list[float | None] = [None] * len(answers)
    if usable:
        result = load_metric("spec_task_score", category).compute(
            predictions=[answers[i][0] for i in usable],
            references=[_task_reference(category, references[i]) for i in usable],
            per_example=True,
        )
        for i, score in zip(usable, result["scores"]):
            scores[i] = score
    return scores


def task_score(category: str, answer_turns: list[str], reference: Any) -> float | None:
    """Score of one answer against its Spec-Bench reference, or None if the category/reference isn't scored."""
    return task_scores(category, [answer_turns], [reference])[0]


# ------------------------------------------------------------------------------------------- summary
def _choice(rec: dict) -> dict:
    return rec["choices"][0]


def _turn_ids(rec: dict) -> list | None:
    return _choice(rec).get("output_ids")


def identical_to_greedy(rows: list[dict], greedy_by_id: dict) -> list[bool | None]:
    """Per row: its token ids equal greedy's in every turn (``token_identity``); text-exact for records without
    ids; None without a greedy answer."""
    from ..metrics import load as load_metric

    result: list[bool | None] = [None] * len(rows)
    preds, refs, owner = [], [], []
    for i, rec in enumerate(rows):
        g = greedy_by_id.get(rec["question_id"])
        if g is None:
            continue
        a, b = _turn_ids(rec), _turn_ids(g)
        if a is None or b is None or len(a) != len(b):
            result[i] = _choice(rec)["turns"] == _choice(g)["turns"] if a is None or b is None else False
            continue
        result[i] = True
        preds += a
        refs += b
        owner += [i] * len(a)
    if preds:
        same = load_metric("token_identity").compute(predictions=preds, references=refs, per_example=True)
        for i, ok in zip(owner, same["identical_per_example"]):
            result[i] = result[i] and ok
    return result


def fidelity_to_greedy(rows: list[dict], greedy_by_id: dict) -> tuple[list[float], list[float]]:
    """ROUGE-L F1 per question (mean over its turns) and exact match per turn against greedy (``spec_fidelity``)."""
    from ..metrics import load as load_metric

    preds, refs, owner = [], [], []
    for i, rec in enumerate(rows):
        g = greedy_by_id.get(rec["question_id"])
        if g is None:
            continue
        pairs = list(zip(_choice(rec)["turns"], _choice(g)["turns"]))
        preds += [a for a, _ in pairs]
        refs += [b for _, b in pairs]
        owner += [i] * len(pairs)
    if not preds:
        return [], []
    result = load_metric("spec_fidelity").compute(predictions=preds, references=refs, per_example=True)
    per_question: dict[int, list[float]] = {}
    for i, score in zip(owner, result["rouge_l_per_example"]):
        per_question.setdefault(i, []).append(score)
    return [statistics.fmean(v) for v in per_question.values()], result["exact_match_per_example"]


def acceptance_by_position(draft_lengths: list[int], accepted: list[int], max_pos: int = MAX_POSITIONS) -> list:
    """rate[j-1] = P(draft token j accepted | the verified draft had >= j tokens); None where never drafted."""
    rates = []
    for j in range(1, max_pos + 1):
        drafted = [a for d, a in zip(draft_lengths, accepted) if d >= j]
        rates.append(sum(a >= j for a in drafted) / len(drafted) if drafted else None)
    while rates and rates[-1] is None:
        rates.pop()
    return rates


def _steps(rows: list[dict]) -> tuple[list[int], list[int]]:
    """Per verification pass: drafted tokens and accepted drafts, over all rows."""
    drafted, accepted = [], []
    for r in rows:
        c = _choice(r)
        dl, al = c.get("draft_lengths"), c.get("accept_lengths") or []
        if dl is None or len(dl) != len(al):
            continue  # records written before draft lengths were logged
        drafted.extend(dl)
        accepted.extend(a - 1 for a in al)
    return drafted, accepted


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _tokens_per_s(rows: list[dict]) -> float:
    tokens = sum(sum(_choice(r)["new_tokens"]) for r in rows)
    wall = sum(sum(_choice(r)["wall_time"]) for r in rows)
    return tokens / wall if wall else 0.0


def speedup_over(rows: list[dict], baseline_by_id: dict) -> float | None:
    """Tokens/s of `rows` over the baseline's on the same questions (those the baseline answered); None without
    any."""
    matched = [r for r in rows if r["question_id"] in baseline_by_id]
    base = _tokens_per_s([baseline_by_id[r["question_id"]] for r in matched])
    return _tokens_per_s(matched) / base if matched and base else None


def speedup_interval(rows: list[dict], baseline_by_id: dict, level: float = 0.9, draws: int = BOOTSTRAP_DRAWS,
                     seed: int = 0) -> list[float] | None:
    """[low, high]: the `level` paired bootstrap interval of `speedup_over(rows, baseline_by_id)`, questions drawn
    with replacement (the same draw for the method and its baseline); None for fewer than two shared questions."""
    pairs = [(r, baseline_by_id[r["question_id"]]) for r in rows if r["question_id"] in baseline_by_id]
    if len(pairs) < 2:
        return None
    sums = [(sum(_choice(r)["new_tokens"]), sum(_choice(r)["wall_time"]), sum(_choice(b)["new_tokens"]),
             sum(_choice(b)["wall_time"])) for r, b in pairs]
    rng = random.Random(seed)
    ratios = []
    for _ in range(draws):
        draw = [sums[rng.randrange(len(sums))] for _ in sums]
        tokens, wall, base_tokens, base_wall = (sum(col) for col in zip(*draw))
        if wall and base_tokens:
            ratios.append((tokens / wall) / (base_tokens / base_wall))
    ratios.sort()
    tail = (1 - level) / 2
    return [ratios[round(tail * (len(ratios) - 1))], ratios[round((1 - tail) * (len(ratios) - 1))]]


def method_block(rows: list[dict], greedy_by_id: dict, questions: dict | None, category: str | None,
                 oneiro_greedy_by_id: dict | None = None) -> dict:
    """The summary numbers of one method over `rows` (all of one category when `category` is set): speedups
    against stock greedy and, where the run has it, against oneiro-greedy (greedy on oneiro-hf's kernels)."""
    tokens = sum(sum(_choice(r)["new_tokens"]) for r in rows)
    wall = sum(sum(_choice(r)["wall_time"]) for r in rows)
    acc = [a for r in rows for a in _choice(r).get("accept_lengths", [])]
    draft_s = sum(r.get("draft_time_s", 0.0) for r in rows)
    same = [s for s in identical_to_greedy(rows, greedy_by_id) if s is not None]
    rouge, em = fidelity_to_greedy(rows, greedy_by_id)
    drafted, accepted = _steps(rows)
    block: dict[str, Any] = {
        "tokens_per_s": tokens / wall if wall else 0.0,
        "speedup_vs_greedy": speedup_over(rows, greedy_by_id),
        "speedup_vs_oneiro_greedy": speedup_over(rows, oneiro_greedy_by_id) if oneiro_greedy_by_id else None,
        "mean_accepted_tokens": _mean(acc),
        "draft_time_share": draft_s / wall if wall else 0.0,
        "identical_to_greedy": sum(same) / len(same) if same else None,
        "n_prompts": len(rows),
        "new_tokens": tokens,
        "rouge_l_vs_greedy": _mean(rouge),
        "exact_match_vs_greedy": _mean(em),
        "verification_steps": len(acc),
        "acceptance_rate": sum(accepted) / sum(drafted) if sum(drafted) else None,
    }
    if category is not None and questions is not None and category in TASK_METRICS:
        found = task_scores(
            category,
            [_choice(r)["turns"] for r in rows],
            [questions.get(r["question_id"], {}).get("reference") for r in rows],
        )
        scores = [s for s in found if s is not None]
        block["task_score"] = (
            {"metric": TASK_METRICS[category], "score": _mean(scores), "n": len(scores)} if scores else None
        )
    return block


def same_kernel_block(method: str, block: dict, methods) -> dict:
    """The method's speedup against greedy on the kernels it ran (`same_kernel_baseline`), and that speedup per
    token of tau: above `SAME_KERNEL_PASS_SLACK` a verification pass cost less than one greedy step on the same
    kernels, which only a profile with t(k) < t(1) explains."""
    baseline = same_kernel_baseline(method, methods)
    key = "speedup_vs_oneiro_greedy" if baseline == ONEIRO_GREEDY else "speedup_vs_greedy"
    speedup, tau = block.get(key), block.get("mean_accepted_tokens")
    return {"same_kernel_baseline": baseline, "speedup_vs_same_kernel_greedy": speedup,
            "same_kernel_speedup_per_tau": speedup / tau if speedup and tau else None}


def _oneiro_sources(rows: list[dict]) -> dict | None:
    drafted: Counter = Counter()
    accepted: Counter = Counter()
    nodes: list[int] = []
    ranks: list[int] = []
    found = False
    for r in rows:
        stats = r.get("oneiro_stats")
        if not stats:
            continue
        found = True
        drafted.update(stats.get("drafted_by_source", {}))
        accepted.update(stats.get("accepted_by_source", {}))
        nodes.extend(stats.get("tree_nodes", []))
        ranks.extend(stats.get("tree_branch_ranks", []))
    if not found:
        return None
    block: dict[str, Any] = {"drafted_by_source": dict(drafted), "accepted_by_source": dict(accepted)}
    if nodes:  # tree verification: nodes per pass, and how often the accepted path left the likeliest child
        accepting = [rank for rank in ranks if rank >= 0]
        block["tree_nodes_per_pass"] = _mean(nodes)
        block["tree_non_first_branch_share"] = (
            sum(rank > 0 for rank in accepting) / len(accepting) if accepting else None
        )
    return block


def task_score_coverage(questions: dict) -> dict:
    """Which categories get a task score, and why the others don't."""
    cats: dict[str, list[dict]] = {}
    for q in questions.values():
        cats.setdefault(q["category"], []).append(q)
    scored, skipped = {}, {}
    for cat, qs in sorted(cats.items()):
        has_ref = any(q.get("reference") for q in qs)
        if cat in TASK_METRICS and has_ref:
            scored[cat] = TASK_METRICS[cat]
        elif not has_ref:
            skipped[cat] = "no reference answers in the questions file"
        else:
            skipped[cat] = "open-ended (MT-bench style, judged by an LLM): references are judge hints, not scored"
    return {"scored": scored, "skipped": skipped}


def _kernels_label(method: str, rows: list[dict]) -> str:
    """What the method's records say it ran on (`kernels`, written by the runner), else its kind by name."""
    labels = {r["kernels"] for r in rows if r.get("kernels")}
    return labels.pop() if len(labels) == 1 else kernels_of(method)


def summarize(records: dict[str, list[dict]], questions: dict | None = None) -> dict:
    """summary.json: per method, overall and per category, ratios against greedy on the same prompts, and
    against oneiro-greedy (greedy on oneiro-hf's kernels) where the run has it.

    `questions` maps question_id -> question (for task scores); records of question ids not in it
    are left out, so a resumed run with a smaller selection summarises only that selection.
    """
    if questions is not None:
        records = {m: [r for r in rows if r["question_id"] in questions] for m, rows in records.items()}
    greedy_by_id = {r["question_id"]: r for r in records.get("greedy", [])}
    oneiro_greedy_by_id = {r["question_id"]: r for r in records.get(ONEIRO_GREEDY, [])} or None
    summary: dict[str, Any] = {"methods": {}, "lossless_violations": []}
    violations: dict[str, list] = {}
    for method, rows in records.items():
        overall = method_block(rows, greedy_by_id, questions, None, oneiro_greedy_by_id)
        overall.update(same_kernel_block(method, overall, records))
        baseline_by_id = oneiro_greedy_by_id if overall["same_kernel_baseline"] == ONEIRO_GREEDY else greedy_by_id
        if method != overall["same_kernel_baseline"] and baseline_by_id:
            overall["speedup_interval_90"] = speedup_interval(rows, baseline_by_id)
        drafted, accepted = _steps(rows)
        overall["acceptance_by_position"] = acceptance_by_position(drafted, accepted)
        sources = _oneiro_sources(rows)
        if sources:
            overall.update(sources)
        entry: dict[str, Any] = {
            "lossless": is_lossless(method),
            "relaxed": is_relaxed(method),
            "kernels": _kernels_label(method, rows),
            "overall": overall,
            "categories": {},
        }
        for cat in sorted({r["category"] for r in rows}):
            cat_rows = [r for r in rows if r["category"] == cat]
            block = method_block(cat_rows, greedy_by_id, questions, cat, oneiro_greedy_by_id)
            block.update(same_kernel_block(method, block, records))
            entry["categories"][cat] = block
        summary["methods"][method] = entry
        # the promise: plain greedy's tokens on the same kernels (oneiro kernels: oneiro-greedy; stock: greedy)
        if is_lossless(method) and method != overall["same_kernel_baseline"] and baseline_by_id:
            same = identical_to_greedy(rows, baseline_by_id)
            bad = [r["question_id"] for r, ok in zip(rows, same) if ok is False]
            if bad:
                summary["lossless_violations"].append(method)
                violations[method] = bad
        if method != "greedy" and greedy_by_id:  # beside it, what stock greedy gave (kernels round differently)
            stock = [ok for ok in identical_to_greedy(rows, greedy_by_id) if ok is not None]
            overall["identical_to_stock_greedy"] = [sum(stock), len(stock)]
    summary["lossless_violation_questions"] = violations
    if questions is not None:
        summary["task_scores"] = task_score_coverage(questions)
    return summary


# ------------------------------------------------------------------------------------------- report
def format_value(value, spec: str = ".2f", suffix: str = "") -> str:
    """A figure of a summary as text, "—" where it was not measured (None)."""
    if value is None:
        return "—"
    return f"{value:{spec}}{suffix}"


def interval_text(interval: list[float] | None) -> str:
    """"; 90%: 1.31-1.56x" for a speedup interval, nothing where there is none."""
    return f"; 90%: {interval[0]:.2f}-{interval[1]:.2f}x" if interval else ""


def report_markdown(summary: dict, plots: dict[str, str] | None = None) -> str:
    methods = list(summary["methods"])
    cats = sorted({c for m in methods for c in summary["methods"][m]["categories"]})
    cfg = summary.get("config", {})
    lines: list[str] = ["# oneiro-bench report", ""]
    if summary.get("lossless_violations"):
        lines += [
            "> **LOSSLESS VIOLATION:** " + ", ".join(summary["lossless_violations"])
            + " produced output that differs from plain greedy decoding on the same kernels (questions: "
            + "; ".join(f"{m}: {q}" for m, q in summary.get("lossless_violation_questions", {}).items())
            + "). A lossless method must reproduce greedy token for token.",
            "",
        ]
    stock = {m: e["overall"]["identical_to_stock_greedy"] for m, e in summary["methods"].items()
             if "identical_to_stock_greedy" in e.get("overall", {})}
    if stock:
        lines += ["Identical to stock greedy (transformers' own kernels; kernels that round differently can part at a "
                  "near-tie): " + ", ".join(f"{m} {n}/{total}" for m, (n, total) in stock.items()) + ".", ""]
    if summary.get("partial"):
        lines += ["> **Partial run** (interrupted): re-run with `--resume` to finish it.", ""]
    lines += settings_lines(cfg)
    lines += profile_lines(summary.get("profile"))
    lines += ["## Speedup by category", "",
              ("Cell: speedup over greedy on the same kernels (over stock greedy; tau = new tokens per target pass). "
              "Same kernels: oneiro-greedy for methods on oneiro-hf's kernels, greedy for stock ones."), ""]
    lines += ["| category | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
    for cat in cats + ["overall"]:
        cells = []
        for m in methods:
            entry = summary["methods"][m]
            e = entry["overall"] if cat == "overall" else entry["categories"].get(cat)
            if not e:
                cells.append("")
                continue
            tau = e["mean_accepted_tokens"]
            cells.append(f"{format_value(e.get('speedup_vs_same_kernel_greedy'))}x ({format_value(e['speedup_vs_greedy'])}x"
                         + (f"; tau {tau:.2f}" if tau else "") + ")")
        lines.append(f"| {'**overall**' if cat == 'overall' else cat} | " + " | ".join(cells) + " |")

    lines += ["", "## Methods", "",
              ("vs same-kernel greedy: the baseline, and a 90% paired bootstrap interval over the questions "
               "(timing noise and the choice of questions)."), "",
              ("| method | kind | kernels | vs same-kernel greedy | vs stock greedy | tau | same-kernel speedup / tau "
               "| acceptance | draft share of wall time | identical to greedy | exact match vs greedy "
               "| ROUGE-L vs greedy |"),
              "|---" * 12 + "|"]
    for m in methods:
        entry = summary["methods"][m]
        e = entry["overall"]
        kind = "lossless" if entry["lossless"] else ("relaxed" if entry["relaxed"] else "other")
        flag = " **VIOLATION**" if m in summary.get("lossless_violations", []) else ""
        lines.append(
            f"| {m} | {kind}{flag} | {entry.get('kernels', kernels_of(m))} "
            f"| {format_value(e.get('speedup_vs_same_kernel_greedy'))}x ({e.get('same_kernel_baseline', 'greedy')}"
            f"{interval_text(e.get('speedup_interval_90'))}) "
            f"| {format_value(e['speedup_vs_greedy'])}x | {format_value(e['mean_accepted_tokens'])} "
            f"| {format_value(e.get('same_kernel_speedup_per_tau'))} "
            f"| {format_value(e['acceptance_rate'], '.1%')} | {e['draft_time_share']:.1%} "
            f"| {format_value(e['identical_to_greedy'], '.0%')} | {format_value(e['exact_match_vs_greedy'], '.0%')} "
            f"| {format_value(e['rouge_l_vs_greedy'], '.3f')} |"
        )
    lines += cheap_pass_lines(summary)

    coverage = summary.get("task_scores")
    if coverage:
        lines += ["", "## Task scores", ""]
        if coverage["scored"]:
            scored = list(coverage["scored"])
            lines += ["| category (metric) | " + " | ".join(methods) + " |", "|---" * (len(methods) + 1) + "|"]
            for cat in scored:
                cells = []
                for m in methods:
                    ts = summary["methods"][m]["categories"].get(cat, {}).get("task_score")
                    cells.append(f"{ts['score']:.3f} (n={ts['n']})" if ts else "—")
                lines.append(f"| {cat} ({coverage['scored'][cat]}) | " + " | ".join(cells) + " |")
        else:
            lines.append("No category in this run has reference answers that are scored here.")
        if coverage["skipped"]:
            lines += ["", "Not scored: " + "; ".join(f"{c} ({why})" for c, why in coverage["skipped"].items()) + "."]

    spec_methods = [m for m in methods if summary["methods"][m]["overall"].get("acceptance_by_position")]
    if spec_methods:
        width = max(len(summary["methods"][m]["overall"]["acceptance_by_position"]) for m in spec_methods)
        width = min(width, 8)
        lines += ["", "## Acceptance by draft position", "",
                  "P(draft token j accepted | a draft of at least j tokens was verified).", "",
                  "| method | " + " | ".join(str(j) for j in range(1, width + 1)) + " |",
                  "|---" * (width + 1) + "|"]
        for m in spec_methods:
            rates = summary["methods"][m]["overall"]["acceptance_by_position"][:width]
            rates = rates + [None] * (width - len(rates))
            lines.append(f"| {m} | " + " | ".join(format_value(r, ".0%") for r in rates) + " |")

    if plots:
        lines += ["", "## Plots", ""]
        for title, rel in plots.items():
            lines += [f"### {title}", "", f"![{title}]({rel})", ""]
    lines += ["", ("Speedup: (new tokens / wall time) of a method over a greedy run's on the same questions, measured "
              "in the same run with the methods interleaved per question; speculation is judged against greedy on "
              "the same kernels (oneiro-greedy runs plain greedy inside `oneiro_hf.cpu_kernels`). tau: new tokens "
              "per target verification pass; a lossless method's same-kernel speedup over its tau is at most about "
              "1 unless a pass of this machine costs less than a step. Draft share: time inside the candidate "
              "generator over wall time.")]
    return "\n".join(lines) + "\n"


def settings_lines(cfg: dict, shown: tuple[str, ...] = ("target", "drafter_resolved", "drafter_weights_sha256", "device",
                   "dtype", "threads", "cpu", "cpu_count", "max_new_tokens", "n_questions", "latency_profile_used",
                   "torch", "transformers")) -> list[str]:
    """The run's settings (`summary["config"]`) as a report table; [] without any."""
    if not cfg:
        return []
    return ["| setting | value |", "|---|---|", *(f"| {k} | {cfg.get(k)} |" for k in shown if k in cfg), ""]


def profile_lines(profile: dict | None) -> list[str]:
    """The t(k) profile the run used, as report lines: what every speed figure of the run is to be named with."""
    if not profile:
        return ["No t(k) profile was recorded for this run (`oneiro-bench profile` measures one).", ""]
    lines = []
    parts = [("oneiro-hf kernels", profile)]
    if isinstance(profile.get("stock"), dict):
        parts.append(("stock kernels", profile["stock"]))
    for name, part in parts:
        ratios = {int(k): v for k, v in part["ratios"].items()}
        shown = ", ".join(f"{ratios[k]:.2f}" for k in sorted(ratios) if 2 <= k <= 8)
        lines.append(f"- t(k) profile, {name} ({part.get('kernels', name)}): t(1) = {part['t1_s'] * 1000:.1f} ms, "
                     f"t(2..8)/t(1) = {shown}")
    if profile.get("kernel_speedup_t1"):
        lines.append(f"- one decoding step on oneiro-hf's kernels: {profile['kernel_speedup_t1']:.2f}x faster than "
                     "on stock kernels (stock t(1) / oneiro t(1))")
    from ..drafting.latency import profile_doubts

    lines += [f"- **the profile is suspect**: {doubt}" for doubt in profile_doubts(profile)]
    return lines + [""] + batch_profile_lines(profile)


def batch_profile_lines(profile: dict) -> list[str]:
    """The profile's t(k, B) (`oneiro-bench profile --batch-sizes`) as a table per kernel set: t(1, B), batched
    greedy's cost per row and token t(1, B)/B, and t(k, B)/t(1, B) for k = 2..8; [] for a profile without it."""
    lines: list[str] = []
    parts = [("oneiro-hf kernels", profile), ("stock kernels", profile.get("stock"))]
    for name, part in parts:
        if not isinstance(part, dict) or not isinstance(part.get("batch"), dict):
            continue
        batch = {int(b): entry for b, entry in part["batch"].items()}
        ks = sorted({int(k) for entry in batch.values() for k in entry["ratios"] if 2 <= int(k) <= 8})
        lines += [f"t(k, B): B rows each adding k tokens per pass, {name} ({part.get('kernels', name)}):", "",
                  "| B | t(1, B) ms | t(1, B)/B ms per row | " + " | ".join(f"t({k}, B)/t(1, B)" for k in ks) + " |",
                  "|---" * (3 + len(ks)) + "|"]
        for b in sorted(batch):
            ratios = {int(k): v for k, v in batch[b]["ratios"].items()}
            t1 = batch[b]["t1_s"] * 1000
            lines.append(f"| {b} | {t1:.2f} | {t1 / b:.3f} | " + " | ".join(f"{ratios[k]:.2f}" for k in ks) + " |")
        lines.append("")
    return lines


def cheap_pass_lines(summary: dict) -> list[str]:
    """For each lossless method whose same-kernel speedup exceeds its tau by more than `SAME_KERNEL_PASS_SLACK`:
    the profile's cheapest multi-token pass, which is the only honest way that can happen."""
    over = [m for m, e in summary["methods"].items()
            if e["lossless"] and (e["overall"].get("same_kernel_speedup_per_tau") or 0) > SAME_KERNEL_PASS_SLACK]
    if not over:
        return []
    lines = ["", f"Same-kernel speedup above tau x {SAME_KERNEL_PASS_SLACK} for {', '.join(over)}."]
    profile = summary.get("profile")
    if profile:
        ratios = {int(k): v for k, v in profile["ratios"].items() if int(k) > 1}
        k = min(ratios, key=ratios.get)
        lines.append(f"The profile explains it only if a pass costs less than a step: its cheapest multi-token pass "
                     f"is t({k}) = {ratios[k]:.2f} t(1) on the same kernels"
                     + (" (below one step)." if ratios[k] < 1 else " (not below one step: look for a kernel "
                        "difference between the method and its baseline)."))
    else:
        lines.append("No profile was recorded to explain it: a kernel difference between method and baseline is "
                     "the likely cause.")
    return lines


# ------------------------------------------------------------------------------------------- plots
def make_plots(summary: dict, records: dict[str, list[dict]], out_dir: str | Path) -> dict[str, str]:
    """Write the PNG plots under out_dir/plots; return {title: path relative to out_dir}."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    out_dir = Path(out_dir)
    plot_dir = out_dir / "plots"
    plot_dir.mkdir(parents=True, exist_ok=True)
    made: dict[str, str] = {}
    methods = [m for m in summary["methods"] if m != "greedy"]

    def save(fig, name: str, title: str) -> None:
        fig.tight_layout()
        fig.savefig(plot_dir / name, dpi=110)
        plt.close(fig)
        made[title] = f"plots/{name}"

    # 1. speedup per category per method (grouped bars)
    if methods:
        cats = sorted({c for m in methods for c in summary["methods"][m]["categories"]}) + ["overall"]
        fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(cats) * max(1, len(methods)) / 2 + 3), 4.2))
        width = 0.8 / len(methods)
        for i, m in enumerate(methods):
            vals = []
            for c in cats:
                e = summary["methods"][m]["overall"] if c == "overall" else summary["methods"][m]["categories"].get(c)
                vals.append((e or {}).get("speedup_vs_same_kernel_greedy") or (e or {}).get("speedup_vs_greedy") or 0.0)
            ax.bar([k + (i - (len(methods) - 1) / 2) * width for k in range(len(cats))], vals, width, label=m)
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xticks(range(len(cats)))
        ax.set_xticklabels(cats, rotation=30, ha="right")
        ax.set_ylabel("speedup over same-kernel greedy")
        ax.legend(fontsize=8)
        save(fig, "speedup_by_category.png", "Speedup by category (over greedy on the same kernels)")

    # 2. histogram of accepted lengths per oneiro method
    oneiro = [m for m in methods if m.startswith("oneiro-") and any(
        _choice(r).get("accept_lengths") for r in records.get(m, []))]
    if oneiro:
        fig, axes = plt.subplots(1, len(oneiro), figsize=(3.2 * len(oneiro) + 1, 3.2), squeeze=False)
        for ax, m in zip(axes[0], oneiro):
            vals = [a for r in records[m] for a in _choice(r).get("accept_lengths", [])]
            top = max(vals)
            ax.hist(vals, bins=[b - 0.5 for b in range(1, top + 2)], color="tab:blue")
            ax.set_title(m, fontsize=9)
            ax.set_xlabel("tokens per target pass")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes[0][0].set_ylabel("verification steps")
        save(fig, "accepted_lengths.png", "Accepted tokens per verification step")

    # 3. acceptance rate by draft position
    spec = [m for m in methods if summary["methods"][m]["overall"].get("acceptance_by_position")]
    if spec:
        fig, ax = plt.subplots(figsize=(6, 3.8))
        for m in spec:
            rates = summary["methods"][m]["overall"]["acceptance_by_position"]
            xs = [j + 1 for j, r in enumerate(rates) if r is not None]
            ax.plot(xs, [r for r in rates if r is not None], marker="o", label=m)
        ax.set_xlabel("draft position j")
        ax.set_ylabel("P(accepted | drafted)")
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=8)
        save(fig, "acceptance_by_position.png", "Acceptance rate by draft position")

    # 4. speedup vs quality (ROUGE-L to greedy); relaxed methods are the point of this plot
    points = [(m, summary["methods"][m]["overall"]) for m in methods]
    points = [(m, e) for m, e in points if e.get("rouge_l_vs_greedy") is not None and e.get("speedup_vs_greedy")]
    if points:
        fig, ax = plt.subplots(figsize=(6, 4))
        for m, e in points:
            relaxed = is_relaxed(m)
            ax.scatter(e["rouge_l_vs_greedy"], e["speedup_vs_greedy"], marker="o" if relaxed else "s",
                       color="tab:red" if relaxed else "tab:gray", s=40)
            ax.annotate(m, (e["rouge_l_vs_greedy"], e["speedup_vs_greedy"]), fontsize=7,
                        xytext=(4, 3), textcoords="offset points")
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        ax.set_xlabel("ROUGE-L vs greedy (1 = same output)")
        ax.set_ylabel("speedup over greedy")
        ax.set_title("relaxed (red) vs lossless (grey)", fontsize=9)
        save(fig, "speedup_vs_quality.png", "Speedup vs quality")
    return made
