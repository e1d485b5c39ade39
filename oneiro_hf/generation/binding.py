"""Binding a drafter to its target: the target's shared modules, the one-call-at-a-time lock, bind and unbind.

`TargetBinding` is mixed into `OneiroDrafter`: what `drafter.bind(model)`, `unbind()`, `follow_target()` and
`exclusive_use()` run. Binding checks the target (architecture, recorded config, base weights), shares its
embedding, final norm, rotary embedding and LM head rows (`BoundTarget`, never saved), moves the drafter to the
target's device and dtype, and installs the per-instance `generate` hook (`hook.py`).
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel

from ..configuration_oneiro import DrafterNotBound, not_bound_message
from ..storage.identity import warn_unfingerprinted
from ..targets import DrafterTargetMismatch, base_model, check_supported, target_differences, text_config
from .guard import acquire_guard, release_guard
from .hook import install_generate_hook, remove_generate_hook


class DrafterBusy(RuntimeError):
    """The drafter is in use by another generate call (another thread, or an enclosing call in this one)."""


@dataclass
class BoundTarget:
    """Handles on the target's shared modules, held outside nn.Module registration (never saved)."""

    model: PreTrainedModel
    embed_tokens: nn.Module
    norm: nn.Module
    rotary_emb: nn.Module
    rotary_takes_layer_type: bool
    readout_weight: torch.Tensor  # (draft_vocab, hidden): rows of the target's LM head
    logit_softcap: float | None


class TargetBinding:
    """What binds a drafter to one target at a time and serves one generate call at a time (mixed into
    `OneiroDrafter`; its state is set by `init_binding`, called from the drafter's `__init__`)."""

    def init_binding(self) -> None:
        object.__setattr__(self, "_bound", None)
        # One generate call (or re-bind) at a time: the drafter's per-call settings, statistics and binding are
        # not shareable. _lock_owner is the thread holding the lock, so that thread may re-bind inside its call.
        object.__setattr__(self, "_generate_lock", threading.Lock())
        object.__setattr__(self, "_lock_owner", None)

    def check_target(self, model: PreTrainedModel, allow_base_model_mismatch: bool = False) -> None:
        """Raise DrafterTargetMismatch naming every field in which `model` differs from the recorded target.

        A target of an unsupported architecture raises UnsupportedTarget instead: no drafter fits it.
        """
        check_supported(text_config(model))
        differences = target_differences(self.config, model, allow_base_model_mismatch=allow_base_model_mismatch)
        if not differences and not allow_base_model_mismatch and not self.config.base_model_fingerprint:
            warn_unfingerprinted(self.name_or_path or None)
        if differences:
            raise DrafterTargetMismatch(differences, drafter_name=self.name_or_path or None, target=model)

    @contextlib.contextmanager
    def exclusive_use(self, action: str = "generate"):
        """Hold this drafter for one generate call or re-bind; raise DrafterBusy if it is already held.

        Never waits: a concurrent caller gets a clear error instead of output from an interleaved call. A
        re-bind inside the holding thread's own call (following a moved target) is allowed; a nested generate
        is not (it would replace the running call's settings and statistics).
        """
        me = threading.get_ident()
        fix = "Fix: use one drafter per thread and per target; drafter.copy_for(model) makes one cheaply."
        if self._lock_owner == me:
            if action == "generate":
                raise DrafterBusy(
                    "generate was called with this drafter from inside one of its own generate calls (from a "
                    f"streamer, stopping criterion or logits processor?). {fix}"
                )
            yield
            return
        if not self._generate_lock.acquire(blocking=False):
            if action == "generate":
                raise DrafterBusy(
                    "This drafter is already generating in another thread (a drafter serves one generate call at "
                    f"a time). {fix}"
                )
            raise DrafterBusy(
                f"Cannot {action} this drafter while it is generating in another thread: the running call would "
                f"go on with another target's embedding and LM head. {fix}"
            )
        object.__setattr__(self, "_lock_owner", me)
        try:
            yield
        finally:
            object.__setattr__(self, "_lock_owner", None)
            self._generate_lock.release()

    def bind(self, model: PreTrainedModel, allow_base_model_mismatch: bool = False):
        """Share the target's embedding, final norm, rotary embedding and LM head; follow its device and dtype.

        Refused (DrafterBusy) while another thread is generating with this drafter.
        """
        with self.exclusive_use("bind"):
            return self._bind(model, allow_base_model_mismatch)

    def _bind(self, model: PreTrainedModel, allow_base_model_mismatch: bool):
        self.check_target(model, allow_base_model_mismatch=allow_base_model_mismatch)
        base = base_model(model)
        target_layers = base.layers
        start, _ = self.config.interval
        for i, layer in enumerate(self.layers):
            if type(layer) is not type(target_layers[start + i]):
                raise DrafterTargetMismatch(
                    f"drafter layer {i} is {type(layer).__name__} but target layer {start + i} is "
                    f"{type(target_layers[start + i]).__name__}. Fix: use a drafter made for this target, or "
                    "build one with OneiroDrafter.from_target(model)."
                )
        ref = next(target_layers[start].parameters())
        self.to(device=ref.device, dtype=ref.dtype)
        self.draft_vocab_ids = self.draft_vocab_ids.to(device=ref.device)
        lm_head = model.get_output_embeddings()
        if int(self.draft_vocab_ids.max()) >= lm_head.weight.shape[0]:
            raise DrafterTargetMismatch(
                f"draft_vocab_ids: the drafter reads out token {int(self.draft_vocab_ids.max())}, but the target's "
                f"LM head has {lm_head.weight.shape[0]} rows. Fix: use a drafter made for this target's vocabulary."
            )
        readout = lm_head.weight.detach()
        identity = self.draft_vocab_ids.numel() == readout.shape[0] and bool(
            (self.draft_vocab_ids == torch.arange(readout.shape[0], device=self.draft_vocab_ids.device)).all()
        )
        if not identity:
            readout = readout.index_select(0, self.draft_vocab_ids.to(readout.device))
        rotary = base.rotary_emb
        takes_layer_type = "layer_type" in inspect.signature(rotary.forward).parameters
        softcap = getattr(text_config(model), "final_logit_softcapping", None)
        acquire_guard(self)  # transformers' assistant check is guarded while any drafter is bound (idempotent)
        bound = BoundTarget(model, model.get_input_embeddings(), base.norm, rotary, takes_layer_type, readout, softcap)
        object.__setattr__(self, "_bound", bound)
        self.eval()
        install_generate_hook(model, self)
        return self

    def unbind(self) -> None:
        """Release the target: restore its own `generate` and `_get_candidate_generator` and forget its modules.

        The hook leaves the target instance once no drafter is bound to it (others bound to the same target
        keep it); the instance then holds exactly the attributes it had before binding. All or nothing: if
        something replaced the target's `generate` after binding, RuntimeError names it and nothing changes.
        A drafter that is not bound is left as it is. Refused (DrafterBusy) while a generate call runs with this
        drafter; `bind` binds it again.
        """
        if self._lock_owner == threading.get_ident():
            raise DrafterBusy(
                "unbind was called from inside one of this drafter's own generate calls (from a streamer, stopping "
                "criterion or logits processor?): the running call would lose its target. Fix: unbind after "
                "generate returns."
            )
        with self.exclusive_use("unbind"):
            if self._bound is not None:
                remove_generate_hook(self._bound.model, self)
                object.__setattr__(self, "_bound", None)
                release_guard(self)  # after the last bound drafter, transformers' own assistant check is back

    @property
    def generation_config(self):
        # Reached only when a target WITHOUT our hook treats the drafter as a plain assistant model.
        raise DrafterNotBound(not_bound_message(self.config.base_model_name_or_path))

    @property
    def target(self) -> PreTrainedModel | None:
        return self._bound.model if self._bound is not None else None

    def follow_target(self) -> None:
        """Re-bind if the target was moved or cast since binding (the drafter follows its device and dtype)."""
        bound = self.require_bound()
        start = self.config.interval[0]
        ref = next(base_model(bound.model).layers[start].parameters())
        mine = next(self.parameters())
        if (mine.device, mine.dtype) != (ref.device, ref.dtype) or bound.readout_weight.device != ref.device or (
            bound.readout_weight.dtype != ref.dtype
        ):
            self.bind(bound.model, allow_base_model_mismatch=True)

    def require_bound(self) -> BoundTarget:
        if self._bound is None:
            raise RuntimeError(
                "This drafter is not bound to a target. Fix: drafter.bind(model), or load it with "
                "OneiroDrafter.from_pretrained(path, target=model)."
            )
        return self._bound

    def refresh_readout(self) -> None:
        """Re-gather the readout rows after the draft vocabulary or the target's head changed."""
        bound = self.require_bound()
        self.bind(bound.model, allow_base_model_mismatch=True)
