"""OneiroCandidateGenerator: plugs OneiroDraft chains into transformers' assisted-decoding loop.

A chain is drafted by the one drafting engine (`drafting.engine.SequenceEngine`) as a tree of one branch
(`EngineView.for_chain`); this class only adapts it to the loop. Each call of `get_candidates` **syncs** (the
accepted positions' states of the last verification pass go to the drafter's context; no extra target forward),
**drafts** (lookup and latent branches, of which the path that pays best) and **proposes** the path's tokens. The
loop verifies them in one target pass, where strict acceptance is lossless, and `update_candidate_strategy` hands
the engine the verdict to learn from (calibration, the back-off, statistics).

Sampling needs no draft distribution: the drafted tokens are proposals chosen before the target's draws (point
masses), so the loop's token-matching acceptance (accept a token when the target's sample equals it, else keep the
sample) is exact, as the tree's walk is (`loop/judge.py`).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from transformers.generation.candidate_generator import CandidateGenerator

from ..drafting.draft import Draft, Verdict, eos_token_ids
from ..drafting.engine import SequenceEngine
from ..drafting.view import EngineView
from ..settings import DraftingSettings
from .session import DraftingSession
from .verification import RelaxedAcceptanceProcessor, check_relaxed_supported, warn_lossy_once


class OneiroCandidateGenerator(CandidateGenerator):
    """Drafts chains for one generate call through the call's `SequenceEngine` (its n-gram index and the
    drafter's context live there, for that call only)."""

    requires_model_outputs = True

    def __init__(
        self,
        drafter,
        generation_config,
        logits_processor,
        session: DraftingSession | None = None,
        user_wants_hidden_states: bool = False,
    ) -> None:
        session = session if session is not None else drafter.session_for_call()
        check_relaxed_supported(session.settings.verification, bool(generation_config.do_sample))
        self.settings = EngineView.for_chain(session.settings)
        self.policy = session.policy  # the drafter's, learned across calls
        self.stats = session.stats  # becomes drafter.last_stats
        self.drafting = SequenceEngine(drafter, self.settings, self.policy, self.stats,
                                        eos_token_ids(generation_config), generation_config.max_length, session.memory)
        # only the states the drafter reads (-1: the final-normed last one); merged with a user asking for all
        wanted = True if user_wants_hidden_states else drafter.hidden_states_request
        self.model_kwargs_overrides = {"output_hidden_states": wanted}
        if self.settings.mode == "lookup" and not user_wants_hidden_states:
            self.model_kwargs_overrides = {}  # lookup alone never reads the target's states
        # absolute positions of drafted tokens the loop kept (debugging / tests; bounded by max_length)
        self.accepted_positions: list[int] = []
        self.logits_processor = logits_processor  # the loop's list: a relaxed judge is appended to it
        self.relaxed = _relaxed_judge(session.settings, logits_processor)
        self._proposal: Draft | None = None
        self._prefilled = False
        self._verify_started: float | None = None

    # ------------------------------------------------------------------ loop interface
    @property
    def num_drafting_tokens(self) -> int:
        """The most tokens one draft holds: transformers >= 5.25 asks it to size what a cache records between a
        verification pass and its crop (recurrent layers keep that many past states)."""
        return self.settings.max_depth

    def get_candidates(
        self,
        input_ids: torch.LongTensor,
        model_kwargs: dict | None = None,
        model_outputs: Any = None,
        is_first_iteration: bool = False,
        n_last_matches: int = 0,
        **kwargs: Any,
    ) -> tuple[torch.LongTensor, None]:
        """input_ids (1, T) -> (input_ids with the draft appended (1, T+L), None: no drafting logits).

        Sync, draft, propose. The first call only proposes nothing: the prefill pass verifies nothing."""
        self._end_verification(is_first_iteration)
        if model_outputs is not None:
            self._sync(input_ids, model_outputs, int(n_last_matches))
            self._proposal = self.drafting.draft(input_ids, self.policy.verify_time)
        return self._propose(input_ids)

    def update_candidate_strategy(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, num_matches: int
    ) -> None:
        """After the pass that verified the proposal: the engine learns from its verdict (the first num_matches
        drafted tokens accepted, then the target's own token, both now at the end of input_ids (1, T'))."""
        kept = self._clear_relaxed()
        draft = self._proposal
        if draft is None:
            return
        n = int(num_matches)
        self._note_accepted_positions(draft, n, kept)
        verdict = Verdict(list(range(1, n + 1)), input_ids[0, draft.start : draft.start + n + 1].tolist(), [])
        self.drafting.learn(draft, verdict, n + 1, self.policy.verify_time)

    # ------------------------------------------------------------------ the steps
    def _end_verification(self, is_first_iteration: bool) -> None:
        """Time the target pass that verified the last proposal (it teaches t(k)); clear the relaxed judge."""
        if self._verify_started is not None and not is_first_iteration:
            elapsed = time.perf_counter() - self._verify_started
            self.stats.add_time("verify", elapsed)
            if self._proposal is not None:
                self.policy.observe_verify(self._proposal.size + 1, elapsed)
        if self.relaxed is not None:
            self.relaxed.clear()

    def _sync(self, input_ids: torch.LongTensor, model_outputs: Any, n_last_matches: int) -> None:
        """Hand the drafter the states of the last pass's accepted positions: the whole prompt after the prefill
        (input_ids (1, T) then holds the prompt and the first new token), else the last token and the matches."""
        keep = n_last_matches + 1 if self._prefilled else input_ids.shape[1] - 1
        self._prefilled = True
        self.drafting.observe(model_outputs.hidden_states, slice(0, keep))

    def _propose(self, input_ids: torch.LongTensor) -> tuple[torch.LongTensor, None]:
        """What the loop verifies: input_ids with the proposal's tokens appended."""
        draft = self._proposal
        self._verify_started = time.perf_counter()
        if draft is None or not draft.size:
            return input_ids, None
        tokens = draft.tokens()
        if self.relaxed is not None:
            self.relaxed.proposals = {draft.start + j: t for j, t in enumerate(tokens)}
        return torch.cat([input_ids, input_ids.new_tensor([tokens])], dim=-1), None

    def _clear_relaxed(self) -> set[int]:
        """The positions the relaxed judge kept in the last pass (empty when strict); it is inert until the next
        draft (and after the call)."""
        if self.relaxed is None:
            return set()
        kept = self.relaxed.kept
        self.relaxed.clear()
        return kept

    def _note_accepted_positions(self, draft: Draft, n: int, kept: set[int]) -> None:
        """Extend `accepted_positions` with the absolute positions of the n drafted tokens the loop kept."""
        start = draft.start
        self.accepted_positions.extend(range(start, start + min(n, draft.size)))
        if n < draft.size and start + n in kept:  # a kept draft the loop counted as the bonus (EOS cut)
            self.accepted_positions.append(start + n)


def _relaxed_judge(settings: DraftingSettings, logits_processor) -> RelaxedAcceptanceProcessor | None:
    """Relaxed verification's judge, appended last to the loop's own processor list (after a one-time warning
    that it is lossy); None for strict verification."""
    if settings.verification == "strict":
        return None
    warn_lossy_once(settings.verification)
    judge = RelaxedAcceptanceProcessor(
        settings.verification,
        settings.verification_topk,
        settings.verification_threshold,
        settings.verification_min_entropy,
    )
    logits_processor.append(judge)
    return judge
