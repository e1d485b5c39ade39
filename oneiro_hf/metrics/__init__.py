"""The benchmark's quality metrics as ``evaluate`` modules shipped in the package, loaded by path (offline).

    import evaluate
    import oneiro_hf.metrics

    fidelity = evaluate.load(oneiro_hf.metrics.path("spec_fidelity"))
    fidelity.compute(predictions=["the cat sat"], references=["the cat sat down"])
    # {'rouge_l': 0.857..., 'exact_match': 0.0}

* ``spec_fidelity``: ROUGE-L F1 and exact match of texts against references (in ``oneiro-bench``: each answer
  turn against plain greedy's turn).
* ``token_identity``: whether token-id sequences are identical, and how long their common prefix is
  (in ``oneiro-bench``: losslessness against greedy).
* ``spec_task_score``: Spec-Bench task scores; the configuration is the category (``math_reasoning``: GSM8K
  final-answer accuracy, ``rag``: the answer contains a reference alias, ``translation`` and
  ``summarization``: ROUGE-L F1 against the reference).

Every module takes ``per_example=True`` to return the per-example scores as well. ROUGE-L needs the
``rouge_score`` package (``pip install 'oneiro-hf[bench]'``); it is imported when a score is computed, so a
missing package is an error that names the install, never an import failure at load time.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

METRICS: tuple[str, ...] = ("spec_fidelity", "token_identity", "spec_task_score")


def path(name: str) -> str:
    """The directory of the shipped metric module ``name``, for ``evaluate.load``."""
    if name not in METRICS:
        raise ValueError(f"Unknown oneiro-hf metric {name!r}. Fix: use one of {', '.join(METRICS)}.")
    return str(Path(__file__).resolve().parent / name)


@cache
def load(name: str, config_name: str | None = None) -> Any:
    """``evaluate.load(path(name), config_name)``, loaded once per process."""
    import evaluate

    return evaluate.load(path(name), config_name) if config_name else evaluate.load(path(name))
