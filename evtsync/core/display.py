"""Readable ``repr``, notebook HTML and numbers for reading.

A :class:`TraceSet`, :class:`TaxTables`, :class:`Alignment`, :class:`AttributionResult` or
:class:`BlockSet` printed in a terminal or shown in a notebook lists its tables (rows ×
columns) and its scalar fields, instead of pandas' repr of every table in full. A fit
(:func:`fit_html`), a model specification (:func:`spec_html`) and a run (:func:`run_html`)
show what a person wants to see first: cells, ξ with its interval, convergence. :func:`fmt`
and :func:`fmt_ci` are the one number format of the reports and these views.
"""

from __future__ import annotations

import dataclasses
import html
import math
from typing import Any

import numpy as np

from evtsync.core.defaults import INTERVAL_LEVEL


def _fields(obj: Any) -> list[tuple[str, Any]]:
    """The fields to show: an optional one left at its default None says nothing and is left out."""
    return [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)
            if not (f.default is None and getattr(obj, f.name) is None)]


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) == 2:
        return f"{shape[0]:,} rows × {shape[1]} columns"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, set | frozenset | tuple | list):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else list(value)
        text = ", ".join(map(str, items[:8]))
        return f"{len(items)} item(s)" + (f": {text}" if items else "") + ("…" if len(items) > 8 else "")
    return str(value)


class TablesDisplay:
    """Mixin for dataclasses of tables: a short ``repr`` and a notebook table (``_repr_html_``).

    The dataclass must be declared with ``repr=False`` so that this ``__repr__`` is used.
    """

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={_describe(value)}" for name, value in _fields(self))
        return f"<{type(self).__name__} {inner}>"

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td><code>{html.escape(name)}</code></td><td>{html.escape(_describe(value))}</td></tr>"
                       for name, value in _fields(self))
        doc = (type(self).__doc__ or "").strip().splitlines()[0] if type(self).__doc__ else ""
        return (f"<div><b>{html.escape(type(self).__name__)}</b> — {html.escape(doc)}"
                f"<table>{rows}</table></div>")


#: Most significant digits :func:`fmt_ci` uses to tell a value from its interval's ends.
MAX_DIGITS = 6
#: An interval end within this fraction of the largest of (value, ends) is 0 up to rounding.
NUMERICAL_ZERO = 1e-9


def fmt(value: Any, digits: int = 3) -> str:
    """A number for reading: ``digits`` significant digits and never exponent notation — values of
    ``digits`` or more integer digits whole (from five digits with thousands separators,
    ``32,480``), small ones as decimals (``0.000123``; below about 1e-10 at most 12 decimals, so
    3.47e-16 reads 0); booleans as yes/no; NaN as an en dash,
    infinities as ∞; other values as text."""
    if value is None:
        return "–"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, np.floating):
        value = float(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–" if math.isnan(value) else ("∞" if value > 0 else "-∞")
        if value == 0:
            return "0"
        magnitude = math.floor(math.log10(abs(value)))
        decimals = digits - 1 - magnitude
        if decimals <= 0:                       # at least as many digits as asked for: the whole number
            return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:.0f}"
        if decimals > 12:                       # below ~1e-10: 12 decimals, never e-notation (issue 46)
            text = f"{value:.12f}".rstrip("0").rstrip(".")
            return "0" if text in ("0", "-0", "") else text
        text = f"{value:.{decimals}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    return str(value)


def fmt_ci(mean: Any, lo: Any, hi: Any, digits: int = 3) -> str:
    """``mean [lo, hi]``: a number with its interval, with as many significant digits (``digits``
    up to :data:`MAX_DIGITS`) as it takes for values that differ to read differently (a mean of
    99.96 with an upper end of 99.99 is not "100 [.., 100]")."""
    values = [mean, lo, hi]
    # an end that is 0 up to rounding (a Wilson bound of 3.47e-16 beside 40.3) prints as 0 (issue 46)
    scale = max((abs(float(v)) for v in values if isinstance(v, int | float | np.integer | np.floating)
                 and math.isfinite(float(v))), default=0.0)
    values = [0.0 if isinstance(v, float | np.floating) and math.isfinite(float(v)) and v != 0
              and abs(float(v)) <= NUMERICAL_ZERO * scale else v for v in values]
    for d in range(digits, MAX_DIGITS + 1):
        texts = [fmt(v, d) for v in values]
        numbers = [float(v) if isinstance(v, int | float | np.integer | np.floating) else None for v in values]
        clash = any(texts[i] == texts[j] and (a := numbers[i]) is not None and (b := numbers[j]) is not None
                    and math.isfinite(a)
                    and not math.isclose(a, b, rel_tol=1e-9)
                    for i in range(3) for j in range(i + 1, 3))
        if not clash:
            break
    return f"{texts[0]} [{texts[1]}, {texts[2]}]"


def fmt_interval(mean: Any, lo: Any, hi: Any, kind: Any = None, digits: int = 3) -> str:
    """:func:`fmt_ci`, followed by what the interval is where it is not an interval at the report's
    level: ``kind`` "range of 3" (too few points for the level) is shown, a level ("90%") is not;
    an end at ±∞ (no distribution-free bound exists at the level) reads as ∞ already."""
    text = fmt_ci(mean, lo, hi, digits)
    kind = "" if kind is None or (isinstance(kind, float) and math.isnan(kind)) else str(kind)
    return f"{text} ({kind})" if kind and not kind.endswith("%") else text


def fmt_share(value: Any, digits: int = 3) -> str:
    """A proportion as a percentage (0.3125 -> "31.3%"); NaN as an en dash."""
    if value is None or (isinstance(value, float | np.floating) and not math.isfinite(float(value))):
        return "–"
    return f"{fmt(100.0 * float(value), digits)}%"


_VIEW_CSS = ("<style>.evtsync-view table{border-collapse:collapse;font-size:.9em}.evtsync-view th,.evtsync-view td"
             "{border:1px solid #d0d0d0;padding:.15em .5em;text-align:right}.evtsync-view td:first-child,"
             ".evtsync-view th:first-child{text-align:left}.evtsync-view .bad{color:#b71c1c;font-weight:700}"
             ".evtsync-view .ok{color:#1b5e20}</style>")


def _html_table(header: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt(v) if not isinstance(v, str) else v)}</td>" for v in row)
                   + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _verdict_html(converged: bool, note: str) -> str:
    if converged:
        return '<span class="ok">converged</span>'
    return f'<span class="bad">NOT CONVERGED</span> {html.escape(note)}'


def fit_html(fit: Any, xi: list[tuple[float, float, float]] | None = None, interval: str = "",
             level: float = INTERVAL_LEVEL) -> str:
    """A fit in a notebook (any :class:`~evtsync.evt.bayesfit.CellFit`): its name, family and
    kind, the convergence verdict, and one row per cell with its group values, z-scores and ξ
    with its central ``level`` interval — ``xi`` (mean, lo, hi) per cell where the fit has its
    own interval (``interval`` names it), else from the fit's draws."""
    cells = fit.cells
    if xi is None:
        draws = fit.cell_draws()[2]
        lo, hi = np.nanquantile(draws, [(1 - level) / 2, (1 + level) / 2], axis=0)
        xi = list(zip(np.nanmean(draws, axis=0), lo, hi, strict=True))
        interval = interval or f"{level:.0%} {'credible' if fit.kind == 'bayes' else 'normal-approximation'} interval"
    groups = [c for c in cells.columns if c not in ("cell", "n_obs")]
    header = [*(groups or ["cell"]), "z-scores", f"ξ [{interval}]"]
    rows = [[*(str(r[g]) for g in groups or ["cell"]), r["n_obs"], fmt_ci(*x, digits=2)]
            for r, x in zip(cells.to_dict(orient="records"), xi, strict=True)]
    title = f"{type(fit).__name__} <b>{html.escape(fit.name)}</b> ({html.escape(fit.family)}, {html.escape(fit.kind)})"
    return (f'{_VIEW_CSS}<div class="evtsync-view">{title}: {len(cells)} cell(s), '
            f"{_verdict_html(bool(fit.converged), fit.convergence_note)}{_html_table(header, rows)}</div>")


def spec_html(spec: Any, xi_row: str) -> str:
    """A model specification in a notebook: name, family, data, and each parameter's structure and
    prior; ``xi_row`` is the shape's line, which the spec writes from its family's entry
    (:mod:`evtsync.evt.families`)."""
    def prior(p: Any) -> str:
        return p.describe() if p is not None else "–"

    rows = [["data", f"column {spec.column}, groups {', '.join(spec.groups) or '(none)'}, scale {spec.scale}"],
            ["mu", f"{spec.mu.pooling}; prior {prior(spec.mu.prior)}"
             + (f"; spread {prior(spec.mu.population_sd_prior)}" if spec.mu.population_sd_prior else "")],
            ["sigma", f"{spec.sigma.pooling}; prior {prior(spec.sigma.prior)}"
             + (f"; spread {prior(spec.sigma.population_sd_prior)}" if spec.sigma.population_sd_prior else "")]]
    rows.append(["xi", xi_row])
    if spec.sampling:
        rows.append(["sampling", ", ".join(f"{k} {v}" for k, v in spec.sampling.items())])
    title = f"ModelSpec <b>{html.escape(spec.name)}</b> ({html.escape(spec.family)}) from {html.escape(str(spec.path))}"
    desc = f"<br><i>{html.escape(spec.description)}</i>" if spec.description else ""
    return f'{_VIEW_CSS}<div class="evtsync-view">{title}{desc}{_html_table(["part", "specification"], rows)}</div>'


#: The answer table's columns a run's notebook view shows: summary.json's value, interval ends, heading.
RUN_VIEW_COLUMNS = (("tax_median_us", "tax_median_lo_us", "tax_median_hi_us", "tax median µs"),
                    ("gpu_only_share", "gpu_only_share_lo", "gpu_only_share_hi", "GPU-only share"),
                    ("xi_mean", "xi_lo", "xi_hi", "ξ"), ("verdict", None, None, "tail"),
                    ("tau_point_us", "tau_lo_us", "tau_hi_us", "τ(n) µs"))


def point_key(table: Any, prefix: str, unit: str = "") -> str:
    """The name of the point-estimate column of a prediction table (or of one of its rows as a
    record, a ``summary.json`` row): ``{prefix}_point{unit}``, or ``{prefix}_mean{unit}`` where only
    that is there (a table written before the point existed: its mean was the point). Here, not in
    :mod:`evtsync.predict.tables` (which re-exports it), so that a run's view can read a summary."""
    point, mean = f"{prefix}_point{unit}", f"{prefix}_mean{unit}"
    return mean if point not in table and mean in table else point


def run_html(out: Any, stages: Any, summary: dict[str, Any] | None) -> str:
    """A pipeline run in a notebook: its folder, the answer table (``summary``: the run's
    ``summary.json``; None before the summary stage ran) and each stage's status and reason."""
    parts = [f'{_VIEW_CSS}<div class="evtsync-view">Run folder <code>{html.escape(str(out))}</code>']
    failed = [r for r in stages.itertuples() if r.status == "failed"]
    if failed:
        parts.append(" — " + ", ".join(f'<span class="bad">{html.escape(r.stage)} FAILED</span>' for r in failed))
    if summary and summary.get("rows"):
        n = summary.get("n")
        header = ["GPU × precision", *(label.replace("(n)", f"(n = {n})") for *_, label in RUN_VIEW_COLUMNS),
                  "converged"]
        rows = []
        for r in summary["rows"]:
            cells: list[Any] = [f"{r.get('gpu')} {r.get('precision')}"]
            for key, lo, hi, _ in RUN_VIEW_COLUMNS:
                if "_point" in key:  # a summary.json from before the point has its mean (point_key)
                    key = point_key(r, *key.split("_point", 1))
                value = r.get(key)
                if value is None:
                    cells.append("–")
                elif lo is None:
                    cells.append(str(value))
                else:
                    cells.append(fmt_interval(value, r.get(lo), r.get(hi), r.get(key.replace("_us", "_interval"))
                                              if key == "tax_median_us" else None))
            cells.append(bool(r.get("converged", True)))
            rows.append(cells)
        given = summary.get("point_estimate")
        points: dict[str, Any] = given if isinstance(given, dict) else {}
        tau_by = ", ".join(f"{e} (point: {points.get(e, 'posterior mean')})"
                           for e in str(summary.get("estimator") or "").split(", ") if e)
        parts.append(f"<p>The answers (model {html.escape(str(summary.get('model')))}, "
                     + (f"τ(n) by {html.escape(tau_by)}, " if tau_by else "")
                     + f"{summary.get('level', INTERVAL_LEVEL):.0%} intervals; all columns in summary.json):</p>")
        parts.append(_html_table(header, rows))
        for line in (summary.get("loo"), summary.get("loo_and_tail")):
            if line:
                parts.append(f"<p>{html.escape(str(line))}</p>")
    rows = [[r.stage, r.status, r.reason or "", r.seconds] for r in stages.itertuples()]
    parts.append("<details><summary>Stages</summary>" + _html_table(["stage", "status", "reason", "seconds"], rows)
                 + "</details></div>")
    return "".join(parts)
