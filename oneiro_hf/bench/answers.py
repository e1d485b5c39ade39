"""The benchmark's files: Spec-Bench questions in, per-method answer records out, and what `--resume` and
the readers of finished runs (breakdown, merge) need from them. No model, no torch."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

QUESTIONS_ENV = "ONEIRO_BENCH_QUESTIONS"  # the questions file when --questions is not given


class BenchInputError(ValueError):
    """A benchmark argument or input file is unusable; raised before any model loads."""


def questions_file(arg: str | Path | None) -> Path:
    """The questions file: `arg` (--questions), else $ONEIRO_BENCH_QUESTIONS; absolute. No default path."""
    value = arg or os.environ.get(QUESTIONS_ENV)
    if not value:
        raise BenchInputError(f"no questions file. Fix: pass --questions FILE.jsonl (Spec-Bench format: "
                              f"question_id, category, turns) or set {QUESTIONS_ENV}=FILE.jsonl.")
    return Path(value).expanduser().resolve()

def load_questions(
    path: str | Path, per_category: int | None = None, categories: list[str] | None = None
) -> list[dict]:
    """Read Spec-Bench question JSONL (question_id, category, turns[, reference]).

    per_category: keep the first N of each category (None or 0: all); categories: keep only these.
    """
    path = Path(path)
    if not path.is_file():
        raise BenchInputError(f"questions file {path} does not exist. Fix: pass --questions FILE.jsonl.")
    rows: list[tuple[int, dict]] = []
    seen_ids: dict[Any, int] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise BenchInputError(f"{path}:{lineno} is not valid JSON ({err.msg}).") from err
        if not isinstance(row, dict) or not {"question_id", "category", "turns"} <= set(row):
            raise BenchInputError(f"{path}:{lineno} needs question_id, category and turns.")
        turns = row["turns"]
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
            raise BenchInputError(f"{path}:{lineno}: turns must be a non-empty list of non-empty strings.")
        if not isinstance(row["category"], str) or not row["category"]:
            raise BenchInputError(f"{path}:{lineno}: category must be a non-empty string.")
        qid = row["question_id"]
        if not isinstance(qid, (int, str)) or isinstance(qid, bool):
            raise BenchInputError(f"{path}:{lineno}: question_id must be an integer or a string.")
        if qid in seen_ids:
            raise BenchInputError(f"{path}:{lineno}: question_id {qid!r} repeats line {seen_ids[qid]}.")
        seen_ids[qid] = lineno
        rows.append((lineno, row))
    if not rows:
        raise BenchInputError(f"{path} holds no questions.")
    if categories:
        known = sorted({r["category"] for _, r in rows})
        unknown = [c for c in categories if c not in known]
        if unknown:
            raise BenchInputError(f"unknown categor{'y' if len(unknown) == 1 else 'ies'} {unknown} in "
                                  f"--categories; {path} has: {', '.join(known)}.")
        rows = [(n, r) for n, r in rows if r["category"] in categories]
    picked, count = [], defaultdict(int)
    for _, row in rows:
        if per_category and count[row["category"]] >= per_category:
            continue
        count[row["category"]] += 1
        picked.append(row)
    return picked


def read_answers(path: Path) -> tuple[list[dict], int]:
    """Complete answer records of one method's file (last one per question) and how many lines were dropped."""
    if not path.exists():
        return [], 0
    by_id: dict[Any, dict] = {}
    dropped = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            choice = rec["choices"][0]
            ok = isinstance(rec.get("question_id"), (int, str)) and len(choice["turns"]) == len(choice["new_tokens"])
        except (json.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
            ok = False
        if not ok:
            dropped += 1  # a line cut by an interruption: that question is re-run
            continue
        by_id[rec["question_id"]] = rec
    return list(by_id.values()), dropped


def write_answers(path: Path, records: list[dict]) -> None:
    """Rewrite a method's file with only complete records (so new lines never join a cut one)."""
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    os.replace(tmp, path)


_RESUME_KEYS = ("target", "dtype", "device", "max_new_tokens", "threads")
_RESUME_METHOD_KEYS = {"drafter": "oneiro-", "pin_profile": "oneiro-", "drafter_call_ratio": "oneiro-",
                       "early_exit_layer": "hf-early-exit", "assistant": "hf-assistant"}


def resume_conflicts(stored: dict, current: dict, methods_with_answers: list[str]) -> list[str]:
    """Settings that differ from the run being resumed, where they matter for answers already written."""
    keys = list(_RESUME_KEYS)
    for key, prefix in _RESUME_METHOD_KEYS.items():
        if any(m.startswith(prefix) and "@" not in m for m in methods_with_answers):
            keys.append(key)
    conflicts = [f"{k}: was {stored.get(k)!r}, now {current.get(k)!r}" for k in keys if stored.get(k) != current.get(k)]
    for m in methods_with_answers:
        if "@" in m:
            name = m.split("@", 1)[1]
            was, now = (stored.get("extra_drafters") or {}).get(name), (current.get("extra_drafters") or {}).get(name)
            if was != now:
                conflicts.append(f"drafter {name} of {m}: was {was!r}, now {now!r}")
    return conflicts



def read_run_answers(run: Path, methods: list[str] | None = None) -> dict[str, list[dict]]:
    """Method name -> complete answer records of a run directory's answers/*.jsonl (of `methods` only, if given)."""
    answers = {path.stem: read_answers(path)[0] for path in sorted((Path(run) / "answers").glob("*.jsonl"))}
    if methods:  # answers left in the directory by an earlier run with other methods are not this run's
        answers = {m: recs for m, recs in answers.items() if m in methods}
    return answers
