"""Print the name of the drafter with the best held-out tau among the folders of a lease (scripts/device_lease.sh).

    python scripts/lease_best.py DRAFTERS_DIR --among NAME [NAME ...]

Each folder's training_summary.json holds its evaluations; the last one is the trained drafter. Prints nothing if
no folder holds a finished drafter.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def held_out_tau(folder: Path) -> float | None:
    summary = folder / "training_summary.json"
    if not (folder / "model.safetensors").is_file() or not summary.is_file():
        return None
    evals = json.loads(summary.read_text()).get("evals") or []
    return evals[-1].get("eval_tau") if evals else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("drafters", type=Path)
    parser.add_argument("--among", nargs="+", required=True, help="the candidate folders' names")
    args = parser.parse_args()
    scored = {name: held_out_tau(args.drafters / name) for name in args.among}
    scored = {name: tau for name, tau in scored.items() if tau is not None}
    if scored:
        print(max(scored, key=scored.get))


if __name__ == "__main__":
    main()
