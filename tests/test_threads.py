"""One drafter, two targets or two threads: correct output or a clear error, never silent corruption.

The rules these tests pin down (docs/reliability.md, "Threads and targets"):

* A drafter drafts for one target at a time. Generating with another target raises and names the fix;
  re-binding moves it to the new target, after which the old one is refused.
* A drafter serves one generate call at a time. A second concurrent call from another thread, a nested
  call from inside a call (streamer, stopping criterion), and binding it elsewhere while a call runs
  all raise `DrafterBusy` naming the fix: one drafter per thread/target, `drafter.copy_for(model)`.
* Threads with their own drafters may share one target: every output equals plain greedy, and each
  call runs with its own per-call settings.

Concurrency is made deterministic with streamers: transformers calls `streamer.put(prompt)` early in
generate (before the candidate generator is built) and again for every new token, so a streamer that
waits on an event parks its thread inside a running generate call at a known point.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
import torch
from tiny import greedy, make_model, random_prompt
from transformers.generation.streamers import BaseStreamer

from oneiro_hf import OneiroDrafter
from oneiro_hf.modeling_oneiro import DrafterBusy

WAIT_S = 30  # generous: the machine may be busy; a passing run never waits this long


class GateStreamer(BaseStreamer):
    """Signals `entered` at its `pause_at`-th put() and waits there until `release` is set."""

    def __init__(self, pause_at: int = 1) -> None:
        self.pause_at = pause_at
        self.puts = 0
        self.entered = threading.Event()
        self.release = threading.Event()

    def put(self, value: torch.Tensor) -> None:
        self.puts += 1
        if self.puts == self.pause_at:
            self.entered.set()
            if not self.release.wait(WAIT_S):
                raise TimeoutError("the test never released this generate call")

    def end(self) -> None:
        pass


class Worker(threading.Thread):
    """Runs one callable in a thread and keeps its result or exception for the main thread to check."""

    def __init__(self, fn) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.result: Any = None
        self.error: Exception | None = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except Exception as exc:  # noqa: BLE001 - re-raised in the main thread by outcome()
            self.error = exc

    def outcome(self) -> Any:
        self.join(WAIT_S)
        assert not self.is_alive(), "worker thread did not finish"
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture(autouse=True)
def _one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _target(seed: int = 0, name: str | None = None):
    return make_model("llama", seed=seed, strength="prefix", name=name)


# ------------------------------------------------------------------------------------- two targets


def test_generating_with_a_target_the_drafter_is_not_bound_to_is_refused():
    model_a, model_b = _target(0), _target(1)
    drafter = OneiroDrafter.from_target(model_a)
    ids = random_prompt(6, seed=1)
    # B was never hooked: transformers would treat the drafter as a plain assistant, which it refuses
    with pytest.raises(RuntimeError, match="not bound") as info:
        greedy(model_b, ids, 4, assistant_model=drafter)
    assert "drafter.bind(model)" in str(info.value)
    # B is hooked by a drafter of its own: ours is still refused, by our hook
    own_b = OneiroDrafter.from_target(model_b)
    with pytest.raises(ValueError, match="bound to a different target instance") as info:
        greedy(model_b, ids, 4, assistant_model=drafter)
    assert "copy_for" in str(info.value)
    # neither refused call left anything behind: both drafters still work with their own targets
    assert torch.equal(greedy(model_a, ids, 8, assistant_model=drafter), greedy(model_a, ids, 8))
    assert torch.equal(greedy(model_b, ids, 8, assistant_model=own_b), greedy(model_b, ids, 8))


def test_rebinding_moves_the_drafter_to_the_new_target():
    model_a, model_b = _target(0), _target(1)
    drafter = OneiroDrafter.from_target(model_a)
    ids = random_prompt(6, seed=2)
    drafter.bind(model_b, allow_base_model_mismatch=True)
    assert drafter.target is model_b
    out_b = greedy(model_b, ids, 12, assistant_model=drafter, oneiro_cost_aware=False)
    assert torch.equal(out_b, greedy(model_b, ids, 12))
    assert drafter.last_stats.drafted_tokens > 0
    with pytest.raises(ValueError, match="different target instance"):
        greedy(model_a, ids, 4, assistant_model=drafter)


def test_copy_for_gives_an_independent_drafter_for_another_target():
    model_a, model_b = _target(0), _target(1)
    drafter = OneiroDrafter.from_target(model_a, max_draft_tokens=3)
    ids = random_prompt(7, seed=3)
    greedy(model_a, ids, 10, assistant_model=drafter)  # let it learn a policy to copy
    twin = drafter.copy_for(model_b, allow_base_model_mismatch=True)
    assert twin is not drafter and twin.target is model_b and drafter.target is model_a
    assert twin.config.max_draft_tokens == 3
    # same weights, separate storage: changing one leaves the other alone
    for (name, mine), (_, theirs) in zip(drafter.state_dict().items(), twin.state_dict().items()):
        assert torch.equal(mine, theirs), name
        assert mine.data_ptr() != theirs.data_ptr(), name
    with torch.no_grad():
        twin.fuse.bias.add_(1.0)
    assert not torch.equal(twin.fuse.bias, drafter.fuse.bias)
    # the learned policy is copied, not shared
    assert twin.policy_state is not None and twin.policy_state is not drafter.policy_state
    assert twin.policy_state.verify_s == drafter.policy_state.verify_s
    # and both serve their own target losslessly
    assert torch.equal(greedy(model_b, ids, 12, assistant_model=twin), greedy(model_b, ids, 12))
    assert torch.equal(greedy(model_a, ids, 12, assistant_model=drafter), greedy(model_a, ids, 12))
    # without an argument: a second drafter for the same target (one per thread)
    same = drafter.copy_for()
    assert same.target is model_a and same is not drafter


def test_copy_for_checks_the_new_target():
    drafter = OneiroDrafter.from_target(_target(0))
    other = make_model("llama", hidden=96)
    with pytest.raises(ValueError, match="hidden_size"):
        drafter.copy_for(other)


# ------------------------------------------------------------------------------------- two threads


def test_a_second_thread_using_a_busy_drafter_is_refused_and_the_first_call_is_untouched():
    model = _target(0)
    drafter = OneiroDrafter.from_target(model)
    ids = random_prompt(8, seed=4)
    expected = greedy(model, ids, 16)
    gate = GateStreamer(pause_at=3)  # parked after two generated tokens, mid-way through drafting
    first = Worker(lambda: greedy(model, ids, 16, assistant_model=drafter, streamer=gate, oneiro_cost_aware=False))
    first.start()
    try:
        assert gate.entered.wait(WAIT_S)
        with pytest.raises(DrafterBusy, match="already generating in another thread") as info:
            greedy(model, ids, 4, assistant_model=drafter)
        assert "copy_for" in str(info.value)
    finally:
        gate.release.set()
    assert torch.equal(first.outcome(), expected)
    # free again once the first call is over
    assert torch.equal(greedy(model, ids, 16, assistant_model=drafter), expected)


def test_binding_a_drafter_that_is_generating_in_another_thread_is_refused():
    model_a, model_b = _target(0), _target(1)
    drafter = OneiroDrafter.from_target(model_a)
    ids = random_prompt(8, seed=5)
    expected = greedy(model_a, ids, 16)
    gate = GateStreamer(pause_at=3)
    first = Worker(
        lambda: greedy(model_a, ids, 16, assistant_model=drafter, streamer=gate, oneiro_cost_aware=False)
    )
    first.start()
    try:
        assert gate.entered.wait(WAIT_S)
        readout = drafter._bound.readout_weight
        with pytest.raises(DrafterBusy, match="while it is generating in another thread") as info:
            drafter.bind(model_b, allow_base_model_mismatch=True)
        assert "copy_for" in str(info.value)
        with pytest.raises(DrafterBusy):
            drafter.refresh_readout()
        # nothing of the running call's binding changed
        assert drafter.target is model_a and drafter._bound.readout_weight is readout
    finally:
        gate.release.set()
    assert torch.equal(first.outcome(), expected)
    drafter.bind(model_b, allow_base_model_mismatch=True)  # allowed once the call is over
    assert drafter.target is model_b


def test_generate_from_inside_a_generate_call_with_the_same_drafter_is_refused():
    model = _target(0)
    drafter = OneiroDrafter.from_target(model)
    ids = random_prompt(6, seed=6)
    seen: list[Exception] = []

    class Nested(BaseStreamer):
        def put(self, value):
            if not seen:
                try:
                    greedy(model, ids, 3, assistant_model=drafter)
                except DrafterBusy as exc:
                    seen.append(exc)

        def end(self):
            pass

    out = greedy(model, ids, 10, assistant_model=drafter, streamer=Nested())
    assert torch.equal(out, greedy(model, ids, 10))
    assert seen and "inside one of its own generate calls" in str(seen[0])
    assert "copy_for" in str(seen[0])


def test_per_call_settings_stay_with_their_own_call_when_threads_share_a_target():
    """Two threads, two drafters, one target, interleaved so that both calls are set up before either builds
    its candidate generator: each must draft with its OWN settings (mode, draft length, verification)."""
    model = _target(0)
    d1 = OneiroDrafter.from_target(model)
    d2 = d1.copy_for()
    ids = random_prompt(8, seed=7)
    expected = greedy(model, ids, 16)
    gate1, gate2 = GateStreamer(pause_at=1), GateStreamer(pause_at=1)  # parked right before the generator
    t1 = Worker(
        lambda: greedy(
            model, ids, 16, assistant_model=d1, streamer=gate1, oneiro_mode="lookup", oneiro_max_draft_tokens=2
        )
    )
    t2 = Worker(
        lambda: greedy(
            model,
            ids,
            16,
            assistant_model=d2,
            streamer=gate2,
            oneiro_mode="latent",
            oneiro_cost_aware=False,
            oneiro_max_draft_tokens=5,
            oneiro_min_draft_confidence=0.0,
        )
    )
    t1.start()
    try:
        assert gate1.entered.wait(WAIT_S)
        t2.start()
        assert gate2.entered.wait(WAIT_S)
        gate1.release.set()  # t1 builds its generator while t2's call is set up too
        out1 = t1.outcome()
    finally:
        gate1.release.set()
        gate2.release.set()
    out2 = t2.outcome()
    assert torch.equal(out1, expected) and torch.equal(out2, expected)
    s1, s2 = d1.last_stats, d2.last_stats
    assert s1.drafted_by_source["latent"] == 0, "thread 1 asked for lookup only"
    assert s2.drafted_by_source["lookup"] == 0 and s2.drafted_by_source["latent"] > 0, "thread 2 asked for latent"
    assert max(s1.accept_lengths) <= 3 and max(s2.accept_lengths) <= 6


def test_threads_with_their_own_drafters_match_plain_greedy():
    """Free-running threads on shared targets (two threads per target), each with its own drafter."""
    targets = [_target(0), _target(1)]
    jobs = []
    for t, model in enumerate(targets):
        base = OneiroDrafter.from_target(model, interval=(0, 4))
        for k in range(2):
            jobs.append((model, base if k == 0 else base.copy_for(), 10 * t + k))
    prompts = {seed: [random_prompt(3 + (seed + i) % 11, seed=100 * seed + i) for i in range(6)] for *_, seed in jobs}
    expected = {
        seed: [greedy(model, ids, 14) for ids in prompts[seed]] for model, _, seed in jobs
    }

    def work(model, drafter, seed):
        outs = []
        for i, ids in enumerate(prompts[seed]):
            mode = ("hybrid", "latent", "lookup")[i % 3]
            outs.append(greedy(model, ids, 14, assistant_model=drafter, oneiro_mode=mode, oneiro_cost_aware=i % 2 == 0))
        return outs

    workers = [Worker(lambda job=job: work(*job)) for job in jobs]
    for w in workers:
        w.start()
    for w, (_, drafter, seed) in zip(workers, jobs):
        outs = w.outcome()
        for got, want in zip(outs, expected[seed]):
            assert torch.equal(got, want), seed


def test_threads_racing_for_one_drafter_get_correct_output_or_the_clear_error():
    """No gating: whichever call finds the drafter busy is refused; every call that runs is exact."""
    model = _target(0)
    drafter = OneiroDrafter.from_target(model, interval=(0, 4))
    prompts = [random_prompt(4 + i % 9, seed=200 + i) for i in range(8)]
    expected = [greedy(model, ids, 12) for ids in prompts]
    start = threading.Barrier(2)

    def work():
        start.wait(WAIT_S)
        done, refused = 0, 0
        for ids, want in zip(prompts, expected):
            try:
                got = greedy(model, ids, 12, assistant_model=drafter)
            except DrafterBusy as exc:
                assert "already generating in another thread" in str(exc)
                refused += 1
                continue
            assert torch.equal(got, want)
            done += 1
        return done, refused

    workers = [Worker(work) for _ in range(2)]
    for w in workers:
        w.start()
    results = [w.outcome() for w in workers]
    assert sum(done for done, _ in results) + sum(refused for _, refused in results) == 2 * len(prompts)
    assert sum(done for done, _ in results) >= 1  # a call is only refused while another one runs
