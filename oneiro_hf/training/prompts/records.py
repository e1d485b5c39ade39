"""What a prompt is: a record ``{"id", "source", "prompt"}`` whose id derives from its text, and the text
helpers every source shares."""

from __future__ import annotations

import hashlib
import re
from typing import Any

Prompt = dict[str, Any]

MAX_PASSAGE_CHARS = 1400


def make_prompt(source: str, prompt: str, kind: str = "") -> Prompt:
    """Build a prompt record whose id depends only on its source, kind and text (deterministic, dedupable)."""
    digest = hashlib.sha1(prompt.encode("utf-8")).hexdigest()[:16]
    prefix = f"{source}:{kind}" if kind else source
    return {"id": f"{prefix}:{digest}", "source": source, "prompt": prompt}


def clip(text: str, limit: int) -> str:
    """Cut ``text`` to at most ``limit`` characters at a paragraph or line boundary where possible."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text.rfind("\n\n", 0, limit)
    if cut < limit // 2:
        cut = text.rfind("\n", 0, limit)
    if cut < limit // 2:
        cut = text.rfind(" ", 0, limit)
    return text[: cut if cut > 0 else limit].rstrip()


def first_sentence(text: str) -> str:
    """First sentence of a docstring-like text, used as a one-line description."""
    flat = " ".join(text.split())
    match = re.match(r"(.+?[.!?])(\s|$)", flat)
    return (match.group(1) if match else flat)[:300]

