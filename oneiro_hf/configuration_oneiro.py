"""Configuration of a OneiroDraft drafter: what it was made from and how it drafts by default."""

from __future__ import annotations

import sys
from typing import Any

from transformers import PretrainedConfig

from .settings import DEFAULTS, DRAFT_MODES, TREE_SETTING_DEFAULTS  # noqa: F401 - DRAFT_MODES re-exported

# Checkpoint format (docs/hub.md, "Compatibility"): bumped only when a change would make an older oneiro-hf
# misread a checkpoint. A reader loads every format up to its own and refuses newer ones by name.
FORMAT_VERSION = 1


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
        draft_mode: str = DEFAULTS.mode,  # the drafting defaults are DraftingSettings' (oneiro_hf/settings.py)
        max_draft_tokens: int = DEFAULTS.max_draft_tokens,
        min_draft_confidence: float = DEFAULTS.min_draft_confidence,
        lookup_min_ngram: int = DEFAULTS.lookup_min_ngram,
        lookup_max_ngram: int = DEFAULTS.lookup_max_ngram,
        lookup_after_latent: bool = DEFAULTS.lookup_after_latent,
        cost_aware: bool = DEFAULTS.cost_aware,
        prepack_cpu_weights: bool = DEFAULTS.prepack_cpu_weights,
        context_window: int | None = DEFAULTS.context_window,
        verification: str = DEFAULTS.verification,
        verification_topk: int = DEFAULTS.verification_topk,
        verification_threshold: float = DEFAULTS.verification_threshold,
        verification_min_entropy: float = DEFAULTS.verification_min_entropy,
        tree: bool = TREE_SETTING_DEFAULTS["tree"],
        tree_max_nodes: int = TREE_SETTING_DEFAULTS["tree_max_nodes"],
        tree_max_depth: int = TREE_SETTING_DEFAULTS["tree_max_depth"],
        tree_topk: int = TREE_SETTING_DEFAULTS["tree_topk"],
        tree_beam: int = TREE_SETTING_DEFAULTS["tree_beam"],
        tree_lookup_branches: int = TREE_SETTING_DEFAULTS["tree_lookup_branches"],
        tree_lookup_min_ngram: int = TREE_SETTING_DEFAULTS["tree_lookup_min_ngram"],
        oneiro_version: str = str(FORMAT_VERSION),
        format_version: int = FORMAT_VERSION,
        oneiro_hf_version: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.pop("hidden_state_layer", None)  # written by oneiro-hf 0.1.0, never read: dropped on load
        self.target_config = target_config
        self.base_model_name_or_path = base_model_name_or_path
        self.base_model_revision = base_model_revision
        # a sample of the base weights (oneiro_hf.identity): what binding compares, instead of names or paths
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
        self.draft_mode = draft_mode
        self.max_draft_tokens = max_draft_tokens
        self.min_draft_confidence = min_draft_confidence
        self.lookup_min_ngram = lookup_min_ngram
        self.lookup_max_ngram = lookup_max_ngram
        self.lookup_after_latent = lookup_after_latent
        self.cost_aware = cost_aware
        self.prepack_cpu_weights = prepack_cpu_weights
        # the drafter's first catch-up feeds at most this many latest verified positions (None: the whole prompt)
        self.context_window = context_window
        # how drafts are judged (oneiro_hf.verification): "strict" is lossless, "topk"/"threshold" are lossy
        self.verification = verification
        self.verification_topk = verification_topk
        self.verification_threshold = verification_threshold
        self.verification_min_entropy = verification_min_entropy
        # tree verification (oneiro_hf.tree): off by default; size limits, the cost model picks within them
        self.tree = tree
        self.tree_max_nodes = tree_max_nodes
        self.tree_max_depth = tree_max_depth
        self.tree_topk = tree_topk
        self.tree_beam = tree_beam
        self.tree_lookup_branches = tree_lookup_branches
        self.tree_lookup_min_ngram = tree_lookup_min_ngram
        # format_version is authoritative; oneiro_version mirrors it for oneiro-hf 0.1.0, which read the format
        # from there; oneiro_hf_version is the package that wrote the file (informational, for error messages)
        self.oneiro_version = oneiro_version
        self.format_version = format_version
        self.oneiro_hf_version = oneiro_hf_version
        super().__init__(**kwargs)

    def get_text_config(self, *args: Any, **kwargs: Any):
        """This config (it has no sub-configs); refuses transformers' assistant check for a target not bound to it.

        A model that never had a drafter bound runs transformers' own `generate`, whose first look at an
        assistant is this call from `_validate_generation_mode`; without this check a drafter made for another
        vocabulary would get transformers' "different tokenizers" message instead of the real problem.
        """
        caller = sys._getframe(1)
        if caller.f_code.co_name == "_validate_generation_mode" and not getattr(
            caller.f_locals.get("self"), "_oneiro_hooked", False
        ):
            raise DrafterNotBound(not_bound_message(self.base_model_name_or_path))
        return super().get_text_config(*args, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """Stamp what this package writes: its checkpoint format and version, as transformers does for itself."""
        from .version import __version__

        data = super().to_dict()
        data["format_version"] = FORMAT_VERSION
        data["oneiro_version"] = str(FORMAT_VERSION)
        data["oneiro_hf_version"] = __version__
        return data
