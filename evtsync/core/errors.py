"""The package's own exceptions, and the words their messages use for a path that is not what
was expected (:func:`path_problem`, :func:`describe_start`).

Every error a user can cause with bad input is an ``EvtsyncError`` whose message is one
line naming the file, rank, process group or line at fault and what was expected. The CLI
prints that line and exits non-zero without a traceback.
"""

from __future__ import annotations

import os


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


def path_problem(path: str | os.PathLike[str], expected: str = "file") -> str:
    """Why ``path`` is not a readable regular ``expected`` (``file``, ``file or folder``), in words
    for an error message: absent, a link to nothing, or the kind of thing it is instead
    (``/dev/null`` is a character device, not a missing file)."""
    import stat

    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        if os.path.islink(path):
            return f"a symbolic link to {os.fspath(os.readlink(path))!r}, which does not exist"
        return f"no such {expected}"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file"))
    kind = next((name for test, name in kinds if test(mode)), "not a regular file")
    return f"{kind}, not a regular {expected}" if kind != "a folder" else f"a folder, not a {expected}"


def describe_start(head: bytes) -> str:
    """What a file's first bytes are, in words for an error message (``starts with 100 zero
    bytes``, ``starts with b'hello'``, ``is empty``)."""
    if not head:
        return "is empty"
    if not head.strip(b"\x00"):
        return f"starts with {len(head)} zero bytes (a zeroed or never-written header)"
    return f"starts with {head[:24]!r}"
