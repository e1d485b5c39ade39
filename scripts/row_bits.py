"""Probe: at which row counts a CPU linear kernel gives a row other bits than the same row inside a larger call.

Exact verification (`cpu_kernels(exact=True)`, the default for bfloat16 targets) needs every linear layer to give a
row the same bits in a one-token step as in a verification pass. For each distinct weight shape of a target this
compares, with random inputs in the target's dtype, the rows of calls of 1..33, 48 and 64 rows with the same
rows in one call of 96, for three routes:

* `onednn_raw`: oneDNN on the reordered weight, as torch runs it (`torch.ops.mkldnn._linear_pointwise`);
* `library`: the library's call on the reordered weight (`prepacked_linear._linear_on_packed`: one row as two);
* `f_linear`: torch's `F.linear` on the stored weight.

bfloat16 runs oneDNN in bfloat16 only where the CPU has bfloat16 units; elsewhere the library runs `half_linear`
(exact by construction), and this probe says so. Writes JSON (`--out`) with the row counts that differ per shape.

    python scripts/row_bits.py --target qwen2.5-coder-1.5b-instruct --dtype bfloat16 --threads 1 --out rows.json
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from oneiro_hf.bench.profile import cpu_model
from oneiro_hf.kernels import half_linear, prepacked_linear

ROW_COUNTS = (*range(1, 34), 48, 64)
WHOLE = 96


def differing_rows(call, x: torch.Tensor) -> list[int]:
    """The row counts whose call gives its rows other bits than one call of all of `x`'s rows."""
    whole = call(x)
    return [rows for rows in ROW_COUNTS if not torch.equal(call(x[:rows].clone()), whole[:rows])]


def shape_entry(out_features: int, in_features: int, has_bias: bool, dtype: torch.dtype, on_onednn: bool) -> dict:
    """The differing row counts of one weight shape on each route (random weights and inputs, seed 0)."""
    generator = torch.Generator().manual_seed(0)
    layer = torch.nn.Linear(in_features, out_features, bias=has_bias).to(dtype)
    x = torch.randn(WHOLE, in_features, generator=generator).to(dtype)
    packed = prepacked_linear.packed_weight(layer)
    entry = {"shape": [out_features, in_features], "bias": has_bias,
             "f_linear": differing_rows(lambda v: F.linear(v, layer.weight, layer.bias), x),
             "library": differing_rows(lambda v: prepacked_linear._linear_on_packed(v, packed, layer.bias), x)}
    if on_onednn:
        entry["onednn_raw"] = differing_rows(
            lambda v: torch.ops.mkldnn._linear_pointwise(v, packed, layer.bias, "none", [], ""), x)
    return entry


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="smollm2-135m-instruct")
    parser.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    from oneiro_hf.loading import load_target

    dtype = getattr(torch, args.dtype)
    model, _ = load_target(args.target, dtype, tokenizer_required=False)
    shapes = sorted({(m.out_features, m.in_features, m.bias is not None) for m in model.modules()
                     if type(m) is torch.nn.Linear})
    on_onednn = dtype == torch.float32 or half_linear.has_units(dtype)
    results = []
    for out_features, in_features, has_bias in shapes:
        results.append(shape_entry(out_features, in_features, has_bias, dtype, on_onednn))
        print(json.dumps(results[-1]))
    record = {
        "what": "row counts whose rows differ in bits from the same rows in one call of "
                f"{WHOLE} rows, per weight shape (random inputs)",
        "target": args.target, "dtype": args.dtype, "threads": args.threads,
        "cpu": f"{cpu_model()}, {os.cpu_count()} cores", "bf16_units": half_linear.has_units(torch.bfloat16),
        "library_route": "oneDNN, one row as two" if on_onednn else "half_linear",
        "torch": torch.__version__, "row_counts": list(ROW_COUNTS), "date": time.strftime("%Y-%m-%d"),
        "shapes": results,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
