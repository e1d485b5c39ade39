"""Benchmark: run `oneiro-bench` from Python on a few questions and print its summary.

    python examples/benchmark.py                    # SmolLM2-135M-Instruct, its shipped drafter, 4 questions
    python examples/benchmark.py --questions ../shared/data/spec_bench/question.jsonl --per-category 1
    python examples/benchmark.py --tiny             # a tiny random model: the same code path in seconds

The built-in questions use Spec-Bench's format (question_id, category, turns), so your own prompts can be
benchmarked the same way. Every method runs interleaved with plain greedy on the same questions, and every
ratio is against that greedy run. The full report is in OUT/report.md, the numbers in OUT/summary.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from oneiro_hf.bench import cli as bench

QUESTIONS = [
    {"question_id": 1, "category": "summarization", "turns": [(
        "Summarize in one sentence: The city built a new bridge over the river. The bridge took three years "
        "to build and cuts the trip from the old town to the station from forty minutes to ten.")]},
    {"question_id": 2, "category": "coding", "turns": [
        "Write a Python function that returns the list of words in a text that appear more than once."]},
    {"question_id": 3, "category": "translation", "turns": ["Translate to French: The book is on the table."]},
    {"question_id": 4, "category": "qa", "turns": ["Why is the sky blue? Answer in two sentences."]},
]
PRINTED = ("speedup_vs_greedy", "mean_accepted_tokens", "identical_to_greedy", "tokens_per_s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="smollm2-135m-instruct", help="reference model name or model directory")
    parser.add_argument("--drafter", default=None, help="drafter directory or 'fresh' (default: the shipped one)")
    parser.add_argument("--methods", default="greedy,hf-lookup,oneiro-lookup,oneiro-hybrid")
    parser.add_argument("--questions", default=None, help="Spec-Bench-format JSONL (default: 4 built-in questions)")
    parser.add_argument("--per-category", type=int, default=0, help="first N questions per category (0: all)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--out", default="runs/example_bench")
    parser.add_argument("--tiny", action="store_true", help="use a tiny random model (seconds, for tests)")
    args = parser.parse_args(argv)

    workdir = tempfile.TemporaryDirectory(prefix="oneiro-bench-example-")  # removed when the script ends
    target, drafter, extra = args.target, args.drafter, []
    if args.tiny:
        from _tiny import make_tiny_target

        target, drafter = make_tiny_target(Path(workdir.name) / "target"), "fresh"
        extra = ["--no-profile", "--no-plots", "--threads", "1"]
    questions = args.questions
    if questions is None:
        questions = Path(workdir.name) / "questions.jsonl"
        questions.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))

    argv = ["--target", target, "--questions", str(questions), "--methods", args.methods,
            "--per-category", str(args.per_category), "--max-new-tokens", str(args.max_new_tokens),
            "--out", args.out, *extra]
    if drafter:
        argv += ["--drafter", drafter]
    code = bench.main(argv)  # the same as running `oneiro-bench ARGS...`; also prints report.md
    if code not in (bench.EXIT_OK, bench.EXIT_LOSSLESS_VIOLATION):
        return code

    summary = json.loads((Path(args.out) / "summary.json").read_text())
    print(f"\n{'method':<16}" + "".join(f"{key:>22}" for key in PRINTED))
    for method, entry in summary["methods"].items():
        values = (entry["overall"].get(key) for key in PRINTED)  # None where a number does not apply (greedy's tau)
        print(f"{method:<16}" + "".join(f"{v:>22.2f}" if v is not None else f"{'-':>22}" for v in values))
    print(f"lossless violations: {summary['lossless_violations'] or 'none'}")
    return code


if __name__ == "__main__":
    sys.exit(main())
