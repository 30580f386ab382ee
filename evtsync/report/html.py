"""The report of a run folder (or of one fit): self-contained HTML plus a Markdown summary.

``build_report(source, out)`` reads what ``evtsync run`` wrote (``manifest.json``, the
tables in ``tables/``, the fits in ``fits/``), draws the figures into ``out/figures/`` as PNG
(and SVG with ``svg=True``; ``evtsync report --svg``), and writes ``out/report.html`` (every
figure embedded as a base64 PNG, styles inline: it opens without a network) and
``out/report.md``. Given a single fit (a folder with ``fit.nc`` or a ``.nc`` file) it reports
that fit alone. The text is built first; the figures are then drawn by one worker process per
core (:meth:`_Ctx.draw_figures`), since drawing and saving them is most of a report's time.

The report is organised per hardware generation (GPU model) and precision; non-converged
fits and failed stages are flagged in red at the top; stages that did not apply say why.
Every interval is a central ``evtsync.defaults.INTERVAL_LEVEL`` (90%) interval (credible for posteriors, confidence for MLE and
measured means) unless a caption says otherwise.
"""

from __future__ import annotations

import base64
import functools
import html
import logging
import multiprocessing
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evtsync.defaults import INTERVAL_LEVEL as LEVEL
from evtsync.errors import InputError
from evtsync.evt.mlefit import MIN_Z_MLE
from evtsync.plots import fits as fit_figs
from evtsync.plots import predictions as pred_figs
from evtsync.plots import tax as tax_figs
from evtsync.plots.base import PLOT_MODULES, draw_png_svg
from evtsync.report.markdown import (
    Alert,
    Caption,
    Figure,
    Link,
    Section,
    Skipped,
    Table,
    fmt,
    fmt_ci,
    human_label,
    render_markdown,
)
from evtsync.tableio import read_table, write_text_atomic

log = logging.getLogger("evtsync.report.html")

#: The interval level in words, for captions ("90%").
PCT = f"{LEVEL:.0%}"

REPORT_HTML = "report.html"
REPORT_MD = "report.md"
FIGURES = "figures"

#: Fewest z-scores of a cell for its histogram, QQ plot and MLE table (the MLE's own minimum).
MIN_Z_FIGURE = MIN_Z_MLE

#: Most worker processes that draw a report's figures (a 2-core machine uses both cores).
FIGURE_WORKERS = 4

#: Domain sizes shown in the tables of tau(n) and B* (the figures show every power of two).
TABLE_NS = (8, 64, 128, 512, 4096)

STATUS_TEXT = {"done": "done", "not_applicable": "did not apply", "unavailable": "unavailable",
               "failed": "FAILED", "not run": "not run"}

_CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1240px;margin:1em auto;
padding:0 1em;color:#1d1d1f;line-height:1.45}
h1{font-size:1.55em;border-bottom:2px solid #ddd;padding-bottom:.2em;margin:.3em 0}
h2{font-size:1.3em;margin-top:1.8em;border-bottom:1px solid #e5e5e5}
h3{font-size:1.08em;margin-top:1.3em}
p.subtitle{font-size:.85em;color:#555;margin:.2em 0 .6em}
.table-wrap{overflow-x:auto;max-width:100%;margin:.4em 0}
table{border-collapse:collapse;font-size:.86em}
th,td{border:1px solid #d0d0d0;padding:.25em .55em;text-align:right;vertical-align:top}
th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left}
tr.flag td{background:#fde2e2;color:#9b1111;font-weight:600}
table.summary{font-size:.9em}
table.summary td{white-space:nowrap}
table.summary .ci{font-size:.85em;color:#555}
table.summary th{font-size:.92em}
table.summary td.note{white-space:normal;min-width:12em;text-align:left;font-size:.92em;color:#7f0f0f}
a{color:#0b57d0}
.alert{border-left:6px solid #c62828;background:#fde2e2;color:#7f0f0f;padding:.45em .9em;margin:.4em 0;
font-weight:600}
.warning{border-left:6px solid #d89b00;background:#fff4d6;color:#5c4300;padding:.45em .9em;margin:.4em 0;
font-size:.92em}
figure{margin:1em 0}
figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.88em;color:#444;max-width:60em}
.caption{font-size:.88em;color:#444;margin:.5em 0 .2em}
.skipped{color:#666;font-style:italic}
.status-done{color:#1b5e20}.status-not_applicable,.status-unavailable{color:#8a6d00}
.status-failed{color:#b71c1c;font-weight:700}
nav ul{columns:3;font-size:.88em;margin:.3em 0}
@media (max-width:700px){nav ul{columns:1}body{padding:0 .5em}table{font-size:.8em}}
@media print{body{max-width:none;margin:0;font-size:10pt}nav,.no-print{display:none}
.table-wrap{overflow:visible}table{font-size:8pt}figure,table,tr{break-inside:avoid}
h2,h3{break-after:avoid}a{color:inherit;text-decoration:none}
tr.flag td{-webkit-print-color-adjust:exact;print-color-adjust:exact}}
"""


# --------------------------------------------------------------------------- rendering

def _img_tag(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def _cell_html(column: Any, value: Any, two_lines: bool = False) -> str:
    if isinstance(value, Link):
        found = re.fullmatch(r"(.+?) (\[.+\])", value.text) if two_lines else None
        if found:
            return (f'<a href="{html.escape(value.href)}">{html.escape(found.group(1))}<br>'
                    f'<span class="ci">{html.escape(found.group(2))}</span></a>')
        return f'<a href="{html.escape(value.href)}">{html.escape(value.text)}</a>'
    if column == "status":
        return (f'<span class="status-{html.escape(str(value))}">'
                f'{html.escape(STATUS_TEXT.get(str(value), str(value)))}</span>')
    return html.escape(fmt(value))


def _table_html(table: Table) -> str:
    frame = table.frame
    out = []
    if table.caption:
        out.append(f'<p class="caption">{html.escape(table.caption)}</p>')
    if frame.empty:
        return "".join(out) + "<p><em>(empty)</em></p>"
    cols = [c for c in frame.columns if c != table.flag or table.flag is None]
    css = f' class="{html.escape(table.css_class)}"' if table.css_class else ""
    out.append(f'<div class="table-wrap"><table{css}><thead><tr>'
               + "".join(f"<th>{html.escape(human_label(c))}</th>" for c in cols) + "</tr></thead><tbody>")
    for _, row in frame.iterrows():
        flagged = table.flag is not None and bool(row.get(table.flag, False))
        cells = []
        for c in cols:
            note = ' class="note"' if table.css_class == "summary" and str(c) == SUMMARY_NOTE else ""
            cells.append(f"<td{note}>{_cell_html(c, row[c], table.css_class == 'summary')}</td>")
        out.append(f"<tr{' class=\"flag\"' if flagged else ''}>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    return "".join(out)


def render_html(title: str, subtitle: str, sections: list[Section]) -> str:
    """The document as one self-contained HTML page (figures embedded as base64 PNG).

    The table of contents follows the first section (the summary, when there is one)."""
    body = [f"<h1>{html.escape(title)}</h1>", f'<p class="subtitle">{html.escape(subtitle)}</p>']
    toc = [f'<li><a href="#{s.anchor}">{html.escape(s.title)}</a></li>' for s in sections if s.level == 2 and s.anchor]
    nav = "<nav><ul>" + "".join(toc) + "</ul></nav>" if toc else ""
    for i, section in enumerate(sections):
        anchor = f' id="{html.escape(section.anchor)}"' if section.anchor else ""
        body.append(f"<h{section.level}{anchor}>{html.escape(section.title)}</h{section.level}>")
        for item in section.items:
            if isinstance(item, Link):
                body.append(f'<p><a href="{html.escape(item.href)}">{html.escape(item.text)}</a></p>')
            elif isinstance(item, Skipped):
                body.append(f'<p class="skipped">{html.escape(item.text)}</p>')
            elif isinstance(item, Caption):
                body.append(f'<p class="caption">{html.escape(item.text)}</p>')
            elif isinstance(item, str):
                body.append(f"<p>{html.escape(item)}</p>")
            elif isinstance(item, Alert):
                body.append(f'<div class="{"alert" if item.level == "error" else "warning"}">{html.escape(item.text)}</div>')
            elif isinstance(item, Table):
                body.append(_table_html(item))
            elif isinstance(item, Figure):
                body.append(f"<figure>{_img_tag(item.png, item.caption.split('.')[0])}"
                            f"<figcaption>{html.escape(item.caption)}</figcaption></figure>")
        if i == 0 and nav:
            body.append(nav)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")


# --------------------------------------------------------------------------- intervals

def quantile_interval(values: np.ndarray, q: float, level: float = LEVEL) -> tuple[float, float, float]:
    """The ``q`` quantile (NumPy's linear interpolation) with a distribution-free confidence interval.

    With B ~ Binomial(n, q) the number of observations below the true quantile, the interval
    [x_(j), x_(k)] (1-based order statistics) with j the largest index with P(B <= j - 1) <=
    (1 - level)/2 and k the smallest with P(B <= k - 1) >= (1 + level)/2 covers it with
    probability P(j <= B < k) >= level. Where the sample is too small for that coverage the
    missing side is unbounded (-inf or +inf): the data cannot bound it at this level.
    """
    from scipy import stats

    x = np.sort(np.asarray(values, dtype=float)[np.isfinite(values)])
    n = x.size
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    alpha = (1 - level) / 2
    i = np.arange(0, n + 1)
    cdf = stats.binom.cdf(i, n, q)                       # P(B <= i)
    lower_ok = np.flatnonzero(cdf[:n] <= alpha)           # j - 1 = i  ->  x_(i+1)
    upper_ok = np.flatnonzero(cdf[:n] >= 1 - alpha)       # k - 1 = i  ->  x_(i+1)
    lo = float(x[lower_ok[-1]]) if lower_ok.size else -np.inf
    hi = float(x[upper_ok[0]]) if upper_ok.size else np.inf
    return float(np.quantile(x, q)), lo, hi


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

    def __init__(self, run_dir: Path, out: Path, manifest: dict[str, Any],
                 load_fit: Callable[[Path], Any] | None = None, svg: bool = False) -> None:
        self.run_dir = run_dir
        self.out = out
        self.fig_dir = out / FIGURES
        self.manifest = manifest
        self.written: list[Path] = []
        self._load_fit = load_fit
        self._figures: list[tuple[Callable[[], Any], str, bool]] = []
        self.svg = svg
        self._main_fit: tuple[Any, str | None] | None = None

    def main_fit(self) -> tuple[Any, str | None]:
        """The main model's :class:`~evtsync.evt.bayesfit.BayesFit` and name ((None, None) without
        one), read once per report (through the run's reader when the pipeline gives one)."""
        if self._main_fit is None:
            from evtsync.evt.bayesfit import BayesFit, fit_path, load_fit
            from evtsync.pipeline.layout import fitted_models, main_model

            name = main_model(self.run_dir, self.manifest)
            if name is None:
                self._main_fit = (None, None)
            else:
                path = fitted_models(self.run_dir, self.manifest)[name]
                self._main_fit = (BayesFit((self._load_fit or load_fit)(path), fit_path(path)), name)
        return self._main_fit

    def stage(self, name: str) -> dict[str, Any]:
        return self.manifest.get("stages", {}).get(name, {})

    def done(self, name: str) -> bool:
        return self.stage(name).get("status") == "done"

    def table(self, name: str) -> pd.DataFrame | None:
        path = self.run_dir / "tables" / f"{name}.parquet"
        return read_table(path) if path.is_file() else None

    def figure(self, draw: Callable[[], Any], stem: str, caption: str) -> Figure:
        """Plan ``figures/stem.png`` (and ``.svg`` when the report was asked for SVG): ``draw`` (a
        figure function of :mod:`evtsync.plots` bound to its tables with ``functools.partial``) is
        called by :meth:`draw_figures`, after the text."""
        png, svg = self.fig_dir / f"{stem}.png", (self.fig_dir / f"{stem}.svg" if self.svg else None)
        # a stem planned again replaces the earlier plan (as saving it again would overwrite the file)
        self._figures = [job for job in self._figures if job[1] != stem] + [(draw, stem, self.svg)]
        self.written = [p for p in self.written if p not in (png, svg)] + [p for p in (png, svg) if p is not None]
        return Figure(png, svg, caption)

    def figure_workers(self, workers: int | None = None) -> int:
        """How many processes draw the figures: ``workers``, default one per core (at most
        :data:`FIGURE_WORKERS`); 1 in a daemon process, which may not start any."""
        if workers is None:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
            workers = min(cores, FIGURE_WORKERS)
        return 1 if multiprocessing.current_process().daemon else workers

    def draw_figures(self, workers: int | None = None) -> None:
        """Draw and save every planned figure, in ``workers`` processes (default: one per core, at
        most :data:`FIGURE_WORKERS`) when there are several figures: drawing and saving them is
        most of a report's time. One worker draws them in this process."""
        from evtsync.parallel import InProcess, ProcessPool

        jobs, self._figures = self._figures, []
        workers = min(self.figure_workers(workers), len(jobs))
        backend = ProcessPool(workers, preload=PLOT_MODULES) if workers > 1 else InProcess()
        backend.map(functools.partial(draw_png_svg, self.fig_dir), jobs, "report figures")

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


# --------------------------------------------------------------------------- summary

#: Domain size of the summary's tau(n) and B* when the run's options name none (the paper's
#: 3D-torus example; the largest tabulated n below it otherwise).
SUMMARY_N = 512
#: The summary's column of notes (convergence, refusals) shown beside the numbers.
SUMMARY_NOTE = "flags"


def _workload_precision(z: pd.DataFrame | None) -> dict[str, str]:
    """Workload -> its compute precision (from the z-scores); workloads with several map to none."""
    if z is None or z.empty:
        return {}
    per = z.groupby("workload")["precision"].unique()
    return {str(w): str(p[0]) for w, p in per.items() if len(p) == 1}


def summary_n(manifest: dict[str, Any], tau: pd.DataFrame | None) -> int | None:
    """The domain size the summary reports tau(n) and B* at: the run's ``n`` option, else
    :data:`SUMMARY_N` when tabulated, else the largest tabulated n not above it (else the smallest)."""
    wanted = manifest.get("options", {}).get("n") or SUMMARY_N
    if tau is None or tau.empty:
        return int(wanted)
    ns = sorted(int(n) for n in tau["n"].unique())
    if int(wanted) in ns:
        return int(wanted)
    below = [n for n in ns if n <= int(wanted)]
    return below[-1] if below else ns[0]


def _tail_verdict(lo: float, hi: float, family: str) -> str:
    if family == "gumbel":
        return "Gumbel (model fixes xi = 0)"
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return "–"
    if lo > 0:
        return "Fréchet (xi > 0)"
    if hi < 0:
        return "Weibull (xi < 0)"
    return "Gumbel (0 in interval)"


def loo_verdict(compare: pd.DataFrame | None) -> str:
    """The LOO comparison's answer to "Gumbel or a free shape?" in one sentence ("" without a table).

    The comparison table gives each model's difference to the best model with the standard
    error of that difference; the best model of the other family is compared with the best overall.
    """
    if compare is None or compare.empty or "family" not in compare:
        return ""
    table = compare.sort_values("rank")
    best = table.iloc[0]
    gumbel = best["family"] == "gumbel"
    other = table[(table["family"] == "gumbel") != gumbel]
    if other.empty:
        return f"LOO: best model {best['model']}; no model of the other family (Gumbel / free xi) to compare."
    rival = other.iloc[0]
    diff, se = float(rival["elpd_diff"]), float(rival["dse"])
    diff = abs(diff)
    clear = diff > 2 * se
    winner = "Gumbel (xi = 0)" if gumbel else "a free shape xi"
    text = (f"LOO prefers {winner}: {best['model']} over {rival['model']} by Δelpd {fmt(diff, 3)} ± {fmt(se, 2)}"
            + (" (more than 2 standard errors)." if clear else " — less than 2 standard errors: not a clear preference."))
    if not bool(best.get("converged", True)) or not bool(rival.get("converged", True)):
        text += " WARNING: a compared fit did not converge."
    return text


def summary_numbers(run_dir: Path, manifest: dict[str, Any]) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The numbers of the report's summary, one row per GPU × precision, unformatted.

    Columns: gpu, precision; tax over the valid collectives of the process group(s) the
    compute blocks were cut from (all valid collectives where there are no z-scores):
    ``n_collectives``, ``tax_median_us`` / ``_lo`` / ``_hi`` (order-statistic interval),
    ``tax_p90_us`` / ``_lo`` / ``_hi``; the attribution: ``n_attributed``, ``n_not_attributed``,
    ``gpu_only_share`` / ``_lo`` / ``_hi`` (Wilson); the main model's ``xi_mean`` / ``_lo`` /
    ``_hi``, ``family``, ``verdict``; ``tau_mean_us`` / ``_lo_us`` / ``_hi_us`` and
    ``tau_share_infinite`` at n; per topology ``reduction_<topology>`` / ``_lo`` / ``_hi``;
    ``converged`` and ``notes``. The second value holds ``n``, ``model``, ``loo`` and ``topologies``.
    """
    from evtsync.pipeline.layout import main_model

    def table(name: str) -> pd.DataFrame | None:
        path = run_dir / "tables" / f"{name}.parquet"
        return read_table(path) if path.is_file() else None

    stages = manifest.get("stages", {})

    def why(stage: str) -> str:
        entry = stages.get(stage, {})
        return f"stage {stage} {STATUS_TEXT.get(entry.get('status', 'not run'), entry.get('status', 'not run'))}" + (
            f": {entry['reason']}" if entry.get("reason") else "")

    coll, z, att = table("tax_collectives"), table("zscores"), table("attribution_collectives")
    xi, tau, bstar, compare = table("xi"), table("tau"), table("bstar"), table("compare")
    model = main_model(run_dir, manifest)
    n = summary_n(manifest, tau)
    prec_of = _workload_precision(z)
    if z is not None and len(z):
        cells = z[["gpu", "precision"]].astype(str).drop_duplicates().sort_values(["gpu", "precision"])
    elif coll is not None and len(coll):
        cells = pd.DataFrame({"gpu": sorted(coll["gpu"].astype(str).unique()), "precision": "all"})
    else:
        cells = pd.DataFrame(columns=["gpu", "precision"])
    block_pgs = (set(zip(z["workload"].astype(str), z["pg"].astype(str), strict=True))
                 if z is not None and len(z) else None)

    def in_cell(frame: pd.DataFrame, gpu: str, precision: str) -> pd.DataFrame:
        mask = frame["gpu"].astype(str) == gpu
        if precision != "all":
            mask &= frame["workload"].astype(str).map(prec_of) == precision
        return frame[mask]

    topologies = list(dict.fromkeys(bstar["topology"])) if bstar is not None and len(bstar) else []
    rows = []
    for gpu, precision in cells.itertuples(index=False):
        row: dict[str, Any] = {"gpu": gpu, "precision": precision}
        notes: list[str] = []
        if coll is not None and len(coll):
            c = in_cell(coll[coll["valid"].astype(bool)], gpu, precision)
            if block_pgs is not None:
                c = c[[(w, p) in block_pgs for w, p in zip(c["workload"].astype(str), c["pg"].astype(str), strict=True)]]
            values = c["tau_max_us"].to_numpy(float)
            row["n_collectives"] = int(values.size)
            row["tax_median_us"], row["tax_median_lo_us"], row["tax_median_hi_us"] = median_interval(values)
            row["tax_p90_us"], row["tax_p90_lo_us"], row["tax_p90_hi_us"] = quantile_interval(values, 0.9)
        else:
            notes.append(f"tax: {why('tax')}")
        if att is not None and len(att):
            a = in_cell(att, gpu, precision)
            ok = a[a["status"] == "ok"]
            row["n_attributed"], row["n_not_attributed"] = len(ok), len(a) - len(ok)
            share = wilson_interval(int((ok["path_kind"] == "gpu_only").sum()), len(ok))
            row["gpu_only_share"], row["gpu_only_share_lo"], row["gpu_only_share_hi"] = share
            if len(a) - len(ok):
                notes.append(f"{len(a) - len(ok)} of {len(a)} collectives not attributed")
        else:
            notes.append(f"GPU-only share: {why('attribution')}")
        fit_ok = True
        if xi is not None and model is not None and len(xi):
            x = xi[(xi["model"] == model) & (xi["gpu"].astype(str) == gpu) & (xi["precision"].astype(str) == precision)]
            if len(x):
                r = x.iloc[0]
                family = str(compare.set_index("model")["family"].get(model, "")) if compare is not None and \
                    "family" in compare else ""
                fixed = float(r["xi_lo"]) == float(r["xi_hi"]) == 0.0
                family = family or ("gumbel" if fixed else "gev")
                row.update(xi_mean=float(r["xi_mean"]), xi_lo=float(r["xi_lo"]), xi_hi=float(r["xi_hi"]),
                           family=family, verdict=_tail_verdict(float(r["xi_lo"]), float(r["xi_hi"]), family))
                fit_ok = bool(r["converged"])
            else:
                notes.append(f"no cell of {model} for {gpu} {precision}")
        else:
            notes.append(f"xi: {why('prediction')}")
        if tau is not None and model is not None and len(tau):
            t = tau[(tau["model"] == model) & (tau["gpu"].astype(str) == gpu)
                    & (tau["precision"].astype(str) == precision) & (tau["n"] == n)]
            if len(t):
                r = t.iloc[0]
                row.update(tau_mean_us=float(r["tau_mean_us"]), tau_lo_us=float(r["tau_lo_us"]),
                           tau_hi_us=float(r["tau_hi_us"]), tau_share_infinite=float(r.get("tau_share_infinite", 0.0)))
                fit_ok = fit_ok and bool(r["converged"])
                if row["tau_share_infinite"] > 0:
                    notes.append(f"{row['tau_share_infinite']:.1%} of tau draws infinite (xi >= 1): mean over the "
                                 "finite draws, interval open")
        else:
            notes.append(f"tau(n): {why('prediction')}")
        for topo in topologies:
            b = bstar[(bstar["topology"] == topo) & (bstar["gpu"].astype(str) == gpu)
                      & (bstar["precision"].astype(str) == precision) & (bstar["n"] == n)]
            if len(b):
                r = b.iloc[0]
                row.update({f"reduction_{topo}": float(r["reduction_mean"]), f"reduction_{topo}_lo": float(r["reduction_lo"]),
                            f"reduction_{topo}_hi": float(r["reduction_hi"])})
                fit_ok = fit_ok and bool(r.get("converged", True))
        row["converged"] = fit_ok
        if not fit_ok:
            notes.insert(0, f"fit {model} NOT converged: xi, tau and B* are unreliable")
        row["notes"] = "; ".join(notes)
        rows.append(row)
    info = {"n": n, "model": model, "loo": loo_verdict(compare), "topologies": topologies}
    return pd.DataFrame(rows), info


def _summary_section(ctx: _Ctx) -> list[Section]:
    from evtsync.pipeline.layout import incomplete_notes

    numbers, info = summary_numbers(ctx.run_dir, ctx.manifest)
    items: list[Any] = [Alert(note) for note in incomplete_notes(ctx.manifest)]  # a failed workload, missing ranks
    fits = _fit_rows(ctx.run_dir, ctx.manifest)
    bad = fits[(fits["status"] == "done") & (fits["converged"] == False)] if len(fits) else fits  # noqa: E712
    for row in bad.itertuples():
        items.append(Alert(f"Fit {row.model} did NOT converge ({row.convergence}). Every number computed from it "
                           "is marked; rerun with more --draws/--tune before relying on it."))
    for name, entry in ctx.manifest.get("stages", {}).items():
        if entry.get("status") == "failed":
            items.append(Alert(f"Stage {name} FAILED: {entry.get('reason', '')}"))
    if numbers.empty:
        items.append(Skipped("No summary: the run has no tax table (" + ctx.why_not("tax") + ")"))
        return [Section("Summary: the answers", items, anchor="summary")]
    n, model = info["n"], info["model"]
    topo_names = {"full": "fully connected", "ring": "ring", "torus3d": "3D torus"}

    def ci(row: Any, key: str, lo: str, hi: str, scale: float = 1.0, digits: int = 3) -> str:
        value = row.get(key)
        if value is None or (isinstance(value, float) and np.isnan(value)):
            return "–"
        return fmt_ci(scale * value, scale * row[lo], scale * row[hi], digits)

    records = numbers.to_dict(orient="records")
    split = [[n for n in str(r.get("notes") or "").split("; ") if n] for r in records]
    common = [n for n in split[0] if all(n in other for other in split) and "NOT converged" not in n] if split else []
    for r, notes in zip(records, split, strict=True):
        r["notes"] = "; ".join(n for n in notes if n not in common)
    shown = []
    for r in records:
        gslug, pslug = _slug(r["gpu"]), _slug(r["precision"])
        cell_anchor = f"#cell-{gslug}-{pslug}" if r["precision"] != "all" else f"#gpu-{gslug}"
        entry: dict[str, Any] = {
            "GPU × precision": Link(f"{r['gpu']} {r['precision']}", cell_anchor),
            "tax median (µs)": Link(ci(r, "tax_median_us", "tax_median_lo_us", "tax_median_hi_us"), f"#tax-{gslug}"),
            "tax P90 (µs)": Link(ci(r, "tax_p90_us", "tax_p90_lo_us", "tax_p90_hi_us"), f"#tax-{gslug}"),
            "GPU-only stragglers (%)": Link(ci(r, "gpu_only_share", "gpu_only_share_lo", "gpu_only_share_hi", 100.0),
                                            f"#attribution-{gslug}"),
            "xi": Link(ci(r, "xi_mean", "xi_lo", "xi_hi", digits=2), "#xi"),
            "tail": Link(str(r.get("verdict") or "–"), "#compare"),
            f"tau(n = {n}) (µs)": Link(ci(r, "tau_mean_us", "tau_lo_us", "tau_hi_us"), "#tau"),
        }
        for topo in info["topologies"]:
            entry[f"B* reduction, {topo_names.get(topo, topo)} (%)"] = Link(
                ci(r, f"reduction_{topo}", f"reduction_{topo}_lo", f"reduction_{topo}_hi", 100.0), "#bstar")
        if any(split):
            entry[SUMMARY_NOTE] = r.get("notes") or "–"
        entry["not converged"] = not bool(r.get("converged", True))
        shown.append(entry)
    frame = pd.DataFrame(shown)
    if SUMMARY_NOTE in frame and (frame[SUMMARY_NOTE] == "–").all():
        frame = frame.drop(columns=[SUMMARY_NOTE])
    loo = info["loo"] or ("LOO comparison: " + ctx.why_not("compare"))
    items.append(Link(loo, "#compare"))
    items.append(Table(frame, f"Per GPU × precision: value [{PCT} interval], each linked to its section; xi, "
                              f"tau and B* from {model or 'no fit'} at n = {n} ranks. Rows in red: fit not "
                              "converged.", flag="not converged", css_class="summary"))
    for note in common:
        items.append(Alert(f"Every row of the summary: {note}.", level="warning"))
    items.append(Caption(f"How the summary is computed: tax = max − min NCCL kernel duration over the member ranks, over "
                 f"the valid collectives of the process group(s) the compute blocks were cut from (the PG tau(n) "
                 f"predicts), median and 90th percentile with distribution-free order-statistic {PCT} intervals; "
                 f"GPU-only share = attributed collectives whose straggler path is GPU-only, Wilson {PCT} "
                 f"interval; xi, tau(n) = b·E_(n/m) and the B* reduction 1 − B*/B*_H per topology are posterior "
                 f"means with {PCT} credible intervals of {model or 'no fit'} (m = "
                 f"{ctx.manifest.get('options', {}).get('m', 4)}); the tail verdict reads the interval of xi: Fréchet "
                 "(heavy tail) when it lies above 0, Weibull (bounded) below 0, Gumbel when it holds 0."))
    if ctx.manifest.get("demo"):
        s = ctx.manifest.get("sampling", {})
        items.append(Alert(f"The bundled demo: a synthetic study with known truth (see "
                           f"\"Estimates vs ground truth\"), fitted with {s.get('draws')} draws, {s.get('tune')} tuning "
                           f"steps, {s.get('chains')} chains (real runs: 1000 / 1000 / 4).", level="warning"))
    return [Section("Summary: the answers", items, anchor="summary")]


# --------------------------------------------------------------------------- run sections

def _stages_section(ctx: _Ctx) -> list[Section]:
    m = ctx.manifest
    rows = []
    for n in m.get("stage_order", []):
        e = m.get("stages", {}).get(n, {})
        if n == "report":
            rows.append({"stage": n, "status": "done", "reason": "this report", "seconds": None})
        else:
            rows.append({"stage": n, "status": e.get("status", "not run"), "reason": e.get("reason", ""),
                         "seconds": e.get("seconds")})
    stages = pd.DataFrame(rows, columns=["stage", "status", "reason", "seconds"])
    items: list[Any] = []
    na = stages[stages["status"].isin(["not_applicable", "unavailable"])] if len(stages) else stages
    if len(na):
        by_reason = na.groupby("reason", sort=False)["stage"].apply(list)
        items.append("Stages that did not apply: " + "; ".join(f"{', '.join(stages_)} — {reason}"
                                                               for reason, stages_ in by_reason.items()) + ".")
    items.append(Table(stages, "Stages of the run, in order: done, did not apply (with the reason), unavailable "
                               "(module not installed) or FAILED; seconds of work (reused stages keep their first "
                               "run's time)."))
    return [Section("Stages of the run", items, anchor="stages")]


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
    main_tree, main_name = ctx.main_fit()
    if coll is None:
        return []
    sections = []
    for gpu in sorted(coll["gpu"].astype(str).unique()):
        sub = coll[coll["gpu"].astype(str) == gpu]
        slug = _slug(gpu)
        workloads = sorted(sub["workload"].unique())
        sections.append(Section(f"{gpu}", [f"Workloads on {gpu}: {', '.join(workloads)}."], level=2,
                                anchor=f"gpu-{slug}"))
        sec = Section(f"{gpu}: synchronization tax", level=3, anchor=f"tax-{slug}")
        if summary is not None and len(summary):
            s = summary[summary["gpu"].astype(str) == gpu]
            valid = sub[sub["valid"].fillna(False).astype(bool).to_numpy()] if "valid" in sub else sub
            medians = {key: median_interval(grp["tau_max_us"].to_numpy(float))  # as the summary: valid only
                       for key, grp in valid.groupby(["workload", "pg", "collective"])}
            shown = pd.DataFrame({
                "workload": s["workload"], "pg": s["pg"], "collective": s["collective"], "count": s["count"],
                f"tau median µs [{PCT} CI]": [fmt_ci(*medians.get((w, p, c), (np.nan,) * 3))
                                          for w, p, c in zip(s["workload"], s["pg"], s["collective"], strict=True)],
                "tau p90 µs": s["tau_p90_us"], "tau max µs": s["tau_max_us"],
                "wait share, longest-waiting rank": s["fastest_wait_share"],
                "wait share, median rank": s["median_rank_wait_share"], "invalid": s["n_invalid"]})
            sec.items.append(Table(shown, "Tax per workload, PG and collective type (SPEC §3): tau = max − min NCCL "
                                          "kernel duration over the member ranks, µs, over the valid collectives "
                                          "(count): median with "
                                          f"its distribution-free {PCT} confidence interval (order statistics), 90th "
                                          "percentile, maximum; wait share = (d_r − min d)/d_r, median over the "
                                          "collectives, for the rank that waited longest and for the median rank; "
                                          "invalid: collectives flagged by the alignment checks, left out of every "
                                          "statistic."))
        if len(sub):
            labelled = sub.assign(pg=sub["workload"].astype(str) + " " + sub["pg"].astype(str))
            sec.items.append(ctx.figure(functools.partial(tax_figs.tax_cdfs, labelled), f"tax-cdf-{slug}", f"Empirical CDF of the synchronization tax tau_max (max − min NCCL "
                                        f"kernel duration across the member ranks, log µs) of every aligned collective "
                                        f"on {gpu}, one curve per workload, process group and collective type "
                                        f"(SPEC §3)."))
        if ranks is not None and len(ranks[ranks["gpu"].astype(str) == gpu]):
            fig = functools.partial(tax_figs.wait_shares, ranks[ranks["gpu"].astype(str) == gpu], f"Wait shares on {gpu}")
            sec.items.append(ctx.figure(fig, f"wait-shares-{slug}", f"Distribution over collectives of the wait share (d_r − min d)/d_r: solid "
                                              f"for the rank that waited longest, dashed for the median rank, one "
                                              f"colour per workload on {gpu} (SPEC §3)."))
        sections.append(sec)
        sections.append(Section(f"{gpu}: critical-path attribution", _attribution_items(ctx, att, gpu, slug),
                                level=3, anchor=f"attribution-{slug}"))
        precisions = sorted(z[z["gpu"].astype(str) == gpu]["precision"].astype(str).unique()) if z is not None else []
        if not precisions:
            sections.append(Section(f"{gpu}: z-scores and fits", [Skipped(
                "Skipped — no z-scores for this GPU: " + (ctx.why_not("zscores") if not ctx.done("zscores")
                                                         else "no kept GEMM block in its workloads."))], level=3,
                anchor=f"cell-{slug}"))
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
    cat = cat.rename(columns={"cause_class": "cause class", "count": "collectives",
                              "share_of_gpu_causes": "share of GPU causes"})
    items.append(Table(cat[["workload", "category", "cause class", "collectives", f"share [{PCT} CI]",
                            "share of GPU causes"]],
                       "Principal cause of each straggler (the event with the largest extra time on its critical "
                       "path against the fastest rank's, SPEC §4), by category; paper: GEMM 78%, FlashAttention "
                       "15.4%, FSDP 4.3%, Norm 1.2%, Concat/Split 0.6% of GPU causes."))
    items.append(ctx.figure(functools.partial(tax_figs.attribution_breakdown, sub), f"attribution-{slug}", f"Share of attributed collectives on {gpu} per principal-cause category, one bar per "
                                  f"workload (critical-path walk from each collective back to the previous collective "
                                  f"of its PG, straggler's path compared with the fastest rank's, SPEC §4)."))
    items.append(_path_view(ctx, gpu, slug))
    return items


def _path_view(ctx: _Ctx, gpu: str, slug: str) -> Any:
    """The Fig. 4-style view of the collective with the largest tax among those attributed on
    ``gpu`` (the attribution stage keeps that collective's two paths per workload), or why not."""
    from evtsync.plots.paths import straggler_vs_fastest

    paths = ctx.table("attribution_paths")
    if paths is None:
        return Skipped("No straggler-vs-fastest path view: this run folder has no tables/attribution_paths.parquet "
                       "(its attribution stage was run by an evtsync that did not keep the paths); rerun "
                       "`evtsync run --force` to draw it.")
    on_gpu = paths[paths["gpu"].astype(str) == gpu] if "gpu" in paths.columns else paths.iloc[:0]
    coll = ctx.table("attribution_collectives")
    if on_gpu.empty or coll is None:
        return Skipped(f"No straggler-vs-fastest path view on {gpu}: no attributed collective (status ok) of its "
                       "workloads kept a critical path.")
    keys = on_gpu[["workload", "pg", "index"]].drop_duplicates()
    kept = coll.astype({"pg": str}).merge(keys.astype({"pg": str}), on=["workload", "pg", "index"])
    if kept.empty:
        return Skipped(f"No straggler-vs-fastest path view on {gpu}: the kept paths match no attributed collective.")
    top = kept.sort_values("tau_max_us", ascending=False, kind="stable").iloc[0]
    rows = on_gpu[(on_gpu["workload"] == top["workload"]) & (on_gpu["pg"].astype(str) == str(top["pg"]))
                  & (on_gpu["index"] == top["index"])]
    fig = functools.partial(straggler_vs_fastest, rows, top["pg"], int(top["index"]), kept[kept["workload"] == top["workload"]])
    cause = f"{top.get('cause_name')} ({top.get('cause_category')}, +{fmt(top.get('cause_extra_us'))} µs)"
    return ctx.figure(fig, f"path-{slug}", (
        f"The straggler's critical path (rank {int(top['straggler_rank'])}) against the fastest rank's "
        f"(rank {int(top['fastest_rank'])}) for collective {int(top['index'])} of PG {top['pg']} in workload "
        f"{top['workload']}, the attributed collective with the largest tax on {gpu} (tau_max "
        f"{fmt(top['tau_max_us'])} µs), as in the paper's Fig. 4: GPU and CPU-side events on separate lanes, time "
        f"from each path's first event (both ranks leave the previous collective together, SPEC §4); outlined "
        f"in red: the principal cause, {cause}."))


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
    values = values[np.isfinite(values)]
    if values.size < MIN_Z_FIGURE:
        sec.items.append(Skipped(f"Skipped — {values.size} z-score(s) from {cell['block'].nunique()} block "
                                 f"identit{'y' if cell['block'].nunique() == 1 else 'ies'} (workloads "
                                 f"{', '.join(sorted(cell['workload'].astype(str).unique()))}): fewer than "
                                 f"{MIN_Z_FIGURE}, too few for a histogram, a QQ plot or a fit."))
        return sec
    sec.items.append(f"{len(values)} pooled z-scores from {cell['block'].nunique()} block identities "
                     f"(workloads {', '.join(sorted(cell['workload'].unique()))}); mean coefficient of variation "
                     f"r = {fmt(cell.drop_duplicates('block')['cv'].mean())} (paper: about 0.02).")
    post = _cell_draws(tree, gpu, precision) if tree is not None else None
    label = f"{model}{'' if tree is None or tree.converged else ' (NOT converged)'}"
    posterior_text = (f" and, in green, the posterior mean density of {label} with its {PCT} pointwise band"
                      if post is not None else " (no Bayesian fit covers this cell)")
    fig = functools.partial(fit_figs.gev_cell, values, _mle_dict(mle, gpu, precision, "gev"), _mle_dict(mle, gpu, precision, "gumbel"),
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
            }), "IN-SAMPLE: mean straggler delay (mean − min kernel duration) of the collectives after this cell's "
                "GEMM blocks, measured (t interval of the mean) and predicted as b·E_k from the posterior of a fit "
                "to these very blocks' z-scores (SPEC §7) — agreement shows the fit describes its data, not that "
                "it predicts new data; see the out-of-sample check in \"Predicted vs measured\"."))
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
    if shown.empty:
        items.insert(0, Skipped("Skipped — no fitted model has a free shape xi (the Gumbel models fix it at 0), so "
                                "there is no forest plot of xi."))
        return [Section("Shape parameter xi per GPU and precision", items, anchor="xi")]
    items.insert(0, ctx.figure(functools.partial(fit_figs.xi_forest, shown, population), "xi-forest", f"Posterior mean and central {PCT} credible interval of the GEV shape xi in every GPU × "
                                     "precision cell, for every fitted model with a free shape (pooled models give one "
                                     f"value for all cells; x markers: fit not converged). Grey band: {PCT} interval of the "
                                     "population shape xi0 of the hierarchical model (SPEC §6)."))
    items.append(Table(pd.DataFrame({
        "model": shown["model"], "GPU": shown["gpu"], "precision": shown["precision"],
        f"xi [{PCT} CrI]": [fmt_ci(a, b, c) for a, b, c in zip(shown["xi_mean"], shown["xi_lo"], shown["xi_hi"], strict=True)],
        "not converged": ~shown["converged"].astype(bool)}), "Posterior of xi per cell (rows in red: fit not converged).",
        flag="not converged"))
    z = ctx.table("zscores")
    if z is not None and len(z) and {"gpu", "precision", "z"} <= set(z.columns):
        from evtsync.plots.zscores import zscores_by_cell

        items.append(ctx.figure(functools.partial(zscores_by_cell, z), "zscores-by-cell", "Pooled z-scores of the block maxima per GPU × "
                                "precision (the paper's Fig. 10): the data every shape above is fitted to."))
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
    items: list[Any] = [ctx.figure(functools.partial(pred_figs.tau_curves, tau, models), "tau-n", f"Predicted mean straggler delay tau(n) = b·E_k, k = n/m, for domains of n = m "
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
        b_items: list[Any] = [ctx.figure(functools.partial(pred_figs.bstar_curves, bstar), "bstar-n", f"Optimal bandwidth B* at elasticity eps = {fmt(summary.get('eps'))} of "
                                               f"the augmented Hockney model T(B) = p·alpha + q·S/B + tau (SPEC §8) "
                                               f"against n, per topology, with tau(n) from {main} (posterior mean, {PCT} "
                                               f"band per GPU × precision) beside Hockney's B*_H (tau = 0, dashed). "
                                               f"alpha = {fmt(summary.get('alpha_us'))} µs, S = "
                                               f"{fmt(summary.get('bytes'))} bytes ({summary.get('bytes_source', '')}).")]
        b_items += _bstar_tables(bstar[bstar["n"].isin(TABLE_NS)])
        sections.append(Section("Optimal bandwidth B* against n", b_items, anchor="bstar"))
    return sections


def _whatif_section(ctx: _Ctx) -> list[Section]:
    """What will hardware without traces pay? tau(n) of the named presets (reference.PRESETS),
    drawn from the main fit's population when the GPU is not in the fit (SPEC §7)."""
    from evtsync.errors import EvtsyncError
    from evtsync.evt.predict import tau_table
    from evtsync.reference import PRESETS, REFERENCE_TFLOPS

    title = "What if: hardware without traces"
    tau = ctx.table("tau")
    if tau is None or tau.empty or "b_us" not in tau.columns:
        return [Section(title, [ctx.why_not("prediction")], anchor="whatif")]
    fit, name = ctx.main_fit()
    if fit is None:
        return [Section(title, [Skipped("Skipped — no main Bayesian fit in this run.")], anchor="whatif")]
    ref = tau[(tau["model"] == name) & (tau.get("gpu", "") == "H200") & (tau.get("precision", "") == "bf16")]
    b_source = "the H200 bf16 cell's b (the paper's reference GPU)"
    if ref.empty:
        ref, b_source = tau[tau["model"] == name], "the median b over the fitted cells (no H200 bf16 cell)"
    b_ref = float(np.median(ref["b_us"]))
    m = int(round(float((tau["n"] / tau["k"]).median()))) if "k" in tau.columns else 4
    rows, notes = [], []
    for preset, spec in PRESETS.items():
        factor = float(spec["tflops"]) / REFERENCE_TFLOPS
        n = int(spec["n"])
        if n % m:
            notes.append(f"{preset}: n = {n} is not a multiple of m = {m}")
            continue
        try:
            t = tau_table(fit, [n], b_ref / factor, m, LEVEL, gpu=str(spec["gpu"]), precision="bf16")
        except EvtsyncError as exc:
            return [Section(title, [Skipped(f"Skipped — {exc}")], anchor="whatif")]
        for r in t.itertuples():
            rows.append({"preset": preset, "GPU": spec["gpu"], "n": n, "FLOPS factor": round(factor, 3),
                         "prediction": getattr(r, "prediction_kind", "cell"),
                         f"tau(n) µs [{PCT} CrI]": fmt_ci(r.tau_mean_us, r.tau_lo_us, r.tau_hi_us),
                         "NVLink GB/s": spec["nvlink_gbps"], "TFLOPS": spec["tflops"],
                         "TFLOPS from": spec.get("tflops_source", ""), "source": spec["source"]})
    items: list[Any] = [Table(pd.DataFrame(rows), (
        f"tau(n) of bf16 domains that have no traces, from {name}: a GPU absent from the fit is drawn from the "
        f"hierarchy's population (a new GPU deviation and cell term per posterior draw: 'population', wider "
        f"intervals); b = {b_source}, {fmt(b_ref)} µs, divided by the preset's FLOPS over the H200's "
        f"{REFERENCE_TFLOPS:g} TFLOPS (SPEC §8). n and NVLink GB/s are the paper's Table 1; its Table 1 lists no "
        f"TFLOPS: 'TFLOPS from' says whether a value is the paper's (H200) or an NVIDIA datasheet's (named in "
        f"'source'). Presets: evtsync.reference.PRESETS; any other with "
        f"`evtsync predict FIT --gpu G --precision P --n N --flops-factor F`."))]
    if not fit.converged:
        items.insert(0, f"WARNING: {name} did not converge; these predictions inherit it.")
    items += [f"Not predicted: {note}." for note in notes]
    return [Section(title, items, anchor="whatif")]


#: FLOPS factors (relative to the H200's 989 TFLOPS) and domain sizes of the report's Fig. 13.
FLOPS_SWEEP = (1.0, 2.0, 4.0, 8.0, 16.0)
FLOPS_NS = (256, 4096)


def _flops_section(ctx: _Ctx) -> list[Section]:
    """B* as FLOPS grow (the paper's Fig. 13) for the main fit's reference cell at n = 256 and
    4096, with the bandwidth-scaling requirement against the roofline (docs/what-if.md)."""
    from evtsync.errors import EvtsyncError
    from evtsync.evt.predict import bandwidth_table, flops_scaling_table
    from evtsync.hockney import TOPOLOGIES
    from evtsync.plots.whatif import bstar_vs_flops
    from evtsync.reference import REFERENCE_TFLOPS, nvlink_reference_lines

    title = "Optimal bandwidth as FLOPS grow"
    tau = ctx.table("tau")
    summary = ctx.stage("prediction").get("summary", {})
    if tau is None or tau.empty or "b_us" not in tau.columns or not summary:
        return [Section(title, [ctx.why_not("prediction")], anchor="flops")]
    fit, name = ctx.main_fit()
    if fit is None:
        return [Section(title, [Skipped("Skipped — no main Bayesian fit in this run.")], anchor="flops")]
    m = int(ctx.manifest.get("options", {}).get("m", 4) or 4)
    if any(n % m for n in FLOPS_NS):
        return [Section(title, [Skipped(f"Skipped — n = {', '.join(map(str, FLOPS_NS))} (the paper's Fig. 13) are not "
                                        f"multiples of this run's m = {m}.")], anchor="flops")]
    rows = tau[tau["model"] == name]
    ref = rows[(rows.get("gpu", "") == "H200") & (rows.get("precision", "") == "bf16")]
    which = "the H200 bf16 cell (the paper's reference GPU)"
    if ref.empty:
        ref = rows.sort_values([c for c in ("gpu", "precision") if c in rows.columns]).head(1)
        which = "the first fitted cell (no H200 bf16 cell in this run)"
    r0 = ref.iloc[0]
    gpu, precision = (str(r0["gpu"]), str(r0["precision"])) if "gpu" in ref.columns else (None, None)
    b_ref, alpha, size, eps = float(r0["b_us"]), float(summary["alpha_us"]), float(summary["bytes"]), float(summary["eps"])
    bstar = ctx.table("bstar")  # the run's own topologies, in its order
    topologies = list(dict.fromkeys(bstar["topology"])) if bstar is not None and len(bstar) else list(TOPOLOGIES)
    args = (fit, topologies, list(FLOPS_NS), alpha, size, b_ref)
    try:
        table = bandwidth_table(*args, eps, m, LEVEL, list(FLOPS_SWEEP), gpu=gpu, precision=precision)
        scaling = flops_scaling_table(*args, list(FLOPS_SWEEP), eps, m, LEVEL, gpu=gpu, precision=precision)
    except EvtsyncError as exc:
        return [Section(title, [Skipped(f"Skipped — {exc}")], anchor="flops")]
    cell = str(table["cell"].iloc[0]) if len(table) else "?"
    items: list[Any] = []
    if not fit.converged:
        items.append(Alert(f"{name} did not converge; this figure inherits it.", level="warning"))
    items.append(ctx.figure(functools.partial(bstar_vs_flops, table, nvlink=nvlink_reference_lines()), "bstar-flops", (
        f"Optimal bandwidth B* as peak FLOPS grow {FLOPS_SWEEP[0]:g}–{FLOPS_SWEEP[-1]:g}x over the H200's "
        f"{REFERENCE_TFLOPS:g} TFLOPS, for n = 256 and 4096 (the paper's Figure 13), at eps = {fmt(eps)}: the block's b "
        f"is divided by the factor, and tau(n) with it (SPEC §8). Tax from {name}'s posterior for {which}, {cell}, b = {fmt(b_ref)} "
        f"µs; alpha = {fmt(alpha)} µs, S = {fmt(size)} bytes ({summary.get('bytes_source', '')}). Solid with "
        f"{PCT} band: with the tax; dashed: Hockney's B*_H (no compute term, flat); dotted: the roofline "
        "(B*_H grown with the FLOPS); horizontal lines: Table 1's NVLink generations.")))
    shown = pd.DataFrame({
        "topology": scaling["topology"], "n": scaling["n"],
        f"B* growth x{scaling['roofline_growth'].iloc[0]:g} FLOPS [{PCT} CrI]": [
            fmt_ci(a, b, c) for a, b, c in zip(scaling["growth_median"], scaling["growth_lo"], scaling["growth_hi"], strict=True)],
        f"below the roofline, % [{PCT} CrI]": [
            fmt_ci(100 * a, 100 * b, 100 * c) for a, b, c in zip(scaling["scaling_reduction_median"],
                                                                 scaling["scaling_reduction_lo"],
                                                                 scaling["scaling_reduction_hi"], strict=True)],
        "not converged": not fit.converged})
    items.append(Table(shown, (
        f"Bandwidth-scaling requirement over the sweep: growth = B*(x{FLOPS_SWEEP[-1]:g}) / B*(x{FLOPS_SWEEP[0]:g}) draw "
        f"by draw (posterior median [{PCT} credible interval]); the roofline grows as the FLOPS, Hockney's B*_H not at "
        "all; 'below the roofline' = 1 − growth / FLOPS growth (the paper's \"11.7% lower bandwidth scaling "
        "requirement\" is this quantity for its unstated FLOPS range: docs/what-if.md)."), flag="not converged"))
    return [Section(title, items, anchor="flops")]


def _ratio_line(table: pd.DataFrame) -> str:
    ratio = table["measured_mean_us"] / table["predicted_mean_us"]
    inside = int(table["inside_interval"].astype(bool).sum()) if "inside_interval" in table else None
    text = (f"Measured / predicted: median {fmt(float(ratio.median()))}, range {fmt(float(ratio.min()))} – "
            f"{fmt(float(ratio.max()))} over {len(table)} workload group(s)")
    if inside is not None:
        text += f"; measured mean inside the predicted {PCT} interval in {inside} of {len(table)}"
    return text + "."


def bstar_pivot(bstar: pd.DataFrame, value: str) -> pd.DataFrame:
    """The B* table pivoted: one row per topology × GPU × precision, one column per n.

    ``value`` is ``"bstar"`` (GB/s) or ``"reduction"`` (1 − B*/B*_H, in %): each cell is the
    posterior mean with its interval; a row of a non-converged fit has ``not converged`` True.
    """
    unit, scale = ("_gbps", 1.0) if value == "bstar" else ("", 100.0)
    text = [fmt_ci(scale * a, scale * b, scale * c) for a, b, c in
            zip(bstar[f"{value}_mean{unit}"], bstar[f"{value}_lo{unit}"], bstar[f"{value}_hi{unit}"], strict=True)]
    keys = ["topology", "gpu", "precision"]
    wide = bstar.assign(_text=text).pivot_table(index=keys, columns="n", values="_text", aggfunc="first", sort=False)
    wide.columns = [f"n = {c}" for c in wide.columns]
    conv = bstar.groupby(keys, sort=False)["converged"].agg(lambda v: bool(np.all(v.astype(bool))))
    wide["not converged"] = ~conv.reindex(wide.index).to_numpy(bool)
    return wide.reset_index().rename(columns={"gpu": "GPU"})


def _bstar_tables(bt: pd.DataFrame) -> list[Table]:
    hockney = bt.drop_duplicates(["topology", "n"]).pivot_table(index="topology", columns="n",
                                                                values="bstar_hockney_gbps", sort=False)
    hockney.columns = [f"n = {c}" for c in hockney.columns]
    return [
        Table(bstar_pivot(bt, "reduction"), f"Reduction 1 − B*/B*_H in % [{PCT} CrI] per topology, GPU × precision "
              "and domain size n (paper, Llama-3 70B on DGX H200 with the Gumbel bound: 98.69% on the fully "
              "connected topology at n = 128, 37.26% on the ring at n = 128, 81.67% on the 3D torus at n = 512). "
              "Rows in red: fit not converged.", flag="not converged"),
        Table(bstar_pivot(bt, "bstar"), f"Optimal bandwidth B* in GB/s [{PCT} CrI] at the same n. Rows in red: fit "
              "not converged.", flag="not converged"),
        Table(hockney.reset_index(), "Hockney's B*_H in GB/s (tau = 0; the same for every GPU × precision).")]


def _pvm_section(ctx: _Ctx) -> list[Section]:
    pvm = ctx.table("predicted_vs_measured")
    title = "Predicted vs measured straggler delay"
    if pvm is None or pvm.empty:
        return [Section(title, [ctx.why_not("predicted-vs-measured")], anchor="pvm")]
    selection = ctx.stage("predicted-vs-measured").get("summary", {}).get("selection", "")
    m = ctx.manifest.get("options", {}).get("m", 4)
    ns = sorted({int(n) for n in pvm["n"]})
    pvm_fig = functools.partial(pred_figs.predicted_vs_measured, pvm)
    items: list[Any] = [
        Alert(f"In-sample: the fit was made on the z-scores of the very blocks whose following collectives are "
              f"measured here (group sizes n = {', '.join(map(str, ns))}; m = {m}"
              + (", so k = n/m = 1: no extrapolation in the domain size either" if ns == [m] else "")
              + "). Agreement shows that the model describes its own data; it is not a test of prediction.",
              level="warning"),
        ctx.figure(pvm_fig, "predicted-vs-measured", f"In-sample. Measured mean straggler delay (mean − min NCCL "
                   f"kernel duration over the ranks, averaged over {selection}; error bars: {PCT} t interval of the "
                   f"mean) against the prediction b·E_k with k = n/m from the posterior of {pvm['model'].iloc[0]} "
                   f"and b the pooled sd of the preceding blocks (error bars: {PCT} credible interval), per workload "
                   "(SPEC §7)."),
        "In-sample. " + _ratio_line(pvm)]
    sections = [Section(f"{title} (in-sample)", items, anchor="pvm")]
    hold = ctx.table("predicted_vs_measured_holdout")
    summary = ctx.stage("predicted-vs-measured").get("summary", {})
    if hold is not None and len(hold):
        split = summary.get("holdout", {})
        shown = pd.DataFrame({
            "workload": hold["workload"], "GPU": hold["gpu"], "precision": hold["precision"], "n": hold["n"],
            "later block–collective pairs": hold["n_collectives"],
            f"measured µs [{PCT} CI]": [fmt_ci(a, b, c) for a, b, c in zip(hold["measured_mean_us"], hold["measured_lo_us"], hold["measured_hi_us"], strict=True)],
            f"predicted µs [{PCT} CI]": [fmt_ci(a, b, c) for a, b, c in zip(hold["predicted_mean_us"], hold["predicted_lo_us"], hold["predicted_hi_us"], strict=True)],
            "inside interval": hold["inside_interval"].astype(bool)})
        sections.append(Section("Out-of-sample check: later collectives from earlier ones", [
            f"{split.get('description', 'A fit to the earlier collectives predicts the later ones.')} "
            + _ratio_line(hold),
            Table(shown, f"Out-of-sample: predicted ({hold['model'].iloc[0]}, approximate {PCT} interval from the "
                         f"normal approximation of the MLE) against measured ({PCT} t interval of the mean) mean "
                         "straggler delay of the later collectives, which the fit never saw.")],
            level=3, anchor="pvm-holdout"))
    else:
        reason = summary.get("holdout_reason") or ("this run folder has no out-of-sample table "
                                                  "(tables/predicted_vs_measured_holdout.parquet)")
        sections.append(Section("Out-of-sample check", [Skipped(f"Skipped — {reason}.")], level=3,
                                anchor="pvm-holdout"))
    return sections


def _read_truths(ctx: _Ctx) -> dict[str, dict[str, Any]]:
    """Workload -> the demo study's ``ground_truth.json`` (only those the demo stage wrote)."""
    import orjson

    from evtsync.synth.truth import TRUTH_FILE

    out = {}
    for rel in ctx.stage("demo").get("outputs", {}):
        if Path(rel).name == TRUTH_FILE:
            path = ctx.run_dir / rel
            if path.is_file():
                truth = orjson.loads(path.read_bytes())
                out[str(truth.get("workload", path.parent.name))] = truth
    return out


def truth_tables(truths: dict[str, dict[str, Any]], xi: pd.DataFrame | None, mle: pd.DataFrame | None,
                 attribution: pd.DataFrame | None, model: str | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The estimates beside the demo's truth: per GPU × precision the planted GEV shape xi against
    the main model's and the MLE's interval (does it cover the truth?); per workload the
    attribution against the truth's straggler ranks and planted causes."""
    rows, att_rows = [], []
    for workload, t in sorted(truths.items()):
        gpu, precision = str(t["gpu"]), str(t["precision"])
        g = t["gev"]
        row: dict[str, Any] = {"workload": workload, "GPU": gpu, "precision": precision, "true xi": float(g["xi"]),
                               "true mu": float(g["mu"]), "true sigma": float(g["sigma"])}
        if xi is not None and model is not None and len(xi):
            x = xi[(xi["model"] == model) & (xi["gpu"].astype(str) == gpu) & (xi["precision"].astype(str) == precision)]
            if len(x):
                r = x.iloc[0]
                row[f"{model} xi [{PCT} CrI]"] = fmt_ci(r["xi_mean"], r["xi_lo"], r["xi_hi"])
                row["CrI covers truth"] = bool(r["xi_lo"] <= g["xi"] <= r["xi_hi"])
                row["not converged"] = not bool(r["converged"])
        if mle is not None and "xi" in mle:
            m = mle[(mle["family"] == "gev") & (mle["gpu"].astype(str) == gpu) & (mle["precision"].astype(str) == precision)]
            if len(m):
                r = m.iloc[0]
                row[f"MLE xi [{PCT} profile CI]"] = fmt_ci(r["xi"], r["xi_lo"], r["xi_hi"])
                row["CI covers truth"] = bool(r["xi_lo"] <= g["xi"] <= r["xi_hi"])
        rows.append(row)
        coll = t.get("collectives", [])
        tp = [c for c in coll if c.get("group_kind", "tp") == "tp"]
        planted = [c for c in tp if c.get("planted_cause")]
        noisy = [c for c in tp if any(n.get("rank") == c.get("straggler_rank") for n in c.get("cpu_noise", []))]
        arow: dict[str, Any] = {"workload": workload, "TP collectives (truth)": len(tp),
                                "planted causes (truth)": len(planted),
                                "CPU delay idled the straggler's GPU (truth)": len(noisy)}
        if attribution is not None and len(attribution):
            a = attribution[attribution["workload"].astype(str) == workload]
            ok = a[a["status"] == "ok"]
            key = {(str(c["pg"]), int(c["index"])): c for c in tp if not c.get("straggler_tie")}
            hits = [(int(r.straggler_rank) == int(key[(str(r.pg), int(r.index))]["straggler_rank"]))
                    for r in ok.itertuples() if (str(r.pg), int(r.index)) in key]
            arow["attributed"] = len(ok)
            arow["straggler rank = truth"] = f"{sum(hits)} of {len(hits)}"
            arow["GPU-only paths"] = int((ok["path_kind"] == "gpu_only").sum())
            arow["non-GPU paths"] = int((ok["path_kind"] != "gpu_only").sum())
            found = 0
            for c in planted:
                hit = ok[(ok["pg"].astype(str) == str(c["pg"])) & (ok["index"].astype(int) == int(c["index"]))]
                kind = c["planted_cause"].get("kind")
                if len(hit) and ((kind == "slow_gemm") == (hit["path_kind"].iloc[0] == "gpu_only")):
                    found += 1
            arow["planted causes found"] = f"{found} of {len(planted)}" if planted else "– (none planted)"
        att_rows.append(arow)
    return pd.DataFrame(rows), pd.DataFrame(att_rows)


def _truth_section(ctx: _Ctx) -> list[Section]:
    if not ctx.manifest.get("demo"):
        return []
    title = "Estimates vs ground truth (demo)"
    truths = _read_truths(ctx)
    if not truths:
        return [Section(title, [Skipped("Skipped — the demo's ground_truth.json files are not in the run folder "
                                        "(" + ctx.why_not("demo") + ")")], anchor="truth")]
    from evtsync.pipeline.layout import main_model

    model = main_model(ctx.run_dir, ctx.manifest)
    xi_rows, att_rows = truth_tables(truths, ctx.table("xi"), ctx.table("mle"), ctx.table("attribution_collectives"),
                                     model)
    items: list[Any] = [
        "The demo's traces were generated with known GEV parameters per GPU × precision and known stragglers "
        "(inputs/demo/<workload>/ground_truth.json, docs/synth.md); here the estimates stand beside them.",
        Table(xi_rows, f"Planted GEV parameters of the z-scores against the estimated shape xi: the main model "
                       f"{model or '(none)'} ({PCT} credible interval) and the GEV MLE ({PCT} profile-likelihood "
                       "interval); \"covers truth\" says whether the interval contains the planted xi (at the "
                       f"{PCT} level about one cell in ten may miss by chance). Rows in red: fit not converged.",
              flag="not converged" if "not converged" in xi_rows else None),
        Table(att_rows, "Critical-path attribution against the truth: the straggler rank it found against the "
                        "generator's (ties left out); the planted causes (none in the bundled demo) and the "
                        "collectives whose straggler lost GPU time to a random CPU delay, beside the attribution's "
                        "GPU-only and non-GPU paths.")]
    return [Section(title, items, anchor="truth")]


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


def run_sections(run_dir: Path, out: Path, manifest: dict[str, Any],
                 load_fit: Callable[[Path], Any] | None = None, svg: bool = False,
                 workers: int | None = None) -> tuple[list[Section], list[Path]]:
    """The document of a run folder, and the figure files written for it (``load_fit``: how to
    read a fit's tree, :func:`evtsync.evt.bayesfit.load_fit` by default; ``svg``: each figure as
    SVG too; ``workers``: processes drawing the figures, see :meth:`_Ctx.draw_figures`)."""
    ctx = _Ctx(run_dir, out, manifest, load_fit, svg)
    if ctx.figure_workers(workers) > 1:
        from evtsync.parallel import start_fork_server

        start_fork_server(PLOT_MODULES)  # it imports matplotlib while the text is built here
    sections: list[Section] = []
    for builder in (_summary_section, _inputs, _gpu_sections, _xi_section, _compare_section, _prediction_sections, _flops_section,
                    _whatif_section,
                    _pvm_section, _truth_section, _convergence_section, _stages_section, _files_section):
        sections += builder(ctx)
    ctx.draw_figures(workers)
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


def fit_sections(fit_file: Path, out: Path, svg: bool = False,
                 workers: int | None = None) -> tuple[list[Section], list[Path]]:
    """The document of one Bayesian fit: convergence, parameters, xi per cell, fit per cell."""
    from evtsync.evt.bayesfit import cell_parameters, is_converged, load_fit, parameter_summary

    tree = load_fit(fit_file)
    ctx = _Ctx(fit_file.parent, out, {}, svg=svg)
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
        fig = functools.partial(fit_figs.gev_cell, z, mle_gev, mle_gumbel, draws, name, cell)
        sections.append(Section(f"Cell {cell}", [
            f"mu {fmt_ci(*q['mu'])}, sigma {fmt_ci(*q['sigma'])}, xi {fmt_ci(*q['xi'])} (posterior mean [{PCT} CrI]).",
            ctx.figure(fig, f"gev-{_slug(cell)}", f"Left: histogram of the {z.size} z-scores of cell {cell} with the posterior mean GEV "
                             f"density of {name} and its {PCT} pointwise band, and the GEV and Gumbel "
                             f"maximum-likelihood densities. Right: QQ plot of the ordered z-scores against the MLE "
                             f"model quantiles at i/(n+1) (SPEC §6).")], level=3))
    xi = pd.DataFrame(rows)
    if xi["xi_hi"].max() != 0 or xi["xi_lo"].min() != 0:
        sections.insert(1, Section("Shape parameter xi per cell", [ctx.figure(
            functools.partial(fit_figs.xi_forest, xi, None), "xi-forest", f"Posterior mean and {PCT} credible interval of xi in every cell of the fit.")], anchor="xi"))
    ctx.draw_figures(workers)
    return sections, ctx.written


# --------------------------------------------------------------------------- entry point

def timestamp_text(stamp: Any) -> str:
    """An ISO timestamp of the manifest to the second, in UTC (``2026-12-01 09:35:28 UTC``)."""
    from datetime import UTC, datetime

    if not stamp:
        return "?"
    try:
        when = datetime.fromisoformat(str(stamp))
    except ValueError:
        return str(stamp)
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
        return when.strftime("%Y-%m-%d %H:%M:%S UTC")
    return when.strftime("%Y-%m-%d %H:%M:%S")


def build_report(source: str | os.PathLike[str], out: str | os.PathLike[str] | None = None,
                 load_fit: Callable[[Path], Any] | None = None, svg: bool = False,
                 workers: int | None = None) -> list[Path]:
    """Write ``report.html``, ``report.md`` and ``figures/`` (PNG; with ``svg`` each figure as SVG
    too) for a run folder or a fit; returns every file written (figures first). ``load_fit`` reads
    a run's fit trees (the pipeline passes its own, so that a fit the stages read is not read
    again); default :func:`evtsync.evt.bayesfit.load_fit`. ``workers``: processes that draw the
    figures (default one per core; 1 draws them in this process)."""
    from evtsync.evt.bayesfit import FIT_FILE
    from evtsync.pipeline.layout import MANIFEST, read_verified_manifest

    src = Path(source)
    if (src / MANIFEST).is_file():
        manifest = read_verified_manifest(src)  # tables and fits as the run wrote them, or refused
        dest = Path(out) if out else src
        sections, written = run_sections(src, dest, manifest, load_fit, svg, workers)
        name = src.resolve().name
        title = f"evtsync report: {name}"
        subtitle = (f"Run folder {src}; evtsync {manifest.get('evtsync_version', '?')}; last updated "
                    f"{timestamp_text(manifest.get('updated'))}. Intervals are central {PCT} intervals. Tables and "
                    f"figures ({'PNG and SVG' if svg else 'PNG'}) lie beside this file.")
    else:
        fit_file = src / FIT_FILE if src.is_dir() else src
        if not fit_file.is_file():
            raise InputError(f"{src}: neither a run folder ({MANIFEST}) nor a fit ({FIT_FILE} or a .nc file)")
        dest = Path(out) if out else (src if src.is_dir() else src.parent)
        sections, written = fit_sections(fit_file, dest, svg, workers)
        title = f"evtsync report: fit {fit_file.stem if fit_file.name != FIT_FILE else src.name}"
        subtitle = f"Fit file {fit_file}. Intervals are central {PCT} credible intervals."
    dest.mkdir(parents=True, exist_ok=True)
    html_path = write_text_atomic(dest / REPORT_HTML, render_html(title, subtitle, sections))
    md_path = write_text_atomic(dest / REPORT_MD, render_markdown(title, sections, dest))
    log.info("report written: %s (%d figures)", html_path, sum(p.suffix == ".png" for p in written))
    return [*written, html_path, md_path]

