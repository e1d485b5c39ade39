"""Per-call drafting statistics a user can read after `generate` (drafter.last_stats)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only
    from .draft import Draft


@dataclass
class DraftRound:
    """One drafting round as verified: recorded only on request (on-policy training needs the error positions)."""

    start: int  # sequence length when drafting began = position of the first drafted token
    tokens: list[int]  # the drafted tokens, positions start .. start+len-1
    accepted: int  # how many of them the target accepted
    source: str  # "latent", "lookup" or "memory"


@dataclass
class PhaseTimer:
    """One timed phase of `DraftStats.time`: its start, and its length once the block has ended."""

    started: float = field(default_factory=time.perf_counter)
    seconds: float = 0.0


@dataclass
class DraftStats:
    """Counts and timings of one generate call; reset at the start of each call so memory stays flat."""

    steps: int = 0  # verification passes after the prefill
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    latent_steps: int = 0
    lookup_steps: int = 0
    memory_steps: int = 0  # rounds with suffix-memory branches (`oneiro_suffix_memory=True`)
    empty_steps: int = 0  # steps where drafting was judged not worth it
    extended_steps: int = 0  # latent drafts (hybrid) that lookup continued from the drafter's own last tokens
    draft_time_s: float = 0.0
    verify_time_s: float = 0.0
    # drafter forwards: per latent draft one catch-up (with the first readout), then one per further step or tree
    # level; what another machine's drafter step cost prices (oneiro-bench breakdown --latency-profile h200)
    drafter_calls: int = 0
    accepted_by_source: dict[str, int] = field(default_factory=lambda: {"latent": 0, "lookup": 0, "memory": 0})
    drafted_by_source: dict[str, int] = field(default_factory=lambda: {"latent": 0, "lookup": 0, "memory": 0})
    accept_lengths: list[int] = field(default_factory=list)  # tokens gained per step (accepted + 1)
    draft_lengths: list[int] = field(default_factory=list)  # chain: tokens drafted per step (0: an empty step)
    verification: str = "strict"  # acceptance criterion of the call; anything else is lossy
    # tree verification only (oneiro_tree=True): candidate nodes per pass, and per pass the highest sibling rank
    # (0 = the likeliest child) among the accepted nodes, -1 when none was accepted
    tree_nodes: list[int] = field(default_factory=list)
    tree_drafter_calls: list[int] = field(default_factory=list)  # drafter forwards per pass (catch-up included)
    tree_branch_ranks: list[int] = field(default_factory=list)
    # every non-empty drafting round, only when the drafter's ``record_draft_rounds`` is True (else None)
    rounds: list[DraftRound] | None = None
    # batched generate (2+ prompts): each row's own statistics, in the batch's order (None for one sequence); the
    # counts above then add up the rows' rounds (`steps` counts row rounds) and `batch_passes` the batched passes
    rows: list[DraftStats] | None = None
    batch_passes: int = 0

    @property
    def mean_accepted_tokens(self) -> float:
        """Mean tokens produced per verification pass (tau): accepted drafts + the target's own token."""
        return sum(self.accept_lengths) / len(self.accept_lengths) if self.accept_lengths else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def draft_time_share(self) -> float:
        total = self.draft_time_s + self.verify_time_s
        return self.draft_time_s / total if total else 0.0

    @contextmanager
    def time(self, phase: str, record: bool = True) -> Iterator[PhaseTimer]:
        """Add the seconds spent inside the block to `<phase>_time_s` ("draft" or "verify"); the yielded timer
        holds them afterwards (`timer.seconds`). `record=False` only measures (taking in the prompt is no drafting)."""
        timer = PhaseTimer()
        try:
            yield timer
        finally:
            timer.seconds = time.perf_counter() - timer.started
            if record:
                self.add_time(phase, timer.seconds)

    def add_time(self, phase: str, seconds: float) -> None:
        """Add `seconds` to `<phase>_time_s` ("draft" or "verify"), for a phase timed elsewhere (a chain's
        verification pass ends when the loop next asks for a draft)."""
        setattr(self, f"{phase}_time_s", getattr(self, f"{phase}_time_s") + seconds)

    def record_round(self, draft: Draft, accepted: list[int]) -> None:
        """Count one verified round, chain or tree: `draft` as proposed and `accepted`, its drafted nodes the target
        accepted (`Draft` numbering: a chain's first n tokens are nodes 1..n, a tree's are its path), the token
        the target adds after them not included. Timing is recorded where it is measured (`time`)."""
        size = draft.size
        self.steps += 1
        self.accept_lengths.append(len(accepted) + 1)
        self.drafter_calls += draft.calls
        self.empty_steps += size == 0
        for name, value in draft.shape(accepted).items():  # a chain's length, a tree's nodes, calls and rank
            getattr(self, name).append(value)
        if size == 0:
            return
        record = draft.round_record(len(accepted)) if self.rounds is not None else None
        if record is not None:  # the drafter's tokens: what on-policy training judges
            self.rounds.append(DraftRound(*record))
        self.drafted_tokens += size
        self.accepted_tokens += len(accepted)
        for node in range(1, size + 1):
            self.drafted_by_source[draft.source_of(node)] += 1
        for node in accepted:
            self.accepted_by_source[draft.source_of(node)] += 1
        sources = draft.step_sources()
        self.latent_steps += "latent" in sources
        self.lookup_steps += "lookup" in sources
        self.memory_steps += "memory" in sources
        self.extended_steps += draft.extended()

    def as_dict(self) -> dict:
        data = asdict(self)
        data.update(
            mean_accepted_tokens=self.mean_accepted_tokens,
            acceptance_rate=self.acceptance_rate,
            draft_time_share=self.draft_time_share,
        )
        return data
