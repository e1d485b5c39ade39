"""oneiro-bench: Spec-Bench-style wall-clock comparison of decoding methods on one target.

    oneiro-bench --target smollm2-135m-instruct --methods greedy,hf-lookup,oneiro-hybrid --per-category 3
    oneiro-bench profile --target smollm2-135m-instruct          # measure t(k) once, reused by later runs
    oneiro-bench breakdown --run DIR                              # where a finished run's time went
    oneiro-bench merge RUN_A RUN_B --into DIR                     # shards split by --categories, as one run

Methods run interleaved per question (the order rotates from one question to the next), after a
warm-up, so their ratios hold on a noisy machine. Every ratio is against plain greedy decoding measured
in the same run on the same questions. Answers are written per method in Spec-Bench's answer-record
format, one line per finished question, so an interrupted run keeps its work and `--resume` continues
it (a line cut by the interruption is dropped and that question re-run).

Methods
    greedy               plain greedy decoding (the reference; always run)
    hf-lookup            transformers' prompt lookup (prompt_lookup_num_tokens=10)
    hf-early-exit        transformers' self-speculation, drafting with the first N layers
                         (assistant_early_exit=N, --early-exit-layer)
    hf-assistant         transformers' assisted decoding with a small model (--assistant, same tokenizer)
    oneiro-lookup        OneiroDraft, n-gram lookup drafts only
    oneiro-latent        OneiroDraft, latent drafts only
    oneiro-hybrid        OneiroDraft, lookup when a match exists, else latent
    oneiro-latent-fixed-N
                         latent drafts of exactly N tokens at every step, cost model and confidence cut off:
                         measures a drafter's acceptance (tau) where oneiro-latent would stop drafting on
                         hardware with costly verification; lossless
    oneiro-topk-K        hybrid with relaxed verification: a draft token is accepted if it is among the
                         target's top K (oneiro_verification="topk", oneiro_verification_topk=K); lossy
    oneiro-threshold-T   hybrid with relaxed verification at threshold T (oneiro_verification="threshold",
                         oneiro_verification_threshold=T); lossy
    oneiro-...@NAME      any oneiro method with the drafter named NAME by --extra-drafter NAME=PATH, so
                         several drafters (before/after a training stage, ablations) compare in one run

Outputs under --out: answers/<method>.jsonl, summary.json, report.md, plots/*.png, run_config.json.
Exit status: 0 fine, 2 unusable arguments or inputs (checked before any model loads), 3 a lossless
method's output differed from greedy (listed under "lossless_violations"), 130 interrupted.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import math
import os
import re
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .bench_report import is_lossless, is_relaxed, make_plots, report_markdown, summarize

BASE_METHODS = (
    "greedy",
    "hf-lookup",
    "hf-early-exit",
    "hf-assistant",
    "oneiro-lookup",
    "oneiro-latent",
    "oneiro-hybrid",
)
DEFAULT_METHODS = ("greedy", "hf-lookup", "oneiro-lookup", "oneiro-latent", "oneiro-hybrid")
RELAXED_PATTERNS = ("oneiro-topk-<K>", "oneiro-threshold-<T>")
FIXED_LATENT_PATTERN = "oneiro-latent-fixed-<N>"
DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_QUESTIONS = "../shared/data/spec_bench/question.jsonl"
HF_LOOKUP_TOKENS = 10
WARMUP_TOKENS = 8

EXIT_OK, EXIT_BAD_INPUT, EXIT_LOSSLESS_VIOLATION, EXIT_INTERRUPTED = 0, 2, 3, 130


class BenchInputError(ValueError):
    """A benchmark argument or input file is unusable; raised before any model loads."""


# ------------------------------------------------------------------------------------------- methods
@dataclass(frozen=True)
class MethodSpec:
    """One decoding method: how to call generate for it."""

    name: str
    generate_kwargs: dict = field(default_factory=dict)  # besides assistant_model
    oneiro_settings: dict = field(default_factory=dict)  # passed as oneiro_<key>=value
    drafter_name: str | None = None  # an --extra-drafter; None: the --drafter one

    @property
    def uses_drafter(self) -> bool:
        return self.name.startswith("oneiro-")

    @property
    def uses_assistant(self) -> bool:
        return self.name == "hf-assistant"

    @property
    def lossless(self) -> bool:
        return is_lossless(self.name)

    @property
    def relaxed(self) -> bool:
        return is_relaxed(self.name)


def _method_help() -> str:
    return (f"Known methods: {', '.join(BASE_METHODS)}, {FIXED_LATENT_PATTERN}, and {', '.join(RELAXED_PATTERNS)}; any oneiro-* method "
            "may end in @NAME to use the drafter given by --extra-drafter NAME=PATH.")


DRAFTER_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def parse_method(name: str, early_exit_layer: int = 4) -> MethodSpec:
    """The MethodSpec for a --methods entry; BenchInputError for an unknown or malformed one."""
    if "@" in name:
        base, drafter_name = name.split("@", 1)
        if not base.startswith("oneiro-") or not DRAFTER_NAME.fullmatch(drafter_name):
            raise BenchInputError(f"method {name!r}: only oneiro-* methods take a drafter suffix, written "
                                  "oneiro-<mode>@NAME with NAME from --extra-drafter NAME=PATH.")
        spec = parse_method(base, early_exit_layer)
        return MethodSpec(name, spec.generate_kwargs, spec.oneiro_settings, drafter_name)
    if name == "greedy":
        return MethodSpec(name)
    if name == "hf-lookup":
        return MethodSpec(name, {"prompt_lookup_num_tokens": HF_LOOKUP_TOKENS})
    if name == "hf-early-exit":
        return MethodSpec(name, {"assistant_early_exit": int(early_exit_layer)})
    if name == "hf-assistant":
        return MethodSpec(name)
    if name in ("oneiro-lookup", "oneiro-latent", "oneiro-hybrid"):
        return MethodSpec(name, oneiro_settings={"mode": name.split("-", 1)[1]})
    match = re.fullmatch(r"oneiro-latent-fixed-(\S*)", name)
    if match:
        n = int(match.group(1)) if match.group(1).isdigit() else 0
        if n < 1:
            raise BenchInputError(f"method {name!r}: N must be an integer >= 1, e.g. oneiro-latent-fixed-4.")
        return MethodSpec(name, oneiro_settings={"mode": "latent", "max_draft_tokens": n, "cost_aware": False,
                                                 "min_draft_confidence": 0.0})
    match = re.fullmatch(r"oneiro-topk-(\S+)", name)
    if match:
        try:
            k = int(match.group(1))
        except ValueError:
            k = 0
        if k < 1:
            raise BenchInputError(f"method {name!r}: K must be an integer >= 1, e.g. oneiro-topk-2.")
        return MethodSpec(name, oneiro_settings={"mode": "hybrid", "verification": "topk", "verification_topk": k})
    match = re.fullmatch(r"oneiro-threshold-(\S+)", name)
    if match:
        try:
            t = float(match.group(1))
        except ValueError:
            t = float("nan")
        if not math.isfinite(t) or t <= 0:
            raise BenchInputError(f"method {name!r}: T must be a positive number, e.g. oneiro-threshold-0.1.")
        return MethodSpec(
            name, oneiro_settings={"mode": "hybrid", "verification": "threshold", "verification_threshold": t}
        )
    raise BenchInputError(f"unknown method {name!r}. {_method_help()}")


def parse_methods(text: str, early_exit_layer: int = 4) -> list[MethodSpec]:
    """Comma-separated methods, de-duplicated, greedy first (every ratio is against it)."""
    names = []
    for m in (m.strip() for m in text.split(",")):
        if m and m not in names:
            names.append(m)
    if not names:
        raise BenchInputError(f"--methods is empty. {_method_help()}")
    specs = [parse_method(m, early_exit_layer) for m in names]
    if specs[0].name != "greedy":
        specs = [MethodSpec("greedy")] + [s for s in specs if s.name != "greedy"]
    return specs


# ------------------------------------------------------------------------------------------- questions
def load_questions(
    path: str | Path, per_category: int | None = None, categories: list[str] | None = None
) -> list[dict]:
    """Read Spec-Bench question JSONL (question_id, category, turns[, reference]).

    per_category: keep the first N of each category (None or 0: all); categories: keep only these.
    """
    path = Path(path)
    if not path.is_file():
        raise BenchInputError(f"questions file {path} does not exist. Fix: pass --questions FILE.jsonl.")
    rows: list[tuple[int, dict]] = []
    seen_ids: dict[Any, int] = {}
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise BenchInputError(f"{path}:{lineno} is not valid JSON ({err.msg}).") from err
        if not isinstance(row, dict) or not {"question_id", "category", "turns"} <= set(row):
            raise BenchInputError(f"{path}:{lineno} needs question_id, category and turns.")
        turns = row["turns"]
        if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
            raise BenchInputError(f"{path}:{lineno}: turns must be a non-empty list of non-empty strings.")
        if not isinstance(row["category"], str) or not row["category"]:
            raise BenchInputError(f"{path}:{lineno}: category must be a non-empty string.")
        qid = row["question_id"]
        if not isinstance(qid, (int, str)) or isinstance(qid, bool):
            raise BenchInputError(f"{path}:{lineno}: question_id must be an integer or a string.")
        if qid in seen_ids:
            raise BenchInputError(f"{path}:{lineno}: question_id {qid!r} repeats line {seen_ids[qid]}.")
        seen_ids[qid] = lineno
        rows.append((lineno, row))
    if not rows:
        raise BenchInputError(f"{path} holds no questions.")
    if categories:
        known = sorted({r["category"] for _, r in rows})
        unknown = [c for c in categories if c not in known]
        if unknown:
            raise BenchInputError(f"unknown categor{'y' if len(unknown) == 1 else 'ies'} {unknown} in "
                                  f"--categories; {path} has: {', '.join(known)}.")
        rows = [(n, r) for n, r in rows if r["category"] in categories]
    picked, count = [], defaultdict(int)
    for _, row in rows:
        if per_category and count[row["category"]] >= per_category:
            continue
        count[row["category"]] += 1
        picked.append(row)
    return picked


# ------------------------------------------------------------------------------------------- models
@dataclass(frozen=True)
class ModelRef:
    """A --target/--assistant argument resolved without loading: a reference name or a local directory."""

    arg: str
    reference: str | None  # reference model name, or None for a directory
    path: Path | None  # the directory (reference models: their cache dir, which may not exist yet)

    @property
    def loader_arg(self) -> str:
        return self.reference if self.reference else str(self.path)

    @property
    def label(self) -> str:
        if self.reference:
            return self.reference
        digest = hashlib.sha1(str(self.path.resolve()).encode()).hexdigest()[:8]
        return f"{self.path.resolve().name}-{digest}"

    def config(self) -> dict | None:
        """The model's (text) config.json as a dict, if it is on disk; None if not fetched yet."""
        file = self.path / "config.json" if self.path else None
        if file is None or not file.is_file():
            return None
        try:
            cfg = json.loads(file.read_text())
        except (json.JSONDecodeError, OSError) as err:
            raise BenchInputError(f"{file} is not readable JSON ({err}).") from err
        if isinstance(cfg, dict) and isinstance(cfg.get("text_config"), dict):
            cfg = {**cfg["text_config"], "model_type": cfg["text_config"].get("model_type", cfg.get("model_type"))}
        return cfg if isinstance(cfg, dict) else None


def resolve_model(arg: str, flag: str) -> ModelRef:
    """A reference model name, or an existing local model directory; anything else is an error."""
    from .reference_models import REFERENCE_MODELS, reference_model_dir

    text = arg.strip()
    path = Path(text).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise BenchInputError(f"{flag} {arg}: {path} has no config.json, so it is not a saved model directory.")
        return ModelRef(arg, None, path)
    name = text.lower()
    if name in REFERENCE_MODELS:
        return ModelRef(arg, name, reference_model_dir(name))
    raise BenchInputError(
        f"{flag} {arg!r} is neither a reference model name ({', '.join(REFERENCE_MODELS)}) nor an existing "
        "local model directory. Model repo ids cannot be downloaded by the benchmark: download the model "
        "first and pass its local directory."
    )


def check_drafter(
    drafter_arg: str | None, target: ModelRef, target_cfg: dict | None, flag: str = "--drafter"
) -> tuple[str, str]:
    """Resolve --drafter and check it against the target's config before any weights load.

    Returns (value for the loader, human description).
    """
    from .configuration_oneiro import OneiroDrafterConfig
    from .loading import default_drafter_dir
    from .modeling_oneiro import SUPPORTED_MODEL_TYPES

    if target_cfg is not None and target_cfg.get("model_type") not in SUPPORTED_MODEL_TYPES:
        raise BenchInputError(
            f"the oneiro-* methods need a target of a supported architecture ({', '.join(SUPPORTED_MODEL_TYPES)}); "
            f"{target.arg} is '{target_cfg.get('model_type')}'. Fix: drop the oneiro-* methods or pick another target."
        )
    if drafter_arg == "fresh":
        return "fresh", "fresh (untrained, built from the target)"
    if drafter_arg is None:
        shipped = default_drafter_dir(target.reference) if target.reference else None
        if shipped is None:
            return "fresh", "fresh (untrained: no shipped drafter for this target)"
        path, how = shipped, "shipped"
    else:
        path, how = Path(drafter_arg).expanduser(), "given"
        if not path.is_dir():
            raise BenchInputError(
                f"{flag} {drafter_arg}: no such directory. Pass a drafter directory (written by "
                "save_pretrained), 'fresh' for an untrained one, or leave it out for the shipped one."
            )
    cfg_file = path / "config.json"
    try:
        cfg = json.loads(cfg_file.read_text())
    except FileNotFoundError as err:
        raise BenchInputError(f"{flag} {path}: no config.json, not a drafter checkpoint.") from err
    except (json.JSONDecodeError, OSError) as err:
        raise BenchInputError(f"{flag} {path}: config.json is not readable JSON ({err}).") from err
    if not isinstance(cfg, dict) or cfg.get("model_type") != OneiroDrafterConfig.model_type:
        kind = cfg.get("model_type") if isinstance(cfg, dict) else None
        raise BenchInputError(f"{flag} {path} holds a '{kind}' model, not a OneiroDrafter checkpoint.")
    if target_cfg is not None:
        drafter_type = (cfg.get("target_config") or {}).get("model_type")
        problems = [
            f"{name}: drafter expects {want}, target has {have}"
            for name, want, have in (
                ("model_type", drafter_type, target_cfg.get("model_type")),
                ("vocab_size", cfg.get("vocab_size"), target_cfg.get("vocab_size")),
                ("hidden_size", cfg.get("hidden_size"), target_cfg.get("hidden_size")),
                ("num_hidden_layers", cfg.get("num_target_layers"), target_cfg.get("num_hidden_layers")),
            )
            if want != have
        ]
        if problems:
            raise BenchInputError(
                f"{flag} {path} was made for another target than {target.arg}:\n  - " + "\n  - ".join(problems)
                + "\nFix: pass the drafter trained for this target, or --drafter fresh."
            )
    return str(path), f"{how}: {path}"


def default_profile_path(target: ModelRef, device: str, dtype: str) -> Path:
    """Where `oneiro-bench profile` saves, and a run looks for, the target's t(k) profile."""
    from .reference_models import default_cache_dir

    return default_cache_dir() / "latency" / f"{target.label}-{device.split(':')[0]}-{dtype}.json"


# ------------------------------------------------------------------------------------------- plan
@dataclass
class Plan:
    """Everything a run needs, resolved and checked before any model loads."""

    questions: list[dict]
    specs: list[MethodSpec]
    target: ModelRef
    target_cfg: dict | None
    drafter: str | None = None
    drafter_desc: str | None = None
    extra_drafters: dict[str, tuple[str, str]] = field(default_factory=dict)  # NAME -> (loader value, description)
    assistant: ModelRef | None = None
    profile_path: Path | None = None
    profile: dict | None = None
    notes: list[str] = field(default_factory=list)


def _check_common(args) -> None:
    if args.dtype not in DTYPES:
        raise BenchInputError(f"--dtype {args.dtype}: choose one of {', '.join(DTYPES)}.")
    if args.threads is not None and args.threads < 1:
        raise BenchInputError("--threads must be >= 1.")
    if not re.fullmatch(r"cpu|cuda(:\d+)?|mps", args.device):
        raise BenchInputError(f"--device {args.device}: use cpu, cuda, cuda:N or mps.")


def plan_run(args) -> Plan:
    """Validate every argument and input file; BenchInputError on the first problem. Loads no model."""
    _check_common(args)
    if args.max_new_tokens < 1:
        raise BenchInputError("--max-new-tokens must be >= 1.")
    if args.per_category is not None and args.per_category < 0:
        raise BenchInputError("--per-category must be >= 0 (0: every question).")
    if args.early_exit_layer < 1:
        raise BenchInputError("--early-exit-layer must be >= 1.")
    specs = parse_methods(args.methods, args.early_exit_layer)
    import importlib.util

    needed = ["rouge_score"] + ([] if args.no_plots else ["matplotlib"])
    missing = [m for m in needed if importlib.util.find_spec(m) is None]
    if missing:
        hint = "" if args.no_plots else "; --no-plots drops the need for matplotlib"
        raise BenchInputError(f"the benchmark needs {', '.join(missing)} for scoring/plots. Fix: pip install "
                              f"{' '.join(missing)} (both come with oneiro-hf[dev]){hint}.")
    categories = [c.strip() for c in args.categories.split(",") if c.strip()] if args.categories else None
    questions = load_questions(args.questions, args.per_category, categories)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise BenchInputError(f"--out {out} exists and is not a directory.")
    target = resolve_model(args.target, "--target")
    target_cfg = target.config()
    plan = Plan(questions, specs, target, target_cfg)
    names = [s.name for s in specs]
    if "hf-early-exit" in names and target_cfg is not None:
        layers = target_cfg.get("num_hidden_layers")
        if isinstance(layers, int) and args.early_exit_layer >= layers:
            raise BenchInputError(
                f"--early-exit-layer {args.early_exit_layer} must be below the target's {layers} layers."
            )
    if any(s.uses_drafter and s.drafter_name is None for s in specs):
        plan.drafter, plan.drafter_desc = check_drafter(args.drafter, target, target_cfg)
    for item in args.extra_drafter or []:
        name, sep, path = item.partition("=")
        if not sep or not DRAFTER_NAME.fullmatch(name) or not path:
            raise BenchInputError(f"--extra-drafter {item!r}: write NAME=PATH (NAME of letters, digits, '_.-').")
        if name in plan.extra_drafters:
            raise BenchInputError(f"--extra-drafter {name} is given twice.")
        plan.extra_drafters[name] = check_drafter(path, target, target_cfg, flag=f"--extra-drafter {name}")
    wanted = {s.drafter_name for s in specs if s.drafter_name}
    unknown = sorted(wanted - set(plan.extra_drafters))
    if unknown:
        raise BenchInputError(f"methods name drafter(s) {unknown} that no --extra-drafter NAME=PATH defines.")
    unused = sorted(set(plan.extra_drafters) - wanted)
    if unused:
        plan.notes.append(f"--extra-drafter {', '.join(unused)} is not used by any method (write oneiro-<mode>@NAME).")
    if "hf-assistant" in names:
        if not args.assistant:
            raise BenchInputError("method hf-assistant needs --assistant MODEL (a small model with the target's "
                                  "tokenizer: a reference name or a local directory).")
        plan.assistant = resolve_model(args.assistant, "--assistant")
        a_cfg = plan.assistant.config()
        if a_cfg is not None and target_cfg is not None and a_cfg.get("vocab_size") != target_cfg.get("vocab_size"):
            raise BenchInputError(
                f"--assistant {args.assistant} has vocab_size {a_cfg.get('vocab_size')}, the target "
                f"{target_cfg.get('vocab_size')}: hf-assistant needs the same tokenizer."
            )
    elif args.assistant:
        plan.notes.append("--assistant is ignored: hf-assistant is not among --methods.")
    if args.latency_profile and args.no_profile:
        raise BenchInputError("--latency-profile and --no-profile contradict each other; pass one.")
    if (plan.drafter is not None or plan.extra_drafters) and not args.no_profile:
        from .latency import load_profile

        path = Path(args.latency_profile) if args.latency_profile else default_profile_path(
            target, args.device, args.dtype)
        if args.latency_profile and not path.is_file():
            raise BenchInputError(f"--latency-profile {path} does not exist. Fix: run `oneiro-bench profile`.")
        if path.is_file():
            try:
                plan.profile = load_profile(path)
            except (ValueError, OSError, KeyError, TypeError) as err:  # json errors are ValueErrors
                raise BenchInputError(f"latency profile {path} is unusable ({err}). Fix: re-run "
                                      "`oneiro-bench profile` or pass --no-profile.") from err
            plan.profile_path = path
    return plan


# ------------------------------------------------------------------------------------------- steps
class StepRecorder:
    """Logs, per target verification pass of assisted decoding, the draft length and accepted drafts.

    It wraps each candidate generator the target builds (any kind: prompt lookup, early exit,
    assistant model, OneiroDraft), reading only what transformers' loop passes between them, and the
    time spent inside the generator (drafting and its bookkeeping).
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.draft_lengths: list[int] = []
        self.accepted: list[int] = []
        self.draft_s = 0.0

    def install(self, model) -> None:
        original = model._get_candidate_generator  # the drafter's instance hook, or the class method

        def get_candidate_generator(*args, **kwargs):
            generator = original(*args, **kwargs)
            self._wrap(generator)
            return generator

        model._get_candidate_generator = get_candidate_generator

    def _wrap(self, generator) -> None:
        get_candidates, update = generator.get_candidates, generator.update_candidate_strategy
        pending = {"length": 0}

        def timed_get_candidates(input_ids, *args, **kwargs):
            start = time.perf_counter()
            out = get_candidates(input_ids, *args, **kwargs)
            self.draft_s += time.perf_counter() - start
            pending["length"] = int(out[0].shape[-1] - input_ids.shape[-1])
            return out

        def timed_update(input_ids, scores, num_matches, *args, **kwargs):
            start = time.perf_counter()
            result = update(input_ids, scores, num_matches, *args, **kwargs)
            self.draft_s += time.perf_counter() - start
            self.draft_lengths.append(pending["length"])
            self.accepted.append(int(num_matches))
            return result

        generator.get_candidates = timed_get_candidates
        generator.update_candidate_strategy = timed_update


@dataclass
class BenchContext:
    model: Any
    tokenizer: Any
    drafter: Any
    assistant: Any
    specs: dict[str, MethodSpec]
    recorder: StepRecorder
    policy_states: dict[str, Any] = field(default_factory=dict)
    drafters: dict[str, Any] = field(default_factory=dict)  # --extra-drafter NAME -> drafter

    def drafter_for(self, spec: MethodSpec):
        return self.drafters[spec.drafter_name] if spec.drafter_name else self.drafter


_ONEIRO_STAT_KEYS = ("latent_steps", "lookup_steps", "empty_steps", "draft_time_s", "verify_time_s",
                     "drafted_by_source", "accepted_by_source")


def generate_once(ctx: BenchContext, method: str, input_ids, max_new_tokens: int) -> dict:
    """One timed generate call with `method`: new token ids, seconds, and the per-step draft log."""
    import torch

    spec = ctx.specs[method]
    model = ctx.model
    kwargs: dict[str, Any] = {"max_new_tokens": max_new_tokens, "do_sample": False,
                              "attention_mask": torch.ones_like(input_ids)}
    if model.generation_config.pad_token_id is None:
        pad = ctx.tokenizer.pad_token_id if ctx.tokenizer.pad_token_id is not None else ctx.tokenizer.eos_token_id
        if pad is not None:
            kwargs["pad_token_id"] = pad
    kwargs.update(spec.generate_kwargs)
    if spec.uses_assistant:
        kwargs["assistant_model"] = ctx.assistant
    drafter = ctx.drafter_for(spec) if spec.uses_drafter else None
    if drafter is not None:
        kwargs["assistant_model"] = drafter
        kwargs.update({f"oneiro_{k}": v for k, v in spec.oneiro_settings.items()})
        # each oneiro method keeps its own learned policy (calibration, t(k)), as if it ran alone
        object.__setattr__(drafter, "_policy_state", ctx.policy_states.get(method))
    ctx.recorder.reset()
    cuda = input_ids.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = model.generate(input_ids, **kwargs)
    if cuda:
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    result = {
        "tokens": out[0, input_ids.shape[1]:].tolist(),
        "wall_time": elapsed,
        "draft_lengths": list(ctx.recorder.draft_lengths),
        "accepted": list(ctx.recorder.accepted),
        "draft_time_s": ctx.recorder.draft_s,
        "oneiro_stats": None,
    }
    if drafter is not None:
        ctx.policy_states[method] = drafter._policy_state
        stats = drafter.last_stats.as_dict()
        result["oneiro_stats"] = {k: stats[k] for k in _ONEIRO_STAT_KEYS if k in stats}
    return result


def encode_prompt(tokenizer, messages: list[dict]):
    if tokenizer.chat_template:
        enc = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True)
        return enc["input_ids"]
    return tokenizer("\n\n".join(m["content"] for m in messages), return_tensors="pt").input_ids


def _add_stats(total: dict | None, stats: dict | None) -> dict | None:
    if stats is None:
        return total
    if total is None:
        return copy.deepcopy(stats)
    for k, v in stats.items():
        if isinstance(v, dict):
            for kk, vv in v.items():
                total[k][kk] = total[k].get(kk, 0) + vv
        else:
            total[k] = total.get(k, 0) + v
    return total


def run_question(ctx: BenchContext, method: str, question: dict, max_new_tokens: int) -> dict:
    """All turns of one question with one method; later turns see this method's own earlier answers."""
    messages: list[dict] = []
    choice: dict[str, list] = {k: [] for k in ("turns", "new_tokens", "wall_time", "decoding_steps",
                                               "accept_lengths", "draft_lengths", "output_ids")}
    draft_s, oneiro_stats = 0.0, None
    for turn in question["turns"]:
        messages.append({"role": "user", "content": turn})
        input_ids = encode_prompt(ctx.tokenizer, messages).to(ctx.model.device)
        res = generate_once(ctx, method, input_ids, max_new_tokens)
        text = ctx.tokenizer.decode(res["tokens"], skip_special_tokens=True)
        messages.append({"role": "assistant", "content": text})
        choice["turns"].append(text)
        choice["new_tokens"].append(len(res["tokens"]))
        choice["wall_time"].append(res["wall_time"])
        choice["output_ids"].append(res["tokens"])
        steps = len(res["accepted"])
        choice["decoding_steps"].append(steps if steps else len(res["tokens"]))
        choice["accept_lengths"].extend(a + 1 for a in res["accepted"])
        choice["draft_lengths"].extend(res["draft_lengths"])
        draft_s += res["draft_time_s"]
        oneiro_stats = _add_stats(oneiro_stats, res["oneiro_stats"])
    record = {
        "question_id": question["question_id"],
        "category": question["category"],
        "answer_id": f"{question['question_id']}-{method}",
        "model_id": method,
        "choices": [{"index": 0, **choice}],
        "tstamp": time.time(),
        "draft_time_s": draft_s,
    }
    if oneiro_stats is not None:
        record["oneiro_stats"] = oneiro_stats
    return record


# ------------------------------------------------------------------------------------------- answers
def read_answers(path: Path) -> tuple[list[dict], int]:
    """Complete answer records of one method's file (last one per question) and how many lines were dropped."""
    if not path.exists():
        return [], 0
    by_id: dict[Any, dict] = {}
    dropped = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            choice = rec["choices"][0]
            ok = isinstance(rec.get("question_id"), (int, str)) and len(choice["turns"]) == len(choice["new_tokens"])
        except (json.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError):
            ok = False
        if not ok:
            dropped += 1  # a line cut by an interruption: that question is re-run
            continue
        by_id[rec["question_id"]] = rec
    return list(by_id.values()), dropped


def _write_answers(path: Path, records: list[dict]) -> None:
    """Rewrite a method's file with only complete records (so new lines never join a cut one)."""
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    os.replace(tmp, path)


_RESUME_KEYS = ("target", "dtype", "device", "max_new_tokens", "threads")
_RESUME_METHOD_KEYS = {"drafter": "oneiro-", "early_exit_layer": "hf-early-exit", "assistant": "hf-assistant"}


def resume_conflicts(stored: dict, current: dict, methods_with_answers: list[str]) -> list[str]:
    """Settings that differ from the run being resumed, where they matter for answers already written."""
    keys = list(_RESUME_KEYS)
    for key, prefix in _RESUME_METHOD_KEYS.items():
        if any(m.startswith(prefix) and "@" not in m for m in methods_with_answers):
            keys.append(key)
    conflicts = [f"{k}: was {stored.get(k)!r}, now {current.get(k)!r}" for k in keys if stored.get(k) != current.get(k)]
    for m in methods_with_answers:
        if "@" in m:
            name = m.split("@", 1)[1]
            was, now = (stored.get("extra_drafters") or {}).get(name), (current.get("extra_drafters") or {}).get(name)
            if was != now:
                conflicts.append(f"drafter {name} of {m}: was {was!r}, now {now!r}")
    return conflicts


# ------------------------------------------------------------------------------------------- CLI
def _run_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="oneiro-bench", formatter_class=argparse.RawDescriptionHelpFormatter, description=__doc__,
        epilog="Subcommands: `oneiro-bench profile` measures the target's verification latency t(k); `oneiro-bench "
               "breakdown` splits a finished run's time; `oneiro-bench merge` joins runs sharded by --categories.",
    )
    p.add_argument("--target", default="smollm2-135m-instruct",
                   help="reference model name or local model directory (default: %(default)s)")
    p.add_argument("--drafter", default=None,
                   help="drafter directory, 'fresh' (untrained), or leave out for the shipped one (else fresh)")
    p.add_argument("--extra-drafter", action="append", default=None, metavar="NAME=PATH",
                   help="another drafter (directory or 'fresh') for methods written oneiro-<mode>@NAME; repeatable")
    p.add_argument("--assistant", default=None, help="small model for hf-assistant (reference name or directory)")
    p.add_argument("--questions", default=DEFAULT_QUESTIONS, help="Spec-Bench question.jsonl")
    p.add_argument("--methods", default=",".join(DEFAULT_METHODS), help="comma-separated; greedy is always added")
    p.add_argument("--categories", default=None, help="comma-separated categories to keep (default: all)")
    p.add_argument("--per-category", type=int, default=3, help="first N questions per category (0: all)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="per turn")
    p.add_argument("--early-exit-layer", type=int, default=4, help="draft layers of hf-early-exit")
    p.add_argument("--dtype", default="float32", help=f"one of {', '.join(DTYPES)}")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--latency-profile", default=None,
                   help="t(k) JSON from `oneiro-bench profile` (default: the cached one for target/device/dtype)")
    p.add_argument("--no-profile", action="store_true", help="do not seed the drafters with a latency profile")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--out", default="runs/bench", help="output directory (default: %(default)s)")
    p.add_argument("--resume", action="store_true", help="keep finished answers in --out and run the rest")
    return p


def _profile_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="oneiro-bench profile",
        description="Measure the target's verification latency t(k), k=1..max-k, and save it as JSON; later "
                    "runs on the same target, device and dtype load it automatically.",
    )
    p.add_argument("--target", default="smollm2-135m-instruct", help="reference model name or local directory")
    p.add_argument("--out", default=None, help="JSON file (default: <cache>/latency/<target>-<device>-<dtype>.json)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--max-k", type=int, default=16)
    p.add_argument("--context-len", type=int, default=200)
    p.add_argument("--repeats", type=int, default=7)
    return p


def _fail(err: Exception) -> int:
    print(f"oneiro-bench: error: {err}", file=sys.stderr)
    return EXIT_BAD_INPUT


def profile_main(argv: list[str]) -> int:
    args = _profile_parser().parse_args(argv)
    try:
        _check_common(args)
        if args.max_k < 1 or args.context_len < 1 or args.repeats < 1:
            raise BenchInputError("--max-k, --context-len and --repeats must be >= 1.")
        target = resolve_model(args.target, "--target")
    except BenchInputError as err:
        return _fail(err)
    out = Path(args.out) if args.out else default_profile_path(target, args.device, args.dtype)
    import torch

    from . import loading
    from .latency import profile_verification_latency, save_profile

    if args.threads:
        torch.set_num_threads(args.threads)
    model, _, _ = loading.load_target_and_drafter(target.loader_arg, None, args.dtype, needs_drafter=False,
                                                  device=args.device)
    profile = profile_verification_latency(model, tuple(range(1, args.max_k + 1)), args.context_len, args.repeats)
    profile.update(target=target.label, threads=torch.get_num_threads())
    save_profile(profile, out)
    print(f"t(1) = {profile['t1_s'] * 1000:.2f} ms; t(k)/t(1): "
          + ", ".join(f"{k}:{v:.2f}" for k, v in profile["ratios"].items()))
    print(f"saved {out}")
    return EXIT_OK


def _breakdown_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="oneiro-bench breakdown",
        description="Split a finished run's wall time into verification, drafting and the rest, and bound each "
                    "method's speedup (see oneiro_hf/bench_breakdown.py). Writes RUN/breakdown.{md,json}.",
    )
    p.add_argument("--run", required=True, help="the --out directory of a finished oneiro-bench run")
    p.add_argument("--latency-profile", default=None, help="t(k) JSON (default: the one the run used)")
    p.add_argument("--target-speedup", type=float, action="append", default=None,
                   help="print the tau each method would need for this speedup (repeatable; default 1.8)")
    return p


def breakdown_main(argv: list[str]) -> int:
    args = _breakdown_parser().parse_args(argv)
    from .bench_breakdown import breakdown_markdown, time_breakdown
    from .latency import load_profile

    try:
        profile = load_profile(args.latency_profile) if args.latency_profile else None
        result = time_breakdown(args.run, profile)
    except (FileNotFoundError, ValueError) as err:
        return _fail(err)
    text = breakdown_markdown(result, tuple(args.target_speedup or (1.8,)))
    run = Path(args.run)
    (run / "breakdown.md").write_text(text)
    (run / "breakdown.json").write_text(json.dumps(result, indent=2))
    print(text + f"\nsaved {run / 'breakdown.md'} and breakdown.json")
    return EXIT_OK


def _merge_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="oneiro-bench merge",
        description="Merge runs that split one benchmark by --categories (same methods and settings, disjoint "
                    "questions) into one answers/summary/report, as if one run had made them.",
    )
    p.add_argument("runs", nargs="+", help="the --out directories of the shards")
    p.add_argument("--into", required=True, help="directory for the merged run")
    p.add_argument("--questions", default=None, help="questions file (default: the one the first run read)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    return p


def merge_main(argv: list[str]) -> int:
    args = _merge_parser().parse_args(argv)
    from .bench_merge import MergeError, merge_runs

    try:
        summary = merge_runs(args.runs, args.into, plots=not args.no_plots, questions=args.questions)
    except (MergeError, BenchInputError) as err:
        return _fail(err)
    print(f"oneiro-bench: merged {len(args.runs)} runs ({summary['config']['n_questions']} questions) into "
          f"{args.into}", file=sys.stderr)
    if summary.get("lossless_violations"):
        print(f"oneiro-bench: LOSSLESS VIOLATION: {', '.join(summary['lossless_violations'])}", file=sys.stderr)
        return EXIT_LOSSLESS_VIOLATION
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    subcommands = {"profile": profile_main, "breakdown": breakdown_main, "merge": merge_main}
    if argv and argv[0] in subcommands:
        return subcommands[argv[0]](argv[1:])
    if argv and argv[0] == "run":
        argv = argv[1:]
    args = _run_parser().parse_args(argv)
    try:
        plan = plan_run(args)  # every check that needs no model; nothing has loaded yet
    except BenchInputError as err:
        return _fail(err)
    for note in plan.notes:
        print(f"oneiro-bench: note: {note}", file=sys.stderr)

    out = Path(args.out)
    answers_dir = out / "answers"
    answers_dir.mkdir(parents=True, exist_ok=True)
    run_config = {"target": plan.target.loader_arg, "dtype": args.dtype, "device": args.device,
                  "max_new_tokens": args.max_new_tokens, "threads": args.threads, "drafter": plan.drafter,
                  "early_exit_layer": args.early_exit_layer,
                  "extra_drafters": {name: value for name, (value, _) in plan.extra_drafters.items()},
                  "assistant": plan.assistant.loader_arg if plan.assistant else None}
    names = [s.name for s in plan.specs]
    if args.resume:
        stored_file = out / "run_config.json"
        stored = json.loads(stored_file.read_text()) if stored_file.is_file() else None
        with_answers = [m for m in names if (answers_dir / f"{m}.jsonl").exists()]
        conflicts = resume_conflicts(stored, run_config, with_answers) if stored and with_answers else []
        if conflicts:
            return _fail(BenchInputError(
                f"--resume into {out} with other settings than its answers were made with: " + "; ".join(conflicts)
                + ". Fix: use the same settings, or a new --out."))
    else:
        for old in list(answers_dir.glob("*.jsonl")) + list((out / "plots").glob("*.png")):
            old.unlink()
    (out / "run_config.json").write_text(json.dumps(run_config, indent=2))

    selected = {q["question_id"]: q for q in plan.questions}
    records: dict[str, list[dict]] = {}
    done: dict[str, set] = {}
    for m in names:
        file = answers_dir / f"{m}.jsonl"
        recs, dropped = read_answers(file)
        if dropped:
            print(f"oneiro-bench: {file}: dropped {dropped} incomplete line(s); those questions re-run",
                  file=sys.stderr)
        if file.exists():
            _write_answers(file, recs)
        records[m] = recs
        done[m] = {r["question_id"] for r in recs}
    todo = [q for q in plan.questions if any(q["question_id"] not in done[m] for m in names)]

    import torch
    from tqdm import tqdm

    from . import loading

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    needs_drafter = any(s.uses_drafter and s.drafter_name is None for s in plan.specs)
    assistant = None
    if todo:
        model, tokenizer, drafter = loading.load_target_and_drafter(
            plan.target.loader_arg, plan.drafter, args.dtype, needs_drafter=needs_drafter, device=args.device)
        drafters = {None: drafter} if drafter is not None else {}
        for name, (value, _) in plan.extra_drafters.items():
            drafters[name] = loading.load_drafter(model, value)
        if plan.assistant is not None:
            assistant, a_tok, _ = loading.load_target_and_drafter(
                plan.assistant.loader_arg, None, args.dtype, needs_drafter=False, device=args.device)
            if a_tok.get_vocab() != tokenizer.get_vocab():
                return _fail(BenchInputError(f"--assistant {args.assistant} has another tokenizer than the target; "
                                             "hf-assistant needs the same one."))
        for drafter in drafters.values():
            for spec in plan.specs:
                if spec.relaxed:
                    try:
                        drafter.drafting_settings(**spec.oneiro_settings)
                    except (TypeError, ValueError) as err:
                        return _fail(BenchInputError(
                            f"method {spec.name} needs relaxed verification (oneiro_verification="
                            f"{spec.oneiro_settings['verification']!r}), which this oneiro-hf cannot run: {err}. "
                            f"Fix: drop {spec.name} from --methods, or update oneiro-hf."))
            if plan.profile is not None:
                drafter.use_latency_profile(plan.profile)
        measured = plan.profile.get("threads") if plan.profile is not None else None
        if args.device == "cpu" and measured and measured != torch.get_num_threads():
            print(f"oneiro-bench: note: the latency profile {plan.profile_path} was measured with {measured} "
                  f"threads, this run uses {torch.get_num_threads()}; re-run `oneiro-bench profile "
                  f"--threads {torch.get_num_threads()}` for a matching one.", file=sys.stderr)
        recorder = StepRecorder()
        recorder.install(model)
        ctx = BenchContext(model, tokenizer, drafters.get(None), assistant, {s.name: s for s in plan.specs}, recorder,
                           drafters={k: v for k, v in drafters.items() if k is not None})
        initial = {name: d._policy_state for name, d in drafters.items()}
        ctx.policy_states = {s.name: copy.deepcopy(initial[s.drafter_name]) for s in plan.specs if s.uses_drafter}
        warm = encode_prompt(tokenizer, [{"role": "user", "content": "Warm up the caches."}]).to(model.device)
        for m in names:
            generate_once(ctx, m, warm, WARMUP_TOKENS)

    interrupted = False
    try:
        with tqdm(total=len(todo), desc="questions", unit="q", dynamic_ncols=True) as bar:
            for i, q in enumerate(todo):
                order = names[i % len(names):] + names[: i % len(names)]
                for m in order:
                    if q["question_id"] in done[m]:
                        continue
                    bar.set_postfix_str(f"{q['category']} {q['question_id']} {m}")
                    rec = run_question(ctx, m, q, args.max_new_tokens)
                    records[m].append(rec)
                    with open(answers_dir / f"{m}.jsonl", "a", encoding="utf-8") as fh:
                        fh.write(json.dumps(rec) + "\n")
                bar.update(1)
    except KeyboardInterrupt:
        interrupted = True
        print("\noneiro-bench: interrupted; finished answers are kept, re-run with --resume to continue.",
              file=sys.stderr)

    summary = summarize(records, selected)
    import transformers

    summary["partial"] = interrupted
    summary["config"] = {
        **vars(args),
        "methods": names,
        "n_questions": len(plan.questions),
        "drafter_resolved": plan.drafter_desc,
        "extra_drafters_resolved": {name: desc for name, (_, desc) in plan.extra_drafters.items()},
        "latency_profile_used": str(plan.profile_path) if plan.profile_path else None,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    plots = {}
    if not args.no_plots:
        plots = make_plots(summary, records, out)
    report = report_markdown(summary, plots)
    (out / "report.md").write_text(report)
    print(report)
    print(f"oneiro-bench: wrote {out / 'summary.json'} and {out / 'report.md'}", file=sys.stderr)
    if summary.get("lossless_violations"):
        print(f"oneiro-bench: LOSSLESS VIOLATION: {', '.join(summary['lossless_violations'])} differ from greedy "
              f"(questions: {summary['lossless_violation_questions']})", file=sys.stderr)
        return EXIT_LOSSLESS_VIOLATION
    return EXIT_INTERRUPTED if interrupted else EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
