"""The target's verification latency t(k) for the benchmark: where a run finds it, and measuring it."""

from __future__ import annotations

from pathlib import Path


def default_profile_path(target_label: str, device: str, dtype: str) -> Path:
    """Where `oneiro-bench profile` saves, and a run looks for, the target's t(k) profile."""
    from ..reference_models import default_cache_dir

    return default_cache_dir() / "latency" / f"{target_label}-{device.split(':')[0]}-{dtype}.json"



def measure_profile(target: str, target_label: str, out: Path, device: str, dtype: str, max_k: int,
                    context_len: int, repeats: int) -> dict:
    """Load the target, measure t(k) for k = 1..max_k after context_len cached tokens, save it to `out`.

    Measured twice: on oneiro-hf's kernels (the top-level "t1_s"/"ratios", which the drafters' cost model reads)
    and on transformers' stock kernels (under "stock"), so that a benchmark prices each method on the kernels it
    ran; "kernel_speedup_t1" is stock t(1) / oneiro t(1)."""
    import torch

    from .. import loading
    from ..latency import profile_verification_latency, save_profile

    model, _, _ = loading.load_target_and_drafter(target, None, dtype, needs_drafter=False,
                                                  device=device)
    ks = tuple(range(1, max_k + 1))
    profile = profile_verification_latency(model, ks, context_len, repeats)
    stock = profile_verification_latency(model, ks, context_len, repeats, stock=True)
    profile.update(target=target_label, threads=torch.get_num_threads(), stock=stock,
                   kernel_speedup_t1=stock["t1_s"] / profile["t1_s"])
    save_profile(profile, out)
    return profile
