"""OneiroTrainer: trains a OneiroDrafter against its frozen target with the transformers Trainer.

Stage 1 (teacher forcing): drafter position p takes the target's true state H[p-1] and token x[p] and must
predict H[p] (state loss on per-dimension normalised states) and, through the readout, the target's next
token (token loss: KL to the target's distribution over the draft vocabulary, or CE to its argmax).

Stage 2 (joint rollouts, "training-time test"): K recurrent steps run in parallel over all positions. Step k
feeds step k-1's predicted states, shifted by one position, back in with the true tokens (the target's greedy
tokens are the accepted path), so the output of step k at position p is the k-th draft step of a chain that
started from the true state H[p-k]. Attention reproduces inference exactly: the query of step k at p sees
the step-1 keys (teacher-forced, the drafter's cache of accepted tokens) up to the chain start p-k+1 and the
chain's own keys of steps 2..k on the diagonal. ``parallel_rollout`` with K steps therefore equals K
sequential ``transition`` calls with a ``DrafterKVCache`` (tests check this), and it is also how held-out
acceptance and tau are measured.

Only the drafter trains (fuse + copied layers); the target is frozen, held outside the trained module and
never saved. Checkpoints are ordinary Trainer checkpoints holding the drafter (``save_pretrained``) plus the
state statistics, so ``resume_from_checkpoint`` continues exactly; resuming a checkpoint made for another
interval, draft vocabulary size or target fails before anything is written.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import Trainer, TrainerCallback
from transformers.trainer_pt_utils import LengthGroupedSampler, get_length_grouped_indices

from .arguments import STAGES, OneiroTrainingArguments, parse_interval, parse_step_weights  # noqa: F401 (re-exported)
from .features import IGNORE, collate, complete_features, iter_feature_batches, loss_mask
from .kept_features import StreamedFeatureKeeper
from .rollout import parallel_rollout, rollout_mask, rollout_start  # noqa: F401 (re-exported)
from .timebox import TimeBoxCallback, TrainingClock, follow_time_box

logger = logging.getLogger(__name__)

TRAINING_STATE_FILE = "oneiro_training.safetensors"
TRAINING_INFO_FILE = "oneiro_training.json"


class CheckpointMismatch(ValueError):
    """A checkpoint was made with a different drafter configuration than the current run."""


class OutputDirHasDrafter(FileExistsError):
    """The output directory already holds a finished drafter."""


def _draft_index(drafter: Any, labels: torch.Tensor) -> torch.Tensor:
    """Map full-vocabulary labels to draft-vocabulary indices (-100 where ignored or outside the vocabulary)."""
    vocab = drafter.draft_vocab_ids
    lut = torch.full((int(drafter.config.vocab_size),), IGNORE, dtype=torch.long, device=labels.device)
    lut[vocab.to(labels.device)] = torch.arange(vocab.numel(), device=labels.device)
    return torch.where(labels >= 0, lut[labels.clamp_min(0)], torch.full_like(labels, IGNORE))


class DrafterTrainModule(nn.Module):
    """What the Trainer optimises: the drafter (its only trainable part) and the rollout losses.

    The target is not registered here (it is frozen, shared and never saved); batches arrive with the
    target's features already attached.
    """

    def __init__(
        self,
        drafter: Any,
        state_mean: torch.Tensor,
        state_std: torch.Tensor,
        step_weights: list[float],
        state_loss: str = "smooth_l1",
        state_loss_weight: float = 1.0,
        token_loss: str = "kl",
        token_loss_weight: float = 0.5,
    ) -> None:
        super().__init__()
        self.drafter = drafter
        self.register_buffer("state_mean", state_mean.detach().float().clone())
        self.register_buffer("state_std", state_std.detach().float().clone())
        self.step_weights = list(step_weights)
        self.state_loss = state_loss
        self.state_loss_weight = float(state_loss_weight)
        self.token_loss = token_loss
        self.token_loss_weight = float(token_loss_weight)

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor,
        prompt_lens: torch.Tensor,
        states: torch.Tensor,
        target_argmax: torch.LongTensor,
        rollout_steps: int = 1,
        chain_weights: torch.Tensor | None = None,
        inputs: torch.Tensor | None = None,
        context: torch.Tensor | None = None,
    ) -> dict[str, torch.Tensor]:
        """Rollout losses. Without ``chain_weights``: per step, the mean over response positions times the
        step weight. With ``chain_weights`` (B, K, T-1; stage 3), step k at index i counts with weight
        ``chain_weights[:, k, i]`` (step weights and normalisation included) and only where it is > 0.
        ``inputs`` (B, T, k*D): a multi-layer drafter's input states (default: ``states``, the single-layer input);
        ``context`` (B, T, c, D): an exact-context drafter's copied-layer inputs (``target_features``)."""
        drafter = self.drafter
        dtype = drafter.fuse.weight.dtype
        b, t = input_ids.shape
        positions = torch.arange(1, t, device=input_ids.device).unsqueeze(0).expand(b, -1)
        states = states.to(dtype)
        mask = loss_mask(attention_mask, prompt_lens)
        first = rollout_start(mask, rollout_steps)
        inputs = states if inputs is None else inputs.to(dtype)
        context = _rollout_context(drafter, context)
        outs = parallel_rollout(drafter, inputs[:, :-1], input_ids[:, 1:], positions, rollout_steps, first, context)
        true_next = states[:, 1:]
        labels = target_argmax[:, 1:]
        draft_labels = _draft_index(drafter, labels)
        std = self.state_std.to(dtype)
        total = states.new_zeros((), dtype=torch.float32)
        stats = torch.zeros(rollout_steps, 4, device=input_ids.device)
        for k, out in enumerate(outs):
            m = mask.clone()
            m[:, :k] = False  # index i needs a chain start i-k >= 0
            if chain_weights is not None:
                m &= chain_weights[:, k] > 0
            if not bool(m.any()):
                continue
            pred, tgt, lab = out[m], true_next[m], draft_labels[m]
            logits = drafter.readout_logits(pred).float()
            s_pos, t_pos = self._position_losses(((pred - tgt) / std).float(), logits, tgt, lab)
            s_loss = s_pos.mean()
            counted = lab >= 0 if self.token_loss == "ce" else torch.ones_like(lab, dtype=torch.bool)
            t_loss = t_pos[counted].mean() if bool(counted.any()) else logits.sum() * 0
            if chain_weights is None:
                total = total + self.step_weights[k] * (
                    self.state_loss_weight * s_loss + self.token_loss_weight * t_loss
                )
            else:  # stage 3 weighs each draft chain on its own
                per_position = self.state_loss_weight * s_pos + self.token_loss_weight * t_pos
                total = total + (chain_weights[:, k][m].float() * per_position).sum()
            with torch.no_grad():
                predicted = drafter.draft_vocab_ids[logits.argmax(-1)]
                stats[k, 0] = (predicted == labels[m]).sum()
                stats[k, 1] = m.sum()
                stats[k, 2] = s_loss.detach() * m.sum()
                stats[k, 3] = t_loss.detach() * m.sum()
        return {"loss": total, "stats": stats}

    def _position_losses(
        self, diff: torch.Tensor, logits: torch.Tensor, tgt: torch.Tensor, labels: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per position: the state loss of the normalised difference `diff` and the token loss (0 where a CE label
        is ignored)."""
        if self.state_loss == "mse":
            s_pos = diff.pow(2).mean(-1)
        else:
            s_pos = F.smooth_l1_loss(diff, torch.zeros_like(diff), reduction="none").mean(-1)
        if self.token_loss == "kl":
            with torch.no_grad():
                p_target = self.drafter.readout_logits(tgt).float().softmax(-1)
            t_pos = (p_target * (p_target.clamp_min(1e-30).log() - logits.log_softmax(-1))).sum(-1)
        else:
            t_pos = F.cross_entropy(logits, labels, ignore_index=IGNORE, reduction="none")
        return s_pos, t_pos


def _rollout_context(drafter: Any, context: torch.Tensor | None) -> torch.Tensor | None:
    """`parallel_rollout`'s `context` from a batch's (B, T, c, D) copied-layer inputs: positions 1..T-1, the
    drafter's indices; None for a drafter that keeps its own context."""
    if not drafter.context_layers:
        return None
    if context is None:
        raise ValueError(
            "this drafter attends to exact context, but the batch has no 'context' features. Fix: build the "
            "features with context_layers=drafter.context_layers (oneiro-train does this)."
        )
    return context[:, 1:].to(drafter.fuse.weight.dtype)


# ============================================================================================ evaluation
@torch.no_grad()
def rollout_eval_sums(
    drafter: Any,
    batches: Any,
    steps: int,
    state_std: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sums for held-out metrics over feature batches; row layout (steps, 6):
    [agree, agree_count, state_loss_sum, accept_j (first j accepted), chain_count, 0]."""
    was_training = drafter.training
    drafter.eval()
    device = next(drafter.parameters()).device
    dtype = drafter.fuse.weight.dtype
    sums = torch.zeros(steps, 6, dtype=torch.float64)
    try:
        for batch in batches:
            input_ids = batch["input_ids"].to(device)
            attn = batch["attention_mask"].to(device)
            states = batch["states"].to(device=device, dtype=dtype)
            inputs = batch["inputs"].to(device=device, dtype=dtype) if "inputs" in batch else states
            context = _rollout_context(drafter, batch["context"].to(device) if "context" in batch else None)
            labels = batch["target_argmax"].to(device)[:, 1:]
            b, t = input_ids.shape
            positions = torch.arange(1, t, device=device).unsqueeze(0).expand(b, -1)
            mask = loss_mask(attn, batch["prompt_lens"].to(device))
            outs = parallel_rollout(
                drafter, inputs[:, :-1], input_ids[:, 1:], positions, steps, rollout_start(mask, steps), context
            )
            correct = []
            for k, out in enumerate(outs):
                pred = drafter.draft_vocab_ids[drafter.readout_logits(out).argmax(-1)]
                ok = (pred == labels) & mask
                correct.append(ok)
                m = mask.clone()
                m[:, :k] = False
                sums[k, 0] += float((ok & m).sum())
                sums[k, 1] += float(m.sum())
                if state_std is not None:
                    diff = ((out - states[:, 1:]) / state_std.to(device=device, dtype=dtype)).float()
                    sums[k, 2] += float(
                        F.smooth_l1_loss(diff, torch.zeros_like(diff), reduction="none").mean(-1)[m].sum()
                    )
            # chain started at index s: step k must be right at index s + k
            alive = mask.clone()
            for k in range(steps):
                shifted = torch.zeros_like(alive)
                if k < correct[k].shape[1]:
                    shifted[:, : correct[k].shape[1] - k] = correct[k][:, k:]
                alive = alive & shifted
                sums[k, 3] += float(alive.sum())
            sums[:, 4] += float(mask.sum())
    finally:
        drafter.train(was_training)
    return sums


def metrics_from_sums(sums: torch.Tensor, prefix: str = "eval") -> dict[str, float]:
    steps = sums.shape[0]
    metrics: dict[str, float] = {}
    chains = float(sums[0, 4])
    tau = 1.0
    for k in range(steps):
        if sums[k, 1] > 0:
            metrics[f"{prefix}_agree_step{k + 1}"] = float(sums[k, 0] / sums[k, 1])
            metrics[f"{prefix}_state_loss_step{k + 1}"] = float(sums[k, 2] / sums[k, 1])
        if chains > 0:
            p = float(sums[k, 3] / chains)
            metrics[f"{prefix}_accept_{k + 1}"] = p
            tau += p
    metrics[f"{prefix}_tau"] = tau
    metrics[f"{prefix}_positions"] = chains
    return metrics


def evaluate_drafter(
    drafter: Any,
    dataset: Any,
    target: Any = None,
    steps: int = 5,
    state_std: torch.Tensor | None = None,
    batch_tokens: int = 4096,
    prefix: str = "eval",
) -> dict[str, float]:
    """Held-out per-step top-1 agreement, acceptance of the first j tokens and tau for ``steps``-token drafts
    rolled from true states (single process)."""
    batches = iter_feature_batches(dataset, target, batch_tokens=batch_tokens,
                                   input_layers=drafter.config.input_layers, context_layers=drafter.context_layers)
    return metrics_from_sums(rollout_eval_sums(drafter, batches, steps, state_std), prefix)


# ============================================================================================ trainer
class EpochSeededLengthSampler(LengthGroupedSampler):
    """``--train_sampling_strategy group_by_length`` with the order drawn from (seed, epoch) alone. The stock
    sampler draws from the global random state at the epoch's start, so a run resumed in another process (another
    session, another machine) may skip other records than it trained on; this one orders every epoch the same way
    anywhere, and lengths come from the dataset's ``lengths()`` instead of reading every item."""

    def __init__(self, batch_size: int, lengths: list[int], seed: int, epoch: Any) -> None:
        super().__init__(batch_size, lengths=lengths)
        self.seed = seed
        self.epoch = epoch  # () -> the epoch being iterated

    def __iter__(self):
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch())
        return iter(get_length_grouped_indices(self.lengths, self.batch_size, generator=generator))


class _StageCallback(TrainerCallback):
    """Switches to stage 2 at stage1_fraction of the steps, or of the time box (``trainer.clock``)."""

    def __init__(self, trainer: OneiroTrainer) -> None:
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        tr = self.trainer
        if tr.switch_step is None or tr.switch_step > state.global_step:  # not resumed past the switch
            tr._set_switch_step(state.max_steps)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        tr = self.trainer
        if (  # a time box: stage 2 starts at stage1_fraction of the steps or of the time, whichever is first
            tr.clock.box_s is not None
            and tr.switch_step is not None
            and state.global_step < tr.switch_step
            and tr.clock.fraction() > args.stage1_fraction
        ):
            logger.info("step %d: %.0f%% of the training time box spent in stage 1", state.global_step,
                        100 * args.stage1_fraction)
            tr.switch_step = state.global_step
        if (
            tr.switch_step is not None
            and state.global_step == tr.switch_step
            and 0 < tr.switch_step < state.max_steps
        ):
            logger.info(
                "step %d: stage 1 done, stage 2 (K=%d rollouts) starts", state.global_step, args.rollout_steps
            )
            if args.eval_at_stage_switch:
                if tr.eval_dataset is not None:
                    control.should_evaluate = True
                if args.save_strategy != "no":
                    control.should_save = True
        return control


class _KeepFeaturesCallback(TrainerCallback):
    """Writes the features a streamed training kept (``StreamedFeatureKeeper``) at each checkpoint and at the end,
    so an interrupted run loses at most what it computed since its last save."""

    def __init__(self, keeper: StreamedFeatureKeeper) -> None:
        self.keeper = keeper

    def on_save(self, args, state, control, **kwargs):
        self.keeper.flush()
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self.keeper.flush()
        return control


class OneiroTrainer(Trainer):
    """Trainer for a OneiroDrafter bound to a frozen target.

    ``drafter`` must be bound to ``target`` (``OneiroDrafter.from_target``). Datasets yield items with
    ``input_ids`` and ``prompt_len`` and, when cached, ``states`` and ``target_argmax``; without them the
    target computes the features for each batch. ``state_mean``/``state_std`` normalise the state loss
    (per dimension); ``provenance`` is stored with checkpoints. ``feature_keeper`` keeps the features the
    target computes for uncached training rows in its cache (``--feature_cache_max_gb``).
    """

    def __init__(
        self,
        drafter: Any,
        target: Any,
        args: OneiroTrainingArguments,
        train_dataset: Any = None,
        eval_dataset: Any = None,
        state_mean: torch.Tensor | None = None,
        state_std: torch.Tensor | None = None,
        callbacks: list[TrainerCallback] | None = None,
        provenance: dict[str, Any] | None = None,
        feature_keeper: StreamedFeatureKeeper | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(args, OneiroTrainingArguments):
            raise TypeError("OneiroTrainer needs OneiroTrainingArguments")
        target.requires_grad_(False)
        target.eval()
        device = args.device
        if next(target.parameters()).device != device:
            target.to(device)
        if (
            drafter.target is not target
            or next(drafter.parameters()).device != next(target.parameters()).device
        ):
            drafter.bind(target)
        object.__setattr__(self, "target", target)
        hidden = drafter.config.hidden_size
        if state_std is None:
            state_std = torch.ones(hidden)
        if state_mean is None:
            state_mean = torch.zeros(hidden)
        module = DrafterTrainModule(
            drafter,
            state_mean,
            state_std,
            args.step_weights(max(args.rollout_steps, 1)),
            state_loss=args.state_loss,
            state_loss_weight=args.state_loss_weight,
            token_loss=args.token_loss,
            token_loss_weight=args.token_loss_weight,
        )
        if args.ddp_find_unused_parameters is None:
            args.ddp_find_unused_parameters = False
        self.provenance = dict(provenance or {})
        self.switch_step: int | None = None
        self.clock = TrainingClock.from_args(args)
        self.time_box = TimeBoxCallback(self.clock)
        self.feature_keeper = feature_keeper
        if feature_keeper is not None:
            callbacks = [*(callbacks or []), _KeepFeaturesCallback(feature_keeper)]
        self._train_sums: torch.Tensor | None = None
        self._window_steps = 0  # largest rollout K used since the last log
        super().__init__(
            model=module,
            args=args,
            data_collator=collate,
            train_dataset=train_dataset,
            eval_dataset=eval_dataset,
            callbacks=[self.time_box, _StageCallback(self), *(callbacks or [])],
            **kwargs,
        )
        self.model_accepts_loss_kwargs = False

    # ---------------------------------------------------------------- helpers
    @property
    def drafter(self) -> Any:
        return self.accelerator.unwrap_model(self.model).drafter

    @property
    def train_module(self) -> DrafterTrainModule:
        return self.accelerator.unwrap_model(self.model)

    def _set_switch_step(self, max_steps: int) -> None:
        stage = self.args.stage
        if stage in ("1", "3"):
            self.switch_step = None
        elif stage == "2":
            self.switch_step = 0
        else:
            self.switch_step = round(max_steps * self.args.stage1_fraction)

    def current_rollout_steps(self) -> int:
        stage = self.args.stage
        if stage == "1":
            return 1
        if stage == "2":
            return self.args.rollout_steps
        if stage == "3":
            return self.args.onpolicy_draft_tokens
        if self.switch_step is None:
            self._set_switch_step(self.state.max_steps)
        return 1 if self.state.global_step < self.switch_step else self.args.rollout_steps

    def _with_features(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """The batch with the target's features on every row (computed, in --feature_dtype, where not cached)."""
        return complete_features(inputs, self.target, self.drafter.config.input_layers, self.drafter.context_layers,
                                 self.args.feature_compute_dtype)

    # ---------------------------------------------------------------- training
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        completed = self._with_features(inputs)
        if self.feature_keeper is not None and model.training:
            self.feature_keeper.offer(inputs, completed)
        out = self._rollout(model, completed, self.current_rollout_steps())
        return (out["loss"], out) if return_outputs else out["loss"]

    def _rollout(self, model, batch: dict[str, Any], steps: int, chain_weights: torch.Tensor | None = None):
        """The module's losses on a batch with features; its statistics go to the next log's window."""
        out = model(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            prompt_lens=batch["prompt_lens"],
            states=batch["states"],
            target_argmax=batch["target_argmax"],
            rollout_steps=steps,
            chain_weights=chain_weights,
            inputs=batch.get("inputs"),
            context=batch.get("context"),
        )
        stats = out["stats"].detach()
        sums = self._train_sums
        if sums is None or sums.device != stats.device or sums.shape[0] < stats.shape[0]:
            width = max(self.args.rollout_steps, 1, stats.shape[0])
            self._train_sums = torch.zeros(width, 4, device=stats.device)
        self._train_sums[: stats.shape[0]] += stats
        self._window_steps = max(self._window_steps, steps)
        return out

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        if "loss" in logs:
            sums = self._train_sums
            if sums is None:
                sums = torch.zeros(max(self.args.rollout_steps, 1), 4, device=self.args.device)
            if self.accelerator.num_processes > 1:
                sums = self.accelerator.reduce(sums.clone(), reduction="sum")
            for k in range(sums.shape[0]):
                count = float(sums[k, 1])
                if count > 0:
                    logs[f"agree_step{k + 1}"] = round(float(sums[k, 0]) / count, 4)
                    logs[f"state_loss_step{k + 1}"] = round(float(sums[k, 2]) / count, 5)
                    logs[f"token_loss_step{k + 1}"] = round(float(sums[k, 3]) / count, 5)
            logs["rollout_steps"] = self._window_steps or self.current_rollout_steps()
            self._window_steps = 0
            if self._train_sums is not None:
                self._train_sums.zero_()
        super().log(logs, start_time)

    def create_scheduler(self, num_training_steps: int, optimizer: torch.optim.Optimizer | None = None):
        """The configured schedule; with a time box it also follows the box's spent share (``follow_time_box``)."""
        fresh = self.lr_scheduler is None
        scheduler = super().create_scheduler(num_training_steps, optimizer)
        if fresh and (self.args.max_train_minutes or self.args.train_until is not None):
            self.lr_scheduler = follow_time_box(scheduler, self.clock, self.args.get_warmup_steps(num_training_steps),
                                                num_training_steps)
        return self.lr_scheduler

    def _get_train_sampler(self, train_dataset=None):
        dataset = train_dataset if train_dataset is not None else self.train_dataset
        if self.args.train_sampling_strategy == "group_by_length" and hasattr(dataset, "lengths"):
            return EpochSeededLengthSampler(self.args.train_batch_size * self.args.gradient_accumulation_steps,
                                            dataset.lengths(), self.args.seed,
                                            lambda: int((self.state.epoch or 0.0) + 1e-6))
        return super()._get_train_sampler(train_dataset)

    def train(self, resume_from_checkpoint: str | bool | None = None, **kwargs: Any):
        check_output_dir(self.args.output_dir, self.args.overwrite_output_dir, resuming=bool(resume_from_checkpoint))
        return super().train(resume_from_checkpoint=resume_from_checkpoint, **kwargs)

    # ---------------------------------------------------------------- evaluation
    def evaluate(
        self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval"
    ) -> dict[str, float]:
        dataset = eval_dataset if eval_dataset is not None else self.eval_dataset
        if dataset is None:
            return {}
        t0 = time.perf_counter()
        rank, world = self.args.process_index, self.args.world_size
        lengths = (
            dataset.lengths()
            if hasattr(dataset, "lengths")
            else [len(dataset[i]["input_ids"]) for i in range(len(dataset))]
        )
        from .features import batches_by_tokens

        groups = batches_by_tokens(lengths, self.args.feature_batch_tokens)[rank::world]

        def batches():
            for group in groups:
                yield self._with_features(collate([dataset[i] for i in group]))

        module = self.train_module
        sums = rollout_eval_sums(module.drafter, batches(), self.args.eval_rollout_steps, module.state_std)
        if world > 1:
            sums = self.accelerator.reduce(sums.to(self.args.device).float(), reduction="sum").double().cpu()
        metrics = metrics_from_sums(sums, metric_key_prefix)
        metrics[f"{metric_key_prefix}_runtime"] = round(time.perf_counter() - t0, 2)
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics

    # ---------------------------------------------------------------- checkpoints
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        if not self.args.should_save:
            return
        from safetensors.torch import save_file

        os.makedirs(output_dir, exist_ok=True)
        module = self.train_module
        from .low_rank import rebuilt_originals

        # the target's own matrices are not written again: a resume builds the drafter from the target
        skip = rebuilt_originals(module.drafter, self.target)
        state = {k: v for k, v in module.drafter.state_dict().items() if k not in skip}
        module.drafter.save_pretrained(output_dir, state_dict=state, safe_serialization=True)
        save_file(
            {
                "state_mean": module.state_mean.detach().cpu().contiguous(),
                "state_std": module.state_std.detach().cpu().contiguous(),
            },
            os.path.join(output_dir, TRAINING_STATE_FILE),
        )
        info = {
            "provenance": self.provenance,
            "stage": self.args.stage,
            "rollout_steps": self.args.rollout_steps,
            "interval": list(module.drafter.config.interval),
            "draft_vocab_size": int(module.drafter.draft_vocab_ids.numel()),
            "trained_seconds": round(self.clock.seconds(), 1),  # the time box counts them across resumes
            "switch_step": self.switch_step,
        }
        Path(output_dir, TRAINING_INFO_FILE).write_text(json.dumps(info, indent=1))
        torch.save(self.args, os.path.join(output_dir, "training_args.bin"))

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        from safetensors.torch import load_file

        ckpt = Path(resume_from_checkpoint)
        module = self.train_module
        drafter = module.drafter
        check_checkpoint_compatible(ckpt, drafter)
        weights = load_file(str(ckpt / "model.safetensors"))
        vocab = weights.get("draft_vocab_ids")
        changed_vocab = vocab is not None and not torch.equal(vocab.cpu(), drafter.draft_vocab_ids.cpu())
        params = next(drafter.parameters())
        weights = {
            k: (
                v.to(device=params.device, dtype=params.dtype)
                if v.is_floating_point()
                else v.to(params.device)
            )
            for k, v in weights.items()
        }
        try:
            missing, unexpected = drafter.load_state_dict(weights, strict=False)
        except RuntimeError as err:  # same names, other shapes: e.g. another --relative_layer_rank
            raise CheckpointMismatch(
                f"{ckpt}/model.safetensors does not match this drafter's shapes ({str(err).splitlines()[-1].strip()}). "
                "Fix: resume with the settings of that run (e.g. its --relative_layer_rank), or start a new "
                "--output_dir."
            ) from err
        from .low_rank import rebuilt_originals

        missing = sorted(set(missing) - rebuilt_originals(drafter, self.target))  # held by the target
        if missing or unexpected:
            raise CheckpointMismatch(
                f"{ckpt}/model.safetensors does not match this drafter (missing {missing[:4]}, unexpected "
                f"{unexpected[:4]}). Nothing was changed. Fix: resume with the settings of that run, or start a new "
                "--output_dir."
            )
        if changed_vocab:
            logger.warning(
                "Resuming with the checkpoint's draft vocabulary (it differs from the one chosen now)."
            )
            drafter.refresh_readout()
            drafter.train()
        extra = ckpt / TRAINING_STATE_FILE
        if extra.is_file():
            stats = load_file(str(extra))
            module.state_mean.copy_(stats["state_mean"])
            module.state_std.copy_(stats["state_std"])
        info = ckpt / TRAINING_INFO_FILE
        if info.is_file():
            run = json.loads(info.read_text())
            self.clock.before_s = float(run.get("trained_seconds", 0.0))
            self.switch_step = run.get("switch_step")
        logger.info("Loaded drafter weights from %s", ckpt)

    # ---------------------------------------------------------------- final artefact
    def save_drafter(self, output_dir: str | None = None, dtype: str | None = None) -> Path:
        """Write the trained drafter (config + safetensors, weights in ``dtype``) for ``from_pretrained``.

        With --relative_layer_rank the low-rank parametrisation is merged first (the drafter in memory becomes a
        plain one) and the file holds the differences from the target (oneiro_hf.storage.target_relative)."""
        out = Path(output_dir or self.args.output_dir)
        if not self.args.should_save:
            return out
        drafter = self.drafter
        torch_dtype = getattr(torch, dtype or self.args.save_dtype)
        storage = self.args.relative_storage()
        if storage is not None:  # trained as differences: fold them in, store them as the differences they are
            from ..storage.target_relative import save_target_relative
            from .low_rank import merge

            merge(drafter)
            save_target_relative(drafter, out, storage, dtype=torch_dtype)
            return out
        from ..storage.checkpoint import save_whole

        out.mkdir(parents=True, exist_ok=True)
        save_whole(drafter, out, torch_dtype)
        return out


# ============================================================================================ guards
def check_output_dir(output_dir: str | os.PathLike, overwrite: bool, resuming: bool = False) -> None:
    """Refuse to replace a finished drafter in ``output_dir`` unless ``overwrite``; a paused run's drafter
    (training_summary.json ``finished`` false) is replaced by its own resumed run."""
    config = Path(output_dir) / "config.json"
    if overwrite or not config.is_file():
        return
    try:
        model_type = json.loads(config.read_text()).get("model_type")
    except (OSError, json.JSONDecodeError):
        model_type = None
    summary = Path(output_dir) / "training_summary.json"
    if resuming and summary.is_file() and json.loads(summary.read_text()).get("finished") is False:
        return
    if model_type == "oneiro_drafter":
        raise OutputDirHasDrafter(
            f"{output_dir} already holds a trained drafter. Nothing was changed. Fix: pass another --output_dir, "
            "or --overwrite_output_dir to replace it (its checkpoints, if any, can be resumed with "
            "--resume_from_checkpoint)."
        )


def check_checkpoint_compatible(ckpt: str | os.PathLike, drafter: Any) -> None:
    """Raise CheckpointMismatch (before anything is loaded or written) if ``ckpt`` holds another kind of drafter."""
    ckpt = Path(ckpt)
    config_path = ckpt / "config.json"
    if not ckpt.is_dir():
        raise CheckpointMismatch(
            f"checkpoint {ckpt} does not exist. Fix: pass an existing checkpoint-N directory."
        )
    if not config_path.is_file() or not (ckpt / "model.safetensors").is_file():
        raise CheckpointMismatch(
            f"{ckpt} is not a oneiro-train checkpoint (no config.json/model.safetensors). Nothing was changed."
        )
    saved = json.loads(config_path.read_text())
    cfg = drafter.config
    problems = []
    if saved.get("model_type") != "oneiro_drafter":
        problems.append(f"model_type: checkpoint holds '{saved.get('model_type')}', not a OneiroDrafter")
    pairs = [
        ("interval", list(saved.get("interval") or []), list(cfg.interval)),
        ("input_layers", saved.get("input_layers"), cfg.input_layers),
        (
            "draft_vocab_size",
            saved.get("draft_vocab_size") or saved.get("vocab_size"),
            cfg.draft_vocab_size or cfg.vocab_size,
        ),
        ("hidden_size", saved.get("hidden_size"), cfg.hidden_size),
        ("vocab_size", saved.get("vocab_size"), cfg.vocab_size),
        ("num_target_layers", saved.get("num_target_layers"), cfg.num_target_layers),
        (
            "target model_type",
            (saved.get("target_config") or {}).get("model_type"),
            (cfg.target_config or {}).get("model_type"),
        ),
    ]
    for name, theirs, ours in pairs:
        if theirs != ours:
            problems.append(f"{name}: checkpoint has {theirs}, this run has {ours}")
    if problems:
        raise CheckpointMismatch(
            f"cannot resume from {ckpt}: it was made with a different drafter configuration:\n  - "
            + "\n  - ".join(problems)
            + "\nNothing was loaded or written; the checkpoint and the output directory are untouched. Fix: rerun "
            "with the checkpoint's settings (e.g. --interval "
            f"{','.join(str(v) for v in saved.get('interval') or [])}"
            + (f" --input_layers {','.join(str(v) for v in saved['input_layers'])}" if saved.get("input_layers")
               else "")
            + f" --draft_vocab_size {saved.get('draft_vocab_size') or saved.get('vocab_size')}), or train into a new "
            "--output_dir."
        )
