"""OneiroCandidateGenerator: plugs OneiroDraft into transformers' assisted-decoding loop.

Each call of `get_candidates` does three things, as transformers' own generators do: **sync** (take in what the
last verification pass accepted: its tokens into the n-gram index, its hidden states into the drafter's context;
no extra target forward), **draft** (a prompt-lookup copy when a trustworthy n-gram match exists, hybrid/lookup
modes, else a latent rollout of the drafter), **propose** (hand the draft to the loop). The loop verifies it in one
target pass, where strict acceptance is lossless, and `update_candidate_strategy` records the round
(`DraftStats.record_round`) and **learns** from it (latency, calibration, the back-off).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from transformers.generation.candidate_generator import CandidateGenerator

from .draft import ChainDraft, cut_at_eos, eos_token_ids
from .drafter_context import DrafterContext
from .lookup import NgramIndex
from .session import DraftingSession
from .settings import DraftingSettings
from .verification import RelaxedAcceptanceProcessor, check_relaxed_supported, warn_lossy_once


class OneiroCandidateGenerator(CandidateGenerator):
    """Drafts for one generate call; owns the drafter's context (its KV cache) and n-gram index for that call."""

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
        settings = session.settings
        check_relaxed_supported(settings.verification, bool(generation_config.do_sample))
        self.drafter = drafter
        self.settings = settings
        self.mode = settings.mode
        self.max_draft = int(settings.max_draft_tokens)
        self.min_conf = float(settings.min_draft_confidence)
        self.cost_aware = bool(settings.cost_aware)
        self.do_sample = bool(generation_config.do_sample)
        self.logits_processor = logits_processor
        self.max_length = generation_config.max_length
        self.eos_ids = eos_token_ids(generation_config)
        # only the states the drafter reads (-1: the final-normed last one); merged with a user asking for all
        wanted = True if user_wants_hidden_states else drafter.hidden_states_request
        self.model_kwargs_overrides = {"output_hidden_states": wanted}
        if self.mode == "lookup" and not user_wants_hidden_states:
            self.model_kwargs_overrides = {}  # lookup alone never reads the target's states
        # the drafter's cache, its teacher-forced (accepted) entries and the target states not yet fed to it
        self.context = DrafterContext(drafter, max_capacity=self.max_length, window=settings.context_window)
        self.index = NgramIndex(int(settings.lookup_min_ngram), int(settings.lookup_max_ngram))
        self.policy = session.policy  # the drafter's, learned across calls
        self.stats = session.stats  # becomes drafter.last_stats
        # absolute positions of drafted tokens the loop kept (debugging / tests; bounded by max_length)
        self.accepted_positions: list[int] = []
        self.relaxed = _relaxed_judge(settings, logits_processor)
        self._proposal: ChainDraft | None = None
        self._verify_started: float | None = None

    # ------------------------------------------------------------------ loop interface
    @property
    def num_drafting_tokens(self) -> int:
        """The most tokens one draft holds: transformers >= 5.25 asks it to size what a cache records between a
        verification pass and its crop (recurrent layers keep that many past states)."""
        return self.max_draft

    def get_candidates(
        self,
        input_ids: torch.LongTensor,
        model_kwargs: dict | None = None,
        model_outputs: Any = None,
        is_first_iteration: bool = False,
        n_last_matches: int = 0,
        **kwargs: Any,
    ) -> tuple[torch.LongTensor, torch.FloatTensor | None]:
        """input_ids (1, T) -> (input_ids with the draft appended (1, T+L), drafting logits (1, L, V) or None).

        Sync, draft, propose. The first call only syncs (takes in the prompt): the prefill pass verifies nothing,
        and its time is not drafting time."""
        drafting = model_outputs is not None
        with self.stats.time("draft", record=drafting) as timer:
            self._end_verification(is_first_iteration, timer.started)
            self._sync(input_ids, model_outputs, int(n_last_matches))
            draft = self._draft(input_ids) if drafting else None
        return self._propose(input_ids, draft, timer.seconds)

    def update_candidate_strategy(
        self, input_ids: torch.LongTensor, scores: torch.FloatTensor, num_matches: int
    ) -> None:
        """After the pass that verified the proposal: record the round and learn from it. num_matches: how many
        drafted tokens the loop kept."""
        kept = self._clear_relaxed()
        draft = self._proposal
        if draft is None:
            return
        n = int(num_matches)
        self._note_accepted_positions(draft, n, kept)
        self.stats.record_round(draft, list(range(1, n + 1)))
        self._learn(draft, n)

    # ------------------------------------------------------------------ the steps
    def _end_verification(self, is_first_iteration: bool, now: float) -> None:
        """Time the target pass that verified the last proposal (it teaches t(k)); clear the relaxed judge."""
        if self._verify_started is not None and not is_first_iteration:
            elapsed = now - self._verify_started
            self.stats.add_time("verify", elapsed)
            if self._proposal is not None:
                self.policy.observe_verify(len(self._proposal.tokens) + 1, elapsed)
        if self.relaxed is not None:
            self.relaxed.clear()

    def _sync(self, input_ids: torch.LongTensor, model_outputs: Any, n_last_matches: int) -> None:
        """Feed newly accepted tokens (input_ids (1, T)) to the n-gram index and the accepted positions' states of
        the last pass to the drafter's context (pending until a latent draft needs them)."""
        seq_len = input_ids.shape[1]
        known = len(self.index.tokens)
        if seq_len > known:
            self.index.extend(input_ids[0, known:].tolist())
        if model_outputs is None or self.mode == "lookup":
            return
        # States on the accepted path: the whole prompt after the prefill, else last token + matches.
        context = self.context
        keep = seq_len - 1 if context.true_len == 0 and not context.pending else n_last_matches + 1
        context.observe_pass(model_outputs.hidden_states, slice(0, keep))

    def _propose(self, input_ids: torch.LongTensor, draft: ChainDraft | None, seconds: float):
        """Remember the proposal for update_candidate_strategy and return what the loop verifies."""
        self._proposal = draft
        if draft is not None:
            draft.start, draft.seconds = input_ids.shape[1], seconds
            if self.relaxed is not None:
                self.relaxed.proposals = {input_ids.shape[1] + j: t for j, t in enumerate(draft.tokens)}
        self._verify_started = time.perf_counter()
        if draft is None or not draft.tokens:
            return input_ids, None
        tokens = torch.tensor([draft.tokens], dtype=input_ids.dtype, device=input_ids.device)
        return torch.cat([input_ids, tokens], dim=-1), draft.logits

    def _clear_relaxed(self) -> set[int]:
        """The positions the relaxed judge kept in the last pass (empty when strict); it is inert until the next
        draft (and after the call)."""
        if self.relaxed is None:
            return set()
        kept = self.relaxed.kept
        self.relaxed.clear()
        return kept

    def _note_accepted_positions(self, draft: ChainDraft, n: int, kept: set[int]) -> None:
        """Extend `accepted_positions` with the absolute positions of the n drafted tokens the loop kept."""
        start = draft.start
        self.accepted_positions.extend(range(start, start + min(n, draft.size)))
        if n < draft.size and start + n in kept:  # a kept draft the loop counted as the bonus (EOS cut)
            self.accepted_positions.append(start + n)

    def _learn(self, draft: ChainDraft, n: int) -> None:
        """Calibration and the back-off from a verified draft of which the first n tokens were accepted: every
        token up to the first rejected one was tested; a latent draft's gain (time saved minus spent) is what the
        back-off weighs."""
        length, split = draft.size, draft.latent_tokens  # tokens before `split` are the drafter's, from it lookup's
        if length == 0:
            return
        policy = self.policy
        if split < length and n >= split:  # the lookup tokens were judged (all tokens before them accepted)
            for j in range(split, min(n + 1, length)):
                policy.lookup_rate(draft.ngram, j - split + 1).add(j < n)
        if draft.source == "latent":
            for j in range(min(n + 1, split)):
                policy.latent_rate(draft.confidences[j]).add(j < n)
            policy.observe_drafter(n + 1, length + 1, draft.seconds, draft.calls, policy.verify_time)

    # ------------------------------------------------------------------ drafting
    def _budget(self, input_ids: torch.LongTensor) -> int:
        """How many tokens a draft may hold: the setting, and room for the target's own token before max_length."""
        return max(0, min(self.max_draft, self.max_length - input_ids.shape[1] - 1))

    def _draft(self, input_ids: torch.LongTensor) -> ChainDraft:
        """A lookup draft when a trustworthy match exists (hybrid/lookup), else a latent one, else none."""
        budget = self._budget(input_ids)
        if budget == 0:
            return ChainDraft()
        if self.mode in ("lookup", "hybrid"):
            copied = self._draft_lookup(input_ids, budget)
            if copied is not None:
                return copied
            if self.mode == "lookup":
                return ChainDraft()
        if not self.policy.backoff.admit(self.cost_aware):
            return ChainDraft()
        draft = self._draft_latent(input_ids, budget)
        if self.mode == "hybrid" and self.settings.lookup_after_latent:
            self._extend_with_lookup(draft, input_ids, budget)
        return draft

    def _draft_lookup(self, input_ids: torch.LongTensor, budget: int) -> ChainDraft | None:
        """What followed the latest earlier occurrence of the current suffix, cut to the length the cost model pays
        for and at EOS; None when there is no match to trust (hybrid: shorter than lookup_min_ngram) or no length
        pays."""
        tokens, ngram = self.index.lookup(budget)
        if not tokens or (self.mode != "lookup" and ngram < self.settings.lookup_min_ngram):
            return None
        probs = self.policy.lookup_probs(ngram, len(tokens))  # also opens the rates the calibration fills
        length = self.policy.best_length(probs, [0] * len(tokens)) if self.cost_aware else len(tokens)
        if length == 0:
            return None
        tokens = cut_at_eos(tokens[:length], self.eos_ids)
        return ChainDraft(tokens, self._one_hot_logits(tokens, input_ids), "lookup", ngram)

    @torch.no_grad()
    def _draft_latent(self, input_ids: torch.LongTensor, budget: int) -> ChainDraft:
        """input_ids (1, T) -> a latent draft of at most `budget` tokens.

        The drafter rolls out from the last accepted token (`DrafterContext.catch_up`, then one `step` per token)
        until the readout's confidence falls under min_draft_confidence, it drafts an EOS, the budget is spent or
        (cost model on) a longer draft no longer promises more; the draft is then cut to its best length."""
        state = self.context.catch_up(input_ids)  # (1, 1, H)
        tokens: list[int] = []
        confidences: list[float] = []
        probs: list[float] = []  # calibrated acceptance of each token
        rows: list[torch.Tensor] = []  # sampling: (1, V) the distribution each token was drawn from
        sequence = input_ids
        started = time.perf_counter()
        steps = 0  # drafter forwards after the catch-up
        for j in range(budget):
            token, confidence, row = self._read_out(state, sequence)
            tokens.append(token)
            confidences.append(confidence)
            probs.append(self.policy.latent_rate(confidence).value)
            if row is not None:
                rows.append(row)
            if self._rollout_ends(token, confidence, probs, j + 1, budget):
                break
            next_token = torch.tensor([[token]], device=input_ids.device)
            if self.do_sample:
                sequence = torch.cat([sequence, next_token], dim=-1)
            state = self.context.step(state, next_token)
            steps += 1
        if steps:
            self.policy.observe_draft_step((time.perf_counter() - started) / (steps + 1))
        length = self.policy.latent_length(probs) if self.cost_aware else len(tokens)
        logits = torch.cat(rows[:length], dim=0).unsqueeze(0) if (self.do_sample and length) else None
        return ChainDraft(tokens[:length], logits, "latent", 0, confidences[:length], latent_tokens=length, calls=1 + steps)

    def _read_out(self, state: torch.Tensor, sequence: torch.LongTensor) -> tuple[int, float, torch.Tensor | None]:
        """state (1, 1, H) the predicted state at the last position of `sequence` (1, T') -> (the next token, its
        probability, and when sampling the (1, V) processed logits it was drawn from, else None).

        Greedy: the argmax of the readout over the draft vocabulary. Sampling: the readout scattered into the full
        vocabulary, the user's logits processors applied as the target's tokens get them, one sample."""
        drafter = self.drafter
        logits = drafter.readout_logits(state[:, -1]).float()  # (1, Vd)
        if not self.do_sample:
            confidence, index = logits.softmax(-1).max(-1)
            return int(drafter.draft_vocab_ids[index]), float(confidence), None
        full = logits.new_full((1, drafter.config.vocab_size), float("-inf"))
        full[:, drafter.draft_vocab_ids] = logits
        full = self.logits_processor(sequence, full)
        dist = full.softmax(-1)
        token = int(torch.multinomial(dist, 1))
        return token, float(dist[0, token]), full

    def _rollout_ends(self, token: int, confidence: float, probs: list[float], drafted: int, budget: int) -> bool:
        """Whether a latent draft of `drafted` tokens (the last `token`, read out with `confidence`) stops here."""
        if confidence < self.min_conf or token in self.eos_ids or drafted == budget:
            return True
        return self.cost_aware and not self.policy.worth_extending(probs, budget)

    def _extend_with_lookup(self, draft: ChainDraft, input_ids: torch.LongTensor, budget: int) -> None:
        """Append to a latent draft what followed the latest earlier occurrence of its own last n-gram.

        The drafter's tokens often start a span the context holds (a name, a quoted line) that lookup could not
        find from the verified tokens alone. The copied tokens cost no drafter call, only verification: with the
        cost model on, as many are kept as pay (each priced at the n-gram's acceptance, the drafter's calls
        already spent), none when even the first does not.
        """
        latent = len(draft.tokens)
        if latent == 0 or latent >= budget or draft.tokens[-1] in self.eos_ids:
            return
        more, ngram = self.index.lookup(budget - latent, after=draft.tokens)
        if not more or ngram < self.settings.lookup_min_ngram:
            return
        if self.cost_aware:
            probs = [self.policy.latent_rate(c).value for c in draft.confidences]
            probs += self.policy.lookup_probs(ngram, len(more))
            length = self.policy.best_length(probs, [0] * len(probs), sunk_steps=draft.calls)
            more = more[: max(0, length - latent)]
        more = cut_at_eos(more, self.eos_ids)
        if not more:
            return
        draft.tokens = draft.tokens + more
        draft.ngram = ngram
        if draft.logits is not None:
            draft.logits = torch.cat([draft.logits, self._one_hot_logits(more, input_ids)], dim=1)

    def _one_hot_logits(self, tokens: list[int], input_ids: torch.LongTensor) -> torch.Tensor | None:
        """(1, len(tokens), V) when sampling: a copied token is a point mass, q(token) = 1, so p/q acceptance stays
        exact; None when greedy (drafts are compared token by token)."""
        if not self.do_sample:
            return None
        vocab = self.drafter.config.vocab_size
        logits = torch.full((1, len(tokens), vocab), float("-inf"), device=input_ids.device)
        logits[0, torch.arange(len(tokens)), torch.tensor(tokens)] = 0.0
        return logits


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
