"""``evtsync predict FIT --n N...``: predicted tax tau(n) per GPU x precision with intervals (methodology §7).

The default estimator is the hierarchical rank model, ``rankmodel`` (docs/methodology.md, "The rank
model" and "Predicting tau(n)"): FIT is a run folder (its ``fits/rankmodel.nc``, its main GEV fit for
the cells the rank model cannot give) or a z-score table (``evtsync blocks``; the rank model is fitted
to it). A GPU/precision that was not measured is predicted from the rank model's population, labelled
population-level. A GEV fit folder (``evtsync fit --model``) alone gives its centred estimator,
labelled as the default's fallback with a warning; so does a cell with too few rank values. Every row
says its estimator; ``--estimator centred|paper|rankmodel|ranktail`` asks for one strictly (``paper``:
a fit of z, biased low at n > m; ``ranktail``: the per-cell comparator). The block's
spread b is given as ``--block-sd-us B`` or as ``--block-mean-us A --cv R`` (b = r·a), or per cell as
``--block-sd-us GPU/precision=B``; a run folder or z-score table gives each cell its own b (its
:func:`evtsync.predict.tables.block_scale`) unless told otherwise, and one b over several of its
cells is refused (issue 45).

``--straggler TABLE`` instead compares predicted with measured mean straggler delay (methodology §7,
the paper's Figure 11) for a table with columns workload, gpu, precision, block_mean_us,
block_sd_us, mean_delay_us, n_ranks (each row with its own b and n).

``--gpu B200 --precision bf16`` (or ``--preset NVL72``) asks for hardware the fit may not have
seen: such a cell is predicted from the hierarchy's population and labelled population-level
(methodology §7); a model without a population for a per-cell parameter refuses, naming it.
"""

from __future__ import annotations

import argparse

from evtsync.cli._common import (
    ListOption,
    add_estimator_argument,
    add_level_argument,
    add_out_argument,
)
from evtsync.cli._whatif import add_hardware_arguments
from evtsync.core.defaults import DEFAULT_M


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``predict`` command."""
    p = subparsers.add_parser(
        "predict",
        help="predicted tax tau(n) per GPU x precision, with intervals (default estimator: rankmodel)",
        description="tau(n) for each draw of the estimator (default rankmodel: b·E[max_n V − mean_n V] for a job "
        "of n ranks from the same fleet, the hierarchical rank model of the z-score table's per-rank values; "
        "ranktail: its per-cell comparator; centred/paper: b·E_(n/m) of a GEV fit's posterior): point and interval per "
        "cell (GPU x precision) and domain size n; rows the default cannot give fall back to the centred "
        "estimator, labelled.",
    )
    p.add_argument("fit", metavar="FIT", help="a run folder (its rank model, fits/rankmodel.nc; its main GEV fit for "
                   "the fallback), a z-score table (.parquet/.csv of `evtsync blocks`: "
                   "the rank model fitted to it, each GPU x precision cell from the rows given, its scale factor to the sd pooled over "
                   "them: a filtered table is answered for its rows) or a fit folder of `evtsync fit --model` (or its fit.nc: centred/paper; with the "
                   "default estimator a labelled centred fallback)")
    p.add_argument("--n", action=ListOption, metavar="N", examples=("8", "64"),
                   help="domain sizes (space or comma separated): any n >= 1 for the per-rank estimators "
                   "(rankmodel, ranktail), multiples of --m for a GEV fit")
    p.add_argument("--straggler", metavar="TABLE",
                   help="predicted vs measured straggler delay for this table (.csv/.parquet) instead of --n")
    add_out_argument(p, "table", "also write the result table (.csv/.parquet)")
    p.add_argument("--block-sd-us", action=ListOption, metavar="B", examples=("H100/bf16=18", "A100/fp32=20"),
                   help="block standard deviation b in µs: one value B, or one per cell as GPU/precision=B. A run "
                   "folder or z-score table gives each cell its own b when this is left out; one B over several "
                   "of its cells is refused")
    p.add_argument("--block-mean-us", type=float, metavar="A", help="block mean a in µs (with --cv)")
    p.add_argument("--cv", type=float, metavar="R", help="coefficient of variation r of the block (b = r·a)")
    p.add_argument("--m", type=int, default=DEFAULT_M, help=f"ranks per sample of the fitted z-scores (default {DEFAULT_M})")
    add_level_argument(p)
    p.add_argument("--json", action="store_true", help="print a JSON list, one record per (cell, n)")
    p.add_argument("--plot", metavar="PATH", help="tau(n) against n with credible bands (.png/.svg/.pdf)")
    p.add_argument("--flops-factor", action=ListOption, metavar="F", examples=("1", "2"),
                   help="GPU peak FLOPS relative to the reference (H200): b and tau are divided by F; a comma list or "
                   "a doubling range LO..HI (space or comma separated; default 1, or --preset's TFLOPS / 989)")
    add_estimator_argument(p)
    add_hardware_arguments(p)
    p.set_defaults(handler=run_predict)


def run_predict(args: argparse.Namespace) -> int:
    """Handler of ``evtsync predict``."""
    from evtsync.cli._bayes import run_bayesian_predict

    return run_bayesian_predict(args)
