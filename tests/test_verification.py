"""Configurable verification (strict / topk / threshold) inside generate(assistant_model=drafter).

* k=1 and threshold=1.0 are the strict rule: token-identical to plain greedy (random float logits have
  no exact ties), on several architectures, prompts and drafting modes, with drafts really proposed;
* every drafted token the loop kept satisfies its rule under the target's processed distribution, and
  every other generated token is the target's own greedy choice (property test, teacher-forced check);
* relaxed rules keep at least what strict keeps, and really keep more where lookup drafts are near-misses;
* bad settings fail with an error naming the setting and the fix; lossy modes warn once and say so in
  `drafter.last_stats.verification`;
* strict sampling still draws from the target's exact distribution (chi-square goodness of fit).
"""

from __future__ import annotations

import logging
import math

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tiny import greedy, make_cyclic_model, make_model, random_prompt, repeat_prompt
from transformers.generation.logits_process import LogitsProcessorList, RepetitionPenaltyLogitsProcessor

from oneiro_hf import OneiroDrafter
from oneiro_hf.generation import verification as verification_module
from oneiro_hf.generation.candidate_generator import OneiroCandidateGenerator
from oneiro_hf.generation.verification import RelaxedAcceptanceProcessor, relaxed_accepts

MODES = ("latent", "lookup", "hybrid")
ARCHS3 = ("llama", "qwen2", "gemma3")
TOL = 1e-4  # cached incremental vs teacher-forced full forward differ by float rounding only




_CACHE: dict[tuple[str, str | None], tuple] = {}


def model_and_drafter(arch: str, strength: str | None):
    """Built once per module (hypothesis examples reuse them); cost_aware=False in every call keeps the
    drafter's learned policy out of the picture."""
    key = (arch, strength)
    if key not in _CACHE:
        model = make_model(arch, strength=strength)
        _CACHE[key] = (model, OneiroDrafter.from_target(model))
    return _CACHE[key]


def prompts(model) -> dict[str, torch.LongTensor]:
    return {
        "random": random_prompt(9, seed=5),
        "pattern": repeat_prompt([7, 19, 33, 4], 4),  # lookup copies the pattern; the target may disagree
        "own": greedy(model, random_prompt(6, seed=11), 18),  # random targets loop: lookup finds matches
    }


def generate_capturing(model, ids, new, **kwargs):
    """greedy generate that also returns the OneiroCandidateGenerator the call used."""
    made: list[OneiroCandidateGenerator] = []
    original = OneiroCandidateGenerator.__init__

    def spy(self, *args, **kw):
        original(self, *args, **kw)
        made.append(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(OneiroCandidateGenerator, "__init__", spy)
        out = greedy(model, ids, new, **kwargs)
    assert len(made) == 1
    return out, made[0]


# ------------------------------------------------------------------------------ strict-equivalent settings


@pytest.mark.parametrize("arch", ARCHS3)
@pytest.mark.parametrize(
    "criterion",
    [
        {"oneiro_verification": "topk", "oneiro_verification_topk": 1},
        {"oneiro_verification": "threshold", "oneiro_verification_threshold": 1.0},
    ],
    ids=["topk1", "threshold1"],
)
def test_strict_equivalent_settings_equal_plain_greedy(arch, criterion):
    """topk k=1 is exactly strict (ties broken as argmax breaks them); threshold 1.0 is strict up to
    exact ties, which random float logits do not have."""
    drafted = accepted = 0
    for strength in (None, "prefix"):
        model, drafter = model_and_drafter(arch, strength)
        for pname, ids in prompts(model).items():
            ref = greedy(model, ids, 20)
            for mode in MODES:
                for k in (4,):
                    ctx = f"{arch}/{strength}/{pname}/{mode}/k={k}"
                    out = greedy(
                        model,
                        ids,
                        20,
                        assistant_model=drafter,
                        oneiro_mode=mode,
                        oneiro_cost_aware=False,
                        oneiro_max_draft_tokens=k,
                        **criterion,
                    )
                    assert torch.equal(out, ref), ctx
                    s = drafter.last_stats
                    assert s.verification == criterion["oneiro_verification"], ctx
                    drafted += s.drafted_tokens
                    accepted += s.accepted_tokens
    # equality with no drafts (or none kept) would prove nothing
    assert drafted > 50 and 0 < accepted < drafted, (drafted, accepted)


def test_strict_is_default_and_installs_nothing():
    model, drafter = model_and_drafter("llama", "prefix")
    ids = prompts(model)["pattern"]
    out, gen = generate_capturing(model, ids, 16, assistant_model=drafter, oneiro_cost_aware=False)
    assert torch.equal(out, greedy(model, ids, 16))
    assert drafter.last_stats.verification == "strict"
    assert gen.relaxed is None
    assert not any(isinstance(p, RelaxedAcceptanceProcessor) for p in gen.logits_processor)
    assert len(gen.accepted_positions) == drafter.last_stats.accepted_tokens


# ------------------------------------------------------------------------------ the acceptance rule itself


def teacher_forced_scores(model, out: torch.LongTensor, penalty: float | None) -> torch.Tensor:
    """Row p-1 = the target's processed scores for the token at position p (the same processors as the call)."""
    with torch.no_grad():
        logits = model(out).logits[0].float()
    if penalty is None:
        return logits
    proc = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(penalty)])
    return torch.stack([proc(out[:, : p + 1], logits[p : p + 1].clone())[0] for p in range(out.shape[1])])


def satisfies(row: torch.Tensor, token: int, criterion: str, k: int, t: float, min_entropy: float) -> bool:
    """The rule, checked leniently by TOL (rounding may turn a near-tie either way)."""
    s = float(row[token])
    top = float(row.max())
    if s >= top - TOL:  # the target's own choice is kept by every rule
        return True
    if min_entropy > 0:
        logp = row.log_softmax(-1)
        entropy = float(-(logp.exp() * logp.nan_to_num(neginf=0.0)).sum())
        if entropy < min_entropy - TOL:
            return False
    if criterion == "topk":
        return int((row > s + TOL).sum()) < k
    return s - top >= math.log(t) - TOL


@settings(
    max_examples=50,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    arch=st.sampled_from(ARCHS3),
    strength=st.sampled_from([None, "prefix"]),
    pattern=st.lists(st.integers(3, 127), min_size=1, max_size=5),
    times=st.integers(1, 4),
    mode=st.sampled_from(MODES),
    criterion=st.sampled_from(["topk", "threshold"]),
    k=st.integers(1, 6),
    t=st.sampled_from([0.05, 0.2, 0.5, 0.9, 1.0]),
    # the tiny targets' entropies lie in about [4.3, 4.65] nats: these bounds bite at some positions
    min_entropy=st.sampled_from([0.0, 0.0, 4.5, 4.56]),
    max_draft=st.integers(1, 6),
    penalty=st.sampled_from([None, None, 1.5]),
)
def test_every_kept_draft_satisfies_its_rule(
    arch, strength, pattern, times, mode, criterion, k, t, min_entropy, max_draft, penalty
):
    model, drafter = model_and_drafter(arch, strength)
    ids = torch.tensor([(pattern * times)[:14]])
    extra = {"repetition_penalty": penalty} if penalty is not None else {}
    out, gen = generate_capturing(
        model,
        ids,
        12,
        assistant_model=drafter,
        oneiro_mode=mode,
        oneiro_cost_aware=False,
        oneiro_max_draft_tokens=max_draft,
        oneiro_verification=criterion,
        oneiro_verification_topk=k,
        oneiro_verification_threshold=t,
        oneiro_verification_min_entropy=min_entropy,
        **extra,
    )
    s = drafter.last_stats
    assert s.verification == criterion
    kept = gen.accepted_positions
    assert len(kept) == len(set(kept)) == s.accepted_tokens  # no EOS here, so no kept draft was cut
    # the relaxed processor is the last one of the loop's list, and inert after the call
    assert gen.logits_processor[-1] is gen.relaxed and not gen.relaxed.proposals
    scores = teacher_forced_scores(model, out, penalty)
    start = ids.shape[1]
    assert all(start <= p < out.shape[1] for p in kept)
    relaxed = 0
    for p in range(start, out.shape[1]):
        token = int(out[0, p])
        row = scores[p - 1]
        relaxed += int(p in kept and int(row.argmax()) != token)
        if p in kept:
            assert satisfies(row, token, criterion, k, t, min_entropy), (p, token, row.topk(6))
        else:  # the target's own token: the bonus after the last kept draft, or a plain step
            assert float(row[token]) >= float(row.max()) - TOL, (p, token, row.topk(3))
    event("kept drafts", "none" if not kept else "some")
    event("kept drafts the target would not pick", "none" if not relaxed else "some")


@settings(max_examples=200, derandomize=True, deadline=None)
@given(
    values=st.lists(st.integers(-3, 3), min_size=2, max_size=12),
    data=st.data(),
    k=st.integers(1, 12),
    t=st.floats(0.01, 1.0),
    min_entropy=st.sampled_from([0.0, 0.5, 2.0]),
)
def test_rule_unit_properties(values, data, k, t, min_entropy):
    """On integer scores (ties everywhere): k=1 is argmax equality exactly; a relaxed rule keeps whatever
    strict keeps; larger k / smaller t keep more; a forbidden (-inf) token is never kept."""
    scores = torch.tensor([values], dtype=torch.float32)
    token = data.draw(st.integers(0, len(values) - 1))
    is_argmax = int(scores.argmax(-1)) == token
    assert bool(relaxed_accepts(scores, token, "topk", 1, t, 0.0)) == is_argmax
    assert bool(relaxed_accepts(scores, token, "strict", k, t, 0.0)) == is_argmax
    for crit in ("topk", "threshold"):
        keep = bool(relaxed_accepts(scores, token, crit, k, t, min_entropy))
        assert keep or not is_argmax
    assert bool(relaxed_accepts(scores, token, "topk", k, t, min_entropy)) <= bool(
        relaxed_accepts(scores, token, "topk", k + 1, t, min_entropy)
    )
    assert bool(relaxed_accepts(scores, token, "threshold", k, t, min_entropy)) <= bool(
        relaxed_accepts(scores, token, "threshold", k, t / 2, min_entropy)
    )
    # the entropy bound: below it a row is judged strictly, at or above it by the rule alone
    logp = scores.log_softmax(-1)
    entropy = float(-(logp.exp() * logp).sum())
    for crit in ("topk", "threshold"):
        unbounded = bool(relaxed_accepts(scores, token, crit, k, t, 0.0))
        assert bool(relaxed_accepts(scores, token, crit, k, t, entropy + 1e-3)) == is_argmax
        assert bool(relaxed_accepts(scores, token, crit, k, t, max(entropy - 1e-3, 0.0))) == unbounded
    banned = scores.clone()
    banned[0, token] = float("-inf")
    for crit in ("topk", "threshold"):
        assert not bool(relaxed_accepts(banned, token, crit, 99, 0.01, 0.0))


def test_processor_only_touches_drafted_positions_on_their_path():
    proc = RelaxedAcceptanceProcessor("topk", 2, 0.3)
    scores = torch.tensor([[0.0, 3.0, 2.0, 1.0, -1.0]])
    ids = torch.tensor([[4, 4, 4]])
    assert torch.equal(proc(ids, scores.clone()), scores)  # no proposal: inert
    proc.proposals = {3: 2, 4: 3}  # drafted token 2 at position 3, then token 3 at position 4
    boosted = proc(ids, scores.clone())
    assert int(boosted.argmax()) == 2 and float(boosted[0, 2]) > 3.0 and 3 in proc.kept
    assert torch.equal(boosted[0, [0, 1, 3, 4]], scores[0, [0, 1, 3, 4]])  # only the draft's score moves
    # position 4: token 3 has rank 3, outside the top-2: untouched, so the loop sees the target's argmax
    assert torch.equal(proc(torch.tensor([[4, 4, 4, 2]]), scores.clone()), scores)
    # a prefix that does not hold the earlier drafted token is not the draft's path: untouched
    assert torch.equal(
        proc(torch.tensor([[4, 4, 4, 1]]), torch.tensor([[0.0, 3.0, 2.0, 2.5, 1.0]])),
        torch.tensor([[0.0, 3.0, 2.0, 2.5, 1.0]]),
    )
    # the bonus position (after the last draft) has no proposal: untouched
    assert torch.equal(proc(torch.tensor([[4, 4, 4, 2, 3]]), scores.clone()), scores)
    proc.clear()
    assert torch.equal(proc(ids, scores.clone()), scores)
    with pytest.raises(ValueError, match="topk"):
        RelaxedAcceptanceProcessor("strict", 1, 1.0)


# ------------------------------------------------------------------------------ relaxed keeps more


@pytest.mark.parametrize("arch", ARCHS3)
def test_relaxed_accepts_at_least_as_many_as_strict(arch):
    """Repetitive prompt, lookup drafts (the pattern) that the random target often ranks 2nd or 3rd."""
    model, drafter = model_and_drafter(arch, None)
    ids = prompts(model)["pattern"]
    ref = greedy(model, ids, 24)
    base = {"assistant_model": drafter, "oneiro_mode": "lookup", "oneiro_cost_aware": False}
    out = greedy(model, ids, 24, **base)
    assert torch.equal(out, ref)
    strict = drafter.last_stats
    assert strict.drafted_tokens > 0 and strict.verification == "strict"
    taus = {}
    for name, kw in {
        "topk3": {"oneiro_verification": "topk", "oneiro_verification_topk": 3},
        "topk128": {"oneiro_verification": "topk", "oneiro_verification_topk": 128},
        "threshold0.3": {"oneiro_verification": "threshold", "oneiro_verification_threshold": 0.3},
    }.items():
        greedy(model, ids, 24, **base, **kw)
        relaxed = drafter.last_stats
        taus[name] = relaxed.mean_accepted_tokens
        assert relaxed.mean_accepted_tokens >= strict.mean_accepted_tokens, (
            name,
            taus,
            strict.accept_lengths,
        )
        assert relaxed.accepted_tokens >= strict.accepted_tokens, name
    assert taus["topk3"] > strict.mean_accepted_tokens, (taus, strict.mean_accepted_tokens)
    # k = vocab keeps every finite draft: every lookup draft is accepted in full
    greedy(model, ids, 24, **base, oneiro_verification="topk", oneiro_verification_topk=128)
    s = drafter.last_stats
    assert s.drafted_tokens > 0 and s.accepted_tokens == s.drafted_tokens


def test_user_processor_list_is_not_modified():
    """generate builds its own processor list per call; the user's list never receives our processor."""
    model, drafter = model_and_drafter("llama", None)
    ids = prompts(model)["pattern"]
    mine = LogitsProcessorList([RepetitionPenaltyLogitsProcessor(1.3)])
    out = greedy(
        model,
        ids,
        12,
        assistant_model=drafter,
        oneiro_cost_aware=False,
        logits_processor=mine,
        oneiro_verification="topk",
        oneiro_verification_topk=1,
    )
    assert len(mine) == 1 and isinstance(mine[0], RepetitionPenaltyLogitsProcessor)
    assert torch.equal(out, greedy(model, ids, 12, logits_processor=mine))


def test_forbidden_tokens_are_never_kept():
    """A draft a user processor forbids (-inf) is rejected even when the rule would keep anything.

    Per-token target repeating its cycle c0 -> c1 -> ...: lookup drafts continue the cycle; with c2
    suppressed, every draft that reaches c2 must stop there although k = vocab keeps any finite token."""
    model, cyc = make_cyclic_model("llama")
    drafter = OneiroDrafter.from_target(model)
    ids = repeat_prompt(cyc, 3)
    out = greedy(
        model,
        ids,
        20,
        assistant_model=drafter,
        oneiro_mode="lookup",
        oneiro_cost_aware=False,
        oneiro_verification="topk",
        oneiro_verification_topk=128,
        suppress_tokens=[cyc[2]],
    )
    assert torch.equal(out, greedy(model, ids, 20, suppress_tokens=[cyc[2]]))  # nothing else was relaxed
    assert cyc[2] not in out[0, ids.shape[1] :].tolist()
    s = drafter.last_stats
    assert s.accepted_tokens > 0 and s.drafted_tokens > s.accepted_tokens, s


def test_returned_scores_show_the_boost_and_logits_stay_raw():
    model, drafter = model_and_drafter("llama", None)
    ids = prompts(model)["pattern"]
    with torch.no_grad():
        res = model.generate(
            ids,
            do_sample=False,
            max_new_tokens=16,
            return_dict_in_generate=True,
            output_scores=True,
            output_logits=True,
            assistant_model=drafter,
            oneiro_mode="lookup",
            oneiro_cost_aware=False,
            oneiro_verification="topk",
            oneiro_verification_topk=3,
        )
    new = res.sequences[0, ids.shape[1] :].tolist()
    assert len(res.scores) == len(res.logits) == len(new)
    raw = teacher_forced_scores(model, res.sequences, None)[ids.shape[1] - 1 : -1]
    differs = 0
    for i, token in enumerate(new):
        assert int(res.scores[i].argmax()) == token  # kept drafts are the argmax of the returned scores
        assert torch.allclose(res.logits[i][0], raw[i], atol=TOL)  # output_logits are the target's raw ones
        differs += int(raw[i].argmax()) != token
    assert differs > 0, "some kept draft must differ from the target's own choice"


# ------------------------------------------------------------------------------ settings and labels


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"oneiro_verification": "lenient"}, "unknown verification criterion 'lenient'"),
        (
            {"oneiro_verification": "topk", "oneiro_verification_topk": 0},
            "verification_topk must be an integer >= 1",
        ),
        ({"oneiro_verification_topk": 2.5}, "verification_topk must be an integer >= 1"),
        ({"oneiro_verification_topk": True}, "verification_topk must be an integer >= 1"),
        ({"oneiro_verification_threshold": 0.0}, r"verification_threshold must be a number in \(0, 1\]"),
        ({"oneiro_verification_threshold": 1.5}, r"verification_threshold must be a number in \(0, 1\]"),
        (
            {"oneiro_verification_threshold": float("nan")},
            r"verification_threshold must be a number in \(0, 1\]",
        ),
        ({"oneiro_verification_threshold": "0.3"}, r"verification_threshold must be a number in \(0, 1\]"),
        ({"oneiro_verification_min_entropy": -1.0}, "verification_min_entropy must be a finite number >= 0"),
    ],
)
def test_bad_settings_fail_clearly(kwargs, match):
    model, drafter = model_and_drafter("llama", None)
    with pytest.raises(ValueError, match=match) as info:
        greedy(model, random_prompt(5, seed=1), 4, assistant_model=drafter, **kwargs)
    assert "Fix:" in str(info.value)
    with pytest.raises(ValueError, match=match):
        drafter.drafting_settings(**{k[len("oneiro_") :]: v for k, v in kwargs.items()})


@pytest.mark.parametrize("criterion", ["topk", "threshold"])
def test_relaxed_with_sampling_is_refused(criterion):
    model, drafter = model_and_drafter("llama", None)
    with pytest.raises(ValueError, match="cannot be honoured with do_sample=True") as info, torch.no_grad():
        model.generate(
            random_prompt(5, seed=1),
            do_sample=True,
            max_new_tokens=4,
            assistant_model=drafter,
            oneiro_verification=criterion,
        )
    assert "Fix:" in str(info.value)
    # the drafter is not left locked or broken
    out = greedy(model, random_prompt(5, seed=1), 4, assistant_model=drafter)
    assert torch.equal(out, greedy(model, random_prompt(5, seed=1), 4))


def test_config_default_and_per_call_override(caplog, monkeypatch):
    monkeypatch.setattr(verification_module, "_warned_lossy", set())
    model = make_model("llama")
    drafter = OneiroDrafter.from_target(model, verification="threshold", verification_threshold=0.5)
    assert drafter.config.verification == "threshold" and drafter.config.verification_topk == 3
    ids = prompts(model)["pattern"]
    with caplog.at_level(logging.WARNING, logger="oneiro_hf.generation.verification"):
        greedy(model, ids, 8, assistant_model=drafter, oneiro_cost_aware=False)
        assert drafter.last_stats.verification == "threshold"
        greedy(model, ids, 8, assistant_model=drafter, oneiro_cost_aware=False)
        out = greedy(
            model, ids, 8, assistant_model=drafter, oneiro_cost_aware=False, oneiro_verification="strict"
        )
        assert drafter.last_stats.verification == "strict" and torch.equal(out, greedy(model, ids, 8))
        greedy(model, ids, 8, assistant_model=drafter, oneiro_cost_aware=False, oneiro_verification="topk")
        greedy(model, ids, 8, assistant_model=drafter, oneiro_cost_aware=False, oneiro_verification="topk")
    lossy = [r.getMessage() for r in caplog.records if "lossy" in r.getMessage()]
    assert len(lossy) == 2, lossy  # once per criterion, never for strict
    assert "'threshold'" in lossy[0] and "'topk'" in lossy[1]
    assert all("output may differ from the target's greedy output" in m for m in lossy)
    with pytest.raises(ValueError, match="unknown verification criterion"):
        OneiroDrafter.from_target(model, verification="nope").drafting_settings()


# ------------------------------------------------------------------------------ strict sampling is exact


def chi2_critical(df: int, alpha: float = 0.001) -> float:
    """Upper alpha quantile of chi-square(df): scipy if installed, else Wilson-Hilferty (z_{0.999})."""
    try:
        from scipy.stats import chi2
    except ImportError:
        assert alpha == 0.001
        z = 3.090232306167813
        c = 2.0 / (9.0 * df)
        return df * (1.0 - c + z * math.sqrt(c)) ** 3
    return float(chi2.ppf(1.0 - alpha, df))


def test_chi2_critical_value_table():
    # tabulated chi-square 0.999 quantiles; Wilson-Hilferty is within 1% for these df
    for df, table in ((10, 29.588), (30, 59.703), (100, 149.449)):
        assert chi2_critical(df) == pytest.approx(table, rel=0.01)


def test_strict_sampling_preserves_the_target_distribution_chi_square():
    """(t1, t2) drawn with the drafter vs the target's exact joint, chi-square goodness of fit at alpha=0.001.

    Vocab 32, no truncation (temperature 1, no top-k/top-p), 3000 draws with a fixed seed. t2 comes from
    one latent draft verified by speculative sampling (the drafted token accepted when the target's sample
    equals it, else the sample), so both branches must be right for the joint to fit. test_core_equality checks a top-4 truncated joint with
    240 draws by total variation; this one has the full support and ~12x the draws.
    """
    alpha = 0.001
    n = 3000
    model = make_model("llama", strength="prefix", vocab=32, hidden=32, layers=3, init=0.3)
    drafter = OneiroDrafter.from_target(model)
    ids = random_prompt(6, seed=12, vocab=32)
    with torch.no_grad():
        p1 = model(ids).logits[0, -1].float().softmax(-1)
        follow = torch.cat([ids.repeat(32, 1), torch.arange(32).unsqueeze(1)], dim=1)
        p2 = model(follow).logits[:, -1].float().softmax(-1)  # row t1: p(t2 | t1)
    exact = (p1[:, None] * p2).flatten()  # cell t1 * 32 + t2
    torch.manual_seed(20240607)
    counts = torch.zeros(32 * 32)
    drafted = accepted = 0
    for _ in range(n):
        with torch.no_grad():
            out = model.generate(
                ids,
                do_sample=True,
                temperature=1.0,
                top_k=None,
                top_p=None,
                max_new_tokens=3,
                assistant_model=drafter,
                oneiro_mode="latent",
                oneiro_cost_aware=False,
            )
        t1, t2 = out[0, ids.shape[1] : ids.shape[1] + 2].tolist()
        counts[t1 * 32 + t2] += 1
        drafted += drafter.last_stats.drafted_tokens
        accepted += drafter.last_stats.accepted_tokens
    assert drafter.last_stats.verification == "strict"
    assert drafted == n, "every call must draft t2"
    assert 0.05 * n < accepted < 0.95 * n, f"both acceptance and rejection must run ({accepted}/{n})"
    expected = exact * n
    big = expected >= 5
    obs = torch.cat([counts[big], counts[~big].sum().unsqueeze(0)])
    exp = torch.cat([expected[big], expected[~big].sum().unsqueeze(0)])
    assert float(exp[-1]) >= 5 and int(big.sum()) >= 20  # pooled tail is a valid cell; a real test
    stat = float(((obs - exp) ** 2 / exp).sum())
    df = obs.numel() - 1
    crit = chi2_critical(df, alpha)
    assert stat < crit, f"chi2={stat:.1f} >= {crit:.1f} (df={df}, alpha={alpha})"
    # and the marginal of the drafted token t2 alone
    m_exp = (p1 @ p2) * n
    m_obs = counts.view(32, 32).sum(0)
    keep = m_exp >= 5
    m_obs = torch.cat([m_obs[keep], m_obs[~keep].sum().unsqueeze(0)])
    m_exp = torch.cat([m_exp[keep], m_exp[~keep].sum().unsqueeze(0)])
    if float(m_exp[-1]) < 5:  # fold a too-small tail into another cell
        m_obs = torch.cat([m_obs[:-2], (m_obs[-2] + m_obs[-1]).unsqueeze(0)])
        m_exp = torch.cat([m_exp[:-2], (m_exp[-2] + m_exp[-1]).unsqueeze(0)])
    m_stat = float(((m_obs - m_exp) ** 2 / m_exp).sum())
    assert m_stat < chi2_critical(m_obs.numel() - 1, alpha), (m_stat, m_obs.numel() - 1)
