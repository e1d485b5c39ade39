"""Runs one vLLM engine in its own process (vLLM starts worker processes and keeps global state, so each
configuration gets a fresh interpreter): `python vllm_worker.py REQUEST.json` prints `RESULT {json}`.

REQUEST: target (model dir), draft (exported folder or null), k, dtype, prompts (token id lists), runs (a list of
SamplingParams keyword dicts, run one after another). RESULT: per run, the output token ids and the speculative
decoding counters vLLM's metrics gained during that run."""

from __future__ import annotations

import json
import sys

from oneiro_hf.serving.measure import counter_difference, spec_counters


def main(path: str) -> None:
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
    before = spec_counters(llm)
    for params in request["runs"]:
        outputs = llm.generate(prompts, SamplingParams(**params), use_tqdm=False)
        after = spec_counters(llm)
        runs.append({"tokens": [list(o.outputs[0].token_ids) for o in outputs],
                     "spec": counter_difference(after, before)})
        before = after
    print("RESULT " + json.dumps({"runs": runs}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
