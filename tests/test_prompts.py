"""Prompt sources and the resumable self-distillation file format (fast; no real model unless marked)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from oneiro_hf.training.prompts import (
    SOURCES,
    iter_prompts,
    load_user_prompts,
    make_prompt,
    parse_sources,
    resolve_exclude,
    stdlib_prompts,
    synthetic_prompts,
)
from oneiro_hf.training.selfdistill import prepare_prompt_list, scan_existing


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


def test_the_shipped_drafters_synthetic_prompts_are_regenerated() -> None:
    """The word lists moved to data/words.json: seed 0 still yields the prompts the shipped data was made from."""
    from oneiro_hf.training.records import dataset_ids

    root = Path(__file__).resolve().parent.parent / "data" / "selfdistill"
    prompts = [r["id"] for r in _take(synthetic_prompts(seed=0), 300)]
    for name in ("smollm2-135m-instruct", "gemma-3-270m"):
        shipped = dataset_ids(root / name)
        missing = [i for i in prompts if i not in shipped]
        assert not missing, f"{name}: {len(missing)} of seed 0's first 300 synthetic prompts changed, e.g. {missing[:2]}"


def test_word_lists_are_package_data() -> None:
    from oneiro_hf.training.prompts import words

    lists = words.load_word_lists()
    assert words.WORDS_FILE.is_file() and words.WORDS_FILE.suffix == ".json"
    assert lists["ITEMS"][0] == ("notebook", 3) and "French" in lists["LANGUAGES"]
    assert all(lists[name] for name in lists), "an empty word list"


def test_iter_prompts_mixes_sources_deterministically() -> None:
    recs = list(iter_prompts("stdlib,synthetic:2", limit=50, seed=3))
    assert len(recs) == 50
    assert len({r["id"] for r in recs}) == 50
    assert {r["source"] for r in recs} == {"stdlib", "synthetic"}
    assert recs == list(iter_prompts(["stdlib", "synthetic:2"], limit=50, seed=3))


@pytest.mark.parametrize("removed", ["debian", "magpie"])
def test_removed_sources_are_refused_with_the_kept_ones(removed: str) -> None:
    with pytest.raises(ValueError, match=f"Unknown prompt source '{removed}'.*stdlib, synthetic"):
        parse_sources(f"synthetic,{removed}")


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


def test_public_sources_need_an_evaluation_file_to_leave_out(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("ONEIRO_BENCH_QUESTIONS", raising=False)
    with pytest.raises(ValueError, match=r"sharegpt_code.*Fix: pass --exclude QUESTIONS_JSONL"):
        resolve_exclude("sharegpt_code:6,stdlib:1", [])
    assert resolve_exclude("stdlib,synthetic", []) == []  # nothing from real users: nothing to leave out
    assert resolve_exclude("sharegpt", ["none"]) == []  # MT-bench only, on purpose
    questions = tmp_path / "question.jsonl"
    questions.write_text('{"question_id": 1, "category": "qa", "turns": ["Who wrote Hamlet?"]}\n')
    assert resolve_exclude("sharegpt", [str(questions)]) == [str(questions)]
    with pytest.raises(ValueError, match="missing.jsonl does not exist"):
        resolve_exclude("sharegpt", [str(tmp_path / "missing.jsonl")])
    monkeypatch.setenv("ONEIRO_BENCH_QUESTIONS", str(questions))  # the file oneiro-bench evaluates on
    assert resolve_exclude("sharegpt", []) == [str(questions)]
    assert resolve_exclude("sharegpt", ["none"]) == []
    monkeypatch.setenv("ONEIRO_BENCH_QUESTIONS", str(tmp_path / "gone.jsonl"))
    with pytest.raises(ValueError, match="gone.jsonl does not exist"):
        resolve_exclude("sharegpt", [])


def test_generation_commands_refuse_public_prompts_without_exclude(tmp_path: Path, monkeypatch, capsys) -> None:
    from oneiro_hf.training import campaign, selfdistill

    monkeypatch.delenv("ONEIRO_BENCH_QUESTIONS", raising=False)
    argv = ["--target", "no-such-model", "--dataset", str(tmp_path / "ds"), "--until", "+1h",
            "--work_dir", str(tmp_path / "w")]
    assert campaign.main(argv) == 2  # refused before the (unknown) target would load
    assert "--exclude none" in capsys.readouterr().err and not (tmp_path / "ds").exists()
    with pytest.raises(SystemExit):
        selfdistill.main(["--target", "no-such-model", "--out", str(tmp_path / "a.jsonl"), "--sources", "ifeval"])
    assert "ifeval" in capsys.readouterr().err and not (tmp_path / "a.jsonl").exists()


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


def test_prompt_list_is_reused_for_its_sources_and_rebuilt_for_others(tmp_path: Path) -> None:
    path = tmp_path / "answers.prompts.jsonl"
    first = prepare_prompt_list(path, 6, "stdlib", 0)
    assert {r["source"] for r in first} == {"stdlib"}
    kept = {**first[0], "id": "kept:1", "prompt": "a prompt only the stored list holds"}
    path.write_text("\n".join(json.dumps(r) for r in [kept, *first[1:]]) + "\n")
    assert prepare_prompt_list(path, 6, "stdlib", 0)[0]["id"] == "kept:1"  # same sources: the stored list
    assert len(prepare_prompt_list(path, 8, "stdlib", 0)) == 8  # more prompts: extended, the stored ones first
    assert prepare_prompt_list(path, 8, "stdlib", 0)[0]["id"] == "kept:1"
    rebuilt = prepare_prompt_list(path, 6, "synthetic", 0)  # another mix takes effect
    assert {r["source"] for r in rebuilt} == {"synthetic"}
    assert prepare_prompt_list(path, 6, "synthetic", 0) == rebuilt
    path.with_name(path.name + ".meta.json").unlink()  # a list of unrecorded origin is rebuilt too
    assert [r["id"] for r in prepare_prompt_list(path, 6, "stdlib", 0)] == [r["id"] for r in first]


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

    from oneiro_hf.chat import stop_token_ids
    from oneiro_hf.storage.reference_models import load_reference_model
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
        single, _, _ = generate_batch(model, [r["input_ids"]], 6, stops, tok.pad_token_id)[0]
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
