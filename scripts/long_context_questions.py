"""Long-context questions for oneiro-bench: prompts of about N tokens (default 4096) in Spec-Bench's format.

Three kinds of request over a long offline document, each filled to the token budget with the target's own
tokenizer and chat template (the document is cut at a token boundary):

* ``long_code``: explain a Python standard-library module and list its public functions;
* ``long_qa``: a question about one function defined in that module (answers quote the context);
* ``long_summary``: summarise a long licence text from /usr/share/common-licenses (or a module's docstrings).

    python scripts/long_context_questions.py --target smollm2-135m-instruct --tokens 4096 --per-kind 3 \\
        --out runs/long/questions_4k.jsonl
    oneiro-bench profile --target smollm2-135m-instruct --threads 2 --context-len 4096 \\
        --out runs/long/profile_4k.json
    oneiro-bench --target smollm2-135m-instruct --questions runs/long/questions_4k.jsonl --per-category 0 \\
        --max-new-tokens 256 --threads 2 --methods greedy,hf-lookup,oneiro-lookup,oneiro-latent,oneiro-hybrid \\
        --latency-profile runs/long/profile_4k.json --out runs/bench_long4k

The question file is written once and read by the benchmark like Spec-Bench's; it prints each prompt's token
count (chat template included) so the report can state the context length measured.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
import sysconfig
from pathlib import Path

MODULES = ("argparse", "difflib", "dataclasses", "statistics", "calendar", "fractions", "pprint", "textwrap",
           "shlex", "configparser", "tarfile", "zipfile/__init__", "inspect", "typing", "ipaddress", "pathlib/__init__",
           "pathlib", "logging/__init__", "email/message", "http/client")
LICENCES = ("GPL-3", "LGPL-3", "Apache-2.0", "GPL-2", "MPL-2.0", "Artistic")


def _module_sources(limit: int) -> list[tuple[str, str]]:
    root = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for name in MODULES:
        path = root / f"{name}.py"
        if path.is_file():
            found.append((name.replace("/__init__", "").replace("/", "."), path.read_text(encoding="utf-8")))
    return found[:limit]


def _documents(limit: int) -> list[tuple[str, str]]:
    docs = []
    for name in LICENCES:
        path = Path("/usr/share/common-licenses") / name
        if path.is_file():
            docs.append((name, path.read_text(encoding="utf-8", errors="replace")))
        if len(docs) == limit:
            return docs
    for name, source in _module_sources(len(MODULES)):  # a machine without licence texts: module docstrings
        strings = [n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant)
                   and isinstance(n.value, str) and len(n.value) > 80]
        docs.append((name + "-docs", "\n\n".join(strings)))
        if len(docs) == limit:
            break
    return docs


def _public_function(source: str) -> str | None:
    """The first public function or method defined in ``source`` (the most likely to survive the cut)."""
    tree = ast.parse(source)
    found = [(n.lineno, n.name) for n in tree.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
    found += [(n.lineno, f"{c.name}.{n.name}") for c in tree.body if isinstance(c, ast.ClassDef)
              for n in c.body if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]
    return min(found)[1] if found else None


def fit(tokenizer, template: str, document: str, tokens: int) -> tuple[str, int] | None:
    """``template`` with ``{doc}`` replaced by the longest token-prefix of ``document`` that keeps the
    chat-formatted prompt within ``tokens``; the prompt and its token count, or None for a short document."""

    def count(text: str) -> int:
        if tokenizer.chat_template:
            return len(tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                     tokenize=True, return_dict=True)["input_ids"])
        return len(tokenizer(text)["input_ids"])

    doc_ids = tokenizer(document, add_special_tokens=False)["input_ids"]
    budget = tokens - count(template.replace("{doc}", ""))
    if budget < 64:
        raise SystemExit(f"--tokens {tokens} leaves no room for a document. Fix: ask for at least 256 tokens.")
    if len(doc_ids) < budget:
        return None
    while True:
        prompt = template.replace("{doc}", tokenizer.decode(doc_ids[:budget]))
        n = count(prompt)
        if n <= tokens:
            return prompt, n
        budget -= n - tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="smollm2-135m-instruct", help="reference model name or directory")
    parser.add_argument("--tokens", type=int, default=4096, help="prompt length in tokens, chat template included")
    parser.add_argument("--per-kind", type=int, default=3, help="questions per kind (3 kinds)")
    parser.add_argument("--out", required=True, help="question JSONL to write")
    args = parser.parse_args(argv)

    from transformers import AutoTokenizer

    from oneiro_hf.storage.reference_models import resolve_target

    tokenizer = AutoTokenizer.from_pretrained(resolve_target(args.target))
    code = "Here is a Python module. Explain what it does, then list its public functions with one line each." \
        "\n\n```python\n{doc}\n```"
    summary = "Summarize the following document in a few paragraphs.\n\n{doc}"
    rows = []
    for kind, items in (("code", _module_sources(len(MODULES))), ("qa", _module_sources(len(MODULES))[::-1]),
                        ("summary", _documents(len(LICENCES) + len(MODULES)))):
        made = 0
        for name, text in items:
            if kind == "qa":
                function = _public_function(text)
                if function is None:
                    continue
                template = "```python\n{doc}\n```\n\nIn the code above, what does `" + function + \
                    "` do and what does it return? Quote its signature."
            else:
                template = code if kind == "code" else summary
            fitted = fit(tokenizer, template, text, args.tokens)
            if fitted is None or (kind == "qa" and f"def {function.rsplit('.', 1)[-1]}(" not in fitted[0]):
                continue  # too short, or the function asked about was cut off
            rows.append({"question_id": f"long{args.tokens}-{kind}-{name}", "category": f"long_{kind}",
                         "turns": [fitted[0]], "prompt_tokens": fitted[1]})
            made += 1
            if made == args.per_kind:
                break
        if made < args.per_kind:
            raise SystemExit(f"only {made} documents long enough for {args.tokens}-token {kind} prompts. Fix: lower "
                             "--tokens or --per-kind, or add longer documents to MODULES/LICENCES.")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    for r in rows:
        print(f"{r['question_id']}: {r['prompt_tokens']} tokens")
    print(f"wrote {len(rows)} questions to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
