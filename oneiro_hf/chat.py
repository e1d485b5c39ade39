"""The token ids a target sees for a prompt: the one place a prompt becomes ids, for the benchmark and training.

A prompt is a conversation (a list of {"role", "content"} messages) or a single user message (a str, the
same as a one-turn conversation). With the tokenizer's chat template it is rendered to text with the
assistant turn opened and tokenised without extra special tokens (a template that writes its own BOS does
not get a second one); a tokenizer without a template (a base model) reads the messages' contents joined
by blank lines, with its usual special tokens.
"""

from __future__ import annotations

from typing import Any


def has_chat_template(tokenizer: Any) -> bool:
    """Whether prompts should be wrapped in the tokenizer's chat template (base models have none)."""
    return bool(getattr(tokenizer, "chat_template", None))


def encode_prompt(tokenizer: Any, prompt: str | list[dict[str, str]]) -> list[int]:
    """Token ids (a list of ints, no batch dimension) of `prompt`: a user message or a whole conversation."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if not messages:
        raise ValueError("encode_prompt got an empty conversation. Fix: pass a prompt string or at least one message.")
    if has_chat_template(tokenizer):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer("\n\n".join(m["content"] for m in messages))["input_ids"])
