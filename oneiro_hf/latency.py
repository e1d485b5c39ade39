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

from .compat import cache_keyword
from .cpu_kernels import STOCK, cpu_kernels
from .prepacked_linear import applies, thresholds
from .targets import text_config


@torch.no_grad()
def profile_verification_latency(
    model, ks: tuple[int, ...] = tuple(range(1, 17)), context_len: int = 200, repeats: int = 7, prepacked: bool = True,
    stock: bool = False, max_memory: float | None = None,
) -> dict:
    """Median seconds of one cached target forward over k new tokens, after `context_len` cached ones.

    Returns {"t1_s": seconds for k=1, "ratios": {k: t(k)/t(1)}, "device": ..., "dtype": ..., "kernels": ...}. The
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
    vocab = text_config(model).vocab_size
    gen = torch.Generator().manual_seed(0)
    context = torch.randint(0, vocab, (1, context_len), generator=gen).to(param.device)
    cache = DynamicCache(config=model.config)
    keyword = cache_keyword(type(model))  # `cache`, or `past_key_values` on older transformers
    model(context, **{keyword: cache}, use_cache=True)
    times: dict[int, list[float]] = {k: [] for k in ks}
    for _ in range(repeats + 1):  # first round is a warm-up
        for k in ks:
            new = torch.randint(0, vocab, (1, k), generator=gen).to(param.device)
            if param.device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            model(new, **{keyword: cache}, use_cache=True)
            if param.device.type == "cuda":
                torch.cuda.synchronize()
            times[k].append(time.perf_counter() - start)
            cache.crop(-k)  # drop the k new tokens again
    med = {k: statistics.median(v[1:]) for k, v in times.items()}
    t1 = med[min(ks)]
    return {
        "t1_s": t1,
        "ratios": {int(k): v / t1 for k, v in med.items()},
        "device": str(param.device),
        "dtype": str(param.dtype),
        "context_len": context_len,
    }


@torch.no_grad()
def profile_drafter_step(drafter, context_len: int = 200, repeats: int = 15) -> dict:
    """Median seconds of one drafter call as drafting makes it: one `DrafterContext.step` over a speculative token
    with the readout of its state over the draft vocabulary, after a catch-up over `context_len` teacher-forced
    positions of its bound target (random tokens), on the kernels a drafter's generate runs the target on.

    Returns {"drafter_step_s", "drafter_step_ratio": drafter_step_s / t(1) of the target on the same kernels and
    context, "t1_s"}. `DraftPolicyState.load_profile` seeds the cost model's drafter price with the ratio, so the
    first call already prices a drafter call as this machine runs it (before, it assumed 0.1 t(1) until measured).
    """
    from .drafter_context import DrafterContext

    model = drafter.require_bound().model
    drafter.follow_target()
    param = next(model.parameters())
    vocab = text_config(model).vocab_size
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (1, context_len + 1), generator=gen).to(param.device)
    cache = DynamicCache(config=model.config)
    keyword = cache_keyword(type(model))
    with cpu_kernels(model, drafter.config.prepack_cpu_weights):
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
    data["ratios"] = {int(k): float(v) for k, v in data["ratios"].items()}
    if isinstance(data.get("stock"), dict):
        data["stock"]["ratios"] = {int(k): float(v) for k, v in data["stock"]["ratios"].items()}
    return data
