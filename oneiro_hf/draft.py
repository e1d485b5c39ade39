"""What one drafting round proposes for verification, for chains and trees alike, and where a draft ends at EOS.

A chain draft (`ChainDraft`) is a list of tokens after the last accepted one; a tree draft (`TreeDraft`) is a
`TokenTree` below it. Both are a `Draft`, so that statistics (`DraftStats.record_round`) and whatever else judges
a round read one interface, each kind holding only its own fields. Drafted tokens are addressed as a tree's nodes
are: node 0 is the last accepted token (the root), a chain's token j is node j + 1 and its parent is node j.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # annotations only: the tree package is not needed by chains
    from .tree.tree import TokenTree


@dataclass
class Draft:
    """One round's proposal. Every kind has calls, drafter forwards spent (what a pinned profile prices), and
    seconds, wall time spent drafting; and answers `size` (tokens the target judges, the root not counted),
    `source_of(node)` ("latent", "lookup"; "root" for node 0), `parent_of(node)`, `step_sources()` (which sources the
    round counts as a step of), `shape(accepted)` (the `DraftStats` lists its kind adds to, and what) and
    `round_record(accepted)` (a recorded round's fields, `DraftRound`; None where rounds are not recorded)."""

    calls: int = field(default=0, kw_only=True)
    seconds: float = field(default=0.0, kw_only=True)

    def round_record(self, accepted: int) -> tuple[int, list[int], int, str] | None:
        return None

    def extended(self) -> bool:
        """Whether lookup continued a latent token somewhere in the draft (hybrid's lookup after latent)."""
        return any(self.source_of(i) == "lookup" and self.source_of(self.parent_of(i)) == "latent"
                   for i in range(1, self.size + 1))


@dataclass
class ChainDraft(Draft):
    """A chain of tokens (possibly none): tokens, the drafted tokens; logits: (1, L, V) the drafting distribution
    when sampling (point masses for lookup), else None; source: "latent", "lookup" or "none", what began the
    draft; ngram: the matched n-gram length of the lookup tokens; confidences: the readout's probability of each
    latent token; latent_tokens: how many leading tokens the drafter proposed (a latent draft's other tokens are
    the lookup continuation of the context with the drafter's tokens appended, hybrid mode); start: the sequence
    length when drafting began (filled when proposed)."""

    tokens: list[int] = field(default_factory=list)
    logits: torch.Tensor | None = None
    source: str = "none"
    ngram: int = 0
    confidences: list[float] = field(default_factory=list)
    latent_tokens: int = 0
    start: int = 0

    @property
    def size(self) -> int:
        return len(self.tokens)

    def source_of(self, node: int) -> str:
        if node == 0:
            return "root"
        return "latent" if node <= self.latent_tokens else "lookup"

    def parent_of(self, node: int) -> int:
        return node - 1

    def step_sources(self) -> set[str]:
        """The source that began the chain (its lookup continuation of a latent draft is an extension, not a lookup
        step); none when empty."""
        return {self.source} if self.size else set()

    def shape(self, accepted: list[int]) -> dict[str, int]:
        return {"draft_lengths": self.size}

    def round_record(self, accepted: int) -> tuple[int, list[int], int, str]:
        """A lookup draft's tokens all, a latent draft's the drafter's own (its lookup continuation says nothing of
        the drafter, which on-policy training judges)."""
        drafted = list(self.tokens) if self.source == "lookup" else self.tokens[: self.latent_tokens]
        return self.start, drafted, min(accepted, len(drafted)), self.source


@dataclass
class TreeDraft(Draft):
    """A token tree: tree, the candidate tree; lead_token: the drafter's likeliest token below the root (None: the
    drafter was not called); drafted_alone: the drafter was called where lookup hung no branch, so the pass
    measures it alone."""

    tree: TokenTree
    lead_token: int | None = None
    drafted_alone: bool = False

    @property
    def size(self) -> int:
        return len(self.tree) - 1

    def source_of(self, node: int) -> str:
        return "root" if node == 0 else self.tree.nodes[node].source

    def parent_of(self, node: int) -> int:
        return self.tree.nodes[node].parent

    def step_sources(self) -> set[str]:
        """Every source among the tree's nodes."""
        return {node.source for node in self.tree.nodes[1:]}

    def shape(self, accepted: list[int]) -> dict[str, int]:
        rank = max((self.tree.sibling_rank(i) for i in accepted), default=-1)
        return {"tree_nodes": self.size, "tree_drafter_calls": self.calls, "tree_branch_ranks": rank}


def eos_token_ids(generation_config) -> set[int]:
    """The end-of-sequence ids generate prepared for this call (`_eos_token_tensor`), as a set; empty when none."""
    eos = getattr(generation_config, "_eos_token_tensor", None)
    return set(eos.flatten().tolist()) if eos is not None else set()


def cut_at_eos(tokens: list[int], eos_ids: set[int]) -> list[int]:
    """`tokens` up to and including the first end-of-sequence token: a draft ends where the answer would, since
    nothing after an accepted EOS is ever kept."""
    for i, token in enumerate(tokens):
        if token in eos_ids:
            return tokens[: i + 1]
    return tokens
