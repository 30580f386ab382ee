"""``evtsync fit``: fit a Gumbel/GEV model to block maxima, by MLE or (``--model``) Bayesian.

With ``--mle`` the column ``z`` of a z-score table (or ``--column NAME`` of any CSV/Parquet
table) is fitted by maximum likelihood; ``--json`` prints ``family, n, mu, sigma, xi, se,
loglik, aic`` first (NaN and infinities as null), then the convergence flag, covariance, profile interval for xi
(an open side is null with ``open_below``/``open_above`` true, and said in words in the text output), the 10- and
100-block return levels with delta-method standard errors and profile intervals, and the Gumbel-vs-GEV
likelihood-ratio test. Exit status 1 when the fit did not converge
(judged at the optimum: gradient and Hessian) or ended on the xi = -1 boundary; such a fit and
any interval that contradicts the data (a return level's lower end below the sample maximum that
the period says should rarely be exceeded) are flagged in the text (``FLAGGED: ...``) and in the
JSON (``boundary``, ``flag``).

With ``--model NAME|PATH`` the Bayesian fitter (``evtsync.cli._bayes``) is called.
"""

from __future__ import annotations

import argparse
import logging
import math
from typing import TYPE_CHECKING, Any

from evtsync.core.errors import InputError
from evtsync.evt.families import family_label

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

log = logging.getLogger("evtsync.cli.fit")


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``fit`` command."""
    from evtsync.cli._common import add_level_argument, add_out_argument
    from evtsync.core.defaults import SAMPLERS

    p = subparsers.add_parser(
        "fit",
        help="fit a Gumbel/GEV model to block maxima (z-scores): MLE or Bayesian",
        description="Fit the pooled z-scores (or any column of block maxima) by maximum likelihood "
        "(--mle) or with a Bayesian model specification (--model).",
    )
    p.add_argument("data", metavar="DATA", help="z-score table or any .csv/.parquet table of block maxima")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--mle", action="store_true", help="maximum-likelihood fit")
    mode.add_argument("--model", metavar="NAME|PATH",
                      help="Bayesian model: a name from `evtsync models` or a specification file (*.toml)")
    p.add_argument("--family", choices=("gev", "gumbel"), default="gev", help="MLE family (default gev)")
    p.add_argument("--column", metavar="NAME", default=None,
                   help="column of block maxima (default: z, or the table's only numeric column)")
    p.add_argument("--where", metavar="COL=VALUE", action="append", default=[],
                   help="keep only rows where COL equals VALUE (repeatable), e.g. gpu=H200")
    p.add_argument("--negate", action="store_true",
                   help="fit the negated values (minima as maxima, e.g. strengths)")
    add_level_argument(p, "level of the intervals (MLE: profile likelihood; --model: credible)", old=("--ci-level",))
    p.add_argument("--no-profile", action="store_true", help="skip the profile-likelihood intervals (xi and return levels)")
    p.add_argument("--json", action="store_true", help="print the fit as one JSON object")
    p.add_argument("--plot", metavar="PATH", help="figure (.png/.svg/.pdf): with --mle the diagnostic panel (gev.diag), with --model the posterior of xi per cell")
    bayes = p.add_argument_group("Bayesian fit (with --model)")
    add_out_argument(bayes, "own", "output folder (or .nc file) of the Bayesian fit (default fits/<model>)",
                     metavar="DIR")
    bayes.add_argument("--models-dir", metavar="DIR", default=None,
                       help="folder where --model NAME is looked up (default: the models shipped with evtsync)")
    bayes.add_argument("--draws", type=int, default=None,
                       help="posterior draws per chain (default: the model's [sampling] draws, else 1000)")
    bayes.add_argument("--tune", type=int, default=None,
                       help="tuning steps per chain (default: the model's [sampling] tune, else 1000)")
    bayes.add_argument("--chains", type=int, default=None,
                       help="number of chains (default: the model's [sampling] chains, else 4)")
    bayes.add_argument("--seed", type=int, default=None,
                       help="random seed (default: the model's [sampling] seed, else 0 as `evtsync run`; recorded in the fit)")
    bayes.add_argument("--sampler", choices=SAMPLERS, default=None,
                       help="NUTS sampler (default: the model's [sampling] sampler, else nutpie)")
    bayes.add_argument("--adaptation", choices=("auto", "low_rank", "diag"), default=None,
                       help="nutpie's mass matrix: low_rank (diagonal plus a low-rank correction), diag, or "
                            "auto (default: the model's [sampling] adaptation, else auto: diag up to 20,000 "
                            "z-scores, low_rank above)")
    bayes.add_argument("--target-accept", type=_target_accept, default=None, metavar="P",
                       help="NUTS step-size target in (0, 1), or 'auto' (default: the spec's "
                            "sampling.target_accept, else auto: 0.99 up to 5,000 z-scores, 0.95 up to 20,000, 0.8 above)")
    p.set_defaults(handler=run_fit)


def _select_column(table: pd.DataFrame, column: str | None, source: str) -> str:
    import pandas as pd

    if column is not None:
        if column not in table.columns:
            raise InputError(f"{source}: no column {column!r}; columns are {', '.join(map(str, table.columns))}")
        return column
    if "z" in table.columns:
        return "z"
    numeric = [c for c in table.columns if pd.api.types.is_numeric_dtype(table[c])]
    if len(numeric) == 1:
        log.info("%s: no column 'z'; using the only numeric column %r", source, numeric[0])
        return str(numeric[0])
    raise InputError(
        f"{source}: no column 'z' and {len(numeric)} numeric columns ({', '.join(map(str, numeric))}); "
        "choose one with --column NAME"
    )


def load_maxima(path: str, column: str | None, where: list[str], negate: bool) -> tuple[np.ndarray, str, int]:
    """Read the block maxima of ``column`` from a table; returns (values, column, rows skipped)."""
    import numpy as np
    import pandas as pd

    from evtsync.core.tableio import read_table

    table = read_table(path)
    for clause in where:
        key, sep, value = clause.partition("=")
        if not sep or key not in table.columns:
            raise InputError(f"{path}: --where {clause!r}: expected COL=VALUE with COL one of the table's columns")
        table = table[table[key].astype(str) == value]
    name = _select_column(table, column, path)
    values = pd.to_numeric(table[name], errors="coerce").to_numpy(dtype=float)
    finite = np.isfinite(values)
    skipped = int(values.size - finite.sum())
    if skipped:
        missing = int(table[name].isna().sum())
        infinite = int(np.isinf(values).sum())
        log.warning("%s: skipped %d of %d rows of %r: %d missing, %d infinite, %d non-numeric", path, skipped,
                    values.size, name, missing, infinite, skipped - missing - infinite)
    values = values[finite]
    if values.size == 0:
        raise InputError(f"{path}: column {name!r} has no finite values" + (" after --where" if where else ""))
    largest, spread = float(np.max(np.abs(values))), float(np.ptp(values))
    if spread == 0 and values.size > 1:
        raise InputError(f"{path}: all {values.size} values of {name!r} are equal ({values[0]:g}): no spread to fit")
    if largest > MAX_MAGNITUDE or 0 < spread < 1 / MAX_MAGNITUDE:
        raise InputError(f"{path}: the values of {name!r} (largest |value| {largest:.3g}, spread {spread:.3g}) lie "
                         "beyond what a fit in double precision can handle; expected block maxima or z-scores "
                         f"between 1e-100 and 1e100 in size: rescale the column")
    return (-values if negate else values), name, skipped


#: Largest |block maximum| (and inverse of the smallest spread) a fit accepts: the likelihood's
#: exponentials overflow or its optimiser's steps vanish beyond it.
MAX_MAGNITUDE = 1e100


def _bayesian(args: argparse.Namespace) -> int:
    from evtsync.cli._bayes import run_bayesian_fit

    return int(run_bayesian_fit(args) or 0)


#: return periods (in blocks) whose levels ``fit --mle`` reports
RETURN_PERIODS = (10.0, 100.0)


def _fmt(value: float) -> str:
    return "nan" if not math.isfinite(value) else f"{value:.6g}"


def run_fit(args: argparse.Namespace) -> int:
    """Handler of ``evtsync fit``."""
    if args.model is not None:
        return _bayesian(args)
    from evtsync.evt import mle

    if args.out:
        raise InputError("-o/--out writes a Bayesian fit (with --model); the MLE is printed (--json for a record)")
    values, column, skipped = load_maxima(args.data, args.column, args.where, args.negate)
    try:
        fit = mle.fit_mle(values, args.family)
    except InputError as exc:  # too few maxima, …: said of the file and column it came from
        raise InputError(f"{args.data}: column {column!r}: {exc}") from exc
    record: dict[str, Any] = fit.to_dict()
    record.update({"data": str(args.data), "column": column, "negated": bool(args.negate), "skipped_rows": skipped})
    intervals: dict[Any, Any] = {}  # the ProfileInterval objects, for the text output
    if args.family == "gev" and not args.no_profile:
        intervals["xi"] = mle.profile_ci_xi(values, fit, args.level)
        record["xi_profile_ci"] = intervals["xi"].to_dict()
    record["return_levels"] = []
    for period in RETURN_PERIODS:  # issue 19: the MLE output names its return levels with intervals
        z, z_se = mle.return_level_delta(fit, period)
        entry: dict[str, Any] = {"period_blocks": period, "level": z, "se_delta": z_se}
        if not args.no_profile:
            intervals[period] = mle.profile_ci_return_level(values, fit, period, args.level)
            entry["profile_ci"] = intervals[period].to_dict()
        record["return_levels"].append(entry)
    if args.family == "gev":
        lrt = mle.likelihood_ratio_test(values, fit)  # the Gumbel fit is the constrained one, from this optimum
        record["lrt_gumbel"] = {"deviance": lrt.deviance, "df": lrt.df, "pvalue": lrt.pvalue,
                                "aic_gumbel": lrt.gumbel.aic}
    if args.plot:
        from evtsync.plots.diagnostics import plot_diagnostics

        plot_diagnostics(fit, values, args.plot)
        record["plot"] = str(args.plot)
    if args.json:
        from evtsync.cli._common import emit_json

        emit_json(record, indent=None)
    else:
        label = family_label(fit.family)
        print(f"{label} MLE of {column!r} in {args.data}: n = {fit.n}" + (" (negated)" if args.negate else ""))
        for name in fit.param_names:
            print(f"  {name:6s} = {_fmt(getattr(fit, name))}  (se {_fmt(fit.se[name])})")
        print(f"  loglik = {_fmt(fit.loglik)}   AIC = {_fmt(fit.aic)}")
        if fit.boundary:
            print(f"  FLAGGED: xi_hat = {fit.xi:.4g} is at the boundary -1, where the likelihood is unbounded: no "
                  "regular maximum; the estimates, standard errors and intervals below are not reliable")
        elif fit.converged:
            print(f"  converged: at the optimum (Newton decrement {fit.decrement:.1e} standard errors, observed "
                  f"information positive definite; {fit.newton_steps} Newton steps)")
        if "xi" in intervals:
            iv = intervals["xi"]
            print(f"  xi {iv.level:.0%} profile-likelihood interval: {iv.describe('.6g')}")
            if iv.note:
                print(f"    note: {iv.note}")
        for rl in record["return_levels"]:
            line = f"  {rl['period_blocks']:g}-block return level = {_fmt(rl['level'])}  (se {_fmt(rl['se_delta'])})"
            iv = intervals.get(rl["period_blocks"])
            print(line + (f"; {iv.level:.0%} profile-likelihood interval {iv.describe('.6g')}" if iv else ""))
            if iv is not None and iv.note:
                print(f"    note: {iv.note}")
        if "lrt_gumbel" in record:
            lrt = record["lrt_gumbel"]
            print(f"  Gumbel vs GEV: deviance = {_fmt(lrt['deviance'])}, p = {_fmt(lrt['pvalue'])}, "
                  f"AIC Gumbel = {_fmt(lrt['aic_gumbel'])}")
        if "plot" in record:
            print(f"  diagnostics: {record['plot']}")
        if not fit.converged:
            print(f"  NOT CONVERGED: {fit.message}")
    return 0 if fit.converged else 1


def _target_accept(text: str) -> float | str:
    """``--target-accept``: 'auto' or a number (checked against (0, 1) by the fit)."""
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1) or 'auto', got {text!r}") from None
