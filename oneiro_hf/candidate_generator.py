"""OneiroCandidateGenerator: plugs OneiroDraft into transformers' assisted-decoding loop.

Each call receives the target's hidden states from the previous verification pass (no extra target
forward), keeps the accepted positions, and proposes the next draft: a prompt-lookup copy when a
trustworthy n-gram match exists (hybrid/lookup modes), else a latent rollout of the drafter. The
transformers loop then verifies the draft in one target pass; strict acceptance there is lossless.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.generation.candidate_generator import CandidateGenerator

from .drafter_context import DrafterContext
from .lookup import NgramIndex, cut_at_eos
from .session import DraftingSession
from .stats import DraftRound
from .verification import RelaxedAcceptanceProcessor, check_relaxed_supported, warn_lossy_once


@dataclass
class Draft:
    """One proposal: the drafted tokens (possibly none), where they came from, and what judging them needs.

    logits: (1, L, V) drafting distribution when sampling (point masses for lookup), else None; ngram: the
    matched n-gram length of the lookup tokens; confidences: the readout's probability of each latent token.
    latent_tokens: how many leading tokens the drafter proposed; a latent draft's other tokens are the lookup
    continuation of the context with the drafter's tokens appended (hybrid mode).
    calls: drafter forwards the draft made (what a pinned profile prices).
    start (the sequence length when drafting began) and draft_s (seconds spent) are filled when proposed."""

    tokens: list[int] = field(default_factory=list)
    logits: torch.Tensor | None = None
    source: str = "none"  # "latent", "lookup" or "none"
    ngram: int = 0
    confidences: list[float] = field(default_factory=list)
    latent_tokens: int = 0
    calls: int = 0
    start: int = 0
    draft_s: float = 0.0


class OneiroCandidateGenerator(CandidateGenerator):
    """Drafts for one generate call; owns the drafter's KV cache and n-gram index for that call."""

    requires_model_outputs = True

    def __init__(
        self,
        drafter,
        generation_config,
        logits_processor,
        session: DraftingSession,
        user_wants_hidden_states: bool = False,
    ) -> None:
        settings = session.settings
        verification = settings.verification
        check_relaxed_supported(verification, bool(generation_config.do_sample))
        self.drafter = drafter
        self.settings = settings
        self.mode = settings.mode
        self.max_draft = int(settings.max_draft_tokens)
        self.min_conf = float(settings.min_draft_confidence)
        self.cost_aware = bool(settings.cost_aware)
        self.do_sample = bool(generation_config.do_sample)
        self.logits_processor = logits_processor
        self.max_length = generation_config.max_length
        eos = getattr(generation_config, "_eos_token_tensor", None)
        self.eos_ids = set(eos.flatten().tolist()) if eos is not None else set()
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
        # relaxed verification: judged by a processor appended last to the loop's own processor list
        self.relaxed: RelaxedAcceptanceProcessor | None = None
        if verification != "strict":
            warn_lossy_once(verification)
            self.relaxed = RelaxedAcceptanceProcessor(
                verification,
                settings.verification_topk,
                settings.verification_threshold,
                settings.verification_min_entropy,
            )
            logits_processor.append(self.relaxed)
        self._proposal: Draft | None = None
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

        Steps: close the timing of the verification pass that just ran, take in what it accepted, draft, and
        hand the draft to the loop (the first call only takes in the prompt: the prefill pass verifies nothing)."""
        with self.stats.time("draft") as timer:
            self._end_verification(is_first_iteration, timer.started)
            self._sync_sequence(input_ids, model_outputs, is_first_iteration, int(n_last_matches))
            draft = None if model_outputs is None else self._draft(input_ids)
        if draft is None:
            self.stats.draft_time_s -= timer.seconds  # taking in the prompt is not drafting
        return self._propose(input_ids, draft, timer.seconds)

    def _end_verification(self, is_first_iteration: bool, now: float) -> None:
        """Time the target pass that verified the last proposal (it teaches t(k)); clear the relaxed judge."""
        if self._verify_started is not None and not is_first_iteration:
            elapsed = now - self._verify_started
            self.stats.verify_time_s += elapsed
            if self._proposal is not None:
                self.policy.observe_verify(len(self._proposal.tokens) + 1, elapsed)
        if self.relaxed is not None:
            self.relaxed.clear()

    def _propose(self, input_ids: torch.LongTensor, draft: Draft | None, draft_s: float):
        """Remember the proposal for update_candidate_strategy and return what the loop verifies."""
        self._proposal = draft
        if draft is not None:
            draft.start, draft.draft_s = input_ids.shape[1], draft_s
            if self.relaxed is not None:
                self.relaxed.proposals = {input_ids.shape[1] + j: t for j, t in enumerate(draft.tokens)}
        self._verify_started = time.perf_counter()
        if draft is None:
            return input_ids, None
        if not draft.tokens:
            self.stats.empty_steps += 1
            return input_ids, None
        tokens = torch.tensor([draft.tokens], dtype=input_ids.dtype, device=input_ids.device)
        return torch.cat([input_ids, tokens], dim=-1), draft.logits

    def update_candidate_strategy(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, num_matches: int):
        proposal = self._proposal
        kept = set()
        if self.relaxed is not None:
            kept = self.relaxed.kept
            self.relaxed.clear()  # inert until the next draft (and after the call)
        if proposal is None:
            return
        n = int(num_matches)
        length = len(proposal.tokens)
        start = proposal.start
        self.accepted_positions.extend(range(start, start + min(n, length)))
        if n < length and start + n in kept:  # a kept draft the loop counted as the bonus (EOS cut)
            self.accepted_positions.append(start + n)
        self.stats.steps += 1
        self.stats.accept_lengths.append(n + 1)
        self.stats.draft_lengths.append(length)
        if length == 0:
            return
        source = proposal.source
        split = proposal.latent_tokens  # tokens before it are the drafter's, from it on lookup's
        if self.stats.rounds is not None:  # of a latent round, the drafter's tokens (what on-policy training judges)
            drafted = proposal.tokens if source == "lookup" else proposal.tokens[:split]
            self.stats.rounds.append(DraftRound(start, list(drafted), min(n, len(drafted)), source))
        self.stats.drafted_tokens += length
        self.stats.accepted_tokens += n
        self.stats.drafted_by_source["latent"] += split
        self.stats.accepted_by_source["latent"] += min(n, split)
        self.stats.drafted_by_source["lookup"] += length - split
        self.stats.accepted_by_source["lookup"] += max(0, n - split)
        if split < length and n >= split:  # the lookup tokens were judged (all tokens before them accepted)
            for j in range(split, min(n + 1, length)):
                self.policy.lookup_rate(proposal.ngram, j - split + 1).add(j < n)
        if source == "lookup":
            self.stats.lookup_steps += 1
        else:
            self.stats.latent_steps += 1
            self.stats.extended_steps += split < length
            for j in range(min(n + 1, split)):
                self.policy.latent_rate(proposal.confidences[j]).add(j < n)
            t1 = self.policy.verify_time(1)
            spent = self.policy.verify_time(length + 1) + self.policy.drafting_cost(proposal.draft_s, proposal.calls)
            self.policy.backoff.observe((n + 1) * t1 - spent)

    # ------------------------------------------------------------------ bookkeeping
    def _sync_sequence(self, input_ids, model_outputs, is_first_iteration, n_last_matches) -> None:
        """Feed newly accepted tokens to the n-gram index and newly verified states to the pending list."""
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

    # ------------------------------------------------------------------ drafting
    def _budget(self, input_ids) -> int:
        return max(0, min(self.max_draft, self.max_length - input_ids.shape[1] - 1))

    def _draft(self, input_ids) -> Draft:
        """A lookup draft when a trustworthy match exists (hybrid/lookup), else a latent one, else none."""
        budget = self._budget(input_ids)
        if budget == 0:
            return Draft()
        if self.mode in ("lookup", "hybrid"):
            tokens, ngram = self.index.lookup(budget)
            if tokens and (self.mode == "lookup" or ngram >= self.settings.lookup_min_ngram):
                probs = self.policy.lookup_probs(ngram, len(tokens))
                length = self.policy.best_length(probs, [0] * len(tokens)) if self.cost_aware else len(tokens)
                if length > 0:
                    tokens = cut_at_eos(tokens[:length], self.eos_ids)
                    return Draft(tokens, self._one_hot_logits(tokens, input_ids), "lookup", ngram)
            if self.mode == "lookup":
                return Draft()
        backoff = self.policy.backoff
        if self.cost_aware and not backoff.worth_trying():
            backoff.steps_since_try += 1
            return Draft()
        backoff.steps_since_try = 0
        draft = self._draft_latent(input_ids, budget)
        if self.mode == "hybrid" and self.settings.lookup_after_latent:
            self._extend_with_lookup(draft, input_ids, budget)
        return draft

    def _extend_with_lookup(self, draft: Draft, input_ids, budget: int) -> None:
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

    @torch.no_grad()
    def _draft_latent(self, input_ids, budget) -> Draft:
        drafter = self.drafter
        vocab_ids = drafter.draft_vocab_ids
        context = self.context
        state = context.catch_up(input_ids)  # (1, 1, H)
        tokens: list[int] = []
        confidences: list[float] = []
        probs: list[float] = []
        logit_rows: list[torch.Tensor] = []
        sequence = input_ids
        t0 = time.perf_counter()
        steps_timed = 0
        for j in range(budget):
            logits = drafter.readout_logits(state[:, -1]).float()  # (1, Vd)
            if self.do_sample:
                full = logits.new_full((1, drafter.config.vocab_size), float("-inf"))
                full[:, vocab_ids] = logits
                full = self.logits_processor(sequence, full)
                dist = full.softmax(-1)
                token = int(torch.multinomial(dist, 1))
                conf = float(dist[0, token])
                logit_rows.append(full)
            else:
                dist = logits.softmax(-1)
                conf_t, idx = dist.max(-1)
                token, conf = int(vocab_ids[idx]), float(conf_t)
            tokens.append(token)
            confidences.append(conf)
            probs.append(self.policy.latent_rate(conf).value)
            if conf < self.min_conf or token in self.eos_ids or j + 1 == budget:
                break
            if self.cost_aware and not self.policy.worth_extending(probs, budget):
                break
            next_tok = torch.tensor([[token]], device=input_ids.device)
            if self.do_sample:
                sequence = torch.cat([sequence, next_tok], dim=-1)
            position = torch.tensor([[context.next_position()]], device=input_ids.device)
            state = drafter.transition(drafter.recurrent_inputs(state), next_tok, position, context.cache)
            steps_timed += 1
        self.stats.drafter_calls += 1 + steps_timed
        if steps_timed:
            self.policy.observe_draft_step((time.perf_counter() - t0) / (steps_timed + 1))
        length = len(tokens)
        if self.cost_aware:
            length = self.policy.latent_length(probs)
        tokens, confidences = tokens[:length], confidences[:length]
        logits_out = torch.cat(logit_rows[:length], dim=0).unsqueeze(0) if (self.do_sample and length) else None
        return Draft(tokens, logits_out, "latent", 0, confidences, latent_tokens=length, calls=1 + steps_timed)

    def _one_hot_logits(self, tokens: list[int], input_ids) -> torch.Tensor | None:
        """In sampling mode a copied token is a point mass: q(token)=1, so p/q acceptance stays exact."""
        if not self.do_sample:
            return None
        vocab = self.drafter.config.vocab_size
        logits = torch.full((1, len(tokens), vocab), float("-inf"), device=input_ids.device)
        logits[0, torch.arange(len(tokens)), torch.tensor(tokens)] = 0.0
        return logits
