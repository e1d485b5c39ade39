"""Probe: how much of a CPU verification pass's t(k) is MKL repacking the weights, and what prepacking saves.

On this project's CPU, torch's fp32 `F.linear` (MKL) costs the same at 1-3 input rows and then jumps (about 2x at
4 rows, 3x at 8 for a 1536x576 layer): from 4 rows on MKL's GEMM packs the weight again on every call. oneDNN can
reorder a weight once (`torch.ops.mkldnn._reorder_linear_weight`) and then run any row count on it
(`torch.ops.mkldnn._linear_pointwise`). This script measures, for one target:

* per layer shape, F.linear against the prepacked oneDNN call at 1..16 rows;
* the target's t(k) (cached passes of k tokens after 200 context tokens, as `oneiro-bench profile`) with stock
  linears and with every linear (decoder layers and LM head) routed through prepacked weights for passes of at
  least `--min-rows` rows, the two interleaved per repeat;
* how far the prepacked pass's logits are from the stock pass's, and whether their argmax agrees.

Session 11 started `oneiro_hf/kernels/prepacked_linear.py` from this measurement; since session 12 the prepacked arm runs the
library's own layer call and, unless `--min-rows` fixes one, its per-shape thresholds measured on this machine.

    python scripts/probe_prepacked_linear.py --out docs/benchmarks/prepacked_linear_probe/probe.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from oneiro_hf.kernels.prepacked_linear import measured_min_rows, packed_weight, prepacked_forward, thresholds
from oneiro_hf.storage.reference_models import load_reference_model


def _time(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def layer_table(shapes: list[tuple[int, int]], rows: list[int]) -> list[dict]:
    """Microseconds of F.linear and of the prepacked oneDNN linear, per (out, in) weight shape and row count."""
    table = []
    for out_f, in_f in shapes:
        weight = torch.randn(out_f, in_f)
        packed = torch.ops.mkldnn._reorder_linear_weight(weight)
        repeats = 30 if out_f * in_f > 10_000_000 else 200
        for m in rows:
            x = torch.randn(m, in_f)
            stock = _time(lambda x=x, w=weight: F.linear(x, w), repeats)
            pre = _time(lambda x=x, w=packed: torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], ""), repeats)
            table.append({"shape": [out_f, in_f], "rows": m, "f_linear_us": stock * 1e6, "prepacked_us": pre * 1e6})
    return table


class PrepackedLinears:
    """Routes every nn.Linear of `model` through the library's `prepacked_forward` while `on` is true, for inputs of at
    least `min_rows` rows (None: the threshold the library measures per weight shape on this machine); otherwise,
    F.linear. `restore()` puts the stock forwards back."""

    def __init__(self, model: torch.nn.Module, min_rows: int | None) -> None:
        self.on, self.originals = False, {}
        start = time.perf_counter()
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                packed_weight(module)
                threshold = measured_min_rows(module) if min_rows is None else min_rows
                self.originals[module] = module.forward
                module.forward = self._forward(module, threshold)
        self.reorder_s = time.perf_counter() - start

    def _forward(self, module: torch.nn.Linear, threshold: float):
        def forward(x: torch.Tensor) -> torch.Tensor:
            if not self.on:
                return F.linear(x, module.weight, module.bias)
            return prepacked_forward(module, x, threshold)
        return forward

    def restore(self) -> None:
        for module, forward in self.originals.items():
            module.forward = forward


@torch.no_grad()
def profile_both(model, ks: list[int], min_rows: int | None, context_len: int, repeats: int) -> dict:
    """Median seconds of a k-token cached pass, stock and prepacked, interleaved per repeat (order alternating)."""
    vocab = model.config.vocab_size
    gen = torch.Generator().manual_seed(0)
    context = torch.randint(0, vocab, (1, context_len), generator=gen)
    cache = DynamicCache(config=model.config)
    model(context, past_key_values=cache, use_cache=True)
    linears = PrepackedLinears(model, min_rows)
    times: dict[str, dict[int, list[float]]] = {"stock": {k: [] for k in ks}, "prepacked": {k: [] for k in ks}}
    logits: dict[int, dict[str, torch.Tensor]] = {}
    try:
        for r in range(repeats + 1):  # round 0 is a warm-up
            for k in ks:
                new = torch.randint(0, vocab, (1, k), generator=gen)
                for arm in ("stock", "prepacked") if r % 2 == 0 else ("prepacked", "stock"):
                    linears.on = arm == "prepacked"
                    t0 = time.perf_counter()
                    out = model(new, past_key_values=cache, use_cache=True).logits
                    elapsed = time.perf_counter() - t0
                    cache.crop(-k)
                    if r:
                        times[arm][k].append(elapsed)
                    if r == 1:
                        logits.setdefault(k, {})[arm] = out
    finally:
        linears.restore()
    med = {arm: {k: statistics.median(v) for k, v in t.items()} for arm, t in times.items()}
    t1 = med["stock"][min(ks)]
    agreement = {
        k: {"max_abs_logit_diff": float((d["stock"] - d["prepacked"]).abs().max()),
            "argmax_equal": bool(torch.equal(d["stock"].argmax(-1), d["prepacked"].argmax(-1)))}
        for k, d in logits.items()
    }
    return {
        "t1_s": t1,
        "stock_ratios": {k: v / t1 for k, v in med["stock"].items()},
        "prepacked_ratios": {k: v / t1 for k, v in med["prepacked"].items()},
        "agreement": agreement,
        "reorder_all_linears_s": linears.reorder_s,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--target", default="smollm2-135m-instruct")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--min-rows", type=int, default=None,
                   help="passes of fewer rows keep F.linear (default: the library's threshold, measured per shape)")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if not torch.backends.mkldnn.is_available():
        raise SystemExit("this torch build has no oneDNN (torch.backends.mkldnn.is_available() is False). Fix: use "
                         "a CPU build of torch with oneDNN, e.g. the torch==2.13.0 wheel the Makefile installs.")
    model, _ = load_reference_model(args.target)
    text = model.config
    shapes = sorted({tuple(m.weight.shape) for m in model.modules() if isinstance(m, torch.nn.Linear)})
    result = {
        "target": args.target,
        "threads": args.threads,
        "min_rows": args.min_rows,
        "torch": torch.__version__,
        "layers": layer_table([tuple(s) for s in shapes], [1, 2, 3, 4, 6, 8, 12, 16]),
        "passes": profile_both(model, [1, 2, 3, 4, 5, 6, 8, 12, 16], args.min_rows, 200, args.repeats),
        "hidden_size": text.hidden_size,
    }
    result["measured_min_rows"] = thresholds()
    for row in result["layers"]:
        print(f"{row['shape']!s:14s} rows {row['rows']:2d}: F.linear {row['f_linear_us']:8.1f} us, "
              f"prepacked {row['prepacked_us']:8.1f} us")
    passes = result["passes"]
    print("measured thresholds (rows from which a shape runs prepacked):", result["measured_min_rows"])
    print(f"t(1) = {passes['t1_s'] * 1e3:.1f} ms; reordering every linear took {passes['reorder_all_linears_s']:.2f} s")
    for k in passes["stock_ratios"]:
        a = passes["agreement"][k]
        print(f"t({k:2d})/t(1): stock {passes['stock_ratios'][k]:.2f}, prepacked {passes['prepacked_ratios'][k]:.2f}; "
              f"logits max diff {a['max_abs_logit_diff']:.2e}, argmax equal {a['argmax_equal']}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
