"""Draft vocabulary: the target tokens the drafter's readout can propose.

A drafter only ever needs to propose tokens the target actually says, and most of the readout's cost is
its vocabulary, so the draft vocabulary is the most frequent tokens of the target's own responses
(``output_ids`` of the self-distillation data), plus the special tokens (EOS, ...) that appear there so a
draft can end a turn.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch

logger = logging.getLogger(__name__)


def special_token_ids(model: Any = None, tokenizer: Any = None) -> list[int]:
    """EOS/BOS/PAD ids (and the tokenizer's special ids) of a target, as far as they are known."""
    ids: set[int] = set()

    def add(value: Any) -> None:
        if value is None:
            return
        if isinstance(value, int):
            ids.add(int(value))
        elif isinstance(value, (list, tuple, set)):
            for v in value:
                add(v)
        elif isinstance(value, torch.Tensor):
            add(value.flatten().tolist())

    for source in (getattr(model, "config", None), getattr(model, "generation_config", None), tokenizer):
        for name in ("eos_token_id", "bos_token_id", "pad_token_id"):
            add(getattr(source, name, None))
    add(getattr(tokenizer, "all_special_ids", None))
    return sorted(i for i in ids if i >= 0)


def count_output_tokens(records: Iterable[Mapping[str, Any]], key: str = "output_ids") -> Counter:
    """Token frequencies over the given records' ``key`` lists."""
    counts: Counter = Counter()
    for rec in records:
        counts.update(int(t) for t in rec[key])
    return counts


def select_draft_vocab(
    records: Iterable[Mapping[str, Any]],
    size: int,
    vocab_size: int,
    special_ids: Sequence[int] = (),
    fill_from_prompts: bool = True,
) -> torch.LongTensor:
    """Choose ``size`` token ids for the draft vocabulary (sorted ascending, exactly ``min(size, vocab_size)``).

    Order of preference: special ids that occur in the outputs, then output tokens by frequency (ties by id),
    then (if the outputs hold fewer distinct tokens than ``size``) prompt tokens by frequency, then the lowest
    remaining ids. ``size >= vocab_size`` means the whole target vocabulary.
    """
    size = int(size)
    vocab_size = int(vocab_size)
    if size < 1:
        raise ValueError(f"draft_vocab_size must be >= 1 (got {size}).")
    if vocab_size < 1:
        raise ValueError(f"the target's vocab_size must be >= 1 (got {vocab_size}).")
    records = list(records)
    out_counts = count_output_tokens(records, "output_ids")
    bad = [t for t in out_counts if t < 0 or t >= vocab_size]
    if bad:
        raise ValueError(
            f"the data holds token ids {sorted(bad)[:5]} outside the target's vocabulary (size {vocab_size}). "
            "Fix: the data was generated with another tokenizer/target; regenerate it for this target."
        )
    if size >= vocab_size:
        if size > vocab_size:
            logger.warning(
                "draft_vocab_size %d >= the target's vocab %d: using the full vocabulary.", size, vocab_size
            )
        return torch.arange(vocab_size, dtype=torch.long)

    chosen: list[int] = []
    seen: set[int] = set()

    def take(ids: Iterable[int]) -> None:
        for t in ids:
            if len(chosen) >= size:
                return
            if t not in seen and 0 <= t < vocab_size:
                seen.add(t)
                chosen.append(t)

    take(sorted(t for t in set(special_ids) if out_counts.get(int(t), 0) > 0))
    take(t for t, _ in sorted(out_counts.items(), key=lambda kv: (-kv[1], kv[0])))
    if len(chosen) < size and fill_from_prompts:
        in_counts = (
            count_output_tokens(records, "input_ids") if records and "input_ids" in records[0] else Counter()
        )
        take(t for t, _ in sorted(in_counts.items(), key=lambda kv: (-kv[1], kv[0])))
    if len(chosen) < size:
        take(range(vocab_size))
    return torch.tensor(sorted(chosen), dtype=torch.long)


def vocab_coverage(records: Iterable[Mapping[str, Any]], vocab_ids: torch.Tensor) -> float:
    """Fraction of output tokens that lie in the draft vocabulary."""
    keep = set(vocab_ids.tolist())
    total = hit = 0
    for rec in records:
        for t in rec["output_ids"]:
            total += 1
            hit += int(t) in keep
    return hit / total if total else 0.0
