"""A large batch on a CPU: batched speculative decoding against batched greedy on the same kernels.

Where t(k, B) grows about linearly in k * B the cost model must stop drafting, and the batch must then decode
about as fast as plain batched greedy (`cpu_kernels`, the same kernels). A SmolLM2-135M-shaped Llama with random
weights (no download, `batch_compaction_cost.smollm2_shaped_target`), float32, B left-padded prompts of 64 columns; plain batched greedy and `generate` with a
fresh drafter (chain and tree settings), interleaved, `--repeats` times each after a warm-up. Prints one JSON object
with each method's median seconds, their ratio to greedy's, and what was drafted.

    python scripts/batch_vs_greedy_cpu.py --rows 32 --new 16 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from batch_compaction_cost import smollm2_shaped_target  # scripts/ is on sys.path when a script runs

from oneiro_hf import OneiroDrafter, cpu_kernels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=32)
    parser.add_argument("--new", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    model = smollm2_shaped_target()
    drafter = OneiroDrafter.from_target(model)
    ids = torch.randint(3, 1000, (args.rows, 64))
    ids[1:, : 8] = 0
    mask = (ids != 0).long()

    def greedy() -> torch.Tensor:
        with torch.no_grad(), cpu_kernels(model):
            return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.new, do_sample=False)

    def drafted(tree: bool) -> torch.Tensor:
        with torch.no_grad():
            return model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=args.new, do_sample=False,
                                  assistant_model=drafter, oneiro_tree=tree)

    methods = {"greedy": greedy, "chain": lambda: drafted(False), "tree": lambda: drafted(True)}
    reference = greedy()
    for name in ("chain", "tree"):  # warm-up: the first passes at this batch size teach the cost model t(k, B)
        assert torch.equal(methods[name](), reference)
    times: dict[str, list[float]] = {name: [] for name in methods}
    drafted_tokens = {"chain": 0, "tree": 0}
    for _ in range(args.repeats):
        for name, run in methods.items():
            started = time.perf_counter()
            out = run()
            times[name].append(time.perf_counter() - started)
            assert torch.equal(out, reference)
            if name != "greedy":
                drafted_tokens[name] += drafter.last_stats.drafted_tokens
    medians = {name: statistics.median(values) for name, values in times.items()}
    print(json.dumps({
        "rows": args.rows, "new": args.new, "threads": torch.get_num_threads(), "seconds": times,
        "median_s": medians, "over_greedy": {n: medians[n] / medians["greedy"] for n in ("chain", "tree")},
        "drafted_tokens_after_warmup": drafted_tokens,
        "t_k_B": {str(k): v for k, v in sorted(drafter.policy_state.verify_batch_s.get(args.rows, {}).items())},
    }, indent=2))


if __name__ == "__main__":
    main()
