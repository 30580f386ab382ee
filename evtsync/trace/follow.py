"""NCCL Inspector logs still being written, re-read incrementally.

The Inspector appends to its logs for the whole job. :class:`LogFollower` keeps what it
read of each file; every :meth:`LogFollower.refresh` reads only the bytes appended since
(a file that shrank or changed before that point is read whole again), and returns the
TraceSet of everything read so far: the tax of a running job, kept up to date cheaply::

    follower = LogFollower("/scratch/logs/12345")
    while job_runs():
        alignment, tax = tax_from_traces(follower.refresh(), allow_partial=True)
        ...
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from typing import Any

from evtsync.core.errors import InputError
from evtsync.trace.readers import reader_for
from evtsync.trace.readers.inspector import INSPECTOR, LoggedCollectives, read_log
from evtsync.trace.traceset import TraceSet, expand_inputs, logs_traceset

log = logging.getLogger(__name__)


class LogFollower:
    """A folder (or files) of growing NCCL Inspector logs, read incrementally."""

    def __init__(self, paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]], *,
                 rank_from: str = "file", salvage: bool = False) -> None:
        self.paths = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
        self.rank_from = rank_from
        self.salvage = salvage
        self.read: dict[str, LoggedCollectives] = {}
        #: bytes read by the last refresh (new bytes only, for files read before)
        self.last_bytes_read = 0

    def refresh(self) -> TraceSet:
        """Read what was appended since the last call (new files whole); the TraceSet of all."""
        logs: list[Any] = []
        self.last_bytes_read = 0
        for path, rank in expand_inputs(self.paths, self.rank_from):
            if reader_for(path) is not INSPECTOR:
                raise InputError(f"{path}: not an NCCL Inspector log; LogFollower reads Inspector logs only")
            got = read_log(path, salvage=self.salvage, rank=rank, since=self.read.get(str(path)))
            self.read[str(path)] = got
            self.last_bytes_read += int(got.info["bytes_read_now"])
            logs.append(got)
        log.info("refreshed %d Inspector log(s): %d new byte(s) read", len(logs), self.last_bytes_read)
        return logs_traceset(logs)
