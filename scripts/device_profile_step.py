"""Where does one drafter step spend its time on a GPU? (diagnostic, prints a profiler table)"""

import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from oneiro_hf import OneiroDrafter
from oneiro_hf.kv_cache import DrafterKVCache

cfg = LlamaConfig(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                  num_attention_heads=9, num_key_value_heads=3, tie_word_embeddings=True)
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
drafter = OneiroDrafter.from_target(model, draft_vocab_ids=torch.arange(8192))
cache = DrafterKVCache()
states = torch.randn(1, 512, 576, device="cuda", dtype=torch.bfloat16)
ids = torch.randint(0, 1000, (1, 512), device="cuda")
pos = torch.arange(1, 513, device="cuda")[None]


def step(i, readout=True):
    s = drafter.transition(states[:, -1:], ids[:, -1:], torch.tensor([[513 + i]], device="cuda"), cache)
    if readout:
        return drafter.readout_logits(s).argmax(-1).item()
    torch.cuda.synchronize()


with torch.no_grad():
    drafter.transition(states, ids, pos, cache)
    for name, fn in (("full step", lambda i: step(i)), ("transition only", lambda i: step(i, False))):
        ts = []
        for i in range(40):
            torch.cuda.synchronize()
            t = time.perf_counter()
            fn(i)
            ts.append(time.perf_counter() - t)
            cache.crop(512)
        print(name, "median ms", sorted(ts)[20] * 1000, "min", min(ts) * 1000)
    ts = []
    for i in range(60):  # growing key length, as in real decoding
        torch.cuda.synchronize()
        t = time.perf_counter()
        step(i)
        ts.append(time.perf_counter() - t)
    print("growing cache: median ms", sorted(ts)[30] * 1000)
    torch.cuda.synchronize()
    t = time.perf_counter()
    out = model.generate(ids[:, :200], max_new_tokens=100, min_new_tokens=100, do_sample=False)
    torch.cuda.synchronize()
    print("target greedy ms/token", (time.perf_counter() - t) * 10)
