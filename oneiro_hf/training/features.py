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
import json
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock
from torch.utils.data import Dataset

from ..compat import hidden_states_selection
from ..targets import base_model, select_input_states, text_config

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
    # a multi-layer drafter's input states (B, T, k*D); an exact-context drafter's copied-layer inputs (B, T, c, D)
    for key in FEATURE_EXTRAS:
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


def target_fingerprint(target: Any) -> dict[str, Any]:
    """What identifies the target's features: architecture sizes plus a hash of a few weights."""
    config = text_config(target)
    base = base_model(target)
    h = hashlib.sha1()
    with torch.no_grad():
        h.update(base.norm.weight.detach().float().cpu().numpy().tobytes())
        head = target.get_output_embeddings().weight
        h.update(head[: min(64, head.shape[0])].detach().float().cpu().numpy().tobytes())
        h.update(base.layers[-1].mlp.down_proj.weight[:8].detach().float().cpu().numpy().tobytes())
    return {
        "model_type": config.model_type,
        "hidden_size": int(config.hidden_size),
        "vocab_size": int(config.vocab_size),
        "num_hidden_layers": int(config.num_hidden_layers),
        "weights_sha1": h.hexdigest(),
    }


# ---------------------------------------------------------------------------------------------- disk cache
class FeatureCacheMismatch(ValueError):
    """A feature cache directory was made for another target or max_len."""


class FeatureCacheNoSpace(OSError):
    """The disk under a feature cache cannot hold what a build would write."""


# what a build leaves free on the cache's disk beyond its own estimate (checkpoints, logs and the OS need room too)
DISK_MARGIN_BYTES = 2 * 2**30


class FeatureCache:
    """Content-addressed float16 feature shards for one target and ``max_len``.

    ``directory/meta.json`` names the target; each ``shard-NNNNN.safetensors`` holds concatenated
    ``states`` (N,D) fp16, ``target_argmax`` (N,) int32, ``input_ids`` (N,) int32 and, for the first shards
    up to ``resid_budget`` tokens, ``resid`` (N,D) fp32 (the input of layer ``resid_layer``, for the ridge
    initialisation); ``shard-NNNNN.json`` (written last, so a shard without it is ignored) lists its
    sequences as ``[key, start, length, prompt_len]``.

    A cache for an exact-context drafter (``context_layers``, recorded in ``meta.json``) also holds ``context``
    (N, c, D) fp16, the residual stream entering each copied layer.

    Format 2 is a cache for a multi-layer drafter (``input_layers``, recorded in ``meta.json``): its shards also
    hold ``inputs`` (N, k*D) fp16, the drafter's input states. A format-1 cache (final-normed states only) is
    what every other drafter uses, and is refused for a multi-layer run (and the reverse) by the meta check.
    """

    FORMAT = 1
    FORMAT_MULTILAYER = 2

    def __init__(
        self,
        directory: str | os.PathLike,
        target: Any,
        max_len: int,
        resid_layer: int | None = None,
        resid_budget: int = 65536,
        shard_tokens: int = 65536,
        input_layers: Sequence[int] | None = None,
        context_layers: Sequence[int] | None = None,
        compute_dtype: torch.dtype | None = None,
        fingerprint: dict[str, Any] | None = None,
    ) -> None:
        """``fingerprint``: the target's ``target_fingerprint`` when ``target`` is a copy cast to another dtype
        (features computed by a bfloat16 copy belong to the float32 weights it was cast from)."""
        self.dir = Path(directory)
        self.compute_dtype = compute_dtype
        self.input_layers = [int(i) for i in input_layers] if input_layers else None
        self.context_layers = [int(i) for i in context_layers] if context_layers else None
        self.target = target
        self.max_len = int(max_len)
        self.resid_layer = resid_layer
        self.resid_budget = int(resid_budget)
        self.shard_tokens = int(shard_tokens)
        meta = {"format": self.FORMAT, "max_len": self.max_len, "target": fingerprint or target_fingerprint(target)}
        if self.input_layers:
            meta.update(format=self.FORMAT_MULTILAYER, input_layers=self.input_layers)
        if self.context_layers:
            meta["context_layers"] = self.context_layers
        computed_in = compute_dtype or next(target.parameters()).dtype
        if computed_in != torch.float32:  # float32 caches carry no key, as they did before it existed
            meta["compute_dtype"] = str(computed_in).removeprefix("torch.")
        self.index: dict[str, tuple[int, int, int, int]] = {}
        self.shard_resid: dict[int, int | None] = {}
        self._shards: dict[int, Any] = {}  # shard number -> safetensors handle
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._locked():  # ranks and runs opening a new directory at once: one writes meta.json, all check it
            self._claim(meta)

    def _claim(self, meta: dict[str, Any]) -> None:
        """Check ``meta.json`` against this run's ``meta``, or write it into a new directory (under the lock)."""
        meta_path = self.dir / "meta.json"
        if not meta_path.is_file():
            tmp = meta_path.with_suffix(".tmp")
            tmp.write_text(json.dumps(meta, indent=1))
            os.replace(tmp, meta_path)
            return
        old = json.loads(meta_path.read_text())
        if old != meta:
            raise FeatureCacheMismatch(
                f"feature cache {self.dir} (format {old.get('format')}) was built for another target, max_len, "
                f"input_layers, context_layers or compute dtype ({old.get('target', {}).get('model_type')}, max_len="
                f"{old.get('max_len')}, input_layers={old.get('input_layers')}, context_layers="
                f"{old.get('context_layers')}, {old.get('compute_dtype', 'float32')}) than this run "
                f"({meta['target']['model_type']}, max_len={self.max_len}, input_layers={self.input_layers}, "
                f"context_layers={self.context_layers}, {meta.get('compute_dtype', 'float32')}). "
                "Fix: pass another --feature_cache_dir, or delete that directory."
            )

    def _read_index(self) -> None:
        for js in sorted(self.dir.glob("shard-*.json")):
            n = int(js.stem.split("-")[1])
            if not (self.dir / f"shard-{n:05d}.safetensors").is_file():
                continue
            info = json.loads(js.read_text())
            self.shard_resid[n] = info.get("resid_layer")
            for key, start, length, prompt_len in info["sequences"]:
                self.index.setdefault(key, (n, start, length, prompt_len))

    def _next_shard(self) -> int:
        on_disk = [int(f.name.split("-")[1].split(".")[0]) for f in self.dir.glob("shard-*.*")]
        return max([*self.shard_resid, *on_disk], default=-1) + 1

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Exclusive lock on the directory, so concurrent builders (other runs, other ranks) never collide."""
        with FileLock(self.dir / ".lock"):
            self._read_index()  # pick up what others wrote meanwhile
            yield

    def resid_tokens(self) -> int:
        if self.resid_layer is None:
            return 0
        total = 0
        for n, _, length, _ in self.index.values():
            if self.shard_resid.get(n) == self.resid_layer:
                total += length
        return total

    def build(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Compute and store features for the records not cached yet; returns counts and timing."""
        with self._locked():
            return self._build(*args, **kwargs)

    def _build(
        self,
        records: Sequence[Mapping[str, Any]],
        batch_tokens: int = 4096,
        with_resid: bool = True,
        progress: bool = True,
    ) -> dict[str, Any]:
        todo: dict[str, tuple[list[int], int]] = {}
        for rec in records:
            made = make_sequence(rec, self.max_len)
            if made is None:
                continue
            key = sequence_key(*made)
            if key not in self.index:
                todo[key] = made
        stats = {"cached": len(records) - len(todo), "computed": len(todo), "tokens": 0, "seconds": 0.0}
        if not todo:
            return stats
        keys = list(todo)
        lengths = [len(todo[k][0]) for k in keys]
        groups = batches_by_tokens(lengths, batch_tokens)
        t0 = time.perf_counter()
        buf: list[tuple[str, dict[str, torch.Tensor], int]] = []
        buf_tokens = 0
        resid_have = self.resid_tokens()
        want_resid = with_resid and self.resid_layer is not None and resid_have < self.resid_budget

        def flush() -> None:
            nonlocal buf, buf_tokens, resid_have, want_resid
            if not buf:
                return
            written = self._write_shard(buf)
            if written:
                resid_have += written
                want_resid = resid_have < self.resid_budget
            buf, buf_tokens = [], 0

        done_tokens = 0
        total_tokens = sum(lengths)
        self._check_space(total_tokens, max(0, self.resid_budget - resid_have) if want_resid else 0)
        last_log = t0
        for group in groups:
            entries, tokens = self._group_features([(keys[i], *todo[keys[i]]) for i in group], want_resid)
            buf.extend(entries)
            buf_tokens += sum(lengths[i] for i in group)
            done_tokens += tokens
            if buf_tokens >= self.shard_tokens or (
                want_resid and resid_have + buf_tokens >= self.resid_budget
            ):
                flush()
            now = time.perf_counter()
            if progress and now - last_log > 30:
                rate = done_tokens / (now - t0)
                logger.info(
                    "features: %d/%d tokens (%.0f tok/s, ~%.0fs left)",
                    done_tokens,
                    total_tokens,
                    rate,
                    (total_tokens - done_tokens) / max(rate, 1e-9),
                )
                last_log = now
        flush()
        stats["tokens"] = done_tokens
        stats["seconds"] = round(time.perf_counter() - t0, 2)
        return stats

    def add(self, sequences: Sequence[tuple[Sequence[int], int, dict[str, torch.Tensor]]]) -> int:
        """Store features computed elsewhere (captured while the target answered, or computed while a streamed
        training ran): ``(token ids, prompt length, {"states": (L, D), "target_argmax": (L,)})`` per sequence, ids
        as ``make_sequence`` makes them, plus ``inputs`` / ``context`` where this cache holds them. Sequences
        already cached are skipped; returns the tokens written."""
        with self._locked():
            buf, keys = [], set(self.index)
            for seq, prompt_len, feats in sequences:
                key = sequence_key(seq, prompt_len)
                if key in keys:
                    continue
                keys.add(key)
                if feats["states"].shape[0] != len(seq) or feats["target_argmax"].shape[0] != len(seq):
                    raise ValueError(f"features of {tuple(feats['states'].shape)} states and "
                                     f"{tuple(feats['target_argmax'].shape)} labels for a {len(seq)}-token sequence. "
                                     "Fix: pass one state and one label per token of the sequence.")
                buf.append((key, {**feats, "input_ids": torch.tensor(list(seq))}, prompt_len))
            if not buf:
                return 0
            tokens = sum(len(f["input_ids"]) for _, f, _ in buf)
            self._check_space(tokens, 0)
            self._write_shard(buf)
            return tokens

    def bytes_per_token(self) -> int:
        """Bytes one position takes in a shard without the residual stream: float16 states (and ``inputs`` /
        ``context`` where held), int32 label and id."""
        width = text_config(self.target).hidden_size
        return 2 * width * (1 + len(self.input_layers or []) + len(self.context_layers or [])) + 8

    def _check_space(self, tokens: int, resid_tokens: int) -> None:
        """Refuse a build whose shards (`tokens` positions, `resid_tokens` of them with the float32 residual stream)
        would not fit on the cache's disk with DISK_MARGIN_BYTES to spare: found before hours of features, not
        after."""
        import shutil

        width = text_config(self.target).hidden_size
        need = tokens * self.bytes_per_token() + min(tokens, resid_tokens) * 4 * width
        free = shutil.disk_usage(self.dir).free
        if need + DISK_MARGIN_BYTES > free:
            raise FeatureCacheNoSpace(
                f"feature cache {self.dir}: the features of {tokens:,} tokens need about {need / 2**30:.1f} GiB and "
                f"{free / 2**30:.1f} GiB is free ({DISK_MARGIN_BYTES / 2**30:.0f} GiB is kept spare). Fix: free disk "
                "space, pass a --feature_cache_dir on a larger disk, or train on fewer records (--max_records).")

    def _group_features(self, group: list[tuple[str, list[int], int]], want_resid: bool
                        ) -> tuple[list[tuple[str, dict[str, torch.Tensor], int]], int]:
        """The target's features of one batch of (key, token ids, prompt length): one (key, features, prompt
        length) entry per sequence (states, argmax, ids; the residual stream when wanted) and the tokens run."""
        lengths = [len(seq) for _, seq, _ in group]
        ids = torch.zeros((len(group), max(lengths)), dtype=torch.long)
        mask = torch.zeros_like(ids)
        for row, (_, seq, _) in enumerate(group):
            ids[row, : len(seq)] = torch.tensor(seq)
            mask[row, : len(seq)] = 1
        label_from = torch.tensor([prompt_len - 1 for _, _, prompt_len in group])
        feats = target_features(self.target, ids, mask, self.resid_layer if want_resid else None, label_from,
                                input_layers=self.input_layers, context_layers=self.context_layers,
                                compute_dtype=self.compute_dtype)
        entries = []
        for row, ((key, _, prompt_len), n) in enumerate(zip(group, lengths)):
            f = {
                "states": feats["states"][row, :n].detach().cpu(),
                "target_argmax": feats["target_argmax"][row, :n].cpu(),
                "input_ids": ids[row, :n],
            }
            if "resid" in feats:
                f["resid"] = feats["resid"][row, :n].detach().cpu()
            if "inputs" in feats:
                f["inputs"] = feats["inputs"][row, :n].detach().cpu()
            if "context" in feats:
                f["context"] = feats["context"][row, :n].detach().cpu()
            entries.append((key, f, prompt_len))
        return entries, int(mask.sum())

    def _write_shard(self, buf: list[tuple[str, dict[str, torch.Tensor], int]]) -> int:
        """Write the buffered sequences as the next shard (tensors, then its index) and index them; returns the
        residual-stream tokens it holds (0 when not every sequence has one)."""
        from safetensors.torch import save_file

        n = self._next_shard()
        tensors = {
            "states": torch.cat([f["states"] for _, f, _ in buf]).to(torch.float16).contiguous(),
            "target_argmax": torch.cat([f["target_argmax"] for _, f, _ in buf]).to(torch.int32).contiguous(),
            "input_ids": torch.cat([f["input_ids"] for _, f, _ in buf]).to(torch.int32).contiguous(),
        }
        if self.input_layers:
            tensors["inputs"] = torch.cat([f["inputs"] for _, f, _ in buf]).to(torch.float16).contiguous()
        if self.context_layers:
            tensors["context"] = torch.cat([f["context"] for _, f, _ in buf]).to(torch.float16).contiguous()
        resid = all("resid" in f for _, f, _ in buf)
        if resid:
            tensors["resid"] = torch.cat([f["resid"] for _, f, _ in buf]).float().contiguous()
        seqs, start = [], 0
        for key, f, prompt_len in buf:
            length = int(f["input_ids"].shape[0])
            seqs.append([key, start, length, prompt_len])
            start += length
        tmp = self.dir / f"shard-{n:05d}.safetensors.tmp"
        save_file(tensors, str(tmp))
        os.replace(tmp, self.dir / f"shard-{n:05d}.safetensors")
        jtmp = self.dir / f"shard-{n:05d}.json.tmp"
        jtmp.write_text(json.dumps({"resid_layer": self.resid_layer if resid else None, "sequences": seqs}))
        os.replace(jtmp, self.dir / f"shard-{n:05d}.json")
        self.shard_resid[n] = self.resid_layer if resid else None
        for key, s, length, prompt_len in seqs:
            self.index[key] = (n, s, length, prompt_len)
        return start if resid else 0

    def shard(self, n: int) -> Any:
        """Shard ``n`` opened for slicing (``get_slice(name)[a:b]``): a read loads only the slice asked for, so
        training holds no more than its batches in memory, whatever the cache's size."""
        if n not in self._shards:
            from safetensors import safe_open

            self._shards[n] = safe_open(str(self.dir / f"shard-{n:05d}.safetensors"), framework="pt")
        return self._shards[n]

    def lookup(self, record: Mapping[str, Any]) -> tuple[int, int, int, int] | None:
        made = make_sequence(record, self.max_len)
        if made is None:
            return None
        return self.index.get(sequence_key(*made))

    def get(self, entry: tuple[int, int, int, int], resid: bool = False) -> dict[str, Any]:
        n, start, length, prompt_len = entry
        sh = self.shard(n)

        def read(name: str) -> torch.Tensor:
            return sh.get_slice(name)[start : start + length]

        item = {"input_ids": read("input_ids").long(), "prompt_len": prompt_len, "states": read("states"),
                "target_argmax": read("target_argmax").long()}
        for name, wanted in (("inputs", self.input_layers), ("context", self.context_layers), ("resid", resid)):
            if wanted:
                item[name] = read(name)
        return item

    def has_resid(self, entry: tuple[int, int, int, int]) -> bool:
        return self.resid_layer is not None and self.shard_resid.get(entry[0]) == self.resid_layer

    def size_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.dir.glob("shard-*.safetensors"))


class CachedFeatureDataset(Dataset):
    """Sequences with the target's cached features (states fp16, next-token argmax), in the records' order.

    ``stream=True``: records the cache lacks are kept as bare sequences, and their features are computed batch by
    batch (``complete_features``) instead of by a feature pass first: the disk holds only what is cached, whatever
    the data's size. The items are the same whatever the cache holds, so a resumed epoch skips the same records
    on a machine whose cache differs."""

    def __init__(self, cache: FeatureCache, records: Sequence[Mapping[str, Any]], stream: bool = False) -> None:
        self.cache = cache
        self.rows: list[tuple[tuple[int, int, int, int] | None, list[int], int]] = []  # (cache entry, seq, prompt)
        self.keys: list[str] = []
        for rec in records:
            made = make_sequence(rec, cache.max_len)
            if made is not None:
                self.keys.append(sequence_key(*made))
                self.rows.append((cache.index.get(self.keys[-1]), *made))
        self.entries = [entry for entry, _, _ in self.rows if entry is not None]
        self.streamed = len(self.rows) - len(self.entries)  # rows whose features are computed per batch
        if self.streamed and not stream:
            raise RuntimeError(f"{self.streamed} records are not in the feature cache; call cache.build(records) "
                               "first, or pass stream=True.")

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict[str, Any]:
        entry, seq, prompt_len = self.rows[i]
        entry = entry or self.cache.index.get(self.keys[i])  # kept by a StreamedFeatureKeeper since (a later epoch)
        if entry is not None:
            return self.cache.get(entry)
        return {"input_ids": torch.tensor(seq, dtype=torch.long), "prompt_len": prompt_len}

    def lengths(self) -> list[int]:
        return [len(seq) for _, seq, _ in self.rows]

    def response_tokens(self) -> int:
        """Response tokens the sequences hold (cut at the cache's max_len)."""
        return sum(len(seq) - prompt_len for _, seq, prompt_len in self.rows)


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
