"""What-if tables of the prediction stage: tau(n) of the named hardware presets without traces,
and B* as peak FLOPS grow (the paper's Fig. 13) with the bandwidth-scaling requirement.

Both come from the run's estimator of tau(n) (:class:`evtsync.predict.estimator.EstimatorChoice`: the
default rank model, for measured cells and, from its population, for hardware that was not measured
(labelled population-level); the main Bayesian fit's centred estimator where it cannot, labelled
``estimator``/``estimator_note``); the prediction stage writes them as
``tables/whatif.parquet``, ``tables/bstar_flops.parquet`` and ``tables/flops_scaling.parquet``
and records how they were made (the reference b, the cell, refusals) in its summary; the report
shows them (docs/what-if.md, methodology §7, §8).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from evtsync.core.defaults import INTERVAL_LEVEL as LEVEL
from evtsync.core.errors import EvtsyncError

#: FLOPS factors (relative to the H200's 989 TFLOPS) and domain sizes of the report's Fig. 13.
FLOPS_SWEEP = (1.0, 2.0, 4.0, 8.0, 16.0)
FLOPS_NS = (256, 4096)


def _any_n(choice: Any) -> bool:
    """Whether the run's estimator predicts any domain size n (a per-rank fit), not only multiples of m."""
    from evtsync.predict import registry

    return bool(registry.get(choice.asked).per_rank and choice.per_rank is not None)


def _default_rows(tau: pd.DataFrame) -> pd.DataFrame:
    """The rows of the run's tau table the default estimator gave (all rows of an older table)."""
    if "default_estimate" in tau:
        return tau[tau["default_estimate"].astype(bool)]
    return tau


def whatif_table(choice: Any, tau: pd.DataFrame, m: int) -> tuple[pd.DataFrame, dict[str, Any]]:
    """tau(n) of the bf16 domains of :data:`evtsync.core.reference.PRESETS` by the run's estimator
    ``choice`` (a measured GPU by the rank model; a GPU absent from the traces from the rank model's
    population, ``prediction_kind`` "population", or where it cannot by the main fit's centred
    estimator, with ``estimator_note`` saying so), with b
    the H200 bf16 cell's (else the median over the predicted cells of the default rows of ``tau``)
    divided by the preset's FLOPS factor; ``prior_dominated`` and ``prior_dominated_spreads``
    name the spreads whose prior sets a population row's width
    (:data:`evtsync.predict.tables.PRIOR_DOMINATED_NOTE`). Returns the table (one row per preset)
    and how it was made (``b_us``, ``b_source``, ``not_predicted``; ``refused`` where the fit
    cannot predict)."""
    from evtsync.core.reference import PRESETS, REFERENCE_TFLOPS
    from evtsync.predict.estimator import predict_table
    from evtsync.predict.tables import point_column, point_labels, tau_table

    rows_of = _default_rows(tau)
    ref = rows_of[(rows_of.get("gpu", "") == "H200") & (rows_of.get("precision", "") == "bf16")]
    b_source = "the H200 bf16 cell's b (the paper's reference GPU)"
    if ref.empty:
        ref, b_source = rows_of, "the median b over the fitted cells (no H200 bf16 cell)"
    b_ref = float(np.median(ref["b_us"]))
    rows, notes = [], []
    for preset, spec in PRESETS.items():
        factor = float(spec["tflops"]) / REFERENCE_TFLOPS
        n = int(spec["n"])
        if n % m and not _any_n(choice):
            notes.append(f"{preset}: n = {n} is not a multiple of m = {m}")
            continue
        try:
            t = predict_table(choice, tau_table, [n], b_ref / factor, m, LEVEL, gpu=str(spec["gpu"]), precision="bf16")
        except EvtsyncError as exc:
            return pd.DataFrame(), {"refused": str(exc)}
        points, labels = point_column(t, "tau", "_us").tolist(), point_labels(t).tolist()
        for r, point, label in zip(t.itertuples(), points, labels, strict=True):
            rows.append({"preset": preset, "gpu": spec["gpu"], "n": n, "flops_factor": factor,
                         "prediction_kind": getattr(r, "prediction_kind", "cell"),
                         "model": str(getattr(r, "model", "")), "estimator": str(getattr(r, "estimator", "")),
                         "estimator_note": str(getattr(r, "estimator_note", "") or ""),
                         # the spreads whose prior, not the data, sets a population row's width (issue 29)
                         "prior_dominated": bool(getattr(r, "prior_dominated", False) or False),
                         "prior_dominated_spreads": str(getattr(r, "prior_dominated_spreads", "") or ""),
                         "tau_point_us": point, "point_estimate": label, "tau_mean_us": r.tau_mean_us,
                         "tau_lo_us": r.tau_lo_us, "tau_hi_us": r.tau_hi_us,
                         "nvlink_gbps": spec["nvlink_gbps"], "tflops": spec["tflops"],
                         "tflops_source": spec.get("tflops_source", ""), "source": spec["source"],
                         "converged": bool(r.converged)})
    return pd.DataFrame(rows), {"b_us": b_ref, "b_source": b_source, "not_predicted": notes}


def flops_tables(choice: Any, tau: pd.DataFrame, topologies: Sequence[str], alpha_us: float,
                 size_bytes: float, eps: float, m: int) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """B* against the FLOPS factors :data:`FLOPS_SWEEP` at n in :data:`FLOPS_NS` for the H200 bf16
    cell (else the first cell of the default rows of ``tau``) by the run's estimator ``choice``, and
    the bandwidth-scaling requirement over the sweep
    (:func:`evtsync.predict.tables.flops_scaling_table`). Returns both tables and how they were made
    (``b_us``, ``which``, ``cell``, ``estimator``; ``refused`` where they cannot be computed)."""
    from evtsync.predict.estimator import predict_table
    from evtsync.predict.tables import bandwidth_table, flops_scaling_table

    if any(n % m for n in FLOPS_NS) and not _any_n(choice):
        return pd.DataFrame(), pd.DataFrame(), {
            "refused": f"n = {', '.join(map(str, FLOPS_NS))} (the paper's Fig. 13) are not multiples of this run's m = {m}"}
    rows = _default_rows(tau)
    ref = rows[(rows.get("gpu", "") == "H200") & (rows.get("precision", "") == "bf16")]
    which = "the H200 bf16 cell (the paper's reference GPU)"
    if ref.empty:
        ref = rows.sort_values([c for c in ("gpu", "precision") if c in rows.columns]).head(1)
        which = "the first fitted cell (no H200 bf16 cell in this run)"
    r0 = ref.iloc[0]
    gpu, precision = (str(r0["gpu"]), str(r0["precision"])) if "gpu" in ref.columns else (None, None)
    b_ref = float(r0["b_us"])
    args = (list(topologies), list(FLOPS_NS), alpha_us, size_bytes, b_ref)
    try:
        table = predict_table(choice, bandwidth_table, *args, eps, m, LEVEL, list(FLOPS_SWEEP), gpu=gpu,
                              precision=precision)
        scaling = predict_table(choice, flops_scaling_table, *args, list(FLOPS_SWEEP), eps, m, LEVEL, gpu=gpu,
                                precision=precision)
    except EvtsyncError as exc:
        return pd.DataFrame(), pd.DataFrame(), {"refused": str(exc)}
    cell = str(table["cell"].iloc[0]) if len(table) else "?"
    estimator = ", ".join(sorted(set(table["estimator"].astype(str)))) if len(table) else ""
    return table, scaling, {"b_us": b_ref, "which": which, "cell": cell, "sweep": list(FLOPS_SWEEP),
                            "ns": list(FLOPS_NS), "estimator": estimator}
