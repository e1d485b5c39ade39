"""The OneiroDraft drafter as a vLLM model: what `oneiro-export vllm` folders run as inside vLLM's EAGLE-3 path.

vLLM's hidden-state draft path calls `combine_hidden_states` on the target's states of the newly verified
positions (the fusion's state part), `forward` over those positions and once per further draft token (the
fusion's token part, the copied layers as vLLM's own decoder layers, the target's final norm) and
`compute_logits` (the target's LM-head rows of the draft vocabulary, scattered into the full vocabulary). vLLM
asserts that an `eagle3` draft model is one of its EAGLE-3 classes, hence the subclass of
`Eagle3LlamaForCausalLM`; nothing of that class's layout is used, and the token embedding is the target's
(`has_own_embed_tokens`). docs/serving.md ("Why the method is `eagle3`", "What runs where in vLLM") gives the
full mapping.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn
from vllm.config import VllmConfig
from vllm.model_executor.layers.layernorm import RMSNorm
from vllm.model_executor.layers.logits_processor import LogitsProcessor
from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead
from vllm.model_executor.model_loader.weight_utils import default_weight_loader
from vllm.model_executor.models.llama_eagle3 import Eagle3LlamaForCausalLM
from vllm.model_executor.models.utils import get_draft_quant_config, maybe_prefix

from .vllm_export import VLLM_CONFIG_KEY, VLLM_FORMAT, VLLM_TARGET_TYPES, target_mismatch
from .vllm_lookup import RequestLookup, kept_rows
from .vllm_pricing import DraftPricer

# HF tensor name part -> (vLLM fused parameter name part, shard): vLLM stacks q/k/v and gate/up
_STACKED = {
    ".q_proj.": (".qkv_proj.", "q"),
    ".k_proj.": (".qkv_proj.", "k"),
    ".v_proj.": (".qkv_proj.", "v"),
    ".gate_proj.": (".gate_up_proj.", 0),
    ".up_proj.": (".gate_up_proj.", 1),
}


def _decoder_layer(model_type: str, vllm_config: VllmConfig, config, prefix: str) -> nn.Module:
    """One of vLLM's own decoder layers of the target's architecture, built from the target's config."""
    quant_config = get_draft_quant_config(vllm_config)
    if model_type == "llama":
        from vllm.model_executor.models.llama import LlamaDecoderLayer

        class _DraftLlamaLayer(LlamaDecoderLayer):
            def get_quant_config(self, vllm_config: VllmConfig):
                return quant_config  # the draft folder's (unquantized) weights, not the target's scheme

        return _DraftLlamaLayer(vllm_config, prefix=prefix, config=config)
    if model_type == "qwen2":
        from vllm.model_executor.models.qwen2 import Qwen2DecoderLayer

        return Qwen2DecoderLayer(config, cache_config=vllm_config.cache_config, quant_config=quant_config,
                                 prefix=prefix)
    raise ValueError(
        f"the oneiro vLLM plugin has no decoder layer for target type '{model_type}' (supported: "
        f"{', '.join(VLLM_TARGET_TYPES)}). Fix: export the drafter again with oneiro-export vllm, which refuses "
        "drafters it cannot serve, or serve it with transformers' generate."
    )


class _TargetEmbedding(nn.Module):
    """Stands for the target's token embedding until vLLM's proposer puts the target's own in its place (it reads
    `embed_tokens.weight`, which is None here: no tensor to compare, nothing allocated)."""

    weight = None

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        raise RuntimeError(
            "the oneiro drafter has no token embedding: vLLM shares the target's after loading the draft model. "
            "Fix: load the folder as a draft model, speculative_config={'method': 'eagle3', 'model': FOLDER, ...}."
        )


class OneiroDrafterStack(nn.Module):
    """The drafter's transition in vLLM: fusion, copied layers, final norm. `embed_tokens` is the target's,
    set by vLLM's proposer after loading."""

    def __init__(self, vllm_config: VllmConfig, config, prefix: str) -> None:
        super().__init__()
        info = getattr(config, VLLM_CONFIG_KEY, None)
        if not isinstance(info, dict) or info.get("format") != VLLM_FORMAT:
            raise ValueError(
                f"the draft folder's config.json has no '{VLLM_CONFIG_KEY}' section of format {VLLM_FORMAT} (got "
                f"{info!r}). Fix: write the folder with this oneiro-hf's `oneiro-export vllm`."
            )
        target = vllm_config.model_config.hf_config
        mismatch = target_mismatch(info, target.get_text_config().to_dict())
        if mismatch is not None:
            raise ValueError(mismatch)
        self.num_target_layers = int(info["num_target_layers"])
        self.input_layers = [int(i) for i in info["input_layers"]]
        order = sorted(self.input_layers)  # vLLM returns the target's states in ascending layer order
        self.slot_source = [order.index(i) for i in self.input_layers]
        hidden = config.hidden_size
        self.hidden_size = hidden
        start, end = info["interval"]
        config.target_layer_count = self.num_target_layers  # layer_types index drafter-relative (llama)
        self.layers = nn.ModuleList([
            _decoder_layer(config.model_type, vllm_config, config,
                           maybe_prefix(prefix, f"layers.{self.num_target_layers + j}"))
            for j in range(end - start)
        ])
        slots = len(self.input_layers)
        self.fuse_weight = nn.Parameter(torch.empty(hidden, (slots + 1) * hidden), requires_grad=False)
        self.fuse_bias = nn.Parameter(torch.empty(hidden), requires_grad=False)
        self.norm = RMSNorm(hidden, eps=config.rms_norm_eps)
        self.embed_tokens: nn.Module = _TargetEmbedding()

    def states_part(self, states: torch.Tensor) -> torch.Tensor:
        """(T, k*H) input states in slot order -> (T, H) their part of the fusion, W_s [s_1; ...; s_k]."""
        return F.linear(states, self.fuse_weight[:, : -self.hidden_size])

    def combine(self, aux: torch.Tensor) -> torch.Tensor:
        """(T, k*H) the target's residual streams at the input layers, ascending -> (T, H) the fusion's state
        part: each through the target's final norm, in the drafter's slot order."""
        chunks = aux.chunk(len(self.input_layers), dim=-1)
        normed = [self.norm(chunks[i].contiguous()) for i in self.slot_source]
        return self.states_part(torch.cat(normed, dim=-1))

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, hidden_states: torch.Tensor,
                inputs_embeds: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        token_part = F.linear(inputs_embeds, self.fuse_weight[:, -self.hidden_size :], self.fuse_bias)
        x, residual = hidden_states.to(token_part.dtype) + token_part, None
        for layer in self.layers:
            x, residual = layer(positions, x, residual)
        predicted, _ = self.norm(x, residual)
        recurrent = self.states_part(torch.cat([predicted] * len(self.input_layers), dim=-1))
        return predicted, recurrent


class OneiroDrafterEagle3(Eagle3LlamaForCausalLM):
    """A OneiroDraft drafter exported by `oneiro-export vllm`, run by vLLM's `eagle3` draft path."""

    has_own_embed_tokens = False  # the target's embedding is the drafter's: vLLM shares it
    has_own_lm_head = True  # the draft-vocabulary rows of the target's head are in the folder

    def __init__(self, *, vllm_config: VllmConfig, prefix: str = "") -> None:
        nn.Module.__init__(self)
        speculative_config = vllm_config.speculative_config
        if speculative_config is None:
            raise ValueError(
                "a oneiro drafter folder was loaded as a model of its own. Fix: pass it as the draft model, "
                "LLM(model=TARGET, speculative_config={'method': 'eagle3', 'model': FOLDER, ...})."
            )
        hf_config = speculative_config.draft_model_config.hf_config
        # vLLM wraps the folder's config (the target's text config, model_type included) in an EAGLEConfig
        self.config = getattr(hf_config, "model", None) or hf_config
        self.model = OneiroDrafterStack(vllm_config, self.config, maybe_prefix(prefix, "model"))
        draft_vocab = int(self.config.draft_vocab_size)
        self.vocab_size = int(self.config.vocab_size)
        self.lm_head = ParallelLMHead(draft_vocab, self.config.hidden_size,
                                      quant_config=get_draft_quant_config(vllm_config),
                                      prefix=maybe_prefix(prefix, "lm_head"))
        self.logits_processor = LogitsProcessor(draft_vocab,
                                                soft_cap=getattr(self.config, "final_logit_softcapping", None))
        self.register_buffer("draft_vocab_ids", torch.zeros(draft_vocab, dtype=torch.long), persistent=False)
        self.draft_id_to_target_id = None  # EAGLE-3's offsets: unused, compute_logits maps ids itself
        self.use_parallel_drafting = False
        info = getattr(self.config, VLLM_CONFIG_KEY, None) or {}
        lookup, profile = info.get("lookup"), info.get("step_profile")
        # the hybrid (exported with --hybrid) and the priced draft length (--step-profile): the runner's draft step
        # hands each step's rows to them
        self.lookup = RequestLookup(int(lookup["min_ngram"]), int(lookup["max_ngram"])) if lookup else None
        self.pricer = DraftPricer(profile) if profile else None
        if self.lookup is not None or self.pricer is not None:
            install_draft_hook()

    def embed_input_ids(self, input_ids: torch.Tensor, multimodal_embeddings=None,
                        is_multimodal=None) -> torch.Tensor:
        return self.model.embed_tokens(input_ids)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, hidden_states: torch.Tensor,
                inputs_embeds: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        if self.pricer is not None and not self.pricer.wants_call():
            # no request verifies what this call would draft (`DraftPricer.wants_call`): skip the layers
            empty = hidden_states.new_zeros((hidden_states.shape[0], self.model.hidden_size))
            return empty, empty
        return self.model(input_ids, positions, hidden_states, inputs_embeds)

    def combine_hidden_states(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.model.combine(hidden_states)

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor | None:
        pricer = self.pricer
        if pricer is not None and pricer.active and pricer.skipping:  # a skipped call's tokens are cut unread
            return hidden_states.new_zeros((hidden_states.shape[0], self.vocab_size), dtype=torch.float32)
        logits = self.logits_processor(self.lm_head, hidden_states)
        if logits is None:
            return None
        if pricer is not None and pricer.active:
            pricer.record(logits.float().softmax(-1).amax(-1))
        full = logits.new_full((logits.shape[0], self.vocab_size), float("-inf"))
        full[:, self.draft_vocab_ids] = logits
        return full

    def get_top_tokens(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.compute_logits(hidden_states).argmax(dim=-1)

    def _parameter_name(self, name: str) -> tuple[str, str | int | None]:
        """An exported tensor's name -> (this module's parameter name, its shard in a stacked parameter)."""
        if name.startswith("layers."):
            for hf_part, (part, shard) in _STACKED.items():
                if hf_part in name:
                    return "model." + name.replace(hf_part, part), shard
            return "model." + name, None
        if name in ("fuse.weight", "fuse.bias"):
            return "model." + name.replace(".", "_"), None
        if name == "norm.weight":
            return "model.norm.weight", None
        return name, None

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
        params = dict(self.named_parameters())
        loaded: set[str] = set()
        for name, tensor in weights:
            if name == "draft_vocab_ids":
                self.draft_vocab_ids.copy_(tensor.to(self.draft_vocab_ids.device))
                loaded.add(name)
                continue
            param_name, shard = self._parameter_name(name)
            if param_name not in params:
                raise ValueError(
                    f"the draft folder holds '{name}', which the oneiro drafter has no place for. Fix: write the "
                    "folder with this oneiro-hf's `oneiro-export vllm`."
                )
            param = params[param_name]
            loader = getattr(param, "weight_loader", default_weight_loader)
            if shard is None:
                loader(param, tensor)
            else:
                loader(param, tensor, shard)
            loaded.add(param_name)
        if "draft_vocab_ids" not in loaded:
            raise ValueError("the draft folder lacks 'draft_vocab_ids'. Fix: export it again with oneiro-export vllm.")
        loaded.discard("draft_vocab_ids")
        return loaded


def install_draft_hook() -> None:
    """Wrap vLLM's runner draft step (`GPUModelRunner.propose_draft_token_ids`, which vLLM's CPU runner inherits)
    once per process, for a draft model with a `lookup` (`RequestLookup`: the hybrid) or a `pricer` (`DraftPricer`:
    the priced draft length). Before the drafter proposes, the lookup finds the rows whose text has an n-gram match
    and the pricer learns from the step's verdicts; after it, those rows take their lookup continuation and the
    pricer cuts each row to its priced length (a list per request, as vLLM's n-gram path returns). Other draft
    models and methods pass through unchanged."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    original = GPUModelRunner.propose_draft_token_ids
    if getattr(original, "oneiro_draft_hook", False):
        return

    @functools.wraps(original)
    def propose_draft_token_ids(self, scheduler_output, sampled_token_ids, *args, **kwargs):
        model = getattr(self.drafter, "model", None)
        if hasattr(model, "unwrap"):  # a GPU runner wraps the draft model for CUDA graphs (vLLM's own propose does too)
            model = model.unwrap()
        lookup, pricer = getattr(model, "lookup", None), getattr(model, "pricer", None)
        if lookup is None and pricer is None:
            return original(self, scheduler_output, sampled_token_ids, *args, **kwargs)
        if pricer is not None and self.use_async_scheduling:
            raise RuntimeError(
                "the oneiro drafter's priced draft length returns a draft per request of its own length, which "
                "vLLM's asynchronous scheduling cannot take. Fix: start vLLM with --no-async-scheduling, or export "
                "the folder again without --step-profile."
            )
        batch = self.input_batch
        req_ids, kept = list(batch.req_ids), kept_rows(sampled_token_ids)
        found = (lookup.continuations(req_ids, batch.token_ids_cpu, batch.num_tokens_no_spec, kept,
                                      self.num_spec_tokens) if lookup is not None else {})
        if pricer is not None:
            pricer.begin(req_ids, kept, found)
        try:
            drafts = original(self, scheduler_output, sampled_token_ids, *args, **kwargs)
            if not torch.is_tensor(drafts):
                raise RuntimeError(
                    f"vLLM's draft step returned {type(drafts).__name__}, not the (requests, k) tensor of its "
                    "EAGLE-3 path that the oneiro hybrid and priced draft length rewrite. Fix: serve the folder with "
                    "vLLM's supported release (oneiro_hf.serving.vllm_plugin.SUPPORTED_VLLM), or export it again "
                    "without --hybrid and --step-profile."
                )
            if lookup is not None:
                drafts = lookup.apply(drafts, found)
            return pricer.cut(drafts.tolist()) if pricer is not None else drafts
        finally:
            if pricer is not None:
                pricer.finish()

    propose_draft_token_ids.oneiro_draft_hook = True
    GPUModelRunner.propose_draft_token_ids = propose_draft_token_ids
