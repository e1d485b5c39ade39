"""Memory across many consecutive `generate` calls with one drafter: does anything grow?

A drafter is reused for the life of a process, so whatever it (or the target hook) keeps between calls
must stay bounded. This script runs N calls (default 500) with varying prompts, output lengths, modes
and draft settings, and at calls 1, 10, 100, 250 and N records:

* process memory: RSS (VmRSS from /proc/self/status; ru_maxrss elsewhere), Python heap traced by
  tracemalloc, and torch's allocated bytes on an accelerator;
* the drafter's state that outlives a call: learned policy (latency table, n-gram rates, deep size),
  last_stats, attribute counts of drafter and target;
* the per-call state of the last call (drafter KV cache capacity and length, n-gram index size) and
  whether that call's candidate generator, KV cache and n-gram index were freed afterwards (live
  object counts after a gc pass).

It prints a table and the growth between call 10 (after warm-up) and the last call, and writes
docs/measurements/memory_<target>.json.

    python scripts/bench_memory.py                                    # tiny random llama, fast
    python scripts/bench_memory.py --target smollm2-135m-instruct --max-new-tokens 16 24
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import resource
import sys
import time
import tracemalloc
import weakref
from pathlib import Path
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from oneiro_hf import OneiroDrafter
from oneiro_hf.drafting.kv_cache import DrafterKVCache
from oneiro_hf.drafting.lookup import NgramIndex
from oneiro_hf.generation.candidate_generator import OneiroCandidateGenerator

TINY = "tiny-llama"
TEXTS = [
    "Write a short poem about the sea.",
    "Explain what a hash table is, in two sentences.",
    "List three prime numbers greater than 100.",
    "Translate 'good morning, how are you?' into French.",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Summarize: The cat sat on the mat. The cat sat on the mat again. Then the cat slept on the mat.",
    "What is the capital of Japan? Answer with one word.",
    "Give me a recipe for pancakes.",
    "Count from one to ten in words: one, two, three,",
    "Why is the sky blue?",
]


def rss_bytes() -> int:
    """Current resident set size (Linux /proc), else the peak from getrusage."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def deep_size(obj: Any, seen: set[int] | None = None) -> int:
    """sys.getsizeof summed over containers and dataclass fields (enough to see a table growing)."""
    seen = set() if seen is None else seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, seen) + deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        size += sum(deep_size(v, seen) for v in obj)
    elif hasattr(obj, "__dict__"):
        size += deep_size(vars(obj), seen)
    return size


def live(cls: type) -> int:
    return sum(1 for o in gc.get_objects() if type(o) is cls)


class GeneratorProbe(LogitsProcessor):
    """Finds the call's candidate generator the first time `generate` runs it as a logits processor (mid-call, so
    the generator is alive), through the garbage collector: a public `generate` argument, no patched class."""

    def __init__(self) -> None:
        self.last: OneiroCandidateGenerator | None = None
        self.looked = False

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if not self.looked:
            self.looked = True
            found = [o for o in gc.get_objects() if type(o) is OneiroCandidateGenerator]
            self.last = found[-1] if found else None
        return scores

    def take(self) -> dict[str, Any]:
        gen, self.last = self.last, None
        if gen is None:
            return {}
        cache = gen.context.cache  # the drafter KV cache of that call
        info = {
            "kv_capacity": max((cache.capacity(i) for i in range(*gen.context.drafter.config.interval)), default=0),
            "kv_length": cache.seq_length,
            "index_tokens": len(gen.index.tokens),
            "index_entries": gen.index.entries,
        }
        ref = weakref.ref(gen)
        del gen, cache
        gc.collect()
        info["generator_freed"] = ref() is None
        return info


def build_tiny(seed: int = 0):
    """A tiny random llama (4 layers) and an all-layer drafter, which gets a fair share of drafts accepted."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, tie_word_embeddings=False, pad_token_id=0,
        bos_token_id=1, eos_token_id=None,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    drafter = OneiroDrafter.from_target(model, interval=(0, 4))
    return model, None, drafter


def make_prompts(tokenizer, vocab: int, count: int, seed: int) -> list[torch.LongTensor]:
    """Prompts of varied length: tokenized texts (chat-formatted when possible), or random ids for a tiny model,
    some of them longer than the drafter KV cache's initial capacity so that it has to grow."""
    gen = torch.Generator().manual_seed(seed)
    prompts = []
    for i in range(count):
        if tokenizer is None:
            length = int(torch.randint(1, 40, (1,), generator=gen)) if i % 7 else 300 + 10 * (i % 5)
            prompts.append(torch.randint(3, vocab, (1, length), generator=gen))
            continue
        text = TEXTS[i % len(TEXTS)] * (1 + (i // len(TEXTS)) % 3)
        if getattr(tokenizer, "chat_template", None):
            ids = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, return_tensors="pt", return_dict=True
            )["input_ids"]
        else:
            ids = tokenizer(text, return_tensors="pt").input_ids
        prompts.append(ids)
    return prompts


def snapshot(call: int, model, drafter, probe: GeneratorProbe, traced: bool, seconds: float) -> dict[str, Any]:
    per_call = probe.take()  # includes a gc pass, so the counts below see only what is really alive
    policy = drafter.policy_state
    stats = drafter.last_stats
    row: dict[str, Any] = {
        "call": call,
        "elapsed_s": round(seconds, 2),
        "rss_mb": round(rss_bytes() / 2**20, 2),
        "tracemalloc_kb": round(tracemalloc.get_traced_memory()[0] / 1024, 1) if traced else None,
        "torch_allocated_mb": (
            round(torch.cuda.memory_allocated() / 2**20, 2) if torch.cuda.is_available() else None
        ),
        **per_call,
        "live_generators": live(OneiroCandidateGenerator),
        "live_kv_caches": live(DrafterKVCache),
        "live_ngram_indexes": live(NgramIndex),
        "policy_verify_entries": len(policy.verify_s) if policy else 0,
        "policy_lookup_entries": len(policy.lookup_by_ngram) if policy else 0,
        "policy_latent_bins": len(policy.latent_bins) if policy else 0,
        "policy_bytes": deep_size(policy) if policy else 0,
        "last_stats_accept_lengths": len(stats.accept_lengths),
        "last_stats_bytes": deep_size(stats),
        "drafter_attributes": len(vars(drafter)),
        "target_attributes": len(vars(model)),
    }
    return row


COLUMNS = [
    ("call", "call"), ("rss_mb", "RSS MB"), ("tracemalloc_kb", "py KB"), ("torch_allocated_mb", "torch MB"),
    ("kv_capacity", "kv cap"), ("index_entries", "index"), ("generator_freed", "freed"),
    ("live_generators", "gens"), ("live_kv_caches", "caches"), ("policy_verify_entries", "t(k)"),
    ("policy_lookup_entries", "ngram"), ("policy_bytes", "policy B"), ("last_stats_bytes", "stats B"),
    ("drafter_attributes", "d.attrs"), ("target_attributes", "t.attrs"),
]


def print_table(rows: list[dict[str, Any]]) -> None:
    widths = [max(len(h), 8) for _, h in COLUMNS]
    print("  ".join(h.rjust(w) for (_, h), w in zip(COLUMNS, widths)))
    for row in rows:
        print("  ".join(str(row.get(k, "")).rjust(w) for (k, _), w in zip(COLUMNS, widths)))


# describe only the call just made (its length and mode), so they vary but cannot accumulate
PER_CALL = {"call", "elapsed_s", "kv_capacity", "kv_length", "index_tokens", "index_entries",
            "last_stats_accept_lengths", "last_stats_bytes"}


def growth(rows: list[dict[str, Any]], base_call: int) -> dict[str, Any]:
    """Last row minus the row of `base_call` (after warm-up) for every numeric column that persists."""
    base = next(r for r in rows if r["call"] == base_call)
    last = rows[-1]
    out = {}
    for key, value in last.items():
        if key in PER_CALL or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(base.get(key), (int, float)):
            out[key] = round(value - base[key], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default=TINY, help=f"'{TINY}' (random, fast) or a reference/HF model name")
    parser.add_argument("--drafter", default=None, help="drafter path (default: the shipped one, else fresh)")
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--max-new-tokens", type=int, nargs=2, default=(8, 48), metavar=("MIN", "MAX"))
    parser.add_argument("--checkpoints", default="1,10,100,250", help="calls to measure at (and the last)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-tracemalloc", action="store_true", help="skip tracemalloc (it slows Python code)")
    parser.add_argument("--out", default=None, help="JSON path (default docs/measurements/memory_<target>.json)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    t0 = time.perf_counter()
    if args.target == TINY:
        model, tokenizer, drafter = build_tiny()
    else:
        from oneiro_hf.loading import load_target_and_drafter

        model, tokenizer, drafter = load_target_and_drafter(args.target, args.drafter)
    load_s = time.perf_counter() - t0
    prompts = make_prompts(tokenizer, model.config.vocab_size, 50, seed=0)
    checkpoints = sorted({int(c) for c in args.checkpoints.split(",") if c} | {args.calls})
    modes = ("hybrid", "latent", "lookup")
    lo, hi = args.max_new_tokens
    traced = not args.no_tracemalloc
    if traced:
        tracemalloc.start()
    rows: list[dict[str, Any]] = []
    accepted = drafted = produced = 0
    start = time.perf_counter()
    try:
        for call in range(1, args.calls + 1):
            ids = prompts[call % len(prompts)]
            new = lo + (call * 7) % (hi - lo + 1)
            probe = GeneratorProbe()  # looks for the generator only in checkpoint calls (a gc scan)
            probe.looked = call not in checkpoints
            with torch.no_grad():
                out = model.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    do_sample=False,
                    max_new_tokens=new,
                    assistant_model=drafter,
                    oneiro_mode=modes[call % 3],
                    oneiro_cost_aware=call % 4 != 0,
                    oneiro_max_draft_tokens=1 + call % 8,
                    logits_processor=LogitsProcessorList([probe]),
                )
            produced += out.shape[1] - ids.shape[1]
            accepted += drafter.last_stats.accepted_tokens
            drafted += drafter.last_stats.drafted_tokens
            if call in checkpoints:
                rows.append(snapshot(call, model, drafter, probe, traced, time.perf_counter() - start))
                print(f"call {call}: RSS {rows[-1]['rss_mb']} MB", file=sys.stderr, flush=True)
    finally:
        if traced:
            tracemalloc.stop()
    print_table(rows)
    base = 10 if 10 in checkpoints and args.calls > 10 else checkpoints[0]
    grown = growth(rows, base)
    print(f"\ngrowth, call {base} -> call {rows[-1]['call']}:")
    for key, value in grown.items():
        print(f"  {key}: {value:+}")
    result = {
        "target": args.target,
        "drafter": args.drafter or ("fresh all-layer drafter" if args.target == TINY else "shipped or fresh"),
        "calls": args.calls,
        "max_new_tokens": [lo, hi],
        "modes": list(modes),
        "tracemalloc": traced,
        "threads": args.threads,
        "device": str(next(model.parameters()).device),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "load_s": round(load_s, 2),
        "run_s": round(time.perf_counter() - start, 2),
        "tokens_produced": produced,
        "drafted_tokens": drafted,
        "accepted_tokens": accepted,
        "command": "python scripts/bench_memory.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "growth_base_call": base,
        "growth": grown,
        "rows": rows,
    }
    out_path = Path(args.out) if args.out else ROOT / "docs" / "measurements" / f"memory_{args.target}.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {out_path.relative_to(ROOT) if out_path.is_relative_to(ROOT) else out_path}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
