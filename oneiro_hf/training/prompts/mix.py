"""Mixing prompt sources by weight into one deterministic stream of unique prompts (``--sources``)."""

from __future__ import annotations

import logging
import math
import os
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from .public import PUBLIC_SOURCES, public_prompts, question_turns
from .records import Prompt
from .stdlib import stdlib_prompts
from .synthetic import synthetic_prompts
from .user import load_user_prompts

logger = logging.getLogger(__name__)

SOURCES: tuple[str, ...] = ("stdlib", "synthetic", "sharegpt", "sharegpt_code", "arena_hard", "ifeval")
DEFAULT_WEIGHTS: dict[str, float] = {"stdlib": 3.0, "synthetic": 4.0, "sharegpt": 8.0, "sharegpt_code": 4.0,
                                     "arena_hard": 1.0, "ifeval": 1.0}


def parse_sources(sources: str | Iterable[str]) -> list[tuple[str, float]]:
    """Parse ``"stdlib,synthetic:2,sharegpt"`` (or a list of such items) into (name, weight) pairs.

    ``all`` expands to every built-in source; an item that is not a source name but an existing path is a
    file of user prompts. Unknown names raise with the list of valid ones.
    """
    items = sources.split(",") if isinstance(sources, str) else list(sources)
    out: list[tuple[str, float]] = []
    for raw in items:
        item = raw.strip()
        if not item:
            continue
        name, weight = item, None
        if ":" in item and not Path(item).exists():
            name, _, w = item.rpartition(":")
            try:
                weight = float(w)
            except ValueError:
                raise ValueError(
                    f"Bad weight in prompt source {item!r}; use NAME or NAME:WEIGHT, e.g. stdlib:2."
                ) from None
            if weight <= 0 or not math.isfinite(weight):
                raise ValueError(f"Weight of prompt source {item!r} must be a positive number.")
        if name == "all":
            out += [(s, weight or DEFAULT_WEIGHTS[s]) for s in SOURCES]
        elif name in SOURCES:
            out.append((name, weight or DEFAULT_WEIGHTS[name]))
        elif Path(name).exists():
            out.append((name, weight or 1.0))
        else:
            raise ValueError(
                f"Unknown prompt source {name!r}. Use any of {', '.join(SOURCES)}, 'all', or a path to "
                "a JSONL file of user prompts."
            )
    if not out:
        raise ValueError("No prompt sources given; use e.g. --sources stdlib,synthetic.")
    return out


EXCLUDE_NOTHING = "none"  # --exclude none: filter MT-bench only, on purpose


def resolve_exclude(sources: str | Iterable[str], exclude: Sequence[str]) -> list[str]:
    """The evaluation question files that public prompts must leave out (MT-bench always is).

    ``exclude`` as given (the ``--exclude`` flags); when empty, the file oneiro-bench evaluates on
    ($ONEIRO_BENCH_QUESTIONS); ``["none"]`` means MT-bench only. Raises when ``sources`` draw on a public
    source and no file is named: a benchmark question among the training prompts inflates every acceptance
    figure measured on it, and nothing downstream could tell.
    """
    from ...bench.answers import QUESTIONS_ENV

    given = [path for path in exclude if path != EXCLUDE_NOTHING]
    if not given and EXCLUDE_NOTHING not in exclude and os.environ.get(QUESTIONS_ENV):
        given = [os.environ[QUESTIONS_ENV]]
    if given or EXCLUDE_NOTHING in exclude:
        for path in given:  # read now, before any model loads: a missing or malformed file fails here
            try:
                question_turns(path)
            except FileNotFoundError as err:
                raise ValueError(str(err)) from None
        return given
    public = [name for name, _ in parse_sources(sources) if name in PUBLIC_SOURCES]
    if public:
        raise ValueError(
            f"the sources {', '.join(public)} hold real user prompts, and no evaluation question file is named to "
            f"leave out of them (only MT-bench is built in). Fix: pass --exclude QUESTIONS_JSONL (the questions "
            f"you benchmark on, e.g. Spec-Bench's question.jsonl), set {QUESTIONS_ENV}, or pass --exclude "
            f"{EXCLUDE_NOTHING} to filter MT-bench only."
        )
    return []


def iter_prompts(
    sources: str | Sequence[str],
    limit: int,
    seed: int = 0,
    exclude: Sequence[str] = (),
) -> Iterator[Prompt]:
    """Mix prompt sources by weight into at most ``limit`` unique prompts (deterministic for a given seed).

    Sources are drawn lazily, so a source only does the work its share of the prompts needs. A source that runs
    dry is dropped and the others fill the remaining quota. ``exclude``: evaluation question files whose prompts
    the public sources (sharegpt, arena_hard, ifeval) must leave out.
    """
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}.")
    parsed = parse_sources(sources)
    factories: dict[str, Callable[[], Iterator[Prompt]]] = {
        "stdlib": lambda: stdlib_prompts(seed),
        "synthetic": lambda: synthetic_prompts(seed),
        **{
            name: (lambda name=name: public_prompts(name, seed=seed, exclude=exclude))
            for name in PUBLIC_SOURCES
        },
    }
    active: list[tuple[str, float, Iterator[Prompt]]] = [
        (name, weight, factories[name]() if name in factories else iter(load_user_prompts(name)))
        for name, weight in parsed
    ]
    rng = random.Random(f"mix-{seed}")
    seen: set[str] = set()
    produced = 0
    while produced < limit and active:
        index = rng.choices(range(len(active)), weights=[w for _, w, _ in active])[0]
        try:
            rec = next(active[index][2])
        except StopIteration:
            logger.info("Prompt source %s is exhausted.", active[index][0])
            active.pop(index)
            continue
        if rec["id"] in seen:
            continue
        seen.add(rec["id"])
        produced += 1
        yield rec
    if produced < limit:
        logger.warning("Only %d of the %d requested prompts could be produced.", produced, limit)
