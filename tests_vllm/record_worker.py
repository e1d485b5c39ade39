"""Records what the oneiro vLLM module computes inside a real vLLM engine: `python record_worker.py TARGET FOLDER
PROMPT_IDS_JSON OUT.pt` runs one greedy request with the exported drafter and saves, from the engine's worker
process, the first call of each of the module's three entry points: `combine_hidden_states` (the target's states
vLLM hands the drafter, and their fusion part), `forward` (token ids, positions, the predicted states and the
recurrent state part) and `compute_logits`. test_vllm_module.py feeds the same target states to the drafter in
transformers and compares."""

from __future__ import annotations

import json
import sys


def install_recorder(worker, out_path: str) -> bool:
    """Runs in vLLM's worker process: wrap the draft model's entry points to keep their first call's tensors,
    and save them once compute_logits has run."""
    import torch

    model = worker.model_runner.drafter.model
    seen: dict[str, torch.Tensor] = {}

    def keep(prefix: str, **tensors: torch.Tensor) -> None:
        if not any(name.startswith(prefix) for name in seen):
            seen.update({f"{prefix}.{k}": v.detach().clone().cpu() for k, v in tensors.items()})

    combine, forward, logits = model.combine_hidden_states, model.forward, model.compute_logits

    def recorded_combine(hidden_states):
        out = combine(hidden_states)
        keep("combine", aux=hidden_states, out=out)
        return out

    def recorded_forward(input_ids, positions, hidden_states, inputs_embeds=None):
        predicted, recurrent = forward(input_ids, positions, hidden_states, inputs_embeds)
        keep("forward", input_ids=input_ids, positions=positions, hidden_states=hidden_states,
             predicted=predicted, recurrent=recurrent)
        return predicted, recurrent

    def recorded_logits(hidden_states):
        out = logits(hidden_states)
        keep("logits", hidden_states=hidden_states, out=out)
        if not any(name.startswith("saved") for name in seen):
            seen["saved"] = torch.ones(1)
            torch.save(dict(seen), out_path)
        return out

    model.combine_hidden_states, model.forward, model.compute_logits = recorded_combine, recorded_forward, \
        recorded_logits
    return True


def main(target: str, folder: str, prompt_json: str, out_path: str) -> None:
    import os

    os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # collective_rpc sends install_recorder by pickle
    from vllm import LLM, SamplingParams

    llm = LLM(model=target, speculative_config={"method": "eagle3", "model": folder, "num_speculative_tokens": 3},
              dtype="float32", enforce_eager=True, max_model_len=512, seed=0, skip_tokenizer_init=True,
              enable_prefix_caching=False)
    assert llm.collective_rpc(install_recorder, args=(out_path,)) == [True]
    llm.generate([{"prompt_token_ids": json.loads(prompt_json)}],
                 SamplingParams(temperature=0.0, max_tokens=4, detokenize=False), use_tqdm=False)
    print("RECORDED", out_path, flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:5])
