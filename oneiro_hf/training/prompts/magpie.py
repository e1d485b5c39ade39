"""Source ``magpie``: the target itself writes user questions when sampled from its chat template's
user-turn prefix; also the turn-ending token ids self-distillation stops on."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from ...chat import has_chat_template, plain_user_prefix
from .records import Prompt, make_prompt

logger = logging.getLogger(__name__)


_SENTINEL = "\x00ONEIRO_USER_TURN\x00"


def user_turn_prefix(tokenizer: Any) -> str:
    """Text of the chat template up to where the user's message starts (system prompt included); for a target
    without a template, the plain question/answer document's (`oneiro_hf.chat`).

    Rendering a conversation with a sentinel user message and cutting at the sentinel works for any template,
    unlike rendering an empty conversation, which many templates turn into an empty string.
    """
    if not has_chat_template(tokenizer):
        return plain_user_prefix()
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": _SENTINEL}], tokenize=False)
    cut = rendered.find(_SENTINEL)
    if cut <= 0:
        raise ValueError(
            "Could not locate the user turn in the tokenizer's chat template; magpie prompts need a template that "
            "renders the user's message verbatim. Use the stdlib/synthetic/debian sources instead."
        )
    return rendered[:cut]


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


def _looks_like_question(text: str) -> bool:
    """Reject empty, tiny, runaway or repetitive samples."""
    words = text.split()
    if len(words) < 4 or len(text) > 1500:
        return False
    return len(set(words)) >= 0.5 * len(words) or len(words) < 12


def magpie_prompts(
    model: Any,
    tokenizer: Any,
    seed: int = 0,
    batch_size: int = 16,
    max_new_tokens: int = 96,
    temperature: float = 0.9,
    top_p: float = 0.95,
    max_empty_batches: int = 20,
) -> Iterator[Prompt]:
    """Let the target write user questions by sampling from its user-turn prefix (deduplicated).

    Only samples that end with an end-of-turn token are kept (a cut-off question is not a question). Sampling
    runs inside a forked RNG so it does not disturb the caller's random state.
    """
    if model is None or tokenizer is None:
        raise ValueError(
            "The magpie source needs the target model and its tokenizer: pass model= and tokenizer=."
        )
    import torch

    prefix = user_turn_prefix(tokenizer)
    plain = not has_chat_template(tokenizer)
    enc = tokenizer(prefix, return_tensors="pt", add_special_tokens=plain)
    stop_ids = stop_token_ids(tokenizer, model)
    if plain:  # base model: a newline ends the question
        stop_ids = sorted(
            set(stop_ids) | {i for t, i in tokenizer.get_vocab().items() if t in ("\n", "Ċ", "<0x0A>")}
        )
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    device = next(model.parameters()).device
    input_ids = enc["input_ids"].to(device).repeat(batch_size, 1)
    seen: set[str] = set()
    empty, batch_index = 0, 0
    while empty < max_empty_batches:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            torch.manual_seed(seed * 100003 + batch_index)
            out = model.generate(
                input_ids=input_ids,
                attention_mask=torch.ones_like(input_ids),
                do_sample=True,
                temperature=temperature,
                top_p=top_p,
                top_k=0,
                max_new_tokens=max_new_tokens,
                eos_token_id=stop_ids,
                pad_token_id=pad_id,
            )
        batch_index += 1
        new = 0
        for row in out[:, input_ids.shape[1] :].tolist():
            stop_at = next((i for i, t in enumerate(row) if t in stop_ids), None)
            if stop_at is None:
                continue
            text = tokenizer.decode(row[:stop_at], skip_special_tokens=True).strip()
            key = " ".join(text.lower().split())
            if not _looks_like_question(text) or key in seen:
                continue
            seen.add(key)
            new += 1
            yield make_prompt("magpie", text)
        empty = 0 if new else empty + 1
        if batch_index % 10 == 0:
            logger.info("magpie: %d questions kept from %d samples", len(seen), batch_index * batch_size)

