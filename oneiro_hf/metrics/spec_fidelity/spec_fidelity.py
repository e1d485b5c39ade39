"""spec_fidelity: ROUGE-L F1 and exact match of generated texts against references.

oneiro-bench uses it to say how far an answer is from plain greedy's answer to the same prompt: lossless
methods score 1.0 on both, relaxed (lossy) verification less.
"""

from __future__ import annotations

import datasets
import evaluate

_DESCRIPTION = """ROUGE-L F1 (rouge_score's RougeScorer(["rougeL"], use_stemmer=False): lower-cased ASCII
words, longest common subsequence) and exact string match of each prediction against its reference, averaged
over the examples. Two identical texts score 1.0 on both, also when they hold no words."""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of generated texts.
    references: list of reference texts (in oneiro-bench: plain greedy's text for the same prompt).
    per_example: also return the per-example scores ("rouge_l_per_example", "exact_match_per_example").
Returns:
    rouge_l: mean ROUGE-L F1; exact_match: share of predictions equal to their reference (None when empty).
Examples:
    >>> import evaluate, oneiro_hf.metrics
    >>> m = evaluate.load(oneiro_hf.metrics.path("spec_fidelity"))
    >>> m.compute(predictions=["a b c"], references=["a b c"])
    {'rouge_l': 1.0, 'exact_match': 1.0}
"""

_ROUGE_INSTALL = (
    "ROUGE-L needs the rouge_score package, which is not installed. Fix: pip install 'oneiro-hf[bench]' "
    "(or pip install rouge_score)."
)


def rouge_scorer():
    """rouge_score's ROUGE-L scorer, imported when first needed."""
    try:
        from rouge_score import rouge_scorer as module
    except ImportError:
        raise ImportError(_ROUGE_INSTALL) from None
    return module.RougeScorer(["rougeL"], use_stemmer=False)


def rouge_l_scores(predictions: list[str], references: list[str]) -> list[float]:
    """ROUGE-L F1 per pair; identical texts score 1.0 without calling the scorer."""
    scorer = None
    scores = []
    for pred, ref in zip(predictions, references):
        if pred == ref:
            scores.append(1.0)
            continue
        scorer = scorer or rouge_scorer()
        scores.append(float(scorer.score(ref, pred)["rougeL"].fmeasure))
    return scores


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SpecFidelity(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {"predictions": datasets.Value("string"), "references": datasets.Value("string")}
            ),
        )

    def _compute(self, predictions, references, per_example: bool = False):
        rouge = rouge_l_scores(predictions, references)
        exact = [1.0 if p == r else 0.0 for p, r in zip(predictions, references)]
        out = {
            "rouge_l": sum(rouge) / len(rouge) if rouge else None,
            "exact_match": sum(exact) / len(exact) if exact else None,
        }
        if per_example:
            out |= {"rouge_l_per_example": rouge, "exact_match_per_example": exact}
        return out
