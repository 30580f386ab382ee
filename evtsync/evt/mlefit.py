"""Maximum likelihood per cell: the one table (with the Gumbel-vs-GEV test) and its fit object.

:func:`mle_cell_table` fits Gumbel and GEV by maximum likelihood (:mod:`evtsync.evt.mle`) to
the z-scores of every GPU × precision cell, and to all of them pooled (cell ``all|all``), and
returns one row per cell and family: estimates, standard errors, ``level`` intervals (Wald for
mu and sigma, profile likelihood for xi), log-likelihood, AIC, the covariance, and on the GEV
row the likelihood-ratio test of xi = 0 (:func:`evtsync.evt.mle.likelihood_ratio_test`), and
``boundary`` (the GEV fit ended on xi = -1: flagged, not converged, its ``note`` says so). Cells
with fewer than ``min_n`` z-scores keep a row that says so. The CLI (``evtsync fit --mle``), the
pipeline's ``mle`` stage and the report all read this table.

:class:`MleCellFit` offers the small interface of :class:`evtsync.evt.bayesfit.CellFit`, so that
the predictions of :mod:`evtsync.predict.tables` take an MLE fit as well as a Bayesian one. Its
"draws" are a **normal approximation** of the sampling distribution: ``n_draws`` draws of
(mu, log sigma, xi) from the normal with the MLE as mean and the observed-information
covariance (delta method for log sigma, which keeps sigma > 0), seeded, so that summaries of
them are approximate confidence intervals of the same form as the posterior's credible
intervals. A cell whose covariance is not finite gets its point estimate in every draw (a
zero-width interval), and the fit is then not ``converged``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from evtsync.core.defaults import INTERVAL_LEVEL, check_level
from evtsync.core.errors import EvtsyncError, InputError

log = logging.getLogger("evtsync.evt.mlefit")

#: Fewest z-scores for a maximum-likelihood GEV fit of a cell.
MIN_Z_MLE = 20
POOLED = "all"
#: Number of normal-approximation draws per cell (see the module docstring).
MLE_DRAWS = 4000
_COV = ("mu", "sigma", "xi")


def mle_cell_table(z: pd.DataFrame, groups: Sequence[str] = ("gpu", "precision"), column: str = "z",
                   level: float = INTERVAL_LEVEL, min_n: int = MIN_Z_MLE, pooled: bool = True,
                   profile: bool = True) -> pd.DataFrame:
    """Gumbel and GEV MLE per cell of ``z``'s ``column`` (see the module docstring for the columns;
    ``column`` is recorded in every row: ``y`` fits give the centred estimator of tau(n), ``z``
    fits the paper's, :data:`evtsync.predict.tables.ESTIMATORS`).

    Parameters
    ----------
    z : pandas.DataFrame
        The z-score table (:func:`evtsync.zscore_table`).
    groups : sequence of str, default ("gpu", "precision")
        Columns whose values make a cell.
    column : str, default "z"
        The column fitted: ``y`` (the centred maxima, for the default estimator of tau(n)) or
        ``z`` (the paper's z-scores); recorded in every row.
    level : float, default 0.90
        Level of the intervals (Wald for mu and sigma, profile likelihood for xi), in (0, 1).
    min_n : int, default 20
        Fewest finite z-scores for a fit; a smaller cell keeps a row that says so.
    pooled : bool, default True
        Also fit all z-scores together (cell ``all|all``).
    profile : bool, default True
        Compute the profile-likelihood interval of xi (else NaN).

    Returns
    -------
    pandas.DataFrame
        One row per cell and family: estimates, standard errors, intervals, log-likelihood,
        AIC, covariance, ``n`` and ``n_skipped`` (non-finite z-scores left out), ``converged``,
        ``boundary`` and ``note``; the GEV row carries the likelihood-ratio test of xi = 0.

    Raises
    ------
    InputError
        A missing group or z column, or a ``level`` outside (0, 1).
    """
    from statistics import NormalDist

    from evtsync.evt import mle

    level = check_level(level)
    missing = [c for c in (*groups, column) if c not in z.columns]
    if missing:
        raise InputError(f"z-score table: missing column(s) {missing}")
    cells: list[tuple[tuple[str, ...], np.ndarray]] = []
    if pooled or not groups:
        cells.append(((POOLED,) * len(groups), pd.to_numeric(z[column], errors="coerce").to_numpy(float)))
    if groups:
        for key, sub in z.groupby(list(groups), sort=True):
            key = key if isinstance(key, tuple) else (key,)
            cells.append((tuple(map(str, key)), pd.to_numeric(sub[column], errors="coerce").to_numpy(float)))
    zq = NormalDist().inv_cdf(0.5 + level / 2)
    rows = []
    for key, values in cells:
        labels = dict(zip(groups, key, strict=True))
        finite = values[np.isfinite(values)]
        skipped = int(values.size - finite.size)
        base = {**labels, "cell": "|".join(key) if key else POOLED, "n": int(finite.size), "n_skipped": skipped,
                "level": level, "column": column}
        if finite.size < min_n:
            rows.append({**base, "family": "gev", "note": f"fewer than {min_n} z-scores: not fitted"})
            continue
        lrt = mle.likelihood_ratio_test(finite, mle.fit_gev(finite))
        xi_lo = xi_hi = float("nan")
        if profile:
            try:
                xi_lo, xi_hi = mle.profile_ci_xi(finite, lrt.gev, level=level)
            except (EvtsyncError, ValueError, RuntimeError) as exc:
                log.info("profile interval of xi (%s): %s", base["cell"], exc)
        for fit in (lrt.gumbel, lrt.gev):
            row: dict[str, Any] = {**base, "family": fit.family, "mu": fit.mu, "sigma": fit.sigma, "xi": fit.xi,
                   "mu_se": fit.se.get("mu", float("nan")), "sigma_se": fit.se.get("sigma", float("nan")),
                   "xi_se": fit.se.get("xi", 0.0), "loglik": fit.loglik, "aic": fit.aic,
                   "converged": bool(fit.converged), "boundary": bool(fit.boundary), "note": fit.message}
            for name in ("mu", "sigma"):
                se = row[f"{name}_se"]
                row[f"{name}_lo"] = row[name] - zq * se
                row[f"{name}_hi"] = row[name] + zq * se
            cov = np.asarray(fit.cov, dtype=float)
            for i, a in enumerate(fit.param_names):
                for j, b in enumerate(fit.param_names):
                    if j >= i:
                        row[f"cov_{a}_{b}"] = float(cov[i, j])
            if fit.family == "gev":
                row.update(xi_lo=xi_lo, xi_hi=xi_hi, lrt_deviance=lrt.deviance, lrt_df=lrt.df,
                           lrt_pvalue=lrt.pvalue)
            else:
                row.update(xi_lo=0.0, xi_hi=0.0)
            rows.append(row)
    return pd.DataFrame(rows)


@dataclass
class MleCellFit:
    """One family's per-cell MLE from :func:`mle_cell_table`, as a :class:`~evtsync.evt.bayesfit.CellFit`.

    ``table`` is the whole MLE table (both families); ``family`` picks the rows used. The pooled
    row is left out when the table has per-cell rows (``include_pooled=False``, the default).
    """

    table: pd.DataFrame
    family: str = "gev"
    include_pooled: bool = False
    n_draws: int = MLE_DRAWS
    seed: int = 0
    kind: str = field(default="mle", init=False)

    def __post_init__(self) -> None:
        if self.family not in ("gev", "gumbel"):
            raise InputError(f"MLE family must be 'gev' or 'gumbel', got {self.family!r}")
        rows = self.table[(self.table["family"] == self.family) & self.table.get("mu", pd.Series(
            np.nan, index=self.table.index)).notna()]
        groups = self.groups
        if groups and not self.include_pooled and (rows[groups[0]] != POOLED).any():
            rows = rows[rows[groups[0]] != POOLED]
        if rows.empty:
            raise InputError(f"the MLE table has no fitted {self.family} cell")
        self._rows = rows.reset_index(drop=True)

    @property
    def name(self) -> str:
        """``mle-gev`` or ``mle-gumbel``."""
        return f"mle-{self.family}"

    @property
    def column(self) -> str | None:
        """The z-score table's column the cells were fitted to (``y`` or ``z``; None in a table
        written before the column was recorded)."""
        if "column" not in self.table.columns:
            return None
        values = self.table["column"].dropna().astype(str).unique()
        return str(values[0]) if len(values) == 1 else None

    @property
    def groups(self) -> tuple[str, ...]:
        """The group columns of the table (those before ``cell``)."""
        cols = list(self.table.columns)
        return tuple(cols[: cols.index("cell")]) if "cell" in cols else ()

    @property
    def converged(self) -> bool:
        """Whether every cell's optimisation converged with a finite covariance."""
        return bool(self._rows["converged"].astype(bool).all())

    @property
    def convergence_note(self) -> str:
        """Empty when converged, else a warning naming the cells that did not."""
        if self.converged:
            return ""
        bad = self._rows.loc[~self._rows["converged"].astype(bool), "cell"].tolist()
        return f"WARNING: MLE ({self.family}) did not converge in cell(s) {', '.join(map(str, bad))}"

    @property
    def cells(self) -> pd.DataFrame:
        """One row per cell: ``cell`` label, group columns, ``n_obs``."""
        out = self._rows[["cell", *self.groups]].astype(str).copy()
        out["n_obs"] = self._rows["n"].to_numpy()
        return out.reset_index(drop=True)

    def _repr_html_(self) -> str:
        """The fit in a notebook: cells, ξ with its profile-likelihood interval, convergence."""
        from evtsync.core.display import fit_html

        rows = self._rows
        if self.family == "gumbel":
            xi = [(0.0, 0.0, 0.0)] * len(rows)
        else:
            xi = list(zip(rows["xi"], rows.get("xi_lo", np.nan), rows.get("xi_hi", np.nan), strict=True))
        level = float(rows["level"].iloc[0]) if "level" in rows else INTERVAL_LEVEL
        kind = "fixed at 0" if self.family == "gumbel" else f"{level:.0%} profile-likelihood interval"
        return fit_html(self, xi, kind)

    def cell_draws(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Normal-approximation draws of mu, sigma, xi, arrays (n_draws, cell)."""
        rng = np.random.default_rng(self.seed)
        out = np.empty((3, self.n_draws, len(self._rows)))
        for c, row in enumerate(self._rows.itertuples(index=False)):
            r = row._asdict()
            names = ("mu", "sigma") if self.family == "gumbel" else _COV
            point = np.array([r["mu"], math.log(r["sigma"]), r["xi"]])[: len(names)]
            cov = np.array([[r.get(f"cov_{min(a, b, key=names.index)}_{max(a, b, key=names.index)}", np.nan)
                             for b in names] for a in names], dtype=float)
            jac = np.ones(len(names))
            jac[1] = 1.0 / r["sigma"]
            cov = cov * np.outer(jac, jac)
            if np.all(np.isfinite(cov)) and np.all(np.linalg.eigvalsh(cov) >= 0):
                draws = rng.multivariate_normal(point, cov, size=self.n_draws, method="cholesky"
                                                if np.all(np.linalg.eigvalsh(cov) > 0) else "eigh")
            else:
                draws = np.tile(point, (self.n_draws, 1))
            out[0, :, c] = draws[:, 0]
            out[1, :, c] = np.exp(draws[:, 1])
            out[2, :, c] = draws[:, 2] if len(names) == 3 else 0.0
        return out[0], out[1], out[2]
