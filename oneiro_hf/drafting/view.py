"""`EngineView`: the drafting engine's view of a call's `DraftingSettings`, and the chain seen as a tree of one branch.

The engine (chains, trees and batches alike) reads the drafting settings through this view; it declares none. A chain
(`oneiro_tree=False`, one prompt or a batch) is drafted by the same code as a tree of one branch
(`EngineView.for_chain`): top-1 below each node, one node expanded per level, one lookup continuation,
`max_draft_tokens` deep, and of what that grows the one root-to-leaf path that pays best (`cost.choose_path`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..settings import DraftingSettings


@dataclass(frozen=True)
class EngineView:
    """A call's view of its `DraftingSettings` (config defaults + oneiro_* kwargs), under the names the drafting
    engine reads. It declares no setting: every value is a DraftingSettings field, whose declaration holds its
    default, check and meaning (settings.py), or derived from them (`filler_min_ngram`); `chain` says only how
    the draft is verified (one path, `for_chain`, or a tree)."""

    drafting: DraftingSettings
    chain: bool = False  # verify one root-to-leaf path (`for_chain`), not a tree

    @classmethod
    def from_drafting_settings(cls, settings: DraftingSettings) -> EngineView:
        """The view of validated settings (`DraftingSettings.validate` refuses tree sizes < 1 and a lossy
        verification with `tree`)."""
        return cls(settings.validate())

    @classmethod
    def for_chain(cls, settings: DraftingSettings) -> EngineView:
        """Chain settings (`tree=False`) as a tree of one branch: `max_draft_tokens` deep and wide in nodes, one
        child per node, one lookup continuation; shorter lookup matches than `lookup_min_ngram` are not drafted."""
        depth = int(settings.max_draft_tokens)
        chain = dataclasses.replace(
            settings, tree_max_nodes=depth, tree_max_depth=depth, tree_topk=1, tree_beam=1, tree_lookup_branches=1,
            tree_lookup_min_ngram=min(int(settings.lookup_min_ngram), int(settings.lookup_max_ngram)),
        )
        return cls(chain.validate(), chain=True)

    @property
    def mode(self) -> str:
        return self.drafting.mode

    @property
    def max_nodes(self) -> int:
        """Candidate nodes per pass at most (the root not counted): tree_max_nodes."""
        return int(self.drafting.tree_max_nodes)

    @property
    def max_depth(self) -> int:
        return int(self.drafting.tree_max_depth)

    @property
    def topk(self) -> int:
        return int(self.drafting.tree_topk)

    @property
    def beam(self) -> int:
        return int(self.drafting.tree_beam)

    @property
    def lookup_branches(self) -> int:
        return int(self.drafting.tree_lookup_branches)

    @property
    def lookup_min_ngram(self) -> int:
        """Matches this long are branches before the drafter is asked (as a chain's lookup)."""
        return int(self.drafting.lookup_min_ngram)

    @property
    def filler_min_ngram(self) -> int:
        """Shorter matches down to this one are added after the drafter's turn (tree_lookup_min_ngram)."""
        return min(int(self.drafting.tree_lookup_min_ngram), self.lookup_min_ngram)

    @property
    def lookup_max_ngram(self) -> int:
        return int(self.drafting.lookup_max_ngram)

    @property
    def lookup_after_latent(self) -> bool:
        return bool(self.drafting.lookup_after_latent)

    @property
    def min_value(self) -> float:
        """Latent: stop expanding below this estimated path probability (min_draft_confidence)."""
        return float(self.drafting.min_draft_confidence)

    @property
    def cost_aware(self) -> bool:
        return bool(self.drafting.cost_aware)

    @property
    def context_window(self) -> int | None:
        return self.drafting.context_window

    @property
    def memory_prompts(self) -> bool:
        return bool(self.drafting.suffix_memory_prompts)
