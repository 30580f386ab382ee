"""Every figure of evtsync, for the CLI and the report alike.

Each public function takes plain tables (those of :mod:`evtsync.predict.tables`, the run folder's
``tables/``, a fit's draws) and returns a :class:`matplotlib.figure.Figure`; save it with
:func:`save_figure` (one file, format from the extension) or :func:`save_png_svg` (PNG and, when asked, SVG, for the
report). Modules: :mod:`~evtsync.plots.tax` (tax CDFs, wait shares, attribution),
:mod:`~evtsync.plots.fits` (GEV per cell, xi forest, posterior per cell),
:mod:`~evtsync.plots.predictions` (tau(n), B*, predicted vs measured),
:mod:`~evtsync.plots.diagnostics` (the four panels of R's ``ismev::gev.diag`` for one MLE). Nothing in
:mod:`evtsync.evt` imports this package: statistics never need matplotlib.
"""

from evtsync.plots.base import figure_format, new_figure, save_figure, save_png_svg

__all__ = ["figure_format", "new_figure", "save_figure", "save_png_svg"]
