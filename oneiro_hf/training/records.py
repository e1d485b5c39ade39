"""Self-distillation records: read and validate them from a JSONL file or a ``datasets`` dataset.

A record is ``{"id", "source", "input_ids", "output_ids", "stopped"}`` (the JSONL written by
``python -m oneiro_hf.training.selfdistill`` also holds the prompt text): ``input_ids`` is the chat-formatted
prompt the target saw, ``output_ids`` its greedy response. ``load_records`` takes a JSONL file, a dataset
directory in the Hub layout (``python -m oneiro_hf.training.distill_dataset``), a ``save_to_disk`` copy or a
Hub dataset id, and returns the same records for the same data. Every problem is a ``DataFileError`` that
names the file (and line or row) and the fix.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

REQUIRED_KEYS = ("input_ids", "output_ids")


class DataFileError(ValueError):
    """A self-distillation data file is missing, empty or holds a malformed record."""


# ---------------------------------------------------------------------------------------------- records
def check_ids(value: Any, name: str, where: str, vocab_size: int | None, allow_empty: bool) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise DataFileError(f"{where}: '{name}' must be a list of integer token ids.")
    if not value and not allow_empty:
        raise DataFileError(f"{where}: '{name}' is empty.")
    if value and (min(value) < 0 or (vocab_size is not None and max(value) >= vocab_size)):
        bad = [t for t in value if t < 0 or (vocab_size is not None and t >= vocab_size)][:3]
        raise DataFileError(
            f"{where}: '{name}' holds token ids {bad} outside the target's vocabulary (size {vocab_size}). "
            "Fix: this data was made for another target/tokenizer; regenerate it with this target."
        )
    return value


def load_records(path: str | os.PathLike, vocab_size: int | None = None) -> list[dict[str, Any]]:
    """Read and validate self-distillation records: a JSONL file, or a ``datasets`` dataset.

    A path that is not a file (a dataset directory, a ``save_to_disk`` copy, a Hub dataset id) is read by
    ``load_dataset_records``. In a JSONL file blank lines are skipped; a malformed line raises
    ``DataFileError`` naming the file and line, except an unterminated last line (the generator may be
    appending right now), which is skipped with a warning.
    """
    p = Path(path)
    if not p.is_file():
        return load_dataset_records(path, vocab_size=vocab_size)
    raw = p.read_bytes()
    lines = raw.split(b"\n")
    records: list[dict[str, Any]] = []
    seen_ids: dict[str, int] = {}
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{p}:{lineno}"
        last_unterminated = lineno == len(lines) and not raw.endswith(b"\n")
        try:
            rec = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            if last_unterminated:
                logger.warning("%s: incomplete last line (file still being written?); skipped.", where)
                continue
            raise DataFileError(f"{where}: not valid JSON ({err}). Fix or delete that line.") from None
        if not isinstance(rec, dict):
            raise DataFileError(f"{where}: expected a JSON object with 'input_ids' and 'output_ids'.")
        missing = [k for k in REQUIRED_KEYS if k not in rec]
        if missing:
            raise DataFileError(
                f"{where}: record lacks {missing}. Each line needs 'input_ids' (prompt ids incl. chat template) "
                "and 'output_ids' (the target's greedy response ids), as written by "
                "python -m oneiro_hf.training.selfdistill."
            )
        check_ids(rec["input_ids"], "input_ids", where, vocab_size, allow_empty=False)
        check_ids(rec["output_ids"], "output_ids", where, vocab_size, allow_empty=True)
        rid = str(rec.get("id", f"line{lineno}"))
        if rid in seen_ids:
            logger.warning(
                "%s: duplicate id %r (first on line %d); keeping the first.", where, rid, seen_ids[rid]
            )
            continue
        seen_ids[rid] = lineno
        rec["id"] = rid
        records.append(rec)
    if not records:
        raise DataFileError(
            f"data file {p} holds no records. Fix: generate data first (python -m oneiro_hf.training.selfdistill "
            "--target ... --out FILE) or pass --prompts to generate it."
        )
    return records


def _is_saved_dataset(path: Path) -> bool:
    """A ``save_to_disk`` directory (Dataset or DatasetDict), as opposed to a Hub-layout one."""
    return (path / "state.json").is_file() or (path / "dataset_dict.json").is_file()


def load_dataset_records(
    spec: str | os.PathLike, vocab_size: int | None = None, split: str = "train"
) -> list[dict[str, Any]]:
    """Training records from a dataset: a Hub-layout directory, a ``save_to_disk`` copy, or a Hub dataset id.

    Returns the same records ``features.load_records`` returns for the JSONL the dataset came from (without
    the prompt text): ``{"id", "source", "input_ids", "output_ids", "stopped"}`` with plain int lists.
    """
    import datasets

    from ..storage.cards import is_repo_id

    text = os.fspath(spec)
    path = Path(text).expanduser()

    if not path.exists() and not is_repo_id(text):
        raise DataFileError(
            f"{text} does not exist. Fix: pass --data with a self-distillation JSONL file, a dataset directory "
            "(e.g. data/selfdistill/<target>) or a Hub dataset id (org/name)."
        )
    with tempfile.TemporaryDirectory(prefix="oneiro-distill-") as scratch:
        try:
            if path.is_dir() and _is_saved_dataset(path):
                ds = datasets.load_from_disk(str(path))
            elif path.exists():
                # datasets keys its cache of a local directory on the files' mtimes only, so a refreshed
                # snapshot could be served stale from ~/.cache: a local directory is read into a private cache
                ds = datasets.load_dataset(str(path), split=split, cache_dir=scratch, keep_in_memory=True)
            else:
                ds = datasets.load_dataset(text, split=split)
        except (FileNotFoundError, ValueError, ConnectionError, OSError) as err:
            raise DataFileError(
                f"could not load {text} as a dataset ({type(err).__name__}: {err}). Fix: pass a directory written "
                "by python -m oneiro_hf.training.distill_dataset (or its save_to_disk copy), or a Hub dataset id "
                "that is reachable or cached (HF_HUB_OFFLINE=1 uses the cache)."
            ) from None
        return _records_from(ds, text, split, vocab_size)


def _records_from(ds: Any, text: str, split: str, vocab_size: int | None) -> list[dict[str, Any]]:
    import datasets

    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise DataFileError(f"dataset {text} has no split {split!r} (it has {list(ds)}). Fix: add one.")
        ds = ds[split]
    missing = [c for c in ("input_ids", "output_ids") if c not in ds.column_names]
    if missing:
        raise DataFileError(
            f"dataset {text} lacks columns {missing} (it has {ds.column_names}). Fix: export self-distillation data "
            "with python -m oneiro_hf.training.distill_dataset."
        )
    records: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, row in enumerate(ds.to_list()):
        where = f"{text} row {index}"
        check_ids(row["input_ids"], "input_ids", where, vocab_size, allow_empty=False)
        check_ids(row["output_ids"], "output_ids", where, vocab_size, allow_empty=True)
        rid = str(row.get("id") if row.get("id") is not None else f"row{index}")
        if rid in seen:
            raise DataFileError(f"{where}: duplicate id {rid!r}. Fix: re-export the dataset (ids are unique).")
        seen.add(rid)
        records.append({**row, "id": rid})
    if not records:
        raise DataFileError(f"dataset {text} (split {split!r}) holds no records. Fix: export data into it first.")
    return records


def dataset_ids(path: str | os.PathLike) -> set[str]:
    """The record ids of a self-distillation dataset directory (its ``data/*.parquet`` shards); none if empty."""
    import pyarrow.parquet as pq

    root = Path(path)
    if not root.is_dir():
        raise DataFileError(
            f"{root} is not a dataset directory. Fix: pass the directory written by "
            "python -m oneiro_hf.training.distill_dataset (e.g. data/selfdistill/<target>)."
        )
    ids: set[str] = set()
    for shard in sorted((root / "data").glob("*.parquet")):
        ids.update(pq.read_table(shard, columns=["id"]).column("id").to_pylist())
    return ids

