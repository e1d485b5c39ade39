"""Prompt sources and the resumable self-distillation file format (fast; no real model unless marked)."""

from __future__ import annotations

import gzip
import itertools
import json
from pathlib import Path

import pytest

from oneiro_hf.training.prompts import (
    SOURCES,
    debian_prompts,
    iter_prompts,
    load_user_prompts,
    make_prompt,
    parse_sources,
    stdlib_prompts,
    synthetic_prompts,
)
from oneiro_hf.training.selfdistill import scan_existing


def _take(gen, n: int) -> list[dict]:
    return list(itertools.islice(gen, n))


def _check_records(recs: list[dict], source: str) -> None:
    assert recs, f"{source} yielded nothing"
    assert len({r["id"] for r in recs}) == len(recs), "ids must be unique"
    for r in recs:
        assert set(r) >= {"id", "source", "prompt"}
        assert r["source"] == source and r["id"].startswith(source + ":")
        assert isinstance(r["prompt"], str) and r["prompt"].strip()


def test_stdlib_prompts_unique_and_deterministic() -> None:
    first = _take(stdlib_prompts(seed=0), 60)
    _check_records(first, "stdlib")
    assert first == _take(stdlib_prompts(seed=0), 60)
    assert first != _take(stdlib_prompts(seed=1), 60)
    assert len({r["id"].split(":")[1] for r in first}) >= 6, "task templates should vary"


def test_synthetic_prompts_cover_many_task_types() -> None:
    recs = _take(synthetic_prompts(seed=0), 400)
    _check_records(recs, "synthetic")
    assert recs == _take(synthetic_prompts(seed=0), 400)
    kinds = {r["id"].split(":")[1] for r in recs}
    assert {"math", "reasoning", "writing", "roleplay", "coding", "extraction", "translation"} <= kinds


def test_debian_prompts_read_text_and_gzip_and_skip_binary(tmp_path: Path) -> None:
    docs = tmp_path / "doc" / "pkg"
    docs.mkdir(parents=True)
    para = "The frobnicator reads configuration from /etc/frob.conf and writes reports daily. " * 6
    (docs / "README").write_text(para + "\n\n" + para.replace("frobnicator", "widget"))
    with gzip.open(docs / "changelog.Debian.gz", "wt") as fh:
        fh.write("pkg (1.2-1) unstable; urgency=medium\n\n  * Fixed the frobnicator crash. " + "x " * 200)
    (docs / "README.bin").write_bytes(b"\x00\x01binary" * 100)
    recs = list(debian_prompts(seed=0, roots=[tmp_path / "doc", tmp_path / "missing"]))
    _check_records(recs, "debian")
    text = "\n".join(r["prompt"] for r in recs)
    assert "frobnicator" in text and "Fixed the frobnicator crash" in text
    assert "binary" not in text
    assert recs == list(debian_prompts(seed=0, roots=[tmp_path / "doc"]))


def test_debian_prompts_without_docs_yields_nothing(tmp_path: Path) -> None:
    assert list(debian_prompts(roots=[tmp_path / "nope"])) == []


def test_iter_prompts_mixes_sources_deterministically() -> None:
    recs = list(iter_prompts("stdlib,synthetic:2", limit=50, seed=3))
    assert len(recs) == 50
    assert len({r["id"] for r in recs}) == 50
    assert {r["source"] for r in recs} == {"stdlib", "synthetic"}
    assert recs == list(iter_prompts(["stdlib", "synthetic:2"], limit=50, seed=3))


def test_iter_prompts_magpie_needs_the_model() -> None:
    with pytest.raises(ValueError, match="model"):
        list(iter_prompts("synthetic,magpie", limit=3))


@pytest.mark.parametrize("bad", ["nonsense", "stdlib:zero", "stdlib:-1", ""])
def test_parse_sources_rejects_bad_specs(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_sources(bad)


def test_parse_sources_all_and_user_file(tmp_path: Path) -> None:
    user = tmp_path / "mine.jsonl"
    user.write_text('{"prompt": "hi there"}\n')
    names = [n for n, _ in parse_sources(f"all,{user}")]
    assert names == [*SOURCES, str(user)]
    assert {"sharegpt", "arena_hard", "ifeval"} <= set(names)


def test_make_prompt_id_depends_only_on_text() -> None:
    assert make_prompt("x", "hello")["id"] == make_prompt("x", "hello")["id"]
    assert make_prompt("x", "hello")["id"] != make_prompt("x", "hello!")["id"]


def test_load_user_prompts_formats(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    lines = [
        {"prompt": "Explain recursion."},
        {"turns": ["Write a haiku.", "Now make it sadder."]},
        {"id": "mine-1", "prompt": "Keep my id."},
        {"instruction": "Add the numbers", "input": "2 and 3"},
    ]
    path.write_text(
        "\n".join(json.dumps(x) for x in lines[:2]) + "\n\n" + "\n".join(json.dumps(x) for x in lines[2:])
    )
    recs = load_user_prompts(path)
    assert [r["prompt"] for r in recs] == [
        "Explain recursion.",
        "Write a haiku.",
        "Keep my id.",
        "Add the numbers\n\n2 and 3",
    ]
    assert recs[2]["id"] == "mine-1"
    assert len({r["id"] for r in recs}) == 4
    assert recs == load_user_prompts(path)


def test_load_user_prompts_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n  \n")
    with pytest.raises(ValueError, match="empty"):
        load_user_prompts(path)


def test_load_user_prompts_malformed_line_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "ok"}\n{"prompt": "ok too"}\n{"prompt": oops}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:3: malformed JSON"):
        load_user_prompts(path)


@pytest.mark.parametrize("record", ['{"text_missing": 1}', '["a list"]', '{"turns": []}', '{"prompt": "  "}'])
def test_load_user_prompts_record_without_prompt_is_named(tmp_path: Path, record: str) -> None:
    path = tmp_path / "noprompt.jsonl"
    path.write_text('{"prompt": "fine"}\n' + record + "\n")
    with pytest.raises(ValueError, match=r"noprompt\.jsonl:2"):
        load_user_prompts(path)


def test_scan_existing_drops_a_truncated_last_line(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    good = [json.dumps({"id": f"a{i}", "output_ids": [1, 2]}) for i in range(3)]
    path.write_text("\n".join(good) + "\n" + '{"id": "a3", "outp')
    assert scan_existing(path) == {"a0", "a1", "a2"}
    assert path.read_text() == "\n".join(good) + "\n"
    assert scan_existing(tmp_path / "absent.jsonl") == set()


def test_scan_existing_refuses_corruption_in_the_middle(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text('{"id": "a0"}\nnot json\n{"id": "a2"}\n')
    with pytest.raises(ValueError, match=r"out\.jsonl:2"):
        scan_existing(path)


@pytest.mark.real_model
def test_self_distillation_matches_unbatched_greedy_and_resumes(tmp_path: Path) -> None:
    import torch

    from oneiro_hf.reference_models import load_reference_model
    from oneiro_hf.training.prompts import stop_token_ids
    from oneiro_hf.training.selfdistill import generate_batch, generate_self_distillation_data

    torch.set_num_threads(1)
    model, tok = load_reference_model("smollm2-135m-instruct")
    prompts = list(iter_prompts("synthetic", limit=3, seed=0))
    out = tmp_path / "sd.jsonl"
    stats = generate_self_distillation_data(
        model, tok, prompts[:2], out, max_new_tokens=6, batch_size=2, progress=False
    )
    assert stats["written"] == 2
    stats = generate_self_distillation_data(
        model, tok, prompts, out, max_new_tokens=6, batch_size=2, progress=False
    )
    assert stats == stats | {"written": 1, "skipped_existing": 2}
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["id"] for r in recs) == sorted(p["id"] for p in prompts)
    stops = stop_token_ids(tok, model)
    for r in recs:
        single, _ = generate_batch(model, [r["input_ids"]], 6, stops, tok.pad_token_id)[0]
        assert single == r["output_ids"]

    # a machine without the JSONL resumes from the committed dataset: nothing is generated twice
    from oneiro_hf.training.distill_dataset import ExportSettings, export_jsonl
    from oneiro_hf.training.records import dataset_ids

    ds = tmp_path / "ds"
    export_jsonl(out, ds, ExportSettings(target="smollm2", vocab_size=model.config.vocab_size, max_new_tokens=6,
                                         batch_size=2))
    fresh = tmp_path / "new-machine.jsonl"
    stats = generate_self_distillation_data(
        model, tok, prompts, fresh, max_new_tokens=6, batch_size=2, progress=False, skip_ids=dataset_ids(ds)
    )
    assert stats["written"] == 0 and stats["skipped_existing"] == 3 and fresh.read_text() == ""
