"""Tree verification behaves like `generate`: streamer, returned dict, logits processors, config defaults, and
each unsupported request refused with its fix."""

from __future__ import annotations

import pytest
import torch
from tiny import FLAT_PROFILE, make_model, repeat_prompt
from transformers.generation.logits_process import LogitsProcessor, LogitsProcessorList
from transformers.generation.streamers import BaseStreamer

from oneiro_hf import OneiroDrafter
from oneiro_hf.generation.loop.target_cache import UnsupportedTreeCache


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(1)
    model = make_model("qwen2", layers=2, window=4, hidden=32, vocab=64, strength="prefix")
    drafter = OneiroDrafter.from_target(model, interval=(0, 2))
    drafter.use_latency_profile(FLAT_PROFILE, learn=False)  # trees that pay, whatever this machine's load
    return model, drafter


class Collect(BaseStreamer):
    def __init__(self) -> None:
        self.chunks: list[list[int]] = []
        self.ended = False

    def put(self, value):
        self.chunks.append(value.flatten().tolist())

    def end(self):
        self.ended = True


class Forbid(LogitsProcessor):
    """Bans one token everywhere: the tree must honour processors at every node it walks."""

    def __init__(self, token: int) -> None:
        self.token = token

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, self.token] = -float("inf")
        return scores


def test_streamer_dict_output_and_processors_match_plain_generate(pair):
    model, drafter = pair
    ids = repeat_prompt([5, 9, 14, 7, 30], 3)
    plain_first = model.generate(ids, do_sample=False, max_new_tokens=12)
    banned = int(plain_first[0, ids.shape[1] + 2])
    processors = LogitsProcessorList([Forbid(banned)])
    kwargs = {"do_sample": False, "max_new_tokens": 12, "logits_processor": processors,
              "return_dict_in_generate": True, "output_scores": True, "output_logits": True}
    plain = model.generate(ids, **kwargs)
    streamer = Collect()
    tree = model.generate(ids, assistant_model=drafter, oneiro_tree=True, streamer=streamer, **kwargs)
    assert torch.equal(tree.sequences, plain.sequences)
    assert banned not in tree.sequences[0, ids.shape[1]:].tolist()
    assert len(tree.scores) == len(plain.scores) == len(tree.logits) == 12
    for mine, theirs in zip(tree.scores, plain.scores):
        torch.testing.assert_close(mine, theirs, atol=1e-4, rtol=1e-4)
    for mine, theirs in zip(tree.logits, plain.logits):
        torch.testing.assert_close(mine, theirs, atol=1e-4, rtol=1e-4)
    assert streamer.ended and streamer.chunks[0] == ids[0].tolist()  # the prompt first, as generate sends it
    assert [t for chunk in streamer.chunks[1:] for t in chunk] == tree.sequences[0, ids.shape[1]:].tolist()
    assert drafter.last_stats.accepted_tokens > 0 and len(streamer.chunks) - 1 < 12  # several tokens per pass


def test_config_default_turns_trees_on_and_a_call_turns_them_off(pair):
    model, drafter = pair
    ids = repeat_prompt([3, 8, 11], 4)
    drafter.config.tree = True
    try:
        model.generate(ids, do_sample=False, max_new_tokens=6, assistant_model=drafter)
        assert drafter.last_stats.tree_nodes
        model.generate(ids, do_sample=False, max_new_tokens=6, assistant_model=drafter, oneiro_tree=False)
        assert not drafter.last_stats.tree_nodes
    finally:
        drafter.config.tree = False


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"oneiro_verification": "topk"}, ValueError, "Fix: drop oneiro_verification"),
        ({"oneiro_tree_max_nodes": 0}, ValueError, "tree_max_nodes must be >= 1"),
        ({"output_attentions": True, "return_dict_in_generate": True}, ValueError, "Fix: drop output_attentions"),
        ({"cache_implementation": "static"}, UnsupportedTreeCache, "Fix: let generate make its default cache"),
        ({"custom_generate": lambda *a, **k: None}, ValueError, "Fix: drop custom_generate"),
        ({"attention_mask": torch.tensor([[0, 1, 1, 1, 1, 1]])}, ValueError, "unpadded prompt"),
    ],
)
def test_unsupported_requests_are_refused_with_the_fix(pair, kwargs, error, message):
    model, drafter = pair
    ids = repeat_prompt([3, 8], 3)
    with pytest.raises(error, match=message):
        model.generate(ids, do_sample=False, max_new_tokens=4, assistant_model=drafter, oneiro_tree=True, **kwargs)


def test_eager_attention_takes_the_additive_tree_mask():
    """Eager attention adds the mask to the scores: the tree path builds a float mask there, and the output is
    still plain greedy's (gemma3: sliding and full layers, window 3, shorter than the context)."""
    model = make_model("gemma3", layers=2, window=3, hidden=32, vocab=64, strength="prefix")
    model.set_attn_implementation("eager")
    drafter = OneiroDrafter.from_target(model, interval=(0, 2))
    for pattern in ([5, 9, 14], [7, 21, 33, 40]):
        ids = repeat_prompt(pattern, 3)
        plain = model.generate(ids, do_sample=False, max_new_tokens=10)
        tree = model.generate(ids, do_sample=False, max_new_tokens=10, assistant_model=drafter, oneiro_tree=True,
                              oneiro_cost_aware=False)
        assert torch.equal(tree, plain)
        assert drafter.last_stats.tree_nodes and max(drafter.last_stats.tree_nodes) > 1


def test_long_prompt_is_caught_up_in_chunks_and_stays_lossless():
    """A prompt longer than the drafter's catch-up chunk, generation up to max_length (the drafter's cache limit
    leaves room for the speculative nodes of a full tree)."""
    from oneiro_hf.modeling_oneiro import TRANSITION_CHUNK as CATCH_UP_CHUNK

    model = make_model("qwen2", layers=2, window=8, hidden=32, vocab=64, strength="prefix",
                       max_position_embeddings=4096)
    drafter = OneiroDrafter.from_target(model, interval=(0, 2))
    ids = repeat_prompt(list(range(3, 40)), CATCH_UP_CHUNK // 37 + 2)
    assert ids.shape[1] > CATCH_UP_CHUNK
    plain = model.generate(ids, do_sample=False, max_new_tokens=12)
    tree = model.generate(ids, do_sample=False, max_new_tokens=12, assistant_model=drafter, oneiro_tree=True,
                          oneiro_cost_aware=False, oneiro_mode="latent")
    assert torch.equal(tree, plain)
    assert drafter.last_stats.accepted_tokens > 0
