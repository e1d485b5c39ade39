"""token_identity: are generated token ids identical to the reference ids (e.g. plain greedy's)?

Lossless speculative decoding must reproduce greedy decoding token for token; oneiro-bench flags every
answer of a lossless method that this metric finds different.
"""

from __future__ import annotations

import datasets
import evaluate

_DESCRIPTION = """Token-level identity of generated sequences with reference sequences: the share of
sequences that are identical, and the mean share of each reference that the prediction reproduces before
the first differing token (its common prefix)."""

_KWARGS_DESCRIPTION = """
Args:
    predictions: list of token-id lists.
    references: list of token-id lists (in oneiro-bench: greedy's ids for the same prompt and turn).
    per_example: also return "identical_per_example" (bools) and "common_prefix_per_example" (token counts).
Returns:
    token_identity: share of identical sequences; common_prefix_ratio: mean of common prefix length / reference
    length (1.0 for an empty reference). Both None when there are no examples.
Examples:
    >>> import evaluate, oneiro_hf.metrics
    >>> m = evaluate.load(oneiro_hf.metrics.path("token_identity"))
    >>> m.compute(predictions=[[1, 2, 3], [1, 2]], references=[[1, 2, 3], [1, 5]])
    {'token_identity': 0.5, 'common_prefix_ratio': 0.75}
"""


def common_prefix(a: list[int], b: list[int]) -> int:
    """Number of leading tokens ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS_DESCRIPTION)
class TokenIdentity(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation="",
            inputs_description=_KWARGS_DESCRIPTION,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("int64")),
                    "references": datasets.Sequence(datasets.Value("int64")),
                }
            ),
        )

    def _compute(self, predictions, references, per_example: bool = False):
        identical = [list(p) == list(r) for p, r in zip(predictions, references)]
        prefix = [common_prefix(p, r) for p, r in zip(predictions, references)]
        ratios = [n / len(r) if len(r) else 1.0 for n, r in zip(prefix, references)]
        out = {
            "token_identity": sum(identical) / len(identical) if identical else None,
            "common_prefix_ratio": sum(ratios) / len(ratios) if ratios else None,
        }
        if per_example:
            out |= {"identical_per_example": identical, "common_prefix_per_example": prefix}
        return out
