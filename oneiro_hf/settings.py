"""Drafting settings of one generate call: one frozen dataclass, the one place their defaults live.

A drafter's config stores its own defaults (`OneiroDrafterConfig.draft_mode`, `max_draft_tokens`, ...; the
config's defaults are these); a call overrides any of them with `oneiro_<name>=` kwargs. `validate()` raises
a clear error for a bad value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

DRAFT_MODES = ("latent", "lookup", "hybrid")


@dataclass(frozen=True)
class DraftingSettings:
    """How one generate call drafts: `DraftingSession.settings` (`drafter.drafting_settings(**overrides)` returns
    them as a dict)."""

    mode: str = "hybrid"  # config field draft_mode
    max_draft_tokens: int = 8
    min_draft_confidence: float = 0.05
    lookup_min_ngram: int = 2
    lookup_max_ngram: int = 4
    # hybrid: continue a latent draft with lookup's continuation of the drafter's own last tokens
    lookup_after_latent: bool = True
    cost_aware: bool = True
    # CPU float32 targets: multi-token verification passes run the target's linears on weights reordered once for
    # oneDNN, per layer shape from the row count measured to pay here (prepacked_linear.py; a second copy of those
    # weights, kept with the target)
    prepack_cpu_weights: bool = True
    # the drafter's first catch-up feeds at most this many of the latest verified positions (None: all of them);
    # default: the sequence length drafters are trained on (oneiro-train --max_seq_len)
    context_window: int | None = 1024
    verification: str = "strict"
    verification_topk: int = 3
    verification_threshold: float = 0.3
    verification_min_entropy: float = 0.0
    tree: bool = False
    tree_max_nodes: int = 32
    tree_max_depth: int = 8
    tree_topk: int = 8
    tree_beam: int = 8
    tree_lookup_branches: int = 8
    # a tree also takes lookup branches from suffix matches this short (a chain: lookup_min_ngram), after the
    # drafter's turn; each is priced by its n-gram's learned acceptance, so on a flat t(k) a 1-gram branch fills
    # nodes a pass would leave empty
    tree_lookup_min_ngram: int = 1

    @classmethod
    def from_config(cls, config: Any) -> DraftingSettings:
        """The defaults a drafter's config records (a config written before a setting existed: its default)."""
        values = {f.name: getattr(config, _config_name(f.name), f.default) for f in dataclasses.fields(cls)}
        return cls(**values)

    @classmethod
    def for_call(cls, config: Any, **overrides: Any) -> DraftingSettings:
        """One generate call's settings: `config`'s defaults, then `overrides` (oneiro_* kwargs without the
        prefix), validated."""
        return cls.from_config(config).replace(**overrides).validate()

    def replace(self, **overrides: Any) -> DraftingSettings:
        """These settings with `overrides` (names without the `oneiro_` prefix); TypeError for an unknown name."""
        known = {f.name for f in dataclasses.fields(self)}
        for key in overrides:
            if key not in known:
                raise TypeError(f"unknown oneiro setting '{key}'. Known: {', '.join(sorted(known))}")
        return dataclasses.replace(self, **overrides)

    def validate(self) -> DraftingSettings:
        """Self, if every value is usable; else a ValueError naming the setting and the fix."""
        from .verification import validate_verification_settings

        if self.mode not in DRAFT_MODES:
            raise ValueError(f"unknown draft mode '{self.mode}'. Choose one of {', '.join(DRAFT_MODES)}.")
        if int(self.max_draft_tokens) < 1:
            raise ValueError("max_draft_tokens must be >= 1")
        if not 1 <= int(self.lookup_min_ngram) <= int(self.lookup_max_ngram):
            raise ValueError("need 1 <= lookup_min_ngram <= lookup_max_ngram")
        if not 1 <= int(self.tree_lookup_min_ngram) <= int(self.lookup_max_ngram):
            raise ValueError(
                f"need 1 <= tree_lookup_min_ngram <= lookup_max_ngram (got {self.tree_lookup_min_ngram} and "
                f"{self.lookup_max_ngram}). Fix: pass oneiro_tree_lookup_min_ngram=1."
            )
        window = self.context_window
        if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
            raise ValueError(
                f"context_window must be a whole number of positions >= 1, or None for no bound (got {window!r}). "
                "Fix: pass oneiro_context_window=1024 (the training length), or None to feed the whole prompt."
            )
        validate_verification_settings(self.as_dict())
        return self

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _config_name(field_name: str) -> str:
    return "draft_mode" if field_name == "mode" else field_name


DEFAULTS = DraftingSettings()
TREE_SETTING_DEFAULTS = {f.name: getattr(DEFAULTS, f.name) for f in dataclasses.fields(DraftingSettings)
                         if f.name.startswith("tree")}
