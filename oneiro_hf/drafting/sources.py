"""Where draft branches come from: the `DraftSource` interface and the three sources a sequence drafts from.

A source hangs branches in one round's token tree (`propose`), reads what a verified pass accepted (`observe`) and
learns from the verdict on a tree it helped build (`learn`). `SequenceEngine` (`engine.py`) asks its sources in a
fixed order each round, then keeps what the cost model pays for:

    LookupSource (long matches)   prompt lookup: what followed earlier occurrences of the sequence's suffix n-gram
    EarlyMemory                   the suffix memory's confident branches (calibrated value >= MEMORY_EARLY_VALUE)
    LatentSource                  the drafter's top-k, level by level, when a call pays (and, hybrid, lookup after it)
    LookupSource (short matches)  shorter n-grams, filling what is left after the drafter's turn
    MemorySource                  the suffix memory: what earlier outputs continued the suffix with, most often first

Later sources see the earlier ones' nodes: lookup's and the memory's confident branches can talk the drafter out of a
call that would not pay (where they already hold the next tokens), while fillers and the memory's doubtful branches,
added after the drafter's turn, never do. A new kind of draft (a
retrieval store, another engine's proposer) is one more class with these three methods in that list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import torch

from .build import LatentBranches, add_lookup_after_latent, add_lookup_branches, add_memory_branches
from .cost import drafting_pays, latent_levels_below_root
from .draft import Draft, Verdict
from .lookup import NgramIndex
from .memory import Counts, MemoryDocument, SuffixMemory
from .policy import DraftPolicyState
from .tree import TokenTree
from .view import EngineView

VerifyTime = Callable[[int], float]
# suffix-memory nodes at least this likely (calibrated) go in before the drafter's turn and can save its call; less
# likely ones only fill what is left after it, as they would otherwise talk the drafter out of calls that pay
MEMORY_EARLY_VALUE = 0.5
# a tree's suffix-memory branches reach this many times `tree_max_depth` tokens at most
MEMORY_DEPTH = 2


@dataclass
class DraftRound:
    """One drafting round of one sequence, as its sources see it and write back to it."""

    input_ids: torch.LongTensor  # (1, T): the sequence, no padding; its last token is the tree's root
    depth: int  # tokens per branch at most this round (the settings' depth, cut to what max_length leaves)
    room: int  # tokens the sequence may still grow by before max_length (after the root)
    verify_time: VerifyTime  # seconds of this sequence's share of a pass verifying k tokens
    index: NgramIndex  # the sequence's tokens so far, n-gram indexed
    calls: int = 0  # drafter forwards made this round
    lead_token: int | None = None  # the drafter's likeliest first token (None: not called)
    drafter_nodes: range = range(0)  # the tree's nodes the drafter's turn added (empty: it was not called)
    lookup_branches: int = 0  # how many different continuations lookup keeps (the settings' `lookup_branches`)

    @cached_property
    def continuations(self) -> list[tuple[list[int], int]]:
        """Lookup's continuations of the suffix (`NgramIndex.continuations`), found once per round: both lookup
        sources (long and short matches) take theirs from this one list, each its own n-gram range."""
        return self.index.continuations(self.depth, self.lookup_branches) if self.depth > 0 else []


class DraftSource(Protocol):
    """What proposes branches for one sequence: lookup, the suffix memory, the latent drafter, or a new kind."""

    def observe(self, hidden_states: tuple, keep: slice | list[int]) -> None:
        """The accepted positions `keep` of a verified pass's `hidden_states` (entries (1, n, H))."""

    def propose(self, tree: TokenTree, draft_round: DraftRound) -> None:
        """Hang branches below the root of `tree` (nodes valued by their calibrated acceptance)."""

    def learn(self, draft: Draft, verdict: Verdict, kept: int) -> None:
        """What the verdict on `draft`'s tree says to this source (`kept` tokens were taken)."""


class LookupSource:
    """Prompt lookup's branches: continuations whose matched n-gram is in `min_ngram..max_ngram`."""

    def __init__(self, settings: EngineView, policy: DraftPolicyState, eos_ids: set[int], *, min_ngram: int,
                 max_ngram: int | None = None) -> None:
        self.settings, self.policy, self.eos_ids = settings, policy, eos_ids
        self.min_ngram, self.max_ngram = min_ngram, max_ngram

    def observe(self, hidden_states: tuple, keep: slice | list[int]) -> None:
        """Nothing: lookup reads the sequence's tokens (`DraftRound.index`), not the target's states."""

    def propose(self, tree: TokenTree, draft_round: DraftRound) -> None:
        add_lookup_branches(tree, draft_round.continuations, min_ngram=self.min_ngram, max_ngram=self.max_ngram, policy=self.policy,
                            eos_ids=self.eos_ids)

    def learn(self, draft: Draft, verdict: Verdict, kept: int) -> None:
        """Nothing beyond the calibration every node gets (`engine.calibrate`)."""


class LatentSource:
    """The drafter's branches, grown when a call pays (`Backoff.admit`, `cost.drafting_pays`); hybrid mode continues
    its likeliest leaves with lookup from their own path."""

    def __init__(self, drafter, settings: EngineView, policy: DraftPolicyState, eos_ids: set[int],
                 capacity: int) -> None:
        self.settings, self.policy, self.eos_ids = settings, policy, eos_ids
        self.branches = LatentBranches(drafter, capacity, settings.context_window)

    def observe(self, hidden_states: tuple, keep: slice | list[int]) -> None:
        self.branches.observe(hidden_states, keep)

    def propose(self, tree: TokenTree, draft_round: DraftRound) -> None:
        settings, policy, depth = self.settings, self.policy, draft_round.depth
        before = len(tree)
        if depth <= 0:
            return
        if not policy.backoff.admit(settings.cost_aware, lambda: self._pays(tree, depth, draft_round.verify_time)):
            return
        calls, lead = self.branches.expand(
            tree, draft_round.input_ids, max_depth=depth, topk=settings.topk, beam=settings.beam,
            min_value=settings.min_value, policy=policy, eos_ids=self.eos_ids, max_nodes=settings.max_nodes,
            cost_aware=settings.cost_aware, verify_time=draft_round.verify_time,
        )
        draft_round.calls, draft_round.lead_token = draft_round.calls + calls, lead
        if settings.mode == "hybrid" and settings.lookup_after_latent:
            add_lookup_after_latent(tree, draft_round.index, max_depth=depth, leaves=settings.beam,
                                    min_ngram=settings.lookup_min_ngram, policy=policy, eos_ids=self.eos_ids)
        draft_round.drafter_nodes = range(before, len(tree))

    def _pays(self, tree: TokenTree, depth: int, verify_time: VerifyTime) -> bool:
        """Whether a call beside the branches already in `tree` pays (asked by the back-off, `Backoff.admit`, only
        when the drafter is not losing time overall and no retry is due).

        Where no branch hangs yet it does: the first readout's confidence then decides how far to draft, which an
        average acceptance cannot see. Beside lookup branches a latent branch must promise more tokens per second
        than the lookup tree alone, its calls priced (`cost.drafting_pays`; where lookup is confident little is left
        to gain, so a CPU whose drafter call costs a tenth of a pass skips it).
        """
        if len(tree) == 1:
            return True
        policy = self.policy
        levels = latent_levels_below_root(tree, policy.latent_lead.value, depth)
        values = [node.value for node in tree.nodes[1:]]
        return drafting_pays(values, levels, verify_time, policy.draft_step_time(), 0, self.settings.max_nodes)

    def learn(self, draft: Draft, verdict: Verdict, kept: int) -> None:
        """The lead token's hit rate (`latent_lead`); the drafter's price is learned by the engine, which knows
        the pass's time."""
        if draft.lead_token is not None:
            self.policy.latent_lead.add(verdict.tokens[0] == draft.lead_token)


class MemorySource:
    """The suffix memory's branches, and this sequence's document in it: the prompt (and each new token) written
    at the round's start, the kept tokens after each verdict. The sequence's own counts are left out of its drafts,
    since what it wrote is prompt lookup's."""

    def __init__(self, memory: SuffixMemory, settings: EngineView, policy: DraftPolicyState,
                 eos_ids: set[int]) -> None:
        self.memory, self.settings, self.policy, self.eos_ids = memory, settings, policy, eos_ids
        self.document: MemoryDocument | None = None  # opened at the first round
        self.written = 0  # the sequence's tokens the document holds
        self.own: Counts = {}

    def observe(self, hidden_states: tuple, keep: slice | list[int]) -> None:
        """Nothing: the memory keeps tokens, written at `propose` and `learn`."""

    def propose(self, tree: TokenTree, draft_round: DraftRound) -> None:
        self.add_branches(tree, draft_round, self.settings.min_value)

    def add_branches(self, tree: TokenTree, draft_round: DraftRound, min_value: float) -> None:
        """The memory's branches worth at least `min_value`, after writing what the sequence added. A tree's
        memory branches may run deeper than its other branches: a long match that holds is worth it (the cost
        model keeps a deep node only where its calibrated value pays for its place in the pass)."""
        self._remember(draft_round.input_ids)
        if draft_round.depth > 0:
            settings = self.settings
            depth = draft_round.depth if settings.chain else min(MEMORY_DEPTH * settings.max_depth, draft_round.room)
            add_memory_branches(tree, self.memory, draft_round.index.tokens[-self.memory.max_context:], max_depth=depth,
                                max_nodes=settings.max_nodes, min_value=min_value, policy=self.policy,
                                eos_ids=self.eos_ids, exclude=self.own)

    def _remember(self, input_ids: torch.LongTensor) -> None:
        """Write the sequence's tokens the memory does not hold yet: at the first round the prompt (and the first
        new token) opens this sequence's document; later ones are normally written by `learn` already."""
        if self.document is None:
            prompt = input_ids[0].tolist()
            self.document = self.memory.open(prompt[:-1], learn_prompt=self.settings.memory_prompts, own=self.own)
            self.written = len(prompt) - 1
        new = input_ids[0, self.written:].tolist()
        if new:
            self.memory.extend(self.document, new, self.own)
            self.written += len(new)

    def learn(self, draft: Draft, verdict: Verdict, kept: int) -> None:
        """The kept tokens, so that the last ones of a sequence are remembered too."""
        if self.document is not None:
            self.memory.extend(self.document, verdict.tokens[:kept], self.own)
            self.written += kept


class EarlyMemory:
    """The memory's confident branches, asked before the drafter's turn so that its call is priced beside them (and
    skipped where the memory already holds the next tokens); the memory itself (`MemorySource`) writes and learns."""

    def __init__(self, memory: MemorySource) -> None:
        self.memory = memory

    def observe(self, hidden_states: tuple, keep: slice | list[int]) -> None:
        """Nothing: see `MemorySource`."""

    def propose(self, tree: TokenTree, draft_round: DraftRound) -> None:
        self.memory.add_branches(tree, draft_round, max(self.memory.settings.min_value, MEMORY_EARLY_VALUE))

    def learn(self, draft: Draft, verdict: Verdict, kept: int) -> None:
        """Nothing: `MemorySource.learn` writes the kept tokens once."""
