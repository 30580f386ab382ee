"""The report of a run folder (or of one fit): self-contained HTML plus a Markdown summary.

``build_report(source, out)`` reads what ``evtsync run`` wrote (``manifest.json``, the
tables in ``tables/``, the fits in ``fits/``), draws the figures into ``out/figures/`` as PNG
and SVG, and writes ``out/report.html`` (every figure embedded as a base64 PNG, styles
inline: it opens without a network) and ``out/report.md``. Given a single fit (a folder with
``fit.nc`` or a ``.nc`` file) it reports that fit alone.

The report is organised per hardware generation (GPU model) and precision; non-converged
fits and failed stages are flagged in red at the top; stages that did not apply say why.
Every interval is a central ``evtsync.defaults.INTERVAL_LEVEL`` (90%) interval (credible for posteriors, confidence for MLE and
measured means) unless a caption says otherwise.
"""

from __future__ import annotations

import base64
import html
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evtsync.defaults import INTERVAL_LEVEL as LEVEL
from evtsync.errors import InputError
from evtsync.plots import fits as fit_figs
from evtsync.plots import predictions as pred_figs
from evtsync.plots import tax as tax_figs
from evtsync.plots.base import save_png_svg
from evtsync.report.markdown import Alert, Figure, Section, Table, fmt, fmt_ci, render_markdown
from evtsync.tableio import read_table, write_text_atomic

log = logging.getLogger("evtsync.report.html")

#: The interval level in words, for captions ("90%").
PCT = f"{LEVEL:.0%}"

REPORT_HTML = "report.html"
REPORT_MD = "report.md"
FIGURES = "figures"

#: Domain sizes shown in the tables of tau(n) and B* (the figures show every power of two).
TABLE_NS = (8, 64, 128, 512, 4096)

STATUS_TEXT = {"done": "done", "not_applicable": "did not apply", "unavailable": "unavailable",
               "failed": "FAILED", "not run": "not run"}

_CSS = """
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1180px;margin:1.5em auto;
padding:0 1em;color:#1d1d1f;line-height:1.45}
h1{font-size:1.7em;border-bottom:2px solid #ddd;padding-bottom:.2em}
h2{font-size:1.35em;margin-top:1.8em;border-bottom:1px solid #e5e5e5}
h3{font-size:1.1em;margin-top:1.3em}
table{border-collapse:collapse;margin:.6em 0;font-size:.86em}
th,td{border:1px solid #d0d0d0;padding:.25em .55em;text-align:right}
th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}
tr.flag td{background:#fde2e2;color:#9b1111;font-weight:600}
.alert{border-left:6px solid #c62828;background:#fde2e2;color:#7f0f0f;padding:.6em .9em;margin:.5em 0;
font-weight:600}
.warning{border-left:6px solid #d89b00;background:#fff4d6;color:#5c4300;padding:.6em .9em;margin:.5em 0}
figure{margin:1em 0}
figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.88em;color:#444;max-width:60em}
.caption{font-size:.88em;color:#444}
.status-done{color:#1b5e20}.status-not_applicable,.status-unavailable{color:#8a6d00}
.status-failed{color:#b71c1c;font-weight:700}
nav ul{columns:2;font-size:.9em}
"""


# --------------------------------------------------------------------------- rendering

def _img_tag(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _table_html(table: Table) -> str:
    frame = table.frame
    out = []
    if table.caption:
        out.append(f'<p class="caption">{html.escape(table.caption)}</p>')
    if frame.empty:
        return "".join(out) + "<p><em>(empty)</em></p>"
    cols = [c for c in frame.columns if c != table.flag or table.flag is None]
    out.append("<table><thead><tr>" + "".join(f"<th>{html.escape(str(c))}</th>" for c in cols) + "</tr></thead><tbody>")
    for _, row in frame.iterrows():
        flagged = table.flag is not None and bool(row.get(table.flag, False))
        cells = []
        for c in cols:
            value = row[c]
            text = html.escape(fmt(value))
            if c == "status":
                text = f'<span class="status-{html.escape(str(value))}">{html.escape(STATUS_TEXT.get(str(value), str(value)))}</span>'
            cells.append(f"<td>{text}</td>")
        out.append(f"<tr{' class=\"flag\"' if flagged else ''}>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def render_html(title: str, subtitle: str, sections: list[Section]) -> str:
    """The document as one self-contained HTML page (figures embedded as base64 PNG)."""
    body = [f"<h1>{html.escape(title)}</h1>", f"<p>{html.escape(subtitle)}</p>"]
    toc = [f'<li><a href="#{s.anchor}">{html.escape(s.title)}</a></li>' for s in sections if s.level == 2 and s.anchor]
    if toc:
        body.append("<nav><ul>" + "".join(toc) + "</ul></nav>")
    for section in sections:
        anchor = f' id="{html.escape(section.anchor)}"' if section.anchor else ""
        body.append(f"<h{section.level}{anchor}>{html.escape(section.title)}</h{section.level}>")
        for item in section.items:
            if isinstance(item, str):
                body.append(f"<p>{html.escape(item)}</p>")
            elif isinstance(item, Alert):
                body.append(f'<div class="{"alert" if item.level == "error" else "warning"}">{html.escape(item.text)}</div>')
            elif isinstance(item, Table):
                body.append(_table_html(item))
            elif isinstance(item, Figure):
                body.append(f"<figure>{_img_tag(item.png, item.caption.split('.')[0])}"
                            f"<figcaption>{html.escape(item.caption)}</figcaption></figure>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


# --------------------------------------------------------------------------- intervals

def median_interval(values: np.ndarray, level: float = LEVEL) -> tuple[float, float, float]:
    """The median with a distribution-free confidence interval from order statistics.

    With B ~ Binomial(n, 1/2) the number of observations below the true median, the interval
    [x_(j), x_(n-j+1)] (1-based order statistics), j the smallest integer with
    P(B <= j) >= (1 - level)/2, covers the median with probability 1 - 2 P(B <= j - 1) >= level.
    For samples too small for that coverage the interval is the whole range.
    """
    from scipy import stats

    x = np.sort(np.asarray(values, dtype=float)[np.isfinite(values)])
    n = x.size
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    j = max(int(stats.binom.ppf((1 - level) / 2, n, 0.5)), 1)
    if 1 - 2 * stats.binom.cdf(j - 1, n, 0.5) < level:
        j = 1
    return float(np.median(x)), float(x[j - 1]), float(x[n - j])


def wilson_interval(k: int, n: int, level: float = LEVEL) -> tuple[float, float, float]:
    """A proportion k/n with its Wilson score interval."""
    from scipy import stats

    if n <= 0:
        return float("nan"), float("nan"), float("nan")
    z = float(stats.norm.ppf(0.5 + level / 2))
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return p, float(max(0.0, centre - half)), float(min(1.0, centre + half))


# --------------------------------------------------------------------------- helpers

class _Ctx:
    """What the section builders share: the run folder, its manifest, the figure folder."""

    def __init__(self, run_dir: Path, out: Path, manifest: dict[str, Any]) -> None:
        self.run_dir = run_dir
        self.out = out
        self.fig_dir = out / FIGURES
        self.manifest = manifest
        self.written: list[Path] = []

    def stage(self, name: str) -> dict[str, Any]:
        return self.manifest.get("stages", {}).get(name, {})

    def done(self, name: str) -> bool:
        return self.stage(name).get("status") == "done"

    def table(self, name: str) -> pd.DataFrame | None:
        path = self.run_dir / "tables" / f"{name}.parquet"
        return read_table(path) if path.is_file() else None

    def figure(self, fig: Any, stem: str, caption: str) -> Figure:
        """Save a matplotlib figure of :mod:`evtsync.plots` as ``figures/stem.png/.svg`` for the report."""
        pair = save_png_svg(fig, self.fig_dir, stem)
        self.written.extend(pair)
        return Figure(pair[0], pair[1], caption)

    def why_not(self, name: str) -> str:
        entry = self.stage(name)
        status = entry.get("status", "not run")
        return f"Stage {name} {STATUS_TEXT.get(status, status)}: {entry.get('reason') or 'no reason recorded'}."


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() else "-" for ch in str(text).lower()).strip("-")


def _fit_rows(run_dir: Path, manifest: dict[str, Any]) -> pd.DataFrame:
    rows = []
    for name, entry in manifest.get("stages", {}).items():
        if not name.startswith("fit-"):
            continue
        s = entry.get("summary", {})
        rows.append({"model": name[4:], "status": entry.get("status"), "converged": s.get("converged"),
                     "convergence": s.get("convergence", entry.get("reason", "")), "z-scores": s.get("n_obs"),
                     "draws": s.get("draws"), "tune": s.get("tune"), "chains": s.get("chains"),
                     "seconds": entry.get("seconds")})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- run sections

def _overview(ctx: _Ctx) -> list[Section]:
    m = ctx.manifest
    items: list[Any] = []
    fits = _fit_rows(ctx.run_dir, m)
    bad = fits[(fits["status"] == "done") & (fits["converged"] == False)] if len(fits) else fits  # noqa: E712
    for row in bad.itertuples():
        items.append(Alert(f"Fit {row.model} did NOT converge ({row.convergence}). Every number computed from it "
                           "is marked; rerun with more --draws/--tune before relying on it."))
    for name, entry in m.get("stages", {}).items():
        if entry.get("status") == "failed":
            items.append(Alert(f"Stage {name} FAILED: {entry.get('reason', '')}"))
    if m.get("demo"):
        s = m.get("sampling", {})
        items.append(Alert(f"This is the bundled demo: a synthetic study generated deterministically, fitted with the "
                           f"demo's sampler settings ({s.get('draws')} draws, {s.get('tune')} tuning steps, "
                           f"{s.get('chains')} chains). Real runs default to 1000 draws, 1000 tuning steps and 4 chains.", level="warning"))
    rows = []
    for n in m.get("stage_order", []):
        e = m.get("stages", {}).get(n, {})
        if n == "report":
            rows.append({"stage": n, "status": "done", "reason": "this report", "seconds": None})
        else:
            rows.append({"stage": n, "status": e.get("status", "not run"), "reason": e.get("reason", ""),
                         "seconds": e.get("seconds")})
    stages = pd.DataFrame(rows, columns=["stage", "status", "reason", "seconds"])
    items.append(Table(stages, "Stages of the run, in order: done, did not apply (with the reason), unavailable "
                               "(module not installed) or FAILED. Reused stages keep their first run's time."))
    na = stages[stages["status"].isin(["not_applicable", "unavailable"])] if len(stages) else stages
    if len(na):
        by_reason = na.groupby("reason", sort=False)["stage"].apply(list)
        items.append("Stages that did not apply: " + "; ".join(f"{', '.join(stages_)} — {reason}"
                                                               for reason, stages_ in by_reason.items()) + ".")
    return [Section("Overview", items, anchor="overview")]


def _inputs(ctx: _Ctx) -> list[Section]:
    traces = ctx.table("tax_traces")
    groups = ctx.table("tax_groups")
    if traces is None:
        return [Section("Inputs", [ctx.why_not("tax")], anchor="inputs")]
    rows = []
    for w, sub in traces.groupby("workload", sort=True):
        g = groups[groups["workload"] == w] if groups is not None and len(groups) else pd.DataFrame()
        rows.append({"workload": w, "GPU": sub["gpu"].iloc[0], "ranks": len(sub),
                     "events": int(sub["n_events"].sum()) if "n_events" in sub else None,
                     "process groups": len(g),
                     "PGs (label: ranks, collectives)": "; ".join(f"{r.pg}: {r.pg_ranks} ({r.n_collectives})"
                                                            for r in g.itertuples()) if len(g) else "none"})
    return [Section("Inputs", [Table(pd.DataFrame(rows), "One row per workload (one job's traces, one file per "
                                                         "rank); process groups as aligned (SPEC §2).")],
                    anchor="inputs")]


def _gpu_sections(ctx: _Ctx) -> list[Section]:
    coll = ctx.table("tax_collectives")
    ranks = ctx.table("tax_ranks")
    summary = ctx.table("tax_summary")
    att = ctx.table("attribution_summary")
    z = ctx.table("zscores")
    mle = ctx.table("mle")
    pvm = ctx.table("predicted_vs_measured")
    main_tree, main_name = _main_fit(ctx)
    if coll is None:
        return []
    sections = []
    for gpu in sorted(coll["gpu"].astype(str).unique()):
        sub = coll[coll["gpu"].astype(str) == gpu]
        slug = _slug(gpu)
        sec = Section(f"{gpu}", level=2, anchor=f"gpu-{slug}")
        workloads = sorted(sub["workload"].unique())
        sec.items.append(f"Workloads on {gpu}: {', '.join(workloads)}.")
        if summary is not None and len(summary):
            s = summary[summary["gpu"].astype(str) == gpu]
            medians = {key: median_interval(grp["tau_max_us"].to_numpy(float))
                       for key, grp in sub.groupby(["workload", "pg", "collective"])}
            shown = pd.DataFrame({
                "workload": s["workload"], "pg": s["pg"], "collective": s["collective"], "count": s["count"],
                f"tau median µs [{PCT} CI]": [fmt_ci(*medians.get((w, p, c), (np.nan,) * 3))
                                          for w, p, c in zip(s["workload"], s["pg"], s["collective"], strict=True)],
                "tau p90 µs": s["tau_p90_us"], "tau max µs": s["tau_max_us"],
                "wait share, longest-waiting rank": s["fastest_wait_share"],
                "wait share, median rank": s["median_rank_wait_share"], "invalid": s["n_invalid"]})
            sec.items.append(Table(shown, "Tax per workload, PG and collective type (SPEC §3): tau = max − min NCCL "
                                          "kernel duration over the member ranks, µs: median over the collectives with "
                                          f"its distribution-free {PCT} confidence interval (order statistics), 90th "
                                          "percentile, maximum; wait share = (d_r − min d)/d_r, median over the "
                                          "collectives, for the rank that waited longest and for the median rank; "
                                          "collectives flagged by the alignment checks."))
        if len(sub):
            labelled = sub.assign(pg=sub["workload"].astype(str) + " " + sub["pg"].astype(str))
            sec.items.append(ctx.figure(tax_figs.tax_cdfs(labelled), f"tax-cdf-{slug}", f"Empirical CDF of the synchronization tax tau_max (max − min NCCL "
                                        f"kernel duration across the member ranks, log µs) of every aligned collective "
                                        f"on {gpu}, one curve per workload, process group and collective type "
                                        f"(SPEC §3)."))
        if ranks is not None and len(ranks[ranks["gpu"].astype(str) == gpu]):
            fig = tax_figs.wait_shares(ranks[ranks["gpu"].astype(str) == gpu], f"Wait shares on {gpu}")
            sec.items.append(ctx.figure(fig, f"wait-shares-{slug}", f"Distribution over collectives of the wait share (d_r − min d)/d_r: solid "
                                              f"for the rank that waited longest, dashed for the median rank, one "
                                              f"colour per workload on {gpu} (SPEC §3)."))
        sec.items += _attribution_items(ctx, att, gpu, slug)
        sections.append(sec)
        precisions = sorted(z[z["gpu"].astype(str) == gpu]["precision"].astype(str).unique()) if z is not None else []
        if not precisions:
            sec.items.append("No z-scores for this GPU: " + (ctx.why_not("zscores") if not ctx.done("zscores")
                                                           else "no kept GEMM block in its workloads."))
        for precision in precisions:
            sections.append(_cell_section(ctx, gpu, precision, z, mle, pvm, main_tree, main_name))
    return sections


def _attribution_items(ctx: _Ctx, att: pd.DataFrame | None, gpu: str, slug: str) -> list[Any]:
    if not ctx.done("attribution"):
        return [f"Critical-path attribution (SPEC §4): {ctx.why_not('attribution')}"]
    sub = att[att["gpu"].astype(str) == gpu] if att is not None else pd.DataFrame()
    if sub.empty:
        return [f"Critical-path attribution: no attributed collective on {gpu}."]
    items: list[Any] = []
    coll = ctx.table("attribution_collectives")
    if coll is not None and len(coll):
        ok = coll[(coll["gpu"].astype(str) == gpu) & (coll["status"] == "ok")]
        parts = []
        for w, grp in ok.groupby("workload", sort=True):
            p, lo, hi = wilson_interval(int((grp["path_kind"] == "gpu_only").sum()), len(grp))
            parts.append(f"{w} {fmt_ci(100 * p, 100 * lo, 100 * hi)}% of {len(grp)}")
        items.append(f"Share of attributed collectives whose straggler path is GPU-only, with its {PCT} Wilson "
                     "interval: " + "; ".join(parts) + " (paper: 93.7%).")
    totals = sub.groupby("workload")["count"].transform("sum").to_numpy()
    cat = sub.assign(**{f"share [{PCT} CI]": [fmt_ci(*wilson_interval(int(k), int(n)))
                                           for k, n in zip(sub["count"], totals, strict=True)]})
    items.append(Table(cat[["workload", "category", "cause_class", "count", f"share [{PCT} CI]", "share_of_gpu_causes"]],
                       "Principal cause of each straggler (the event with the largest extra time on its critical "
                       "path against the fastest rank's, SPEC §4), by category; paper: GEMM 78%, FlashAttention "
                       "15.4%, FSDP 4.3%, Norm 1.2%, Concat/Split 0.6% of GPU causes."))
    items.append(ctx.figure(tax_figs.attribution_breakdown(sub), f"attribution-{slug}", f"Share of attributed collectives on {gpu} per principal-cause category, one bar per "
                                  f"workload (critical-path walk from each collective back to the previous collective "
                                  f"of its PG, straggler's path compared with the fastest rank's, SPEC §4)."))
    return items


def _main_fit(ctx: _Ctx) -> tuple[Any, str | None]:
    from evtsync.evt.bayesfit import BayesFit
    from evtsync.pipeline.layout import fitted_models, main_model

    name = main_model(ctx.run_dir, ctx.manifest)
    if name is None:
        return None, None
    return BayesFit.load(fitted_models(ctx.run_dir, ctx.manifest)[name]), name


def _cell_draws(fit: Any, gpu: str, precision: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Draws of mu, sigma, xi of the fit's cell for a GPU × precision (a pooled fit's one cell), or None."""
    cells = fit.cells
    if {"gpu", "precision"} <= set(cells.columns):
        hit = np.flatnonzero((cells["gpu"] == gpu).to_numpy() & (cells["precision"] == precision).to_numpy())
        if hit.size == 0:
            return None
        c = int(hit[0])
    elif len(cells) == 1:
        c = 0
    else:
        return None
    return tuple(d[:, c] for d in fit.cell_draws())  # type: ignore[return-value]


def _mle_dict(mle: pd.DataFrame | None, gpu: str, precision: str, family: str) -> dict[str, float] | None:
    if mle is None or "mu" not in mle:
        return None
    row = mle[(mle["gpu"].astype(str) == gpu) & (mle["precision"].astype(str) == precision) & (mle["family"] == family)]
    if row.empty or not np.isfinite(row["mu"].iloc[0]):
        return None
    r = row.iloc[0]
    return {"mu": float(r["mu"]), "sigma": float(r["sigma"]), "xi": float(r["xi"])}


def _cell_section(ctx: _Ctx, gpu: str, precision: str, z: pd.DataFrame, mle: pd.DataFrame | None,
                  pvm: pd.DataFrame | None, tree: Any, model: str | None) -> Section:
    sec = Section(f"{gpu} {precision}: z-scores and fits", level=3, anchor=f"cell-{_slug(gpu)}-{_slug(precision)}")
    cell = z[(z["gpu"].astype(str) == gpu) & (z["precision"].astype(str) == precision)]
    values = cell["z"].to_numpy(float)
    sec.items.append(f"{len(values)} pooled z-scores from {cell['block'].nunique()} block identities "
                     f"(workloads {', '.join(sorted(cell['workload'].unique()))}); mean coefficient of variation "
                     f"r = {fmt(cell.drop_duplicates('block')['cv'].mean())} (paper: about 0.02).")
    post = _cell_draws(tree, gpu, precision) if tree is not None else None
    label = f"{model}{'' if tree is None or tree.converged else ' (NOT converged)'}"
    posterior_text = (f" and, in green, the posterior mean density of {label} with its {PCT} pointwise band"
                      if post is not None else " (no Bayesian fit covers this cell)")
    fig = fit_figs.gev_cell(values, _mle_dict(mle, gpu, precision, "gev"), _mle_dict(mle, gpu, precision, "gumbel"),
                            post, label, f"{gpu} {precision}")
    sec.items.append(ctx.figure(fig, f"gev-{_slug(gpu)}-{_slug(precision)}", f"Left: histogram of the pooled z-scores z = (M − X̄)/s_pooled of the GEMM blocks "
                                      f"on {gpu} {precision} (SPEC §5) with the GEV and Gumbel maximum-likelihood "
                                      f"densities where fitted{posterior_text}. Right: QQ plot of the ordered z-scores against the MLE model "
                                      f"quantiles at i/(n+1); points above the diagonal in the upper tail mean a "
                                      f"heavier tail than the model (SPEC §6)."))
    if mle is not None and "mu" in mle:
        rows = mle[(mle["gpu"].astype(str) == gpu) & (mle["precision"].astype(str) == precision)]
        shown = pd.DataFrame({
            "family": rows["family"], "n": rows["n"],
            f"mu [{PCT} CI]": [fmt_ci(a, b, c) for a, b, c in zip(rows["mu"], rows["mu_lo"], rows["mu_hi"], strict=True)],
            f"sigma [{PCT} CI]": [fmt_ci(a, b, c) for a, b, c in zip(rows["sigma"], rows["sigma_lo"], rows["sigma_hi"], strict=True)],
            f"xi [{PCT} profile CI]": [fmt_ci(a, b, c) if f == "gev" else "0 (fixed)"
                                    for f, a, b, c in zip(rows["family"], rows["xi"], rows["xi_lo"], rows["xi_hi"], strict=True)],
            "AIC": rows["aic"], "LRT p (Gumbel vs GEV)": rows.get("lrt_pvalue"),
        })
        sec.items.append(Table(shown, f"Maximum-likelihood fits of the cell (SPEC §6): Wald {PCT} intervals for mu and "
                                      f"sigma from the observed information, profile-likelihood {PCT} interval for xi; "
                                      "the likelihood-ratio test of xi = 0 has one degree of freedom."))
    if pvm is not None and len(pvm):
        rows = pvm[(pvm["gpu"].astype(str) == gpu) & (pvm["precision"].astype(str) == precision)]
        if len(rows):
            sec.items.append(Table(pd.DataFrame({
                "workload": rows["workload"], "n": rows["n"], "collectives": rows["n_collectives"],
                f"measured µs [{PCT} CI]": [fmt_ci(a, b, c) for a, b, c in zip(rows["measured_mean_us"], rows["measured_lo_us"], rows["measured_hi_us"], strict=True)],
                f"predicted µs [{PCT} CrI]": [fmt_ci(a, b, c) for a, b, c in zip(rows["predicted_mean_us"], rows["predicted_lo_us"], rows["predicted_hi_us"], strict=True)],
            }), "Mean straggler delay (mean − min kernel duration) of the collectives after this cell's GEMM blocks, "
                "measured (t interval of the mean) and predicted as b·E_k from the posterior (SPEC §7)."))
    return sec


def _xi_section(ctx: _Ctx) -> list[Section]:
    xi = ctx.table("xi")
    pop = ctx.table("xi_population")
    if xi is None or xi.empty:
        return [Section("Shape parameter xi per GPU and precision", [ctx.why_not("prediction")], anchor="xi")]
    population = None
    items: list[Any] = []
    if pop is not None and len(pop):
        p0 = pop[pop["parameter"] == "xi0"]
        if len(p0):
            r = p0.iloc[0]
            population = {"mean": float(r["mean"]), "lo": float(r["lo"]), "hi": float(r["hi"])}
        items.append(Table(pd.DataFrame({
            "model": pop["model"], "parameter": pop["parameter"],
            f"posterior mean [{PCT} CrI]": [fmt_ci(a, b, c) for a, b, c in zip(pop["mean"], pop["lo"], pop["hi"], strict=True)],
            "converged": pop["converged"]}),
            "Population effect of the hierarchical model: xi0 is the shape shared by all cells; xi_delta_<factor> the "
            "zero-sum deviations of each GPU model and precision; xi_sd_<factor> their spread (partial pooling)."))
    models = [m for m in xi["model"].unique() if xi[xi["model"] == m]["xi_hi"].max() != 0 or
              xi[xi["model"] == m]["xi_lo"].min() != 0]
    shown = xi[xi["model"].isin(models)]
    items.insert(0, ctx.figure(fit_figs.xi_forest(shown, population), "xi-forest", f"Posterior mean and central {PCT} credible interval of the GEV shape xi in every GPU × "
                                     "precision cell, for every fitted model with a free shape (pooled models give one "
                                     f"value for all cells; x markers: fit not converged). Grey band: {PCT} interval of the "
                                     "population shape xi0 of the hierarchical model (SPEC §6)."))
    items.append(Table(pd.DataFrame({
        "model": shown["model"], "GPU": shown["gpu"], "precision": shown["precision"],
        f"xi [{PCT} CrI]": [fmt_ci(a, b, c) for a, b, c in zip(shown["xi_mean"], shown["xi_lo"], shown["xi_hi"], strict=True)],
        "not converged": ~shown["converged"].astype(bool)}), "Posterior of xi per cell (rows in red: fit not converged).",
        flag="not converged"))
    return [Section("Shape parameter xi per GPU and precision", items, anchor="xi")]


def _compare_section(ctx: _Ctx) -> list[Section]:
    table = ctx.table("compare")
    if table is None:
        return [Section("Model comparison", [ctx.why_not("compare")], anchor="compare")]
    verdict = ctx.stage("compare").get("summary", {}).get("verdict", "")
    shown = pd.DataFrame({
        "rank": table["rank"], "model": table["model"],
        "elpd_loo ± se": [f"{fmt(a, 5)} ± {fmt(b, 3)}" for a, b in zip(table["elpd_loo"], table["se"], strict=True)],
        "Δelpd ± se": [f"{fmt(-a + 0.0, 4)} ± {fmt(b, 3)}" for a, b in zip(table["elpd_diff"], table["dse"], strict=True)],
        "p_loo": table["p_loo"], "Pareto k > 0.7": table["n_bad_k"],
        "not converged": ~table["converged"].astype(bool)})
    lines = [line.strip() for line in str(verdict).splitlines() if line.strip()]
    verdict_items: list[Any] = [Alert(line, level="warning") if line.startswith("WARNING") else line
                                for line in lines]
    if verdict_items and isinstance(verdict_items[0], str):
        verdict_items[0] = f"Verdict: {verdict_items[0]}"
    return [Section("Model comparison", [
        *verdict_items,
        Table(shown, "PSIS-LOO comparison of the Bayesian fits on the same z-scores (SPEC §6): expected log pointwise "
                     "predictive density with its standard error, difference to the best model with the standard "
                     "error of the difference (a difference under about 2 standard errors does not separate the "
                     "models), effective number of parameters, observations whose Pareto k exceeds "
                     "0.7 (unreliable LOO). Rows in red: fit not converged.", flag="not converged")],
        anchor="compare")]


def _prediction_sections(ctx: _Ctx) -> list[Section]:
    tau = ctx.table("tau")
    bstar = ctx.table("bstar")
    if tau is None or tau.empty:
        return [Section("Predicted tax tau(n) and optimal bandwidth B*", [ctx.why_not("prediction")], anchor="tau")]
    summary = ctx.stage("prediction").get("summary", {})
    main = summary.get("main_model")
    models = [main] + [m for m in ("gumbel-hier", "gumbel") if m in set(tau["model"]) and m != main][:1]
    items: list[Any] = [ctx.figure(pred_figs.tau_curves(tau, models), "tau-n", f"Predicted mean straggler delay tau(n) = b·E_k, k = n/m, for domains of n = m "
                                         f"… 4096 ranks (SPEC §7): E_k is the expected maximum of k GEV draws at each "
                                         f"posterior draw of the cell's (mu, sigma, xi); b = mean r × mean a over the "
                                         f"cell's block identities. Lines: posterior mean; bands: {PCT} credible "
                                         f"intervals. Left: {main} (the model used for predictions); right: the Gumbel "
                                         f"lower bound where fitted.")]
    t = tau[tau["model"].isin(models) & tau["n"].isin(TABLE_NS)]
    wide = t.assign(value=[fmt_ci(a, b, c) for a, b, c in zip(t["tau_mean_us"], t["tau_lo_us"], t["tau_hi_us"], strict=True)])
    wide = wide.pivot_table(index=["model", "gpu", "precision"], columns="n", values="value", aggfunc="first")
    wide.columns = [f"n={c} µs [{PCT} CrI]" for c in wide.columns]
    items.append(Table(wide.reset_index(), f"tau(n) in µs at selected domain sizes: posterior mean [{PCT} credible interval]."))
    sections = [Section("Predicted tax tau(n)", items, anchor="tau")]
    if bstar is not None and len(bstar):
        b_items: list[Any] = [ctx.figure(pred_figs.bstar_curves(bstar), "bstar-n", f"Optimal bandwidth B* at elasticity eps = {fmt(summary.get('eps'))} of "
                                               f"the augmented Hockney model T(B) = p·alpha + q·S/B + tau (SPEC §8) "
                                               f"against n, per topology, with tau(n) from {main} (posterior mean, {PCT} "
                                               f"band per GPU × precision) beside Hockney's B*_H (tau = 0, dashed). "
                                               f"alpha = {fmt(summary.get('alpha_us'))} µs, S = "
                                               f"{fmt(summary.get('bytes'))} bytes ({summary.get('bytes_source', '')}).")]
        bt = bstar[bstar["n"].isin(TABLE_NS)]
        b_items.append(Table(pd.DataFrame({
            "topology": bt["topology"], "GPU": bt["gpu"], "precision": bt["precision"], "n": bt["n"],
            f"B* GB/s [{PCT} CrI]": [fmt_ci(a, b, c) for a, b, c in zip(bt["bstar_mean_gbps"], bt["bstar_lo_gbps"], bt["bstar_hi_gbps"], strict=True)],
            "Hockney B*_H GB/s": bt["bstar_hockney_gbps"],
            f"reduction 1 − B*/B*_H [{PCT} CrI]": [fmt_ci(a, b, c) for a, b, c in zip(bt["reduction_mean"], bt["reduction_lo"], bt["reduction_hi"], strict=True)],
            "not converged": ~bt["converged"].astype(bool)}),
            "B* and its reduction against Hockney's at selected n (paper, Llama-3 70B on DGX H200 with the Gumbel "
            "bound: 98.69% lower on the fully connected topology at n = 128, 37.26% on the ring at n = 128, 81.67% "
            "on the 3D torus at n = 512).", flag="not converged"))
        sections.append(Section("Optimal bandwidth B* against n", b_items, anchor="bstar"))
    return sections


def _pvm_section(ctx: _Ctx) -> list[Section]:
    pvm = ctx.table("predicted_vs_measured")
    if pvm is None or pvm.empty:
        return [Section("Predicted vs measured straggler delay", [ctx.why_not("predicted-vs-measured")], anchor="pvm")]
    selection = ctx.stage("predicted-vs-measured").get("summary", {}).get("selection", "")
    pvm_fig = pred_figs.predicted_vs_measured(pvm)
    ratio = pvm["measured_mean_us"] / pvm["predicted_mean_us"]
    return [Section("Predicted vs measured straggler delay", [
        ctx.figure(pvm_fig, "predicted-vs-measured", f"Measured mean straggler delay (mean − min NCCL kernel duration over the ranks, averaged over "
                         f"{selection}; error bars: {PCT} t interval of the mean) against the prediction b·E_k with k = "
                         f"n/m from the posterior of {pvm['model'].iloc[0]} and b the pooled sd of the preceding "
                         f"blocks (error bars: {PCT} credible interval), per workload (SPEC §7)."),
        f"Measured / predicted: median {fmt(float(ratio.median()))}, range {fmt(float(ratio.min()))} – "
        f"{fmt(float(ratio.max()))} over {len(pvm)} workload(s)."], anchor="pvm")]


def _convergence_section(ctx: _Ctx) -> list[Section]:
    fits = _fit_rows(ctx.run_dir, ctx.manifest)
    if fits.empty:
        return []
    fits["not converged"] = (fits["status"] == "done") & (fits["converged"] == False)  # noqa: E712
    return [Section("Convergence diagnostics", [
        Table(fits, "Every Bayesian fit: converged means max split R-hat ≤ 1.01, min bulk ESS ≥ 400 and no divergent "
                    "transition over all free parameters; rows in red did not converge.", flag="not converged")],
        anchor="convergence")]


def _files_section(ctx: _Ctx) -> list[Section]:
    rows = []
    for name, entry in ctx.manifest.get("stages", {}).items():
        for rel in entry.get("outputs", {}):
            if not rel.startswith(("figures/", "inputs/")) and rel not in (REPORT_HTML, REPORT_MD):
                rows.append({"stage": name, "file": rel})
    return [Section("Files of the run", [Table(pd.DataFrame(rows), "Tables (Parquet) and fits (netCDF, ArviZ layout) "
                                                                   "in the run folder; manifest.json holds each stage's "
                                                                   "content hash and status.")], anchor="files")]


def run_sections(run_dir: Path, out: Path, manifest: dict[str, Any]) -> tuple[list[Section], list[Path]]:
    """The document of a run folder, and the figure files written for it."""
    ctx = _Ctx(run_dir, out, manifest)
    sections: list[Section] = []
    for builder in (_overview, _inputs, _gpu_sections, _xi_section, _compare_section, _prediction_sections,
                    _pvm_section, _convergence_section, _files_section):
        sections += builder(ctx)
    return sections, ctx.written


# --------------------------------------------------------------------------- single fit

def _cell_mle(z: np.ndarray) -> tuple[dict[str, float] | None, dict[str, float] | None]:
    """GEV and Gumbel maximum-likelihood parameters of one cell (None where too few z-scores)."""
    from evtsync.evt import mle
    from evtsync.evt.mlefit import MIN_Z_MLE

    z = z[np.isfinite(z)]
    if z.size < MIN_Z_MLE:
        return None, None
    gev, gum = mle.fit_gev(z), mle.fit_gumbel(z)
    return ({"mu": gev.mu, "sigma": gev.sigma, "xi": gev.xi} if gev.converged else None,
            {"mu": gum.mu, "sigma": gum.sigma, "xi": 0.0} if gum.converged else None)


def fit_sections(fit_file: Path, out: Path) -> tuple[list[Section], list[Path]]:
    """The document of one Bayesian fit: convergence, parameters, xi per cell, fit per cell."""
    from evtsync.evt.bayesfit import cell_parameters, is_converged, load_fit, parameter_summary

    tree = load_fit(fit_file)
    ctx = _Ctx(fit_file.parent, out, {})
    name = str(tree.attrs.get("model_name", fit_file.stem))
    items: list[Any] = []
    if not is_converged(tree):
        items.append(Alert(f"Fit {name} did NOT converge ({tree.attrs.get('convergence', '')})."))
    items.append(f"Model {name} ({tree.attrs.get('model_family', '')}) on {tree.attrs.get('n_obs')} z-scores from "
                 f"{tree.attrs.get('input_path', '')}; {tree.attrs.get('draws')} draws × {tree.attrs.get('chains')} "
                 f"chains after {tree.attrs.get('tune')} tuning steps ({tree.attrs.get('sampler', '')}); "
                 f"{tree.attrs.get('convergence', '')}.")
    summary = parameter_summary(tree)
    summary["not converged"] = (summary["r_hat"] > 1.01) | (summary["ess_bulk"] < 400)
    summary["r_hat"] = [f"{v:.4f}" for v in summary["r_hat"]]
    items.append(Table(summary.drop(columns=["level"]).rename(columns={"lo": f"{(1 - LEVEL) / 2:.0%}", "hi": f"{(1 + LEVEL) / 2:.0%}"}), "Posterior of every parameter: mean, sd, "
                       f"central {PCT} interval, split R-hat, bulk and tail ESS (rows in red fail R-hat ≤ 1.01 or ESS ≥ 400).",
                       flag="not converged"))
    sections = [Section(f"Fit {name}", items, anchor="fit")]
    params = cell_parameters(tree)
    cells = tree["cells"].to_dataset()
    obs = tree["observed_data"].to_dataset()
    rows = []
    for i, cell in enumerate(cells["cell"].values.astype(str)):
        gpu = str(cells["gpu"].values[i]) if "gpu" in cells else "all"
        precision = str(cells["precision"].values[i]) if "precision" in cells else "all"
        draws = tuple(params[p].isel(cell=i).values.ravel() for p in ("mu", "sigma", "xi"))
        q = {p: (float(np.mean(d)), float(np.quantile(d, (1 - LEVEL) / 2)), float(np.quantile(d, (1 + LEVEL) / 2)))
             for p, d in zip(("mu", "sigma", "xi"), draws, strict=True)}
        rows.append({"model": name, "gpu": gpu, "precision": precision, "converged": is_converged(tree),
                     "xi_mean": q["xi"][0], "xi_lo": q["xi"][1], "xi_hi": q["xi"][2]})
        z = obs["z"].values[obs["cell"].values == i]
        mle_gev, mle_gumbel = _cell_mle(z)
        fig = fit_figs.gev_cell(z, mle_gev, mle_gumbel, draws, name, cell)
        sections.append(Section(f"Cell {cell}", [
            f"mu {fmt_ci(*q['mu'])}, sigma {fmt_ci(*q['sigma'])}, xi {fmt_ci(*q['xi'])} (posterior mean [{PCT} CrI]).",
            ctx.figure(fig, f"gev-{_slug(cell)}", f"Left: histogram of the {z.size} z-scores of cell {cell} with the posterior mean GEV "
                             f"density of {name} and its {PCT} pointwise band, and the GEV and Gumbel "
                             f"maximum-likelihood densities. Right: QQ plot of the ordered z-scores against the MLE "
                             f"model quantiles at i/(n+1) (SPEC §6).")], level=3))
    xi = pd.DataFrame(rows)
    if xi["xi_hi"].max() != 0 or xi["xi_lo"].min() != 0:
        sections.insert(1, Section("Shape parameter xi per cell", [ctx.figure(
            fit_figs.xi_forest(xi, None), "xi-forest", f"Posterior mean and {PCT} credible interval of xi in every cell of the fit.")], anchor="xi"))
    return sections, ctx.written


# --------------------------------------------------------------------------- entry point

def build_report(source: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> list[Path]:
    """Write ``report.html``, ``report.md`` and ``figures/`` for a run folder or a fit; returns
    every file written (figures first)."""
    from evtsync.evt.bayesfit import FIT_FILE
    from evtsync.pipeline.layout import MANIFEST, read_manifest

    src = Path(source)
    if (src / MANIFEST).is_file():
        manifest = read_manifest(src)
        dest = Path(out) if out else src
        sections, written = run_sections(src, dest, manifest)
        name = src.resolve().name
        title = f"evtsync report: {name}"
        subtitle = (f"Run folder {src}; evtsync {manifest.get('evtsync_version', '?')}; last updated "
                    f"{manifest.get('updated', '?')}. Intervals are central {PCT} intervals. Tables and figures (PNG "
                    f"and SVG) lie beside this file.")
    else:
        fit_file = src / FIT_FILE if src.is_dir() else src
        if not fit_file.is_file():
            raise InputError(f"{src}: neither a run folder ({MANIFEST}) nor a fit ({FIT_FILE} or a .nc file)")
        dest = Path(out) if out else (src if src.is_dir() else src.parent)
        sections, written = fit_sections(fit_file, dest)
        title = f"evtsync report: fit {fit_file.stem if fit_file.name != FIT_FILE else src.name}"
        subtitle = f"Fit file {fit_file}. Intervals are central {PCT} credible intervals."
    dest.mkdir(parents=True, exist_ok=True)
    html_path = write_text_atomic(dest / REPORT_HTML, render_html(title, subtitle, sections))
    md_path = write_text_atomic(dest / REPORT_MD, render_markdown(title, sections, dest))
    log.info("report written: %s (%d figures)", html_path, len(written) // 2)
    return [*written, html_path, md_path]

