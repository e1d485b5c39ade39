"""Linear layers on a CPU on weights reordered once (oneDNN), where MKL's GEMM packs them again on every call.

`prepacked_linears(model)` runs a CPU model's `nn.Linear` layers that way inside a block (float32; bfloat16 and
float16 in their own dtype where the CPU has units for it; where it has none, on `half_linear`'s kernel over the
stored weights, no copy, or on float32 copies (`packed_dtype`) where that kernel cannot be built; every generate
call with a drafter, and `oneiro_hf.cpu_kernels`). From how many rows a layer runs prepacked is
measured, not assumed: `measured_min_rows` times both calls at `ROW_GRID` row counts once per weight shape and
thread count, and `choose_min_rows` picks the threshold (1: one-token steps too; shapes that never gain keep
F.linear and no copy). The copies cost as much memory as their weights (a float32 Qwen2.5-Coder-1.5B holds 6.2
GB in linear layers), so `max_copy_bytes` caps them, the layers that save the most time per byte
(`measured_saving`) first; they stay with the layer (weak references) until `release_packed(model)`
(`oneiro_hf.release_cpu_kernels`). Results differ from F.linear's by float32 rounding only. docs/design.md
("On a CPU, the weights are packed once, ...") gives the measurements.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

from . import half_linear

logger = logging.getLogger(__name__)

ROW_GRID = (1, 2, 3, 4, 6, 8, 16)  # row counts timed per weight shape (verification passes and small trees)
MIN_GAIN = 0.05  # summed over the row counts it would take, the prepacked call must save this much (ties: F.linear)
PACKED_FROM = (torch.float32, torch.bfloat16, torch.float16)  # parameter dtypes whose linears can run prepacked
NEVER = math.inf  # the threshold of a shape on which the prepacked call never gained
# per (out_features, in_features, has bias, torch threads, weight dtype): rows from which that shape runs prepacked,
# and the seconds the prepacked call saves per call summed over the timed row counts from there on
_min_rows: dict[tuple[int, int, bool, int, torch.dtype], tuple[float, float]] = {}
# per linear layer: (the weight it was made from: data pointer, version), the reordered weight
_packed: weakref.WeakKeyDictionary[torch.nn.Linear, tuple[tuple[int, int], torch.Tensor]] = weakref.WeakKeyDictionary()
# per target: blocks now running with prepacked linears, and the layers whose forward they replaced (with the row
# count from which each runs prepacked)
_users: weakref.WeakKeyDictionary[torch.nn.Module, tuple[int, dict]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()
# rules given by `decided_min_rows` and `every_row` blocks (the innermost that decides a layer applies; None passes it
# on): rows from which a layer runs prepacked, untimed
_rule: list[Callable[[torch.nn.Linear], float | None]] = []
# 16-bit weight shapes (`_shape`) that run `half_linear` because oneDNN's rows differ by row count (`run_rows_alone`)
_rows_alone: set[tuple[int, int, bool, int, torch.dtype]] = set()


def packed_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a weight of `dtype` is reordered in: its own where oneDNN has kernels for it on this CPU (float32
    always; bfloat16 and float16 on CPUs with their matrix units: avx512_bf16/AMX, avx512_fp16/AMX-FP16), float32
    otherwise, where torch's 16-bit linears grow dearer with every row of a pass (SmolLM2 in bfloat16 on an AVX2 CPU:
    8 tokens cost 4.5 times one) and a float32 copy does not."""
    if half_linear.has_units(dtype):
        return dtype
    return torch.float32


def applies(model: torch.nn.Module) -> bool:
    """Whether `model` gains from prepacked weights: float32, bfloat16 or float16 parameters on a CPU, and a torch
    with oneDNN."""
    param = next(model.parameters(), None)
    return (param is not None and param.device.type == "cpu" and param.dtype in PACKED_FROM
            and torch.backends.mkldnn.is_available())


def packed_weight(layer: torch.nn.Linear) -> torch.Tensor:
    """`layer`'s weight reordered for oneDNN (in `packed_dtype` of its dtype): made once, again only if the weight
    changed (assigned or in place). A 16-bit weight that `half_linear` runs is its own: no copy."""
    weight = layer.weight
    if half_linear.applies(weight.dtype) or runs_alone(layer):
        return weight.detach()
    key = (weight.data_ptr(), weight._version)
    entry = _packed.get(layer)
    if entry is None or entry[0] != key:
        source = weight.detach().to(packed_dtype(weight.dtype))
        entry = (key, torch.ops.mkldnn._reorder_linear_weight(source))
        _packed[layer] = entry
    return entry[1]


def prepacked_forward(layer: torch.nn.Linear, x: torch.Tensor, min_rows: float) -> torch.Tensor:
    """`layer(x)` for x (..., in_features): on the reordered weight from `min_rows` rows on (`measured_min_rows`
    finds it for the layer's shape), else F.linear. A 16-bit layer packed as float32 computes in float32 and
    rounds its output to its own dtype once, as its own kernel does after accumulating in float32. A 16-bit shape
    whose oneDNN rows differ by row count here (`run_rows_alone`) runs `half_linear` on its stored weight."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if (rows < min_rows or x.dtype != layer.weight.dtype or x.device.type != "cpu" or torch.is_grad_enabled()):
        return F.linear(x, layer.weight, layer.bias)
    flat = x.reshape(rows, x.shape[-1])
    if runs_alone(layer):
        out = half_linear.half_linear(flat, layer.weight, layer.bias)
    else:
        out = _linear_on_packed(flat, packed_weight(layer), layer.bias)
    return out.reshape(*x.shape[:-1], out.shape[-1])


def _shape(layer: torch.nn.Linear) -> tuple[int, int, bool, int, torch.dtype]:
    """What a kernel's choice of code depends on: the weight's shape and dtype, a bias, the thread count."""
    return (layer.out_features, layer.in_features, layer.bias is not None, torch.get_num_threads(),
            layer.weight.dtype)


def run_rows_alone(layers: list[torch.nn.Linear]) -> list[torch.nn.Linear]:
    """Run the 16-bit ones of `layers` (shapes `rows_agree` found oneDNN to round by row count on this CPU) on
    `half_linear` over their stored weights from now on in this process, at this thread count: its rows have the
    bits they have alone by construction, slower than oneDNN in passes of several rows where the CPU has 16-bit
    units. Their reordered copies are dropped. Returns the layers moved (none where the kernel cannot be built)."""
    moved = [layer for layer in layers if layer.weight.dtype in half_linear.DTYPES]
    if not moved or not half_linear.KERNEL.available():
        return []
    _rows_alone.update(_shape(layer) for layer in moved)
    for layer in moved:
        _packed.pop(layer, None)
    return moved


def runs_alone(layer: torch.nn.Linear) -> bool:
    """Whether `layer`'s shape was moved to `half_linear` by `run_rows_alone` (in this process, at this thread count).
    Asked on every prepacked call: with nothing moved (every CPU measured so far) it answers without building the key."""
    return bool(_rows_alone) and _shape(layer) in _rows_alone


def _linear_on_packed(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x (rows, in) @ weight.T + bias, weight reordered by `packed_weight`: (rows, out) in x's dtype."""
    if packed.dtype == x.dtype and half_linear.applies(x.dtype):
        return half_linear.half_linear(x, packed, bias)
    if packed.dtype != x.dtype:
        bias = None if bias is None else bias.to(packed.dtype)
        return _onednn_linear(x.to(packed.dtype), packed, bias).to(x.dtype)
    return _onednn_linear(x, packed, bias)


def _onednn_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """oneDNN's linear on a reordered weight, x (rows, in) -> (rows, out). One row runs as two (the row twice):
    oneDNN computes a single row on a matrix-vector kernel that sums in another order than its kernel for several
    rows (on an AVX-512 EPYC, float32 and bfloat16 alike), so a one-token step would round differently from the
    same row in a verification pass; from two rows on each row's bits do not depend on the row count
    (`rows_agree` checks it per shape)."""
    if x.shape[0] == 1:
        return torch.ops.mkldnn._linear_pointwise(x.expand(2, -1).contiguous(), packed, bias, "none", [], "")[:1]
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def _measured(layer: torch.nn.Linear) -> tuple[float, float]:
    """(row threshold, seconds saved per call summed over the timed row counts >= it) of `layer`'s shape on this
    CPU at the current thread count: timed once per weight shape in a process. Inside `decided_min_rows`: the
    block's rule, and a saving of 1 for a layer that runs prepacked (0 otherwise), nothing timed."""
    for rule in reversed(_rule):  # the innermost rule that decides this layer
        rows = rule(layer)
        if rows is not None:
            return float(rows), 0.0 if rows == NEVER else 1.0
    key = _shape(layer)
    if key not in _min_rows:
        start = time.perf_counter()
        times = _time_rows(layer)
        threshold = choose_min_rows(times)
        saved = sum(stock - packed for rows, (stock, packed) in times.items() if rows >= threshold)
        _min_rows[key] = (threshold, saved)
        logger.info("prepacked linear %dx%d (%d threads): from %s rows on (timed in %.2f s)", layer.out_features,
                    layer.in_features, key[3], threshold, time.perf_counter() - start)
    return _min_rows[key]


@contextmanager
def decided_min_rows(rule: Callable[[torch.nn.Linear], float | None]) -> Iterator[None]:
    """Inside the block, a layer runs prepacked from `rule(layer)` rows on (`NEVER`: not at all) instead of from the
    row count timed on this machine, so which kernels run, and with them float32 rounding, no longer depends on
    the machine's load (reproducible runs; the test suite). Under a memory cap the layers then count as saving
    alike, so the smallest go first. Blocks nest (the innermost rule applies); a `prepacked_linears` block already
    entered keeps its layers."""
    with _lock:
        _rule.append(rule)
    try:
        yield
    finally:
        with _lock:
            _rule.remove(rule)


@contextmanager
def every_row(model: torch.nn.Module) -> Iterator[None]:
    """Inside the block every linear layer of `model` that a `prepacked_linears` block entered inside it swaps in
    runs prepacked from one row on, untimed: oneDNN's prepacked call (a single row run as two, `_onednn_linear`)
    gives each row the same bits whatever the row count, where F.linear (MKL) computes one row differently from
    several, so one-token steps and verification passes agree row for row (`cpu_kernels(exact=True)`, which checks
    it per shape with `rows_agree`). Other models' layers keep their rules or timings."""
    layers = {id(m) for m in model.modules() if type(m) is torch.nn.Linear}
    with decided_min_rows(lambda layer: 1 if id(layer) in layers else None):
        yield


PROBE_ROWS = 40  # rows of the reference call `rows_agree` compares smaller calls with
PROBE_COUNTS = (1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 33)  # row counts it compares, at the start and further in
_agree: dict[tuple[int, int, bool, int, torch.dtype, bool, bool], bool] = {}


@torch.no_grad()
def rows_agree(layer: torch.nn.Linear) -> bool:
    """Whether `layer`, as it runs now (its prepacked forward inside a block, else F.linear), gives each input row
    the same bits whatever the row count of the call: every `PROBE_COUNTS` rows, taken at the start and further in
    from one random input of `PROBE_ROWS` rows, against that input's rows in one call. What an exact block
    (`cpu_kernels(exact=True)`) promises of its linears; kernels choose their code by row count, so it is checked
    once per weight shape, dtype, thread count and route in a process, not assumed."""
    key = (*_shape(layer), "forward" in vars(layer), runs_alone(layer))
    if key not in _agree:
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(PROBE_ROWS, layer.in_features, generator=generator).to(layer.weight.dtype)
        whole = layer(x)
        _agree[key] = all(torch.equal(layer(x[start:start + rows].clone()), whole[start:start + rows])
                          for rows in PROBE_COUNTS for start in {0, min(rows + 1, PROBE_ROWS - rows)})
    return _agree[key]


def measured_min_rows(layer: torch.nn.Linear) -> float:
    """From how many input rows `layer` runs faster on its prepacked weight than through F.linear, on this CPU at
    the current thread count: timed once per weight shape in a process (`choose_min_rows`), `NEVER` if not at all."""
    return _measured(layer)[0]


def measured_saving(layer: torch.nn.Linear) -> float:
    """Seconds `layer`'s prepacked call saves per call, summed over the timed row counts from its threshold on (0
    for a shape that never gains): what `max_copy_bytes` ranks layers by, per byte of weight."""
    threshold, saved = _measured(layer)
    return 0.0 if threshold == NEVER else saved


def copy_bytes(layer: torch.nn.Linear) -> int:
    """Bytes of the reordered copy of `layer`'s weight (as many as the weight's own; twice as many for a 16-bit
    weight copied as float32; none for one that `half_linear` runs as stored)."""
    if half_linear.applies(layer.weight.dtype) or runs_alone(layer):
        return 0
    return layer.weight.numel() * torch.empty((), dtype=packed_dtype(layer.weight.dtype)).element_size()


def _within_cap(layers: list[torch.nn.Linear], max_copy_bytes: int | None) -> set[torch.nn.Linear]:
    """The layers to copy: all of `layers` without a cap; with one, by measured saving per byte, best first, each
    taken while the copies so far fit in `max_copy_bytes`."""
    if max_copy_bytes is None:
        return set(layers)
    chosen, used = set(), 0
    for layer in sorted(layers, key=lambda layer: measured_saving(layer) / copy_bytes(layer) if copy_bytes(layer)
                        else math.inf, reverse=True):
        if used + copy_bytes(layer) <= max_copy_bytes:
            chosen.add(layer)
            used += copy_bytes(layer)
    return chosen


def choose_min_rows(times: dict[int, tuple[float, float]]) -> float:
    """The row threshold that makes `times` ({rows: (F.linear seconds, prepacked seconds)}) cheapest overall: the r
    minimising the summed relative change sum(prepacked / F.linear - 1 for counts >= r), so that one noisy count
    cannot move it far; `NEVER` unless that sum saves at least `MIN_GAIN`. Ties keep F.linear (the larger r)."""
    threshold, best, gain = NEVER, -MIN_GAIN, 0.0
    for rows in sorted(times, reverse=True):
        stock, packed = times[rows]
        gain += packed / stock - 1.0
        if gain <= best:
            threshold, best = rows, gain
    return threshold


@torch.no_grad()
def _time_rows(layer: torch.nn.Linear, repeats: int = 2, batch_s: float = 5e-4, budget_s: float = 0.01
               ) -> dict[int, tuple[float, float]]:
    """Seconds per call of F.linear and of the prepacked call on `layer`'s own weight, per `ROW_GRID` row count: the
    best of at least `repeats` batches (each of enough calls to last `batch_s`; more batches while they fit in
    `budget_s`), the two alternating batch by batch after a warm-up, so a drifting machine biases them alike."""
    weight, bias, packed = layer.weight.detach(), layer.bias, packed_weight(layer)
    bias = None if bias is None else bias.detach()
    times = {}
    for rows in ROW_GRID:
        x = torch.randn(rows, layer.in_features, dtype=weight.dtype)
        calls = (lambda x=x: F.linear(x, weight, bias), lambda x=x: _linear_on_packed(x, packed, bias))
        start = time.perf_counter()
        for call in calls:  # warm-up, and the size of a batch
            call()
        n = max(1, math.ceil(batch_s / max(time.perf_counter() - start, 1e-9)))
        best, spent, done = [math.inf, math.inf], 0.0, 0
        while done < repeats or spent < budget_s:
            for i, call in enumerate(calls):
                start = time.perf_counter()
                for _ in range(n):
                    call()
                elapsed = time.perf_counter() - start
                best[i], spent = min(best[i], elapsed / n), spent + elapsed
            done += 1
        times[rows] = (best[0], best[1])
    return times


def _swap_in(model: torch.nn.Module, max_copy_bytes: int | None = None) -> dict[torch.nn.Linear, float]:
    """Route every nn.Linear of `model` that gains (`measured_min_rows`), within `max_copy_bytes` of copies
    (`_within_cap`), through `prepacked_forward`, its weight reordered now; returns {layer: its row threshold},
    the layers to put back. Reordering and timing happen
    before any pass is timed, so their cost stays out of the t(k) the cost model learns (met inside the first
    pass, the reorder alone made that pass look several times slower than it is). A layer that never gains drops
    its copy and keeps its own forward, as does a layer left out by the cap.

    All or nothing: every timing and reorder (what can fail, e.g. out of memory) runs before the first layer is
    patched, and a failure while patching unpatches what was done, so an error leaves the model as it was."""
    plain = [layer for layer in model.modules()  # plain layers, not already wrapped
             if type(layer) is torch.nn.Linear and "forward" not in vars(layer)]
    gaining = [layer for layer in plain if measured_min_rows(layer) != NEVER]
    within = _within_cap(gaining, max_copy_bytes)
    chosen: dict[torch.nn.Linear, float] = {}
    for layer in plain:
        if layer not in within:
            _packed.pop(layer, None)
            continue
        packed_weight(layer)
        chosen[layer] = measured_min_rows(layer)
    patched = []
    try:
        for layer, threshold in chosen.items():
            layer.forward = lambda x, layer=layer, threshold=threshold: prepacked_forward(layer, x, threshold)
            patched.append(layer)
    except BaseException:
        _swap_out(patched)
        raise
    return chosen


def release_packed(model: torch.nn.Module) -> int:
    """Drop the reordered copies of `model`'s linear layers (they are made again by the next block that runs them
    prepacked); returns the bytes they held. Refused (RuntimeError) inside a block running `model` prepacked."""
    with _lock:
        if model in _users:
            raise RuntimeError(
                "release_cpu_kernels: the model is running on prepacked linears right now (inside cpu_kernels or a "
                "drafter's generate call), which would make the copies again. Fix: call it after that block or "
                "generate call has returned."
            )
        dropped = [_packed.pop(m) for m in model.modules() if type(m) is torch.nn.Linear and m in _packed]
    return sum(packed.numel() * packed.element_size() for _, packed in dropped)


def thresholds() -> dict[str, int | None]:
    """The row thresholds measured so far in this process, as JSON takes them:
    {"<out>x<in>[+bias]@<threads>": rows, or None for a shape that never gained}."""
    return {f"{o}x{i}{'+bias' if b else ''}@{t}{'' if d == torch.float32 else ':' + str(d)[6:]}":
            None if r == NEVER else int(r) for (o, i, b, t, d), (r, _) in sorted(_min_rows.items(), key=str)}


def _swap_out(replaced) -> None:
    """Give each layer of `replaced` (an iterable of layers) its own forward back."""
    for layer in replaced:
        vars(layer).pop("forward", None)


def prepacked_layers(model: torch.nn.Module) -> dict[torch.nn.Linear, float]:
    """The layers of `model` that run prepacked right now (inside `prepacked_linears`), with the row count from
    which each does; empty outside the block or where prepacking does not apply."""
    with _lock:
        entry = _users.get(model)
    return dict(entry[1]) if entry else {}


def parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes of `model`'s own parameters and buffers (shared tensors, e.g. tied embeddings, counted once)."""
    tensors = {t.data_ptr(): t for t in [*model.parameters(), *model.buffers()]}
    return sum(t.numel() * t.element_size() for t in tensors.values())


@contextmanager
def prepacked_linears(model: torch.nn.Module, enabled: bool = True, max_memory: float | None = None
                      ) -> Iterator[None]:
    """Run `model`'s linear layers on prepacked weights inside the block, where `applies(model)` and `enabled`;
    `max_memory` caps the copies at that fraction of the model's own bytes (`parameter_bytes`; None: no cap).
    Calls may overlap (threads sharing a target): the first one sets the layers (and its cap holds for the
    others), and the last one to end puts the layers' own forwards back."""
    if max_memory is not None and not (isinstance(max_memory, (int, float)) and 0 <= max_memory):
        raise ValueError(f"max_memory is a fraction >= 0 of the model's own bytes, or None (got {max_memory!r}). "
                         "Fix: pass e.g. 0.5 (copies at most half the weights' bytes), or None for no cap.")
    if not enabled or not applies(model):
        yield
        return
    with _lock:
        users, replaced = _users.get(model, (0, None))
        if users == 0:
            cap = None if max_memory is None else int(max_memory * parameter_bytes(model))
            replaced = _swap_in(model, cap)
        _users[model] = (users + 1, replaced)
    try:
        yield
    finally:
        with _lock:
            users, replaced = _users[model]
            if users == 1:
                del _users[model]
                _swap_out(replaced)
            else:
                _users[model] = (users - 1, replaced)
