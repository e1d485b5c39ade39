"""The `oneiro-hf[vllm]` plugin: vLLM calls `register` through its `vllm.general_plugins` entry point, in every
process it starts, before models load. It names the drafter's architecture lazily (a `module:class` string), so
vLLM imports the model code only when a folder asks for it."""

from __future__ import annotations

from .vllm_export import VLLM_ARCHITECTURE


def register() -> None:
    """Register `OneiroDrafterEagle3` (folders written by `oneiro-export vllm`) with vLLM's ModelRegistry."""
    from vllm import ModelRegistry

    ModelRegistry.register_model(VLLM_ARCHITECTURE, "oneiro_hf.serving.vllm_model:OneiroDrafterEagle3")
