"""Routes `target.generate(..., assistant_model=drafter)` to OneiroCandidateGenerator.

transformers has no public hook for custom candidate generators, so binding a drafter sets two
attributes on that target INSTANCE (never on its class): `generate`, which validates the call and
reads per-call `oneiro_*` settings, and `_get_candidate_generator`, which builds our generator for a
OneiroDrafter and delegates to the class's own method for any other assistant. A third, `_oneiro_hooked`,
marks the instance (configuration_oneiro reads it to tell a hooked target from a never-bound one).

`remove_generate_hook` undoes all three once no drafter is bound to the target any more (several drafters
may share one target), restoring whatever the instance held before (normally nothing: the class's methods).
Which drafters have been bound to a target is kept here, weakly, not on the target.
"""

from __future__ import annotations

import threading
import types
import weakref
from typing import Any

from ..compat import check_transformers_version
from ..kernels.cpu import cpu_kernels
from ..kernels.prepacked_linear import prepacked_linears
from ..settings import DraftingSettings
from .inputs import (
    check_no_custom_generate,
    check_not_padding_only,
    check_unmasked_batch,
    left_padding,
    pad_token_id,
)

_HOOK_MARK = "_oneiro_hooked"
_HOOKED_METHODS = ("generate", "_get_candidate_generator")
_MISSING = object()


class _HookRecord:
    """What hooking one target changed: the drafters bound to it and the instance attributes the hook replaced."""

    def __init__(self, saved: dict[str, Any]) -> None:
        self.drafters: weakref.WeakSet = weakref.WeakSet()
        self.saved = saved  # attribute name -> the instance's own value before hooking, or _MISSING


_hooked: weakref.WeakKeyDictionary[Any, _HookRecord] = weakref.WeakKeyDictionary()
_hooked_lock = threading.Lock()  # drafters bound to one target may bind or unbind from different threads


def _is_drafter(obj: Any) -> bool:
    """A OneiroDrafter, recognised by its class flag (the hook never imports the modeling code)."""
    return getattr(type(obj), "is_oneiro_drafter", False) is True


def _oneiro_generate(self, *args: Any, **kwargs: Any):
    drafter = kwargs.get("assistant_model")
    oneiro_settings = {k[len("oneiro_"):]: kwargs.pop(k) for k in list(kwargs) if k.startswith("oneiro_")}
    if not _is_drafter(drafter):
        if oneiro_settings:
            raise TypeError(
                f"oneiro settings {sorted(oneiro_settings)} were given without a OneiroDrafter. "
                "Fix: pass assistant_model=drafter."
            )
        return type(self).generate(self, *args, **kwargs)
    check_transformers_version()
    with drafter.exclusive_use("generate"):  # held for the whole call: no other thread may re-bind or share it
        return _generate_holding(self, drafter, oneiro_settings, args, kwargs)


def _generate_holding(self, drafter, oneiro_settings: dict[str, Any], args: tuple, kwargs: dict[str, Any]):
    if drafter.target is not self:
        raise ValueError(
            "This drafter is bound to a different target instance (one drafter serves one target at a time). "
            "Fix: drafter.bind(model) to move it, or other = drafter.copy_for(model) for a second drafter."
        )
    drafter.follow_target()
    settings = DraftingSettings.for_call(drafter.config, **oneiro_settings)  # frozen, validated
    gen_config = kwargs.get("generation_config")
    num_beams = kwargs.get("num_beams", getattr(gen_config, "num_beams", None) or self.generation_config.num_beams)
    if num_beams and num_beams > 1:
        raise ValueError(
            f"OneiroDraft speculative decoding runs greedy search or sampling, not beam search (num_beams={num_beams}). "
            "Fix: drop num_beams, or call generate without assistant_model for beam search."
        )
    input_ids = kwargs.get("input_ids", kwargs.get("inputs", args[0] if args else None))
    rows = input_ids.shape[0] if input_ids is not None and input_ids.dim() == 2 else 1
    _check_inputs(self, input_ids, kwargs, rows)
    if rows > 1 or settings.tree:  # several prompts (trees or chains), or one tree: our own decoding loop
        from ..compat import check_tree_supported
        from ..drafting.view import EngineView
        from .loop.custom_generate import tree_generate_function
        from .loop.decode import batch_generate_function

        if rows > 1:
            _check_batch_call(settings, kwargs, rows)
        check_tree_supported(batch=rows > 1)
        view = EngineView.from_drafting_settings(settings) if settings.tree else EngineView.for_chain(settings)
        kwargs.pop("assistant_model")  # generate prepares plain greedy/sampling; the drafter travels in the closure
        kwargs["custom_generate"] = (batch_generate_function(drafter, view) if rows > 1
                                     else tree_generate_function(drafter, view, kwargs.get("streamer")))
    # The call's session lives on the drafter, which this thread holds: on the target (shared by every thread
    # using it) a concurrent call with another drafter could replace it before our candidate generator reads it.
    # on a CPU the target runs oneiro-hf's kernels (kernels/cpu.py): for 16-bit targets (or exact_kernels=True) every
    # row of a verification pass gets a one-token step's bits; its linears, and the drafter's, on weights packed once
    with drafter.drafting_session(settings), cpu_kernels(self, settings.prepack_cpu_weights,
                                                         settings.prepack_max_memory, settings.exact_kernels), \
            prepacked_linears(drafter, settings.prepack_cpu_weights, settings.prepack_max_memory):
        return type(self).generate(self, *args, **kwargs)


def _check_inputs(model, input_ids, kwargs: dict[str, Any], rows: int) -> None:
    """What no call with a drafter takes (`generate_inputs`): its own `custom_generate`, a row of padding only, a
    batch padded other than on the left, or without an attention mask and rows that end with the pad token."""
    check_no_custom_generate(kwargs, rows)
    if input_ids is None or input_ids.dim() != 2:
        return
    mask = kwargs.get("attention_mask")
    if mask is None:
        check_unmasked_batch(input_ids, pad_token_id(kwargs, model.generation_config))
    elif rows > 1:
        left_padding(mask, input_ids)
    else:
        check_not_padding_only(mask)


def _check_batch_call(settings: DraftingSettings, kwargs: dict[str, Any], rows: int) -> None:
    """What a batch of prompts cannot do with a drafter: stream, or use a lossy criterion."""
    if kwargs.get("streamer") is not None:
        raise ValueError(
            f"a streamer shows one sequence, but this call generates {rows} (transformers' TextStreamer refuses "
            "batches too). Fix: drop streamer=, or call generate once per prompt to stream each."
        )
    if settings.verification != "strict":
        raise ValueError(
            f"verification={settings.verification!r} is a lossy chain criterion for one sequence; a batch of prompts "
            "is verified strictly. Fix: drop oneiro_verification, or call generate once per prompt."
        )


def _oneiro_get_candidate_generator(self, generation_config, *args: Any, **kwargs: Any):
    assistant = kwargs.get("assistant_model")
    if not _is_drafter(assistant):
        return type(self)._get_candidate_generator(self, generation_config, *args, **kwargs)
    from .candidate_generator import OneiroCandidateGenerator

    model_kwargs = kwargs.get("model_kwargs") or {}
    if model_kwargs.get("attention_mask") is not None:  # as generate made it (from pad tokens) where none was passed
        check_not_padding_only(model_kwargs["attention_mask"])
    return OneiroCandidateGenerator(  # it finds the call's session itself (drafter.session_for_call)
        assistant,
        generation_config,
        kwargs["logits_processor"],
        user_wants_hidden_states=bool(generation_config.output_hidden_states),
    )


_HOOK_FUNCTIONS = {"generate": _oneiro_generate, "_get_candidate_generator": _oneiro_get_candidate_generator}


def _is_our_hook(model, name: str) -> bool:
    value = vars(model).get(name)
    return getattr(value, "__func__", None) is _HOOK_FUNCTIONS[name] and getattr(value, "__self__", None) is model


def install_generate_hook(model, drafter: Any = None) -> None:
    """Install the instance-level hooks once per target instance (idempotent) and record `drafter` as bound to it."""
    check_transformers_version()
    with _hooked_lock:
        record = _hooked.get(model)
        if record is None or not getattr(model, _HOOK_MARK, False):
            saved = {name: vars(model).get(name, _MISSING) for name in (*_HOOKED_METHODS, _HOOK_MARK)}
            for name in _HOOKED_METHODS:
                if saved[name] is not _MISSING and _is_our_hook(model, name):
                    saved[name] = _MISSING  # hooked before this record existed: ours, not the instance's own
            saved[_HOOK_MARK] = _MISSING
            record = _hooked[model] = _HookRecord(saved)
            model.generate = types.MethodType(_oneiro_generate, model)
            model._get_candidate_generator = types.MethodType(_oneiro_get_candidate_generator, model)
            setattr(model, _HOOK_MARK, True)
        if drafter is not None:
            record.drafters.add(drafter)


def remove_generate_hook(model, drafter: Any) -> bool:
    """Forget that `drafter` is bound to `model`; when no other drafter is, restore the instance as it was.

    All or nothing: if the hooked attributes were replaced after binding (another library wrapped
    `generate`), raises RuntimeError and changes nothing. Returns whether the hooks were removed (False while
    another drafter is still bound to `model`).
    """
    with _hooked_lock:
        record = _hooked.get(model)
        if record is None:
            return False
        others = [d for d in record.drafters if d is not drafter and getattr(d, "target", None) is model]
        if others:
            record.drafters.discard(drafter)
            return False
        foreign = [name for name in _HOOKED_METHODS if not _is_our_hook(model, name)]
        if foreign:
            raise RuntimeError(
                f"{type(model).__name__}.{' and '.join(foreign)} on this target instance is no longer the oneiro-hf "
                "hook installed at binding (something replaced it since), so unbinding cannot restore the target "
                "as it was; nothing was changed. Fix: undo that replacement (e.g. `del model.generate`) before "
                "drafter.unbind(), or leave the drafter bound."
            )
        for name, value in record.saved.items():
            if value is _MISSING:
                vars(model).pop(name, None)
            else:
                setattr(model, name, value)
        del _hooked[model]
        return True
