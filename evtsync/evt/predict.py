"""Predicted synchronization tax for a domain of n = k·m ranks (SPEC §7), and FLOPS scaling (§8).

A compute block with pooled standard deviation ``b`` (µs) whose pooled z-scores of the maximum
over ``m`` ranks follow GEV(mu, sigma, xi) has, in a domain of ``n = k·m`` ranks, a predicted
mean straggler delay

    tau(n) = b · E_k(mu, sigma, xi),   k = n / m,

with ``E_k`` the expected maximum of k iid GEV draws (:func:`evtsync.evt.gev.expected_max`).
For the Gumbel fit (xi = 0) this is ``b · (mu + sigma (gamma_E + ln(n/m)))``: the tax grows
at least logarithmically with the domain size.

Shapes: every function broadcasts with NumPy's rules. Posterior draws are passed as arrays of
one common shape, e.g. ``(chain, draw)``; to evaluate a vector of domain sizes against them,
give the draws a trailing axis::

    tau = predicted_tax_us(b, mu[..., None], sigma[..., None], xi[..., None], n=[8, 64, 512])
    # tau.shape == (chain, draw, 3)

or call :func:`predicted_tax_curve_us`, which adds that axis itself. xarray users pass
``.values`` and wrap the result (dimensions ``(*draw_dims, "n")``).

Prediction tables. :func:`tau_table`, :func:`bandwidth_table`, :func:`predicted_vs_measured`
and :func:`cell_parameter_table` take any fit with the small interface of
:class:`evtsync.evt.bayesfit.CellFit` (a :class:`~evtsync.evt.bayesfit.BayesFit`, an
:class:`~evtsync.evt.mlefit.MleCellFit`, a fit tree or a fit path), compute every quantity
draw by draw and summarise it with :func:`summarise`. The CLI, the pipeline and the report
all call these, so there is one column scheme:

``{quantity}_mean{unit}``, ``_lo{unit}``, ``_median{unit}``, ``_hi{unit}``, ``_share_infinite``
    for ``tau`` (``_us``), ``bstar`` (``_gbps``), ``reduction`` (no unit), ``predicted``
    (``_us``) and the parameters ``mu``, ``sigma``, ``xi``; ``lo``/``hi`` bound the central
    ``level`` interval (column ``level``; default :data:`evtsync.defaults.INTERVAL_LEVEL`),
    credible for a Bayesian fit, approximate confidence for an MLE (``fit_kind``).

Infinite draws (tau, and with it B*, where xi >= 1: the mean maximum does not exist) are one
policy everywhere (:data:`INFINITE_POLICY`, also in each table's ``attrs``): their share is
``{quantity}_share_infinite``; the mean is over the finite draws (NaN when none is); the
quantiles are over all draws, so an interval reaching into them has an infinite bound.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from evtsync.defaults import INTERVAL_LEVEL, check_level
from evtsync.errors import InputError
from evtsync.evt import gev
from evtsync.reference import REFERENCE_TFLOPS

log = logging.getLogger("evtsync.evt.predict")

__all__ = [
    "INFINITE_POLICY",
    "REFERENCE_TFLOPS",
    "bandwidth_table",
    "cell_parameter_table",
    "predicted_vs_measured",
    "summarise",
    "tau_table",
    "block_sd_from_cv",
    "domain_multiple",
    "flops_factor",
    "predicted_tax_curve_us",
    "predicted_tax_us",
    "scale_block_sd_for_flops",
]


#: How every table treats infinite draws (see the module docstring).
INFINITE_POLICY = ("share_infinite = share of draws that are infinite (xi >= 1); mean over the finite draws; "
                   "quantiles over all draws (an infinite bound means the interval reaches them)")
#: Columns a measured-delay table needs for :func:`predicted_vs_measured`.
MEASURED_COLUMNS = ("workload", "gpu", "precision", "n_ranks", "block_sd_us", "mean_delay_us")


def domain_multiple(n: ArrayLike, m: int = 4) -> NDArray[np.float64]:
    """``k = n / m`` as floats, after checking that every n is a positive multiple of m.

    A domain size that is not a multiple of the fitted sample size has no k = n/m samples of
    m ranks each, so it is refused (``InputError``) rather than rounded.
    """
    if isinstance(m, bool) or int(m) != m or m < 1:
        raise InputError(f"sample size m must be a positive integer; got {m!r}")
    m = int(m)
    n_arr = np.asarray(n)
    n_float = n_arr.astype(float)
    if np.any(~np.isfinite(n_float)) or np.any(n_float != np.round(n_float)) or np.any(n_float < 1):
        raise InputError(f"domain size n must be positive integers; got {n_arr.ravel()[:5].tolist()}")
    bad = np.asarray(n_float % m != 0)
    if np.any(bad):
        raise InputError(
            f"domain size n must be a multiple of m = {m} (n = k·m); "
            f"not multiples: {sorted({int(v) for v in np.asarray(n_float)[bad].ravel()})[:10]}"
        )
    return n_float / m


def predicted_tax_us(
    block_sd_us: ArrayLike,
    mu: ArrayLike,
    sigma: ArrayLike,
    xi: ArrayLike,
    n: ArrayLike,
    m: int = 4,
) -> NDArray[np.float64]:
    """tau(n) = b · E_k(mu, sigma, xi) with k = n/m, in µs (SPEC §7).

    ``block_sd_us`` is b, the block's pooled standard deviation in µs (``b = r·a``); ``mu, sigma,
    xi`` are the GEV parameters of the pooled z-scores (Coles' sign convention; scalars or
    posterior draws); ``n`` the domain size(s), each a multiple of ``m``. All arguments
    broadcast together (see the module docstring for posterior shapes). ``inf`` where xi >= 1
    (the mean maximum does not exist).
    """
    k = domain_multiple(n, m)
    b = np.asarray(block_sd_us, dtype=float)
    if np.any(b < 0):
        raise InputError("block standard deviation b must be >= 0 µs")
    value = b * np.asarray(gev.expected_max(mu, sigma, xi, k))
    return value[()] if value.ndim == 0 else value


def predicted_tax_curve_us(
    block_sd_us: ArrayLike,
    mu: ArrayLike,
    sigma: ArrayLike,
    xi: ArrayLike,
    n: ArrayLike,
    m: int = 4,
) -> NDArray[np.float64]:
    """tau for every domain size in the 1-D ``n``, with n as a new last axis.

    ``block_sd_us, mu, sigma, xi`` broadcast to a common draw shape D (e.g. ``(chain, draw)``);
    the result has shape ``D + (len(n),)``.
    """
    n_vec = np.atleast_1d(np.asarray(n))
    if n_vec.ndim != 1:
        raise InputError("n must be a scalar or a 1-D sequence of domain sizes")
    b, mu_a, sigma_a, xi_a = np.broadcast_arrays(
        *(np.asarray(v, dtype=float) for v in (block_sd_us, mu, sigma, xi))
    )
    return np.asarray(
        predicted_tax_us(b[..., None], mu_a[..., None], sigma_a[..., None], xi_a[..., None], n_vec, m)
    )


def block_sd_from_cv(block_mean_us: ArrayLike, cv: ArrayLike) -> NDArray[np.float64]:
    """b = r·a: the block standard deviation from its mean a (µs) and coefficient of variation r."""
    value = np.asarray(block_mean_us, dtype=float) * np.asarray(cv, dtype=float)
    return value[()] if value.ndim == 0 else value


def flops_factor(target_tflops: ArrayLike, reference_tflops: float = REFERENCE_TFLOPS) -> NDArray[np.float64]:
    """f = target peak / reference peak (reference: H200, 989 dense BF16 TFLOPS)."""
    target = np.asarray(target_tflops, dtype=float)
    if np.any(target <= 0) or reference_tflops <= 0:
        raise InputError("peak TFLOPS must be > 0")
    value = target / reference_tflops
    return value[()] if value.ndim == 0 else value


def scale_block_sd_for_flops(block_sd_us: ArrayLike, factor: ArrayLike) -> NDArray[np.float64]:
    """b / f: a GPU f times faster runs the block in a/f, and with r fixed, b = r·a scales alike.

    Since tau(n) is linear in b, the tax on the faster GPU is tau(n) / f as well (SPEC §8).
    """
    f = np.asarray(factor, dtype=float)
    if np.any(f <= 0):
        raise InputError("FLOPS factor f must be > 0")
    value = np.asarray(block_sd_us, dtype=float) / f
    return value[()] if value.ndim == 0 else value


# --------------------------------------------------------------------------- prediction tables

def summarise(draws: ArrayLike, level: float = INTERVAL_LEVEL, axis: int = 0) -> dict[str, NDArray[np.float64]]:
    """mean, lo, median, hi, share_infinite of draws along ``axis`` (policy: :data:`INFINITE_POLICY`)."""
    level = check_level(level)
    x = np.asarray(draws, dtype=float)
    finite = np.isfinite(x)
    with np.errstate(invalid="ignore"), __import__("warnings").catch_warnings():
        __import__("warnings").simplefilter("ignore", RuntimeWarning)  # all-NaN slices give NaN, said so
        mean = np.nanmean(np.where(finite, x, np.nan), axis=axis)
        lo, median, hi = np.nanquantile(x, [(1 - level) / 2, 0.5, (1 + level) / 2], axis=axis)
    share = np.mean(np.isinf(x), axis=axis)
    return {"mean": mean, "lo": lo, "median": median, "hi": hi, "share_infinite": share}


def _columns(prefix: str, unit: str, summary: dict[str, NDArray[np.float64]], index: Any) -> dict[str, float]:
    out = {}
    for key in ("mean", "lo", "median", "hi"):
        out[f"{prefix}_{key}{unit}"] = float(np.asarray(summary[key])[index])
    out[f"{prefix}_share_infinite"] = float(np.asarray(summary["share_infinite"])[index])
    return out


def _fit(fit: Any) -> Any:
    from evtsync.evt.bayesfit import as_fit

    return as_fit(fit)


def _rows_for(fit: Any, block_sd_us: float | pd.DataFrame,
              need_b: bool = True) -> tuple[pd.DataFrame, list[int], dict[str, int]]:
    """The cells to predict for, each with its block sd ``b_us`` and the index of its fit cell.

    A number applies to every cell of the fit. A table gives one ``b_us`` (or ``block_sd_us``)
    per row of group values (e.g. gpu, precision); rows whose cell the fit does not have are
    skipped and counted (a pooled fit has one cell, used for every row).
    """
    cells = fit.cells.reset_index(drop=True)
    groups = [c for c in cells.columns if c not in ("cell", "n_obs")]
    if not isinstance(block_sd_us, pd.DataFrame):
        b = float(block_sd_us)
        if not b >= 0:
            raise InputError(f"block standard deviation must be >= 0 µs; got {block_sd_us}")
        rows = cells.drop(columns=["n_obs"]).assign(b_us=b)
        return rows, list(range(len(cells))), {}
    table = block_sd_us.rename(columns={"block_sd_us": "b_us"})
    if need_b and "b_us" not in table:
        raise InputError("block scale table: needs a column b_us (or block_sd_us)")
    keep, index, skipped = [], [], {"no matching cell": 0}
    lookup = {tuple(r[g] for g in groups): i for i, r in cells.astype(str).iterrows()} if groups else None
    for _, row in table.iterrows():
        if lookup is None:
            c = 0
        else:
            if any(g not in row.index for g in groups):
                raise InputError(f"block scale table: needs the fit's group column(s) {groups}")
            c = lookup.get(tuple(str(row[g]) for g in groups))
            if c is None:
                skipped["no matching cell"] += 1
                continue
        keep.append({**row.to_dict(), "cell": str(cells["cell"].iloc[c])})
        index.append(c)
    return pd.DataFrame(keep), index, skipped


def _finish(out: pd.DataFrame, fit: Any, level: float, skipped: dict[str, int], what: str) -> pd.DataFrame:
    out.insert(0, "model", fit.name)
    out["fit_kind"] = fit.kind
    out["level"] = level
    out["converged"] = bool(fit.converged)
    out.attrs["infinite_draws"] = INFINITE_POLICY
    out.attrs["skipped"] = skipped
    for why, count in skipped.items():
        if count:
            log.warning("%s: skipped %d row(s): %s", what, count, why)
    if fit.convergence_note:
        log.warning("%s", fit.convergence_note)
    return out


def _tau_draws(fit: Any, index: list[int], b: NDArray[np.float64], n: Sequence[int], m: int) -> NDArray[np.float64]:
    """tau draws, shape (sample, row, n), for the fit cells ``index`` with block sds ``b``."""
    mu, sigma, xi = fit.cell_draws()
    idx = np.asarray(index, dtype=int)
    return predicted_tax_curve_us(b[None, :], mu[:, idx], sigma[:, idx], xi[:, idx], list(n), m)


def tau_table(fit: Any, n: Sequence[int], block_sd_us: float | pd.DataFrame, m: int = 4,
              level: float = INTERVAL_LEVEL) -> pd.DataFrame:
    """tau(n) = b·E_(n/m) per cell and n: mean, ``level`` interval, share of infinite draws (µs)."""
    level = check_level(level)
    fit = _fit(fit)
    domain_multiple(n, m)
    rows, index, skipped = _rows_for(fit, block_sd_us)
    records = []
    if index:
        tau = _tau_draws(fit, index, rows["b_us"].to_numpy(float), n, m)
        s = summarise(tau, level)
        for i, row in enumerate(rows.to_dict(orient="records")):
            for j, nn in enumerate(n):
                records.append({**row, "n": int(nn), "k": int(nn) / m, **_columns("tau", "_us", s, (i, j))})
    return _finish(pd.DataFrame(records), fit, level, skipped, "tau(n)")


def bandwidth_table(fit: Any, topologies: Sequence[str], n: Sequence[int], alpha_us: float, size_bytes: float,
                    block_sd_us: float | pd.DataFrame, eps: float = -0.5, m: int = 4,
                    level: float = INTERVAL_LEVEL, flops_factor: float = 1.0) -> pd.DataFrame:
    """B* (GB/s) with the tax, Hockney's B*_H and the reduction 1 - B*/B*_H per cell, topology and n.

    ``flops_factor`` f divides the block sd, and with it tau, for a GPU f times faster (§8).
    """
    from evtsync.hockney import (
        bandwidth_reduction,
        get_topology,
        hockney_bandwidth,
        optimal_bandwidth,
    )

    level = check_level(level)
    if not flops_factor > 0:
        raise InputError(f"FLOPS factor must be > 0; got {flops_factor}")
    fit = _fit(fit)
    domain_multiple(n, m)
    rows, index, skipped = _rows_for(fit, block_sd_us)
    records = []
    if index:
        tau = _tau_draws(fit, index, rows["b_us"].to_numpy(float) / flops_factor, n, m)  # (sample, row, n)
        ts = summarise(tau, level)
        for name in topologies:
            topo = get_topology(name)
            p = np.asarray(topo.p(np.asarray(n)), dtype=float)
            q = np.asarray(topo.q(np.asarray(n)), dtype=float)
            with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
                bstar = optimal_bandwidth(size_bytes, alpha_us, tau, p, q, eps) / 1e9
                red = bandwidth_reduction(alpha_us, tau, p)
            bh = np.broadcast_to(np.asarray(hockney_bandwidth(size_bytes, alpha_us, p, q, eps), dtype=float) / 1e9,
                                 p.shape)
            bs, rs = summarise(bstar, level), summarise(red, level)
            for i, row in enumerate(rows.to_dict(orient="records")):
                for j, nn in enumerate(n):
                    records.append({
                        **row, "topology": topo.name, "n": int(nn), "p": float(p[j]), "q": float(q[j]),
                        "alpha_us": float(alpha_us), "bytes": float(size_bytes), "eps": float(eps),
                        "flops_factor": float(flops_factor), **_columns("tau", "_us", ts, (i, j)),
                        **_columns("bstar", "_gbps", bs, (i, j)), "bstar_hockney_gbps": float(bh[j]),
                        **_columns("reduction", "", rs, (i, j))})
    return _finish(pd.DataFrame(records), fit, level, skipped, "B*")


def predicted_vs_measured(fit: Any, measured: pd.DataFrame, m: int = 4, level: float = INTERVAL_LEVEL,
                          source: str = "measured table") -> pd.DataFrame:
    """Predicted against measured mean straggler delay per workload × GPU × precision × n.

    ``measured`` has one row per collective (or per workload, already averaged) with columns
    :data:`MEASURED_COLUMNS`. Rows are grouped by workload, gpu, precision and n_ranks: the
    measured mean with its Student-t ``level`` interval (NaN from a single row), against
    tau(n) = b·E_(n/m) with b the group's mean ``block_sd_us`` and the fit's cell for its GPU and
    precision. Rows with no matching cell, an n that is not a multiple of m, or non-finite
    values are skipped and counted by reason (``attrs["skipped"]``, in input rows).
    """
    from scipy import stats

    level = check_level(level)
    fit = _fit(fit)
    missing = [c for c in MEASURED_COLUMNS if c not in measured.columns]
    if missing:
        raise InputError(f"{source}: missing column(s) {missing}; expected {list(MEASURED_COLUMNS)}")
    values = measured[list(MEASURED_COLUMNS)].copy()
    for col in ("n_ranks", "block_sd_us", "mean_delay_us"):
        values[col] = pd.to_numeric(values[col], errors="coerce")
    finite = np.isfinite(values[["n_ranks", "block_sd_us", "mean_delay_us"]].to_numpy(float)).all(axis=1)
    skipped = {"non-finite value": int((~finite).sum()), "n not a multiple of m": 0, "no matching cell": 0}
    values = values[finite]
    groups = values.groupby(["workload", "gpu", "precision", "n_ranks"], sort=True)
    agg = groups.agg(n_collectives=("mean_delay_us", "size"), block_sd_us=("block_sd_us", "mean"),
                     measured_mean_us=("mean_delay_us", "mean"), sd=("mean_delay_us", "std")).reset_index()
    ok = (agg["n_ranks"] % m == 0) & (agg["n_ranks"] >= m)
    skipped["n not a multiple of m"] = int(groups.size()[~ok.to_numpy()].sum())
    agg = agg[ok.to_numpy()]
    rows, index, _ = _rows_for(fit, agg.rename(columns={"block_sd_us": "b_us"}))
    keys = ["workload", "gpu", "precision", "n_ranks"]
    matched = set(map(tuple, rows[keys].to_numpy().tolist())) if len(rows) else set()
    unmatched = [tuple(r) not in matched for r in agg[keys].to_numpy().tolist()]
    skipped["no matching cell"] = int(agg.loc[unmatched, "n_collectives"].sum())  # rows, as the other reasons
    records = []
    mu, sigma, xi = fit.cell_draws()
    for row, c in zip(rows.to_dict(orient="records"), index, strict=True):
        n = int(row["n_ranks"])
        pred = predicted_tax_us(row["b_us"], mu[:, c], sigma[:, c], xi[:, c], n, m)
        ps = summarise(pred, level)
        k = int(row["n_collectives"])
        se = row["sd"] / np.sqrt(k) if k > 1 else float("nan")
        tq = float(stats.t.ppf(0.5 + level / 2, max(k - 1, 1)))
        mean = float(row["measured_mean_us"])
        lo_p, hi_p = float(ps["lo"]), float(ps["hi"])
        records.append({"workload": row["workload"], "gpu": row["gpu"], "precision": row["precision"], "n": n,
                        "cell": row["cell"], "n_collectives": k, "block_sd_us": float(row["b_us"]),
                        "measured_mean_us": mean, "measured_lo_us": mean - tq * se, "measured_hi_us": mean + tq * se,
                        **_columns("predicted", "_us", ps, ()), "inside_interval": bool(lo_p <= mean <= hi_p)})
    return _finish(pd.DataFrame(records), fit, level, skipped, source)


def cell_parameter_table(fit: Any, level: float = INTERVAL_LEVEL, cells: pd.DataFrame | None = None) -> pd.DataFrame:
    """mu, sigma, xi per cell: mean, ``level`` interval, median (columns ``xi_mean``, ``xi_lo`` ...).

    ``cells`` (a table of group values such as gpu, precision) asks for those cells, each with
    its fit cell (a pooled fit's one cell for all of them); default: the fit's own cells.
    """
    level = check_level(level)
    fit = _fit(fit)
    draws = dict(zip(("mu", "sigma", "xi"), fit.cell_draws(), strict=True))
    summaries = {k: summarise(v, level) for k, v in draws.items()}
    if cells is None:
        rows, index, skipped = fit.cells.reset_index(drop=True), list(range(len(fit.cells))), {}
    else:
        rows, index, skipped = _rows_for(fit, cells, need_b=False)
    records = []
    for row, c in zip(rows.to_dict(orient="records"), index, strict=True):
        rec = {k: v for k, v in row.items() if k != "b_us"}
        for name, s in summaries.items():
            rec.update({k: v for k, v in _columns(name, "", s, c).items() if not k.endswith("share_infinite")})
        records.append(rec)
    return _finish(pd.DataFrame(records), fit, level, skipped, "cell parameters")


def population_table(fit: Any, level: float = INTERVAL_LEVEL) -> pd.DataFrame:
    """The population parameters of a hierarchical fit (``xi0``, ``xi_delta_*``, ``xi_sd_*``):
    one row per scalar with mean, ``level`` interval and median (empty for other fits)."""
    level = check_level(level)
    fit = _fit(fit)
    records = []
    if fit.kind == "bayes":
        post = fit.tree["posterior"].to_dataset()
        for var in post.data_vars:
            if var == "xi0" or (var.startswith(("xi_delta_", "xi_sd_")) and not var.endswith("_raw")):
                da = post[var]
                extra = [d for d in da.dims if d not in ("chain", "draw")]
                flat = da.stack(sample=("chain", "draw")).transpose(*extra, "sample")
                labels = [f"{var}[{v}]" for v in da[extra[0]].values] if extra else [var]
                for label, v in zip(labels, flat.values.reshape(len(labels), -1), strict=True):
                    s = summarise(v, level)
                    records.append({"parameter": label, **{k: float(s[k]) for k in ("mean", "lo", "median", "hi")}})
    out = pd.DataFrame(records, columns=["parameter", "mean", "lo", "median", "hi"])
    return _finish(out, fit, level, {}, "population parameters")


def block_scale(z: pd.DataFrame) -> pd.DataFrame:
    """Per GPU × precision: b = mean r × mean a over block identities (the paper's b = r·a), ``b_us``."""
    ident = z.groupby(["gpu", "precision", "block"], sort=True).agg(a=("block_mean_us", "first"),
                                                                     r=("cv", "first"))
    per_cell = ident.groupby(["gpu", "precision"]).agg(mean_a_us=("a", "mean"), mean_r=("r", "mean"),
                                                       n_blocks=("a", "size"))
    per_cell["b_us"] = per_cell["mean_a_us"] * per_cell["mean_r"]
    return per_cell.reset_index()


def domain_sizes(m: int, n_max: int = 4096) -> NDArray[np.int64]:
    """m, 2m, 4m, … up to ``n_max``: the domain sizes of the tau(n) and B* curves."""
    sizes = [int(m)]
    while sizes[-1] * 2 <= n_max:
        sizes.append(sizes[-1] * 2)
    return np.array(sizes, dtype=np.int64)


def measured_delays(zscores: pd.DataFrame, collectives: pd.DataFrame,
                    attribution: pd.DataFrame | None = None) -> tuple[pd.DataFrame, str]:
    """The measured straggler delay of each collective that follows a kept compute block.

    Joins the block of every z-score (its pooled ``block_sd_us``) with the valid collective right
    after it (``mean_delay_us``, ``n_ranks``); with an attribution table, only collectives whose
    straggler path is GPU-only are kept. Returns the table (columns :data:`MEASURED_COLUMNS`
    and pg, index) and a sentence saying which collectives it holds.
    """
    coll = collectives[collectives["valid"].astype(bool)]
    selection = "all valid collectives that follow a kept GEMM block"
    if attribution is not None:
        gpu_only = attribution[(attribution["status"] == "ok") & (attribution["path_kind"] == "gpu_only")]
        coll = coll.merge(gpu_only[["workload", "pg", "index"]], on=["workload", "pg", "index"], how="inner")
        selection = "valid collectives after a kept GEMM block whose straggler path is GPU-only"
    blocks = zscores.drop_duplicates(["workload", "pg", "index", "block"])[
        ["workload", "gpu", "precision", "pg", "index", "block", "block_sd_us"]].copy()
    blocks["next_index"] = blocks["index"].astype(np.int64) + 1
    joined = blocks.merge(coll[["workload", "pg", "index", "mean_delay_us", "n_ranks"]],
                          left_on=["workload", "pg", "next_index"], right_on=["workload", "pg", "index"],
                          suffixes=("", "_coll"))
    return joined, selection
