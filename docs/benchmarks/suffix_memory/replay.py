"""Replay a run's greedy answers through the suffix memory, with no target and no drafter: how often the memory's most
frequent continuation is the next token, per matched context length, and the tokens per pass that drafting only from
prompt lookup, or from the better of lookup and the memory, would reach if every step drafted a chain of `--depth`
tokens and the verifier kept its longest right prefix (an upper bound for those two sources: no pass is priced).

    PYTHONPATH=. python docs/benchmarks/suffix_memory/replay.py docs/benchmarks/suffix_memory/repeated

Each answer sees the memory of the earlier answers only (file order), as `oneiro-suffix` does; lookup sees the
prompt and the answer so far (longest n-gram of 4..1 tokens, latest occurrence).
"""

from __future__ import annotations

import argparse
import json
import tarfile
from collections import defaultdict
from pathlib import Path

from transformers import AutoTokenizer

from oneiro_hf.chat import encode_prompt
from oneiro_hf.drafting.memory import MAX_CONTEXT, SuffixMemory
from oneiro_hf.storage.reference_models import reference_model_dir


def lookup_next(seq: list[int]) -> int | None:
    for n in range(4, 0, -1):
        if len(seq) <= n:
            continue
        key = seq[-n:]
        for i in range(len(seq) - n - 1, -1, -1):
            if seq[i:i + n] == key:
                return seq[i + n]
    return None


def memory_next(memory: SuffixMemory, seq: list[int]) -> tuple[int | None, int]:
    counts, context = memory.continuations(seq[-memory.max_context:])
    return (max(counts, key=counts.get), context) if counts else (None, 0)


def chain(seq: list[int], depth: int, step) -> list[int]:
    seq, out = list(seq), []
    for _ in range(depth):
        token = step(seq)
        if token is None:
            break
        out.append(token)
        seq.append(token)
    return out


def right_prefix(drafted: list[int], truth: list[int]) -> int:
    n = 0
    for a, b in zip(drafted, truth):
        if a != b:
            break
        n += 1
    return n


def greedy_answers(run: Path) -> tuple:
    """A record folder's target tokenizer, its questions by id and its greedy answers (rows of answers/greedy.jsonl,
    in file order)."""
    config = json.loads((run / "run_config.json").read_text())
    tokenizer = AutoTokenizer.from_pretrained(reference_model_dir(config["target"]))
    questions = {q["question_id"]: q for q in map(json.loads, (run / "questions.jsonl").read_text().splitlines())}
    with tarfile.open(run / "answers.tar.gz") as tar:
        rows = [json.loads(line) for line in tar.extractfile("answers/greedy.jsonl").read().decode().splitlines()]
    return tokenizer, questions, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a record folder with questions.jsonl and answers.tar.gz")
    parser.add_argument("--depth", type=int, default=16)
    parser.add_argument("--max-context", type=int, default=MAX_CONTEXT,
                        help=f"the longest context the memory counts (the library's: {MAX_CONTEXT})")
    args = parser.parse_args()
    tokenizer, questions, rows = greedy_answers(args.run)
    memory = SuffixMemory(1 << 30, max_context=args.max_context)
    right: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    tokens, steps = 0, {"lookup": 0, "lookup or memory": 0}
    for row in rows:
        prompt = encode_prompt(tokenizer, questions[row["question_id"]]["turns"][0])
        answer = row["choices"][0]["output_ids"][0]
        seq = prompt + answer
        for j in range(len(prompt), len(seq)):
            token, context = memory_next(memory, seq[:j])
            if token is not None:
                right[min(context, 4)][0] += token == seq[j]
                right[min(context, 4)][1] += 1
        for name in steps:
            j = 0
            while j < len(answer):
                ctx, truth = prompt + answer[:j], answer[j:]
                best = right_prefix(chain(ctx, args.depth, lookup_next), truth)
                if name != "lookup":
                    best = max(best, right_prefix(chain(ctx, args.depth, lambda s: memory_next(memory, s)[0]), truth))
                j += 1 + best
                steps[name] += 1
        tokens += len(answer)
        memory.extend(memory.open(prompt[:-1]), prompt[-1:] + answer)
    for context in sorted(right):
        hit, seen = right[context]
        label = f"{context}+" if context == 4 else str(context)
        print(f"context {label} tokens: the memory's best continuation was the next token {hit} of {seen} times "
              f"({hit / seen:.0%})")
    for name, count in steps.items():
        print(f"tokens per pass, chains of {args.depth} from {name}: {tokens / count:.2f}")


if __name__ == "__main__":
    main()
