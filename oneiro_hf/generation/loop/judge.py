"""Judging a verified tree: the accepted root-to-leaf path and the bonus token, greedy or sampled, exactly.

`scores(i)` returns the target's processed scores (1, V) for the token after node i: the logits of node i's
row in the tree pass, after the user's logits processors applied to the prefix that ends at node i. Both
walks start at the root and ask for scores only along the path they take.

Greedy: the target's choice at node i is argmax scores(i); if a child of i holds it the walk moves there,
otherwise that choice is the bonus token. The tokens are exactly plain greedy decoding's.

Sampling (multi-draft speculative sampling with point-mass proposals, as SpecInfer's recursive rejection
over siblings): at node i with target distribution r = softmax(scores(i)) the children's tokens c_1, c_2, ...
are tried in turn. c_k is accepted with probability r(c_k); on rejection r becomes r with c_k removed,
renormalised. If no child is accepted, the bonus token is drawn from the remaining r. By induction over
the siblings, the token leaving node i is distributed exactly as softmax(scores(i)): the first child is
chosen with probability r(c_1); otherwise (probability 1 - r(c_1)) the rest is exactly r conditioned on
"not c_1", and so on. A tree's tokens are proposals, not samples, so no draft distribution q enters.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ...drafting.draft import Verdict
from ...drafting.tree import TokenTree


def greedy_walk(tree: TokenTree, scores: Callable[[int], torch.Tensor]) -> Verdict:
    node, path, tokens, rows = 0, [], [], []
    while True:
        row = scores(node)
        choice = int(row.argmax(-1))
        tokens.append(choice)
        rows.append(row)
        child = tree.children[node].get(choice)
        if child is None:
            return Verdict(path, tokens, rows)
        path.append(child)
        node = child


def sampling_walk(
    tree: TokenTree, scores: Callable[[int], torch.Tensor], generator: torch.Generator | None = None
) -> Verdict:
    node, path, tokens, rows = 0, [], [], []
    while True:
        row = scores(node)
        rows.append(row)
        probs = row.float().softmax(-1)[0].cpu()  # the rejections below read single entries: on the host
        accepted = None
        for token, child in tree.children[node].items():
            mass = float(probs[token])
            if mass <= 0.0:
                continue
            if float(torch.rand((), generator=generator)) < mass:
                accepted = (token, child)
                break
            probs[token] = 0.0
            probs /= probs.sum()
        if accepted is None:
            tokens.append(int(torch.multinomial(probs, 1, generator=generator)))
            return Verdict(path, tokens, rows)
        tokens.append(accepted[0])
        path.append(accepted[1])
        node = accepted[1]
