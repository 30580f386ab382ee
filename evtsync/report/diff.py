"""The HTML report of ``evtsync diff``: the verdict table and, per PG role and collective type,
the tax CDFs of both runs on one axis; with fits, Δξ, Δτ(n) and ΔB* per GPU × precision cell
with the ΔB* figure. One self-contained page (figures embedded, styles inline) drawn by the
report's one renderer (:func:`evtsync.report.render.render_html`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from evtsync.core.defaults import INTERVAL_LEVEL
from evtsync.core.tableio import write_text_atomic
from evtsync.report.markdown import EmbeddedFigure, Section, Table
from evtsync.report.render import render_html


def _num(value: object, fmt: str = "{:.1f}") -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else fmt.format(value)


def _png(fig: Any, alt: str) -> EmbeddedFigure:
    """A matplotlib figure as an in-memory PNG (the page loads nothing from outside)."""
    from evtsync.plots.base import png_renderings

    wide, narrow = png_renderings(fig)
    return EmbeddedFigure(wide, alt, narrow=narrow)


def _tax_cdfs(a: pd.DataFrame, b: pd.DataFrame, labels: tuple[str, str]) -> EmbeddedFigure:
    from evtsync.plots.tax import tax_cdfs

    both = pd.concat([a.assign(pg=labels[0]), b.assign(pg=labels[1])], ignore_index=True)
    return _png(tax_cdfs(both), "tax CDFs")


def _verdict(verdict: object, reason: object) -> str:
    return f"{verdict}: {reason}"


def _fits_section(fits: pd.DataFrame) -> Section:
    """Δξ and Δτ(n) per cell (:func:`evtsync.runfolder.diff.diff_fits`)."""
    level = fits.attrs.get("level", INTERVAL_LEVEL)
    rows = []
    for r in fits.itertuples():
        empty = isinstance(r.d_mean, float) and math.isnan(r.d_mean)
        rows.append({"cell": str(r.cell), "quantity": "ξ" if r.quantity == "xi" else f"τ(n={int(r.n)}) µs",
                     "A": "—" if empty else f"{r.a_median:.4g}", "B": "—" if empty else f"{r.b_median:.4g}",
                     "B − A [interval]": "—" if empty else f"{r.d_median:+.4g} [{r.d_lo:+.4g}, {r.d_hi:+.4g}]",
                     "verdict": _verdict(r.verdict, r.reason), "no verdict": r.verdict == "no verdict"})
    return Section("Fit level: Δξ and Δτ(n)", [
        f"Fits {fits.attrs.get('a')} (A) and {fits.attrs.get('b')} (B): posterior medians and B − A with its "
        f"{level:.0%} interval (independent posteriors, draws paired at random; τ(n) = b·E_(n/m) with the same b on "
        "both sides).",
        Table(pd.DataFrame(rows), muted="no verdict")], anchor="fits")


def _bstar_section(bstar: pd.DataFrame) -> Section:
    """ΔB* per cell, topology, n and eps (:func:`evtsync.runfolder.diff.diff_bstar`) with its figure."""
    from evtsync.core.errors import InputError
    from evtsync.plots.diff import bstar_shift

    level = bstar.attrs.get("level", INTERVAL_LEVEL)
    rows = []
    for r in bstar.itertuples():
        empty = isinstance(r.d_mean_gbps, float) and math.isnan(r.d_mean_gbps)
        rows.append({"cell": str(r.cell), "topology": "—" if empty else str(r.topology),
                     "n": "—" if empty else int(r.n), "eps": "—" if empty else f"{r.eps:g}",
                     "B* A": "—" if empty else f"{r.a_median_gbps:.5g}", "B* B": "—" if empty else f"{r.b_median_gbps:.5g}",
                     "B − A [interval] (relative)": "—" if empty else (
                         f"{r.d_median_gbps:+.5g} [{r.d_lo_gbps:+.5g}, {r.d_hi_gbps:+.5g}] ({100 * r.d_rel_median:+.1f}%)"),
                     "verdict": _verdict(r.verdict, r.reason), "no verdict": r.verdict == "no verdict"})
    items: list[Any] = [f"Optimal bandwidth B* (methodology §8) of each run in GB/s, posterior medians and B − A with its "
                        f"{level:.0%} interval. {bstar.attrs.get('inputs', '')}.",
                        Table(pd.DataFrame(rows), muted="no verdict")]
    try:
        items.append(_png(bstar_shift(bstar), "relative change of B*"))
    except InputError as exc:
        items.append(f"No ΔB* figure: {exc}.")
    return Section("Fit level: ΔB*", items, anchor="bstar")


def write_diff_report(table: pd.DataFrame, a, b, path: str | Path, *,  # noqa: ANN001 - RunTables
                      fits: pd.DataFrame | None = None, bstar: pd.DataFrame | None = None,
                      notes: list[str] | None = None) -> Path:
    """Write the diff report of ``table`` (:func:`evtsync.runfolder.diff.diff_tax`) for sides ``a``, ``b``;
    with ``fits`` (:func:`evtsync.runfolder.diff.diff_fits`) and ``bstar`` (:func:`evtsync.runfolder.diff.diff_bstar`)
    the fit level too; ``notes`` (what was used, what was not computed and why) are shown."""
    from evtsync.runfolder.diff import role_of, valid_collectives

    level = table.attrs.get("level", INTERVAL_LEVEL)
    rows = []
    for r in table.itertuples():
        delta = ("—" if isinstance(r.d_median_us, float) and math.isnan(r.d_median_us) else
                 f"{r.d_median_us:+.1f} [{r.d_median_lo_us:+.1f}, {r.d_median_hi_us:+.1f}]")
        rows.append({"role": str(r.role), "collective": str(r.collective), "n A": r.n_a, "n B": r.n_b,
                     "median A (µs)": _num(r.median_a_us), "median B (µs)": _num(r.median_b_us),
                     "Δ median [interval] (µs)": delta, "Δ P90 (µs)": _num(r.d_p90_us, "{:+.1f}"),
                     "straggler change rate": f"{_num(r.change_rate_a, '{:.2f}')} → {_num(r.change_rate_b, '{:.2f}')}",
                     "verdict": _verdict(r.verdict, r.reason), "no verdict": r.verdict == "no verdict"})
    va, vb = valid_collectives(a.collectives).copy(), valid_collectives(b.collectives).copy()
    va["role"], vb["role"] = role_of(va), role_of(vb)
    sections = [Section("Verdicts", [
        f"tau_max per PG role and collective type; B − A of the median with its {level:.0%} percentile-bootstrap "
        "interval (each run resampled independently); verdicts as in docs/comparing-runs.md.",
        Table(pd.DataFrame(rows), muted="no verdict")], anchor="verdicts")]
    figures = []
    for r in table.itertuples():
        sa = va[(va["role"] == r.role) & (va["collective"] == r.collective)]
        sb = vb[(vb["role"] == r.role) & (vb["collective"] == r.collective)]
        if len(sa) and len(sb):
            figures.append(Section(f"{r.role} {r.collective}", [_tax_cdfs(sa, sb, ("A", "B"))], level=3))
    sections.append(Section("Tax distributions", [] if figures else ["No role is present in both runs."],
                            anchor="distributions"))
    sections += figures
    if fits is not None:
        sections.append(_fits_section(fits))
    if bstar is not None:
        sections.append(_bstar_section(bstar))
    all_notes = [*(notes or []), *table.attrs.get("notes", [])]
    if all_notes:
        sections.append(Section("Notes", [f"Note: {n}" for n in all_notes], anchor="notes"))
    return write_text_atomic(path, render_html("evtsync diff", f"A = {a.label}; B = {b.label}", sections))
