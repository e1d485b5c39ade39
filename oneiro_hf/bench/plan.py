"""A benchmark run's plan: every argument and input file resolved and checked before any model loads."""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..extras import install_hint, missing_modules
from .answers import BenchInputError, load_questions, questions_file
from .methods import DRAFTER_NAME, MethodSpec, parse_methods
from .profile import default_profile_path
from .report import KERNELS_SUFFIX

DTYPES = ("float32", "bfloat16", "float16")


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
    from ..storage.reference_models import REFERENCE_MODELS, reference_model_dir

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
    from ..configuration_oneiro import OneiroDrafterConfig
    from ..loading import default_drafter_dir
    from ..targets import SUPPORTED_MODEL_TYPES

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



@dataclass
class Plan:
    """Everything a run needs, resolved and checked before any model loads."""

    questions: list[dict]
    specs: list[MethodSpec]
    target: ModelRef
    target_cfg: dict | None
    questions_file: Path | None = None  # absolute
    drafter: str | None = None
    drafter_desc: str | None = None
    extra_drafters: dict[str, tuple[str, str]] = field(default_factory=dict)  # NAME -> (loader value, description)
    assistant: ModelRef | None = None
    profile_path: Path | None = None
    profile: dict | None = None
    notes: list[str] = field(default_factory=list)
    batch_sizes: tuple[int, ...] = ()  # --batch-size: a throughput run at these sizes; () for a per-question run


def check_common(args) -> None:
    if args.dtype not in DTYPES:
        raise BenchInputError(f"--dtype {args.dtype}: choose one of {', '.join(DTYPES)}.")
    if args.threads is not None and args.threads < 1:
        raise BenchInputError("--threads must be >= 1.")
    if not re.fullmatch(r"cpu|cuda(:\d+)?|mps", args.device):
        raise BenchInputError(f"--device {args.device}: use cpu, cuda, cuda:N or mps.")


def parse_batch_sizes(values: str | list[str] | None, flag: str) -> tuple[int, ...]:
    """Batch sizes from a flag given as "1,2,4" and/or repeated: sorted, de-duplicated, each >= 1; () for none."""
    if not values:
        return ()
    text = ",".join([values] if isinstance(values, str) else values)
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts or not all(part.isdigit() and int(part) >= 1 for part in parts):
        raise BenchInputError(f"{flag} {text!r}: batch sizes are integers >= 1. Fix: e.g. {flag} 1,2,4,8,16.")
    return tuple(sorted({int(part) for part in parts}))


def check_drafter_call_ratio(ratio: float | None) -> None:
    """--drafter-call-ratio (run and breakdown): None, or a drafter call's cost in t(1), finite and >= 0."""
    if ratio is not None and not (ratio >= 0 and math.isfinite(ratio)):
        raise BenchInputError(f"--drafter-call-ratio {ratio}: a call's cost in t(1) is a number >= 0. Fix: e.g. 0.05.")


def plan_run(args) -> Plan:
    """Validate every argument and input file; BenchInputError on the first problem. Loads no model."""
    check_common(args)
    if args.max_new_tokens < 1:
        raise BenchInputError("--max-new-tokens must be >= 1.")
    if args.per_category is not None and args.per_category < 0:
        raise BenchInputError("--per-category must be >= 0 (0: every question).")
    if args.early_exit_layer < 1:
        raise BenchInputError("--early-exit-layer must be >= 1.")
    specs = parse_methods(args.methods, args.early_exit_layer)
    batch_sizes = parse_batch_sizes(getattr(args, "batch_size", None), "--batch-size")
    if batch_sizes and args.resume:
        raise BenchInputError("--resume continues a per-question run; a throughput run (--batch-size) runs whole. "
                              "Fix: drop --resume, or --batch-size.")

    missing = missing_modules("rouge_score", *([] if args.no_plots else ["matplotlib"]))
    if missing:
        hint = "" if args.no_plots else "; --no-plots drops the need for matplotlib"
        raise BenchInputError(f"the benchmark needs {', '.join(missing)} for scoring/plots. Fix: "
                              f"{install_hint(missing)}{hint}.")
    categories = [c.strip() for c in args.categories.split(",") if c.strip()] if args.categories else None
    qfile = questions_file(args.questions)
    questions = load_questions(qfile, args.per_category, categories)
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise BenchInputError(f"--out {out} exists and is not a directory.")
    target = resolve_model(args.target, "--target")
    target_cfg = target.config()
    plan = Plan(questions, specs, target, target_cfg, questions_file=qfile, batch_sizes=batch_sizes)
    names = [s.name.removesuffix(KERNELS_SUFFIX) for s in specs]  # hf-... and hf-...-kernels alike
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
            raise BenchInputError("methods hf-assistant and hf-assistant-kernels need --assistant MODEL (a small model with the target's "
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
    if getattr(args, "pin_profile", None) not in (None, "h200"):
        raise BenchInputError(f"--pin-profile {args.pin_profile!r}: only `h200` is known. Fix: --pin-profile h200.")
    ratio = getattr(args, "drafter_call_ratio", None)
    if ratio is not None and getattr(args, "pin_profile", None) is None:
        raise BenchInputError("--drafter-call-ratio sets the pinned profile's drafter call cost. Fix: add "
                              "--pin-profile h200.")
    check_drafter_call_ratio(ratio)
    if args.latency_profile and args.no_profile:
        raise BenchInputError("--latency-profile and --no-profile contradict each other; pass one.")
    if not args.no_profile:  # drafters seed their cost model with it; the report names it with every figure
        from ..drafting.latency import load_profile

        path = Path(args.latency_profile) if args.latency_profile else default_profile_path(
            target.label, args.device, args.dtype)
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

