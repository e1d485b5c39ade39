"""model_cards/ at the top level: wheels still carry the card template, and a dry-run publish works from a wheel."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import pytest
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "model_cards" / "drafter_card.md"
SHIPPED_CARDS = {
    name: ROOT / "model_cards" / "drafters" / f"{name}.md"
    for name in ("gemma-3-270m", "qwen2.5-coder-1.5b-instruct", "smollm2-135m-instruct")
}
LARGE_TARGETS = {"qwen2.5-coder-1.5b-instruct"}  # rendering loads the 1.5B target: `make test-large` checks it
# how the rendered card of each shipped drafter was made (examples/publish.py --dry-run with these flags)
PUBLISH_FLAGS = {
    "smollm2-135m-instruct": [
        "--repo-id", "your-org/smollm2-135m-oneiro-drafter", "--base-model", "HuggingFaceTB/SmolLM2-135M-Instruct",
        "--license", "apache-2.0",
        "--bench-summary", str(ROOT / "docs/benchmarks/current/smollm2-135m-instruct/summary.json"),
        "--hardware", "2-core Intel Xeon CPU, one thread per lane",
    ],
    "gemma-3-270m": [
        "--repo-id", "your-org/gemma-3-270m-oneiro-drafter", "--base-model", "google/gemma-3-270m",
        "--license", "gemma",
        "--bench-summary", str(ROOT / "docs/benchmarks/current/gemma-3-270m/summary.json"),
        "--hardware", "2-core Intel Xeon CPU, one thread per lane",
    ],
    "qwen2.5-coder-1.5b-instruct": [  # scripts/ship_qwen15.sh renders it so
        "--layer-rank", "32", "--token-rank", "256",
        "--repo-id", "your-org/qwen2.5-coder-1.5b-oneiro-drafter", "--base-model", "Qwen/Qwen2.5-Coder-1.5B-Instruct",
        "--license", "apache-2.0",
        "--bench-summary", str(ROOT / "docs/benchmarks/current/qwen2.5-coder-1.5b-instruct/xeon-run/summary.json"),
        "--hardware", "2-core Intel Xeon CPU (AMX), one 2-thread lane",
    ],
}


def test_model_cards_folder_holds_the_template_and_a_card_per_shipped_drafter():
    assert TEMPLATE.is_file()
    shipped = sorted(p.name for p in (ROOT / "drafters").iterdir() if (p / "config.json").is_file())
    assert sorted(SHIPPED_CARDS) == shipped
    for name, card in SHIPPED_CARDS.items():
        text = card.read_text()
        assert text.startswith("---\nbase_model: ") and f"drafters/{name}" not in text  # rendered, not a copy
    # the package reads the template through oneiro_hf/model_cards (a link to the top-level folder)
    from oneiro_hf.storage.hub import DEFAULT_TEMPLATE

    assert DEFAULT_TEMPLATE.resolve() == TEMPLATE.resolve()


def test_the_shipped_drafters_default_to_the_mode_measured_fastest():
    """README and docs/benchmarks.md ("Chain or tree: the default") say the shipped drafters verify trees by default;
    their configs are where that default lives, and each card says so."""
    for name, card in SHIPPED_CARDS.items():
        config = json.loads((ROOT / "drafters" / name / "config.json").read_text())
        assert config["tree"] is True and config["verification"] == "strict", name
        assert "| tree | True (a token tree per target pass" in card.read_text(), name


def _build_wheel(out: Path) -> Path:
    """`pip wheel` of this checkout; without build isolation when the installed setuptools can build it (offline)."""
    out.mkdir(parents=True)
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(ROOT)]
    try:
        offline = Version(version("setuptools")) >= Version("77")
    except PackageNotFoundError:
        offline = False
    if offline:
        command.insert(5, "--no-build-isolation")
    proc = subprocess.run(command, check=False, capture_output=True, text=True, timeout=600, cwd=out)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = out.glob("oneiro_hf-*.whl")
    return wheel


def test_wheel_carries_the_template_and_publishes_a_dry_run_from_it(tmp_path):
    wheel = _build_wheel(tmp_path / "dist")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        assert "oneiro_hf/model_cards/drafter_card.md" in names
        assert zf.read("oneiro_hf/model_cards/drafter_card.md") == TEMPLATE.read_bytes()
        assert not any("model_cards/drafters/" in n for n in names)  # rendered cards stay in the repository
        assert "oneiro_hf/training/prompts/data/words.json" in names  # the template prompt sources read it
        assert "oneiro_hf/model_cards/dataset_card.md" in names  # distill_dataset renders data cards from it
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in metadata
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    # run the publish example against the installed wheel (not this checkout): cwd and PYTHONPATH exclude ROOT
    env = dict(os.environ, PYTHONPATH=str(site), OMP_NUM_THREADS="1")
    out = tmp_path / "upload"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "publish.py"), "--tiny", "--dry-run", str(out),
         "--repo-id", "your-org/tiny-drafter", "--license", "mit"],
        check=False, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "Dry run: nothing sent" in proc.stdout
    card = (out / "README.md").read_text()
    assert "# OneiroDraft drafter for your-org/tiny-base" in card and "license: mit" in card
    where = subprocess.run(
        [sys.executable, "-c", "import oneiro_hf.storage.hub as h; print(h.DEFAULT_TEMPLATE)"],
        check=True, capture_output=True, text=True, env=env, cwd=tmp_path,
    ).stdout.strip()
    assert Path(where).is_relative_to(site)


@pytest.mark.real_model
@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.large_model) if name in LARGE_TARGETS else name for name in sorted(SHIPPED_CARDS)
])
def test_rendered_card_of_each_shipped_drafter_is_current(name, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "publish.py"), "--target", name, *PUBLISH_FLAGS[name],
         "--dry-run", str(tmp_path / "upload")],
        check=False, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rendered = (tmp_path / "upload" / "README.md").read_text()
    assert rendered == SHIPPED_CARDS[name].read_text(), (
        f"model_cards/drafters/{name}.md is out of date: re-render it with examples/publish.py --dry-run "
        f"(flags in tests/test_packaging.py) and copy README.md there"
    )
