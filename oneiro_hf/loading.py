"""Loads a target (reference name or HF path) and its drafter the way the CLIs and the demo need."""

from __future__ import annotations

from pathlib import Path

import torch

SHIPPED_DRAFTERS = Path(__file__).resolve().parent.parent / "drafters"


def default_drafter_dir(target_name: str) -> Path | None:
    """The drafter shipped in this repository for a reference target, if there is one."""
    candidate = SHIPPED_DRAFTERS / target_name
    return candidate if candidate.parent == SHIPPED_DRAFTERS and (candidate / "config.json").is_file() else None


def load_target_and_drafter(
    target: str, drafter: str | None, dtype: str = "float32", needs_drafter: bool = True, device: str = "cpu"
):
    """(model, tokenizer, drafter). drafter=None: the shipped drafter, else a fresh untrained one.

    The drafter follows the target's device and dtype when it binds, so only the target is moved.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from . import OneiroDrafter
    from .reference_models import REFERENCE_MODELS, load_reference_model, materialize_parameters

    torch_dtype = getattr(torch, dtype)
    if target in REFERENCE_MODELS:
        model, tokenizer = load_reference_model(target, dtype=torch_dtype, device=device)
    else:
        tokenizer = AutoTokenizer.from_pretrained(target)
        model = AutoModelForCausalLM.from_pretrained(target, dtype=torch_dtype).to(device).eval()
        materialize_parameters(model)
    if not needs_drafter:
        return model, tokenizer, None
    if drafter == "fresh":
        return model, tokenizer, OneiroDrafter.from_target(model)
    path = drafter or default_drafter_dir(target)
    if path is None:
        return model, tokenizer, OneiroDrafter.from_target(model)
    return model, tokenizer, OneiroDrafter.from_pretrained(path, target=model)


def load_drafter(model, drafter: str):
    """A drafter for an already loaded target: a saved drafter directory, or 'fresh' (untrained)."""
    from . import OneiroDrafter

    if drafter == "fresh":
        return OneiroDrafter.from_target(model)
    return OneiroDrafter.from_pretrained(drafter, target=model)
