"""Where a benchmark run's time went, and what bounds each method's speedup on the measured hardware.

`oneiro-bench breakdown --run DIR` reads a finished run (answers + the t(k) profile it used) and splits each
method's wall time into target verification (the recorded verification widths priced by t(k), with the measured
seconds per token of greedy on the same kernels as t(1)), drafting (timed inside the candidate generator) and the
rest (the assisted loop's bookkeeping, prefills, noise). Each method is priced on the kernels it ran: methods on
oneiro-hf's kernels against oneiro-greedy and the profile's own t(k), stock ones against greedy and the profile's
"stock" t(k) (where the profile has it). Two bounds follow from the same numbers:

* `modelled_speedup` = tokens / sum of t(k)/t(1) over verification passes: the speedup if drafting and the
  loop were free, on this hardware's t(k). Measured speedup below it is drafting and overhead.
* `modelled_with_drafting` (profiles that carry a drafter step cost, `drafter_step_ratio`, as the H200 one
  does): the same with every drafter forward priced at that share of t(1); the loop is still free.
* `tau`: the speedup if a k-token verification cost a 1-token step (nearly so on a GPU for small k).
  The gap between tau and the modelled speedup is the price of this hardware's t(k).

`tau_needed_for(x)` says how many tokens per pass a method would need for speedup x at its current mean
verification cost. No model is loaded; this is arithmetic on recorded runs.

A profile with t(k, B) (`oneiro-bench profile --batch-sizes`, "batch") adds `modelled_batch`, per batch size B:
the method's passes priced by t(k, B)/t(1, B) instead of t(k)/t(1), against batched greedy at B (one t(1, B) per
token of each row), and the tokens per second that gives, B rows at a time. Modelled, never measured: its
assumptions are `BATCH_MODEL_ASSUMPTIONS`, printed with it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from ..drafting.latency import profile_on_kernels
from .answers import read_run_answers
from .profile import H200_RATIOS
from .report import base_method, kernels_of, same_kernel_baseline

BATCH_MODEL_ASSUMPTIONS = (
    "every row of a batch drafts and accepts as the recorded single-prompt passes did (acceptance from this run)",
    ("a batched pass verifies the same k tokens in every row, priced t(k, B) from the profile; rows whose drafts "
     "differ in length (padded to the longest) and rows that finish early are not modelled"),
    "a drafter call on B rows costs the profile's drafter_step_ratio x t(1, B), where the profile has one",
    "not modelled: the decoding loop's own overhead, prefill, padding's share of the context",
)


def ratio_at(ratios: dict[int, float], k: int) -> float:
    """t(k)/t(1) from a profile's ratios: the measured k, else the nearest measured k below (above for k < min;
    profiles may skip some k, and trees exceed the largest)."""
    known = sorted(int(m) for m in ratios)
    below = [m for m in known if m <= k]
    return float(ratios[below[-1]] if below else ratios[known[0]])


def modelled_speedup(
    tokens: int,
    pass_sizes: Sequence[int],
    ratios: dict[int, float] | None = None,
    drafter_calls: int = 0,
    drafter_call_ratio: float = 0.0,
) -> float:
    """Speedup over plain decoding that a t(k) profile gives, labelled modelled.

    tokens: tokens generated; pass_sizes: tokens fed to each verification pass (tree nodes incl. the root, or
    draft length + 1); ratios: t(k)/t(1) (default: the H200 profile). Plain decoding costs t(1) per token.
    Drafting is free unless `drafter_calls` (drafter forwards over the run, e.g. the sum of
    `DraftStats.tree_drafter_calls`) and `drafter_call_ratio` (one call's cost in t(1);
    H200_DRAFTER_CALL_RATIO for SmolLM2 on the H200) are given.
    """
    ratios = H200_RATIOS if ratios is None else ratios
    cost = sum(ratio_at(ratios, int(k)) for k in pass_sizes) + drafter_calls * drafter_call_ratio
    return float(tokens) / cost if cost else 0.0


def _totals(records: list[dict], ratios: dict[int, float]) -> dict[str, float]:
    t = defaultdict(float)
    for rec in records:
        for choice in rec["choices"]:
            t["tokens"] += sum(choice["new_tokens"])
            t["wall_s"] += sum(choice["wall_time"])
            drafts = choice.get("draft_lengths") or []
            if drafts:  # assisted: one verification pass per recorded draft (k = drafted + 1 tokens)
                t["passes"] += len(drafts)
                t["prefills"] += len(choice["new_tokens"])  # one recorded entry per turn is its prefill
                t["drafted"] += sum(drafts)
                t["verify_units"] += sum(ratio_at(ratios, d + 1) for d in drafts)
            else:  # plain decoding: one 1-token pass per new token
                t["passes"] += sum(choice["new_tokens"])
                t["verify_units"] += sum(choice["new_tokens"])
        t["draft_s"] += float(rec.get("draft_time_s") or 0.0)
        stats = rec.get("oneiro_stats") or {}
        if stats and "drafter_calls" not in stats:  # written before the count existed: drafting cannot be priced
            t["calls_unknown"] += 1
        t["drafter_calls"] += stats.get("drafter_calls", 0)
        if "verify_time_s" in stats:  # oneiro-hf's own timers, per pass as generate measured them
            t["timed_records"] += 1
            t["timed_verify_s"] += float(stats["verify_time_s"])
    return t


def time_breakdown(run_dir: str | Path, profile: dict | None = None) -> dict:
    """Per method (overall and per category): seconds split into verification / drafting / other, tau,
    mean verification cost, modelled and measured speedup. `profile` defaults to the one the run used."""
    run = Path(run_dir)
    if not (run / "answers" / "greedy.jsonl").is_file():
        raise FileNotFoundError(f"{run}/answers/greedy.jsonl not found: a breakdown needs a finished oneiro-bench "
                                "run with greedy in it. Fix: pass the --out directory of such a run.")
    summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").is_file() else {}
    if profile is None and isinstance(summary.get("profile"), dict):  # recorded with the run
        profile = summary["profile"]
    if profile is None:
        path = (summary.get("config") or {}).get("latency_profile_used")
        if not path or not Path(path).is_file():
            raise FileNotFoundError(f"the run in {run} names no readable latency profile. Fix: pass "
                                    "--latency-profile (from `oneiro-bench profile` on the same hardware).")
        from ..drafting.latency import load_profile

        profile = load_profile(path)
    answers = read_run_answers(run, (summary.get("config") or {}).get("methods"))
    call_ratio = profile.get("drafter_step_ratio")  # a drafter forward's cost in t(1), where the profile knows it
    result: dict[str, dict] = {"t1_ratios": {int(k): float(v) for k, v in profile["ratios"].items()}, "methods": {}}
    for method, records in answers.items():
        baseline = same_kernel_baseline(method, answers)
        ratios = {int(k): float(v) for k, v in profile_on_kernels(profile, kernels_of(method))["ratios"].items()}
        # compare on the questions both finished, so an interrupted run stays fair
        baseline_ids = {r["question_id"] for r in answers[baseline]}
        common = [r for r in records if r["question_id"] in baseline_ids]
        ids = {r["question_id"] for r in common}
        groups: dict[str, list[dict]] = defaultdict(list)
        for r in common:
            groups[r["category"]].append(r)
        baseline_common = [r for r in answers[baseline] if r["question_id"] in ids]
        baseline_by_cat: dict[str, list[dict]] = defaultdict(list)
        for r in baseline_common:
            baseline_by_cat[r["category"]].append(r)
        entry = {"baseline": baseline,
                 "overall": _row(_totals(common, ratios), _totals(baseline_common, ratios), call_ratio)}
        entry["categories"] = {c: _row(_totals(rs, ratios), _totals(baseline_by_cat[c], ratios), call_ratio)
                               for c, rs in sorted(groups.items())}
        batch = profile_on_kernels(profile, kernels_of(method)).get("batch")
        if isinstance(batch, dict):
            entry["modelled_batch"] = batch_model(common, batch, call_ratio)
        result["methods"][method] = entry
    return result


def _row(t: dict[str, float], greedy: dict[str, float], call_ratio: float | None = None) -> dict[str, float]:
    if not t["tokens"] or not greedy["tokens"]:
        return {"n_tokens": 0}
    sec_per_unit = greedy["wall_s"] / greedy["verify_units"]  # greedy's measured seconds per 1-token step
    verify_s = t["verify_units"] * sec_per_unit
    other_s = t["wall_s"] - verify_s - t["draft_s"]
    greedy_cost = greedy["verify_units"] / greedy["tokens"]  # t(1) units per token of plain decoding
    # drafter calls are counted wherever the answers recorded them; pricing them needs the profile's call ratio
    counted = {} if t["calls_unknown"] else {"drafter_calls_per_pass": t["drafter_calls"] / t["passes"]}
    priced = {} if call_ratio is None or not counted else {
        "modelled_with_drafting": greedy_cost * t["tokens"] / (t["verify_units"] + t["drafter_calls"] * call_ratio),
    }
    # what generate's own timers measured (oneiro-* methods): a pass's seconds as it ran, and what no timer saw
    # (the prefill, the loop around the passes), which the priced split above mixes into "other"
    passes = t["passes"] - t["prefills"]  # verification passes, the prefills left out
    timed = {} if not t["timed_records"] or not passes else {
        "passes": int(passes),
        "nodes_per_pass": t["drafted"] / passes,
        "draft_s": t["draft_s"],
        "timed_verify_s_per_pass": t["timed_verify_s"] / passes,
        "untimed_s": t["wall_s"] - t["timed_verify_s"] - t["draft_s"],
    }
    return {
        "n_tokens": int(t["tokens"]),
        "tau": t["tokens"] / t["passes"],
        "mean_verify_cost": t["verify_units"] / t["passes"],  # t(k)/t(1) averaged over passes
        "modelled_speedup": (t["tokens"] / t["verify_units"]) * (greedy["verify_units"] / greedy["tokens"]),
        "measured_speedup": (greedy["wall_s"] / greedy["tokens"]) / (t["wall_s"] / t["tokens"]),
        "verify_share": verify_s / t["wall_s"],
        "draft_share": t["draft_s"] / t["wall_s"],
        "other_share": other_s / t["wall_s"],
        **counted,
        **priced,
        **timed,
    }


def batch_model(records: list[dict], batch: dict, call_ratio: float | None = None) -> dict[int, dict[str, float]]:
    """Per batch size B of a profile's t(k, B) ({B: {"t1_s", "ratios"}}): the method of `records` (its recorded
    passes) priced at B rows per pass, `BATCH_MODEL_ASSUMPTIONS`. Returns {B: {"speedup_vs_batched_greedy": tokens
    over the passes' t(k, B)/t(1, B) (+ drafter calls at call_ratio), "tokens_per_s": B x that / t1_s(B),
    "batched_greedy_tokens_per_s": B / t1_s(B)}}; {} for records without tokens."""
    result: dict[int, dict[str, float]] = {}
    for b, entry in sorted((int(b), e) for b, e in batch.items()):
        t = _totals(records, {int(k): float(v) for k, v in entry["ratios"].items()})
        units = t["verify_units"] + (t["drafter_calls"] * call_ratio if call_ratio and not t["calls_unknown"] else 0)
        if not t["tokens"] or not units:
            return {}
        speedup = t["tokens"] / units
        greedy = b / float(entry["t1_s"])
        result[b] = {"speedup_vs_batched_greedy": speedup, "tokens_per_s": speedup * greedy,
                     "batched_greedy_tokens_per_s": greedy}
    return result


def batch_model_markdown(result: dict) -> str:
    """The modelled batch line of `breakdown_markdown`: per method, speedup over batched greedy and tokens/s per B;
    "" when the profile has no t(k, B)."""
    methods = {m: e["modelled_batch"] for m, e in result["methods"].items() if e.get("modelled_batch")}
    if not methods:
        return ""
    sizes = sorted({b for per in methods.values() for b in per})
    lines = ["", ("Modelled batched throughput (t(k, B) of the profile; modelled, not measured): speedup over batched "
                  "greedy at B (tokens/s). Assumptions:"), "", *(f"- {a}" for a in BATCH_MODEL_ASSUMPTIONS), "",
             "| method | " + " | ".join(f"B={b}" for b in sizes) + " |", "|---" * (1 + len(sizes)) + "|"]
    for method, per in methods.items():
        cells = [f"{per[b]['speedup_vs_batched_greedy']:.2f}x ({per[b]['tokens_per_s']:.0f})" if b in per else "-"
                 for b in sizes]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def tau_needed_for(speedup: float, row: dict[str, float]) -> float:
    """Tokens per pass needed for `speedup` at the row's mean verification cost, drafting and loop free."""
    return speedup * row["mean_verify_cost"]


def breakdown_markdown(result: dict, targets: tuple[float, ...] = (1.8,)) -> str:
    rows = [e["overall"] for e in result["methods"].values() if e["overall"].get("n_tokens")]
    priced = bool(rows) and all("modelled_with_drafting" in r for r in rows)
    lines = ["| method | baseline | tau | mean t(k)/t(1) | modelled speedup | "
             + ("modelled, drafter calls priced | " if priced else "")
             + "measured | verification | drafting | other | "
             + " | ".join(f"tau for {x}x" for x in targets) + " |",
             "|---" * (9 + priced + len(targets)) + "|"]
    for method, entry in result["methods"].items():
        r = entry["overall"]
        if not r.get("n_tokens"):
            continue
        lines.append(
            f"| {method} | {entry.get('baseline', 'greedy')} | {r['tau']:.2f} | {r['mean_verify_cost']:.2f} | {r['modelled_speedup']:.2f}x | "
            + (f"{r['modelled_with_drafting']:.2f}x ({r['drafter_calls_per_pass']:.2f} calls/pass) | " if priced else "")
            + f"{r['measured_speedup']:.2f}x | {r['verify_share']:.0%} | {r['draft_share']:.1%} | "
            f"{r['other_share']:.0%} | " + " | ".join(f"{tau_needed_for(x, r):.2f}" for x in targets) + " |"
        )
    timed = {m: e["overall"] for m, e in result["methods"].items() if "timed_verify_s_per_pass" in e["overall"]}
    if timed:
        lines += ["", ("As generate's own timers measured it (oneiro-* methods): seconds per verification pass, and the "
                       "seconds no timer saw (the prefills, which are the same in every method of a run and which "
                       "speculation cannot shorten, and the loop around the passes):"), "",
                  ("| method | passes | tree nodes or draft tokens per pass | verification s per pass | "
                   "drafting s | outside the timers s |"), "|---" * 6 + "|"]
        for method, r in timed.items():
            lines.append(f"| {method} | {r['passes']} | {r['nodes_per_pass']:.2f} | {r['timed_verify_s_per_pass']:.3f} | "
                         f"{r['draft_s']:.1f} | {r['untimed_s']:.1f} |")
    cats = sorted({c for e in result["methods"].values() for c in e["categories"]})
    shown = [m for m in result["methods"] if base_method(m) != result["methods"][m].get("baseline", "greedy")]
    if cats and shown:
        lines += ["", "Per category, measured speedup (modelled; tau):", "",
                  "| category | " + " | ".join(shown) + " |", "|---" * (1 + len(shown)) + "|"]
        for c in cats:
            cells = []
            for m in shown:
                r = result["methods"][m]["categories"].get(c, {})
                cells.append(f"{r['measured_speedup']:.2f}x ({r['modelled_speedup']:.2f}x; {r['tau']:.2f})"
                             if r.get("n_tokens") else "-")
            lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n" + batch_model_markdown(result)
