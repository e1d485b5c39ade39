"""The per-sequence bookkeeping of the decoding loop (`decode.py`, which also runs one prompt as a batch of one):
the checks of a call, a sequence's `Row` (its tokens, outputs and drafting), the prefill pass, the next token
after a pass, a verdict's tokens appended until the sequence stops, and the output `generate` returns. The loop
keeps the passes, the cache layout and when a row stops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from ...drafting.draft import Verdict
from ...drafting.engine import SequenceEngine
from ...drafting.stats import DraftStats
from ...drafting.tree import TokenTree
from .target_cache import prepare_cache, trim_sliding_layers

# model_kwargs generate prepares for a decoder-only text model; anything else is refused with the fix
_KNOWN_MODEL_KWARGS = {"attention_mask", "position_ids", "use_cache", "logits_to_keep", "cache", "output_attentions",
                       "output_hidden_states"}


def check_model_kwargs(generation_config, model_kwargs: dict[str, Any]) -> None:
    """What the tree's and the batch's loops refuse alike: attention or hidden-state outputs, model inputs they do
    not forward, no cache."""
    wants_outputs = any(model_kwargs.get(k) for k in ("output_attentions", "output_hidden_states"))
    if wants_outputs or generation_config.output_attentions or generation_config.output_hidden_states:
        raise ValueError(
            "tree verification does not return attentions or hidden states (a tree pass has no single sequence). "
            "Fix: drop output_attentions/output_hidden_states, or call generate with oneiro_tree=False."
        )
    unknown = sorted(k for k, v in model_kwargs.items() if k not in _KNOWN_MODEL_KWARGS and v is not None)
    if unknown:
        raise ValueError(f"tree verification does not forward {unknown} to the target. Fix: drop them, or oneiro_tree=False.")
    if model_kwargs.get("cache") is None:
        raise ValueError("tree verification needs the target's cache. Fix: drop use_cache=False.")


def start_empty(cache) -> None:
    """Make `cache` compactable (`prepare_cache`) and refuse one that generate was handed already filled."""
    prepare_cache(cache)
    if cache.get_seq_length() > 0:
        raise ValueError("tree verification starts from an empty cache. Fix: do not pass a filled cache to generate.")


def sample_or_argmax(scores: torch.Tensor, do_sample: bool) -> torch.LongTensor:
    """(B,) the next token of each row of processed scores (B, V): sampled, or the argmax (plain decoding's)."""
    if do_sample:
        return torch.multinomial(scores.softmax(-1), 1).squeeze(1)
    return scores.argmax(-1)


def node_scores(tree: TokenTree, input_ids: torch.LongTensor, logits: torch.Tensor,
                logits_processor) -> Callable[[int], torch.Tensor]:
    """`scores(node)` for the walks: the user's processors on the prefix that ends at `node`, applied to that node's
    row of the pass's logits (nodes, V); input_ids (1, T) is the sequence before the tree's root's successor."""

    def scores(node: int) -> torch.Tensor:
        path = [tree.nodes[i].token for i in tree.path_to(node)]
        prefix = torch.cat([input_ids, torch.tensor([path], dtype=input_ids.dtype, device=input_ids.device)], dim=-1)
        return logits_processor(prefix, logits[node : node + 1].clone())

    return scores


@dataclass
class Row:
    """One prompt and its decoding: its columns, its drafting, its outputs."""

    ids: torch.LongTensor  # (1, columns): left padding, prompt, tokens so far (what the stopping criteria see)
    pad: int  # leading padding columns of ids
    drafting: SequenceEngine
    stats: DraftStats
    scores: list[torch.Tensor] = field(default_factory=list)  # (1, V) processed scores per new token
    logits: list[torch.Tensor] = field(default_factory=list)  # (1, V) raw logits per new token
    flagged: int | None = None  # columns when a stopping criterion fired for this row
    stop_at: int | None = None  # columns at which the row ends

    @property
    def tokens(self) -> torch.LongTensor:
        """(1, T) the row's sequence without its padding."""
        return self.ids[:, self.pad:]

    @property
    def done(self) -> bool:
        return self.stop_at is not None and self.ids.shape[1] >= self.stop_at

    def append(self, token: int, scores: torch.Tensor | None, raw: torch.Tensor | None) -> None:
        """Append one token and, where the call returns them (not None), its processed scores and raw logits."""
        self.ids = torch.cat([self.ids, self.ids.new_tensor([[token]])], dim=1)
        if scores is not None:
            self.scores.append(scores)
        if raw is not None:
            self.logits.append(raw)


def row_view(hidden_states: tuple | None, b: int) -> tuple:
    """Row b of a batched pass's hidden states, each entry (1, n, H) (None entries kept)."""
    return tuple(h[b : b + 1] if h is not None else None for h in (hidden_states or ()))


def prefill(model, cache, hidden_flag, rows: list[Row], input_ids: torch.LongTensor, attention_mask,
            position_ids) -> torch.Tensor:
    """Plain decoding's first pass over the prompts input_ids (B, C); each row's prompt states go to its drafter.
    Returns the raw logits (B, V) of the first new token."""
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, cache=cache,
                use_cache=True, output_hidden_states=hidden_flag, logits_to_keep=1)
    trim_sliding_layers(cache)
    for b, row in enumerate(rows):
        row.drafting.observe(row_view(out.hidden_states, b), slice(row.pad, None))
    return out.logits[:, -1].float()


def next_tokens(rows: list[Row], raw: torch.Tensor, logits_processor, stopping_criteria,
                do_sample: bool) -> tuple[list[int], list[torch.Tensor], list[bool | None]]:
    """Each row's next token from raw logits (B, V): the tokens, the (1, V) processed scores and, where known, the
    stopping criteria's verdict on the token appended (else None: ask when appending). Rows of one length (no row
    has accepted more than another) are processed and checked in one call, as plain batched decoding does;
    otherwise row by row, each on its own prefix."""
    if len({row.ids.shape[1] for row in rows}) == 1:
        ids = torch.cat([row.ids for row in rows])
        scores = logits_processor(ids, raw.clone())
        tokens = sample_or_argmax(scores, do_sample)
        stops = stopping_criteria(torch.cat([ids, tokens.unsqueeze(1)], dim=1), scores).tolist()
        return tokens.tolist(), [scores[b : b + 1] for b in range(len(rows))], stops
    per_row = [logits_processor(row.ids, raw[b : b + 1].clone()) for b, row in enumerate(rows)]
    tokens = [int(sample_or_argmax(scores, do_sample)[0]) for scores in per_row]
    return tokens, per_row, [None] * len(rows)


def append_verdict(verdict: Verdict, logits: torch.Tensor,
                   append: Callable[[int, torch.Tensor, torch.Tensor], bool]) -> int:
    """Append a walk's tokens one by one, `append(token, scores, raw)` saying after each whether the sequence takes
    no more from this pass; returns how many were appended. logits: (nodes, V) the row's raw logits of the pass."""
    kept = 0
    for token, node, scores in zip(verdict.tokens, [0, *verdict.path], verdict.scores):
        kept += 1
        if append(token, scores, logits[node : node + 1]):
            break
    return kept


def generate_output(generation_config, rows: list[Row], prompt_columns: int, cache=None):
    """What `generate` returns: sequences (B, columns) padded with pad_token_id as plain batched decoding pads
    finished rows, or a GenerateDecoderOnlyOutput with them and the per-step (B, V) processed scores and raw logits
    asked for (a finished row's entries: a point mass on the pad id)."""
    pad = generation_config._pad_token_tensor
    pad_id = int(pad) if pad is not None else 0
    width = max(row.ids.shape[1] for row in rows)
    sequences = torch.cat([torch.nn.functional.pad(row.ids, (0, width - row.ids.shape[1]), value=pad_id)
                           for row in rows])
    if not generation_config.return_dict_in_generate:
        return sequences
    for row in rows:  # a row cut back to where it stopped drops what it appended after
        new = row.ids.shape[1] - prompt_columns
        del row.scores[new:], row.logits[new:]
    steps = width - prompt_columns
    scores = _per_step([row.scores for row in rows], steps, pad_id) if generation_config.output_scores else None
    logits = _per_step([row.logits for row in rows], steps, pad_id) if generation_config.output_logits else None
    return GenerateDecoderOnlyOutput(sequences=sequences, scores=scores, logits=logits, cache=cache)


def _per_step(per_row: list[list[torch.Tensor]], steps: int, pad_id: int) -> tuple[torch.Tensor, ...]:
    """(B, V) per step from each row's (1, V) rows; a row that ended earlier gets a point mass on `pad_id`."""
    like = next(rows[0] for rows in per_row if rows)
    filler = torch.full_like(like, float("-inf"))
    filler[0, pad_id] = 0.0
    return tuple(torch.cat([rows[t] if t < len(rows) else filler for rows in per_row]) for t in range(steps))
