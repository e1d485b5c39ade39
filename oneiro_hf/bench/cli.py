"""oneiro-bench: Spec-Bench-style wall-clock comparison of decoding methods on one target.

    oneiro-bench --questions question.jsonl --methods greedy,hf-lookup,oneiro-hybrid --per-category 3
    oneiro-bench profile --target smollm2-135m-instruct          # measure t(k) once, reused by later runs
    oneiro-bench --per-category 1 --batch-size 1,2,4,8,16         # throughput of left-padded batches of B prompts
    oneiro-bench breakdown --run DIR                              # where a finished run's time went
    oneiro-bench merge RUN_A RUN_B --into DIR                     # shards split by --categories, as one run
    oneiro-bench paired RUN_A RUN_B --csv per_question.csv        # paired per-question ratios of finished runs
    oneiro-bench table DIR/summary.json                           # docs/benchmarks.md's current-figures table
    oneiro-bench summarize DIR --questions FILE                   # summary of a run stopped part-way

Methods run interleaved per question (the order rotates from one question to the next), after a
warm-up, so their ratios hold on a noisy machine. Every ratio is against plain greedy decoding measured
in the same run on the same questions. Answers are written per method in Spec-Bench's answer-record
format, one line per finished question, so an interrupted run keeps its work and `--resume` continues
it (a line cut by the interruption is dropped and that question re-run).

Methods
    greedy               plain greedy decoding (the reference; always run)
    oneiro-greedy        plain greedy decoding on oneiro-hf's CPU kernels (added whenever a method runs on
                         them: every oneiro-* one and the -kernels variants, so each has a same-kernel greedy)
    hf-lookup            transformers' prompt lookup (prompt_lookup_num_tokens=10)
    hf-early-exit        transformers' self-speculation, drafting with the first N layers
                         (assistant_early_exit=N, --early-exit-layer)
    hf-assistant         transformers' assisted decoding with a small model (--assistant, same tokenizer)
    hf-...-kernels       any of the three above with the target on oneiro-hf's CPU kernels
    oneiro-lookup        OneiroDraft chains, n-gram lookup drafts only
    oneiro-latent        OneiroDraft chains, latent drafts only
    oneiro-hybrid        OneiroDraft chains, lookup when a match exists, else latent
    oneiro-tree          OneiroDraft token trees of lookup and latent branches (the shipped drafters'
                         default); oneiro-tree-N: at most N nodes a pass; oneiro-tree-fixed-N: N nodes every
                         pass, cost model off
    oneiro-latent-fixed-N
                         latent drafts of exactly N tokens at every step, cost model and confidence cut off:
                         measures a drafter's acceptance (tau) where oneiro-latent would stop drafting on
                         hardware with costly verification; lossless
    oneiro-topk-K        hybrid with relaxed verification: a draft token is accepted if it is among the
                         target's top K (oneiro_verification="topk", oneiro_verification_topk=K); lossy
    oneiro-threshold-T   hybrid with relaxed verification at threshold T (oneiro_verification="threshold",
                         oneiro_verification_threshold=T); lossy
    oneiro-...@NAME      any oneiro method with the drafter named NAME by --extra-drafter NAME=PATH, so
                         several drafters (before/after a training stage, ablations) compare in one run

Outputs under --out: answers/<method>.jsonl, summary.json, report.md, plots/*.png, run_config.json.
Exit status: 0 fine, 2 unusable arguments or inputs (checked before any model loads), 3 a lossless
method's output differed from greedy on the same kernels (listed under "lossless_violations"), 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from .answers import QUESTIONS_ENV, BenchInputError
from .methods import DEFAULT_METHODS
from .plan import (
    DTYPES,
    check_common,
    check_drafter,
    check_drafter_call_ratio,
    parse_batch_sizes,
    plan_run,
    resolve_model,
)

EXIT_OK, EXIT_BAD_INPUT, EXIT_LOSSLESS_VIOLATION, EXIT_INTERRUPTED = 0, 2, 3, 130


def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="oneiro-bench", formatter_class=argparse.RawDescriptionHelpFormatter, description=__doc__,
        epilog="Subcommands: `oneiro-bench profile` measures the target's verification latency t(k); `oneiro-bench "
               "breakdown` splits a finished run's time; `oneiro-bench merge` joins runs sharded by --categories.",
    )
    p.add_argument("--target", default="smollm2-135m-instruct",
                   help="reference model name or local model directory (default: %(default)s)")
    p.add_argument("--drafter", default=None,
                   help="drafter directory, 'fresh' (untrained), or leave out for the shipped one (else fresh)")
    p.add_argument("--extra-drafter", action="append", default=None, metavar="NAME=PATH",
                   help="another drafter (directory or 'fresh') for methods written oneiro-<mode>@NAME; repeatable")
    p.add_argument("--assistant", default=None, help="small model for hf-assistant (reference name or directory)")
    p.add_argument("--questions", default=None,
                   help=f"Spec-Bench-format question JSONL (required unless ${QUESTIONS_ENV} names one)")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="comma-separated; greedy is always added")
    p.add_argument("--categories", default=None, help="comma-separated categories to keep (default: all)")
    p.add_argument("--per-category", type=int, default=3, help="first N questions per category (0: all)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="per turn")
    p.add_argument("--early-exit-layer", type=int, default=4, help="draft layers of hf-early-exit")
    p.add_argument("--dtype", default="float32", help=f"one of {', '.join(DTYPES)}")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--latency-profile", default=None,
                   help="t(k) JSON from `oneiro-bench profile` (default: the cached one for target/device/dtype)")
    p.add_argument("--no-profile", action="store_true", help="do not seed the drafters with a latency profile")
    p.add_argument("--pin-profile", default=None,
                   help="`h200`: every oneiro method decides draft lengths and tree sizes as on the H200 of "
                        "docs/gpu.md (t(k) and drafter step cost pinned, not learned); model its speedup with "
                        "`oneiro-bench breakdown --latency-profile h200`")
    p.add_argument("--drafter-call-ratio", type=float, default=None, metavar="RATIO",
                   help="with --pin-profile h200: a drafter call costs RATIO x t(1) in every decision instead of the "
                        "0.18 assumed for the H200 (a what-if for a cheaper call; price the run with `oneiro-bench "
                        "breakdown --latency-profile h200 --drafter-call-ratio RATIO`)")
    p.add_argument("--batch-size", action="append", default=None, metavar="B[,B...]",
                   help="throughput mode: answer the questions (first turns) in left-padded batches of B prompts with "
                        "every method, and report new tokens per second per method and B against batched greedy "
                        "and B separate calls; a list (1,2,4,8,16) or repeated")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--out", default="runs/bench", help="output directory (default: %(default)s)")
    p.add_argument("--resume", action="store_true", help="keep finished answers in --out and run the rest")
    return p


def _profile_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="oneiro-bench profile",
        description="Measure the target's verification latency t(k), k=1..max-k, and save it as JSON; later "
                    "runs on the same target, device and dtype load it automatically.",
    )
    p.add_argument("--target", default="smollm2-135m-instruct", help="reference model name or local directory")
    p.add_argument("--out", default=None, help="JSON file (default: <cache>/latency/<target>-<device>-<dtype>.json)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--max-k", type=int, default=16)
    p.add_argument("--context-len", type=int, default=200)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--drafter", default=None,
                   help="also time one call of this drafter (a directory, 'fresh', or 'shipped') as a share of t(1): "
                        "saved as drafter_step_ratio, the cost model's price of a drafter call from the first call on")
    p.add_argument("--prepack-max-memory", type=float, default=None, metavar="FRACTION",
                   help="cap the prepacked weight copies at FRACTION x the target's bytes (the generate setting "
                        "oneiro_prepack_max_memory; default: no cap); the profile records the peak memory")
    p.add_argument("--batch-sizes", default=None, metavar="B,B,...",
                   help="also measure t(k, B), B rows each adding k tokens, for these batch sizes (e.g. 1,2,4,8,16): "
                        "saved as batch and batch_t1_per_row, on both kernel sets")
    return p


def _fail(err: Exception) -> int:
    print(f"oneiro-bench: error: {err}", file=sys.stderr)
    return EXIT_BAD_INPUT


def profile_main(argv: list[str]) -> int:
    args = _profile_parser().parse_args(argv)
    try:
        check_common(args)
        if args.max_k < 1 or args.context_len < 1 or args.repeats < 1:
            raise BenchInputError("--max-k, --context-len and --repeats must be >= 1.")
        batch_sizes = parse_batch_sizes(args.batch_sizes, "--batch-sizes")
        target = resolve_model(args.target, "--target")
        drafter = desc = None
        if args.drafter is not None:
            drafter, desc = check_drafter(None if args.drafter == "shipped" else args.drafter, target,
                                          target.config())
    except BenchInputError as err:
        return _fail(err)
    from ..drafting.latency import profile_doubts
    from .profile import default_profile_path, measure_profile
    from .report import batch_profile_lines

    out = Path(args.out) if args.out else default_profile_path(target.label, args.device, args.dtype)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    profile = measure_profile(target.loader_arg, target.label, out, args.device, args.dtype, args.max_k,
                              args.context_len, args.repeats, drafter, desc, batch_sizes, args.prepack_max_memory)
    for name, part in (("oneiro kernels", profile), ("stock kernels", profile["stock"])):
        print(f"{name} ({part['kernels']}): t(1) = {part['t1_s'] * 1000:.2f} ms; t(k)/t(1): "
              + ", ".join(f"{k}:{v:.2f}" for k, v in part["ratios"].items()))
    print(f"plain decoding on oneiro kernels: stock t(1) / oneiro t(1) = {profile['kernel_speedup_t1']:.3f}")
    weights = profile["weights_bytes"]
    print(f"memory: target weights {weights / 2**30:.2f} GiB; peak {profile['peak_rss_bytes'] / weights:.2f}x them "
          f"(from {profile['peak_rss_from']}: target, copies, drafter, passes); loading peaked at "
          f"{profile['load_peak_rss_bytes'] / weights:.2f}x")
    print("\n".join(batch_profile_lines(profile)))
    if "drafter_step_ratio" in profile:
        print(f"drafter call ({profile['drafter']}): {profile['drafter_step_s'] * 1000:.2f} ms = "
              f"{profile['drafter_step_ratio']:.3f} t(1)")
    print(f"saved {out}")
    for doubt in profile_doubts(profile):
        print(f"WARNING: {doubt}")
    return EXIT_OK


def _breakdown_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="oneiro-bench breakdown",
        description="Split a finished run's wall time into verification, drafting and the rest, and bound each "
                    "method's speedup (see oneiro_hf/bench/breakdown.py). Writes RUN/breakdown.{md,json}.",
    )
    p.add_argument("--run", required=True, help="the --out directory of a finished oneiro-bench run")
    p.add_argument("--latency-profile", default=None,
                   help="t(k) JSON (default: the one the run used), or `h200` for the H200 profile "
                        "(docs/gpu.md: t(k) measured, drafter call price assumed): the speedups that GPU's t(k) gives, written to breakdown_h200.{md,json}")
    p.add_argument("--drafter-call-ratio", type=float, default=None, metavar="RATIO",
                   help="price a drafter call at RATIO x t(1) instead of the profile's drafter_step_ratio (a what-if; "
                        "written to <name>_call<RATIO>.{md,json})")
    p.add_argument("--target-speedup", type=float, action="append", default=None,
                   help="print the tau each method would need for this speedup (repeatable; default 1.8)")
    return p


def h200_assumptions(run: str | Path, profile: dict) -> list[str]:
    """The H200 profile's assumptions as they hold for `run`: its decisions were pinned to the profile only when
    the run was made with --pin-profile h200 (recorded in run_config.json or summary.json's config)."""
    from .profile import H200_NOT_PINNED, H200_PINNED

    configs = []
    for name in ("run_config.json", "summary.json"):
        path = Path(run) / name
        if path.is_file():
            data = json.loads(path.read_text())
            configs.append(data.get("config", {}) if name == "summary.json" else data)
    pinned = any(config.get("pin_profile") == "h200" for config in configs)
    return [H200_NOT_PINNED if a == H200_PINNED and not pinned else a for a in profile["assumptions"]]


def breakdown_main(argv: list[str]) -> int:
    args = _breakdown_parser().parse_args(argv)
    from ..drafting.latency import load_profile
    from .breakdown import breakdown_markdown, time_breakdown

    h200 = args.latency_profile == "h200"
    ratio = args.drafter_call_ratio
    try:
        check_drafter_call_ratio(ratio)
        if h200:
            from .profile import H200_PROFILE

            profile = H200_PROFILE
        else:
            profile = load_profile(args.latency_profile) if args.latency_profile else None
        if ratio is not None:
            if profile is None:
                raise ValueError("--drafter-call-ratio replaces a profile's drafter call cost. Fix: pass "
                                 "--latency-profile h200 (or a profile file) with it.")
            profile = {**profile, "drafter_step_ratio": ratio}
        result = time_breakdown(args.run, profile)
    except (FileNotFoundError, ValueError) as err:
        return _fail(err)
    text = breakdown_markdown(result, tuple(args.target_speedup or (1.8,)))
    if ratio is not None:
        text = f"What-if: every drafter call priced at {ratio:g} x t(1) (modelled).\n\n" + text
    if h200:
        text = ("Modelled on the H200 profile (docs/gpu.md); measured columns are this machine's. The model's "
                "assumptions:\n" + "".join(f"- {a}\n" for a in h200_assumptions(args.run, profile)) + "\n" + text)
    run = Path(args.run)
    name = ("breakdown_h200" if h200 else "breakdown") + (f"_call{ratio:g}" if ratio is not None else "")
    (run / f"{name}.md").write_text(text)
    (run / f"{name}.json").write_text(json.dumps(result, indent=2))
    print(text + f"\nsaved {run / (name + '.md')} and {name}.json")
    return EXIT_OK


def _merge_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="oneiro-bench merge",
        description="Merge runs that split one benchmark by --categories (same methods and settings, disjoint "
                    "questions) into one answers/summary/report, as if one run had made them.",
    )
    p.add_argument("runs", nargs="+", help="the --out directories of the shards")
    p.add_argument("--into", required=True, help="directory for the merged run")
    p.add_argument("--questions", default=None, help="questions file (default: the one the first run read)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    return p


def merge_main(argv: list[str]) -> int:
    args = _merge_parser().parse_args(argv)
    from .merge import MergeError, merge_runs

    try:
        summary = merge_runs(args.runs, args.into, plots=not args.no_plots, questions=args.questions)
    except (MergeError, BenchInputError) as err:
        return _fail(err)
    print(f"oneiro-bench: merged {len(args.runs)} runs ({summary['config']['n_questions']} questions) into "
          f"{args.into}", file=sys.stderr)
    if summary.get("lossless_violations"):
        print(f"oneiro-bench: LOSSLESS VIOLATION: {', '.join(summary['lossless_violations'])}", file=sys.stderr)
        return EXIT_LOSSLESS_VIOLATION
    return EXIT_OK


def _paired_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="oneiro-bench paired",
        description="Paired per-question ratios of finished runs (one run, or lanes of one run): each method's "
                    "speedup, tau and identical answers, and the geometric mean and median over questions of "
                    "method-to-method seconds-per-token ratios. No model is loaded.",
    )
    p.add_argument("runs", nargs="+", help="the --out directories (lanes of one benchmark)")
    p.add_argument("--csv", default=None, help="also write one row per question and method to this file")
    return p


def paired_main(argv: list[str]) -> int:
    args = _paired_parser().parse_args(argv)
    from .tables import paired_ratios, paired_text, write_csv

    try:
        result = paired_ratios(args.runs)
    except BenchInputError as err:
        return _fail(err)
    print(paired_text(result))
    if args.csv:
        write_csv(result, args.csv)
    return EXIT_OK


def _table_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="oneiro-bench table",
                                description="The current-figures table of docs/benchmarks.md from runs' summary.json.")
    p.add_argument("summaries", nargs="+", help="summary.json files (or the run directories holding them)")
    return p


def table_main(argv: list[str]) -> int:
    args = _table_parser().parse_args(argv)
    from .tables import current_table

    for path in map(Path, args.summaries):
        path = path / "summary.json" if path.is_dir() else path
        if not path.is_file():
            return _fail(BenchInputError(f"{path} does not exist. Fix: pass a finished run's summary.json."))
        print(current_table(json.loads(path.read_text())))
    return EXIT_OK


def _summarize_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="oneiro-bench summarize",
        description="summary.json and report.md of a run stopped before its last question (one stopped with "
                    "Ctrl-C writes them itself), from the questions every method answered, marked partial; of a "
                    "--batch-size run, again from its batches.jsonl.",
    )
    p.add_argument("run", help="the run's --out directory")
    p.add_argument("--questions", help="the questions file the run read (not for a --batch-size run)")
    p.add_argument("--profile", default=None, help="the t(k) JSON the run was given with --latency-profile")
    return p


def summarize_main(argv: list[str]) -> int:
    args = _summarize_parser().parse_args(argv)
    from .merge import MergeError, summarize_partial_run

    if (Path(args.run) / "batches.jsonl").is_file():
        from .batched import resummarize_throughput

        try:
            resummarize_throughput(Path(args.run))
        except BenchInputError as err:
            return _fail(err)
        return EXIT_OK
    if not args.questions:
        return _fail(BenchInputError(f"{args.run} is a per-question run: summarizing it needs --questions. Fix: pass "
                                     "the questions file the run read."))
    try:
        summary = summarize_partial_run(args.run, args.questions, args.profile)
    except (MergeError, BenchInputError) as err:
        return _fail(err)
    print(f"oneiro-bench: {summary['config']['n_questions']} questions every method answered; wrote "
          f"{Path(args.run) / 'summary.json'}", file=sys.stderr)
    return EXIT_OK


def run_main(argv: list[str]) -> int:
    args = _run_parser().parse_args(argv)
    from . import runner

    try:
        plan = plan_run(args)  # every check that needs no model; nothing has loaded yet
        for note in plan.notes:
            print(f"oneiro-bench: note: {note}", file=sys.stderr)
        if plan.batch_sizes:
            from . import batched

            summary, interrupted = batched.run(args, plan)
        else:
            summary, interrupted = runner.run(args, plan)
    except BenchInputError as err:
        return _fail(err)
    if summary.get("lossless_violations"):
        print(f"oneiro-bench: LOSSLESS VIOLATION: {', '.join(summary['lossless_violations'])} differ from greedy "
              f"on the same kernels (questions: {summary['lossless_violation_questions']})", file=sys.stderr)
        return EXIT_LOSSLESS_VIOLATION
    return EXIT_INTERRUPTED if interrupted else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """`oneiro-bench [run|profile|breakdown|merge|paired|table|summarize] ...`; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    subcommands = {"run": run_main, "profile": profile_main, "breakdown": breakdown_main, "merge": merge_main,
                   "paired": paired_main, "table": table_main, "summarize": summarize_main}
    if argv and argv[0] in subcommands:
        return subcommands[argv[0]](argv[1:])
    return run_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
