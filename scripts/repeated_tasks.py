"""Workloads of repeated tasks for oneiro-bench: one task, stated with its exact output format, over many short texts.

Real traffic repeats across requests: an extraction job answering the same JSON shape for thousands of
documents, unit tests for one function after another. Each workload is one instruction applied to many short public
texts available offline (nothing here comes from Spec-Bench); the questions differ in their text and share the shape
of their answers, which is what the suffix memory (`oneiro_suffix_memory`, bench method `oneiro-suffix`) drafts from.

* `extraction`: one installed Python distribution's metadata (its `METADATA` header: name, version, summary,
  licence, Python requirement, dependencies; public PyPI metadata) to extract into one fixed JSON schema, whose keys,
  order and value formats the instruction states.
* `tests`: one standard-library function (its signature and its docstring's first line) to write unit tests for,
  in one fixed unittest layout the instruction states.
* `cli`: the same functions, each to wrap in a command-line script in one house style (argparse, a `main()`,
  the result printed) that the instruction names but does not spell out: the skeleton the model writes is its
  own, repeated from one script to the next, and not in the prompt for lookup to copy.
* `tools`: the same functions, each the subject of one agent step: the tool calls (one JSON object per line, three
  tools the instruction declares) that read its source, run it on two inputs and add a test, as an agent loop emits
  them request after request.
* `wrapper`, `docstring`: the same functions, each to wrap in a small class (`__init__`, `run()`, `__repr__`), or
  to restate with a Google-style docstring (summary, Args, Returns, Example): boilerplate of the model's own, as in
  `cli`, in two more shapes.
* `followup`: the `cli` questions as two-turn conversations, each with the same follow-up turn (unit tests for the
  script's `main()`): what a user asks next, conversation after conversation.

    python scripts/repeated_tasks.py --task extraction --count 40 --out runs/suffix/questions.jsonl
    oneiro-bench --target smollm2-135m-instruct --questions runs/suffix/questions.jsonl --per-category 0 \\
        --max-new-tokens 128 --threads 1 --methods greedy,oneiro-tree,oneiro-suffix --out runs/suffix/smollm2

Texts are taken in a fixed order (distributions by name, functions by module and name) from the environment running
the script (the record keeps the file it wrote, so a rerun elsewhere reads the same questions).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import sys
from importlib import metadata
from pathlib import Path

FIELDS = (("Name", "Name"), ("Version", "Version"), ("Summary", "Summary"), ("License", "License"),
          ("License-Expression", "License"), ("Requires-Python", "Requires-Python"))
MAX_DEPENDENCIES = 6
MAX_FIELD_CHARS = 160

EXTRACTION = """Extract the metadata of this Python package into JSON. Answer with one JSON object and nothing else, \
with exactly these keys in this order:
- "name": the package name, as written
- "version": the version, as written
- "license": the licence, or null if none is given
- "python": the Python versions it requires, or null
- "dependencies": a list of the names of the packages it requires, without versions ([] if none)

"""

TESTS = """Write unit tests for the Python function below. Answer with one Python code block and nothing else, in \
exactly this layout: import unittest, then import the function from its module, then one class \
Test<FunctionName>(unittest.TestCase) with three test methods, each calling the function and checking the result \
with self.assertEqual, then the usual `if __name__ == "__main__": unittest.main()`.

"""

CLI = """Wrap the Python function below in a command-line script. Answer with one Python code block and nothing else: use argparse with one command-line argument per parameter of the function (with a help text each), put the parsing and the call in a main() function, print the result, and call main() under `if __name__ == "__main__":`.

"""

TOOLS = """You are a coding agent with these tools:
- read_source(module, function): returns the function's source code
- run_snippet(code): runs Python code and returns what it prints
- add_test(module, function, calls): adds a unit test; calls is a list of [call, expected result] pairs of strings
Answer with the tool calls that do the task below, one JSON object per line, each {"tool": ..., "arguments": {...}}, \
and nothing else. Task: read the function's source, run it on two example inputs, then add a test with those two \
calls and their results.

"""

WRAPPER = """Write a small Python class that wraps the function below: a class with an __init__ that stores the \
function's arguments, a run() method that calls the function with them, and a __repr__. Answer with one Python code \
block and nothing else.

"""

DOCSTRING = """Write a Google-style docstring for the Python function below. Answer with one Python code block and \
nothing else: the def line and its docstring (a summary line, Args, Returns, Example).

"""

FOLLOWUP = ("Now write unit tests for this script's main() with unittest: patch sys.argv with example arguments, "
            "capture what it prints, and check the printed result.")

# standard-library modules whose public functions are small, documented and testable without side effects
TEST_MODULES = ("bisect", "colorsys", "fnmatch", "heapq", "html", "keyword", "math", "operator", "os.path", "shlex",
                "statistics", "string", "textwrap", "urllib.parse")


def metadata_text(dist: metadata.Distribution) -> str | None:
    """The distribution's header fields as lines `Field: value` (clipped), or None without a summary."""
    meta = dist.metadata
    if not (meta.get("Summary") or "").strip():
        return None
    lines = []
    for field, label in FIELDS:
        value = (meta.get(field) or "").strip().splitlines()
        if value:
            lines.append(f"{label}: {value[0][:MAX_FIELD_CHARS]}")
    for requirement in (meta.get_all("Requires-Dist") or [])[:MAX_DEPENDENCIES]:
        lines.append(f"Requires-Dist: {requirement[:MAX_FIELD_CHARS]}")
    return "\n".join(lines)


def extraction_texts() -> list[str]:
    seen, texts = set(), []
    for dist in sorted(metadata.distributions(), key=lambda d: (d.metadata.get("Name") or "").lower()):
        name = (dist.metadata.get("Name") or "").lower()
        text = metadata_text(dist) if name and name not in seen else None
        if text is not None:
            seen.add(name)
            texts.append(EXTRACTION + text)
    return texts


def function_text(module: str, name: str, function) -> str | None:
    """`module.name(signature)` and its docstring's first line, or None without either."""
    doc = (inspect.getdoc(function) or "").strip().splitlines()
    try:
        signature = str(inspect.signature(function))
    except (TypeError, ValueError):
        return None
    if not doc or not doc[0].strip() or len(signature) > 80:
        return None
    return f"Module: {module}\nFunction: {name}{signature}\nDoes: {doc[0].strip()}"


def test_texts(instruction: str = TESTS) -> list[str]:
    per_module = []
    for module in TEST_MODULES:
        texts = []
        namespace = importlib.import_module(module)
        public = getattr(namespace, "__all__", None) or [n for n in dir(namespace) if not n.startswith("_")]
        for name in sorted(public):
            function = getattr(namespace, name, None)
            if not (inspect.isfunction(function) or inspect.isbuiltin(function)):
                continue
            text = function_text(module, name, function)
            if text is not None:
                texts.append(instruction + text)
        per_module.append(texts)
    return interleave(per_module)


def interleave(lists: list[list[str]]) -> list[str]:
    """Round-robin over `lists` (tests: one module after another, not forty functions of one)."""
    out, queues = [], [list(texts) for texts in lists]
    while any(queues):
        for queue in queues:
            if queue:
                out.append(queue.pop(0))
    return out


TASKS = {"extraction": extraction_texts, "tests": test_texts, "cli": lambda: test_texts(CLI),
         "tools": lambda: test_texts(TOOLS), "wrapper": lambda: test_texts(WRAPPER),
         "docstring": lambda: test_texts(DOCSTRING), "followup": lambda: [[t, FOLLOWUP] for t in test_texts(CLI)]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="extraction", help="the workload (default extraction)")
    parser.add_argument("--count", type=int, default=40, help="questions to write (default 40)")
    parser.add_argument("--out", type=Path, required=True, help="the question file (JSONL, Spec-Bench's format)")
    args = parser.parse_args(argv)
    texts = TASKS[args.task]()
    if len(texts) < args.count:
        print(f"only {len(texts)} texts for {args.task} here; asked for {args.count}. "
              "Fix: pass --count <= that number.", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as stream:
        for index, text in enumerate(texts[: args.count]):
            turns = text if isinstance(text, list) else [text]  # a conversation, or one user message
            stream.write(json.dumps({"question_id": index, "category": args.task, "turns": turns}) + "\n")
    print(f"wrote {args.count} questions to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
