"""The tree decoding loop, run by `generate` as its `custom_generate` callable.

`generate` prepares everything as for plain greedy search or sampling (generation config, logits
processors incl. sampling warpers, stopping criteria incl. EOS and `max_length`, the dynamic cache, the
prompt sent to the streamer) and calls `custom_generate(model, input_ids, logits_processor=...,
stopping_criteria=..., generation_config=..., **model_kwargs)` instead of its own loop. Per step:

    draft a tree (build.py) -> keep what pays (cost.py) -> one target pass over the flattened tree with a
    4-D tree mask and tree position ids (attention.py) -> walk it (verify.py) -> append the tokens one by one
    until a stopping criterion fires -> compact the cache to the path (cache.py) -> feed the path's states
    to the drafter and the calibration

Stopping criteria are checked after every appended token, as plain decoding does, so EOS, `max_length`
and the user's criteria cut exactly where plain decoding would stop. One sequence (a batch of one row);
batches of several rows run in batch.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..draft import TreeDraft, eos_token_ids
from .attention import target_tree_mask
from .cache import compact_cache
from .core import (
    Row,
    append_verdict,
    check_model_kwargs,
    generate_output,
    next_tokens,
    node_scores,
    prefill,
    start_empty,
)
from .drafting import SequenceDrafter
from .settings import TreeSettings
from .tree import TokenTree
from .verify import Verdict, greedy_walk, sampling_walk


def tree_generate_function(drafter, settings: TreeSettings, streamer=None) -> Callable:
    """The `custom_generate` callable for one generate call (the streamer is not forwarded to callables)."""

    def oneiro_tree_generate(
        model,
        input_ids: torch.LongTensor,
        logits_processor,
        stopping_criteria,
        generation_config,
        synced_gpus: bool = False,
        **model_kwargs: Any,
    ):
        return tree_decode(
            model, drafter, settings, input_ids, logits_processor, stopping_criteria, generation_config, streamer,
            model_kwargs,
        )

    return oneiro_tree_generate


def _check_call(generation_config, model_kwargs: dict[str, Any], input_ids: torch.LongTensor) -> None:
    if input_ids.shape[0] != 1:
        raise ValueError(f"tree verification runs batch size 1 here (got {input_ids.shape[0]}). Fix: call generate "
                         "with the batch (model.generate(**batch, assistant_model=drafter)), which runs it batched.")
    check_model_kwargs(generation_config, model_kwargs)
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool((mask == 1).all()):
        raise ValueError(
            "tree verification needs an unpadded prompt, but attention_mask (given, or made by generate from "
            "pad_token_id tokens in the prompt) has zeros. Fix: drop the padding, or pass "
            "attention_mask=torch.ones_like(input_ids) when the pad id is a real token of the prompt."
        )


@dataclass
class Pass:
    """One verification pass: the verdict, how many of its tokens were kept, and the target's outputs."""

    verdict: Verdict
    kept: int  # tokens appended (a stopping criterion may cut the verdict short)
    logits: torch.Tensor  # (nodes, V) raw logits of the pass
    seconds: float


class TreeDecoder:
    """The per-call state of one tree generate call (one sequence; batches: `batch.BatchDecoder`) and its steps."""

    def __init__(self, model, drafter, settings: TreeSettings, logits_processor, stopping_criteria,
                 generation_config, streamer, cache) -> None:
        self.model, self.drafter, self.settings = model, drafter, settings
        self.logits_processor, self.stopping_criteria = logits_processor, stopping_criteria
        self.generation_config, self.streamer, self.cache = generation_config, streamer, cache
        self.eos_ids = eos_token_ids(generation_config)
        self.walk = sampling_walk if generation_config.do_sample else greedy_walk
        session = drafter.session_for_call()
        self.policy, self.stats = session.policy, session.stats  # the drafter's policy; stats -> last_stats
        self.drafting = SequenceDrafter(drafter, settings, self.policy, self.stats, self.eos_ids,
                                        generation_config.max_length)
        # only the states the drafter reads (default: the final-normed last one)
        self.hidden_flag: int | list[int] | bool = (
            drafter.hidden_states_request if self.drafting.latent is not None else False
        )
        wants = generation_config.return_dict_in_generate
        self.keep_scores, self.keep_logits = wants and generation_config.output_scores, wants and generation_config.output_logits
        self.row: Row | None = None  # the sequence, from the prefill on
        self.stopped = False  # a stopping criterion fired

    def _append(self, token: int, scores: torch.Tensor, raw: torch.Tensor, stop: bool | None = None) -> bool:
        """Append one token; whether a stopping criterion fires now (checked per token, as plain decoding does,
        unless `stop` brings the verdict)."""
        row = self.row
        row.append(token, scores if self.keep_scores else None, raw if self.keep_logits else None)
        self.stopped = bool(self.stopping_criteria(row.ids, scores).all()) if stop is None else bool(stop)
        return self.stopped

    def prefill(self, input_ids: torch.LongTensor, position_ids) -> tuple[torch.LongTensor, bool]:
        """Exactly plain decoding's first step; the prompt's states go to the drafter."""
        self.row = Row(input_ids, 0, self.drafting, self.stats)
        raw = prefill(self.model, self.cache, self.hidden_flag, [self.row], input_ids, None, position_ids)
        tokens, scores, stops = next_tokens([self.row], raw, self.logits_processor, self.stopping_criteria,
                                            self.generation_config.do_sample)
        self._append(tokens[0], scores[0], raw, stops[0])
        if self.streamer is not None:
            self.streamer.put(self.row.ids[:, -1:].cpu())
        return self.row.ids, self.stopped

    def draft(self, input_ids: torch.LongTensor) -> TreeDraft:
        """A tree below the last token of input_ids (1, T) (`SequenceDrafter.draft`, priced by t(k))."""
        return self.drafting.draft(input_ids, self.policy.verify_time)

    def verify(self, input_ids: torch.LongTensor, tree: TokenTree) -> tuple[torch.LongTensor, Pass, bool]:
        """One target pass over the flattened tree, the walk, the tokens appended, the cache compacted.

        input_ids (1, T) -> (input_ids with the kept tokens (1, T + kept), the pass, whether to stop)."""
        with self.stats.time("verify") as timer:
            device = input_ids.device
            positions = tree.position_ids(input_ids.shape[1] - 1, device)
            mask = target_tree_mask(self.model, self.cache, tree.ancestors(device), positions[0])
            out = self.model(input_ids=tree.tokens(device), position_ids=positions, attention_mask=mask,
                             cache=self.cache, use_cache=True, output_hidden_states=self.hidden_flag, logits_to_keep=0)
            logits = out.logits[0].float()  # (nodes, V)
            verdict = self.walk(tree, node_scores(tree, input_ids, logits, self.logits_processor))
            kept = append_verdict(verdict, logits, self._append)
            keep = [0, *verdict.path[: kept - 1]]  # the root and the accepted nodes whose successor was appended
            compact_cache(self.cache, torch.tensor(keep, device=device), len(tree))
            self.drafting.observe(out.hidden_states, keep)
            if self.streamer is not None:
                self.streamer.put(self.row.ids[:, -kept:].cpu())
        return self.row.ids, Pass(verdict, kept, logits, timer.seconds), self.stopped

    def learn(self, draft: TreeDraft, done: Pass) -> None:
        """Latency, calibration, the back-off and statistics from one step (its times are recorded where they are
        measured: `draft` and `verify`)."""
        self.policy.observe_verify(len(draft.tree), done.seconds)
        self.drafting.learn(draft, done.verdict, done.kept, self.policy.verify_time)


@torch.no_grad()
def tree_decode(
    model,
    drafter,
    settings: TreeSettings,
    input_ids: torch.LongTensor,
    logits_processor,
    stopping_criteria,
    generation_config,
    streamer,
    model_kwargs: dict[str, Any],
):
    """Generate with tree verification; returns what `generate` returns (ids, or a GenerateDecoderOnlyOutput).

    input_ids: (1, T) the prompt; the result holds (1, T + new tokens).
    """
    _check_call(generation_config, model_kwargs, input_ids)
    cache = model_kwargs["cache"]
    start_empty(cache)
    decoder = TreeDecoder(model, drafter, settings, logits_processor, stopping_criteria, generation_config, streamer,
                          cache)
    prompt_columns = input_ids.shape[1]
    input_ids, finished = decoder.prefill(input_ids, model_kwargs.get("position_ids"))
    while not finished:
        draft = decoder.draft(input_ids)
        input_ids, done, finished = decoder.verify(input_ids, draft.tree)
        decoder.learn(draft, done)
    if streamer is not None:
        streamer.end()
    return generate_output(generation_config, [decoder.row], prompt_columns, cache=cache)
