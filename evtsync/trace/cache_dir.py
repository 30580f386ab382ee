"""Where evtsync keeps what it caches on disk (the trace tables, the compiled trace scanner).

A module of its own, importing nothing of the package, so that the scanner (read by the
decoder) and the table cache (which reads through the decoder) can both ask without an import
circle.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The environment variable that moves the cache.
CACHE_ENV = "EVTSYNC_CACHE_DIR"
#: The environment variable for the size below which a trace file is not cached
#: (:func:`evtsync.trace.cache.cache_min_bytes`).
CACHE_MIN_ENV = "EVTSYNC_CACHE_MIN_BYTES"


def default_cache_dir() -> Path:
    """``$EVTSYNC_CACHE_DIR``, else ``$XDG_CACHE_HOME/evtsync``, else ``~/.cache/evtsync``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "evtsync"
