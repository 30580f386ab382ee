"""Compute-block run-time noise whose pooled z-scores are a GEV sample by construction.

For one block identity c with J samples of m ranks each (methodology §5):

1. draw target z_j ~ GEV(mu, sigma, xi) (Coles; scipy's ``genextreme`` with c = -xi),
   redrawing every z_j <= 0 (a z-score is (max - mean)/sd >= 0, so the design samples the
   GEV truncated to z > 0; with the default parameters P(z <= 0) is below 1e-3);
2. per sample, deviations d_{j,r}: the max rank (chosen at random) gets d = z_j, the other
   m-1 get -z_j/(m-1) + s_j u_{j,r} with u_j a random unit vector with sum 0, so the mean is
   exactly 0 and the max minus the mean is exactly z_j;
3. the spreads s_j are scaled so that the pooled sd over all J samples is exactly 1:
   sum_j [z_j^2 m/(m-1) + s_j^2] = J (m-1). Feasible iff R = J(m-1) - m/(m-1) sum z_j^2 > 0,
   i.e. mean z^2 < (m-1)^2/m (2.25 for m = 4), and every s_j must keep the others strictly
   below z_j: s_j max_r u_{j,r} < z_j m/(m-1). Infeasible draws are redrawn (directions
   first, then the z's); the number of redraws is reported.

Then X = a + b d with b = cv * a: z = (M - Xbar)/s_pooled is invariant under X -> a + b X,
so the z recomputed from X is z_j again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from evtsync.core.errors import InputError

log = logging.getLogger("evtsync.synth.noise")

MAX_DIRECTION_TRIES = 200
MAX_Z_TRIES = 200


@dataclass
class BlockDesign:
    """Deviations of one block identity: ``d[j, r]`` for J samples of m ranks."""

    z: np.ndarray           # (J,) target z-scores
    d: np.ndarray           # (J, m) deviations, mean 0 per row, row max = z, pooled sd 1
    max_pos: np.ndarray     # (J,) position of the max rank in each row
    z_redraws: int
    direction_redraws: int


def sample_gev(rng: np.random.Generator, mu: float, sigma: float, xi: float, size: int) -> tuple[np.ndarray, int]:
    """``size`` positive draws of GEV(mu, sigma, xi); returns them and the number redrawn."""
    from scipy.stats import (
        genextreme,  # on first use: importing evtsync.synth costs no SciPy (issue 48)
    )

    out = genextreme.rvs(-xi, loc=mu, scale=sigma, size=size, random_state=rng)
    out = np.asarray(out, dtype=float)
    redrawn = 0
    bad = out <= 0
    tries = 0
    while bad.any():
        redrawn += int(bad.sum())
        out[bad] = genextreme.rvs(-xi, loc=mu, scale=sigma, size=int(bad.sum()), random_state=rng)
        bad = out <= 0
        tries += 1
        if tries > 1000:
            raise InputError(f"synth: GEV({mu}, {sigma}, {xi}) almost never gives z > 0; raise mu")
    return out, redrawn


def design_block(rng: np.random.Generator, n_samples: int, m: int,
                 gev: tuple[float, float, float]) -> BlockDesign:
    """Deviations for one block identity (see the module docstring)."""
    mu, sigma, xi = gev
    c_other = m / (m - 1)
    z_redraws = 0
    direction_redraws = 0
    for _z_try in range(MAX_Z_TRIES):
        z, _ = sample_gev(rng, mu, sigma, xi, n_samples)
        budget = n_samples * (m - 1) - c_other * float(np.sum(z * z))
        if budget <= 0:
            z_redraws += 1
            continue
        for _d_try in range(MAX_DIRECTION_TRIES):
            u = rng.standard_normal((n_samples, m - 1))
            u -= u.mean(axis=1, keepdims=True)
            u /= np.linalg.norm(u, axis=1)[:, None]
            cap = z * c_other / u.max(axis=1)            # largest allowed s_j
            weights = cap * cap * rng.uniform(0.25, 1.0, n_samples)
            s = np.sqrt(budget * weights / weights.sum())
            if np.all(s < cap * (1 - 1e-9)):
                d = np.empty((n_samples, m))
                max_pos = rng.integers(0, m, n_samples)
                others = -z[:, None] / (m - 1) + s[:, None] * u
                for j in range(n_samples):
                    d[j] = np.insert(others[j], max_pos[j], z[j])
                return BlockDesign(z, d, max_pos, z_redraws, direction_redraws)
            direction_redraws += 1
        z_redraws += 1
    raise InputError(
        f"synth: cannot build block deviations with pooled sd 1 for GEV({mu}, {sigma}, {xi}), "
        f"m={m}, {n_samples} samples: mean z^2 must stay below (m-1)^2/m = {(m - 1) ** 2 / m:.3g}; "
        f"lower mu or sigma, or use more iterations"
    )


def split_integer(total: int, weights: np.ndarray) -> np.ndarray:
    """Split ``total`` into integers >= 1 proportional to ``weights`` (largest remainder)."""
    w = np.asarray(weights, dtype=float)
    n = len(w)
    if total < n:
        raise InputError(f"synth: block of {total} us cannot hold {n} kernels of >= 1 us")
    raw = (total - n) * w / w.sum()
    base = np.floor(raw).astype(np.int64)
    rest = int(total - n - base.sum())
    if rest:
        order = np.argsort(-(raw - base), kind="stable")
        base[order[:rest]] += 1
    return base + 1


def split_integer_rows(totals: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """:func:`split_integer` for every total of ``totals`` at once: an (N, len(weights)) array."""
    t = np.asarray(totals, dtype=np.int64)
    w = np.asarray(weights, dtype=float)
    n = len(w)
    if t.size and int(t.min()) < n:
        raise InputError(f"synth: block of {int(t.min())} us cannot hold {n} kernels of >= 1 us")
    raw = (t - n)[:, None] * (w / w.sum())[None, :]
    base = np.floor(raw).astype(np.int64)
    rest = t - n - base.sum(axis=1)
    order = np.argsort(-(raw - base), axis=1, kind="stable")
    rank_of = np.empty_like(order)
    np.put_along_axis(rank_of, order, np.arange(n)[None, :].repeat(len(t), axis=0), axis=1)
    return base + (rank_of < rest[:, None]) + 1


def pooled_z(x: np.ndarray) -> np.ndarray:
    """methodology §5 pooled z-scores of a (J, m) array of block times: one z per row."""
    x = np.asarray(x, dtype=float)
    xbar = x.mean(axis=1)
    ss = float(((x - xbar[:, None]) ** 2).sum())
    dof = x.shape[0] * (x.shape[1] - 1)
    s_pooled = np.sqrt(ss / dof)
    return (x.max(axis=1) - xbar) / s_pooled
