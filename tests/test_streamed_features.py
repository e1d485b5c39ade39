"""Streamed features (--stream_features): a training set bigger than the disk's cache reads the cached records and
computes the others batch by batch, with the same batches a full feature pass would give."""

from __future__ import annotations

import json

import pytest
import torch
from test_training import _cli_argv, build, make_args, records, target, tiny_dir  # noqa: F401 (fixtures)
from transformers import TrainerCallback

from oneiro_hf.training import feature_store as store
from oneiro_hf.training import features as feat
from oneiro_hf.training.cli import main as cli_main
from oneiro_hf.training.kept_features import StreamedFeatureKeeper
from oneiro_hf.training.trainer import EpochSeededLengthSampler, OneiroTrainer


def _cache(tmp_path, target, records, name="cache"):  # noqa: F811
    cache = store.FeatureCache(tmp_path / name, target, 64)
    cache.build(records, progress=False)
    return cache


def test_a_mixed_batch_gets_the_features_a_full_pass_gives(target, records, tmp_path):  # noqa: F811
    full = _cache(tmp_path, target, records[:6], "full")
    part = _cache(tmp_path, target, [records[1], records[4]], "part")
    streamed = store.CachedFeatureDataset(part, records[:6], stream=True)
    assert streamed.streamed == 4 and len(streamed.entries) == 2
    batch = feat.collate([streamed[i] for i in range(6)])
    assert batch["has_features"].tolist() == [False, True, False, False, True, False]
    assert feat.lacks_features(batch)
    done = feat.complete_features(batch, target)
    assert "has_features" not in done and not feat.lacks_features(done)
    reference = feat.collate([store.CachedFeatureDataset(full, records[:6])[i] for i in range(6)])
    assert torch.equal(done["target_argmax"], reference["target_argmax"])  # padding stays ignored
    assert torch.equal(done["input_ids"], reference["input_ids"])
    real = done["attention_mask"].bool()  # padding positions are never read (loss_mask)
    assert torch.allclose(done["states"][real].float(), reference["states"][real].float(), atol=2e-3)  # float16
    # the cached rows are read, not recomputed
    assert torch.equal(done["states"][1], batch["states"][1]) and torch.equal(done["states"][4], batch["states"][4])
    # a ridge fit asks for the residual stream: every row runs then
    with_resid = feat.complete_features(batch, target, resid_layer=2)
    assert with_resid["resid"].shape[:2] == batch["input_ids"].shape
    assert with_resid["resid"][1].abs().sum() > 0


def test_a_streamed_dataset_is_the_same_whatever_the_cache_holds(target, records, tmp_path):  # noqa: F811
    empty = store.FeatureCache(tmp_path / "empty", target, 64)
    some = _cache(tmp_path, target, records[::3], "some")
    a = store.CachedFeatureDataset(empty, records, stream=True)
    b = store.CachedFeatureDataset(some, records, stream=True)
    assert len(a) == len(b) == len(records) and a.streamed == len(records) and b.streamed < len(records)
    assert a.lengths() == b.lengths() and a.response_tokens() == b.response_tokens()
    for i in (0, 1, 5, len(records) - 1):  # record order, so a resumed epoch skips the same records anywhere
        assert torch.equal(a[i]["input_ids"], b[i]["input_ids"]) and a[i]["prompt_len"] == b[i]["prompt_len"]
    with pytest.raises(RuntimeError, match="not in the feature cache.*stream=True"):
        store.CachedFeatureDataset(some, records)


def test_cli_streams_what_the_cache_lacks_and_adds_only_the_held_out(tiny_dir, tmp_path, capsys):  # noqa: F811
    cache = tmp_path / "cache"
    argv = _cli_argv(tiny_dir, tmp_path / "full", cache) + ["--feature_dtype", "bfloat16", "--max_steps", "1"]
    assert cli_main(argv) == 0  # a full pass: every record cached
    keys = {s[0] for p in cache.glob("shard-*.json") for s in json.loads(p.read_text())["sequences"]}
    assert len(keys) == 48

    small = tmp_path / "small"
    out = tmp_path / "streamed"
    argv = _cli_argv(tiny_dir, out, small) + ["--feature_dtype", "bfloat16", "--stream_features", "true",
                                               "--ridge_positions", "200"]
    assert cli_main(argv) == 0
    summary = json.loads((out / "training_summary.json").read_text())
    assert summary["features"].startswith("streamed: 0 records from the cache,")
    assert summary["global_step"] == 8 and summary["train_response_tokens"] > 0
    held = {s[0] for p in small.glob("shard-*.json") for s in json.loads(p.read_text())["sequences"]}
    assert 0 < len(held) == summary["eval_records"] < 48  # the training records were never written
    # the same run over a cache that holds some training records reads them
    partial = tmp_path / "partial"
    assert cli_main(_cli_argv(tiny_dir, tmp_path / "p", partial) + ["--max_steps", "1"]) == 0
    assert cli_main(_cli_argv(tiny_dir, tmp_path / "p2", partial) + ["--stream_features", "true"]) == 0
    again = json.loads((tmp_path / "p2" / "training_summary.json").read_text())
    assert again["features"] == "cached (" + str(again["train_records"]) + " records)"


def test_a_resumed_run_trains_on_the_records_the_uninterrupted_one_would(target, records, tmp_path):  # noqa: F811
    """group_by_length orders each epoch from (seed, epoch) alone, so a resume in a fresh process (another machine:
    another global random state) skips exactly the batches it trained on, in the second epoch too."""
    seen: list[list[tuple[int, ...]]] = []

    class Recording(OneiroTrainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            seen.append(sorted(tuple(r[m.bool()].tolist()) for r, m in zip(inputs["input_ids"],
                                                                          inputs["attention_mask"])))
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

    class StopAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 13:
                control.should_training_stop = control.should_save = True
            return control

    def run(out, callbacks=(), resume=None):
        args = make_args(tmp_path, output_dir=str(out), max_steps=16, train_sampling_strategy="group_by_length",
                         save_strategy="no")
        drafter, train_ds, _, mean, std = build(target, records, args, ridge=False)
        trainer = Recording(drafter, target, args, train_ds, state_mean=mean, state_std=std,
                            callbacks=list(callbacks))
        assert isinstance(trainer._get_train_sampler(), EpochSeededLengthSampler)
        trainer.train(resume_from_checkpoint=resume)
        return len(train_ds)

    n = run(tmp_path / "whole")
    whole, seen[:] = list(seen), []
    assert len(whole) == 16 and n // 4 < 16  # two epochs
    epoch_two = whole[(n + 3) // 4:]
    assert epoch_two != whole[: len(epoch_two)]  # each epoch has its own order
    run(tmp_path / "cut", [StopAt()])
    torch.manual_seed(12345)  # a fresh process: the global random state is not the first run's
    torch.rand(7)
    run(tmp_path / "cut", resume=str(tmp_path / "cut" / "checkpoint-13"))
    assert seen == whole


def _keys(cache_dir) -> set[str]:
    return {s[0] for p in cache_dir.glob("shard-*.json") for s in json.loads(p.read_text())["sequences"]}


def test_kept_streamed_features_are_what_a_full_pass_caches(target, records, tmp_path):  # noqa: F811
    full = _cache(tmp_path, target, records[:6], "full")
    part = _cache(tmp_path, target, [records[1], records[4]], "part")
    streamed = store.CachedFeatureDataset(part, records[:6], stream=True)
    batch = feat.collate([streamed[i] for i in range(6)])
    keeper = StreamedFeatureKeeper(part, max_bytes=2**30)
    keeper.offer(batch, feat.complete_features(batch, target))
    assert keeper.buffered_tokens == int(batch["attention_mask"][[0, 2, 3, 5]].sum())  # the four computed rows
    assert keeper.flush() == keeper.kept_tokens == keeper.buffered_tokens + keeper.kept_tokens > 0
    assert _keys(part.dir) == _keys(full.dir) and len(_keys(part.dir)) == 6
    # the dataset made before reads them now (a later epoch), as does a new one and a new process's cache
    again = store.FeatureCache(part.dir, target, 64)
    assert store.CachedFeatureDataset(again, records[:6], stream=True).streamed == 0
    reference = store.CachedFeatureDataset(full, records[:6])
    for i in (0, 3, 5):
        item = streamed[i]
        assert "states" in item and torch.equal(item["target_argmax"], reference[i]["target_argmax"])
        assert torch.allclose(item["states"].float(), reference[i]["states"].float(), atol=2e-3)
    # a batch read whole from the cache is not written again
    keeper.offer(feat.collate([streamed[i] for i in range(6)]), {})
    assert keeper.buffered_tokens == 0 and keeper.flush() == 0 and len(list(part.dir.glob("shard-*.json"))) == 2


def test_keeping_stops_at_the_size_bound(target, records, tmp_path, caplog):  # noqa: F811
    cache = store.FeatureCache(tmp_path / "c", target, 64)
    batch = feat.collate([store.CachedFeatureDataset(cache, records[:4], stream=True)[i] for i in range(4)])
    done = feat.complete_features(batch, target)
    keeper = StreamedFeatureKeeper(cache, max_bytes=keeper_bytes(cache, batch) - 1)
    keeper.offer(batch, done)
    assert keeper.flush() == 0 and "--feature_cache_max_gb" in keeper.stopped
    assert "keeping no more streamed features" in caplog.text and not list(cache.dir.glob("shard-*"))
    keeper.offer(batch, done)  # stopped: nothing is buffered any more
    assert keeper.buffered_tokens == 0
    roomy = StreamedFeatureKeeper(cache, max_bytes=keeper_bytes(cache, batch))
    roomy.offer(batch, done)
    assert roomy.flush() == int(batch["attention_mask"].sum()) and roomy.stopped is None


def keeper_bytes(cache, batch) -> int:
    return int(batch["attention_mask"].sum()) * cache.bytes_per_token()


def test_cli_keeps_streamed_features_for_the_next_run(tiny_dir, tmp_path):  # noqa: F811
    cache = tmp_path / "cache"
    argv = _cli_argv(tiny_dir, tmp_path / "a", cache) + ["--stream_features", "true", "--ridge_positions", "200",
                                                          "--feature_cache_max_gb", "1"]
    assert cli_main(argv) == 0
    first = json.loads((tmp_path / "a" / "training_summary.json").read_text())
    kept = _keys(cache)
    assert first["features"].startswith("streamed: 0 records from the cache,")
    assert first["features"].endswith("positions of them kept in the cache")
    # 8 steps of 4 rows: the 32 records trained on are kept beside the held-out ones
    assert len(kept) == first["eval_records"] + 32
    argv = _cli_argv(tiny_dir, tmp_path / "b", cache) + ["--stream_features", "true", "--ridge_positions", "200"]
    assert cli_main(argv) == 0
    second = json.loads((tmp_path / "b" / "training_summary.json").read_text())
    assert second["features"].startswith("streamed: 32 records from the cache,")
    assert _keys(cache) == kept  # kept nothing more without --feature_cache_max_gb
