"""Progress bars for long work, switched off globally by ``--quiet`` or ``EVTSYNC_QUIET=1``.

Library code wraps long loops in :func:`progress`; bars go to stderr and disappear when
stderr is not a terminal unless forced, so logs and tests stay clean.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator

_enabled: bool | None = None


def set_progress(enabled: bool | None) -> None:
    """Force progress bars on (True) or off (False); None restores the automatic choice."""
    global _enabled
    _enabled = enabled


def progress_enabled() -> bool:
    """Whether progress bars are shown: forced setting, else a TTY on stderr and not quiet."""
    if _enabled is not None:
        return _enabled
    if os.environ.get("EVTSYNC_QUIET", "") not in ("", "0"):
        return False
    return sys.stderr.isatty()


def progress[T](iterable: Iterable[T], desc: str, total: int | None = None, unit: str = "it") -> Iterator[T]:
    """Iterate with a tqdm bar on stderr when progress bars are enabled."""
    if not progress_enabled():
        yield from iterable
        return
    from tqdm.auto import tqdm

    yield from tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, leave=False)
