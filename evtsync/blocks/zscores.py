"""Pooled z-scores of block maxima (methodology §5).

For block identity c, instance j and sample s of m ranks with block times X_{c,j,s,r}:

- M = max_r X, Xbar = mean_r X;
- s_pooled(c) = sqrt( sum_{j,s} sum_r (X - Xbar)^2 / sum_{j,s} (m - 1) ), pooled over every
  instance and sample of the identity;
- z = (M - Xbar) / s_pooled(c);
- a_c = mean of all X of the identity, r_c = s_pooled / a_c (coefficient of variation);
- y = (M - a_c) / s_pooled(c): the *centred maximum*, the sample's maximum measured from the
  identity's mean over every instance rather than from the sample's own mean. Its expected
  maximum over k samples is the n = k·m rank mean straggler delay in units of s_pooled, which
  is what the default estimator of tau(n) fits (docs/methodology.md, "Predicting tau(n)");
- u = (X - a_c) / r_c for every rank of the sample, comma-joined in rank order (column ``u``): the
  per-rank values the ``ranktail`` estimator of tau(n) pools (:mod:`evtsync.evt.ranktail`). r_c is
  a *robust* scale of the identity (:func:`robust_scale`: from the inner 90% of the within-sample
  rank differences, normal-consistent), not s_pooled: a rank far out in the tail inflates s_pooled
  and so shrinks its own u (with 80 samples of 4 ranks the pooled tail of lognormal or Student-t
  ranks comes out 8–9% short at n = 4096, 25% with 20 samples), while it only leaves the inner
  share of differences (docs/methodology.md, "The per-rank tail estimator"). Column ``u_scale`` =
  r_c / s_pooled(c), which the estimator pools per cell to put u back in units of the sd;
- mean_var_ratio(c) = m · var_j(Xbar) / s_pooled^2: the variance of the sample means across
  instances against what iid ranks give (1). Well above 1, the identity's mean drifts between
  instances and y, which assumes a stationary mean, overstates the spread of the maximum.

z and y are invariant under X -> a + b X (b > 0), which is what lets one GEV describe blocks of any
size. Identities whose pooled sd is 0 (all times equal) have no z and are reported.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import pandas as pd

from evtsync.core.errors import InputError

log = logging.getLogger(__name__)

ZSCORE_COLUMNS = ["z", "gpu", "precision", "workload", "y", "block", "instance", "sample",
                  "block_mean_us", "block_sd_us", "cv", "max_us", "mean_us", "n_gemm_kernels",
                  "has_gemm", "pg", "position", "signature", "index", "ranks", "max_rank",
                  "n_kernels", "n_samples", "dof", "mean_var_ratio", "time", "u", "u_scale"]
#: Columns the default (centred) estimator of tau(n) needs; tables written before it lack them.
CENTRED_COLUMNS = ("y", "mean_var_ratio")
#: The column of per-rank standardised values the ranktail estimator needs (older tables lack it).
RANK_VALUES_COLUMN = "u"
#: r_c / s_pooled(c), the robust scale of ``u`` against the pooled sd; tables written before the
#: robust scale (whose ``u`` was divided by s_pooled) lack it.
RANK_SCALE_COLUMN = "u_scale"
#: The share of within-sample rank differences, smallest by absolute value, that the robust scale keeps.
ROBUST_SCALE_INNER = 0.9
_Q_INNER = 1.6448536269514722  # Phi^-1((1 + ROBUST_SCALE_INNER) / 2)
#: E[Z^2 | |Z| <= q] of a standard normal: 1 - 2 q phi(q) / ROBUST_SCALE_INNER.
_INNER_NORMAL_VARIANCE = 1.0 - 2.0 * _Q_INNER * math.exp(-_Q_INNER ** 2 / 2) / math.sqrt(2 * math.pi) / ROBUST_SCALE_INNER
_GROUP = ["block", "instance", "pg", "sample"]


def pooled_sd(x: np.ndarray) -> float:
    """Pooled sd of a (J, m) array of J samples of m: sqrt(sum of squared deviations from
    each row's mean / (J (m - 1)))."""
    x = np.asarray(x, dtype=float)
    if x.ndim != 2 or x.shape[1] < 2 or x.shape[0] < 1:
        raise InputError(f"pooled sd needs a (J, m) array with J >= 1 and m >= 2, got shape {x.shape}")
    dev = x - x.mean(axis=1, keepdims=True)
    return float(np.sqrt((dev * dev).sum() / (x.shape[0] * (x.shape[1] - 1))))


def robust_scale(samples: np.ndarray) -> tuple[float, bool]:
    """The robust scale r_c of one identity from its samples, a (J, m) array of block times.

    Within each sample, the differences of every pair of ranks X_r − X_r' (m(m−1)/2 per sample;
    the identity's drift between samples cancels in them); r_c = sqrt(mean of their squares over
    the inner :data:`ROBUST_SCALE_INNER` of them by absolute value / (2 c)), c = E[Z² | |Z| <= q]
    for a standard normal Z and q its two-sided inner quantile, so that r_c equals the sd for normal
    ranks. A far rank leaves the inner share (it shifts the cut by at most m − 1 differences), so
    it cannot shrink its own u = (X − a_c)/r_c, as it does when divided by the pooled sd; and 90%
    of the differences keep r_c nearly as precise as the sd (docs/methodology.md, "The per-rank
    tail estimator"). Where the inner differences are all 0 (most samples' times equal), r_c falls back to the
    root mean square of all of them / sqrt(2) (the sd) and ``fell_back`` is True.
    """
    x = np.asarray(samples, dtype=float)
    if x.ndim != 2 or x.shape[1] < 2 or x.shape[0] < 1:
        raise InputError(f"robust scale needs a (J, m) array with J >= 1 and m >= 2, got shape {x.shape}")
    scale, fell_back = _robust_scales(x, np.zeros(x.shape[0], dtype=np.int64))
    return float(scale[0]), bool(fell_back[0])


def _robust_scales(x: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`robust_scale` of every identity at once: ``x`` (samples, m) block times, ``codes``
    (samples,) the identity of each sample as 0 … K − 1; returns (scales (K,), fell_back (K,)).
    One pass over all samples (the quantile per identity by pandas' grouped quantile, linear like
    :func:`numpy.quantile`), not a Python loop over identities."""
    first, second = np.triu_indices(x.shape[1], k=1)
    diff = np.abs(x[:, first] - x[:, second])  # (samples, pairs)
    code = np.repeat(codes, first.size)
    diff = diff.ravel()
    cut = pd.Series(diff).groupby(code).quantile(ROBUST_SCALE_INNER).to_numpy()
    inner = diff <= cut[code]
    k = int(codes.max()) + 1
    square = diff * diff
    inner_square = np.bincount(code, weights=square * inner, minlength=k) / np.bincount(code, weights=inner,
                                                                                          minlength=k)
    all_square = np.bincount(code, weights=square, minlength=k) / np.bincount(code, minlength=k)
    fell_back = ~(inner_square > 0)
    return np.where(fell_back, np.sqrt(all_square / 2.0), np.sqrt(inner_square / (2.0 * _INNER_NORMAL_VARIANCE))), fell_back


def pooled_zscores(times: pd.DataFrame, *, m: int, value: str = "busy_us") -> tuple[pd.DataFrame, pd.DataFrame]:
    """The z-score table from per-rank block times, and the block samples without a z.

    An identity (``block``: position and kernel signature) is pooled over every instance,
    every sample and every PG it occurs in (the replicas of a TP group run the same blocks).
    ``times`` has one row per (pg, block, instance, sample, rank) with the block time in
    column ``value`` (µs) plus the labels ``gpu``, ``precision``, ``position``, ``signature``,
    ``index``, ``rank``, ``n_kernels``, ``n_gemm_kernels``. Every (pg, block, instance, sample)
    must hold exactly ``m`` ranks. Returns (table, zero_sd) where zero_sd lists the samples
    of identities whose pooled sd is 0 (columns pg, index, sample, block, instance, detail).
    """
    empty_drops = pd.DataFrame(columns=["pg", "index", "sample", "block", "instance", "detail"])
    if times.empty:
        return pd.DataFrame(columns=[c for c in ZSCORE_COLUMNS if c != "workload"]), empty_drops
    if value not in times:
        raise InputError(f"block times have no column {value!r}")
    x = times[value].to_numpy(dtype=float)
    if not np.isfinite(x).all():
        raise InputError(f"block times: {int((~np.isfinite(x)).sum())} non-finite value(s) in {value}")
    t = times.assign(_x=x).sort_values([*_GROUP, "rank"], kind="stable")
    g = t.groupby(_GROUP, sort=True, observed=True)
    size = g["_x"].size()
    if (size != m).any():
        bad = size[size != m].index[0]
        raise InputError(f"block sample {dict(zip(_GROUP, bad, strict=True))} has "
                         f"{int(size[bad])} ranks, expected m={m}")
    mean = g["_x"].transform("mean")
    t["_ss"] = (t["_x"] - mean) ** 2
    per = g.agg(max_us=("_x", "max"), mean_us=("_x", "mean"), ss=("_ss", "sum"),
                gpu=("gpu", _label), precision=("precision", "first"), position=("position", "first"),
                signature=("signature", "first"), index=("index", "first"),
                n_kernels=("n_kernels", "first"), n_gemm_kernels=("n_gemm_kernels", "min"))
    per["ranks"] = g["rank"].agg(lambda r: ",".join(str(int(v)) for v in r))
    values = t["_x"].to_numpy().reshape(-1, m)  # sorted by sample then rank: one row per sample, as ``per``
    if not np.array_equal(values.max(axis=1), per["max_us"].to_numpy()):
        raise RuntimeError("zscores: per-rank values out of step with their samples")
    per["max_rank"] = t.loc[g["_x"].idxmax(), "rank"].to_numpy().astype(np.int64)
    per = per.reset_index()
    ident = per.groupby("block", sort=False)
    per["n_samples"] = ident["ss"].transform("size").astype(np.int64)
    per["dof"] = per["n_samples"] * (m - 1)
    per["block_sd_us"] = np.sqrt(ident["ss"].transform("sum") / per["dof"])
    per["block_mean_us"] = ident["mean_us"].transform("mean")  # equal sample sizes: mean of all X
    sd = per["block_sd_us"].to_numpy()
    # u = (X - a_c) / r_c with the identity's robust scale r_c (module docstring)
    codes = pd.factorize(per["block"])[0]
    scales, fell = _robust_scales(values, codes)
    scale = scales[codes]
    fell_back = int((fell & (scales > 0)).sum())
    if fell_back:
        log.info("zscores: %d identit(ies) with more than %.0f%% of their within-sample rank differences 0: their u "
                 "is scaled by the root mean square difference (the sd) instead", fell_back, 100 * ROBUST_SCALE_INNER)
    with np.errstate(divide="ignore", invalid="ignore"):
        u = (values - per["block_mean_us"].to_numpy()[:, None]) / scale[:, None]
        per["u_scale"] = scale / sd
    per["u"] = [",".join(f"{v:.7g}" for v in row) for row in u.tolist()]
    zero = per["block_sd_us"] <= 0
    zero_sd = per[zero][["pg", "index", "sample", "block", "instance"]].assign(
        detail="all block times of the identity are equal")
    per = per[~zero].reset_index(drop=True)
    per["z"] = (per["max_us"] - per["mean_us"]) / per["block_sd_us"]
    per["y"] = (per["max_us"] - per["block_mean_us"]) / per["block_sd_us"]
    between = per.groupby("block", sort=False)["mean_us"].transform(lambda v: v.var(ddof=1) if len(v) > 1 else np.nan)
    per["mean_var_ratio"] = m * between / per["block_sd_us"] ** 2
    per["cv"] = per["block_sd_us"] / per["block_mean_us"]
    per["has_gemm"] = per["n_gemm_kernels"] > 0
    per["time"] = value.removesuffix("_us")
    per["instance"] = per["instance"].astype(np.int64)
    per["sample"] = per["sample"].astype(np.int64)
    return per[[c for c in ZSCORE_COLUMNS if c != "workload"]], zero_sd


#: p-value below which an identity's sample means vary more between instances than iid ranks allow.
DRIFT_P = 0.001


def drifting_identities(table: pd.DataFrame, p_below: float = DRIFT_P) -> pd.DataFrame:
    """Block identities whose mean drifts between instances (one row each): the centred maximum y
    assumes a stationary mean, and a drift makes the default tau(n) an upper bound.

    The test: under iid ranks ``mean_var_ratio`` = m·var(sample means)/s² follows about
    F(n_samples − 1, dof) (normal ranks); identities with an upper-tail p below ``p_below``
    are returned with their ratio and p. An older table without the column gives an empty one.
    """
    from scipy import stats

    columns = ["block", "n_samples", "mean_var_ratio", "p_value"]
    if "mean_var_ratio" not in table or table.empty:
        return pd.DataFrame(columns=columns)
    ident = table.groupby("block", sort=False).agg(n_samples=("n_samples", "first"), dof=("dof", "first"),
                                                   mean_var_ratio=("mean_var_ratio", "first")).reset_index()
    ident = ident[ident["n_samples"] > 1]
    ident["p_value"] = stats.f.sf(ident["mean_var_ratio"], ident["n_samples"] - 1, ident["dof"])
    return ident.loc[ident["p_value"] < p_below, columns].reset_index(drop=True)


def _label(values: pd.Series) -> str:
    """One GPU label for a sample: the model, or the models joined by ``+`` when mixed."""
    uniq = sorted(set(map(str, values)))
    return uniq[0] if len(uniq) == 1 else "+".join(uniq)
