"""A token tree of candidate continuations, flattened for one target pass.

Node 0 is the root: the last accepted token x_{T-1}, at position T-1, whose key/value the target's cache
does not hold yet (as in transformers' assisted loop, it is fed again with the drafts). Every other node
is a candidate token; its parent precedes it in node order, so the node order is already a valid
flattening (a topological order). A node at depth d sits at position T-1+d.

Attention inside the flattened tree: node i sees node j iff j is i or one of i's ancestors. Everything in
the cache precedes the root, so every node sees it, limited only by a layer's sliding window (a key at
position k is visible from a query at position q iff q - window < k <= q, transformers' rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class TreeNode:
    """One candidate token: where it hangs, how likely it is to be accepted, and where it came from."""

    token: int
    parent: int  # node index of the parent (-1 for the root)
    depth: int  # 0 for the root
    value: float  # estimated P(this node is on the accepted path); never above its parent's
    source: str  # "root", "latent", "lookup" or "memory"
    confidence: float = 1.0  # latent: the readout probability of this token; memory: its share of the counts (bin)
    ngram: int = 0  # lookup: the matched n-gram length; memory: its context's count (calibration keys)
    copied: int = 0  # lookup: its position in the copied span, 1 for the first copied token (calibration key)
    rank: int = 0  # 0 for a parent's first child, 1 for its second, ... (insertion order)


@dataclass
class TokenTree:
    """Nodes in insertion order; `children[i]` maps a token to the child of node i that holds it."""

    nodes: list[TreeNode] = field(default_factory=list)
    children: list[dict[int, int]] = field(default_factory=list)

    @classmethod
    def with_root(cls, token: int) -> TokenTree:
        tree = cls()
        tree.nodes.append(TreeNode(int(token), -1, 0, 1.0, "root"))
        tree.children.append({})
        return tree

    def __len__(self) -> int:
        return len(self.nodes)

    def add(
        self, parent: int, token: int, value: float, source: str, confidence: float = 1.0, ngram: int = 0,
        copied: int = 0,
    ) -> int:
        """The child of `parent` holding `token`, created if missing; a repeated proposal keeps the higher value."""
        token = int(token)
        value = min(float(value), self.nodes[parent].value)  # a child is never likelier than its parent
        existing = self.children[parent].get(token)
        if existing is not None:
            node = self.nodes[existing]
            if value > node.value:
                node.value, node.source, node.confidence, node.ngram, node.copied = value, source, confidence, ngram, copied
            return existing
        index = len(self.nodes)
        rank = len(self.children[parent])
        depth = self.nodes[parent].depth + 1
        self.nodes.append(TreeNode(token, parent, depth, value, source, confidence, ngram, copied, rank))
        self.children.append({})
        self.children[parent][token] = index
        return index

    def add_path(self, parent: int, tokens: list[int], values: list[float], source: str, ngram: int = 0) -> list[int]:
        """Hang a chain of tokens below `parent` (a copied span: the j-th is at `copied` position j); returns the node
        index of each."""
        indices = []
        for position, (token, value) in enumerate(zip(tokens, values), start=1):
            parent = self.add(parent, token, value, source, ngram=ngram, copied=position)
            indices.append(parent)
        return indices

    def path_to(self, index: int) -> list[int]:
        """Node indices from the root's first child down to `index` (empty for the root)."""
        path = []
        while index > 0:
            path.append(index)
            index = self.nodes[index].parent
        return path[::-1]

    def below(self, indices: set[int] | range) -> frozenset[int]:
        """`indices` and every node hanging below one of them (node order is topological: one pass)."""
        marked: set[int] = set()
        for i, node in enumerate(self.nodes):
            if i in indices or node.parent in marked:
                marked.add(i)
        return frozenset(marked)

    def sibling_rank(self, index: int) -> int:
        """0 for its parent's likeliest child (by value, ties by node order), 1 for the next, ... (statistics: how
        far down its siblings an accepted node was)."""
        me = self.nodes[index]
        return sum(
            1 for other in self.children[me.parent].values()
            if (self.nodes[other].value, -other) > (me.value, -index)
        )

    def keep(self, indices: list[int]) -> TokenTree:
        """The subtree made of the root and `indices` (each node's ancestors must be among them), in node order."""
        chosen = sorted(set(indices) | {0})
        remap = {old: new for new, old in enumerate(chosen)}
        tree = TokenTree()
        for old in chosen:
            node = self.nodes[old]
            if old and node.parent not in remap:
                raise ValueError(f"node {old} kept without its parent {node.parent}")
            parent = remap[node.parent] if old else -1
            copy = TreeNode(node.token, parent, node.depth, node.value, node.source, node.confidence, node.ngram,
                            node.copied)
            if old:
                copy.rank = len(tree.children[parent])
                tree.children[parent][node.token] = len(tree.nodes)
            tree.nodes.append(copy)
            tree.children.append({})
        return tree

    # ------------------------------------------------------------------ flattening
    def tokens(self, device: torch.device | None = None) -> torch.LongTensor:
        """(1, n) token ids in node order."""
        return torch.tensor([[n.token for n in self.nodes]], dtype=torch.long, device=device)

    def depths(self, device: torch.device | None = None) -> torch.LongTensor:
        """(n,) depth of each node."""
        return torch.tensor([n.depth for n in self.nodes], dtype=torch.long, device=device)

    def position_ids(self, root_position: int, device: torch.device | None = None) -> torch.LongTensor:
        """(1, n) tree position ids: root_position + depth (siblings share a position)."""
        return (self.depths(device) + int(root_position)).unsqueeze(0)

    def ancestors(self, device: torch.device | None = None) -> torch.BoolTensor:
        """(n, n) bool: [i, j] is True iff node j is node i or one of its ancestors."""
        n = len(self.nodes)
        anc = torch.zeros(n, n, dtype=torch.bool)
        for i, node in enumerate(self.nodes):
            if node.parent >= 0:
                anc[i] = anc[node.parent]
            anc[i, i] = True
        return anc.to(device)


def window_mask(
    allowed: torch.BoolTensor, query_positions: torch.LongTensor, key_positions: torch.LongTensor, window: int | None
) -> torch.BoolTensor:
    """`allowed` (q, kv) further limited to a sliding window: key position > query position - window.

    Returns a (1, 1, q, kv) bool mask (True = attend), the layout transformers' attention functions take. Batched:
    allowed (B, q, kv), query_positions (B, q), key_positions (B, kv) -> (B, 1, q, kv).
    """
    if window is not None:
        allowed = allowed & (key_positions.unsqueeze(-2) > query_positions.unsqueeze(-1) - int(window))
    return allowed[None, None] if allowed.dim() == 2 else allowed.unsqueeze(1)
