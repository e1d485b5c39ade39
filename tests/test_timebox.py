"""The time box of a training run (oneiro_hf/training/timebox.py): it counts trained seconds across resumes, ends or
pauses the run, and the learning-rate schedule and the stage switch follow its spent share."""

from __future__ import annotations

import json
import math
import time
from types import SimpleNamespace

import pytest
import torch
from test_training import build, make_args, records, target  # noqa: F401 (fixtures)
from transformers import TrainerCallback, TrainerControl, TrainerState, get_scheduler

from oneiro_hf.training.arguments import OneiroTrainingArguments
from oneiro_hf.training.timebox import TimeBoxCallback, TrainingClock, follow_time_box
from oneiro_hf.training.trainer import TRAINING_INFO_FILE, OneiroTrainer, _StageCallback


class Clock:
    """Seconds that pass only when the test says so: the box is judged on them, not on this machine's load."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _clock(box_minutes=None, until=None, before_s=0.0):
    fake = Clock()
    clock = TrainingClock(box_minutes=box_minutes, until=until, before_s=before_s, clock=fake, wall=fake)
    clock.start()
    return clock, fake


def _step(callback, control=None):
    control = control or TrainerControl()
    callback.on_step_end(SimpleNamespace(save_strategy="no", device="cpu"), TrainerState(max_steps=100), control)
    return control


def test_the_box_ends_the_run_when_its_minutes_are_trained():
    clock, fake = _clock(box_minutes=1.0)
    callback = TimeBoxCallback(clock)
    fake.now += 59.9
    assert not _step(callback).should_training_stop
    fake.now += 0.2
    control = _step(callback)
    assert control.should_training_stop and not control.should_save
    assert callback.ended_by == "time box" and not callback.paused


def test_seconds_trained_before_a_resume_count_against_the_box():
    clock, fake = _clock(box_minutes=1.0, before_s=50.0)
    callback = TimeBoxCallback(clock)
    assert clock.fraction() == pytest.approx(50 / 60)
    fake.now += 9.9
    assert not _step(callback).should_training_stop
    fake.now += 0.2
    assert _step(callback).should_training_stop and callback.ended_by == "time box"


def test_train_until_alone_is_the_box_and_finishes_the_run():
    clock, fake = _clock(until=1000.0 + 30.0)
    assert clock.box_s == pytest.approx(30.0)
    callback = TimeBoxCallback(clock)
    fake.now += 15
    assert not _step(callback).should_training_stop and clock.fraction() == pytest.approx(0.5)
    fake.now += 15
    assert _step(callback).should_training_stop and callback.ended_by == "time box" and not callback.paused


def test_train_until_before_the_box_is_spent_pauses_with_a_checkpoint():
    clock, fake = _clock(box_minutes=2.0, until=1000.0 + 30.0)
    callback = TimeBoxCallback(clock)
    fake.now += 31
    control = _step(callback)
    assert control.should_training_stop and control.should_save
    assert callback.ended_by == "train_until" and callback.paused
    assert clock.fraction() == pytest.approx(31 / 120)


def test_no_box_never_stops_or_moves_the_schedule():
    clock, fake = _clock()
    fake.now += 1e6
    assert clock.fraction() == 0.0 and not _step(TimeBoxCallback(clock)).should_training_stop


def test_an_unbounded_box_only_pauses_and_leaves_the_schedule_to_the_steps():
    """--max_train_minutes inf (the campaign's --train_epochs): the steps bound the run, a deadline pauses it."""
    clock, fake = _clock(box_minutes=math.inf, until=1000.0 + 30.0)
    scheduler, by_step = _scheduler(clock)
    callback = TimeBoxCallback(clock)
    fake.now += 29
    assert not _step(callback).should_training_stop
    for _ in range(500):
        scheduler.step()
    assert scheduler.get_last_lr()[0] == pytest.approx(by_step(500))  # the step's rate, not the box's
    fake.now += 2
    control = _step(callback)
    assert control.should_training_stop and control.should_save and callback.paused
    assert clock.fraction() == 0.0 and not clock.box_spent()


def _scheduler(clock, kind="cosine_with_min_lr", warmup=10, steps=1000):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    kwargs = {"min_lr_rate": 0.1} if kind == "cosine_with_min_lr" else None
    made = get_scheduler(kind, optimizer=optimizer, num_warmup_steps=warmup, num_training_steps=steps,
                         scheduler_specific_kwargs=kwargs)
    by_step = made.lr_lambdas[0]
    return follow_time_box(made, clock, warmup, steps), by_step


def test_the_schedule_follows_the_spent_share_of_the_box():
    clock, fake = _clock(box_minutes=10.0)
    scheduler, by_step = _scheduler(clock)
    lam = scheduler.lr_lambdas[0]
    assert lam(5) == pytest.approx(by_step(5))  # warmup goes by steps
    assert lam(20) == pytest.approx(by_step(20))  # no time spent: the step schedule
    fake.now += 300  # half the box: the schedule is half way through the steps after warmup
    assert lam(20) == pytest.approx(by_step(20))  # as of the last reading of the clocks
    clock.tick()
    assert lam(20) == pytest.approx(by_step(10 + 0.5 * 990))
    assert lam(20) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lam(900) == pytest.approx(by_step(900))  # steps further than the time: the steps
    fake.now += 400  # past the box: the end of the schedule
    clock.tick()
    assert lam(30) == pytest.approx(0.1)


def test_a_schedule_that_cannot_follow_the_box_is_refused(tmp_path):
    clock, _ = _clock(box_minutes=10.0)
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
    with pytest.raises(TypeError, match="cannot follow a time box. Fix: use a step schedule"):
        follow_time_box(plateau, clock, 0, 100)
    with pytest.raises(ValueError, match=r"driven by metrics, not steps\)\. Fix: use a step schedule"):
        OneiroTrainingArguments(output_dir=str(tmp_path), max_train_minutes=5.0, eval_strategy="steps", eval_steps=5,
                                lr_scheduler_type="reduce_lr_on_plateau", report_to="none", use_cpu=True)


def test_stage_2_starts_at_its_share_of_the_box(tmp_path):
    """A run that would not reach stage 1's share of the steps still trains stage 2."""
    args = OneiroTrainingArguments(output_dir=str(tmp_path), max_train_minutes=1.0, stage1_fraction=0.5,
                                   report_to="none", use_cpu=True)  # stage 1 gets 30 s
    clock, fake = _clock(box_minutes=1.0)
    trainer = SimpleNamespace(switch_step=None, eval_dataset=None, clock=clock)
    trainer._set_switch_step = lambda max_steps: setattr(trainer, "switch_step", round(max_steps * 0.5))
    state, control = TrainerState(max_steps=1000, global_step=3), TrainerControl()
    callback = _StageCallback(trainer)
    callback.on_train_begin(args, state, control)
    assert trainer.switch_step == 500
    fake.now += 29.9
    clock.tick()
    callback.on_step_end(args, state, control)  # too early: stage 1 goes on
    assert trainer.switch_step == 500
    fake.now += 0.2
    clock.tick()
    state.global_step = 4
    callback.on_step_end(args, state, control)
    assert trainer.switch_step == 4
    # a run resumed past its switch keeps it
    state.global_step = 9
    callback.on_train_begin(args, state, control)
    assert trainer.switch_step == 4


def test_time_limit_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="max_train_minutes must be > 0"):
        OneiroTrainingArguments(output_dir=str(tmp_path), max_train_minutes=0.0, report_to="none", use_cpu=True)


class _Tick(TrainerCallback):
    """Three seconds of the fake clock pass in every training step."""

    def __init__(self, fake: Clock) -> None:
        self.fake = fake

    def on_step_begin(self, args, state, control, **kwargs):
        self.fake.now += 3.0
        return control


def test_a_paused_run_resumes_with_its_trained_seconds_and_schedule(target, records, tmp_path):  # noqa: F811
    """Paused by --train_until at 30 s of a 60 s box, resumed: the schedule and the stage switch go on where the
    box was, and the run ends when the box (not a fresh one) is spent."""
    fake = Clock(time.time())
    out = tmp_path / "run"

    def fresh(until):
        args = make_args(tmp_path, output_dir=str(out), stage="1+2", stage1_fraction=0.4, max_steps=400,
                         save_strategy="no", lr_scheduler_type="cosine",
                         max_train_minutes=1.0, train_until=until)
        drafter, train_ds, _, mean, std = build(target, records, args, cache_dir=tmp_path / "cache")
        trainer = OneiroTrainer(drafter, target, args, train_ds, None, state_mean=mean, state_std=std)
        trainer.clock.clock = trainer.clock.wall = fake
        trainer.add_callback(_Tick(fake))
        return trainer

    first = fresh(fake.now + 30.5)
    first.train()
    assert first.time_box.paused and first.time_box.ended_by == "train_until"
    assert first.state.global_step == 11  # the step that crossed the deadline ends the process
    assert [p.name for p in out.glob("checkpoint-*")] == ["checkpoint-11"]  # saved for the resume, --save_strategy no
    saved = json.loads((out / "checkpoint-11" / TRAINING_INFO_FILE).read_text())
    assert saved["trained_seconds"] == pytest.approx(33.0) and saved["switch_step"] == 9  # 24 s of 60 > 40%
    # step 11's rate was set as of the clocks read at the end of step 10: half the box
    assert first.lr_scheduler.get_last_lr()[0] == pytest.approx(3e-3 * 0.5 * (1 + math.cos(math.pi * 30 / 60)))

    resumed = fresh(fake.now + 3600)
    resumed.train(resume_from_checkpoint=str(out / "checkpoint-11"))
    assert resumed.clock.before_s == pytest.approx(33.0) and resumed.switch_step == 9
    assert resumed.time_box.ended_by == "time box" and not resumed.time_box.paused
    assert resumed.state.global_step == 20  # 27 more seconds of the box, not a new minute
    assert resumed.lr_scheduler.get_last_lr()[0] == pytest.approx(3e-3 * 0.5 * (1 + math.cos(math.pi * 57 / 60)))
    ks = {h["step"]: h["rollout_steps"] for h in resumed.state.log_history if "loss" in h}
    assert all(k == 3 for step, k in ks.items() if step > 11)  # stage 2 went on after the resume


def test_only_its_own_resume_replaces_a_paused_drafter(tmp_path):
    from oneiro_hf.training.trainer import OutputDirHasDrafter, check_output_dir

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "oneiro_drafter"}))
    (tmp_path / "training_summary.json").write_text(json.dumps({"finished": False}))
    check_output_dir(tmp_path, overwrite=False, resuming=True)
    with pytest.raises(OutputDirHasDrafter, match="Fix: pass another --output_dir"):
        check_output_dir(tmp_path, overwrite=False)  # a fresh run would start the schedule over
    (tmp_path / "training_summary.json").write_text(json.dumps({"finished": True}))
    with pytest.raises(OutputDirHasDrafter):
        check_output_dir(tmp_path, overwrite=False, resuming=True)


def _tick_on_rank(rank: int, port: int, results) -> None:
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2, init_method=f"tcp://127.0.0.1:{port}")
    try:
        fake = Clock(1000.0 + 100 * rank)  # each process's own clocks disagree
        clock = TrainingClock(box_minutes=1.0, until=1050.0, clock=fake, wall=fake)
        clock.start()
        fake.now += 20 + 7 * rank
        clock.tick()
        results[rank] = (clock.seconds(), clock.deadline_passed())
    finally:
        torch.distributed.destroy_process_group()


def test_every_process_reads_rank_0s_clocks():
    """In a multi-process run all ranks must agree on the learning rate and on the step training stops at."""
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_tick_on_rank, args=(port, results), nprocs=2, join=True)
        assert dict(results) == {0: (20.0, False), 1: (20.0, False)}  # rank 1 alone would say 27 s, deadline passed
