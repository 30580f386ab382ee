"""A small, bounded memo of pure computations, keyed by the content of their inputs.

A run computes some things twice with the same inputs in one process: the rank model's fits with xi
free and xi = 0 share a data set, so its body frames (:func:`evtsync.evt.rankmodel._body_frames`) and
each cell's threshold-stability test (:func:`evtsync.evt.ranktail._stable_exceedances`) are the same
(issue 48: the cold demo's CPU). :class:`BoundedMemo` keeps the most recently used few results by a key
the caller derives from the inputs' content (a digest of their bytes), and hands each caller a copy, so
that no caller can change what another gets. Lookups and evictions hold a lock (fits may run on threads);
the computation itself runs outside it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable

_MISSING = object()


class BoundedMemo[V]:
    """The ``keep`` most recently used results, each handed out through ``copy``."""

    def __init__(self, keep: int, copy: Callable[[V], V]) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1; got {keep}")
        self._keep, self._copy = keep, copy
        self._kept: dict[Hashable, V] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        """A copy of the result kept for ``key``, or of ``compute()``'s (then kept, the least
        recently used result dropped beyond ``keep``)."""
        with self._lock:
            hit = self._kept.pop(key, _MISSING)
        value: V = compute() if hit is _MISSING else hit  # type: ignore[assignment]
        with self._lock:
            self._kept[key] = value  # the most recently used last
            while len(self._kept) > self._keep:
                del self._kept[next(iter(self._kept))]
        return self._copy(value)

    def __len__(self) -> int:
        return len(self._kept)

    def clear(self) -> None:
        """Forget every result."""
        with self._lock:
            self._kept.clear()
