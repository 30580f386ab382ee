"""Streaming decoder of one Kineto trace file into compact typed columns.

The file is read in blocks (plain, or gzip inflated with ISA-L when ``isal`` is installed).
Each block is split after its last complete event and decoded with msgspec into structs
holding only the fields evtsync uses (msgspec skips the rest without building objects;
events of phases other than complete ``"X"`` events keep only their category), which are
turned into numpy arrays at once (integers as int64, strings as int32 codes into one
per-process dictionary of unique strings) and dropped. Peak memory is therefore bounded by
one block's structs plus the compact columns of the events kept, never by the whole JSON
text or a list of Python objects per event; the columns are concatenated at the end.

Where a block is split: the fast path takes the last ``}``, ``,``, ``{`` separator of the
block and lets msgspec check the cut: ``[`` + text before it + ``]`` parses as an array of
objects only when the cut lies between two top-level events (a cut inside a string or a
nested value leaves an unterminated string or bracket, which msgspec rejects). When that
fails, and for the last block, a vectorised structural scan (numpy) that tracks strings,
escapes and nesting finds every event end exactly, and the errors of malformed input come
from that scan.

Each block is first given to the compiled scanner (:mod:`evtsync.trace.scan`), which writes
the fields straight into numpy arrays (no Python object per event) and declines any block
outside its strict grammar; declined blocks, and every block under ``EVTSYNC_DECODER=msgspec``
or where the scanner cannot load, take the msgspec path above, with the same result.

A file cut in the middle (a job killed while writing) is detected with the byte offset
of the cut; with ``salvage=True`` the complete events before it are kept and the rest is
counted as dropped.
"""

from __future__ import annotations

import contextlib
import functools
import io
import logging
import os
import re
import sys
import threading
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Union

import msgspec
import numpy as np

if TYPE_CHECKING:
    import pandas as pd
else:  # pandas at its first use: the Inspector tax reads its logs without it (issue 48)
    from evtsync.core.lazy import pd

from evtsync.core.errors import TraceError, path_problem
from evtsync.core.parallel import Work
from evtsync.trace import scan
from evtsync.trace.schema import (
    CPU_CATEGORIES,
    GPU_CATEGORIES,
    RUNTIME_CATEGORIES,
    SYNC_CATEGORIES,
    Scalar,
    canonical_category,
)

try:  # ISA-L inflates gzip ~3x faster than zlib, with zlib's API (python-isal)
    from isal import isal_zlib as _inflate_lib
except ImportError:  # pragma: no cover - isal is a dependency; zlib keeps a bare install working
    _inflate_lib = zlib  # type: ignore[misc]  # isal_zlib has zlib's API

log = logging.getLogger(__name__)
#: What a corrupt gzip stream raises, from either inflater.
_INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, _inflate_lib.error)  # type: ignore[assignment]  # isal's stubs type error as an instance

#: Bytes decoded per msgspec call: small enough that one block's structs stay in the CPU
#: caches while their fields are pulled out column by column (1 MiB measured fastest,
#: 1.7x faster than 16 MiB blocks on a 128 MB trace; docs/performance/reading.md).
BLOCK_SIZE = 1 << 20
MISSING = -1
_TRACE_EVENTS_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_SEPARATOR_RE = re.compile(rb"\}\s*,\s*\{")
#: The fast split looks for the last event separator in these many trailing bytes.
_SEPARATOR_WINDOWS = (1 << 14, 1 << 20)
_QUOTE, _BACKSLASH = 34, 92
_TRAILING_INT = re.compile(r"(?:^|\s)(-?\d+)$")
_OPEN_BRACE, _CLOSE_BRACE, _OPEN_BRACKET, _CLOSE_BRACKET = 123, 125, 91, 93
_header_decoder = msgspec.json.Decoder()


class _Args(msgspec.Struct, gc=False):
    """The ``args`` object of an event, reduced to the keys evtsync reads.

    An absent integer argument decodes straight to the missing value -1, so the common
    column of plain integers converts to numpy in C.
    """

    external_id: Scalar = msgspec.field(default=MISSING, name="External id")
    #: PyTorch 1.8's Kineto wrote the key in lower case on GPU and runtime events
    external_id_lower: Scalar = msgspec.field(default=MISSING, name="external id")
    correlation: Scalar = MISSING
    device: Scalar = MISSING
    stream: Scalar = MISSING
    collective_name: Scalar = msgspec.field(default=None, name="Collective name")
    in_nelems: Scalar = msgspec.field(default=MISSING, name="In msg nelems")
    out_nelems: Scalar = msgspec.field(default=MISSING, name="Out msg nelems")
    group_size: Scalar = msgspec.field(default=MISSING, name="Group size")
    dtype: Scalar = None
    pg_name: Scalar = msgspec.field(default=None, name="Process Group Name")
    pg_desc: Scalar = msgspec.field(default=None, name="Process Group Description")
    pg_ranks: Scalar = msgspec.field(default=None, name="Process Group Ranks")
    seq: Scalar = msgspec.field(default=MISSING, name="Sequence number")
    wait_on_stream: Scalar = MISSING
    wait_on_event_corr: Scalar = msgspec.field(default=MISSING, name="wait_on_cuda_event_record_corr_id")
    sync_kind: Scalar = msgspec.field(default=None, name="cuda_sync_kind")


_EMPTY_ARGS = _Args()  # shared by every event without args (never modified)


class _EventBody(msgspec.Struct, gc=False):
    """The keys evtsync reads from a trace event, other than its phase ``ph``."""

    cat: str | None = None
    name: str = ""
    pid: int | str | None = MISSING
    tid: int | str | None = MISSING
    ts: int | float | None = None
    dur: int | float | None = None
    args: _Args | None = msgspec.field(default_factory=lambda: _EMPTY_ARGS)


class _Event(_EventBody, gc=False):
    """One trace event of any (or no) phase: the permissive decoding of a block."""

    ph: str = ""


class _Complete(_EventBody, tag_field="ph", tag="X", gc=False):
    """A complete event (``"ph": "X"``): the only phase whose events evtsync keeps."""


class _OtherPhase(msgspec.Struct, tag_field="ph", gc=False):
    """An event of another phase: only its category is decoded (it is counted, not kept)."""

    cat: str | None = None


#: Every phase of the Chrome trace event format other than "X"; an event of an unknown
#: phase, or without ``ph``, sends its block to the permissive decoder instead.
_OTHER_PHASES = "BEiIbneSTpFstfPNODMVvRcC()"
_PHASED_TYPES = (_Complete, *(msgspec.defstruct(f"_Phase{i}", [], bases=(_OtherPhase,), tag=ph, gc=False)
                              for i, ph in enumerate(_OTHER_PHASES)))
#: Decodes a block with the events of skipped phases reduced to their category: in a
#: profiler trace ~40% of the events are flows (ac2g) and instants, whose names and args
#: are then never built as Python objects.
_phased_decoder = msgspec.json.Decoder(list[Union[_PHASED_TYPES]])  # type: ignore[valid-type]  # noqa: UP007 - a runtime tuple
_decoder = msgspec.json.Decoder(list[_Event])

#: Column layout of each raw table, in order. ``s`` = string (categorical), ``i`` = int64
#: with -1 for missing, ``t`` = time in µs (int64, or float64 when the file has fractional
#: times), ``o`` = loose scalar made a string (categorical).
TABLE_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "gpu": (("cat", "s"), ("name", "s"), ("pid", "i"), ("tid", "i"), ("ts", "t"), ("dur", "t"),
            ("device", "i"), ("stream", "i"), ("correlation", "i"), ("external_id", "i"),
            ("collective_name", "o"), ("in_nelems", "i"), ("out_nelems", "i"),
            ("group_size", "i"), ("dtype", "o"), ("pg_name", "o"), ("pg_desc", "o"),
            ("pg_ranks", "o")),
    "cpu": (("cat", "s"), ("name", "s"), ("pid", "i"), ("tid", "i"), ("ts", "t"), ("dur", "t"),
            ("external_id", "i"), ("seq", "i"), ("collective_name", "o"), ("in_nelems", "i"),
            ("out_nelems", "i"), ("group_size", "i"), ("dtype", "o"), ("pg_name", "o"),
            ("pg_desc", "o"), ("pg_ranks", "o")),
    "runtime": (("cat", "s"), ("name", "s"), ("pid", "i"), ("tid", "i"), ("ts", "t"),
                ("dur", "t"), ("correlation", "i"), ("external_id", "i"), ("stream", "i")),
    "sync": (("name", "s"), ("pid", "i"), ("tid", "i"), ("ts", "t"), ("dur", "t"),
             ("device", "i"), ("stream", "i"), ("correlation", "i"), ("external_id", "i"),
             ("wait_on_stream", "i"), ("wait_on_event_corr", "i"), ("sync_kind", "o")),
}
_TABLES = tuple(TABLE_FIELDS)
_TABLE_OF_CATEGORY: dict[str | None, int] = {
    **{c: _TABLES.index("gpu") for c in GPU_CATEGORIES},
    **{c: _TABLES.index("cpu") for c in CPU_CATEGORIES},
    **{c: _TABLES.index("runtime") for c in RUNTIME_CATEGORIES},
    **{c: _TABLES.index("sync") for c in SYNC_CATEGORIES},
}
_NO_TABLE = len(_TABLES)


def _table_of(category: str | None) -> int:
    """Table code of a category in any spelling (old names, any case); ``_NO_TABLE`` if none."""
    return _TABLE_OF_CATEGORY.get(canonical_category(category), _NO_TABLE)
_NUMBER_TYPES = frozenset({int, float})

#: One list comprehension per field: in CPython 3.12 a comprehension reading a struct
#: attribute is 2-4x faster than ``map(operator.attrgetter(...))`` (specialised attribute
#: loads, no call per item), which matters because every field of every event passes here.
_EVENT_VALUES: dict[str, Callable[[Sequence[_Event]], list[Any]]] = {
    "cat": lambda evs: [e.cat for e in evs],
    "name": lambda evs: [e.name for e in evs],
    "pid": lambda evs: [e.pid for e in evs],
    "tid": lambda evs: [e.tid for e in evs],
    "ts": lambda evs: [e.ts for e in evs],
    "dur": lambda evs: [e.dur for e in evs],
}

#: The same for the keys of ``args``, over the list of the events' ``args`` structs (one
#: attribute load per value instead of two).
_ARG_VALUES: dict[str, Callable[[Sequence[_Args]], list[Any]]] = {
    "external_id": lambda args: [a.external_id for a in args],
    "correlation": lambda args: [a.correlation for a in args],
    "device": lambda args: [a.device for a in args],
    "stream": lambda args: [a.stream for a in args],
    "collective_name": lambda args: [a.collective_name for a in args],
    "in_nelems": lambda args: [a.in_nelems for a in args],
    "out_nelems": lambda args: [a.out_nelems for a in args],
    "group_size": lambda args: [a.group_size for a in args],
    "dtype": lambda args: [a.dtype for a in args],
    "pg_name": lambda args: [a.pg_name for a in args],
    "pg_desc": lambda args: [a.pg_desc for a in args],
    "pg_ranks": lambda args: [a.pg_ranks for a in args],
    "seq": lambda args: [a.seq for a in args],
    "wait_on_stream": lambda args: [a.wait_on_stream for a in args],
    "wait_on_event_corr": lambda args: [a.wait_on_event_corr for a in args],
    "sync_kind": lambda args: [a.sync_kind for a in args],
}

@dataclass
class DecodedTrace:
    """What one file decodes to: the top-level header and typed columns per table.

    ``columns[table][name]`` is an int64 array (``i``), an int64 or float64 array of µs
    (``t``) or a :class:`pandas.Categorical` with sorted categories (``s``, ``o``).
    """

    path: Path
    header: dict[str, Any]
    columns: dict[str, dict[str, Any]]
    category_counts: dict[str, int] = field(default_factory=dict)
    #: events that went to no table, by (phase, category as written): ``("M", "(none)")``
    #: metadata, ``("s", "ac2g")`` flows, ``("X", "Trace")`` the profiler's own range, ...
    untabulated: dict[tuple[str, str], int] = field(default_factory=dict)
    n_events: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    truncated_at: int | None = None
    dropped_bytes: int = 0
    bytes_read: int = 0


_thread_buffers = threading.local()


def _plain_buffer(size: int = BLOCK_SIZE) -> bytearray:
    """A read buffer of ``size`` bytes kept by this thread for the files it reads next: a
    fresh 1 MiB buffer per file, with the heap trimmed after each, page-faulted ~0.5 ms of
    system time into every 1 MB rank file (issue 21). Only the default block size is kept."""
    buffer = getattr(_thread_buffers, "plain", None)
    if buffer is not None and len(buffer) == size:
        return buffer
    buffer = bytearray(size)
    if size == BLOCK_SIZE:
        _thread_buffers.plain = buffer
    return buffer


class _Source:
    """Blocks of decompressed bytes from a plain or gzip file, with clear errors.

    Gzip is inflated with zlib directly (multi-member files included) so that the data
    before a truncation or corruption point is still delivered and the error is recorded
    in ``eof_error`` instead of losing the last block.
    """

    #: Compressed bytes per zlib call: ~70 KB of JSON out at Kineto's ~18x ratio, below
    #: malloc's mmap threshold, so inflated pieces reuse heap memory instead of mapping
    #: (and page-faulting) fresh memory for every block.
    RAW_CHUNK = 1 << 12

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        # unbuffered: plain files are read in blocks of their own (a buffer per open file, 4-8 KiB,
        # is memory that grows with the files a streaming reader holds open: issue 48); gzip
        # input is read in small pieces, through a buffer
        self._raw: Any = open(path, "rb", buffering=0)  # noqa: SIM115 - closed in close()
        self.gzip = self._raw.read(2) == b"\x1f\x8b"
        self._raw.seek(0)
        if self.gzip:
            self._raw = io.BufferedReader(self._raw)
        self._inflater = _inflate_lib.decompressobj(wbits=31) if self.gzip else None
        self._buffer = b""
        self._raw_done = False
        self._fresh_member = False  # a gzip member just ended: EOF here is a clean end
        self._later_member = False  # the current member follows a complete one
        self._member_in = self._member_out = 0  # compressed bytes fed to / inflated from it
        self._inflated = 0  # decompressed bytes produced so far (the offsets of gzip errors)
        self._plain = _plain_buffer()  # read buffer of plain files, reused by the thread
        self.eof_error: str | None = None

    def _inflate_more(self) -> bytes:
        """The next piece of inflated data; b"" at the end (``eof_error`` says if it was clean).

        After a complete member, NUL padding is skipped (as gzip(1) and Python's gzip do);
        any other bytes must start a new member.
        """
        assert self._inflater is not None
        pending = b""
        while True:
            if self._inflater.eof:
                pending = self._inflater.unused_data + pending
                self._inflater = _inflate_lib.decompressobj(wbits=31)
                self._later_member, self._member_in, self._member_out = True, 0, 0
                self._fresh_member = True
            if not pending:
                pending = self._raw.read(self.RAW_CHUNK)
                if not pending:
                    self._raw_done = True
                    if not self._fresh_member:
                        self.eof_error = self._end_error()
                    return b""
            if self._fresh_member and self._later_member:
                pending = pending.lstrip(b"\0")  # padding between or after members
                if not pending:
                    continue
            self._fresh_member = False
            self._member_in += len(pending)
            try:
                out = self._inflater.decompress(pending)
            except _INFLATE_ERRORS as exc:
                self.eof_error = f"corrupt gzip data after {self._inflated} decompressed bytes ({exc})"
                self._raw_done = True
                return b""
            pending = b""
            if out:
                self._member_out += len(out)
                self._inflated += len(out)
                return out

    def _end_error(self) -> str:
        """Why the data ended inside a gzip member."""
        if self._later_member and not self._member_out:
            return (f"{self._member_in} byte(s) after the last complete gzip member (after "
                    f"{self._inflated} decompressed bytes) are not a complete gzip member "
                    "(trailing data, or a member cut short)")
        return f"gzip stream ends early (truncated file) after {self._inflated} decompressed bytes"

    def read(self, size: int) -> bytes:
        """At least ``size`` bytes unless the data end (gzip: possibly more); b"" at the end."""
        if self._inflater is None:
            data = self._raw.read(size)
        else:
            parts = [self._buffer]
            have = len(self._buffer)
            while have < size and not self._raw_done:
                more = self._inflate_more()
                parts.append(more)
                have += len(more)
            # whole inflated chunks: a block may run past ``size`` (no copy to split it)
            data = b"".join(parts) if len(parts) > 2 or parts[0] else parts[-1]
            self._buffer = b""
        self.offset += len(data)
        return data

    def read_into(self, target: bytearray, size: int) -> int:
        """Append at least ``size`` bytes to ``target`` unless the data end; bytes appended.

        No intermediate block-sized object is made: plain files are read into a reused
        buffer, gzip pieces are appended as they are inflated.
        """
        start = len(target)
        if self._inflater is None:
            if len(self._plain) != size:
                self._plain = _plain_buffer(size)
            n = self._raw.readinto(self._plain)
            with memoryview(self._plain) as view:
                target += view[:n]
        else:
            if self._buffer:
                target += self._buffer
                self._buffer = b""
            while len(target) - start < size and not self._raw_done:
                target += self._inflate_more()
        appended = len(target) - start
        self.offset += appended
        return appended

    def close(self) -> None:
        self._raw.close()


def _structural_scan(buf: bytes, in_array: bool) -> tuple[np.ndarray, int]:
    """Find event ends in ``buf`` that starts outside any string at array depth.

    Returns (positions of each ``}`` closing a top-level array element, position of the
    ``]`` closing the array or -1). Strings and escapes are honoured.
    """
    arr = np.frombuffer(buf, dtype=np.uint8)
    quotes = np.flatnonzero(arr == _QUOTE)
    backslashes = np.flatnonzero(arr == _BACKSLASH)
    if backslashes.size:
        escaped = _escaped_positions(backslashes)
        if escaped.size:
            quotes = quotes[~np.isin(quotes, escaped)]
    structural = np.flatnonzero(
        (arr == _OPEN_BRACE) | (arr == _CLOSE_BRACE) | (arr == _OPEN_BRACKET) | (arr == _CLOSE_BRACKET)
    )
    if quotes.size:
        inside = (np.searchsorted(quotes, structural) & 1).astype(bool)
        structural = structural[~inside]
    chars = arr[structural]
    delta = np.where((chars == _OPEN_BRACE) | (chars == _OPEN_BRACKET), 1, -1)
    depth = np.cumsum(delta)
    ends = structural[(chars == _CLOSE_BRACE) & (depth == 0)]
    close = structural[(chars == _CLOSE_BRACKET) & (depth == -1)]
    return ends, (int(close[0]) if close.size else -1)


def _escaped_positions(backslashes: np.ndarray) -> np.ndarray:
    """Positions of characters escaped by a backslash (runs of backslashes handled)."""
    escaped: list[int] = []
    prev = -2
    run_len = 0
    for pos in backslashes.tolist():
        if pos == prev + 1:
            run_len += 1
        else:
            if run_len % 2 == 1:
                escaped.append(prev + 1)
            run_len = 1
        prev = pos
    if run_len % 2 == 1:
        escaped.append(prev + 1)
    return np.asarray(escaped, dtype=np.int64)


def _as_int(value: Any) -> int:
    """One loose scalar as an int64 value, -1 when missing, non-numeric or out of range."""
    if isinstance(value, bool) or value is None:
        return MISSING
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else MISSING
    if isinstance(value, float):
        return int(value) if np.isfinite(value) else MISSING
    text = str(value).strip()
    try:
        return int(text)
    except ValueError:
        pass
    trailing = _TRAILING_INT.search(text)  # PyTorch 1.8 wrote GPU tids as "stream 7"
    return int(trailing.group(1)) if trailing else MISSING


def _int_array(values: list[Any]) -> np.ndarray:
    """Loose scalars as int64 with -1 for missing; the common all-int case stays in C."""
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except (TypeError, ValueError, OverflowError):
        return np.fromiter(map(_as_int, values), dtype=np.int64, count=len(values))


def _rows_holding(values: list[Any], absent: Any, present: int, rows: list[int] | None) -> list[int]:
    """Sorted positions that hold every one of the ``present`` values other than ``absent``
    (None, or -1 for integers) of ``values``: ``rows`` when they already do (the arguments
    of collectives sit on the same few events), else ``rows`` joined with this column's own."""
    if rows is not None:
        sub = [values[i] for i in rows]
        if len(sub) - sub.count(absent) == present:
            return rows
    if absent is None:
        own = [i for i, v in enumerate(values) if v is not None]
    else:
        own = [i for i, v in enumerate(values) if v != absent]
    return own if rows is None else sorted(set(rows).union(own))


class _StringCodes:
    """Unique strings -> int32 codes, shared by every file one process decodes: kernel and
    op names recur in every rank file of a job, and building a file's dictionary from
    nothing cost ~1 ms per 1 MB rank (issue 21). Codes are only ever added (under the lock)."""

    def __init__(self) -> None:
        self.code_of: dict[Any, int] = {None: MISSING}
        self.strings: list[str] = []
        self.lock = threading.Lock()
        #: the sorted categories of each set of codes met (the same few sets recur in every
        #: rank file of a job): used codes as bytes -> (dtype, rank of each used code)
        self.orders: dict[bytes, tuple[pd.CategoricalDtype, np.ndarray]] = {}


    def __len__(self) -> int:
        return len(self.strings)


#: Above this many strings the shared dictionary starts afresh (files being decoded keep
#: theirs), so traces whose names never repeat cannot grow it without bound.
_MAX_SHARED_STRINGS = 1 << 18
_process_shared: dict[type, Any] = {}


def _shared[T](kind: type[T], limit: int) -> T:
    """The one ``kind`` (string or event-key dictionary) of this process, started afresh once
    it holds more than ``limit`` entries; work under way keeps the one it took."""
    current = _process_shared.get(kind)
    if current is None or len(current) > limit:
        current = _process_shared[kind] = kind()
    return current


class _Columns:
    """Per-table column chunks of one file, and the (shared) dictionary of unique strings."""

    def __init__(self) -> None:
        shared = _shared(_StringCodes, _MAX_SHARED_STRINGS)
        self.code_of: dict[Any, int] = shared.code_of
        self.strings: list[str] = shared.strings
        self._lock = shared.lock
        self._orders = shared.orders
        self.chunks: dict[str, dict[str, list[np.ndarray]]] = {
            table: {name: [] for name, _ in fields} for table, fields in TABLE_FIELDS.items()}

    def codes(self, values: list[Any]) -> np.ndarray:
        """int32 codes of strings into the (per-process) string dictionary; -1 for None."""
        code_of = self.code_of
        try:
            return np.fromiter(map(code_of.__getitem__, values), dtype=np.int32, count=len(values))
        except KeyError:
            pass  # strings this process has not seen before (or non-string values): add them
        if any(not (v is None or isinstance(v, str)) for v in set(values)):
            values = [v if v is None or isinstance(v, str) else str(v) for v in values]
        with self._lock:  # the dictionary is shared by the threads of a process (Dask workers)
            for text in set(values).difference(code_of):
                code_of[text] = len(self.strings)
                self.strings.append(text)
        return np.fromiter(map(code_of.__getitem__, values), dtype=np.int32, count=len(values))

    def add(self, table: str, events: list[_Event], times: dict[str, np.ndarray], cats: np.ndarray) -> None:
        """Append one table's events of a block column-wise (``times``: ts/dur converted;
        ``cats``: the categories' codes, found per key by the router)."""
        chunks = self.chunks[table]
        n = len(events)
        args: list[Any] | None = None  # _Args, or None where a trace wrote "args": null (normalised below)
        rows: list[int] | None = None  # where the block's sparse arguments are (found once)
        for name, kind in TABLE_FIELDS[table]:
            if kind == "t":
                chunks[name].append(times[name])
                continue
            if name == "cat":
                chunks[name].append(cats)
                continue
            if name in _EVENT_VALUES:
                values = _EVENT_VALUES[name](events)
            else:
                if args is None:
                    args = [e.args for e in events]
                try:
                    values = _ARG_VALUES[name](args)
                except AttributeError:  # a trace wrote "args": null: no arguments, like absent ones
                    args = [_EMPTY_ARGS if a is None else a for a in args]
                    values = _ARG_VALUES[name](args)
            if kind == "s":
                column = self.codes(values)
            else:
                absent = None if kind == "o" else MISSING
                present = n - values.count(absent)
                if not present:  # an argument these events lack
                    column = np.full(n, MISSING, dtype=np.int32 if kind == "o" else np.int64)
                elif present * 4 <= n:  # few events carry it (PG fields, on collectives only)
                    rows = _rows_holding(values, absent, present, rows)
                    sub = [values[i] for i in rows]
                    column = np.full(n, MISSING, dtype=np.int32 if kind == "o" else np.int64)
                    column[rows] = self.codes(sub) if kind == "o" else _int_array(sub)
                else:
                    column = self.codes(values) if kind == "o" else _int_array(values)
            if name == "external_id":
                lacking = np.flatnonzero(column == MISSING)
                if lacking.size:  # PyTorch 1.8 spelled it "external id": read that key there
                    assert args is not None  # external_id is an argument: args were read above
                    column[lacking] = _int_array([args[i].external_id_lower for i in lacking.tolist()])
            chunks[name].append(column)

    def finish(self) -> dict[str, dict[str, Any]]:
        """Concatenate the chunks: arrays for numbers, sorted categoricals for strings.

        Categories come out in their canonical spelling (``Kernel`` -> ``kernel``,
        ``Memcpy`` -> ``gpu_memcpy``, see :func:`~evtsync.trace.schema.canonical_category`;
        the router codes them so), so every table reads the same whatever profiler
        generation wrote the file. A column of one chunk (a file of one block) is used as
        it is, not copied.
        """
        out: dict[str, dict[str, Any]] = {}
        for table, fields in TABLE_FIELDS.items():
            cols: dict[str, Any] = {}
            for name, kind in fields:
                parts = self.chunks[table][name]
                self.chunks[table][name] = []
                if kind == "t":
                    cols[name] = _concat_times(parts)
                elif kind == "i":
                    cols[name] = _concat_chunks(parts, np.int64)
                else:
                    cols[name] = _categorical(_concat_chunks(parts, np.int32), self.strings, self._orders)
            out[table] = cols
        return out


def _time_array(values: list[Any], path: Path, column: str) -> np.ndarray | None:
    """µs times of one block: int64, or float64 when any is a float; None if not all numbers."""
    types = set(map(type, values))
    if not _NUMBER_TYPES.issuperset(types):
        return None
    if float in types:
        return np.fromiter(values, dtype=np.float64, count=len(values))
    try:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    except OverflowError:
        raise TraceError(f"{path}: `{column}` values out of range for a timestamp in µs") from None


def _concat_chunks(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    """One column from its chunks (the chunk itself when there is one)."""
    if len(parts) == 1:
        return parts[0]
    return np.concatenate(parts) if parts else np.empty(0, dtype)


def _concat_times(parts: list[np.ndarray]) -> np.ndarray:
    """One time column; float64 throughout as soon as one block has fractional times."""
    if not parts:
        return np.empty(0, np.float64)
    if len(parts) == 1:
        return parts[0]
    if any(p.dtype == np.float64 for p in parts):
        return np.concatenate([p.astype(np.float64, copy=False) for p in parts])
    return np.concatenate(parts)


@functools.lru_cache(maxsize=4096)
def _string_dtype(categories: tuple[str, ...]) -> pd.CategoricalDtype:
    return pd.CategoricalDtype(pd.Index(list(categories), dtype="str"))


def string_dtype(categories: Sequence[str]) -> pd.CategoricalDtype:
    """The categorical dtype of these string categories (kept in this order), built once per
    process and shared: pandas' string Index costs ~0.1-0.2 ms to build, and the same few
    category lists recur in every rank file of a job (issue 21)."""
    return _string_dtype(tuple(categories))


#: Beyond this many entries the cache of category orders starts afresh.
_MAX_ORDERS = 1 << 12


def _categorical(codes: np.ndarray, strings: list[str],
                 orders: dict[bytes, tuple[pd.CategoricalDtype, np.ndarray]] | None = None) -> pd.Categorical:
    """Codes into the (shared) string dictionary -> Categorical with sorted categories.

    Work in the rows' codes only, never in the dictionary's size: the dictionary is shared
    by every file of the process and may hold far more strings than one file uses (entries
    are only appended, so reading those below a code is safe while other threads add).
    ``orders`` caches the sorted categories of each set of used codes (the dictionary's).
    """
    present = codes >= 0
    if not present.any():
        if len(codes):  # all missing: no category to type
            return pd.Categorical.from_codes(np.full(len(codes), -1, np.int8),
                                             categories=pd.Index([], dtype=np.float64))
        return pd.Categorical.from_codes(np.empty(0, np.int8), dtype=_empty_object_dtype(), validate=False)
    top = int(codes.max())
    if top <= 4 * len(codes) + 1024:  # a lookup table over the codes beats sorting them
        seen = np.zeros(top + 2, dtype=bool)
        seen[codes] = True  # code -1 (missing) marks the extra last entry
        used = np.flatnonzero(seen[:-1]).astype(codes.dtype, copy=False)
        inverse = None
    else:
        used, inverse = np.unique(codes[present], return_inverse=True)
    key = used.tobytes()
    cached = orders.get(key) if orders is not None else None
    if cached is None:
        names = [strings[c] for c in used.tolist()]
        order = sorted(range(len(names)), key=names.__getitem__)  # code-point order, as numpy sorts
        rank_of = np.empty(len(used), dtype=np.int32)
        rank_of[order] = np.arange(len(used), dtype=np.int32)
        cached = (string_dtype([names[i] for i in order]), rank_of)
        if orders is not None:
            if len(orders) > _MAX_ORDERS:
                orders.clear()
            orders[key] = cached
    dtype, rank_of = cached
    if inverse is None:
        lookup = np.full(top + 2, -1, dtype=np.int32)  # the last entry: code -1 stays missing
        lookup[used] = rank_of
        new_codes = lookup[codes]
    else:
        new_codes = np.full(len(codes), -1, dtype=np.int32)
        new_codes[present] = rank_of[inverse.ravel()]
    return pd.Categorical.from_codes(new_codes, dtype=dtype, validate=False)


@functools.cache
def _empty_object_dtype() -> pd.CategoricalDtype:
    """The categorical dtype of no categories (object), made once, at its first use."""
    return pd.CategoricalDtype(pd.Index([], dtype=object))


class _PhaseAndCategory(msgspec.Struct, gc=False):
    """The two keys every event is held to, whatever its phase."""

    ph: str = ""
    cat: str | None = None


_raw_decoder = msgspec.json.Decoder(list[msgspec.Raw])
_event_decoder = msgspec.json.Decoder(_Event)
_head_decoder = msgspec.json.Decoder(_PhaseAndCategory)


def _decode_events(data: bytes | bytearray | memoryview) -> tuple[list[Any], bool]:
    """A JSON array of events -> (events, phased): phase-typed when every event has a known
    phase, else permissive :class:`_Event` structs. msgspec errors propagate.

    Either way only complete ("X") events are held to the schema of the fields evtsync
    reads; an event of another phase needs only a string (or absent) phase and category,
    so whether a file decodes never depends on which events share a block.
    """
    try:
        return _phased_decoder.decode(data), True
    except msgspec.ValidationError:
        pass
    try:
        return _decoder.decode(data), False
    except msgspec.ValidationError:
        return [_lenient_event(raw) for raw in _raw_decoder.decode(data)], False


def _lenient_event(raw: msgspec.Raw) -> _Event:
    """One event of a block that failed validation: complete events are held to the
    schema (their error propagates), the others reduced to their phase and category."""
    try:
        return _event_decoder.decode(raw)
    except msgspec.ValidationError:
        head = _head_decoder.decode(raw)  # a non-string phase or category is an error too
        if head.ph == "X":
            raise
        return _Event(ph=head.ph, cat=head.cat)


class _EventKeys:
    """(phase, category as written) of events -> small int codes, shared by every file one
    process decodes (the same few pairs recur in every block): each event's key is found
    with one dict lookup, and the table, phase and category of a key are looked up per key,
    not per event. The phase is the struct class of a phase-typed block, else the ``ph``
    string. Keys are only ever added (under the lock)."""

    def __init__(self) -> None:
        self.code_of: dict[tuple[Any, str | None], int] = {}
        self.phases: list[str] = []
        self.categories: list[str | None] = []  # as written
        self.canonical: list[str | None] = []  # in the canonical spelling, as tables hold them
        self.tables = np.empty(0, dtype=np.int8)
        self.lock = threading.Lock()

    def add(self, pairs: set[tuple[Any, str | None]]) -> None:
        """Give codes to the pairs not met before. A code is published in ``code_of`` only
        once its phase, categories and table are in place (other threads may be routing)."""
        with self.lock:
            new = list(pairs.difference(self.code_of))
            for phase, cat in new:
                self.phases.append(phase if isinstance(phase, str) else phase.__struct_config__.tag)
                self.categories.append(cat)
                self.canonical.append(canonical_category(cat))
            self.tables = np.array([_table_of(c) if ph == "X" else _NO_TABLE
                                    for ph, c in zip(self.phases, self.categories, strict=True)], dtype=np.int8)
            first = len(self.phases) - len(new)
            for i, pair in enumerate(new):
                self.code_of[pair] = first + i


    def __len__(self) -> int:
        return len(self.phases)


#: Above this many keys the shared key dictionary starts afresh (blocks being routed keep theirs).
_MAX_EVENT_KEYS = 1 << 12


def _route_block(events: list[Any], phased: bool, columns: _Columns, counts: Counter[str],
                 untabulated: Counter[tuple[str, str]], skipped: dict[str, int], path: Path) -> None:
    """Route one block's events to their table and append their fields as numpy chunks.

    Events that go to no table (other phases, categories not tabulated) are counted in
    ``untabulated`` by (phase, category as written).
    """
    if not events:
        return
    keys = _shared(_EventKeys, _MAX_EVENT_KEYS)
    cats = [e.cat for e in events]
    phases = None if phased else [e.ph for e in events]

    def pairs() -> Any:
        return zip(map(type, events) if phases is None else phases, cats, strict=True)

    n = len(events)
    try:  # map + fromiter: the loop in C; zip reuses its pair tuple between lookups
        key_codes = np.fromiter(map(keys.code_of.__getitem__, pairs()), np.int32, n)
    except KeyError:  # pairs this process has not met before
        keys.add(set(pairs()))
        key_codes = np.fromiter(map(keys.code_of.__getitem__, pairs()), np.int32, n)
    key_tables = keys.tables
    per_key = np.bincount(key_codes, minlength=len(key_tables))
    present = np.flatnonzero(per_key).tolist()
    for key in present:
        cat, n_key = keys.categories[key], int(per_key[key])
        counts[cat or "(none)"] += n_key
        if key_tables[key] == _NO_TABLE:
            untabulated[(keys.phases[key] or "(none)", cat or "(none)")] += n_key
    # the category of each row (canonical spelling) as a code into the string dictionary,
    # looked up per key
    cat_of_key = np.full(len(key_tables), MISSING, dtype=np.int32)
    cat_of_key[present] = columns.codes([keys.canonical[k] for k in present])
    tables = key_tables[key_codes]
    for code, table in enumerate(_TABLES):
        idx = np.flatnonzero(tables == code)
        if not idx.size:
            continue
        selected = list(map(events.__getitem__, idx.tolist()))
        times = {name: _time_array(_EVENT_VALUES[name](selected), path, name) for name in ("ts", "dur")}
        if times["ts"] is None or times["dur"] is None:
            kept = _numeric_times(selected, skipped)
            if not kept:
                continue
            selected, idx = [selected[i] for i in kept], idx[kept]
            times = {name: _time_array(_EVENT_VALUES[name](selected), path, name)
                     for name in ("ts", "dur")}
        columns.add(table, selected, times, cat_of_key[key_codes[idx]])  # type: ignore[arg-type]


#: Environment variable choosing the decoder of event blocks: ``msgspec`` forces the msgspec
#: path for every block; ``scanner`` always tries the compiled scanner first; ``auto`` (the
#: default, also for any other value) uses the scanner where its load pays (see below).
DECODER_ENV = "EVTSYNC_DECODER"
#: Decompressed JSON a process must have to read before ``auto`` loads the ahead-of-time
#: scanner when it is already built (:mod:`evtsync.trace.scan`). Its load is ~1-2 ms of CPU
#: and no numba import; below this size msgspec is as fast (docs/performance/reading.md).
SCANNER_MIN_BYTES = 1 << 20
#: ... and before ``auto`` builds it, when it is not built yet: once per installation and
#: version of the scanner, ~10-20 s of CPU in a child process (numba's AOT compiler and the
#: C compiler). A real trace of this size pays the build back over its later reads. Not
#: inside :func:`scanner_build_deferred` (the bundled demo's inputs, read once).
SCANNER_BUILD_MIN_BYTES = 32 << 20
#: ... and before ``auto`` falls back to numba's just-in-time scanner where the module cannot
#: be built (no C compiler): that load costs ~1.1 s of CPU per process (importing numba, which
#: imports scipy.linalg for its BLAS check, and loading the cached code) and +110 MB of memory;
#: it saves ~3-3.5 ms per MB of JSON against the msgspec path, so it pays from ~300 MB.
JIT_SCANNER_MIN_BYTES = 256 << 20
#: Blocks decoded by the compiled scanner in this process (``"scanned"``) and blocks it left
#: to msgspec, by reason (what :mod:`evtsync.trace.scan` declines; debug statistics).
_SCAN_STATS: Counter[str] = Counter()
#: The phases the scanner knows, in code order: "X" (code 0), then the other phases.
_SCAN_PHASES = "X" + _OTHER_PHASES
_ARG_FIELDS = msgspec.structs.fields(_Args)
#: ``"scanner"``: the loaded scanner; ``"ahead-of-time failed"`` / ``"jit failed"``: a way
#: that failed in this process (not tried again)
_scanner_state: dict[str, Any] = {}


class _Scanner:
    """The compiled scanner with its constant tables, and per-thread scratch arrays."""

    def __init__(self, scan_block: Callable[..., tuple[int, int, int, int]], how: str,
                 template_lines: Callable[..., tuple[int, int, int, int]] | None = None) -> None:
        self.scan_block = scan_block
        #: :func:`evtsync.trace.scan.scan_template_lines` of the same build (NCCL Inspector lines)
        self.template_lines = template_lines
        #: "ahead-of-time" or "just-in-time"
        self.how = how
        self.phase_of = np.full(256, -1, dtype=np.int64)
        for code, phase in enumerate(_SCAN_PHASES):
            self.phase_of[ord(phase)] = code
        names = tuple(f.encode_name for f in _ARG_FIELDS)
        self.arg_keys = scan.key_table(names)
        self.arg_hash = scan.arg_key_hash(names)
        self.arg_is_str = np.array([f.default is None for f in _ARG_FIELDS], dtype=np.bool_)
        self.arg_column = {f.name: scan.COL_ARGS + k for k, f in enumerate(_ARG_FIELDS)}
        self.local = threading.local()

    def scratch(self, n_bytes: int, grow: bool = False) -> _ScanScratch:
        """This thread's scratch arrays, large enough for a block of ``n_bytes`` (``grow``:
        larger than the last ones, which were too small)."""
        current = getattr(self.local, "scratch", None)
        want = n_bytes // 64 + 64
        if current is not None and (current.events >= want or current.events >= n_bytes // 2 + 2) and not grow:
            return current
        if grow and current is not None:  # (events or strings were too many: both grow)
            want = max(want, 4 * current.events)
        strings = want // 8 + 256  # unique strings: a few hundred in a 1 MiB block of a real trace
        if grow and current is not None:
            strings = 4 * len(current.str_escaped)
        current = self.local.scratch = _ScanScratch(min(want, n_bytes // 2 + 2), strings, len(_ARG_FIELDS))
        return current


class _ScanScratch:
    """Output arrays of the scanner for blocks of up to ``events`` events, reused by a thread
    (fresh memory costs page faults on every block; the hash table is never cleared: its
    slots carry the generation of the block that filled them)."""

    def __init__(self, events: int, n_strings: int, n_args: int) -> None:
        self.events = events
        self.ints = np.empty((scan.COL_ARGS + n_args, events), dtype=np.int64)  # a row per field
        self.floats = np.empty((events, 2), dtype=np.float64)
        self.slow = np.empty((2 * events, 4), dtype=np.int64)
        self.str_span = np.empty((n_strings, 2), dtype=np.int64)
        self.str_escaped = np.zeros(n_strings, dtype=np.bool_)
        slots = 1 << (2 * n_strings - 1).bit_length()
        self.hash_gen = np.zeros(slots, dtype=np.int64)
        self.hash_id = np.zeros(slots, dtype=np.int64)
        self.gen = 0


def decoder_mode() -> str:
    """``msgspec``, ``scanner`` or ``auto``: what :data:`DECODER_ENV` asks for."""
    mode = os.environ.get(DECODER_ENV, "").strip().lower()
    return mode if mode in ("msgspec", "scanner") else "auto"


def json_bytes_estimate(path: str | Path) -> int:
    """The decompressed size of a trace file: its size, or for gzip the size its trailer
    records (modulo 4 GiB, so never less than the compressed size); 0 if unreadable."""
    try:
        with open(path, "rb") as fh:
            if fh.read(2) != b"\x1f\x8b":
                return os.fstat(fh.fileno()).st_size
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(size - 4, 0))
            recorded = int.from_bytes(fh.read(4), "little")
    except OSError:
        return 0
    return recorded if recorded >= size else recorded + (1 << 32) * max(1, (10 * size) >> 32)


_expected = {"json_bytes": 0}


def expect_json_bytes(json_bytes: int) -> None:
    """Tell the ``auto`` rule how much JSON this process is about to decode in all (a reader
    of many files, once): the first file it really decodes (not one read from the cache)
    then loads the scanner if that total pays for it."""
    _expected["json_bytes"] = json_bytes


def _choose_decoder_for(path: Path) -> None:
    """Under ``auto``, before the scanner is loaded: load it if this file, or the work
    announced by :func:`expect_json_bytes`, pays for its load."""
    if "scanner" in _scanner_state or decoder_mode() != "auto":
        return  # decided already, or decided by the user
    use_fast_decoder_for(max(_expected["json_bytes"], json_bytes_estimate(path)))


#: Open :func:`scanner_build_deferred` blocks of this process.
_build_deferred = [0]


@contextlib.contextmanager
def scanner_build_deferred() -> Iterator[None]:
    """Within the block, ``auto`` uses the ahead-of-time scanner where it is built, but does not
    build it: for inputs whose reading can never pay the build back. The bundled demo's traces
    (~190 MB of JSON in six workloads) are read once per installation (a second demo copies its
    tables from the result cache); the scanner saves ~0.7 s of CPU on that read and its build
    costs ~10 s (docs/performance/run.md, issue 48). The first real traces of at least
    :data:`SCANNER_BUILD_MIN_BYTES` build it, outside such a block."""
    _build_deferred[0] += 1
    try:
        yield
    finally:
        _build_deferred[0] -= 1


def use_fast_decoder_for(json_bytes: int) -> bool:
    """Load the compiled scanner now when the ``auto`` rule says it pays for ``json_bytes`` of
    JSON that this process is about to decode (or the user asked for it); True when it will
    be used. Readers of many files call this once with their total.

    The rule: the ahead-of-time scanner from :data:`SCANNER_MIN_BYTES` when it is built;
    built first (once per installation) from :data:`SCANNER_BUILD_MIN_BYTES`, except inside
    :func:`scanner_build_deferred`; numba's just-in-time scanner from
    :data:`JIT_SCANNER_MIN_BYTES` where it is not built."""
    mode = decoder_mode()
    if mode == "msgspec":
        return False
    if mode == "scanner" or "scanner" in _scanner_state:
        return _fast_scanner(load=True) is not None
    if json_bytes < SCANNER_MIN_BYTES:
        return False
    return _fast_scanner(load=True, build=json_bytes >= SCANNER_BUILD_MIN_BYTES and not _build_deferred[0],
                         jit=json_bytes >= JIT_SCANNER_MIN_BYTES) is not None


#: Blocks of decompressed bytes of a plain or gzip file (the byte source of every JSON reader).
ByteSource = _Source


def _fast_scanner(load: bool = False, *, build: bool = True, jit: bool = True) -> _Scanner | None:
    """The compiled scanner: the one loaded in this process, else (``load``, or
    ``EVTSYNC_DECODER=scanner``) loaded now: the ahead-of-time module, built first when
    ``build`` allows and it is not built yet; else (``jit``) numba's just-in-time scanner
    (numba imported, the code loaded from numba's cache or compiled the first time). None when
    it is switched off (``EVTSYNC_DECODER=msgspec``), not loaded under ``auto``, or cannot work
    here (no build and numba missing, its JIT disabled by ``NUMBA_DISABLE_JIT``, a compilation
    error): msgspec then decodes every block."""
    mode = decoder_mode()
    if mode == "msgspec":
        return None
    scanner = _scanner_state.get("scanner")
    if scanner is None and (load or mode == "scanner"):
        with _scanner_lock:
            scanner = _scanner_state.get("scanner") or _load_scanner(build=build, jit=jit)
    return scanner


_scanner_lock = threading.Lock()


def _load_scanner(*, build: bool, jit: bool) -> _Scanner | None:
    if "ahead-of-time failed" not in _scanner_state:
        try:
            scan_block = scan.load_ahead_of_time()
            if scan_block is None and build:
                failure = scan.build_failure()
                if failure is not None:
                    raise RuntimeError(f"its build failed before: {failure}; delete "
                                       f"{scan.ahead_of_time_path().with_suffix('.failed')} to try again")
                log.info("building the trace scanner ahead of time, once for this version "
                         "(~10-20 s of CPU) into %s", scan.ahead_of_time_dir())
                scan.build_ahead_of_time()
                scan_block = scan.load_ahead_of_time()
            if scan_block is not None:
                return _checked_scanner(_Scanner(scan_block, "ahead-of-time", scan.load_ahead_of_time_template()))
        except Exception as exc:  # noqa: BLE001 - any failure of the optional fast path: next way
            log.warning("ahead-of-time trace scanner unavailable (%s)", exc)
            _scanner_state["ahead-of-time failed"] = True
    if jit and "jit failed" not in _scanner_state:
        try:
            import numba

            if numba.config.DISABLE_JIT:  # type: ignore[attr-defined]  # not in numba's stubs; the scanner would run as plain Python: far slower
                raise RuntimeError("NUMBA_DISABLE_JIT is set")
            return _checked_scanner(_Scanner(scan.jit_scan_block(), "just-in-time", scan.jit_template_lines()))
        except Exception as exc:  # noqa: BLE001 - any failure of the optional fast path means msgspec
            log.warning("compiled trace scanner unavailable (%s): decoding with msgspec", exc)
            _scanner_state["jit failed"] = True
    return None


def template_scanner(json_bytes: int) -> Callable[..., tuple[int, int, int, int]] | None:
    """The compiled line-template scanner (:func:`evtsync.trace.scan.scan_template_lines`) of the
    trace scanner's build, loaded by the same rule (:func:`use_fast_decoder_for` ``json_bytes``),
    or None (switched off, not worth loading, unavailable: the caller decodes with msgspec)."""
    if not use_fast_decoder_for(json_bytes):
        return None
    scanner = _fast_scanner()
    return None if scanner is None else scanner.template_lines


def _checked_scanner(scanner: _Scanner) -> _Scanner:
    """The scanner, made this process's after it reads an empty array; RuntimeError if not."""
    empty = np.frombuffer(bytearray(b"[]"), dtype=np.uint8)  # writable, as blocks are
    if _run_scanner(scanner, empty, scanner.scratch(64))[0] != scan.OK:
        raise RuntimeError("the scanner rejects an empty array")
    _scanner_state["scanner"] = scanner
    log.debug("trace scanner loaded (%s)", scanner.how)
    return scanner


def prepare_fast_decoder() -> bool:
    """Load the compiled scanner now (building the ahead-of-time module first if it is not
    built, else numba's just-in-time one), so that every file this process decodes next uses
    it whatever its size (unless ``EVTSYNC_DECODER=msgspec``); False when it is switched off
    or unavailable."""
    return _fast_scanner(load=True) is not None


def _run_scanner(scanner: _Scanner, buf: np.ndarray, scratch: _ScanScratch) -> tuple[int, int, int, int]:
    scratch.gen += 1
    arg_bytes, arg_offs = scanner.arg_keys
    arg_hash, arg_mult = scanner.arg_hash
    return scanner.scan_block(
        buf, len(buf), scanner.phase_of, arg_bytes, arg_offs, scanner.arg_is_str, arg_hash, arg_mult,
        scan.POW10, scratch.ints, scratch.floats, scratch.slow, scratch.str_span,
        scratch.str_escaped, scratch.hash_gen, scratch.hash_id, scratch.gen)


#: CPU seconds to read one trace file into its tables, per file and per byte of JSON, with
#: the compiled scanner and with msgspec (2-core x86_64: 1 MB rank files 3.9-4.8 ms per MB
#: with the scanner, 11-13 ms with msgspec; the 54 MB V100 trace 2.4 and 4.8 ms per MB), and
#: what a process pool adds to move one file's tables back (pickled in the worker, unpickled
#: by the caller: ~0.7 ms per file, plus 0.3 ms per MB of JSON for every table, 0.03 for the
#: collectives); docs/performance/reading.md.
READ_CPU_S = {"scanner": (1.5e-3, 2.5e-9), "msgspec": (6e-3, 5e-9)}
TRANSFER_CPU_S = {"all": (0.7e-3, 0.3e-9), "reduced": (0.7e-3, 0.05e-9)}


def reading_work(json_sizes: Sequence[int], scope: str = "all") -> Work:
    """The estimated cost of reading files of these decompressed sizes (one process), for the
    pool model (:func:`evtsync.core.parallel.pool_pays`): with the scanner where ``auto`` will use
    it, else with msgspec."""
    total = sum(json_sizes)
    built = "scanner" in _scanner_state or scan.ahead_of_time_path().is_file()
    fast = decoder_mode() == "scanner" or (decoder_mode() == "auto" and (
        (built and total >= SCANNER_MIN_BYTES) or (total >= SCANNER_BUILD_MIN_BYTES and not _build_deferred[0])))
    per_file, per_byte = READ_CPU_S["scanner" if fast else "msgspec"]
    move_file, move_byte = TRANSFER_CPU_S["all" if scope == "all" else "reduced"]
    n = len(json_sizes)
    return Work(items=n, cpu_s=n * per_file + total * per_byte, transfer_cpu_s=n * move_file + total * move_byte)


_unique_strings_decoder = msgspec.json.Decoder(list[str])


def _scan_route(scanner: _Scanner, block: bytes | bytearray | memoryview, decoder: _Decoder) -> str | None:
    """Decode one block (``[ev, ...]``) with the compiled scanner and append its columns and
    counts exactly as :func:`_route_block` does for the msgspec structs; returns None, or why
    it declined (then nothing was counted or appended, and msgspec decodes the block).

    Beyond what the scanner itself declines, a block is left to msgspec when an event that
    goes to a table has a loosely typed pid/tid (a string or null, as PyTorch 1.8 wrote) or
    lacks a numeric ts/dur (the msgspec path counts it as skipped), or when a float the
    scanner left to Python is not finite.
    """
    buf = np.frombuffer(block, dtype=np.uint8)
    scratch = scanner.scratch(len(buf))
    status, n_ev, n_str, n_slow = _run_scanner(scanner, buf, scratch)
    while status == scan.FULL:
        scratch = scanner.scratch(len(buf), grow=True)
        status, n_ev, n_str, n_slow = _run_scanner(scanner, buf, scratch)
    del buf
    if status != scan.OK:
        return scan.DECLINED[status]
    if not n_ev:
        return None
    ints, floats = scratch.ints[:, :n_ev], scratch.floats[:n_ev]
    spans = scratch.str_span[:n_str].tolist()
    try:
        strings: list[str] = _unique_strings_decoder.decode(
            b'["' + b'","'.join([block[s:e] for s, e in spans]) + b'"]') if n_str else []
    except (msgspec.DecodeError, msgspec.ValidationError):  # pragma: no cover - the scanner checked them
        return "strings msgspec does not decode"
    if n_slow:
        slow = scratch.slow[:n_slow]
        values = np.array([float(bytes(block[s:e])) for s, e in slow[:, 2:].tolist()], dtype=np.float64)
        if not np.isfinite(values).all():
            return "a float out of range"
        floats[slow[:, 0], slow[:, 1]] = values
    columns = decoder.columns
    # codes of the block's unique strings in the process dictionary; index -2: the empty
    # name of an event without one, -1: absent
    lut = np.empty(n_str + 2, dtype=np.int32)
    lut[:n_str] = columns.codes(strings)
    lut[n_str] = columns.codes([""])[0]
    lut[n_str + 1] = MISSING
    # (phase, category as written) of each event -> the shared event keys
    width = n_str + 1
    combo = ints[scan.COL_PHASE] * width + (ints[scan.COL_CAT] + 1)
    per_combo = np.bincount(combo)
    present = np.flatnonzero(per_combo)
    keys = _shared(_EventKeys, _MAX_EVENT_KEYS)
    pairs = [(_SCAN_PHASES[c // width], strings[c % width - 1] if c % width else None)
             for c in present.tolist()]
    if any(pair not in keys.code_of for pair in pairs):
        keys.add(set(pairs))
    key_of = [keys.code_of[pair] for pair in pairs]
    table_of_combo = np.full(len(per_combo), _NO_TABLE, dtype=np.int8)
    table_of_combo[present] = keys.tables[key_of]
    tables = table_of_combo[combo]
    tabulated = tables != _NO_TABLE
    if tabulated.any():
        flags = ints[scan.COL_FLAGS][tabulated]
        if (flags & (scan.PID_LOOSE | scan.TID_LOOSE)).any():
            return "a tabulated event with a pid or tid that is not an integer"
        needs = scan.TS_NUMBER | scan.DUR_NUMBER
        if ((flags & needs) != needs).any():
            return "a tabulated event without numeric ts/dur"
    cat_of_combo = np.full(len(per_combo), MISSING, dtype=np.int32)
    cat_of_combo[present] = columns.codes([keys.canonical[k] for k in key_of])
    # from here on the block is the scanner's: count and append
    decoder.n_events += n_ev
    for key, n_key in zip(key_of, per_combo[present].tolist(), strict=True):
        cat = keys.categories[key]
        decoder.counts[cat or "(none)"] += n_key
        if keys.tables[key] == _NO_TABLE:
            decoder.untabulated[(keys.phases[key] or "(none)", cat or "(none)")] += n_key
    arg_column = scanner.arg_column
    for code, table in enumerate(_TABLES):
        idx = np.flatnonzero(tables == code)
        if not idx.size:
            continue
        flags = ints[scan.COL_FLAGS][idx]
        chunks = columns.chunks[table]
        for name, kind in TABLE_FIELDS[table]:
            if kind == "t":
                field, col, is_float = ((0, scan.COL_TS, scan.TS_FLOAT) if name == "ts"
                                        else (1, scan.COL_DUR, scan.DUR_FLOAT))
                floated = (flags & is_float) != 0
                if floated.any():
                    column = np.where(floated, floats[idx, field], ints[col][idx].astype(np.float64))
                else:
                    column = ints[col][idx]
            elif name == "cat":
                column = cat_of_combo[combo[idx]]
            elif name == "name":
                column = lut[ints[scan.COL_NAME][idx]]
            elif name in ("pid", "tid"):
                column = ints[scan.COL_PID if name == "pid" else scan.COL_TID][idx]
            elif kind == "o":
                column = lut[ints[arg_column[name]][idx]]
            elif name == "external_id":  # PyTorch 1.8 spelled it "external id": read that where needed
                column = ints[arg_column[name]][idx]
                lacking = column == MISSING
                if lacking.any():
                    column[lacking] = ints[arg_column["external_id_lower"]][idx[lacking]]
            else:
                column = ints[arg_column[name]][idx]
            chunks[name].append(column)
    return None


def _numeric_times(events: list[_Event], skipped: dict[str, int]) -> list[int]:
    """Positions of the events with numeric ts and dur; the others are counted in
    ``skipped`` by category."""
    keep = []
    for i, ev in enumerate(events):
        if isinstance(ev.ts, int | float) and isinstance(ev.dur, int | float):
            keep.append(i)
        else:
            key = f"{canonical_category(ev.cat)} event without numeric ts/dur"
            skipped[key] = skipped.get(key, 0) + 1
    return keep


def decode_file(path: str | Path, *, salvage: bool = False, block_size: int = BLOCK_SIZE) -> DecodedTrace:
    """Decode one trace file into typed columns; raise :class:`TraceError` on bad input."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: {path_problem(path)}")
    if path.stat().st_size == 0:
        raise TraceError(f"{path}: empty file (expected a Kineto JSON trace)")
    _choose_decoder_for(path)
    src = _Source(path)
    try:
        return _Decoder(src, salvage=salvage, block_size=block_size).run()
    except RecursionError:
        # msgspec decodes nested arrays and objects recursively, under Python's recursion limit
        raise TraceError(f"{path}: JSON nested deeper than the decoder's limit ({sys.getrecursionlimit()} levels) in "
                         f"its first {src.offset} decompressed bytes: not a Kineto trace (whose events are "
                         "shallow objects)") from None
    finally:
        src.close()


class _Decoder:
    """The state of decoding one file: pending bytes, offsets, columns and counts.

    The pending bytes live in a bytearray ``work`` whose first byte is ``[`` followed by
    the undecoded text of the array, so a block is decoded in place: the byte after the
    cut becomes ``]`` for the call and the consumed prefix is deleted from the front
    (which bytearray does without moving the rest). No copy of the block is made.
    """

    def __init__(self, src: _Source, *, salvage: bool, block_size: int) -> None:
        self.src = src
        self.path = src.path
        self.salvage = salvage
        self.block_size = block_size
        self.columns = _Columns()
        self.counts: Counter[str] = Counter()
        self.untabulated: Counter[tuple[str, str]] = Counter()
        self.skipped: dict[str, int] = {}
        self.n_events = 0
        self.work = bytearray(b"[")
        self.consumed = 0  # decompressed offset of work[1]
        self.last_end = 0  # decompressed offset just past the last complete event
        self.suffix = b""
        self.scanner = _fast_scanner()
        self.scanned_blocks = 0
        self.declined: Counter[str] = Counter()  # blocks the scanner left to msgspec, by reason

    def run(self) -> DecodedTrace:
        src, path, block_size = self.src, self.path, self.block_size
        # 1. Find the traceEvents array in the first blocks (read straight into the work
        #    buffer, after its "["); keep the bytes before it.
        work = self.work
        match = None
        while match is None:
            if not src.read_into(work, block_size):
                break
            match = _TRACE_EVENTS_RE.search(work, 1)
            if match is None and len(work) > 64 * block_size:
                break
        if match is None:
            _raise_not_a_trace(path, bytes(work[1:]), src)
        prefix = bytes(work[1: match.end() - 1])
        del work[1: match.end()]
        self.consumed = self.last_end = match.end() - 1
        truncated_at: int | None = None
        # 2. Decode complete events block by block.
        while True:
            if not self._fast_consume() and self._scan_consume():
                break
            if not src.read_into(self.work, block_size):
                if self._scan_consume():
                    break
                truncated_at = self.last_end
                break
        left = src.offset - self.last_end
        if truncated_at is not None:
            reason = src.eof_error or "JSON ends inside the traceEvents array (file cut mid-event)"
            if not self.salvage:
                raise TraceError(
                    f"{path}: {reason}; last complete event ends at decompressed byte {truncated_at} "
                    f"({self.n_events} complete events before the cut); rerun with --salvage to keep them")
            log.warning("%s: %s; salvaged %d complete events before decompressed byte %d, "
                        "dropped %d bytes after it", path, reason, self.n_events, truncated_at, left)
            header_bytes = prefix + b"[]}"
        else:
            if src.eof_error:
                if not self.salvage:
                    raise TraceError(f"{path}: {src.eof_error}; the traceEvents array itself is complete "
                                     f"({self.n_events} events): rerun with --salvage to keep them")
                log.warning("%s: %s; the traceEvents array is complete: kept all %d events",
                            path, src.eof_error, self.n_events)
            header_bytes = prefix + b"[]" + self.suffix
        header = _decode_header(path, header_bytes, tolerant=truncated_at is not None or bool(src.eof_error))
        if self.declined:
            log.debug("%s: the compiled scanner declined %d of %d blocks (%s); msgspec decoded them",
                      path, sum(self.declined.values()), sum(self.declined.values()) + self.scanned_blocks,
                      ", ".join(f"{n} x {why}" for why, n in self.declined.most_common()))
        return DecodedTrace(path=path, header=header, columns=self.columns.finish(),
                            category_counts=dict(self.counts), untabulated=dict(self.untabulated),
                            n_events=self.n_events,
                            skipped=self.skipped, truncated_at=truncated_at,
                            dropped_bytes=left if truncated_at is not None else 0,
                            bytes_read=src.offset)

    def _fast_consume(self) -> bool:
        """Decode up to the last event separator of the pending bytes, if msgspec agrees."""
        work = self.work
        last = None
        for window in _SEPARATOR_WINDOWS:
            for last in _SEPARATOR_RE.finditer(work, max(1, len(work) - window)):  # noqa: B007
                pass
            if last is not None:
                break
        else:
            return False
        end = last.start() + 1  # one past the "}" that ends the last complete event
        following = work[end]
        work[end] = _CLOSE_BRACKET
        view = memoryview(work)
        block = view[: end + 1]
        try:
            if not self._scan(block):
                events, phased = _decode_events(block)
                self.n_events += len(events)
                _route_block(events, phased, self.columns, self.counts, self.untabulated, self.skipped,
                             self.path)
                del events
        except (msgspec.DecodeError, msgspec.ValidationError):
            return False  # not a cut between top-level events: the structural scan decides
        finally:
            work[end] = following
            _release(block, view)
        # keep "[" + the text from the next event's "{" on
        nxt = last.end() - 1
        try:
            del work[1:nxt]
        except BufferError:
            # something still holds a view of the block (a sampling profiler, such as Dask
            # worker's, keeping the decoding frame alive): go on with a copy
            work = self.work = bytearray(work)
            del work[1:nxt]
        self.last_end = self.consumed + end - 1
        self.consumed += nxt - 1
        return True

    def _scan_consume(self) -> bool:
        """Decode every complete event found by the structural scan; True at the array's end."""
        pending = bytes(memoryview(self.work)[1:])
        ends, close = _structural_scan(pending, True)
        if close >= 0:
            ends = ends[ends < close]
        if ends.size:
            last = int(ends[-1])
            body = pending[: last + 1].lstrip(b" \t\r\n,")
            self._decode_block(body, self.consumed)
            pending = pending[last + 1:]
            self.consumed += last + 1
            self.last_end = self.consumed
            if close >= 0:
                close -= last + 1
        self.work = bytearray(b"[") + pending
        if close < 0:
            return False
        rest = pending[:close].strip(b" \t\r\n,")
        if rest:
            raise TraceError(f"{self.path}: traceEvents entry near decompressed byte {self.consumed} "
                             f"is not a Kineto event object: {rest[:60]!r}")
        suffix = pending[close + 1:]
        while data := self.src.read(self.block_size):
            suffix += data
        self.suffix = suffix
        self.work = bytearray(b"[")
        return True

    def _scan(self, block: bytes | bytearray | memoryview) -> bool:
        """Decode and route one block with the compiled scanner; False when it declines (or
        is switched off), and the block is then the msgspec path's."""
        if self.scanner is None:
            return False
        declined = _scan_route(self.scanner, block, self)
        if declined is None:
            self.scanned_blocks += 1
            _SCAN_STATS["scanned"] += 1
            return True
        self.declined[declined] += 1
        _SCAN_STATS[declined] += 1
        return False

    def _decode_block(self, body: bytes, offset: int) -> None:
        block = bytearray(b"[") + body + b"]"  # writable, as the fast path's (one compiled variant)
        if self._scan(block):
            return
        try:
            events, phased = _decode_events(block)
        except msgspec.ValidationError as exc:
            raise TraceError(f"{self.path}: {_invalid_event_at(str(exc), body, offset)}") from None
        except msgspec.DecodeError as exc:
            raise TraceError(f"{self.path}: {_json_error_at(str(exc), body, offset)}") from None
        self.n_events += len(events)
        _route_block(events, phased, self.columns, self.counts, self.untabulated, self.skipped, self.path)


def _invalid_event_at(message: str, body: bytes, offset: int) -> str:
    """Which event of a block breaks the schema, at its true place in the decompressed file,
    with its text (msgspec names the field, not the event: the block is searched again)."""
    cursor = 0
    for raw in _raw_decoder.decode(b"[" + body + b"]"):
        text = bytes(raw)
        at = body.find(text, cursor)
        cursor = at + len(text) if at >= 0 else cursor
        try:
            _lenient_event(raw)
        except msgspec.ValidationError as exc:
            shown = text[:100].decode("utf-8", "replace")
            return (f"the event at decompressed byte {offset + max(at, 0)} is not a Kineto event "
                    f"({str(exc).replace('$.', '')}): {shown}{'…' if len(text) > 100 else ''}")
    return f"an event in the block starting at decompressed byte {offset} is not a Kineto event ({message})"


def _json_error_at(message: str, body: bytes, offset: int) -> str:
    """The decoder's complaint at its true place in the decompressed file, with the text there.

    msgspec counts bytes from the start of the block it was given (``[`` + body + ``]``);
    ``offset`` is where the body starts in the file.
    """
    import re

    found = re.search(r"\(byte (\d+)\)", message)
    if not found:
        return f"invalid JSON in the events starting at decompressed byte {offset} ({message})"
    at = max(int(found.group(1)) - 1, 0)
    reason = message[: found.start()].strip().rstrip(":")
    context = body[max(at - 40, 0): at + 20].decode("utf-8", "replace").replace("\n", " ")
    return f"invalid JSON at decompressed byte {offset + at}: {reason}, near …{context}…"


def _release(*views: memoryview) -> None:
    """Release memoryviews of the pending bytes now, where nothing else holds them (a view
    that is still exported stays until it is freed; the caller copies then)."""
    for view in views:
        with contextlib.suppress(BufferError):
            view.release()


def _decode_header(path: Path, data: bytes, tolerant: bool) -> dict[str, Any]:
    try:
        header = _header_decoder.decode(data)
    except msgspec.DecodeError as exc:
        if tolerant:
            log.warning("%s: top-level fields after the cut are lost (%s)", path, exc)
            return {}
        raise TraceError(f"{path}: invalid JSON outside traceEvents ({exc})") from None
    if not isinstance(header, dict):
        raise TraceError(f"{path}: top level is not a JSON object (expected a Kineto trace)")
    return header


def _raise_not_a_trace(path: Path, head: bytes, src: _Source) -> NoReturn:
    if src.eof_error and not head:
        raise TraceError(f"{path}: {src.eof_error}")
    text = head[:2000].lstrip()
    if not text:
        raise TraceError(f"{path}: empty file (expected a Kineto JSON trace)")
    if src.eof_error:
        raise TraceError(f"{path}: {src.eof_error}, before any traceEvents array")
    try:
        _header_decoder.decode(head)
    except msgspec.DecodeError:
        if text[:1] in (b"{", b"["):
            raise TraceError(f"{path}: JSON with no \"traceEvents\" array in its first "
                             f"{len(head)} bytes (not a Kineto trace, or cut short)") from None
        raise TraceError(f"{path}: not JSON (starts with {text[:30]!r}); expected a Kineto "
                         "trace (.json or .json.gz)") from None
    raise TraceError(f"{path}: JSON without a \"traceEvents\" array: not a Kineto trace")
