"""oneiro-bench: Spec-Bench-style wall-clock comparison of decoding methods on one target.

    cli        the `oneiro-bench` command and its subcommands (run, profile, breakdown, merge)
    methods    the decoding methods and the generate kwargs of each
    answers    questions in, answer records out, resume (no model, no torch)
    plan       a run's arguments and inputs, resolved and checked before any model loads
    runner     loads the models once and runs every method on every question, interleaved
    report     summary.json and report.md from answer records: speed, fidelity, task scores, plots
    breakdown  where a finished run's time went (`oneiro-bench breakdown`)
    merge      runs sharded by --categories, as one (`oneiro-bench merge`)
    profile    the target's verification latency t(k) (`oneiro-bench profile`)
    batched    the throughput run (`--batch-size`): left-padded batches of prompts, every method per batch
    throughput its token accounting, row-by-row identity to batched greedy, summary and report section

Imports run downwards: cli -> batched -> plan/runner -> methods -> answers/report (batched -> throughput ->
report); breakdown and merge read files
through answers, never through the runner. The package itself does not import `cli` (which imports from the
package): the command is `oneiro_hf.bench.cli.main(argv)`, and `python -m oneiro_hf.bench` runs it.
"""

from .answers import BenchInputError, load_questions, read_answers
from .methods import MethodSpec, parse_method, parse_methods

__all__ = [
    "BenchInputError",
    "MethodSpec",
    "load_questions",
    "parse_method",
    "parse_methods",
    "read_answers",
]
