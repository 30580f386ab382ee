"""Extreme-value statistics: GEV mathematics, fits and their comparison (no figures here).

Submodules are imported on demand so that ``import evtsync.evt.gev`` stays light (no PyMC):

- :mod:`evtsync.evt.gev` — the NumPy GEV: density, CDF, quantiles, draws, mean, max-of-k law, E_k.
- :mod:`evtsync.evt.mle` — Gumbel and GEV maximum-likelihood fits with standard errors,
  profile-likelihood intervals, AIC and the likelihood-ratio test.
- :mod:`evtsync.evt.mlefit` — the MLE per GPU × precision cell (one table, with the LRT) and
  :class:`~evtsync.evt.mlefit.MleCellFit`, its fit object.
- :mod:`evtsync.evt.spec` — model specifications (``models/*.toml``) validated into a ModelSpec;
  :mod:`evtsync.evt.catalog` — the specifications shipped with the package.
- :mod:`evtsync.evt.model`, :mod:`evtsync.evt.distribution` — the PyMC model and GEV distribution.
- :mod:`evtsync.evt.fit` — sampling a spec on a z-score table (:func:`~evtsync.evt.fit.fit_table`).
- :mod:`evtsync.evt.bayesfit` — :class:`~evtsync.evt.bayesfit.BayesFit`, the fit object: load/save
  without PyMC, spec, provenance, convergence, format version, labelled posterior.
- :mod:`evtsync.evt.compare` — PSIS-LOO comparison of fits.
"""
