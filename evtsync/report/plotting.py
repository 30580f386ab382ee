"""Former home of the matplotlib set-up; it is :mod:`evtsync.plots.base` now (thin re-export)."""

from evtsync.plots.base import (
    FIGURE_SUFFIXES,
    figure_format,
    new_figure,
    plt,
    save_figure,
    save_png_svg,
)

__all__ = ["FIGURE_SUFFIXES", "figure_format", "new_figure", "plt", "save_figure", "save_png_svg"]
