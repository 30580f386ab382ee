"""Former home of the tax CDF figure; it is :mod:`evtsync.plots.tax` now (thin re-export)."""

from evtsync.plots.tax import plot_tax_cdfs, tax_cdfs

__all__ = ["plot_tax_cdfs", "tax_cdfs"]
