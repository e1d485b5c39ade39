"""parse_generation_log reads logs of selfdistill runs that name the device they loaded the target on."""

from __future__ import annotations

from oneiro_hf.training.distill_dataset import parse_generation_log


def test_runs_that_name_their_device_are_counted_apart(tmp_path):
    log = tmp_path / "gen.log"
    log.write_text(
        "2026-11-30 18:37:46,809 INFO __main__: Loaded gemma-3-270m on cpu in 4.5s (threads=1)\n"
        "2026-11-30 18:40:00,000 INFO __main__: wrote 64 records (12000 response tokens) in 200s: 60.0 response tok/s\n"
        "2026-11-30 19:00:00,000 INFO __main__: Loaded gemma-3-270m on cuda in 9.0s (threads=2)\n"
        "2026-11-30 19:01:00,000 INFO __main__: wrote 64 records (8000 response tokens) in 50s: 160.0 response tok/s\n"
    )
    parsed = parse_generation_log(log)
    assert parsed["throughput"] == {"runs": 2, "records": 128, "response_tokens": 20000, "seconds": 250,
                                    "response_tokens_per_s": 80.0}
    assert parsed["threads"] == [1, 2]
