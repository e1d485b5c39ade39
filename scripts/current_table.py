"""The current-figures table of docs/benchmarks.md from an oneiro-bench run's summary.json.

    python scripts/current_table.py docs/benchmarks/current/smollm2-135m-instruct/summary.json

Prints one markdown table: per method its kernels, speedup over greedy on the same kernels, over stock greedy,
tau, same-kernel speedup / tau, draft share of wall time and the share of answers identical to greedy.
"""

from __future__ import annotations

import json
import sys


def fmt(value, spec: str = ".2f", suffix: str = "") -> str:
    return "—" if value is None else f"{value:{spec}}{suffix}"


def table(summary: dict) -> str:
    rows = ["| method | kernels | vs same-kernel greedy | vs stock greedy | tau | speedup / tau | draft share "
            "| identical to greedy |", "|---|---|---|---|---|---|---|---|"]
    for name, entry in summary["methods"].items():
        e = entry["overall"]
        kernels = "stock" if entry.get("kernels") == "stock" else "oneiro"
        rows.append(f"| {name} | {kernels} | {fmt(e.get('speedup_vs_same_kernel_greedy'), suffix='x')} "
                    f"({e.get('same_kernel_baseline', 'greedy')}) | {fmt(e['speedup_vs_greedy'], suffix='x')} "
                    f"| {fmt(e['mean_accepted_tokens'])} | {fmt(e.get('same_kernel_speedup_per_tau'))} "
                    f"| {e['draft_time_share']:.1%} | {fmt(e['identical_to_greedy'], '.0%')} |")
    return "\n".join(rows)


if __name__ == "__main__":
    for path in sys.argv[1:]:
        print(table(json.loads(open(path).read())))
