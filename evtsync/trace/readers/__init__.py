"""One reader per trace source, behind one protocol, and the registry that picks them.

A reader says which file names it expects (``suffixes``), recognises its content from the
first bytes of a file (``sniff``: the decision is by content, the suffix only breaks ties
and names the error when nothing recognises a file), reads one file (``read``) and says
how much work a file is (``cost``, bytes to decode, for scheduling). ``produces`` is what
``read`` returns:

- ``"ranks"``: one rank's :class:`~evtsync.trace.tables.RankTables`, the same tables for
  every source (Kineto JSON traces, Nsight Systems SQLite exports);
- ``"collectives"``: one process's table of logged collectives (NCCL Inspector), the
  collective table the tax is computed from (see
  :func:`evtsync.trace.readers.inspector.assemble_logs`).

A new source is one module with a reader object plus one line in :data:`READERS`.
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from evtsync.core.errors import TraceError

if TYPE_CHECKING:
    from evtsync.trace.tables import RankTables

#: Bytes read from the start of a file (decompressed) to recognise its content.
SNIFF_BYTES = 1 << 12


class Reader(Protocol):
    """What every trace source provides (see the module docstring)."""

    name: str
    description: str
    suffixes: tuple[str, ...]
    produces: str

    def sniff(self, head: bytes) -> bool:
        """Whether these first bytes (decompressed) are this source's content."""
        ...

    def read(self, path: str | os.PathLike[str], *, salvage: bool = False, rank: int | None = None,
             rank_from: str | None = None) -> Any:
        """Read one file: RankTables (``produces == "ranks"``) or a collective log; ``rank_from``
        is ``--rank-from`` for readers that find a rank in the content (``nvtx:REGEX``)."""
        ...

    def cost(self, path: str | os.PathLike[str]) -> int:
        """Bytes of input the reading of ``path`` handles (for scheduling and ``auto`` rules)."""
        ...


def _registry() -> tuple[Reader, ...]:
    from evtsync.trace.readers.inspector import INSPECTOR
    from evtsync.trace.readers.kineto import KINETO
    from evtsync.trace.readers.nsys import NSYS

    # one line per source; order = sniffing order (the most specific content first)
    return (NSYS, INSPECTOR, KINETO)


_READERS: tuple[Reader, ...] | None = None


def readers() -> tuple[Reader, ...]:
    """The registered readers, in sniffing order."""
    global _READERS
    if _READERS is None:
        _READERS = _registry()
    return _READERS


def reader_named(name: str) -> Reader:
    """The reader of that ``name`` (``kineto``, ``nccl-inspector``, ``nsys``)."""
    for reader in readers():
        if reader.name == name:
            return reader
    raise KeyError(name)


def all_suffixes() -> tuple[str, ...]:
    """Every file suffix some reader expects (lower case)."""
    return tuple(s for reader in readers() for s in reader.suffixes)


def suffix_reader(path: Path) -> Reader | None:
    """The reader whose suffix the file name has (the longest match), or None."""
    name = path.name.lower()
    best: tuple[int, Reader] | None = None
    for reader in readers():
        for suffix in reader.suffixes:
            if name.endswith(suffix) and (best is None or len(suffix) > best[0]):
                best = (len(suffix), reader)
    return best[1] if best else None


def head_bytes(path: str | os.PathLike[str], size: int = SNIFF_BYTES) -> bytes:
    """The first ``size`` bytes of a file, decompressed if it is gzip (b"" if unreadable)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(size)
            if not raw.startswith(b"\x1f\x8b"):
                return raw
            fh.seek(0)
            inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = b""
            while len(out) < size:
                chunk = fh.read(1 << 14)
                if not chunk:
                    break
                out += inflater.decompress(chunk, size - len(out))
            return out
    except (OSError, zlib.error, gzip.BadGzipFile):
        return b""


def sniff_reader(path: str | os.PathLike[str]) -> Reader | None:
    """The reader that recognises the file's content, or None."""
    head = head_bytes(path)
    if not head:
        return None
    for reader in readers():
        if reader.sniff(head):
            return reader
    return None


def reader_for(path: str | os.PathLike[str]) -> Reader:
    """The reader of one file, by content; a file nothing recognises goes to the reader of
    its suffix (whose own error then says what is wrong), else a :class:`TraceError`."""
    path = Path(path)
    found = sniff_reader(path)
    if found is not None:
        return found
    by_suffix = suffix_reader(path)
    if by_suffix is not None:
        return by_suffix
    known = ", ".join(f"{r.description} ({', '.join(r.suffixes)})" for r in readers())
    raise TraceError(f"{path}: not a trace evtsync can read: its content is none of {known}")


def read_rank(path: str | os.PathLike[str], salvage: bool = False, rank: int | None = None,
              rank_from: str | None = None) -> RankTables:
    """Read one trace file into its rank's tables (the unit of parallel work) with the
    reader its content calls for (the registry above); ``rank`` is the user's
    word for its rank, if any; ``rank_from`` a ``nvtx:REGEX`` for readers that use it."""
    reader = reader_for(path)
    if reader.produces != "ranks":
        raise TraceError(f"{path}: {reader.description} hold collective timings, not a rank's timeline: "
                         "read them with load_traces (or evtsync tax)")
    return reader.read(path, salvage=salvage, rank=rank, rank_from=rank_from)
