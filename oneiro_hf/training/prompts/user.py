"""User prompts: a JSONL file (``{"prompt": ...}`` or ``{"turns": [...]}`` per line) or a ``datasets``
dataset, read into prompt records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .records import Prompt, make_prompt

_PROMPT_COLUMNS = ("prompt", "instruction", "question", "query", "input", "text")


def _prompt_from_record(rec: Any, where: str) -> str:
    """Prompt text of one user record: ``prompt`` or the first of ``turns`` (later turns need earlier answers)."""
    if not isinstance(rec, dict):
        raise ValueError(  # noqa: TRY004 - malformed input data: callers catch ValueError
            f'{where}: expected a JSON object like {{"prompt": "..."}}, got {type(rec).__name__}.'
        )
    if isinstance(rec.get("prompt"), str) and rec["prompt"].strip():
        return rec["prompt"]
    turns = rec.get("turns")
    if isinstance(turns, list) and turns and isinstance(turns[0], str) and turns[0].strip():
        return turns[0]
    if isinstance(rec.get("instruction"), str) and rec["instruction"].strip():
        extra = rec.get("input")
        return rec["instruction"] + (f"\n\n{extra}" if isinstance(extra, str) and extra.strip() else "")
    for column in _PROMPT_COLUMNS[2:]:
        if isinstance(rec.get(column), str) and rec[column].strip():
            return rec[column]
    raise ValueError(
        f'{where}: no prompt found. Each record needs a non-empty "prompt" string or a non-empty "turns" list '
        f"of strings (keys present: {sorted(rec)})."
    )


def load_user_prompts(path: str | Path, split: str = "train") -> list[Prompt]:
    """Read user prompts from a JSONL file (``{"prompt": ...}`` or ``{"turns": [...]}`` per line) or a dataset.

    A path that is not a file is treated as a ``datasets`` directory (saved with ``save_to_disk``) or dataset
    name. Multi-turn records contribute their first turn. Errors name the file and line to fix.
    """
    p = Path(path).expanduser()
    records: list[Prompt] = []
    if p.is_file():
        with open(p, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, start=1):
                if not line.strip():
                    continue
                where = f"{p}:{lineno}"
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(
                        f"{where}: malformed JSON ({exc.msg}); each line must be one JSON object."
                    ) from None
                text = _prompt_from_record(rec, where)
                pid = str(rec["id"]) if rec.get("id") is not None else make_prompt("user", text)["id"]
                records.append({"id": pid, "source": str(rec.get("source", "user")), "prompt": text})
        if not records:
            raise ValueError(
                f"{p}: no prompts found (the file is empty). Add one JSON object per line, "
                'e.g. {"prompt": "Explain recursion."}.'
            )
    else:
        try:
            import datasets
        except ImportError as exc:  # pragma: no cover - datasets is a declared dependency
            raise ValueError(f"{path} is not a file and the datasets package is not installed.") from exc
        try:
            if p.is_dir() and ((p / "dataset_info.json").exists() or (p / "dataset_dict.json").exists()):
                ds = datasets.load_from_disk(str(p))
            else:
                ds = datasets.load_dataset(str(path), split=split)
        except Exception as exc:  # any loader failure: re-raise with the fix
            raise ValueError(
                f"Could not load prompts from {path!r}: it is not a JSONL file and loading it as a "
                f"dataset failed ({type(exc).__name__}: {exc}). Pass a JSONL file or a local dataset "
                "directory."
            ) from exc
        if isinstance(ds, datasets.DatasetDict):
            if split not in ds:
                raise ValueError(f"Dataset {path!r} has no split {split!r}; available: {list(ds)}.")
            ds = ds[split]
        for index, rec in enumerate(ds):
            text = _prompt_from_record(rec, f"{path} row {index}")
            pid = str(rec["id"]) if rec.get("id") is not None else make_prompt("user", text)["id"]
            records.append({"id": pid, "source": "user", "prompt": text})
        if not records:
            raise ValueError(f"Dataset {path!r} (split {split!r}) contains no rows.")
    return records
