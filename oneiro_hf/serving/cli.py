"""`oneiro-export`: write a drafter in a serving engine's format (`vllm`), and the draft length by batch size its
cost model prices for the engine (`vllm-schedule`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .vllm_export import VllmExportRefused, export_for_vllm
from .vllm_lookup import LOOKUP_NGRAMS


def _vllm_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="oneiro-export vllm")
    parser.add_argument("drafter_dir", metavar="DRAFTER_DIR", help="a saved drafter (whole or target-relative)")
    parser.add_argument("out_dir", metavar="OUT_DIR", help="the folder to write (new or empty)")
    parser.add_argument("--target", required=True,
                        help="the drafter's target: a reference model name (e.g. smollm2-135m-instruct) or a model "
                             "directory / Hub id")
    parser.add_argument("--num-speculative-tokens", type=int, default=3,
                        help="k in the serving commands the folder's README shows (default 3)")
    parser.add_argument("--hybrid", action="store_true",
                        help="serve the hybrid: each request's prompt-lookup continuation where its text has an "
                             "n-gram match, the drafter's chain otherwise (docs/serving.md)")
    parser.add_argument("--lookup-min-ngram", type=int, default=LOOKUP_NGRAMS[0],
                        help=f"with --hybrid: the shortest n-gram a lookup draft must match (default {LOOKUP_NGRAMS[0]})")
    parser.add_argument("--lookup-max-ngram", type=int, default=LOOKUP_NGRAMS[1],
                        help=f"with --hybrid: the longest n-gram tried (default {LOOKUP_NGRAMS[1]})")
    parser.add_argument("--step-profile",
                        help="vLLM's engine steps (scripts/vllm_step_profile.py's steps.json): each step, verify per "
                             "request the part of its draft that promises the most tokens per second (docs/serving.md)")
    return parser


def _read_profile(path: str) -> dict:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise VllmExportRefused(f"cannot read the profile {path} ({err}). Fix: pass a JSON file written by "
                                "scripts/vllm_step_profile.py or oneiro-bench profile.") from err


def _schedule_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--profile", required=True, help="a latency profile: t(k, B) and the drafter step's price "
                                                         "(`oneiro-bench profile --batch-sizes 1,4,16 --drafter DIR`), "
                                                         "or vLLM's own steps (scripts/vllm_step_profile.py)")
    parser.add_argument("--acceptance", required=True,
                        help="the share of drafts whose j-th token the engine accepted, j = 1..k, comma-separated "
                             "(vLLM's per-position acceptance), e.g. 0.44,0.17,0.06")
    parser.add_argument("--max-k", type=int, default=3, help="the k vLLM is started with (num_speculative_tokens)")
    parser.add_argument("--max-batch", type=int, default=256, help="vLLM's --max-num-seqs (default 256)")
    return parser


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="oneiro-export", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    _vllm_parser(commands.add_parser("vllm", help="a folder vLLM loads as a draft model (method eagle3)"))
    _schedule_parser(commands.add_parser(
        "vllm-schedule", help="print num_speculative_tokens_per_batch_size for vLLM's speculative config, priced "
                              "by the cost model from a latency profile and the measured acceptance"))
    return parser


def _schedule_main(args: argparse.Namespace) -> int:
    from .schedule import ScheduleInputError, k_schedule

    try:
        profile = _read_profile(args.profile)
        acceptance = [float(a) for a in args.acceptance.split(",") if a.strip()]
        schedule = k_schedule(profile, acceptance, args.max_k, args.max_batch)
    except (ValueError, ScheduleInputError, VllmExportRefused) as err:
        print(f"oneiro-export: {err}", file=sys.stderr)
        return 2
    print(json.dumps({"num_speculative_tokens": args.max_k, "num_speculative_tokens_per_batch_size": schedule}))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "vllm-schedule":
        return _schedule_main(args)
    if args.num_speculative_tokens < 1:
        print("oneiro-export: --num-speculative-tokens must be >= 1. Fix: e.g. --num-speculative-tokens 3.",
              file=sys.stderr)
        return 2
    try:
        lookup = (args.lookup_min_ngram, args.lookup_max_ngram) if args.hybrid else None
        profile = _read_profile(args.step_profile) if args.step_profile else None
        out = export_for_vllm(args.drafter_dir, args.out_dir, args.target, args.num_speculative_tokens, lookup,
                              profile)
    except VllmExportRefused as err:
        print(f"oneiro-export: refused: {err}", file=sys.stderr)
        return 2
    print(f"wrote {out} (serve it as described in {out / 'README.md'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
