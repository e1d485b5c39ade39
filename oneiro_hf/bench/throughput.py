"""Batched throughput of an `oneiro-bench --batch-size` run: token accounting, row-by-row identity and the summary.

A throughput run answers the questions in batches of B prompts (left-padded) with every method, and times each
batch as one generate call (a "batched" lane), and, for each speculative method, the same B prompts as B
separate single-prompt calls (a "separate" lane: what a user of speculative decoding does without batching). Each
lane of each batch is one `LaneResult`. No model and no torch here: this is arithmetic on recorded lanes.

Accounting: a row's new tokens are those generate returned after the padded prompt, up to and including the first
stop token (EOS); what follows it is the padding a finished row gets while the others go on, and is not counted.
Throughput is new tokens / wall seconds, summed over the batches of one batch size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .report import ONEIRO_GREEDY, is_lossless, same_kernel_baseline

BATCHED, SEPARATE = "batched", "separate"
UNSUPPORTED = "not supported by this oneiro-hf"  # an oneiro-* method's batch refused; transformers' own: by it
# generate's refusals of a batch: oneiro-hf's ("supports batch size 1", "runs batch size 1") and transformers'
# assisted decoding ("only supported for batch_size = 1")
BATCH_REFUSAL = re.compile(r"batch[ _]size", re.IGNORECASE)


@dataclass
class LaneResult:
    """One lane of one batch: a method run on B prompts, batched in one call or as B separate calls."""

    method: str
    mode: str  # BATCHED or SEPARATE
    batch_size: int  # the B of the run (the last batch of a size may hold fewer rows)
    batch: int  # index of the batch within its batch size
    question_ids: list = field(default_factory=list)
    rows: list[list[int]] = field(default_factory=list)  # per row: new token ids up to the first stop token
    wall_s: float = 0.0  # seconds of the generate call(s)
    unsupported: str | None = None  # generate's refusal of this batch size, when it refused
    # an oneiro-* lane's drafting, from its calls' `DraftStats` (0 and {} for lanes without a drafter): verified
    # rounds of its rows (one per row per pass), target passes after the prefills (a batched pass counts once)
    # and the draft tokens the target accepted, by source
    rounds: int = 0
    passes: int = 0
    accepted_by_source: dict[str, int] = field(default_factory=dict)

    @property
    def new_tokens(self) -> int:
        return sum(len(row) for row in self.rows)

    def add_stats(self, stats: dict | None) -> None:
        """Count one generate call's drafting (`generate_once`'s "oneiro_stats"; None: a call without a drafter)."""
        if not stats:
            return
        self.rounds += stats["steps"]
        self.passes += stats["batch_passes"] or stats["steps"]  # one sequence: a round is a pass
        for source, n in stats["accepted_by_source"].items():
            self.accepted_by_source[source] = self.accepted_by_source.get(source, 0) + n

    def as_record(self) -> dict[str, Any]:
        return {"method": self.method, "mode": self.mode, "batch_size": self.batch_size, "batch": self.batch,
                "question_ids": self.question_ids, "new_tokens": [len(r) for r in self.rows], "rows": self.rows,
                "wall_time": self.wall_s, "unsupported": self.unsupported, "rounds": self.rounds,
                "passes": self.passes, "accepted_by_source": self.accepted_by_source}


def is_batch_refusal(err: Exception) -> bool:
    """Whether generate refused a batch of more than one row (a ValueError naming the batch size)."""
    return isinstance(err, ValueError) and bool(BATCH_REFUSAL.search(str(err)))


def row_mismatches(lane: LaneResult, greedy: LaneResult) -> list:
    """Question ids of the rows of `lane` whose tokens differ from the batched greedy lane of the same batch."""
    if lane.question_ids != greedy.question_ids:
        raise ValueError(f"lanes of different prompts compared ({lane.question_ids} vs {greedy.question_ids}). "
                         "Fix: compare lanes of the same batch.")
    return [q for q, a, b in zip(lane.question_ids, lane.rows, greedy.rows) if a != b]


def _totals(lanes: list[LaneResult]) -> dict[str, Any]:
    tokens, wall = sum(lane.new_tokens for lane in lanes), sum(lane.wall_s for lane in lanes)
    totals = {"new_tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall if wall else None,
              "n_batches": len(lanes), "n_rows": sum(len(lane.rows) for lane in lanes)}
    rounds, passes = sum(lane.rounds for lane in lanes), sum(lane.passes for lane in lanes)
    if rounds:  # a drafting lane: how its tokens came, so a throughput ratio splits into tau and pass cost
        accepted: dict[str, int] = {}
        for lane in lanes:
            for source, n in lane.accepted_by_source.items():
                accepted[source] = accepted.get(source, 0) + n
        totals.update(rounds=rounds, passes=passes, rows_per_pass=rounds / passes if passes else None,
                      tokens_per_round=(sum(accepted.values()) + rounds) / rounds, accepted_by_source=accepted)
    return totals


def _ratio(lanes: dict[int, LaneResult], base: dict[int, LaneResult] | None) -> float | None:
    """Throughput of `lanes` over `base`'s on the batches both ran (and neither was refused)."""
    if not base:
        return None
    common = [i for i in lanes if i in base and base[i].unsupported is None]
    mine, theirs = _totals([lanes[i] for i in common]), _totals([base[i] for i in common])
    if not common or not mine["tokens_per_s"] or not theirs["tokens_per_s"]:
        return None
    return mine["tokens_per_s"] / theirs["tokens_per_s"]


def _identical_share(lanes: dict[int, LaneResult], greedy: dict[int, LaneResult] | None) -> tuple[float | None, list]:
    """(share of the rows of `lanes` token-identical to `greedy`'s lane of the same batch, their question ids that
    differ); (None, []) where greedy has no lane."""
    compared = [(lane, greedy[i]) for i, lane in lanes.items() if greedy and i in greedy]
    bad = [q for lane, g in compared for q in row_mismatches(lane, g)]
    rows = sum(len(lane.rows) for lane, _ in compared)
    return (1 - len(bad) / rows if rows else None), bad


def summarize_throughput(lanes: list[LaneResult], batch_sizes: tuple[int, ...]) -> dict[str, Any]:
    """summary.json's part of a throughput run: "batch_sizes", and "throughput"[method][B] with the batched lane's
    new_tokens, wall_s, tokens_per_s, n_batches, n_rows (a drafting lane also: rounds, passes, rows_per_pass,
    tokens_per_round, tau over its rows' rounds, and accepted_by_source); the ratios of its throughput over batched greedy
    (`speedup_vs_batched_greedy`), batched oneiro-greedy (`speedup_vs_batched_oneiro_greedy`) and B separate
    calls of the method (`speedup_vs_separate_calls`, with those calls' own totals under "separate_calls"); and
    `identical_rows_to_batched_greedy`, the share of rows token-identical to batched greedy's (stock kernels), and
    `identical_rows_to_same_kernel_greedy`, to batched greedy's on the kernels the method ran (oneiro-greedy for
    oneiro-hf's kernels; None for the two greedy lanes themselves): the lossless promise; with separate calls,
    `identical_separate_rows_to_same_kernel_greedy`, their rows against the same batched greedy (information: in
    float32 left padding may move a near-tie). A batch size the
    method's generate refused is {"supported": False, "unsupported": "not supported by this oneiro-hf" (or "by
    transformers" for its own methods), "refusal": generate's message, "separate_calls": ...}.
    "lossless_violations" lists "<method>@B<B>" for every lossless method with a row unlike same-kernel batched
    greedy's (questions under "lossless_violation_questions"): kernels that round differently (bfloat16 on
    transformers' kernels and on oneiro-hf's exact ones) may part at a near-tie, which is not a violation."""
    by_key: dict[tuple[str, str, int], dict[int, LaneResult]] = {}
    methods: list[str] = []
    for lane in lanes:
        by_key.setdefault((lane.method, lane.mode, lane.batch_size), {})[lane.batch] = lane
        if lane.method not in methods:
            methods.append(lane.method)
    summary: dict[str, Any] = {"batch_sizes": list(batch_sizes), "throughput": {}, "lossless_violations": [],
                               "lossless_violation_questions": {}}
    for method in methods:
        entry = summary["throughput"].setdefault(method, {})
        for b in batch_sizes:
            batched = by_key.get((method, BATCHED, b))
            if not batched:
                continue
            separate = by_key.get((method, SEPARATE, b))
            separate_calls = _totals(list(separate.values())) if separate else None
            refused = next((lane.unsupported for lane in batched.values() if lane.unsupported), None)
            if refused:
                by = UNSUPPORTED if method.startswith("oneiro-") else "not supported by transformers"
                entry[str(b)] = {"supported": False, "unsupported": by, "refusal": refused,
                                 "separate_calls": separate_calls}
                continue
            greedy = by_key.get(("greedy", BATCHED, b))
            block = {"supported": True, **_totals(list(batched.values())),
                     "speedup_vs_batched_greedy": _ratio(batched, greedy),
                     "speedup_vs_batched_oneiro_greedy": _ratio(batched, by_key.get((ONEIRO_GREEDY, BATCHED, b))),
                     "speedup_vs_separate_calls": _ratio(batched, separate),
                     "separate_calls": separate_calls}
            block["identical_rows_to_batched_greedy"] = _identical_share(batched, greedy)[0]
            baseline = same_kernel_baseline(method, methods)
            baseline_lanes = by_key.get((baseline, BATCHED, b))
            same, bad = _identical_share(batched, baseline_lanes)
            block["identical_rows_to_same_kernel_greedy"] = None if method in ("greedy", ONEIRO_GREEDY) else same
            if separate:  # one prompt per call against the batch's rows: are batched rows what one row alone gives?
                block["identical_separate_rows_to_same_kernel_greedy"] = _identical_share(separate, baseline_lanes)[0]
            entry[str(b)] = block
            if bad and is_lossless(method) and method not in ("greedy", ONEIRO_GREEDY):
                summary["lossless_violations"].append(f"{method}@B{b}")
                summary["lossless_violation_questions"][f"{method}@B{b}"] = bad
    return summary


def throughput_lines(summary: dict[str, Any]) -> list[str]:
    """report.md's section of a throughput run: one row per method and batch size."""
    lines = ["## Batched throughput", "",
             ("Throughput: new tokens (padding and tokens after EOS excluded) per wall second over every batch of the "
              "size. Ratios from the same run, on the same batches: over batched greedy (stock kernels), over batched "
              "oneiro-greedy (plain batched generate inside `oneiro_hf.cpu_kernels`), and over the same method called "
              "once per prompt (B separate calls). Identical rows: share of rows token-identical to batched greedy's on the "
              "same kernels (and, in brackets, on transformers' stock kernels)."),
             "", ("| method | B | tokens/s | vs batched greedy | vs batched oneiro-greedy | vs B separate calls "
                  "| identical rows | tokens per round (B separate calls) |"), "|---" * 8 + "|"]
    for method, entry in summary["throughput"].items():
        for b, block in entry.items():
            if not block["supported"]:
                alone = (block["separate_calls"] or {}).get("tokens_per_s")
                lines.append(f"| {method} | {b} | {block['unsupported']}"
                             + (f" (B separate calls: {alone:.1f})" if alone else "") + " | | | | | |")
                continue
            cells = [block["tokens_per_s"], block["speedup_vs_batched_greedy"],
                     block["speedup_vs_batched_oneiro_greedy"], block["speedup_vs_separate_calls"]]
            shown = [f"{cells[0]:.1f}" if cells[0] else "—"]
            shown += [f"{c:.2f}x" if c else "—" for c in cells[1:]]
            same, stock = block.get("identical_rows_to_same_kernel_greedy"), block["identical_rows_to_batched_greedy"]
            flag = " **VIOLATION**" if f"{method}@B{b}" in summary["lossless_violations"] else ""
            tau, alone = block.get("tokens_per_round"), (block["separate_calls"] or {}).get("tokens_per_round")
            lines.append(f"| {method} | {b} | " + " | ".join(shown) + f" | {'—' if same is None else f'{same:.0%}'}"
                         + f" ({'—' if stock is None else f'{stock:.0%}'}){flag} | {'—' if tau is None else f'{tau:.2f}'}"
                         + ("" if alone is None else f" ({alone:.2f})") + " |")
    return lines + [""]
