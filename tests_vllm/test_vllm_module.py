"""The oneiro module inside vLLM computes the drafter's own function: the target states a real vLLM engine hands
it (recorded in the engine's worker, record_worker.py) are fed to the drafter in transformers, and the fusion's
state part, the predicted states, the recurrent state part and the logits agree. Every input slot weighs in at
full scale (a random fusion, input layers out of ascending order), so a slot-order or norm error shows."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from conftest import HERE, K

HIDDEN = 128
INPUT_LAYERS = (3, 1, -1)  # slot order; vLLM returns them ascending (1, 3, 4)
PROMPT = [1, 504, 3125, 314, 253, 1690, 30, 2, 911, 77, 4096, 12, 600, 42]
ATOL = 2e-4


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from oneiro_hf import OneiroDrafter
    from oneiro_hf.serving.vllm_export import export_for_vllm

    root = tmp_path_factory.mktemp("module")
    config = Qwen2Config(vocab_size=49152, hidden_size=HIDDEN, intermediate_size=256, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         use_sliding_window=False, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0, 0.02)
    model.save_pretrained(root / "target")
    drafter = OneiroDrafter.from_target(model, interval=(2, 4), input_layers=INPUT_LAYERS,
                                        draft_vocab_ids=list(range(0, 49152, 7)))
    with torch.no_grad():  # every block of the fusion at full scale, each slot different
        drafter.fuse.weight.normal_(0, 0.05)
        drafter.fuse.bias.normal_(0, 0.05)
    drafter.save_pretrained(root / "drafter")
    folder = export_for_vllm(root / "drafter", root / "vllm", str(root / "target"), K)
    out = root / "recorded.pt"
    done = subprocess.run([sys.executable, str(HERE / "record_worker.py"), str(root / "target"), str(folder),
                           json.dumps(PROMPT), str(out)], capture_output=True, text=True, timeout=900, check=False)
    assert done.returncode == 0 and out.is_file(), f"{done.stdout[-2000:]}\n{done.stderr[-6000:]}"
    bound = OneiroDrafter.from_pretrained(root / "drafter", target=model)
    return torch.load(out), model, bound


def _slot_states(drafter, aux: torch.Tensor) -> torch.Tensor:
    """vLLM's target states (T, k*H, ascending layers) as the drafter's input states (1, T, k*H): each through
    the target's final norm, in slot order, as `input_states` makes them from a transformers target pass."""
    ascending = sorted(drafter.input_layers)
    chunks = aux.chunk(len(ascending), dim=-1)
    norm = drafter.require_bound().norm
    return torch.cat([norm(chunks[ascending.index(i)]) for i in drafter.input_layers], dim=-1)[None]


def test_vllm_hands_the_drafter_the_target_states_it_reads_in_transformers(recorded):
    record, model, drafter = recorded
    aux = record["combine.aux"]
    assert aux.shape == (len(PROMPT), len(INPUT_LAYERS) * HIDDEN)  # the prompt's positions, three states each
    with torch.no_grad():
        hidden = model(torch.tensor([PROMPT]), output_hidden_states=True).hidden_states
        ours = drafter.input_states(hidden)
    torch.testing.assert_close(_slot_states(drafter, aux), ours, atol=ATOL, rtol=1e-4)


def test_the_modules_fusion_layers_and_logits_are_the_drafters(recorded):
    record, _, drafter = recorded
    hidden = HIDDEN
    states_weight = drafter.fuse.weight[:, : -hidden]
    with torch.no_grad():
        states = _slot_states(drafter, record["combine.aux"])
        torch.testing.assert_close(record["combine.out"], F.linear(states, states_weight)[0], atol=ATOL, rtol=1e-4)
        ids, positions = record["forward.input_ids"], record["forward.positions"]
        assert ids.shape == positions.shape == (len(PROMPT),)
        assert ids[:-1].tolist() == PROMPT[1:] and positions.tolist() == list(range(len(PROMPT)))
        torch.testing.assert_close(record["forward.hidden_states"], record["combine.out"])
        predicted = drafter.transition(states, ids[None], positions[None])
        torch.testing.assert_close(record["forward.predicted"], predicted[0], atol=ATOL, rtol=1e-4)
        recurrent = F.linear(drafter.recurrent_inputs(predicted), states_weight)[0]
        torch.testing.assert_close(record["forward.recurrent"], recurrent, atol=ATOL, rtol=1e-4)
        torch.testing.assert_close(record["logits.hidden_states"], record["forward.predicted"][-1:])
        logits = record["logits.out"]
        draft_ids = drafter.draft_vocab_ids
        torch.testing.assert_close(logits[:, draft_ids], drafter.readout_logits(predicted[0, -1:]), atol=ATOL,
                                   rtol=1e-4)
        elsewhere = torch.ones(logits.shape[-1], dtype=torch.bool)
        elsewhere[draft_ids] = False
        assert torch.isinf(logits[:, elsewhere]).all() and (logits[:, elsewhere] < 0).all()
        # every slot is visible: the slots in another order predict something far from what vLLM computed
        swapped = torch.cat(list(reversed(states.chunk(len(INPUT_LAYERS), dim=-1))), dim=-1)
        wrong = drafter.transition(swapped, ids[None], positions[None])[0]
    assert (wrong - record["forward.predicted"]).abs().max() > 100 * ATOL
