"""The lab scripts (scripts/) stay runnable and clean: ruff passes, every Python script answers --help (so it
imports against today's package), every shell script parses, the device script's dry run of each phase runs, and
no script holds a fixed absolute path or assigns to a package module's or class's attribute (a patch)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
PYTHON_SCRIPTS = sorted(SCRIPTS.glob("*.py"))
SHELL_SCRIPTS = sorted(SCRIPTS.glob("*.sh"))

# Runs each script as __main__ with --help in one process (torch and transformers load once); prints failures.
_HELP_RUNNER = """
import contextlib, io, runpy, sys
sys.path.insert(0, sys.argv[1])  # scripts import each other's helpers
failed = []
for path in sys.argv[2:]:
    sys.argv = [path, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
        failed.append(f"{path}: ran without stopping at --help")
    except SystemExit as stop:
        if stop.code not in (0, None) or "usage:" not in out.getvalue():
            failed.append(f"{path}: --help exited {stop.code!r} without a usage text")
    except BaseException as err:
        failed.append(f"{path}: {type(err).__name__}: {err}")
print("\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, check=False, capture_output=True, text=True, **kwargs)


def test_scripts_pass_ruff() -> None:
    done = _run([sys.executable, "-m", "ruff", "check", str(SCRIPTS)])
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_python_script_answers_help() -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = _run([sys.executable, "-c", _HELP_RUNNER, str(SCRIPTS), *map(str, PYTHON_SCRIPTS)], cwd=ROOT, env=env,
                timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_every_shell_script_parses(script: Path) -> None:
    done = _run(["bash", "-n", str(script)])
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("phase", ["prepare", "lease", "profiles", "check", "bf16"])
def test_the_device_script_dry_runs_every_phase_and_runs_nothing(phase: str, tmp_path: Path) -> None:
    before = sorted(p.name for p in ROOT.iterdir())
    done = _run(["bash", str(SCRIPTS / "device.sh"), "--dry-run", phase], cwd=tmp_path,
                env={**os.environ, "VARIANTS": "all"}, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    commands = [line for line in done.stdout.splitlines() if line.startswith("+ ")]
    expected = {"prepare": "pip download", "lease": "oneiro_hf.training.cli", "profiles": "oneiro-bench profile",
                "check": "python", "bf16": "--dtype bfloat16"}[phase]
    assert any(expected in line for line in commands), done.stdout
    assert sorted(p.name for p in ROOT.iterdir()) == before  # nothing written in the checkout (.devcarry included)


def _patches(path: Path) -> list[str]:
    """Assignments to an attribute of a name imported from oneiro_hf (a module or a class): a patch."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("oneiro_hf"):
            imported.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            imported.update(a.asname or a.name for a in node.names if a.name.startswith("oneiro_hf") and a.asname)
    return [f"{path.name}:{node.lineno}" for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.AugAssign))
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id in imported]


def test_no_fixed_absolute_path_and_no_patch_of_the_package() -> None:
    fixed = [f"{p.name}:{i}" for p in [*PYTHON_SCRIPTS, *SHELL_SCRIPTS]
             for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if "/work/" in line or line.lstrip().startswith("cd /")]
    assert not fixed, f"fixed absolute paths: {fixed}"
    patches = [hit for p in PYTHON_SCRIPTS for hit in _patches(p)]
    assert not patches, f"scripts assign to package attributes: {patches}"


def test_every_script_is_listed_in_the_folders_readme() -> None:
    readme = (SCRIPTS / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in [*PYTHON_SCRIPTS, *SHELL_SCRIPTS] if f"`{p.name}`" not in readme]
    assert not missing, f"scripts/README.md does not list {missing}"


def _git(repo: Path, *args: str) -> None:
    done = _run(["git", "-C", str(repo), *args])
    assert done.returncode == 0, done.stderr


def test_the_carry_script_leans_the_tree_and_cuts_pieces_that_fit_beside_it(tmp_path: Path) -> None:
    """A tree too large for a device call is refused with the fix; `lean` leaves the drafters' weights and datasets
    out of the working tree (not git); the pieces of a pack fit one call each beside the lean tree, in name order
    they are the pack; `full` brings the files back."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "scripts" / "carry.sh").write_bytes((SCRIPTS / "carry.sh").read_bytes())
    (repo / ".gitignore").write_text("/.devcarry/\n")
    (repo / "code.py").write_text("print('kept')\n")
    for path, size in {"drafters/t/model.safetensors": 40 << 20, "drafters/t/config.json": 100,
                       "drafters/campaign/t/model.safetensors": 30 << 20, "data/selfdistill/t/data.parquet": 1 << 20}.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(os.urandom(1 << 16) * (size >> 16) if size >= 1 << 16 else b"x" * size)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "tree")
    carry = ["bash", "scripts/carry.sh"]

    too_big = _run([*carry, "room"], cwd=repo)
    assert too_big.returncode == 1 and "Fix: scripts/carry.sh lean" in too_big.stderr, too_big.stdout + too_big.stderr

    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "weights.bin").write_bytes(os.urandom(1 << 20) * 130)  # 130 MiB: three pieces beside a lean tree
    done = _run(["bash", "-c", f". scripts/carry.sh && carry_pieces {pack} .devcarry/x"], cwd=repo)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not (repo / "drafters/t/model.safetensors").exists() and not (repo / "data/selfdistill").exists()
    assert (repo / "drafters/t/config.json").exists() and (repo / "code.py").exists()
    lean_tree = sum(f.stat().st_size for f in repo.rglob("*") if f.is_file() and ".git" not in f.parts
                    and ".devcarry" not in f.parts)
    calls = sorted((repo / ".devcarry/x").iterdir(), key=lambda d: (d.name == "c", len(d.name), d.name))
    assert [d.name for d in calls] == ["p0", "p1", "c"], done.stdout
    pieces = [f for d in calls for f in sorted(d.iterdir())]
    assert all(p.stat().st_size + lean_tree <= 62 << 20 for p in pieces)
    assert sorted(pieces, key=lambda p: p.name) == pieces  # name order is the pack's order
    parts = tmp_path / "parts"  # there: the earlier calls' pieces copied to one folder, the last one carried
    parts.mkdir()
    for piece in pieces[:-1]:
        (parts / piece.name).write_bytes(piece.read_bytes())
    out = tmp_path / "out"
    unpacked = _run(["bash", "-c", f". scripts/carry.sh && carry_unpack {parts} .devcarry/x/c {out}"], cwd=repo)
    assert unpacked.returncode == 0, unpacked.stderr
    assert (out / "weights.bin").read_bytes() == (pack / "weights.bin").read_bytes()
    assert "run(carry=[\".devcarry/x/p1\"]" in done.stdout

    full = _run([*carry, "full"], cwd=repo)
    assert (repo / "drafters/t/model.safetensors").stat().st_size == 40 << 20 and full.returncode == 1


def test_the_lease_passes_oneiro_train_flags_it_accepts() -> None:
    """scripts/gpu_train_qwen15.sh trains with the recipe's flags and its own after them: the whole command line, with
    the lease's sizes for its variables, must pass oneiro-train's parsing and checks (a flag the recipe gains can
    contradict the lease's own, and the lease would fail only on the GPU machine)."""
    import re
    import shlex

    from oneiro_hf.training.campaign import recipe_flags
    from oneiro_hf.training.cli import parse_args

    text = (SCRIPTS / "gpu_train_qwen15.sh").read_text()
    start = text.index("$PY -m oneiro_hf.training.cli")
    command = text[start:text.index('> "$OUT/train.log"', start)].replace("\\\n", " ")
    sizes = {"PY": "python", "WORK": "/tmp/q15", "DTYPE": "bfloat16", "BATCH": "32", "MAX_STEPS": "4000",
             "WARMUP": "50", "FEATURE_TOKENS": "32768", "RIDGE": "20000", "SEQ": "1024"}
    command = re.sub(r"\$\(\(.*?\)\)", "1900000000", command)  # the deadline's arithmetic
    command = re.sub(r'"\$\{(limit|SPLIT)\[@\]\}"', "", command)  # both empty on the GPU
    recipe = recipe_flags(str(ROOT / "recipes" / "qwen2.5-coder-1.5b-instruct.json"))
    command = re.sub(r"\$(\w+)", lambda m: sizes[m.group(1)], command.replace('"${recipe[@]}"', shlex.join(recipe)))
    words = shlex.split(command)
    _, _, args = parse_args(words[words.index("oneiro_hf.training.cli") + 1:])
    assert not args.stream_features and args.feature_cache_max_gb == 0 and args.per_device_train_batch_size == 32


def test_heldout_tau_takes_the_recipes_split_and_refuses_to_guess_one(tmp_path: Path) -> None:
    """A held-out share larger than training held out scores records the drafters trained on: the script reads the
    recipe's split, lets a flag override it, and without either stops with the fix before loading anything."""
    import argparse
    import json
    import runpy

    helpers = runpy.run_path(str(SCRIPTS / "heldout_tau.py"))
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"eval_fraction": 0.02, "split_seed": 3}))
    parser = argparse.ArgumentParser()

    def split(**given: str | None) -> tuple[str, str]:
        own = argparse.Namespace(**{"recipe": None, "eval_fraction": None, "split_seed": None, **given})
        return helpers["held_out_split"](parser, own)

    assert split(recipe=str(recipe)) == ("0.02", "3")
    assert split(recipe=str(recipe), eval_fraction="0.1") == ("0.1", "3")
    assert split(eval_fraction="0.05") == ("0.05", "0")
    from oneiro_hf.training.features import DEFAULT_EVAL_FRACTION

    silent = tmp_path / "silent.json"  # a recipe that leaves the split to oneiro-train's defaults
    silent.write_text(json.dumps({"batch_size": 8}))
    assert split(recipe=str(silent)) == (str(DEFAULT_EVAL_FRACTION), "0")
    refused = _run([sys.executable, str(SCRIPTS / "heldout_tau.py"), "--target", "t", "--data", "d",
                    "--feature_cache_dir", str(tmp_path), "a=fresh"], cwd=ROOT)
    assert refused.returncode == 2 and "Fix: pass --recipe" in refused.stderr, refused.stderr
