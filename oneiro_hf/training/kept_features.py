"""Keeping what a streamed training computes: the features of the records its cache lacked, written into that
cache (``--feature_cache_max_gb``), so the next run over the same records reads them instead of running the
target."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch

from .feature_store import FeatureCache, FeatureCacheNoSpace
from .features import FEATURE_EXTRAS

logger = logging.getLogger(__name__)


class StreamedFeatureKeeper:
    """Keeps in a ``FeatureCache`` the features a streamed training computes for the rows the cache lacked, so the
    next run over the same records (a campaign's next milestone, another pass) reads them instead of running the
    target: buffered to ``cache.shard_tokens`` positions a shard, and none once the shards would pass
    ``max_bytes``. A disk too full for a shard ends the keeping with a warning; the training goes on (a cache
    only saves time)."""

    def __init__(self, cache: FeatureCache, max_bytes: int) -> None:
        self.cache = cache
        self.max_bytes = int(max_bytes)
        self.buffer: list[tuple[list[int], int, dict[str, torch.Tensor]]] = []
        self.buffered_tokens = 0
        self.kept_tokens = 0
        self.stopped: str | None = None  # why nothing more is kept

    def offer(self, batch: Mapping[str, Any], completed: Mapping[str, Any]) -> None:
        """Buffer the rows of ``completed`` (``complete_features(batch, ...)``) whose features ``batch`` lacked."""
        if self.stopped or ("states" in batch and "has_features" not in batch):  # or every row came from the cache
            return
        cached = batch.get("has_features", torch.zeros(batch["input_ids"].shape[0], dtype=torch.bool))
        lengths = batch["attention_mask"].sum(-1)
        for row in (~cached.cpu()).nonzero().flatten().tolist():
            n = int(lengths[row])
            # copies of the row alone: a view would keep the whole batch's tensor alive while the shard fills
            feats = {"states": completed["states"][row, :n].detach().to("cpu", torch.float16, copy=True),
                     "target_argmax": completed["target_argmax"][row, :n].to("cpu", copy=True)}
            feats |= {key: completed[key][row, :n].detach().to("cpu", torch.float16, copy=True)
                      for key in FEATURE_EXTRAS if key in completed}
            self.buffer.append((batch["input_ids"][row, :n].tolist(), int(batch["prompt_lens"][row]), feats))
            self.buffered_tokens += n
        if self.buffered_tokens >= self.cache.shard_tokens:
            self.flush()

    def flush(self) -> int:
        """Write what is buffered as a shard, within ``max_bytes``; returns the positions written."""
        buffer, tokens = self.buffer, self.buffered_tokens
        self.buffer, self.buffered_tokens = [], 0
        if not buffer or self.stopped:
            return 0
        if self.cache.size_bytes() + tokens * self.cache.bytes_per_token() > self.max_bytes:
            self.stopped = (f"the cache's shards would pass --feature_cache_max_gb "
                            f"{self.max_bytes / 2**30:.1f}")
        else:
            try:
                written = self.cache.add(buffer)
            except FeatureCacheNoSpace as err:
                self.stopped = str(err)
            else:
                self.kept_tokens += written
                return written
        logger.warning("feature cache %s: keeping no more streamed features (%s); %d positions kept",
                       self.cache.dir, self.stopped, self.kept_tokens)
        return 0
