"""Replay a run's greedy answers through two suffix-style drafters with no model: oneiro-hf's lookup and memory
branches, and SuffixDecoding's own (arctic-inference's `SuffixDecodingCache`, what vLLM's `suffix` method runs).
Each pass drafts a tree of at most `--nodes` tokens and an oracle verifier keeps its longest path that the answer
follows; the figure is the answer's tokens per pass. No pass is priced, so this compares what the two structures
draft, not their speed.

    make vllm-suffix   # arctic-inference, built once into the vLLM environment
    PYTHONPATH=. .venv-vllm/bin/python docs/benchmarks/suffix_memory/versus_arctic.py \\
        docs/benchmarks/suffix_memory/zen5_cli48_smollm2_bf16

writes `versus_arctic.json` into the run's folder. Both sides see the same things: the answers in file order, each
the earlier answers (oneiro-hf: `SuffixMemory`; arctic: its global response tree) and its own prompt and answer so
far (oneiro-hf: prompt lookup, `NgramIndex` over 1..4-grams with 3 continuations; arctic: its per-request prompt
tree, and the response in both trees). oneiro-hf's nodes are valued as `generate` values them (acceptance calibrated
from the replay's own verdicts, `engine.calibrate`) and the `--nodes` likeliest kept (`cost.choose_nodes`, no
prices); arctic drafts with its tree speculation at vLLM's defaults (`max_spec_factor` 1, `min_token_prob` 0.1)
and, as a second setting, with `max_spec_factor` 4 (longer drafts after short matches).
"""

from __future__ import annotations

import argparse
import json
from importlib import metadata
from pathlib import Path

from arctic_inference.suffix_decoding import SuffixDecodingCache
from replay import greedy_answers  # this folder's replay.py

from oneiro_hf.chat import encode_prompt
from oneiro_hf.drafting.build import add_lookup_branches, add_memory_branches
from oneiro_hf.drafting.cost import choose_nodes
from oneiro_hf.drafting.draft import Verdict
from oneiro_hf.drafting.engine import calibrate
from oneiro_hf.drafting.lookup import NgramIndex
from oneiro_hf.drafting.memory import SuffixMemory
from oneiro_hf.drafting.policy import DraftPolicyState
from oneiro_hf.drafting.tree import TokenTree

LOOKUP_BRANCHES = 3
ARCTIC_DEPTH = 24  # vLLM's default `suffix_decoding_max_tree_depth`


def accepted_path(tree: TokenTree, truth: list[int]) -> list[int]:
    """The nodes of `tree`'s longest path from the root that `truth` follows."""
    node, path = 0, []
    for token in truth:
        node = tree.children[node].get(token)
        if node is None:
            break
        path.append(node)
    return path


class Ours:
    """oneiro-hf's lookup and memory branches (either may be left out), as a tree generate drafts."""

    def __init__(self, nodes: int, lookup: bool, memory: bool) -> None:
        self.nodes, self.lookup, self.policy = nodes, lookup, DraftPolicyState()
        self.memory = SuffixMemory(1 << 30) if memory else None

    def answer(self, prompt: list[int], answer: list[int]) -> int:
        """Replay one answer; returns its passes."""
        own: dict = {}
        document = self.memory.open(prompt[:-1], own=own) if self.memory is not None else None
        written, position, passes = len(prompt) - 1, 0, 0
        index = NgramIndex(1, 4, keep_occurrences=LOOKUP_BRANCHES)  # extended as the answer grows, as generate's is
        while position < len(answer):
            sequence, truth = prompt + answer[:position], answer[position:]
            tree = TokenTree.with_root(sequence[-1])
            if self.lookup:
                index.extend(sequence[len(index.tokens):])
                add_lookup_branches(tree, index.continuations(self.nodes, LOOKUP_BRANCHES), min_ngram=1,
                                    policy=self.policy, eos_ids=set())
            if document is not None:
                self.memory.extend(document, sequence[written:], own)
                written = len(sequence)
                add_memory_branches(tree, self.memory, sequence[-self.memory.max_context:], max_depth=self.nodes,
                                    max_nodes=self.nodes, min_value=0.0, policy=self.policy, eos_ids=set(),
                                    exclude=own)
            tree = tree.keep(sorted({0, *choose_nodes(tree, None, self.nodes)}))
            path = accepted_path(tree, truth)
            calibrate(tree, Verdict(path, truth[: len(path) + 1], []), len(path) + 1, self.policy)
            position += len(path) + 1
            passes += 1
        if document is not None:
            self.memory.extend(document, (prompt + answer)[written:], own)
        return passes


class Arctic:
    """SuffixDecoding's cache: its prompt tree per request and its global tree of earlier responses."""

    def __init__(self, nodes: int, factor: float) -> None:
        self.nodes, self.factor, self.requests = nodes, factor, 0
        self.cache = SuffixDecodingCache(max_tree_depth=ARCTIC_DEPTH)

    def answer(self, prompt: list[int], answer: list[int]) -> int:
        request, self.requests = self.requests, self.requests + 1
        self.cache.start_request(request, prompt)
        position, passes = 0, 0
        while position < len(answer):
            sequence, truth = prompt + answer[:position], answer[position:]
            draft = self.cache.speculate(request, sequence, max_spec_tokens=self.nodes, max_spec_factor=self.factor,
                                         min_token_prob=0.1, use_tree_spec=True)
            tree, ids = TokenTree.with_root(sequence[-1]), [0]
            for token, parent in zip(draft.token_ids, draft.parents):
                ids.append(tree.add(ids[parent + 1], token, 1.0, "memory"))
            taken = len(accepted_path(tree, truth)) + 1
            self.cache.add_active_response(request, answer[position:position + taken])
            position += taken
            passes += 1
        self.cache.stop_request(request)
        return passes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a record folder with questions.jsonl, run_config.json, answers.tar.gz")
    parser.add_argument("--nodes", type=int, default=16, help="draft tokens per pass at most (default 16)")
    args = parser.parse_args()
    tokenizer, questions, rows = greedy_answers(args.run)
    drafters = {"oneiro lookup": Ours(args.nodes, True, False), "oneiro memory": Ours(args.nodes, False, True),
                "oneiro lookup and memory": Ours(args.nodes, True, True),
                "arctic, vLLM's defaults": Arctic(args.nodes, 1.0), "arctic, max_spec_factor 4": Arctic(args.nodes, 4.0)}
    passes, tokens = dict.fromkeys(drafters, 0), 0
    for row in rows:
        prompt = encode_prompt(tokenizer, questions[row["question_id"]]["turns"][0])
        answer = row["choices"][0]["output_ids"][0]
        for name, drafter in drafters.items():
            passes[name] += drafter.answer(prompt, answer)
        tokens += len(answer)
    result = {"run": args.run.name, "answers": "greedy (stock kernels)", "questions": len(rows), "tokens": tokens,
              "nodes": args.nodes, "arctic_inference": metadata.version("arctic-inference"),
              "tokens_per_pass": {name: round(tokens / count, 3) for name, count in passes.items()}}
    (args.run / "versus_arctic.json").write_text(json.dumps(result, indent=1) + "\n")
    for name, value in result["tokens_per_pass"].items():
        print(f"{name}: {value:.2f} tokens per pass")


if __name__ == "__main__":
    main()
