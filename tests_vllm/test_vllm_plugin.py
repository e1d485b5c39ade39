"""The plugin's entry point in vLLM's own environment: it registers the architecture on the vLLM it supports and
refuses another release by name (vLLM's plugin loader lets the error stop the process that loads it)."""

from __future__ import annotations

import pytest


def test_the_plugin_registers_on_the_installed_vllm_and_refuses_another_release(monkeypatch):
    import vllm
    from vllm import ModelRegistry

    from oneiro_hf.serving import vllm_plugin
    from oneiro_hf.serving.vllm_export import VLLM_ARCHITECTURE

    assert vllm_plugin.installed_vllm_version() == vllm.__version__
    vllm_plugin.register()
    assert VLLM_ARCHITECTURE in ModelRegistry.get_supported_archs()
    monkeypatch.setattr(vllm, "__version__", "0.34.0")
    monkeypatch.delenv(vllm_plugin.UNTESTED_VLLM_ENV, raising=False)
    with pytest.raises(vllm_plugin.UnsupportedVllm, match=r"supports vllm >=0\.32,<0\.33, and vllm 0\.34\.0 is "
                                                           r"installed.*Fix:"):
        vllm_plugin.register()
    monkeypatch.setenv(vllm_plugin.UNTESTED_VLLM_ENV, "1")
    with pytest.warns(UserWarning, match="loading anyway"):
        vllm_plugin.register()
