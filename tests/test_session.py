"""Per-call state travels in a DraftingSession the drafter makes; settings are one frozen DraftingSettings."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch
from tiny import make_model, random_prompt
from transformers import StoppingCriteria, StoppingCriteriaList

from oneiro_hf import OneiroDrafter, OneiroDrafterConfig
from oneiro_hf.generation.session import DraftingSession
from oneiro_hf.settings import DraftingSettings

PACKAGE = Path(__file__).resolve().parent.parent / "oneiro_hf"


class _SeeSession(StoppingCriteria):
    """Records the drafter's current session at every step of generate (never stops)."""

    def __init__(self, drafter) -> None:
        self.drafter, self.seen = drafter, []

    def __call__(self, input_ids, scores, **kwargs):
        self.seen.append(self.drafter.current_session)
        return torch.zeros(input_ids.shape[0], dtype=torch.bool)


def test_a_generate_call_drafts_in_its_own_session():
    torch.manual_seed(0)
    model = make_model("llama", strength="prefix")
    drafter = OneiroDrafter.from_target(model)
    see = _SeeSession(drafter)
    prompt = random_prompt(12, seed=3)
    model.generate(prompt, assistant_model=drafter, max_new_tokens=8, do_sample=False,
                   stopping_criteria=StoppingCriteriaList([see]), oneiro_max_draft_tokens=3)
    sessions = {id(s) for s in see.seen}
    assert len(sessions) == 1 and isinstance(see.seen[0], DraftingSession)
    session = see.seen[0]
    assert session.settings.max_draft_tokens == 3 and session.stats is drafter.last_stats
    assert session.policy is drafter.policy_state and drafter.current_session is None
    assert drafter.last_stats.steps > 0 and drafter.last_stats.rounds is None
    drafter.record_draft_rounds = True
    model.generate(prompt, assistant_model=drafter, max_new_tokens=8, do_sample=False)
    assert drafter.last_stats.rounds is not None and drafter.last_stats is not session.stats


def test_policy_state_is_public_and_typed():
    drafter = OneiroDrafter.from_target(make_model("llama"))
    assert drafter.policy_state is None
    session = drafter.new_session()
    assert drafter.policy_state is session.policy
    drafter.policy_state = None
    assert drafter.policy_state is None
    with pytest.raises(TypeError, match="DraftPolicyState"):
        drafter.policy_state = {"t1": 0.1}


def test_drafting_settings_defaults_live_in_one_place():
    defaults = DraftingSettings()
    config = OneiroDrafterConfig()
    assert config.draft_mode == defaults.mode
    for field in dataclasses.fields(DraftingSettings):
        name = "draft_mode" if field.name == "mode" else field.name
        assert getattr(config, name) == getattr(defaults, field.name), field.name
    with pytest.raises(dataclasses.FrozenInstanceError):
        defaults.mode = "latent"
    with pytest.raises(ValueError, match="max_draft_tokens"):
        defaults.replace(max_draft_tokens=0).validate()
    with pytest.raises(TypeError, match="unknown oneiro setting 'nope'"):
        defaults.replace(nope=1)


def test_nothing_outside_the_drafter_writes_its_private_attributes():
    offenders = []
    # the drafter's own code: the model, and the parts mixed into it (binding, sessions)
    own = {PACKAGE / "modeling_oneiro.py", PACKAGE / "generation" / "binding.py", PACKAGE / "generation" / "session.py"}
    for path in PACKAGE.rglob("*.py"):
        if path in own:
            continue
        text = path.read_text(encoding="utf-8")
        for pattern in (r"object\.__setattr__\((?!self\b)", r"\._policy_state\b", r"_oneiro_pending_settings",
                        r"\._session\b"):
            offenders += [f"{path.name}: {m.group(0)}" for m in re.finditer(pattern, text)]
    assert not offenders, offenders
