"""Stage 3: on-policy refinement. The drafter is trained on the states it reaches itself while drafting.

Each round collects (the drafter drafts for the target in real speculative decoding, every drafting round
recorded), replays the recorded rounds as rollout chains weighted towards their first rejection, and trains on
a replay buffer of the collected sequences; all rounds run inside one ``transformers.Trainer`` run.
docs/training.md ("Stage 3: on-policy refinement") describes the design, the checkpoints and the settings.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset, SequentialSampler
from transformers import TrainerCallback

from .features import FEATURE_EXTRAS, collate, target_features
from .pipeline import (
    Timer,
    TrainingData,
    TrainingInputError,
    held_out_dataset,
    initial_drafter,
    save_outputs,
    train_and_evaluate,
)
from .trainer import OneiroTrainer, OneiroTrainingArguments

logger = logging.getLogger(__name__)

ONPOLICY_STATE_FILE = "oneiro_onpolicy.json"
COLLECTION_DIR = "onpolicy"


class OnPolicyError(ValueError):
    """Stage 3 was given unusable input (no prompts, a bad prompt, inconsistent settings)."""


# ============================================================================================ collection
@dataclass
class CollectedSequence:
    """One answer decoded with the drafter, and every drafting round in it."""

    id: str
    tokens: list[int]  # prompt + the target's greedy answer
    prompt_len: int
    round: int  # collection round that produced it
    # (start, accepted, drafted tokens) per round; start = position of the first drafted token
    rounds: list[tuple[int, int, list[int]]] = field(default_factory=list)

    def error_positions(self) -> list[int]:
        """First rejected position of every round that had a rejection."""
        return [s + a for s, a, toks in self.rounds if a < len(toks)]


def _round_consistent(start: int, accepted: int, drafted: list[int], seq: list[int]) -> bool:
    """Strict greedy: accepted drafts are the final tokens, and the first rejected one is not."""
    if seq[start : start + accepted] != drafted[:accepted]:
        return False
    pos = start + accepted
    return accepted == len(drafted) or pos >= len(seq) or seq[pos] != drafted[accepted]


@torch.no_grad()
def collect(
    target: Any,
    drafter: Any,
    prompts: Sequence[Mapping[str, Any]],
    max_new_tokens: int,
    draft_tokens: int,
    round_index: int = 0,
    progress: bool = False,
) -> tuple[list[CollectedSequence], dict[str, float]]:
    """Decode ``prompts`` with ``drafter`` drafting ``draft_tokens`` latent tokens every step (strict greedy,
    cost model off); return the sequences with their rounds, and acceptance metrics of the collection."""
    from tqdm.auto import tqdm

    if not prompts:
        raise OnPolicyError("collect() needs at least one prompt. Fix: pass a non-empty list of prompt records.")
    device = next(target.parameters()).device
    pad = target.generation_config.pad_token_id
    if pad is None:
        eos = target.generation_config.eos_token_id
        pad = eos[0] if isinstance(eos, list) else (eos if eos is not None else 0)
    was_training = drafter.training
    drafter.eval()
    drafter.record_draft_rounds = True
    out: list[CollectedSequence] = []
    accept_lengths: list[int] = []
    drafted_at = [0] * draft_tokens  # rounds that drafted at least j+1 tokens
    accepted_at = [0] * draft_tokens  # ... and had the first j+1 accepted
    dropped = 0
    t0 = time.perf_counter()
    try:
        for rec in tqdm(prompts, desc=f"collect round {round_index}", disable=not progress, leave=False):
            ids = torch.tensor([list(rec["input_ids"])], dtype=torch.long, device=device)
            result = target.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                assistant_model=drafter,
                do_sample=False,
                max_new_tokens=max_new_tokens,
                pad_token_id=pad,
                oneiro_mode="latent",
                oneiro_max_draft_tokens=draft_tokens,
                oneiro_cost_aware=False,
                oneiro_min_draft_confidence=0.0,
                oneiro_verification="strict",
                oneiro_tree=False,  # chains: the rejected positions of one rolled-out draft
            )
            stats = drafter.last_stats
            seq = result[0].tolist()
            accept_lengths.extend(stats.accept_lengths)
            rounds = []
            for r in stats.rounds or []:
                if r.source != "latent" or not _round_consistent(r.start, r.accepted, r.tokens, seq):
                    dropped += 1
                    continue
                rounds.append((r.start, r.accepted, list(r.tokens)))
                for j in range(len(r.tokens)):
                    drafted_at[j] += 1
                    accepted_at[j] += int(r.accepted > j)
            out.append(CollectedSequence(f"{round_index}:{rec.get('id', len(out))}", seq, ids.shape[1], round_index, rounds))
    finally:
        drafter.record_draft_rounds = False
        drafter.reset_drafting_policy()  # calibration learned from these weights goes stale as they train
        drafter.train(was_training)
    if dropped:
        logger.warning("collection round %d: %d rounds did not match the final sequence; dropped", round_index, dropped)
    all_rounds = [r for s in out for r in s.rounds]
    metrics: dict[str, float] = {
        "onpolicy_round": round_index,
        "collect_sequences": len(out),
        "collect_new_tokens": sum(len(s.tokens) - s.prompt_len for s in out),
        "collect_rounds": len(all_rounds),
        "collect_rejected_share": round(sum(a < len(t) for _, a, t in all_rounds) / max(len(all_rounds), 1), 4),
        "collect_tau": round(sum(accept_lengths) / max(len(accept_lengths), 1), 4),
        "collect_seconds": round(time.perf_counter() - t0, 2),
    }
    for j in range(draft_tokens):
        if drafted_at[j]:
            metrics[f"collect_accept_pos{j + 1}"] = round(accepted_at[j] / drafted_at[j], 4)
    return out, metrics


# ============================================================================================ replay buffer
class ReplayBuffer:
    """Collected sequences kept for training: the newest ``size`` (fifo) or a uniform sample of all (reservoir).

    The reservoir draws from a generator seeded by (seed, items seen), so it is a pure function of what was
    added: a resumed run keeps exactly the buffer of an uninterrupted one.
    """

    def __init__(self, size: int, policy: str = "fifo", seed: int = 0) -> None:
        if policy not in ("fifo", "reservoir"):
            raise OnPolicyError(f"buffer policy {policy!r} is not one of 'fifo', 'reservoir'. Fix: pass "
                                "--onpolicy_buffer_policy fifo or reservoir.")
        self.size, self.policy, self.seed = int(size), policy, int(seed)
        self.items: list[CollectedSequence] = []
        self.seen = 0

    def add(self, items: Sequence[CollectedSequence]) -> None:
        for item in items:
            if self.policy == "fifo":
                self.items.append(item)
                del self.items[: max(0, len(self.items) - self.size)]
            elif len(self.items) < self.size:
                self.items.append(item)
            else:
                j = random.Random(f"{self.seed}:{self.seen}").randrange(self.seen + 1)
                if j < self.size:
                    self.items[j] = item
            self.seen += 1

    def __len__(self) -> int:
        return len(self.items)

    def state_dict(self) -> dict[str, Any]:
        return {"size": self.size, "policy": self.policy, "seed": self.seed, "seen": self.seen,
                "items": [asdict(s) for s in self.items]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.size, self.policy, self.seed, self.seen = state["size"], state["policy"], state["seed"], state["seen"]
        self.items = [_sequence_from_dict(d) for d in state["items"]]


def _sequence_from_dict(d: Mapping[str, Any]) -> CollectedSequence:
    return CollectedSequence(
        str(d["id"]), list(d["tokens"]), int(d["prompt_len"]), int(d["round"]),
        [(int(s), int(a), list(t)) for s, a, t in d["rounds"]],
    )


# ============================================================================================ loss weights
def chain_weights(
    sequences: Sequence[CollectedSequence],
    width: int,
    steps: int,
    step_weights: Sequence[float],
    mix_ratio: float,
    error_weight: float,
) -> torch.Tensor:
    """(B, K, width-1) weights for ``DrafterTrainModule``: every recorded round becomes the chain started at
    drafter index start-2; rejected rounds share ``mix_ratio`` of the total weight, accepted ones the rest (all
    of it when the batch has only one kind); the first rejected step is weighted ``error_weight`` more."""
    chains = [(row, start, acc, len(toks)) for row, s in enumerate(sequences) for start, acc, toks in s.rounds]
    w = torch.zeros(len(sequences), steps, max(width - 1, 1))
    n_rej = sum(acc < n for _, _, acc, n in chains)
    n_acc = len(chains) - n_rej
    if not chains:
        return w
    scale_rej = (mix_ratio if n_acc else 1.0) / max(n_rej, 1)
    scale_acc = ((1.0 - mix_ratio) if n_rej else 1.0) / max(n_acc, 1)
    for row, start, acc, n in chains:
        scale = scale_rej if acc < n else scale_acc
        first = start - 2  # drafter index of the chain's first step
        for k in range(steps):
            i = first + k
            if 0 <= i < w.shape[2]:
                boost = error_weight if (acc < n and k == acc) else 1.0
                w[row, k, i] += scale * step_weights[k] * boost
    return w


# ============================================================================================ trainer
class _SlotDataset(Dataset):
    """Slot numbers only: what a slot trains on is drawn from the replay buffer when its step runs."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, int]:
        return {"slot": i}


def _collate_slots(items: Sequence[Mapping[str, int]]) -> dict[str, torch.Tensor]:
    return {"slots": torch.tensor([int(it["slot"]) for it in items], dtype=torch.long)}


def weights_digest(module: torch.nn.Module) -> str:
    """Identifies the weights a collection was made with (reused on resume only if they match)."""
    h = hashlib.sha1()
    for name, tensor in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def check_prompts(prompts: Sequence[Mapping[str, Any]], vocab_size: int) -> list[dict[str, Any]]:
    """Validated prompt records (``input_ids`` non-empty token ids of this target), each with an id."""
    if not prompts:
        raise OnPolicyError(
            "stage 3 needs training prompts and got none. Fix: pass --onpolicy_prompts FILE.jsonl (or --data with "
            "training records; check --onpolicy_prompt_offset and the held-out split)."
        )
    out = []
    for i, rec in enumerate(prompts):
        ids = rec.get("input_ids") if isinstance(rec, Mapping) else None
        if not isinstance(ids, (list, tuple)) or not ids or not all(isinstance(t, int) for t in ids):
            raise OnPolicyError(f"prompt {i}: 'input_ids' must be a non-empty list of token ids. Fix: give each "
                                "prompt record its chat-formatted token ids.")
        if min(ids) < 0 or max(ids) >= vocab_size:
            raise OnPolicyError(
                f"prompt {i}: token ids outside the target's vocabulary (size {vocab_size}): made for another target? Fix: "
                "tokenize the prompts with this target's tokenizer."
            )
        out.append({"id": str(rec.get("id", f"p{i}")), "input_ids": list(ids)})
    return out


class _RoundCallback(TrainerCallback):
    def __init__(self, trainer: OnPolicyTrainer) -> None:
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % args.onpolicy_steps_per_round == 0:
            should_log = control.should_log  # Trainer.log clears it; keep this step's loss log
            self.trainer._end_round(state.global_step // args.onpolicy_steps_per_round - 1)
            control.should_log = should_log
            if args.save_strategy != "no" and state.global_step < state.max_steps:
                control.should_save = True  # a checkpoint at every round boundary
        return control


class OnPolicyTrainer(OneiroTrainer):
    """Stage 3 trainer: alternates collection with the drafter and training on a replay buffer (see module doc).

    ``prompts`` are records with ``input_ids`` (chat-formatted, never evaluation data); round r decodes
    ``prompts[r * n : (r + 1) * n]`` (wrapping around when they run out). ``max_steps`` is set to
    ``onpolicy_rounds * onpolicy_steps_per_round``. ``kwargs`` go to ``OneiroTrainer`` (``eval_dataset``,
    ``state_mean``, ``state_std``, ``callbacks``, ``provenance``, ...); the train dataset is the slots.
    """

    def __init__(
        self, drafter: Any, target: Any, args: OneiroTrainingArguments, prompts: Sequence[Mapping[str, Any]],
        **kwargs: Any,
    ) -> None:
        if not isinstance(args, OneiroTrainingArguments) or args.stage != "3":
            raise OnPolicyError("OnPolicyTrainer needs OneiroTrainingArguments with stage='3'. Fix: build the "
                                "arguments as OneiroTrainingArguments(..., stage='3').")
        if drafter is None:
            raise OnPolicyError("stage 3 refines a trained drafter and got none. Fix: pass --init_drafter PATH.")
        from ..targets import text_config

        self.prompts = check_prompts(prompts, int(text_config(target).vocab_size))
        total = args.onpolicy_rounds * args.onpolicy_steps_per_round
        if args.max_steps > 0 and args.max_steps != total:
            raise OnPolicyError(
                f"stage 3 runs onpolicy_rounds x onpolicy_steps_per_round = {total} steps; max_steps={args.max_steps} "
                "disagrees. Fix: drop --max_steps."
            )
        args.max_steps = total
        if args.world_size > 1:
            raise OnPolicyError("stage 3 runs in a single process (collection decodes one prompt at a time). Fix: run "
                                "oneiro-train --stage 3 without accelerate launch / torchrun.")
        slots = total * args.per_device_train_batch_size * args.gradient_accumulation_steps
        super().__init__(drafter, target, args, train_dataset=_SlotDataset(slots), **kwargs)
        self.data_collator = _collate_slots
        self.steps = args.onpolicy_draft_tokens
        self.step_weight_list = args.step_weights(self.steps)
        self.buffer = ReplayBuffer(args.onpolicy_buffer_size, args.onpolicy_buffer_policy, args.seed)
        self.rounds_collected = 0
        self.round_logs: list[dict[str, float]] = []  # collection metrics + training summary per round
        self.collections_run = 0  # collections decoded by this process (reused ones not counted)
        self._features: dict[str, dict[str, torch.Tensor]] = {}
        self._round_sums = torch.zeros(self.steps, 4)
        self._round_loss = [0.0, 0]
        self.add_callback(_RoundCallback(self))

    # ---------------------------------------------------------------- data
    def _get_train_sampler(self, train_dataset: Any = None) -> SequentialSampler:
        return SequentialSampler(train_dataset if train_dataset is not None else self.train_dataset)

    def round_prompts(self, r: int) -> list[dict[str, Any]]:
        n = self.args.onpolicy_prompts_per_round
        if (r + 1) * n > len(self.prompts):
            logger.warning("stage 3: %d prompts do not cover round %d; wrapping around", len(self.prompts), r)
        return [self.prompts[(r * n + i) % len(self.prompts)] for i in range(n)]

    def _collection_path(self, r: int) -> Path:
        return Path(self.args.output_dir) / COLLECTION_DIR / f"round-{r:03d}.json"

    def ensure_round(self, r: int) -> None:
        """Collect round ``r`` (once; a saved collection made with these exact weights is reused)."""
        if r < self.rounds_collected:
            return
        if r != self.rounds_collected:
            raise RuntimeError(f"stage 3: round {r} requested but only {self.rounds_collected} collected")
        prompts = [p for p in self.round_prompts(r) if len(p["input_ids"]) < self.args.max_seq_len - 2]
        if not prompts:
            raise OnPolicyError(f"round {r}: every prompt is longer than max_seq_len={self.args.max_seq_len}.")
        drafter = self.drafter
        digest = weights_digest(drafter)
        path = self._collection_path(r)
        ids = [p["id"] for p in prompts]
        saved = json.loads(path.read_text()) if path.is_file() else None
        if saved and saved.get("digest") == digest and saved.get("prompt_ids") == ids:
            sequences = [_sequence_from_dict(d) for d in saved["sequences"]]
            metrics = dict(saved["metrics"])
            logger.info("stage 3 round %d: reusing the collection in %s", r, path)
        else:
            sequences, metrics = collect(
                self.target, drafter, prompts, self.args.onpolicy_max_new_tokens, self.steps, r,
                progress=not self.args.disable_tqdm,
            )
            self.collections_run += 1
            if self.args.should_save:
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps({"digest": digest, "prompt_ids": ids, "metrics": metrics,
                                           "sequences": [asdict(s) for s in sequences]}))
                os.replace(tmp, path)
        self.buffer.add(sequences)
        self._prune_features()
        self.rounds_collected = r + 1
        metrics["buffer_sequences"] = len(self.buffer)
        self.round_logs.append(dict(metrics))
        logger.info(
            "stage 3 round %d collection: tau %.3f, acceptance by draft position %s, %d rounds (%.0f%% rejected)",
            r, metrics["collect_tau"],
            [metrics.get(f"collect_accept_pos{j + 1}") for j in range(self.steps)],
            metrics["collect_rounds"], 100 * metrics["collect_rejected_share"],
        )
        self.log(dict(metrics))

    def _prune_features(self) -> None:
        keep = {s.id for s in self.buffer.items}
        for key in [k for k in self._features if k not in keep]:
            del self._features[key]

    def _features_of(self, seq: CollectedSequence) -> dict[str, Any]:
        """The target's states and argmax on the collected sequence (one unpadded pass, memoised)."""
        if seq.id not in self._features:
            tokens = torch.tensor([seq.tokens[: self.args.max_seq_len]], dtype=torch.long)
            input_layers, context_layers = self.drafter.config.input_layers, self.drafter.context_layers
            feats = target_features(self.target, tokens, label_from=torch.tensor([seq.prompt_len - 1]),
                                    input_layers=input_layers, context_layers=context_layers)
            self._features[seq.id] = {
                "input_ids": tokens[0], "prompt_len": seq.prompt_len, "states": feats["states"][0].detach(),
                "target_argmax": feats["target_argmax"][0].cpu(),
                **{key: feats[key][0].detach() for key in FEATURE_EXTRAS if key in feats},  # inputs, context
            }
        return self._features[seq.id]

    def draw(self, slots: Sequence[int]) -> list[CollectedSequence]:
        """The buffer sequences a batch of slots trains on (deterministic in the slot and the buffer)."""
        return [self.buffer.items[random.Random(f"{self.args.seed}:{s}").randrange(len(self.buffer))] for s in slots]

    def batch_for(self, sequences: Sequence[CollectedSequence]) -> dict[str, torch.Tensor]:
        items = [self._features_of(s) for s in sequences]
        batch = collate([{**it, **{k: it[k].cpu() for k in ("states", "inputs", "context") if k in it}}
                         for it in items])
        batch["chain_weights"] = chain_weights(
            sequences, batch["input_ids"].shape[1], self.steps, self.step_weight_list,
            self.args.onpolicy_mix_ratio, self.args.onpolicy_error_weight,
        )
        return batch

    # ---------------------------------------------------------------- training
    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        r = min(self.state.global_step // self.args.onpolicy_steps_per_round, self.args.onpolicy_rounds - 1)
        self.ensure_round(r)
        batch = self.batch_for(self.draw(inputs["slots"].tolist()))
        batch = {k: v.to(self.args.device) for k, v in batch.items()}
        out = self._rollout(model, batch, self.steps, batch["chain_weights"])
        self._round_sums += out["stats"].detach().cpu()
        self._round_loss[0] += float(out["loss"].detach())
        self._round_loss[1] += 1
        return (out["loss"], out) if return_outputs else out["loss"]

    def _end_round(self, r: int) -> None:
        """Log the round's training summary next to its collection metrics."""
        sums, (loss, n) = self._round_sums, self._round_loss
        summary: dict[str, float] = {"onpolicy_round_done": r}
        if n:
            summary["round_train_loss"] = round(loss / n, 5)
        for k in range(self.steps):
            if sums[k, 1] > 0:
                summary[f"round_agree_step{k + 1}"] = round(float(sums[k, 0] / sums[k, 1]), 4)
        if r < len(self.round_logs):
            self.round_logs[r].update(summary)
        self._round_sums = torch.zeros(self.steps, 4)
        self._round_loss = [0.0, 0]
        self.log(summary)

    # ---------------------------------------------------------------- checkpoints
    def _save(self, output_dir: str | None = None, state_dict: dict | None = None) -> None:
        super()._save(output_dir, state_dict)
        if not self.args.should_save:
            return
        output_dir = output_dir if output_dir is not None else self.args.output_dir
        state = {
            "rounds_collected": self.rounds_collected,
            "round_logs": self.round_logs,
            "round_sums": self._round_sums.tolist(),
            "round_loss": self._round_loss,
            "buffer": self.buffer.state_dict(),
        }
        tmp = Path(output_dir, ONPOLICY_STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, Path(output_dir, ONPOLICY_STATE_FILE))

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model=None) -> None:
        path = Path(resume_from_checkpoint, ONPOLICY_STATE_FILE)
        if not path.is_file():
            raise OnPolicyError(
                f"{resume_from_checkpoint} is not a stage 3 checkpoint (no {ONPOLICY_STATE_FILE}). Fix: resume stage 3 "
                "from its own output_dir, or start stage 3 from a finished drafter with --init_drafter."
            )
        super()._load_from_checkpoint(resume_from_checkpoint, model)
        state = json.loads(path.read_text())
        self.buffer.load_state_dict(state["buffer"])
        self.rounds_collected = int(state["rounds_collected"])
        self.round_logs = list(state["round_logs"])
        self._round_sums = torch.tensor(state["round_sums"], dtype=torch.float32)
        self._round_loss = list(state["round_loss"])
        self._prune_features()
        logger.info("stage 3: resumed after %d collected rounds, buffer of %d sequences", self.rounds_collected,
                    len(self.buffer))


# ============================================================================================ CLI
def _stage3_prompts(args, data_args, data: TrainingData, vocab_size: int) -> tuple[list[dict], str]:
    """Stage 3's prompts: --onpolicy_prompts or the training split, after --onpolicy_prompt_offset, never a
    held-out record. Returns them and where they came from."""
    from . import features as feat
    from .records import DataFileError, load_records

    if args.onpolicy_prompts:
        try:
            source = load_records(args.onpolicy_prompts, vocab_size=vocab_size)
        except DataFileError as err:
            raise TrainingInputError(str(err)) from err
        prompts_from = args.onpolicy_prompts
    else:
        source = list(data.train)
        prompts_from = f"train split of {data.path}"
    source = source[args.onpolicy_prompt_offset :]
    prompts = [r for r in source if not feat.is_eval_record(str(r["id"]), data_args.eval_fraction, data_args.split_seed)]
    if not prompts:
        raise TrainingInputError(
            f"no training prompts left in {prompts_from} after --onpolicy_prompt_offset {args.onpolicy_prompt_offset} "
            "and the held-out split.")
    logger.info("stage 3 prompts: %d from %s (offset %d)", len(prompts), prompts_from, args.onpolicy_prompt_offset)
    return prompts, prompts_from


def _state_statistics(args, target, data: TrainingData, cache) -> tuple[torch.Tensor, torch.Tensor]:
    """The state statistics --init_drafter was trained with (its training state file), else measured anew."""
    from . import feature_store as store
    from . import features as feat
    from .trainer import TRAINING_STATE_FILE

    stats_file = Path(args.init_drafter, TRAINING_STATE_FILE)
    if stats_file.is_file():
        from safetensors.torch import load_file

        loaded = load_file(str(stats_file))
        return loaded["state_mean"], loaded["state_std"]
    cached = [r for r in data.train[:256] if cache is not None and cache.lookup(r) is not None]
    stat_ds = store.CachedFeatureDataset(cache, cached) if cached else feat.SequenceDataset(data.train[:32],
                                                                                            args.max_seq_len)
    return feat.state_statistics(feat.iter_feature_batches(stat_ds, target, args.feature_batch_tokens))


def run_stage3(model_args: Any, data_args: Any, args: OneiroTrainingArguments, target: Any, data: TrainingData,
               resume: str | None, timer: Timer) -> Any:
    """``oneiro-train --stage 3``: load --init_drafter, take prompts, run OnPolicyTrainer, evaluate, save.

    Returns the refined drafter; TrainingInputError for unusable input."""
    from ..targets import text_config
    from . import feature_store as store
    from .trainer import check_checkpoint_compatible

    drafter = initial_drafter(args, target)
    if resume:
        check_checkpoint_compatible(resume, drafter)
    prompts, prompts_from = _stage3_prompts(args, data_args, data, text_config(target).vocab_size)
    with timer("features"):
        cache = None
        if args.feature_cache_dir:
            cache = store.FeatureCache(args.feature_cache_dir, target, args.max_seq_len,
                                      input_layers=drafter.config.input_layers,
                                      context_layers=drafter.context_layers,
                                      compute_dtype=getattr(torch, args.feature_dtype))
            cache.build(data.eval, batch_tokens=args.feature_batch_tokens, with_resid=False)
        eval_ds = held_out_dataset(data.eval, args, cache)
        mean, std = _state_statistics(args, target, data, cache)
    provenance = {
        "init_drafter": str(args.init_drafter),
        "prompts": f"{prompts_from}, offset {args.onpolicy_prompt_offset}",
        "eval_records": len(data.eval),
    }
    try:
        trainer = OnPolicyTrainer(
            drafter, target, args, prompts, eval_dataset=eval_ds, state_mean=mean, state_std=std, provenance=provenance
        )
    except OnPolicyError as err:
        raise TrainingInputError(str(err)) from err
    before, final = train_and_evaluate(trainer, resume, timer, "stage 3", f"initial drafter ({args.init_drafter})")
    evals = before + ([(f"after stage 3 (step {trainer.state.global_step})", final)] if final else [])
    info = {
        "base_model": target.name_or_path or model_args.target, "stage": "3", **provenance,
        "rounds": args.onpolicy_rounds,
        "prompts_per_round": args.onpolicy_prompts_per_round,
        "steps_per_round": args.onpolicy_steps_per_round,
        "max_new_tokens": args.onpolicy_max_new_tokens,
        "draft_tokens": args.onpolicy_draft_tokens,
        "mix_ratio": args.onpolicy_mix_ratio,
        "error_weight": args.onpolicy_error_weight,
        "buffer_size": args.onpolicy_buffer_size,
        "buffer_policy": args.onpolicy_buffer_policy,
        "learning_rate": args.learning_rate,
        "batch_size": args.per_device_train_batch_size * args.gradient_accumulation_steps,
        "global_step": trainer.state.global_step,
        "round_logs": trainer.round_logs,
    }
    if args.should_save:
        for r, m in enumerate(trainer.round_logs):
            print(f"round {r}: collection tau {m['collect_tau']:.3f}, train loss {m.get('round_train_loss', float('nan'))}")
    save_outputs(trainer, args, info, evals, timer)
    return drafter
