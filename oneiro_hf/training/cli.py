"""``oneiro-train``: train a OneiroDrafter for a target from self-distillation data.

    oneiro-train --target smollm2-135m-instruct --data runs/data/smollm2.jsonl \\
        --interval 28,30 --draft_vocab_size 8192 --output_dir drafters/smollm2-135m-instruct \\
        --feature_cache_dir runs/features/smollm2 --num_train_epochs 2

Steps: load the target and the data (or generate it first from ``--prompts``), hold out ``--eval_fraction`` of
the records (by id hash, stable as the data grows), choose the draft vocabulary from the target's responses,
compute (or cache) the target's features, fit the fusion in closed form (stage 0), train stage 1 and/or 2
with the transformers Trainer (resumable: ``--resume_from_checkpoint last``), evaluate held-out acceptance,
then save the drafter with a model card. Runs unchanged on CPU, one GPU, or ``accelerate launch``.

Several processes: ``accelerate launch --multi_gpu --num_processes N -m oneiro_hf.training.cli ...``. On a machine
without accelerators that starts N CPU processes joined over gloo (``use_cpu`` is switched on automatically);
note that ``accelerate launch --cpu --num_processes N`` (or without ``--multi_gpu``) starts a single process.
Resume an interrupted run with ``--resume_from_checkpoint last`` (same --output_dir and settings).

Stage 3 (on-policy refinement, ``oneiro_hf/training/onpolicy.py``) starts from a finished drafter:
``oneiro-train --stage 3 --init_drafter drafters/<target> --target ... --data ... --onpolicy_rounds 3``.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import pipeline
from .features import DEFAULT_EVAL_FRACTION
from .pipeline import Timer, TrainingInputError

logger = logging.getLogger("oneiro_hf.training")

TRAINING_ARGUMENTS_GROUP = "transformers TrainingArguments (the Trainer's own settings)"
OWN_TRAINING_GROUP = "drafter and training (oneiro-train's own)"


@dataclass
class ModelArguments:
    """The target: what to load and, with --push_to_hub, how to describe it."""

    _argument_group_name = "target"

    target: str = field(
        metadata={
            "help": "target model: a reference name (e.g. smollm2-135m-instruct), a local directory or a hub id"
        }
    )
    target_dtype: str = field(
        default="float32", metadata={"help": "dtype to load the target in (float32, bfloat16)"}
    )
    threads: int | None = field(
        default=None, metadata={"help": "torch CPU threads (default: torch's choice)"}
    )
    reference_cache_dir: str | None = field(
        default=None, metadata={"help": "cache root for reference models"}
    )
    license: str | None = field(
        default=None,
        metadata={
            "help": "with --push_to_hub: the published drafter's license (its layers are copies of the target's "
            "weights, so use the target's license, e.g. apache-2.0)"
        },
    )
    target_hub_id: str | None = field(
        default=None,
        metadata={
            "help": "with --push_to_hub: the target's Hub repo id (org/name), the card's base_model "
            "(default: --target when it is a repo id)"
        },
    )


@dataclass
class DataArguments:
    """The self-distillation data: a file or dataset, or prompts to answer first; the held-out split."""

    _argument_group_name = "data"

    data: str | None = field(
        default=None,
        metadata={
            "help": "self-distillation data: a JSONL file (python -m oneiro_hf.training.selfdistill), a dataset "
            "directory (python -m oneiro_hf.training.distill_dataset, e.g. data/selfdistill/<target>), a "
            "save_to_disk copy, or a Hub dataset id"
        },
    )
    prompts: str | None = field(
        default=None,
        metadata={
            "help": "prompts JSONL: generate the target's answers first (into --data, default "
            "OUTPUT_DIR/selfdistill.jsonl; resumable), then train on them"
        },
    )
    eval_fraction: float = field(default=DEFAULT_EVAL_FRACTION, metadata={"help": "share of records held out for evaluation"})
    split_seed: int = field(default=0, metadata={"help": "seed of the (id-hash) hold-out split"})
    max_records: int | None = field(default=None, metadata={"help": "use at most this many records"})
    max_train_records: int | None = field(
        default=None,
        metadata={
            "help": "train on at most this many of the training records; the held-out set stays the split of all "
            "records, so runs of a learning curve are evaluated on the same records"
        },
    )
    gen_max_new_tokens: int = field(
        default=192, metadata={"help": "with --prompts: max new tokens per answer"}
    )
    gen_batch_size: int = field(default=16, metadata={"help": "with --prompts: generation batch size"})



class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows a flag's default once: not for required flags, nor where the help already names the default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.required:
            return f"{text} (required)".strip()
        if "default" in text or action.default in (None, argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)"


def _group_flags(parser: argparse.ArgumentParser) -> None:
    """Project flags first, grouped (target, data, drafter and training), then the inherited TrainingArguments."""
    from transformers import TrainingArguments

    from .trainer import OneiroTrainingArguments

    inherited = {f.name for f in dataclasses.fields(TrainingArguments)}
    own = {f.name for f in dataclasses.fields(OneiroTrainingArguments)} - inherited
    groups = {title: parser.add_argument_group(title) for title in (OWN_TRAINING_GROUP, TRAINING_ARGUMENTS_GROUP)}
    default_group = parser._optionals  # argparse's "options": -h stays there, first
    for action in list(default_group._group_actions):
        if action.dest == "help":
            continue
        title = OWN_TRAINING_GROUP if action.dest in own else TRAINING_ARGUMENTS_GROUP
        default_group._group_actions.remove(action)
        groups[title]._group_actions.append(action)
    parser._action_groups.remove(groups[TRAINING_ARGUMENTS_GROUP])
    parser._action_groups.append(groups[TRAINING_ARGUMENTS_GROUP])


def build_parser():
    """oneiro-train's HfArgumentParser: description and example first, then the project's flags by group."""
    from transformers import HfArgumentParser

    from .trainer import OneiroTrainingArguments

    parser = HfArgumentParser(
        (ModelArguments, DataArguments, OneiroTrainingArguments), prog="oneiro-train", description=__doc__,
        usage="oneiro-train --target MODEL (--data DATA | --prompts PROMPTS) [--output_dir DIR] [flags]",
        formatter_class=_HelpFormatter)
    _group_flags(parser)
    return parser


def _no_accelerator() -> bool:
    if torch.cuda.is_available():
        return False
    for name in ("xpu", "npu", "mps"):
        backend = getattr(torch, name, None) or getattr(torch.backends, name, None)
        if backend is not None and hasattr(backend, "is_available") and backend.is_available():
            return False
    return True


def _flag_set(argv: list[str], name: str) -> bool:
    """Whether `--name` is given and not switched off (`--name`, `--name true`, `--name=true`)."""
    for i, arg in enumerate(argv):
        if arg == name:
            value = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("--") else "true"
            return value.lower() in ("true", "1", "yes")
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1].lower() in ("true", "1", "yes")
    return False


def parse_args(argv: list[str] | None):
    """(ModelArguments, DataArguments, OneiroTrainingArguments) from the command line or one JSON file."""
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 1 and argv[0].endswith(".json"):
        return parser.parse_json_file(os.path.abspath(argv[0]))
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if (distributed or _flag_set(argv, "--bf16")) and _no_accelerator() and not any(
            a == "--use_cpu" or a.startswith("--use_cpu=") for a in argv):
        # On a machine without accelerators the Trainer needs use_cpu: under `accelerate launch --num_processes N`
        # (torchrun) to join the gloo process group (each rank would otherwise train alone), and for --bf16 to
        # train under CPU autocast (about twice float32's matmul rate on CPUs with bf16 units) instead of refusing.
        argv += ["--use_cpu", "true"]
    if not any(a == "--output_dir" or a.startswith("--output_dir=") for a in argv):
        target = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--target"), "drafter")
        argv += ["--output_dir", os.path.join("runs", "oneiro-" + Path(target).name)]
    return parser.parse_args_into_dataclasses(args=argv)


def resolve_resume(value: str | None, output_dir: str) -> str | None:
    """The checkpoint --resume_from_checkpoint names ('last'/'auto': the newest in --output_dir), or None."""
    from transformers.trainer_utils import get_last_checkpoint

    if value is None or str(value).lower() in ("", "none", "false", "no"):
        return None
    if str(value).lower() in ("last", "true", "auto", "yes"):
        last = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
        if last is None and str(value).lower() != "auto":
            raise SystemExit(f"oneiro-train: no checkpoint-N directory in {output_dir} to resume from.")
        return last
    if not os.path.isdir(value):
        raise SystemExit(f"oneiro-train: checkpoint {value} does not exist.")
    return value


def check_arguments(data_args, args) -> None:
    """Checks that need no model: --output_dir, stage 3's --init_drafter, --data or --prompts."""
    from .trainer import OutputDirHasDrafter, check_output_dir

    try:
        check_output_dir(args.output_dir, args.overwrite_output_dir,
                         resuming=resolve_resume(args.resume_from_checkpoint, args.output_dir) is not None)
    except OutputDirHasDrafter as err:
        raise TrainingInputError(str(err)) from err
    if args.stage == "3" and not args.init_drafter:
        raise TrainingInputError(
            "--stage 3 refines a trained drafter. Fix: pass --init_drafter PATH (a drafter saved by oneiro-train, "
            "e.g. drafters/<target>).")
    if data_args.data is None and data_args.prompts is None:
        raise TrainingInputError(
            "pass --data (self-distillation JSONL, dataset directory or Hub dataset id) or --prompts FILE.jsonl.")


def train_offline(model_args, data_args, args, target, tokenizer, data, resume, timer: Timer):
    """Stages 0, 1 and 2 on self-distillation data; returns the saved drafter."""
    from .trainer import OneiroTrainer

    drafter, coverage = pipeline.build_drafter(args, target, tokenizer, data, resume)
    interval = tuple(drafter.config.interval)
    features = pipeline.build_features(args, target, data, interval, timer, drafter.config.input_layers,
                                       drafter.context_layers, resume)
    evals, ridge = pipeline.stage0(args, drafter, target, features, resume, timer)
    storage = args.relative_storage()
    if storage is not None:  # train only what a target-relative checkpoint stores (after the ridge fit)
        from .low_rank import parametrise

        trained = parametrise(drafter, storage, rebase=bool(args.init_drafter))
        logger.info("training %d matrices as differences from the target's (%s)", len(trained), storage.to_dict())
    keeper = pipeline.feature_keeper(args, features)
    trainer = OneiroTrainer(drafter, target, args, train_dataset=features.train, eval_dataset=features.eval,
                            state_mean=features.mean, state_std=features.std, provenance=data.provenance,
                            feature_keeper=keeper)
    before_label = (f"initial ({args.init_drafter})" if args.init_drafter
                    else "stage 0 (ridge init)" if args.ridge_init else "step 0")
    before, final = pipeline.train_and_evaluate(trainer, resume, timer, "train", before_label)
    evals += before
    for entry in trainer.state.log_history:  # evaluations during training (--eval_strategy)
        step = entry.get("step", 0)
        if "eval_tau" in entry and step not in (0, trainer.state.global_step):
            switch = trainer.switch_step and step == trainer.switch_step
            evals.append(("after stage 1" if switch else f"step {step}", entry))
    if final:
        last = {"1": "after stage 1", "2": "after stage 2", "1+2": "after stage 1+2"}[args.stage]
        evals.append((f"{last} (final, step {trainer.state.global_step})", final))
    info = {
        "base_model": target.name_or_path or model_args.target,  # a reference target: the Hub id it copies
        "interval": list(interval), "transition_init": args.transition_init, "init_drafter": args.init_drafter,
        "input_layers": drafter.config.input_layers, "verified_context": drafter.config.verified_context,
        **data.provenance, "train_records": len(data.train), "eval_records": len(data.eval),
        "train_response_tokens": features.train_tokens, "draft_vocab_size": int(drafter.draft_vocab_ids.numel()),
        "vocab_coverage": coverage, "stage": args.stage, "rollout_steps": args.rollout_steps,
        "rollout_step_weights": args.rollout_step_weights, "state_loss": args.state_loss,
        "state_loss_weight": args.state_loss_weight, "token_loss": args.token_loss,
        "token_loss_weight": args.token_loss_weight, "ridge": pipeline.describe_ridge(ridge, interval[0]),
        "global_step": trainer.state.global_step, "epochs": round(trainer.state.epoch or 0.0, 3),
        # a run stopped by --train_until with box time left is paused: --resume_from_checkpoint last goes on
        "trained_minutes": round(trainer.clock.seconds() / 60, 1), "ended_by": trainer.time_box.ended_by,
        "finished": not trainer.time_box.paused,
        "batch_size": args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size,
        "learning_rate": args.learning_rate, "max_seq_len": args.max_seq_len, "save_dtype": args.save_dtype,
        # the dtype the target's layers computed the features in
        "feature_dtype": args.feature_dtype if args.feature_dtype != "float32" else model_args.target_dtype,
        "features": _feature_source(features, keeper),
        "weights_storage": storage.to_dict() if storage is not None else "whole",
    }
    pipeline.save_outputs(trainer, args, info, evals, timer)
    return drafter


def _feature_source(features: pipeline.Features, keeper=None) -> str:
    """Where training read the target's features from (and what it kept in the cache), for the summary and the
    card."""
    if features.cache is None:
        return "computed per batch"
    streamed = getattr(features.train, "streamed", 0)
    cached = len(features.train) - streamed
    if not streamed:
        return f"cached ({cached} records)"
    kept = f"; {keeper.kept_tokens} positions of them kept in the cache" if keeper is not None else ""
    return f"streamed: {cached} records from the cache, {streamed} computed per batch{kept}"


def _end_process_group(finished: bool) -> None:
    """Close the process group of a multi-process run (accelerate launch) before the interpreter exits: left to
    interpreter teardown, gloo's threads can abort a finished rank ("terminate called without an active exception").

    A rank that finished waits for the others first (the main process still writes the card and summary), so no
    rank tears its connections down while a peer still holds them; a rank that failed does not wait (its peers
    may never arrive) and the launcher stops the rest."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return
    # the trainer's DDP model and accelerator hold the group through reference cycles; left to the interpreter's
    # teardown they would destroy it there, after destroy_process_group, and its threads with it
    gc.collect()
    if finished:
        torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    """oneiro-train: parse, check, load the target and data, train (stages 0-2, or 3), save, publish;
    ``oneiro-train campaign ...`` runs a data-and-training campaign (`campaign.main`)."""
    from .publish import plan_hub_push, publish_trained_drafter

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["campaign"]:  # grow the data and retrain at milestones until a deadline (campaign.py)
        from .campaign import main as campaign_main

        return campaign_main(argv[1:])
    model_args, data_args, args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.should_log else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if model_args.threads:
        torch.set_num_threads(model_args.threads)
    timer = Timer()
    finished = False
    try:
        check_arguments(data_args, args)
        resume = resolve_resume(args.resume_from_checkpoint, args.output_dir)
        hub_plan = plan_hub_push(model_args, args)
        with timer("load target"):
            target, tokenizer = pipeline.load_target(model_args, args.device)
        data = pipeline.prepare_data(model_args, data_args, args, target, tokenizer, timer)
        if args.stage == "3":  # on-policy refinement of --init_drafter
            from .onpolicy import run_stage3

            run_stage3(model_args, data_args, args, target, data, resume, timer)
        else:
            train_offline(model_args, data_args, args, target, tokenizer, data, resume, timer)
        finished = True
    except TrainingInputError as err:
        print(f"oneiro-train: {err}", file=sys.stderr)
        return 2
    finally:
        _end_process_group(finished)
    if hub_plan is not None and args.should_save:
        return publish_trained_drafter(hub_plan, target, Path(args.output_dir), args.save_dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
