"""A self-distillation dataset made on more than one machine says which records came from where."""

from __future__ import annotations

import json

from test_distill_dataset import VOCAB, make_records, write_jsonl

from oneiro_hf.training.distill_dataset import main as export_main
from oneiro_hf.training.distill_dataset import parse_generation_log, read_settings


def _log(path, *runs):
    """A selfdistill log of several runs, each (records, response tokens, seconds, threads, device or "")."""
    lines = []
    for i, (records, tokens, seconds, threads, device) in enumerate(runs):
        on = f" on {device}" if device else ""
        lines.append(f"2026-11-30 1{5 + i}:30:09,859 INFO __main__: Loaded tiny-target{on} in 1.0s (threads={threads})")
        lines.append(f"2026-11-30 1{5 + i}:35:01,749 INFO __main__: wrote {records} records ({tokens} response tokens) "
                     f"in {seconds}s: 1.0 response tok/s")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_records_from_another_machine_are_a_part_of_their_own(tmp_path):
    out, cpu_jsonl, gpu_jsonl = tmp_path / "ds", tmp_path / "cpu.jsonl", tmp_path / "gpu.jsonl"
    write_jsonl(cpu_jsonl, make_records(4))
    common = ["--out", str(out), "--no-overlap-check"]
    assert export_main(["--jsonl", str(cpu_jsonl), *common, "--target", "tiny-target", "--vocab-size", str(VOCAB),
                        "--log", str(_log(tmp_path / "cpu1.log", (4, 400, 40, 1, ""))), "--batch-size", "32",
                        "--hardware", "test CPU"]) == 0
    # a refresh of the same job extends its part; the job's log is cumulative
    write_jsonl(cpu_jsonl, make_records(2, start=4), mode="a")
    assert export_main(["--jsonl", str(cpu_jsonl), *common,
                        "--log", str(_log(tmp_path / "cpu2.log", (6, 600, 60, 1, "")))]) == 0
    parts = read_settings(out).parts
    assert [p["records"] for p in parts] == [6] and parts[0]["throughput"]["response_tokens"] == 600
    # records made elsewhere (another machine, batch size and threads) start a new part
    write_jsonl(gpu_jsonl, make_records(5, start=6))
    assert export_main(["--jsonl", str(gpu_jsonl), *common, "--hardware", "test GPU", "--batch-size", "512",
                        "--threads", "16", "--log", str(_log(tmp_path / "gpu.log", (5, 5000, 2, 16, "cuda")))]) == 0
    parts = read_settings(out).parts
    assert [(p["records"], p["hardware"], p["batch_size"], p["threads"]) for p in parts] == [
        (6, "test CPU", 32, 1), (5, "test GPU", 512, 16)]
    card = (out / "README.md").read_text()
    assert "6 records on test CPU, 32 sequences per forward, 1 torch thread(s), float32: 600 response tokens" in card
    assert "5 records on test GPU, 512 sequences per forward, 16 torch thread(s), float32: 5000 response tokens" in card
    assert "2500.0 response tokens/s" in card
    # exporting the same records again changes nothing
    assert export_main(["--jsonl", str(gpu_jsonl), *common]) == 0
    assert read_settings(out).parts == parts


def test_a_directory_exported_before_parts_existed_becomes_the_first_part(tmp_path):
    out, jsonl = tmp_path / "ds", tmp_path / "a.jsonl"
    write_jsonl(jsonl, make_records(3))
    assert export_main(["--jsonl", str(jsonl), "--out", str(out), "--no-overlap-check", "--target", "tiny-target",
                        "--vocab-size", str(VOCAB), "--hardware", "old CPU", "--batch-size", "8"]) == 0
    settings_file = out / "export.json"
    stored = json.loads(settings_file.read_text())
    del stored["parts"]  # as written by an older oneiro-hf
    settings_file.write_text(json.dumps(stored))
    write_jsonl(tmp_path / "b.jsonl", make_records(2, start=3))
    assert export_main(["--jsonl", str(tmp_path / "b.jsonl"), "--out", str(out), "--no-overlap-check",
                        "--hardware", "new GPU", "--batch-size", "256"]) == 0
    assert [(p["records"], p["hardware"]) for p in read_settings(out).parts] == [(3, "old CPU"), (2, "new GPU")]


def test_runs_that_name_their_device_are_counted_apart(tmp_path):
    """parse_generation_log reads logs of selfdistill runs that name the device they loaded the target on."""
    log = _log(tmp_path / "gen.log", (64, 12000, 200, 1, "cpu"), (64, 8000, 50, 2, "cuda"))
    parsed = parse_generation_log(log)
    assert parsed["throughput"] == {"runs": 2, "records": 128, "response_tokens": 20000, "seconds": 250,
                                    "response_tokens_per_s": 80.0}
    assert parsed["threads"] == [1, 2]
