"""The report of one Bayesian fit: convergence, parameters, xi per cell, the fit of every cell."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import pandas as pd

from evtsync.core.defaults import INTERVAL_LEVEL as LEVEL
from evtsync.plots import fits as fit_figs
from evtsync.report.context import PCT, ReportContext, mle_parameters, slug
from evtsync.report.markdown import (
    Alert,
    Section,
    Table,
    fmt_ci,
)


def fit_sections(fit_file: Path, out: Path, svg: bool = False,
                 workers: int | None = None,
                 figure_cache: str | os.PathLike[str] | None = None) -> tuple[list[Section], list[Path]]:
    """The document of one Bayesian fit: convergence, parameters, xi per cell, fit per cell
    (``figure_cache``: see :class:`~evtsync.report.context.FigureCache`)."""
    from evtsync.evt.bayesfit import (
        BayesFit,
        cell_parameters,
        is_converged,
        load_fit,
        parameter_summary,
    )
    from evtsync.evt.fit import ESS_MIN, RHAT_MAX
    from evtsync.evt.mlefit import mle_cell_table
    from evtsync.predict.tables import cell_parameter_table

    tree = load_fit(fit_file)
    ctx = ReportContext(fit_file.parent, out, {}, svg=svg, figure_cache=figure_cache)
    name = str(tree.attrs.get("model_name", fit_file.stem))
    items: list[Any] = []
    if not is_converged(tree):
        items.append(Alert(f"Fit {name} did NOT converge ({tree.attrs.get('convergence', '')})."))
    items.append(f"Model {name} ({tree.attrs.get('model_family', '')}) on {tree.attrs.get('n_obs')} z-scores from "
                 f"{tree.attrs.get('input_path', '')}; {tree.attrs.get('draws')} draws × {tree.attrs.get('chains')} "
                 f"chains after {tree.attrs.get('tune')} tuning steps ({tree.attrs.get('sampler', '')}); "
                 f"{tree.attrs.get('convergence', '')}.")
    summary = parameter_summary(tree)
    summary["not converged"] = (summary["r_hat"] > RHAT_MAX) | (summary["ess_bulk"] < ESS_MIN)
    summary["r_hat"] = [f"{v:.4f}" for v in summary["r_hat"]]
    items.append(Table(summary.drop(columns=["level"]).rename(columns={"lo": f"{(1 - LEVEL) / 2:.0%}", "hi": f"{(1 + LEVEL) / 2:.0%}"}), "Posterior of every parameter: mean, sd, "
                       f"central {PCT} interval, split R-hat, bulk and tail ESS (rows in red fail R-hat ≤ {RHAT_MAX:g} or ESS ≥ {ESS_MIN}).",
                       flag="not converged"))
    sections = [Section(f"Fit {name}", items, anchor="fit")]
    params = cell_parameters(tree)
    cells = tree["cells"].to_dataset()
    obs = tree["observed_data"].to_dataset()
    labels = cells["cell"].values.astype(str)
    observed = pd.DataFrame({"cell": labels[obs["cell"].values.astype(int)], "z": obs["z"].values})
    # the GEV and Gumbel MLE of every cell, as the run's mle stage computes them (no profile interval: not shown)
    mle = mle_cell_table(observed, ("cell",), pooled=False, profile=False)
    # posterior mean and central interval of mu, sigma, xi per cell: the prediction tables' summary
    summary_of_cells = cell_parameter_table(BayesFit(tree, fit_file), LEVEL).astype({"cell": str}).set_index("cell")
    rows = []
    for i, cell in enumerate(labels):
        gpu = str(cells["gpu"].values[i]) if "gpu" in cells else "all"
        precision = str(cells["precision"].values[i]) if "precision" in cells else "all"
        draws = (params["mu"].isel(cell=i).values.ravel(), params["sigma"].isel(cell=i).values.ravel(),
                 params["xi"].isel(cell=i).values.ravel())
        r = summary_of_cells.loc[cell]
        q = {p: (float(r[f"{p}_mean"]), float(r[f"{p}_lo"]), float(r[f"{p}_hi"])) for p in ("mu", "sigma", "xi")}
        rows.append({"model": name, "gpu": gpu, "precision": precision, "converged": is_converged(tree),
                     "xi_mean": q["xi"][0], "xi_lo": q["xi"][1], "xi_hi": q["xi"][2]})
        z = obs["z"].values[obs["cell"].values == i]
        fig = functools.partial(fit_figs.gev_cell, z, mle_parameters(mle, "gev", cell=cell),
                                mle_parameters(mle, "gumbel", cell=cell), draws, name, cell)
        sections.append(Section(f"Cell {cell}", [
            f"mu {fmt_ci(*q['mu'])}, sigma {fmt_ci(*q['sigma'])}, xi {fmt_ci(*q['xi'])} (posterior mean [{PCT} CrI]).",
            ctx.figure(fig, f"gev-{slug(cell)}", f"Left: histogram of the {z.size} z-scores of cell {cell} with the posterior mean GEV "
                             f"density of {name} and its {PCT} pointwise band, and the GEV and Gumbel "
                             f"maximum-likelihood densities. Right: QQ plot of the ordered z-scores against the MLE "
                             f"model quantiles at i/(n+1) (methodology §6).")], level=3))
    xi = pd.DataFrame(rows)
    if ((xi["xi_hi"] != 0) | (xi["xi_lo"] != 0)).any():  # a free shape (a Gumbel fit's rows are all 0)
        sections.insert(1, Section("Shape parameter xi per cell", [ctx.figure(
            functools.partial(fit_figs.xi_forest, xi, None), "xi-forest", f"Posterior mean and {PCT} credible interval of xi in every cell of the fit.")], anchor="xi"))
    ctx.draw_figures(workers)
    return sections, ctx.written

