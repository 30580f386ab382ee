"""The HTML report of ``evtsync diff``: the verdict table and, per PG role and collective type,
the tax CDFs of both runs on one axis; with fits, Δξ, Δτ(n) and ΔB* per GPU × precision cell
with the ΔB* figure (self-contained: figures embedded, styles inline)."""

from __future__ import annotations

import base64
import html
import io
import math
from pathlib import Path

import pandas as pd

from evtsync.defaults import INTERVAL_LEVEL
from evtsync.tableio import write_text_atomic

_CSS = ("body{font-family:system-ui,sans-serif;max-width:1180px;margin:1.5em auto;padding:0 1em;color:#1d1d1f}"
        ".scroll{overflow-x:auto}table{border-collapse:collapse;font-size:.86em}th,td{border:1px solid #d0d0d0;"
        "padding:.25em .55em;text-align:right}td:first-child,td:nth-child(2){text-align:left}th{background:#f3f3f3}"
        "tr.none td{color:#8a6d00}img{max-width:100%;height:auto}")


def _num(value: object, fmt: str = "{:.1f}") -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)


def _embed(fig, alt: str) -> str:  # noqa: ANN001 - a matplotlib figure
    """The figure as an inline PNG ``<img>`` (the page loads nothing from outside)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def _figure(a: pd.DataFrame, b: pd.DataFrame, labels: tuple[str, str]) -> str:
    from evtsync.plots.tax import tax_cdfs

    both = pd.concat([a.assign(pg=labels[0]), b.assign(pg=labels[1])], ignore_index=True)
    return _embed(tax_cdfs(both), "tax CDFs")


def _verdict_cell(verdict: object, reason: object) -> str:
    return f"<td><b>{html.escape(str(verdict))}</b>: {html.escape(str(reason))}</td>"


def _fits_html(fits: pd.DataFrame) -> str:
    """Δξ and Δτ(n) per cell (:func:`evtsync.diff.diff_fits`)."""
    level = fits.attrs.get("level", INTERVAL_LEVEL)
    rows = []
    for r in fits.itertuples():
        what = "ξ" if r.quantity == "xi" else f"τ(n={int(r.n)}) µs"
        cls = ' class="none"' if r.verdict == "no verdict" else ""
        if isinstance(r.d_mean, float) and math.isnan(r.d_mean):
            numbers = "<td>—</td><td>—</td><td>—</td>"
        else:
            numbers = (f"<td>{r.a_median:.4g}</td><td>{r.b_median:.4g}</td>"
                       f"<td>{r.d_median:+.4g} [{r.d_lo:+.4g}, {r.d_hi:+.4g}]</td>")
        rows.append(f"<tr{cls}><td>{html.escape(str(r.cell))}</td><td>{what}</td>{numbers}"
                    f"{_verdict_cell(r.verdict, r.reason)}</tr>")
    return (f"<h2>Fit level: Δξ and Δτ(n)</h2><p>Fits {html.escape(str(fits.attrs.get('a')))} (A) and "
            f"{html.escape(str(fits.attrs.get('b')))} (B): posterior medians and B − A with its {level:.0%} "
            "interval (independent posteriors, draws paired at random; τ(n) = b·E_(n/m) with the same b on both "
            "sides).</p><div class=\"scroll\"><table><tr><th>cell</th><th>quantity</th><th>A</th><th>B</th>"
            f"<th>B − A [interval]</th><th>verdict</th></tr>{''.join(rows)}</table></div>")


def _bstar_html(bstar: pd.DataFrame) -> str:
    """ΔB* per cell, topology, n and eps (:func:`evtsync.diff.diff_bstar`) with its figure."""
    from evtsync.errors import InputError
    from evtsync.plots.diff import bstar_shift

    level = bstar.attrs.get("level", INTERVAL_LEVEL)
    rows = []
    for r in bstar.itertuples():
        cls = ' class="none"' if r.verdict == "no verdict" else ""
        if isinstance(r.d_mean_gbps, float) and math.isnan(r.d_mean_gbps):
            rows.append(f"<tr{cls}><td>{html.escape(str(r.cell))}</td><td colspan=\"6\">—</td>"
                        f"{_verdict_cell(r.verdict, r.reason)}</tr>")
            continue
        rows.append(f"<tr{cls}><td>{html.escape(str(r.cell))}</td><td>{html.escape(str(r.topology))}</td>"
                    f"<td>{int(r.n)}</td><td>{r.eps:g}</td><td>{r.a_median_gbps:.5g}</td><td>{r.b_median_gbps:.5g}</td>"
                    f"<td>{r.d_median_gbps:+.5g} [{r.d_lo_gbps:+.5g}, {r.d_hi_gbps:+.5g}] "
                    f"({100 * r.d_rel_median:+.1f}%)</td>{_verdict_cell(r.verdict, r.reason)}</tr>")
    try:
        figure = _embed(bstar_shift(bstar), "relative change of B*")
    except InputError as exc:
        figure = f"<p>No ΔB* figure: {html.escape(str(exc))}.</p>"
    return (f"<h2>Fit level: ΔB*</h2><p>Optimal bandwidth B* (SPEC §8) of each run in GB/s, posterior medians and "
            f"B − A with its {level:.0%} interval. {html.escape(str(bstar.attrs.get('inputs', '')))}.</p>"
            "<div class=\"scroll\"><table><tr><th>cell</th><th>topology</th><th>n</th><th>eps</th><th>B* A</th>"
            f"<th>B* B</th><th>B − A [interval] (relative)</th><th>verdict</th></tr>{''.join(rows)}</table></div>"
            f"{figure}")


def write_diff_report(table: pd.DataFrame, a, b, path: str | Path, *,  # noqa: ANN001 - RunTables
                      fits: pd.DataFrame | None = None, bstar: pd.DataFrame | None = None,
                      notes: list[str] | None = None) -> Path:
    """Write the diff report of ``table`` (:func:`evtsync.diff.diff_tax`) for sides ``a``, ``b``;
    with ``fits`` (:func:`evtsync.diff.diff_fits`) and ``bstar`` (:func:`evtsync.diff.diff_bstar`)
    the fit level too; ``notes`` (what was used, what was not computed and why) are shown."""
    from evtsync.diff import _role, _valid

    level = table.attrs.get("level", INTERVAL_LEVEL)
    rows = []
    for r in table.itertuples():
        delta = ("—" if isinstance(r.d_median_us, float) and math.isnan(r.d_median_us) else
                 f"{r.d_median_us:+.1f} [{r.d_median_lo_us:+.1f}, {r.d_median_hi_us:+.1f}]")
        cls = ' class="none"' if r.verdict == "no verdict" else ""
        rows.append(f"<tr{cls}><td>{html.escape(str(r.role))}</td><td>{html.escape(str(r.collective))}</td>"
                    f"<td>{r.n_a}</td><td>{r.n_b}</td><td>{_num(r.median_a_us)}</td><td>{_num(r.median_b_us)}</td>"
                    f"<td>{delta}</td><td>{_num(r.d_p90_us, '{:+.1f}')}</td><td>{_num(r.change_rate_a, '{:.2f}')} → "
                    f"{_num(r.change_rate_b, '{:.2f}')}</td><td><b>{html.escape(r.verdict)}</b>: "
                    f"{html.escape(str(r.reason))}</td></tr>")
    va, vb = _valid(a.collectives).copy(), _valid(b.collectives).copy()
    va["role"], vb["role"] = _role(va), _role(vb)
    figures = []
    for r in table.itertuples():
        sa = va[(va["role"] == r.role) & (va["collective"] == r.collective)]
        sb = vb[(vb["role"] == r.role) & (vb["collective"] == r.collective)]
        if len(sa) and len(sb):
            figures.append(f"<h3>{html.escape(f'{r.role} {r.collective}')}</h3>"
                           f"{_figure(sa, sb, ('A', 'B'))}")
    page = f"""<!doctype html><html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1"><title>evtsync diff</title>
<style>{_CSS}</style></head><body>
<h1>evtsync diff</h1>
<p>A = {html.escape(a.label)}<br>B = {html.escape(b.label)}</p>
<p>tau_max per PG role and collective type; B − A of the median with its {level:.0%} percentile-bootstrap
interval (each run resampled independently); verdicts as in docs/comparing-runs.md.</p>
<div class="scroll"><table><tr><th>role</th><th>collective</th><th>n A</th><th>n B</th><th>median A (µs)</th>
<th>median B (µs)</th><th>Δ median [interval] (µs)</th><th>Δ P90 (µs)</th><th>straggler change rate</th>
<th>verdict</th></tr>{''.join(rows)}</table></div>
<h2>Tax distributions</h2>{''.join(figures) or '<p>No role is present in both runs.</p>'}
{_fits_html(fits) if fits is not None else ''}{_bstar_html(bstar) if bstar is not None else ''}
{''.join(f'<p class="note">Note: {html.escape(n)}</p>' for n in [*(notes or []), *table.attrs.get("notes", [])])}
</body></html>"""
    return write_text_atomic(path, page)
