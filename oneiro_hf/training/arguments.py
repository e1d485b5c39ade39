"""`oneiro-train`'s drafter and training settings: `OneiroTrainingArguments` (TrainingArguments plus the
drafter's own flags) and the parsers of its text flags."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from transformers import TrainingArguments

STAGES = ("1", "2", "1+2", "3")


@dataclass
class OneiroTrainingArguments(TrainingArguments):
    """TrainingArguments plus the drafter-specific settings of ``oneiro-train``."""

    stage: str = field(
        default="1+2",
        metadata={
            "help": "'1' teacher-forced, '2' joint rollouts, '1+2' stage 1 then stage 2 (see stage1_fraction), "
            "'3' on-policy refinement of --init_drafter (see the onpolicy_* settings)"
        },
    )
    stage1_fraction: float = field(
        default=0.5, metadata={"help": "with stage '1+2': share of the optimisation steps spent in stage 1"}
    )
    rollout_steps: int = field(default=4, metadata={"help": "stage 2: recurrent draft steps K per position"})
    rollout_step_weights: str = field(
        default="1,0.8,0.6,0.5",
        metadata={"help": "stage 2: loss weight of each rollout step (the last one repeats for larger K)"},
    )
    state_loss: str = field(
        default="smooth_l1", metadata={"help": "'smooth_l1' or 'mse' on normalised states"}
    )
    state_loss_weight: float = field(default=1.0, metadata={"help": "weight of the state loss"})
    token_loss: str = field(
        default="kl",
        metadata={"help": "'kl' to the target's draft-vocabulary distribution, or 'ce' to its argmax"},
    )
    token_loss_weight: float = field(default=0.5, metadata={"help": "weight of the token loss"})
    draft_vocab_size: int = field(
        default=8192, metadata={"help": "tokens in the drafter's readout vocabulary"}
    )
    interval: str | None = field(
        default=None,
        metadata={"help": "target layers copied into the drafter, 'start,end' (default: last two)"},
    )
    input_layers: str | None = field(
        default=None,
        metadata={"help": "multi-layer input (as EAGLE-3): the target's output_hidden_states indices fused with the "
                          "token, e.g. '8,16,30' for SmolLM2 (0 embeddings, i output of layer i-1, the layer count "
                          "or -1 the final-normed last state); default: the final-normed last state only"},
    )
    verified_context: str = field(
        default="own",
        metadata={"help": "keys/values the copied layers attend to at verified positions: 'own' (the drafter's "
                          "catch-up over its fused inputs) or 'exact' (its projections of the target's true inputs "
                          "to those layers; features then also hold them, 2 bytes x hidden x layers per token)"},
    )
    transition_init: str = field(
        default="target",
        metadata={"help": "'target': copy the interval's layers (the method); 'random': fresh weights (ablation)"},
    )
    max_seq_len: int = field(default=1024, metadata={"help": "prompt + response tokens kept per sequence"})
    ridge_init: bool = field(default=True, metadata={"help": "stage 0: fit the fusion in closed form first"})
    ridge_positions: int = field(
        default=50_000, metadata={"help": "response positions used by the ridge fit"}
    )
    data_files: list[str] | None = field(
        default=None,
        metadata={"help": "self-distillation JSONL files (provenance; the CLI fills it from --data)"},
    )
    feature_cache_dir: str | None = field(
        default=None,
        metadata={
            "help": "cache the target's features here (fp16 safetensors); default: compute them on the fly"
        },
    )
    feature_dtype: str = field(
        default="float32",
        metadata={
            "help": "dtype the target's decoder layers compute the features in: float32, or bfloat16 (autocast; "
            "its next-token labels stay float32) at about 2.4x float32's rate on a CPU with bf16 units "
            "(docs/training.md measures what it does to held-out tau)"
        },
    )
    stream_features: bool = field(
        default=False,
        metadata={
            "help": "with --feature_cache_dir: no feature pass over the training records; those the cache holds "
            "(e.g. captured while the campaign answered) are read from it, the others computed batch by batch "
            "as training reaches them (one epoch costs one feature pass, and the disk holds only the cache). The "
            "held-out records are still cached"
        },
    )
    feature_cache_max_gb: float = field(
        default=0.0,
        metadata={
            "help": "with --stream_features: keep the features computed while training in the cache, until its "
            "shards hold this many GiB (0: keep none). A later run over the same records (the next campaign "
            "milestone, another pass) reads them instead of running the target; a 1536-wide target's features "
            "take about 3 KB per position"
        },
    )
    feature_batch_tokens: int = field(
        default=4096, metadata={"help": "padded tokens per target pass when computing features / evaluating"}
    )
    eval_rollout_steps: int = field(
        default=5, metadata={"help": "draft length of the held-out acceptance test"}
    )
    eval_at_stage_switch: bool = field(
        default=True, metadata={"help": "evaluate (and checkpoint) when stage 2 starts"}
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "allow replacing a finished drafter already saved in output_dir"}
    )
    max_train_minutes: float | None = field(
        default=None,
        metadata={
            "help": "the run's time box: training minutes, counted across resumes, after which it evaluates and "
            "saves as usual; the learning-rate schedule and the stage switch follow the spent share of the box, so "
            "a box that ends long before max_steps still anneals (oneiro_hf/training/timebox.py); inf: no box (the "
            "steps bound the run, --train_until only pauses it)"
        },
    )
    train_until: float | None = field(
        default=None,
        metadata={
            "help": "stop training at this wall-clock time (seconds since the epoch, e.g. `$(( $(date +%s) + 480 ))`), "
            "then evaluate and save as usual. Alone, it is the time box (for a lease whose end is fixed while the "
            "time spent before training is not). With --max_train_minutes it only pauses the run: a checkpoint is "
            "saved and --resume_from_checkpoint last continues the schedule (training_summary.json: finished false)"
        },
    )
    save_dtype: str = field(
        default="bfloat16",
        metadata={"help": "dtype of the final drafter weights: bfloat16, float16 or float32"},
    )
    relative_layer_rank: int | None = field(
        default=None,
        metadata={"help": "train only a rank-r difference of each copied layer matrix from the target's and save "
                  "the drafter relative to the target (oneiro_hf/training/low_rank.py; MBs instead of whole layers)"},
    )
    relative_token_rank: int | None = field(
        default=None,
        metadata={"help": "with --relative_layer_rank: the fusion's token block as identity + rank t (default: "
                  "trained and stored whole)"},
    )
    remove_unused_columns: bool = field(
        default=False, metadata={"help": "kept False: batches carry extra keys"}
    )
    # ---- stage 3 (on-policy refinement, oneiro_hf/training/onpolicy.py)
    init_drafter: str | None = field(
        default=None,
        metadata={"help": "a trained drafter for --target (a directory or Hub id): stage 3 refines it; stages 1 and 2 "
                          "train it further on --data (another pass, more data), keeping its interval, draft "
                          "vocabulary and weights, with no ridge fit"},
    )
    onpolicy_rounds: int = field(default=3, metadata={"help": "stage 3: collect -> train rounds"})
    onpolicy_prompts_per_round: int = field(
        default=40, metadata={"help": "stage 3: prompts decoded with the drafter per round (next slice each round)"}
    )
    onpolicy_steps_per_round: int = field(
        default=30, metadata={"help": "stage 3: optimiser steps per round (max_steps = rounds x this)"}
    )
    onpolicy_max_new_tokens: int = field(
        default=128, metadata={"help": "stage 3: new tokens per collected answer"}
    )
    onpolicy_draft_tokens: int = field(
        default=5,
        metadata={"help": "stage 3: fixed draft length when collecting (cost model off) and rollout steps K"},
    )
    onpolicy_mix_ratio: float = field(
        default=0.7,
        metadata={"help": "stage 3: share of each batch's loss weight on rounds with a rejection (rest: accepted)"},
    )
    onpolicy_error_weight: float = field(
        default=2.0, metadata={"help": "stage 3: extra loss weight of the first rejected step of a round"}
    )
    onpolicy_buffer_size: int = field(
        default=200, metadata={"help": "stage 3: collected sequences kept in the replay buffer"}
    )
    onpolicy_buffer_policy: str = field(
        default="fifo", metadata={"help": "stage 3: 'fifo' (keep the newest) or 'reservoir' (uniform over all)"}
    )
    onpolicy_prompts: str | None = field(
        default=None,
        metadata={"help": "stage 3: JSONL of training prompts (records with input_ids); default: --data's train split"},
    )
    onpolicy_prompt_offset: int = field(
        default=0, metadata={"help": "stage 3: skip this many records of the prompt file (e.g. those already trained on)"}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.stage not in STAGES:
            raise ValueError(f"stage must be one of {STAGES} (got {self.stage!r})")
        if self.rollout_steps < 1 or self.eval_rollout_steps < 1:
            raise ValueError("rollout_steps and eval_rollout_steps must be >= 1")
        if not 0.0 <= self.stage1_fraction <= 1.0:
            raise ValueError("stage1_fraction must be within [0, 1]")
        if self.state_loss not in ("smooth_l1", "mse"):
            raise ValueError("state_loss must be 'smooth_l1' or 'mse'")
        if self.token_loss not in ("kl", "ce"):
            raise ValueError("token_loss must be 'kl' or 'ce'")
        if self.save_dtype not in ("bfloat16", "float16", "float32"):
            raise ValueError("save_dtype must be bfloat16, float16 or float32")
        if self.feature_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"feature_dtype must be float32 or bfloat16 (got {self.feature_dtype!r})")
        if self.stream_features and not self.feature_cache_dir:
            raise ValueError("--stream_features reads what a feature cache holds and streams the rest. Fix: pass "
                             "--feature_cache_dir (it may be empty), or leave --stream_features off to compute "
                             "every batch's features on the fly.")
        if self.feature_cache_max_gb < 0 or (self.feature_cache_max_gb and not self.stream_features):
            raise ValueError(f"--feature_cache_max_gb {self.feature_cache_max_gb}: it bounds the features kept while "
                             "--stream_features computes them. Fix: pass a size >= 0 in GiB together with "
                             "--stream_features (without it every feature is cached before training).")
        if self.draft_vocab_size < 1:
            raise ValueError("draft_vocab_size must be >= 1")
        if self.max_train_minutes is not None and self.max_train_minutes <= 0:
            raise ValueError(f"max_train_minutes must be > 0 (got {self.max_train_minutes}); leave it unset for no "
                             "time limit")
        schedule = getattr(self.lr_scheduler_type, "value", self.lr_scheduler_type)
        if (self.max_train_minutes or self.train_until is not None) and "plateau" in schedule:
            raise ValueError(f"--lr_scheduler_type {schedule} cannot follow a time box (it is driven "
                             "by metrics, not steps). Fix: use a step schedule (cosine, cosine_with_min_lr, linear, "
                             "constant), or train without --max_train_minutes and --train_until.")
        from ..modeling_oneiro import TRANSITION_INITS

        if self.transition_init not in TRANSITION_INITS:
            raise ValueError(f"transition_init must be one of {', '.join(TRANSITION_INITS)} "
                             f"(got {self.transition_init!r})")
        self.step_weights(self.rollout_steps)
        self.relative_storage()
        self.parsed_interval()
        self.parsed_input_layers()
        if self.stage == "3":
            if min(self.onpolicy_rounds, self.onpolicy_prompts_per_round, self.onpolicy_steps_per_round) < 1:
                raise ValueError("onpolicy_rounds, onpolicy_prompts_per_round and onpolicy_steps_per_round must be >= 1")
            if min(self.onpolicy_max_new_tokens, self.onpolicy_draft_tokens, self.onpolicy_buffer_size) < 1:
                raise ValueError("onpolicy_max_new_tokens, onpolicy_draft_tokens and onpolicy_buffer_size must be >= 1")
            if not 0.0 <= self.onpolicy_mix_ratio <= 1.0:
                raise ValueError("onpolicy_mix_ratio must be within [0, 1]")
            if self.onpolicy_error_weight < 0 or self.onpolicy_prompt_offset < 0:
                raise ValueError("onpolicy_error_weight and onpolicy_prompt_offset must be >= 0")
            if self.onpolicy_buffer_policy not in ("fifo", "reservoir"):
                raise ValueError("onpolicy_buffer_policy must be 'fifo' or 'reservoir'")

    def relative_storage(self):
        """The target-relative parametrisation to train in (a RelativeStorage), or None to train whole."""
        from ..storage.target_relative import RelativeStorage

        if self.relative_layer_rank is None:
            if self.relative_token_rank is not None:
                raise ValueError("--relative_token_rank needs --relative_layer_rank (e.g. --relative_layer_rank 32 "
                                 "--relative_token_rank 256)")
            return None
        if self.stage == "3":
            raise ValueError("--relative_layer_rank trains stages 1 and 2; stage 3 refines a drafter as it is. Fix: "
                             "drop --relative_layer_rank, and store the refined drafter relative when you publish it "
                             "(examples/publish.py --layer-rank)")
        return RelativeStorage(self.relative_layer_rank, self.relative_token_rank)

    @property
    def feature_compute_dtype(self) -> torch.dtype:
        """What the target's decoder layers compute features in, cached or on the fly."""
        return getattr(torch, self.feature_dtype)

    def step_weights(self, steps: int) -> list[float]:
        return parse_step_weights(self.rollout_step_weights, steps)

    def parsed_interval(self) -> tuple[int, int] | None:
        return parse_interval(self.interval)

    def parsed_input_layers(self) -> list[int] | None:
        return parse_input_layers(self.input_layers)


def parse_step_weights(text: str | None, steps: int) -> list[float]:
    values = [float(v) for v in str(text or "1").replace(" ", "").split(",") if v]
    if not values or any(v < 0 or not math.isfinite(v) for v in values):
        raise ValueError(
            f"rollout_step_weights must be non-negative numbers, e.g. '1,0.8,0.6,0.5' (got {text!r})"
        )
    return [values[min(i, len(values) - 1)] for i in range(steps)]


def parse_input_layers(text: str | tuple | list | None) -> list[int] | None:
    """'8,16,30' -> [8, 16, 30]; None or '' -> None (the default input). The range is checked against the
    target when the drafter is built."""
    if text is None or text == "":
        return None
    parts = list(text) if isinstance(text, (tuple, list)) else [p for p in str(text).split(",") if p.strip()]
    try:
        return [int(p) for p in parts]
    except ValueError:
        raise ValueError(f"input_layers must be comma-separated integers, e.g. '8,16,30' (got {text!r})") from None


def parse_interval(text: str | tuple | list | None) -> tuple[int, int] | None:
    if text is None or text == "":
        return None
    if isinstance(text, (tuple, list)):
        parts = list(text)
    else:
        parts = [p for p in str(text).replace("-", ",").replace(":", ",").split(",") if p.strip()]
    if len(parts) != 2:
        raise ValueError(f"interval must be 'start,end', e.g. '28,30' (got {text!r})")
    start, end = int(parts[0]), int(parts[1])
    if not 0 <= start < end:
        raise ValueError(f"interval needs 0 <= start < end (got {start},{end})")
    return start, end
