"""What a generate call with a drafter cannot take, refused before decoding starts (`UnsupportedGenerateCall`).

* Padding. A batch's rows are decoded side by side, drafted tokens appended after the last column, so every
  row's prompt must end there: padding goes on the left (`left_padding` reads it from the attention mask, given
  or made by generate from the pad token). A batch passed without an attention mask cannot tell padding from
  text; a row that ends with the pad token there is taken for right padding. One sequence runs transformers'
  own loop, which takes any mask as plain generate does; a row with no prompt at all (padding only) has nothing
  to continue, alone or in a batch.
* `custom_generate`. It replaces generate's decoding loop: with one prompt the drafter would never be called
  (the caller's loop runs instead), with several the batch's own loop could not run.
"""

from __future__ import annotations

from typing import Any

import torch


class UnsupportedGenerateCall(ValueError):
    """A generate call with a drafter whose inputs or arguments its decoding cannot run as asked (a row of padding
    only, a batch padded other than on the left, `custom_generate`); the message names the problem and ends with
    the fix."""


PAD_LEFT_FIX = (
    'Fix: pad on the left (tokenizer.padding_side = "left") and pass the tokenizer\'s attention_mask '
    "(model.generate(**batch, assistant_model=drafter))."
)


def check_not_padding_only(attention_mask: torch.Tensor) -> None:
    """Refuse a row whose attention mask (B, C) is all zeros: it holds no prompt to continue."""
    empty = (attention_mask.to(torch.long).cpu().sum(-1) == 0).nonzero().flatten().tolist()
    if empty:
        raise UnsupportedGenerateCall(
            f"row {empty[0]} of the input is padding only (its attention_mask is all zeros): there is no prompt to "
            "continue. Fix: drop that row, or give it a prompt."
        )


def left_padding(attention_mask: torch.Tensor | None, input_ids: torch.LongTensor) -> list[int]:
    """Each row's count of leading padding columns (from `attention_mask`, (B, C); None: no padding); refuses a
    row of padding only, right padding and padding inside a prompt (a batch's rows share the columns drafts are
    appended to; one sequence decoded by transformers' own loop takes any mask, as plain generate does)."""
    rows = input_ids.shape[0]
    if attention_mask is None:
        return [0] * rows
    check_not_padding_only(attention_mask)
    mask = attention_mask.to(torch.long).cpu()
    pads = (mask.cumsum(-1) == 0).sum(-1).tolist()
    for row, pad in enumerate(pads):
        if not bool((mask[row, pad:] == 1).all()):
            side = "right" if int(mask[row, -1]) == 0 else "inner"
            raise UnsupportedGenerateCall(
                f"row {row} of the input has {side} padding; speculative decoding appends drafted tokens after "
                f"each row's last column, so prompts must be padded on the left. {PAD_LEFT_FIX}"
            )
    return pads


def check_unmasked_batch(input_ids: torch.LongTensor, pad_token_id: int | None) -> None:
    """A batch passed without an attention mask: refuse it when a row ends with the pad token (`pad_token_id`, the
    generation config's, or its first EOS id where it has none), which is right padding or cannot be told from
    it."""
    if input_ids.dim() != 2 or input_ids.shape[0] < 2 or pad_token_id is None:
        return
    ending = (input_ids[:, -1] == int(pad_token_id)).nonzero().flatten().tolist()
    if ending:
        raise UnsupportedGenerateCall(
            f"row {ending[0]} of the batch ends with the pad token (id {int(pad_token_id)}) and no attention_mask "
            "was passed: right padding, which decoding would take for prompt text (or padding that cannot be told "
            f"from it). {PAD_LEFT_FIX}"
        )


def check_no_custom_generate(kwargs: dict[str, Any], rows: int) -> None:
    """Refuse a caller's `custom_generate` in a generate call with a drafter."""
    if kwargs.get("custom_generate") is None:
        return
    why = ("the drafter would never be called (your loop would run instead of speculative decoding)" if rows == 1
           else f"the batch of {rows} prompts runs oneiro-hf's own batched loop")
    raise UnsupportedGenerateCall(
        f"custom_generate replaces generate's decoding loop, but {why}. Fix: drop custom_generate to decode with "
        "the drafter, or drop assistant_model to run your custom_generate."
    )


def pad_token_id(kwargs: dict[str, Any], model_config: Any) -> int | None:
    """The pad id generate will use: the call's `pad_token_id`, else its generation config's, else the model's
    generation config's; where none is set, the first EOS id (as generate falls back to it)."""
    call_config = kwargs.get("generation_config")
    for name in ("pad_token_id", "eos_token_id"):
        for value in (kwargs.get(name), getattr(call_config, name, None), getattr(model_config, name, None)):
            if value is not None:
                if isinstance(value, (list, tuple)):
                    value = value[0] if value else None
                elif isinstance(value, torch.Tensor):
                    value = value.flatten()[0] if value.numel() else None
                if value is not None:
                    return int(value)
    return None
