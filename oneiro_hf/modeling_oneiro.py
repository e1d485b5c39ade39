"""OneiroDrafter: a few of the target's own decoder layers, rolled forward in the target's state space.

A draft step takes the target's (or the drafter's own predicted) final-normed hidden state h_t and the
embedding of token x_{t+1}, fuses them into the residual stream of layer `start`, runs copies of the
target's layers [start, end) with the drafter's own KV cache, and applies the target's final norm to
get the predicted state h_{t+1}. The readout is the target's LM head restricted to a draft vocabulary.
Embedding, final norm, rotary embedding and LM head are borrowed from the bound target at run time and
are never part of the drafter's checkpoint.
"""

from __future__ import annotations

import copy
import importlib
import inspect
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AutoConfig, PreTrainedModel
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

from .compat import cache_keyword, check_transformers_version, hidden_states_selection
from .configuration_oneiro import OneiroDrafterConfig
from .drafting.kv_cache import DrafterKVCache
from .drafting.memory import MemoryOwner
from .generation.binding import (
    DrafterBusy,  # noqa: F401 - a public name, re-exported
    TargetBinding,
)
from .generation.session import SessionOwner
from .storage.identity import (
    canonical_model_id,
    compute_fingerprint,
    fingerprinted_tensors,
    weights_quantization,
    weights_source,
)
from .targets import (  # noqa: F401 - SUPPORTED_MODEL_TYPES and the errors are re-exported (public names)
    SUPPORTED_MODEL_TYPES,
    DrafterTargetMismatch,
    TargetDifference,
    UnsupportedTarget,
    base_model,
    check_supported,
    select_input_states,
    target_differences,
    text_config,
)

_CUDA_SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
TRANSITION_CHUNK = 1024  # cached positions fed per forward when the drafter catches up on a long prompt


def resolve_input_layers(input_layers: tuple[int, ...] | list[int] | None, num_layers: int) -> list[int] | None:
    """Validated `input_layers` as non-negative `output_hidden_states` indices (-1 is `num_layers`, the
    final-normed last state); None for the default (the final-normed last state only)."""
    if input_layers is None:
        return None
    resolved = [int(i) + num_layers + 1 if int(i) < 0 else int(i) for i in input_layers]
    if not resolved or any(not 0 <= i <= num_layers for i in resolved) or len(set(resolved)) != len(resolved):
        raise ValueError(
            f"input_layers {list(input_layers)} must be distinct indices into the target's output_hidden_states, "
            f"0..{num_layers} (or -1 for the final-normed last state). Fix: e.g. input_layers=("
            f"{num_layers // 4}, {num_layers // 2}, {num_layers})."
        )
    return None if resolved == [num_layers] else resolved


def _decoder_layer_class(text_config) -> type[nn.Module]:
    """The target's own decoder-layer class, found through its Auto mapping (no modeling copies)."""
    model_cls = MODEL_FOR_CAUSAL_LM_MAPPING[type(text_config)]
    module = importlib.import_module(model_cls.__module__)
    return getattr(module, model_cls._no_split_modules[0])


TRANSITION_INITS = ("target", "random")


def _init_like_target(layer: nn.Module, target: PreTrainedModel) -> None:
    """Re-initialise `layer` as the target's class initialises a new model (its `_init_weights`, so per-architecture
    details such as Gemma's zero-centred norms hold)."""
    for param in layer.parameters():
        if hasattr(param, "_is_hf_initialized"):
            del param._is_hf_initialized  # transformers' init functions skip tensors flagged as done
    for module in layer.modules():
        target._init_weights(module)


class OneiroDrafter(TargetBinding, SessionOwner, MemoryOwner, PreTrainedModel):
    """Latent drafter made of copies of target decoder layers [start, end) plus a small input fusion."""

    config_class = OneiroDrafterConfig
    is_oneiro_drafter = True  # how the generate hook (generation/hook.py) recognises a drafter
    base_model_prefix = "oneiro"
    main_input_name = "input_ids"
    _supports_sdpa = True
    _no_split_modules: tuple[str, ...] = ()

    def __init__(self, config: OneiroDrafterConfig) -> None:
        super().__init__(config)
        if config.target_config is None or config.interval is None:
            raise ValueError(
                "OneiroDrafterConfig needs target_config and interval. Fix: build drafters with "
                "OneiroDrafter.from_target(model) or load them with OneiroDrafter.from_pretrained(path, target=model)."
            )
        layer_config = self.build_target_config(config)
        check_supported(layer_config)
        layer_config._attn_implementation = "sdpa"
        layer_cls = _decoder_layer_class(layer_config)
        start, end = config.interval
        self.layers = nn.ModuleList([layer_cls(layer_config, layer_idx=i) for i in range(start, end)])
        # the keyword the layers take the drafter's KV cache by (it differs between transformers releases)
        object.__setattr__(self, "cache_keyword", cache_keyword(layer_cls))
        hidden = config.hidden_size
        # [state slot 1 ; ... ; state slot k ; token embedding] -> residual stream entering layer `start`
        self.fuse = nn.Linear((len(self.input_layers) + 1) * hidden, hidden, bias=True)
        vocab = config.draft_vocab_size or config.vocab_size
        self.register_buffer("draft_vocab_ids", torch.arange(vocab, dtype=torch.long), persistent=True)
        self.post_init()
        self.init_binding()
        self.init_sessions()

    @staticmethod
    def build_target_config(config: OneiroDrafterConfig):
        data = dict(config.target_config)
        model_type = data.pop("model_type")
        return AutoConfig.for_model(model_type, **data)

    def _init_weights(self, module: nn.Module) -> None:
        # Layers are overwritten by target weights in from_target or by the checkpoint; keep fusion sane.
        if module is getattr(self, "fuse", None):
            nn.init.zeros_(module.weight)
            nn.init.zeros_(module.bias)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_target(
        cls,
        model: PreTrainedModel,
        interval: tuple[int, int] | None = None,
        draft_vocab_ids: torch.Tensor | list[int] | None = None,
        transition_init: str = "target",
        input_layers: tuple[int, ...] | list[int] | None = None,
        **draft_settings: Any,
    ) -> OneiroDrafter:
        """A fresh drafter whose transition copies target layers `interval` (default: the last two).

        `input_layers` (multi-layer input, as EAGLE-3): indices into the target's `output_hidden_states` (0 the
        embeddings, i the output of decoder layer i-1, num_hidden_layers or -1 the final-normed last state) whose
        states are fused with the token embedding; default (and `(-1,)`): the final-normed last state only.

        `transition_init="random"` initialises those layers the way the target's own class initialises a new
        model instead of copying them: the baseline of the init ablation (docs/training.md), rarely useful else.
        """
        check_transformers_version()
        if transition_init not in TRANSITION_INITS:
            raise ValueError(
                f"transition_init must be one of {', '.join(TRANSITION_INITS)} (got {transition_init!r}). Fix: use "
                "'target' (copy the target's layers, the method) or 'random' (the ablation baseline)."
            )
        config_t = text_config(model)
        check_supported(config_t)
        num_layers = config_t.num_hidden_layers
        if interval is None:
            interval = (max(0, num_layers - 2), num_layers)
        start, end = (int(interval[0]), int(interval[1]))
        if not (0 <= start < end <= num_layers):
            raise ValueError(
                f"interval {tuple(interval)} is outside the target's {num_layers} decoder layers. Fix: pass "
                f"interval=(start, end) with 0 <= start < end <= {num_layers}, e.g. ({num_layers - 2}, {num_layers})."
            )
        input_layers = resolve_input_layers(input_layers, num_layers)
        if draft_vocab_ids is not None:
            draft_vocab_ids = torch.as_tensor(draft_vocab_ids, dtype=torch.long).flatten()
            if (
                draft_vocab_ids.numel() == 0
                or int(draft_vocab_ids.max()) >= config_t.vocab_size
                or int(draft_vocab_ids.min()) < 0
            ):
                raise ValueError(
                    f"draft_vocab_ids must be a non-empty list of ids in [0, {config_t.vocab_size}) "
                    f"(the target's vocab size {config_t.vocab_size})."
                )
            if draft_vocab_ids.unique().numel() != draft_vocab_ids.numel():
                raise ValueError("draft_vocab_ids contains duplicates. Fix: pass unique token ids.")
        unknown = set(draft_settings) - set(inspect.signature(OneiroDrafterConfig.__init__).parameters)
        if unknown:
            raise TypeError(f"unknown drafter settings {sorted(unknown)}")
        base_tensors = fingerprinted_tensors(model, base_model(model), (start, end))
        config = OneiroDrafterConfig(
            target_config=config_t.to_dict(),
            base_model_name_or_path=canonical_model_id(model),
            base_model_revision=getattr(model.config, "_commit_hash", None),
            target_architecture=type(model).__name__,
            hidden_size=config_t.hidden_size,
            vocab_size=config_t.vocab_size,
            num_target_layers=num_layers,
            interval=(start, end),
            input_layers=input_layers,
            draft_vocab_size=None if draft_vocab_ids is None else int(draft_vocab_ids.numel()),
            base_model_fingerprint=compute_fingerprint(
                base_tensors, source=weights_source(model), quantization=weights_quantization(model, base_tensors)
            ),
            **draft_settings,
        )
        drafter = cls(config)
        target_layers = base_model(model).layers
        with torch.no_grad():
            for i, layer in enumerate(drafter.layers):
                if transition_init == "target":
                    layer.load_state_dict(target_layers[start + i].state_dict())
                else:
                    _init_like_target(layer, model)
            hidden = config.hidden_size
            # Untrained default: the fused input is the embedding of the token just drafted.
            drafter.fuse.weight.zero_()
            drafter.fuse.weight[:, -hidden:].copy_(torch.eye(hidden))
            drafter.fuse.bias.zero_()
            if draft_vocab_ids is not None:
                drafter.draft_vocab_ids = draft_vocab_ids.clone()
        drafter.bind(model)
        return drafter

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path: str | os.PathLike,
        *args: Any,
        target=None,
        allow_base_model_mismatch: bool = False,
        rebuild_on_mismatched_base: bool = False,
        **kwargs: Any,
    ):
        """Load a trained drafter and bind it to `target` (required: the drafter shares its head).

        `allow_base_model_mismatch=True` binds a drafter stored whole to a target with other base weights (a
        fine-tune). A target-relative checkpoint is rebuilt from the target's weights, so on another base it would be
        another drafter: refused unless `rebuild_on_mismatched_base=True`, which rebuilds it there and warns
        (`RebuiltOnOtherWeights`)."""
        check_transformers_version()
        if target is None:
            raise ValueError(
                "OneiroDrafter.from_pretrained needs the target it drafts for. Fix: "
                "OneiroDrafter.from_pretrained(path_or_repo_id, target=model)."
            )
        from .storage.checkpoint import HUB_KWARGS, CorruptCheckpoint, resolve_checkpoint

        hub_kwargs = {key: kwargs.pop(key) for key in HUB_KWARGS if key in kwargs}
        kwargs.pop("_commit_hash", None)  # AutoModel's; the resolved snapshot below is what gets loaded
        resolved = resolve_checkpoint(pretrained_model_name_or_path, **hub_kwargs)
        if resolved.weights_storage() is not None:  # only the differences from the target are stored
            from .storage.target_relative import load_target_relative

            if args or kwargs:
                raise TypeError(
                    f"{pretrained_model_name_or_path} is stored relative to its target, and is rebuilt in the "
                    f"dtype it was saved in; from_pretrained does not take {sorted(kwargs) or list(args)} for it. "
                    "Fix: drop them; the drafter follows the target's device and dtype when bound."
                )
            drafter = load_target_relative(cls, resolved.directory, target, rebuild_on_mismatched_base,
                                           name=str(pretrained_model_name_or_path))
            allow_base_model_mismatch = allow_base_model_mismatch or rebuild_on_mismatched_base
        else:
            if rebuild_on_mismatched_base:
                raise TypeError(
                    f"rebuild_on_mismatched_base applies to drafters stored relative to their target, but "
                    f"{pretrained_model_name_or_path} stores its weights whole (nothing is rebuilt). Fix: drop it; "
                    "allow_base_model_mismatch=True binds a whole drafter to a fine-tune of its base."
                )
            kwargs["output_loading_info"] = True
            drafter, info = super().from_pretrained(resolved.directory, *args, **kwargs)
            missing = sorted(info.get("missing_keys") or [])
            if missing:
                raise CorruptCheckpoint(
                    f"{pretrained_model_name_or_path} lacks {len(missing)} drafter weight(s), e.g. {missing[:3]} "
                    f"(a partial save or download?). Fix: {resolved.fix()}."
                )
        if resolved.repo_id is not None:  # name it as the user did, not by its cache folder
            drafter.name_or_path = resolved.repo_id
            drafter.config._name_or_path = resolved.repo_id
            drafter.config._commit_hash = resolved.commit
        drafter.bind(target, allow_base_model_mismatch=allow_base_model_mismatch)
        return drafter

    def push_to_hub(
        self,
        repo_id: str,
        *,
        commit_message: str | None = None,
        commit_description: str | None = None,
        private: bool | None = None,
        token: str | bool | None = None,
        revision: str | None = None,
        create_pr: bool = False,
        tags: list[str] | None = None,
        **card_kwargs: Any,
    ):
        """Publish config.json, model.safetensors (drafter weights and draft vocabulary) and a generated card.

        Card arguments (license, base_model, bench_summary, training_info, hardware, ...) as for
        oneiro_hf.storage.hub.publish_drafter, which does the work; returns the commit's CommitInfo.
        """
        from .storage.hub import publish_drafter

        return publish_drafter(
            self,
            repo_id,
            commit_message=commit_message,
            commit_description=commit_description,
            private=private,
            token=token,
            revision=revision,
            create_pr=create_pr,
            tags=tags,
            **card_kwargs,
        )

    def copy_for(self, target: PreTrainedModel | None = None, allow_base_model_mismatch: bool = False) -> OneiroDrafter:
        """An independent drafter (own weights, settings and learned policy) bound to `target` (default: this one's).

        An empty suffix memory. One generate call at a time: give each thread, and each target, its own copy."""
        model = target if target is not None else self.require_bound().model
        twin = type(self)(copy.deepcopy(self.config))
        twin.load_state_dict(self.state_dict())
        twin.name_or_path = self.name_or_path
        twin.bind(model, allow_base_model_mismatch=allow_base_model_mismatch)
        if self.policy_state is not None:
            twin.policy_state = copy.deepcopy(self.policy_state)
        return twin

    # ------------------------------------------------------------------ computation
    def _layer_types(self) -> list[str | None]:
        types = self.config.target_config.get("layer_types")
        start, end = self.config.interval
        return [types[i] if types else None for i in range(start, end)]

    def transition(
        self,
        states: torch.Tensor,
        token_ids: torch.LongTensor,
        position_ids: torch.LongTensor,
        cache: DrafterKVCache | None = None,
        mask_fn: Callable[[int | None], torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Predict the (final-normed) states at `position_ids` from the previous states and tokens there.

        states: (B, Q, k*H) input states of the position before each token (k = len(input_layers), 1 by default:
        `input_states` of a target pass, or `recurrent_inputs` of predicted states); token_ids: (B, Q);
        position_ids: (B, Q).
        With a cache, the Q entries attend to everything cached plus themselves causally; `mask_fn(window)`,
        when given, returns each layer's (1, 1, Q, cached+Q) bool mask instead (tree drafts: siblings side by
        side), `window` being the layer's sliding window or None. With a cache and no `mask_fn`, more than
        TRANSITION_CHUNK entries (a long prompt caught up at once) are fed in chunks of that many, so the
        attention of one chunk over the cache, not of the whole prompt over itself, bounds the memory.
        """
        bound = self.require_bound()
        q = token_ids.shape[1]
        chunk = q if cache is None or mask_fn is not None else TRANSITION_CHUNK
        outs = []
        for s in range(0, q, chunk):
            part = (states[:, s : s + chunk], token_ids[:, s : s + chunk], position_ids[:, s : s + chunk])
            if token_ids.device.type == "cuda":
                # cuDNN attention re-plans for every new key length (about 40 ms a step on an H200): skip it.
                with sdpa_kernel(_CUDA_SDPA_BACKENDS):
                    outs.append(self._transition(bound, *part, cache, mask_fn))
            else:
                outs.append(self._transition(bound, *part, cache, mask_fn))
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)

    def _transition(self, bound, states, token_ids, position_ids, cache, mask_fn=None):
        x = self.fuse_inputs(states, bound.embed_tokens(token_ids))
        q, past = x.shape[1], cache.seq_length if cache is not None else 0
        if mask_fn is None:
            def mask_fn(window: int | None) -> torch.Tensor | None:
                return self._mask(q, past, window, x.device)
        out = self.run_layers(x, self.rotary_embeddings(x, position_ids), position_ids, mask_fn, cache)
        if cache is not None:
            cache.commit()
        return out

    def fuse_inputs(self, states: torch.Tensor, token_embeddings: torch.Tensor) -> torch.Tensor:
        """(B, Q, H) input of layer `start`: the fusion of each previous input state (B, Q, k*H), k =
        len(input_layers), with its token's embedding (B, Q, H)."""
        return self.fuse(torch.cat([states.to(token_embeddings.dtype), token_embeddings], dim=-1))

    # ------------------------------------------------------------------ input states (multi-layer input)
    @property
    def input_layers(self) -> tuple[int, ...]:
        """The target's `output_hidden_states` indices that feed the fusion, in slot order."""
        if self.config.input_layers is not None:
            return tuple(self.config.input_layers)
        return (int(self.config.num_target_layers or self.config.target_config["num_hidden_layers"]),)

    @property
    def context_layers(self) -> tuple[int, ...]:
        """The target's `output_hidden_states` indices that enter the copied layers (index i enters decoder layer i):
        what a drafter with exact verified context (`config.verified_context == "exact"`) makes its keys and values
        at verified positions from; () for a drafter that makes them itself in its catch-up pass."""
        if getattr(self.config, "verified_context", "own") != "exact":
            return ()
        start, end = self.config.interval
        return tuple(range(start, end))

    @property
    def hidden_states_request(self) -> int | list[int] | bool:
        """What the verification pass passes as `output_hidden_states`: only the states the drafter reads."""
        if self.config.input_layers is None and not self.context_layers:
            return -1
        return hidden_states_selection(sorted({*self.input_layers, *self.context_layers}))

    def input_states(self, hidden_states: tuple) -> torch.Tensor:
        """The drafter's input states (B, T, k*H) from a target pass's `hidden_states` (L+1 entries, None where not
        requested): the final-normed last state as it is, every other selected state through the target's final
        norm (the pre-norm residual stream has a few dimensions in the thousands)."""
        if self.config.input_layers is None:
            return hidden_states[-1]
        return select_input_states(hidden_states, self.input_layers, self.require_bound().norm)

    def context_inputs(self, hidden_states: tuple) -> torch.Tensor | None:
        """(B, T, n, H): the residual stream entering each of the n copied layers, from a target pass's
        `hidden_states`, for a drafter with exact verified context; None for one that keeps its own."""
        layers = self.context_layers
        if not layers:
            return None
        missing = [i for i in layers if hidden_states[i] is None]
        if missing:
            raise RuntimeError(
                f"the target pass did not return hidden states {missing}, which this drafter's exact context reads. "
                f"Fix: run the target with output_hidden_states={self.hidden_states_request} (or True)."
            )
        return torch.stack([hidden_states[i] for i in layers], dim=2)

    def attend_context(self, layer_inputs: torch.Tensor, position_ids: torch.LongTensor, cache: Any) -> None:
        """Write the keys and values of verified positions into `cache`: each copied layer's own attention over
        its true input there (the target's residual stream entering it), so that its projections (and q/k norms,
        rotary, whatever the architecture has) make them. layer_inputs: (B, Q, n, H) (`context_inputs`);
        position_ids: (B, Q). The attention outputs are dropped, so no mask is built (keys and values do not
        depend on it); drafting and training read these entries through their own masks."""
        rotary = self.rotary_embeddings(layer_inputs, position_ids)
        for j, (layer, layer_type) in enumerate(zip(self.layers, self._layer_types())):
            layer.self_attn(
                hidden_states=layer.input_layernorm(layer_inputs[:, :, j].to(self.fuse.weight.dtype)),
                position_embeddings=rotary[layer_type],
                attention_mask=None,
                position_ids=position_ids,
                **{self.cache_keyword: cache},
            )

    def write_context(self, layer_inputs: torch.Tensor, position_ids: torch.LongTensor, cache: DrafterKVCache) -> None:
        """`attend_context` into a drafting cache, in chunks of TRANSITION_CHUNK positions (a long prompt's first
        catch-up), each committed. layer_inputs: (1, Q, n, H); position_ids: (1, Q)."""
        q = position_ids.shape[1]
        for s in range(0, q, TRANSITION_CHUNK):
            self.attend_context(layer_inputs[:, s : s + TRANSITION_CHUNK], position_ids[:, s : s + TRANSITION_CHUNK],
                                cache)
            cache.commit()

    def recurrent_inputs(self, predicted: torch.Tensor) -> torch.Tensor:
        """(B, Q, k*H) input states for speculative positions, where only the drafter's predicted final-normed
        state (B, Q, H) exists: it fills every slot (training's rollout does the same)."""
        k = len(self.input_layers)
        return predicted if k == 1 else torch.cat([predicted] * k, dim=-1)

    def rotary_embeddings(self, like: torch.Tensor, position_ids: torch.LongTensor) -> dict[str | None, tuple]:
        """The target's (cos, sin) at `position_ids` for each layer type of the copied layers; `like` gives the
        dtype and device."""
        bound = self.require_bound()
        rotary: dict[str | None, tuple[torch.Tensor, torch.Tensor]] = {}
        for layer_type in self._layer_types():
            if layer_type not in rotary:
                args = (like, position_ids, layer_type) if bound.rotary_takes_layer_type else (like, position_ids)
                rotary[layer_type] = bound.rotary_emb(*args)
        return rotary

    def run_layers(
        self,
        x: torch.Tensor,
        rotary: dict[str | None, tuple],
        position_ids: torch.LongTensor,
        mask_for_window: Callable[[int | None], torch.Tensor | None],
        cache: Any = None,
    ) -> torch.Tensor:
        """The one transition, shared by drafting (`transition`) and training (`parallel_rollout`).

        x: (B, Q, H) fused inputs; rotary: `rotary_embeddings` at position_ids (B, Q); mask_for_window(window)
        gives each layer's boolean (1, 1, Q, K) mask (or None) for its sliding window (None: full attention);
        cache: what the layers' attention calls `update` on. Returns the predicted final-normed states (B, Q, H).
        """
        for layer, layer_type in zip(self.layers, self._layer_types()):
            out = layer(
                x,
                position_embeddings=rotary[layer_type],
                attention_mask=mask_for_window(self._sliding_window(layer)),
                position_ids=position_ids,
                **{self.cache_keyword: cache},
            )
            x = out[0] if isinstance(out, tuple) else out
        return self.require_bound().norm(x)

    @staticmethod
    def _sliding_window(layer: nn.Module) -> int | None:
        """The layer's attention window: Qwen2/Gemma3 keep it on the attention, Mistral only in the config."""
        attn = layer.self_attn
        if hasattr(attn, "sliding_window"):
            return attn.sliding_window
        return getattr(attn.config, "sliding_window", None)

    @staticmethod
    def _mask(q: int, past: int, window: int | None, device: torch.device) -> torch.Tensor | None:
        """Boolean (1, 1, q, past+q) mask: causal, and within the sliding window where the layer has one."""
        total = past + q
        if q == 1 and (window is None or total <= window):
            return None
        rows = torch.arange(q, device=device).unsqueeze(1) + past
        cols = torch.arange(total, device=device).unsqueeze(0)
        allowed = cols <= rows
        if window is not None:
            allowed &= cols > rows - window
        return allowed[None, None]

    def readout_logits(self, states: torch.Tensor) -> torch.Tensor:
        """Logits over the draft vocabulary (index i is target token draft_vocab_ids[i])."""
        bound = self.require_bound()
        logits = F.linear(states, bound.readout_weight)
        if bound.logit_softcap:
            logits = torch.tanh(logits / bound.logit_softcap) * bound.logit_softcap
        return logits

    def forward(self, states: torch.Tensor, input_ids: torch.LongTensor, position_ids=None, **kwargs: Any):
        """Teacher-forced pass for training: next states and draft-vocabulary logits for every position."""
        if position_ids is None:
            position_ids = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
            position_ids = position_ids.expand(input_ids.shape[0], -1)
        next_states = self.transition(states, input_ids, position_ids)
        return next_states, self.readout_logits(next_states)
