"""What each shipped drafter's identity check accepts: its target's weights moved within or beyond their cells.

For each reference target: the drafter's fingerprinted tensors of the float32 reference copy, changed in several
ways, compared with the shipped fingerprint; writes how many tensors each change makes differ. The record backs
docs/hub.md ("Which targets a drafter accepts").

    python scripts/identity_margins.py --out docs/measurements/identity_margins.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from oneiro_hf.loading import default_drafter_dir
from oneiro_hf.storage.identity import QUANTIZATIONS, compare_fingerprint, fingerprinted_tensors, lattice_step
from oneiro_hf.storage.reference_models import get_spec, load_reference_model
from oneiro_hf.targets import base_model

TARGETS = ("smollm2-135m-instruct", "gemma-3-270m", "qwen2.5-coder-1.5b-instruct")


def within_cells(tensor: torch.Tensor, kind: str, fraction: float, generator: torch.Generator) -> torch.Tensor:
    """Every value moved by up to `fraction` of its block's quantization step (uniformly, either way).

    Each block's lowest and highest values stay: they set the block's scale, so an original holds them (up to float16
    rounding of the scale) exactly where the quantized copy does.
    """
    block, levels = QUANTIZATIONS[kind]
    blocks = tensor.detach().reshape(-1, block).to(torch.float32)
    moved = torch.empty_like(blocks)
    for start in range(0, blocks.shape[0], 1 << 18):
        chunk = blocks[start : start + (1 << 18)]
        noise = torch.rand(chunk.shape, generator=generator) * 2 - 1
        inner = (chunk > chunk.amin(dim=1, keepdim=True)) & (chunk < chunk.amax(dim=1, keepdim=True))
        step = lattice_step(chunk, levels)[:, None]
        moved[start : start + (1 << 18)] = torch.where(inner, chunk + noise * fraction * step, chunk)
    return moved.reshape(tensor.shape)


def margins(name: str, seed: int = 0) -> dict:
    drafter_dir = default_drafter_dir(name)
    config = json.loads((drafter_dir / "config.json").read_text())
    recorded = config["base_model_fingerprint"]
    model, _ = load_reference_model(name)
    tensors = fingerprinted_tensors(model, base_model(model), tuple(config["interval"]))
    kinds = get_spec(name).quantization_of(tensors)
    generator = torch.Generator().manual_seed(seed)

    def refused(changed: dict[str, torch.Tensor]) -> dict:
        names = {d.tensor for d in compare_fingerprint(recorded, changed)}
        return {"quantized": len(names & set(kinds)), "unquantized": len(names - set(kinds))}

    result = {
        "drafter": str(drafter_dir.relative_to(Path.cwd())) if drafter_dir.is_relative_to(Path.cwd()) else str(drafter_dir),
        "tensors": {"quantized": len(kinds), "unquantized": len(tensors) - len(kinds)},
        "kinds": dict(sorted({kind: sum(k == kind for k in kinds.values()) for kind in set(kinds.values())}.items())),
        "moved_within_steps": {},
        "scaled_by_relative_noise": {},
    }
    for fraction in (0.2, 0.4, 0.6, 1.0, 2.0):
        changed = {n: within_cells(t, kinds[n], fraction, generator) if n in kinds else t for n, t in tensors.items()}
        result["moved_within_steps"][str(fraction)] = refused(changed)
    for epsilon in (0.005, 0.01, 0.02, 0.05):
        changed = {n: t * (1 + epsilon * (torch.rand(t.shape, generator=generator) * 2 - 1)) for n, t in tensors.items()}
        result["scaled_by_relative_noise"][str(epsilon)] = refused(changed)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", nargs="+", default=list(TARGETS))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    record = {
        "what": "tensors of each shipped drafter's fingerprint that differ when its target's weights are changed: "
        "moved_within_steps F = every quantized value but its block's lowest and highest moved uniformly by up to F "
        "of its block's quantization step (unquantized tensors unchanged); scaled_by_relative_noise E = every weight multiplied by 1 + U(-E, E)",
        "targets": {name: margins(name) for name in args.targets},
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
