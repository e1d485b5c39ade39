"""The tree decoding loop of one prompt, run by `generate` as its `custom_generate` callable.

`generate` prepares everything as for plain greedy search or sampling (generation config, logits
processors incl. sampling warpers, stopping criteria incl. EOS and `max_length`, the dynamic cache, the
prompt sent to the streamer) and calls `custom_generate(model, input_ids, logits_processor=...,
stopping_criteria=..., generation_config=..., **model_kwargs)` instead of its own loop. One prompt is a batch of
one: after this module's checks it runs the batched loop (decode.py), whose per-step work is

    draft a tree (drafting: its sources) -> keep what pays (cost.py) -> one target pass over the flattened tree with a
    4-D tree mask and tree position ids (tree_mask.py) -> walk it (judge.py) -> append the tokens one by one
    until a stopping criterion fires -> compact the cache to the path (target_cache.py) -> feed the path's states
    to the drafter and the calibration

Stopping criteria are checked after every appended token, as plain decoding does, so EOS, `max_length`
and the user's criteria cut exactly where plain decoding would stop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ...drafting.view import EngineView
from .decode import batch_decode


def tree_generate_function(drafter, settings: EngineView, streamer=None) -> Callable:
    """The `custom_generate` callable for one generate call (the streamer is not forwarded to callables). It
    returns what `generate` returns: ids (1, T + new tokens) for the (1, T) prompt, or a
    GenerateDecoderOnlyOutput."""

    def oneiro_tree_generate(model, input_ids: torch.LongTensor, logits_processor, stopping_criteria,
                             generation_config, synced_gpus: bool = False, **model_kwargs: Any):
        _check_call(model_kwargs, input_ids)  # then what batches refuse too (batch_decode)
        return batch_decode(model, drafter, settings, input_ids, logits_processor, stopping_criteria,
                            generation_config, model_kwargs, streamer)

    return oneiro_tree_generate


def _check_call(model_kwargs: dict[str, Any], input_ids: torch.LongTensor) -> None:
    if input_ids.shape[0] != 1:
        raise ValueError(f"tree verification runs batch size 1 here (got {input_ids.shape[0]}). Fix: call generate "
                         "with the batch (model.generate(**batch, assistant_model=drafter)), which runs it batched.")
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool((mask == 1).all()):
        raise ValueError(
            "tree verification needs an unpadded prompt, but attention_mask (given, or made by generate from "
            "pad_token_id tokens in the prompt) has zeros. Fix: drop the padding, or pass "
            "attention_mask=torch.ones_like(input_ids) when the pad id is a real token of the prompt."
        )
