"""A workload of repeated tasks for oneiro-bench: one extraction task over many short public texts.

Real traffic repeats across requests: the same JSON shape for thousands of documents. Each question gives the
target one installed Python distribution's metadata (its `METADATA` header: name, version, summary, licence,
Python requirement, dependencies; public PyPI metadata, offline) and asks for it as one JSON object. The questions differ in their text and share the shape of their answers, which is what the suffix memory
(`oneiro_suffix_memory`, bench method `oneiro-suffix`) drafts from. Nothing here comes from Spec-Bench.

    python scripts/repeated_tasks.py --count 40 --out runs/suffix/questions.jsonl
    oneiro-bench --target smollm2-135m-instruct --questions runs/suffix/questions.jsonl --per-category 0 \\
        --max-new-tokens 160 --threads 1 --methods greedy,oneiro-tree,oneiro-suffix --out runs/suffix/smollm2

Distributions are taken in name order from the environment running the script (the record keeps the file it
wrote, so a rerun elsewhere reads the same questions); a distribution without a summary is skipped.
"""

from __future__ import annotations

import argparse
import json
import sys
from importlib import metadata
from pathlib import Path

FIELDS = (("Name", "Name"), ("Version", "Version"), ("Summary", "Summary"), ("License", "License"),
          ("License-Expression", "License"), ("Requires-Python", "Requires-Python"))
MAX_DEPENDENCIES = 6
MAX_FIELD_CHARS = 160


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


def question(index: int, text: str) -> dict:
    # the answer's shape is left to the target: the same instruction gives the same keys every time, which the
    # prompt does not hold (prompt lookup cannot copy them), while the values come from the prompt
    prompt = "Describe this Python package as a JSON object. Answer with the JSON only.\n\n" + text
    return {"question_id": index, "category": "extraction", "turns": [prompt]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=40, help="questions to write (default 40)")
    parser.add_argument("--out", type=Path, required=True, help="the question file (JSONL, Spec-Bench's format)")
    args = parser.parse_args(argv)
    seen, texts = set(), []
    for dist in sorted(metadata.distributions(), key=lambda d: (d.metadata.get("Name") or "").lower()):
        name = (dist.metadata.get("Name") or "").lower()
        text = metadata_text(dist) if name and name not in seen else None
        if text is not None:
            seen.add(name)
            texts.append(text)
    if len(texts) < args.count:
        print(f"only {len(texts)} distributions with a summary here; asked for {args.count}. "
              "Fix: pass --count <= that number.", file=sys.stderr)
        return 2
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as stream:
        for index, text in enumerate(texts[: args.count]):
            stream.write(json.dumps(question(index, text)) + "\n")
    print(f"wrote {args.count} questions to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
