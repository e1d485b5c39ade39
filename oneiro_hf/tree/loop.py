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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from transformers.generation.utils import GenerateDecoderOnlyOutput

from ..draft import Draft, eos_token_ids
from ..draft_policy import DraftPolicyState
from ..lookup import NgramIndex
from ..settings import DraftingSettings
from .attention import target_tree_mask
from .build import LatentTreeDrafter, add_lookup_after_latent, add_lookup_branches
from .cache import compact_cache, prepare_cache, trim_sliding_layers
from .cost import choose_nodes, drafting_pays, latent_levels_below_root
from .tree import TokenTree
from .verify import Verdict, greedy_walk, sampling_walk

# model_kwargs generate prepares for a decoder-only text model; anything else is refused with the fix
_KNOWN_MODEL_KWARGS = {"attention_mask", "position_ids", "use_cache", "logits_to_keep", "cache", "output_attentions",
                       "output_hidden_states"}


@dataclass(frozen=True)
class TreeSettings:
    """A tree call's view of its `DraftingSettings` (config defaults + oneiro_* kwargs), under the names the tree
    code reads. It declares nothing: every value is a DraftingSettings field, whose declaration holds its default
    and check (settings.py), or derived from them (`filler_min_ngram`)."""

    drafting: DraftingSettings

    @classmethod
    def from_drafting_settings(cls, settings: DraftingSettings) -> TreeSettings:
        """The view of validated settings (`DraftingSettings.validate` refuses tree sizes < 1 and a lossy
        verification with `tree`)."""
        return cls(settings.validate())

    @property
    def mode(self) -> str:
        """"hybrid", "latent" or "lookup": which sources grow branches."""
        return self.drafting.mode

    @property
    def max_nodes(self) -> int:
        """Candidate nodes per pass at most (the root not counted): tree_max_nodes."""
        return int(self.drafting.tree_max_nodes)

    @property
    def max_depth(self) -> int:
        """Tokens per branch at most: tree_max_depth."""
        return int(self.drafting.tree_max_depth)

    @property
    def topk(self) -> int:
        """Latent: children per expanded node (tree_topk)."""
        return int(self.drafting.tree_topk)

    @property
    def beam(self) -> int:
        """Latent: nodes expanded per level (tree_beam)."""
        return int(self.drafting.tree_beam)

    @property
    def lookup_branches(self) -> int:
        """Lookup: continuations (occurrences) at most (tree_lookup_branches)."""
        return int(self.drafting.tree_lookup_branches)

    @property
    def lookup_min_ngram(self) -> int:
        """Matches this long are branches before the drafter is asked (as a chain's lookup)."""
        return int(self.drafting.lookup_min_ngram)

    @property
    def filler_min_ngram(self) -> int:
        """Shorter matches down to this one are added after the drafter's turn (tree_lookup_min_ngram)."""
        return min(int(self.drafting.tree_lookup_min_ngram), self.lookup_min_ngram)

    @property
    def lookup_max_ngram(self) -> int:
        return int(self.drafting.lookup_max_ngram)

    @property
    def lookup_after_latent(self) -> bool:
        """Hybrid: continue the likeliest latent leaves by lookup from their own path."""
        return bool(self.drafting.lookup_after_latent)

    @property
    def min_value(self) -> float:
        """Latent: stop expanding below this estimated path probability (min_draft_confidence)."""
        return float(self.drafting.min_draft_confidence)

    @property
    def cost_aware(self) -> bool:
        """Choose the node count from t(k); off: always max_nodes."""
        return bool(self.drafting.cost_aware)

    @property
    def context_window(self) -> int | None:
        """Latest verified positions the drafter's first catch-up feeds (None: all)."""
        return self.drafting.context_window


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


def _calibrate(tree: TokenTree, verdict: Verdict, kept: int, policy: DraftPolicyState) -> None:
    """Every child of the root and of each kept accepted node was tested: feed accepted/rejected to its rate."""
    path = set(verdict.path)
    for parent in [0, *verdict.path[: kept - 1]]:
        for child in tree.children[parent].values():
            node = tree.nodes[child]
            if node.source == "latent":
                rate = policy.latent_rate(node.confidence)
            else:
                rate = policy.lookup_rate(node.ngram, node.copied)
            rate.add(child in path)


@dataclass
class Pass:
    """One verification pass: the verdict, how many of its tokens were kept, and the target's outputs."""

    verdict: Verdict
    kept: int  # tokens appended (a stopping criterion may cut the verdict short)
    logits: torch.Tensor  # (nodes, V) raw logits of the pass
    seconds: float


class TreeDecoder:
    """The per-call state of one tree generate call (batch size 1) and its steps."""

    def __init__(self, model, drafter, settings: TreeSettings, logits_processor, stopping_criteria,
                 generation_config, streamer, cache) -> None:
        self.model, self.drafter, self.settings = model, drafter, settings
        self.logits_processor, self.stopping_criteria = logits_processor, stopping_criteria
        self.generation_config, self.streamer, self.cache = generation_config, streamer, cache
        self.eos_ids = eos_token_ids(generation_config)
        self.walk = sampling_walk if generation_config.do_sample else greedy_walk
        session = drafter.session_for_call()
        self.policy, self.stats = session.policy, session.stats  # the drafter's policy; stats -> last_stats
        # the drafter holds the accepted positions plus at most one level of `beam` speculative nodes per depth
        capacity = generation_config.max_length + settings.beam * settings.max_depth
        self.latent = LatentTreeDrafter(drafter, capacity, settings.context_window) if settings.mode != "lookup" else None
        # only the states the drafter reads (default: the final-normed last one)
        self.hidden_flag: int | list[int] | bool = drafter.hidden_states_request if self.latent is not None else False
        self.index = NgramIndex(settings.filler_min_ngram, settings.lookup_max_ngram,
                                keep_occurrences=settings.lookup_branches)
        self.scores: list[torch.Tensor] = []  # (1, V) processed scores of each new token
        self.raw_logits: list[torch.Tensor] = []  # (1, V) raw logits of each new token

    def _append(self, input_ids: torch.LongTensor, token: int, scores: torch.Tensor) -> tuple[torch.LongTensor, bool]:
        """Append one token; whether a stopping criterion fires now (checked per token, as plain decoding does)."""
        new = torch.tensor([[token]], dtype=input_ids.dtype, device=input_ids.device)
        input_ids = torch.cat([input_ids, new], dim=-1)
        return input_ids, bool(self.stopping_criteria(input_ids, scores).all())

    def prefill(self, input_ids: torch.LongTensor, position_ids) -> tuple[torch.LongTensor, bool]:
        """Exactly plain decoding's first step; the prompt's states go to the drafter."""
        out = self.model(input_ids=input_ids, position_ids=position_ids, cache=self.cache, use_cache=True,
                         output_hidden_states=self.hidden_flag, logits_to_keep=1)
        trim_sliding_layers(self.cache)
        raw = out.logits[:, -1].float()
        row = self.logits_processor(input_ids, raw.clone())
        token = int(torch.multinomial(row.softmax(-1), 1)) if self.generation_config.do_sample else int(row.argmax(-1))
        if self.latent is not None:
            self.latent.observe(out.hidden_states, slice(None))
        self.scores.append(row)
        self.raw_logits.append(raw)
        ids, finished = self._append(input_ids, token, row)
        if self.streamer is not None:
            self.streamer.put(ids[:, -1:].cpu())
        return ids, finished

    def draft(self, input_ids: torch.LongTensor) -> Draft:
        """A tree below the last token of input_ids (1, T): lookup and latent branches, cut to the size the cost
        model pays for."""
        settings, policy = self.settings, self.policy
        with self.stats.time("draft") as timer:
            self.index.extend(input_ids[0, len(self.index.tokens):].tolist())
            depth = min(settings.max_depth, self.generation_config.max_length - input_ids.shape[1] - 1)
            tree = TokenTree.with_root(int(input_ids[0, -1]))
            copies: list[tuple[list[int], int]] = []  # earlier occurrences' continuations, longest match first
            if depth > 0 and settings.mode in ("lookup", "hybrid"):
                copies = self.index.continuations(depth, settings.lookup_branches)
            add_lookup_branches(tree, copies, min_ngram=settings.lookup_min_ngram, policy=policy, eos_ids=self.eos_ids)
            alone = len(tree) == 1
            calls, lead = self._draft_latent(tree, input_ids, depth)
            # shorter matches only fill nodes left over: added before the drafter's turn, their nodes would raise what
            # verifying the tree without the drafter promises and talk the drafter out of its call (on Gemma-3-270M
            # that cut drafter calls from 0.90 to 0.21 per pass and tau from 5.74 to 4.98)
            add_lookup_branches(tree, copies, min_ngram=settings.filler_min_ngram,
                                max_ngram=settings.lookup_min_ngram - 1, policy=policy, eos_ids=self.eos_ids)
            tree = tree.keep(choose_nodes(tree, policy.verify_time if settings.cost_aware else None, settings.max_nodes))
        return Draft(tree=tree, calls=calls, seconds=timer.seconds, lead_token=lead, drafted_alone=alone and calls > 0)

    def _draft_latent(self, tree: TokenTree, input_ids: torch.LongTensor, depth: int) -> tuple[int, int | None]:
        """Grow the drafter's branches (and, hybrid, lookup after them) in `tree` when it pays; returns the drafter
        calls made and the drafter's likeliest first token (None when it was not called)."""
        settings, policy = self.settings, self.policy
        if depth <= 0 or self.latent is None:
            return 0, None
        if not self._latent_pays(tree, depth):
            policy.backoff.steps_since_try += 1
            return 0, None
        policy.backoff.steps_since_try = 0
        calls, lead = self.latent.expand(
            tree, input_ids, max_depth=depth, topk=settings.topk, beam=settings.beam, min_value=settings.min_value,
            policy=policy, eos_ids=self.eos_ids, max_nodes=settings.max_nodes, cost_aware=settings.cost_aware,
        )
        if settings.mode == "hybrid" and settings.lookup_after_latent:
            add_lookup_after_latent(tree, self.index, max_depth=depth, leaves=settings.beam,
                                    min_ngram=settings.lookup_min_ngram, policy=policy, eos_ids=self.eos_ids)
        return calls, lead

    def _latent_pays(self, tree: TokenTree, depth: int) -> bool:
        """Whether to call the drafter this step, given the lookup branches already in `tree`.

        Cost model on: the drafter must not be losing time overall (the back-off the chain uses too). Where lookup
        hung no branch, that is all: the first readout's confidence then decides how far to draft, which an
        average acceptance cannot see. Beside lookup branches a latent branch must also promise more tokens per
        second than the lookup tree alone, its calls priced (`cost.drafting_pays`; where lookup is confident
        little is left to gain, so a CPU whose drafter call costs a tenth of a pass skips it). Every
        `explore_every` skipped steps the drafter is tried anyway, so that what it is worth keeps being measured.
        """
        policy, backoff = self.policy, self.policy.backoff
        if not self.settings.cost_aware:
            return True
        if not backoff.worth_trying():
            return False
        if backoff.steps_since_try >= backoff.explore_every or len(tree) == 1:  # a retry, or no lookup branch
            return True
        levels = latent_levels_below_root(tree, policy.latent_lead.value, depth)
        values = [node.value for node in tree.nodes[1:]]
        return drafting_pays(values, levels, policy.verify_time, policy.draft_step_time(), 0, self.settings.max_nodes)

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

            def scores(node: int) -> torch.Tensor:  # the user's processors, on the prefix that ends at `node`
                path = [tree.nodes[i].token for i in tree.path_to(node)]
                prefix = torch.cat([input_ids, torch.tensor([path], dtype=input_ids.dtype, device=device)], dim=-1)
                return self.logits_processor(prefix, logits[node : node + 1].clone())

            verdict = self.walk(tree, scores)
            kept, finished = 0, False
            for token, row in zip(verdict.tokens, verdict.scores):
                input_ids, finished = self._append(input_ids, token, row)
                kept += 1
                if finished:
                    break
            keep = [0, *verdict.path[: kept - 1]]  # the root and the accepted nodes whose successor was appended
            compact_cache(self.cache, torch.tensor(keep, device=device), len(tree))
            if self.latent is not None:
                self.latent.observe(out.hidden_states, keep)
            if self.streamer is not None:
                self.streamer.put(input_ids[:, -kept:].cpu())
        return input_ids, Pass(verdict, kept, logits, timer.seconds), finished

    def learn(self, draft: Draft, done: Pass) -> None:
        """Latency, calibration, the back-off and statistics from one step (its times are recorded where they are
        measured: `draft` and `verify`).

        The back-off learns only from passes where the drafter drafted alone: beside lookup branches most of a
        pass's gain is lookup's. Calls made there are priced before they are made, or are the periodic retries
        that keep `latent_lead` measured (`_latent_pays`)."""
        tree, verdict, kept, policy = draft.tree, done.verdict, done.kept, self.policy
        size = len(tree)
        policy.observe_verify(size, done.seconds)
        _calibrate(tree, verdict, kept, policy)
        if draft.lead_token is not None:
            policy.latent_lead.add(verdict.tokens[0] == draft.lead_token)
        if draft.drafted_alone and self.settings.cost_aware:
            spent = policy.verify_time(size) + policy.drafting_cost(draft.seconds, draft.calls)
            policy.backoff.observe(kept * policy.verify_time(1) - spent)
        self.scores.extend(verdict.scores[:kept])
        self.raw_logits.extend(done.logits[i : i + 1] for i in [0, *verdict.path][:kept])
        # as in chains: the last token a pass yields counts as the target's own
        self.stats.record_round(draft, verdict.path[: kept - 1])


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
    prepare_cache(cache)
    if cache.get_seq_length() > 0:
        raise ValueError("tree verification starts from an empty cache. Fix: do not pass a filled cache to generate.")
    decoder = TreeDecoder(model, drafter, settings, logits_processor, stopping_criteria, generation_config, streamer,
                          cache)
    input_ids, finished = decoder.prefill(input_ids, model_kwargs.get("position_ids"))
    while not finished:
        draft = decoder.draft(input_ids)
        input_ids, done, finished = decoder.verify(input_ids, draft.tree)
        decoder.learn(draft, done)
    if streamer is not None:
        streamer.end()
    if generation_config.return_dict_in_generate:
        return GenerateDecoderOnlyOutput(
            sequences=input_ids,
            scores=tuple(decoder.scores) if generation_config.output_scores else None,
            logits=tuple(decoder.raw_logits) if generation_config.output_logits else None,
            cache=cache,
        )
    return input_ids
