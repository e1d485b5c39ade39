"""The target's verification latency t(k) for the benchmark: where a run finds it, and measuring it."""

from __future__ import annotations

from pathlib import Path


def default_profile_path(target_label: str, device: str, dtype: str) -> Path:
    """Where `oneiro-bench profile` saves, and a run looks for, the target's t(k) profile."""
    from ..reference_models import default_cache_dir

    return default_cache_dir() / "latency" / f"{target_label}-{device.split(':')[0]}-{dtype}.json"


def measure_profile(target: str, target_label: str, out: Path, device: str, dtype: str, max_k: int,
                    context_len: int, repeats: int, drafter: str | None = None,
                    drafter_desc: str | None = None, batch_sizes: tuple[int, ...] = ()) -> dict:
    """Load the target, measure t(k) for k = 1..max_k after context_len cached tokens, save it to `out`.

    Measured twice: on oneiro-hf's kernels (the top-level "t1_s"/"ratios", which the drafters' cost model reads)
    and on transformers' stock kernels (under "stock"), so that a benchmark prices each method on the kernels it
    ran; "kernel_speedup_t1" is stock t(1) / oneiro t(1). With `drafter` (a loader value: "fresh" or a directory),
    also that drafter's call as a share of t(1) ("drafter_step_ratio", `latency.profile_drafter_step`), which
    seeds the cost model's price of a drafter call and prices the calls in `oneiro-bench breakdown`. With
    `batch_sizes`, also t(k, B) on both kernel sets (`latency.profile_batch_latency`: "batch" and
    "batch_t1_per_row", at the top level and under "stock"), the cost of a batched pass for batched drafting."""
    import torch

    from .. import loading
    from ..latency import profile_batch_latency, profile_verification_latency, save_profile

    model, _, _ = loading.load_target_and_drafter(target, None, dtype, needs_drafter=False,
                                                  device=device)
    step = None
    if drafter is not None:
        from ..latency import profile_drafter_step

        step = profile_drafter_step(loading.load_drafter(model, drafter), context_len)
        step["drafter"] = drafter_desc or drafter
    ks = tuple(range(1, max_k + 1))
    profile = profile_verification_latency(model, ks, context_len, repeats)
    stock = profile_verification_latency(model, ks, context_len, repeats, stock=True)
    if batch_sizes:
        profile.update(profile_batch_latency(model, batch_sizes, ks, context_len, repeats))
        stock.update(profile_batch_latency(model, batch_sizes, ks, context_len, repeats, stock=True))
    profile.update(target=target_label, threads=torch.get_num_threads(), stock=stock,
                   kernel_speedup_t1=stock["t1_s"] / profile["t1_s"])
    if step is not None:
        profile.update(drafter=step["drafter"], drafter_step_s=step["drafter_step_s"],
                       drafter_step_ratio=step["drafter_step_ratio"])
    save_profile(profile, out)
    return profile
