"""oneiro-bench's batched side: t(k, B) in the profile, the throughput mode (`--batch-size`), its token accounting
and row-by-row identity check, and the modelled batch line of `oneiro-bench breakdown`. Tiny models, no timing."""

from __future__ import annotations

import json

import pytest
from test_bench import make_env

from oneiro_hf.bench import cli as bench_cli
from oneiro_hf.latency import load_profile


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return make_env(tmp_path_factory.mktemp("bench_batch"))

# ------------------------------------------------------------------------------------------- profile
def test_profile_batch_sizes_write_t_k_b_on_both_kernel_sets(env, tmp_path, capsys):
    out = tmp_path / "profile.json"
    assert bench_cli.main(["profile", "--target", str(env / "target"), "--max-k", "3", "--context-len", "8",
                           "--repeats", "1", "--threads", "1", "--batch-sizes", "4,1,2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    raw = json.loads(out.read_text())
    for part in (raw, raw["stock"]):
        assert set(part["batch"]) == {"1", "2", "4"}  # sorted, de-duplicated; JSON keys are strings
        for b, entry in part["batch"].items():
            assert entry["t1_s"] > 0
            assert set(entry["ratios"]) == {"1", "2", "3"} and entry["ratios"]["1"] == pytest.approx(1.0)
            assert all(v > 0 for v in entry["ratios"].values())
            assert part["batch_t1_per_row"][b] == pytest.approx(entry["t1_s"] / int(b))
    assert set(raw["ratios"]) == {"1", "2", "3"}  # the single-row profile is still there, unchanged in shape
    loaded = load_profile(out)  # ints in memory, as the top-level ratios are
    assert set(loaded["batch"]) == {1, 2, 4} and set(loaded["batch"][2]["ratios"]) == {1, 2, 3}
    assert set(loaded["stock"]["batch"]) == {1, 2, 4} and loaded["batch_t1_per_row"][4] > 0
    assert "t(k, B)" in printed and "| 4 |" in printed

    plain = tmp_path / "plain.json"
    assert bench_cli.main(["profile", "--target", str(env / "target"), "--max-k", "2", "--context-len", "8",
                           "--repeats", "1", "--threads", "1", "--out", str(plain)]) == 0
    assert "batch" not in json.loads(plain.read_text())  # without --batch-sizes: the profile as before
    assert "batch" not in json.loads(plain.read_text())["stock"]


@pytest.mark.parametrize("value", ["0", "2,x", ",", "-1"])
def test_profile_refuses_bad_batch_sizes(env, value, capsys):
    assert bench_cli.main(["profile", "--target", str(env / "target"), "--batch-sizes", value]) == 2
    assert "batch sizes are integers >= 1. Fix:" in capsys.readouterr().err
