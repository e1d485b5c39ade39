"""The training feature pass on this CPU against its matmul peak (docs/training.md), in each dtype asked for.

    python scripts/feature_pass_throughput.py     # SmolLM2, float32, one thread: prints one JSON line
    python scripts/feature_pass_throughput.py --target qwen2.5-coder-1.5b-instruct --dtypes float32,bfloat16 \
        --threads 2 --records 16 --batch-tokens 2048

Peak: a 1024^3 and a SmolLM2-MLP-shaped matmul per dtype; feature pass: `target_features` over the first
--records committed records of the target's dataset (data/selfdistill/<target>) in length-grouped batches;
GFLOP/s counts two FLOPs per parameter per token.
"""

import argparse
import json
import time
from pathlib import Path

import torch

from oneiro_hf.storage.reference_models import load_reference_model
from oneiro_hf.training.features import batches_by_tokens, make_sequence, target_features
from oneiro_hf.training.records import load_records

DATA = Path(__file__).resolve().parents[1] / "data" / "selfdistill"


def matmul_gflops(m: int, k: int, n: int, dtype: torch.dtype, repeats: int = 20) -> float:
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    for _ in range(3):
        a @ b
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * m * k * n * repeats / (time.perf_counter() - start) / 1e9


def feature_pass_tokens_per_s(model, seqs: list, batch_tokens: int) -> float:
    tokens, start = 0, time.perf_counter()
    with torch.no_grad():
        for group in batches_by_tokens([len(s[0]) for s in seqs], batch_tokens):
            width = max(len(seqs[i][0]) for i in group)
            ids = torch.zeros(len(group), width, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for row, i in enumerate(group):
                ids[row, : len(seqs[i][0])] = torch.tensor(seqs[i][0])
                mask[row, : len(seqs[i][0])] = 1
            target_features(model, ids, mask, label_from=torch.tensor([seqs[i][1] - 1 for i in group]))
            tokens += int(mask.sum())
    return tokens / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="smollm2-135m-instruct", help="reference model name")
    parser.add_argument("--dtypes", default="float32", help="comma-separated: float32, bfloat16")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--records", type=int, default=48, help="first records of the committed dataset")
    parser.add_argument("--batch-tokens", default="2048,8192", help="padded tokens per pass, comma-separated")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    result = {"target": args.target, "threads": args.threads, "records": args.records}
    records = load_records(str(DATA / args.target))[: args.records]
    seqs = [s for s in (make_sequence(r, 1024) for r in records) if s]
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        result[f"{name}_gemm_1024_gflops"] = round(matmul_gflops(1024, 1024, 1024, dtype), 1)
        model, _ = load_reference_model(args.target)
        model = model.to(dtype).eval()
        flops = 2 * sum(p.numel() for p in model.parameters())
        for batch_tokens in (int(b) for b in args.batch_tokens.split(",")):
            rate = feature_pass_tokens_per_s(model, seqs, batch_tokens)
            result[f"{name}_feature_pass_batch{batch_tokens}_tok_s"] = round(rate, 1)
            result[f"{name}_feature_pass_batch{batch_tokens}_gflops"] = round(rate * flops / 1e9, 1)
        del model
    print(json.dumps(result))


if __name__ == "__main__":
    main()
