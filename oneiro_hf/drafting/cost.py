"""How large a tree pays: the cost model of chains, applied to trees.

Verifying n candidate nodes (plus the root) costs t(n + 1); the expected number of tokens the pass yields
is 1 + the sum of the nodes' values (each value estimates P(node on the accepted path); siblings exclude
each other, so the sum over a tree is the expected accepted length). Nodes are taken likeliest first,
which keeps every prefix a tree (a child is never likelier than its parent), and the count n maximises

    (1 + sum of the n best values) / t(n + 1),

n = 0 (a plain one-token step) included. A CPU whose t(4) jumps gets a few nodes; a flat GPU profile
(t(16) = 1.17 t(1) on an H200, docs/gpu.md) keeps every node worth a few percent.

Drafting is priced the same way before it happens (`drafting_pays`): a drafter call (each latent level is one)
is made only if the nodes it is expected to add (`latent_levels_below_root`, `latent_levels_below`) raise the
best tokens-per-second over the pass plus its calls above what the tree as it is offers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .policy import pass_rates
from .tree import TokenTree


def choose_nodes(tree: TokenTree, verify_time: Callable[[int], float] | None, max_nodes: int) -> list[int]:
    """The node indices (root excluded) to verify: the best prefix by value, at most `max_nodes`.

    `verify_time(k)` is the seconds (or any unit) of a k-token pass; None keeps `max_nodes` nodes (cost model off).
    """
    order = sorted(range(1, len(tree)), key=lambda i: (-tree.nodes[i].value, i))[: max(0, int(max_nodes))]
    if verify_time is None:
        return order
    rates = pass_rates([[tree.nodes[i].value for i in order]], verify_time, lambda _: 0.0)
    return order[: max(range(len(rates)), key=rates.__getitem__)]


def choose_path(tree: TokenTree, verify_time: Callable[[int], float] | None, max_nodes: int) -> list[int]:
    """A chain's nodes: the root-to-leaf path, cut to its best prefix of at most `max_nodes`, that promises the most
    tokens per unit time (`verify_time` None: the most expected tokens, uncut), ties to the earlier leaf. Values fall along a
    path, so the nodes come likeliest first, as `choose_nodes` gives them. Empty where no draft beats a plain step."""
    best: tuple[float, list[int]] = (float("-inf"), [])
    for leaf in range(1, len(tree)):
        if tree.children[leaf]:
            continue
        path = tree.path_to(leaf)[: max(0, int(max_nodes))]
        values = [tree.nodes[i].value for i in path]
        if verify_time is None:
            rate, n = sum(values), len(path)
        else:
            rates = pass_rates([values], verify_time, lambda _: 0.0)
            n = max(range(len(rates)), key=rates.__getitem__)
            rate = rates[n]
        if rate > best[0]:
            best = (rate, path[:n])
    return best[1]


def choose_width(rows: Sequence[Sequence[float]], verify_time: Callable[[int], float] | None, max_nodes: int) -> int:
    """The candidate nodes per row (root excluded) of one batched pass: every row's tree is cut to its best n nodes,
    the pass padded to n + 1 tokens per row. rows: each row's node values, likeliest first; verify_time(k): a pass
    of k tokens per row for this batch (t(k, B)); None keeps up to `max_nodes`. 0 is a plain batched step."""
    cap = max(0, int(max_nodes))
    rows = [list(values)[:cap] for values in rows]
    width = max((len(values) for values in rows), default=0)
    if verify_time is None:
        return width
    rates = pass_rates(rows, verify_time, lambda _: 0.0)
    return max(range(len(rates)), key=rates.__getitem__)


def drafting_pays(
    values: Sequence[float],
    levels: Sequence[Sequence[float]],
    verify_time: Callable[[int], float],
    call_time: float,
    sunk_calls: int,
    max_nodes: int,
) -> bool:
    """Whether more drafter calls promise more tokens per unit time than verifying the tree as it is.

    values: the tree's node values now; levels[d]: the values the (d+1)-th further call is expected to add (one call
    per level); call_time: one drafter call in verify_time's unit; sunk_calls: calls already made for this pass
    (charged to every choice). Drafting d = 1..len(levels) more levels is compared with stopping now, each choice
    verifying its best nodes (at most `max_nodes`), so a level that only pays with the next one behind it (a CPU
    whose t(4) is below t(2)) is still drafted.
    """
    cap = max(0, int(max_nodes))
    best = sorted(values, reverse=True)[:cap]
    stop = max(pass_rates([best], verify_time, lambda _: sunk_calls * call_time))
    pool = list(values)
    for d, level in enumerate(levels, start=1):
        pool.extend(level)
        best = sorted(pool, reverse=True)[:cap]
        if max(pass_rates([best], verify_time, lambda _, d=d: (sunk_calls + d) * call_time)) > stop:
            return True
    return False


def latent_levels_below_root(tree: TokenTree, lead_rate: float, depth: int) -> list[list[float]]:
    """What a latent branch is expected to add before the drafter is called: one new token per level, the first
    accepted with `lead_rate` where the root's other children are wrong (so a confident lookup branch leaves
    little to gain), each further one as often as the first."""
    left = open_share(tree, 0)
    return [[left * lead_rate ** (d + 1)] for d in range(max(0, depth))]


def open_share(tree: TokenTree, node: int) -> float:
    """The share of `node`'s probability that its children in the tree do not cover (siblings exclude each other,
    so their values add up): what a new child below it can still win."""
    value = tree.nodes[node].value
    if value <= 0:
        return 0.0
    return max(0.0, 1.0 - sum(tree.nodes[c].value for c in tree.children[node].values()) / value)


def latent_levels_below(tree: TokenTree, nodes: Sequence[int], depth: int, lead_rate: float) -> list[list[float]]:
    """What expanding `nodes` for `depth` more levels is expected to add: below each node one token per level,
    counted where the node's existing children (a lookup branch going on below it) are wrong.

    Below a latent node each is accepted as often as the node itself was against its parent (the chain's
    look-ahead); below a lookup node with `lead_rate`, how often the drafter's likeliest token is right."""
    levels: list[list[float]] = [[] for _ in range(max(0, depth))]
    for i in nodes:
        node = tree.nodes[i]
        value, parent = node.value, tree.nodes[node.parent].value
        rate = (value / parent if parent > 0 else 0.0) if node.source == "latent" else lead_rate
        value *= open_share(tree, i)  # what its existing children (a lookup branch going on) leave open
        for d in range(len(levels)):
            value *= rate
            levels[d].append(value)
    return levels
