"""A drafter's model card: rendered from a template, checked against the drafter it describes.

    from oneiro_hf.storage.cards import build_model_card, write_model_card
    card = build_model_card(drafter, base_model="org/target", license="apache-2.0",
                            bench_summary="runs/bench/summary.json", training_info="out/training_summary.json")

`build_model_card` is the one drafter card builder, used by Hub publishing (oneiro_hf.storage.hub) and by every
oneiro-train stage next to the drafter it saves. The card is rendered from
oneiro_hf/model_cards/drafter_card.md with `ModelCard.from_template`, and building it checks that the card
describes the target the drafter fits (base model, architecture, sizes, layer count), so a card never
advertises a drafter for a model it cannot be bound to. The card is rendered from plain data: which benchmark
columns are lossy is each method's `relaxed` flag in the benchmark summary (written by the report's own
classification), so the card and report.md never disagree, and this module imports nothing of the benchmark.

The drafter is typed as a `PreTrainedModel`: this module reads its config, weights and bound target, and never
imports the modeling code (oneiro_hf.modeling_oneiro imports the Hub code, not the other way round).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from ..configuration_oneiro import FORMAT_VERSION
from ..targets import DrafterTargetMismatch, TargetDifference, model_identity, target_differences
from .checkpoint import WEIGHTS_NAME
from .target_relative import RelativeStorage, stored_size

if TYPE_CHECKING:
    from huggingface_hub import ModelCard
    from transformers import PreTrainedModel

# package data: model_cards/ at the repository's top level, mapped into the package (oneiro_hf/model_cards links
# to it), so wheels carry the template as oneiro_hf/model_cards/drafter_card.md
DEFAULT_TEMPLATE = Path(__file__).resolve().parent.parent / "model_cards" / "drafter_card.md"
CARD_NAME = "README.md"
TRAINING_INFO_NAME = "training_summary.json"
BASE_TAGS = ("oneiro-hf", "speculative-decoding", "drafter", "oneiro-draft")
LOSSY_TAG = "lossy-verification"
EXAMPLE_REPO_ID = "your-org/your-drafter"

# training_summary.json keys (written by oneiro-train) shown in the card, with their labels
_PROVENANCE = (
    ("data_files", "data files"),
    ("sources", "prompt sources (records)"),
    ("records", "records"),
    ("train_records", "training records"),
    ("eval_records", "held-out records (by id hash)"),
    ("train_response_tokens", "response tokens used for training"),
    ("date", "trained on"),
    ("oneiro_hf_version", "oneiro-hf version"),
    ("oneiro_version", "oneiro-hf version"),  # what oneiro-train wrote before 0.2 (the package version)
)
_SETTINGS = (
    ("interval", "interval"),
    ("input_layers", "multi-layer input: target states"),
    ("verified_context", "verified context of the copied layers"),
    ("draft_vocab_size", "draft vocabulary size"),
    ("vocab_coverage", "draft vocabulary coverage of held-out response tokens"),
    ("stage", "stage"),
    ("rollout_steps", "rollout steps"),
    ("rollout_step_weights", "rollout step weights"),
    ("state_loss", "state loss"),
    ("state_loss_weight", "state loss weight"),
    ("token_loss", "token loss"),
    ("token_loss_weight", "token loss weight"),
    ("ridge", "ridge initialisation of the fusion"),
    ("global_step", "optimiser steps"),
    ("epochs", "passes over the training records"),
    ("trained_minutes", "training minutes (resumes included)"),
    ("ended_by", "training ended by"),
    ("finished", "schedule finished (false: paused, resumable)"),
    ("features", "target features"),
    ("batch_size", "batch size (sequences)"),
    ("learning_rate", "learning rate"),
    ("max_seq_len", "max sequence length"),
    ("save_dtype", "saved dtype"),
    ("hardware", "hardware"),
    ("timings", "wall-clock"),
)
_NOT_SHOWN = {"base_model", "output_dir", "evals", "eval_steps", "round_logs"}


class ModelCardError(ValueError):
    """The model card cannot be written truthfully from what was passed (missing or contradicting facts)."""


# ============================================================================================== inputs
def load_json_input(value: dict | str | os.PathLike | None, what: str) -> dict | None:
    """`value` as given when a dict (or None), else the JSON object in the file it names."""
    if value is None or isinstance(value, dict):
        return value
    path = Path(value)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as err:
        raise ModelCardError(f"{what} file {path} does not exist. Fix: pass the path of the file or a dict.") from err
    except json.JSONDecodeError as err:
        raise ModelCardError(f"{what} file {path} is not valid JSON ({err}). Fix: pass an intact file.") from err
    if not isinstance(data, dict):
        raise ModelCardError(f"{what} file {path} must hold a JSON object.")
    return data


def recorded_training_info(drafter: PreTrainedModel) -> dict | None:
    """training_summary.json next to a drafter loaded from a local oneiro-train output directory."""
    source = Path(str(drafter.name_or_path or ""))
    candidate = source / TRAINING_INFO_NAME
    return load_json_input(candidate, "training info") if str(source) and candidate.is_file() else None




def is_repo_id(name: str | None) -> bool:
    """An 'org/name' Hub id (what the card's base_model must be), not a local path or a bare name."""
    if not name or name.count("/") != 1 or Path(name).exists():
        return False
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(name)
    except ValueError:
        return False
    return True


def _card_base_model(drafter: PreTrainedModel, base_model: str | None, allow_mismatch: bool, for_hub: bool) -> str:
    """The base model for the card: given or recorded, a Hub id (or, not for the Hub, the name the drafter
    records), and consistent with the drafter."""
    recorded = drafter.config.base_model_name_or_path
    bound = drafter.target
    if not for_hub and not is_repo_id(base_model or recorded):
        if bound is not None:
            differences = target_differences(drafter.config, bound, allow_base_model_mismatch=allow_mismatch)
            if differences:
                raise DrafterTargetMismatch(differences, drafter_name=drafter.name_or_path or None, target=bound)
        return str(base_model or recorded)
    if base_model is None:
        if is_repo_id(recorded):
            base_model = recorded
        elif bound is not None and is_repo_id(getattr(bound, "name_or_path", None)):
            base_model = bound.name_or_path
        else:
            raise ModelCardError(
                f"the drafter records its base model as {recorded!r}, which is not a Hub repo id, so the card cannot "
                "name the target. Fix: pass base_model='org/name', the Hub id of the model the drafter was made from."
            )
    if not is_repo_id(base_model):
        raise ModelCardError(
            f"base_model {base_model!r} is not a Hub repo id of the form 'org/name'. Fix: pass the Hub id of the "
            "target model the drafter was made from."
        )
    differences: list[TargetDifference] = []
    if bound is not None:
        differences += target_differences(drafter.config, bound, allow_base_model_mismatch=allow_mismatch)
        bound_name = getattr(bound, "name_or_path", None)
        if not allow_mismatch and is_repo_id(bound_name) and model_identity(bound_name) != model_identity(base_model):
            differences.append(TargetDifference("base_model", base_model, bound_name))
    if not allow_mismatch and is_repo_id(recorded) and model_identity(recorded) != model_identity(base_model):
        differences.append(TargetDifference("base_model", recorded, base_model))
    if differences:
        raise DrafterTargetMismatch(differences, drafter_name=drafter.name_or_path or None, target=bound or _Named(base_model))
    return base_model


class _Named:
    """Stands in for a target known only by name in mismatch messages."""

    def __init__(self, name: str) -> None:
        self.name_or_path = name


# ========================================================================================= card parts
def _fmt_num(value: Any) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            return "—"
        return f"{value:.4g}" if abs(value) < 1 else f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_fmt_num(v)}" for k, v in sorted(value.items(), key=lambda kv: str(kv[0])))
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt_num(v) for v in value)
    return str(value)


def _training_section(info: dict | None) -> dict | None:
    if not info:
        return None
    provenance = [(label, _fmt_num(info[key])) for key, label in _PROVENANCE if info.get(key) is not None]
    settings = [(label, _fmt_num(info[key])) for key, label in _SETTINGS if info.get(key) is not None]
    known = {key for key, _ in _PROVENANCE + _SETTINGS} | _NOT_SHOWN
    settings += [
        (key, _fmt_num(value))
        for key, value in sorted(info.items())
        if key not in known and isinstance(value, (str, int, float, bool)) and value is not None
    ]
    evals = []
    for entry in info.get("evals") or []:
        if isinstance(entry, (list, tuple)) and len(entry) == 2:  # (label, metrics) as oneiro-train holds them
            label, metrics = entry
        elif isinstance(entry, dict):  # as training_summary.json stores them
            label, metrics = entry.get("label", "?"), entry
        else:
            continue
        if metrics.get("eval_tau") is not None:
            evals.append((str(label), metrics))
    steps = 1
    while any(f"eval_agree_step{steps}" in m for _, m in evals):
        steps += 1
    agree = [f"agree@{k}" for k in range(1, steps)]
    rows = [(label, [_fmt3(m.get("eval_tau")), *(_fmt3(m.get(f"eval_agree_step{k}")) for k in range(1, steps))])
            for label, m in evals]
    return {"provenance": provenance, "settings": settings, "eval_columns": agree, "evals": rows,
            "rounds": _rounds_table(info.get("round_logs"), info.get("draft_tokens"))}


def _fmt3(value: Any) -> str:
    return "—" if value is None or not math.isfinite(float(value)) else f"{float(value):.3f}"


def _rounds_table(round_logs: list[dict] | None, draft_tokens: int | None) -> dict | None:
    """Stage 3's collection per on-policy round (the drafter before that round's training), as a table."""
    if not round_logs:
        return None
    k = int(draft_tokens or 0)
    columns = ["tau", *(f"acc@{j}" for j in range(1, k + 1)), "rejected rounds", "train loss"]
    rows = []
    for r, m in enumerate(round_logs):
        cells = [_fmt3(m.get("collect_tau")), *(_fmt3(m.get(f"collect_accept_pos{j}")) for j in range(1, k + 1))]
        share, loss = m.get("collect_rejected_share"), m.get("round_train_loss")
        cells += ["—" if share is None else f"{share:.2f}", "—" if loss is None else f"{loss:.4f}"]
        rows.append((str(r), cells))
    return {"columns": columns, "rows": rows}


def _same_name(a: str, b: str) -> bool:
    """Loose model-name match for metadata that may use a local or reference name ('smollm2-135m-instruct')."""
    return str(a).replace("\\", "/").rstrip("/").split("/")[-1].lower() == str(b).rstrip("/").split("/")[-1].lower()


def _check_training_info(info: dict | None, drafter: PreTrainedModel, base: str, allow_mismatch: bool) -> None:
    """Training metadata must describe this drafter: same interval, draft vocabulary size and base model."""
    if not info:
        return
    config = drafter.config
    problems = []
    if info.get("interval") is not None and list(info["interval"]) != list(config.interval):
        problems.append(f"interval: training info says {list(info['interval'])}, drafter has {list(config.interval)}")
    vocab = int(drafter.draft_vocab_ids.numel())
    if info.get("draft_vocab_size") is not None and int(info["draft_vocab_size"]) != vocab:
        problems.append(f"draft_vocab_size: training info says {info['draft_vocab_size']}, drafter has {vocab}")
    if info.get("base_model") and not allow_mismatch and not _same_name(info["base_model"], base):
        problems.append(f"base model: training info says {info['base_model']!r}, card is for {base!r}")
    if problems:
        raise ModelCardError(
            "training_info describes another drafter:\n  - " + "\n  - ".join(problems)
            + "\nFix: pass the training_summary.json written with this drafter (or none)."
        )


def _method_is_lossy(name: str, entry: dict) -> bool:
    """Relaxed verification, as the benchmark summary records it for the method (its `relaxed` flag)."""
    if "relaxed" not in entry:
        raise ModelCardError(
            f"the benchmark summary's method {name!r} has no 'relaxed' flag, so the card cannot tell whether its "
            "verification is lossless. Fix: pass a summary.json written by oneiro-bench (every method carries the flag)."
        )
    return bool(entry["relaxed"])


def _bench_section(summary: dict | None, base_model: str, hardware: str | None, allow_mismatch: bool) -> dict | None:
    if summary is None:
        return None
    methods = summary.get("methods")
    if not isinstance(methods, dict) or not methods:
        raise ModelCardError(
            "bench_summary has no 'methods' block. Fix: pass the summary.json written by oneiro-bench."
        )
    config = summary.get("config") or {}
    measured_on = config.get("target")
    if measured_on and not allow_mismatch and not _same_name(measured_on, base_model):
        raise ModelCardError(
            f"bench_summary was measured on target {measured_on!r}, but the card is for {base_model!r}. Fix: "
            "pass the summary of a run on this target (or allow_base_model_mismatch=True if it is the same "
            "model under another name)."
        )
    shown = [m for m in methods if m != "greedy"]
    if not shown:
        raise ModelCardError("bench_summary only measured greedy. Fix: benchmark at least one oneiro-* method.")
    lossy_methods = [name for name in shown if _method_is_lossy(name, methods[name])]
    columns = [{"name": name, "label": f"{name} *(lossy)*" if name in lossy_methods else name,
                "lossy": name in lossy_methods} for name in shown]
    categories = sorted({c for m in shown for c in (methods[m].get("categories") or {})})
    rows = []
    for category in [*categories, "overall"]:
        cells = []
        for name in shown:
            entry = methods[name]
            block = entry.get("overall") if category == "overall" else (entry.get("categories") or {}).get(category)
            cells.append(_bench_cell(block))
        rows.append({"category": f"**{category}**" if category == "overall" else category, "cells": cells})
    machine = (("device", "device {}"), ("threads", "{} CPU threads"), ("torch", "torch {}"),
               ("transformers", "transformers {}"))
    parts = ([hardware] if hardware else []) + [text.format(config[key]) for key, text in machine if config.get(key)]
    run = (("dtype", "dtype {}"), ("max_new_tokens", "max_new_tokens {}"), ("n_questions", "questions {}"),
           ("per_category", "per category {}"))
    settings = [text.format(config[key]) for key, text in run if config.get(key) is not None]
    notes = []
    if summary.get("partial"):
        notes.append("Partial run: the benchmark was interrupted before every question was answered.")
    violations = summary.get("lossless_violations") or []
    if violations:
        notes.append(
            f"Lossless violation: {', '.join(violations)} produced output that differs from plain greedy decoding "
            "in this run; treat those columns as lossy."
        )
        for column in columns:
            if column["name"] in violations and not column["lossy"]:
                column["label"] = f"{column['name']} *(differs from greedy)*"
    same_kernel = any("speedup_vs_same_kernel_greedy" in (methods[m].get("overall") or {}) for m in shown)
    return {
        "speculation": _speculation_rows(methods, shown),
        "methods": columns,
        "rows": rows,
        "cell_meaning": ("speedup over greedy on the same kernels (`oneiro-greedy` for the oneiro methods, which run "
                         "the target inside `oneiro_hf.cpu_kernels`; stock greedy for stock ones), then the speedup "
                         "over stock greedy and tau (mean tokens per target pass)." if same_kernel else
                         "speedup over stock greedy (tau = mean tokens per target pass); this run had no same-kernel "
                         "baseline, so on a CPU the figure includes the faster kernels the oneiro methods run on."),
        "profile": _profile_text(summary.get("profile")),
        "hardware": ", ".join(parts) if parts else "not recorded",
        "settings": ", ".join(settings) if settings else "not recorded",
        "notes": notes,
        "lossy_methods": lossy_methods,
    }


def _speculation_rows(methods: dict, shown: list[str], positions: int = 5) -> list[dict]:
    """Per speculative method: the drafter's share of wall time and acceptance by draft position (overall; "—" at a position no draft reached)."""
    rows = []
    for name in shown:
        overall = methods[name].get("overall") or {}
        by_position = overall.get("acceptance_by_position")
        if not by_position:
            continue
        share = overall.get("draft_time_share")
        rows.append({
            "name": name,
            "share": "—" if share is None else f"{share:.1%}",
            "positions": ", ".join("—" if p is None else f"{p:.0%}" for p in by_position[:positions]),
        })
    return rows


def _bench_cell(block: dict | None) -> str:
    """Same-kernel speedup first where the run measured it, then the speedup over stock greedy and tau."""
    if not block:
        return ""
    stock, tau = block.get("speedup_vs_greedy"), block.get("mean_accepted_tokens")
    stock_text = "—" if stock is None else f"{stock:.2f}×"
    if "speedup_vs_same_kernel_greedy" in block:
        same = block["speedup_vs_same_kernel_greedy"]
        text = ("—" if same is None else f"{same:.2f}×") + f" (stock {stock_text}"
        return text + (f"; tau {tau:.2f})" if tau is not None else ")")
    return stock_text if tau is None else f"{stock_text} (tau {tau:.2f})"


def _profile_text(profile: dict | None) -> str:
    """The t(k) the benchmark ran with, as every speed figure must name it: t(1) and t(2..8)/t(1)."""
    if not isinstance(profile, dict) or "ratios" not in profile:
        return "not recorded"
    ratios = {int(k): float(v) for k, v in profile["ratios"].items()}
    shown = ", ".join(f"{ratios[k]:.2f}" for k in sorted(ratios) if 2 <= k <= 8)
    return f"t(1) = {float(profile['t1_s']) * 1000:.1f} ms, t(2..8)/t(1) = {shown} ({profile.get('kernels', 'kernels not recorded')})"


def _weights_facts(drafter: PreTrainedModel, dtype: torch.dtype | None) -> tuple[int, str, float]:
    """Parameter count, the dtype the weights are written in, and their size in MiB."""
    count = sum(p.numel() for p in drafter.parameters())
    size = 0
    out_dtype = None
    for tensor in drafter.state_dict().values():
        if tensor.is_floating_point():
            written = dtype or tensor.dtype
            out_dtype = out_dtype or written
            size += tensor.numel() * torch.empty((), dtype=written).element_size()
        else:
            size += tensor.numel() * tensor.element_size()
    return count, str(out_dtype or dtype).replace("torch.", ""), size / 2**20


# ================================================================================================ card
def _weights_row(fingerprint: dict | None) -> str:
    """The card's line on which base weights the drafter binds to (oneiro_hf.storage.identity)."""
    if not fingerprint:
        return "not recorded (saved by oneiro-hf 0.1.0: only architecture and sizes are checked)"
    row = (
        f"a fingerprint of {len(fingerprint['tensors'])} base tensors; other weights (a fine-tune, a modified "
        "copy) are refused unless `allow_base_model_mismatch=True`"
    )
    if fingerprint.get("quantization"):
        kinds = "/".join(sorted(set(fingerprint["quantization"].values())))
        row += (
            f"; the base is a {kinds}-quantized copy, so the original (unquantized) weights are accepted too "
            "(they fall in the quantization cells of the recorded values)"
        )
    source = fingerprint.get("source")
    return f"{row}; trained on {source}" if source else row


def build_model_card(
    drafter: PreTrainedModel,
    *,
    repo_id: str | None = None,
    base_model: str | None = None,
    license: str | None = None,
    bench_summary: dict | str | os.PathLike | None = None,
    training_info: dict | str | os.PathLike | None = None,
    hardware: str | None = None,
    tags: list[str] | None = None,
    datasets: list[str] | None = None,
    dtype: torch.dtype | str | None = None,
    template_path: str | os.PathLike | None = None,
    allow_base_model_mismatch: bool = False,
    for_hub: bool = True,
    storage: RelativeStorage | None = None,
) -> ModelCard:
    """The drafter's model card, rendered from the template after checking the card fits the drafter.

    The one card builder: Hub publishing, and oneiro-train (every stage) next to the drafter it saves.
    bench_summary: an oneiro-bench summary.json (path or dict); training_info: oneiro-train's
    training_summary.json (path or dict; default: the one next to a drafter loaded from its output dir);
    hardware: what the benchmark ran on, e.g. "1x H200" (the summary only records the device type);
    storage: the card of a target-relative checkpoint (oneiro_hf.storage.target_relative) states its storage and size;
    repo_id: where users load the drafter from (a Hub id, or oneiro-train's output directory).
    for_hub=False (a card for a local training output): an unknown license is left out of the card and a
    base model that is not a Hub id is named as the drafter records it, instead of refusing the card.
    """
    from huggingface_hub import ModelCard, ModelCardData

    if not license and for_hub:
        raise ModelCardError(
            "license is required: the drafter's layers are copies of the target's weights, so they carry the "
            "target's license. Fix: pass license=... with the base model's license id (e.g. 'apache-2.0')."
        )
    template = Path(template_path) if template_path is not None else DEFAULT_TEMPLATE
    if not template.is_file():
        raise ModelCardError(
            f"model card template {template} does not exist. Fix: pass template_path=... (the template ships in "
            "oneiro_hf/model_cards/ of the oneiro-hf package; reinstall it if that file is missing)."
        )
    config = drafter.config
    base = _card_base_model(drafter, base_model, allow_base_model_mismatch, for_hub)
    summary = load_json_input(bench_summary, "bench summary")
    info = load_json_input(training_info, "training info") if training_info is not None else recorded_training_info(drafter)
    _check_training_info(info, drafter, base, allow_base_model_mismatch)
    torch_dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    lossy_default = config.verification != "strict"
    card_tags = list(BASE_TAGS) + ([LOSSY_TAG] if lossy_default else [])
    bench = _bench_section(summary, base, hardware, allow_base_model_mismatch)
    if bench and bench["lossy_methods"] and LOSSY_TAG not in card_tags:
        card_tags.append(LOSSY_TAG)
    card_tags += [t for t in tags or [] if t not in card_tags]
    data = ModelCardData(
        library_name="oneiro-hf",
        base_model=base,
        license=license or None,
        pipeline_tag="text-generation",
        tags=card_tags,
        datasets=datasets,
    )
    start, end = config.interval
    count, weights_dtype, size_mb = _weights_facts(drafter, torch_dtype)
    whole_mb = size_mb
    if storage is not None:
        size_mb = stored_size(drafter, storage, torch_dtype) / 2**20
    vocab = int(drafter.draft_vocab_ids.numel())
    fits = [
        ("base model", f"`{base}`"),
        ("architecture", config.target_architecture or "not recorded"),
        ("model_type", (config.target_config or {}).get("model_type")),
        ("hidden_size", config.hidden_size),
        ("vocab_size", config.vocab_size),
        ("num_hidden_layers", config.num_target_layers),
        ("copied layers (interval)", f"[{start}, {end})"),
        *([("input states (input_layers)", str(config.input_layers))] if config.input_layers else []),
        *([("verified context", "exact (keys/values from the target's inputs to the copied layers)")]
          if getattr(config, "verified_context", "own") == "exact" else []),
        ("draft vocabulary", f"{vocab:,} token ids (`draft_vocab_ids` in {WEIGHTS_NAME})"),
        ("base weights", _weights_row(config.base_model_fingerprint)),
        *([("weights storage", f"relative to the target: each copied matrix as a rank-{storage.layer_rank} "
            "difference from the target's" + (f", the fusion's token block as identity + rank {storage.token_rank}"
                                               if storage.token_rank else "")
            + f" ({size_mb:.1f} MiB instead of {whole_mb:.1f} MiB; rebuilt from the target when loaded)")]
          if storage is not None else []),
    ]
    drafting = [
        ("tree", f"{config.tree} ({'a token tree per target pass' if config.tree else 'chains'}; `oneiro_tree` per call)"),
        ("draft_mode", config.draft_mode),
        ("max_draft_tokens", config.max_draft_tokens),
        ("min_draft_confidence", config.min_draft_confidence),
        ("cost_aware", config.cost_aware),
        ("verification", f"{config.verification} ({'lossy' if lossy_default else 'lossless'})"),
    ]
    stage_3 = bool(info) and str(info.get("stage")) == "3"
    from ..version import __version__

    return ModelCard.from_template(
        data,
        template_path=str(template),
        title=f"OneiroDraft drafter for {base}" + (" (stage 3: on-policy refinement)" if stage_3 else ""),
        base_model=base,
        repo_id=repo_id or EXAMPLE_REPO_ID,
        interval_text=f"{start}..{end - 1}",
        interval_start=start,
        draft_vocab_size=f"{vocab:,}",
        weights_text=(f"{count / 1e6:.2f}M parameters, {weights_dtype}, {size_mb:.1f} MiB" if storage is None else
                      f"{count / 1e6:.2f}M parameters once rebuilt, {whole_mb:.1f} MiB in {weights_dtype}; stored as "
                      f"{size_mb:.1f} MiB of low-rank differences from the target's weights"),
        lossy_default=lossy_default,
        verification=config.verification,
        fits=fits,
        drafting=drafting,
        training=_training_section(info),
        bench=bench,
        oneiro_hf_version=__version__,
        format_version=FORMAT_VERSION if storage is not None else drafter.config.written_format(),
    )


def write_model_card(drafter: PreTrainedModel, path: str | os.PathLike, **card_kwargs: Any) -> Path:
    """Write the card to `path` (a directory gets README.md); keyword arguments as for build_model_card."""
    target = Path(path)
    if target.is_dir():
        target = target / CARD_NAME
    build_model_card(drafter, **card_kwargs).save(target)
    return target
