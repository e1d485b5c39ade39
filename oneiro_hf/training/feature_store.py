"""The disk store of target features: content-addressed float16 shards for one target and `max_len`.

`FeatureCache` writes and reads the shards (`build`, resumable; `add` for features captured while answering;
`get` by sequence key), refusing a directory made for another target (`FeatureCacheMismatch`) or a build the disk
cannot hold (`FeatureCacheNoSpace`); `CachedFeatureDataset` serves cached sequences in the records' order, streaming
what the cache lacks. What a feature is, and the pass that computes it, live in `features.py`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock
from torch.utils.data import Dataset

from ..targets import base_model, text_config
from .features import batches_by_tokens, make_sequence, sequence_key, target_features

logger = logging.getLogger(__name__)

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


