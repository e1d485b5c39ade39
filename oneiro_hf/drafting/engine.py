"""`SequenceDrafter`: what drafts trees and chains for one sequence of a generate call, and learns from their verdicts.

One per sequence: the batched loop (`batch.py`, which runs a single tree prompt as a batch of one) holds one per
row, the chain's candidate generator (`candidate_generator.py`) one for its prompt. It owns the
sequence's `NgramIndex`, the drafter's teacher-forced context (`LatentTreeDrafter`, absent in lookup mode) and the
statistics its rounds go to; the learned policy (`DraftPolicyState`) is the drafter's, shared by every sequence.
The target pass is not its business: `draft` returns a tree, `learn` takes the verdict.

Every price goes through `verify_time`, the seconds of this sequence's share of a pass verifying k tokens: t(k) for
a single sequence, t(k, B) / B for a row of a B-row batch (`DraftPolicyState.batch_verify_time`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..stats import DraftStats
from .build import LatentTreeDrafter, add_lookup_after_latent, add_lookup_branches, add_memory_branches
from .cost import choose_nodes, choose_path, drafting_pays, latent_levels_below_root
from .draft import Draft, Verdict
from .lookup import NgramIndex
from .memory import MAX_CONTEXT, Counts, SuffixMemory
from .policy import DraftPolicyState
from .settings import TreeSettings
from .tree import TokenTree

VerifyTime = Callable[[int], float]
# suffix-memory nodes at least this likely (calibrated) go in before the drafter's turn and can save its call; less
# likely ones only fill what is left after it, as they would otherwise talk the drafter out of calls that pay
MEMORY_EARLY_VALUE = 0.5
# a tree's suffix-memory branches reach this many times `tree_max_depth` tokens at most
MEMORY_DEPTH = 2


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


class SequenceDrafter:
    """Tree drafting for one sequence: its n-gram index, the drafter's context for it, its statistics."""

    def __init__(self, drafter, settings: TreeSettings, policy: DraftPolicyState, stats: DraftStats,
                 eos_ids: set[int], max_length: int, memory: SuffixMemory | None = None) -> None:
        self.settings, self.policy, self.stats, self.eos_ids = settings, policy, stats, eos_ids
        # the drafter's suffix memory (None: off), this sequence's document in it (opened at the first draft) and
        # what the document counted: drafts leave it out, since what the sequence wrote is prompt lookup's
        self.memory, self.document, self.written = memory, None, 0
        self.own: Counts = {}
        self.max_length = max_length
        # the drafter holds the accepted positions plus `beam` speculative nodes per level, and a draft's levels fit
        # in what is left of max_length: beyond it only the beam's other nodes (none for a chain)
        capacity = max_length + (settings.beam - 1) * settings.max_depth
        self.latent = LatentTreeDrafter(drafter, capacity, settings.context_window) if settings.mode != "lookup" else None
        self.index = NgramIndex(settings.filler_min_ngram, settings.lookup_max_ngram,
                                keep_occurrences=settings.lookup_branches)

    def observe(self, hidden_states: tuple, keep: slice | list[int]) -> None:
        """The accepted positions `keep` of a target pass's `hidden_states` for this sequence (entries (1, n, H))."""
        if self.latent is not None:
            self.latent.observe(hidden_states, keep)

    def draft(self, input_ids: torch.LongTensor, verify_time: VerifyTime, columns: int | None = None) -> Draft:
        """A tree below the last token of input_ids (1, T) (the sequence, no padding): lookup and latent branches,
        cut to the size the cost model pays for. columns: the sequence's length as `max_length` counts it (with a
        batch's left padding; default T)."""
        settings, policy = self.settings, self.policy
        with self.stats.time("draft") as timer:
            self.index.extend(input_ids[0, len(self.index.tokens):].tolist())
            self._remember(input_ids)
            used = input_ids.shape[1] if columns is None else columns
            depth = min(settings.max_depth, self.max_length - used - 1)
            tree = TokenTree.with_root(int(input_ids[0, -1]))
            copies: list[tuple[list[int], int]] = []  # earlier occurrences' continuations, longest match first
            if depth > 0 and settings.mode in ("lookup", "hybrid"):
                copies = self.index.continuations(depth, settings.lookup_branches)
            add_lookup_branches(tree, copies, min_ngram=settings.lookup_min_ngram, policy=policy, eos_ids=self.eos_ids)
            # a tree's memory branches may run deeper than its other branches: a long match that holds is worth it (the
            # cost model keeps a deep node only where its calibrated value pays for its place in the pass)
            deep = depth if settings.chain else min(MEMORY_DEPTH * settings.max_depth, self.max_length - used - 1)
            # confident memory branches go in before the drafter's turn, so that its call is priced beside them (where
            # the memory already holds the next tokens the call is skipped); the rest come after it, below
            if depth > 0 and self.memory is not None:
                self._add_memory(tree, deep, max(settings.min_value, MEMORY_EARLY_VALUE))
            alone = len(tree) == 1
            calls, lead = self._draft_latent(tree, input_ids, depth, verify_time)
            # shorter matches only fill nodes left over: added before the drafter's turn, their nodes would raise what
            # verifying the tree without the drafter promises and talk the drafter out of calls that pay
            add_lookup_branches(tree, copies, min_ngram=settings.filler_min_ngram,
                                max_ngram=settings.lookup_min_ngram - 1, policy=policy, eos_ids=self.eos_ids)
            # the less confident memory branches too come after the drafter's turn: they never talk it out of a call
            if depth > 0 and self.memory is not None:
                self._add_memory(tree, deep, settings.min_value)
            choose = choose_path if settings.chain else choose_nodes
            tree = tree.keep(choose(tree, verify_time if settings.cost_aware else None, settings.max_nodes))
        return Draft(tree, calls, timer.seconds, lead, alone and calls > 0, settings.chain, input_ids.shape[1])

    def _add_memory(self, tree: TokenTree, depth: int, min_value: float) -> None:
        """The suffix memory's branches worth at least `min_value` (`build.add_memory_branches`)."""
        add_memory_branches(tree, self.memory, self.index.tokens[-MAX_CONTEXT:], max_depth=depth,
                            max_nodes=self.settings.max_nodes, min_value=min_value, policy=self.policy,
                            eos_ids=self.eos_ids, exclude=self.own)

    def _remember(self, input_ids: torch.LongTensor) -> None:
        """Write the sequence's tokens the memory does not hold yet: at the first draft the prompt (and the first
        new token) opens this sequence's document; later ones are normally written by `learn` already."""
        if self.memory is None:
            return
        if self.document is None:
            prompt = input_ids[0].tolist()
            self.document = self.memory.open(prompt[:-1], learn_prompt=self.settings.memory_prompts, own=self.own)
            self.written = len(prompt) - 1
        new = input_ids[0, self.written:].tolist()
        if new:
            self.memory.extend(self.document, new, self.own)
            self.written += len(new)

    def _draft_latent(self, tree: TokenTree, input_ids: torch.LongTensor, depth: int,
                      verify_time: VerifyTime) -> tuple[int, int | None]:
        """Grow the drafter's branches (and, hybrid, lookup after them) in `tree` when it pays; returns the drafter
        calls made and the drafter's likeliest first token (None when it was not called)."""
        settings, policy = self.settings, self.policy
        if depth <= 0 or self.latent is None:
            return 0, None
        if not policy.backoff.admit(settings.cost_aware, lambda: self._latent_pays(tree, depth, verify_time)):
            return 0, None
        calls, lead = self.latent.expand(
            tree, input_ids, max_depth=depth, topk=settings.topk, beam=settings.beam, min_value=settings.min_value,
            policy=policy, eos_ids=self.eos_ids, max_nodes=settings.max_nodes, cost_aware=settings.cost_aware,
            verify_time=verify_time,
        )
        if settings.mode == "hybrid" and settings.lookup_after_latent:
            add_lookup_after_latent(tree, self.index, max_depth=depth, leaves=settings.beam,
                                    min_ngram=settings.lookup_min_ngram, policy=policy, eos_ids=self.eos_ids)
        return calls, lead

    def _latent_pays(self, tree: TokenTree, depth: int, verify_time: VerifyTime) -> bool:
        """Whether a call beside the lookup branches already in `tree` pays (asked by the back-off, `Backoff.admit`,
        only when the drafter is not losing time overall and no retry is due).

        Where lookup hung no branch it does: the first readout's confidence then decides how far to draft, which
        an average acceptance cannot see. Beside lookup branches a latent branch must promise more tokens per
        second than the lookup tree alone, its calls priced (`cost.drafting_pays`; where lookup is confident little
        is left to gain, so a CPU whose drafter call costs a tenth of a pass skips it).
        """
        if len(tree) == 1:
            return True
        policy = self.policy
        levels = latent_levels_below_root(tree, policy.latent_lead.value, depth)
        values = [node.value for node in tree.nodes[1:]]
        return drafting_pays(values, levels, verify_time, policy.draft_step_time(), 0, self.settings.max_nodes)

    def learn(self, draft: Draft, verdict: Verdict, kept: int, verify_time: VerifyTime) -> None:
        """Calibration, the back-off and statistics from one verified round of `kept` tokens (the pass's time is
        learned by the loop, which knows what the pass verified).

        The back-off learns only from passes where the drafter drafted alone: beside lookup branches most of a
        pass's gain is lookup's. Calls made there are priced before they are made, or are the periodic retries
        that keep `latent_lead` measured (`_latent_pays`)."""
        tree, policy = draft.tree, self.policy
        calibrate(tree, verdict, kept, policy)
        if self.document is not None:  # the kept tokens, so that the last ones of a sequence are remembered too
            self.memory.extend(self.document, verdict.tokens[:kept], self.own)
            self.written += kept
        if draft.lead_token is not None:
            policy.latent_lead.add(verdict.tokens[0] == draft.lead_token)
        if draft.drafted_alone and self.settings.cost_aware:
            policy.observe_drafter(kept, len(tree), draft.seconds, draft.calls, verify_time)
        # as in chains: the last token a pass yields counts as the target's own
        self.stats.record_round(draft, verdict.path[: kept - 1])
