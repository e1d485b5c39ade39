"""Fixtures shared by the oneiro-hf tests; the tiny models themselves are built by tests/tiny.py."""

from __future__ import annotations

import os

import pytest
import torch
from tiny import (  # noqa: F401 - also importable from conftest for test files written before tests/tiny.py
    ARCHS,
    MODEL_CLASSES,
    WINDOW,
    greedy,
    longest_cycle,
    make_cyclic_model,
    make_model,
    random_prompt,
    repeat_prompt,
    tiny_config,
)

make_config = tiny_config  # the name test files written before tests/tiny.py use

# Tiny matmuls: threading overhead dominates, so these modules run single-threaded (restored after).
_ONE_THREAD_MODULES = {"test_core_equality", "test_bad_inputs", "test_save_load", "test_components", "test_bench",
                       "test_onpolicy", "test_verification", "test_tree_generate", "test_lossless_property",
                       "test_drafter_window"}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """With ONEIRO_FAIL_ON_SKIP=1 (CI), a skipped test marked `required` counts as a failure, naming the reason."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("ONEIRO_FAIL_ON_SKIP") == "1" and item.get_closest_marker("required"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"required test skipped (ONEIRO_FAIL_ON_SKIP=1): {reason}"


def pytest_collection_modifyitems(config, items):
    """Tests on real models are slow (minutes on a 2-core CPU): `-m "not slow"` skips them in development."""
    for item in items:
        if item.get_closest_marker("real_model"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def _one_thread(request):
    """One torch thread for the modules in _ONE_THREAD_MODULES (the one place that sets it)."""
    if request.module.__name__.rsplit(".", 1)[-1] not in _ONE_THREAD_MODULES:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def model_factory():
    return make_model


@pytest.fixture
def tiny_llama():
    return make_model("llama")


@pytest.fixture
def tiny_qwen2():
    return make_model("qwen2")


@pytest.fixture
def tiny_gemma3():
    return make_model("gemma3")


@pytest.fixture(params=ARCHS)
def tiny_model(request):
    """A tiny random target of each supported architecture (parametrised by arch name)."""
    return make_model(request.param)
