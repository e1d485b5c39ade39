"""Refuses a drafter given to the `generate` of a model it is not bound to, before transformers' own checks.

A bound target's `generate` is our hook (hook.py), which checks the drafter itself. A model that never
had a drafter bound runs transformers' `generate`, whose first look at an assistant is
`GenerationMixin._validate_generation_mode`: it compares the two models' vocabulary sizes, so a drafter made for
another vocabulary would get transformers' "different tokenizers" message instead of the real problem (one of
the same vocabulary goes on to `OneiroDrafter.generation_config`, which raises `DrafterNotBound`).

transformers has no public hook there, so while at least one drafter is bound, that one method of
`GenerationMixin` is wrapped: when the call's assistant is a OneiroDrafter (known by its class flag) and the model
running `generate` does not carry our hook, it raises `DrafterNotBound`; every other call, and every other model,
passes through unchanged. `acquire_guard(drafter)` at binding installs the wrapper for the first bound drafter,
`release_guard(drafter)` at unbinding restores transformers' own method after the last (drafters collected while bound
stop counting). It reads the assistant from the method's own arguments, so the drafter's config stays a plain
`PretrainedConfig` whose `get_text_config()` is itself.
"""

from __future__ import annotations

import functools
import threading
import weakref
from typing import Any

from transformers.generation.utils import GenerationMixin

from ..configuration_oneiro import DrafterNotBound, not_bound_message
from .hook import _HOOK_MARK  # the mark install_generate_hook sets on a bound target instance

_GUARD_MARK = "_oneiro_assistant_guard"
_lock = threading.Lock()
_holders: weakref.WeakSet = weakref.WeakSet()  # the drafters bound now


def refuse_unbound_drafter(model: Any, generation_mode_kwargs: dict[str, Any]) -> None:
    """DrafterNotBound if `model` runs transformers' own `generate` (no hook) with a OneiroDrafter as assistant."""
    assistant = generation_mode_kwargs.get("assistant_model")
    if getattr(type(assistant), "is_oneiro_drafter", False) is True and not getattr(model, _HOOK_MARK, False):
        raise DrafterNotBound(not_bound_message(assistant.config.base_model_name_or_path))


def installed() -> bool:
    """Whether `GenerationMixin._validate_generation_mode` is the guard now."""
    return getattr(GenerationMixin._validate_generation_mode, _GUARD_MARK, False)


def acquire_guard(drafter: Any) -> None:
    """Count `drafter` as bound; the first bound drafter wraps `GenerationMixin._validate_generation_mode`."""
    with _lock:
        _holders.add(drafter)
        original = GenerationMixin._validate_generation_mode
        if getattr(original, _GUARD_MARK, False):
            return

        @functools.wraps(original)
        def _validate_generation_mode(self, generation_mode, generation_config, generation_mode_kwargs):
            refuse_unbound_drafter(self, generation_mode_kwargs)
            return original(self, generation_mode, generation_config, generation_mode_kwargs)

        setattr(_validate_generation_mode, _GUARD_MARK, True)
        GenerationMixin._validate_generation_mode = _validate_generation_mode


def release_guard(drafter: Any) -> None:
    """Stop counting `drafter`; after the last bound drafter, transformers' own method is back.

    If something wrapped the method again after the guard was installed, the guard stays inside that wrapper
    (removing it would drop the other wrapper too)."""
    with _lock:
        _holders.discard(drafter)
        current = GenerationMixin._validate_generation_mode
        if len(_holders) == 0 and getattr(current, _GUARD_MARK, False):
            GenerationMixin._validate_generation_mode = current.__wrapped__
