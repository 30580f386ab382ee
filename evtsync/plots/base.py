"""Shared matplotlib set-up: headless backend, consistent style, atomic saving of figures.

Figures are made outside pyplot's registry (:func:`new_figure`): a function returns its figure
and nothing else holds it, so a notebook shows a returned figure once (not again at the cell's
end) and a script's figures are freed when dropped. The headless Agg backend is chosen unless
a backend was named in ``MPLBACKEND`` (a Jupyter kernel names its inline backend there).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from evtsync.core.tableio import atomic_path


@functools.cache
def _pyplot() -> Any:
    """matplotlib's pyplot, imported on first use (issue 48: importing evtsync.plots, as the
    report's and the CLI's modules do, costs no matplotlib import until a figure is made): the
    headless Agg backend unless ``MPLBACKEND`` names one, which is then loaded at once (figures
    made outside pyplot never make pyplot load it, and a Jupyter kernel's inline backend
    registers on loading how a returned figure is shown)."""
    import matplotlib

    if not os.environ.get("MPLBACKEND"):
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if os.environ.get("MPLBACKEND"):
        plt.switch_backend(os.environ["MPLBACKEND"])
    return plt


def __getattr__(name: str) -> Any:
    """``plt``: pyplot, set up by :func:`_pyplot` on first use."""
    if name == "plt":
        return _pyplot()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def new_figure(width: float = 6.4, height: float = 4.2, **kwargs: Any) -> tuple[Any, Any]:
    """A figure and its axes (``kwargs`` as :meth:`matplotlib.figure.Figure.subplots`: ``ncols`` …),
    outside pyplot's registry (see the module docstring)."""
    _pyplot()  # the backend chosen (and a named one loaded) before the first figure, as on import before
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)  # drawn and saved headless; a notebook renders it through its own formatter
    return fig, fig.subplots(**kwargs)


def figure_format(path: str | os.PathLike[str]) -> str:
    """Matplotlib format from the file's extension (png, svg, pdf), or ``InputError``.

    Call it before drawing so that a bad name fails before any work is done.
    """
    suffix = Path(path).suffix.lower()
    if suffix not in FIGURE_SUFFIXES:
        from evtsync.core.errors import InputError

        raise InputError(f"{path}: unknown figure format; expected a name ending in "
                         f"{', '.join(FIGURE_SUFFIXES)}")
    return suffix[1:]


def save_figure(fig: Any, path: str | os.PathLike[str], dpi: int = 130) -> Path:
    """Save a figure atomically (format from the extension) and close it, even on failure."""
    try:
        fmt = figure_format(path)
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=dpi, bbox_inches="tight")
    finally:
        _pyplot().close(fig)
    return Path(path)


def save_png_svg(fig: Any, folder: str | os.PathLike[str], stem: str,
                 svg: bool = True) -> tuple[Path, Path | None]:
    """Save ``fig`` as ``folder/stem.png`` and (``svg``) ``folder/stem.svg``, atomically, and close it;
    returns both paths (None for an SVG not asked for)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    svg_path = folder / f"{stem}.svg" if svg else None
    if svg_path is not None:
        try:
            with atomic_path(svg_path) as tmp:
                fig.savefig(tmp, format="svg", bbox_inches="tight")
        except BaseException:
            _pyplot().close(fig)
            raise
    wide, narrow = png_renderings(fig)
    png = folder / f"{stem}.png"
    for path, data in ((png, wide), (narrow_png_path(png), narrow)):
        path.parent.mkdir(exist_ok=True)
        with atomic_path(path) as tmp:
            Path(tmp).write_bytes(data)
    return png, svg_path


def png_renderings(fig: Any) -> tuple[bytes, bytes]:
    """``fig`` as PNG bytes at :data:`FIGURE_DPI`, then redrawn for a narrow screen
    (:func:`narrow_layout`) as PNG bytes; each carries its smallest text size (:data:`FONT_KEY`).
    Closes the figure, even on failure."""
    import io

    try:
        out = []
        for narrow in (False, True):
            if narrow:
                narrow_layout(fig)
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=FIGURE_DPI, bbox_inches="tight")
            # the smallest text read from the figure as saving drew it (tick labels exist only once
            # drawn): one layout pass fewer than drawing it for the metadata first (issue 48)
            out.append(_with_font_text(buf.getvalue(), fig))
    finally:
        _pyplot().close(fig)
    return out[0], out[1]


#: The report's figures' resolution (pixels per inch of their PNG).
FIGURE_DPI = 110

#: The narrow rendering of a report figure (issue 49, docs/tutorial.md, the report's sections): at
#: most this many inches wide and every text at least :data:`NARROW_MIN_PT` points, so that shown
#: at 360 px (a 390 px phone less its margins) a label reads at 9 × 360 / (72 × 4) ≈ 11.2 px.
NARROW_WIDTH_IN = 4.0
NARROW_MIN_PT = 9.0
#: Height of one panel of the narrow rendering (panels stack in one column), inches.
NARROW_PANEL_IN = 2.9

#: PNG text key holding the smallest text of the figure, in the PNG's own pixels.
FONT_KEY = "evtsync-min-font-px"


def narrow_png_path(png: str | os.PathLike[str]) -> Path:
    """Where the narrow rendering of the report figure ``png`` lies: ``narrow/`` beside it, same name."""
    png = Path(png)
    return png.parent / "narrow" / png.name


def min_font_pt(fig: Any) -> float | None:
    """The smallest font size (points) among the figure's visible, non-empty texts; None without text."""
    from matplotlib.text import Text

    sizes = [t.get_fontsize() for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
    return float(min(sizes)) if sizes else None


def _with_font_text(png: bytes, fig: Any) -> bytes:
    """``png`` (``fig`` just saved) with a ``tEXt`` chunk :data:`FONT_KEY` holding the figure's
    smallest text in the PNG's pixels, placed after its leading text chunks, where
    ``savefig(metadata=...)`` puts it (the same bytes); ``png`` as it is for a figure without text."""
    import zlib

    size = min_font_pt(fig)
    if size is None:
        return png
    data = FONT_KEY.encode("latin-1") + b"\0" + f"{size * FIGURE_DPI / 72:.2f}".encode("latin-1")
    chunk = len(data).to_bytes(4, "big") + b"tEXt" + data + zlib.crc32(b"tEXt" + data).to_bytes(4, "big")
    pos = 8
    while pos + 8 <= len(png) and png[pos + 4:pos + 8] in (b"IHDR", b"tEXt"):
        pos += 12 + int.from_bytes(png[pos:pos + 4], "big")
    return png[:pos] + chunk + png[pos:]


def narrow_layout(fig: Any) -> None:
    """Lay ``fig`` out again for a narrow screen (see :data:`NARROW_WIDTH_IN`): its panels in one
    column, :data:`NARROW_WIDTH_IN` wide, every text at least :data:`NARROW_MIN_PT`, titles wrapped."""
    import warnings

    from matplotlib.gridspec import GridSpec
    from matplotlib.layout_engine import ConstrainedLayoutEngine
    from matplotlib.text import Text

    panels = [ax for ax in fig.axes if ax.get_subplotspec() is not None]
    for ax in panels:
        if not ax.axison and not ax.has_data() and not ax.texts:
            ax.set_visible(False)
    shown = [ax for ax in panels if ax.get_visible()]
    columns = max((ax.get_subplotspec().get_gridspec().ncols for ax in shown), default=1)
    if columns > 1:
        grid = GridSpec(len(shown), 1, figure=fig)
        for i, ax in enumerate(shown):
            ax.set_subplotspec(grid[i, 0])
    rows = len(shown) if columns > 1 else max((ax.get_subplotspec().get_gridspec().nrows for ax in shown), default=1)
    width, height = fig.get_size_inches()
    fig.set_size_inches(NARROW_WIDTH_IN, max(NARROW_PANEL_IN * rows, height * NARROW_WIDTH_IN / width))
    for ax in fig.axes:
        sizes = [t.get_fontsize() for t in ax.get_xticklabels() + ax.get_yticklabels()]
        ax.tick_params(axis="both", which="both", labelsize=max([NARROW_MIN_PT, *sizes]))
    def raise_fonts() -> None:
        fig.draw_without_rendering()
        for text in fig.findobj(Text):
            text.set_fontsize(max(text.get_fontsize(), NARROW_MIN_PT))
            if len(text.get_text()) > 30:  # a long title, label or annotation: wrapped at the figure's edge
                text.set_wrap(True)

    def layout() -> None:
        # a figure that ran tight_layout holds a placeholder engine; a constrained one lays itself out
        if not isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fig.tight_layout()

    raise_fonts()
    for legend in list(fig.legends):  # a figure's legend: below it, one entry a line
        handles, labels = list(legend.legend_handles), [t.get_text() for t in legend.get_texts()]
        legend.remove()
        fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncols=1, frameon=False,
                   fontsize=NARROW_MIN_PT)
    layout()
    fig.draw_without_rendering()
    for ax in shown:
        legend = ax.get_legend()
        if legend is None:
            continue
        anchor = legend.get_bbox_to_anchor()
        if anchor.y0 < ax.bbox.y0 - 1 or anchor.x0 > ax.bbox.x1 + 1:  # beside or below the axes: below, one column
            handles, labels = list(legend.legend_handles), [t.get_text() for t in legend.get_texts()]
            legend.remove()
            legend_below(ax, ncol=1, handles=handles, labels=labels)
    raise_fonts()
    # what sticks out of the axes (a legend beside them, a long label) widens the saved image
    # (bbox_inches="tight"): narrow the figure by that much, a few times, so the image is ~4 in
    for _ in range(4):
        layout()
        saved = fig.get_tightbbox(fig.canvas.get_renderer()).width
        excess = saved - NARROW_WIDTH_IN
        if excess <= 0.05 or fig.get_size_inches()[0] - excess < 2.5:
            break
        fig.set_size_inches(fig.get_size_inches()[0] - excess, fig.get_size_inches()[1])
    layout()  # after the last resize too


#: The modules a process that draws the report's figures needs (imported once, before forking):
#: matplotlib's figure and Agg canvas first (evtsync.plots imports matplotlib only on first use, so
#: without them every figure worker imported it itself, ~0.36 s of CPU each; issue 48).
PLOT_MODULES = ("matplotlib.figure", "matplotlib.backends.backend_agg", "evtsync.plots.fits", "evtsync.plots.paths", "evtsync.plots.predictions", "evtsync.plots.tax",
                "evtsync.plots.whatif", "evtsync.plots.zscores")


def draw_png_svg(folder: str | os.PathLike[str], job: tuple[Callable[[], Any], str, bool]) -> tuple[Path, Path | None]:
    """``job`` is ``(draw, stem, svg)``: call ``draw`` (a figure function of :mod:`evtsync.plots`
    bound to its tables, e.g. a ``functools.partial``) and save its figure as ``folder/stem.png``
    (and ``.svg`` when ``svg``) with :func:`save_png_svg`; the unit of work the report hands to its
    worker processes."""
    draw, stem, svg = job
    return save_png_svg(draw(), folder, stem, svg)


def not_converged_mark(ax: Any, converged: bool, what: str = "fit") -> None:
    """Write "NOT CONVERGED" in red in the corner of ``ax`` when the figure uses such a fit."""
    if not converged:
        ax.text(0.02, 0.98, f"{what} NOT CONVERGED", transform=ax.transAxes, color="red", va="top", fontsize=8)


def _tick_text(value: float) -> str:
    """A tick label that stays short at any magnitude: 200, 5000, 0.02, 10⁶, 2e-05."""
    if value <= 0 or not np.isfinite(value):
        return ""
    if 1e-3 <= value < 1e5:
        return f"{value:g}"
    exponent = np.log10(value)
    if abs(exponent - round(exponent)) < 1e-9:
        return f"$10^{{{int(round(exponent))}}}$"
    return f"{value:.0e}"


def log_ticks(lo: float, hi: float, most: int = 6) -> list[float]:
    """At most ``most`` (at least two) readable tick positions for a log axis spanning [lo, hi].

    Decades where the range spans several (every k-th decade beyond ``most``), 1-2-5 or 1-3
    steps within a decade or two, and rounded evenly spaced values on very narrow ranges, so that
    labels never crowd (no "2×10² 3×10² 4×10²" runs)."""
    lo, hi = float(lo), float(hi)
    if not (np.isfinite(lo) and np.isfinite(hi)) or lo <= 0 or hi <= lo:
        return [v for v in (lo, hi) if np.isfinite(v) and v > 0][:2]
    first, last = int(np.floor(np.log10(lo))), int(np.ceil(np.log10(hi)))
    decades = last - first
    if decades > most:
        step = int(np.ceil(decades / most))
        ticks = [10.0 ** k for k in range(first, last + 1, step) if lo <= 10.0 ** k <= hi]
        if len(ticks) >= 2:
            return ticks
    best: list[float] = []
    for subs in ((1.0,), (1.0, 3.0), (1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0, 7.0)):
        ticks = [s * 10.0 ** k for k in range(first, last + 1) for s in subs if lo <= s * 10.0 ** k <= hi]
        if len(ticks) > most:
            break
        best = ticks
        if len(ticks) >= 3:
            break
    if len(best) >= 2:
        return best
    # a narrow range: three evenly spaced values, rounded to the fewest digits that keep them
    # distinct and inside the range
    values = np.geomspace(lo, hi, 3)
    for digits in range(2, 8):
        rounded = sorted({float(f"{v:.{digits}g}") for v in values})
        inside = [v for v in rounded if lo <= v <= hi]
        if len(inside) >= 2:
            return inside
    return [lo, hi]


def readable_log_axis(axis: Any, lo: float, hi: float, most: int = 6) -> None:
    """Put :func:`log_ticks` on a log-scaled matplotlib ``axis`` (``ax.xaxis`` / ``ax.yaxis``) for
    data spanning [lo, hi]: labelled major ticks, unlabelled minor ones."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ticks = log_ticks(lo, hi, most)
    decades = all(abs(np.log10(t) - round(np.log10(t))) < 1e-9 for t in ticks)
    if decades and max(ticks) >= 1e4 or min(ticks) < 1e-3:
        text = (lambda v, _pos: f"$10^{{{int(round(np.log10(v)))}}}$") if decades else \
            (lambda v, _pos: f"{v:.0e}")
    else:
        text = lambda v, _pos: _tick_text(v)  # noqa: E731
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_major_formatter(FuncFormatter(text))
    axis.set_minor_formatter(NullFormatter())


def legend_below(ax: Any, ncol: int = 2, **kwargs: Any) -> None:
    """The legend of ``ax`` under its axes, below the tick labels and the axis label (outside the
    data; ``bbox_inches="tight"`` keeps it in the saved file). Call it after ``tight_layout``."""
    if not kwargs.get("handles") and not ax.get_legend_handles_labels()[0]:
        return
    renderer = ax.figure.canvas.get_renderer()
    bottom = ax.get_tightbbox(renderer).y0
    offset = float(ax.transAxes.inverted().transform((0.0, bottom))[1]) - 0.02
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, offset), ncol=ncol, frameon=False, **kwargs)
