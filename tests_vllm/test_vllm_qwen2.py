"""A Qwen2 target (tiny, random, with SmolLM2's tokenizer) and a multi-layer drafter whose input layers are not in
ascending order: vLLM's qwen2 decoder layers with their q/k/v biases, and the fusion's slot order, give the drafts
generate gives."""

from __future__ import annotations

import shutil

import pytest
import torch
from conftest import K, run_vllm

MAX_TOKENS = 48
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory, target_dir):
    """(target dir, exported drafter folder, the drafter bound to the in-memory target)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from oneiro_hf import OneiroDrafter
    from oneiro_hf.serving.vllm_export import export_for_vllm

    root = tmp_path_factory.mktemp("qwen2")
    config = Qwen2Config(vocab_size=49152, hidden_size=256, intermediate_size=512, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
                         use_sliding_window=False, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.01)  # biases on every q/k/v projection, as Qwen2 checkpoints have them
            if i < 2:  # layers 0-1 add nothing: the copied layers 2-3 see nearly what they see in the target,
                layer.self_attn.o_proj.weight.zero_()  # so the drafter guesses right often (a random target is
                layer.mlp.down_proj.weight.zero_()  # otherwise unpredictable, and nothing is accepted)
    model.save_pretrained(root / "target")
    for name in TOKENIZER_FILES:
        if (target_dir / name).exists():
            shutil.copy(target_dir / name, root / "target" / name)
    drafter = OneiroDrafter.from_target(model, interval=(2, 4), input_layers=(3, 1, -1))
    with torch.no_grad():  # each state slot weighs in differently, the token block (identity) still leads: the
        # normed states are ~1 per dimension, the embedding ~0.02, so the drafter's guesses stay the target's
        drafter.fuse.weight[:, : 3 * 256].normal_(0, 2e-4)
    drafter.save_pretrained(root / "drafter")
    folder = export_for_vllm(root / "drafter", root / "vllm", str(root / "target"), K)
    return root / "target", folder, model, drafter


def test_qwen2_drafts_in_vllm_are_its_drafts_in_generate(tmp_path, qwen2):
    from oneiro_hf.serving.measure import fixed_k_acceptance

    target, folder, model, drafter = qwen2
    prompts = [[1, 504, 3125, 314, 253, 1690, 30, 2], [1, 2048, 911, 77, 4096, 12, 600]]
    greedy = {"temperature": 0.0, "max_tokens": MAX_TOKENS, "ignore_eos": True}
    plain = run_vllm(tmp_path, target, None, prompts, [greedy])[0]
    spec = run_vllm(tmp_path, target, folder, prompts, [greedy])[0]
    assert spec["tokens"] == plain["tokens"]
    model.generation_config.eos_token_id = None  # as ignore_eos: every run spends the whole budget
    ours = fixed_k_acceptance(model, drafter, prompts, K, MAX_TOKENS)
    assert ours["tokens"] == plain["tokens"]
    per_position = ours["accepted_per_position"]
    print(f"qwen2 accepted by position: vLLM {spec['spec']['accepted_per_position']} over "
          f"{spec['spec']['drafts']} drafts, generate {per_position} over {ours['rounds']} rounds")
    assert spec["spec"]["accepted"] > 0
    for theirs, mine in zip(spec["spec"]["accepted_per_position"], per_position):
        assert abs(theirs - mine) <= max(2, 0.05 * mine)
