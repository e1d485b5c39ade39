"""docs/api.md must keep up with the code: every public name, per-call kwarg, config field, stats field, CLI
flag and documented signature is checked against the package itself, so the reference cannot silently rot. The
settings table is rendered from the settings' declarations and must appear verbatim in api.md and README.md."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from tiny import make_model
from transformers import TrainingArguments

import oneiro_hf
from oneiro_hf import DraftStats, OneiroDrafter, OneiroDrafterConfig
from oneiro_hf.drafting.latency import load_profile, profile_verification_latency, save_profile
from oneiro_hf.kernels import prepacked_linear
from oneiro_hf.loading import default_drafter_dir, load_target_and_drafter
from oneiro_hf.serving import vllm_export
from oneiro_hf.settings import settings_table
from oneiro_hf.storage import target_relative
from oneiro_hf.training.cli import DataArguments, ModelArguments
from oneiro_hf.training.trainer import OneiroTrainingArguments

API = Path(__file__).resolve().parent.parent / "docs" / "api.md"
README = Path(__file__).resolve().parent.parent / "README.md"

# name as written in the docs -> the callable whose signature it shows
SIGNATURES: dict[str, Any] = {
    "OneiroDrafter.from_target": OneiroDrafter.from_target,
    "OneiroDrafter.from_pretrained": OneiroDrafter.from_pretrained,
    "drafter.bind": OneiroDrafter.bind,
    "drafter.check_target": OneiroDrafter.check_target,
    "drafter.drafting_settings": OneiroDrafter.drafting_settings,
    "drafter.use_latency_profile": OneiroDrafter.use_latency_profile,
    "drafter.reset_drafting_policy": OneiroDrafter.reset_drafting_policy,
    "drafter.refresh_readout": OneiroDrafter.refresh_readout,
    "check_transformers_version": oneiro_hf.check_transformers_version,
    "profile_verification_latency": profile_verification_latency,
    "save_profile": save_profile,
    "load_profile": load_profile,
    "load_target_and_drafter": load_target_and_drafter,
    "default_drafter_dir": default_drafter_dir,
    "prepacked_linears": prepacked_linear.prepacked_linears,
    "measured_min_rows": prepacked_linear.measured_min_rows,
    "choose_min_rows": prepacked_linear.choose_min_rows,
    "thresholds": prepacked_linear.thresholds,
    "decided_min_rows": prepacked_linear.decided_min_rows,
    "save_target_relative": target_relative.save_target_relative,
    "stored_size": target_relative.stored_size,
    "export_for_vllm": vllm_export.export_for_vllm,
}


class _Raw:
    """Shows a postponed (string) annotation without quotes, as it is written in the source."""

    def __init__(self, text: Any) -> None:
        self.text = text if isinstance(text, str) else getattr(text, "__name__", repr(text))

    def __repr__(self) -> str:
        return self.text


def render_signature(name: str, fn: Any) -> str:
    """`name(params) -> ret` with source-style annotations and without self/cls: the form used in api.md."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    if params and params[0].name in ("self", "cls"):
        params = params[1:]
    params = [p if p.annotation is p.empty else p.replace(annotation=_Raw(p.annotation)) for p in params]
    ret = sig.return_annotation
    sig = sig.replace(parameters=params, return_annotation=sig.empty if ret is sig.empty else _Raw(ret))
    return f"{name}{sig}"


@pytest.fixture(scope="module")
def api() -> str:
    return API.read_text(encoding="utf-8")


def test_every_public_name_is_documented(api):
    missing = [name for name in oneiro_hf.__all__ if f"`{name}" not in api]
    assert not missing, f"docs/api.md does not mention {missing}"


def test_every_oneiro_generate_kwarg_is_documented(api):
    # integration.py pops every oneiro_<key> kwarg and hands it to drafting_settings, which knows these keys
    keys = OneiroDrafter.from_target(make_model("llama")).drafting_settings()
    assert len(keys) >= 10
    missing = [f"oneiro_{key}" for key in keys if f"| `oneiro_{key}` |" not in api]
    assert not missing, f"docs/api.md has no table row for {missing}"


@pytest.mark.parametrize("page", [API, README], ids=["api.md", "README.md"])
def test_the_settings_table_is_the_one_rendered_from_the_declarations(page):
    expected = settings_table()
    assert expected in page.read_text(encoding="utf-8"), (
        f"{page.name}'s settings table differs from the settings' declarations (oneiro_hf/settings.py); replace "
        f"it with the output of oneiro_hf.settings.settings_table():\n{expected}"
    )


def test_every_config_field_is_documented_with_its_default(api):
    params = inspect.signature(OneiroDrafterConfig.__init__).parameters.values()
    fields = [p for p in params if p.name not in ("self", "kwargs")]
    assert len(fields) >= 20
    missing = [f"{p.name}={p.default!r}" for p in fields if f"| `{p.name}` | `{p.default!r}` |" not in api]
    assert not missing, f"docs/api.md has no config row (name and default) for {missing}"


def test_every_stats_field_is_documented(api):
    names = [f.name for f in dataclasses.fields(DraftStats)]
    names += [n for n, v in vars(DraftStats).items() if isinstance(v, property)]
    missing = [n for n in names if f"| `{n}` |" not in api]
    assert not missing, f"docs/api.md has no DraftStats row for {missing}"


def _parser_flags(parser) -> list[str]:
    return [s for action in parser._actions for s in action.option_strings if s.startswith("--") and s != "--help"]


def test_every_cli_flag_is_documented(api):
    from oneiro_hf.bench import cli
    flags = (_parser_flags(cli._run_parser()) + _parser_flags(cli._profile_parser())
             + _parser_flags(cli._breakdown_parser()) + _parser_flags(cli._merge_parser())
             + _parser_flags(cli._paired_parser()) + _parser_flags(cli._summarize_parser()))
    from oneiro_hf.serving import cli as export_cli
    flags += _parser_flags(export_cli._vllm_parser())
    inherited = {f.name for f in dataclasses.fields(TrainingArguments)}
    from oneiro_hf.training.campaign import CampaignArguments

    for cls in (ModelArguments, DataArguments, OneiroTrainingArguments, CampaignArguments):
        flags += [f"--{f.name}" for f in dataclasses.fields(cls) if f.name not in inherited]
    assert "--interval" in flags and "--per-category" in flags
    missing = sorted({flag for flag in flags if not re.search(rf"`{re.escape(flag)}[ `=]", api)})
    assert not missing, f"docs/api.md does not document the CLI flags {missing}"


@pytest.mark.parametrize("name", sorted(SIGNATURES))
def test_documented_signatures_match_the_code(api, name):
    expected = render_signature(name, SIGNATURES[name])
    assert expected in api, f"docs/api.md should show the signature\n{expected}"


def test_every_error_class_is_documented(api):
    from oneiro_hf.bench import BenchInputError
    from oneiro_hf.generation.inputs import UnsupportedGenerateCall
    from oneiro_hf.storage.checkpoint import CorruptCheckpoint
    from oneiro_hf.storage.target_relative import RebuiltOnOtherWeights, RelativeDrafterOnOtherBase
    from oneiro_hf.training.campaign import CampaignError
    from oneiro_hf.training.trainer import CheckpointMismatch, OutputDirHasDrafter

    for cls in (BenchInputError, CorruptCheckpoint, CheckpointMismatch, OutputDirHasDrafter, UnsupportedGenerateCall,
                CampaignError,
                RelativeDrafterOnOtherBase, RebuiltOnOtherWeights):
        assert f"`{cls.__name__}`" in api, cls.__name__
