"""The one decoding loop of tree and batched verification, run as `custom_generate`.

`generate(**batch, assistant_model=drafter)` with two or more left-padded rows comes here, with tree settings or
chain settings (a chain is a tree of one branch, `EngineView.for_chain`); so does one prompt with tree settings,
as a batch of one (`custom_generate.py`). Per step:

    each row drafts its own tree (`SequenceEngine`: its own n-gram index and drafter context) -> the cost model
    picks one width for the batch from t(k, B) (`cost.choose_width`) -> ONE target pass over every row's flattened
    tree, padded to that width, with a (B, 1, W, keys) mask per layer type (the row's valid cache columns, its
    tree's ancestry, sliding windows by position) and per-row position ids (the row's own token count) -> each
    row's walk (`judge.py`, greedy or exact sampling) and tokens appended under the stopping criteria ->
    per-row cache compaction (`cache.compact_rows`) -> the drafters and the calibration

Cache layout (docs/design.md, "Batches"): in full-attention layers row b's T_b - 1 fed tokens are contiguous,
after its (masked) left padding and before `holes[b]` masked columns left where it kept fewer tokens than another
row; `cache.realign_rows` closes the holes (one gather) once the widest exceeds 1/REALIGN_FRACTION of the columns.
Sliding-window layers hold a window only and keep every row right-aligned. A pass of one token per row with no
holes is a plain batched step: the rows' last tokens, the 2-D attention mask and position ids, exactly as plain
batched decoding runs it. Rows that finish are dropped from the passes (and from the cache); they are padded with
`pad_token_id` in the output, as plain batched decoding pads them. The drafter runs once per row that drafts (its
context and KV cache are the row's own).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

from ...drafting.cost import choose_nodes, choose_width
from ...drafting.draft import Draft, Verdict, eos_token_ids
from ...drafting.engine import SequenceEngine
from ...drafting.stats import DraftStats
from ...drafting.tree import TokenTree
from ...drafting.view import EngineView
from ..inputs import left_padding
from .judge import greedy_walk, sampling_walk
from .sequence import (
    Row,
    append_verdict,
    check_model_kwargs,
    generate_output,
    next_tokens,
    node_scores,
    prefill,
    row_view,
    start_empty,
)
from .target_cache import compact_rows, drop_leading_columns, realign_rows, trim_sliding_layers
from .tree_mask import target_masks, tree_allowed

# full-attention layers' holes are closed (`cache.realign_rows`, one gather of the cache) once the widest exceeds
# 1/REALIGN_FRACTION of the columns: every pass reads them, masked, until then
REALIGN_FRACTION = 8


def batch_generate_function(drafter, settings: EngineView) -> Callable:
    """The `custom_generate` callable of one batched generate call."""

    def oneiro_batch_generate(model, input_ids: torch.LongTensor, logits_processor, stopping_criteria,
                              generation_config, synced_gpus: bool = False, **model_kwargs: Any):
        return batch_decode(model, drafter, settings, input_ids, logits_processor, stopping_criteria,
                            generation_config, model_kwargs)

    return oneiro_batch_generate


class BatchDecoder:
    """The per-call state of one generate call with tree or batched verification and its steps. One prompt is a
    batch of one: its statistics are the call's (no per-row breakdown), a criterion that fires ends it, and its
    tokens go to the streamer."""

    def __init__(self, model, drafter, settings: EngineView, logits_processor, stopping_criteria,
                 generation_config, cache, input_ids: torch.LongTensor, pads: list[int], streamer=None) -> None:
        self.model, self.settings, self.cache, self.streamer = model, settings, cache, streamer
        self.single = len(pads) == 1
        self.logits_processor, self.stopping_criteria = logits_processor, stopping_criteria
        self.generation_config = generation_config
        self.walk = sampling_walk if generation_config.do_sample else greedy_walk
        session = drafter.session_for_call()
        self.policy, self.totals = session.policy, session.stats
        eos = eos_token_ids(generation_config)
        self.rows = []
        for index, pad in enumerate(pads):
            stats = self.totals if self.single else DraftStats(verification=self.totals.verification)
            drafting = SequenceEngine(drafter, settings, self.policy, stats, eos, generation_config.max_length,
                                       session.memory)
            self.rows.append(Row(input_ids[index : index + 1], pad, drafting, stats))
        if not self.single:
            self.totals.rows = [row.stats for row in self.rows]
        self.active = list(self.rows)
        self.columns = 0  # cache columns (what a layer holding every fed position would hold)
        self.holes: list[int] = []  # per active row: unused columns after its entries in full-attention layers
        self.hidden_flag = drafter.hidden_states_request if settings.mode != "lookup" else False
        # plain decoding pads rows that finished only when an EOS criterion is among the stopping criteria; without
        # one, every row runs until all have stopped (`_sample`)
        self.pad_finished = any(hasattr(c, "eos_token_id") for c in stopping_criteria)
        self.end_known = False  # without padding: whether every row has stopped, so where all end is known
        wants = generation_config.return_dict_in_generate
        self.keep_scores, self.keep_logits = wants and generation_config.output_scores, wants and generation_config.output_logits

    # ------------------------------------------------------------------ passes
    def prefill(self, input_ids: torch.LongTensor, attention_mask, position_ids) -> None:
        """Plain batched decoding's first step; each row's prompt states go to its drafter."""
        raw = prefill(self.model, self.cache, self.hidden_flag, self.rows, input_ids, attention_mask, position_ids)
        self.columns, self.holes = input_ids.shape[1], [0] * len(self.rows)
        self._next_tokens(raw)
        self._stream(1)

    def step(self) -> None:
        """Draft every active row, verify them in one pass (or take a plain batched step), drop finished rows."""
        rows = len(self.active)
        share = self._share(rows)
        drafting = self._drafting_can_pay()
        if not drafting:
            self._realign()  # from here on every step is a plain batched step
        drafts = [self._draft(row, share, drafting) for row in self.active]
        batch_time = (lambda k: self.policy.batch_verify_time(k, rows)) if self.settings.cost_aware else None
        width = choose_width([_values(d.tree) for d in drafts], batch_time, self.settings.max_nodes)
        drafts = [dataclasses.replace(d, tree=d.tree.keep(choose_nodes(d.tree, None, width))) for d in drafts]
        with self.totals.time("verify") as timer:
            if width == 0 and not any(self.holes):
                verdicts, kept = self._plain_pass()
            else:
                verdicts, kept = self._tree_pass(drafts, width + 1)
        self.policy.observe_verify(width + 1, timer.seconds, rows=rows)
        self.totals.batch_passes += not self.single
        for row, draft, verdict, n in zip(self.active, drafts, verdicts, kept):
            row.drafting.learn(draft, verdict, n, share)
            if not self.single:  # a batch's totals besides its rows' statistics
                row.stats.add_time("verify", timer.seconds)
                self.totals.record_round(draft, verdict.path[: n - 1])
                self.totals.add_time("draft", draft.seconds)
        self._stream(kept[0])
        if max(self.holes) * REALIGN_FRACTION > self.columns:
            self._realign()
        self.settle()

    def _stream(self, new: int) -> None:
        """One prompt: its `new` latest tokens to the streamer (a batch has none: generate refuses one)."""
        if self.streamer is not None:
            self.streamer.put(self.rows[0].ids[:, -new:].cpu())

    def _realign(self) -> None:
        realign_rows(self.cache, self.holes)
        self.holes = [0] * len(self.holes)

    def _share(self, rows: int) -> Callable[[int], float]:
        """A row's share of a pass verifying k tokens per row: t(k, B) / B (one row: t(k))."""
        return lambda k: self.policy.batch_verify_time(k, rows) / rows

    def _draft(self, row: Row, share: Callable[[int], float], drafting: bool) -> Draft:
        if not drafting:
            return Draft(TokenTree.with_root(int(row.ids[0, -1])), chain=self.settings.chain)
        return row.drafting.draft(row.tokens, share, columns=row.ids.shape[1])

    def _drafting_can_pay(self) -> bool:
        """Whether any draft could pay at this batch size: some k whose pass t(k, B) costs less than k plain steps
        t(1, B), even were every drafted token accepted. Where t(k, B) grows linearly in k * B (a CPU at large
        batches) none does, and the batch decodes as plain batched greedy, drafting nothing."""
        if not self.settings.cost_aware:
            return True
        rows = len(self.active)
        if rows == 1:
            return True
        one = self.policy.batch_verify_time(1, rows)
        return any(self.policy.batch_verify_time(k, rows) < k * one for k in range(2, self.settings.max_depth + 2))

    def _plain_pass(self) -> tuple[list[Verdict], list[int]]:
        """One token per row: the rows' last tokens with the 2-D attention mask, as plain batched decoding runs."""
        device = self.rows[0].ids.device
        last = torch.cat([row.ids[:, -1:] for row in self.active])  # (B, 1)
        lengths = torch.tensor([row.tokens.shape[1] for row in self.active], device=device)
        columns = torch.arange(self.columns + 1, device=device)
        mask = (columns.unsqueeze(0) >= (self.columns + 1 - lengths).unsqueeze(1)).to(torch.long)  # (B, S + 1)
        out = self.model(input_ids=last, attention_mask=mask, position_ids=(lengths - 1).unsqueeze(1),
                         cache=self.cache, use_cache=True, output_hidden_states=self.hidden_flag, logits_to_keep=1)
        trim_sliding_layers(self.cache)
        self.columns += 1
        raw = out.logits[:, -1].float()
        verdicts = []
        for b, (row, token, scores) in enumerate(zip(self.active, *self._next_tokens(raw))):
            row.drafting.observe(row_view(out.hidden_states, b), [0])
            verdicts.append(Verdict([], [token], [scores]))
        return verdicts, [1] * len(verdicts)

    def _next_tokens(self, raw: torch.Tensor) -> tuple[list[int], list[torch.Tensor]]:
        """Each active row's next token from raw logits (B, V) (`sequence.next_tokens`), appended under the stopping
        criteria; the tokens and the (1, V) processed scores."""
        tokens, rows, stops = next_tokens(self.active, raw, self.logits_processor, self.stopping_criteria,
                                          self.generation_config.do_sample)
        for b, row in enumerate(self.active):
            self._append(row, tokens[b], rows[b], raw[b : b + 1], stops[b])
        return tokens, rows

    def _tree_pass(self, drafts: list[Draft], width: int) -> tuple[list[Verdict], list[int]]:
        """Every row's tree in one pass of `width` tokens per row; walks, appends, compacts the cache."""
        device = self.rows[0].ids.device
        trees = [d.tree for d in drafts]
        roots = torch.tensor([row.tokens.shape[1] - 1 for row in self.active], device=device)  # (B,)
        tokens, depths, ancestors = _flatten(trees, width, device)
        positions = roots.unsqueeze(1) + depths  # (B, W)
        holes = torch.tensor(self.holes, device=device)
        mask = target_masks(self.model, self.cache, tree_allowed(self.columns, roots, holes, ancestors, positions))
        out = self.model(input_ids=tokens, position_ids=positions, attention_mask=mask, cache=self.cache,
                         use_cache=True, output_hidden_states=self.hidden_flag, logits_to_keep=0)
        logits = out.logits.float()  # (B, W, V)
        verdicts, kept, keeps = [], [], []
        for b, (row, tree) in enumerate(zip(self.active, trees)):
            verdict = self.walk(tree, node_scores(tree, row.ids, logits[b], self.logits_processor))
            n = append_verdict(verdict, logits[b], lambda token, scores, raw, row=row: self._append(row, token, scores, raw))
            verdicts.append(verdict)
            kept.append(n)
            keeps.append([0, *verdict.path[: n - 1]])  # the root and the accepted nodes whose successor was appended
        self.holes = compact_rows(self.cache, keeps, width, self.holes)
        self.columns += max(len(keep) for keep in keeps)
        for b, (row, keep) in enumerate(zip(self.active, keeps)):
            row.drafting.observe(row_view(out.hidden_states, b), keep)
        return verdicts, kept

    # ------------------------------------------------------------------ rows
    def _append(self, row: Row, token: int, scores: torch.Tensor, raw: torch.Tensor, stop: bool | None = None) -> bool:
        """Append one token to a row; whether the row takes no more tokens from this pass (it stopped, or a
        stopping criterion fired and finished rows are padded). Criteria are checked per token, per row, unless
        `stop` brings their verdict for this token (checked for the batch at once)."""
        row.append(token, scores if self.keep_scores else None, raw if self.keep_logits else None)
        if row.stop_at is not None:
            return row.done
        if stop is None:
            stop = bool(self.stopping_criteria(row.ids, scores).all())
        if row.flagged is None and stop:
            row.flagged = row.ids.shape[1]
            if self.pad_finished or self.single:
                row.stop_at = row.flagged
                return True
        if row.flagged is not None and row.ids.shape[1] >= self.generation_config.max_length:
            row.stop_at = row.ids.shape[1]  # waiting for the other rows, but no row runs past max_length
            return True
        return False

    def settle(self) -> None:
        """End rows that are done and drop them from the passes and the cache. Without an EOS criterion every row
        runs to the length at which the last one stopped (plain decoding's rule), then all end there."""
        if not self.pad_finished and not self.end_known and all(row.flagged is not None for row in self.rows):
            end = max(row.flagged for row in self.rows)
            for row in self.rows:
                row.stop_at = end
            self.end_known = True
        for row in self.rows:
            if row.stop_at is not None and row.ids.shape[1] > row.stop_at:
                row.ids = row.ids[:, : row.stop_at]  # its scores are cut to match in `outputs`
        keep = [b for b, row in enumerate(self.active) if not row.done]
        if len(keep) < len(self.active):
            if keep:
                self.cache.batch_select_indices(torch.tensor(keep, device=self.rows[0].ids.device))
            self.active = [self.active[b] for b in keep]
            self.holes = [self.holes[b] for b in keep]
        if self.active:  # columns that are padding in every running row (its longest row finished): gone
            padding = min(self.columns - hole - row.tokens.shape[1] + 1 for row, hole in zip(self.active, self.holes))
            drop_leading_columns(self.cache, padding)
            self.columns -= max(0, padding)

    @property
    def finished(self) -> bool:
        return not self.active


def _values(tree: TokenTree) -> list[float]:
    """A tree's candidate values, likeliest first."""
    return sorted((node.value for node in tree.nodes[1:]), reverse=True)


def _flatten(trees: list[TokenTree], width: int, device) -> tuple[torch.LongTensor, torch.LongTensor, torch.BoolTensor]:
    """Every row's flattened tree padded to `width` nodes: tokens (B, W) (padding repeats the root), depths (B, W)
    (padding at depth 0), ancestors (B, W, W) (a padding node sees only itself and nothing sees it)."""
    rows = len(trees)
    tokens = torch.zeros(rows, width, dtype=torch.long)
    depths = torch.zeros(rows, width, dtype=torch.long)
    ancestors = torch.eye(width, dtype=torch.bool).repeat(rows, 1, 1)
    for b, tree in enumerate(trees):
        n = len(tree)
        tokens[b] = tree.nodes[0].token
        tokens[b, :n] = tree.tokens()[0]
        depths[b, :n] = tree.depths()
        ancestors[b, :n, :n] = tree.ancestors()
    return tokens.to(device), depths.to(device), ancestors.to(device)


@torch.no_grad()
def batch_decode(model, drafter, settings: EngineView, input_ids: torch.LongTensor, logits_processor,
                 stopping_criteria, generation_config, model_kwargs: dict[str, Any], streamer=None):
    """Generate for a left-padded batch; returns what batched `generate` returns (ids, or a
    GenerateDecoderOnlyOutput). input_ids: (B, C) -> (B, C + the most new tokens of any row)."""
    check_model_kwargs(generation_config, model_kwargs)
    attention_mask = model_kwargs.get("attention_mask")
    pads = left_padding(attention_mask, input_ids)
    cache = model_kwargs["cache"]
    start_empty(cache)
    decoder = BatchDecoder(model, drafter, settings, logits_processor, stopping_criteria, generation_config, cache,
                           input_ids, pads, streamer)
    decoder.prefill(input_ids, attention_mask, model_kwargs.get("position_ids"))
    decoder.settle()
    while not decoder.finished:
        decoder.step()
    if streamer is not None:
        streamer.end()
    return generate_output(generation_config, decoder.rows, input_ids.shape[1], cache if decoder.single else None)
