"""Runs one vLLM engine in its own process (vLLM starts worker processes and keeps global state, so each
configuration gets a fresh interpreter): `python vllm_worker.py REQUEST.json` prints `RESULT {json}`.

REQUEST: target (model dir), draft (exported folder or null), k, dtype, prompts (token id lists), runs (a list of
SamplingParams keyword dicts, run one after another). RESULT: per run, the output token ids and the speculative
decoding counters vLLM's metrics gained during that run, and for a folder with a draft hook (exported with
`--hybrid` or `--step-profile`) what the hook did: the rows whose drafts the lookup replaced, the draft tokens the
pricer cut and the drafter calls it skipped (read from the engine's worker process)."""

from __future__ import annotations

import json
import sys

from oneiro_hf.serving.measure import counter_difference, spec_counters


def hook_counts(worker) -> dict[str, int]:
    """Runs in vLLM's worker process: the draft hook's counts so far (empty: the folder has no hook)."""
    model = worker.model_runner.drafter.model
    lookup, pricer = getattr(model, "lookup", None), getattr(model, "pricer", None)
    counts = {} if lookup is None else {"lookup_rows_replaced": lookup.rows_replaced}
    if pricer is not None:
        counts.update(drafts_cut=pricer.drafts_cut, calls_skipped=pricer.calls_skipped)
    return counts


def main(path: str) -> None:
    import os

    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc sends hook_counts by pickle
    from vllm import LLM, SamplingParams

    with open(path, encoding="utf-8") as handle:
        request = json.load(handle)
    spec = None
    if request.get("draft"):
        spec = {"method": "eagle3", "model": request["draft"], "num_speculative_tokens": request["k"]}
    llm = LLM(model=request["target"], speculative_config=spec, dtype=request.get("dtype", "float32"),
              enforce_eager=True, max_model_len=1024, seed=0, disable_log_stats=False)
    prompts = [{"prompt_token_ids": ids} for ids in request["prompts"]]
    runs = []
    before, hooked = spec_counters(llm), llm.collective_rpc(hook_counts)[0] if spec else {}
    for params in request["runs"]:
        outputs = llm.generate(prompts, SamplingParams(**params), use_tqdm=False)
        after = spec_counters(llm)
        runs.append({"tokens": [list(o.outputs[0].token_ids) for o in outputs],
                     "spec": counter_difference(after, before)})
        before = after
        if hooked:
            now = llm.collective_rpc(hook_counts)[0]
            runs[-1].update({name: now[name] - hooked[name] for name in now})
            hooked = now
    print("RESULT " + json.dumps({"runs": runs}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
