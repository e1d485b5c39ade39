"""spec_task_score: Spec-Bench task scores, as oneiro-bench reports them; the configuration is the category.

* ``math_reasoning`` (GSM8K): ``answer_accuracy``, the last number in the answer equals the number after
  ``####`` in the reference solution.
* ``rag`` (Natural Questions with retrieved passages): ``contains_answer``, the SQuAD-normalised answer
  contains one of the reference aliases.
* ``translation`` (WMT14 de-en), ``summarization`` (CNN/DailyMail): ``rouge_l_vs_reference``, ROUGE-L F1
  against the reference (computed by the spec_fidelity module).

The other categories (MT-bench's open-ended ones, qa without references) have no automatic score.
"""

from __future__ import annotations

import re
import string

import datasets
import evaluate

TASK_METRICS = {
    "math_reasoning": "answer_accuracy",
    "rag": "contains_answer",
    "translation": "rouge_l_vs_reference",
    "summarization": "rouge_l_vs_reference",
}

_DESCRIPTION = """Spec-Bench task scores per category (the configuration name): GSM8K final-answer accuracy
(math_reasoning), reference alias contained in the answer (rag), ROUGE-L F1 against the reference
(translation, summarization). Examples whose reference cannot be scored (a GSM8K solution without '####',
no non-empty alias) are left out of the mean and reported as None per example."""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of answers (the first turn's text).
    references: math_reasoning: the GSM8K solution text; rag: list of answer aliases; translation,
        summarization: the reference text.
    per_example: also return "scores" (None where the reference cannot be scored).
Returns:
    metric: the score's name; score: mean over the scored examples (None if none); n: scored examples.
Examples:
    >>> import evaluate, oneiro_hf.metrics
    >>> m = evaluate.load(oneiro_hf.metrics.path("spec_task_score"), "math_reasoning")
    >>> m.compute(predictions=["so the total is $1,000."], references=["... #### 1000"])
    {'metric': 'answer_accuracy', 'score': 1.0, 'n': 1}
"""

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def _to_number(text: str) -> float | None:
    try:
        return float(text.replace(",", "").rstrip("."))
    except ValueError:
        return None


def last_number(text: str) -> float | None:
    """The last number written in ``text`` (commas as thousands separators), or None."""
    found = _NUMBER.findall(text)
    return _to_number(found[-1]) if found else None


def gsm8k_answer(solution: str) -> float | None:
    """The final answer of a GSM8K solution: the number after '####'."""
    return last_number(solution.split("####")[-1]) if "####" in solution else None


def squad_normalize(text: str) -> str:
    """SQuAD answer normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def answer_accuracy(answer: str, solution: str) -> float | None:
    want, got = gsm8k_answer(solution), last_number(answer)
    if want is None:
        return None
    return 1.0 if got is not None and abs(got - want) < 1e-6 else 0.0


def contains_answer(answer: str, aliases: list[str]) -> float | None:
    wanted = [squad_normalize(str(a)) for a in aliases if str(a).strip()]
    if not wanted:
        return None
    norm = squad_normalize(answer)
    return 1.0 if any(a and a in norm for a in wanted) else 0.0


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class SpecTaskScore(evaluate.Metric):
    def _info(self):
        if self.config_name not in TASK_METRICS:
            raise KeyError(
                f"spec_task_score has no configuration {self.config_name!r}. Fix: pass a Spec-Bench category "
                f"with a task score as the configuration name: {', '.join(TASK_METRICS)}."
            )
        reference = (
            datasets.Sequence(datasets.Value("string")) if self.config_name == "rag" else datasets.Value("string")
        )
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features({"predictions": datasets.Value("string"), "references": reference}),
        )

    def _compute(self, predictions, references, per_example: bool = False):
        metric = TASK_METRICS[self.config_name]
        if metric == "answer_accuracy":
            scores = [answer_accuracy(p, r) for p, r in zip(predictions, references)]
        elif metric == "contains_answer":
            scores = [contains_answer(p, r) for p, r in zip(predictions, references)]
        else:
            import oneiro_hf.metrics

            fidelity = oneiro_hf.metrics.load("spec_fidelity")
            result = fidelity.compute(predictions=predictions, references=references, per_example=True)
            scores = result["rouge_l_per_example"]
        scored = [s for s in scores if s is not None]
        out = {"metric": metric, "score": sum(scored) / len(scored) if scored else None, "n": len(scored)}
        if per_example:
            out["scores"] = scores
        return out
