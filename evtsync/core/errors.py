"""The package's own exceptions.

Every error a user can cause with bad input is an ``EvtsyncError`` whose message is one
line naming the file, rank, process group or line at fault and what was expected. The CLI
prints that line and exits non-zero without a traceback.
"""

from __future__ import annotations


class EvtsyncError(Exception):
    """Base class of all user-facing errors of evtsync."""

    exit_code: int = 2


class TraceError(EvtsyncError):
    """A trace file is unreadable, truncated, not a Kineto trace, or inconsistent."""


class AlignmentError(EvtsyncError):
    """Collectives of a process group cannot be matched across its member ranks."""


class InputError(EvtsyncError):
    """A table, option or data file given by the user is not what was expected."""


class OutputError(EvtsyncError):
    """An output could not be written (disk full, no permission, I/O error): nothing half-written
    is left, and the message names the file and the system's reason."""


class NcclTestsError(EvtsyncError):
    """An nccl-tests log cannot be turned into a table of measurements."""


class ModelSpecError(EvtsyncError):
    """A model specification (models/*.toml) is invalid."""


class FitError(EvtsyncError):
    """A fit could not be computed or loaded."""
