"""GPU check (run on a CUDA machine): losslessness in bf16/fp32 on CUDA for tiny random targets, and
the verification-latency profile and drafter step cost for real-sized (random-weight) targets.

Usage: python scripts/device_check.py OUT_DIR. Speed claims need real weights; this script only
measures what does not depend on them (latency shapes, drafter overhead, device/dtype handling).
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

import torch

from oneiro_hf import OneiroDrafter
from oneiro_hf.latency import profile_verification_latency

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "device_out")
OUT.mkdir(parents=True, exist_ok=True)
DEV = "cuda" if torch.cuda.is_available() else "cpu"
results: dict = {"torch": torch.__version__, "device": torch.cuda.get_device_name(0) if DEV == "cuda" else "cpu"}


def tiny(kind: str):
    from transformers import (
        Gemma3ForCausalLM,
        Gemma3TextConfig,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    common = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2}
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(**common))
    if kind == "qwen2":
        return Qwen2ForCausalLM(Qwen2Config(**common))
    return Gemma3ForCausalLM(Gemma3TextConfig(**common, head_dim=16, sliding_window=8,
                                              layer_types=["sliding_attention", "full_attention"] * 2))


def check_lossless() -> None:
    out = {}
    for dtype in (torch.float32, torch.bfloat16):
        for kind in ("llama", "qwen2", "gemma3"):
            torch.manual_seed(0)
            model = tiny(kind).to(DEV, dtype).eval()
            drafter = OneiroDrafter.from_target(model, interval=(2, 4))
            assert next(drafter.parameters()).device.type == DEV
            assert next(drafter.parameters()).dtype == dtype
            ok, drafted = 0, 0
            for seed in range(6):
                g = torch.Generator().manual_seed(seed)
                ids = torch.randint(0, 256, (1, 16), generator=g)
                if seed % 2:
                    ids = ids[:, :6].repeat(1, 4)
                ids = ids.to(DEV)
                ref = model.generate(ids, max_new_tokens=40, do_sample=False)
                for mode in ("latent", "lookup", "hybrid"):
                    res = model.generate(ids, max_new_tokens=40, do_sample=False, assistant_model=drafter,
                                         oneiro_mode=mode, oneiro_cost_aware=False)
                    ok += int(torch.equal(res, ref))
                    drafted += drafter.last_stats.drafted_tokens
            torch.manual_seed(0)
            sampled = model.generate(ids, max_new_tokens=20, do_sample=True, top_k=10, assistant_model=drafter,
                                     oneiro_cost_aware=False)
            out[f"{kind}-{dtype}"] = {"identical": f"{ok}/18", "drafted": drafted,
                                      "sampled_len": int(sampled.shape[1])}
    results["lossless_cuda"] = out


def profile_real_shapes() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    shapes = {
        "smollm2-135m-shape": (LlamaForCausalLM, LlamaConfig(
            vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
            num_key_value_heads=3, tie_word_embeddings=True)),
        "qwen3-8b-shape": (Qwen3ForCausalLM, Qwen3Config(
            vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
            num_attention_heads=32, num_key_value_heads=8, head_dim=128)),
    }
    for name, (cls, cfg) in shapes.items():
        with torch.device(DEV):
            model = cls(cfg).to(torch.bfloat16).eval()
        prof = profile_verification_latency(model, ks=(1, 2, 3, 4, 6, 8, 12, 16), context_len=512, repeats=15)
        drafter = OneiroDrafter.from_target(model, draft_vocab_ids=torch.arange(32768))
        from oneiro_hf.kv_cache import DrafterKVCache

        cache = DrafterKVCache()
        states = torch.randn(1, 512, cfg.hidden_size, device=DEV, dtype=torch.bfloat16)
        ids = torch.randint(0, 1000, (1, 512), device=DEV)
        pos = torch.arange(1, 513, device=DEV)[None]
        with torch.no_grad():
            drafter.transition(states, ids, pos, cache)
            times = []
            for i in range(30):
                torch.cuda.synchronize() if DEV == "cuda" else None
                t = time.perf_counter()
                s = drafter.transition(states[:, -1:], ids[:, -1:], torch.tensor([[513 + i]], device=DEV), cache)
                drafter.readout_logits(s).argmax(-1).item()
                times.append(time.perf_counter() - t)
        times.sort()
        prof["drafter_step_s"] = times[len(times) // 2]
        prof["drafter_step_ratio"] = prof["drafter_step_s"] / prof["t1_s"]
        results[name] = prof
        del model, drafter
        torch.cuda.empty_cache() if DEV == "cuda" else None


for fn in (profile_real_shapes,) if DEV == "cuda" else (check_lossless,):
    try:
        start = time.time()
        fn()
        results[fn.__name__ + "_s"] = round(time.time() - start, 1)
    except Exception:  # noqa: BLE001 - a device run must report every failure, not stop at the first
        results[fn.__name__ + "_error"] = traceback.format_exc()
(OUT / "device_check.json").write_text(json.dumps(results, indent=2, default=str))
print(json.dumps(results, indent=2, default=str))
