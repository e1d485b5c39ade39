"""Fixtures shared by the oneiro-hf tests; the tiny models themselves are built by tests/tiny.py."""

from __future__ import annotations

import os

import pytest
import torch
from expected_skips import expected_skip
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
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

from oneiro_hf.kernels.prepacked_linear import NEVER, decided_min_rows

make_config = tiny_config  # the name test files written before tests/tiny.py use

# hypothesis judges no test by time: no per-example deadline, no "too slow" health check (a busy machine is slow)
hypothesis_settings.register_profile("oneiro", deadline=None,
                                     suppress_health_check=[HealthCheck.too_slow])
hypothesis_settings.load_profile("oneiro")

# Tiny matmuls: threading overhead dominates, so these modules run single-threaded (restored after).
_ONE_THREAD_MODULES = {"test_core_equality", "test_bad_inputs", "test_save_load", "test_components", "test_bench",
                       "test_onpolicy", "test_verification", "test_tree_generate", "test_lossless_property",
                       "test_drafter_window"}


def _fail_on_unexpected_skips() -> bool:
    return os.environ.get("ONEIRO_FAIL_ON_SKIP") == "1"


def _skip_reason(report) -> str:
    return report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)


def _unexpected(report, nodeid: str) -> None:
    """With ONEIRO_FAIL_ON_SKIP=1 (`make test`, CI): turn a skip that tests/expected_skips.py does not list into a
    failure that names its reason."""
    if not (report.skipped and _fail_on_unexpected_skips()) or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    if expected_skip(nodeid, reason) is None:
        report.outcome = "failed"
        report.longrepr = (f"unexpected skip of {nodeid} (ONEIRO_FAIL_ON_SKIP=1): {reason}\nFix: make it run here, "
                           "or list it with the reason it is legitimate in tests/expected_skips.py.")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _unexpected(outcome.get_result(), item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A module that skips as a whole (a module-level skip or importorskip) is judged like a test."""
    outcome = yield
    _unexpected(outcome.get_result(), collector.nodeid)


def pytest_collection_modifyitems(config, items):
    """Tests on real models are slow (minutes on a 2-core CPU): `-m "not slow"` skips them in development."""
    for item in items:
        if item.get_closest_marker("real_model"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session", autouse=True)
def _kernels_decided_not_timed():
    """No layer of a test's target runs on prepacked weights unless the test says so (its own rule, or a
    monkeypatched `measured_min_rows`): timed, the choice (and so float32 rounding) would follow the machine's load.
    Tiny layers never gain on an idle CPU, so this is the choice an idle machine makes."""
    with decided_min_rows(lambda layer: NEVER):
        yield


@pytest.fixture
def prepacked_from_one_row():
    """Every linear layer of a float32 CPU target on prepacked weights, from one row on (what a CPU that gains
    everywhere picks): the real-model modules' kernels, decided rather than timed."""
    with decided_min_rows(lambda layer: 1):
        yield


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
