"""Training a multi-layer drafter (`--input_layers`): the feature pass, the cache format, the ridge fit of the
wider fusion, the rollout (predicted state in every slot, as drafting does) and oneiro-train end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tiny import make_model, tiny_config
from transformers import LlamaForCausalLM

from oneiro_hf import OneiroDrafter
from oneiro_hf.drafting.kv_cache import DrafterKVCache
from oneiro_hf.targets import base_model
from oneiro_hf.training import feature_store as store
from oneiro_hf.training import features as feat
from oneiro_hf.training.cli import main as cli_main
from oneiro_hf.training.ridge import fit_fuse_ridge
from oneiro_hf.training.trainer import parallel_rollout

VOCAB = 96
EOS = 2
LAYERS = [1, 2, 4]  # of a 4-layer target: outputs of layers 0 and 1, and the final-normed last state


@pytest.fixture(scope="module")
def target():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    cfg = tiny_config("llama", vocab=VOCAB, hidden=32, max_position_embeddings=256, tie_word_embeddings=True,
                      eos_token_id=EOS)
    return LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def records(target):
    return sample_records(target)


def sample_records(target) -> list[dict]:
    """32 short self-distillation records sampled from `target` (prompt ids, response ids ending in EOS)."""
    gen = torch.Generator().manual_seed(1)
    out = []
    with torch.no_grad():
        for i in range(32):
            prompt = torch.randint(3, VOCAB, (1, int(torch.randint(4, 10, (1,), generator=gen))), generator=gen)
            torch.manual_seed(i)
            seq = target.generate(prompt, max_new_tokens=16, do_sample=True, temperature=0.7, top_k=0,
                                  eos_token_id=None, pad_token_id=0)
            out.append({"id": f"r{i}", "source": "synthetic", "prompt": "", "input_ids": prompt[0].tolist(),
                        "output_ids": seq[0, prompt.shape[1]:].tolist() + [EOS]})
    return out


def test_feature_pass_gives_the_drafting_inputs(target) -> None:
    """The feature pass's `inputs` are exactly what the drafter is fed while drafting (`input_states`)."""
    drafter = OneiroDrafter.from_target(target, interval=(2, 4), input_layers=LAYERS)
    ids = torch.randint(3, VOCAB, (2, 12), generator=torch.Generator().manual_seed(3))
    feats = feat.target_features(target, ids, input_layers=LAYERS)
    with torch.no_grad():
        hidden = target(ids, output_hidden_states=drafter.hidden_states_request).hidden_states
        expected = drafter.input_states(hidden)
        norm = base_model(target).norm
        full = target(ids, output_hidden_states=True).hidden_states
    assert feats["inputs"].shape == (2, 12, 3 * 32)
    torch.testing.assert_close(feats["inputs"], expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(feats["inputs"][..., :32], norm(full[1]), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(feats["inputs"][..., 64:], feats["states"], rtol=0, atol=0)
    assert "inputs" not in feat.target_features(target, ids)  # the default pass is unchanged


def test_rollout_matches_sequential_multilayer_drafting(target) -> None:
    """Step k >= 2 of the parallel rollout feeds the predicted state in every slot, exactly as drafting does."""
    drafter = OneiroDrafter.from_target(target, interval=(2, 4), input_layers=LAYERS)
    with torch.no_grad():
        drafter.fuse.weight.normal_(0, 0.05)
        ids = torch.randint(3, VOCAB, (1, 14), generator=torch.Generator().manual_seed(4))
        inputs = feat.target_features(target, ids, input_layers=LAYERS)["inputs"]
        pos = torch.arange(1, 14).unsqueeze(0)
        outs = parallel_rollout(drafter, inputs[:, :-1], ids[:, 1:], pos, 4)
        for s in (0, 3, 7):
            cache = DrafterKVCache()
            state = drafter.transition(inputs[:, : s + 1], ids[:, 1 : s + 2], pos[:, : s + 1], cache)[:, -1:]
            for k in range(1, 4):
                i = s + k
                state = drafter.transition(drafter.recurrent_inputs(state), ids[:, i + 1 : i + 2],
                                           pos[:, i : i + 1], cache)
                torch.testing.assert_close(state[0, 0], outs[k][0, i], atol=1e-5, rtol=1e-4)


def test_feature_cache_stores_inputs_and_refuses_the_other_format(target, records, tmp_path) -> None:
    cache = store.FeatureCache(tmp_path / "c", target, 64, resid_layer=2, input_layers=LAYERS)
    cache.build(records[:6], progress=False)
    meta = json.loads((tmp_path / "c" / "meta.json").read_text())
    assert meta["format"] == 2 and meta["input_layers"] == LAYERS
    item = store.CachedFeatureDataset(cache, records[:6])[0]
    fresh = feat.target_features(target, item["input_ids"][None], input_layers=LAYERS)["inputs"][0]
    assert item["inputs"].dtype == torch.float16
    torch.testing.assert_close(item["inputs"].float(), fresh, rtol=2e-3, atol=2e-3)
    with pytest.raises(store.FeatureCacheMismatch,
                       match=r"input_layers=\[1, 2, 4\], context_layers=None, float32\).*Fix: pass another"):
        store.FeatureCache(tmp_path / "c", target, 64)  # a single-layer run on a multi-layer cache
    store.FeatureCache(tmp_path / "d", target, 64)
    with pytest.raises(store.FeatureCacheMismatch, match="format 1"):
        store.FeatureCache(tmp_path / "d", target, 64, input_layers=LAYERS)


def test_ridge_fits_the_wider_fusion(target, records) -> None:
    drafter = OneiroDrafter.from_target(target, interval=(2, 4), input_layers=LAYERS)
    ds = feat.SequenceDataset(records, 64)
    report = fit_fuse_ridge(drafter, feat.iter_feature_batches(ds, target, 512, resid_layer=2,
                                                               input_layers=LAYERS))
    assert drafter.fuse.weight.shape == (32, 4 * 32)
    assert report["val_rel_error"] < report["val_rel_error_before"]
    assert float(drafter.fuse.weight.detach()[:, :96].abs().sum()) > 0  # the state slots are used


def _argv(root: Path, out: Path, *extra: str) -> list[str]:
    return ["--target", str(root / "model"), "--data", str(root / "data.jsonl"), "--output_dir", str(out),
            "--interval", "2,4", "--draft_vocab_size", "64", "--max_seq_len", "64", "--stage", "1+2",
            "--rollout_steps", "2", "--max_steps", "4", "--per_device_train_batch_size", "4",
            "--learning_rate", "3e-3", "--logging_steps", "2", "--save_strategy", "no", "--report_to", "none",
            "--use_cpu", "true", "--disable_tqdm", "true", "--eval_fraction", "0.15", "--eval_rollout_steps", "2",
            "--threads", "1", *extra]


def saved_target_and_data(target, records: list[dict], tmp_path: Path) -> Path:
    """A folder holding `target` (model/) and `records` (data.jsonl), as `_argv` reads them."""
    root = tmp_path / "tiny"
    target.save_pretrained(root / "model")
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return root


def test_cli_trains_a_multilayer_drafter_end_to_end(target, records, tmp_path, capsys) -> None:
    root = saved_target_and_data(target, records, tmp_path)
    out = tmp_path / "drafter"
    argv = _argv(root, out, "--input_layers", "1,2,-1", "--feature_cache_dir", str(tmp_path / "cache"))
    assert cli_main(argv) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["input_layers"] == LAYERS
    summary = capsys.readouterr().out
    assert f"Drafter saved to {out}" in summary
    model = LlamaForCausalLM.from_pretrained(root / "model").eval()
    drafter = OneiroDrafter.from_pretrained(str(out), target=model)
    assert drafter.fuse.weight.shape == (32, 4 * 32)
    prompt = torch.tensor([[5, 9, 17, 33, 40]])
    kwargs = {"max_new_tokens": 12, "do_sample": False, "eos_token_id": None, "pad_token_id": 0}
    plain = model.generate(prompt, **kwargs)
    for tree in (False, True):
        spec = model.generate(prompt, assistant_model=drafter, oneiro_mode="latent", oneiro_cost_aware=False,
                              oneiro_tree=tree, **kwargs)
        assert torch.equal(plain, spec)
        assert drafter.last_stats.drafted_tokens > 0
    # a bad --input_layers fails before any work, naming the flag and the fix
    assert cli_main(_argv(root, tmp_path / "bad", "--input_layers", "1,9")) == 2
    assert "--input_layers 1,9" in capsys.readouterr().err
    assert not (tmp_path / "bad" / "model.safetensors").exists()


def test_multilayer_on_every_architecture_trains_one_step(tmp_path) -> None:
    """The loss module runs (and back-propagates) with multi-layer inputs on every architecture."""
    from oneiro_hf.training.trainer import DrafterTrainModule

    for arch in ("llama", "qwen2", "gemma3", "mistral", "qwen3"):
        model = make_model(arch, hidden=32, seed=0)
        drafter = OneiroDrafter.from_target(model, input_layers=(0, 2, -1))
        ids = torch.randint(3, 128, (2, 12), generator=torch.Generator().manual_seed(5))
        feats = feat.target_features(model, ids, label_from=torch.tensor([3, 3]), input_layers=[0, 2, 4])
        module = DrafterTrainModule(drafter, torch.zeros(32), torch.ones(32), [1.0, 0.8])
        out = module(input_ids=ids, attention_mask=torch.ones_like(ids), prompt_lens=torch.tensor([4, 4]),
                     states=feats["states"], target_argmax=feats["target_argmax"], rollout_steps=2,
                     inputs=feats["inputs"])
        out["loss"].backward()
        assert torch.isfinite(out["loss"]) and drafter.fuse.weight.grad[:, :96].abs().sum() > 0, arch


def test_resume_refuses_a_checkpoint_with_other_input_layers(target, tmp_path) -> None:
    from oneiro_hf.training.trainer import CheckpointMismatch, check_checkpoint_compatible

    OneiroDrafter.from_target(target, interval=(2, 4)).save_pretrained(tmp_path / "checkpoint-2")
    multi = OneiroDrafter.from_target(target, interval=(2, 4), input_layers=LAYERS)
    with pytest.raises(CheckpointMismatch, match=r"input_layers: checkpoint has None, this run has \[1, 2, 4\]"):
        check_checkpoint_compatible(str(tmp_path / "checkpoint-2"), multi)
    multi.save_pretrained(tmp_path / "checkpoint-4")
    with pytest.raises(CheckpointMismatch, match="--input_layers 1,2,4 --draft_vocab_size"):
        check_checkpoint_compatible(str(tmp_path / "checkpoint-4"), OneiroDrafter.from_target(target, interval=(2, 4)))
    check_checkpoint_compatible(str(tmp_path / "checkpoint-4"), multi)  # the same configuration resumes
