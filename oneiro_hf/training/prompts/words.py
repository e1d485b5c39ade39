"""The word lists that fill the template sources' slots, read from data/words.json (package data).

The lists live in a data file, not in code; this module loads them once and gives them names:

    LANGUAGES            target languages of translation requests (`pick_language` weights the first seven)
    CODE_LANGUAGES       programming languages to port code to
    AUDIENCES            who an explanation is for
    NAMES                people in word problems and stories
    ITEMS                (item, price) pairs for shopping word problems
    WRITING_FORMS, WRITING_TOPICS, WRITING_CONSTRAINTS   creative-writing requests ("" = no constraint)
    ROLES, ROLE_REQUESTS                                 roleplay requests
    STEM_CONCEPTS, HUMANITIES_TOPICS                     explanation requests
    CODING_TASKS, CODING_QUESTIONS                       coding requests ({lang} is filled in)
    ADVICE_TOPICS                                        advice requests
    SENTENCES, FOREIGN_PHRASES                           text to translate, into and out of English

The order of each list is part of the data: the seeded sources (`stdlib`, `synthetic`) pick by position, so the
same seed yields the same prompts only while the file is unchanged (the shipped drafters were trained on prompts
from these lists).
"""

from __future__ import annotations

import json
import random
from functools import cache
from pathlib import Path
from typing import Any

WORDS_FILE = Path(__file__).resolve().parent / "data" / "words.json"


@cache
def load_word_lists(path: str | Path = WORDS_FILE) -> dict[str, list[Any]]:
    """Every list in the words file by name; ITEMS entries as (item, price) tuples."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError as err:
        raise FileNotFoundError(
            f"the prompt word lists {path} are missing. Fix: reinstall oneiro-hf (the file ships as package data "
            "in oneiro_hf/training/prompts/data/)."
        ) from err
    lists = data.get("lists") if isinstance(data, dict) else None
    if not isinstance(lists, dict):
        raise ValueError(f"{path} holds no 'lists' object (a damaged file?). Fix: reinstall oneiro-hf.")  # noqa: TRY004
    return {name: [tuple(x) if isinstance(x, list) else x for x in values] for name, values in lists.items()}


_lists = load_word_lists()
LANGUAGES: list[str] = _lists["LANGUAGES"]
CODE_LANGUAGES: list[str] = _lists["CODE_LANGUAGES"]
AUDIENCES: list[str] = _lists["AUDIENCES"]
NAMES: list[str] = _lists["NAMES"]
ITEMS: list[tuple[str, int]] = _lists["ITEMS"]
WRITING_FORMS: list[str] = _lists["WRITING_FORMS"]
WRITING_TOPICS: list[str] = _lists["WRITING_TOPICS"]
WRITING_CONSTRAINTS: list[str] = _lists["WRITING_CONSTRAINTS"]
ROLES: list[str] = _lists["ROLES"]
ROLE_REQUESTS: list[str] = _lists["ROLE_REQUESTS"]
STEM_CONCEPTS: list[str] = _lists["STEM_CONCEPTS"]
HUMANITIES_TOPICS: list[str] = _lists["HUMANITIES_TOPICS"]
CODING_TASKS: list[str] = _lists["CODING_TASKS"]
CODING_QUESTIONS: list[str] = _lists["CODING_QUESTIONS"]
ADVICE_TOPICS: list[str] = _lists["ADVICE_TOPICS"]
SENTENCES: list[str] = _lists["SENTENCES"]
FOREIGN_PHRASES: list[str] = _lists["FOREIGN_PHRASES"]


def pick_language(rng: random.Random) -> str:
    """A target language, mostly widely used European ones: small targets loop on rare scripts, which wastes
    generation time on near-duplicate data."""
    return rng.choice(LANGUAGES[:7] * 3 + LANGUAGES[7:])
