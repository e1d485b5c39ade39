"""The speed tables in docs/benchmarks.md are the committed runs' summaries, rounded: every cell of a method
table is recomputed here from the unrounded `summary.json` it cites (the last one linked above the table), and the
headline figures in README.md from the same records, so a figure cannot drift from its record."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
BENCHMARKS = DOCS / "benchmarks.md"
SUMMARY_LINK = re.compile(r"\]\((benchmarks/[^)]*summary\.json)\)")


def method_tables(page: Path) -> list[tuple[str, list[str], list[list[str]]]]:
    """(cited summary path, header cells, rows of cells) for each table whose first column is `method`."""
    tables, cited, lines = [], None, page.read_text().splitlines()
    i = 0
    while i < len(lines):
        for link in SUMMARY_LINK.findall(lines[i]):
            cited = link
        if lines[i].startswith("| method |"):
            header = [c.strip() for c in lines[i].strip("|").split("|")]
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip().replace("**", "") for c in lines[i].strip("|").split("|")])
                i += 1
            tables.append((cited, header, rows))
            continue
        i += 1
    return tables


def ratio(cell: str) -> float:
    """'1.21x (greedy)' or '1.21x' -> 1.21."""
    return float(cell.split("x")[0])


def percent(cell: str) -> float:
    return float(cell.rstrip("%")) / 100


def rounds_to(value: float, shown: float, places: int) -> bool:
    """`shown` is `value` rounded to `places` decimals (exact halves may go either way)."""
    return abs(value - shown) <= 0.5 * 10 ** -places + 1e-9


TABLES = [t for t in method_tables(BENCHMARKS) if "vs same-kernel greedy" in t[1]]


def test_every_method_table_cites_a_committed_summary():
    assert len(TABLES) >= 5
    for cited, _, _ in TABLES:
        assert cited is not None and (DOCS / cited).is_file(), cited


@pytest.mark.parametrize("cited,header,rows", TABLES, ids=[f"{t[0]}#{n}" for n, t in enumerate(TABLES)])
def test_each_table_cell_is_its_summary_rounded(cited, header, rows):
    methods = json.loads((DOCS / cited).read_text())["methods"]
    overall = {name: entry["overall"] for name, entry in methods.items()}
    assert {row[0] for row in rows} <= set(overall)
    for row in rows:
        name, o = row[0], overall[row[0]]
        cells = dict(zip(header, row))
        assert rounds_to(o["speedup_vs_same_kernel_greedy"], ratio(cells["vs same-kernel greedy"]), 2), name
        assert cells["vs same-kernel greedy"].endswith(f"({o['same_kernel_baseline']})"), name
        assert rounds_to(o["speedup_vs_greedy"], ratio(cells["vs stock greedy"]), 2), name
        if "vs hf-lookup" in cells:  # from tokens per second, not from the rounded ratios
            shown = ratio(cells["vs hf-lookup"])
            assert rounds_to(o["tokens_per_s"] / overall["hf-lookup"]["tokens_per_s"], shown, 2), name
        if o["mean_accepted_tokens"] is None:
            assert cells["tau"] == cells["speedup / tau"] == "—", name
        else:
            assert rounds_to(o["mean_accepted_tokens"], float(cells["tau"]), 2), name
            assert rounds_to(o["same_kernel_speedup_per_tau"], float(cells["speedup / tau"]), 2), name
        assert rounds_to(o["draft_time_share"], percent(cells["draft share"]), 3), name
        assert rounds_to(o["identical_to_greedy"], percent(cells["identical to greedy"]), 2), name


def test_the_other_column_is_the_breakdowns_share_outside_verification_and_drafting():
    checked = 0
    for cited, header, rows in TABLES:
        if "other" not in header:
            continue
        breakdown = json.loads((DOCS / cited).with_name("breakdown.json").read_text())["methods"]
        for row in rows:
            shown = percent(dict(zip(header, row))["other"])
            assert rounds_to(breakdown[row[0]]["overall"]["other_share"], shown, 2), row[0]
            checked += 1
    assert checked


def overall(run: str) -> dict[str, dict]:
    methods = json.loads((DOCS / "benchmarks" / run / "summary.json").read_text())["methods"]
    return {name: entry["overall"] for name, entry in methods.items()}


def test_the_readme_headline_is_the_current_runs():
    readme = " ".join((ROOT / "README.md").read_text().split())
    smol, gemma = overall("current/smollm2-135m-instruct"), overall("current/gemma-3-270m")
    profile = json.loads((DOCS / "benchmarks/current/smollm2-135m-instruct/profile.json").read_text())["ratios"]
    hybrid, tree, lookup = smol["oneiro-hybrid"], smol["oneiro-tree"], smol["oneiro-lookup"]
    latent, same = smol["oneiro-latent"], "speedup_vs_same_kernel_greedy"
    expected = [
        f"profile t(2..8)/t(1) = {profile['2']:.2f}-{profile['8']:.2f} on the same kernels",
        (f"the hybrid is **{hybrid[same]:.2f}x** same-kernel greedy ({hybrid['speedup_vs_greedy']:.2f}x stock "
        f"greedy; {hybrid['mean_accepted_tokens']:.2f} tokens per target pass), the tree {tree[same]:.2f}x, "
        f"oneiro's prompt lookup {lookup[same]:.2f}x, and the latent drafter alone {latent[same]:.2f}x "
        f"({latent['acceptance_by_position'][0]:.0%} of its first draft tokens accepted)"),
        (f"transformers' prompt lookup is {smol['hf-lookup']['speedup_vs_greedy']:.2f}x stock greedy, and "
        f"{smol['hf-lookup-kernels'][same]:.2f}x when run inside the same kernels"),
        f"hybrid {gemma['oneiro-hybrid'][same]:.2f}x same-kernel greedy",
        f"The hybrid is {hybrid['tokens_per_s'] / lookup['tokens_per_s']:.2f}x oneiro's prompt lookup on SmolLM2",
    ]
    for sentence in expected:
        assert sentence in readme
    everything = list(smol.values()) + list(gemma.values())
    assert all(o["identical_to_greedy"] == 1.0 for o in everything)  # "Every output was token-identical"


def test_the_readme_batch_caveat_is_the_worst_batched_row():
    readme = " ".join((ROOT / "README.md").read_text().split())
    batches = DOCS / "benchmarks/current/smollm2-135m-instruct-batches"
    worst = min(
        (row["speedup_vs_batched_oneiro_greedy"], method, int(b))
        for part in ("small", "large")
        for method, by_size in json.loads((batches / part / "summary.json").read_text())["throughput"].items()
        if method.startswith("oneiro-") and method != "oneiro-greedy"
        for b, row in by_size.items()
    )
    assert worst[1:] == ("oneiro-tree", 16)
    assert f"with a batch of 16 prompts the tree measured {worst[0]:.2f}x batched greedy on the same kernels" in readme


def _run_pinned(run: Path) -> bool:
    configs = [json.loads((run / "run_config.json").read_text())] if (run / "run_config.json").is_file() else []
    configs.append(json.loads((run / "summary.json").read_text()).get("config", {}))
    return any(config.get("pin_profile") == "h200" for config in configs)


def test_a_committed_h200_breakdown_says_pinned_only_for_a_pinned_run():
    from oneiro_hf.bench.profile import H200_NOT_PINNED, H200_PINNED

    breakdowns = sorted((DOCS / "benchmarks").rglob("breakdown_h200*.md"))
    assert breakdowns
    for path in breakdowns:
        text = path.read_text()
        if H200_PINNED in text or H200_NOT_PINNED in text:
            assert (H200_PINNED in text) == _run_pinned(path.parent), path


def test_a_breakdown_states_pinned_decisions_from_the_runs_config(tmp_path):
    from oneiro_hf.bench.cli import h200_assumptions
    from oneiro_hf.bench.profile import H200_NOT_PINNED, H200_PINNED, H200_PROFILE

    for pin, expected in ((None, H200_NOT_PINNED), ("h200", H200_PINNED)):
        run = tmp_path / str(pin)
        run.mkdir()
        (run / "run_config.json").write_text(json.dumps({"pin_profile": pin}))
        assumptions = h200_assumptions(run, H200_PROFILE)
        assert expected in assumptions and len(assumptions) == len(H200_PROFILE["assumptions"])
    older = tmp_path / "older"  # a run_config.json from before pin_profile was stored: summary.json's config
    older.mkdir()
    (older / "run_config.json").write_text(json.dumps({"target": "t"}))
    (older / "summary.json").write_text(json.dumps({"config": {"pin_profile": "h200"}}))
    assert H200_PINNED in h200_assumptions(older, H200_PROFILE)
