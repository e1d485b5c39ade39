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
and the user's criteria cut exactly where plain decoding would stop. Batch size 1.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from ..draft_policy import DraftPolicyState
from ..lookup import NgramIndex
from ..stats import DraftStats
from .attention import target_tree_mask
from .build import LatentTreeDrafter, add_lookup_branches
from .cache import compact_cache, prepare_cache, trim_sliding_layers
from .cost import choose_nodes
from .tree import TokenTree
from .verify import Verdict, greedy_walk, sampling_walk

# model_kwargs generate prepares for a decoder-only text model; anything else is refused with the fix
_KNOWN_MODEL_KWARGS = {"attention_mask", "position_ids", "use_cache", "logits_to_keep", "cache", "output_attentions",
                       "output_hidden_states"}


@dataclass(frozen=True)
class TreeSettings:
    """Per-call tree settings, read from the drafter's drafting settings (config defaults + oneiro_* kwargs)."""

    mode: str  # "hybrid", "latent" or "lookup": which sources grow branches
    max_nodes: int  # candidate nodes per pass at most (the root not counted)
    max_depth: int  # tokens per branch at most
    topk: int  # latent: children per expanded node
    beam: int  # latent: nodes expanded per level
    lookup_branches: int  # lookup: continuations (occurrences) at most
    lookup_min_ngram: int
    lookup_max_ngram: int
    min_value: float  # latent: stop expanding below this estimated path probability
    cost_aware: bool  # choose the node count from t(k); off: always max_nodes

    @classmethod
    def from_drafting_settings(cls, settings: dict[str, Any]) -> TreeSettings:
        if settings.get("verification", "strict") != "strict":
            raise ValueError(
                f"tree verification is lossless only; verification={settings['verification']!r} is a lossy chain "
                "criterion. Fix: drop oneiro_verification (strict), or use oneiro_tree=False for relaxed chains."
            )
        made = cls(
            mode=settings["mode"],
            max_nodes=int(settings["tree_max_nodes"]),
            max_depth=int(settings["tree_max_depth"]),
            topk=int(settings["tree_topk"]),
            beam=int(settings["tree_beam"]),
            lookup_branches=int(settings["tree_lookup_branches"]),
            lookup_min_ngram=int(settings["lookup_min_ngram"]),
            lookup_max_ngram=int(settings["lookup_max_ngram"]),
            min_value=float(settings["min_draft_confidence"]),
            cost_aware=bool(settings["cost_aware"]),
        )
        for name in ("max_nodes", "max_depth", "topk", "beam", "lookup_branches"):
            if getattr(made, name) < 1:
                raise ValueError(f"tree_{name} must be >= 1 (got {getattr(made, name)}). Fix: pass oneiro_tree_{name}=4.")
        return made


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
        raise ValueError(f"tree verification runs batch size 1 (got {input_ids.shape[0]}). Fix: one call per prompt.")
    wants_outputs = any(model_kwargs.get(k) for k in ("output_attentions", "output_hidden_states"))
    if wants_outputs or generation_config.output_attentions or generation_config.output_hidden_states:
        raise ValueError(
            "tree verification does not return attentions or hidden states (a tree pass has no single sequence). "
            "Fix: drop output_attentions/output_hidden_states, or call generate with oneiro_tree=False."
        )
    unknown = sorted(k for k, v in model_kwargs.items() if k not in _KNOWN_MODEL_KWARGS and v is not None)
    if unknown:
        raise ValueError(f"tree verification does not forward {unknown} to the target. Fix: drop them, or oneiro_tree=False.")
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool((mask == 1).all()):
        raise ValueError(
            "tree verification needs an unpadded prompt, but attention_mask (given, or made by generate from "
            "pad_token_id tokens in the prompt) has zeros. Fix: drop the padding, or pass "
            "attention_mask=torch.ones_like(input_ids) when the pad id is a real token of the prompt."
        )
    if model_kwargs.get("cache") is None:
        raise ValueError("tree verification needs the target's cache. Fix: drop use_cache=False.")


def _policy(drafter) -> DraftPolicyState:
    if drafter._policy_state is None:
        object.__setattr__(drafter, "_policy_state", DraftPolicyState())
    return drafter._policy_state


def _calibrate(tree: TokenTree, verdict: Verdict, kept: int, policy: DraftPolicyState) -> None:
    """Every child of the root and of each kept accepted node was tested: feed accepted/rejected to its rate."""
    path = set(verdict.path)
    for parent in [0, *verdict.path[: kept - 1]]:
        for child in tree.children[parent].values():
            node = tree.nodes[child]
            rate = policy.latent_rate(node.confidence) if node.source == "latent" else policy.lookup_rate(node.ngram)
            rate.add(child in path)


def _sibling_rank(tree: TokenTree, node: int) -> int:
    """0 for the parent's likeliest child (by value, ties by node order), 1 for the next, ..."""
    me = tree.nodes[node]
    return sum(
        1 for other in tree.children[me.parent].values()
        if (tree.nodes[other].value, -other) > (me.value, -node)
    )


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
    """Generate with tree verification; returns what `generate` returns (ids, or a GenerateDecoderOnlyOutput)."""
    _check_call(generation_config, model_kwargs, input_ids)
    cache = model_kwargs["cache"]
    prepare_cache(cache)
    if cache.get_seq_length() > 0:
        raise ValueError("tree verification starts from an empty cache. Fix: do not pass a filled cache to generate.")
    device = input_ids.device
    eos = getattr(generation_config, "_eos_token_tensor", None)
    eos_ids = set(eos.flatten().tolist()) if eos is not None else set()
    do_sample = bool(generation_config.do_sample)
    want_scores = generation_config.return_dict_in_generate and generation_config.output_scores
    want_logits = generation_config.return_dict_in_generate and generation_config.output_logits
    scores_out: list[torch.Tensor] = []
    logits_out: list[torch.Tensor] = []
    policy = _policy(drafter)
    stats = DraftStats()
    object.__setattr__(drafter, "last_stats", stats)
    # the drafter holds the accepted positions plus at most one level of `beam` speculative nodes per depth
    capacity = generation_config.max_length + settings.beam * settings.max_depth
    latent = LatentTreeDrafter(drafter, capacity) if settings.mode != "lookup" else None
    hidden_flag = -1 if latent is not None else False
    index = NgramIndex(settings.lookup_min_ngram, settings.lookup_max_ngram, keep_occurrences=settings.lookup_branches)
    walk = sampling_walk if do_sample else greedy_walk

    # prefill: exactly plain decoding's first step
    out = model(
        input_ids=input_ids, position_ids=model_kwargs.get("position_ids"), cache=cache, use_cache=True,
        output_hidden_states=hidden_flag, logits_to_keep=1,
    )
    trim_sliding_layers(cache)
    raw = out.logits[:, -1].float()
    row = logits_processor(input_ids, raw.clone())
    token = torch.multinomial(row.softmax(-1), 1) if do_sample else row.argmax(-1, keepdim=True)
    if latent is not None:
        latent.observe(out.hidden_states[-1])
    input_ids = torch.cat([input_ids, token.to(input_ids.dtype)], dim=-1)
    scores_out.append(row)
    logits_out.append(raw)
    if streamer is not None:
        streamer.put(token.cpu())
    finished = bool(stopping_criteria(input_ids, row).all())

    while not finished:
        started = time.perf_counter()
        cur = input_ids.shape[1]
        index.extend(input_ids[0, len(index.tokens):].tolist())
        depth = min(settings.max_depth, generation_config.max_length - cur - 1)
        tree = TokenTree.with_root(int(input_ids[0, -1]))
        used_latent, drafter_calls = False, 0
        if depth > 0 and settings.mode in ("lookup", "hybrid"):
            add_lookup_branches(
                tree, index, max_depth=depth, branches=settings.lookup_branches,
                min_ngram=settings.lookup_min_ngram, policy=policy, eos_ids=eos_ids,
            )
        if depth > 0 and latent is not None:
            if not settings.cost_aware or policy.latent_worth_trying():
                policy.steps_since_latent = 0
                drafter_calls = latent.expand(
                    tree, input_ids, max_depth=depth, topk=settings.topk, beam=settings.beam,
                    min_value=settings.min_value, policy=policy, eos_ids=eos_ids, cost_aware=settings.cost_aware,
                )
                used_latent = True
            else:
                policy.steps_since_latent += 1
        chosen = choose_nodes(tree, policy.verify_time if settings.cost_aware else None, settings.max_nodes)
        tree = tree.keep(chosen)
        size = len(tree)
        draft_s = time.perf_counter() - started

        verify_started = time.perf_counter()
        positions = tree.position_ids(cur - 1, device)
        mask = target_tree_mask(model, cache, tree.ancestors(device), positions[0])
        out = model(
            input_ids=tree.tokens(device), position_ids=positions, attention_mask=mask, cache=cache,
            use_cache=True, output_hidden_states=hidden_flag, logits_to_keep=0,
        )
        logits = out.logits[0].float()  # (size, V)

        def scores(node: int, _ids=input_ids, _tree=tree, _logits=logits) -> torch.Tensor:
            path = [_tree.nodes[i].token for i in _tree.path_to(node)]
            prefix = torch.cat([_ids, torch.tensor([path], dtype=_ids.dtype, device=device)], dim=-1) if path else _ids
            return logits_processor(prefix, _logits[node : node + 1].clone())

        verdict = walk(tree, scores)
        kept = 0
        for token, row in zip(verdict.tokens, verdict.scores):
            input_ids = torch.cat([input_ids, torch.tensor([[token]], dtype=input_ids.dtype, device=device)], dim=-1)
            kept += 1
            if bool(stopping_criteria(input_ids, row).all()):
                finished = True
                break
        keep = [0, *verdict.path[: kept - 1]]
        compact_cache(cache, torch.tensor(keep, device=device), size)
        verify_s = time.perf_counter() - verify_started
        policy.observe_verify(size, verify_s)
        if latent is not None:
            latent.observe(out.hidden_states[-1][:, keep])
        _calibrate(tree, verdict, kept, policy)
        if used_latent and settings.cost_aware:
            policy.observe_latent_profit(kept * policy.verify_time(1) - policy.verify_time(size) - draft_s)
        new_tokens = input_ids[:, cur:]
        if streamer is not None:
            streamer.put(new_tokens.cpu())
        nodes_of_tokens = [0, *verdict.path][:kept]
        scores_out.extend(verdict.scores[:kept])
        logits_out.extend(logits[i : i + 1] for i in nodes_of_tokens)

        accepted = kept - 1  # as in chains: the last token a pass yields counts as the target's own
        stats.steps += 1
        stats.accept_lengths.append(kept)
        stats.draft_time_s += draft_s
        stats.verify_time_s += verify_s
        stats.tree_nodes.append(size - 1)
        stats.tree_drafter_calls.append(drafter_calls)
        stats.tree_branch_ranks.append(max((_sibling_rank(tree, i) for i in verdict.path[:accepted]), default=-1))
        if size == 1:
            stats.empty_steps += 1
        stats.drafted_tokens += size - 1
        stats.accepted_tokens += accepted
        for node in tree.nodes[1:]:
            stats.drafted_by_source[node.source] += 1
        for i in verdict.path[:accepted]:
            stats.accepted_by_source[tree.nodes[i].source] += 1
        stats.latent_steps += any(n.source == "latent" for n in tree.nodes)
        stats.lookup_steps += any(n.source == "lookup" for n in tree.nodes)

    if streamer is not None:
        streamer.end()
    if generation_config.return_dict_in_generate:
        return GenerateDecoderOnlyOutput(
            sequences=input_ids,
            scores=tuple(scores_out) if want_scores else None,
            logits=tuple(logits_out) if want_logits else None,
            cache=cache,
        )
    return input_ids
