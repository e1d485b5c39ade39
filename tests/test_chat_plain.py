"""A target without a chat template (a base model such as Gemma-3-270M) sees a plain question/answer document
(oneiro_hf/chat.py), and the benchmark feeds it exactly the ids its self-distillation data was made from."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
from tiny import make_model
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from oneiro_hf.bench import runner
from oneiro_hf.chat import PLAIN_HEADER, encode_prompt, plain_prompt_text
from oneiro_hf.training.selfdistill import generate_self_distillation_data


def _base_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer without a chat template that adds BOS, as a base model's does."""
    words = PLAIN_HEADER.split() + ["Question:", "Answer:", "System:"] + [f"w{i}" for i in range(20)]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({w: 3 + i for i, w in enumerate(dict.fromkeys(words))})
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<unk>")


def test_plain_document_for_one_and_several_turns():
    header = "Below is a question that someone asked an expert, and the expert's answer."
    assert plain_prompt_text([{"role": "user", "content": "  Hi there \n"}]) == f"{header}\n\nQuestion: Hi there\n\nAnswer:"
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "a?"},
             {"role": "assistant", "content": " b."}, {"role": "user", "content": "c?"}]
    assert plain_prompt_text(turns) == f"{header}\n\nBe brief.\n\nQuestion: a?\n\nAnswer: b.\n\nQuestion: c?\n\nAnswer:"


def test_encode_prompt_without_template_tokenises_the_document_with_one_bos():
    tok = _base_tokenizer()
    vocab = tok.get_vocab()
    expected = [1] + [vocab[w] for w in PLAIN_HEADER.split()] + [vocab["Question:"], vocab["w1"], vocab["w2"],
                                                                 vocab["Answer:"]]
    assert encode_prompt(tok, "w1 w2") == expected
    turns = [{"role": "user", "content": "w1 w2"}, {"role": "assistant", "content": " w3"},
             {"role": "user", "content": "w4"}]
    assert encode_prompt(tok, turns) == expected + [vocab["w3"], vocab["Question:"], vocab["w4"], vocab["Answer:"]]


def test_an_unknown_role_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="role 'tool'.*Fix: use the roles"):
        encode_prompt(_base_tokenizer(), [{"role": "tool", "content": "w1"}])


def test_benchmark_feeds_a_base_target_the_ids_of_its_self_distillation_records(tmp_path, monkeypatch):
    tok = _base_tokenizer()
    model = make_model("gemma3", vocab=64)
    prompts = [{"id": "q1", "source": "user", "prompt": "w1 w2 w3"}, {"id": "q2", "source": "user", "prompt": "w4"}]
    out = tmp_path / "data.jsonl"
    generate_self_distillation_data(model, tok, prompts, out, max_new_tokens=3, batch_size=2, progress=False)
    records = {rec["id"]: rec for rec in map(json.loads, out.read_text().splitlines())}

    fed: list[list[int]] = []

    def fake_generate_once(ctx, method, input_ids, max_new_tokens):
        fed.append(input_ids[0].tolist())
        return {"tokens": [5, 6], "wall_time": 0.0, "draft_lengths": [], "accepted": [], "draft_time_s": 0.0,
                "oneiro_stats": None}

    monkeypatch.setattr(runner, "generate_once", fake_generate_once)
    ctx = SimpleNamespace(tokenizer=tok, model=SimpleNamespace(device=torch.device("cpu")))
    for rec in prompts:
        runner.run_question(ctx, "greedy", {"question_id": rec["id"], "category": "x", "turns": [rec["prompt"]]}, 3)
    assert fed == [records["q1"]["input_ids"], records["q2"]["input_ids"]]
    assert fed[0][0] == tok.bos_token_id and fed[0][-1] == tok.get_vocab()["Answer:"]
