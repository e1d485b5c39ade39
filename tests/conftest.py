"""Fixtures shared by the oneiro-hf tests; the tiny models themselves are built by tests/tiny.py."""

from __future__ import annotations

import pytest
import torch
from tiny import ARCHS, make_model

# Tiny matmuls: threading overhead dominates, so these modules run single-threaded (restored after).
_ONE_THREAD_MODULES = {"test_core_equality", "test_bad_inputs", "test_save_load", "test_components", "test_bench",
                       "test_onpolicy", "test_verification"}


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
