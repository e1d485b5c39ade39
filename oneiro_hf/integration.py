"""Routes `target.generate(..., assistant_model=drafter)` to OneiroCandidateGenerator.

transformers has no public hook for custom candidate generators, so binding a drafter sets two
attributes on that target INSTANCE (never on its class): `generate`, which validates the call and
reads per-call `oneiro_*` settings, and `_get_candidate_generator`, which builds our generator for a
OneiroDrafter and delegates to the class's own method for any other assistant.
"""

from __future__ import annotations

import types
from typing import Any

from .compat import check_transformers_version
from .cpu_kernels import cpu_kernels
from .settings import DraftingSettings

_HOOK_MARK = "_oneiro_hooked"


def _is_drafter(obj: Any) -> bool:
    """A OneiroDrafter, recognised by its class flag (integration never imports the modeling code)."""
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
    input_ids = kwargs.get("input_ids", args[0] if args else None)
    if input_ids is not None and input_ids.dim() == 2 and input_ids.shape[0] > 1:
        raise ValueError(
            f"OneiroDraft speculative decoding supports batch size 1 (got {input_ids.shape[0]} sequences), as "
            "transformers' assisted decoding does. Fix: call generate once per prompt, or without assistant_model "
            "for batched generation."
        )
    if settings.tree:  # the tree owns its decoding loop: generate's public custom_generate runs it
        from .compat import check_tree_supported
        from .tree.loop import TreeSettings, tree_generate_function

        check_tree_supported()

        if kwargs.get("custom_generate") is not None:
            raise ValueError("oneiro_tree=True runs its own custom_generate. Fix: drop custom_generate, or oneiro_tree.")
        tree_settings = TreeSettings.from_drafting_settings(settings)
        kwargs.pop("assistant_model")  # generate prepares plain greedy/sampling; the drafter travels in the closure
        kwargs["custom_generate"] = tree_generate_function(drafter, tree_settings, kwargs.get("streamer"))
    # The call's session lives on the drafter, which this thread holds: on the target (shared by every thread
    # using it) a concurrent call with another drafter could replace it before our candidate generator reads it.
    # verification passes read the cache once per key/value head, not once per query head, and on a CPU run the
    # linears on weights reordered once (cpu_kernels.py)
    with drafter.drafting_session(settings), cpu_kernels(self, settings.prepack_cpu_weights):
        return type(self).generate(self, *args, **kwargs)


def _oneiro_get_candidate_generator(self, generation_config, *args: Any, **kwargs: Any):
    assistant = kwargs.get("assistant_model")
    if not _is_drafter(assistant):
        return type(self)._get_candidate_generator(self, generation_config, *args, **kwargs)
    from .candidate_generator import OneiroCandidateGenerator

    session = assistant.current_session or assistant.new_session()  # None: generate called past our hook
    return OneiroCandidateGenerator(
        assistant,
        generation_config,
        kwargs["logits_processor"],
        session,
        user_wants_hidden_states=bool(generation_config.output_hidden_states),
    )


def install_generate_hook(model) -> None:
    """Install the instance-level hooks once per target instance (idempotent)."""
    check_transformers_version()
    if getattr(model, _HOOK_MARK, False):
        return
    model.generate = types.MethodType(_oneiro_generate, model)
    model._get_candidate_generator = types.MethodType(_oneiro_get_candidate_generator, model)
    setattr(model, _HOOK_MARK, True)
