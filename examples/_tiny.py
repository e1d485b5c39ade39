"""A tiny random chat model saved to disk, so every example's `--tiny` run takes the real code path in seconds.

It is a 4-layer Llama with a word-level tokenizer and a chat template. Its text is nonsense, but loading,
drafting, training and benchmarking treat it exactly like a downloaded model directory.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIALS = ["<unk>", "<s>", "<|end|>", "<|user|>", "<|assistant|>"]
WORDS = (  # the vocabulary besides the special tokens; anything else reads as <unk>
    "the a an of to in and or is are was be it this that for on with as by at from not but what how why "
    "which who write summarize explain translate list give name one two three four five python function "
    "code data file number text word sentence question answer model fast slow good small large first last "
    "time day year people world city water light sun tree book story line list value return print . , : ? !"
)
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ '<|' + m['role'] + '|> ' + m['content'] + ' <|end|> ' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|> ' }}{% endif %}"
)


def make_tiny_target(directory: str | Path, seed: int = 0) -> str:
    """Write a tiny random Llama and its tokenizer to `directory`; return the path to pass as a target."""
    directory = Path(directory)
    vocab = {token: i for i, token in enumerate(SPECIALS + sorted(set(WORDS.split())))}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.normalizer = normalizers.Lowercase()
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<s>", eos_token="<|end|>", pad_token="<unk>",
        additional_special_tokens=["<|user|>", "<|assistant|>"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024, initializer_range=0.1,
        bos_token_id=vocab["<s>"], eos_token_id=vocab["<|end|>"], pad_token_id=vocab["<unk>"],
    )
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return str(directory)
