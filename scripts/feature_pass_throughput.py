"""The training feature pass on this CPU against its matmul peak, one thread, SmolLM2 fp32 (docs/training.md).

    python scripts/feature_pass_throughput.py     # prints one JSON line

Peak: a 1024^3 and a SmolLM2-MLP-shaped float32 matmul; feature pass: `target_features` over the first 48
committed records in length-grouped batches of 2,048 and 8,192 tokens; GFLOP/s counts 270 MFLOP per token.
"""
import time, torch, json
from oneiro_hf.reference_models import load_reference_model
from oneiro_hf.training.records import load_records
from oneiro_hf.training.features import make_sequence, target_features, batches_by_tokens
torch.set_num_threads(1)
a = torch.randn(1024, 1024); b = torch.randn(1024, 1024)
for _ in range(3): a @ b
t = time.perf_counter(); n = 20
for _ in range(n): a @ b
peak = 2 * 1024**3 * n / (time.perf_counter() - t) / 1e9
x = torch.randn(4096, 576); w = torch.randn(1536, 576)
for _ in range(3): x @ w.T
t = time.perf_counter()
for _ in range(n): x @ w.T
shaped = 2 * 4096 * 576 * 1536 * n / (time.perf_counter() - t) / 1e9
model, _ = load_reference_model("smollm2-135m-instruct"); model.eval()
recs = load_records("data/selfdistill/smollm2-135m-instruct")[:48]
seqs = [make_sequence(r, 1024) for r in recs]
seqs = [s for s in seqs if s]
res = {"sgemm_1024_gflops": round(peak, 1), "sgemm_4096x576x1536_gflops": round(shaped, 1)}
for bt in (2048, 8192):
    groups = batches_by_tokens([len(s[0]) for s in seqs], bt)
    tokens = 0; t = time.perf_counter()
    with torch.no_grad():
        for g in groups:
            width = max(len(seqs[i][0]) for i in g)
            ids = torch.zeros(len(g), width, dtype=torch.long); mask = torch.zeros_like(ids)
            for r, i in enumerate(g):
                s = seqs[i][0]; ids[r, :len(s)] = torch.tensor(s); mask[r, :len(s)] = 1
            target_features(model, ids, mask, label_from=torch.tensor([seqs[i][1] - 1 for i in g]))
            tokens += int(mask.sum())
    dt = time.perf_counter() - t
    res[f"feature_pass_batch{bt}_tok_s"] = round(tokens / dt, 1)
    res[f"feature_pass_batch{bt}_gflops_at_270mflop"] = round(tokens / dt * 0.27, 1)
print(json.dumps(res))
