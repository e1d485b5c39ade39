"""Measures the target's verification latency t(k) on this hardware, for the cost-aware draft length.

A k-token verification does not cost k times a 1-token step, and the shape of t(k) depends on the
hardware: on a 2-core CPU t(2..3) can cost more than t(4..8), on a GPU t(k) is nearly flat for small k.
The profile is short to measure and can be saved as JSON and reused.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import torch
from transformers import DynamicCache

from ..compat import cache_keyword
from ..kernels.cpu import STOCK, cpu_kernels
from ..kernels.prepacked_linear import applies, prepacked_linears, thresholds
from ..targets import text_config


@torch.no_grad()
def profile_verification_latency(
    model, ks: tuple[int, ...] = tuple(range(1, 17)), context_len: int = 200, repeats: int = 7, prepacked: bool = True,
    stock: bool = False, max_memory: float | None = None,
) -> dict:
    """Median seconds of one cached target forward over k new tokens, after `context_len` cached ones.

    Returns {"t1_s": seconds for k=1, "ratios": {k: t(k)/t(1)}, "device", "dtype", "kernels", "exact"}. The
    ks are interleaved over the repeats, so a noisy machine biases them alike. Measured on the kernels a drafter's
    generate call runs (`cpu_kernels`; prepacked linears unless `prepacked` is False, for a drafter whose
    `prepack_cpu_weights` is off), with "kernels" naming them and, with prepacked linears on a CPU,
    "prepacked_min_rows" (`prepacked_linear.thresholds`, None for never). `stock=True` measures transformers'
    own kernels instead (kernels "stock"): the t(k) of plain generate and transformers' assisted decoding.
    `max_memory` caps the prepacked copies as the setting `prepack_max_memory` does (saved as "prepack_max_memory").
    """
    if stock:
        return {**_profile(model, ks, context_len, repeats), "kernels": STOCK}
    with cpu_kernels(model, prepacked, max_memory) as kernels:
        profile = _profile(model, ks, context_len, repeats)
    profile["kernels"] = str(kernels)
    profile["exact"] = kernels.exact  # each row of a pass has a one-token step's bits (cpu_kernels)
    if max_memory is not None:
        profile["prepack_max_memory"] = max_memory
    if prepacked and applies(model):  # the rows from which each weight shape ran prepacked (None: never)
        profile["prepacked_min_rows"] = thresholds()
    return profile


def profile_on_kernels(profile: dict, kernels: str) -> dict:
    """The part of a saved profile measured on `kernels` ("stock", or anything else for oneiro-hf's own): a profile
    from `oneiro-bench profile` carries the stock one under "stock"; a profile without it answers for both."""
    if kernels == STOCK and isinstance(profile.get("stock"), dict):
        return profile["stock"]
    return profile


def _profile(model, ks: tuple[int, ...], context_len: int, repeats: int) -> dict:
    param = next(model.parameters())
    part = _batch_profile(model, (1,), ks, context_len, repeats)[1]
    return {**part, "device": str(param.device), "dtype": str(param.dtype), "context_len": context_len}


def _batch_profile(model, batch_sizes: tuple[int, ...], ks: tuple[int, ...], context_len: int,
                   repeats: int) -> dict[int, dict]:
    """{B: {"t1_s": median seconds of a pass adding 1 token to each of B rows, "ratios": {k: t(k, B) / t(1, B)}}}.

    Every B has its own cache of B rows x `context_len` random tokens (full rows: no padding); each round times
    every (B, k) once, so a noisy machine biases them alike; the first round is a warm-up."""
    param = next(model.parameters())
    vocab = text_config(model).vocab_size
    gen = torch.Generator().manual_seed(0)
    keyword = cache_keyword(type(model))  # `cache`, or `past_key_values` on older transformers
    caches = {}
    for b in batch_sizes:
        caches[b] = DynamicCache(config=model.config)
        model(torch.randint(0, vocab, (b, context_len), generator=gen).to(param.device), **{keyword: caches[b]},
              use_cache=True)
    times: dict[tuple[int, int], list[float]] = {(b, k): [] for b in batch_sizes for k in ks}
    for _ in range(repeats + 1):  # first round is a warm-up
        for (b, k), spent in times.items():
            new = torch.randint(0, vocab, (b, k), generator=gen).to(param.device)
            if param.device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            model(new, **{keyword: caches[b]}, use_cache=True)
            if param.device.type == "cuda":
                torch.cuda.synchronize()
            spent.append(time.perf_counter() - start)
            caches[b].crop(-k)  # drop the k new tokens again
    result = {}
    for b in batch_sizes:
        med = {k: statistics.median(times[b, k][1:]) for k in ks}
        t1 = med[min(ks)]
        result[b] = {"t1_s": t1, "ratios": {int(k): v / t1 for k, v in med.items()}}
    return result


@torch.no_grad()
def profile_batch_latency(model, batch_sizes: tuple[int, ...], ks: tuple[int, ...] = tuple(range(1, 17)),
                          context_len: int = 200, repeats: int = 7, prepacked: bool = True,
                          stock: bool = False) -> dict:
    """t(k, B): median seconds of one cached target pass in which each of B rows adds k tokens after
    `context_len` cached ones, on the kernels `profile_verification_latency` measures (oneiro-hf's, or
    transformers' own with `stock=True`).

    Returns {"batch": {B: {"t1_s": seconds of a 1-token-per-row pass at batch B, "ratios": {k: t(k, B) /
    t(1, B)}}}, "batch_t1_per_row": {B: t1_s(B) / B}}: how a batched pass grows with k, and what batched greedy
    pays per row and token (below t(1, 1) where batching pays). A profile saved by `oneiro-bench profile
    --batch-sizes` carries both (JSON keys are strings)."""
    sizes = tuple(sorted({int(b) for b in batch_sizes}))
    if stock:
        batch = _batch_profile(model, sizes, ks, context_len, repeats)
    else:
        with cpu_kernels(model, prepacked):
            batch = _batch_profile(model, sizes, ks, context_len, repeats)
    return {"batch": batch, "batch_t1_per_row": {b: part["t1_s"] / b for b, part in batch.items()}}


@torch.no_grad()
def profile_drafter_step(drafter, context_len: int = 200, repeats: int = 15) -> dict:
    """Median seconds of one drafter call as drafting makes it: one `DrafterContext.step` over a speculative token
    with the readout of its state over the draft vocabulary, after a catch-up over `context_len` teacher-forced
    positions of its bound target (random tokens), on the kernels a drafter's generate runs: the target inside
    `cpu_kernels`, the drafter's own linears prepacked too (`prepacked_linears`), as `generate` runs them.

    Returns {"drafter_step_s", "drafter_step_ratio": drafter_step_s / t(1) of the target on the same kernels and
    context, "t1_s"}. `DraftPolicyState.load_profile` seeds the cost model's drafter price with the ratio, so the
    first call already prices a drafter call as this machine runs it (before, it assumed 0.1 t(1) until measured).
    """
    from .context import DrafterContext

    model = drafter.require_bound().model
    drafter.follow_target()
    param = next(model.parameters())
    vocab = text_config(model).vocab_size
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (1, context_len + 1), generator=gen).to(param.device)
    cache = DynamicCache(config=model.config)
    keyword = cache_keyword(type(model))
    prepack = drafter.config.prepack_cpu_weights
    with cpu_kernels(model, prepack), prepacked_linears(drafter, prepack):
        out = model(ids[:, :-1], **{keyword: cache}, use_cache=True,
                    output_hidden_states=drafter.hidden_states_request)
        context = DrafterContext(drafter, max_capacity=context_len + 64)
        context.observe_pass(out.hidden_states, slice(None))
        state = context.catch_up(ids)
        token = ids[:, -1:]

        def drafter_call() -> None:
            predicted = context.step(state, token)
            context.cache.crop(context.teacher_forced)
            drafter.readout_logits(predicted[:, -1]).float().softmax(-1).topk(4)

        def target_step() -> None:
            model(token, **{keyword: cache}, use_cache=True)
            cache.crop(-1)

        times: dict[str, list[float]] = {"drafter": [], "target": []}
        for i in range(repeats + 2):  # the first two rounds warm up
            for name, call in (("drafter", drafter_call), ("target", target_step)):
                if param.device.type == "cuda":
                    torch.cuda.synchronize()
                start = time.perf_counter()
                call()
                if param.device.type == "cuda":
                    torch.cuda.synchronize()
                if i >= 2:
                    times[name].append(time.perf_counter() - start)
    step, t1 = statistics.median(times["drafter"]), statistics.median(times["target"])
    return {"drafter_step_s": step, "drafter_step_ratio": step / t1, "t1_s": t1}


def save_profile(profile: dict, path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(profile, indent=2))


def load_profile(path: str | Path) -> dict:
    data = json.loads(Path(path).read_text())
    if "t1_s" not in data or "ratios" not in data:
        raise ValueError(f"{path} is not a latency profile (needs t1_s and ratios). Fix: re-run the profiler.")
    for part in (data, data.get("stock")):
        if not isinstance(part, dict):
            continue
        part["ratios"] = {int(k): float(v) for k, v in part["ratios"].items()}
        if isinstance(part.get("batch"), dict):  # `oneiro-bench profile --batch-sizes`: B and k keys as ints
            part["batch"] = {int(b): {"t1_s": float(entry["t1_s"]),
                                      "ratios": {int(k): float(v) for k, v in entry["ratios"].items()}}
                             for b, entry in part["batch"].items()}
            part["batch_t1_per_row"] = {b: entry["t1_s"] / b for b, entry in part["batch"].items()}
    return data


# t(2)/t(1) measured on the machines this project ran on lies between 0.85 and 1.6: a two-token pass much cheaper
# than a one-token pass means the one-token timings were disturbed (another job, memory being reclaimed)
MIN_PLAUSIBLE_T2_RATIO = 0.8
# oneiro-hf's one-token pass runs the same weights as the stock one (prepacked copies pay from a few rows on)
MAX_PLAUSIBLE_KERNEL_SLOWDOWN = 1.5


def profile_doubts(profile: dict) -> list[str]:
    """Why a t(k) profile may not describe its machine (an empty list when nothing is suspect), each sentence
    ending in the fix. A cost model fed a disturbed t(1) misprices every draft: a t(1) measured too high makes
    longer verifications look free."""
    doubts = []
    ratio = {int(k): v for k, v in profile.get("ratios", {}).items()}.get(2)
    if ratio is not None and ratio < MIN_PLAUSIBLE_T2_RATIO:
        doubts.append(f"t(2) = {ratio:.2f} t(1) on oneiro-hf's kernels: a two-token pass far cheaper than a one-token "
                      "one says the one-token timings were disturbed")
    stock = profile.get("stock")
    if isinstance(stock, dict) and stock.get("t1_s") and profile.get("t1_s"):
        slowdown = profile["t1_s"] / stock["t1_s"]
        if slowdown > MAX_PLAUSIBLE_KERNEL_SLOWDOWN:
            doubts.append(f"oneiro-hf's one-token pass measured {slowdown:.2f}x slower than the stock one, though both "
                          "run the same weights")
    if doubts:
        doubts[-1] += (". Fix: measure again with nothing else running, or pin a profile measured on an idle machine "
                       "(--latency-profile)")
    return doubts
