"""The token ids a target sees for a prompt: the one place a prompt becomes ids, for the benchmark and training.

A prompt is a conversation (a list of {"role", "content"} messages) or a single user message (a str, the
same as a one-turn conversation). With the tokenizer's chat template it is rendered to text with the
assistant turn opened and tokenised without extra special tokens (a template that writes its own BOS does
not get a second one).

A tokenizer without a template (a base model, e.g. Gemma-3-270M) gets a plain question/answer document
instead, with the tokenizer's usual special tokens; a base model given the bare user text mostly repeats or
continues it, while after "Answer:" it answers::

    Below is a question that someone asked an expert, and the expert's answer.

    Question: <user message>

    Answer: <assistant message>

    Question: <next user message>

    Answer:

A system message is a paragraph of its own before the first question. Message contents are stripped of
surrounding whitespace (a decoded answer starts with the space that followed "Answer:").

`stop_token_ids` is the other side of a turn: the token ids that end the target's answer; `left_pad` makes
prompts' ids one batch.
"""

from __future__ import annotations

from typing import Any

PLAIN_HEADER = "Below is a question that someone asked an expert, and the expert's answer."
PLAIN_LABELS = {"user": "Question:", "assistant": "Answer:"}


def has_chat_template(tokenizer: Any) -> bool:
    """Whether prompts should be wrapped in the tokenizer's chat template (base models have none)."""
    return bool(getattr(tokenizer, "chat_template", None))


def plain_prompt_text(messages: list[dict[str, str]]) -> str:
    """The plain question/answer document of `messages` (module docstring), ending with an open "Answer:"."""
    blocks = [PLAIN_HEADER]
    for message in messages:
        role, content = message["role"], message["content"].strip()
        if role == "system":
            blocks.append(content)
        elif role in PLAIN_LABELS:
            blocks.append(f"{PLAIN_LABELS[role]} {content}")
        else:
            raise ValueError(
                f"encode_prompt got a message with role {role!r}, which a target without a chat template cannot "
                "show. Fix: use the roles 'system', 'user' and 'assistant'."
            )
    blocks.append(PLAIN_LABELS["assistant"])
    return "\n\n".join(blocks)


def encode_prompt(tokenizer: Any, prompt: str | list[dict[str, str]]) -> list[int]:
    """Token ids (a list of ints, no batch dimension) of `prompt`: a user message or a whole conversation."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if not messages:
        raise ValueError("encode_prompt got an empty conversation. Fix: pass a prompt string or at least one message.")
    if has_chat_template(tokenizer):
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return list(tokenizer(plain_prompt_text(messages))["input_ids"])


def stop_token_ids(tokenizer: Any, model: Any | None = None) -> list[int]:
    """Token ids that end a turn: the model's and tokenizer's EOS plus the template's end-of-turn marker."""
    ids: set[int] = set()
    gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in ([gen_eos] if isinstance(gen_eos, int) else list(gen_eos or [])) + [tokenizer.eos_token_id]:
        if value is not None:
            ids.add(int(value))
    template = getattr(tokenizer, "chat_template", None) or ""
    for marker in ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>", "</s>"):
        if marker in template:
            tok_id = tokenizer.convert_tokens_to_ids(marker)
            if isinstance(tok_id, int) and tok_id != getattr(tokenizer, "unk_token_id", None):
                ids.add(tok_id)
    return sorted(ids)


def left_pad(prompts: list[list[int]], pad_id: int, device=None):
    """(input_ids, attention_mask), both (B, T) with T the longest prompt: each row right-aligned, the pad id and
    mask 0 before it, as a decoder-only model's batched generate needs."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        if prompt:
            ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
            mask[row, width - len(prompt):] = 1
    return ids.to(device), mask.to(device)
