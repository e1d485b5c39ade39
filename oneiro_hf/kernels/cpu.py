"""The kernels a target runs on while oneiro-hf drives it, for any forward or plain `generate` too.

    with oneiro_hf.cpu_kernels(model) as kernels:
        out = model.generate(**inputs, max_new_tokens=256)   # identical tokens to stock greedy, sooner on a CPU
    print(kernels)   # "grouped attention + prepacked linears (211 of 211 layers; 1 from one row)"

Two substitutions, each restored when the block ends (normally or by an error): `grouped_attention` (targets
that use "sdpa": a pass of several tokens reads each key/value head of the cache once) and `prepacked_linears`
(float32 targets on a CPU: each `nn.Linear` on its weight reordered once, from the row count measured to pay;
`max_memory` caps the copies, which stay with the model until `release_cpu_kernels(model)`). A drafter's
`generate` always runs the target inside them, so plain greedy inside them (`oneiro-greedy` in oneiro-bench)
separates speculation from the kernels. Results differ from stock kernels' by float32 summation order only (a
near-tie between two logits can break the other way). bfloat16 and float16 targets run exact instead: exact
attention, and linears that give each row the same bits at every row count (oneDNN in their own dtype where the CPU
has units for it, a single row run as two, else `half_linear` over the stored weights: "exact attention + 16-bit
linears (...)"), checked per weight shape on the CPU they run on (a shape whose oneDNN rows differ moves to
`half_linear`).
docs/api.md (`cpu_kernels`) and docs/design.md give more.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from . import half_linear
from .exact_attention import exact_attention
from .grouped_attention import ATTENTION_NAME, grouped_attention
from .prepacked_linear import (
    copy_bytes,
    every_row,
    packed_dtype,
    prepacked_layers,
    prepacked_linears,
    release_packed,
    rows_agree,
    run_rows_alone,
    runs_alone,
)

STOCK = "stock"


@dataclass(frozen=True)
class Kernels:
    """Which kernels a block ran the target on: `str()` is the label reports print."""

    grouped_attention: bool  # attention ran as `grouped_sdpa_attention`
    prepacked: int  # nn.Linear layers that ran on prepacked weights (from their measured row count)
    from_one_row: int  # of those, layers prepacked from a single row: one-token decoding steps use them too
    linears: int  # nn.Linear layers in the model
    exact_attention: bool = False  # attention ran on `exact_attention`: every query row as a one-token step has it
    exact: bool = False  # and every linear layer too (one kernel at every row count): passes give steps' bits
    half_linears: bool = False  # the prepacked layers run `half_linear` on their stored 16-bit weights (no copies)
    rows_alone: int = 0  # layers moved to `half_linear` because oneDNN rounded their rows by row count here

    @property
    def is_stock(self) -> bool:
        return not self.grouped_attention and not self.exact_attention and self.prepacked == 0

    def __str__(self) -> str:
        if self.is_stock:
            return STOCK
        parts = ["grouped attention"] if self.grouped_attention else ["exact attention"] if self.exact_attention else []
        if self.prepacked:
            parts.append(f"{'16-bit' if self.half_linears else 'prepacked'} linears ({self.prepacked} of "
                         f"{self.linears} layers; "
                         f"{self.from_one_row} from one row"
                         f"{f'; {self.rows_alone} on the 16-bit kernel' if self.rows_alone else ''})")
        return " + ".join(parts)


@contextmanager
def cpu_kernels(model: torch.nn.Module, prepack: bool = True, max_memory: float | None = None,
                exact: bool | None = None) -> Iterator[Kernels]:
    """Run `model` on oneiro-hf's kernels inside the block; yields what was applied. With `exact` (None: for
    bfloat16 and float16 targets) a CPU target's attention runs on `exact_attention` in every pass, one-token steps
    included, so each row of a verification pass has the bits a one-token step gives it, and a float32 target's
    linears run prepacked from one row on (oneDNN's rows do not depend on the row count once a single row runs as
    two; MKL's do); every linear's rows are then checked per shape (`rows_agree`): where they differ the block
    says why and reports `exact` False; otherwise
    grouped attention, and on float32 CPU targets with `prepack` linears prepacked from the row count measured to
    pay, their copies capped at `max_memory` times the model's own bytes when given. The model is restored on exit
    and on error; blocks may nest and overlap across threads (the last one to end restores). Anything but a
    `torch.nn.Module` is a TypeError."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"cpu_kernels takes a torch.nn.Module (a transformers model), got {type(model).__name__}. "
                        "Fix: pass the model itself, e.g. AutoModelForCausalLM.from_pretrained(...).")
    param = next(model.parameters(), None)
    dtype = param.dtype if param is not None else torch.float32
    if exact is None:
        exact = dtype in (torch.bfloat16, torch.float16)
    with exact_attention(model) if exact else _nothing() as exact_on, grouped_attention(model), \
            every_row(model) if exact_on and prepack else _nothing(), \
            prepacked_linears(model, prepack, max_memory):
        layers = prepacked_layers(model)
        linears = sum(type(m) is torch.nn.Linear for m in model.modules())
        from_one_row = sum(rows <= 1 for rows in layers.values())
        half = bool(layers) and half_linear.applies(dtype)
        if layers and packed_dtype(dtype) != dtype and not half:
            _say_no_16_bit_units(dtype, layers)
        # float32 F.linear (MKL) rounds one row differently from several; the rest is checked per shape on this CPU
        same_rows = from_one_row == len(layers) and (dtype != torch.float32 or len(layers) == linears)
        if exact_on and same_rows:
            failing = [m for m in model.modules() if type(m) is torch.nn.Linear and not rows_agree(m)]
            if failing and layers:  # 16-bit shapes move to half_linear, whose rows never depend on the count
                moved = run_rows_alone([m for m in failing if m in layers])
                failing = [m for m in failing if not rows_agree(m)]
                if moved and not failing:
                    _say_rows_alone(dtype, sorted({(m.out_features, m.in_features) for m in moved}))
            differing = sorted({(m.out_features, m.in_features) for m in failing})
            if differing:
                _say_rows_differ(dtype, differing, prepacked=bool(layers))
            same_rows = not differing
        yield Kernels(
            grouped_attention=getattr(model.config, "_attn_implementation", None) == ATTENTION_NAME,
            prepacked=len(layers),
            from_one_row=from_one_row,
            linears=linears,
            exact_attention=bool(exact_on),
            exact=bool(exact_on) and same_rows,
            half_linears=half,
            rows_alone=sum(runs_alone(m) for m in layers),
        )


_said: set = set()  # warnings given in this process: a dtype, or ("rows", dtype), or ("alone", dtype)


def _say_no_16_bit_units(dtype: torch.dtype, layers) -> None:
    """Once per dtype and process: this CPU has no units for `dtype` and `half_linear` could not be built, so its
    linears run on float32 copies."""
    if dtype in _said:
        return
    _said.add(dtype)
    extra = sum(copy_bytes(layer) for layer in layers) / 1e9
    name = str(dtype).removeprefix("torch.")
    units = "avx512_bf16 / AMX" if dtype == torch.bfloat16 else "avx512_fp16 / AMX-FP16"
    warnings.warn(
        f"this CPU has no {name} matrix units ({units}): torch's {name} linears here cost more the more rows a pass "
        "has, so a verification pass of several tokens costs several one-token steps, and oneiro-hf's 16-bit "
        f"linear kernel, which reads the stored weights, could not be built ({half_linear.KERNEL.unavailable_reason()}"
        f"). oneiro-hf runs the target's linear layers on float32 copies of their weights ({extra:.2f} GB more "
        f"memory, twice the bytes a step reads; outputs rounded to {name} as its own kernels round them). Fix: "
        "install a C compiler with OpenMP (gcc) for the 16-bit kernel; or, to keep memory down, pass "
        "oneiro_prepack_cpu_weights=False (cpu_kernels(prepack=False)) or cap the copies with "
        "oneiro_prepack_max_memory.",
        RuntimeWarning, stacklevel=3)


def _say_rows_differ(dtype: torch.dtype, shapes: list[tuple[int, int]], prepacked: bool) -> None:
    """Once per dtype and process: some linear layers give a row other bits alone than inside a pass here, so the
    block is not exact (`Kernels.exact` is False)."""
    if ("rows", dtype) in _said:
        return
    _said.add(("rows", dtype))
    name = str(dtype).removeprefix("torch.")
    route = "oneDNN's prepacked" if prepacked else "torch's"
    fix = ("report the CPU and torch version to oneiro-hf; outputs stay exact where no near-tie occurs" if prepacked
           else "leave prepacking on (oneiro_prepack_cpu_weights=True, cpu_kernels(prepack=True)), which runs one "
           "row as two")
    warnings.warn(
        f"on this CPU {route} {name} linears of shape(s) {shapes} (out, in) round a row differently by the row "
        "count of the call, so a verification pass does not give each token a one-token step's bits and, at a "
        f"near-tie between two logits, a {name} output can part from greedy's. Fix: {fix}.",
        RuntimeWarning, stacklevel=3)


def _say_rows_alone(dtype: torch.dtype, shapes: list[tuple[int, int]]) -> None:
    """Once per dtype and process: some 16-bit linears moved to `half_linear` to stay exact (slower than oneDNN)."""
    if ("alone", dtype) in _said:
        return
    _said.add(("alone", dtype))
    name = str(dtype).removeprefix("torch.")
    warnings.warn(
        f"on this CPU oneDNN's {name} linears of shape(s) {shapes} (out, in) round a row differently by the row "
        "count of the call, so oneiro-hf runs them on its 16-bit kernel over the stored weights, whose rows do not "
        "depend on the count: outputs stay greedy's, these layers run slower than oneDNN's. Fix (for speed, giving "
        "up exactness at near-ties): pass oneiro_exact_kernels=False (cpu_kernels(exact=False)).",
        RuntimeWarning, stacklevel=3)


@contextmanager
def _nothing() -> Iterator[bool]:
    yield False


def release_cpu_kernels(model: torch.nn.Module) -> int:
    """Free the prepacked weight copies that `cpu_kernels` blocks (and a drafter's generate calls) keep with `model`
    (a target, or a drafter: its copied layers run prepacked in generate too),
    up to the size of its linear layers' weights again; returns the bytes freed (0 when none were held). The model is
    untouched and keeps working; a later block or generate call that prepacks makes the copies again (keep memory
    down for good with `prepack=False` / `prepack_cpu_weights=False`). RuntimeError inside such a block."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"release_cpu_kernels takes a torch.nn.Module, got {type(model).__name__}. "
                        "Fix: pass the model given to cpu_kernels or bound to the drafter.")
    return release_packed(model)
