"""encode_prompt (oneiro_hf/chat.py): the one way a prompt or a conversation becomes a target's token ids."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from oneiro_hf.chat import encode_prompt

TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ '<|' + m['role'] + '|> ' + m['content'] + ' ' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}"
)


def _tokenizer(template: str | None) -> PreTrainedTokenizerFast:
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, "<|user|>": 3, "<|assistant|>": 4}
    vocab.update({f"w{i}": 5 + i for i in range(20)})
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    tok.chat_template = template
    return tok


def test_a_prompt_is_a_one_turn_conversation_and_the_template_bos_is_not_doubled():
    tok = _tokenizer(TEMPLATE)
    assert encode_prompt(tok, "w1 w2") == encode_prompt(tok, [{"role": "user", "content": "w1 w2"}]) == [1, 3, 6, 7, 4]
    turns = [{"role": "user", "content": "w1"}, {"role": "assistant", "content": "w2"},
             {"role": "user", "content": "w3"}]
    assert encode_prompt(tok, turns) == [1, 3, 6, 4, 7, 3, 8, 4]


def test_an_empty_conversation_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="empty conversation. Fix:"):
        encode_prompt(_tokenizer(TEMPLATE), [])
