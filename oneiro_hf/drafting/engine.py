"""`SequenceEngine`: what drafts trees and chains for one sequence of a generate call, and learns from their verdicts.

One per sequence: the batched loop (`generation/loop/decode.py`, which runs a single tree prompt as a batch of one)
holds one per row, the chain's candidate generator (`generation/candidate_generator.py`) one for its prompt. It owns
the sequence's `NgramIndex`, its draft sources (`sources.py`: lookup, the drafter's `LatentSource` with its
teacher-forced context, absent in lookup mode, the suffix memory) and the statistics its rounds go to; the learned policy (`DraftPolicyState`) is the drafter's, shared by every sequence.
The target pass is not its business: `draft` returns a tree, `learn` takes the verdict.

Every price goes through `verify_time`, the seconds of this sequence's share of a pass verifying k tokens: t(k) for
a single sequence, t(k, B) / B for a row of a B-row batch (`DraftPolicyState.batch_verify_time`).
"""

from __future__ import annotations

import torch

from .cost import choose_nodes, choose_path
from .draft import Draft, Verdict
from .lookup import NgramIndex
from .memory import SuffixMemory
from .policy import DraftPolicyState
from .sources import (
    DraftRound,
    DraftSource,
    EarlyMemory,
    LatentSource,
    LookupSource,
    MemorySource,
    VerifyTime,
)
from .stats import DraftStats
from .tree import TokenTree
from .view import EngineView


def calibrate(tree: TokenTree, verdict: Verdict, kept: int, policy: DraftPolicyState) -> None:
    """Every child of the root and of each kept accepted node was tested: feed accepted/rejected to its rate."""
    path = set(verdict.path)
    for parent in [0, *verdict.path[: kept - 1]]:
        for child in tree.children[parent].values():
            node = tree.nodes[child]
            if node.source == "latent":
                rate = policy.latent_rate(node.confidence)
            elif node.source == "memory":
                rate = policy.memory_rate(node.confidence, node.ngram)
            else:
                rate = policy.lookup_rate(node.ngram, node.copied)
            rate.add(child in path)


class SequenceEngine:
    """Tree drafting for one sequence: its tokens (n-gram indexed), its draft sources, its statistics."""

    def __init__(self, drafter, settings: EngineView, policy: DraftPolicyState, stats: DraftStats,
                 eos_ids: set[int], max_length: int, memory: SuffixMemory | None = None) -> None:
        self.settings, self.policy, self.stats, self.eos_ids = settings, policy, stats, eos_ids
        self.max_length = max_length
        self.index = NgramIndex(settings.filler_min_ngram, settings.lookup_max_ngram,
                                keep_occurrences=settings.lookup_branches)
        self.sources: list[DraftSource] = []  # asked in this order each round (`sources.py` says why)
        lookup = settings.mode in ("lookup", "hybrid")
        if lookup:
            self.sources.append(LookupSource(settings, policy, eos_ids, min_ngram=settings.lookup_min_ngram))
        remembered = MemorySource(memory, settings, policy, eos_ids) if memory is not None else None
        if remembered is not None:
            self.sources.append(EarlyMemory(remembered))
        if settings.mode != "lookup":
            # the drafter holds the accepted positions plus `beam` speculative nodes per level, and a draft's levels
            # fit in what is left of max_length: beyond it only the beam's other nodes (none for a chain)
            capacity = max_length + (settings.beam - 1) * settings.max_depth
            self.sources.append(LatentSource(drafter, settings, policy, eos_ids, capacity))
        if lookup and settings.filler_min_ngram < settings.lookup_min_ngram:
            self.sources.append(LookupSource(settings, policy, eos_ids, min_ngram=settings.filler_min_ngram,
                                             max_ngram=settings.lookup_min_ngram - 1))
        if remembered is not None:
            self.sources.append(remembered)

    def observe(self, hidden_states: tuple, keep: slice | list[int]) -> None:
        """The accepted positions `keep` of a target pass's `hidden_states` for this sequence (entries (1, n, H))."""
        for source in self.sources:
            source.observe(hidden_states, keep)

    def draft(self, input_ids: torch.LongTensor, verify_time: VerifyTime, columns: int | None = None) -> Draft:
        """A tree below the last token of input_ids (1, T) (the sequence, no padding): every source's branches,
        cut to the size the cost model pays for. columns: the sequence's length as `max_length` counts it (with a
        batch's left padding; default T)."""
        settings = self.settings
        with self.stats.time("draft") as timer:
            self.index.extend(input_ids[0, len(self.index.tokens):].tolist())
            used = input_ids.shape[1] if columns is None else columns
            depth = min(settings.max_depth, self.max_length - used - 1)
            tree = TokenTree.with_root(int(input_ids[0, -1]))
            draft_round = DraftRound(input_ids, depth, self.max_length - used - 1, verify_time, self.index,
                                     lookup_branches=settings.lookup_branches)
            for source in self.sources:
                source.propose(tree, draft_round)
            choose = choose_path if settings.chain else choose_nodes
            chosen = sorted({0, *choose(tree, verify_time if settings.cost_aware else None, settings.max_nodes)})
            drafter_nodes = {new for new, old in enumerate(chosen) if old in draft_round.drafter_nodes}
            tree = tree.keep(chosen)
        return Draft(tree, draft_round.calls, timer.seconds, draft_round.lead_token, tree.below(drafter_nodes),
                     settings.chain, input_ids.shape[1])

    def learn(self, draft: Draft, verdict: Verdict, kept: int, verify_time: VerifyTime) -> None:
        """Calibration, each source's lesson, the back-off and statistics from one verified round of `kept` tokens
        (the pass's time is learned by the loop, which knows what the pass verified).

        The back-off is taught what the drafter's call added to the pass (`Draft.drafter_gain`): beside lookup or
        memory branches only the tokens its own nodes won and the pass width they took count, so a pass that
        other sources' branches carried neither credits nor blames the drafter beyond its nodes and its call."""
        tree, policy = draft.tree, self.policy
        calibrate(tree, verdict, kept, policy)
        for source in self.sources:
            source.learn(draft, verdict, kept)
        if draft.calls and self.settings.cost_aware:
            policy.observe_drafter(draft.drafter_gain(verdict.path[: kept - 1], kept), len(tree),
                                   len(draft.drafter_nodes), draft.seconds, draft.calls, verify_time)
        # as in chains: the last token a pass yields counts as the target's own
        self.stats.record_round(draft, verdict.path[: kept - 1])
