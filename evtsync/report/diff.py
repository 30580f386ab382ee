"""The HTML report of ``evtsync diff``: the verdict table and, per PG role and collective type,
the tax CDFs of both runs on one axis (self-contained: figures embedded, styles inline)."""

from __future__ import annotations

import base64
import html
import io
import math
from pathlib import Path

import pandas as pd

from evtsync.tableio import write_text_atomic

_CSS = ("body{font-family:system-ui,sans-serif;max-width:1180px;margin:1.5em auto;padding:0 1em;color:#1d1d1f}"
        ".scroll{overflow-x:auto}table{border-collapse:collapse;font-size:.86em}th,td{border:1px solid #d0d0d0;"
        "padding:.25em .55em;text-align:right}td:first-child,td:nth-child(2){text-align:left}th{background:#f3f3f3}"
        "tr.none td{color:#8a6d00}img{max-width:100%;height:auto}")


def _num(value: object, fmt: str = "{:.1f}") -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)


def _figure(a: pd.DataFrame, b: pd.DataFrame, labels: tuple[str, str]) -> str:
    from evtsync.plots.tax import tax_cdfs

    both = pd.concat([a.assign(pg=labels[0]), b.assign(pg=labels[1])], ignore_index=True)
    fig = tax_cdfs(both)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return f'<img alt="tax CDFs" src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}">'


def write_diff_report(table: pd.DataFrame, a, b, path: str | Path) -> Path:  # noqa: ANN001 - RunTables
    """Write the diff report of ``table`` (:func:`evtsync.diff.diff_tax`) for sides ``a``, ``b``."""
    from evtsync.diff import _role, _valid

    level = table.attrs.get("level", 0.9)
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
</body></html>"""
    return write_text_atomic(path, page)
