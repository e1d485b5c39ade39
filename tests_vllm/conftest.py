"""The vLLM lane (`make test-vllm`): runs in .venv-vllm (vLLM's CPU build, oneiro-hf installed editable, so its
plugin is registered), never in the main lane. Each vLLM engine runs in a subprocess (vllm_worker.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TARGET_NAME = "smollm2-135m-instruct"
DRAFTER = ROOT / "drafters" / TARGET_NAME
# real prompts whose answers run past the token budget (so EOS rarely ends a run early)
QUESTIONS = (
    "Write a Python function that checks whether a string is a palindrome, and explain how it works.",
    "Explain why the sky is blue to a ten-year-old, in a few paragraphs.",
    "List five tips for writing clear technical documentation, with one sentence on each.",
)
MAX_TOKENS = 48
K = 3


@pytest.fixture(scope="session")
def target_dir() -> Path:
    from oneiro_hf.storage.reference_models import fetch_reference_model

    return fetch_reference_model(TARGET_NAME)


@pytest.fixture(scope="session")
def prompt_ids(target_dir) -> list[list[int]]:
    from transformers import AutoTokenizer

    from oneiro_hf.chat import encode_prompt

    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    return [encode_prompt(tokenizer, q) for q in QUESTIONS]


@pytest.fixture(scope="session")
def exported(tmp_path_factory) -> Path:
    from oneiro_hf.serving.vllm_export import export_for_vllm

    return export_for_vllm(DRAFTER, tmp_path_factory.mktemp("vllm") / "smollm2-drafter", TARGET_NAME, K)


@pytest.fixture(scope="session")
def exported_hybrid(tmp_path_factory) -> Path:
    """The same drafter exported with `--hybrid` (generate's lookup n-gram bounds)."""
    from oneiro_hf.serving.vllm_export import export_for_vllm
    from oneiro_hf.serving.vllm_lookup import LOOKUP_NGRAMS

    return export_for_vllm(DRAFTER, tmp_path_factory.mktemp("vllm-hybrid") / "smollm2-hybrid", TARGET_NAME, K,
                           lookup=LOOKUP_NGRAMS)


@pytest.fixture(scope="session")
def exported_priced(tmp_path_factory) -> Path:
    """The same drafter exported with `--step-profile`: SmolLM2's engine steps measured in vLLM on a CPU
    (docs/benchmarks/vllm_engine_schedule_smollm2/profile.json), whose steps grow fast with the drafts."""
    from oneiro_hf.serving.vllm_export import export_for_vllm

    profile = json.loads((ROOT / "docs" / "benchmarks" / "vllm_engine_schedule_smollm2" / "profile.json").read_text())
    return export_for_vllm(DRAFTER, tmp_path_factory.mktemp("vllm-priced") / "smollm2-priced", TARGET_NAME, K,
                           step_profile=profile)


def run_vllm(tmp_path: Path, target: Path, draft: Path | None, prompts: list[list[int]], runs: list[dict]) -> list:
    """Each run's {"tokens": [...], "spec": {...}} from one vLLM engine in a fresh process."""
    request = tmp_path / f"request-{'spec' if draft else 'plain'}.json"
    request.write_text(json.dumps({"target": str(target), "draft": str(draft) if draft else None, "k": K,
                                   "dtype": "float32", "prompts": prompts, "runs": runs}))
    done = subprocess.run([sys.executable, str(HERE / "vllm_worker.py"), str(request)], capture_output=True,
                          text=True, timeout=900, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, f"vLLM run failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return json.loads(lines[-1][len("RESULT "):])["runs"]
