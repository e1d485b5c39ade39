"""The pieces chain and tree share: one `Draft`, one `DraftStats.record_round`, one latent rollout step."""

from __future__ import annotations

import re
from pathlib import Path

import torch
from tiny import make_model, random_prompt

from oneiro_hf import OneiroDrafter
from oneiro_hf.drafting.context import DrafterContext
from oneiro_hf.drafting.draft import Draft, cut_at_eos
from oneiro_hf.drafting.stats import DraftRound, DraftStats
from oneiro_hf.drafting.tree import TokenTree

PACKAGE = Path(__file__).resolve().parent.parent / "oneiro_hf"


def _chain(root: int, *parts: tuple[list[int], str], calls: int = 0, start: int = 0) -> Draft:
    """A chain draft: the parts' tokens in order below `root`, each part from one source."""
    tree, parent = TokenTree.with_root(root), 0
    for tokens, source in parts:
        nodes = tree.add_path(parent, tokens, [0.5] * len(tokens), source, ngram=2 if source == "lookup" else 0)
        parent = nodes[-1] if nodes else parent
    return Draft(tree, calls=calls, chain=True, start=start)


def test_a_chain_round_counts_the_drafters_tokens_and_the_lookup_extension_apart():
    """A latent draft of 2 tokens continued by 2 copied ones, 3 accepted: 2 latent and 1 lookup token accepted, one
    latent step that lookup extended, and a recorded round holding only the drafter's tokens."""
    stats = DraftStats(rounds=[])
    draft = _chain(4, ([5, 6], "latent"), ([7, 8], "lookup"), calls=2, start=10)
    stats.record_round(draft, [1, 2, 3])
    assert (stats.steps, stats.accept_lengths, stats.draft_lengths) == (1, [4], [4])
    assert (stats.drafted_tokens, stats.accepted_tokens, stats.drafter_calls) == (4, 3, 2)
    assert stats.drafted_by_source == {"latent": 2, "lookup": 2, "memory": 0}
    assert stats.accepted_by_source == {"latent": 2, "lookup": 1, "memory": 0}
    assert (stats.latent_steps, stats.lookup_steps, stats.extended_steps, stats.empty_steps) == (1, 0, 1, 0)
    assert stats.rounds == [DraftRound(10, [5, 6], 2, "latent")]
    assert stats.tree_nodes == [] and stats.tree_branch_ranks == []


def test_an_empty_chain_round_counts_its_drafter_calls_and_nothing_drafted():
    stats = DraftStats(rounds=[])
    stats.record_round(_chain(2, calls=1), [])  # a latent draft the cost model cut to nothing
    stats.record_round(_chain(2, ([3, 4], "lookup")), [1, 2])
    assert (stats.steps, stats.empty_steps, stats.drafter_calls, stats.draft_lengths) == (2, 1, 1, [0, 2])
    assert (stats.latent_steps, stats.lookup_steps, stats.extended_steps) == (0, 1, 0)
    assert stats.accept_lengths == [1, 3] and stats.rounds == [DraftRound(0, [3, 4], 2, "lookup")]


def test_a_tree_round_counts_nodes_sources_and_the_accepted_branch_rank():
    """Root 5; a lookup branch 6-7 and a latent sibling 8 that lookup continued with 9; the path 8-9 accepted."""
    tree = TokenTree.with_root(5)
    tree.add_path(0, [6, 7], [0.9, 0.8], "lookup", ngram=3)
    latent = tree.add(0, 8, 0.5, "latent", confidence=0.5)
    copied = tree.add_path(latent, [9], [0.4], "lookup", ngram=2)[0]
    stats = DraftStats()
    stats.record_round(Draft(tree, calls=2, seconds=0.1, lead_token=8), [latent, copied])
    assert (stats.steps, stats.accept_lengths, stats.tree_nodes, stats.tree_drafter_calls) == (1, [3], [4], [2])
    assert stats.tree_branch_ranks == [1], "the latent node is its parent's second likeliest child"
    assert stats.drafted_by_source == {"latent": 1, "lookup": 3, "memory": 0}
    assert stats.accepted_by_source == {"latent": 1, "lookup": 1, "memory": 0}
    assert (stats.latent_steps, stats.lookup_steps, stats.extended_steps) == (1, 1, 1)
    assert stats.draft_lengths == [] and stats.drafter_calls == 2
    stats.record_round(Draft(TokenTree.with_root(5)), [])
    assert stats.empty_steps == 1 and stats.tree_branch_ranks == [1, -1] and stats.steps == 2


def test_one_eos_cut():
    assert cut_at_eos([4, 2, 9, 2], {2}) == [4, 2]
    assert cut_at_eos([4, 9], {2}) == [4, 9] and cut_at_eos([4, 9], set()) == [4, 9]


@torch.no_grad()
def test_a_chain_step_appends_at_the_next_positions():
    """`DrafterContext.step` without positions continues the cache one position after the other: the same states
    as the positions given explicitly."""
    model = make_model("llama", strength="prefix")
    drafter = OneiroDrafter.from_target(model)
    prompt = random_prompt(9, seed=2)
    out = model(prompt, output_hidden_states=drafter.hidden_states_request)
    states = []
    for explicit in (False, True):
        context = DrafterContext(drafter, window=5)  # a window: the cache's entries start after an offset
        context.observe_pass(out.hidden_states, slice(0, prompt.shape[1] - 1))
        state = context.catch_up(prompt)
        for j, token in enumerate((7, 11)):
            position = torch.tensor([[prompt.shape[1] + j]]) if explicit else None
            state = context.step(state, torch.tensor([[token]]), position)
        assert context.cache.seq_length == 5 + 2
        states.append(state)
    torch.testing.assert_close(states[0], states[1], rtol=0, atol=0)


def test_drafting_code_counts_statistics_only_through_draft_stats():
    """Chain and tree count a round through `DraftStats.record_round` (and time through `DraftStats.time`): the
    drafting code adds to no statistic itself."""
    offenders = []
    paths = [PACKAGE / "generation" / "candidate_generator.py", *(PACKAGE / "generation" / "loop").glob("*.py"),
             *(PACKAGE / "drafting").glob("*.py")]
    assert len(paths) > 10
    for path in paths:
        text = path.read_text(encoding="utf-8")
        offenders += [f"{path.name}: {m.group(0)}" for m in re.finditer(r"\bstats\.\w+\s*[+-]=|stats\.\w+\.append", text)]
    assert not offenders, offenders
