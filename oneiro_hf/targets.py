"""What a target is to oneiro-hf: the supported architectures, its text config and decoder stack, and how a
drafter's recorded target compares with a model (`target_differences`, `DrafterTargetMismatch`).

Used by the drafter (binding), the Hub code (model cards), the benchmark and training, none of which need
the drafter's modeling code for these checks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from .storage.identity import compare_fingerprint, fingerprinted_tensors

if TYPE_CHECKING:
    from transformers import PreTrainedModel

    from .configuration_oneiro import OneiroDrafterConfig

SUPPORTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma3_text")


@dataclass(frozen=True)
class TargetDifference:
    """One way in which a target differs from the one a drafter was made for."""

    field: str
    drafter_value: Any  # what the drafter's config records
    target_value: Any  # what the target has

    def describe(self) -> str:
        if self.field == "base_model":
            return (
                f"base model: drafter was made from '{self.drafter_value}', target is '{self.target_value}' "
                "(pass allow_base_model_mismatch=True to bind to a fine-tune of the same base on purpose)"
            )
        if self.field == "base_weights":
            return (
                f"base weights: the target's weights differ from those of {self.drafter_value}, which the drafter "
                f"was trained on, in {self.target_value}"
            )
        if self.field == "architecture":
            return f"architecture: drafter expects {self.drafter_value}, target is {self.target_value}"
        return f"{self.field}: drafter expects {self.drafter_value}, target has {self.target_value}"


class DrafterTargetMismatch(ValueError):
    """The drafter was made for a different target than the one it is being bound to.

    `differences` lists each differing field with the drafter's and the target's value, so callers (and the
    model card check in oneiro_hf.storage.cards) can report them without parsing the message.
    """

    def __init__(
        self,
        differences: list[TargetDifference] | str,
        drafter_name: str | None = None,
        target: Any = None,
    ) -> None:
        if isinstance(differences, str):  # a single free-form problem (e.g. a layer class)
            self.differences: list[TargetDifference] = []
            super().__init__(differences)
            return
        self.differences = list(differences)
        which = f" '{drafter_name}'" if drafter_name else ""
        target_name = getattr(target, "name_or_path", None) or type(target).__name__
        lines = "\n  - ".join(d.describe() for d in self.differences)
        fix = (
            f"use a drafter trained for '{target_name}' (oneiro-train --target <it>), or build an untrained one "
            "with OneiroDrafter.from_target(model)"
        )
        if all(d.field in ("base_model", "base_weights") for d in self.differences):
            fix = (
                "pass allow_base_model_mismatch=True if the target is a fine-tune of the same base (the output "
                "stays lossless; fewer drafts may be accepted), or " + fix
            )
        super().__init__(
            f"This drafter{which} was made for another target than '{target_name}':\n  - {lines}\nFix: {fix}."
        )


def target_differences(
    config: OneiroDrafterConfig, model: PreTrainedModel, allow_base_model_mismatch: bool = False
) -> list[TargetDifference]:
    """Every recorded field (architecture, sizes, layer count, base model) in which `model` differs."""
    config_t = text_config(model)
    found = []
    for field, expected, actual in (
        ("model_type", (config.target_config or {}).get("model_type"), config_t.model_type),
        ("hidden_size", config.hidden_size, config_t.hidden_size),
        ("vocab_size", config.vocab_size, config_t.vocab_size),
        ("num_hidden_layers", config.num_target_layers, config_t.num_hidden_layers),
    ):
        if expected != actual:
            found.append(TargetDifference(field, expected, actual))
    if config.target_architecture and config.target_architecture != type(model).__name__:
        found.append(TargetDifference("architecture", config.target_architecture, type(model).__name__))
    if found or allow_base_model_mismatch or not config.base_model_fingerprint:
        return found  # shapes differ (sampling would compare unrelated values), or the weights are not checked
    tensors = fingerprinted_tensors(model, base_model(model), config.interval)
    differing = compare_fingerprint(config.base_model_fingerprint, tensors)
    if differing:
        shown = ", ".join(d.describe() for d in differing[:4])
        more = f" and {len(differing) - 4} more" if len(differing) > 4 else ""
        where = f"{len(differing)} of {len(config.base_model_fingerprint['tensors'])} sampled tensors: {shown}{more}"
        base = config.base_model_name_or_path or "the base model"
        source = config.base_model_fingerprint.get("source")
        found.append(TargetDifference("base_weights", f"{base} ({source})" if source else base, where))
    return found


class UnsupportedTarget(ValueError):
    """The target's architecture is not one oneiro-hf knows how to draft for."""


def text_config(model_or_config: Any):
    """The text part of a model's (or config's) config: `get_text_config()` where it exists (Gemma 3), else itself."""
    config = getattr(model_or_config, "config", model_or_config)
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def check_supported(text_config) -> None:
    if text_config.model_type not in SUPPORTED_MODEL_TYPES:
        raise UnsupportedTarget(
            f"oneiro-hf does not support target architecture '{text_config.model_type}'. Supported: "
            f"{', '.join(SUPPORTED_MODEL_TYPES)}. Fix: use a target of a supported architecture; for this one, "
            "transformers' own prompt lookup speeds up generate without a drafter: "
            "model.generate(..., prompt_lookup_num_tokens=10)."
        )


def model_identity(name: str | None) -> str | None:
    """Compare base models by their last two path components, so 'org/name' and a local copy agree."""
    if not name:
        return None
    parts = [p for p in str(name).replace("\\", "/").rstrip("/").split("/") if p]
    return "/".join(parts[-2:]).lower()



def base_model(model: PreTrainedModel) -> nn.Module:
    """The decoder stack (layers, final norm, rotary embedding) of a causal LM; UnsupportedTarget if it has none."""
    base = model.get_decoder() if hasattr(model, "get_decoder") else None
    if base is None or not hasattr(base, "layers"):
        base = getattr(model, "model", None)
    if base is None or not all(hasattr(base, a) for a in ("layers", "norm", "rotary_emb")):
        raise UnsupportedTarget(
            f"{type(model).__name__} does not expose decoder layers, a final norm and a rotary embedding "
            "the way oneiro-hf expects."
        )
    return base


def select_input_states(
    hidden_states: tuple, input_layers: tuple[int, ...] | list[int], norm: nn.Module
) -> torch.Tensor:
    """(B, T, k*H): the states `input_layers` selects from a target pass's `hidden_states` (L+1 entries, None where
    not requested), the last (final-normed) as it is, every other through the target's final `norm`. The one
    definition of a multi-layer drafter's input, shared by drafting and training's feature pass."""
    last = len(hidden_states) - 1
    parts = []
    for i in input_layers:
        state = hidden_states[i]
        if state is None:
            raise RuntimeError(
                f"the target pass did not return hidden state {i}, which this drafter reads. Fix: run the target "
                f"with output_hidden_states={list(input_layers)} (or True)."
            )
        parts.append(state if i == last else norm(state))
    return torch.cat(parts, dim=-1)
