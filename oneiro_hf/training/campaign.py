"""``oneiro-train campaign``: grow a target's self-distillation dataset and retrain its drafter until a deadline,
resumable on any machine from what is committed.

    oneiro-train campaign --target qwen2.5-coder-1.5b-instruct \\
        --dataset data/selfdistill/qwen2.5-coder-1.5b-instruct --recipe recipes/qwen2.5-coder-1.5b-instruct.json \\
        --until 18:20 --goal_tokens 1000000 --milestone_tokens 200000 \\
        --on_milestone 'python scripts/campaign_commit.py'

A round: answer prompts with the target (batched; the batch size picked by a measured throughput probe) until the
dataset's training split (the records the recipe does not hold out) reaches its next milestone or the deadline ->
export the answers into the committed dataset (each prompt re-checked against the evaluation sets) -> at a
milestone not yet on the learning curve, train a drafter on the whole dataset (``oneiro-train`` with the recipe:
it trains on that split, so a milestone's drafter is trained on at least its number of answer tokens), add its
held-out acceptance to the learning curve and keep its checkpoint -> with ``--on_milestone CMD``, run CMD on what changed (the
repository's ``scripts/campaign_commit.py`` git-commits it; the library itself runs no git). Stopped anywhere, the same command goes on: the answers JSONL in ``--work_dir`` keeps every finished
batch, a fresh machine skips the ids the dataset holds, and an interrupted training resumes from its last
checkpoint.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .prompts import resolve_exclude

logger = logging.getLogger("oneiro_hf.training")


PROBED_BATCH_SIZES = (1, 16, 32, 64, 96)
SAVE_MARGIN_S = 300.0  # a milestone's training pauses this long before the deadline: checkpoint, drafter, card
MIN_TRAIN_SESSION_S = 1200.0  # less time than this left: no training starts (its feature pass alone may not fit)


class CampaignError(ValueError):
    """Unusable campaign arguments or state; the message says what to fix."""


@dataclass
class CampaignArguments:
    """What to grow, until when, and where its committed and scratch files live."""

    target: str = field(metadata={"help": "reference model name or model directory whose answers are collected"})
    dataset: str = field(metadata={"help": "the committed dataset directory the answers are exported into"})
    until: str = field(
        metadata={"help": "deadline: HH:MM (UTC, the next such time), +90m / +2h, or Unix seconds; the campaign "
                          "stops starting work that would not finish by then"}
    )
    recipe: str | None = field(
        default=None, metadata={"help": "JSON of oneiro-train flags for the milestone trainings (none: no training)"}
    )
    work_dir: str = field(default="runs/campaign", metadata={"help": "answers JSONL, logs and training outputs"})
    goal_tokens: int = field(default=1_000_000, metadata={"help": "stop once the dataset holds this many answer tokens"})
    milestone_tokens: int = field(default=200_000, metadata={"help": "train and commit every this many answer tokens"})
    sources: str = field(
        default="sharegpt_code:6,sharegpt:2,arena_hard:1,stdlib:1,ifeval:0.5",
        metadata={"help": "prompt sources with weights (python -m oneiro_hf.training.selfdistill --sources)"},
    )
    exclude: list[str] = field(
        default_factory=list, metadata={"help": "evaluation question files whose prompts are never answered "
                                                "(default: $ONEIRO_BENCH_QUESTIONS; 'none': MT-bench only)"}
    )
    num_prompts: int = field(default=8000, metadata={"help": "size of the campaign's fixed prompt list"})
    max_new_tokens: int = field(default=256, metadata={"help": "answer length limit"})
    max_prompt_tokens: int = field(default=512, metadata={"help": "longer prompts are skipped (their prefill is "
                                                                  "the cost of several answers on a CPU)"})
    batch_size: str = field(default="auto", metadata={"help": "generation batch size, or 'auto' (measured)"})
    dtype: str = field(default="bfloat16", metadata={"help": "the target's dtype while answering"})
    device: str = field(default="auto", metadata={"help": "where the target answers (auto: a GPU if there is one)"})
    threads: int | None = field(default=None, metadata={"help": "torch CPU threads"})
    feature_cache_dir: str | None = field(
        default=None, metadata={"help": "store each answer's features, as the answering decode computed them, in "
                                        "this oneiro-train --feature_cache_dir (feature_dtype = --dtype), so "
                                        "training runs no feature pass over them"})
    max_seq_len: int = field(default=1024, metadata={"help": "the training's --max_seq_len (with "
                                                               "--feature_cache_dir: where captured sequences are cut)"})
    train_minutes: float = field(default=60.0, metadata={
        "help": "training time box of one milestone, counted across sessions: a training the deadline cuts short "
                "is paused with a checkpoint and resumed by the next run of the same command"})
    train_epochs: float | None = field(default=None, metadata={
        "help": "train each milestone for this many passes over its data instead of a --train_minutes box (the "
                "recipe's max_steps does not apply; the schedule follows the steps); deadlines pause it as they "
                "pause a box"})
    curve: str | None = field(
        default=None, metadata={"help": "learning curve JSON (default: learning_curve.json in --dataset)"}
    )
    checkpoint_out: str | None = field(
        default=None, metadata={"help": "directory the latest milestone drafter is copied to (committed); a paused "
                                        "training's last checkpoint is kept in its paused/ (committed too), so "
                                        "another machine resumes it"}
    )
    on_milestone: str | None = field(default=None, metadata={
        "help": "a command run after the dataset grows and after each milestone (its curve point, checkpoint or "
                "paused training): the message is its first argument, the changed paths the rest; e.g. 'python "
                "scripts/campaign_commit.py', which git-commits them, so another machine resumes from the commit"})
    commit: bool = field(default=False, metadata={
        "help": "deprecated (removed in the next release): the same as --on_milestone 'python "
                "scripts/campaign_commit.py', run from a checkout of oneiro-hf"})
    probe_only: bool = field(
        default=False, metadata={"help": "measure the batch sizes' answer throughput in --dtype (batch_throughput.json "
                                         "in --work_dir, printed) and exit"}
    )


def parse_deadline(text: str, now: float | None = None) -> float:
    """Unix seconds of ``--until``: ``HH:MM`` (UTC; tomorrow's when today's has passed), ``+90m``/``+2h``/``+45s``,
    or Unix seconds."""
    now = time.time() if now is None else now
    value = text.strip()
    try:
        if value.startswith("+"):
            scale = {"s": 1, "m": 60, "h": 3600}[value[-1]]
            return now + float(value[1:-1]) * scale
        if ":" in value:
            hour, minute = (int(part) for part in value.split(":"))
            today = datetime.datetime.fromtimestamp(now, datetime.timezone.utc)
            at = today.replace(hour=hour, minute=minute, second=0, microsecond=0)
            if at.timestamp() <= now:
                at += datetime.timedelta(days=1)
            return at.timestamp()
        return float(value)
    except (KeyError, ValueError):
        raise CampaignError(
            f"--until {text!r} is not a deadline. Fix: pass HH:MM (UTC), +90m, +2h or Unix seconds."
        ) from None


@dataclass(frozen=True)
class TrainingSplit:
    """The records a milestone's drafter trains on: those outside the recipe's held-out split (``oneiro-train
    --eval_fraction/--split_seed``, by id hash), so a milestone counts the answer tokens the drafter is trained on."""

    eval_fraction: float = 0.0
    seed: int = 0

    def counts(self, record_id: str) -> bool:
        from .features import is_eval_record

        return not is_eval_record(record_id, self.eval_fraction, self.seed)


def recipe_split(path: str) -> TrainingSplit:
    """The held-out split oneiro-train makes with the recipe at ``path`` (its defaults for what it leaves unset)."""
    from .features import DEFAULT_EVAL_FRACTION

    recipe = recipe_settings(path)
    return TrainingSplit(float(recipe.get("--eval_fraction", DEFAULT_EVAL_FRACTION)),
                         int(recipe.get("--split_seed", 0)))


def training_split(args: CampaignArguments) -> TrainingSplit:
    """The recipe's split; without a recipe every record counts."""
    return TrainingSplit() if args.recipe is None else recipe_split(args.recipe)


def dataset_tokens(dataset: str | Path, split: TrainingSplit | None = None) -> int:
    """Answer tokens of the dataset directory's records in ``split`` (default: all; 0 for a directory that does not
    exist yet)."""
    import pyarrow.parquet as pq

    root = Path(dataset)
    split = split or TrainingSplit()
    total = 0
    for shard in sorted((root / "data").glob("*.parquet")) if root.is_dir() else []:
        table = pq.read_table(shard, columns=["id", "output_ids"])
        ids, outputs = table.column("id").to_pylist(), table.column("output_ids").to_pylist()
        total += sum(len(out) for rid, out in zip(ids, outputs) if split.counts(str(rid)))
    return total


def read_curve(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text())["points"] if path.is_file() else []


def next_milestone(tokens: int, args: CampaignArguments, curve: list[dict[str, Any]]) -> int:
    """The next multiple of --milestone_tokens, capped at the goal: with a --recipe, the first above the curve's last
    point, or the largest the dataset already holds if that is higher (a drafter trains on the whole dataset, so
    milestones the data outgrew unseen are skipped); with none (data only), the first above the dataset's tokens."""
    step = args.milestone_tokens
    done = max((p["milestone"] for p in curve), default=0)
    if args.recipe is None:
        return min(args.goal_tokens, (max(done, tokens) // step + 1) * step)
    return min(args.goal_tokens, max((done // step + 1) * step, tokens // step * step))


# ================================================================================================ answer
def answer_prompts(args: CampaignArguments, work: Path, stop_at_tokens: int, deadline: float) -> dict[str, Any]:
    """Answer the campaign's prompt list (skipping what the JSONL or the dataset holds) until the dataset plus the
    new answers hold ``stop_at_tokens`` in the training split or the next batch would end after ``deadline``; return
    the run's stats."""
    import torch

    from ..loading import load_target
    from .records import dataset_ids
    from .selfdistill import (
        generate_self_distillation_data,
        measure_batch_throughput,
        prepare_prompt_list,
        resolve_device,
    )

    if args.threads:
        torch.set_num_threads(args.threads)
    began = time.perf_counter()
    features = None
    if args.feature_cache_dir:  # the cache belongs to the float32 weights the answering copy is cast from
        from .feature_store import FeatureCache, target_fingerprint

        model, tokenizer = load_target(args.target, torch.float32, device=resolve_device(args.device))
        fingerprint = target_fingerprint(model)
        model.to(getattr(torch, args.dtype))
        features = FeatureCache(args.feature_cache_dir, model, args.max_seq_len, fingerprint=fingerprint)
    else:
        model, tokenizer = load_target(args.target, getattr(torch, args.dtype), device=resolve_device(args.device))
    # the line distill_dataset.parse_generation_log starts a run at
    logger.info("Loaded %s on %s in %.1fs (threads=%d)", args.target, model.device, time.perf_counter() - began,
                torch.get_num_threads())
    batch_size = _batch_size(args, model, work, measure_batch_throughput)
    if args.probe_only:
        print((work / "batch_throughput.json").read_text())
        return {"batch_size": batch_size}
    prompts = prepare_prompt_list(work / "answers.prompts.jsonl", args.num_prompts, args.sources, 0, args.exclude)
    split = training_split(args)
    have = dataset_tokens(args.dataset, split)
    skip = dataset_ids(args.dataset) if Path(args.dataset).is_dir() else set()
    logger.info("answering in %s at batch %d until the dataset holds %d answer tokens", args.dtype, batch_size,
                stop_at_tokens)
    stats = generate_self_distillation_data(
        model, tokenizer, prompts, work / "answers.jsonl", max_new_tokens=args.max_new_tokens,
        batch_size=batch_size, max_prompt_tokens=args.max_prompt_tokens, progress=False, skip_ids=skip,
        until=deadline, max_response_tokens=max(0, stop_at_tokens - have - _unexported_tokens(work, skip, split)),
        features=features, counts=split.counts)
    return {**stats, "batch_size": batch_size}


def _unexported_tokens(work: Path, exported: set[str], split: TrainingSplit) -> int:
    """Answer tokens in the work JSONL's records in ``split`` that the dataset does not hold yet."""
    from .records import load_records

    path = work / "answers.jsonl"
    return sum(len(r["output_ids"]) for r in load_records(path)
               if r["id"] not in exported and split.counts(str(r["id"]))) if path.is_file() else 0


def _batch_size(args: CampaignArguments, model: Any, work: Path, probe: Any) -> int:
    """--batch_size, or the measured fastest (the probe is stored in the work dir and reused)."""
    if args.batch_size != "auto" and not args.probe_only:
        try:
            return int(args.batch_size)
        except ValueError:
            raise CampaignError(f"--batch_size {args.batch_size!r}: pass a number or 'auto'.") from None
    path = work / "batch_throughput.json"
    key = f"{args.target} {args.dtype} {model.device} threads={args.threads}"
    stored = json.loads(path.read_text()) if path.is_file() else {}
    if key not in stored or args.probe_only:
        stored[key] = probe(model, PROBED_BATCH_SIZES)
        path.write_text(json.dumps(stored, indent=1) + "\n")
    rates = stored[key]["decode_tokens_per_s"]
    return int(max(rates, key=rates.get))


# ================================================================================================ export
def export_answers(args: CampaignArguments, work: Path, batch_size: int | None) -> str:
    """Append the work JSONL's new answers to the dataset (python -m oneiro_hf.training.distill_dataset)."""
    from .distill_dataset import _hardware
    from .distill_dataset import main as export_main

    # this machine's name, not the one the dataset's earlier parts were made on
    argv = ["--jsonl", str(work / "answers.jsonl"), "--out", args.dataset, "--target", args.target,
            "--hardware", _hardware(),
            "--max-new-tokens", str(args.max_new_tokens), "--dtype", args.dtype, "--sources", args.sources,
            "--max-prompt-tokens", str(args.max_prompt_tokens), "--log", str(work / "answers.log")]
    if batch_size:
        argv += ["--batch-size", str(batch_size)]
    if args.threads:
        argv += ["--threads", str(args.threads)]
    for path in args.exclude:
        argv += ["--exclude", path]
    if export_main(argv) != 0:
        raise CampaignError(f"exporting {work / 'answers.jsonl'} into {args.dataset} failed (see above).")
    return args.dataset


# ================================================================================================= train
def recipe_flags(path: str) -> list[str]:
    """oneiro-train flags from a JSON object of {flag: value} (lists and dicts as JSON)."""
    try:
        recipe = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise CampaignError(f"--recipe {path}: {err}. Fix: pass a JSON object of oneiro-train flags.") from None
    flags: list[str] = []
    for name, value in recipe.items():
        if name in ("target", "data", "output_dir"):
            raise CampaignError(f"--recipe {path} sets {name!r}, which the campaign sets. Fix: remove it.")
        text = json.dumps(value) if isinstance(value, dict | list) else str(value).lower() if isinstance(
            value, bool) else str(value)
        flags += [f"--{name}", text]
    return flags


def recipe_settings(path: str) -> dict[str, str]:
    """The recipe as {--flag: value text}, as oneiro-train receives it."""
    flags = recipe_flags(path)
    return dict(zip(flags[::2], flags[1::2]))


def train_milestone(args: CampaignArguments, work: Path, milestone: int, until: float) -> dict[str, Any] | None:
    """Train a drafter on the whole dataset with ``oneiro-train``, for --train_epochs or in a time box of
    --train_minutes (counted across sessions), stopping at ``until`` (Unix seconds) with a checkpoint if it is not
    done; return its learning-curve point, or None while it is paused (kept in ``paused_dir``, and the next call
    resumes it, on this machine or another)."""
    out = work / f"train-{milestone}"
    summary_path = out / "training_summary.json"
    previous = json.loads(summary_path.read_text()) if summary_path.is_file() else None
    done = previous is not None and previous.get("finished", True)
    if done and previous["train_response_tokens"] < milestone:
        # trained when the milestone counted held-out records too: kept aside, and the milestone trains afresh
        stale = out.with_name(f"{out.name}-{previous['train_response_tokens']}")
        logger.info("campaign: %s trained on %d answer tokens, under its milestone; moved to %s, training afresh",
                    out, previous["train_response_tokens"], stale)
        shutil.rmtree(stale, ignore_errors=True)
        out.rename(stale)
        done = False
    if not done:
        restore_paused(args, out, milestone)
        length = (["--max_steps", "-1", "--num_train_epochs", str(args.train_epochs), "--max_train_minutes", "inf"]
                  if args.train_epochs else ["--max_train_minutes", f"{args.train_minutes:.1f}"])
        argv = ["--target", args.target, "--data", args.dataset, "--output_dir", str(out), *recipe_flags(args.recipe),
                *length, "--train_until", f"{until:.0f}", "--resume_from_checkpoint", "auto"]
        if args.threads:
            argv += ["--threads", str(args.threads)]
        # a process of its own: oneiro-train's memory (target, features, optimiser) is returned when it ends
        code = subprocess.run([sys.executable, "-m", "oneiro_hf.training.cli", *argv], check=False).returncode
        if code != 0:
            raise CampaignError(f"training the {milestone}-token milestone failed ({_ended(code)}; see above). "
                                f"{_keep_after_failure(args, out, milestone)}Its log is in {out}.")
    summary = json.loads(summary_path.read_text())
    if not summary.get("finished", True):
        keep_paused(args, out, milestone, summary)
        return None
    final = summary["evals"][-1]
    return {"milestone": milestone, "train_response_tokens": summary["train_response_tokens"],
            "records": summary["records"], "sources": summary["sources"], "global_step": summary["global_step"],
            "epochs": summary.get("epochs"), "trained_minutes": summary.get("trained_minutes"),
            "eval_tau": final.get("eval_tau"), "eval_accept_1": final.get("eval_accept_1"),
            "eval_accept_2": final.get("eval_accept_2"), "eval_positions": final.get("eval_positions"),
            "feature_dtype": summary.get("feature_dtype", "float32"), "features": summary.get("features"),
            "timings": summary["timings"], "hardware": summary["hardware"], "date": summary["date"],
            "output_dir": str(out)}


# ================================================================================================ paused
PAUSED_INFO = "paused.json"


def paused_dir(args: CampaignArguments) -> Path | None:
    """Where a paused milestone training's last checkpoint is kept for the next machine (None: nowhere)."""
    return Path(args.checkpoint_out) / "paused" if args.checkpoint_out else None


def keep_paused(args: CampaignArguments, out: Path, milestone: int, summary: dict[str, Any]) -> None:
    """Copy the paused training's newest checkpoint to ``paused_dir`` (its random-number states excepted: they
    belong to this machine), replacing what is there."""
    from transformers.trainer_utils import get_last_checkpoint

    dest = paused_dir(args)
    last = get_last_checkpoint(str(out)) if dest is not None else None
    if last is None:
        return
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(last, dest, ignore=shutil.ignore_patterns("rng_state*"))
    _halve_optimizer_state(dest / "optimizer.pt")
    info = {"milestone": milestone, "checkpoint": Path(last).name, "global_step": summary.get("global_step"),
            "epochs": summary.get("epochs"), "trained_minutes": summary.get("trained_minutes"),
            "hardware": summary.get("hardware"), "date": summary.get("date")}
    (dest / PAUSED_INFO).write_text(json.dumps(info, indent=1) + "\n")
    logger.info("campaign: the paused training's %s is kept in %s", Path(last).name, dest)


def _ended(code: int) -> str:
    """How a training process ended, from its return code."""
    if code < 0:
        return f"killed by signal {-code}" + (", as the kernel kills for want of memory" if code == -9 else "")
    return f"exit status {code}"


def _keep_after_failure(args: CampaignArguments, out: Path, milestone: int) -> str:
    """A training that died (killed for memory, a crash) leaves its last checkpoint in ``out``: keep it as the paused
    one, as a pause at the deadline does, so no machine loses that work; returns a sentence saying so ("" when
    there is none to keep)."""
    from transformers.trainer_utils import get_last_checkpoint

    last = get_last_checkpoint(str(out)) if out.is_dir() and paused_dir(args) is not None else None
    if last is None:
        return ""
    state = json.loads((Path(last) / "trainer_state.json").read_text())
    info_path = Path(last) / "oneiro_training.json"
    seconds = json.loads(info_path.read_text()).get("trained_seconds") if info_path.is_file() else None
    keep_paused(args, out, milestone, {"global_step": state.get("global_step"), "epochs": state.get("epoch"),
                                       "trained_minutes": None if seconds is None else round(seconds / 60, 1),
                                       "date": datetime.date.today().isoformat()})
    return (f"Its last checkpoint, {Path(last).name}, is kept in {paused_dir(args)}; the same command resumes it "
            "from there. ")


def _halve_optimizer_state(path: Path) -> None:
    """Store the optimiser's moments in bfloat16 (46 of the 1.5B recipe's 67 MB become 23): a committed file stays
    small. torch's ``Optimizer.load_state_dict`` casts them back to the parameters' dtype on resume."""
    import torch

    if not path.is_file():
        return
    state = torch.load(path, map_location="cpu", weights_only=True)
    for slots in state.get("state", {}).values():
        for name, value in slots.items():
            if name != "step" and torch.is_tensor(value) and value.is_floating_point():
                slots[name] = value.to(torch.bfloat16)
    torch.save(state, path)


def restore_paused(args: CampaignArguments, out: Path, milestone: int) -> None:
    """On a machine without the milestone's checkpoints, put the kept paused checkpoint (if it is this
    milestone's) where ``oneiro-train --resume_from_checkpoint auto`` finds it."""
    src = paused_dir(args)
    if src is None or not (src / PAUSED_INFO).is_file() or list(out.glob("checkpoint-*")):
        return
    info = json.loads((src / PAUSED_INFO).read_text())
    if info.get("milestone") != milestone:
        logger.info("campaign: %s holds the %s-token milestone's paused training, not this one's; starting afresh",
                    src, info.get("milestone"))
        return
    shutil.copytree(src, out / info["checkpoint"], ignore=shutil.ignore_patterns(PAUSED_INFO))
    logger.info("campaign: resuming the %d-token milestone from %s (%s)", milestone, src, info["checkpoint"])


def add_point(path: Path, point: dict[str, Any]) -> None:
    points = [p for p in read_curve(path) if p["milestone"] != point["milestone"]] + [point]
    points.sort(key=lambda p: p["milestone"])
    path.write_text(json.dumps({"what": "held-out acceptance of a drafter trained on the first N answer tokens "
                                        "(oneiro-train campaign)", "points": points}, indent=1) + "\n")


def keep_checkpoint(point: dict[str, Any], dest: str) -> None:
    """Copy the milestone drafter's files (weights, config, card, summary) to ``dest``, replacing what is there."""
    src = Path(point["output_dir"])
    target = Path(dest)
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for path in src.iterdir():
        if path.is_file():
            shutil.copy(path, target / path.name)


COMMIT_SCRIPT = "scripts/campaign_commit.py"  # what the deprecated --commit runs, in a checkout of oneiro-hf


def milestone_command(args: CampaignArguments) -> list[str] | None:
    """The --on_milestone command as an argument list (None: none); the deprecated --commit names the repository's
    commit script, refused with the fix where it is not there."""
    if args.commit and args.on_milestone:
        raise CampaignError("--commit and --on_milestone both name what runs at a milestone. Fix: pass only "
                            f"--on_milestone 'python {COMMIT_SCRIPT}'.")
    if args.commit:
        if not Path(COMMIT_SCRIPT).is_file():
            raise CampaignError(f"--commit runs {COMMIT_SCRIPT} of a oneiro-hf checkout, and {Path.cwd()} has none. "
                                "Fix: run from the checkout, or pass --on_milestone with your own command.")
        return [sys.executable, COMMIT_SCRIPT]
    return shlex.split(args.on_milestone) if args.on_milestone else None


def on_milestone(args: CampaignArguments, paths: list[str], message: str) -> None:
    """Run the --on_milestone command on ``paths`` with ``message``; a failure stops the campaign with its reason."""
    command = milestone_command(args)
    if command is None:
        return
    done = subprocess.run([*command, message, *paths], check=False)
    if done.returncode:
        raise CampaignError(f"--on_milestone {' '.join(command)} failed (exit {done.returncode}) on {paths}. Fix: "
                            "run it by hand to see why; the campaign's files are written, so the same command resumes.")


# ================================================================================================== loop
def check_capture(args: CampaignArguments) -> None:
    """Captured features serve the milestone trainings only if the recipe trains on the same cache, in the dtype
    they were computed in, cut at the same length: refuse a mismatch before hours of answers."""
    if not args.feature_cache_dir or args.recipe is None:
        return
    recipe = recipe_settings(args.recipe)
    want = {"--feature_cache_dir": os.path.normpath(args.feature_cache_dir), "--feature_dtype": args.dtype,
            "--max_seq_len": str(args.max_seq_len)}
    have = {"--feature_cache_dir": os.path.normpath(recipe.get("--feature_cache_dir", "")),
            "--feature_dtype": recipe.get("--feature_dtype", "float32"), "--max_seq_len": recipe.get("--max_seq_len")}
    if have != want:
        raise CampaignError(f"--recipe {args.recipe} trains with {have}, the captured features are {want}. Fix: set "
                            "those in the recipe, or pass the recipe's --feature_cache_dir, --dtype and --max_seq_len.")


def run(args: CampaignArguments) -> int:
    """Rounds of answer -> export -> (train at a milestone) -> commit until the goal or the deadline."""
    deadline = parse_deadline(args.until)
    try:  # before any model loads (the probe answers no prompt)
        args = args if args.probe_only else dataclasses.replace(
            args, exclude=resolve_exclude(args.sources, args.exclude))
    except ValueError as err:
        raise CampaignError(str(err)) from None
    check_capture(args)
    milestone_command(args)  # a bad --on_milestone or --commit is refused before any answer
    if args.commit:  # said once per run, not at every milestone
        logger.warning("campaign: --commit is deprecated and goes in the next release. Fix: pass --on_milestone "
                       "'python %s'.", COMMIT_SCRIPT)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    package = logging.getLogger("oneiro_hf")
    log = logging.FileHandler(work / "answers.log")  # the generation log the dataset card's throughput is read from
    log.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    level = package.level
    package.addHandler(log)
    package.setLevel(logging.INFO)
    try:
        return _rounds(args, work, deadline)
    finally:
        package.removeHandler(log)
        package.setLevel(level)
        log.close()


def _rounds(args: CampaignArguments, work: Path, deadline: float) -> int:
    curve_path = Path(args.curve or Path(args.dataset) / "learning_curve.json")
    if args.probe_only:
        answer_prompts(args, work, 0, 0.0)
        return 0
    split = training_split(args)  # a milestone counts the tokens its drafter trains on
    while True:
        tokens = dataset_tokens(args.dataset, split)
        curve = read_curve(curve_path)
        milestone = next_milestone(tokens, args, curve)
        if any(p["milestone"] >= milestone for p in curve) and tokens >= milestone:
            logger.info("campaign: the goal of %d answer tokens is met and trained on", args.goal_tokens)
            return 0
        logger.info("campaign: %d answer tokens in %s's training split, next milestone %d, %.0f min left", tokens,
                    args.dataset, milestone, (deadline - time.time()) / 60)
        if tokens < milestone:
            stats = answer_prompts(args, work, milestone, deadline)
            export_answers(args, work, stats["batch_size"])
            tokens = dataset_tokens(args.dataset, split)
            on_milestone(args, [args.dataset], f"Campaign data: {tokens} training tokens of {Path(args.target).name}")
            if tokens < milestone:
                logger.info("campaign: stopped at %d answer tokens (deadline, or the prompt list ran out)", tokens)
                return 0
        if args.recipe is None:  # data only: exported at every milestone, on to the goal or the deadline
            logger.info("campaign: milestone %d reached (no --recipe: data only)", milestone)
            if tokens >= args.goal_tokens:
                return 0
            continue
        if deadline - time.time() < MIN_TRAIN_SESSION_S:
            logger.info("campaign: milestone %d reached; too little time left to train", milestone)
            return 0
        try:
            point = train_milestone(args, work, milestone, deadline - SAVE_MARGIN_S)
        except CampaignError:
            _commit_paused(args, milestone, "training stopped by a failure")
            raise
        if point is None:
            logger.info("campaign: the %d-token milestone's training is paused at the deadline; the same command "
                        "resumes it", milestone)
            _commit_paused(args, milestone, "training paused")
            return 0
        add_point(curve_path, point)
        paths = [str(curve_path)]
        if args.checkpoint_out:
            keep_checkpoint(point, args.checkpoint_out)
            paths.append(args.checkpoint_out)
        on_milestone(args, paths, f"Campaign milestone {milestone}: held-out tau {point['eval_tau']:.3f}")
        if milestone >= args.goal_tokens:
            return 0


def _commit_paused(args: CampaignArguments, milestone: int, why: str) -> None:
    """Hand the kept paused checkpoint of ``milestone`` (if one is kept) to the --on_milestone command."""
    kept = paused_dir(args)
    if milestone_command(args) is None or kept is None or not (kept / PAUSED_INFO).is_file():
        return
    info = json.loads((kept / PAUSED_INFO).read_text())
    if info.get("milestone") == milestone:
        on_milestone(args, [str(kept)], f"Campaign milestone {milestone}: {why} at step {info['global_step']}")


def main(argv: list[str] | None = None) -> int:
    """``oneiro-train campaign ...``: parse the CampaignArguments and run."""
    from transformers import HfArgumentParser

    parser = HfArgumentParser(CampaignArguments, prog="oneiro-train campaign", description=__doc__.split("\n\n")[0])
    (args,) = parser.parse_args_into_dataclasses(args=list(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return run(args)
    except CampaignError as err:
        print(f"oneiro-train campaign: {err}", file=sys.stderr)
        return 2
