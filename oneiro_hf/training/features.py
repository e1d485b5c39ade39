"""Training data for drafters: self-distillation records and the frozen target's features on them.

A record is one line of the self-distillation JSONL: ``{"id", "source", "prompt", "input_ids", "output_ids"}``
where ``input_ids`` is the chat-formatted prompt and ``output_ids`` the target's greedy response. A training
sequence is ``input_ids + output_ids`` cut to ``max_len``.

Positions (the convention of ``OneiroCandidateGenerator``): drafter position ``p >= 1`` takes the target's
final-normed state ``H[p-1]`` and token ``x[p]`` and predicts ``H[p]``; the readout of ``H[p]`` predicts
``x[p+1]``, whose target label is ``argmax(target logits at p)``. In a batch, drafter index ``i = p - 1``.
Losses are taken on response positions only (``p >= prompt_len - 1``, i.e. the state that predicts the first
response token and everything after it); the prompt positions are still fed so the drafter attends over the
whole prefix, as it does at inference.

Target features are either computed on the fly inside training (batched, ``no_grad``) or cached once on disk
in float16 safetensors shards (``FeatureCache``): about 2 bytes x hidden size per token (1.2 kB for a
576-wide model, so a million tokens is ~1.2 GB). The cache is content-addressed per sequence, so it grows
with the data file and an interrupted build resumes where it stopped.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset

from ..compat import hidden_states_selection
from ..targets import base_model, select_input_states

logger = logging.getLogger(__name__)

IGNORE = -100


DEFAULT_EVAL_FRACTION = 0.05  # oneiro-train's --eval_fraction when a recipe leaves it unset


def is_eval_record(record_id: str, eval_fraction: float, seed: int = 0) -> bool:
    """Stable hold-out membership by id hash, so the split does not move when the data file grows."""
    if eval_fraction <= 0:
        return False
    digest = hashlib.sha1(f"{seed}:{record_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < eval_fraction


def split_records(
    records: Sequence[Mapping[str, Any]], eval_fraction: float, seed: int = 0
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    train, held = [], []
    for rec in records:
        (held if is_eval_record(str(rec["id"]), eval_fraction, seed) else train).append(rec)
    return train, held


def make_sequence(record: Mapping[str, Any], max_len: int) -> tuple[list[int], int] | None:
    """``(input_ids + output_ids)[:max_len]`` and the prompt length, or None if no response position survives."""
    prompt = list(record["input_ids"])
    seq = (prompt + list(record["output_ids"]))[:max_len]
    # loss positions p in [max(1, P-1), len-2] must be non-empty
    if len(seq) - 2 < max(1, len(prompt) - 1):
        return None
    return seq, len(prompt)


def sequence_key(seq: Sequence[int], prompt_len: int) -> str:
    h = hashlib.sha1()
    h.update(str(prompt_len).encode())
    h.update(torch.tensor(list(seq), dtype=torch.int64).numpy().tobytes())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------- datasets
class SequenceDataset(Dataset):
    """Token sequences only; the trainer computes the target's features on the fly."""

    def __init__(self, records: Sequence[Mapping[str, Any]], max_len: int) -> None:
        self.items: list[tuple[list[int], int, str]] = []
        dropped = 0
        for rec in records:
            made = make_sequence(rec, max_len)
            if made is None:
                dropped += 1
                continue
            self.items.append((made[0], made[1], str(rec["id"])))
        if dropped:
            logger.info("%d records have no response token within max_len=%d; skipped.", dropped, max_len)
        self.max_len = max_len

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict[str, Any]:
        seq, prompt_len, _ = self.items[i]
        return {"input_ids": torch.tensor(seq, dtype=torch.long), "prompt_len": prompt_len}

    def lengths(self) -> list[int]:
        return [len(s) for s, _, _ in self.items]


def collate(items: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
    """Right-pad a list of dataset items into a batch (causal attention makes right padding harmless).

    Items may mix cached features with bare sequences (a streamed dataset): the rows without them get zeros and
    ignored labels, and ``has_features`` (B,) bool says which rows ``complete_features`` must compute."""
    width = max(int(it["input_ids"].shape[0]) for it in items)
    b = len(items)
    input_ids = torch.zeros((b, width), dtype=torch.long)
    mask = torch.zeros((b, width), dtype=torch.long)
    prompt_lens = torch.tensor([int(it["prompt_len"]) for it in items], dtype=torch.long)
    for row, it in enumerate(items):
        n = int(it["input_ids"].shape[0])
        input_ids[row, :n] = it["input_ids"]
        mask[row, :n] = 1
    batch = {"input_ids": input_ids, "attention_mask": mask, "prompt_lens": prompt_lens}
    has = torch.tensor(["states" in it for it in items])
    if not has.any():
        return batch
    batch["states"] = _right_padded([it.get("states") for it in items], width)
    batch["target_argmax"] = _right_padded([it.get("target_argmax") for it in items], width, fill=IGNORE)
    # a multi-layer drafter's input states (B, T, k*D); an exact-context drafter's copied-layer inputs
    # (B, T, c, D); the ridge fit's residual stream (B, T, D), where the cache's items carry it
    for key in (*FEATURE_EXTRAS, "resid"):
        if any(key in it for it in items):
            batch[key] = _right_padded([it.get(key) for it in items], width)
    if not has.all():
        batch["has_features"] = has
    return batch


FEATURE_EXTRAS = ("inputs", "context")  # per-position features beside states and labels, when the drafter needs them


def _right_padded(rows: Sequence[torch.Tensor | None], width: int, fill: float = 0) -> torch.Tensor:
    """(B, width, ...) of ``fill`` holding each (n_b, ...) row at its start (None: a row of ``fill``)."""
    like = next(r for r in rows if r is not None)
    out = torch.full((len(rows), width, *like.shape[1:]), fill, dtype=like.dtype)
    for row, value in enumerate(rows):
        if value is not None:
            out[row, : value.shape[0]] = value
    return out


def lacks_features(batch: Mapping[str, Any], input_layers: Sequence[int] | None = None,
                   context_layers: Sequence[int] | None = None) -> bool:
    """Whether some row of `batch` misses a feature the drafter needs (states; "inputs" for `input_layers`;
    "context" for `context_layers`), so the target must run."""
    return ("states" not in batch or "has_features" in batch or (bool(input_layers) and "inputs" not in batch)
            or (bool(context_layers) and "context" not in batch))


def complete_features(
    batch: dict[str, Any],
    target: Any,
    input_layers: Sequence[int] | None = None,
    context_layers: Sequence[int] | None = None,
    compute_dtype: torch.dtype | None = None,
    resid_layer: int | None = None,
) -> dict[str, Any]:
    """``batch`` with every row's features: the target runs (``target_features``, in ``compute_dtype``) on the rows
    that lack them, all rows if ``resid_layer`` is asked for; rows read from a cache keep theirs. Returns a new
    dict; features come back on the target's device for the rows computed, as stored for the others."""
    if resid_layer is None and not lacks_features(batch, input_layers, context_layers):
        return batch
    rows = batch.get("has_features")
    if rows is None or resid_layer is not None or bool(input_layers) != ("inputs" in batch) or (
            bool(context_layers) != ("context" in batch)):
        rows = torch.zeros(batch["input_ids"].shape[0], dtype=torch.bool)  # every row runs
    todo = (~rows.cpu()).nonzero().flatten()
    width = int(batch["attention_mask"][todo].sum(-1).max())
    feats = target_features(
        target, batch["input_ids"][todo, :width], batch["attention_mask"][todo, :width], resid_layer,
        batch["prompt_lens"][todo] - 1, input_layers=input_layers, context_layers=context_layers,
        compute_dtype=compute_dtype)
    out = {k: v for k, v in batch.items() if k != "has_features"}
    if len(todo) == len(rows) and width == batch["input_ids"].shape[1]:
        return out | feats
    for key, value in feats.items():  # scatter the computed rows into the batch's full-width tensors
        full = out.get(key)
        if full is None:
            full = torch.full((len(rows), batch["input_ids"].shape[1], *value.shape[2:]),
                              IGNORE if key == "target_argmax" else 0, dtype=value.dtype, device=value.device)
        full = full.clone()
        full[todo.to(full.device), :width] = value.to(device=full.device, dtype=full.dtype)
        out[key] = full
    return out


def loss_mask(attention_mask: torch.Tensor, prompt_lens: torch.Tensor) -> torch.Tensor:
    """(B, T-1) bool over drafter indices i = p-1: response positions p in [max(1, P-1), len-2]."""
    t = attention_mask.shape[1]
    lengths = attention_mask.sum(-1)
    p = torch.arange(1, t, device=attention_mask.device).unsqueeze(0)
    lo = torch.clamp(prompt_lens.to(p.device) - 1, min=1).unsqueeze(1)
    hi = (lengths.to(p.device) - 2).unsqueeze(1)
    return (p >= lo) & (p <= hi)


def batches_by_tokens(lengths: Sequence[int], max_tokens: int, max_batch: int = 64) -> list[list[int]]:
    """Index batches of similar length whose padded size stays within ``max_tokens``."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    out: list[list[int]] = []
    cur: list[int] = []
    for i in order:
        width = max(lengths[i], max((lengths[j] for j in cur), default=0))
        if cur and (width * (len(cur) + 1) > max_tokens or len(cur) >= max_batch):
            out.append(cur)
            cur = []
        cur.append(i)
    if cur:
        out.append(cur)
    return out


# ---------------------------------------------------------------------------------------------- the target
@torch.no_grad()
def target_features(
    target: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    resid_layer: int | None = None,
    label_from: torch.Tensor | None = None,
    head_chunk: int = 512,
    input_layers: Sequence[int] | None = None,
    context_layers: Sequence[int] | None = None,
    compute_dtype: torch.dtype | None = None,
) -> dict[str, torch.Tensor]:
    """Run the frozen target once: final-normed states H (B,T,D), next-token argmax (B,T; -100 on padding),
    if ``resid_layer`` is given the residual stream entering that decoder layer (B,T,D), and if
    ``input_layers`` is given (a multi-layer drafter's ``config.input_layers``) the drafter's input states
    ``inputs`` (B,T,k*D), made by ``select_input_states`` exactly as drafting makes them, and if
    ``context_layers`` is given (an exact-context drafter's ``context_layers``) the residual stream entering each,
    ``context`` (B,T,c,D), scaled to unit RMS per position: the copied layers' RMS norms do not see that scale, and
    it keeps the float16 cache from overflowing (SmolLM2's stream reaches 22,000 in a few dimensions).

    ``label_from`` (B,) limits the argmax (the LM head is a quarter of a small model's cost) to positions
    ``>= label_from[b]``; pass ``prompt_lens - 1`` since only response positions are ever labelled.

    ``compute_dtype`` (e.g. bfloat16 for a float32 target) runs the decoder layers under autocast in that dtype; the
    argmax labels are still taken with the LM head in the target's own dtype, so near-ties are not decided by
    rounded logits."""
    base = base_model(target)
    device = next(target.parameters()).device
    input_ids = input_ids.to(device)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    attention_mask = attention_mask.to(device)
    wanted_layers = sorted({*([resid_layer] if resid_layer is not None else []), *(input_layers or []),
                            *(context_layers or [])})
    own_dtype = next(target.parameters()).dtype
    lowered = compute_dtype is not None and compute_dtype != own_dtype
    with torch.autocast(device.type, dtype=compute_dtype, enabled=lowered):
        out = base(
            input_ids=input_ids,
            attention_mask=attention_mask,
            use_cache=False,
            output_hidden_states=hidden_states_selection(wanted_layers) if wanted_layers else False,
        )
    states = out.last_hidden_state.to(own_dtype)
    head = target.get_output_embeddings()
    wanted = attention_mask != 0
    if label_from is not None:
        cols = torch.arange(states.shape[1], device=device).unsqueeze(0)
        wanted &= cols >= label_from.to(device).unsqueeze(1)
    rows = states[wanted]
    picked = torch.empty(rows.shape[0], dtype=torch.long, device=device)
    for s in range(0, rows.shape[0], head_chunk):
        picked[s : s + head_chunk] = head(rows[s : s + head_chunk]).argmax(-1)
    argmax = torch.full(states.shape[:2], IGNORE, dtype=torch.long, device=device)
    argmax[wanted] = picked
    feats = {"states": states, "target_argmax": argmax}
    if resid_layer is not None:
        feats["resid"] = out.hidden_states[resid_layer]
    if input_layers:
        feats["inputs"] = select_input_states(out.hidden_states, list(input_layers), base.norm)
    if context_layers:
        stream = torch.stack([out.hidden_states[i] for i in context_layers], dim=2)
        feats["context"] = stream * torch.rsqrt(stream.float().pow(2).mean(-1, keepdim=True)).to(stream.dtype)
    return feats


@contextlib.contextmanager
def final_states_recorded(target: Any) -> Iterator[list[torch.Tensor]]:
    """While open, every forward pass of ``target`` appends its final-normed states (B, T_step, D) to the list
    yielded: what a batched ``generate`` computes anyway, so its answers' features need no second pass."""
    chunks: list[torch.Tensor] = []
    handle = base_model(target).norm.register_forward_hook(lambda _m, _i, out: chunks.append(out.detach()))
    try:
        yield chunks
    finally:
        handle.remove()


# ---------------------------------------------------------------------------------------------- iteration
def iter_feature_batches(
    dataset: Dataset,
    target: Any,
    batch_tokens: int = 4096,
    max_items: int | None = None,
    resid_layer: int | None = None,
    input_layers: Sequence[int] | None = None,
    context_layers: Sequence[int] | None = None,
    compute_dtype: torch.dtype | None = None,
) -> Iterator[dict[str, torch.Tensor]]:
    """Batches with features (``states``, ``target_argmax``; ``resid`` if ``resid_layer``) in dataset order
    groups, on the CPU; cached features are used when the dataset has them, else the target runs (in
    ``compute_dtype``)."""
    n = len(dataset) if max_items is None else min(len(dataset), max_items)
    lengths = (
        dataset.lengths()[:n]
        if hasattr(dataset, "lengths")
        else [len(dataset[i]["input_ids"]) for i in range(n)]
    )
    for group in batches_by_tokens(lengths, batch_tokens):
        batch = complete_features(collate([dataset[i] for i in group]), target, input_layers, context_layers,
                                  compute_dtype, resid_layer)
        yield {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def state_statistics(
    batches: Iterable[Mapping[str, torch.Tensor]], max_positions: int = 200_000
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-dimension mean and std (float32) of the target's states over response positions."""
    total = None
    total_sq = None
    count = 0
    for batch in batches:
        mask = loss_mask(batch["attention_mask"], batch["prompt_lens"])
        # states at drafter index i are H[p] = H[i+1]
        h = batch["states"][:, 1:][mask].double()
        if h.numel() == 0:
            continue
        total = h.sum(0) if total is None else total + h.sum(0)
        total_sq = (h * h).sum(0) if total_sq is None else total_sq + (h * h).sum(0)
        count += h.shape[0]
        if count >= max_positions:
            break
    if count < 2:
        raise ValueError("need at least two response positions to compute state statistics")
    mean = total / count
    var = (total_sq / count - mean * mean).clamp_min(0)
    std = var.sqrt()
    floor = max(float(std.median()) * 1e-3, 1e-6)
    return mean.float(), std.clamp_min(floor).float()
