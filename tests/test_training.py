"""Training pipeline on a tiny random llama target: vocabulary, features, ridge, stages 1/2, resume, CLI, DDP."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from tiny import MODEL_CLASSES, tiny_config
from transformers import LlamaForCausalLM, TrainerCallback

from oneiro_hf import OneiroDrafter
from oneiro_hf.drafting.kv_cache import DrafterKVCache
from oneiro_hf.training import feature_store as store
from oneiro_hf.training import features as feat
from oneiro_hf.training.cli import main as cli_main
from oneiro_hf.training.records import DataFileError, load_records
from oneiro_hf.training.ridge import fit_fuse_ridge
from oneiro_hf.training.trainer import (
    CheckpointMismatch,
    OneiroTrainer,
    OneiroTrainingArguments,
    OutputDirHasDrafter,
    evaluate_drafter,
    parallel_rollout,
)
from oneiro_hf.training.vocab import select_draft_vocab, special_token_ids

VOCAB = 96
EOS = 2


def tiny_target(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    # peaked distributions (initializer_range 0.1), layers that matter
    cfg = tiny_config("llama", vocab=VOCAB, hidden=32, max_position_embeddings=256, tie_word_embeddings=True,
                      eos_token_id=EOS)
    return LlamaForCausalLM(cfg).eval()


def make_records(model, n: int, seed: int = 1, new_tokens: int = 20) -> list[dict]:
    gen = torch.Generator().manual_seed(seed)
    records = []
    with torch.no_grad():
        for i in range(n):
            plen = int(torch.randint(4, 12, (1,), generator=gen))
            prompt = torch.randint(3, VOCAB, (1, plen), generator=gen)
            # sampled continuations give varied contexts; the labels are the target's argmax anyway
            torch.manual_seed(seed * 1000 + i)
            out = model.generate(
                prompt,
                max_new_tokens=new_tokens,
                do_sample=True,
                temperature=0.7,
                top_k=0,
                top_p=1.0,
                eos_token_id=None,
                pad_token_id=0,
            )
            records.append(
                {
                    "id": f"r{i}",
                    "source": "synthetic" if i % 3 else "stdlib",
                    "prompt": "",
                    "input_ids": prompt[0].tolist(),
                    "output_ids": out[0, plen:].tolist() + [EOS],
                }
            )
    return records


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@pytest.fixture(scope="module")
def target():
    torch.set_num_threads(1)
    return tiny_target()


@pytest.fixture(scope="module")
def records(target):
    return make_records(target, 48)


def make_args(tmp_path: Path, **overrides) -> OneiroTrainingArguments:
    base = dict(  # noqa: C408 (keyword form mirrors TrainingArguments)
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=4,
        learning_rate=3e-3,
        max_steps=30,
        logging_steps=5,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        warmup_steps=0,
        lr_scheduler_type="constant",
        seed=0,
        dataloader_num_workers=0,
        draft_vocab_size=64,
        interval="2,4",
        max_seq_len=64,
        stage="1",
        rollout_steps=3,
        feature_batch_tokens=512,
        eval_rollout_steps=3,
    )
    base.update(overrides)
    return OneiroTrainingArguments(**base)


def build(target, records, args, ridge: bool = True, cache_dir: Path | None = None):
    vocab = select_draft_vocab(records, args.draft_vocab_size, VOCAB, special_token_ids(target))
    drafter = OneiroDrafter.from_target(target, interval=args.parsed_interval(), draft_vocab_ids=vocab)
    train, held = feat.split_records(records, 0.15)
    if cache_dir is not None:
        cache = store.FeatureCache(cache_dir, target, args.max_seq_len, resid_layer=2)
        cache.build(train)
        cache.build(held, with_resid=False)
        train_ds, eval_ds = store.CachedFeatureDataset(cache, train), store.CachedFeatureDataset(cache, held)
    else:
        train_ds, eval_ds = (
            feat.SequenceDataset(train, args.max_seq_len),
            feat.SequenceDataset(held, args.max_seq_len),
        )
    mean, std = feat.state_statistics(feat.iter_feature_batches(train_ds, target, 512))
    if ridge:
        fit_fuse_ridge(drafter, feat.iter_feature_batches(train_ds, target, 512, resid_layer=2))
    return drafter, train_ds, eval_ds, mean, std


def weights_digest(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _open_caches_in_step(target, root: str, count: int, barrier, failures) -> None:
    for i in range(count):
        barrier.wait()  # both processes open the same new directory at the same moment
        try:
            store.FeatureCache(os.path.join(root, f"cache{i}"), target, 64)
        except Exception as err:  # noqa: BLE001 - any failure is what this test counts
            failures.put(repr(err))


def test_two_processes_opening_one_new_feature_cache_never_collide(target, tmp_path):
    # DDP ranks (and concurrent runs) construct the cache at once; meta.json used to be written by both
    # through one temporary name, and the second rename failed (FileNotFoundError) about every other time
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    barrier, failures = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_open_caches_in_step, args=(target, str(tmp_path), 40, barrier, failures))
             for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0, 0]
    errors = []
    while not failures.empty():
        errors.append(failures.get())
    assert errors == []
    for i in range(40):
        assert json.loads((tmp_path / f"cache{i}" / "meta.json").read_text())["max_len"] == 64


# ------------------------------------------------------------------------------------------ vocabulary
def test_bfloat16_feature_cache_computes_in_bfloat16_and_never_mixes_with_float32(target, records, tmp_path):
    seq = feat.make_sequence(records[0], 64)
    ids = torch.tensor([seq[0]])
    exact = feat.target_features(target, ids, label_from=torch.tensor([seq[1] - 1]))
    lowered = feat.target_features(target, ids, label_from=torch.tensor([seq[1] - 1]), compute_dtype=torch.bfloat16)
    assert lowered["states"].dtype == torch.float32  # stored as the target's dtype
    error = (lowered["states"] - exact["states"]).norm() / exact["states"].norm()
    assert 0 < error < 0.05  # computed in bfloat16: close to float32, not the same numbers
    # the labels come from the float32 head: they agree with float32's wherever its top two are not near-tied
    logits = target(ids).logits[0].float()
    top2 = logits.topk(2, dim=-1).values
    clear = (top2[:, 0] - top2[:, 1] > 0.05) & (exact["target_argmax"][0] >= 0)
    assert clear.any()
    assert torch.equal(lowered["target_argmax"][0][clear], exact["target_argmax"][0][clear])

    cache = store.FeatureCache(tmp_path / "bf16", target, 64, compute_dtype=torch.bfloat16)
    cache.build(records[:4], progress=False)
    assert json.loads((tmp_path / "bf16" / "meta.json").read_text())["compute_dtype"] == "bfloat16"
    stored = cache.get(cache.index[feat.sequence_key(*seq)])["states"].float()
    assert torch.allclose(stored, lowered["states"][0], atol=2e-2, rtol=1e-2)  # the bfloat16 pass, as float16
    with pytest.raises(store.FeatureCacheMismatch, match="compute dtype"):
        store.FeatureCache(tmp_path / "bf16", target, 64)  # a float32 run never reads bfloat16 features
    store.FeatureCache(tmp_path / "f32", target, 64)
    assert "compute_dtype" not in json.loads((tmp_path / "f32" / "meta.json").read_text())  # as before the option


@pytest.mark.parametrize("arch, max_len", [("llama", 64), ("llama", 12), ("qwen2", 64), ("gemma3", 64)])
def test_features_captured_while_answering_match_the_feature_pass(tmp_path, arch, max_len):
    """generate_batch(with_states=True) keeps the states the decode computed; stored with FeatureCache.add they
    are what FeatureCache.build computes for the same records (left padding, early stops, the last token, and
    sequences cut at max_len included)."""
    from oneiro_hf.training.selfdistill import captured_features, generate_batch

    torch.manual_seed(0)
    target = MODEL_CLASSES[arch](tiny_config(arch, layers=3, vocab=VOCAB)).eval()
    prompts = [[5, 9, 11, 3, 20], [7, 8], [30, 31, 32, 33, 34, 35, 36, 37, 38, 39]]  # longer than gemma's window
    free = generate_batch(target, prompts, 8, [], 0)
    stop = free[0][0][2]  # a token row 0 says third: row 0 stops early, the others may run to the limit
    results = generate_batch(target, prompts, 8, [stop], 0, with_states=True)
    assert results[0][1] and len(results[0][0]) <= 3
    assert any(not stopped for _, stopped, _ in results)
    assert [s.shape[0] for _, _, s in results] == [len(p) + len(r) for p, (r, _, _) in zip(prompts, results)]

    captured = store.FeatureCache(tmp_path / "captured", target, max_len)
    written = captured.add(captured_features(target, prompts, results, max_len))
    assert written == sum(min(max_len, len(p) + len(r)) for p, (r, _, _) in zip(prompts, results))
    assert captured.add(captured_features(target, prompts, results, max_len)) == 0  # already there
    records = [{"input_ids": p, "output_ids": r} for p, (r, _, _) in zip(prompts, results)]
    passed = store.FeatureCache(tmp_path / "pass", target, max_len)
    passed.build(records, progress=False)
    for rec in records:
        a, b = captured.get(captured.lookup(rec)), passed.get(passed.lookup(rec))
        assert torch.equal(a["input_ids"], b["input_ids"]) and a["prompt_len"] == b["prompt_len"]
        assert torch.equal(a["target_argmax"], b["target_argmax"])
        assert torch.allclose(a["states"].float(), b["states"].float(), atol=2e-3)
    with pytest.raises(ValueError, match="one state and one label per token"):
        seq, plen, f = captured_features(target, prompts, results, max_len)[1]
        captured.add([([*seq, 3], plen, f)])


def test_feature_dtype_and_streaming_settings_are_checked(tmp_path):
    assert make_args(tmp_path, feature_dtype="bfloat16").feature_compute_dtype == torch.bfloat16  # on the fly too
    with pytest.raises(ValueError, match="float32 or bfloat16"):
        make_args(tmp_path, feature_dtype="float16", feature_cache_dir=str(tmp_path / "c"))
    with pytest.raises(ValueError, match="--stream_features .*Fix: pass --feature_cache_dir"):
        make_args(tmp_path, stream_features=True)
    with pytest.raises(ValueError, match="feature_cache_max_gb 2.0.*Fix: .*together with --stream_features"):
        make_args(tmp_path, feature_cache_max_gb=2.0, feature_cache_dir=str(tmp_path / "c"))
    with pytest.raises(ValueError, match="feature_cache_max_gb -1.0.*>= 0"):
        make_args(tmp_path, feature_cache_max_gb=-1.0, feature_cache_dir=str(tmp_path / "c"), stream_features=True)


def test_vocab_selection_frequency_specials_and_errors():
    recs = [
        {"input_ids": [5, 6], "output_ids": [7, 7, 7, 8, 8, 9, EOS]},
        {"input_ids": [5], "output_ids": [8, 10]},
    ]
    vocab = select_draft_vocab(recs, 3, VOCAB, special_ids=[EOS, 1])
    assert vocab.dtype == torch.long and vocab.tolist() == sorted(vocab.tolist())
    assert vocab.tolist() == [EOS, 7, 8]  # EOS appears so it is kept; then the two most frequent
    big = select_draft_vocab(recs, 10, VOCAB, special_ids=[EOS])
    assert big.numel() == 10 and {5, 6, 7, 8, 9, 10, EOS} <= set(big.tolist())
    assert select_draft_vocab(recs, 500, VOCAB).numel() == VOCAB
    with pytest.raises(ValueError, match=">= 1"):
        select_draft_vocab(recs, 0, VOCAB)
    with pytest.raises(ValueError, match="outside the target's vocabulary"):
        select_draft_vocab([{"input_ids": [1], "output_ids": [VOCAB + 3]}], 4, VOCAB)


# ------------------------------------------------------------------------------------------ data files
def test_malformed_and_empty_data_files(tmp_path):
    good = {"id": "a", "input_ids": [3, 4], "output_ids": [5, 6]}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(good) + "\n{not json\n" + json.dumps(good | {"id": "b"}) + "\n")
    with pytest.raises(DataFileError, match=r"bad.jsonl:2"):
        load_records(bad)
    missing = tmp_path / "missing.jsonl"
    missing.write_text(json.dumps(good) + "\n" + json.dumps({"id": "x", "input_ids": [1]}) + "\n")
    with pytest.raises(DataFileError, match=r"missing.jsonl:2.*output_ids"):
        load_records(missing)
    oov = tmp_path / "oov.jsonl"
    oov.write_text(json.dumps(good | {"output_ids": [5, 999]}) + "\n")
    with pytest.raises(DataFileError, match=r"oov.jsonl:1"):
        load_records(oov, vocab_size=VOCAB)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DataFileError, match="no records"):
        load_records(empty)
    growing = tmp_path / "growing.jsonl"
    growing.write_text(json.dumps(good) + "\n" + '{"id": "b", "input_ids": [1')
    assert [r["id"] for r in load_records(growing)] == ["a"]


# ------------------------------------------------------------------------------------------ rollouts
def test_parallel_rollout_matches_sequential_drafting(target):
    drafter = OneiroDrafter.from_target(target, interval=(2, 4))
    with torch.no_grad():
        drafter.fuse.weight.normal_(0, 0.05)
        ids = torch.randint(3, VOCAB, (2, 14))
        h = target.model(input_ids=ids).last_hidden_state
        pos = torch.arange(1, 14).unsqueeze(0).expand(2, -1)
        outs = parallel_rollout(drafter, h[:, :-1], ids[:, 1:], pos, 4)
        assert torch.equal(outs[0], drafter.transition(h[:, :-1], ids[:, 1:], pos))
        # skipping the prompt in steps >= 2 changes nothing for chains that start at or after first_index
        short = parallel_rollout(drafter, h[:, :-1], ids[:, 1:], pos, 4, first_index=5)
        for k in range(4):
            torch.testing.assert_close(short[k][:, 5 + k :], outs[k][:, 5 + k :], atol=1e-6, rtol=1e-5)
        for s in (0, 3, 8):  # chain started at index s, drafted like OneiroCandidateGenerator does
            cache = DrafterKVCache()
            state = drafter.transition(h[:1, : s + 1], ids[:1, 1 : s + 2], pos[:1, : s + 1], cache)[:, -1:]
            for k in range(1, 4):
                i = s + k
                state = drafter.transition(state, ids[:1, i + 1 : i + 2], pos[:1, i : i + 1], cache)
                torch.testing.assert_close(state[0, 0], outs[k][0, i], atol=1e-5, rtol=1e-4)


# Every supported architecture; the windowed ones with a window (4) shorter than the rollout's contexts.
ROLLOUT_ARCHS = {
    "llama": {},
    "mistral": {"window": 4},
    "qwen2": {"window": 4},  # the upper half of the layers slide: the drafter's copies (2, 4)
    "qwen3": {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 0},
    "gemma3": {"window": 4},  # sliding and full layers alternate
}


@pytest.mark.parametrize("arch", sorted(ROLLOUT_ARCHS))
def test_parallel_rollout_matches_sequential_drafting_on_every_architecture(arch):
    from tiny import make_model

    model = make_model(arch, hidden=32, seed=0, **ROLLOUT_ARCHS[arch])
    drafter = OneiroDrafter.from_target(model, interval=(2, 4))
    windows = {drafter._sliding_window(layer) for layer in drafter.layers}
    assert windows == ({None} if arch == "llama" else {4} if arch != "gemma3" else {4, None})
    with torch.no_grad():
        drafter.fuse.weight.normal_(0, 0.1)
        ids = torch.randint(3, 128, (1, 16), generator=torch.Generator().manual_seed(1))
        h = model.model(input_ids=ids).last_hidden_state
        pos = torch.arange(1, 16).unsqueeze(0)
        outs = parallel_rollout(drafter, h[:, :-1], ids[:, 1:], pos, 4, first_index=3)
        for s in range(3, 9):
            cache = DrafterKVCache()
            state = drafter.transition(h[:, : s + 1], ids[:, 1 : s + 2], pos[:, : s + 1], cache)[:, -1:]
            for k in range(1, 4):
                i = s + k
                state = drafter.transition(state, ids[:, i + 1 : i + 2], pos[:, i : i + 1], cache)
                torch.testing.assert_close(state[0, 0], outs[k][0, i], atol=1e-5, rtol=1e-4)


# ------------------------------------------------------------------------------------------ stage 0
def test_ridge_init_reduces_stage0_state_error(target, records, tmp_path):
    args = make_args(tmp_path)
    drafter, train_ds, eval_ds, _, std = build(target, records, args, ridge=False)
    zero = OneiroDrafter.from_target(target, interval=(2, 4), draft_vocab_ids=drafter.draft_vocab_ids)
    with torch.no_grad():
        zero.fuse.weight.zero_()
    default_err = evaluate_drafter(drafter, eval_ds, target, 1, std)["eval_state_loss_step1"]
    zero_err = evaluate_drafter(zero, eval_ds, target, 1, std)["eval_state_loss_step1"]
    report = fit_fuse_ridge(drafter, feat.iter_feature_batches(train_ds, target, 512, resid_layer=2))
    ridge_err = evaluate_drafter(drafter, eval_ds, target, 1, std)["eval_state_loss_step1"]
    assert report["val_rel_error"] < report["val_rel_error_before"]
    assert ridge_err < 0.8 * min(default_err, zero_err), (ridge_err, default_err, zero_err)


# ------------------------------------------------------------------------------------------ stages 1 and 2
@torch.no_grad()
def fixed_loss(trainer, dataset, steps: int) -> float:
    """The training loss with ``steps`` rollout steps over the whole dataset (fixed data, so comparable)."""
    module = trainer.train_module
    module.eval()
    total = 0.0
    for batch in feat.iter_feature_batches(dataset, trainer.target, 512):
        total += float(
            module(
                batch["input_ids"],
                batch["attention_mask"],
                batch["prompt_lens"],
                batch["states"],
                batch["target_argmax"],
                rollout_steps=steps,
            )["loss"]
        )
    module.train()
    return total


class _Probe(TrainerCallback):
    def __init__(self, fn, at_step):
        self.fn, self.at_step, self.value = fn, at_step, None

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at_step:
            self.value = self.fn()
        return control


def test_stage1_then_stage2_losses_decrease_and_agreement_is_logged(target, records, tmp_path):
    args = make_args(
        tmp_path,
        stage="1+2",
        max_steps=48,
        stage1_fraction=0.5,
        eval_strategy="no",
        learning_rate=1e-3,
        logging_steps=4,
    )
    drafter, train_ds, eval_ds, mean, std = build(
        target, records, args, ridge=False, cache_dir=tmp_path / "cache"
    )
    trainer = OneiroTrainer(drafter, target, args, train_ds, eval_ds, state_mean=mean, state_std=std)
    start = fixed_loss(trainer, train_ds, 1)
    probe = _Probe(lambda: (fixed_loss(trainer, train_ds, 1), fixed_loss(trainer, train_ds, 3)), at_step=24)
    trainer.add_callback(probe)
    before = trainer.evaluate()
    trainer.train()
    after = trainer.evaluate()
    switch_k1, switch_k3 = probe.value
    end_k3 = fixed_loss(trainer, train_ds, 3)
    assert switch_k1 < 0.7 * start  # stage 1 (teacher forcing) learned
    assert end_k3 < 0.95 * switch_k3  # stage 2 (3-step rollouts) learned further
    logs = [h for h in trainer.state.log_history if "loss" in h]
    stage1 = [h for h in logs if h["rollout_steps"] == 1]
    stage2 = [h for h in logs if h["rollout_steps"] == 3]
    assert [h["step"] for h in stage1] == [4, 8, 12, 16, 20, 24] and len(stage2) == 6
    assert all(f"agree_step{k}" in h for h in stage2 for k in (1, 2, 3))
    assert "agree_step1" in stage1[0] and "agree_step2" not in stage1[0]
    # the held-out test measures per-step agreement and tau, and the stage switch was evaluated
    assert {"eval_agree_step1", "eval_agree_step3", "eval_accept_3", "eval_tau"} <= set(after)
    assert any(h.get("step") == 24 and "eval_tau" in h for h in trainer.state.log_history)
    assert after["eval_state_loss_step1"] < before["eval_state_loss_step1"]
    # only the drafter trained; the target was frozen
    assert not any(p.requires_grad for p in target.parameters())


# ------------------------------------------------------------------------------------------ resume
class _StopAt(TrainerCallback):
    def __init__(self, step):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step >= self.step:
            control.should_training_stop = True
        return control


def test_resume_continues_without_losing_steps(target, records, tmp_path):
    def fresh(out):
        args = make_args(
            tmp_path,
            output_dir=str(out),
            stage="1+2",
            max_steps=12,
            save_strategy="steps",
            save_steps=4,
            logging_steps=4,
        )
        drafter, train_ds, _, mean, std = build(target, records, args, cache_dir=tmp_path / "cache")
        return OneiroTrainer(drafter, target, args, train_ds, None, state_mean=mean, state_std=std)

    straight = fresh(tmp_path / "a")
    straight.train()
    reference = weights_digest(straight.drafter)

    interrupted = fresh(tmp_path / "b")
    interrupted.add_callback(_StopAt(6))  # "killed" after step 6; the last checkpoint is step 4
    interrupted.train()
    assert (tmp_path / "b" / "checkpoint-4").is_dir()
    resumed = fresh(tmp_path / "b")
    resumed.train(resume_from_checkpoint=str(tmp_path / "b" / "checkpoint-4"))
    assert resumed.state.global_step == 12
    steps = sorted({h["step"] for h in resumed.state.log_history if "loss" in h})
    assert steps == [4, 8, 12]
    for key, value in reference.items():
        torch.testing.assert_close(resumed.drafter.state_dict()[key], value, atol=1e-6, rtol=1e-5)


def _tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_resume_with_other_config_fails_and_changes_nothing(target, records, tmp_path):
    out = tmp_path / "run"
    args = make_args(tmp_path, output_dir=str(out), max_steps=2, save_strategy="steps", save_steps=2)
    drafter, train_ds, _, mean, std = build(target, records, args, ridge=False)
    OneiroTrainer(drafter, target, args, train_ds, state_mean=mean, state_std=std).train()
    OneiroTrainer(drafter, target, args, train_ds, state_mean=mean, state_std=std).save_drafter()
    before = _tree_digest(out)
    for other in ({"interval": "1,3"}, {"draft_vocab_size": 32}):
        args2 = make_args(tmp_path, output_dir=str(out), max_steps=4, overwrite_output_dir=True, **other)
        d2, ds2, _, m2, s2 = build(target, records, args2, ridge=False)
        trainer = OneiroTrainer(d2, target, args2, ds2, state_mean=m2, state_std=s2)
        with pytest.raises(CheckpointMismatch, match="different drafter configuration"):
            trainer.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    assert _tree_digest(out) == before
    # and a finished drafter is never replaced without overwrite_output_dir
    args3 = make_args(tmp_path, output_dir=str(out), max_steps=1)
    trainer = OneiroTrainer(drafter, target, args3, train_ds, state_mean=mean, state_std=std)
    with pytest.raises(OutputDirHasDrafter):
        trainer.train()
    assert _tree_digest(out) == before


# ------------------------------------------------------------------------------------------ CLI
@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory, target, records):
    root = tmp_path_factory.mktemp("tiny")
    target.save_pretrained(root / "model")
    write_jsonl(root / "data.jsonl", records)
    return root


def _cli_argv(tiny_dir: Path, out: Path, cache: Path) -> list[str]:
    """A short oneiro-train run on the tiny target: stage 1+2, 8 steps, features cached in `cache`."""
    return [
        "--target", str(tiny_dir / "model"), "--data", str(tiny_dir / "data.jsonl"), "--output_dir", str(out),
        "--interval", "2,4", "--draft_vocab_size", "64", "--max_seq_len", "64", "--stage", "1+2",
        "--rollout_steps", "2", "--max_steps", "8", "--per_device_train_batch_size", "4", "--learning_rate", "3e-3",
        "--logging_steps", "4", "--save_strategy", "no", "--report_to", "none", "--use_cpu", "true",
        "--disable_tqdm", "true", "--eval_fraction", "0.15", "--eval_rollout_steps", "3",
        "--feature_cache_dir", str(cache), "--save_dtype", "bfloat16", "--threads", "1",
    ]


def test_cli_end_to_end(tiny_dir, tmp_path, capsys):
    out = tmp_path / "drafter"
    argv = _cli_argv(tiny_dir, out, tmp_path / "cache")
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    assert f"Drafter saved to {out}" in printed and "OneiroDrafter.from_pretrained" in printed
    assert "assistant_model=drafter" in printed
    card = (out / "README.md").read_text()
    assert "base_model:" in card and "records: 48" in card and "synthetic" in card and "tau" in card
    assert f'OneiroDrafter.from_pretrained("{out}", target=model)' in card
    assert not (out / "model.safetensors").exists() or (out / "config.json").is_file()
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), framework="pt") as fh:
        assert fh.get_tensor("fuse.weight").dtype == torch.bfloat16
    config = json.loads((out / "config.json").read_text())
    assert config["dtype"] == "bfloat16" and config["tree"] is True  # trained drafters verify trees by default
    # the saved drafter loads onto the target and decodes losslessly
    model = LlamaForCausalLM.from_pretrained(tiny_dir / "model").eval()
    drafter = OneiroDrafter.from_pretrained(str(out), target=model)
    prompt = torch.tensor([[5, 9, 17, 33, 40]])
    plain = model.generate(prompt, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    spec = model.generate(
        prompt, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0, assistant_model=drafter
    )
    assert torch.equal(plain, spec)
    # rerunning into the same directory refuses to overwrite the finished drafter
    assert cli_main(argv) == 2
    assert "already holds a trained drafter" in capsys.readouterr().err


def test_cli_refuses_a_cache_it_cannot_use_before_computing_features(tiny_dir, tmp_path, capsys, monkeypatch):
    import shutil
    from collections import namedtuple

    cache = tmp_path / "cache"
    bf16 = _cli_argv(tiny_dir, tmp_path / "a", cache) + ["--feature_dtype", "bfloat16", "--max_steps", "1"]
    assert cli_main(bf16) == 0
    assert json.loads((cache / "meta.json").read_text())["compute_dtype"] == "bfloat16"
    assert cli_main(_cli_argv(tiny_dir, tmp_path / "b", cache)) == 2  # float32 run, bfloat16 cache
    err = capsys.readouterr().err
    assert "compute dtype" in err and "Fix: pass another --feature_cache_dir" in err
    assert not (tmp_path / "b" / "model.safetensors").exists()

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10 * 2**30, 10 * 2**30 - 2**20, 2**20))
    assert cli_main(_cli_argv(tiny_dir, tmp_path / "c", tmp_path / "small")) == 2
    err = capsys.readouterr().err
    assert "GiB is free" in err and "Fix: free disk space" in err
    assert not list((tmp_path / "small").glob("shard-*"))  # refused before any feature was computed


def test_cli_malformed_data_names_the_line(tiny_dir, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a", "input_ids": [3, 4], "output_ids": [5]}\n{"id": "b", "input_ids": 7}\n')
    code = cli_main(
        [
            "--target",
            str(tiny_dir / "model"),
            "--data",
            str(bad),
            "--output_dir",
            str(tmp_path / "o"),
            "--use_cpu",
            "true",
            "--report_to",
            "none",
        ]
    )
    assert code == 2
    assert "bad.jsonl:2" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------ DDP
# the launcher of the environment running the tests (its bin/ need not be on PATH)
LAUNCHER = Path(sys.executable).parent / "accelerate"


@pytest.mark.skipif(not LAUNCHER.is_file(), reason=f"accelerate launcher not installed next to {sys.executable}")
def test_two_process_gloo_accelerate_launch(tiny_dir, tmp_path):
    out = tmp_path / "ddp"
    cmd = [
        # on a CPU-only machine `--multi_gpu` is what makes accelerate start N processes (torchrun, gloo);
        # `--cpu` alone runs a single process
        str(LAUNCHER),
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "-m",
        "oneiro_hf.training.cli",
        "--target",
        str(tiny_dir / "model"),
        "--data",
        str(tiny_dir / "data.jsonl"),
        "--output_dir",
        str(out),
        "--interval",
        "2,4",
        "--draft_vocab_size",
        "64",
        "--max_seq_len",
        "64",
        "--stage",
        "1+2",
        "--rollout_steps",
        "2",
        "--max_steps",
        "4",
        "--per_device_train_batch_size",
        "2",
        "--logging_steps",
        "2",
        "--save_strategy",
        "no",
        "--report_to",
        "none",
        "--disable_tqdm",
        "true",
        "--eval_fraction",
        "0.15",
        "--eval_rollout_steps",
        "2",
        "--feature_cache_dir",
        str(tmp_path / "cache"),
        "--threads",
        "1",
        "--max_train_minutes",  # the time box's clocks are read from rank 0 by every rank (a collective a step)
        "60",
    ]
    # this checkout's oneiro_hf, whatever the environment has installed
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=root)
    proc = subprocess.run(
        cmd, check=False, capture_output=True, text=True, timeout=150, env=env, cwd=tmp_path
    )
    # the launcher's summary ends stderr; what a crashed rank raised or aborted with is on lines naming it
    raised = "\n".join(line for line in proc.stderr.splitlines()
                       if any(word in line for word in ("Error", "terminate", "what()", "Abort", "abort")))
    assert proc.returncode == 0, raised[-3000:] + "\n" + proc.stdout[-2000:] + proc.stderr[-2000:]
    summary = json.loads((out / "training_summary.json").read_text())
    assert "2 process(es)" in summary["hardware"] and summary["global_step"] == 4
    assert summary["ended_by"] == "max_steps" and summary["finished"]
    assert (out / "model.safetensors").is_file()


# ------------------------------------------------------------------------------------------ --push_to_hub
def _tiny_cli_argv(tiny_dir, out, *extra):
    return ["--target", str(tiny_dir / "model"), "--data", str(tiny_dir / "data.jsonl"), "--output_dir", str(out),
            "--interval", "2,4", "--draft_vocab_size", "64", "--max_seq_len", "64", "--stage", "1",
            "--max_steps", "2", "--per_device_train_batch_size", "4", "--save_strategy", "no", "--report_to", "none",
            "--use_cpu", "true", "--disable_tqdm", "true", "--eval_fraction", "0", "--threads", "1", *extra]


def test_cli_push_to_hub_publishes_once_at_the_end(tiny_dir, tmp_path, monkeypatch, capsys):
    calls = []

    def fake_publish(drafter, repo_id, **kwargs):
        calls.append((drafter, repo_id, kwargs))
        return type("Info", (), {"oid": "abc123"})()

    monkeypatch.setattr("oneiro_hf.storage.hub.publish_drafter", fake_publish)
    out = tmp_path / "drafter"
    argv = _tiny_cli_argv(tiny_dir, out, "--push_to_hub", "true", "--hub_model_id", "me/tiny-drafter",
                          "--license", "apache-2.0", "--target_hub_id", "org/tiny-target")
    assert cli_main(argv) == 0
    assert "Published to me/tiny-drafter (abc123)" in capsys.readouterr().out
    [(drafter, repo_id, kwargs)] = calls
    assert repo_id == "me/tiny-drafter" and isinstance(drafter, OneiroDrafter)
    assert kwargs["base_model"] == "org/tiny-target" and kwargs["license"] == "apache-2.0"
    assert kwargs["training_info"] == out / "training_summary.json" and kwargs["dtype"] == "bfloat16"  # --save_dtype default
    assert kwargs["storage"] is None  # trained whole, published whole
    assert (out / "model.safetensors").is_file()  # saved locally before publishing


def test_cli_push_to_hub_failure_keeps_the_drafter_and_says_how_to_retry(tiny_dir, tmp_path, monkeypatch, capsys):
    def failing_publish(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr("oneiro_hf.storage.hub.publish_drafter", failing_publish)
    out = tmp_path / "drafter"
    argv = _tiny_cli_argv(tiny_dir, out, "--push_to_hub", "true", "--hub_model_id", "me/tiny-drafter",
                          "--license", "mit", "--target_hub_id", "org/tiny-target")
    assert cli_main(argv) == 1
    err = capsys.readouterr().err
    assert "publishing to me/tiny-drafter failed (ConnectionError: no network)" in err
    assert f"The drafter is saved in {out}" in err and "examples/publish.py" in err
    assert OneiroDrafter.from_pretrained(str(out), target=LlamaForCausalLM.from_pretrained(tiny_dir / "model"))


@pytest.mark.parametrize(("extra", "message"), [
    (("--push_to_hub", "true", "--license", "mit", "--target_hub_id", "org/t"), "needs --hub_model_id org/name"),
    (("--push_to_hub", "true", "--hub_model_id", "me/d", "--target_hub_id", "org/t"), "needs --license"),
    (("--push_to_hub", "true", "--hub_model_id", "me/d", "--license", "mit"), "add --target_hub_id org/name"),
])
def test_cli_push_to_hub_bad_input_fails_before_training(tiny_dir, tmp_path, monkeypatch, capsys, extra, message):
    def must_not_load(*args, **kwargs):
        raise AssertionError("the target loaded before the arguments were checked")

    monkeypatch.setattr("oneiro_hf.training.pipeline.load_target", must_not_load)
    assert cli_main(_tiny_cli_argv(tiny_dir, tmp_path / "d", *extra)) == 2
    assert message in capsys.readouterr().err
