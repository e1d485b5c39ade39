"""Every figure of README.md and docs/benchmarks.md is checked against the committed record it comes from.

Method tables in docs/benchmarks.md are recomputed cell by cell from the unrounded `summary.json` each cites (the
last one linked above the table). Every other figure is rendered from its record in tests/doc_figures.py and must
appear in its section as rendered. Every number of every section of both pages must lie inside one of those, unless it is
listed in NOT_MEASURED (not a measurement: a setting, a version, a goal)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from doc_figures import FIGURES

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


PAGES = ("README.md", "docs/benchmarks.md", "docs/serving.md", "docs/hub.md", "docs/gpu.md", "docs/design.md",
         "docs/verification.md", "docs/reliability.md")
# pages checked section by section until every section is (a section listed here is checked like a page above)
SECTIONS = {"docs/training.md": ("Gemma-3-270M: the second architecture (shipped: `drafters/gemma-3-270m`)",
                                  "Results on SmolLM2-135M-Instruct: no gain, not shipped",
                                  "The data as a dataset, kept in the repository",
                                  "Qwen2.5-Coder-0.5B-Instruct: the command and the expected time (not trained yet)",
                                  "Multi-layer input: how to run it", "Stage 3: on-policy refinement",
                                  "Earlier SmolLM2 drafters",
                                  "The second lease: learning curve, ablations, and the drafters now shipped",
                                  "The drafter's verified context: its own keys, or exact ones (CPU)",
                                  "Exact verified context in the library", "The pipeline",
                                  "Ablation (SmolLM2, equal budget)"),
            "docs/bring_your_own_target.md": ("4. How long a draft: the latency profile",)}
NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*")
# names and notations whose digits are not figures: model names and sizes, t(k), issue and session numbers, dtypes
NOT_FIGURES = re.compile(
    r"SmolLM2-135M(?:-Instruct)?|smollm2-135m-instruct|gemma-3-270m|qwen2\.5-coder-[01]\.5b-instruct|Gemma-3-270M|Gemma 3|Qwen2\.5-Coder-[01]\.5B(?:-Instruct)?|\b[01]\.5B\b|SmolLM2|"
    r"Qwen[23]|H200|vLLM 0\.32|EAGLE-3|127\.0\.0\.1|Zen 5|AVX-512|C\+\+20|\b(?:135|270)M\b|\bt\(\d+(?:\.\.\d+)?(?:, ?B)?\)|[Ii]ssues? \d+|[Ss]essions? \d+|b?float(?:16|32)|bf16|avx512\w*")

UNDER_LOAD = "Under load: vLLM's OpenAI server with 1, 4 and 16 concurrent clients"  # serving.md's section titles
CPU_BUILD = "The CPU environment (vLLM's community CPU build)"
# Numbers that are not measurements, so no record holds them: (page, section, text as shown, why).
NOT_MEASURED = [
    ("README.md", "oneiro-hf", "short of the 1.15x this project aims for", "a goal, not a measurement"),
    ("README.md", "Two commands", "On a fresh machine (Python 3.10+)", "a requirement"),
    ("README.md", "Two commands", "including the 2-process training run", "what the suite runs"),
    ("README.md", "Two commands", "on the oldest supported transformers (5.18.0)", "a version"),
    ("README.md", "Two commands", ("SmolLM2-135M-Instruct (0.5 GB cached), Qwen2.5-Coder-0.5B-Instruct (about 2.0 GB: "
     "494M parameters) and Gemma-3-270M (about 1.1 GB: 268M parameters)"),
     "sizes of the reference models' caches, fixed by their pinned wheels (oneiro_hf/storage/reference_models.py)"),
    ("README.md", "Supported", "transformers 5.18 or newer (tested: 5.18.0 by", "versions"),
    ("README.md", "Supported", "5.24 and 5.25; a newer", "versions"),
    ("README.md", "Supported", "docs/design.md says why 5.18", "a version"),
    ("README.md", "Reference targets (no Hub needed)", "(Qwen2.5-Coder-1.5B-Instruct: 1.1 GB of wheels,",
     "the size of the pinned wheels (oneiro_hf/storage/reference_models.py)"),
    ("docs/benchmarks.md", "Current figures", "(the 8 MT-bench categories", "how the lanes split the questions"),
    ("docs/benchmarks.md", "Current figures", "it drafts 10 tokens whatever", ("hf-lookup's setting "
     "(oneiro_hf/bench/methods.py, HF_LOOKUP_TOKENS)")),
    ("docs/benchmarks.md", "Current figures", "(reported at 1.25-1.44x over stock greedy before)",
     "earlier runs, in git history"),
    ("docs/benchmarks.md", "Current figures", "the target was 1.15x: **missed**", "a goal"),
    ("docs/benchmarks.md", "Current figures", "at one row only the LM head can run prepacked", "a count of one"),
    ("docs/benchmarks.md", "In vLLM", "accepted by position (1, 2, 3)", "a table heading"),
    ("docs/serving.md", "What is checked when the server starts", "(`vllm>=0.32,<0.33`", "the supported release range"),
    ("docs/serving.md", "What runs where in vLLM", "(position t takes token t+1)", "notation"),
    ("docs/serving.md", "What vLLM runs, and what it does not", "inclusive; k may be 0)", "a setting's range"),
    ("docs/serving.md", "What vLLM runs, and what it does not", "window (1024 by default)", "a default setting"),
    ("docs/serving.md", "The hybrid in vLLM", "an n-gram of 2 to 4 tokens", "the default lookup bounds"),
    ("docs/serving.md", "The priced draft length", "/ t(1 + E/B, B)", "notation"),
    ("docs/serving.md", "The hybrid in vLLM", "(13 Spec-Bench questions, one request at a time",
     "the run's setting; the figures are rendered in benchmarks.md"),
    ("docs/serving.md", "Measured", "(three prompts, 48 new tokens, k = 3, float32)", "the vLLM lane's settings"),
    ("docs/serving.md", "Measured", "(within 2 drafts, or 5%, per position)", "a test's tolerance"),
    ("docs/serving.md", "Measured", "out of ascending order (3, 1, last)", "a test's setting"),
    ("docs/serving.md", "Measured", "with status 0", "an exit status"),
    ("docs/serving.md", "Measured", "(within 2e-4, float32)", "a test's tolerance"),
    ("docs/serving.md", "Backing k off by batch size", "its forward at k = 0", "a setting"),
    ("docs/serving.md", CPU_BUILD, "without a GPU (2 cores here)", "the machine"),
    ("docs/serving.md", CPU_BUILD, "about three minutes on 2 cores", "an approximate build time, not a record"),
    ("docs/serving.md", UNDER_LOAD, "with 1, 4 and 16 concurrent clients", "the levels"),
    ("docs/serving.md", UNDER_LOAD, "output tok/s at 1 / 4 / 16 clients", "a table heading"),
    ("docs/serving.md", UNDER_LOAD, "| mode | 1 client | 4 clients | 16 clients |", "a table heading"),
    ("docs/serving.md", UNDER_LOAD, "([record](benchmarks/vllm_load_qwen15_bf16/README.md): 26 questions, 64 new tokens",
     "the run's settings"),
    ("docs/serving.md", UNDER_LOAD, "cached answers at 4 and 16 clients", "the levels"),
    ("docs/serving.md", UNDER_LOAD, "up to 8 requests and almost nothing at 16, yet at 16 clients",
     "the schedule's bound and the level"),
    ("docs/serving.md", UNDER_LOAD, "pays at k = 0 too", "a setting"),
    ("docs/serving.md", UNDER_LOAD, "drafter's forward where k = 0", "a setting"),
    ("docs/serving.md", UNDER_LOAD, "The issue's `>= 1.0x` there is not shown", "the goal's level"),
    ("docs/serving.md", UNDER_LOAD, "(four more runs of the same 26 questions", "the runs' settings, as above"),
    ("docs/serving.md", UNDER_LOAD, "**The hybrid at k = 3**", "a setting"),
    ("docs/serving.md", UNDER_LOAD, "With the schedule's k = 1 its", "a setting"),
    ("docs/serving.md", UNDER_LOAD, "drafts too little at 4 requests", "a batch size"),
    ("docs/serving.md", UNDER_LOAD, "- **16 clients.** The schedule (k = 0 there)", "a level and a setting"),
    ("docs/benchmarks.md", "What we tried and what it gave", "at their 200-token contexts", "the runs' setting"),
    ("docs/benchmarks.md", "What we tried and what it gave", "averaged over about 50 attempts", "the back-off's setting then"),
    ("docs/benchmarks.md", "What we tried and what it gave", "at 4,096 cached tokens t(2) fell", "the condition"),
    ("docs/benchmarks.md", "What we tried and what it gave", "at 4k and", "the condition"),
    ("docs/benchmarks.md", "What we tried and what it gave", "at 7k tokens", "the condition"),
    ("docs/benchmarks.md", "What we tried and what it gave", "[4k old]", "a link's name"),
    ("docs/benchmarks.md", "What we tried and what it gave", "[4k new]", "a link's name"),
    ("docs/benchmarks.md", "What we tried and what it gave", "[7k old]", "a link's name"),
    ("docs/benchmarks.md", "What we tried and what it gave", "[7k new]", "a link's name"),
    ("docs/benchmarks.md", "What we tried and what it gave", ("(catch up on at most 1,024 prompt positions): the drafter's share of wall time at "
     "4,096 tokens fell"), "the setting and the condition (the run kept no record: the page says so)"),
    ("docs/benchmarks.md", "What we tried and what it gave", "`tree_topk` 8, confidence bins dense below 0.1", "settings"),
    ("docs/benchmarks.md", "What we tried and what it gave", "and 1-token lookup matches", "a setting"),
    ("docs/benchmarks.md", "What we tried and what it gave", "at 0.05 t(1) instead of the assumed 0.18", "the what-if's settings"),
    ("docs/benchmarks.md", "What we tried and what it gave", "without retraining (8,192 -> 16,384 ids)", "settings"),
    ("docs/benchmarks.md", "What we tried and what it gave", "trained with 16,384 ids", "a setting"),
    ("docs/benchmarks.md", "Modelled on an H200", "median of 15", "how the profile was taken (not in its record)"),
    ("docs/benchmarks.md", "Modelled on an H200", "**Drafter call price: 0.18 t(1), an assumption, not a measurement.**",
     "the model's assumption (oneiro_hf.bench.profile.H200_PROFILE)"),
    ("docs/benchmarks.md", "Modelled on an H200", "the 3.0-3.6 ms (0.15-0.18 t(1)) reported after it was not kept",
     "reported, not kept: the page says so"),
    ("docs/benchmarks.md", "Modelled on an H200", "and contexts other than 512 tokens", "what the model leaves out"),
    ("docs/benchmarks.md", "Modelled on an H200", "| modelled, calls at 0.18 t(1) (assumed) |", "a table heading"),
    ("docs/benchmarks.md", "Modelled on an H200", "With a call at 0.05 t(1) (a what-if:", "the what-if's setting"),
    ("docs/benchmarks.md", "What the numbers mean", "greedy's is 1.00", "a definition"),
    ("docs/benchmarks.md", "What the numbers mean", "(at a 200-token context unless", "the command's default"),
    ("docs/benchmarks.md", "What the numbers mean", "(t(2) under 0.8 t(1), or oneiro-hf's one-token pass over 1.5x the stock one's",
     "the thresholds of oneiro_hf.drafting.latency.profile_doubts"),
    ("docs/benchmarks.md", "What the numbers mean", "must reach 100%;", "the rule the tool enforces"),
    ("docs/benchmarks.md", "What the numbers mean", "exits with status 3 otherwise", "the tool's exit status"),
    ("docs/benchmarks.md", "How to repeat it", "about 100 minutes for all 13 questions", "how long to expect, not a figure"),
    ("docs/benchmarks.md", "How to repeat it", "On a 2-core machine,", "where the script applies"),
    ("docs/benchmarks.md", "How to repeat it", "(7 and 6 categories)", "how the script splits the questions"),
    ("docs/benchmarks.md", "How to repeat it", "decoding for B >= 2 left-padded prompts", "what the mode does"),
    ("docs/benchmarks.md", "How to repeat it", "then answer the 13 Spec-Bench questions (one per category", "the command's setting"),
    ("docs/benchmarks.md", "How to repeat it", "at B >= 2 are reported as", "what the tool does"),
    ("docs/benchmarks.md", "How to repeat it", "status 3 otherwise", "the tool's exit status"),
    ("docs/benchmarks.md", "Not measured yet", "Long prompts (4k and 7k tokens) on more than 3 questions each",
     "what is not measured yet"),
    ("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct", "(28 layers, hidden 1536, untied 151,936-token head,",
     "the target's architecture (its config.json)"),
    ("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct", "(AMX, 23 GiB)", "the machine's memory, from the session's notes"),
    ("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct", "(avx512_bf16, 23 GiB;", "the machine's memory, from the session's notes"),
    ("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct", "88 minutes alone on the machine", "the run's duration, from the session's log"),
    ("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct", "58 minutes alone on the machine", "the run's duration, from the session's log"),
    ("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct", "90% paired bootstrap intervals", "the intervals' level (speedup_interval_90)"),
    ("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct", "a 90% paired bootstrap interval", "the intervals' level (speedup_interval_90)"),
    ("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct", ("A likely reason, not measured: a one-token step reads the 6.2 GB of linear weights, "
     "at 40-58 GB/s on the prepacked kernels (103-155 ms) and about 20 GB/s on stock ones"),
     "an estimate the page says is not measured"),
    ("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct", "The 1.4x, 1.6x and 1.8x targets", "goals"),
    ("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct", "60% on Spec-Bench is several doublings away", "a goal"),
    ("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct", "relative copy was the rank-32 truncation", "a setting (the layer rank)"),
    ("docs/benchmarks.md", "Qwen2.5-Coder-1.5B-Instruct", "(it drafts 10 tokens whatever they cost,", "hf-lookup's setting (HF_LOOKUP_TOKENS)"),
    ("docs/benchmarks.md", "In vLLM", "so position 2 counts only where position 1 was accepted too", "an explanation"),
    ("docs/benchmarks.md", "bfloat16 (Qwen2.5-Coder-1.5B-Instruct)",
     ("(same-kernel bfloat16 greedy >= 1.6x float32, the tree >= 1.9x bfloat16 greedy)"), "goals (issue 58)"),
    ("docs/benchmarks.md", "In vLLM", "(the targets were >= 1.15x and >=", "goals"),
    ("docs/benchmarks.md", "In vLLM", "With k = 1 (record", "a setting"),
    ("docs/benchmarks.md", "In vLLM", "on a 2-core Zen 5 EPYC with avx512_bf16, quiet",
     "the machine: its core count and CPU generation (the record names it)"),
    ("docs/benchmarks.md", "Suffix memory on repeated tasks", "All on a 2-core Zen 5 EPYC with bfloat16 units",
     "the machine: its core count and CPU generation (the records name it)"),
    ("docs/benchmarks.md", "In vLLM", "at a 200-token context ([Dec 3]", "a setting and a date"),
    ("docs/gpu.md", "On a GPU (measured on one H200)", "(torch 2.11 with CUDA 13,",
     "versions"),
    ("docs/gpu.md", "Losslessness on CUDA", "(6 prompts, half of them repetitive so lookup drafts are accepted, x 3 modes",
     "the check's settings (scripts/device.sh check)"),
    ("docs/gpu.md", "Losslessness on CUDA", "13 Spec-Bench questions x 128 tokens",
     "the prepared check's settings"),
    ("docs/gpu.md", "Verification latency t(k) (bf16, 512 cached tokens, median of 15)", "Unlike this project's 2-core CPU",
     "the machine"),
    ("docs/gpu.md", "Verification latency t(k) (bf16, 512 cached tokens, median of 15)", "launch-bound at batch 1 (t(1) barely grows from 135M to 8B parameters)",
     "the batch and the models' sizes"),
    ("docs/gpu.md", "Verification latency t(k) (bf16, 512 cached tokens, median of 15)", "These profiles hold 512 cached tokens",
     "the profiles' setting, in the heading"),
    ("docs/gpu.md", "Verification latency t(k) (bf16, 512 cached tokens, median of 15)", "on this project's CPU at 4,096 cached tokens",
     "the setting of a measurement described in docs/design.md"),
    ("docs/gpu.md", "Verification latency t(k) (bf16, 512 cached tokens, median of 15)", "By arithmetic only: for Qwen3-8B in bf16 at 8,192 cached tokens the copy writes 4 x 33.5 MB per layer, about 4.8 GB per pass over 36 layers, against 16 GB of weights",
     "arithmetic from the model's shape, not a measurement"),
    ("docs/gpu.md", "Drafter step cost", "One latent step (2 copied SmolLM2 layers + an 8,192-token readout, bf16, 512 cached positions)",
     "the step's shape and setting"),
    ("docs/gpu.md", "Drafter step cost", "prices a drafter call at 0.18 t(1) as an assumption",
     "an assumption, named as one"),
    ("docs/gpu.md", "Drafter step cost", "(bf16, k up to 32, 512 cached tokens)",
     "the command's settings"),
    ("docs/gpu.md", "Drafter step cost", "for B = 1, 2, 4, 8, 16",
     "the command's settings"),
    ("docs/gpu.md", "Drafter step cost", "It should also measure t(k) up to k = 32",
     "a setting"),
    ("docs/gpu.md", "Drafter step cost", "the profile stops at 16, so the cost model keeps trees within 15 nodes",
     "the profile's range and what follows from it"),
    ("docs/gpu.md", "Self-distillation data in minutes", "2-core CPU (one thread)",
     "the machine"),
    ("docs/gpu.md", "What the leases measured", "Two leases on 2026-11-30",
     "a date"),
    ("docs/gpu.md", "Leases: carrying the work", "A lease here is 15 minutes of device time, all calls together, and a call carries at most 64 MiB",
     "the lending rules"),
    ("docs/gpu.md", "Leases: carrying the work", "(a warm machine goes back after 30 s idle)",
     "the lending rules"),
    ("docs/gpu.md", "Leases: carrying the work", "a file comes back only up to 16 MiB, at most 8 files and 64 MiB in all, so drafters come in 15 MiB tar pieces",
     "the lending rules and the script's piece size"),
    ("docs/gpu.md", "Leases: carrying the work", "with the 16,384-token vocabulary",
     "a setting"),
    ("docs/gpu.md", "Leases: carrying the work", "(default 200 s in",
     "a setting"),
    ("docs/gpu.md", "The 1.5B campaign on a lease", "for a model 11 times larger",
     "the models' sizes"),
    ("docs/gpu.md", "The 1.5B campaign on a lease", "what takes this 2-core CPU a session",
     "the machine"),
    ("docs/gpu.md", "The 1.5B campaign on a lease", "a 1,117,320,768-byte GGUF",
     "the reference model's file size, pinned in its spec"),
    ("docs/gpu.md", "The 1.5B campaign on a lease", "and a call carries 64 MiB",
     "the lending rules"),
    ("docs/gpu.md", "The 1.5B campaign on a lease", "(150), then trains",
     "a setting"),
    ("docs/gpu.md", "The 1.5B campaign on a lease", "(batch 32, up to 4,000 steps,",
     "settings"),
    ("docs/gpu.md", "The 1.5B campaign on a lease", "(570 s) less",
     "a setting"),
    ("docs/design.md", 'The pieces', 'one loop of trees and batches (`oneiro_tree=True`, or 2+ prompts)',
     'a count of prompts'),
    ("docs/design.md", 'The pieces', 'a 4-D mask per layer type',
     "a tensor's rank"),
    ("docs/design.md", 'The pieces', '(bfloat16 and float16 targets by default, `exact=True` for float32)',
     'dtypes'),
    ("docs/design.md", 'The pieces', '(16-bit linear layers on CPUs without 16-bit units',
     "a dtype's width"),
    ("docs/design.md", 'The pieces', '16-bit layers to it',
     "a dtype's width"),
    ("docs/design.md", 'The pieces', '(format 2)',
     "a checkpoint format's number"),
    ("docs/design.md", 'The pieces', '(stages 1/2: losses, Trainer)',
     "the stages' names"),
    ("docs/design.md", 'The pieces', '(stage 3, reusing the pipeline)',
     "a stage's name"),
    ("docs/design.md", 'The pieces', 'stage 0, train and evaluate, save',
     "a stage's name"),
    ("docs/design.md", 'How a draft token is born', '1. **Which hidden state.**',
     'list numbering'),
    ("docs/design.md", 'How a draft token is born', '2. **Which layers.**',
     'list numbering'),
    ("docs/design.md", 'How a draft token is born', '3. **Which cache.**',
     'list numbering'),
    ("docs/design.md", 'How a draft token is born', '4. **The readout.**',
     'list numbering'),
    ("docs/design.md", 'How a draft token is born', '5. **Contextual reuse (hybrid).**',
     'list numbering'),
    ("docs/design.md", 'How a draft token is born', '6. **How much.**',
     'list numbering'),
    ("docs/design.md", 'How a draft token is born', '(default 1024)',
     'a default'),
    ("docs/design.md", 'How a draft token is born', '(1024) tokens',
     'a training setting'),
    ("docs/design.md", 'How a draft token is born', '(top-1 for a chain)',
     'a setting'),
    ("docs/design.md", 'How a draft token is born', "(14 bins, dense below 0.1, where a tree's siblings fall)",
     "the calibration's bins, settings"),
    ("docs/design.md", 'How a draft token is born', 'so on a CPU where verifying 4 tokens costs less than verifying 2',
     'an example'),
    ("docs/design.md", 'How a draft token is born', 'averaged over about 50 attempts',
     "the back-off's window, a setting"),
    ("docs/design.md", 'How a draft token is born', 'retrying after 8 steps, then 16, up to 128',
     "the back-off's retry schedule, settings"),
    ("docs/design.md", 'Suffix memory across requests (`suffix_memory`, an option)', "the prompt's last 8 tokens as context",
     "the memory's context bound, a setting"),
    ("docs/design.md", 'Suffix memory across requests (`suffix_memory`, an option)', 'For each context of 1..8 tokens',
     "the memory's context bound, a setting"),
    ("docs/design.md", 'Suffix memory across requests (`suffix_memory`, an option)', '(4 at most per node)',
     'a setting'),
    ("docs/design.md", 'Suffix memory across requests (`suffix_memory`, an option)', 'at least 0.5 go in before',
     'a setting'),
    ("docs/design.md", 'Suffix memory across requests (`suffix_memory`, an option)', 'count / (total + 1)',
     'a formula'),
    ("docs/design.md", 'Suffix memory across requests (`suffix_memory`, an option)', 'length, 1, 2, 3 or 4+)',
     "the calibration's bins"),
    ("docs/design.md", 'Suffix memory across requests (`suffix_memory`, an option)', 'tokens (16,384)',
     'a default'),
    ("docs/design.md", 'Suffix memory across requests (`suffix_memory`, an option)', 'at most 8 contexts per kept token',
     'the context bound, a setting'),
    ("docs/design.md", 'Suffix memory across requests (`suffix_memory`, an option)', '(0.3.0)',
     'a version'),
    ("docs/design.md", 'Suffix memory across requests (`suffix_memory`, an option)', 'torch >= 2.10',
     'a version'),
    ("docs/design.md", 'Suffix memory across requests (`suffix_memory`, an option)', 'on these 2-core CPUs',
     'the machine'),
    ("docs/design.md", 'Suffix memory across requests (`suffix_memory`, an option)', 'about 150 lines',
     "the module's size"),
    ("docs/design.md", 'Multi-layer input (`input_layers`, an option)', ': 0 the embeddings',
     'an index'),
    ("docs/design.md", 'Multi-layer input (`input_layers`, an option)', 'transformers 5.24 returns',
     'a version'),
    ("docs/design.md", 'Multi-layer input (`input_layers`, an option)', 'transformers 5.18 reads',
     'a version'),
    ("docs/design.md", 'Multi-layer input (`input_layers`, an option)', 'so below 5.24 the drafter',
     'a version'),
    ("docs/design.md", 'Multi-layer input (`input_layers`, an option)', 'a multi-layer drafter on 5.18 would',
     'a version'),
    ("docs/design.md", 'Multi-layer input (`input_layers`, an option)', 'releases 5.19-5.23',
     'versions'),
    ("docs/design.md", 'Multi-layer input (`input_layers`, an option)', 'step 1 of a rollout',
     "a step's index"),
    ("docs/design.md", 'Exact verified context (`verified_context="exact"`, an option)', 'its own step-1 key',
     "a step's index"),
    ("docs/design.md", 'How it is judged', '(SmolLM2 has 9 query heads on 3 key/value heads: at a 4,096-token context the copy made a 2-token pass',
     "the model's shape and the setting of a measurement whose profiles were not kept"),
    ("docs/design.md", 'How it is judged', 'at 1-16 rows',
     "the rule's row range, a setting"),
    ("docs/design.md", 'How it is judged', 'never saves 5%',
     "the rule's threshold, a setting"),
    ("docs/design.md", 'How it is judged', 'inside the first 4-token pass',
     'an example'),
    ("docs/design.md", 'How it is judged', 'On the 2-core AMD EPYC',
     'the machine'),
    ("docs/design.md", 'How it is judged', 'the 12,288-token readout',
     "the drafter's vocabulary, a setting"),
    ("docs/design.md", 'How it is judged', 'with 75 MB of float32 weights',
     "arithmetic from the readout's shape"),
    ("docs/design.md", 'How it is judged', 'reads about 450 MB of weights',
     "arithmetic from the step's shapes"),
    ("docs/design.md", 'Exact by construction', '(measured on a 2-core AMD EPYC, torch 2.13;',
     'the machine and a version'),
    ("docs/design.md", 'Exact by construction', 'inside a 4-query call',
     'an example'),
    ("docs/design.md", 'Exact by construction', '(one polynomial, about 2 ulp)',
     "the exponential's accuracy, by its construction"),
    ("docs/design.md", 'Exact by construction', 'chain, tree and a batch of 4 identical to greedy',
     'what a test checks'),
    ("docs/design.md", 'Exact by construction', 'a k-token pass gives each row the logits of k one-token steps',
     'what a test checks'),
    ("docs/design.md", 'Exact by construction', 'from 2-3 rows and those differently from 4 or more',
     'row counts'),
    ("docs/design.md", 'Exact by construction', '(1e-7)',
     "float32's rounding, an order of magnitude"),
    ("docs/design.md", 'Exact by construction', 'calls of 1 to 33 rows, at the start of an input and further in, against one call of 40',
     "the check's settings"),
    ("docs/design.md", 'Exact by construction', '(avx512_bf16/AMX, avx512_fp16/AMX-FP16)',
     'instruction sets'),
    ("docs/design.md", 'Exact by construction', 'AMD before Zen 4',
     'a CPU generation'),
    ("docs/design.md", 'Exact by construction', 'every 16-bit linear runs',
     "a dtype's width"),
    ("docs/design.md", 'Exact by construction', '(eight lanes over the columns k = j mod 8',
     "the kernel's layout"),
    ("docs/design.md", 'Exact by construction', '(three rows by four outputs; a single row takes eight), which rows share a cached chunk (48)',
     "the kernel's layout"),
    ("docs/design.md", 'Exact by construction', '(hypothesis: padding, holes, tree ancestors, batches, GQA, three dtypes)',
     'what a test covers'),
    ("docs/design.md", 'Batches', '(`EngineView.for_chain`: top-1 below each node',
     'a setting'),
    ("docs/design.md", 'Batches', 'is (B, 1, W, cached + W)',
     "a tensor's shape"),
    ("docs/design.md", 'Batches', 'exceeds 1/8 of the columns',
     'a setting'),
    ("docs/design.md", 'Batches', "picks width 0 (no row's draft pays)",
     'a width'),
    ("docs/design.md", 'Batches', 'the 2-D attention mask',
     "a tensor's rank"),
    ("docs/design.md", 'Batches', 'a 4-D mask)',
     "a tensor's rank"),
    ("docs/design.md", 'Batches', 'over t(n + 1, B), 0 (a plain step) included',
     'a formula'),
    ("docs/design.md", 'Which transformers releases (`compat.py`)', 'exists since 5.8.0. Releases 5.8-5.17',
     'versions'),
    ("docs/design.md", 'Which transformers releases (`compat.py`)', 'catches it on 5.8.0; the code is in every wheel up to 5.17.0 and gone from 5.18.0',
     'versions'),
    ("docs/design.md", 'Which transformers releases (`compat.py`)', 'below 5.18.0',
     'a version'),
    ("docs/design.md", 'Which transformers releases (`compat.py`)', 'tested minor (5.25)',
     'a version'),
    ("docs/design.md", 'Which transformers releases (`compat.py`)', '- 5.25 reads',
     'a version'),
    ("docs/design.md", 'Which transformers releases (`compat.py`)', '(5.25.0, with the',
     'a version'),
    ("docs/design.md", 'Which transformers releases (`compat.py`)', "against 5.24's keywords; below 5.24.0",
     'versions'),
    ("docs/design.md", 'Which transformers releases (`compat.py`)', 'works from 5.18)',
     'a version'),
    ("docs/design.md", 'Which transformers releases (`compat.py`)', 'on transformers 5.18.0',
     'a version'),
    ("docs/training.md", 'Gemma-3-270M: the second architecture (shipped: `drafters/gemma-3-270m`)',
     '(18 layers, hidden 640, vocabulary 262,144, tied embeddings, five sliding-window layers of 512 tokens to each full-attention one)',
     "the model's shape (its config)"),
    ("docs/training.md", 'Gemma-3-270M: the second architecture (shipped: `drafters/gemma-3-270m`)',
     'one Qwen layer (hidden 896, MLP 4,864) is 28.4 MiB in bf16, so no Qwen drafter with two copied layers stays under 30 MiB, while a Gemma layer is 10.6 MiB',
     "arithmetic from the models' shapes, and the size asked of a drafter"),
    ("docs/training.md", 'Gemma-3-270M: the second architecture (shipped: `drafters/gemma-3-270m`)',
     'the drafter with layers 16-17 copied',
     'the layers copied, a setting'),
    ("docs/training.md", 'Gemma-3-270M: the second architecture (shipped: `drafters/gemma-3-270m`)',
     '(id 1,',
     'a token id'),
    ("docs/training.md", 'Gemma-3-270M: the second architecture (shipped: `drafters/gemma-3-270m`)',
     'the rest ran to the 192-token limit',
     'a setting'),
    ("docs/training.md", 'Gemma-3-270M: the second architecture (shipped: `drafters/gemma-3-270m`)',
     'The drafter copies layers 16-17 (16: sliding window, 17: full attention)',
     'the layers copied, a setting'),
    ("docs/training.md", 'Gemma-3-270M: the second architecture (shipped: `drafters/gemma-3-270m`)',
     '| checkpoint | agree@1 | P(first 2) | P(first 3) | P(first 4) | P(first 5) | tau (5 steps) |',
     "the table's header"),
    ("docs/training.md", 'Gemma-3-270M: the second architecture (shipped: `drafters/gemma-3-270m`)',
     "The base model's answers repeat themselves within 192 tokens",
     'a setting'),
    ("docs/training.md", 'Gemma-3-270M: the second architecture (shipped: `drafters/gemma-3-270m`)',
     '(benchmarks.md, 13 questions, 128 tokens',
     "the run's settings"),
    ("docs/training.md", 'Gemma-3-270M: the second architecture (shipped: `drafters/gemma-3-270m`)',
     'ran in batches of 64 on one thread',
     'a setting'),
    ("docs/training.md", 'Gemma-3-270M: the second architecture (shipped: `drafters/gemma-3-270m`)',
     'since the vocabulary needs more than 16 bits',
     'an integer width'),
    ("docs/training.md", 'Gemma-3-270M: the second architecture (shipped: `drafters/gemma-3-270m`)',
     'with the last two layers (16, sliding window; 17, full attention), draft vocabulary 8,192 (16,384 would double the readout cost per draft step), ridge init, stage 1 then stage 2 (K=4), 1,200 steps of batch 8',
     "the recipe's settings"),
    ("docs/training.md", 'Gemma-3-270M: the second architecture (shipped: `drafters/gemma-3-270m`)',
     '(features, ridge init, stages 1 and 2, held-out evaluation, save)',
     'stage names'),
    ("docs/training.md", 'Gemma-3-270M: the second architecture (shipped: `drafters/gemma-3-270m`)',
     'longer than the 512-token window, with hybrid and fixed 3-token latent drafts',
     'settings'),
    ("docs/training.md", 'Results on SmolLM2-135M-Instruct: no gain, not shipped',
     'held-out evaluation after stage 3)',
     "a stage's number"),
    ("docs/training.md", 'Results on SmolLM2-135M-Instruct: no gain, not shipped',
     '| method | drafter then shipped | after stage 3 |',
     "the table's header"),
    ("docs/training.md", 'Results on SmolLM2-135M-Instruct: no gain, not shipped',
     'So stage 3 as run here is not shipped.',
     "a stage's number"),
    ("docs/training.md", 'Results on SmolLM2-135M-Instruct: no gain, not shipped',
     '(1) the per-batch mix ratio (above) gives the one or two fully accepted chains in a batch 30% of the loss; (2) with 5-token collection drafts',
     "list numbering and the run's settings (1 - its mix ratio 0.7, its draft length)"),
    ("docs/training.md", 'Results on SmolLM2-135M-Instruct: no gain, not shipped',
     'shorter drafts (2-3) would balance it; (3) 80 prompts and 60 steps',
     "the settings to try and the run's settings (2 rounds of 40 prompts and 30 steps)"),
    ("docs/training.md", 'The data as a dataset, kept in the repository',
     'parquet shards `data/train-NNNNN.parquet` of 500 records',
     'the shard size, a setting'),
    ("docs/training.md", 'The data as a dataset, kept in the repository',
     '(uint16 when the vocabulary has at most 65,536 tokens, else uint32)',
     'integer widths'),
    ("docs/training.md", 'The data as a dataset, kept in the repository',
     '(at most 500 records)',
     'the shard size, a setting'),
    ("docs/training.md", 'The data as a dataset, kept in the repository',
     'decodes batches of 32 left-padded',
     'a setting'),
    ("docs/training.md", 'The data as a dataset, kept in the repository',
     'the same command with batches of 512 on an H200',
     'a setting'),
    ("docs/training.md", 'Qwen2.5-Coder-0.5B-Instruct: the command and the expected time (not trained yet)',
     '(24 layers, hidden 896, vocabulary 151,936, so a reduced draft vocabulary matters more: the full readout is 151,936 x 896)',
     "the model's shape (its config)"),
    ("docs/training.md", 'Qwen2.5-Coder-0.5B-Instruct: the command and the expected time (not trained yet)',
     'generating 1,200 answers of up to 256 tokens',
     "the command's settings"),
    ("docs/training.md", 'Multi-layer input: how to run it',
     'after layers 7 and 15',
     'the layers, a setting'),
    ("docs/training.md", 'Multi-layer input: how to run it',
     'stages 1, 2 and 3 feed',
     'stage numbers'),
    ("docs/training.md", 'Multi-layer input: how to run it',
     'beside the 1.1 kB of final states): such a cache is format 2',
     'arithmetic from the hidden size, and a format number'),
    ("docs/training.md", 'Multi-layer input: how to run it',
     'agree@1..5',
     'draft positions'),
    ("docs/training.md", 'Stage 3: on-policy refinement',
     'Stages 1 and 2 start every draft',
     'stage numbers'),
    ("docs/training.md", 'Stage 3: on-policy refinement',
     'Stage 3 (`oneiro_hf/training/onpolicy.py`',
     'a stage number'),
    ("docs/training.md", 'Stage 3: on-policy refinement',
     "Stage 2's parallel rollouts",
     'a stage number'),
    ("docs/training.md", 'Stage 3: on-policy refinement',
     '(with 5-token drafts on SmolLM2',
     "the run's draft length, a setting"),
    ("docs/training.md", 'Stage 3: on-policy refinement',
     '(rejected : accepted = mix : 1 - mix)',
     'a formula'),
    ("docs/training.md", 'Stage 3: on-policy refinement',
     "Prompts are records after index 1,200 (the drafter then shipped was trained on the first 1,108); the held-out set is that drafter's own 29 records.",
     "the run's data split (its command's --onpolicy_prompt_offset; the refined drafter's split)"),
    ("docs/training.md", 'Earlier SmolLM2 drafters',
     'one trained on this 2-core CPU',
     'the machine'),
    ("docs/training.md", 'The second lease: learning curve, ablations, and the drafters now shipped',
     'One lease of 15 minutes of an H200',
     'the lending rule'),
    ("docs/training.md", 'The second lease: learning curve, ablations, and the drafters now shipped',
     'interval 28-30, draft vocabulary 8,192, ridge init, stage 1 then stage 2 with K=4 rollouts from 60% of the steps, batch 32, learning rate 3e-4 cosine to 3e-5',
     "the recipe's settings (scripts/recipe.sh)"),
    ("docs/training.md", 'The second lease: learning curve, ablations, and the drafters now shipped',
     '(5-step drafts from true states)',
     "the evaluation's setting"),
    ("docs/training.md", 'The second lease: learning curve, ablations, and the drafters now shipped',
     '(a learning curve on 1,000 and 4,000 records, 6-step rollouts, a token-heavy loss, a 16,384-token draft vocabulary',
     "the variants' settings"),
    ("docs/training.md", 'The second lease: learning curve, ablations, and the drafters now shipped',
     '| variant | training records | steps (epochs) | agree@1 | P(first 2) | P(first 3) | tau (5 steps) |',
     "the table's header"),
    ("docs/training.md", 'The second lease: learning curve, ablations, and the drafters now shipped',
     'the states after layers 7 and 15',
     'the layers, a setting'),
    ("docs/training.md", 'The second lease: learning curve, ablations, and the drafters now shipped',
     '**A 16,384-token draft vocabulary**',
     'a setting'),
    ("docs/training.md", 'The second lease: learning curve, ablations, and the drafters now shipped',
     '(4.7M of 13.1M), so each step gets about 36% dearer',
     "arithmetic from the drafter's shapes"),
    ("docs/training.md", 'The second lease: learning curve, ablations, and the drafters now shipped',
     '**6-step rollouts',
     'a setting'),
    ("docs/training.md", 'The second lease: learning curve, ablations, and the drafters now shipped',
     'with a 16k vocabulary',
     'a setting'),
    ("docs/training.md", "The drafter's verified context: its own keys, or exact ones (CPU)",
     "the target's input to layer 28",
     'a layer index'),
    ("docs/training.md", "The drafter's verified context: its own keys, or exact ones (CPU)",
     'keys and values of layers 28-29',
     'layer indices'),
    ("docs/training.md", "The drafter's verified context: its own keys, or exact ones (CPU)",
     'Position 0 is in the context too',
     'a position index'),
    ("docs/training.md", "The drafter's verified context: its own keys, or exact ones (CPU)",
     'true inputs of layers 28-29',
     'layer indices'),
    ("docs/training.md", "The drafter's verified context: its own keys, or exact ones (CPU)",
     '512 tokens at most)',
     "the split's length cap, a setting"),
    ("docs/training.md", "The drafter's verified context: its own keys, or exact ones (CPU)",
     'Evaluation: 5-step drafts from true states',
     "the evaluation's setting"),
    ("docs/training.md", "The drafter's verified context: its own keys, or exact ones (CPU)",
     'with K=4 rollouts throughout, learning rate 3e-4 cosine, one thread each',
     "the arms' settings"),
    ("docs/training.md", "The drafter's verified context: its own keys, or exact ones (CPU)",
     '| arm | start | agree@1 | P(first 2) | P(first 3) | tau (5 steps) |',
     "the table's header"),
    ("docs/training.md", "The drafter's verified context: its own keys, or exact ones (CPU)",
     'fixed 3-token latent drafts, one thread;',
     "the run's settings"),
    ("docs/training.md", "The drafter's verified context: its own keys, or exact ones (CPU)",
     '| variant | tau | acceptance by position (1 / 2 / 3) | speedup |',
     "the table's header"),
    ("docs/training.md", "The drafter's verified context: its own keys, or exact ones (CPU)",
     'On the 2-core AMD EPYC, quiet, 2 threads,',
     'the machine and the thread count'),
    ("docs/training.md", "The drafter's verified context: its own keys, or exact ones (CPU)",
     'with 3-token latent drafts',
     'a setting'),
    ("docs/training.md", 'Exact verified context in the library',
     "2 x 576 x 2 bytes = 2.3 kB per SmolLM2 token beside the multi-layer input's 3.5 kB",
     'arithmetic from the hidden size'),
    ("docs/training.md", 'Exact verified context in the library',
     'its own step-1 key',
     "a step's index"),
    ("docs/training.md", 'Exact verified context in the library',
     '(stage 2 with K=4 rollouts from step 144)',
     "the recipe's stage switch, a setting"),
    ("docs/training.md", 'Exact verified context in the library',
     '5-step drafts from true states',
     "the evaluation's setting"),
    ("docs/training.md", 'Exact verified context in the library',
     '| checkpoint | own: agree@1 | own: tau | exact: agree@1 | exact: tau |',
     "the table's header"),
    ("docs/training.md", 'Exact verified context in the library',
     'after stage 1 (144 steps)',
     'the stage switch, a setting'),
    ("docs/training.md", 'Exact verified context in the library',
     'fixed 3-token latent drafts',
     'a setting'),
    ("docs/training.md", 'The pipeline',
     '1. **Self-distillation data**',
     'list numbering'),
    ("docs/training.md", 'The pipeline',
     '2. **Draft vocabulary**',
     'list numbering'),
    ("docs/training.md", 'The pipeline',
     '3. **Features**',
     'list numbering'),
    ("docs/training.md", 'The pipeline',
     '4. **Stage 0, ridge initialisation**',
     'list numbering and a stage number'),
    ("docs/training.md", 'The pipeline',
     '5. **Stage 1** (teacher-forced)',
     'list numbering and a stage number'),
    ("docs/training.md", 'The pipeline',
     '6. **Stage 2** (joint rollouts)',
     'list numbering and a stage number'),
    ("docs/training.md", 'The pipeline',
     '7. The CLI saves',
     'list numbering'),
    ("docs/training.md", 'The pipeline',
     'about 3 KiB a token for a 1,536-wide target, so 1M answer tokens and their prompts are about 5 GiB; a build that would not fit on the disk with 2 GiB to spare',
     'arithmetic from the hidden size, and the disk margin, a setting'),
    ("docs/training.md", 'The pipeline',
     'per-step top-1 agreement',
     'top-1, a setting'),
    ("docs/training.md", 'The pipeline',
     'stage 3 adds its per-round collection table',
     'a stage number'),
    ("docs/training.md", 'The pipeline',
     '(checkpoint format 2,',
     'a format number'),
    ("docs/training.md", 'The pipeline',
     'with stage 1, 2 or 1+2;',
     'stage numbers'),
    ("docs/training.md", 'The pipeline',
     'shared with stage 3)',
     'a stage number'),
    ("docs/training.md", 'The pipeline',
     '(the schedule starts again, stage 1 first',
     'a stage number'),
    ("docs/training.md", 'Ablation (SmolLM2, equal budget)',
     'interval 28-30, layers copied from the target, ridge init, stage 1 then stage 2 with K=4)',
     "the recipe's settings"),
    ("docs/training.md", 'Ablation (SmolLM2, equal budget)',
     'the phase-1 drafter (`scripts/train_smollm2.sh phase1`) is the baseline',
     "a phase's number"),
    ("docs/training.md", 'Ablation (SmolLM2, equal budget)',
     'drafts 3 latent tokens at every step',
     'a setting'),
    ("docs/training.md", 'Ablation (SmolLM2, equal budget)',
     '| variant | latent, 3 tokens every step: tau | its speedup | hybrid: tau | hybrid speedup |',
     "the table's header"),
    ("docs/training.md", 'Ablation (SmolLM2, equal budget)',
     '(3-token latent drafts above)',
     'a setting'),
    ("docs/training.md", 'Ablation (SmolLM2, equal budget)',
     'layers 14-16 must learn',
     'layer indices'),
    ("docs/training.md", 'Ablation (SmolLM2, equal budget)',
     '**Stage 2 made no difference at this budget**',
     'a stage number'),
    ("docs/training.md", 'Ablation (SmolLM2, equal budget)',
     "With more data (phase 2, the same record's final evaluations)",
     "a phase's number"),
    ("docs/training.md", 'Ablation (SmolLM2, equal budget)',
     'mostly drafts 1-3 latent tokens',
     'an example'),
    ("docs/training.md", 'Ablation (SmolLM2, equal budget)',
     '(e.g. 24-26, 3-layer 27-30)',
     'layer indices not run'),
    ("docs/bring_your_own_target.md", "4. How long a draft: the latency profile", "(default 8; per call",
     "a default"),
    ("docs/bring_your_own_target.md", "4. How long a draft: the latency profile",
     "| 2-core CPU, SmolLM2-135M fp32,", "the machine (the profile's own fields name it)"),
    ("docs/verification.md", 'Verification criteria',
     'a pass over k+1 positions',
     'a count in a formula'),
    ("docs/verification.md", 'Verification criteria',
     '(differences near 1e-7)',
     "float32's rounding, an order of magnitude"),
    ("docs/verification.md", 'Settings',
     'integer >= 1 |',
     "a setting's range"),
    ("docs/verification.md", 'Settings',
     'number in (0, 1] |',
     "a setting's range"),
    ("docs/verification.md", 'Settings',
     'finite number >= 0 (nats)',
     "a setting's range"),
    ("docs/verification.md", 'Settings',
     'a threshold outside (0, 1]',
     "a setting's range"),
    ("docs/verification.md", 'How it works',
     '1. Before acceptance',
     'list numbering'),
    ("docs/verification.md", 'How it works',
     '2. In greedy mode',
     'list numbering'),
    ("docs/verification.md", 'Tests',
     'with k=1 and `threshold` with t=1.0',
     'the tested settings'),
    ("docs/verification.md", 'Tests',
     '(50 derandomized examples)',
     "the test's size"),
    ("docs/verification.md", 'Tests',
     'more with k=3',
     'a tested setting'),
    ("docs/verification.md", 'Tests',
     '(alpha = 0.001, 3000 seeded draws, vocab 32)',
     "the test's settings"),
    ("docs/verification.md", 'Tree verification',
     'matches of `lookup_min_ngram` tokens or more, 2 by default',
     'a default'),
    ("docs/verification.md", 'Tree verification',
     'down to `tree_lookup_min_ngram` (default 1)',
     'a default'),
    ("docs/verification.md", 'Tree verification',
     'A chain keeps 2',
     'a setting'),
    ("docs/verification.md", 'Tree verification',
     "(EAGLE-2's dynamic",
     "a method's name"),
    ("docs/verification.md", 'Tree verification',
     'the bins dense below 0.1 so that a rank-8 sibling is not priced like a rank-2 one',
     "the calibration's bins, settings"),
    ("docs/verification.md", 'Tree verification',
     'where t(4) jumps (a 2-core CPU)',
     'an example and the machine'),
    ("docs/verification.md", 'Tree verification',
     'position ids `T-1 + depth` (siblings share a position) and a 4-D mask',
     "a formula and a tensor's rank"),
    ("docs/verification.md", 'Tree verification',
     'transformers 5.24 passes a 4-D mask through unchanged',
     "a version and a tensor's rank"),
    ("docs/verification.md", 'Tree verification',
     'and a drafter step of 0.18 t(1), assumed, not measured',
     'an assumption, named as one'),
    ("docs/verification.md", 'Tree verification',
     'window 4 with branches deeper than it',
     "a test's setting"),
    ("docs/verification.md", 'Tree verification',
     '1,000 Hypothesis cases (200 per architecture',
     "the test's size"),
    ("docs/reliability.md", 'Losslessness on random cases',
     'draws 1050 cases, 210 for each supported architecture',
     "the property test's size"),
    ("docs/reliability.md", 'Losslessness on random cases',
     '(2 to 4 layers, hidden 32/64, vocab 64/96/128, sliding windows 3/4,',
     "the tiny targets' shapes"),
    ("docs/reliability.md", 'Losslessness on random cases',
     '1..10,',
     "a drawn setting's range"),
    ("docs/reliability.md", 'Losslessness on random cases',
     '1..24 and EOS',
     "a drawn setting's range"),
    ("docs/reliability.md", 'Losslessness on random cases',
     'at least 40% of cases had drafts accepted',
     "the test's threshold"),
    ("docs/reliability.md", 'Losslessness on random cases',
     'run on tokens 1..p (it never sees token 0)',
     'token positions'),
    ("docs/reliability.md", 'Losslessness on random cases',
     'On full-attention layers token 0 always matters',
     'a token position'),
    ("docs/reliability.md", 'Memory across many generate calls',
     '(on its EPYC, the 192x576 key/value projections keep none: about 27 MB less)',
     'a weight shape and arithmetic from it'),
    ("docs/reliability.md", 'Memory across many generate calls',
     'the last row is the same run with them (2 threads,',
     "the run's thread count"),
    ("docs/reliability.md", 'Memory across many generate calls',
     'runs 500 consecutive calls with one drafter, varying prompt (1 to 340 tokens for the tiny target, so the drafter KV cache has to grow past its initial 256 positions)',
     "the benchmark's settings"),
    ("docs/reliability.md", 'Memory across many generate calls',
     'at calls 1, 10, 100, 250 and 500:',
     "the benchmark's checkpoints"),
    ("docs/reliability.md", 'Memory across many generate calls',
     'Results (CPU, 1 torch thread,',
     "the run's thread count"),
    ("docs/reliability.md", 'Memory across many generate calls',
     '| target | call 1 | call 10 | call 100 | call 250 | call 500 | growth 10 -> 500 |',
     "the table's header"),
    ("docs/reliability.md", 'Memory across many generate calls',
     'unchanged after call 100; the policy now keeps up to 4 positions per n-gram length and 14 confidence bins',
     "a checkpoint and the policy's settings"),
    ("docs/reliability.md", 'Memory across many generate calls',
     'over 90 varied calls',
     "the test's size"),
    ("docs/reliability.md", 'Long contexts',
     'so a 7k-token prompt costs',
     'an example'),
    ("docs/reliability.md", 'Long contexts',
     '(SmolLM2, 2 copied layers, 3 KV heads x 64, fp32: about 3 kB a position, 25 MB at 8192)',
     "arithmetic from the drafter's shape"),
    ("docs/reliability.md", 'Long contexts',
     'in chunks of 1,024 positions',
     'a setting'),
    ("docs/reliability.md", 'Long contexts',
     '(CPU, 1 thread, random states,',
     "the script's settings"),
    ("docs/reliability.md", 'Long contexts',
     '(1024) that first catch-up feeds only the latest 1,024 verified positions',
     'a default'),
    ("docs/reliability.md", 'Long contexts',
     '(SmolLM2: 8192)',
     "the model's position limit"),
    ("docs/reliability.md", 'Long contexts',
     'whose position limit is 192 (prompts of 48, 96 and 168 tokens stand for 2k, 4k and 7k of 8k;',
     "the test's settings"),
    ("docs/reliability.md", 'Long contexts',
     'chunks of 16 so the chunking runs',
     'a test setting'),
    ("docs/reliability.md", 'Long contexts',
     'on a 2,000-token prompt',
     'a test setting'),
    ("docs/reliability.md", 'Long contexts',
     ', 8 new tokens). Speed at 4k',
     'test and benchmark settings'),
    ("docs/hub.md", "Publish", "exits 1 with the drafter saved", "an exit status"),
    ("docs/hub.md", "Which targets a drafter accepts", "Values share a scale in blocks of 32 (16 for Q6_K)",
     "the GGUF formats' block sizes"),
    ("docs/hub.md", "Which targets a drafter accepts", "At most 2 of the 64 samples of a tensor may miss",
     "the binding rule's tolerance (storage/fingerprint.py)"),
    ("docs/hub.md", "Which targets a drafter accepts", ("a K-quant cell is about a fifteenth of its block's range at 4 "
     "bits, a 63rd at 6 bits"), "what 4- and 6-bit levels are"),
    ("docs/hub.md", "Which targets a drafter accepts", "listing each differing tensor (how many of its 64 values differ",
     "the fingerprint's sample count, rendered above"),
    ("docs/hub.md", "Which targets a drafter accepts", "saved by oneiro-hf 0.1.0 has no fingerprint", "a version"),
    ("docs/hub.md", "Which targets a drafter accepts", ("every quantized value moved by up to 0.4 of its block's step "
     "(binds), then changed like a fine-tune, every weight by up to 2% of its value (refused), then moved by up to 3 "
     "steps (refused)"), "the test's settings (tests/test_identity_quantized.py)"),
    ("docs/hub.md", "Compatibility rule", "A reader loads every format from 1 up to its own", "format numbers"),
    ("docs/hub.md", "Compatibility rule", 'oneiro-hf 0.1.0 wrote the format as the string', "a version"),
    ("docs/hub.md", "Compatibility rule", '("1") and compared it as an integer', "a format number"),
    ("docs/hub.md", "Compatibility rule", "so 0.1.0 also refuses newer formats", "a version"),
    ("docs/hub.md", "Compatibility rule", "a config with neither is format 1", "a format number"),
    ("docs/hub.md", "Compatibility rule", "**Format 1** (whole weights)", "a format number"),
    ("docs/hub.md", "Compatibility rule", "**Format 2** (target-relative", "a format number"),
    ("docs/hub.md", "Target-relative checkpoints", "writes it whole (format 1)", "a format number"),
    ("docs/hub.md", "Target-relative checkpoints", "truncated to rank 32 / token rank 256 after training",
     "the ranks, a setting"),
    ("docs/benchmarks.md", "Suffix memory on repeated tasks", "arctic, `max_spec_factor` 4 |",
     "a setting of arctic-inference's drafts (versus_arctic.py)"),
    ("docs/benchmarks.md", "Chain or tree: the default", "On this CPU a pass of 4 or 5 tokens costs no more",
     "checked in tests/doc_figures.py (default_mode: t(4), t(5) <= t(1))"),
    ("docs/benchmarks.md", "Batches (SmolLM2-135M-Instruct)", ("first turns), 128 new tokens, one thread per lane, two "
     "lanes side by side (B = 1, 2, 4 | 8, 16)"), "the run's settings (run_config.json)"),
]



def sections(page: Path) -> dict[str, str]:
    """Each heading's text (the heading without its #s) -> the lines below it up to the next heading."""
    found, name, lines, in_code = {}, "", [], False
    for line in page.read_text().splitlines():
        in_code ^= line.startswith("```")
        if line.startswith("#") and not in_code:
            found[name], name, lines = "\n".join(lines), line.lstrip("#").strip(), []
        else:
            lines.append(line)
    found[name] = "\n".join(lines)
    return found


def normalized(text: str) -> str:
    return " ".join(text.split())


SETTINGS_HEADER = "| per-call keyword | config field | default |"  # rendered from the code: tests/test_docs.py


def _without_checked_tables(text: str) -> str:
    """The text less the method tables that test_each_table_cell_is_its_summary_rounded checks cell by cell, and
    the settings table, which tests/test_docs.py renders from the settings' declarations."""
    kept, in_table = [], False
    for line in text.splitlines():
        if line.startswith("| method |") and "vs same-kernel greedy" in line or line.startswith(SETTINGS_HEADER):
            in_table = True
        elif not line.startswith("|"):
            in_table = False
        if not in_table:
            kept.append(line)
    return "\n".join(kept)


LINK_TARGET = re.compile(r"(?<=\])\([^)]*\)")


def unchecked_numbers(text: str, checked: list[str]) -> list[tuple[str, str]]:
    """(number, its sentence) for each number of `text` outside `checked` texts, code, links and names."""
    text = re.sub(r"```.*?```", " ", _without_checked_tables(text), flags=re.DOTALL)  # code: not figures
    text = LINK_TARGET.sub("", normalized(text))
    for snippet in sorted(checked, key=len, reverse=True):
        text = text.replace(LINK_TARGET.sub("", snippet), " ")
    text = re.sub(r"<!--.*?-->|`[^`]*`", " ", text)
    found = []
    for match in NUMBER.finditer(NOT_FIGURES.sub(" ", text)):
        start = max(text.rfind(". ", 0, match.start()) + 2, match.start() - 60, 0)
        found.append((match.group(), text[start:match.end() + 40].strip()))
    return found


RENDERED = [(page, section, figure) for page, by_section in FIGURES.items() for section, renders in by_section.items()
            for render in renders for figure in render()]


@pytest.mark.parametrize("page,section,figure", RENDERED, ids=[f"{p}:{s}:{n}" for n, (p, s, _) in enumerate(RENDERED)])
def test_each_rendered_figure_is_in_its_section(page, section, figure):
    assert figure in normalized(sections(ROOT / page)[section]), (
        f"{page}, section {section!r}: the text rendered from its record is not there:\n  {figure}\n"
        "Either the page's figure drifted from its record (fix the page), or the sentence was reworded "
        "(change its rendering in tests/doc_figures.py).")


def test_every_number_of_a_checked_section_is_rendered_or_not_measured():
    unchecked = []
    checked = [(page, section, text) for page in PAGES for section, text in sections(ROOT / page).items()]
    checked += [(page, section, sections(ROOT / page)[section]) for page, names in SECTIONS.items() for section in names]
    for page, section, text in checked:
        rendered = [f for render in FIGURES.get(page, {}).get(section, []) for f in render()]
        exempt = [snippet for p, sec, snippet, _ in NOT_MEASURED if (p, sec) == (page, section)]
        for number, context in unchecked_numbers(text, rendered + exempt):
            unchecked.append(f"{page}, {section!r}: {number} in '...{context}...'")
    assert not unchecked, (
        "numbers that no test checks against a record:\n  " + "\n  ".join(unchecked) + "\nFix: render the "
        "sentence from its record in tests/doc_figures.py (CONTRIBUTING.md, 'Figures in the docs'); a number that "
        "is not a measurement (a setting, a version, a goal) goes in NOT_MEASURED with why.")


def test_the_lists_of_exceptions_name_what_is_there():
    for page, section, snippet, why in NOT_MEASURED:
        assert why and snippet in normalized(sections(ROOT / page)[section]), (page, section, snippet)
    for page, by_section in FIGURES.items():
        assert set(by_section) <= set(sections(ROOT / page)), set(by_section) - set(sections(ROOT / page))


def test_sections_split_at_headings_not_at_comments_in_code(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\nintro\n## A\n```bash\n# a shell comment\nrun --k 3\n```\nafter\n## B\nb\n")
    assert list(sections(page)) == ["", "Title", "A", "B"]
    assert "a shell comment" in sections(page)["A"] and "after" in sections(page)["A"]


def test_the_coverage_check_finds_an_unrendered_figure():
    text = "The hybrid reached **2.07x** on SmolLM2-135M-Instruct (`--threads 1`, [run](benchmarks/x_s1/a.json))."
    assert [number for number, _ in unchecked_numbers(text, [])] == ["2.07"]  # not the model's name, code or link
    assert unchecked_numbers(text, ["reached **2.07x** on"]) == []
    table = ("| method | vs same-kernel greedy |\n|---|---|\n| oneiro-tree | 1.50x (oneiro-greedy) |\n\n"
             "```bash\n# a comment, not a heading: --k 3\n```\nAfter: 3.1x.")
    assert [n for n, _ in unchecked_numbers(table, [])] == ["3.1"]  # method tables are checked cell by cell


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
