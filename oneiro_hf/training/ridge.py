"""Stage 0: closed-form initialisation of the drafter's input fusion.

The copied layers [start, end) reproduce the target exactly when they are fed the target's own residual
stream entering layer ``start``. So the best linear fusion is the one that best predicts that residual at
position p, R[p] = hidden_states[start][p], from what the drafter sees there: [H[p-1] ; emb(x[p])] (with
``input_layers``, every selected state at p-1: ``OneiroDrafter.input_states``). That is
an ordinary ridge regression, solved here in float64 from accumulated sufficient statistics (no design
matrix is kept). Each output dimension is its own regression, so each gets the ridge strength that did
best on a held-out tenth of the sequences, then the fit is redone on all of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from .features import loss_mask

logger = logging.getLogger(__name__)

DEFAULT_ALPHAS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0)


class _Moments:
    """Sums for a linear regression of y on x: n, sum x, sum y, x'x, x'y and per-dim y'y (float64)."""

    def __init__(self, d_in: int, d_out: int) -> None:
        self.n = 0
        self.sx = torch.zeros(d_in, dtype=torch.float64)
        self.sy = torch.zeros(d_out, dtype=torch.float64)
        self.sxx = torch.zeros(d_in, d_in, dtype=torch.float64)
        self.sxy = torch.zeros(d_in, d_out, dtype=torch.float64)
        self.syy = torch.zeros(d_out, dtype=torch.float64)

    def add(self, x: torch.Tensor, y: torch.Tensor) -> None:
        x = x.double().cpu()
        y = y.double().cpu()
        self.n += x.shape[0]
        self.sx += x.sum(0)
        self.sy += y.sum(0)
        self.sxx += x.T @ x
        self.sxy += x.T @ y
        self.syy += (y * y).sum(0)

    def __add__(self, other: _Moments) -> _Moments:
        out = _Moments(self.sx.numel(), self.sy.numel())
        out.n = self.n + other.n
        for name in ("sx", "sy", "sxx", "sxy", "syy"):
            setattr(out, name, getattr(self, name) + getattr(other, name))
        return out

    def sq_errors(self, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """Per-output-dim sum of squared errors of y ~ x @ w + b over these samples."""
        return (
            self.syy
            - 2 * (w * self.sxy).sum(0)
            - 2 * b * self.sy
            + ((self.sxx @ w) * w).sum(0)
            + 2 * b * (self.sx @ w)
            + self.n * b * b
        )

    def variances(self) -> torch.Tensor:
        mean = self.sy / max(self.n, 1)
        return (self.syy / max(self.n, 1) - mean * mean).clamp_min(1e-12)


def _solve(m: _Moments, alphas: Iterable[float]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Ridge solutions (w (d_in, d_out), b (d_out)) for each alpha, on standardised inputs."""
    n = max(m.n, 1)
    mx, my = m.sx / n, m.sy / n
    cov = m.sxx / n - torch.outer(mx, mx)
    sd = cov.diagonal().clamp_min(0).sqrt()
    sd = torch.where(sd > 1e-8 * max(float(sd.max()), 1e-30), sd, torch.ones_like(sd))
    corr = cov / torch.outer(sd, sd)
    cxy = (m.sxy / n - torch.outer(mx, my)) / sd[:, None]
    evals, evecs = torch.linalg.eigh(corr)
    proj = evecs.T @ cxy
    out = []
    for alpha in alphas:
        wz = evecs @ (proj / (evals.clamp_min(0) + alpha)[:, None])
        w = wz / sd[:, None]
        b = my - mx @ w
        out.append((w, b))
    return out


def _gather(drafter: Any, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """[input states at p-1 ; emb(x[p])] and R[p] over the batch's response positions; the input states are
    ``inputs`` for a multi-layer drafter (k*D wide), else the final-normed ``states``."""
    mask = loss_mask(batch["attention_mask"], batch["prompt_lens"]).cpu()
    bound = drafter.require_bound()
    emb_w = bound.embed_tokens
    states_prev = batch["inputs" if "inputs" in batch else "states"][:, :-1][mask]
    tokens = batch["input_ids"][:, 1:][mask]
    device = next(drafter.parameters()).device
    with torch.no_grad():
        emb = emb_w(tokens.to(device)).detach().cpu()
    x = torch.cat([states_prev.to(emb.dtype).cpu(), emb], dim=-1)
    y = batch["resid"][:, 1:][mask]
    return x, y


@torch.no_grad()
def fit_fuse_ridge(
    drafter: Any,
    batches: Iterable[Mapping[str, torch.Tensor]],
    max_positions: int = 50_000,
    alphas: Iterable[float] = DEFAULT_ALPHAS,
    val_every: int = 10,
    apply: bool = True,
) -> dict[str, Any]:
    """Fit ``drafter.fuse`` in closed form from batches that carry ``states``, ``resid`` (the input of layer
    ``start``), ``input_ids``, ``attention_mask`` and ``prompt_lens``; returns a report of the fit."""
    t0 = time.perf_counter()
    hidden = drafter.config.hidden_size
    width = drafter.fuse.in_features  # (k + 1) * hidden: k input state slots and the token embedding
    train, val = _Moments(width, hidden), _Moments(width, hidden)
    seq = 0
    for batch in batches:
        x, y = _gather(drafter, batch)
        if x.shape[0] == 0:
            continue
        mask = loss_mask(batch["attention_mask"], batch["prompt_lens"])
        counts = mask.sum(-1).tolist()
        start = 0
        for c in counts:
            if c:
                (val if seq % val_every == val_every - 1 else train).add(
                    x[start : start + c], y[start : start + c]
                )
                start += c
            seq += 1
        if train.n + val.n >= max_positions:
            break
    if train.n < width // 8 or val.n == 0:
        raise ValueError(
            f"ridge initialisation needs more data: {train.n} training and {val.n} validation positions. "
            "Fix: add data, or pass --ridge_init false."
        )
    alphas = list(alphas)
    fits = _solve(train, alphas)
    errors = torch.stack([val.sq_errors(w, b) for w, b in fits])  # (n_alpha, d_out)
    best = errors.argmin(0)
    var = val.variances() * val.n
    rel_by_alpha = (errors / var).mean(-1)
    everything = train + val
    final = _solve(everything, alphas)
    w = torch.stack([fw for fw, _ in final], 0)  # (n_alpha, d_in, d_out)
    b = torch.stack([fb for _, fb in final], 0)
    cols = torch.arange(hidden)
    w_best = w[best, :, cols].T  # (d_in, d_out)
    b_best = b[best, cols]
    val_rel = float((errors[best, cols] / var).mean())
    # the fusion it replaces, for comparison
    old_w = drafter.fuse.weight.detach().double().cpu().T
    old_b = drafter.fuse.bias.detach().double().cpu()
    before_rel = float((val.sq_errors(old_w, old_b) / var).mean())
    if apply:
        drafter.fuse.weight.copy_(w_best.T.to(drafter.fuse.weight.dtype))
        drafter.fuse.bias.copy_(b_best.to(drafter.fuse.bias.dtype))
    report = {
        "positions": everything.n,
        "val_positions": val.n,
        "alphas": alphas,
        "val_rel_error_by_alpha": [round(float(v), 5) for v in rel_by_alpha],
        "alpha_choice_counts": {str(a): int((best == i).sum()) for i, a in enumerate(alphas)},
        "val_rel_error": round(val_rel, 5),
        "val_rel_error_before": round(before_rel, 5),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    logger.info(
        "ridge init of fuse on %d positions: held-out relative error of the layer-%d input %.4f (was %.4f), %.1fs",
        everything.n,
        drafter.config.interval[0],
        val_rel,
        before_rel,
        report["seconds"],
    )
    return report
