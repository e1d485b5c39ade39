"""Runs an `oneiro-bench --batch-size` run: the questions in left-padded batches of B prompts, every method on
every batch, interleaved; then summary.json and report.md of batched throughput (`throughput`).

Each question contributes its first turn, chat-templated as the per-question run encodes it. For every batch
size B the questions are taken in order, B at a time (the last batch may hold fewer). Per batch, every method runs
as one batched generate call over the left-padded prompts, and each speculative method (not greedy nor
oneiro-greedy) also as B separate single-prompt calls; the order of these lanes rotates from one batch to the
next, as the per-question run rotates methods. A method whose generate refuses a batch (oneiro-hf before batched
drafting, transformers' assisted decoding) is recorded as not supported at that B and not called again at it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ..chat import encode_prompt, left_pad
from ..drafting.draft import cut_at_eos
from .answers import BenchInputError
from .plan import Plan
from .report import ONEIRO_GREEDY, profile_lines, settings_lines
from .runner import WARMUP_TOKENS, BenchContext, generate_once, load_models, summary_config
from .throughput import (
    BATCHED,
    SEPARATE,
    LaneResult,
    is_batch_refusal,
    summarize_throughput,
    throughput_lines,
)


def pad_token_id(ctx: BenchContext) -> int:
    """The id that left-pads a batch: the generation config's, else the tokenizer's pad or EOS, else 0."""
    for value in (ctx.model.generation_config.pad_token_id, getattr(ctx.tokenizer, "pad_token_id", None),
                  getattr(ctx.tokenizer, "eos_token_id", None)):
        if isinstance(value, int):
            return value
    return 0


def stop_token_ids(model) -> frozenset[int]:
    """The ids generate stops a row at (the generation config's EOS): a row's new tokens end at the first one."""
    eos = model.generation_config.eos_token_id
    return frozenset([eos] if isinstance(eos, int) else [int(e) for e in eos or []])


def lanes_at(methods: list[str], batch_size: int) -> list[tuple[str, str]]:
    """(method, mode) of every lane of a batch: each method batched; each speculative one also as separate calls
    (at B > 1: at B = 1 the two are the same call)."""
    lanes = [(m, BATCHED) for m in methods]
    if batch_size > 1:
        lanes += [(m, SEPARATE) for m in methods if m not in ("greedy", ONEIRO_GREEDY)]
    return lanes


def run_lane(ctx: BenchContext, method: str, mode: str, batch_size: int, index: int, question_ids: list,
             prompts: list[list[int]], max_new_tokens: int) -> LaneResult:
    """One lane of one batch: `method` on `prompts` in one batched call (mode BATCHED) or one call per prompt
    (SEPARATE). A batched call that generate refuses for its batch size comes back with `unsupported` set."""
    import torch

    lane = LaneResult(method, mode, batch_size, index, list(question_ids))
    stops = stop_token_ids(ctx.model)
    device = ctx.model.device
    memory = f"{method} {mode}"  # each lane its own suffix memory: both lanes answer the same prompts
    if mode == SEPARATE:
        for prompt in prompts:
            res = generate_once(ctx, method, torch.tensor([prompt], device=device), max_new_tokens,
                                memory_key=memory)
            lane.rows.append(cut_at_eos(res["tokens"], stops))
            lane.wall_s += res["wall_time"]
            lane.add_stats(res["oneiro_stats"])
        return lane
    ids, mask = left_pad(prompts, pad_token_id(ctx), device)
    try:
        res = generate_once(ctx, method, ids, max_new_tokens, attention_mask=mask, memory_key=memory)
    except ValueError as err:
        if len(prompts) < 2 or not is_batch_refusal(err):
            raise
        lane.unsupported = str(err)
        return lane
    lane.rows = [cut_at_eos(row, stops) for row in res["rows"]]
    lane.wall_s = res["wall_time"]
    lane.add_stats(res["oneiro_stats"])
    return lane


def run_batches(ctx: BenchContext, plan: Plan, max_new_tokens: int, out_file: Path) -> tuple[list[LaneResult], bool]:
    """Every lane of every batch of every batch size, each appended to `out_file` (JSONL) as it finishes.
    Returns (lanes, interrupted)."""
    from tqdm import tqdm

    methods = [s.name for s in plan.specs]
    prompts = [encode_prompt(ctx.tokenizer, q["turns"][0]) for q in plan.questions]
    lanes: list[LaneResult] = []
    refused: dict[tuple[str, int], str] = {}  # (method, B) -> generate's refusal of that batch size
    turn = 0
    total = sum(-(-len(prompts) // b) for b in plan.batch_sizes)
    try:
        with tqdm(total=total, desc="batches", unit="batch", dynamic_ncols=True) as bar:
            for b in plan.batch_sizes:
                _warm_up(ctx, methods, prompts[:b], refused, b)
                # each batch size answers the same questions anew: no suffix memory of the warm-up's answers to
                # its first batch or of a smaller batch size's answers
                ctx.memories.clear()
                for index, start in enumerate(range(0, len(prompts), b)):
                    order = lanes_at(methods, b)
                    order = order[turn % len(order):] + order[: turn % len(order)]
                    turn += 1
                    ids = [q["question_id"] for q in plan.questions[start:start + b]]
                    for method, mode in order:
                        if mode == BATCHED and (method, b) in refused:  # recorded once, at the first batch
                            if index:
                                continue
                            lane = LaneResult(method, mode, b, index, ids, unsupported=refused[method, b])
                        else:
                            bar.set_postfix_str(f"B={b} batch {index} {method} {mode}")
                            lane = run_lane(ctx, method, mode, b, index, ids, prompts[start:start + b],
                                            max_new_tokens)
                            if lane.unsupported:
                                refused[method, b] = lane.unsupported
                        lanes.append(lane)
                        with open(out_file, "a", encoding="utf-8") as fh:
                            fh.write(json.dumps(lane.as_record()) + "\n")
                    bar.update(1)
    except KeyboardInterrupt:
        print("\noneiro-bench: interrupted; the summary covers the batches that finished.", file=sys.stderr)
        return lanes, True
    return lanes, False


def _warm_up(ctx: BenchContext, methods: list[str], prompts: list[list[int]], refused: dict,
             batch_size: int) -> None:
    """One short batched call per method at this batch size (its first batch), so no lane pays a first call;
    a refusal is remembered in `refused` and that method is not called batched again at this size."""
    for method in methods:
        lane = run_lane(ctx, method, BATCHED, batch_size, -1, [None] * len(prompts), prompts, WARMUP_TOKENS)
        if lane.unsupported:
            refused[method, batch_size] = lane.unsupported


def write_throughput(args, plan: Plan, lanes: list[LaneResult], interrupted: bool) -> dict:
    """summary.json and report.md of a throughput run under --out; prints the report and returns the summary."""
    config = {**summary_config(args, plan), "batch_sizes": list(plan.batch_sizes)}
    return write_throughput_summary(Path(args.out), lanes, config, plan.profile, interrupted)


def write_throughput_summary(out: Path, lanes: list[LaneResult], config: dict, profile: dict | None,
                             interrupted: bool) -> dict:
    """summary.json and report.md under `out` from a throughput run's lanes and its config."""
    summary = summarize_throughput(lanes, tuple(config["batch_sizes"]))
    summary["partial"] = interrupted
    summary["config"] = config
    if profile is not None:
        summary["profile"] = profile
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    lines = ["# oneiro-bench throughput report", ""]
    if summary["lossless_violations"]:
        lines += ["> **LOSSLESS VIOLATION:** rows differ from batched greedy's on the same kernels: " + "; ".join(
            f"{k}: {v}" for k, v in summary["lossless_violation_questions"].items()) + ".", ""]
    if interrupted:
        lines += ["> **Partial run** (interrupted): the figures cover the batches that finished.", ""]
    lines += settings_lines(summary["config"], ("target", "drafter_resolved", "drafter_weights_sha256", "device",
                                                "dtype", "threads", "cpu", "cpu_count", "max_new_tokens", "n_questions",
                                                "batch_sizes", "latency_profile_used", "torch", "transformers"))
    lines += profile_lines(profile) + throughput_lines(summary)
    report = "\n".join(lines) + "\n"
    (out / "report.md").write_text(report)
    print(report)
    print(f"oneiro-bench: wrote {out / 'summary.json'} and {out / 'report.md'}", file=sys.stderr)
    return summary


def resummarize_throughput(out: Path) -> dict:
    """summary.json and report.md of a throughput run again, from its batches.jsonl and the config its summary
    holds (a run stopped part-way, or one summarised by an older oneiro-hf)."""
    if not (out / "summary.json").is_file():
        raise BenchInputError(
            f"{out} has batches.jsonl but no summary.json, whose config a throughput summary is rebuilt from: the run "
            "was killed before it wrote one. Fix: stop a throughput run with Ctrl-C (SIGINT), which writes a partial "
            "summary, or run it again.")
    old = json.loads((out / "summary.json").read_text())
    lanes = []
    for line in (out / "batches.jsonl").read_text().splitlines():
        record = json.loads(line)
        lanes.append(LaneResult(**{k: v for k, v in record.items() if k not in ("new_tokens", "wall_time")},
                                wall_s=record["wall_time"]))
    return write_throughput_summary(out, lanes, old["config"], old.get("profile"), old.get("partial", False))


def run(args, plan: Plan) -> tuple[dict, bool]:
    """The whole throughput run: lanes to --out/batches.jsonl, then summary and report. Returns (summary,
    interrupted)."""
    import torch

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    out_file = out / "batches.jsonl"
    out_file.unlink(missing_ok=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    ctx = load_models(args, plan)
    lanes, interrupted = run_batches(ctx, plan, args.max_new_tokens, out_file)
    return write_throughput(args, plan, lanes, interrupted), interrupted
