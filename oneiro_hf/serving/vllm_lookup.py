"""The hybrid in vLLM: each request's prompt-lookup continuation where its text has a match, the latent drafter's
chain otherwise, as `generate`'s `oneiro_mode="hybrid"` chooses per step.

vLLM runs one proposer per server. With a folder exported with lookup on (`oneiro-export vllm --hybrid`), the
plugin's model class wraps the runner's draft step (`vllm_model.install_draft_hook`): `RequestLookup.continuations`
finds, for each request, what followed the latest earlier occurrence of its suffix n-gram (`drafting.lookup.
NgramIndex`, the index `generate` drafts from); the drafter proposes its k tokens for every request as before; then
`RequestLookup.apply` writes each continuation over its request's row.
The drafter still runs for every request, so its KV cache stays the one the next step's drafts need.

Nothing here imports vLLM: the rows, the requests' committed tokens and this step's sampled tokens come in as
tensors and arrays (unit-tested in the main lane).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..drafting.lookup import NgramIndex
from ..settings import DraftingSettings

_DEFAULTS = {f.name: f.default for f in dataclasses.fields(DraftingSettings)}
# the hybrid's n-gram bounds unless export says otherwise: generate's lookup defaults
LOOKUP_NGRAMS = (int(_DEFAULTS["lookup_min_ngram"]), int(_DEFAULTS["lookup_max_ngram"]))


def lookup_problem(min_ngram: int, max_ngram: int) -> str | None:
    """Why these n-gram bounds cannot draft (naming the fix), or None."""
    if not 1 <= int(min_ngram) <= int(max_ngram):
        return (f"lookup needs 1 <= min_ngram <= max_ngram (got {min_ngram} and {max_ngram}). Fix: e.g. "
                "--lookup-min-ngram 2 --lookup-max-ngram 4.")
    return None


@dataclass
class RequestLookup:
    """Per-request n-gram indexes over the requests' committed tokens, kept across steps (each token hashed once)."""

    min_ngram: int = LOOKUP_NGRAMS[0]
    max_ngram: int = LOOKUP_NGRAMS[1]
    indexes: dict[str, NgramIndex] = field(default_factory=dict)
    rows_replaced: int = 0  # rows whose latent draft a lookup continuation replaced (all steps)

    def __post_init__(self) -> None:
        problem = lookup_problem(self.min_ngram, self.max_ngram)
        if problem is not None:
            raise ValueError(problem)

    def continuations(self, req_ids: Sequence[str], token_ids: np.ndarray, num_tokens: np.ndarray,
                      kept: Sequence[Sequence[int]], k: int) -> dict[int, tuple[list[int], int]]:
        """Row -> (its lookup continuation of at most k tokens, the matched n-gram length), for the rows whose text
        ends in an n-gram seen before. Row i is request `req_ids[i]`; token_ids: (>= B, L) each request's committed
        tokens (prompt and output) in its first `num_tokens[i]` entries, before this step; kept[i]: this step's
        sampled tokens, -1 where rejected (`kept_rows`). Indexes of requests no longer in the batch are dropped."""
        live = set(req_ids)
        for gone in [r for r in self.indexes if r not in live]:
            del self.indexes[gone]
        found: dict[int, tuple[list[int], int]] = {}
        for i, req_id in enumerate(req_ids):
            index = self._index(req_id, token_ids[i], int(num_tokens[i]))
            continuation, ngram = index.lookup(k, after=[t for t in kept[i] if t >= 0])
            if continuation:
                found[i] = (continuation, ngram)
        return found

    def apply(self, drafts: torch.Tensor, found: dict[int, tuple[list[int], int]]) -> torch.Tensor:
        """Write each found continuation (`continuations`) over its row of `drafts` (B, k), from the first position
        and at most k tokens; the positions after a shorter continuation keep the drafter's tokens (verified and
        rejected like any wrong draft). In place, returned."""
        if found:
            k = int(drafts.shape[1])
            host = drafts if drafts.device.type == "cpu" else drafts.cpu()  # on a GPU: one copy each way
            for i, (continuation, _) in found.items():
                host[i, : min(k, len(continuation))] = torch.tensor(continuation[:k], dtype=host.dtype)
            if host is not drafts:
                drafts.copy_(host)
        self.rows_replaced += len(found)
        return drafts

    def _index(self, req_id: str, tokens: np.ndarray, committed: int) -> NgramIndex:
        """The request's index, extended to its `committed` tokens (rebuilt where vLLM took tokens back)."""
        index = self.indexes.get(req_id)
        if index is None or len(index.tokens) > committed:
            index = self.indexes[req_id] = NgramIndex(self.min_ngram, self.max_ngram)
        if len(index.tokens) < committed:
            index.extend(tokens[len(index.tokens):committed].tolist())
        return index


def kept_rows(sampled: torch.Tensor | Sequence[Sequence[int]]) -> list[list[int]]:
    """A step's sampled tokens per row as lists (-1 where rejected): one device read for a tensor."""
    return sampled.tolist() if torch.is_tensor(sampled) else [list(row) for row in sampled]
