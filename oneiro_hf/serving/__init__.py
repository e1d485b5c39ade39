"""Serving a drafter outside transformers' `generate`: the vLLM export (`vllm_export`, `cli`; no vLLM import) and
the vLLM plugin (`vllm_plugin`, `vllm_model`), which only vLLM's plugin loader imports."""
