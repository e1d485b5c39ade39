"""Old import paths of moved modules keep working for one release: the same module object, one DeprecationWarning
naming the new path; and nothing in this repository still uses an old path."""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from oneiro_hf.moved import MOVED

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_new_module_with_a_warning(old: str) -> None:
    new = importlib.import_module(f"oneiro_hf.{MOVED[old]}")
    sys.modules.pop(f"oneiro_hf.{old}", None)
    with pytest.warns(DeprecationWarning, match=re.escape(f"Fix: import oneiro_hf.{MOVED[old]}")):
        module = importlib.import_module(f"oneiro_hf.{old}")
    assert module is new


def test_from_import_of_an_old_path_gives_the_same_function() -> None:
    from oneiro_hf.kernels.cpu import cpu_kernels as new

    sys.modules.pop("oneiro_hf.cpu_kernels", None)
    with pytest.warns(DeprecationWarning):
        from oneiro_hf.cpu_kernels import cpu_kernels as old
    assert old is new
    import oneiro_hf

    assert oneiro_hf.cpu_kernels is new  # the public function, not the module its old path names


def test_python_dash_m_on_an_old_path_runs_the_new_module() -> None:
    result = subprocess.run([sys.executable, "-m", "oneiro_hf.reference_models", "list"], check=False, capture_output=True,
                            text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "smollm2-135m-instruct" in result.stdout
    assert "moved to oneiro_hf.storage.reference_models" in result.stderr


def test_no_file_here_uses_an_old_path() -> None:
    """The shims are for users' code: the package, tests, scripts, examples and docs use the new paths."""
    import oneiro_hf

    public = {name for name in MOVED if callable(getattr(oneiro_hf, name, None))}  # oneiro_hf.cpu_kernels, the function
    olds = "|".join(re.escape(old).replace(r"\.", "[./]") for old in sorted(set(MOVED) - public, key=len, reverse=True))
    pattern = re.compile(rf"(?<![\w.])oneiro_hf[./](?:{olds})(?!\w)")
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    skip = ("oneiro_hf/moved.py", "tests/test_moved.py")
    offenders = []
    for name in files:
        if name in skip or name.startswith(("docs/benchmarks/", "docs/measurements/", "drafters/", "model_cards/")):
            continue  # records and shipped drafters keep the words they were made with
        path = ROOT / name
        if path.suffix not in {".py", ".md", ".toml", ".sh", ".cfg", ".txt", ".yml", ".yaml"} and path.name != "Makefile":
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        offenders += [f"{name}: {m.group(0)}" for m in pattern.finditer(text)]
    assert not offenders, f"old module paths still used (use the new ones, oneiro_hf/moved.py): {offenders[:20]}"
