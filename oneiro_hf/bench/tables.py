"""Tables read from finished runs, no model loaded: paired per-question ratios (`oneiro-bench paired`) and the
current-figures table of docs/benchmarks.md (`oneiro-bench table`).

A method's ratio to another is the geometric mean over questions of their seconds-per-token ratio, so a few long
answers cannot dominate it; only questions every method of the runs answered count.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

from .answers import BenchInputError, read_run_answers
from .report import format_value

CSV_COLUMNS = ("question_id", "category", "method", "new_tokens", "wall_s", "target_passes", "identical_to_greedy")


def per_question(runs: list[str | Path]) -> dict[str, dict]:
    """Method -> question id -> {category, new_tokens, wall_s, target_passes, turns}, over `runs` (lanes of one
    benchmark, each a --out directory)."""
    rows: dict[str, dict] = {}
    for run in runs:
        if not (Path(run) / "answers").is_dir():
            raise BenchInputError(f"{run} has no answers/ directory. Fix: pass the --out directory of an "
                                  "oneiro-bench run.")
        for method, records in read_run_answers(Path(run)).items():
            for rec in records:
                choice = rec["choices"][0]
                rows.setdefault(method, {})[rec["question_id"]] = {
                    "category": rec["category"], "new_tokens": sum(choice["new_tokens"]),
                    "wall_s": sum(choice["wall_time"]), "target_passes": sum(choice["decoding_steps"]),
                    "turns": choice["turns"]}
    return rows


def _seconds_per_token(row: dict) -> float:
    return row["wall_s"] / row["new_tokens"]


def paired_ratios(runs: list[str | Path]) -> dict:
    """{"questions": ids every method answered, "methods": {method: speedup, tau, identical}, "pairs": [{a, b,
    geo_mean, median}]}: pairs are the hybrid over oneiro-lookup, the tree over the hybrid, every method over
    oneiro-greedy (where the runs have it) and each method over its --extra-drafter arms."""
    rows = per_question(runs)
    if "greedy" not in rows:
        raise BenchInputError(f"{', '.join(map(str, runs))}: no greedy answers, the baseline of every ratio. "
                              "Fix: pass runs made with greedy among --methods.")
    greedy = rows["greedy"]
    questions = sorted(q for q in greedy if all(q in answers for answers in rows.values()))
    if not questions:
        raise BenchInputError("no question was answered by every method. Fix: pass runs that finished a question.")

    def total(method: str, key: str) -> float:
        return sum(rows[method][q][key] for q in questions)

    greedy_rate = total("greedy", "new_tokens") / total("greedy", "wall_s")
    methods = {m: {"speedup_vs_greedy": total(m, "new_tokens") / total(m, "wall_s") / greedy_rate,
                   "tau": total(m, "new_tokens") / total(m, "target_passes"),
                   "identical_to_greedy": sum(rows[m][q]["turns"] == greedy[q]["turns"] for q in questions)}
               for m in sorted(rows)}
    pairs = [("oneiro-hybrid", "oneiro-lookup"), ("oneiro-tree", "oneiro-hybrid")]
    pairs += [(m, "oneiro-greedy") for m in sorted(rows) if m not in ("greedy", "oneiro-greedy")]
    pairs += [(m.split("@")[0], m) for m in sorted(rows) if "@" in m]
    found = []
    for a, b in pairs:
        if a in rows and b in rows:
            ratios = [_seconds_per_token(rows[b][q]) / _seconds_per_token(rows[a][q]) for q in questions]
            found.append({"a": a, "b": b, "geo_mean": statistics.geometric_mean(ratios),
                          "median": statistics.median(ratios)})
    return {"questions": questions, "methods": methods, "pairs": found, "rows": rows}


def paired_text(result: dict) -> str:
    n = len(result["questions"])
    lines = [f"{n} questions complete"]
    lines += [f"{m:26s} speedup {e['speedup_vs_greedy']:.3f}  tau {e['tau']:.2f}  identical "
              f"{e['identical_to_greedy']}/{n}" for m, e in result["methods"].items()]
    lines += [f"{p['a']} / {p['b']}: geo-mean per question {p['geo_mean']:.3f}, median {p['median']:.3f}"
              for p in result["pairs"]]
    return "\n".join(lines)


def write_csv(result: dict, path: str | Path) -> None:
    """One row per question and method: what every ratio of `paired_ratios` is computed from."""
    rows, greedy = result["rows"], result["rows"]["greedy"]
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(CSV_COLUMNS)
        for q in result["questions"]:
            for m in sorted(rows):
                row = rows[m][q]
                writer.writerow([q, row["category"], m, row["new_tokens"], f"{row['wall_s']:.4f}",
                                 row["target_passes"], row["turns"] == greedy[q]["turns"]])


def current_table(summary: dict) -> str:
    """docs/benchmarks.md's current-figures table of one summary.json: per method its kernels, speedup over greedy on
    the same kernels and over stock greedy, tau, same-kernel speedup per tau, draft share, answers identical."""
    header = ("method", "kernels", "vs same-kernel greedy", "vs stock greedy", "tau", "speedup / tau", "draft share",
              "identical to greedy")
    rows = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    for name, entry in summary["methods"].items():
        e = entry["overall"]
        kernels = "stock" if entry.get("kernels") == "stock" else "oneiro"
        rows.append(f"| {name} | {kernels} | {format_value(e.get('speedup_vs_same_kernel_greedy'), suffix='x')} "
                    f"({e.get('same_kernel_baseline', 'greedy')}) | {format_value(e['speedup_vs_greedy'], suffix='x')} "
                    f"| {format_value(e['mean_accepted_tokens'])} | {format_value(e.get('same_kernel_speedup_per_tau'))} "
                    f"| {e['draft_time_share']:.1%} | {format_value(e['identical_to_greedy'], '.0%')} |")
    return "\n".join(rows)
