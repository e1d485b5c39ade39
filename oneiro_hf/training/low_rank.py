"""Training in the target-relative parametrisation: only the differences a target-relative checkpoint stores.

A drafter stored relative to its target (oneiro_hf.storage.target_relative) keeps each copied layer matrix as the
target's T plus a rank-r difference, and the fusion's token block as identity plus rank t. Truncating a drafter
trained whole to those ranks afterwards loses acceptance (held-out tau 1.404 -> 1.345 on the 1.5B drafter).
Trained in that form from the start, nothing is lost when it is saved, and a two-layer drafter's 47M copied
weights become 2.6M trained ones, which also limits over-fitting on small self-distillation sets.

    parametrise(drafter, storage)  # each stored difference becomes trainable factors; the target's matrix frozen
    ... train ...
    merge(drafter)                 # fold the factors into plain weights (save with save_target_relative)

The rule of which tensor is stored how is target_relative.stored_as, so the trained differences are exactly
the stored ones; every other tensor (fusion state block, norms, biases) trains whole, as without it.
Parametrised checkpoints hold the factors under `<module>.parametrizations.weight.*`: a run resumes them only
with the same ranks (OneiroTrainer refuses anything else by name).
"""

from __future__ import annotations

import logging
import math

import torch
from torch import nn
from torch.nn.utils import parametrize

from ..storage.target_relative import RelativeStorage, stored_as

logger = logging.getLogger(__name__)

TRUNCATION_WARNING = 1e-3  # relative error of a rebased difference's rank-r approximation worth a warning


class LowRankDifference(nn.Module):
    """weight = original + a @ b; `original` (the target's matrix, frozen) is the parametrised tensor.

    a: (out, rank), starts at zero, so the drafter starts exactly as it was; b: (rank, in), N(0, 1/rank), so one
    optimiser step moves an element of the weight about as far as whole training would. With `difference` (a
    trained drafter's matrix minus the target's, for `parametrise(..., rebase=True)`) a @ b starts as its best
    rank-`rank` approximation instead, split as FuseDifference splits its block.
    """

    def __init__(self, weight: torch.Tensor, rank: int, difference: torch.Tensor | None = None) -> None:
        super().__init__()
        out_features, in_features = weight.shape
        self.a = nn.Parameter(torch.zeros(out_features, rank, dtype=weight.dtype, device=weight.device))
        self.b = nn.Parameter(torch.randn(rank, in_features, dtype=weight.dtype, device=weight.device)
                              / math.sqrt(rank))
        self.truncation_error = 0.0  # of `difference` by rank `rank`, relative (Frobenius)
        if difference is not None and bool(difference.any()):
            u, s, vh = torch.linalg.svd(difference.detach().float(), full_matrices=False)
            self.truncation_error = float(s[rank:].norm() / s.norm())
            root = s[:rank].sqrt()
            with torch.no_grad():
                self.a.copy_(u[:, :rank] * root)
                self.b.copy_(root[:, None] * vh[:rank])

    def forward(self, original: torch.Tensor) -> torch.Tensor:
        return original + self.a @ self.b


class FuseDifference(nn.Module):
    """The fusion weight (hidden, (k + 1) * hidden) = [states block, trained whole | identity + a @ b].

    The token block starts as the best rank-`rank` approximation of its current difference from the identity
    (exact for a fresh drafter, whose token block is the identity; a ridge fit's block is truncated here).
    """

    def __init__(self, weight: torch.Tensor, rank: int) -> None:
        super().__init__()
        hidden = weight.shape[0]
        token = weight[:, -hidden:].detach().float()
        eye = torch.eye(hidden, device=weight.device)
        u, s, vh = torch.linalg.svd(token - eye, full_matrices=False)
        root = s[:rank].sqrt()
        a, b = u[:, :rank] * root, root[:, None] * vh[:rank]
        if float(s[0]) == 0.0:  # no difference yet: a zero, b random, so that a receives gradients
            b = torch.randn(rank, hidden, device=weight.device) / math.sqrt(rank)
        self.states = nn.Parameter(weight[:, :-hidden].detach().clone())
        self.a = nn.Parameter(a.to(weight.dtype).contiguous())
        self.b = nn.Parameter(b.to(weight.dtype).contiguous())
        self.register_buffer("eye", eye.to(weight.dtype), persistent=False)

    def forward(self, original: torch.Tensor) -> torch.Tensor:
        return torch.cat([self.states, self.eye + self.a @ self.b], dim=1)


def parametrise(drafter: nn.Module, storage: RelativeStorage, rebase: bool = False) -> list[str]:
    """Make `drafter` train only what `storage` stores: returns the names of the parametrised weights.

    Each copied layer matrix stored as a difference gets a LowRankDifference (its weight frozen as the
    reference), the fusion a FuseDifference when the token block is stored as a difference. `rebase=True` (a
    trained drafter trained further, bound to its target) freezes the bound target's matrix as the reference
    instead, the drafter's difference from it becoming the starting factors, so the saved differences stay of
    rank r (a difference of higher rank is truncated, with a warning). Raises ValueError (naming the fix) on a
    drafter that is parametrised already.
    """
    if is_parametrised(drafter):
        raise ValueError("the drafter is parametrised already. Fix: merge(drafter) first, or train it as it is.")
    modules = dict(drafter.named_modules())
    names, truncated = [], {}
    for key, value in list(drafter.state_dict().items()):
        kind = stored_as(key, value, storage)
        if kind == "whole" or not key.endswith(".weight"):
            continue
        module = modules[key[: -len(".weight")]]
        if kind == "fuse":
            parametrize.register_parametrization(module, "weight", FuseDifference(module.weight, storage.token_rank))
        else:
            difference = _rebased(drafter, key, module) if rebase else None
            low_rank = LowRankDifference(module.weight, storage.layer_rank, difference)
            parametrize.register_parametrization(module, "weight", low_rank)
            if low_rank.truncation_error > TRUNCATION_WARNING:
                truncated[key] = low_rank.truncation_error
        module.parametrizations.weight.original.requires_grad_(False)
        names.append(key)
    if truncated:
        worst = max(truncated, key=truncated.get)
        logger.warning("%d layer matrices differ from the target's by more than rank %d: trained from their best "
                       "rank-%d approximation (worst %s, relative error %.3f)", len(truncated), storage.layer_rank,
                       storage.layer_rank, worst, truncated[worst])
    return names


def _rebased(drafter: nn.Module, key: str, module: nn.Linear) -> torch.Tensor | None:
    """Set `module.weight` to the bound target's matrix for `key`; return what it was minus that (None where the
    key copies no target matrix)."""
    from ..storage.target_relative import _layer_reference

    reference = _layer_reference(drafter, drafter.target, key)
    if reference is None or reference.shape != module.weight.shape:
        return None
    with torch.no_grad():
        difference = module.weight.detach().float() - reference.float()
        module.weight.copy_(reference)
    return difference


def rebuilt_originals(drafter: nn.Module, target: nn.Module) -> set[str]:
    """State-dict keys of parametrised originals a checkpoint need not store: a FuseDifference's (never read) and
    each LowRankDifference's that is exactly the target matrix it copies (a drafter built from the same target
    holds it again). For a two-layer 1.5B drafter they are 375 MiB of a checkpoint's 397."""
    from ..storage.target_relative import _layer_reference

    keys = set()
    for name, module in drafter.named_modules():
        if not parametrize.is_parametrized(module, "weight"):
            continue
        key = f"{name}.parametrizations.weight.original"
        (kind,) = module.parametrizations.weight
        if isinstance(kind, FuseDifference):
            keys.add(key)
            continue
        reference = _layer_reference(drafter, target, f"{name}.weight")
        original = module.parametrizations.weight.original
        if reference is not None and reference.shape == original.shape and torch.equal(
                reference.to(device=original.device, dtype=original.dtype), original):
            keys.add(key)
    return keys


def is_parametrised(drafter: nn.Module) -> bool:
    return any(parametrize.is_parametrized(m) for m in drafter.modules())


def merge(drafter: nn.Module) -> None:
    """Fold every low-rank parametrisation into a plain trainable weight (in place); a no-op without any."""
    for module in drafter.modules():
        if parametrize.is_parametrized(module, "weight"):
            parametrize.remove_parametrizations(module, "weight", leave_parametrized=True)
            module.weight.requires_grad_(True)


__all__ = ["FuseDifference", "LowRankDifference", "is_parametrised", "merge", "parametrise", "rebuilt_originals"]
