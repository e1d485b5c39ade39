"""oneiro-train --init_drafter with stages 1 and 2: a trained drafter trained further (another pass, more data)
starts exactly as it was saved, keeps its interval and draft vocabulary, skips the ridge fit, and is saved
relative to the target at the same ranks."""

from __future__ import annotations

import json

from safetensors import safe_open
from test_training import _cli_argv, records, target, tiny_dir  # noqa: F401 (fixtures)

from oneiro_hf.training.cli import main as cli_main

RANKS = ["--relative_layer_rank", "4", "--relative_token_rank", "8"]


def _summary(out) -> dict:
    return json.loads((out / "training_summary.json").read_text())


def test_a_drafter_trained_further_starts_where_it_ended(tiny_dir, tmp_path):  # noqa: F811
    cache = tmp_path / "cache"
    first = tmp_path / "first"
    assert cli_main(_cli_argv(tiny_dir, first, cache) + RANKS + ["--save_dtype", "float32"]) == 0
    ended = _summary(first)["evals"][-1]
    started = _summary(first)["evals"][0]
    assert abs(ended["eval_tau"] - started["eval_tau"]) > 0.01  # training moved it: the check below can fail

    second = tmp_path / "second"
    argv = _cli_argv(tiny_dir, second, cache) + RANKS + ["--init_drafter", str(first), "--max_steps", "2",
                                                         "--draft_vocab_size", "32"]
    assert cli_main(argv) == 0
    summary = _summary(second)
    initial = summary["evals"][0]
    assert initial["label"] == f"initial ({first})"
    assert not any("ridge" in e["label"] or "untrained" in e["label"] for e in summary["evals"])  # one before-eval
    for key in ("eval_tau", "eval_accept_1", "eval_agree_step2"):
        assert abs(initial[key] - ended[key]) < 1e-6, key
    assert summary["init_drafter"] == str(first) and summary["ridge"] == f"off: the fusion is {first}'s"
    assert summary["draft_vocab_size"] == _summary(first)["draft_vocab_size"] == 64  # its own, not the flag's
    assert summary["weights_storage"] == {"kind": "target_relative", "layer_rank": 4, "token_rank": 8}
    with safe_open(str(second / "model.safetensors"), framework="pt") as fh:  # rank-4 factors, no whole layers
        shapes = {k: fh.get_slice(k).get_shape() for k in fh.keys()}  # noqa: SIM118
    assert all(4 in shape for key, shape in shapes.items() if key.startswith("layers.") and len(shape) == 2)


def test_init_drafter_errors_name_the_fix(tiny_dir, tmp_path, capsys):  # noqa: F811
    first = tmp_path / "first"
    assert cli_main(_cli_argv(tiny_dir, first, tmp_path / "cache") + ["--max_steps", "1"]) == 0
    capsys.readouterr()
    argv = _cli_argv(tiny_dir, tmp_path / "b", tmp_path / "cache") + ["--init_drafter", str(first)]
    argv[argv.index("--interval") + 1] = "1,3"
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert "--interval 1,3 with --init_drafter" in err and "Fix: drop --interval" in err
    argv = _cli_argv(tiny_dir, tmp_path / "c", tmp_path / "cache") + ["--init_drafter", str(tmp_path / "none")]
    assert cli_main(argv) == 2
    assert "--init_drafter" in capsys.readouterr().err and not (tmp_path / "c" / "model.safetensors").exists()
