"""Tree drafts: lookup continuations and the drafter's top-k, expanded where they are likeliest.

Each node carries `value`, the estimated probability that it ends up on the accepted path: its parent's
value times the calibrated acceptance of the node itself, as `DraftPolicyState` learns it for chains
(per readout-confidence bin for latent tokens, per matched n-gram length and position in the copied span for
lookup tokens).

* **Lookup**: the continuations after several earlier occurrences of the current suffix n-gram
  (`NgramIndex.continuations`), hung below the root as chains, each token valued by the acceptance learned for
  its n-gram length and position in the copied span; the k-th continuation's values are halved k times, as later
  occurrences are less likely to repeat.
* **Latent** (EAGLE-2's dynamic expansion): the drafter's readout top-k below the root; then, level by
  level, the `beam` likeliest nodes of the new depth, lookup nodes among them, are fed to the drafter side by
  side in one call (each attends to the teacher-forced cache and its own ancestors: a tree mask on the
  drafter's cache), and their top-k become the next level. Below a lookup node the drafter's guesses are
  siblings of the lookup branch's next token, for where that branch breaks off. Expansion stops at the depth
  budget, when no new node is worth `min_value`, or (cost model on) when no further level promises more tokens
  per second than the tree as it is, its drafter calls priced (`cost.drafting_pays`).

* **Suffix memory** (`suffix_memory`): what the drafter's earlier outputs (and this one's) continued the current
  suffix with (a context of at least `MEMORY_MIN_CONTEXT` tokens), most frequent first, expanded best first by
  calibrated value (`add_memory_branches`).

* **Lookup after latent** (hybrid): the likeliest latent leaves are continued by lookup from their own path
  (`NgramIndex.lookup(after=path)`), as chain drafts are.

Identical tokens under the same parent merge, so lookup and latent proposals that agree share nodes and
those that disagree become sibling branches. `cost.choose_nodes` then keeps the part of the tree the
latency profile pays for.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from itertools import accumulate
from operator import mul
from typing import NamedTuple

import torch

from .context import DrafterContext
from .cost import drafting_pays, latent_levels_below
from .draft import cut_at_eos
from .lookup import NgramIndex
from .memory import Counts, SuffixMemory
from .policy import DraftPolicyState
from .tree import TokenTree, window_mask

LOOKUP_RANK_DECAY = 0.5
MEMORY_CHILDREN = 4  # suffix memory: the most frequent continuations considered below each node
# suffix memory: the shortest matched context drafted from. What followed one token in other answers is a weak guess:
# on a workload of repeated extractions a one-token context's most frequent continuation was the next token about one
# time in five, of a context of four tokens or more about three times in four.
MEMORY_MIN_CONTEXT = 2


class Expansion(NamedTuple):
    """What growing the latent branches spent and proposed first."""

    calls: int  # drafter forwards (the catch-up that reads out the first level, then one per expanded level)
    lead_token: int  # the drafter's likeliest token below the root (`DraftPolicyState.latent_lead` learns from it)


class LatentBranches:
    """The drafter's side of one tree generate call: its teacher-forced context (`DrafterContext`: the cache,
    kept in step with the accepted sequence, bounded by `window` on the first catch-up) and the tree expansion.
    """

    def __init__(self, drafter, max_capacity: int | None = None, window: int | None = None) -> None:
        self.drafter = drafter
        self.context = DrafterContext(drafter, max_capacity=max_capacity, window=window)

    def observe(self, hidden_states: tuple, keep: slice | list[int]) -> None:
        """The accepted positions `keep` of a target pass's `hidden_states` (`DrafterContext.observe_pass`)."""
        self.context.observe_pass(hidden_states, keep)

    @torch.no_grad()
    def expand(
        self,
        tree: TokenTree,
        input_ids: torch.LongTensor,
        *,
        max_depth: int,
        topk: int,
        beam: int,
        min_value: float,
        policy: DraftPolicyState,
        eos_ids: set[int],
        max_nodes: int,
        cost_aware: bool = True,
        verify_time: Callable[[int], float] | None = None,
    ) -> Expansion:
        """Grow latent branches below the root of `tree`; returns the drafter calls made and the lead token.

        With `cost_aware`, a level is expanded only while drafting it (and the levels it leads to, each node's
        children assumed as likely as the node itself) promises more tokens per second than verifying the tree
        as it is, with every drafter call priced (`cost.drafting_pays`, at most `max_nodes` verified), a pass of k
        tokens at `verify_time(k)` (default `policy.verify_time`).
        """
        verify_time = policy.verify_time if verify_time is None else verify_time
        drafter = self.drafter
        vocab_ids = drafter.draft_vocab_ids
        device = input_ids.device
        root_position = input_ids.shape[1] - 1
        frontier = [0]
        frontier_states = self.context.catch_up(input_ids)[0]  # (b, H)
        spec_nodes: list[int] = []  # tree node held by each speculative drafter cache entry, in order
        calls, lead_token = 1, -1
        for level in range(max_depth):
            probs = drafter.readout_logits(frontier_states).float().softmax(-1)
            top = probs.topk(min(topk, probs.shape[-1]), dim=-1)
            confs, tokens_of = top.values.tolist(), vocab_ids[top.indices].tolist()  # one device sync per level
            if level == 0:
                lead_token = tokens_of[0][0]
            for row, node in enumerate(frontier):
                for conf, token in zip(confs[row], tokens_of[row]):
                    value = tree.nodes[node].value * policy.latent_rate(conf).value
                    tree.add(node, token, value, "latent", confidence=conf)
            if level + 1 == max_depth:
                break
            # every child of the frontier competes for the beam, lookup nodes included: the drafter's guesses
            # below a lookup token are what the tree has where that lookup branch breaks off
            children = {child for node in frontier for child in tree.children[node].values()}
            ranked = sorted(children, key=lambda i: (-tree.nodes[i].value, i))
            nxt = [i for i in ranked if tree.nodes[i].token not in eos_ids and tree.nodes[i].value >= min_value]
            nxt = nxt[:beam]
            if not nxt:
                break
            if cost_aware:
                values = [node.value for node in tree.nodes[1:]]
                levels = latent_levels_below(tree, nxt, max_depth - level - 1, policy.latent_lead.value)
                if not drafting_pays(values, levels, verify_time, policy.draft_step_time(), calls, max_nodes):
                    break
            parent_rows = [frontier.index(tree.nodes[i].parent) for i in nxt]
            tokens = torch.tensor([[tree.nodes[i].token for i in nxt]], dtype=torch.long, device=device)
            positions = torch.tensor([[root_position + tree.nodes[i].depth for i in nxt]], device=device)
            mask_fn = self._mask_fn(tree, spec_nodes, nxt, root_position, device)
            started = time.perf_counter()
            out = self.context.step(frontier_states[parent_rows].unsqueeze(0), tokens, positions, mask_fn=mask_fn)
            policy.observe_draft_step(time.perf_counter() - started)
            calls += 1
            spec_nodes.extend(nxt)
            frontier, frontier_states = nxt, out[0]
        return Expansion(calls, lead_token)

    def _mask_fn(self, tree: TokenTree, spec_nodes: list[int], new: list[int], root_position: int, device):
        """Masks for new nodes over [teacher-forced entries | speculative entries | the new nodes themselves];
        keys at their absolute positions (the teacher-forced ones start after the context's offset)."""
        forced = self.context.teacher_forced
        allowed = torch.zeros(len(new), forced + len(spec_nodes) + len(new), dtype=torch.bool)
        allowed[:, :forced] = True
        for row, node in enumerate(new):
            ancestors = set(tree.path_to(node))
            for col, spec in enumerate(spec_nodes):
                allowed[row, forced + col] = spec in ancestors
            allowed[row, forced + len(spec_nodes) + row] = True
        query = torch.tensor([root_position + tree.nodes[i].depth for i in new])
        keys = torch.cat(
            [self.context.key_positions(),
             torch.tensor([root_position + tree.nodes[i].depth for i in spec_nodes + new], dtype=torch.long)]
        )
        allowed, query, keys = allowed.to(device), query.to(device), keys.to(device)
        return lambda window: window_mask(allowed, query, keys, window)


def add_lookup_branches(
    tree: TokenTree,
    continuations: list[tuple[list[int], int]],
    *,
    min_ngram: int,
    policy: DraftPolicyState,
    eos_ids: set[int],
    max_ngram: int | None = None,
) -> None:
    """Hang the `continuations` (`NgramIndex.continuations`: tokens and matched n, longest n first) whose n is in
    min_ngram..max_ngram below the root; a continuation's rank (its value's decay) is its place in the list."""
    for rank, (tokens, ngram) in enumerate(continuations):
        if ngram < min_ngram or (max_ngram is not None and ngram > max_ngram):
            continue
        tokens = cut_at_eos(tokens, eos_ids)
        values = [v * LOOKUP_RANK_DECAY**rank for v in accumulate(policy.lookup_probs(ngram, len(tokens)), mul)]
        tree.add_path(0, tokens, values, "lookup", ngram=ngram)


def add_lookup_after_latent(
    tree: TokenTree,
    index: NgramIndex,
    *,
    max_depth: int,
    leaves: int,
    min_ngram: int,
    policy: DraftPolicyState,
    eos_ids: set[int],
) -> None:
    """Continue the `leaves` likeliest latent leaves with what followed the latest earlier occurrence of the
    n-gram their path ends with; a copied node's value is its leaf's times the n-gram's acceptance per token."""
    tips = [i for i, node in enumerate(tree.nodes)
            if node.source == "latent" and not tree.children[i] and node.depth < max_depth and node.token not in eos_ids]
    for tip in sorted(tips, key=lambda i: (-tree.nodes[i].value, i))[:leaves]:
        path = [tree.nodes[i].token for i in tree.path_to(tip)]
        tokens, ngram = index.lookup(max_depth - tree.nodes[tip].depth, after=path)
        if not tokens or ngram < min_ngram:
            continue
        tokens = cut_at_eos(tokens, eos_ids)
        base = tree.nodes[tip].value
        values = [base * v for v in accumulate(policy.lookup_probs(ngram, len(tokens)), mul)]
        tree.add_path(tip, tokens, values, "lookup", ngram=ngram)



def add_memory_branches(
    tree: TokenTree,
    memory: SuffixMemory,
    tail: list[int],
    *,
    max_depth: int,
    max_nodes: int,
    min_value: float,
    policy: DraftPolicyState,
    eos_ids: set[int],
    exclude: Counts | None = None,
    min_context: int = MEMORY_MIN_CONTEXT,
) -> int:
    """Hang what the suffix memory saw most often after the sequence's `tail` (its last tokens) below the root,
    best first (SuffixDecoding's frequency-weighted speculation tree): a continuation's value is its parent's times
    the acceptance calibrated for its share of its context's count and the context's length
    (`DraftPolicyState.memory_rate`), and each added
    node is matched again with its own path appended. At most `max_nodes` nodes, `max_depth` deep, none below
    `min_value` or below an EOS token, none from a context shorter than `min_context` tokens; `exclude`: the
    sequence's own counts, left out (`SuffixMemory.continuations`). Returns the nodes added."""
    heap: list[tuple[float, int, int, list[int], int, float, int]] = []
    order = 0  # ties: first proposed first

    def push(parent: int, path: list[int]) -> None:
        nonlocal order
        counts, context = memory.continuations(tail + path, exclude)
        if context < min_context:
            return
        total = sum(counts.values()) + 1  # one unseen continuation: a token seen once after its context is worth 1/2
        base = tree.nodes[parent].value
        for token, count in sorted(counts.items(), key=lambda kv: -kv[1])[:MEMORY_CHILDREN]:
            share = count / total
            value = base * policy.memory_rate(share, context).value
            if value >= min_value:
                heapq.heappush(heap, (-value, order, parent, path + [token], token, share, context))
                order += 1

    push(0, [])
    added = 0
    while heap and added < max_nodes:
        negative, _, parent, path, token, share, context = heapq.heappop(heap)
        node = tree.add(parent, token, -negative, "memory", confidence=share, ngram=context)
        added += 1
        if len(path) < max_depth and token not in eos_ids:
            push(node, path)
    return added
