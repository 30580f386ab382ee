"""Atomic file output and table I/O by file extension.

Every output of evtsync goes through here so that a crash or a kill never leaves half a
file: data are written to a temporary file in the destination folder, flushed, then
renamed over the destination (an atomic operation on POSIX file systems).
"""

from __future__ import annotations

import contextlib
import contextvars
import datetime
import errno
import hashlib
import math
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evtsync.core.errors import InputError, OutputError

# pandas at its first use: this module is read by every command (the output checks of the
# command line run before any work), and most outputs are not tables (issue 30)
from evtsync.core.lazy import pd

TABLE_SUFFIXES = (".parquet", ".csv", ".csv.gz")
#: Every temporary file of :func:`atomic_path` ends so (``.NAME.XXXXXXXX.evtsync.tmp``): the
#: run engine removes leftovers of killed runs by this mark only, never a user's ``*.tmp``.
TEMP_SUFFIX = ".evtsync.tmp"


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: Outputs written inside :func:`all_or_nothing`: (temporary, destination) pairs renamed together
#: when it ends, or removed together when it fails.
_PENDING: contextvars.ContextVar[list[tuple[Path, Path]] | None] = contextvars.ContextVar(
    "evtsync_pending_outputs", default=None)


def one_line_reason(exc: OSError) -> str:
    """The system's reason for an OS error on one line (HDF5's messages span several)."""
    if exc.errno:
        return os.strerror(exc.errno)
    text = str(exc.strerror or exc or type(exc).__name__)
    return " ".join(text.split())


def output_error(dest: Path, exc: OSError) -> OutputError:
    """The one-line error of an output that could not be written (disk full, permission, I/O)."""
    reason = one_line_reason(exc)
    errno_name = f", {errno.errorcode[exc.errno]}" if exc.errno is not None and exc.errno in errno.errorcode else ""
    together = "; none of this command's outputs were written" if _PENDING.get() is not None else \
        "; it was not written (an earlier file of that name is unchanged)"
    return OutputError(f"{dest}: cannot write: {reason}{errno_name}{together}")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` on success.

    On any exception the temporary file is removed and ``path`` is left untouched; an
    :class:`OSError` (disk full, permission, I/O error) becomes an :class:`OutputError` naming
    ``path``. Inside :func:`all_or_nothing` the rename waits for the end of that block.
    """
    dest = Path(path)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=TEMP_SUFFIX, dir=dest.parent)
    except OSError as exc:
        raise output_error(dest, exc) from exc
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; outputs get the usual mode
    finally:
        os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        pending = _PENDING.get()
        if pending is None:
            os.replace(tmp, dest)
        else:
            pending.append((tmp, dest))
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise output_error(dest, exc) from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def all_or_nothing() -> Iterator[None]:
    """Make the outputs written inside (through :func:`atomic_path`) appear together at the end,
    or, if anything fails (a full disk at the third table), none of them: a command's set of
    outputs is never half-written."""
    pending: list[tuple[Path, Path]] = []
    token = _PENDING.set(pending)
    try:
        yield
    except BaseException:
        for tmp, _ in pending:
            tmp.unlink(missing_ok=True)
        raise
    finally:
        _PENDING.reset(token)
    for i, (tmp, dest) in enumerate(pending):
        try:
            os.replace(tmp, dest)
        except OSError as exc:
            for left, _ in pending[i:]:
                left.unlink(missing_ok=True)
            raise output_error(dest, exc) from exc


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically and return the path."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically and return the path."""
    return write_bytes_atomic(path, text.encode("utf-8"))


def table_format(path: str | os.PathLike[str]) -> str:
    """Return ``"parquet"`` or ``"csv"`` from the file name, or raise ``InputError``."""
    name = str(path).lower()
    if name.endswith(".parquet") or name.endswith(".pq"):
        return "parquet"
    if name.endswith(".csv") or name.endswith(".csv.gz"):
        return "csv"
    raise InputError(f"{path}: unknown table format; expected a name ending in .parquet or .csv")


def write_table(table: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Write a DataFrame atomically as Parquet or CSV, chosen by the file's extension."""
    fmt = table_format(path)
    with atomic_path(path) as tmp:
        if fmt == "parquet":
            table.to_parquet(tmp, index=False)
        else:
            compression = "gzip" if str(path).lower().endswith(".gz") else None
            table.to_csv(tmp, index=False, compression=compression)
    return Path(path)


def read_table(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a Parquet or CSV table; a missing or unreadable file raises ``InputError``."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such file")
    fmt = table_format(p)
    try:
        if fmt == "parquet":
            return pd.read_parquet(p)
        return pd.read_csv(p)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise InputError(f"{p}: cannot read as {fmt}: {exc}") from exc


def file_sha256(path: str | os.PathLike[str], chunk_size: int = 1 << 22) -> str:
    """Content hash of a file, read in chunks (used for provenance and stage caching)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


class Rows:
    """A small table without pandas, held as one list per column, read as the few ``DataFrame``
    methods a report uses (``len``, ``empty``, a column, ``itertuples``, ``head``) and printed by
    :func:`json_ready` as ``DataFrame.to_dict(orient="records")`` prints a frame: what a command
    prints from NumPy results when no table is written (the Inspector tax, issue 48).
    :meth:`to_frame` is the pandas table of the same rows."""

    def __init__(self, columns: list[str], rows: list[dict[str, Any]]) -> None:
        self.data: dict[str, list[Any]] = {c: [row[c] for row in rows] for c in columns}

    @classmethod
    def from_columns(cls, columns: dict[str, list[Any]]) -> Rows:
        """Rows from equal-length lists, one per column (kept, not copied)."""
        if len({len(v) for v in columns.values()}) > 1:
            raise ValueError("columns of different lengths")
        out = cls([], [])
        out.data = dict(columns)
        return out

    @property
    def columns(self) -> list[str]:
        """The column names, in order."""
        return list(self.data)

    def __len__(self) -> int:
        return len(next(iter(self.data.values()), ()))

    @property
    def empty(self) -> bool:
        """No row."""
        return not len(self)

    def __getitem__(self, column: str) -> Any:
        """A column as a NumPy array."""
        import numpy as np

        return np.asarray(self.data[column])

    def itertuples(self) -> Iterator[Any]:
        """Each row as a named tuple of its columns."""
        from collections import namedtuple

        row_type = namedtuple("Row", self.columns)  # type: ignore[misc]  # noqa: PYI024
        return (row_type(*values) for values in zip(*self.data.values(), strict=True))

    def head(self, n: int) -> Rows:
        """The first ``n`` rows."""
        return Rows.from_columns({c: v[:n] for c, v in self.data.items()})

    def records(self) -> list[dict[str, Any]]:
        """The rows as dicts, in column order."""
        names = self.columns
        return [dict(zip(names, values, strict=True)) for values in zip(*self.data.values(), strict=True)]

    def to_frame(self) -> pd.DataFrame:
        """The pandas table of these rows."""
        return pd.DataFrame(self.records(), columns=self.columns)


def json_ready(value: Any) -> Any:
    """``value`` made of JSON types only, recursively: NumPy scalars and arrays as Python ones,
    paths and datetimes as strings, DataFrames as lists of records, and every missing value
    (NaN, ±inf, ``None``, ``pd.NA``, ``NaT``) as ``None``.

    The one JSON cleaner: ``json.dumps(json_ready(x), allow_nan=False)`` always succeeds for
    the package's records (tables' rows, manifests, summaries); a type it does not know is left
    as it is, so that :func:`json_text` refuses it instead of printing its ``str``.
    """
    if isinstance(value, dict):
        return {str(k): json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    if isinstance(value, set | frozenset):
        return [json_ready(v) for v in sorted(value, key=str)]
    if isinstance(value, Rows):
        return json_ready(value.records())
    pandas = sys.modules.get("pandas")  # a value cannot be a pandas object unless pandas is loaded:
    if pandas is not None:              # small commands print JSON without importing it (issue 30)
        if isinstance(value, pandas.DataFrame):
            return json_ready(value.to_dict(orient="records"))
        if isinstance(value, pandas.Series):
            return json_ready(value.to_list())
        if value is pandas.NA or value is pandas.NaT:
            return None
        if isinstance(value, pandas.Timestamp):
            return value.isoformat()
        if isinstance(value, pandas.Timedelta):
            return value.total_seconds()
    if hasattr(value, "tolist") and hasattr(value, "dtype") and getattr(value, "ndim", 0) >= 1:
        return json_ready(value.tolist())  # a NumPy array
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if hasattr(value, "item") and hasattr(value, "dtype") and getattr(value, "ndim", 1) == 0:
        value = value.item()  # a NumPy scalar
        if isinstance(value, datetime.datetime | datetime.date):
            return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def json_text(value: Any, indent: int | None = 2) -> str:
    """Strict JSON text of ``value`` (:func:`json_ready` first): missing values are ``null``, never
    a bare ``NaN`` or ``Infinity``, and a value of an unknown type raises ``TypeError`` rather than
    being written as its ``str`` (no ``default=str``)."""
    import json

    return json.dumps(json_ready(value), indent=indent, allow_nan=False, ensure_ascii=False)


def _writable_place(path: Path, option: str, what: str, shown: Path | None = None) -> None:
    """``path`` (absent) can be created: its nearest existing ancestor is a writable folder."""
    parent = path
    while not parent.exists():
        if parent.parent == parent:
            break
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"{option} {shown or path}: {parent} is a file, not a folder; choose another {what}")
    if not os.access(parent, os.W_OK | os.X_OK) or not _can_create_in(parent):
        raise InputError(f"{option} {shown or path}: cannot write in {parent}; choose another {what}")


def _can_create_in(folder: Path) -> bool:
    """Whether a file can really be created in ``folder`` (``os.access`` says yes to root even
    under ``/proc``): a probe file of this process, removed at once."""
    import tempfile

    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".evtsync-probe-", suffix=".evtsync.tmp")
    except OSError:
        return False
    os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(name)
    return True


def check_output_dir(path: str | os.PathLike[str], option: str = "--out") -> Path:
    """Refuse, before any work, an output folder that is a file or cannot be created or written."""
    p = Path(path)
    if p.exists():
        if not p.is_dir():
            raise InputError(f"{option} {p}: is an existing file, not a folder; choose another output folder")
        if not os.access(p, os.W_OK | os.X_OK) or not _can_create_in(p):
            raise InputError(f"{option} {p}: cannot write in this folder")
        return p
    _writable_place(p, option, "output folder")
    return p


def check_output_file(path: str | os.PathLike[str], option: str = "-o") -> Path:
    """Refuse, before any work, an output file that is a folder or whose folder cannot be written."""
    p = Path(path)
    if p.is_dir():
        raise InputError(f"{option} {p}: is a folder; give a file name")
    if p.exists() and not os.access(p, os.W_OK):
        raise InputError(f"{option} {p}: cannot overwrite this file (permission denied)")
    _writable_place(p.parent if str(p.parent) else Path("."), option, "output file", shown=p)
    return p
