"""The examples are documentation that runs: each one, at `--tiny` size, in a subprocess of this Python,
checked on what it really prints and writes (identical text, a drafter that loads, a benchmark summary)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from oneiro_hf import OneiroDrafter

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def run_example(name: str, *args: str) -> str:
    """Run examples/<name> as a user would (from the repository root); fail with its output if it fails."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), "--tiny", *args], cwd=ROOT, env=env, check=False,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{name} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_quickstart_prints_both_times_and_identical_text():
    out = run_example("quickstart.py", "--max-new-tokens", "24")
    assert "identical text: True" in out
    assert "plain generate:" in out and "with the drafter:" in out
    assert "drafter: fresh (untrained)" in out  # a model directory has no shipped drafter
    tau = float(out.split("tokens per target pass:")[1].split()[0])
    assert tau >= 1.0


def test_train_drafter_saves_a_drafter_that_loads_and_is_lossless(tmp_path):
    out_dir = tmp_path / "drafter"
    out = run_example("train_drafter.py", "--num-prompts", "12", "--max-steps", "4", "--out", str(out_dir))
    assert "identical to plain greedy: True" in out
    assert f"Drafter saved to {out_dir}" in out
    card = (out_dir / "README.md").read_text()
    assert "records: 12" in card  # every prompt was answered by the target and trained on
    config = json.loads((out_dir / "config.json").read_text())
    assert config["model_type"] == "oneiro_drafter" and config["interval"] == [2, 4]
    # the saved drafter loads onto the same tiny target (rebuilt: it is deterministic) and decodes losslessly
    sys.path.insert(0, str(EXAMPLES))
    try:
        from _tiny import make_tiny_target
    finally:
        sys.path.remove(str(EXAMPLES))
    model = AutoModelForCausalLM.from_pretrained(make_tiny_target(tmp_path / "target")).eval()
    # the recorded base model is the example's own temporary path, so the names differ on purpose
    drafter = OneiroDrafter.from_pretrained(out_dir, target=model, allow_base_model_mismatch=True)
    assert drafter.draft_vocab_ids.numel() == 64
    prompt = torch.tensor([[3, 10, 11, 12, 10, 11, 4]])
    kwargs = {"max_new_tokens": 16, "do_sample": False, "eos_token_id": None}
    assert torch.equal(model.generate(prompt, **kwargs), model.generate(prompt, assistant_model=drafter, **kwargs))


def test_benchmark_writes_a_summary_and_prints_it(tmp_path):
    out = run_example("benchmark.py", "--max-new-tokens", "8", "--out", str(tmp_path / "bench"))
    summary = json.loads((tmp_path / "bench" / "summary.json").read_text())
    assert {"methods", "lossless_violations", "task_scores", "config"} <= set(summary)
    assert list(summary["methods"]) == ["greedy", "oneiro-greedy", "hf-lookup", "oneiro-lookup", "oneiro-hybrid"]
    assert summary["lossless_violations"] == []
    for method, entry in summary["methods"].items():
        overall = entry["overall"]
        assert overall["n_prompts"] == 4 and overall["identical_to_greedy"] == 1.0, method
        assert set(entry["categories"]) == {"summarization", "coding", "translation", "qa"}
    table = out[out.index("speedup_vs_greedy"):]
    for method in summary["methods"]:
        assert f"\n{method} " in table
    assert "lossless violations: none" in out


def test_demo_measures_every_mode_against_greedy_on_the_same_kernels():
    out = run_example("demo.py", "--rounds", "1", "--max-new-tokens", "12")
    assert "speedups are over oneiro-greedy: plain greedy inside oneiro_hf.cpu_kernels" in out
    for prompt in out.split("PROMPT: ")[1:]:
        lines = {line.split(":")[0].strip(): line for line in prompt.splitlines() if " tok/s " in line}
        assert list(lines) == ["greedy", "oneiro-greedy", "lookup", "latent", "hybrid", "default"]
        # the baseline's own ratio over itself is exactly 1, and every text equals stock greedy's
        assert "1.00x same-kernel greedy" in lines["oneiro-greedy"]
        for method, line in lines.items():
            assert line.endswith("identical to greedy: True"), line
            same_kernel = float(line.split("x same-kernel greedy")[0].split()[-1])
            stock = float(line.split("x vs stock)")[0].split("(")[-1])
            tps = float(line.split(":")[1].split()[0])
            assert same_kernel > 0 and stock > 0 and tps > 0, method


@pytest.mark.parametrize("name", ["quickstart.py", "train_drafter.py", "benchmark.py", "demo.py"])
def test_examples_document_their_tiny_flag(name):
    text = (EXAMPLES / name).read_text()
    assert text.startswith('"""') and "--tiny" in text.split('"""')[1]
