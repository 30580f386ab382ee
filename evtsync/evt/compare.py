"""Model comparison by PSIS-LOO: ELPD, differences with their SE, Pareto-k, a verdict in words.

PSIS-LOO treats every observation on its own (its importance weights are the inverse of its
own likelihood over the posterior draws), so computing the pointwise log-likelihood in chunks
of observations and smoothing each chunk is exact, and memory stays bounded: at 250k
observations and 2000 draws the full array would be 4 GB per model, one chunk is a few MB.

The smoothing is ArviZ's PSIS algorithm (Vehtari et al. 2024: tail length, Zhang-Stephens
generalised-Pareto fit with its weak prior on k, smoothed tail quantiles capped at the largest
raw weight, same relative efficiency r_eff) written vectorised over the observations of a chunk:
ArviZ's own ``psislw`` loops over observations in Python (about 2 ms each, 8 minutes at 250k).
``tests/evt/test_bayes_compare.py`` checks the result against :func:`arviz.loo` to 1e-8.
For fits whose log-likelihood is stored, :func:`arviz_loo` gives ArviZ's own object.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field

import numba
import numpy as np
import pandas as pd
import xarray as xr
from scipy.special import logsumexp

from evtsync.core.errors import FitError
from evtsync.core.progress import progress
from evtsync.evt import gev
from evtsync.evt.bayesfit import cell_parameters, convergence_note, is_converged
from evtsync.evt.families import UNRECORDED_STRUCTURE, family_label, structure_note
from evtsync.evt.fitfile import R_EFF_ATTR, relative_efficiency
from evtsync.evt.gev import SERIES_THRESHOLD

log = logging.getLogger("evtsync.evt.compare")

#: Draws x observations per chunk (about 64 MB of float64 log-likelihood at a time).
CHUNK_VALUES = 8_000_000



def _gpdfit(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zhang-Stephens GPD fit with ArviZ's prior on k, vectorised over rows of sorted ``x``."""
    prior_bs, prior_k = 3.0, 10.0
    n_obs, n = x.shape
    m_est = 30 + int(n**0.5)
    xstar = x[:, int((n / 4 + 0.5) - 1)]
    bad = ~(xstar > x[:, 0])
    j = np.arange(1, m_est + 1, dtype=float)
    b = (1 - np.sqrt(m_est / (j - 0.5)))[None, :] / (prior_bs * np.where(bad, 1.0, xstar))[:, None]
    b = b + 1 / x[:, -1][:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        k_ary = np.log1p(-b[:, :, None] * x[:, None, :]).mean(axis=2)
        len_scale = n * (np.log(-b / k_ary) - k_ary - 1)
    with np.errstate(invalid="ignore"):
        w = np.exp(len_scale - logsumexp(len_scale, axis=1, keepdims=True))
        w = np.where(w >= 10 * np.finfo(float).eps, w, 0.0)
        w = w / w.sum(axis=1, keepdims=True)
        b_post = np.sum(b * w, axis=1)
    with np.errstate(invalid="ignore"):
        kappa = np.mean(np.log1p(-b_post[:, None] * x), axis=1)
    sigma = -kappa / b_post
    kappa = (n * kappa + prior_k * 0.5) / (n + prior_k)
    kappa = np.where(np.isnan(kappa), np.inf, kappa)
    kappa = np.where(bad, np.nan, kappa)
    sigma = np.where(bad, np.nan, sigma)
    return kappa, sigma


def tail_length(n_samples: int, r_eff: float) -> int:
    """Number of largest weights fitted by the generalised Pareto (ArviZ's rule)."""
    if n_samples * r_eff > 225:
        return int(np.floor(3 * (n_samples / r_eff) ** 0.5))
    return int(np.floor(n_samples / 5))


def psis_loo_pointwise(loglik: np.ndarray, r_eff: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pointwise PSIS-LOO of a (draws, observations) log-likelihood block.

    Returns ``(elpd_i, p_loo_i, pareto_k)`` per observation, as ArviZ computes them.
    """
    S, n = loglik.shape
    M = tail_length(S, r_eff)
    lw = -loglik
    lw = lw - lw.max(axis=0, keepdims=True)
    part = np.argpartition(lw, S - M - 1, axis=0)
    top_idx = part[S - M - 1:, :]
    top = np.take_along_axis(lw, top_idx, axis=0)
    order = np.argsort(top, axis=0)
    top_idx = np.take_along_axis(top_idx, order, axis=0)
    top = np.take_along_axis(top, order, axis=0)
    cutoff = top[0, :]
    tail = top[1:, :]
    max_tail = tail[-1, :]
    exp_tail = np.exp(tail).T
    exp_cut = np.exp(cutoff)
    kappa, sigma = _gpdfit(exp_tail - exp_cut[:, None])
    ok = np.isfinite(kappa)
    if ok.any():
        p = np.arange(0.5, M) / M
        k_ok, s_ok, c_ok = kappa[ok][:, None], sigma[ok][:, None], exp_cut[ok][:, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            small = np.abs(k_ok) == 0
            q = np.where(small, c_ok - s_ok * np.log1p(-p)[None, :],
                         c_ok + s_ok * np.expm1(-k_ok * np.log1p(-p)[None, :]) / np.where(small, 1.0, k_ok))
            q = np.where(s_ok <= 0, np.nan, q)
            smoothed = np.log(q)
        smoothed = np.where(smoothed > max_tail[ok][:, None], max_tail[ok][:, None], smoothed)
        cols = np.flatnonzero(ok)
        lw[top_idx[1:, ok], cols[None, :]] = smoothed.T
    lw = lw - logsumexp(lw, axis=0, keepdims=True)
    elpd_i = logsumexp(lw + loglik, axis=0)
    lppd_i = logsumexp(loglik, axis=0) - np.log(S)
    return elpd_i, lppd_i - elpd_i, kappa


def _psis_column(ll: np.ndarray, M: int, lw_buf: np.ndarray) -> tuple[float, float, float]:
    """PSIS-LOO of one observation from its S log-likelihood values (ArviZ's algorithm)."""
    S = ll.shape[0]
    mx = -np.inf
    for s in range(S):
        lw_buf[s] = -ll[s]
        mx = max(mx, lw_buf[s])
    for s in range(S):
        lw_buf[s] -= mx
    thr = np.partition(lw_buf.copy(), S - M - 1)[S - M - 1]
    n_cand = 0
    for s in range(S):
        n_cand += lw_buf[s] >= thr
    cand = np.empty(n_cand, dtype=np.int64)
    n_cand = 0
    for s in range(S):
        if lw_buf[s] >= thr:
            cand[n_cand] = s
            n_cand += 1
    cand = cand[np.argsort(lw_buf[cand])]
    top_idx = cand[n_cand - M - 1:]
    cutoff = lw_buf[top_idx[0]]
    max_tail = lw_buf[top_idx[M]]
    exp_cut = math.exp(cutoff)
    x = np.empty(M)
    for i in range(M):
        x[i] = math.exp(lw_buf[top_idx[i + 1]]) - exp_cut
    # Zhang-Stephens fit with ArviZ's weak prior on k (prior_bs = 3, prior_k = 10)
    m_est = 30 + int(M**0.5)
    xstar = x[int((M / 4 + 0.5) - 1)]
    kappa = np.nan
    if xstar > x[0]:
        b = np.empty(m_est)
        len_scale = np.empty(m_est)
        for j in range(m_est):
            b[j] = (1 - math.sqrt(m_est / (j + 1 - 0.5))) / (3.0 * xstar) + 1 / x[M - 1]
            acc = 0.0
            for i in range(M):
                acc += math.log1p(-b[j] * x[i])
            k_j = acc / M
            len_scale[j] = M * (math.log(-b[j] / k_j) - k_j - 1)
        ls_max = len_scale.max()
        total = 0.0
        for j in range(m_est):
            total += math.exp(len_scale[j] - ls_max)
        log_total = ls_max + math.log(total)
        w_sum = 0.0
        w = np.empty(m_est)
        for j in range(m_est):
            w[j] = math.exp(len_scale[j] - log_total)
            if not w[j] >= 10 * 2.220446049250313e-16:
                w[j] = 0.0
            w_sum += w[j]
        b_post = 0.0
        for j in range(m_est):
            b_post += b[j] * w[j] / w_sum
        acc = 0.0
        for i in range(M):
            acc += math.log1p(-b_post * x[i])
        k_hat = acc / M
        sigma_hat = -k_hat / b_post
        kappa = (M * k_hat + 10 * 0.5) / (M + 10)
        if np.isnan(kappa):
            kappa = np.inf
        if np.isfinite(kappa):
            for i in range(M):
                p = (i + 0.5) / M
                if sigma_hat <= 0:
                    q = np.nan
                elif kappa == 0:
                    q = exp_cut - sigma_hat * math.log1p(-p)
                else:
                    q = exp_cut + sigma_hat * math.expm1(-kappa * math.log1p(-p)) / kappa
                sm = math.log(q) if q > 0 else (np.nan if q != q else -np.inf)
                if sm > max_tail:
                    sm = max_tail
                lw_buf[top_idx[i + 1]] = sm
    # normalise, then elpd_i = logsumexp(lw + ll), lppd_i = logsumexp(ll) - log S.
    # Outside the smoothed tail lw + ll = -mx for every draw, so that sum is O(tail) + a count.
    mx_lw = lw_buf.max()
    mx_ll = ll.max()
    total = 0.0
    t3 = 0.0
    for s in range(S):
        total += math.exp(lw_buf[s] - mx_lw)
        t3 += math.exp(ll[s] - mx_ll)
    norm = mx_lw + math.log(total)
    tail_terms = np.empty(M + 1)
    for i in range(M):
        tail_terms[i] = lw_buf[top_idx[i + 1]] + ll[top_idx[i + 1]]
    tail_terms[M] = -mx + math.log(S - M)
    mx2 = tail_terms.max()
    t2 = 0.0
    for i in range(M + 1):
        t2 += math.exp(tail_terms[i] - mx2)
    elpd = mx2 + math.log(t2) - norm
    lppd = mx_ll + math.log(t3) - math.log(S)
    return elpd, lppd - elpd, kappa


def _loo_all(z, cell, mu, sigma, xi, M, elpd_out, p_out, k_out):
    """Log-likelihood and PSIS-LOO observation by observation: memory O(draws).

    The log density is the formula of :mod:`evtsync.evt.gev` (series for
    |xi t| < ``gev.SERIES_THRESHOLD``) with log(sigma), 1/sigma and 1/xi hoisted out of the loop over observations.
    """
    S, n_cells = mu.shape
    log_sigma = np.log(sigma)
    inv_sigma = 1.0 / sigma
    inv_xi = np.zeros((S, n_cells))
    for s in range(S):
        for c in range(n_cells):
            if xi[s, c] != 0.0:
                inv_xi[s, c] = 1.0 / xi[s, c]
    ll = np.empty(S)
    lw_buf = np.empty(S)
    for j in range(z.shape[0]):
        c = cell[j]
        for s in range(S):
            t = (z[j] - mu[s, c]) * inv_sigma[s, c]
            zz = xi[s, c] * t
            if not 1.0 + zz > 0.0:
                ll[s] = -np.inf
                continue
            if abs(zz) < SERIES_THRESHOLD:
                L = t * (1.0 + zz * (-0.5 + zz * (1.0 / 3.0 + zz * (-0.25 + zz * 0.2))))
            else:
                L = math.log1p(zz) * inv_xi[s, c]
            ll[s] = -log_sigma[s, c] - (1.0 + xi[s, c]) * L - math.exp(-L)
        elpd_out[j], p_out[j], k_out[j] = _psis_nb(ll, M, lw_buf)


_psis_nb = numba.njit(cache=True)(_psis_column)
#: Compiled lazily on first use and cached on disk (numba ``cache=True``); releases the GIL so
#: that chunks of observations run on several threads.
_loo_kernel = numba.njit(cache=True, nogil=True)(_loo_all)


def pointwise_loglik_chunks(tree: xr.DataTree, chunk_values: int = CHUNK_VALUES):
    """Yield ``(obs_slice, loglik)`` blocks of the fit's pointwise log-likelihood, (draws, obs)."""
    params = cell_parameters(tree)
    obs = tree["observed_data"].to_dataset()
    z = obs["z"].values
    cell = obs["cell"].values
    mu = params["mu"].values.reshape(-1, params.sizes["cell"])
    sigma = params["sigma"].values.reshape(-1, params.sizes["cell"])
    xi = params["xi"].values.reshape(-1, params.sizes["cell"])
    S = mu.shape[0]
    step = max(1, chunk_values // S)
    starts = range(0, len(z), step)
    for start in progress(starts, desc="log-likelihood chunks", total=len(starts)):
        sl = slice(start, min(start + step, len(z)))
        c = cell[sl]
        yield sl, gev.logpdf(z[sl][None, :], mu[:, c], sigma[:, c], xi[:, c])


@dataclass
class LooResult:
    """PSIS-LOO of one fit: totals and pointwise values indexed by input row."""

    name: str
    family: str
    elpd: float
    se: float
    p_loo: float
    n_obs: int
    n_samples: int
    good_k: float
    elpd_i: np.ndarray = field(repr=False)
    pareto_k: np.ndarray = field(repr=False)
    rows: np.ndarray = field(repr=False)
    converged: bool = True
    note: str = ""

    def k_counts(self) -> dict[str, int]:
        """Pareto-k counts: good (<= good_k), bad (<= 1), very bad (> 1 or undefined)."""
        k = self.pareto_k
        good = int(np.sum(k <= self.good_k))
        bad = int(np.sum((k > self.good_k) & (k <= 1)))
        return {"good": good, "bad": bad, "very_bad": len(k) - good - bad}


def loo(tree: xr.DataTree, chunk_values: int | None = None, threads: int | None = None) -> LooResult:
    """PSIS-LOO of a fit.

    By default one compiled pass per observation (its log-likelihood over the draws, then
    PSIS): memory O(draws), about 0.1 ms per observation at 2000 draws. With
    ``chunk_values`` the NumPy path computes blocks of that many log-likelihood values and
    smooths them vectorised (same numbers; the reference implementation). ``threads``
    (default: up to 2) run chunks of observations in parallel.
    """
    # the fit records it (computed where ArviZ's stats are already imported); older fits: here
    r_eff = float(tree.attrs[R_EFF_ATTR]) if R_EFF_ATTR in tree.attrs else relative_efficiency(tree)
    n_obs = tree["observed_data"].sizes["obs"]
    post = tree["posterior"].to_dataset()
    S = post.sizes["chain"] * post.sizes["draw"]
    elpd_i = np.empty(n_obs)
    p_i = np.empty(n_obs)
    k_i = np.empty(n_obs)
    if chunk_values is None:
        params = cell_parameters(tree)
        obs = tree["observed_data"].to_dataset()
        flat = [np.ascontiguousarray(params[v].values.reshape(S, -1)) for v in ("mu", "sigma", "xi")]
        z = np.ascontiguousarray(obs["z"].values, dtype=float)
        cell = np.ascontiguousarray(obs["cell"].values, dtype=np.int64)
        from concurrent.futures import ThreadPoolExecutor

        M = tail_length(S, r_eff)
        step = 5_000
        slices = [slice(a, min(a + step, n_obs)) for a in range(0, n_obs, step)]

        def run(sl: slice) -> None:
            _loo_kernel(z[sl], cell[sl], flat[0], flat[1], flat[2], M, elpd_i[sl], p_i[sl], k_i[sl])

        if slices:
            run(slices[0])  # compiles (or loads from cache) once, before the threads start
        with ThreadPoolExecutor(max_workers=threads or min(2, os.cpu_count() or 1)) as pool:
            list(progress(pool.map(run, slices[1:]), desc="PSIS-LOO", total=len(slices) - 1))
    else:
        for sl, ll in pointwise_loglik_chunks(tree, chunk_values):
            elpd_i[sl], p_i[sl], k_i[sl] = psis_loo_pointwise(ll, r_eff)
    se = float(np.sqrt(n_obs * np.var(elpd_i, ddof=1))) if n_obs > 1 else 0.0
    return LooResult(
        name=str(tree.attrs.get("model_name", "?")),
        family=str(tree.attrs.get("model_family", "?")),
        elpd=float(elpd_i.sum()), se=se, p_loo=float(p_i.sum()), n_obs=n_obs, n_samples=S,
        good_k=min(1 - 1 / np.log10(S), 0.7) if S > 1 else 0.7,
        elpd_i=elpd_i, pareto_k=k_i, rows=np.asarray(tree["observed_data"]["row"].values),
        converged=is_converged(tree), note=convergence_note(tree),
    )


def arviz_loo(tree: xr.DataTree):
    """ArviZ's own :func:`arviz.loo` on a fit whose log-likelihood group is stored."""
    import arviz_stats as az  # the stats alone: `arviz` also imports its plotting (matplotlib)

    if "log_likelihood" not in tree.children:
        raise FitError(f"{tree.attrs.get('fit_path', 'fit')}: log-likelihood not stored; use evtsync.evt.compare.loo")
    return az.loo(tree, pointwise=True, var_name="z")


def _label(res: LooResult) -> str:
    return f"{res.name} ({family_label(res.family)})"


#: Columns of the comparison table: rank (0 = best), model, family, elpd_loo with its se, p_loo,
#: elpd_diff (best minus this model) with its standard error diff_se, the Pareto-k counts
#: (k_good <= 0.7 < k_bad <= 1 < k_very_bad; n_bad_k = k_bad + k_very_bad), converged.
COMPARE_COLUMNS = ["rank", "model", "family", "elpd_loo", "se", "p_loo", "elpd_diff", "diff_se", "k_good", "k_bad",
                   "k_very_bad", "n_bad_k", "converged", "location_scale"]


def location_scale(tree: xr.DataTree) -> str:
    """How a fit's location and scale vary over cells, in words (column ``location_scale`` of the
    comparison table): two fits whose words differ differ in more than the shape, so their ΔELPD
    is not the shape's alone (issue 45). :data:`~evtsync.evt.families.UNRECORDED_STRUCTURE` when the
    fit stores no specification."""
    from evtsync.evt.spec import parse_spec

    text = tree.attrs.get("model_spec_text")
    if not text:
        return UNRECORDED_STRUCTURE
    try:
        spec = parse_spec(str(text), "fit")
    except Exception:  # noqa: BLE001 - an unreadable spec records no structure
        return UNRECORDED_STRUCTURE
    words = {"complete": "one for all cells", "none": "one per cell", "partial": "per cell from a population"}
    cells = f" (cells by {', '.join(spec.groups)})" if spec.groups else ""
    if spec.mu.pooling == spec.sigma.pooling:
        return f"location and scale {words[spec.mu.pooling]}{cells}"
    return f"location {words[spec.mu.pooling]}, scale {words[spec.sigma.pooling]}{cells}"


def compare_fits(trees: list[xr.DataTree], chunk_values: int | None = None) -> tuple[pd.DataFrame, str]:
    """Rank fits by ELPD-LOO; the table has each one's difference to the best with its SE.

    All fits must be on the same z-scores (matched by input row). Returns the table and a
    verdict in words. The one comparison table of evtsync (``compare --out`` and a run's
    ``tables/compare.parquet`` alike): :data:`COMPARE_COLUMNS`, best model first.

    Parameters
    ----------
    trees : list of xarray.DataTree
        At least two fit trees (``BayesFit.tree``) on the same z-scores (matched by input row).
    chunk_values : int or None, default None
        Compute the pointwise log-likelihood in blocks of that many values (NumPy path, same
        numbers) instead of one compiled pass per observation (:func:`loo`).

    Returns
    -------
    tuple of (pandas.DataFrame, str)
        The table (one row per fit, best first: ``elpd_loo`` with ``se``, ``p_loo``,
        ``elpd_diff`` to the best with ``diff_se``, the Pareto-k counts ``k_good``/``k_bad``/
        ``k_very_bad``, ``converged``) and a verdict in words.

    Raises
    ------
    FitError
        Fewer than two fits, or fits made on different z-scores.
    """
    if len(trees) < 2:
        raise FitError("compare needs at least two fits")
    results = [loo(t, chunk_values) for t in trees]
    ref = results[0]
    ref_z = _z_by_row(trees[0])
    for t, r in zip(trees[1:], results[1:], strict=True):
        z = _z_by_row(t)
        if len(z) != len(ref_z) or not np.array_equal(z.index.to_numpy(), ref_z.index.to_numpy()) \
                or not np.allclose(z.to_numpy(), ref_z.to_numpy()):
            raise FitError(f"fits {ref.name!r} and {r.name!r} were made on different z-scores; "
                           "LOO differences need the same data")
    structure = [location_scale(t) for t in trees]
    order = sorted(range(len(results)), key=lambda i: -results[i].elpd)
    best = results[order[0]]
    best_elpd = pd.Series(best.elpd_i, index=best.rows).sort_index()
    rows = []
    for rank, i in enumerate(order):
        r = results[i]
        own = pd.Series(r.elpd_i, index=r.rows).sort_index()
        diff = best_elpd.to_numpy() - own.to_numpy()
        d_se = float(np.sqrt(len(diff) * np.var(diff, ddof=1))) if rank > 0 else 0.0
        kc = r.k_counts()
        rows.append({
            "rank": rank, "model": r.name, "family": r.family, "elpd_loo": r.elpd, "se": r.se,
            "p_loo": r.p_loo, "elpd_diff": float(diff.sum()), "diff_se": d_se,
            "k_good": kc["good"], "k_bad": kc["bad"], "k_very_bad": kc["very_bad"],
            "n_bad_k": kc["bad"] + kc["very_bad"], "converged": r.converged, "location_scale": structure[i],
        })
    table = pd.DataFrame(rows, columns=COMPARE_COLUMNS)
    return table, verdict(table, results)


def _z_by_row(tree: xr.DataTree) -> pd.Series:
    obs = tree["observed_data"].to_dataset()
    return pd.Series(obs["z"].values, index=obs["row"].values).sort_index()


def verdict(table: pd.DataFrame, results: list[LooResult] | None = None) -> str:
    """Words for the comparison: preferred model by ΔELPD ± SE, or no clear preference (< 2 SE)."""
    best = table.iloc[0]
    lines = []
    for _, row in table.iloc[1:].iterrows():
        d, se = row["elpd_diff"], row["diff_se"]
        b = f"{best['model']} ({family_label(best['family'])})"
        o = f"{row['model']} ({family_label(row['family'])})"
        if not se > 0:  # every observation's ELPD differs by the same amount (zero spread)
            if abs(d) <= 1e-9 * max(1.0, abs(best["elpd_loo"])):
                lines.append(f"{b} and {o} have identical pointwise ELPD (ΔELPD = 0, no spread): the same "
                             "predictions — the same fit twice, or models the data cannot tell apart")
            else:
                lines.append(f"{b} ahead of {o} by ΔELPD = {d:.1f} with no spread between observations "
                             "(every observation differs by the same amount): no standard error, so no "
                             "significance is claimed")
            continue
        ratio = d / se
        if ratio > 2:
            lines.append(f"{b} preferred over {o} by ΔELPD = {d:.1f} ± {se:.1f} ({ratio:.1f} SE)"
                         + structure_note(best, row))
        else:
            lines.append(f"no clear preference between {b} and {o}: ΔELPD = {d:.1f} ± {se:.1f} "
                         f"({ratio:.1f} SE, below 2 SE)" + structure_note(best, row))
    for _, row in table.iterrows():
        if row["k_bad"] + row["k_very_bad"] > 0:
            lines.append(f"{row['model']}: {row['k_bad']} bad and {row['k_very_bad']} very bad Pareto k "
                         f"(of {row['k_good'] + row['k_bad'] + row['k_very_bad']}); its LOO estimate is less reliable")
        if not row["converged"]:
            lines.append(f"WARNING: {row['model']} is NOT CONVERGED; its ELPD is not trustworthy")
    return "\n".join(lines)
