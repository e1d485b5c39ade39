"""Configuration of a OneiroDraft drafter: what it was made from and how it drafts by default."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from transformers import PretrainedConfig

from .settings import DRAFT_MODES, DraftingSettings, config_defaults, config_name  # noqa: F401 - DRAFT_MODES re-exported

# Checkpoint format (docs/hub.md, "Compatibility"): bumped only when a change would make an older oneiro-hf
# misread a checkpoint. A reader loads every format up to its own and refuses newer ones by name. A writer stamps
# the lowest format that holds what it writes: 1 for whole weights, 2 for target-relative ones (storage/target_relative.py).
FORMAT_VERSION = 2
WHOLE_WEIGHTS_FORMAT = 1


class DrafterNotBound(RuntimeError):
    """A drafter was passed to the `generate` of a model it is not bound to."""


def not_bound_message(base_model: str | None) -> str:
    """What to say when a model's `generate` gets a drafter that is not bound to it, and what to do."""
    base = f" (made for '{base_model}')" if base_model else ""
    return (
        f"This OneiroDrafter{base} was passed to the generate of a model it is not bound to: a drafter belongs to "
        "the target it was bound to (it shares that target's embedding and LM head). Fix: drafter.bind(model) to "
        "move it to this model, other = drafter.copy_for(model) for a second drafter, or load one made for this "
        "model: OneiroDrafter.from_pretrained(path, target=model) (or OneiroDrafter.from_target(model))."
    )


VERIFIED_CONTEXTS = ("own", "exact")


class OneiroDrafterConfig(PretrainedConfig):
    """Records the target a drafter belongs to, so a mismatch is caught before any work is done.

    `target_config` is the target's text config as a dict: the drafter rebuilds its copied decoder
    layers from it with the target's own layer class.
    """

    model_type = "oneiro_drafter"

    def __init__(
        self,
        target_config: dict[str, Any] | None = None,
        base_model_name_or_path: str | None = None,
        base_model_revision: str | None = None,
        base_model_fingerprint: dict[str, Any] | None = None,
        target_architecture: str | None = None,
        hidden_size: int | None = None,
        vocab_size: int | None = None,
        num_target_layers: int | None = None,
        interval: tuple[int, int] | list[int] | None = None,
        input_layers: tuple[int, ...] | list[int] | None = None,
        verified_context: str = "own",
        draft_vocab_size: int | None = None,
        weights_storage: dict[str, Any] | None = None,
        *,
        oneiro_version: str = str(FORMAT_VERSION),
        format_version: int = FORMAT_VERSION,
        oneiro_hf_version: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("hidden_state_layer", None)  # written by oneiro-hf 0.1.0, never read: dropped on load
        self.target_config = target_config
        self.base_model_name_or_path = base_model_name_or_path
        self.base_model_revision = base_model_revision
        # a sample of the base weights (oneiro_hf.storage.identity): what binding compares, instead of names or paths
        self.base_model_fingerprint = base_model_fingerprint
        self.target_architecture = target_architecture
        self.hidden_size = hidden_size
        self.vocab_size = vocab_size
        self.num_target_layers = num_target_layers
        self.interval = list(interval) if interval is not None else None
        # which of the target's `output_hidden_states` feed the fusion (None: only the final-normed last one, the
        # original drafter); other indices are RMS-normalised by the target's final norm (docs/design.md)
        self.input_layers = [int(i) for i in input_layers] if input_layers is not None else None
        # the keys/values the copied layers attend to at verified positions: "own" (the drafter's catch-up pass over
        # its fused inputs) or "exact" (its own projections of the target's true inputs to those layers)
        if verified_context not in VERIFIED_CONTEXTS:
            raise ValueError(
                f"verified_context must be one of {VERIFIED_CONTEXTS} (got {verified_context!r}). Fix: pass "
                "verified_context='own' (the default) or 'exact'."
            )
        self.verified_context = verified_context
        self.draft_vocab_size = draft_vocab_size
        # None: model.safetensors holds the weights whole; a dict: stored relative to the target
        # (oneiro_hf.storage.target_relative.RelativeStorage, checkpoint format 2)
        self.weights_storage = weights_storage
        # the drafting settings' defaults: every DraftingSettings field, under its config name (settings.py)
        for name, default in config_defaults().items():
            setattr(self, name, kwargs.pop(name, default))
        # format_version is authoritative; oneiro_version mirrors it for oneiro-hf 0.1.0, which read the format
        # from there; oneiro_hf_version is the package that wrote the file (informational, for error messages)
        self.oneiro_version = oneiro_version
        self.format_version = format_version
        self.oneiro_hf_version = oneiro_hf_version
        super().__init__(**kwargs)

    def written_format(self) -> int:
        """The checkpoint format this config is saved in: the lowest that holds its weights' storage."""
        return FORMAT_VERSION if self.weights_storage else WHOLE_WEIGHTS_FORMAT

    def to_dict(self) -> dict[str, Any]:
        """Stamp what this package writes: its checkpoint format and version, as transformers does for itself."""
        from .version import __version__

        data = super().to_dict()
        data["format_version"] = self.written_format()
        data["oneiro_version"] = str(self.written_format())
        data["oneiro_hf_version"] = __version__
        return data


def _signature_with_settings(init: Any) -> inspect.Signature:
    """`init`'s signature with one keyword-only parameter per drafting setting (its config name and declared
    default) before `**kwargs`: what `help()`, `from_target`'s check of its keyword arguments and docs/api.md's
    test read, though `__init__` takes the settings through `**kwargs` (settings.py declares them)."""
    signature = inspect.signature(init)
    params = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    first_keyword_only = next(i for i, p in enumerate(params) if p.kind is inspect.Parameter.KEYWORD_ONLY)
    settings = [
        inspect.Parameter(config_name(f.name), inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type)
        for f in dataclasses.fields(DraftingSettings)
    ]
    params[first_keyword_only:first_keyword_only] = settings
    return signature.replace(parameters=[*params, signature.parameters["kwargs"]])


OneiroDrafterConfig.__init__.__signature__ = _signature_with_settings(OneiroDrafterConfig.__init__)
