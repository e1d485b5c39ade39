"""Source ``debian``: passages from the system's ``/usr/share/doc`` and ``/usr/share/common-licenses``
turned into summarise / QA / rewrite / extraction requests."""

from __future__ import annotations

import gzip
import hashlib
import logging
import random
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from .records import MAX_PASSAGE_CHARS, Prompt, clip, make_prompt
from .words import AUDIENCES, pick_language

logger = logging.getLogger(__name__)

DEBIAN_DOC_ROOTS: tuple[str, ...] = ("/usr/share/doc", "/usr/share/common-licenses")
_MIN_PASSAGE_CHARS = 300


_DOC_NAME = re.compile(
    r"^(readme|news|changelog|copyright|todo|authors|faq|usage|howto|intro|notes)"
    r"([._-].*)?$|.*\.(txt|md|rst)(\.gz)?$",
    re.IGNORECASE,
)


def _read_doc(path: Path, max_bytes: int = 200_000) -> str | None:
    """Read a (possibly gzipped) text file; ``None`` for binary or unreadable files."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as fh:
                raw = fh.read(max_bytes)
        else:
            with open(path, "rb") as fh:
                raw = fh.read(max_bytes)
    except (OSError, EOFError, gzip.BadGzipFile):
        return None
    if b"\x00" in raw:
        return None
    text = raw.decode("utf-8", errors="replace")
    if text.count("\ufffd") > len(text) // 100:
        return None
    return text


def _passages(text: str, max_passages: int) -> list[str]:
    """Split text into paragraph-aligned passages of a readable size."""
    paras = [p.strip("\n") for p in re.split(r"\n\s*\n", text.replace("\r\n", "\n")) if p.strip()]
    out: list[str] = []
    buf = ""
    for para in paras:
        if len(para) > MAX_PASSAGE_CHARS:
            para = clip(para, MAX_PASSAGE_CHARS)
        if buf and len(buf) + len(para) + 2 > MAX_PASSAGE_CHARS:
            if len(buf) >= _MIN_PASSAGE_CHARS:
                out.append(buf)
                if len(out) >= max_passages:
                    return out
            buf = ""
        buf = f"{buf}\n\n{para}" if buf else para
    if len(buf) >= _MIN_PASSAGE_CHARS and len(out) < max_passages:
        out.append(buf)
    return out


_PASSAGE_TEMPLATES: list[tuple[str, str]] = [
    ("summarize", "Summarize the following text in a few sentences:\n\n{passage}"),
    ("summarize", "Give a short bullet-point summary of this passage:\n\n{passage}"),
    ("summarize", "TL;DR:\n\n{passage}"),
    ("qa", "Read the passage and answer: {question}\n\n{passage}"),
    (
        "rag",
        (
            "Use only the information in the context to answer the question. If the answer is not in the context, "
            "say that you don't know.\n\nContext:\n{passage}\n\nQuestion: {question}"
        ),
    ),
    ("rewrite", "Rewrite this text in plain, simple English:\n\n{passage}"),
    ("rewrite", "Rewrite this as a short, friendly announcement for users:\n\n{passage}"),
    ("rewrite", "Explain what this text means to {audience}:\n\n{passage}"),
    (
        "extract",
        (
            "Extract every software name, version number, date and person mentioned in this text, as JSON:\n\n"
            "{passage}"
        ),
    ),
    ("extract", "List the key facts from this text as a numbered list:\n\n{passage}"),
    ("translate", "Translate the first paragraph of this text into {lang}:\n\n{passage}"),
    ("title", "Suggest a clear title and five keywords for this text:\n\n{passage}"),
]
_PASSAGE_QUESTIONS = [
    "What is the main point of this text?",
    "Who is this text written for?",
    "What changed, according to this text?",
    "What problems are mentioned, and how were they solved?",
    "What does this text allow or forbid?",
    "What should a user do after reading this?",
    "Which programs or packages are mentioned?",
    "What are the conditions described here?",
]
_CHANGELOG_TEMPLATES = [
    ("qa", "Here is a changelog entry. What bugs were fixed and what features were added?\n\n{passage}"),
    ("rewrite", "Turn this changelog entry into user-friendly release notes:\n\n{passage}"),
]
_LICENSE_TEMPLATES = [
    ("qa", "Based only on this license text, may I use the software commercially? Explain.\n\n{passage}"),
    ("rewrite", "Explain this license excerpt in plain English:\n\n{passage}"),
    (
        "qa",
        (
            "What obligations does this license text place on someone who redistributes the "
            "software?\n\n{passage}"
        ),
    ),
]


def _doc_files(roots: Sequence[str | Path]) -> list[tuple[Path, str]]:
    """Candidate documentation files under ``roots`` as (path, flavour) pairs, sorted."""
    out: list[tuple[Path, str]] = []
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            continue
        licenses = root.name == "common-licenses"
        for path in sorted(root.rglob("*")):
            if not path.is_file() or path.is_symlink():
                continue
            name = path.name.lower()
            if licenses:
                out.append((path, "license"))
            elif name.startswith("changelog"):
                out.append((path, "changelog"))
            elif name.startswith("copyright"):
                out.append((path, "license"))
            elif _DOC_NAME.match(name):
                out.append((path, "doc"))
    return out


def debian_prompts(
    seed: int = 0, roots: Sequence[str | Path] = DEBIAN_DOC_ROOTS, per_file: int = 2
) -> Iterator[Prompt]:
    """Summarise / QA / rewrite / extraction prompts over local documentation passages (deduplicated)."""
    rng = random.Random(f"debian-{seed}")
    files = _doc_files(roots)
    if not files:
        logger.warning(
            "No documentation files found under %s; the debian source yields nothing.", list(roots)
        )
        return
    rng.shuffle(files)
    seen_passages: set[str] = set()
    for path, flavour in files:
        text = _read_doc(path)
        if not text:
            continue
        limit = 1 if flavour == "changelog" else per_file
        for passage in _passages(text, limit):
            key = hashlib.sha1(" ".join(passage.split()).encode()).hexdigest()
            if key in seen_passages:
                continue
            seen_passages.add(key)
            templates = list(_PASSAGE_TEMPLATES)
            if flavour == "changelog":
                templates += _CHANGELOG_TEMPLATES * 3
            elif flavour == "license":
                templates += _LICENSE_TEMPLATES * 3
            kind, template = rng.choice(templates)
            prompt = template.format(
                passage=passage,
                question=rng.choice(_PASSAGE_QUESTIONS),
                audience=rng.choice(AUDIENCES),
                lang=pick_language(rng),
            )
            yield make_prompt("debian", prompt, kind)

