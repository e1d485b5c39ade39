"""`drafter.unbind()` gives the target back as it was before binding, all or nothing, and can be undone by `bind`.

Binding sets `generate`, `_get_candidate_generator` and `_oneiro_hooked` on the target instance
(oneiro_hf/generation/hook.py). Unbinding removes them once no drafter is bound to that target any more, restoring
what the instance held before (normally nothing, so the class's methods answer again). Binding a drafter to
another target leaves the first one hooked, as it always has: its hook keeps refusing the drafter with a clear
message; `unbind()` first leaves it clean.
"""

from __future__ import annotations

import types

import pytest
import torch
from test_threads import GateStreamer, Worker, _target
from tiny import greedy, random_prompt

from oneiro_hf import OneiroDrafter
from oneiro_hf.configuration_oneiro import DrafterNotBound
from oneiro_hf.modeling_oneiro import DrafterBusy

HOOKED = ("generate", "_get_candidate_generator", "_oneiro_hooked")


def _instance_state(model) -> dict:
    """The target instance's own attributes (not its modules, parameters or buffers), by identity."""
    return {name: id(value) for name, value in vars(model).items()}


def _is_clean(model) -> bool:
    return not set(HOOKED) & set(vars(model)) and model.generate.__func__ is type(model).generate


@pytest.fixture(autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_unbind_restores_the_target_and_bind_undoes_it():
    model = _target(0)
    before = _instance_state(model)
    ids = random_prompt(6, seed=1)
    expected = greedy(model, ids, 12)
    drafter = OneiroDrafter.from_target(model)
    assert set(HOOKED) <= set(vars(model))
    assert torch.equal(greedy(model, ids, 12, assistant_model=drafter), expected)

    drafter.unbind()
    assert drafter.target is None
    assert _is_clean(model) and _instance_state(model) == before
    assert model._get_candidate_generator.__func__ is type(model)._get_candidate_generator
    assert torch.equal(greedy(model, ids, 12), expected)
    with pytest.raises(DrafterNotBound, match="drafter.bind"):  # transformers' own generate, our config's message
        greedy(model, ids, 4, assistant_model=drafter)
    drafter.unbind()  # an unbound drafter: nothing to do

    drafter.bind(model)  # reversible
    assert drafter.target is model and set(HOOKED) <= set(vars(model))
    assert torch.equal(greedy(model, ids, 12, assistant_model=drafter, oneiro_cost_aware=False), expected)
    assert drafter.last_stats.drafted_tokens > 0


def test_the_hook_stays_while_another_drafter_is_bound_to_the_target():
    model = _target(0)
    ids = random_prompt(6, seed=2)
    expected = greedy(model, ids, 10)
    first = OneiroDrafter.from_target(model)
    second = first.copy_for(model)
    first.unbind()
    assert not _is_clean(model) and second.target is model
    assert torch.equal(greedy(model, ids, 10, assistant_model=second), expected)
    second.unbind()
    assert _is_clean(model)


def test_binding_elsewhere_keeps_the_old_hook_and_unbinding_first_leaves_it_clean():
    model_a, model_b = _target(0), _target(1)
    ids = random_prompt(6, seed=3)
    drafter = OneiroDrafter.from_target(model_a)
    drafter.bind(model_b, allow_base_model_mismatch=True)
    # as before unbind existed: A keeps its hook, which refuses the drafter now bound to B
    assert not _is_clean(model_a)
    with pytest.raises(ValueError, match="different target instance"):
        greedy(model_a, ids, 4, assistant_model=drafter)
    drafter.unbind()
    assert _is_clean(model_b) and not _is_clean(model_a)

    model_c, model_d = _target(2), _target(3)
    drafter.bind(model_c, allow_base_model_mismatch=True)
    drafter.unbind()
    drafter.bind(model_d, allow_base_model_mismatch=True)
    assert _is_clean(model_c) and drafter.target is model_d


def test_an_instance_level_generate_of_the_users_own_is_restored():
    model = _target(0)

    def mine(self, *args, **kwargs):
        return type(self).generate(self, *args, **kwargs)

    own = types.MethodType(mine, model)
    model.generate = own
    drafter = OneiroDrafter.from_target(model)
    assert model.generate is not own
    drafter.unbind()
    assert model.generate is own and "_get_candidate_generator" not in vars(model)


def test_a_hook_replaced_after_binding_is_refused_and_nothing_changes():
    model = _target(0)
    drafter = OneiroDrafter.from_target(model)
    hooked_candidates = model._get_candidate_generator
    wrapped = model.generate
    model.generate = lambda *args, **kwargs: wrapped(*args, **kwargs)  # another library wraps generate
    with pytest.raises(RuntimeError, match="no longer the oneiro-hf hook") as info:
        drafter.unbind()
    assert "Fix:" in str(info.value)
    assert drafter.target is model and model._get_candidate_generator is hooked_candidates
    assert vars(model)["_oneiro_hooked"] is True
    model.generate = wrapped  # the replacement undone
    drafter.unbind()
    assert _is_clean(model)


def test_unbind_is_refused_while_the_drafter_is_generating():
    model = _target(0)
    drafter = OneiroDrafter.from_target(model)
    ids = random_prompt(8, seed=5)
    expected = greedy(model, ids, 16)
    gate = GateStreamer(pause_at=3)
    worker = Worker(lambda: greedy(model, ids, 16, assistant_model=drafter, streamer=gate, oneiro_cost_aware=False))
    worker.start()
    try:
        assert gate.entered.wait(30)
        with pytest.raises(DrafterBusy, match="while it is generating in another thread"):
            drafter.unbind()
        assert drafter.target is model and not _is_clean(model)
    finally:
        gate.release.set()
    assert torch.equal(worker.outcome(), expected)

    class UnbindingStreamer(GateStreamer):
        def put(self, value: torch.Tensor) -> None:
            self.puts += 1
            if self.puts == 2:
                try:
                    drafter.unbind()
                except DrafterBusy as err:
                    self.error = err

    inside = UnbindingStreamer()
    inside.error = None
    assert torch.equal(greedy(model, ids, 16, assistant_model=drafter, streamer=inside), expected)
    assert isinstance(inside.error, DrafterBusy) and "inside one of this drafter's own generate" in str(inside.error)
    drafter.unbind()  # free again once the calls are over
    assert _is_clean(model)
