"""The training feature pass on this CPU against its matmul peak, one thread, SmolLM2 fp32 (docs/training.md).

    python scripts/feature_pass_throughput.py     # prints one JSON line

Peak: a 1024^3 and a SmolLM2-MLP-shaped float32 matmul; feature pass: `target_features` over the first 48
committed records in length-grouped batches of 2,048 and 8,192 tokens; GFLOP/s counts 270 MFLOP per token.
"""

import argparse
import json
import time
from pathlib import Path

import torch

from oneiro_hf.reference_models import load_reference_model
from oneiro_hf.training.features import batches_by_tokens, make_sequence, target_features
from oneiro_hf.training.records import load_records

DATA = str(Path(__file__).resolve().parents[1] / "data" / "selfdistill" / "smollm2-135m-instruct")


def matmul_gflops(m: int, k: int, n: int, repeats: int = 20) -> float:
    a, b = torch.randn(m, k), torch.randn(k, n)
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
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    torch.set_num_threads(1)
    result = {"sgemm_1024_gflops": round(matmul_gflops(1024, 1024, 1024), 1),
              "sgemm_4096x576x1536_gflops": round(matmul_gflops(4096, 576, 1536), 1)}
    model, _ = load_reference_model("smollm2-135m-instruct")
    model.eval()
    seqs = [s for s in (make_sequence(r, 1024) for r in load_records(DATA)[:48]) if s]
    for batch_tokens in (2048, 8192):
        rate = feature_pass_tokens_per_s(model, seqs, batch_tokens)
        result[f"feature_pass_batch{batch_tokens}_tok_s"] = round(rate, 1)
        result[f"feature_pass_batch{batch_tokens}_gflops_at_270mflop"] = round(rate * 0.27, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
