"""Parts of a run in this record: the tree with the memory against the tree without it, pooled over the first and the
second half of the questions (file order: the memory warms up as the run goes on) and, where some questions have two
turns (Spec-Bench's MT-Bench categories), over the two-turn and the one-turn questions.

    python docs/benchmarks/suffix_memory/halves.py docs/benchmarks/suffix_memory/repeated/answers.tar.gz
    python docs/benchmarks/suffix_memory/halves.py docs/benchmarks/suffix_memory/specbench/answers.tar.gz
"""

from __future__ import annotations

import json
import sys
import tarfile


def answers(archive: str, method: str) -> dict[int, dict]:
    with tarfile.open(archive) as tar:
        lines = tar.extractfile(f"answers/{method}.jsonl").read().decode().splitlines()
    return {row["question_id"]: row["choices"][0] for row in map(json.loads, lines)}


def pooled(rows: dict[int, dict], ids: list[int]) -> tuple[float, float]:
    """(new tokens per second, new tokens per target pass) over the questions `ids`."""
    tokens = sum(sum(rows[q]["new_tokens"]) for q in ids)
    return tokens / sum(sum(rows[q]["wall_time"]) for q in ids), tokens / sum(sum(rows[q]["decoding_steps"]) for q in ids)


def halves(ids: list[int]) -> list[tuple[str, list[int]]]:
    """The first and the second half of a run's question ids, in file (id) order."""
    ids = sorted(ids)
    half = len(ids) // 2
    return [("first half", ids[:half]), ("second half", ids[half:])]


def main(archive: str) -> None:
    tree, suffix = answers(archive, "oneiro-tree"), answers(archive, "oneiro-suffix")
    ids = sorted(tree)
    parts = halves(ids)
    turns = {q: len(tree[q]["new_tokens"]) for q in ids}
    if len(set(turns.values())) > 1:
        parts += [(f"{n}-turn questions", [q for q in ids if turns[q] == n]) for n in sorted(set(turns.values()))]
    for name, part in parts:
        (rate_t, tau_t), (rate_s, tau_s) = pooled(tree, part), pooled(suffix, part)
        print(f"{name} ({len(part)} questions): oneiro-suffix {rate_s / rate_t:.2f}x oneiro-tree, "
              f"tau {tau_s:.2f} against {tau_t:.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
