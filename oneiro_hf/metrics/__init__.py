"""The benchmark's quality metrics as ``evaluate`` modules shipped in the package, loaded by path (offline).

    fidelity = evaluate.load(oneiro_hf.metrics.path("spec_fidelity"))

``spec_fidelity`` (ROUGE-L F1 and exact match of texts), ``token_identity`` (identical token ids, common
prefix) and ``spec_task_score`` (Spec-Bench task scores, the category as configuration); each module's own
docstring says what it computes, and docs/api.md (``oneiro_hf.metrics``) describes them all.
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
