"""Skips cannot hide failures: with ONEIRO_FAIL_ON_SKIP=1 (`make test`, CI) a skip that tests/expected_skips.py does
not list, with its reason, fails the run (the hook in tests/conftest.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from expected_skips import EXPECTED_SKIPS

TESTS = Path(__file__).resolve().parent

PROBE = '''import pytest

def test_listed():
    pytest.skip("optional data absent")

def test_listed_but_for_another_reason():
    pytest.skip("launcher missing")

@pytest.mark.skipif(True, reason="launcher missing")
def test_unlisted():
    pass

def test_runs():
    pass
'''
# the probe's list: the real module with one entry of its own in place of the suite's
PROBE_LIST = """
EXPECTED_SKIPS = (
    ExpectedSkip("test_probe.py::test_listed*", "optional data absent", "the probe's one legitimate skip"),
)
"""


def _probe_suite(root: Path) -> None:
    """The suite's own conftest and tiny.py beside a probe module, with a list that expects one of its skips, and a
    module that skips as a whole."""
    for helper in ("conftest.py", "tiny.py"):
        (root / helper).write_text((TESTS / helper).read_text())
    (root / "expected_skips.py").write_text((TESTS / "expected_skips.py").read_text() + PROBE_LIST)
    (root / "test_probe.py").write_text(PROBE)
    (root / "test_probe_module.py").write_text('import pytest\n\npytest.importorskip("no_such_module_anywhere")\n')


def _run(root: Path, flag: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "ONEIRO_FAIL_ON_SKIP"}
    if flag is not None:
        env["ONEIRO_FAIL_ON_SKIP"] = flag
    command = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "-p", "no:randomly",
               "--continue-on-collection-errors", str(root)]
    return subprocess.run(command, check=False, capture_output=True, text=True, env=env, cwd=root, timeout=300)


def test_a_skip_not_listed_with_its_reason_fails_when_ci_says_so(tmp_path):
    _probe_suite(tmp_path)
    quiet = _run(tmp_path, None)
    assert quiet.returncode == 0 and "1 passed, 4 skipped" in quiet.stdout, quiet.stdout
    strict = _run(tmp_path, "1")
    out = strict.stdout
    assert strict.returncode != 0, out
    failed = set(re.findall(r"^(?:FAILED|ERROR) (\S+)", out, flags=re.MULTILINE))
    assert failed == {"test_probe.py::test_listed_but_for_another_reason", "test_probe.py::test_unlisted",
                      "test_probe_module.py"}, out
    assert "1 passed, 1 skipped" in out and "launcher missing" in out and "no_such_module_anywhere" in out
    assert "Fix: make it run here, or list it with the reason it is legitimate in tests/expected_skips.py" in out


def test_every_expected_skip_names_a_test_of_this_suite_and_says_why():
    for entry in EXPECTED_SKIPS:
        path, _, name = entry.pattern.partition("::")
        source = TESTS.parent / path
        assert source.is_file(), entry
        assert re.search(rf"^def {re.escape(name.split('[')[0])}\(", source.read_text(), flags=re.MULTILINE), entry
        assert entry.says and len(entry.why) > 20, entry
