"""Stage 3 (on-policy refinement) on tiny random targets: recorded error positions, resume, learning, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny import greedy, make_model, random_prompt
from transformers import TrainerCallback

from oneiro_hf import OneiroDrafter
from oneiro_hf.drafting.engine import SequenceEngine
from oneiro_hf.modeling_oneiro import DrafterTargetMismatch
from oneiro_hf.training.cli import main as cli_main
from oneiro_hf.training.onpolicy import (
    ONPOLICY_STATE_FILE,
    OnPolicyError,
    OnPolicyTrainer,
    ReplayBuffer,
    collect,
)
from oneiro_hf.training.trainer import OneiroTrainingArguments


def prompts_for(n: int, seed: int = 0, length: int = 6) -> list[dict]:
    return [{"id": f"p{i}", "input_ids": random_prompt(length, seed + i)[0].tolist()} for i in range(n)]


def stage3_args(out: Path, **overrides) -> OneiroTrainingArguments:
    base = dict(  # noqa: C408 (keyword form mirrors TrainingArguments)
        output_dir=str(out),
        stage="3",
        per_device_train_batch_size=2,
        learning_rate=3e-3,
        logging_steps=2,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        warmup_steps=0,
        lr_scheduler_type="constant",
        seed=0,
        max_seq_len=64,
        onpolicy_rounds=2,
        onpolicy_prompts_per_round=3,
        onpolicy_steps_per_round=4,
        onpolicy_max_new_tokens=16,
        onpolicy_draft_tokens=3,
        onpolicy_buffer_size=5,
        rollout_step_weights="1,0.8,0.6",
    )
    base.update(overrides)
    return OneiroTrainingArguments(**base)


# ------------------------------------------------------------------------------------------ collection
def test_collection_records_the_hand_made_error_positions(monkeypatch):
    """A drafter forced to propose the target's greedy token everywhere except at chosen positions: the recorded
    rounds (start, accepted, tokens) and error positions must be exactly the hand-derived ones."""
    model = make_model("llama")
    drafter = OneiroDrafter.from_target(model)
    prompt = random_prompt(7, seed=3)
    p = prompt.shape[1]
    truth = greedy(model, prompt, 16)[0].tolist()  # the target's own greedy answer
    wrong = {p + 3, p + 4, p + 10}  # positions where the drafter proposes a wrong token
    cursor = {"pos": 0}
    original = SequenceEngine.draft

    def tracked(self, input_ids, *args, **kwargs):
        cursor["pos"] = input_ids.shape[1]  # the first drafted token lands here
        return original(self, input_ids, *args, **kwargs)

    def scripted_readout(states):
        pos = cursor["pos"]
        cursor["pos"] += 1
        token = truth[pos] if pos not in wrong else 3 + (truth[pos] - 3 + 1) % (128 - 3)
        logits = torch.full((states.shape[0], 128), -30.0)
        logits[:, token] = 30.0
        return logits

    monkeypatch.setattr(SequenceEngine, "draft", tracked)
    monkeypatch.setattr(drafter, "readout_logits", scripted_readout)
    sequences, metrics = collect(model, drafter, [{"id": "a", "input_ids": prompt[0].tolist()}], 16, 4)
    (seq,) = sequences
    assert seq.tokens == truth  # strict greedy: the collected text is the target's greedy output
    # hand-derived: the prefill makes token p; drafts of 4 start at p+1
    #   p+1: p+1, p+2 right, p+3 wrong -> 2 accepted, next start p+4 (after the target's own token at p+3)
    #   p+4: wrong at once -> 0, next p+5;  p+5: p+5..p+8 right -> 4, next p+10 (bonus at p+9)
    #   p+10: wrong at once -> 0, next p+11;  p+11: p+11..p+14 right -> 4; the answer ends at p+16
    assert [(s, a) for s, a, _ in seq.rounds] == [(p + 1, 2), (p + 4, 0), (p + 5, 4), (p + 10, 0), (p + 11, 4)]
    assert seq.error_positions() == [p + 3, p + 4, p + 10]
    for start, accepted, tokens in seq.rounds:
        assert len(tokens) == 4 and tokens[:accepted] == truth[start : start + accepted]
    assert metrics["collect_rounds"] == 5 and metrics["collect_rejected_share"] == pytest.approx(3 / 5)
    assert metrics["collect_accept_pos1"] == pytest.approx(3 / 5)  # rounds 1, 3, 5 got their first token
    assert metrics["collect_tau"] == pytest.approx(15 / 5)  # 15 tokens after the prefill in 5 verifications
    # recording is off again, and off by default for ordinary calls
    assert drafter.record_draft_rounds is False
    model.generate(prompt, max_new_tokens=4, do_sample=False, assistant_model=drafter)
    assert drafter.last_stats.rounds is None


def test_replay_buffer_fifo_and_reservoir_are_deterministic():
    from oneiro_hf.training.onpolicy import CollectedSequence

    items = [CollectedSequence(str(i), [1, 2, 3], 1, 0) for i in range(20)]
    fifo = ReplayBuffer(5, "fifo")
    fifo.add(items)
    assert [s.id for s in fifo.items] == ["15", "16", "17", "18", "19"]
    a, b = ReplayBuffer(5, "reservoir", seed=1), ReplayBuffer(5, "reservoir", seed=1)
    a.add(items)
    b.add(items[:7])
    b.load_state_dict(json.loads(json.dumps(b.state_dict())))  # through a checkpoint
    b.add(items[7:])
    assert [s.id for s in a.items] == [s.id for s in b.items] and len(a) == 5 and a.seen == 20
    assert {s.id for s in a.items} != {"15", "16", "17", "18", "19"}


# ------------------------------------------------------------------------------------------ training
def make_trainer(out: Path, model, prompts, **overrides) -> OnPolicyTrainer:
    torch.manual_seed(0)
    drafter = OneiroDrafter.from_target(model)
    return OnPolicyTrainer(drafter, model, stage3_args(out, **overrides), prompts)


@torch.no_grad()
def buffer_loss(trainer: OnPolicyTrainer) -> float:
    """The stage 3 loss over the whole buffer (fixed data, so comparable before and after training)."""
    module = trainer.train_module
    module.eval()
    batch = trainer.batch_for(trainer.buffer.items)
    loss = module(
        batch["input_ids"], batch["attention_mask"], batch["prompt_lens"], batch["states"], batch["target_argmax"],
        rollout_steps=trainer.steps, chain_weights=batch["chain_weights"],
    )["loss"]
    module.train()
    return float(loss)


def test_loss_decreases_on_a_fixed_toy_problem(tmp_path):
    model = make_model("llama", strength="prefix")
    trainer = make_trainer(
        tmp_path / "o", model, prompts_for(6), onpolicy_rounds=1, onpolicy_prompts_per_round=6,
        onpolicy_steps_per_round=60, onpolicy_buffer_size=6, learning_rate=1e-3,
    )
    trainer.ensure_round(0)
    rounds = [r for s in trainer.buffer.items for r in s.rounds]
    assert rounds and any(a < len(t) for _, a, t in rounds)  # there are rejections to learn from
    before = buffer_loss(trainer)
    trainer.train()
    after = buffer_loss(trainer)
    assert trainer.collections_run == 1 and trainer.state.global_step == 60
    assert after < 0.7 * before, (before, after)
    logs = trainer.state.log_history
    assert {"collect_tau", "collect_accept_pos1", "round_train_loss", "round_agree_step1"} <= set(trainer.round_logs[0])
    assert any("round_train_loss" in h and "round_agree_step1" in h for h in logs)
    assert any("agree_step3" in h for h in logs if "loss" in h)
    assert not any(p.requires_grad for p in model.parameters())


class _StopAt(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = True
        return control


@pytest.mark.parametrize("resume_step", [4, 6])
def test_resume_after_a_kill_loses_no_steps_and_repeats_no_collection(tmp_path, resume_step):
    """Kill in round 2 (step 7 of 8), resume from the round boundary (4) or mid-round (6): the buffer, round
    index, logged steps and weights match an uninterrupted run, and round 2 is never decoded twice."""
    model = make_model("llama", strength="prefix")
    prompts = prompts_for(6)
    kw = {"save_strategy": "steps", "save_steps": 3}  # checkpoints at 3, 4 (round boundary), 6
    straight = make_trainer(tmp_path / "a", model, prompts, **kw)
    straight.train()
    assert straight.collections_run == 2 and straight.rounds_collected == 2

    killed = make_trainer(tmp_path / "b", model, prompts, **kw)
    killed.add_callback(_StopAt(7))
    killed.train()
    assert killed.collections_run == 2 and (tmp_path / "b" / "onpolicy" / "round-001.json").is_file()
    ckpt = tmp_path / "b" / f"checkpoint-{resume_step}"
    saved = json.loads((ckpt / ONPOLICY_STATE_FILE).read_text())
    assert saved["rounds_collected"] == (1 if resume_step == 4 else 2)

    resumed = make_trainer(tmp_path / "b", model, prompts, **kw)
    resumed.train(resume_from_checkpoint=str(ckpt))
    assert resumed.collections_run == 0  # round 2 came from the checkpoint or the saved collection
    assert resumed.state.global_step == 8 and resumed.rounds_collected == 2
    assert resumed.buffer.state_dict() == straight.buffer.state_dict()
    steps = sorted({h["step"] for h in resumed.state.log_history if "loss" in h})
    assert steps == [2, 4, 6, 8]
    assert [h["onpolicy_round"] for h in resumed.state.log_history if "collect_tau" in h] == [0, 1]
    assert [m["collect_tau"] for m in resumed.round_logs] == [m["collect_tau"] for m in straight.round_logs]
    for key, value in straight.drafter.state_dict().items():
        torch.testing.assert_close(resumed.drafter.state_dict()[key], value, atol=1e-5, rtol=1e-4)


# ------------------------------------------------------------------------------------------ bad input
def test_bad_input_gives_clear_errors(tmp_path):
    model = make_model("llama")
    drafter = OneiroDrafter.from_target(model)
    with pytest.raises(OnPolicyError, match="needs training prompts"):
        OnPolicyTrainer(drafter, model, stage3_args(tmp_path / "o"), [])
    with pytest.raises(OnPolicyError, match="non-empty"):
        OnPolicyTrainer(drafter, model, stage3_args(tmp_path / "o"), [{"input_ids": []}])
    with pytest.raises(OnPolicyError, match="another target"):
        OnPolicyTrainer(drafter, model, stage3_args(tmp_path / "o"), [{"input_ids": [5, 500]}])
    with pytest.raises(OnPolicyError, match="--init_drafter"):
        OnPolicyTrainer(None, model, stage3_args(tmp_path / "o"), prompts_for(2))
    other = make_model("llama", hidden=32)
    with pytest.raises(DrafterTargetMismatch, match="another target"):
        OnPolicyTrainer(OneiroDrafter.from_target(other), model, stage3_args(tmp_path / "o"), prompts_for(2))
    with pytest.raises(ValueError, match="onpolicy_mix_ratio"):
        stage3_args(tmp_path / "o", onpolicy_mix_ratio=1.5)
    # a stage 1/2 checkpoint is not a stage 3 one
    fake = tmp_path / "checkpoint-1"
    fake.mkdir()
    trainer = OnPolicyTrainer(drafter, model, stage3_args(tmp_path / "o"), prompts_for(2))
    with pytest.raises(OnPolicyError, match="not a stage 3 checkpoint"):
        trainer._load_from_checkpoint(str(fake))


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory):
    root = tmp_path_factory.mktemp("stage3")
    model = make_model("llama", strength="prefix", eos_token_id=2)
    model.save_pretrained(root / "model")
    OneiroDrafter.from_target(model).save_pretrained(root / "drafter")
    other = make_model("llama", hidden=32)
    OneiroDrafter.from_target(other).save_pretrained(root / "other_drafter")
    records = []
    for i, rec in enumerate(prompts_for(12, seed=50)):
        out = greedy(model, torch.tensor([rec["input_ids"]]), 12)[0, len(rec["input_ids"]) :].tolist()
        records.append({"id": f"r{i}", "source": "synthetic", "input_ids": rec["input_ids"], "output_ids": out})
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root


def cli_args(root: Path, out: Path, *extra: str) -> list[str]:
    return [
        "--target", str(root / "model"), "--data", str(root / "data.jsonl"), "--output_dir", str(out),
        "--stage", "3", "--onpolicy_rounds", "2", "--onpolicy_prompts_per_round", "3",
        "--onpolicy_steps_per_round", "2", "--onpolicy_max_new_tokens", "10", "--onpolicy_draft_tokens", "3",
        "--per_device_train_batch_size", "2", "--max_seq_len", "64", "--eval_fraction", "0.3",
        "--eval_rollout_steps", "3", "--report_to", "none", "--use_cpu", "true", "--disable_tqdm", "true",
        "--save_strategy", "steps", "--save_steps", "2", "--threads", "1", *extra,
    ]


def test_cli_stage3_end_to_end_and_its_errors(tiny_files, tmp_path, capsys):
    out = tmp_path / "refined"
    assert cli_main(cli_args(tiny_files, out)) == 2  # no --init_drafter
    assert "--init_drafter" in capsys.readouterr().err
    assert cli_main(cli_args(tiny_files, out, "--init_drafter", str(tiny_files / "other_drafter"))) == 2
    assert "does not fit --target" in capsys.readouterr().err
    assert cli_main(cli_args(tiny_files, out, "--init_drafter", str(tiny_files / "drafter"),
                             "--onpolicy_prompt_offset", "1000")) == 2
    assert "no training prompts" in capsys.readouterr().err

    assert cli_main(cli_args(tiny_files, out, "--init_drafter", str(tiny_files / "drafter"))) == 0
    printed = capsys.readouterr().out
    assert "round 0: collection tau" in printed and "round 1: collection tau" in printed
    assert f"Drafter saved to {out}" in printed and "held-out initial drafter" in printed
    summary = json.loads((out / "training_summary.json").read_text())
    assert summary["global_step"] == 4 and len(summary["round_logs"]) == 2
    assert "collect_tau" in summary["round_logs"][1] and "round_train_loss" in summary["round_logs"][1]
    card = (out / "README.md").read_text()
    assert "stage 3" in card and f'OneiroDrafter.from_pretrained("{out}", target=model)' in card
    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM.from_pretrained(tiny_files / "model").eval()
    drafter = OneiroDrafter.from_pretrained(str(out), target=model)
    prompt = torch.tensor([[5, 9, 17, 33, 40]])
    plain = model.generate(prompt, max_new_tokens=10, do_sample=False)
    assert torch.equal(plain, model.generate(prompt, max_new_tokens=10, do_sample=False, assistant_model=drafter))
