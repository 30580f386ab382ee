"""Former home of the pipeline; it lives in :mod:`evtsync.pipeline` now.

A thin re-export for callers of ``evtsync.run`` (``run_pipeline``, ``RunOptions``, the status
names, the layout queries); new code imports :mod:`evtsync.pipeline`.
"""

from __future__ import annotations

from evtsync.defaults import (  # noqa: F401
    DEFAULT_CHAINS,
    DEFAULT_DRAWS,
    DEFAULT_TUNE,
    DEMO_CHAINS,
    DEMO_DRAWS,
    DEMO_TUNE,
)
from evtsync.evt.catalog import default_models_dir  # noqa: F401
from evtsync.evt.mlefit import MIN_Z_MLE  # noqa: F401
from evtsync.pipeline import *  # noqa: F403
from evtsync.pipeline import __all__ as _pipeline_all
from evtsync.pipeline.options import DEMO_OVERRIDES, DEMO_STUDY  # noqa: F401
from evtsync.pipeline.stages import LEVEL, MIN_Z_BAYES, N_MAX, TOPOLOGIES  # noqa: F401

__all__ = list(_pipeline_all)
