"""The one list of skips the suite may take, each with the reason it is legitimate.

With ONEIRO_FAIL_ON_SKIP=1 (`make test`, `make test-oldest`, CI) a skipped test that no entry here covers fails
the run (the hook in tests/conftest.py): a missing dependency, a missing library feature or an error turned into a
skip cannot pass quietly. An entry covers a skip when the test's node id (as pytest prints it, from the repository
root) matches `pattern` (fnmatch: `*` any text; write a literal `[` as `[[]`) and the skip's reason contains
`says`. Everything else the suite needs (oneDNN in the torch CPU wheel, the `gguf` package of the dev extras, the
accelerate launcher) is installed by `make setup`, so its skip is a failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase


@dataclass(frozen=True)
class ExpectedSkip:
    pattern: str  # node id pattern
    says: str  # text the skip's reason contains
    why: str  # why skipping there is legitimate


EXPECTED_SKIPS = (
    ExpectedSkip(
        "tests/test_prompts_public.py::test_every_spec_bench_turn_is_filtered",
        "Spec-Bench questions not present",
        "the Spec-Bench questions are evaluation data kept in the shared data folder beside the checkout, not in "
        "the repository; a clone without that folder has nothing to filter",
    ),
    ExpectedSkip(
        "tests/test_compat.py::test_declared_requirement_matches_the_tested_minimum",
        "tomllib",
        "reads pyproject.toml with tomllib, which Python 3.10 (supported: requires-python >= 3.10) lacks",
    ),
    ExpectedSkip(
        "tests/test_extras.py::test_extras_are_declared_as_the_code_names_them",
        "tomllib",
        "reads pyproject.toml with tomllib, which Python 3.10 (supported: requires-python >= 3.10) lacks",
    ),
    ExpectedSkip(
        "tests/test_cpu_kernels.py::test_a_bfloat16_target_runs_exact_with_every_linear_from_one_row[[]True]",
        "need a CPU with bfloat16 units",
        "the bfloat16-units path runs oneDNN's bfloat16 kernels, which refuse to run on a CPU without avx512_bf16 / "
        "AVX-NE-CONVERT; the same test's [False] case runs the path such a CPU takes (half_linear) everywhere",
    ),
)


def expected_skip(nodeid: str, reason: str) -> ExpectedSkip | None:
    """The entry that covers a skip of `nodeid` with `reason`, or None (an unexpected skip)."""
    for entry in EXPECTED_SKIPS:
        if fnmatchcase(nodeid, entry.pattern) and entry.says in reason:
            return entry
    return None
