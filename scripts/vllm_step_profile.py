"""t(k, B) as vLLM pays it: the seconds of one engine step with B running requests and k draft tokens each
(the drafter's own work included), written as a latency profile for `oneiro-export vllm-schedule`.

`generate`'s profile (`oneiro-bench profile --batch-sizes`) prices oneiro-hf's kernels with the drafter apart; a
vLLM step with a draft model costs more than that (its proposer, its bookkeeping), so a schedule priced from it
drafts where vLLM loses throughput. This script measures the engine itself. Run with .venv-vllm and the CPU
environment of docs/serving.md:

    LD_PRELOAD=$PWD/.venv-vllm/lib/libiomp5.so VLLM_CPU_KVCACHE_SPACE=2 VLLM_CPU_OMP_THREADS_BIND=nobind \\
        OMP_NUM_THREADS=1 taskset -c 1 .venv-vllm/bin/python scripts/vllm_step_profile.py \\
        --questions ../shared/data/spec_bench/question.jsonl --out runs/vllm_steps.json
    oneiro-export vllm-schedule --profile runs/vllm_steps.json --acceptance <its "acceptance"> --max-k 3

One engine per k (k = 0: plain), each in its own process (`--worker`), in the order 0, 1, .., K, 0 so that a
change in the machine's load shows as two different plain figures. In each, B prompts at once generate a fixed
number of tokens (`ignore_eos`), stepped by hand (`LLMEngine.step`); a step counts while all B requests are
decoding (after their prefill, before the first finishes), and the median over repeats is kept, so a burst of
other work on the machine moves it little. The acceptance by position is the largest k's. Spec-Bench questions
serve as prompts only (evaluation data; nothing is trained on them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from oneiro_hf.serving.measure import counter_difference, spec_counters

ROOT = Path(__file__).resolve().parent.parent


def decoding_steps(engine, prompts: list[list[int]], tokens: int, tag: str) -> list[float]:
    """Seconds of each engine step during which every one of `prompts` was decoding."""
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True)
    for index, ids in enumerate(prompts):
        engine.add_request(f"{tag}-{index}", {"prompt_token_ids": ids}, params)
    started, seconds, last = set(), [], time.perf_counter()
    while engine.has_unfinished_requests():
        outputs = engine.step()
        now = time.perf_counter()
        if not outputs:
            continue
        all_decoding = len(started) == len(prompts)
        started.update(o.request_id for o in outputs if o.outputs and o.outputs[0].token_ids)
        if all_decoding and not any(o.finished for o in outputs):
            seconds.append(now - last)
        last = now
    return seconds


def worker(request_path: str) -> None:
    """One engine at one k: the median decoding step at each batch size; prints `RESULT {json}`."""
    from vllm import LLM, SamplingParams

    request = json.loads(Path(request_path).read_text())
    batches, prompts = request["batches"], request["prompts"]
    llm = LLM(model=request["target"], speculative_config=request["speculative_config"], dtype=request["dtype"],
              enforce_eager=not request.get("compiled"), max_model_len=2048, seed=0, disable_log_stats=False,
              max_num_seqs=max(batches))
    llm.generate([{"prompt_token_ids": prompts[0]}], SamplingParams(temperature=0.0, max_tokens=8),
                 use_tqdm=False)  # warm-up, not counted
    before = spec_counters(llm)
    steps, counts = {}, {}
    for rows in batches:
        samples = []
        for repeat in range(request["repeats"]):
            samples += decoding_steps(llm.llm_engine, prompts[:rows], request["tokens"], f"b{rows}r{repeat}")
        steps[rows], counts[rows] = statistics.median(samples), len(samples)
    print("RESULT " + json.dumps({"steps": steps, "counted": counts,
                                  "spec": counter_difference(spec_counters(llm), before)}), flush=True)


def run_worker(target: str, spec: dict | None, prompts: list[list[int]], args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        request = Path(tmp) / "request.json"
        request.write_text(json.dumps({"target": target, "speculative_config": spec, "dtype": args.dtype,
                                       "batches": args.batches, "tokens": args.tokens, "repeats": args.repeats,
                                       "prompts": prompts, "compiled": args.compiled}))
        done = subprocess.run([sys.executable, __file__, "--worker", str(request)], capture_output=True, text=True,
                              check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"vLLM step run failed ({spec}):\n{done.stderr[-4000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--questions", help="Spec-Bench question.jsonl (prompts only)")
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--drafter", default=str(ROOT / "drafters" / "smollm2-135m-instruct"))
    parser.add_argument("--k", type=int, default=3, help="measure k = 0..K draft tokens")
    parser.add_argument("--batches", default="1,2,4,8,16", help="batch sizes B")
    parser.add_argument("--tokens", type=int, default=40, help="tokens each request generates")
    parser.add_argument("--repeats", type=int, default=2, help="runs per batch size (their steps pooled)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--out", help="the profile (JSON)")
    parser.add_argument("--compiled", action="store_true",
                        help="keep vLLM's compiled graphs (a GPU, as it serves); default: enforce_eager (a CPU)")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    if not args.questions:
        raise SystemExit("--questions is required. Fix: pass Spec-Bench's question.jsonl.")
    args.batches = [int(b) for b in args.batches.split(",")]
    from transformers import AutoTokenizer

    from oneiro_hf import __version__
    from oneiro_hf.bench.answers import load_questions
    from oneiro_hf.bench.profile import cpu_model
    from oneiro_hf.bench.runner import weights_sha256
    from oneiro_hf.chat import encode_prompt
    from oneiro_hf.serving.schedule import step_profile
    from oneiro_hf.serving.vllm_export import export_for_vllm
    from oneiro_hf.storage.reference_models import fetch_reference_model

    target_dir = str(fetch_reference_model(args.target))
    tokenizer = AutoTokenizer.from_pretrained(target_dir)
    questions = load_questions(args.questions, per_category=2)  # 26: one mix of categories
    if len(questions) < max(args.batches):
        raise SystemExit(f"--batches {max(args.batches)} needs as many questions (have {len(questions)}).")
    prompts = [encode_prompt(tokenizer, q["turns"][0]) for q in questions[:max(args.batches)]]
    load_before = os.getloadavg()[0]
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = export_for_vllm(args.drafter, Path(tmp) / "drafter", args.target, args.k)
        for k in [*range(args.k + 1), 0]:
            spec = {"method": "eagle3", "model": str(folder), "num_speculative_tokens": k} if k else None
            result = run_worker(target_dir, spec, prompts, args)
            runs.append({"k": k, **result})
            print(f"k={k}: " + ", ".join(f"B={b} {s * 1000:.1f} ms" for b, s in result["steps"].items()), flush=True)
    steps: dict[int, dict[int, float]] = {b: {} for b in args.batches}
    for run in runs:
        for rows, seconds in run["steps"].items():
            steps[int(rows)].setdefault(run["k"], []).append(seconds)
    steps = {rows: {k: statistics.mean(v) for k, v in by_k.items()} for rows, by_k in steps.items()}
    largest = next(run for run in runs if run["k"] == args.k)["spec"]
    acceptance = [round(a / largest["drafts"], 4) for a in largest.get("accepted_per_position", [])]
    import vllm

    profile = {**step_profile(steps), "acceptance": acceptance, "runs": runs, "conditions": {
        "what": "vLLM engine steps with B decoding requests and k draft tokens each (k = 0: plain), median seconds",
        "cpu": f"{cpu_model()}, {os.cpu_count()} cores", "vllm": vllm.__version__, "oneiro_hf": __version__,
        "dtype": args.dtype, "enforce_eager": not args.compiled, "target": args.target,
        "drafter": os.path.relpath(args.drafter, ROOT), "drafter_weights_sha256": weights_sha256(args.drafter),
        "tokens": args.tokens, "repeats": args.repeats, "batches": args.batches, "order_of_k": [r["k"] for r in runs],
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "date": time.strftime("%Y-%m-%d %H:%M"),
        "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)]}}
    text = json.dumps(profile, indent=2) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    print(json.dumps({"steps": steps, "acceptance": acceptance}))


if __name__ == "__main__":
    main()
