"""``evtsync compare FIT FIT ...``: compare Bayesian fits by PSIS-LOO (ELPD differences, Pareto k).

The fits must be on the same z-scores. Prints the models ranked by ELPD-LOO with each one's
difference to the best and its standard error, the Pareto-k diagnostics and a verdict in words
(a difference counts when it exceeds 2 SE). Memory stays bounded at 250k z-scores: the
pointwise log-likelihood is computed and smoothed in chunks of observations.
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``compare`` command."""
    from evtsync.cli._common import add_out_argument

    p = subparsers.add_parser(
        "compare",
        help="compare Bayesian fits by PSIS-LOO: ELPD differences with SE, Pareto k, verdict",
        description="Rank Bayesian fits of the same z-scores by their expected log predictive density "
        "(PSIS-LOO), with differences, standard errors and Pareto-k diagnostics.",
    )
    p.add_argument("fits", nargs="+", metavar="FIT", help="two or more fit folders (or fit.nc files)")
    add_out_argument(p, "table", "also write the comparison table (.csv/.parquet)")
    p.add_argument("--json", action="store_true", help="print the table and verdict as JSON")
    p.set_defaults(handler=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    """Handler of ``evtsync compare``."""
    from evtsync.cli._bayes import run_bayesian_compare
    from evtsync.core.errors import InputError

    if len(args.fits) < 2:
        raise InputError("compare needs at least two fits")
    _refuse_repeated_fits(args.fits)
    return run_bayesian_compare(args)


def _refuse_repeated_fits(fits: list[str]) -> None:
    """The same fit file given twice (by two spellings of its path) is a slip, not a comparison:
    its ELPD difference is 0 with no spread. Refused with both names."""
    from evtsync.core.errors import InputError
    from evtsync.evt.bayesfit import fit_path

    seen: dict[object, str] = {}
    for text in fits:
        path = fit_path(text)
        key = path.resolve() if path.is_file() else text
        if key in seen:
            raise InputError(f"compare: {seen[key]} and {text} are the same fit ({path}) given twice; "
                             "give two or more different fits")
        seen[key] = text
