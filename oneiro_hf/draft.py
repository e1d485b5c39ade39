"""What one drafting round proposes for verification, for chains and trees alike, and where a draft ends at EOS.

A chain draft is a list of tokens after the last accepted one; a tree draft is a `TokenTree` below it. Both are
one `Draft`, so that statistics (`DraftStats.record_round`) and whatever else judges a round read a single type.
Drafted tokens are addressed as a tree's nodes are: node 0 is the last accepted token (the root), a chain's
token j is node j + 1 and its parent is node j.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # annotations only: the tree package is not needed by chains
    from .tree.tree import TokenTree


@dataclass
class Draft:
    """One round's proposal: a chain of tokens (possibly none) or a token tree, and what drafting it cost.

    Chain fields: tokens, the drafted tokens; logits: (1, L, V) the drafting distribution when sampling (point
    masses for lookup), else None; source: "latent", "lookup" or "none", what began the draft; ngram: the matched
    n-gram length of the lookup tokens; confidences: the readout's probability of each latent token;
    latent_tokens: how many leading tokens the drafter proposed (a latent draft's other tokens are the lookup
    continuation of the context with the drafter's tokens appended, hybrid mode); start: the sequence length when
    drafting began (filled when proposed).

    Tree fields: tree, the candidate tree (None for a chain); lead_token: the drafter's likeliest token below the
    root (None: the drafter was not called); drafted_alone: the drafter was called where lookup hung no branch, so
    the pass measures it alone.

    Both: calls, drafter forwards spent (what a pinned profile prices); seconds, wall time spent drafting.
    """

    tokens: list[int] = field(default_factory=list)
    logits: torch.Tensor | None = None
    source: str = "none"
    ngram: int = 0
    confidences: list[float] = field(default_factory=list)
    latent_tokens: int = 0
    calls: int = 0
    seconds: float = 0.0
    start: int = 0
    tree: TokenTree | None = None
    lead_token: int | None = None
    drafted_alone: bool = False

    @property
    def size(self) -> int:
        """How many tokens the round asks the target to judge (a tree's nodes, its root not counted)."""
        return len(self.tree) - 1 if self.tree is not None else len(self.tokens)

    def source_of(self, node: int) -> str:
        """"latent" or "lookup" for drafted node `node` (1..size); "root" for node 0, the last accepted token."""
        if node == 0:
            return "root"
        if self.tree is not None:
            return self.tree.nodes[node].source
        return "latent" if node <= self.latent_tokens else "lookup"

    def parent_of(self, node: int) -> int:
        """The node that drafted node `node` (1..size) continues."""
        return self.tree.nodes[node].parent if self.tree is not None else node - 1

    def step_sources(self) -> set[str]:
        """Which sources the round counts as a step of: a chain the one that began it (its lookup continuation of
        a latent draft is an extension, not a lookup step); a tree every source among its nodes."""
        if self.size == 0:
            return set()
        if self.tree is None:
            return {self.source}
        return {node.source for node in self.tree.nodes[1:]}

    def extended(self) -> bool:
        """Whether lookup continued a latent token somewhere in the draft (hybrid's lookup after latent)."""
        return any(self.source_of(i) == "lookup" and self.source_of(self.parent_of(i)) == "latent"
                   for i in range(1, self.size + 1))

    def round_tokens(self) -> list[int]:
        """A chain's tokens a recorded round (`DraftRound`) holds: a lookup draft's all, a latent draft's the
        drafter's own (its lookup continuation says nothing of the drafter, which on-policy training judges)."""
        return list(self.tokens) if self.source == "lookup" else self.tokens[: self.latent_tokens]


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
