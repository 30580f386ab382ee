"""Atomic file output and table I/O by file extension.

Every output of evtsync goes through here so that a crash or a kill never leaves half a
file: data are written to a temporary file in the destination folder, flushed, then
renamed over the destination (an atomic operation on POSIX file systems).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pandas as pd

from evtsync.errors import InputError

TABLE_SUFFIXES = (".parquet", ".csv", ".csv.gz")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` on success.

    On any exception the temporary file is removed and ``path`` is left untouched.
    """
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
