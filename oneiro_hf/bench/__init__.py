"""oneiro-bench: Spec-Bench-style wall-clock comparison of decoding methods on one target.

One module per concern (docs/design.md, "The pieces"). The package does not import `cli`: the command is
`oneiro_hf.bench.cli.main(argv)`, and `python -m oneiro_hf.bench` runs it.
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
