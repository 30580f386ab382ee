"""Latency alpha and bandwidth B from an nccl-tests size sweep (methodology §8, §9).

Model: T(S) = p*alpha + q*S/B, with p and q those of the collective on the chosen topology
(table below). Over the chosen size range, T is regressed on S with a Bayesian linear
regression under the reference prior p(beta, sigma^2) ~ 1/sigma^2 on relative errors
(each point weighted by 1/T_fit^2, because timing noise scales with the time). Its posterior
for (intercept, slope) is Student-t with n-2 degrees of freedom, so equal-tailed credible
intervals are exact; alpha = intercept/p, and B = q/slope takes its interval from the
slope's by the monotone map (upper end infinite when the slope's interval reaches 0).

p and q (n ranks; q is always nccl-tests' busbw factor, so B is a bus bandwidth):

=====================  ======================  =================  ==========
collective             ring                    3D torus           fully conn.
=====================  ======================  =================  ==========
all_reduce             p=2(n-1)                p=6(n^(1/3)-1)     p=2
                       q=2(n-1)/n              q=2(n-1)/n         q=2(n-1)/n
all_gather, reduce_    p=n-1                   p=3(n^(1/3)-1)     p=1
scatter, alltoall,     q=(n-1)/n               q=(n-1)/n          q=(n-1)/n
gather, scatter
broadcast, reduce      p=n-1, q=1              p=3(n^(1/3)-1),q=1 p=1, q=1
sendrecv               p=1, q=1                p=1, q=1           p=1, q=1
=====================  ======================  =================  ==========

The all_reduce rows are methodology §8's table; the others follow the same step counting (one
phase instead of two) and are this package's documented choice.

Default size range: the largest block of the biggest sizes over which a straight line fits
every median within ``linear_tolerance`` (relative), at least three sizes — the
bandwidth-dominated regime. A warning is raised when the incremental bandwidth between
neighbouring sizes inside the range departs from the fit (a protocol or algorithm switch,
e.g. the A100 RoCE log's jump at 1 GiB), and when residuals exceed the tolerance.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evtsync.core.defaults import INTERVAL_LEVEL
from evtsync.core.errors import InputError, NcclTestsError
from evtsync.nccltests.parse import ParsedLog, busbw_factor, normalise_collective, parse_log
from evtsync.predict import hockney as _hockney

log = logging.getLogger("evtsync.nccltests.alpha")

#: The topologies of :mod:`evtsync.predict.hockney`, the one registry (names and aliases).
TOPOLOGIES = tuple(_hockney.TOPOLOGIES)


def normalise_topology(topology: str) -> str:
    """Canonical topology name (hockney's registry); raises NcclTestsError for an unknown one."""
    try:
        return _hockney.get_topology(topology).name
    except InputError as exc:
        raise NcclTestsError(str(exc)) from None


def hockney_pq(collective: str, topology: str, n_ranks: int) -> tuple[float, float]:
    """(p, q) of T = p*alpha + q*S/B for a collective on a topology with n ranks."""
    c, t, n = normalise_collective(collective), normalise_topology(topology), int(n_ranks)
    if n < 2:
        raise NcclTestsError(f"alpha/B need at least 2 ranks, got {n}")
    q = busbw_factor(c, n)
    if c == "sendrecv":
        return 1.0, q
    phases = 2.0 if c == "all_reduce" else 1.0
    return float(_hockney.get_topology(t).latency_steps(n, phases)), q


@dataclass(frozen=True)
class AlphaFit:
    """alpha (µs) and B (GB/s) with credible intervals, and how they were obtained."""

    alpha_us: float
    alpha_interval_us: tuple[float, float]
    bandwidth_gbps: float
    bandwidth_interval_gbps: tuple[float, float]
    size_range_bytes: tuple[int, int]
    n_ranks: int
    collective: str
    warnings: list[str] = field(default_factory=list)
    topology: str = "ring"
    p: float = math.nan
    q: float = math.nan
    level: float = INTERVAL_LEVEL
    placement: str = "out-of-place"
    n_points: int = 0
    n_sizes: int = 0
    intercept_us: float = math.nan
    slope_us_per_byte: float = math.nan
    max_abs_residual_pct: float = math.nan
    range_source: str = "given"
    method: str = "Bayesian linear regression, reference prior, relative-error weights (Student-t posterior)"
    source: str = ""
    sizes_bytes: tuple[int, ...] = ()
    residuals_pct: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (tuples as lists; infinite bounds as None)."""
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, tuple):
                d[k] = [None if isinstance(x, float) and not math.isfinite(x) else x for x in v]
            elif isinstance(v, float) and not math.isfinite(v):
                d[k] = None
        return d


@dataclass(frozen=True)
class _LineFit:
    beta: np.ndarray
    cov_unscaled: np.ndarray
    s2: float
    dof: int
    fitted: np.ndarray


def _wls(sizes: np.ndarray, times: np.ndarray) -> _LineFit:
    """Straight line T = a + b*S with weights 1/T_fit^2 (two reweighting passes)."""
    X = np.column_stack([np.ones_like(sizes), sizes])
    weights_from = times
    beta = np.zeros(2)
    xtwx_inv = np.eye(2)
    for _ in range(3):
        w = 1.0 / np.maximum(np.abs(weights_from), 1e-12) ** 2
        Xw = X * np.sqrt(w)[:, None]
        yw = times * np.sqrt(w)
        # column scaling keeps the 2x2 system well conditioned (sizes reach 1e10)
        scale = np.array([1.0, max(float(np.max(np.abs(sizes))), 1.0)])
        Xs = Xw / scale
        xtx_s = Xs.T @ Xs
        beta_s = np.linalg.solve(xtx_s, Xs.T @ yw)
        beta = beta_s / scale
        xtwx_inv = np.linalg.inv(xtx_s) / np.outer(scale, scale)
        fitted = X @ beta
        if np.all(fitted > 0):
            weights_from = fitted
    w = 1.0 / np.maximum(np.abs(weights_from), 1e-12) ** 2
    resid = times - X @ beta
    dof = len(times) - 2
    s2 = float(np.sum(w * resid**2) / dof) if dof > 0 else math.nan
    return _LineFit(beta=beta, cov_unscaled=xtwx_inv, s2=s2, dof=dof, fitted=X @ beta)


def sweep_medians(parsed: ParsedLog, *, run: int, placement: str) -> pd.DataFrame:
    """Per-size median time (µs) of one run and placement, sizes > 0, sorted by size."""
    m = parsed.measurements
    m = m[(m["run"] == run) & (m["placement"] == placement) & (m["size"] > 0) & m["time_us"].notna()]
    if m.empty:
        raise NcclTestsError(f"{parsed.path}: no {placement} measurements with size > 0 in run {run}")
    return (m.groupby("size", as_index=False)["time_us"].median().sort_values("size").reset_index(drop=True))


def linear_range(sizes: np.ndarray, times: np.ndarray, tolerance: float = 0.05, min_sizes: int = 3) -> tuple[int, int]:
    """Indices (lo, hi) of the largest block of the biggest sizes fitted by a line within tolerance."""
    n = len(sizes)
    if n < min_sizes:
        raise NcclTestsError(f"need at least {min_sizes} distinct sizes for a fit, found {n}")
    best = n - min_sizes
    for lo in range(n - min_sizes, -1, -1):
        fit = _wls(sizes[lo:], times[lo:])
        rel = np.abs(times[lo:] - fit.fitted) / np.abs(fit.fitted)
        if np.max(rel) > tolerance or fit.beta[1] <= 0:
            break
        best = lo
    return best, n - 1


def fit_alpha(
    parsed: ParsedLog,
    *,
    size_range: tuple[float, float] | None = None,
    topology: str = "ring",
    level: float = INTERVAL_LEVEL,
    placement: str = "out-of-place",
    run: int | None = None,
    linear_tolerance: float = 0.05,
    switch_tolerance: float = 0.25,
) -> AlphaFit:
    """Fit alpha and B on a parsed log (see the module docstring for the model and defaults)."""
    from scipy import stats as sps
    if not 0 < level < 1:
        raise NcclTestsError(f"credible level must be in (0, 1), got {level}")
    if placement not in ("out-of-place", "in-place"):
        raise NcclTestsError(f"placement must be 'out-of-place' or 'in-place', got {placement!r}")
    info = parsed.run(run)
    warnings = list(info.warnings)
    if not info.collective:
        raise NcclTestsError(f"{parsed.path}: collective unknown; give it explicitly (--collective)")
    if not info.n_ranks:
        raise NcclTestsError(f"{parsed.path}: number of ranks unknown; give it explicitly (--ranks)")
    p, q = hockney_pq(info.collective, topology, info.n_ranks)
    med = sweep_medians(parsed, run=info.index, placement=placement)
    all_sizes = med["size"].to_numpy(dtype=float)
    all_times = med["time_us"].to_numpy(dtype=float)
    if size_range is None:
        lo, hi = linear_range(all_sizes, all_times, tolerance=linear_tolerance)
        s_lo, s_hi = all_sizes[lo], all_sizes[hi]
        range_source = f"linear regime (all residuals within {linear_tolerance:.0%})"
    else:
        s_lo, s_hi = float(size_range[0]), float(size_range[1])
        if not (s_lo > 0 and s_hi >= s_lo):
            raise NcclTestsError(f"size range must satisfy 0 < low <= high, got {size_range}")
        range_source = "given"
    m = parsed.measurements
    sel = m[(m["run"] == info.index) & (m["placement"] == placement) & m["time_us"].notna()
            & (m["size"] >= s_lo * (1 - 1e-9)) & (m["size"] <= s_hi * (1 + 1e-9)) & (m["size"] > 0)]
    wrong = sel["wrong"].to_numpy(dtype=float)
    if (wrong > 0).any():
        bad = ", ".join(_fmt_bytes(s) for s in np.unique(sel["size"].to_numpy(dtype=float)[wrong > 0]))
        raise NcclTestsError(f"{parsed.path}: #wrong != 0 at {bad} in the fitted size range: a run that "
                             "failed its correctness check is not a valid baseline (methodology §9)")
    if info.old_error_column:  # old logs print a max-error column; their footer is the verdict
        if info.out_of_bounds_ok is False:
            raise NcclTestsError(f"{parsed.path}: the run's footer says FAILED ({info.out_of_bounds} out-of-bounds "
                                 "values): a run that failed its correctness check is not a valid baseline (methodology §9)")
        if info.out_of_bounds_ok is None:
            warnings.append("correctness not checked (old 'error' column and no footer): alpha and B rest on "
                            "unverified results")
    elif np.isnan(wrong).any():
        warnings.append(f"correctness not checked (#wrong N/A) for {int(np.isnan(wrong).sum())} "
                        "row(s) in the range: alpha and B rest on unverified results")
    if info.failure:
        warnings.append(f"the run aborted ({info.failure}): alpha and B rest on the rows printed before it")
    sizes = sel["size"].to_numpy(dtype=float)
    times = sel["time_us"].to_numpy(dtype=float)
    distinct = np.unique(sizes)
    if distinct.size < 2 or sizes.size < 3:
        have = ", ".join(_fmt_bytes(s) for s in all_sizes)
        raise NcclTestsError(f"{parsed.path}: the size range {_fmt_bytes(s_lo)}..{_fmt_bytes(s_hi)} holds "
                             f"{distinct.size} size(s) / {sizes.size} point(s); need >= 2 sizes and >= 3 points "
                             f"(sizes in the log: {have})")
    fit = _wls(sizes, times)
    tq = float(sps.t.ppf(0.5 + level / 2.0, fit.dof))
    se = np.sqrt(np.diag(fit.cov_unscaled) * fit.s2)
    a, b = float(fit.beta[0]), float(fit.beta[1])
    a_lo, a_hi = a - tq * se[0], a + tq * se[0]
    b_lo, b_hi = b - tq * se[1], b + tq * se[1]
    alpha = a / p
    if b <= 0:
        raise NcclTestsError(f"{parsed.path}: time does not grow with size over "
                             f"{_fmt_bytes(s_lo)}..{_fmt_bytes(s_hi)}; B cannot be estimated")
    bw = q / b / 1e3
    bw_interval = (q / b_hi / 1e3, q / b_lo / 1e3 if b_lo > 0 else math.inf)
    resid_pct = (times - fit.fitted) / fit.fitted * 100.0
    max_res = float(np.max(np.abs(resid_pct)))
    if max_res > linear_tolerance * 100:
        worst = int(np.argmax(np.abs(resid_pct)))
        warnings.append(f"residual {resid_pct[worst]:+.1f}% at {_fmt_bytes(sizes[worst])} exceeds "
                        f"{linear_tolerance:.0%}: T(S) is not linear over this range")
    warnings += _switch_warnings(sizes, times, q, bw, switch_tolerance)
    if a_lo <= 0:
        warnings.append(f"alpha's {level:.0%} interval reaches zero or below: the latency term is not "
                        "identified over this range (add smaller sizes or more cycles)")
    if not math.isfinite(bw_interval[1]):
        warnings.append("B's interval is unbounded above: slope not distinguishable from zero")
    if fit.dof < 3:
        warnings.append(f"only {fit.dof} residual degree(s) of freedom: intervals are wide; "
                        "use more sizes or -N cycles")
    return AlphaFit(
        alpha_us=alpha, alpha_interval_us=(a_lo / p, a_hi / p), bandwidth_gbps=bw,
        bandwidth_interval_gbps=bw_interval, size_range_bytes=(int(sizes.min()), int(sizes.max())),
        n_ranks=int(info.n_ranks), collective=info.collective, warnings=warnings,
        topology=normalise_topology(topology), p=p, q=q, level=level, placement=placement,
        n_points=int(sizes.size), n_sizes=int(distinct.size), intercept_us=a, slope_us_per_byte=b,
        max_abs_residual_pct=max_res, range_source=range_source, source=parsed.path,
        sizes_bytes=tuple(int(s) for s in sizes), residuals_pct=tuple(float(r) for r in resid_pct),
    )  # fmt: skip


def _switch_warnings(sizes: np.ndarray, times: np.ndarray, q: float, bw: float, tol: float) -> list[str]:
    """Incremental bandwidth between neighbouring sizes that departs from the fitted B."""
    df = pd.DataFrame({"s": sizes, "t": times}).groupby("s", as_index=False)["t"].median()
    s, t = df["s"].to_numpy(), df["t"].to_numpy()
    out = []
    for i in range(len(s) - 1):
        dt = t[i + 1] - t[i]
        local = q * (s[i + 1] - s[i]) / dt / 1e3 if dt > 0 else math.inf
        if not math.isfinite(local) or abs(local / bw - 1.0) > tol:
            shown = "unbounded (time falls)" if not math.isfinite(local) else f"{local:.1f} GB/s"
            out.append(f"between {_fmt_bytes(s[i])} and {_fmt_bytes(s[i + 1])} the incremental bandwidth is "
                       f"{shown} vs {bw:.1f} GB/s fitted: possible protocol/algorithm switch inside the range")
    return out


def _fmt_bytes(n: float) -> str:
    n = float(n)
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor:
            v = n / factor
            return f"{v:g}{unit}" if v == int(v) else f"{v:.3g}{unit}"
    return f"{int(n)}B"


def alpha_from_log(
    path: str | Path,
    *,
    size_range: tuple[float, float] | None = None,
    topology: str = "ring",
    level: float = INTERVAL_LEVEL,
    placement: str = "out-of-place",
    run: int | None = None,
    collective: str | None = None,
    n_ranks: int | None = None,
    linear_tolerance: float = 0.05,
) -> AlphaFit:
    """alpha and B with ``level`` credible intervals from an nccl-tests log file.

    ``size_range`` (bytes, inclusive) defaults to the sizes where T(S) is linear;
    ``topology`` selects p and q (ring by default, methodology §8). Used by
    ``evtsync bandwidth --alpha-from LOG``.
    """
    parsed = parse_log(path, collective=collective, n_ranks=n_ranks)
    return fit_alpha(parsed, size_range=size_range, topology=topology, level=level, placement=placement,
                     run=run, linear_tolerance=linear_tolerance)


def alpha_for_topology(fit: AlphaFit, topology: str) -> AlphaFit:
    """The same sweep read under another topology's latency steps (the stated conversion rule).

    The regression fixes the intercept ``p·alpha`` (µs) of the measured collective at the log's
    ``n_ranks``; alpha for topology T is that intercept over T's ``p`` at the same ``n_ranks``
    (``hockney_pq``). The result names T, so a ring-fitted alpha is never reused for T unawares.
    """
    t = normalise_topology(topology)
    if t == fit.topology:
        return fit
    from dataclasses import replace

    p, q = hockney_pq(fit.collective, t, fit.n_ranks)
    scale = fit.p / p
    lo, hi = fit.alpha_interval_us
    note = (f"alpha converted from the {fit.topology} fit (p = {fit.p:g}) to {t} (p = {p:g}) at n = {fit.n_ranks}: "
            f"alpha_{t} = intercept / p_{t}")
    return replace(fit, alpha_us=fit.alpha_us * scale, alpha_interval_us=(lo * scale, hi * scale), topology=t,
                   p=p, q=q, warnings=[*fit.warnings, note])


def alpha_draws(fit: AlphaFit, size: int, seed: int = 0) -> np.ndarray:
    """``size`` posterior draws of alpha (µs) of ``fit``'s topology, restricted to alpha >= 0.

    The intercept's posterior is Student-t with the fit's degrees of freedom, centred on the
    estimate with its standard error (the one behind ``alpha_interval_us``); a latency cannot
    be negative, so draws below zero are redrawn (the posterior under the prior alpha >= 0).
    """
    from scipy import stats as sps
    if size < 1:
        raise NcclTestsError(f"alpha draws: size must be >= 1, got {size}")
    dof = max(fit.n_points - 2, 1)
    tq = float(sps.t.ppf(0.5 + fit.level / 2.0, dof))
    se = (fit.alpha_interval_us[1] - fit.alpha_us) / tq if tq > 0 else 0.0
    rng = np.random.default_rng(seed)
    if not se > 0:
        return np.full(size, max(fit.alpha_us, 0.0))
    if sps.t.cdf(-fit.alpha_us / se, dof) > 0.5:
        raise NcclTestsError(f"{fit.source}: alpha's posterior lies mostly below zero (alpha = {fit.alpha_us:.3g} µs, "
                             f"se {se:.3g}): the latency is not identified by this sweep")
    out = np.empty(0)
    while out.size < size:
        draw = fit.alpha_us + se * rng.standard_t(dof, size=2 * size)
        out = np.concatenate([out, draw[draw >= 0]])
    return out[:size]
