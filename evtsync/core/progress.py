"""Progress bars for long work, switched off globally by ``--quiet`` or ``EVTSYNC_QUIET=1``.

Library code wraps long loops in :func:`progress`; bars go to stderr and disappear when
stderr is not a terminal unless forced, so logs and tests stay clean. Log records and the
command line's status lines go through :class:`BarSafeHandler` and :func:`write_line`, which
write whole lines above the bars, so that the two never interleave on one terminal line.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import Any

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


def _bars_open() -> bool:
    """Whether a tqdm bar is on the terminal now (without importing tqdm when none was)."""
    module = sys.modules.get("tqdm")
    if module is None:
        return False
    return bool(getattr(module.tqdm, "_instances", None))


def write_line(text: str) -> None:
    """Print one line on stderr without breaking a progress bar: through ``tqdm.write`` (which
    clears the bars, writes the line, redraws them) while one is shown, else plainly."""
    if _bars_open():
        from tqdm import tqdm

        tqdm.write(text, file=sys.stderr)
    else:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


class BarSafeHandler(logging.StreamHandler):
    """The command line's log handler: each record is one whole line on stderr, written through
    :func:`write_line` so that log lines and progress bars never share a terminal line (what
    tqdm's ``logging_redirect_tqdm`` does, without importing tqdm before a bar exists), and each
    distinct line once per command."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)
        self._seen: set[str] = set()
        #: per warning said, how often it came and the cells of the like ones not written
        self._said: dict[str, tuple[str, int, list[str]]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        """Format the record and write it as whole lines; a line already written is not repeated
        (a warning about one fit, raised by every stage that reads the fit, is said once), nor a
        warning that differs from one written only in its GPU|precision cell (the same note about
        three cells is said once); :meth:`repeat_lines` gives their counts."""
        try:
            text = self.format(record)
            key = _CELL.sub("<cell>", text) if record.levelno >= logging.WARNING else text
            if text in self._seen or key in self._said:
                first, count, cells = self._said.get(key, (text, 1, []))
                if text not in self._seen:
                    cells = [*cells, *_CELL.findall(text)]
                    self._seen.add(text)
                self._said[key] = (first, count + 1, cells)
                return
            self._seen.add(text)
            self._said[key] = (text, 1, [])
            if _bars_open():
                write_line(text)
            else:
                self.stream.write(text + self.terminator)
                self.flush()
        except Exception:  # noqa: BLE001 - logging's own contract: report, never raise
            self.handleError(record)

    def repeat_lines(self) -> list[str]:
        """The warnings that came more than once (or for more cells than the one named), with their
        counts, in one line (none when every warning came once): what :meth:`emit` held back, said
        at the end of the command."""
        parts = []
        for first, count, cells in self._said.values():
            if count < 2:
                continue
            head = first.split(": ", 2)[-1]
            head = head if len(head) <= 45 else head[:44] + "…"
            more = f", also for {', '.join(dict.fromkeys(cells))}" if cells else ""
            parts.append(f"\"{head}\" {count}×{more}")
        return [f"evtsync: warnings said once above that came more often: {'; '.join(parts)}"] if parts else []


class WarningCollector(logging.Handler):
    """Keeps the warnings logged while it is attached, each once (a line that differs from an
    earlier one only in its GPU|precision cell counts as that one) with how often it came."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._counts: dict[str, list[Any]] = {}

    def emit(self, record: logging.LogRecord) -> None:
        """Count the record under its message with the cells taken out."""
        try:
            text = record.getMessage()
        except Exception:  # noqa: BLE001 - logging's own contract: report, never raise
            self.handleError(record)
            return
        entry = self._counts.setdefault(_CELL.sub("<cell>", text), [text, 0])
        entry[1] += 1

    def counted(self) -> list[tuple[str, int]]:
        """(the first such message, its count), in the order they first came."""
        return [(text, int(count)) for text, count in self._counts.values()]


#: A GPU|precision cell in a log line ("A100|bf16"): lines that differ only in it are one warning.
_CELL = re.compile(r"(?<![\w|])[A-Za-z0-9_.+-]+\|[A-Za-z0-9_.+-]+(?![\w|])")


def wait_for[T](future: Future[T], desc: str, status: Callable[[], str] | None = None) -> T:
    """``future.result()``, with a bar counting the seconds waited while progress bars are on
    (a job running in another process, e.g. a Bayesian fit of ``evtsync run``, shows it is alive);
    ``status()``, refreshed twice a second, says how the other jobs stand (``2 of 5 done``)."""
    if future.done() or not progress_enabled():
        return future.result()
    from concurrent.futures import wait

    from tqdm.auto import tqdm

    with tqdm(desc=desc, total=None, unit="s", file=sys.stderr, leave=False,
              bar_format="{desc}: {elapsed} elapsed{postfix}") as bar:
        while not wait([future], timeout=0.5).done:
            if status is not None:
                bar.set_postfix_str(status(), refresh=False)
            bar.refresh()
    return future.result()
