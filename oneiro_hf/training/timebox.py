"""A training run's time box: the schedule follows the minutes, not only the steps, across resumes.

On a CPU a run is sized by time (``--max_train_minutes``), and a long one spans sessions. ``TrainingClock`` counts
the seconds trained so far, resumes included (the count travels in the checkpoint), and says how much of the box
is spent. Three things read it:

- the learning-rate schedule (``follow_time_box``): past warmup it is at the steps taken or at the spent share of
  the box mapped onto the remaining steps, whichever is further, so a box that ends long before ``max_steps``
  still decays the rate to its end (a schedule sized by steps alone stays at its peak);
- stage 2 starts at ``stage1_fraction`` of the steps or of the box (``trainer._StageCallback``);
- ``TimeBoxCallback`` ends training when the box is spent (the run is finished) or at ``--train_until`` (a
  wall-clock stop: with box time left the run is paused, a checkpoint is saved, and the same command with
  ``--resume_from_checkpoint last`` goes on with the schedule where it was, replacing the paused drafter).

Without ``--max_train_minutes`` the box is what ``--train_until`` leaves when training starts (a lease that ends at
a fixed time trains to the end of its schedule at that time).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import TrainerCallback

logger = logging.getLogger(__name__)


@dataclass
class TrainingClock:
    """Seconds one run has trained (``before_s`` from earlier processes, from its checkpoint, plus this process's
    ``elapsed_s``) and the box they count against (``box_s``, None: no box). ``until`` (Unix seconds) stops this
    process. The clocks are read by ``tick`` once a step; every process uses rank 0's readings, so all agree on
    the learning rate and on the step training stops at."""

    box_minutes: float | None = None
    until: float | None = None
    before_s: float = 0.0
    box_s: float | None = None
    started: float | None = None
    elapsed_s: float = 0.0
    wall_at_tick: float = 0.0
    clock: Callable[[], float] = field(default=time.perf_counter, repr=False)
    wall: Callable[[], float] = field(default=time.time, repr=False)

    @classmethod
    def from_args(cls, args: Any, **clocks: Callable[[], float]) -> TrainingClock:
        return cls(box_minutes=args.max_train_minutes, until=args.train_until, **clocks)

    def start(self, device: torch.device | str = "cpu") -> None:
        """Training starts (or resumes, after ``before_s`` was restored): fix the box."""
        self.started = self.clock()
        self.tick(device)
        if self.box_minutes:
            self.box_s = self.box_minutes * 60.0
        elif self.until is not None:
            self.box_s = self.before_s + max(0.0, self.until - self.wall_at_tick)

    def tick(self, device: torch.device | str = "cpu") -> None:
        """Read the clocks (rank 0's readings, in a multi-process run)."""
        reading = torch.tensor([self.clock() - (self.started or 0.0), self.wall()], dtype=torch.float64)
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            reading = reading.to(device)
            dist.broadcast(reading, src=0)
        self.elapsed_s, self.wall_at_tick = (float(v) for v in reading.cpu())

    def seconds(self) -> float:
        return self.before_s + self.elapsed_s

    def fraction(self) -> float:
        """Share of the box spent (0 without a box)."""
        return min(1.0, self.seconds() / self.box_s) if self.box_s else 0.0

    def box_spent(self) -> bool:
        return self.box_s is not None and self.seconds() >= self.box_s

    def deadline_passed(self) -> bool:
        return self.until is not None and self.wall_at_tick >= self.until


def follow_time_box(scheduler: torch.optim.lr_scheduler.LRScheduler, clock: TrainingClock, warmup_steps: int,
                    max_steps: int) -> torch.optim.lr_scheduler.LRScheduler:
    """The step-sized ``scheduler`` (a LambdaLR, as transformers builds them) made to read, past warmup, the step
    ``max(step, warmup + clock.fraction() * (max_steps - warmup))``: the same curve, spread over the time box."""
    if not isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
        raise TypeError(f"the learning-rate schedule {type(scheduler).__name__} cannot follow a time box. Fix: use a "
                         "step schedule (--lr_scheduler_type cosine, linear, cosine_with_min_lr, constant...), or "
                         "train without --max_train_minutes/--train_until.")

    def spread(by_step: Callable[[float], float]) -> Callable[[int], float]:
        def by_time(step: int) -> float:
            if step < warmup_steps or clock.box_s is None:
                return by_step(step)
            return by_step(max(float(step), warmup_steps + clock.fraction() * (max_steps - warmup_steps)))

        return by_time

    scheduler.lr_lambdas = [spread(by_step) for by_step in scheduler.lr_lambdas]  # one per parameter group
    return scheduler


class TimeBoxCallback(TrainerCallback):
    """Starts the clock with training, and ends training when the box is spent (the run is done) or at
    ``--train_until`` (paused: a checkpoint is saved for the resume); ``ended_by`` says which ("max_steps" when
    neither did)."""

    def __init__(self, clock: TrainingClock) -> None:
        self.clock = clock
        self.ended_by = "max_steps"

    def on_train_begin(self, args, state, control, **kwargs):
        self.clock.start(args.device)  # after a resumed run's trained seconds were restored
        return control

    def on_step_end(self, args, state, control, **kwargs):
        self.clock.tick(args.device)
        if self.clock.box_spent() or (self.clock.deadline_passed() and not self.clock.box_minutes):
            logger.warning("step %d of %d: the training time box (%.1f min) is spent; training stops here",
                           state.global_step, state.max_steps, (self.clock.box_s or 0) / 60)
            self.ended_by = "time box"
            control.should_training_stop = True
        elif self.clock.deadline_passed():
            logger.warning("step %d of %d: --train_until has passed with %.1f of %.1f box minutes trained; a "
                           "checkpoint is saved and --resume_from_checkpoint last goes on from it",
                           state.global_step, state.max_steps, self.clock.seconds() / 60, (self.clock.box_s or 0) / 60)
            self.ended_by = "train_until"
            control.should_training_stop = True
            control.should_save = True  # whatever --save_strategy: the resume needs this checkpoint
        return control

    @property
    def paused(self) -> bool:
        """Stopped by --train_until with box time left: the schedule has not run to its end."""
        return self.ended_by == "train_until"
