"""Each drafting setting is declared once, as a `DraftingSettings` field, and everything else follows from it.

The tests run over every field, so a new setting is covered the moment it is declared: the config takes it as a
keyword argument and saves it, an old config without it loads its default, a generate call takes it as
`oneiro_<name>`, the tree reads it through its view, its check raises the error, and the docs table shows it.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from typing import Any

import pytest
import torch
from tiny import greedy, make_model, random_prompt

from oneiro_hf import OneiroDrafter, OneiroDrafterConfig
from oneiro_hf.generation.loop.custom_generate import EngineView
from oneiro_hf.settings import DEFAULTS, DraftingSettings, config_name, settings_table

FIELDS = [f.name for f in dataclasses.fields(DraftingSettings)]
# str settings have no generic "other value"; the rest are derived from the type of the default
OTHER_CHOICE = {"mode": "lookup", "verification": "topk", "prepack_max_memory": 0.45, "exact_kernels": True}
# settings whose check compares with another setting: the other values that make a bad value of this one
BAD_CONTEXT: dict[str, dict[str, Any]] = {"tree": {"verification": "topk"}}
BAD_CANDIDATES: list[Any] = [0, "nope", -1, 10**6, 2.5, True]


def other_value(name: str) -> Any:
    """A valid value of setting `name` that is not its default."""
    if name in OTHER_CHOICE:
        return OTHER_CHOICE[name]
    default = getattr(DEFAULTS, name)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default / 2 if default > 0 else 0.5
    raise AssertionError(f"add an example value of {name} (default {default!r}) to OTHER_CHOICE")


def test_the_other_values_are_valid_and_differ_from_the_defaults():
    for name in FIELDS:
        value = other_value(name)
        assert value != getattr(DEFAULTS, name), name
        DEFAULTS.replace(**{name: value}).validate()


@pytest.mark.parametrize("name", FIELDS)
def test_every_setting_is_a_config_keyword_saved_and_loaded(name, tmp_path):
    field = config_name(name)
    value = other_value(name)
    assert inspect.signature(OneiroDrafterConfig.__init__).parameters[field].default == getattr(DEFAULTS, name)
    config = OneiroDrafterConfig(**{field: value})
    assert getattr(config, field) == value
    assert getattr(DraftingSettings.from_config(config), name) == value
    config.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())[field] == value
    loaded = OneiroDrafterConfig.from_pretrained(tmp_path)
    assert getattr(DraftingSettings.from_config(loaded), name) == value


@pytest.mark.parametrize("name", FIELDS)
def test_a_config_written_before_a_setting_existed_loads_its_default(name, tmp_path):
    OneiroDrafterConfig(**{config_name(name): other_value(name)}).save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    data = json.loads(path.read_text())
    del data[config_name(name)]
    path.write_text(json.dumps(data))
    loaded = OneiroDrafterConfig.from_pretrained(tmp_path)
    assert getattr(loaded, config_name(name)) == getattr(DEFAULTS, name)
    assert DraftingSettings.from_config(loaded) == DEFAULTS


def test_a_config_defaulting_to_trees_drafts_chains_for_a_call_that_relaxes_verification():
    config = OneiroDrafterConfig(tree=True)  # as the shipped drafters' configs
    assert DraftingSettings.for_call(config).tree
    relaxed = DraftingSettings.for_call(config, verification="topk")
    assert not relaxed.tree and relaxed.verification == "topk"
    assert DraftingSettings.for_call(config, verification="strict").tree
    with pytest.raises(ValueError, match="tree verification is lossless only"):  # both asked for in one call
        DraftingSettings.for_call(config, verification="topk", tree=True)


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(1)
    model = make_model("llama", layers=2, hidden=32, vocab=64, strength="prefix")
    return model, OneiroDrafter.from_target(model, interval=(0, 2))


@pytest.mark.parametrize("name", FIELDS)
def test_every_setting_is_a_per_call_keyword(pair, name, monkeypatch):
    model, drafter = pair
    seen: list[DraftingSettings] = []
    original = drafter.drafting_session

    def recording(settings: DraftingSettings):
        seen.append(settings)
        return original(settings)

    monkeypatch.setattr(drafter, "drafting_session", recording)
    ids = random_prompt(6, seed=4, vocab=64)
    out = greedy(model, ids, 3, assistant_model=drafter, **{f"oneiro_{name}": other_value(name)})
    monkeypatch.undo()
    assert getattr(seen[-1], name) == other_value(name)
    if name not in ("verification", "verification_topk", "verification_threshold", "verification_min_entropy"):
        assert torch.equal(out, greedy(model, ids, 3))  # lossless settings: plain greedy's tokens


def _bad_value(name: str) -> tuple[Any, dict[str, Any], str]:
    """A value its declared check refuses, the other settings that make it bad, and the check's message."""
    check = DraftingSettings.__dataclass_fields__[name].metadata["check"]
    context = BAD_CONTEXT.get(name, {})
    for value in BAD_CANDIDATES:
        settings = DEFAULTS.replace(**context, **{name: value})
        try:
            message = check(name, value, settings)
        except (TypeError, ValueError):
            continue
        if message is not None:
            return value, context, message
    raise AssertionError(f"no value in {BAD_CANDIDATES} fails the check of {name}: add one to BAD_CANDIDATES")


@pytest.mark.parametrize(
    "name", [n for n in FIELDS if DraftingSettings.__dataclass_fields__[n].metadata["check"] is not None]
)
def test_a_bad_value_raises_its_declared_checks_message_with_the_fix(name):
    value, context, message = _bad_value(name)
    assert name in message or name == "mode" and "draft mode" in message
    assert "Fix:" in message
    config = OneiroDrafterConfig()
    with pytest.raises(ValueError) as info:
        DraftingSettings.for_call(config, **context, **{name: value})
    assert str(info.value) == message


def test_the_tree_view_reads_the_drafting_settings_and_declares_none():
    # besides the settings, only how the draft is verified: one path (a chain) or a tree
    assert [f.name for f in dataclasses.fields(EngineView)] == ["drafting", "chain"]
    settings = DraftingSettings(
        mode="lookup", tree_max_nodes=5, tree_max_depth=4, tree_topk=3, tree_beam=2, tree_lookup_branches=6,
        lookup_min_ngram=3, tree_lookup_min_ngram=2, lookup_max_ngram=5, lookup_after_latent=False,
        min_draft_confidence=0.2, cost_aware=False, context_window=7,
    )
    view = EngineView.from_drafting_settings(settings)
    assert (view.mode, view.max_nodes, view.max_depth, view.topk, view.beam, view.lookup_branches) == (
        "lookup", 5, 4, 3, 2, 6
    )
    assert (view.lookup_min_ngram, view.filler_min_ngram, view.lookup_max_ngram) == (3, 2, 5)
    assert (view.lookup_after_latent, view.min_value, view.cost_aware, view.context_window) == (False, 0.2, False, 7)
    assert EngineView.from_drafting_settings(DraftingSettings(tree_lookup_min_ngram=3)).filler_min_ngram == 2
    assert not view.chain and EngineView.for_chain(settings).chain
    with pytest.raises(ValueError, match="tree_beam must be >= 1"):
        EngineView.from_drafting_settings(DraftingSettings(tree_beam=0))


@pytest.mark.parametrize("name", FIELDS)
def test_every_setting_has_a_row_in_the_rendered_table(name):
    default = getattr(DEFAULTS, name)
    assert f"| `oneiro_{name}` | `{config_name(name)}` | `{default!r}` |" in settings_table()


def test_the_mode_keeps_its_config_name():
    assert config_name("mode") == "draft_mode"
    assert OneiroDrafterConfig(draft_mode="latent").draft_mode == "latent"
    assert DraftingSettings.from_config(OneiroDrafterConfig(draft_mode="latent")).mode == "latent"
