"""Source ``stdlib``: tasks built from the Python standard library's own source and docstrings (explain,
refactor, port, test, summarise, answer from the docs, write a function from its description, ...)."""

from __future__ import annotations

import ast
import random
import sysconfig
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .records import MAX_PASSAGE_CHARS, Prompt, clip, first_sentence, make_prompt
from .words import AUDIENCES, CODE_LANGUAGES, pick_language

_MAX_CODE_CHARS = 1800
_MAX_CODE_LINES = 50


_STDLIB_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "turtledemo",
                     "__pycache__", "_bundled", "__phello__"}


@dataclass
class _CodeItem:
    """One function, class or module found in the standard library, with what templates need."""

    kind: str  # "function", "class" or "module"
    module: str
    name: str
    doc: str
    code: str
    signature: str


def _stdlib_files(root: Path | None = None) -> list[Path]:
    """All standard-library ``.py`` files outside tests and third-party directories, sorted."""
    root = root or Path(sysconfig.get_paths()["stdlib"])
    files = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).parts
        if any(part in _STDLIB_SKIP_DIRS or part.startswith("config-") for part in rel):
            continue
        files.append(path)
    return sorted(files)


def _module_name(path: Path, root: Path) -> str:
    """Dotted module name of a standard-library file."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _extract_items(path: Path, root: Path) -> list[_CodeItem]:
    """Parse one file (without importing it) and collect documented or reasonably sized definitions."""
    try:
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    lines = source.splitlines()  # slicing these is O(1) per item; ast.get_source_segment re-splits every call
    module = _module_name(path, root)
    items: list[_CodeItem] = []
    mod_doc = ast.get_docstring(tree) or ""
    if len(mod_doc) >= 200:
        items.append(_CodeItem("module", module, module, clip(mod_doc, MAX_PASSAGE_CHARS), "", ""))

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + node.name
                span = (node.end_lineno or node.lineno) - node.lineno + 1
                code = textwrap.dedent("\n".join(lines[node.lineno - 1 : node.lineno - 1 + span]))
                n_lines = code.count("\n") + 1
                doc = ast.get_docstring(node) or ""
                if 3 <= n_lines <= _MAX_CODE_LINES and len(code) <= _MAX_CODE_CHARS or len(doc) >= 80:
                    code_ok = 3 <= n_lines <= _MAX_CODE_LINES and len(code) <= _MAX_CODE_CHARS
                    try:
                        sig = f"{node.name}({ast.unparse(node.args)})"
                    except Exception:  # noqa: BLE001 - exotic syntax: the signature is optional
                        sig = node.name + "(...)"
                    items.append(_CodeItem("function", module, name, clip(doc, MAX_PASSAGE_CHARS),
                                           code if code_ok else "", sig))
            elif isinstance(node, ast.ClassDef):
                doc = ast.get_docstring(node) or ""
                if len(doc) >= 80:
                    methods = [n.name for n in node.body
                               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
                    items.append(_CodeItem("class", module, prefix + node.name, clip(doc, MAX_PASSAGE_CHARS),
                                           "", ", ".join(methods[:20])))
                visit(node.body, prefix + node.name + ".")

    visit(tree.body, "")
    return items


_CODE_TEMPLATES: list[tuple[str, str]] = [
    ("explain", ("Explain what this Python function from the `{module}` module does, step by step:\n\n"
                 "```python\n{code}\n```")),
    ("explain", ("What does the following code do? Describe its inputs, its output and any edge cases.\n\n"
                 "```python\n{code}\n```")),
    ("explain", ("Explain this code to someone who is new to programming, using an everyday analogy.\n\n"
                 "```python\n{code}\n```")),
    ("refactor", ("Refactor this function to make it more readable without changing its behavior. Explain "
                  "the changes you made.\n\n```python\n{code}\n```")),
    ("refactor", "Add type hints and a clear docstring to this function:\n\n```python\n{code}\n```"),
    ("refactor", "Rewrite this function in a more modern Python style.\n\n```python\n{code}\n```"),
    ("port", ("Translate this Python function into {code_lang}, keeping the same behavior:\n\n```python\n"
              "{code}\n```")),
    ("test", ("Write pytest unit tests for this function. Cover normal cases and edge cases.\n\n"
              "```python\n{code}\n```")),
    ("review", ("Review the following code as a senior engineer. Point out possible bugs, unclear parts "
                "and improvements.\n\n```python\n{code}\n```")),
    ("complexity", ("What is the time and space complexity of this function? Justify your answer.\n\n"
                    "```python\n{code}\n```")),
    ("extract", ("List every parameter of this function with its default value (or null if it has none) "
                 "as a JSON object.\n\n```python\n{code}\n```")),
    ("extract", ("Which other functions, methods or attributes does this code use? Give a bulleted "
                 "list.\n\n```python\n{code}\n```")),
    ("summarize", ("Give a one-sentence summary of this function, then a short paragraph with more "
                   "detail.\n\n```python\n{code}\n```")),
    ("commit", ("Write a concise git commit message for a change that adds this function:\n\n```python\n"
                "{code}\n```")),
]

_DOC_TEMPLATES: list[tuple[str, str]] = [
    ("coding", "Write a Python function `{signature}` that does the following:\n\n{doc}"),
    ("coding", "Implement this in Python and include a short usage example:\n\n{first}"),
    ("summarize", "Summarize this documentation in two sentences:\n\n{doc}"),
    ("summarize", ("Here is the documentation of `{module}.{name}`. Summarize it as three bullet "
                   "points.\n\n{doc}")),
    ("qa", ("Here is the documentation for `{module}.{name}`:\n\n{doc}\n\nWhat is it used for, and when "
            "would you use it? Give an example.")),
    ("rag", ("Answer the question using only the context below. If the context does not contain the "
             "answer, say so.\n\nContext:\n{doc}\n\nQuestion: {question}")),
    ("rag", "{doc}\n\nBased on the passage above, {question_lower}"),
    ("rewrite", "Rewrite the following documentation so that a beginner can understand it:\n\n{doc}"),
    ("rewrite", "Turn this documentation into a numbered list of the key facts:\n\n{doc}"),
    ("translate", "Translate this technical documentation into {lang}:\n\n{doc}"),
    ("quiz", "Write three quiz questions, with answers, that test understanding of this text:\n\n{doc}"),
    ("writing", ("Write a short story in which a programmer discovers `{module}.{name}`, which works like "
                 "this: {first}")),
    ("roleplay", ("You are a senior Python developer mentoring an intern. The intern asks you what "
                  "`{module}.{name}` does and when to use it. Reply in character. Here are its docs:\n\n"
                  "{doc}")),
    ("writing", "Write a limerick about the Python {kind} `{name}`, which does this: {first}"),
]

_MODULE_TEMPLATES: list[tuple[str, str]] = [
    ("summarize", "Summarize the purpose of the Python module `{module}` from its documentation:\n\n{doc}"),
    ("qa", "What problems does the `{module}` module solve? Use this description:\n\n{doc}"),
    ("writing", ("Write a short tutorial introduction to the Python `{module}` module, with one code "
                 "example.")),
    ("qa", "What is the Python `{module}` module used for? Give a practical example."),
    ("rewrite", "Explain this module documentation to {audience}:\n\n{doc}"),
    ("rag", "Context:\n{doc}\n\nUsing only the context, answer: {question}"),
]

_DOC_QUESTIONS = [
    "What does it do?",
    "What arguments does it take?",
    "What does it return?",
    "What errors or exceptions can it raise?",
    "Are there any caveats or special cases?",
    "What is the main purpose described here?",
    "What happens when the input is empty?",
    "Which version of Python introduced this?",
    "How is this different from similar tools?",
]


def _render_item(item: _CodeItem, rng: random.Random) -> tuple[str, str] | None:
    """Turn one stdlib item into a (kind, prompt) pair with a randomly chosen template, if any template fits."""
    slots = {
        "module": item.module,
        "name": item.name,
        "code": item.code,
        "doc": item.doc,
        "signature": item.signature or item.name,
        "first": first_sentence(item.doc) if item.doc else "",
        "lang": pick_language(rng),
        "code_lang": rng.choice(CODE_LANGUAGES),
        "audience": rng.choice(AUDIENCES),
        "kind": item.kind,
    }
    question = rng.choice(_DOC_QUESTIONS)
    slots["question"] = question
    slots["question_lower"] = question[0].lower() + question[1:]
    if item.kind == "module":
        choices = _MODULE_TEMPLATES
    else:
        choices = []
        if item.code:
            choices += _CODE_TEMPLATES
        if item.doc:
            choices += [t for t in _DOC_TEMPLATES if item.kind == "function" or t[0] not in ("coding",)]
    if not choices:
        return None
    kind, template = rng.choice(choices)
    return kind, template.format(**slots)


def stdlib_prompts(seed: int = 0, root: str | Path | None = None, per_file: int = 3) -> Iterator[Prompt]:
    """Prompts built from the standard library's source and docstrings (files parsed lazily, never imported).

    Files are visited in a seeded random order, taking a few items from each per round, so a small limit
    already spans many modules.
    """
    rng = random.Random(f"stdlib-{seed}")
    root_path = Path(root) if root is not None else Path(sysconfig.get_paths()["stdlib"])
    files = _stdlib_files(root_path)
    rng.shuffle(files)
    pending: list[list[_CodeItem]] = []
    seen: set[str] = set()

    def first_items(items: list[_CodeItem]) -> Iterator[Prompt]:
        """The prompts of the first `per_file` items, each new prompt once."""
        for item in items[:per_file]:
            rendered = _render_item(item, rng)
            if rendered and (rec := make_prompt("stdlib", rendered[1], rendered[0]))["id"] not in seen:
                seen.add(rec["id"])
                yield rec

    for path in files:
        items = _extract_items(path, root_path)
        rng.shuffle(items)
        if items[per_file:]:
            pending.append(items[per_file:])
        yield from first_items(items)
    while pending:  # later rounds: the remaining items, still interleaved across files
        still: list[list[_CodeItem]] = []
        for items in pending:
            yield from first_items(items)
            if items[per_file:]:
                still.append(items[per_file:])
        pending = still

