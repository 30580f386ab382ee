"""Streaming decoder of one Kineto trace file into typed columns.

The file is read in blocks (plain or gzip). A vectorised scan (numpy) tracks strings
and nesting to find where each event of the ``traceEvents`` array ends, so complete
events are decoded block by block with msgspec into :class:`~evtsync.trace.schema.Event`
structs and immediately turned into column arrays. Peak memory is therefore bounded by
the block size and the final columns, never by the whole JSON text or a list of dicts.

A file cut in the middle (a job killed while writing) is detected with the byte offset
of the cut; with ``salvage=True`` the complete events before it are kept and the rest is
counted as dropped.
"""

from __future__ import annotations

import logging
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from evtsync.errors import TraceError
from evtsync.trace.schema import (
    CPU_CATEGORIES,
    EVENT_LIST,
    GPU_CATEGORIES,
    RUNTIME_CATEGORIES,
    SYNC_CATEGORIES,
    Event,
    EventArgs,
)

log = logging.getLogger(__name__)

BLOCK_SIZE = 16 << 20
_TRACE_EVENTS_RE = re.compile(rb'"traceEvents"\s*:\s*\[')
_QUOTE, _BACKSLASH = 34, 92
_OPEN_BRACE, _CLOSE_BRACE, _OPEN_BRACKET, _CLOSE_BRACKET = 123, 125, 91, 93
_decoder = msgspec.json.Decoder(EVENT_LIST)
_header_decoder = msgspec.json.Decoder()

#: Column layout of each raw table, in order. ``s`` = string (categorical later),
#: ``i`` = int64 with -1 for missing, ``t`` = time in µs (kept as Python numbers until the
#: unit conversion), ``o`` = loose scalar kept as object.
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
_ARG_FIELDS = frozenset(EventArgs.__struct_fields__)
_EMPTY_ARGS = EventArgs()


@dataclass
class DecodedTrace:
    """What one file decodes to: the top-level header and raw column lists per table."""

    path: Path
    header: dict[str, Any]
    columns: dict[str, dict[str, list[Any]]]
    category_counts: dict[str, int] = field(default_factory=dict)
    n_events: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    truncated_at: int | None = None
    dropped_bytes: int = 0
    bytes_read: int = 0


class _Source:
    """Blocks of decompressed bytes from a plain or gzip file, with clear errors.

    Gzip is inflated with zlib directly (multi-member files included) so that the data
    before a truncation or corruption point is still delivered and the error is recorded
    in ``eof_error`` instead of losing the last block.
    """

    RAW_CHUNK = 1 << 20

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._raw = open(path, "rb")  # noqa: SIM115 - closed in close()
        self.gzip = self._raw.read(2) == b"\x1f\x8b"
        self._raw.seek(0)
        self._inflater = zlib.decompressobj(wbits=31) if self.gzip else None
        self._buffer = b""
        self._raw_done = False
        self._fresh_member = False  # a gzip member just ended: EOF here is a clean end
        self.eof_error: str | None = None

    def _inflate_more(self) -> bytes:
        assert self._inflater is not None
        while True:
            if self._inflater.eof:
                rest = self._inflater.unused_data
                self._inflater = zlib.decompressobj(wbits=31)
                if rest:
                    try:
                        out = self._inflater.decompress(rest)
                    except zlib.error as exc:
                        self.eof_error = f"corrupt gzip data after {self.offset} decompressed bytes ({exc})"
                        self._raw_done = True
                        return b""
                    if out:
                        return out
                    continue
                self._fresh_member = True
            chunk = self._raw.read(self.RAW_CHUNK)
            if not chunk:
                self._raw_done = True
                if not self._inflater.eof and not self._fresh_member:
                    self.eof_error = (f"gzip stream ends early (truncated file) after "
                                      f"{self.offset + len(self._buffer)} decompressed bytes")
                return b""
            self._fresh_member = False
            try:
                out = self._inflater.decompress(chunk)
            except zlib.error as exc:
                self.eof_error = (f"corrupt gzip data after {self.offset + len(self._buffer)} "
                                  f"decompressed bytes ({exc})")
                self._raw_done = True
                return b""
            if out:
                return out

    def read(self, size: int) -> bytes:
        if self._inflater is None:
            data = self._raw.read(size)
        else:
            parts = [self._buffer]
            have = len(self._buffer)
            while have < size and not self._raw_done:
                more = self._inflate_more()
                parts.append(more)
                have += len(more)
            joined = b"".join(parts)
            data, self._buffer = joined[:size], joined[size:]
        self.offset += len(data)
        return data

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


def _new_columns() -> dict[str, dict[str, list[Any]]]:
    return {table: {name: [] for name, _ in fields} for table, fields in TABLE_FIELDS.items()}


def _append_events(events: list[Event], columns: dict[str, dict[str, list[Any]]],
                   counts: dict[str, int], skipped: dict[str, int]) -> None:
    """Route decoded events to their table and append their fields column-wise."""
    routed: dict[str, list[Event]] = {"gpu": [], "cpu": [], "runtime": [], "sync": []}
    for ev in events:
        cat = ev.cat
        counts[cat or "(none)"] = counts.get(cat or "(none)", 0) + 1
        if ev.ph != "X":
            continue
        if cat in GPU_CATEGORIES:
            table = "gpu"
        elif cat in CPU_CATEGORIES:
            table = "cpu"
        elif cat in RUNTIME_CATEGORIES:
            table = "runtime"
        elif cat in SYNC_CATEGORIES:
            table = "sync"
        else:
            continue
        if not isinstance(ev.ts, int | float) or not isinstance(ev.dur, int | float):
            key = f"{cat} event without numeric ts/dur"
            skipped[key] = skipped.get(key, 0) + 1
            continue
        routed[table].append(ev)
    for table, evs in routed.items():
        if not evs:
            continue
        cols = columns[table]
        args = [e.args or _EMPTY_ARGS for e in evs]
        for name, _kind in TABLE_FIELDS[table]:
            source = args if name in _ARG_FIELDS else evs
            cols[name].extend([getattr(item, name) for item in source])


def decode_file(path: str | Path, *, salvage: bool = False, block_size: int = BLOCK_SIZE) -> DecodedTrace:
    """Decode one trace file into raw columns; raise :class:`TraceError` on bad input."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    if path.stat().st_size == 0:
        raise TraceError(f"{path}: empty file (expected a Kineto JSON trace)")
    src = _Source(path)
    try:
        return _decode(src, salvage=salvage, block_size=block_size)
    finally:
        src.close()


def _decode(src: _Source, *, salvage: bool, block_size: int) -> DecodedTrace:
    path = src.path
    columns = _new_columns()
    counts: dict[str, int] = {}
    skipped: dict[str, int] = {}
    n_events = 0
    # 1. Find the traceEvents array in the first blocks; keep the bytes before it.
    head = b""
    match = None
    while match is None:
        data = src.read(block_size)
        if not data:
            break
        head += data
        match = _TRACE_EVENTS_RE.search(head)
        if match is None and len(head) > 64 * block_size:
            break
    if match is None:
        _raise_not_a_trace(path, head, src)
    prefix = head[: match.end() - 1]
    pending = head[match.end():]
    consumed = match.end()  # decompressed offset of pending[0]
    suffix = b""
    truncated_at: int | None = None
    # 2. Decode complete events block by block.
    while True:
        ends, close = _structural_scan(pending, True)
        if close >= 0:
            ends = ends[ends < close]
        if ends.size:
            last = int(ends[-1])
            body = pending[: last + 1].lstrip(b" \t\r\n,")
            n_events += _decode_block(body, path, consumed, columns, counts, skipped)
            pending = pending[last + 1:]
            consumed += last + 1
            if close >= 0:
                close -= last + 1
        if close >= 0:
            rest = pending[:close].strip(b" \t\r\n,")
            if rest:
                raise TraceError(f"{path}: traceEvents entry near decompressed byte {consumed} "
                                 f"is not a Kineto event object: {rest[:60]!r}")
            suffix = pending[close + 1:]
            while data := src.read(block_size):
                suffix += data
            break
        data = src.read(block_size)
        if not data:
            truncated_at = consumed
            break
        pending += data
    if truncated_at is not None:
        reason = src.eof_error or "JSON ends inside the traceEvents array (file cut mid-event)"
        if not salvage:
            raise TraceError(
                f"{path}: {reason}; last complete event ends at decompressed byte {truncated_at} "
                f"({n_events} complete events before the cut); rerun with --salvage to keep them")
        log.warning("%s: %s; salvaged %d complete events before decompressed byte %d, "
                    "dropped %d bytes after it", path, reason, n_events, truncated_at,
                    len(pending))
        header_bytes = prefix + b"[]}"
    else:
        if src.eof_error:
            raise TraceError(f"{path}: {src.eof_error}")
        header_bytes = prefix + b"[]" + suffix
    header = _decode_header(path, header_bytes, tolerant=truncated_at is not None)
    return DecodedTrace(path=path, header=header, columns=columns, category_counts=counts,
                        n_events=n_events, skipped=skipped, truncated_at=truncated_at,
                        dropped_bytes=len(pending) if truncated_at is not None else 0,
                        bytes_read=src.offset)


def _decode_block(body: bytes, path: Path, offset: int, columns: dict[str, dict[str, list[Any]]],
                  counts: dict[str, int], skipped: dict[str, int]) -> int:
    try:
        events = _decoder.decode(b"[" + body + b"]")
    except msgspec.ValidationError as exc:
        raise TraceError(f"{path}: an event near decompressed byte {offset} is not a Kineto "
                         f"event ({exc})") from None
    except msgspec.DecodeError as exc:
        raise TraceError(f"{path}: invalid JSON near decompressed byte {offset} ({exc})") from None
    _append_events(events, columns, counts, skipped)
    return len(events)


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


def _raise_not_a_trace(path: Path, head: bytes, src: _Source) -> None:
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
