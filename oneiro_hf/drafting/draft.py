"""What one drafting round proposes for verification, and where a draft ends at EOS.

A draft is a `TokenTree` below the last accepted token: node 0 is that token (the root), the others are the
candidates. A chain (`chain=True`, what `oneiro_tree=False` verifies) is a tree of one path: its token j is node
j + 1 and its parent is node j. Statistics (`DraftStats.record_round`) and whatever else judges a round read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .tree import TokenTree

if TYPE_CHECKING:  # annotations only
    import torch


@dataclass
class Draft:
    """One round's proposal: tree, the candidates; calls, drafter forwards spent (what a pinned profile prices);
    seconds, wall time spent drafting; lead_token, the drafter's likeliest token below the root (None: the drafter
    was not called); drafter_nodes, the nodes the drafter's call added and those hanging below them (what the
    tree would lack without the call); chain, the tree is one path verified as a chain; start, the sequence length
    when drafting began (the position of the first drafted token)."""

    tree: TokenTree
    calls: int = 0
    seconds: float = 0.0
    lead_token: int | None = None
    drafter_nodes: frozenset[int] = frozenset()
    chain: bool = False
    start: int = 0

    @property
    def size(self) -> int:
        """Tokens the target judges (the root not counted)."""
        return len(self.tree) - 1

    def source_of(self, node: int) -> str:
        """"latent", "lookup" or "memory"; "root" for node 0."""
        return "root" if node == 0 else self.tree.nodes[node].source

    def parent_of(self, node: int) -> int:
        return self.tree.nodes[node].parent

    def tokens(self) -> list[int]:
        """The candidates' tokens in node order (a chain's, in order)."""
        return [node.token for node in self.tree.nodes[1:]]

    def step_sources(self) -> set[str]:
        """The sources a round counts as a step of: a chain's first token's (lookup continuing the drafter's tokens
        is an extension, not a lookup step), every source of a tree's nodes."""
        if self.chain:
            return {self.source_of(1)} if self.size else set()
        return {node.source for node in self.tree.nodes[1:]}

    def drafter_gain(self, accepted: list[int], kept: int) -> int:
        """Tokens of the `kept` a pass yielded that it would not have yielded without the drafter's nodes: from the
        first accepted drafter node on, less one (without it, the pass would have stopped there and yielded the
        target's token in its place). `accepted`: the accepted node indices, root's child first."""
        first = next((j for j, node in enumerate(accepted) if node in self.drafter_nodes), None)
        return 0 if first is None else kept - 1 - first

    def extended(self) -> bool:
        """Whether lookup continued a latent token somewhere in the draft (hybrid's lookup after latent)."""
        return any(self.source_of(i) == "lookup" and self.source_of(self.parent_of(i)) == "latent"
                   for i in range(1, self.size + 1))

    def shape(self, accepted: list[int]) -> dict[str, int]:
        """The `DraftStats` lists a round adds to: a chain's length; a tree's nodes, calls and highest accepted
        sibling rank (-1: none accepted)."""
        if self.chain:
            return {"draft_lengths": self.size}
        rank = max((self.tree.sibling_rank(i) for i in accepted), default=-1)
        return {"tree_nodes": self.size, "tree_drafter_calls": self.calls, "tree_branch_ranks": rank}

    def round_record(self, accepted: int) -> tuple[int, list[int], int, str] | None:
        """A chain's round as on-policy training reads it (`DraftRound` fields): a lookup draft's tokens all, a
        latent draft's the drafter's own (its lookup continuation says nothing of the drafter). None for trees."""
        if not self.chain or not self.size:
            return None
        source, tokens = self.source_of(1), self.tokens()
        if source == "latent":
            tokens = tokens[: next((j for j in range(self.size) if self.source_of(j + 1) != "latent"), self.size)]
        return self.start, tokens, min(accepted, len(tokens)), source


@dataclass
class Verdict:
    """The outcome of one tree pass: accepted nodes (root excluded) and the tokens it yields."""

    path: list[int]  # node indices of accepted tokens, root's child first
    tokens: list[int]  # the tokens of `path`, then the bonus token
    scores: list[torch.Tensor]  # (1, V) processed scores each token was chosen from, in order


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
