"""The state of one generate call with a drafter, in one typed object handed to whatever drafts for that call.

The drafter makes a `DraftingSession` per call (`OneiroDrafter.new_session`, or `drafting_session` for the
whole of a generate call) and the candidate generator (or the tree loop) reads and writes only the session:

    settings   the call's frozen `DraftingSettings` (the drafter's config defaults, then its oneiro_* kwargs)
    policy     the cost model it learns into: the drafter's `policy_state`, carried from call to call
    stats      this call's `DraftStats`, readable afterwards as `drafter.last_stats`; its `rounds` list
               exists only when the drafter's `record_draft_rounds` is on (on-policy training)
    memory     the drafter's `SuffixMemory`, carried from call to call, when the call's `suffix_memory` is on
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from ..drafting.memory import SuffixMemory
from ..drafting.policy import DraftPolicyState
from ..drafting.stats import DraftStats
from ..settings import DraftingSettings


@dataclass(frozen=True)
class DraftingSession:
    """One generate call's drafting state; made by the drafter, never shared between calls."""

    settings: DraftingSettings
    policy: DraftPolicyState
    stats: DraftStats
    memory: SuffixMemory | None = None


class SessionOwner:
    """A drafter's per-call sessions and the policy they carry from call to call (mixed into `OneiroDrafter`; its
    state is set by `init_sessions`, called from the drafter's `__init__`)."""

    def init_sessions(self) -> None:
        # the statistics of the last generate call (a DraftingSession's stats, set when the session is made)
        object.__setattr__(self, "last_stats", DraftStats())
        object.__setattr__(self, "_policy_state", None)  # see policy_state
        # on-policy training: record every drafting round of the next calls in last_stats.rounds
        object.__setattr__(self, "record_draft_rounds", False)
        object.__setattr__(self, "_session", None)  # the DraftingSession of the running generate call

    def reset_drafting_policy(self) -> None:
        """Forget the learned latencies and acceptance calibration (e.g. after moving to other hardware)."""
        self.policy_state = None

    def use_latency_profile(self, profile: dict, learn: bool = True) -> None:
        """Seed the cost-aware draft length with a measured t(k) profile (see oneiro_hf.drafting.latency), and the price of a
        drafter call with its `drafter_step_ratio` where the profile measured this drafter's (`oneiro-bench profile
        --drafter`), and t(k, B) per batch size B from its optional `"batch"` field (`oneiro-bench profile
        --batch-sizes`; `DraftPolicyState.load_profile`).

        `learn=False` decides on the profile alone from now on: no measured time enters a decision (a drafter call
        costs `drafter_step_ratio` x t(1), 0.1 x t(1) where the profile has none), so the same prompts draft the
        same way on every run, however loaded the machine (`DraftPolicyState.pin_profile`); acceptance is still
        learned. `reset_drafting_policy()` goes back to learning."""
        state = self._ensure_policy_state()
        seed = state.load_profile if learn else state.pin_profile
        seed(profile["ratios"], profile["t1_s"], profile.get("drafter_step_ratio"), batch=profile.get("batch"))

    @property
    def policy_state(self) -> DraftPolicyState | None:
        """What drafting has learned so far (latencies t(k), acceptance calibration), carried from call to call;
        None before the first call. Assign one (e.g. a copy kept elsewhere) to draft with it from the next call."""
        return self._policy_state

    @policy_state.setter
    def policy_state(self, state: DraftPolicyState | None) -> None:
        if state is not None and not isinstance(state, DraftPolicyState):
            raise TypeError(f"policy_state must be a DraftPolicyState or None, got {type(state).__name__}. "
                            "Fix: assign a value read from drafter.policy_state.")
        object.__setattr__(self, "_policy_state", state)

    def _ensure_policy_state(self) -> DraftPolicyState:
        if self._policy_state is None:
            object.__setattr__(self, "_policy_state", DraftPolicyState())
        return self._policy_state

    # ------------------------------------------------------------------ sessions
    def new_session(self, settings: DraftingSettings | None = None) -> DraftingSession:
        """The state of one generate call: `settings` (default: this drafter's config defaults), the drafter's
        policy and fresh statistics, which become `last_stats`."""
        settings = settings if settings is not None else DraftingSettings.for_call(self.config)
        stats = DraftStats(verification=settings.verification,
                           rounds=[] if self.record_draft_rounds else None)
        object.__setattr__(self, "last_stats", stats)
        return DraftingSession(settings, self._ensure_policy_state(), stats, self.memory_for(settings))

    @contextlib.contextmanager
    def drafting_session(self, settings: DraftingSettings):
        """A session for the generate call running inside this block, found there as `current_session`."""
        session = self.new_session(settings)
        object.__setattr__(self, "_session", session)
        try:
            yield session
        finally:
            object.__setattr__(self, "_session", None)

    @property
    def current_session(self) -> DraftingSession | None:
        """The DraftingSession of the generate call running now, or None."""
        return self._session

    def session_for_call(self) -> DraftingSession:
        """The session whatever drafts for a generate call works in: the call's own (`current_session`), or a
        fresh one with this drafter's defaults when generate was reached past the hook (no session was opened)."""
        return self._session or self.new_session()

    # ------------------------------------------------------------------ settings
    def drafting_settings(self, **overrides: Any) -> dict[str, Any]:
        """The drafting settings for one generate call: config defaults, then per-call overrides (validated;
        `DraftingSettings` in oneiro_hf/settings.py holds the names and defaults)."""
        return DraftingSettings.for_call(self.config, **overrides).as_dict()
