"""Extreme-value statistics: GEV mathematics, maximum-likelihood fits, diagnostics, tax prediction.

Submodules are imported on demand so that ``import evtsync.evt.gev`` stays light (no PyMC):

- :mod:`evtsync.evt.gev` — GEV density, CDF, quantiles, draws, mean, max-of-k law, E_k.
- :mod:`evtsync.evt.mle` — Gumbel and GEV maximum-likelihood fits with standard errors,
  profile-likelihood intervals, AIC and the likelihood-ratio test.
- :mod:`evtsync.evt.diagnostics` — the four-panel diagnostic plot of R's ``ismev::gev.diag``.
- :mod:`evtsync.evt.predict` — the predicted synchronization tax tau(n) = b·E_k (SPEC §7).
"""
