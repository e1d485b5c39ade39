"""The target's verification latency t(k) for the benchmark: where a run finds it, measuring it, and the H200
profile recorded on a lent GPU (`--pin-profile h200`, `breakdown --latency-profile h200`)."""

from __future__ import annotations

import platform
from pathlib import Path

# t(k)/t(1) measured on one H200 for a SmolLM2-135M-shaped target in bf16 with 512 cached tokens (docs/gpu.md,
# docs/measurements/h200_latency_profile.json); k between and beyond those measured reads the nearest one below.
H200_RATIOS: dict[int, float] = {1: 1.0, 2: 1.167, 3: 1.155, 4: 1.159, 6: 1.177, 8: 1.169, 12: 1.169, 16: 1.169}
# ASSUMED, not a recorded measurement: one latent drafter step of the SmolLM2 drafter on the H200, in t(1) of its
# target. The only raw record (drafter_step_ratio 2.04) predates a fix to the step; 0.15-0.18 is what the lease's
# log reported afterwards (docs/gpu.md). The next GPU lease records it (`scripts/device.sh profiles`).
H200_DRAFTER_CALL_RATIO = 0.18
# every modelled H200 figure rests on these; `assumptions` travels with the profile into breakdowns and reports.
# A breakdown of a run made without --pin-profile h200 swaps H200_PINNED for H200_NOT_PINNED (cli.h200_assumptions).
H200_PINNED = "draft and tree decisions pinned to this profile (--pin-profile h200), acceptance from the CPU run's drafts"
H200_NOT_PINNED = ("draft and tree decisions NOT pinned: the run chose them from this CPU's own t(k) (no --pin-profile "
                   "h200), so the H200 profile prices passes it did not choose; acceptance from the CPU run's drafts")
H200_ASSUMPTIONS = (
    "t(k)/t(1) measured on one H200 for a SmolLM2-135M-shaped target, bf16, 512 cached tokens; Gemma reuses it",
    "drafter call priced at 0.18 t(1): assumed (no raw record after the step's fix)",
    H200_PINNED,
    "not modelled: the decoding loop's own overhead, sampling, kernel launch and synchronisation beyond t(k)",
)
H200_PROFILE = {"t1_s": 0.02004, "ratios": H200_RATIOS, "drafter_step_ratio": H200_DRAFTER_CALL_RATIO,
                "drafter_step_ratio_assumed": True, "assumptions": list(H200_ASSUMPTIONS),
                "device": "NVIDIA H200", "dtype": "torch.bfloat16", "context_len": 512}


def default_profile_path(target_label: str, device: str, dtype: str) -> Path:
    """Where `oneiro-bench profile` saves, and a run looks for, the target's t(k) profile."""
    from ..storage.reference_models import default_cache_dir

    return default_cache_dir() / "latency" / f"{target_label}-{device.split(':')[0]}-{dtype}.json"


def measure_profile(target: str, target_label: str, out: Path, device: str, dtype: str, max_k: int,
                    context_len: int, repeats: int, drafter: str | None = None,
                    drafter_desc: str | None = None, batch_sizes: tuple[int, ...] = (),
                    max_memory: float | None = None) -> dict:
    """Load the target, measure t(k) for k = 1..max_k after context_len cached tokens, save it to `out`.

    Measured twice: on oneiro-hf's kernels (the top-level "t1_s"/"ratios", which the drafters' cost model reads)
    and on transformers' stock kernels (under "stock"), so that a benchmark prices each method on the kernels it
    ran; "kernel_speedup_t1" is stock t(1) / oneiro t(1). With `drafter` (a loader value: "fresh" or a directory),
    also that drafter's call as a share of t(1) ("drafter_step_ratio", `latency.profile_drafter_step`), which
    seeds the cost model's price of a drafter call and prices the calls in `oneiro-bench breakdown`. `max_memory`
    caps the prepacked copies (the setting `prepack_max_memory`). Memory, in bytes: "weights_bytes" (the target's
    own), "rss_after_load_bytes", "load_peak_rss_bytes" (loading's transient peak) and "peak_rss_bytes" (from
    "peak_rss_from", normally after loading: target, copies, drafter and the passes). With `batch_sizes`, also t(k, B)
    on both kernel sets (`latency.profile_batch_latency`: "batch" and "batch_t1_per_row", at the top level and under
    "stock"), the cost of a batched pass for batched drafting."""
    import torch

    from .. import loading
    from ..drafting.latency import profile_batch_latency, profile_verification_latency, save_profile
    from ..kernels.prepacked_linear import parameter_bytes

    model, _, _ = loading.load_target_and_drafter(target, None, dtype, needs_drafter=False,
                                                  device=device)
    loaded_rss, load_peak = resident_bytes(), peak_rss_bytes()
    after_load = reset_peak_rss()
    step = None
    if drafter is not None:
        from ..drafting.latency import profile_drafter_step

        step = profile_drafter_step(loading.load_drafter(model, drafter), context_len)
        step["drafter"] = drafter_desc or drafter
    ks = tuple(range(1, max_k + 1))
    profile = profile_verification_latency(model, ks, context_len, repeats, max_memory=max_memory)
    stock = profile_verification_latency(model, ks, context_len, repeats, stock=True)
    if batch_sizes:
        profile.update(profile_batch_latency(model, batch_sizes, ks, context_len, repeats))
        stock.update(profile_batch_latency(model, batch_sizes, ks, context_len, repeats, stock=True))
    profile.update(target=target_label, threads=torch.get_num_threads(), stock=stock, cpu=cpu_model(),
                   kernel_speedup_t1=stock["t1_s"] / profile["t1_s"])
    profile.update(weights_bytes=parameter_bytes(model), rss_after_load_bytes=loaded_rss, load_peak_rss_bytes=load_peak,
                   peak_rss_bytes=peak_rss_bytes(), peak_rss_from="after loading" if after_load else "process start")
    if step is not None:
        profile.update(drafter=step["drafter"], drafter_step_s=step["drafter_step_s"],
                       drafter_step_ratio=step["drafter_step_ratio"])
    save_profile(profile, out)
    return profile


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else `platform.processor()`); "" when unknown."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def resident_bytes(field: str = "VmRSS") -> int | None:
    """This process's resident memory now ("VmRSS") or its peak ("VmHWM") in bytes, from /proc (Linux); None
    elsewhere."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Restart the peak-memory count from the current resident memory (Linux: /proc/self/clear_refs), so the peak
    that follows leaves out loading: transformers reads the weights through a memory-mapped file, whose pages count
    as resident while it copies them (a float32 Qwen2.5-Coder-1.5B peaked at 2.07x its weights while loading, 1.06x
    after). False where that is not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """This process's peak resident memory since the last `reset_peak_rss` (or since it started), in bytes."""
    peak = resident_bytes("VmHWM")
    if peak is not None:
        return peak
    import resource
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
