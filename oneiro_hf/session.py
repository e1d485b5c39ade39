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

from dataclasses import dataclass

from .drafting.memory import SuffixMemory
from .drafting.policy import DraftPolicyState
from .settings import DraftingSettings
from .stats import DraftStats


@dataclass(frozen=True)
class DraftingSession:
    """One generate call's drafting state; made by the drafter, never shared between calls."""

    settings: DraftingSettings
    policy: DraftPolicyState
    stats: DraftStats
    memory: SuffixMemory | None = None
