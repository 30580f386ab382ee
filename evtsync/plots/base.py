"""Shared matplotlib set-up: headless backend, consistent style, atomic saving of figures."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from evtsync.tableio import atomic_path  # noqa: E402

FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def new_figure(width: float = 6.4, height: float = 4.2, **kwargs: Any) -> tuple[Any, Any]:
    """A figure and axes with the package's default size."""
    return plt.subplots(figsize=(width, height), **kwargs)


def figure_format(path: str | os.PathLike[str]) -> str:
    """Matplotlib format from the file's extension (png, svg, pdf), or ``InputError``.

    Call it before drawing so that a bad name fails before any work is done.
    """
    suffix = Path(path).suffix.lower()
    if suffix not in FIGURE_SUFFIXES:
        from evtsync.errors import InputError

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
        plt.close(fig)
    return Path(path)


def save_png_svg(fig: Any, folder: str | os.PathLike[str], stem: str) -> tuple[Path, Path]:
    """Save ``fig`` as ``folder/stem.svg`` and ``folder/stem.png`` (atomically) and close it."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    svg = folder / f"{stem}.svg"
    try:
        with atomic_path(svg) as tmp:
            fig.savefig(tmp, format="svg", bbox_inches="tight")
    except BaseException:
        plt.close(fig)
        raise
    png = save_figure(fig, folder / f"{stem}.png", dpi=110)
    return png, svg


def not_converged_mark(ax: Any, converged: bool, what: str = "fit") -> None:
    """Write "NOT CONVERGED" in red in the corner of ``ax`` when the figure uses such a fit."""
    if not converged:
        ax.text(0.02, 0.98, f"{what} NOT CONVERGED", transform=ax.transAxes, color="red", va="top", fontsize=8)
