"""Tiny random targets and configs shared by the oneiro-hf tests (`tiny_config(arch)`, `make_model(arch)`).

Imported by test modules as `from tiny import ...`; conftest.py turns them into fixtures.

Every factory builds a fresh model (hidden 64, 4 layers, vocab 128 by default) so that hooks installed
by binding a drafter, and the drafter's learned policy, never leak from one test into another.

`strength` shapes a random target so that the default drafter (copies of the last two layers, fusion =
embedding of the drafted token) is more or less right, which is the only way to get latent drafts
accepted without training:

* None: plain random weights; latent drafts are mostly rejected.
* "prefix": the layers before the drafter's interval are turned into identities (their attention and
  MLP outputs are zeroed), so the drafter sees the same inputs as the target's copied layers except
  position 0; its drafts are often, but not always, right.
* "per_token": additionally the copied layers' attention outputs are zeroed, so the target's next
  token is a pure function of the current one and the default drafter is exact: every latent draft
  must be accepted.
"""

from __future__ import annotations

import copy

import torch
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

ARCHS = ("llama", "qwen2", "gemma3", "mistral", "qwen3")

# A latency profile for `drafter.use_latency_profile(FLAT_PROFILE, learn=False)`: a pass costs about the same at any
# length (a GPU), so drafting what is likely accepted pays. A test whose outcome depends on what the cost model picks
# decides on a profile like this one, never on times measured on a machine that may be busy.
FLAT_PROFILE = {"t1_s": 0.01, "ratios": {k: 1.0 + 0.01 * (k - 1) for k in range(1, 65)}}
WINDOW = 8  # sliding window of the windowed architectures; test contexts are longer than this


def tiny_config(
    arch: str,
    *,
    layers: int = 4,
    vocab: int = 128,
    hidden: int = 64,
    window: int = WINDOW,
    init: float = 0.1,
    layout: str | None = None,
    **overrides,
):
    """A tiny config of ``arch``. ``layout`` None keeps each architecture's usual attention (qwen2: the upper half
    of the layers slide, qwen3: none, mistral: all, gemma3: alternating); "mixed" or "all_sliding" asks for
    that layout where the architecture can have it."""
    if layout not in (None, "full", "mixed", "all_sliding"):
        raise ValueError(f"unknown layout {layout!r}: None, 'full', 'mixed' or 'all_sliding'")
    common = {
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "max_position_embeddings": 512,
        "initializer_range": init,
        "tie_word_embeddings": False,
        "pad_token_id": 0,
        "bos_token_id": 1,
        "eos_token_id": None,
    }
    common.update(overrides)
    if arch == "llama":
        return LlamaConfig(**common)
    if arch == "qwen2" or (arch == "qwen3" and layout in ("mixed", "all_sliding")):
        config_cls, extra = (Qwen2Config, {}) if arch == "qwen2" else (Qwen3Config, {"head_dim": 16})
        # layers >= max_window_layers slide: the upper half, or all of them
        return config_cls(**common, **extra, use_sliding_window=True, sliding_window=window,
                          max_window_layers=0 if layout == "all_sliding" else layers // 2)
    if arch == "qwen3":
        return Qwen3Config(**common, head_dim=16)
    if arch == "mistral":
        return MistralConfig(**common, sliding_window=window)
    if arch == "gemma3":
        types = ["sliding_attention" if layout == "all_sliding" or i % 2 == 0 else "full_attention"
                 for i in range(layers)]
        return Gemma3TextConfig(
            **common,
            head_dim=16,
            query_pre_attn_scalar=16,
            sliding_window=window,
            layer_types=types,
            final_logit_softcapping=30.0,
        )
    raise ValueError(f"unknown test arch {arch}")


MODEL_CLASSES = {
    "llama": LlamaForCausalLM,
    "qwen2": Qwen2ForCausalLM,
    "qwen3": Qwen3ForCausalLM,
    "mistral": MistralForCausalLM,
    "gemma3": Gemma3ForCausalLM,
}


def _shape_strength(model, strength: str | None, drafter_start: int) -> None:
    if strength is None:
        return
    if strength not in ("prefix", "per_token"):
        raise ValueError(strength)
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            if i < drafter_start:
                layer.self_attn.o_proj.weight.zero_()
                layer.mlp.down_proj.weight.zero_()
            elif strength == "per_token":
                layer.self_attn.o_proj.weight.zero_()


def make_model(
    arch: str = "llama",
    *,
    seed: int = 0,
    strength: str | None = None,
    name: str | None = None,
    dtype: torch.dtype = torch.float32,
    **config_kwargs,
):
    """A fresh tiny random causal LM of `arch`, in eval mode, with no EOS (generation runs to the limit)."""
    config = tiny_config(arch, **config_kwargs)
    torch.manual_seed(seed)
    model = MODEL_CLASSES[arch](config).eval().to(dtype)
    _shape_strength(model, strength, config.num_hidden_layers - 2)
    if name is not None:  # as from_pretrained leaves it: on the instance and in its config
        model.config._name_or_path = name
        model.name_or_path = name
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    model.generation_config.do_sample = False
    return model


def random_prompt(length: int, seed: int, vocab: int = 128) -> torch.LongTensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (1, length), generator=gen)


def repeat_prompt(pattern: list[int], times: int) -> torch.LongTensor:
    return torch.tensor([pattern * times], dtype=torch.long)


def greedy(model, ids: torch.LongTensor, max_new_tokens: int, **kwargs) -> torch.LongTensor:
    with torch.no_grad():
        return model.generate(ids, do_sample=False, max_new_tokens=max_new_tokens, **kwargs)


def pass_and_steps(model, ids: torch.LongTensor, prefix: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits of one pass over ids[prefix:] after the prefix, and of the same tokens fed one step at a time."""
    with torch.no_grad():
        cache = model(ids[:, :prefix], use_cache=True).past_key_values
        steps_cache = copy.deepcopy(cache)
        multi = model(ids[:, prefix:], past_key_values=cache).logits
        steps = [model(ids[:, i:i + 1], past_key_values=steps_cache).logits for i in range(prefix, ids.shape[1])]
    return multi, torch.cat(steps, dim=1)


def longest_cycle(model) -> list[int]:
    """For a per-token target: the longest cycle of its greedy next-token function t -> f(t).

    f is read off one batched forward over every single-token input; from any token on a cycle,
    greedy decoding repeats that cycle forever, which makes a perfectly repetitive prompt.
    """
    vocab = model.config.vocab_size
    with torch.no_grad():
        nxt = model(torch.arange(vocab).unsqueeze(1)).logits[:, -1].argmax(-1).tolist()
    best: list[int] = []
    for start in range(3, vocab):  # avoid the pad/bos/eos ids
        seen: dict[int, int] = {}
        path, t = [], start
        while t not in seen:
            seen[t] = len(path)
            path.append(t)
            t = nxt[t]
        cyc = path[seen[t] :]
        if len(cyc) > len(best) and min(cyc) >= 3:
            best = cyc
    assert best, "no cycle avoiding the special ids"
    return best


def make_cyclic_model(arch: str, min_cycle: int = 4, **kwargs):
    """A per-token target whose next-token function has a cycle of at least `min_cycle` tokens, and it."""
    for seed in range(20):
        model = make_model(arch, seed=seed, strength="per_token", **kwargs)
        cyc = longest_cycle(model)
        if len(cyc) >= min_cycle:
            return model, cyc
    raise AssertionError(f"no seed gives a {arch} per-token target with a cycle of {min_cycle}+ tokens")
