"""Configurable verification: how a drafted token is judged inside transformers' assisted-decoding loop.

`strict` (the default) leaves the loop alone, so the output is the target's own. The relaxed `topk` and
`threshold` criteria are lossy and greedy-only, and apply only where the target's entropy is at least
`verification_min_entropy`. `RelaxedAcceptanceProcessor`, appended last to the loop's logits processors,
raises the score of a draft the rule keeps above its row's maximum, so the loop's own argmax comparison
accepts it. docs/verification.md states the rules (ties, the bonus token) and how the processor works.
"""

from __future__ import annotations

import logging
import math

import torch
from transformers.generation.logits_process import LogitsProcessor

logger = logging.getLogger(__name__)

RELAXED_CRITERIA = ("topk", "threshold")

_warned_lossy: set[str] = set()


def check_relaxed_supported(criterion: str, do_sample: bool) -> None:
    """Relaxed criteria change the greedy comparison only; sampling has no such comparison to relax."""
    if criterion != "strict" and do_sample:
        raise ValueError(
            f"verification={criterion!r} is a greedy-decoding criterion and cannot be honoured with do_sample=True "
            "(speculative sampling has its own exact acceptance test). Fix: pass do_sample=False, or use "
            "oneiro_verification='strict' when sampling."
        )


def warn_lossy_once(criterion: str) -> None:
    """One warning per process and per relaxed criterion."""
    if criterion in RELAXED_CRITERIA and criterion not in _warned_lossy:
        _warned_lossy.add(criterion)
        logger.warning(
            "oneiro verification=%r is lossy: output may differ from the target's greedy output "
            "(use verification='strict' for lossless decoding).",
            criterion,
        )


def relaxed_accepts(
    scores: torch.Tensor,
    token: int,
    criterion: str,
    topk: int,
    threshold: float,
    min_entropy: float = 0.0,
) -> torch.Tensor:
    """Whether each row of processed `scores` (rows, vocab) keeps the drafted `token` under `criterion`.

    A token with score -inf (forbidden by a processor) is never kept. Below `min_entropy` (nats) a row
    keeps the token only if it is that row's argmax, i.e. strictly.
    """
    scores = scores.float()
    own = scores[:, token]
    top = scores.max(dim=-1).values
    finite = torch.isfinite(own)
    # the rank argmax gives the token: strictly larger scores, then equal scores at lower ids
    rank = (scores > own[:, None]).sum(-1) + (scores[:, :token] == own[:, None]).sum(-1)
    is_argmax = finite & (rank == 0)
    if criterion == "topk":
        keep = finite & (rank < int(topk))
    elif criterion == "threshold":
        # p(token) >= t * p(top)  <=>  s(token) - s(top) >= log t (the softmax normaliser cancels)
        keep = finite & (own - top >= math.log(float(threshold)))
    elif criterion == "strict":
        keep = is_argmax
    else:
        raise ValueError(f"unknown verification criterion {criterion!r}")
    if min_entropy > 0.0:
        logp = scores.log_softmax(dim=-1)
        entropy = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)
        keep = torch.where(entropy >= float(min_entropy), keep, is_argmax)
    return keep


class RelaxedAcceptanceProcessor(LogitsProcessor):
    """Makes the verification loop keep a drafted token that the relaxed criterion accepts.

    `proposals` maps absolute sequence positions to the token drafted there for the current
    verification pass (the candidate generator fills it when it drafts and clears it after the pass).
    Called with a prefix of length L, the processor judges the token drafted at position L, if any,
    under the scores it receives (those of every earlier processor). When the rule keeps it, that
    token's score is raised to just above the row's maximum, so `argmax` selects it; otherwise the
    scores are returned untouched and the loop compares the target's own choice. With no proposal
    (between passes, after the call) the processor is inert.
    """

    def __init__(self, criterion: str, topk: int, threshold: float, min_entropy: float = 0.0) -> None:
        if criterion not in RELAXED_CRITERIA:
            raise ValueError(f"RelaxedAcceptanceProcessor needs one of {RELAXED_CRITERIA}, got {criterion!r}")
        self.criterion = criterion
        self.topk = int(topk)
        self.threshold = float(threshold)
        self.min_entropy = float(min_entropy)
        self.proposals: dict[int, int] = {}
        self.kept: set[int] = set()  # positions whose draft the rule kept in the current pass

    def clear(self) -> None:
        self.proposals = {}
        self.kept = set()

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        position = input_ids.shape[-1]
        token = self.proposals.get(position)
        if token is None:
            return scores
        # only judge the draft on its own path: the prefix must hold the drafted tokens before it
        start = min(self.proposals)
        if position > start:
            prefix = input_ids[0, start:position].tolist()
            if prefix != [self.proposals[p] for p in range(start, position)]:
                return scores
        keep = relaxed_accepts(scores, token, self.criterion, self.topk, self.threshold, self.min_entropy)
        if not bool(keep.all()):
            return scores
        self.kept.add(position)
        scores = scores.clone()
        top = scores.max(dim=-1).values
        raised = torch.maximum(top + 1.0, torch.nextafter(top, torch.full_like(top, math.inf)))
        scores[:, token] = raised
        return scores
