"""Verification passes on a CPU: the target's linear layers run on weights reordered once, not on every call.

torch's float32 `F.linear` on a CPU runs MKL's GEMM. From `MIN_ROWS` input rows on, that GEMM packs the weight
matrix again on every call, so a verification pass of 4 tokens costs far more than one of 3: on this project's CPU
a 1536x576 layer took the same time at 1-3 rows, 1.9x at 4 and 2.9x at 8, and SmolLM2's t(4) was 1.61 t(1)
against t(3) = 1.13 (`scripts/probe_prepacked_linear.py`, docs/benchmarks.md). oneDNN reorders a weight once
(`torch.ops.mkldnn._reorder_linear_weight`) and then takes any row count on it; with every linear prepacked,
t(4) was 1.27 t(1) and t(8) 1.46 (was 2.11).

`prepacked_linears(model)` runs the target's `nn.Linear` layers that way, for inputs of at least `MIN_ROWS` rows,
while a generate call with a drafter runs (setting `prepack_cpu_weights`, on by default), on float32 targets on a
CPU whose torch has oneDNN. Fewer rows (plain one-token steps) and everything else keep `F.linear`. The reordered
copies cost as much memory as the linear weights themselves; they are made when a generate call first uses them
(about 1 s for SmolLM2 on this CPU, once), kept for later calls, made again if a weight changes, and go with the
layer (weak references). Results differ from F.linear's by float32 rounding only (a different summation order), as
a multi-token GEMM's already differ from greedy's one-row GEMV.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F

MIN_ROWS = 4  # MKL's GEMM repacks the weight from this many rows on (measured; fewer rows keep F.linear)
# per linear layer: (the weight it was made from: data pointer, version), the reordered weight
_packed: weakref.WeakKeyDictionary[torch.nn.Linear, tuple[tuple[int, int], torch.Tensor]] = weakref.WeakKeyDictionary()
# per target: generate calls now running with prepacked linears, and the layers whose forward they replaced
_users: weakref.WeakKeyDictionary[torch.nn.Module, tuple[int, list]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def applies(model: torch.nn.Module) -> bool:
    """Whether `model` gains from prepacked weights: float32 parameters on a CPU, and a torch with oneDNN."""
    param = next(model.parameters(), None)
    return (param is not None and param.device.type == "cpu" and param.dtype == torch.float32
            and torch.backends.mkldnn.is_available())


def packed_weight(layer: torch.nn.Linear) -> torch.Tensor:
    """`layer`'s weight reordered for oneDNN: made once, again only if the weight changed (assigned or in place)."""
    weight = layer.weight
    key = (weight.data_ptr(), weight._version)
    entry = _packed.get(layer)
    if entry is None or entry[0] != key:
        entry = (key, torch.ops.mkldnn._reorder_linear_weight(weight.detach()))
        _packed[layer] = entry
    return entry[1]


def prepacked_forward(layer: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """`layer(x)` for x (..., in_features): on the reordered weight from `MIN_ROWS` rows on, else F.linear."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if rows < MIN_ROWS or x.dtype != torch.float32 or x.device.type != "cpu" or torch.is_grad_enabled():
        return F.linear(x, layer.weight, layer.bias)
    out = _linear_on_packed(x.reshape(rows, x.shape[-1]), packed_weight(layer), layer.bias)
    return out.reshape(*x.shape[:-1], out.shape[-1])


def _linear_on_packed(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x (rows, in) @ weight.T + bias, weight reordered by `packed_weight`: (rows, out)."""
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def _swap_in(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """Route every nn.Linear of `model` through `prepacked_forward`, its weight reordered now; returns the layers
    to put back. Reordering now, before any pass is timed, keeps its cost (about 0.3 s for SmolLM2's LM head) out of the
    t(k) the cost model learns: met in the first 4-token pass, it made that pass look 4.5x slower than it is."""
    replaced = []
    for layer in model.modules():
        if type(layer) is torch.nn.Linear and "forward" not in vars(layer):  # plain layers, not already wrapped
            packed_weight(layer)
            replaced.append(layer)
            layer.forward = lambda x, layer=layer: prepacked_forward(layer, x)
    return replaced


def _swap_out(replaced: list[torch.nn.Linear]) -> None:
    for layer in replaced:
        vars(layer).pop("forward", None)


@contextmanager
def prepacked_linears(model: torch.nn.Module, enabled: bool = True) -> Iterator[None]:
    """Run `model`'s linear layers on prepacked weights inside the block, where `applies(model)` and `enabled`.
    Calls may overlap (threads sharing a target): the last one to end puts the layers' own forwards back."""
    if not enabled or not applies(model):
        yield
        return
    with _lock:
        users, replaced = _users.get(model, (0, None))
        if users == 0:
            replaced = _swap_in(model)
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
