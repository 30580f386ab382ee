"""NCCL Inspector logs: one JSON record per completed collective per communicator per process.

The NCCL Inspector profiler plugin (NCCL >= 2.27, ``NCCL_INSPECTOR_ENABLE=1``) writes one file
per process, ``<dump dir>/<hostname>-pid<pid>.log`` (also ``.jsonl``, gzipped ``.log.gz`` /
``.jsonl.gz``), one JSON object per line: ``header`` (communicator ``id``, ``comm_name``,
``rank`` in that communicator, ``n_ranks``, ``nnodes``), ``metadata`` (hostname, pid, dump
time) and ``coll_perf`` (``coll``, ``coll_sn``, ``coll_msg_size_bytes``, ``coll_exec_time_us``,
``coll_timing_source``; verbose logs add ``event_trace_ts`` with per-channel kernel start and
stop times in µs) or ``p2p_perf`` (send/recv).

For the tax (docs/methodology.md §3) the member ranks' execution times of one collective
(same communicator ``id``, same ``coll_sn``) play the role of the NCCL kernel durations: the
collective ends together, so a longer execution means an earlier arrival. Reading here
turns each file into compact columns (one row per collective record, about 60 bytes in
memory instead of ~300 of text); :func:`assemble_logs` gives every process its global rank
(its rank in the communicator that spans all processes), checks the set and builds the
TraceSet whose ``logged`` table :func:`evtsync.sync.collectives.align_logged` matches.

Nothing is dropped silently: p2p records (no collective tax), records of neither kind,
malformed lines (with ``salvage``; an error otherwise) and the incomplete last line of a
log still being written are counted per file in ``TraceSet.ranks`` and ``skipped``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter, methodcaller
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, overload

import msgspec
import numpy as np

if TYPE_CHECKING:
    import pandas as pd
else:  # pandas at its first use: the Inspector tax reads its logs without it (issue 48)
    from evtsync.core.lazy import pd

from evtsync.core.errors import TraceError, path_problem
from evtsync.core.parallel import Work
from evtsync.trace.decode import ByteSource, json_bytes_estimate, template_scanner
from evtsync.trace.filelist import FileList

log = logging.getLogger(__name__)

#: Bytes of decompressed text decoded per batch (the unit of memory while streaming a file).
BLOCK_BYTES = 4 << 20
#: Text decoded per msgspec call when many files' blocks are read together (:class:`LogRounds`):
#: the decoded records, ~5 times their text, of one slice live at once, not a whole round's (issue 48).
DECODE_BYTES = 1 << 20
#: The timing source of GPU-timed collectives (the only one comparable to kernel durations).
GPU_TIMING = "kernel_gpu"
MISSING = -1
#: Columns of one file's collective records (``LoggedCollectives.columns``).
RECORD_COLUMNS = ("comm", "local_rank", "sn", "collective", "msg_bytes", "exec_ns", "timing_source",
                  "kernel_start_us", "kernel_stop_us", "dump_us")


#: Integers as the columns hold them: a larger value in a log (msgspec reads up to 2**64 - 1) is
#: refused by the decoder, naming its field and line, instead of overflowing the column.
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]


#: Structs without GC tracking: decoded records hold no reference cycles, and ~100k tracked
#: objects per batch made the collector run (and freeing them cost as much as decoding).
class _Header(msgspec.Struct, gc=False):
    id: str
    rank: Int32
    n_ranks: Int32
    nnodes: Int32 = MISSING
    comm_name: str = ""


class _Meta(msgspec.Struct, gc=False):
    hostname: str = ""
    pid: Int64 = MISSING
    dump_timestamp_us: Int64 = MISSING
    inspector_output_format_version: str = ""


class _KernelTimes(msgspec.Struct, gc=False):
    channel_id: Int64 = MISSING
    kernel_start_ts: Int64 | None = None
    kernel_stop_ts: Int64 | None = None


class _EventTimes(msgspec.Struct, gc=False):
    coll_start_ts: Int64 | None = None
    coll_stop_ts: Int64 | None = None
    kernel_events: list[_KernelTimes] = []


class _Coll(msgspec.Struct, gc=False):
    coll: str
    coll_sn: Int64
    coll_exec_time_us: float
    coll_msg_size_bytes: Int64 = MISSING
    coll_timing_source: str = GPU_TIMING  # logs before the field existed were GPU-timed only
    event_trace_ts: _EventTimes | None = None


class _P2P(msgspec.Struct, gc=False):
    """A point-to-point record (counted, no field read)."""


class _Record(msgspec.Struct, gc=False):
    header: _Header
    metadata: _Meta | None = None
    coll_perf: _Coll | None = None
    p2p_perf: _P2P | None = None


_DECODE_ONE = msgspec.json.Decoder(_Record)


class _LeanHeader(msgspec.Struct, gc=False):
    id: str
    rank: Int32
    n_ranks: Int32


class _LeanMeta(msgspec.Struct, gc=False):
    hostname: str = ""
    pid: Int64 = MISSING
    dump_timestamp_us: Int64 = MISSING


class _LeanRecord(msgspec.Struct, gc=False):
    header: _LeanHeader
    metadata: _LeanMeta | None = None
    coll_perf: _Coll | None = None
    p2p_perf: _P2P | None = None


#: The bulk decoder: only the fields read per record (issue 48: ~15% faster than
#: :data:`_DECODE_ONE`). ``nnodes``, ``comm_name`` and the format version are read with the
#: full decoder from the first line of each communicator and of each batch (:meth:`_Builder.add`).
_DECODE_LEAN = msgspec.json.Decoder(_LeanRecord)

_META, _HEADER, _PERF = attrgetter("metadata"), attrgetter("header"), attrgetter("coll_perf")
_HOST, _PID, _DUMP = attrgetter("hostname"), attrgetter("pid"), attrgetter("dump_timestamp_us")
_ID, _RANK, _NRANKS = attrgetter("id"), attrgetter("rank"), attrgetter("n_ranks")
_SN, _COLL_NAME, _SIZE, _EXEC, _SOURCE, _TRACE = (
    attrgetter("coll_sn"), attrgetter("coll"), attrgetter("coll_msg_size_bytes"), attrgetter("coll_exec_time_us"),
    attrgetter("coll_timing_source"), attrgetter("event_trace_ts"))


def _codes(words: list[str], book: dict[str, int]) -> np.ndarray:
    """Codes of ``words`` in ``book`` (new words added in the order of their first use; the
    words are looked up first, the distinct ones gathered only when one is new: a log repeats a
    few words)."""
    try:
        return np.fromiter(map(book.__getitem__, words), np.int32, len(words))
    except KeyError:
        for word in dict.fromkeys(words):
            book.setdefault(word, len(book))
        return np.fromiter(map(book.__getitem__, words), np.int32, len(words))


@dataclass
class LoggedCollectives:
    """The collective records of one Inspector log file (one process), as columns.

    ``comms`` lists the communicators the file logs: id -> (rank in it, n_ranks, nnodes,
    comm_name); ``columns`` holds :data:`RECORD_COLUMNS` (``comm`` indexes ``comm_ids``,
    ``collective`` and ``timing_source`` index ``vocabularies``);
    ``info`` the file's metadata and counts; ``skipped`` the records not used, by reason.
    """

    path: str
    comm_ids: list[str]
    comms: dict[str, tuple[int, int, int, str]]
    columns: dict[str, Any]
    info: dict[str, Any]
    skipped: dict[str, int] = field(default_factory=dict)
    given_rank: int | None = None
    #: the strings the ``collective`` and ``timing_source`` codes stand for
    vocabularies: dict[str, list[str]] = field(default_factory=dict)

    @property
    def n_records(self) -> int:
        """Collective records kept."""
        return len(self.columns["sn"])


#: What msgspec raises on a line it cannot decode: a JSON or schema error (an integer beyond
#: :data:`Int64`/:data:`Int32` included), or nesting deeper than Python's recursion limit
#: (msgspec decodes nested values recursively).
_UNDECODABLE = (msgspec.DecodeError, RecursionError)


def _kernel_spans(perfs: list[Any]) -> tuple[np.ndarray, np.ndarray] | None:
    """First kernel start and last kernel stop of each collective record (verbose logs;
    ``MISSING`` where a record has none), or None when no record has an event trace."""
    traces = list(map(_TRACE, perfs))
    if traces.count(None) == len(traces):
        return None
    starts = np.full(len(traces), MISSING, dtype=np.int64)
    stops = np.full(len(traces), MISSING, dtype=np.int64)
    for i, trace in enumerate(traces):
        if trace is not None and trace.kernel_events:
            begin = [k.kernel_start_ts for k in trace.kernel_events if k.kernel_start_ts]
            end = [k.kernel_stop_ts for k in trace.kernel_events if k.kernel_stop_ts]
            if begin and end:
                starts[i], stops[i] = min(begin), max(end)
    return starts, stops


def _not_a_record(path: Path, line_no: int, exc: BaseException) -> TraceError:
    """The error for a line msgspec could not decode (``exc``: one of :data:`_UNDECODABLE`)."""
    problem = "JSON nested too deeply to decode" if isinstance(exc, RecursionError) else str(exc)
    return TraceError(f"{path}: line {line_no}: not an NCCL Inspector record ({problem}); pass --salvage to "
                      "skip such lines, counting them")


#: The largest ``coll_exec_time_us`` read: durations are kept as int64 nanoseconds (up to ~292
#: years); a larger value (1e18 µs) is damage, and would wrap around to a negative number.
MAX_EXEC_US = 1e12


class _BadRecord(Exception):
    """A record with a value no collective can have: ``index`` is its place among the records
    checked (its file and line are found by the caller, which knows the records' lines)."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


def _check_exec_times(exec_us: np.ndarray, files: np.ndarray | None = None) -> None:
    """Refuse a negative, non-finite or too large ``coll_exec_time_us`` (see :data:`MAX_EXEC_US`),
    vectorised; the first bad one raised as :class:`_BadRecord` with the count of bad ones (of
    its file, when ``files`` gives each value's file)."""
    bad = ~(np.isfinite(exec_us) & (exec_us >= 0) & (exec_us <= MAX_EXEC_US))
    if not bad.any():
        return
    first = int(np.flatnonzero(bad)[0])
    value = float(exec_us[first])
    what = "negative" if value < 0 else "too large" if value > MAX_EXEC_US else "not a number"
    n_bad = int(bad.sum() if files is None else (bad & (files == files[first])).sum())
    raise _BadRecord(first, f"coll_exec_time_us {value:g} is {what} (expected a duration from 0 to "
                            f"{MAX_EXEC_US:g} µs); {n_bad} record(s) of this block are so")


def _full_header(path: Path, salvage: bool, line: bytes, lean: Any, line_no: int) -> Any:
    """The header of a communicator's first record with ``nnodes`` and ``comm_name``, every
    field checked (with ``salvage`` a bad one leaves those two unknown)."""
    try:
        return _DECODE_ONE.decode(line).header
    except _UNDECODABLE as exc:
        if not salvage:
            raise _not_a_record(path, line_no, exc) from None
        return _Header(lean.id, lean.rank, lean.n_ranks)


class _Builder:
    """Columns of one file, filled batch by batch."""

    def __init__(self, path: Path, salvage: bool = False) -> None:
        self.path = path
        self.salvage = salvage
        self.comm_index: dict[str, int] = {}
        self.comms: dict[str, tuple[int, int, int, str]] = {}
        self.parts: dict[str, list[Any]] = {name: [] for name in RECORD_COLUMNS}
        self.skipped: dict[str, int] = {}
        self.hosts: set[str] = set()
        self.pids: set[int] = set()
        self.versions: set[str] = set()
        self.n_p2p = 0
        self.verbose = 0
        self.names: dict[str, int] = {}  # collective type -> code
        self.sources: dict[str, int] = {}  # timing source -> code
        self.n_coll = 0  # collective records added (also those taken away by take())
        self.dump_range = [MISSING, MISSING]  # first and last dump time (µs) of the collective records

    @classmethod
    def resume(cls, path: Path, since: LoggedCollectives) -> _Builder:
        """A builder holding an earlier read of the file, to add the records appended since."""
        builder = cls(path)
        builder.comm_index = {cid: i for i, cid in enumerate(since.comm_ids)}
        builder.comms = dict(since.comms)
        builder.names = {w: i for i, w in enumerate(since.vocabularies["collective"])}
        builder.sources = {w: i for i, w in enumerate(since.vocabularies["timing_source"])}
        builder.parts = {name: [since.columns[name]] for name in RECORD_COLUMNS}
        builder.skipped = dict(since.skipped)
        if since.info["host"] or since.info["pid"] != MISSING:
            builder.hosts, builder.pids = {since.info["host"]}, {since.info["pid"]}
        builder.versions = {v for v in str(since.info["format_version"]).split(",") if v}
        builder.n_p2p = int(since.info["n_p2p_records"])
        builder.verbose = int(since.info["n_verbose_records"])
        builder.n_coll = since.n_records
        dumps = since.columns["dump_us"]
        dumps = dumps[dumps >= 0]
        builder.dump_range = [int(dumps.min()), int(dumps.max())] if dumps.size else [MISSING, MISSING]
        return builder

    def take(self) -> dict[str, np.ndarray]:
        """The columns added since the last call (then forgotten here: streaming)."""
        columns = self._columns()
        self.parts = {name: [] for name in RECORD_COLUMNS}
        return columns

    def _columns(self) -> dict[str, np.ndarray]:
        columns: dict[str, np.ndarray] = {}
        for name, pieces in self.parts.items():
            dtype = np.int32 if name in ("comm", "local_rank", "collective", "timing_source") else np.int64
            columns[name] = (pieces[0] if len(pieces) == 1 else np.concatenate(pieces)) if pieces \
                else np.zeros(0, dtype=dtype)
        return columns

    def skip(self, reason: str, n: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + n

    def add(self, records: list[Any], line_of: Callable[[int], int], raw: Callable[[int], bytes]) -> None:
        """Append one batch of records decoded by :data:`_DECODE_LEAN` (``line_of(i)``: the line
        of the file record ``i`` stands on, blank and salvaged lines counted; ``raw(i)``: the
        text of record ``i``, decoded again in full where the fields the bulk decoder leaves out
        are needed) as columns.

        Every field is pulled out with ``map`` over an ``attrgetter`` straight into NumPy
        (C loops, no per-record Python frame), the communicators are checked per distinct
        value and the kept records' header against the file's known rank vectorised.
        """
        colls = [r for r in records if r.coll_perf is not None]
        if len(colls) < len(records):
            n_p2p = sum(1 for r in records if r.coll_perf is None and r.p2p_perf is not None)
            self.n_p2p += n_p2p
            if len(records) - len(colls) - n_p2p:
                self.skip("record with neither coll_perf nor p2p_perf", len(records) - len(colls) - n_p2p)
        # per distinct value, not per record: a log repeats a few headers and one process
        metas = list(map(_META, records))
        if None in metas:
            metas = [m for m in metas if m is not None]
        if metas:
            self.hosts.update(map(_HOST, metas))
            self.pids.update(map(_PID, metas))
        if records:
            with contextlib.suppress(*_UNDECODABLE):
                head = _DECODE_ONE.decode(raw(0))
                if head.metadata is not None:
                    self.versions.add(head.metadata.inspector_output_format_version)
        headers = list(map(_HEADER, records))
        self._check_headers(headers, line_of, raw)
        if not colls:
            return
        n = len(colls)
        heads = list(map(_HEADER, colls)) if n < len(records) else headers
        perfs: list[_Coll] = list(map(_PERF, colls))
        # checked before any column grows: a refused batch leaves the columns as they were
        exec_us = np.fromiter(map(_EXEC, perfs), np.float64, n)
        try:
            _check_exec_times(exec_us)
        except _BadRecord as exc:  # its place among the collective records -> among all records
            if n < len(records):
                exc.index = next(i for i, r in enumerate(records) if r is colls[exc.index])
            raise
        p = self.parts
        p["comm"].append(np.fromiter(map(self.comm_index.__getitem__, map(_ID, heads)), np.int32, n))
        p["local_rank"].append(np.fromiter(map(_RANK, heads), np.int32, n))
        p["sn"].append(np.fromiter(map(_SN, perfs), np.int64, n))
        p["collective"].append(_codes(list(map(_COLL_NAME, perfs)), self.names))
        p["msg_bytes"].append(np.fromiter(map(_SIZE, perfs), np.int64, n))
        p["exec_ns"].append(np.rint(exec_us * 1000.0).astype(np.int64))
        p["timing_source"].append(_codes(list(map(_SOURCE, perfs)), self.sources))
        coll_metas = list(map(_META, colls))
        if None in coll_metas:
            dumps = np.array([m.dump_timestamp_us if m else MISSING for m in coll_metas], dtype=np.int64)
        else:
            dumps = np.fromiter(map(_DUMP, coll_metas), np.int64, n)
        p["dump_us"].append(dumps)
        self.n_coll += n
        known = dumps[dumps >= 0]
        if known.size:
            low, high = int(known.min()), int(known.max())
            first, last = self.dump_range
            self.dump_range = [low if first == MISSING else min(first, low), max(last, high)]
        kernel = _kernel_spans(perfs)
        starts, stops = kernel or (np.full(n, MISSING, dtype=np.int64), np.full(n, MISSING, dtype=np.int64))
        if kernel is not None:  # verbose logs only
            self.verbose += int((starts >= 0).sum())
        p["kernel_start_us"].append(starts)
        p["kernel_stop_us"].append(stops)

    def _check_headers(self, headers: list[Any], line_of: Callable[[int], int], raw: Callable[[int], bytes]) -> None:
        """Note new communicators and refuse a record whose rank or size differs from the
        file's earlier lines (the first such record named by its line)."""
        ids = list(map(_ID, headers))
        index = self.comm_index
        for cid in dict.fromkeys(ids):  # new communicators, in the order of their first line
            if cid not in index:
                at = ids.index(cid)
                self._note_comm(self._full_header(raw(at), headers[at], line_of(at)), line_of(at))
        n = len(headers)
        codes = np.fromiter(map(index.__getitem__, ids), np.int64, n)
        known = np.array([self.comms[cid][:2] for cid in index], dtype=np.int64).reshape(-1, 2)
        bad = ((np.fromiter(map(_RANK, headers), np.int64, n) != known[codes, 0])
               | (np.fromiter(map(_NRANKS, headers), np.int64, n) != known[codes, 1]))
        if bad.any():
            at = int(np.flatnonzero(bad)[0])
            self._note_comm(headers[at], line_of(at))

    def _full_header(self, line: bytes, lean: _LeanHeader, line_no: int) -> Any:
        return _full_header(self.path, self.salvage, line, lean, line_no)

    def _note_comm(self, header: Any, line: int) -> None:
        known = self.comms.get(header.id)
        if known is None:
            entry = (header.rank, header.n_ranks, header.nnodes, header.comm_name)
            if not 0 <= header.rank < header.n_ranks:
                raise TraceError(f"{self.path}: line {line}: communicator {header.id}: rank {header.rank} is not "
                                 f"below n_ranks {header.n_ranks}")
            self.comm_index[header.id] = len(self.comm_index)
            self.comms[header.id] = entry
        elif known[:2] != (header.rank, header.n_ranks):
            raise TraceError(f"{self.path}: line {line}: communicator {header.id} logged with rank {header.rank} of "
                             f"{header.n_ranks}, earlier lines say rank {known[0]} of {known[1]} (one file "
                             "holds one process: files of two processes concatenated?)")

    def result(self, info: dict[str, Any]) -> LoggedCollectives:
        columns: dict[str, Any] = self._columns()
        if len(self.hosts) > 1 or len(self.pids) > 1:
            raise TraceError(f"{self.path}: records of {len(self.pids)} processes (hosts "
                             f"{', '.join(sorted(self.hosts))}); an Inspector log holds one process")
        info.update(host=next(iter(self.hosts), ""), pid=next(iter(self.pids), MISSING),
                    format_version=",".join(sorted(v for v in self.versions if v)),
                    n_collective_records=self.n_coll, n_p2p_records=self.n_p2p,
                    n_verbose_records=self.verbose, dump_first_us=self.dump_range[0], dump_last_us=self.dump_range[1])
        return LoggedCollectives(str(self.path), list(self.comm_index), self.comms, columns, info,
                                 dict(self.skipped), vocabularies={"collective": list(self.names),
                                                                   "timing_source": list(self.sources)})


def _newlines(text: bytes) -> int:
    """Newlines in ``text`` (NumPy: ~5 times ``bytes.count``'s speed on megabytes)."""
    return int(np.count_nonzero(np.frombuffer(text, dtype=np.uint8) == 10))


def _batch_text(builder: _Builder, text: bytes, first_line: int, salvage: bool) -> None:
    """Decode complete lines (newline-delimited JSON, blank lines allowed) in one msgspec call;
    on a failure, line by line to name the bad one."""
    try:
        records = _DECODE_LEAN.decode_lines(text)
    except _UNDECODABLE:
        _batch(builder, text.split(b"\n"), first_line, salvage)
        return
    def raw(i: int) -> bytes:
        """The text of record ``i`` (the ``i``-th non-blank line; few are asked for, early ones)."""
        start, seen = 0, -1
        while True:
            end = text.find(b"\n", start)
            line = text[start:] if end < 0 else text[start:end]
            if line.strip():
                seen += 1
                if seen == i:
                    return line
            if end < 0:
                raise IndexError(i)
            start = end + 1

    lines: list[int] = []

    def line_of(i: int) -> int:
        """The file's line of record ``i`` (blank lines counted; computed once, when asked)."""
        if not lines:
            lines.extend(first_line + k for k, line in enumerate(text.split(b"\n")) if line.strip())
        return lines[i]

    try:
        builder.add(records, line_of, raw)
    except _BadRecord as exc:
        raise TraceError(f"{builder.path}: line {line_of(exc.index)}: {exc}") from None


def _batch(builder: _Builder, lines: list[bytes], first_line: int, salvage: bool) -> None:
    """Decode lines one by one (blank ones skipped), naming a bad one by its line number."""
    good, texts, numbers = [], [], []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            _DECODE_ONE.decode(line)  # every field checked: this path names the bad line
            good.append(_DECODE_LEAN.decode(line))
            texts.append(line)
            numbers.append(first_line + i)
        except _UNDECODABLE as exc:
            if not salvage:
                raise _not_a_record(builder.path, first_line + i, exc) from None
            builder.skip("malformed line")
    _add(builder, good, texts.__getitem__, numbers)


def _add(builder: _Builder, records: list[Any], raw: Callable[[int], bytes], lines: list[int]) -> None:
    """``builder.add``, naming the line (``lines[i]``: record i's, as the file counts them) of a
    record with an impossible value or a conflicting rank."""
    try:
        builder.add(records, lines.__getitem__, raw)
    except _BadRecord as exc:
        raise TraceError(f"{builder.path}: line {lines[exc.index]}: {exc}") from None


#: Bytes before the resume point whose hash must be unchanged for an incremental re-read.
RESUME_CHECK_BYTES = 4096


def read_log(path: str | os.PathLike[str], *, salvage: bool = False, rank: int | None = None,
             block_bytes: int = BLOCK_BYTES, since: LoggedCollectives | None = None) -> LoggedCollectives:
    """Stream one Inspector log (plain or gzip) into its collective records.

    Memory: one block of text at a time plus the compact columns. A last line without
    its newline that does not parse is the record being written: it is left unread and
    counted (``unread_tail_bytes``), not an error. A gzip stream cut short is an error
    (a gzipped log is finished: damage), unless ``salvage``: then it is read up to its last
    complete line and counted in ``skipped``.

    ``since``: this file's result of an earlier call. When the file is plain text, has not
    shrunk and its bytes before the point read up to then are unchanged (their last
    :data:`RESUME_CHECK_BYTES` hash the same), only the bytes appended since are read and
    added to it (``info["bytes_read_now"]`` says how many); otherwise the whole file is read.
    """
    stream = LogStream(path, salvage=salvage, rank=rank, block_bytes=block_bytes, since=since)
    while stream.step():
        pass
    return stream.result()


class LogStream:
    """One Inspector log read block by block (:func:`read_log` reads it to its end; :meth:`take`
    takes each block's records away. The streaming tax, :mod:`evtsync.sync.logtax`, reads many
    logs in lockstep with :class:`LogRounds` instead: one decode per round over all files).

    The file stays open until :meth:`step` returns False (the end: the last line and a
    damaged gzip stream handled as :func:`read_log` says) or :meth:`close`.
    """

    def __init__(self, path: str | os.PathLike[str], *, salvage: bool = False, rank: int | None = None,
                 block_bytes: int = BLOCK_BYTES, since: LoggedCollectives | None = None) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise TraceError(f"{self.path}: {path_problem(self.path)}")
        self.salvage, self.rank, self.block_bytes = salvage, rank, block_bytes
        self.offset = _resume_offset(self.path, since)
        self.builder = _Builder(self.path) if self.offset == 0 else _Builder.resume(self.path, since)  # type: ignore[arg-type]
        self.builder.salvage = salvage
        self.line_no = 1 if self.offset == 0 else int(since.info["n_complete_lines"]) + 1  # type: ignore[union-attr]
        self._src: Any = None
        self._pending = b""
        self._total = 0
        self._info: dict[str, Any] | None = None

    def take(self) -> dict[str, np.ndarray]:
        """The collective records decoded since the last call, as :data:`RECORD_COLUMNS`
        (codes of this file's ``comm_ids`` and vocabularies), forgotten here."""
        return self.builder.take()

    def _open(self) -> Any:
        if self.offset:
            src: Any = open(self.path, "rb")  # noqa: SIM115 - closed in step() or close()
            src.seek(self.offset)
            return src
        return ByteSource(self.path)

    def step(self) -> bool:
        """Decode the complete lines of the next block; False at the end (then closed)."""
        if self._info is not None:
            return False
        if self._src is None:
            self._src = self._open()
        try:
            block = self._src.read(self.block_bytes)
            if block:
                self._total += len(block)
                data = self._pending + block if self._pending else block
                cut = data.rfind(b"\n")
                if cut < 0:
                    self._pending = data
                    return True
                self._pending = data[cut + 1:]
                complete = data[:cut]
                n_lines = _newlines(complete) + 1
                _batch_text(self.builder, complete, self.line_no, self.salvage)
                self.line_no += n_lines
                return True
            self._finish()
        except BaseException:
            self.close()
            raise
        return False

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._src is not None:
            self._src.close()
            self._src = None

    def _finish(self) -> None:
        src, path, builder = self._src, self.path, self.builder
        eof_error = getattr(src, "eof_error", None)
        is_gzip = bool(getattr(src, "gzip", False))
        self.close()
        line_no, pending = self.line_no, self._pending
        tail = pending.strip()
        unread = 0
        if tail:
            try:
                _DECODE_ONE.decode(tail)
                record = _DECODE_LEAN.decode(tail)
            except _UNDECODABLE:
                record = None
            if record is not None:
                _add(builder, [record], lambda _: tail, [line_no])
                line_no += 1
            else:
                unread = len(pending)
                log.warning("%s: last line (%d bytes, line %d) is incomplete: a log still being written? read up "
                            "to the last complete record", path, unread, line_no)
        if eof_error:  # a gzipped log is a finished one: cut short is damage, not growth
            if not self.salvage:
                raise TraceError(f"{path}: {eof_error}; pass --salvage to read up to the last complete record")
            log.warning("%s: %s; read up to the last complete record (--salvage)", path, eof_error)
            builder.skip("gzip stream cut short (records after the cut lost)")
        offset, total = self.offset, self._total
        consumed = offset + total - unread
        self._info = {"path": str(path), "bytes_decompressed": offset + total, "bytes_read_now": total,
                      "unread_tail_bytes": unread, "truncated": bool(eof_error),
                      "n_lines": line_no - 1 + (1 if unread else 0), "n_complete_lines": line_no - 1,
                      "consumed_bytes": consumed, "gzip": is_gzip,
                      "resume_sha256": "" if is_gzip else _hash_before(path, consumed)}
        if builder.n_coll == 0 and not builder.n_p2p:
            raise TraceError(f"{path}: no NCCL Inspector records (empty log, or a log of a process that ran "
                             "no collective at or above NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES)")

    def result(self) -> LoggedCollectives:
        """The file's records not taken yet, its communicators, metadata and counts (after the end)."""
        if self._info is None:
            raise RuntimeError("LogStream.result() before the end of the file")
        result = self.builder.result(dict(self._info))
        result.given_rank = self.rank
        return result


def _hash_before(path: Path, offset: int, handle: Any = None) -> str:
    """sha256 of the :data:`RESUME_CHECK_BYTES` bytes before ``offset`` of a plain file (read
    through ``handle``, the file already open, when given: one open per file less, issue 48; a
    file object, or an OS file descriptor)."""
    start = max(0, offset - RESUME_CHECK_BYTES)
    if isinstance(handle, int):
        return hashlib.sha256(_pread_all(handle, offset - start, start)).hexdigest()
    if handle is not None:
        handle.seek(start)
        return hashlib.sha256(handle.read(offset - start)).hexdigest()
    with open(path, "rb") as fh:
        fh.seek(start)
        return hashlib.sha256(fh.read(offset - start)).hexdigest()


def _pread_all(fd: int, size: int, offset: int) -> bytes:
    """``size`` bytes of open file ``fd`` from ``offset`` (fewer at its end)."""
    parts, got = [], 0
    while got < size:
        part = os.pread(fd, size - got, offset + got)
        if not part:
            break
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def _resume_offset(path: Path, since: LoggedCollectives | None) -> int:
    """Where an incremental re-read of ``path`` may start (0: read it all)."""
    if since is None or since.path != str(path) or since.info.get("gzip", True):
        return 0
    offset = int(since.info.get("consumed_bytes", 0))
    if offset <= 0 or path.stat().st_size < offset or _hash_before(path, offset) != since.info.get("resume_sha256"):
        log.info("%s: changed before the point read up to last time; reading it whole", path)
        return 0
    return offset


#: CPU seconds to read one log in one process, per file and per byte of text (~150 MB/s per
#: core), and what a process pool adds to move one file's columns back (pickled in the worker,
#: unpickled here: the columns are ~1/7 of the text); measured on 32 files of 1 MB and 64 of
#: 50 KB (docs/performance/inspector.md).
READ_CPU_S = (0.1e-3, 6.5e-9)
TRANSFER_CPU_S = (0.1e-3, 0.4e-9)


def inspector_work(text_sizes: Sequence[int]) -> Work:
    """The cost of reading logs of these text sizes (bytes, decompressed) in one process, for
    the pool model (:func:`evtsync.core.parallel.pool_pays`), the rule every reader's pool follows."""
    n, total = len(text_sizes), sum(text_sizes)
    return Work(items=n, cpu_s=n * READ_CPU_S[0] + total * READ_CPU_S[1],
                transfer_cpu_s=n * TRANSFER_CPU_S[0] + total * TRANSFER_CPU_S[1])


class InspectorReader:
    """NCCL Inspector JSON-lines logs (see the module docstring)."""

    name = "nccl-inspector"
    description = "NCCL Inspector logs"
    suffixes: tuple[str, ...] = (".log", ".jsonl", ".log.gz", ".jsonl.gz")
    produces = "collectives"

    def sniff(self, head: bytes) -> bool:
        """The first line is a JSON object with a ``header`` and a ``coll_perf``/``p2p_perf``."""
        first = head.lstrip(b"\xef\xbb\xbf \t\r\n").split(b"\n", 1)[0]
        return (first.startswith(b"{") and b'"header"' in first
                and (b'"coll_perf"' in first or b'"p2p_perf"' in first))

    def read(self, path: str | os.PathLike[str], *, salvage: bool = False,
             rank: int | None = None, rank_from: str | None = None) -> LoggedCollectives:
        """One log's collective records (see :func:`read_log`; ``rank_from`` does not apply:
        the ranks come from the communicators every log names)."""
        return read_log(path, salvage=salvage, rank=rank)

    def cost(self, path: str | os.PathLike[str]) -> int:
        """The text bytes to decode (a gzip file's recorded inflated size)."""
        return json_bytes_estimate(os.fspath(path))


INSPECTOR = InspectorReader()


#: Columns of ``TraceSet.logged``: one row per collective record of an Inspector log.
LOGGED_COLUMNS = ["rank", "window", "pg", "pg_desc", "local_rank", "index", "collective", "timing_source",
                  "msg_bytes", "dur_ns", "ts_ns", "end_ns", "dump_ns", "host"]
#: Partial collectives named one by one in a problem line (the rest are counted).
_NAMED_PARTIAL = 3


def global_ranks(logs: Sequence[LoggedCollectives]) -> tuple[list[int], str, int]:
    """Each file's global rank, where it came from, and the world size (-1 if unknown).

    The rank the user gave wins; else the file's rank in the world communicator: the
    communicator logged by every file with the most ranks (a job's default process group).
    """
    # ``logs`` may make each file's when read (LogRounds.shells, results: issue 48): one pass finds
    # the given ranks and the world communicator; without given ranks a second reads each file's
    # rank in it (a third, on the error path only, names the largest communicator)
    given: list[int | None] = []
    first: dict[str, tuple[int, int, int, str]] = {}
    in_every: set[str] = set()
    for k, log_ in enumerate(logs):
        given.append(log_.given_rank)
        if k == 0:
            first, in_every = log_.comms, set(log_.comms)
        else:
            in_every.intersection_update(log_.comms)
    world = max(in_every, key=lambda c: (first[c][1], c)) if in_every else None
    if all(g is not None for g in given):
        # the world size is known only from a communicator every file logs
        return [int(g) for g in given], "given", first[world][1] if world else MISSING  # type: ignore[arg-type]
    if any(g is not None for g in given):
        raise TraceError("some Inspector logs have a rank given (RANK=PATH) and others not: give every file's "
                         "rank, or none")
    if world is None:
        largest = max((log_.comms[c][1] for log_ in logs for c in log_.comms), default=0)
        raise TraceError(f"cannot tell the global rank of each of the {len(logs)} Inspector logs: no "
                         f"communicator is logged by all of them (the largest has {largest} ranks; a world "
                         "communicator's collectives may be below NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES); give "
                         "the ranks with --rank-from order or RANK=PATH")
    ranks = [log_.comms[world][0] for log_ in logs]
    return ranks, f"world communicator {world}", first[world][1]


@dataclass
class JobLayout:
    """Who is who in a job's Inspector logs: each file's global rank (``ranks``, in file
    order), where it came from, the world size, the communicators (``comm_rows``: id ->
    n_ranks, nnodes, name, members local rank -> global rank) and the rank-set problems
    (missing ranks, communicator members without a log)."""

    ranks: list[int]
    rank_source: str
    world: int
    owner: Mapping[int, str]
    comm_rows: dict[str, dict[str, Any]]
    problems: list[str]
    missing: list[int]


def job_layout(logs: Sequence[LoggedCollectives]) -> JobLayout:
    """The :class:`JobLayout` of read logs (their ``comms``; the records are not needed)."""
    from evtsync.trace.tables import rank_ranges

    ranks, rank_source, world = global_ranks(logs)
    # each rank's file, by index (its path made when an error names it: issue 48, a path string and
    # a dict entry per rank held to the end otherwise); the whole-table path's logs keep their paths
    path_of = logs.path_of if isinstance(logs, _FileResults) else [log_.path for log_ in logs].__getitem__
    owner = _RankFiles(ranks, path_of)
    twice = owner.first_repeat()
    if twice is not None:
        rank = ranks[twice]
        raise TraceError(f"two Inspector logs are rank {rank}: {owner[rank]} and {path_of(twice)} (the same "
                         "process twice, or logs of two jobs?)")
    problems: list[str] = []
    if world > 0:
        beyond = sorted(r for r in ranks if r >= world)
        if beyond:
            raise TraceError(f"rank(s) {rank_ranges(beyond)} not below the world size {world}")
        missing = sorted(set(range(world)).difference(ranks))
        if missing:
            problems.append(f"rank(s) {rank_ranges(missing)} have no Inspector log (world size {world}; "
                            f"{len(ranks)} present: {rank_ranges(ranks)})")
    else:
        missing = []
    # communicators: members, sizes, names
    comm_rows: dict[str, dict[str, Any]] = {}
    for log_, rank in zip(logs, ranks, strict=True):
        for cid, (local, n_ranks, nnodes, name) in log_.comms.items():
            row = comm_rows.setdefault(cid, {"n_ranks": n_ranks, "nnodes": nnodes, "name": name, "members": {}})
            if row["n_ranks"] != n_ranks:
                raise TraceError(f"communicator {cid}: {log_.path} says {n_ranks} ranks, other logs "
                                 f"{row['n_ranks']}")
            if local in row["members"]:
                raise TraceError(f"communicator {cid}: two logs are its rank {local}: "
                                 f"{owner[row['members'][local]]} and {log_.path}")
            row["members"][local] = rank
            if name and name != "unknown":
                row["name"] = name
    for cid, row in sorted(comm_rows.items()):
        lacking = sorted(set(range(row["n_ranks"])).difference(row["members"]))
        if lacking:
            problems.append(f"communicator {cid} ({row['name'] or 'unnamed'}): its rank(s) "
                            f"{rank_ranges(lacking)} of {row['n_ranks']} have no log")
    return JobLayout(ranks, rank_source, world, owner, comm_rows, problems, missing)


def job_tables(logs: Sequence[LoggedCollectives], layout: JobLayout, *, log_counts: bool = True) -> dict[str, Any]:
    """The TraceSet fields of a job's logs other than ``logged`` and ``problems``: ``ranks``
    (one row per file), ``process_groups`` (one per communicator), ``skipped``,
    ``untabulated``, ``missing_ranks``, ``scope`` and ``source``; ``log_counts``: as for
    :func:`job_rank_columns`."""
    ranks = layout.ranks
    ranks_table = pd.DataFrame(job_rank_columns(logs, layout, log_counts=log_counts)).sort_values(
        "rank", kind="stable")
    untabulated = [{"rank": rank, "window": 0, "phase": "record", "category": "p2p_perf",
                    "count": log_.info["n_p2p_records"], "reason": "p2p operation: no collective tax"}
                   for log_, rank in zip(logs, ranks, strict=True) if log_.info["n_p2p_records"]]
    return {"ranks": ranks_table.reset_index(drop=True),
            "process_groups": pd.DataFrame(job_group_rows(layout), columns=JOB_GROUP_COLUMNS),
            "skipped": pd.DataFrame(job_skipped_rows(logs, layout), columns=JOB_SKIPPED_COLUMNS),
            "scope": "collectives",
            "untabulated": pd.DataFrame(untabulated, columns=["rank", "window", "phase", "category", "count", "reason"]),
            "missing_ranks": tuple(layout.missing), "source": INSPECTOR.name}


#: The columns of the ``process_groups`` table of Inspector logs (:func:`job_group_rows`).
JOB_GROUP_COLUMNS = ["pg_name", "pg_desc", "pg_size", "pg_ranks", "backend_config", "seen_on_ranks"]
#: The columns of the ``skipped`` table of Inspector logs (:func:`job_skipped_rows`).
JOB_SKIPPED_COLUMNS = ["rank", "window", "reason", "count"]


#: The info field each column of :func:`job_rank_columns` is made from, where the names differ.
_RANK_INFO_FIELD = {"n_events": "n_lines", "start_ns": "dump_first_us", "end_ns": "dump_last_us"}


def job_rank_columns(logs: Sequence[LoggedCollectives], layout: JobLayout,
                     columns: Sequence[str] | None = None, *, log_counts: bool = True) -> dict[str, list[Any]]:
    """The ``ranks`` table of a job's logs as one list per column, in file order (one row per
    file; :func:`job_tables` sorts it by rank), or only ``columns`` of it (the others not gathered:
    issue 48, ~700 bytes a file for the whole table at once). Logs the job's counts (unless
    ``log_counts`` is False: a caller that logged them already)."""
    n_logs = len(logs)
    # the info fields read: each column's (n_events is n_lines, ...), and the log line's two sums
    wanted = None if columns is None else {_RANK_INFO_FIELD.get(c, c) for c in columns} | {
        "n_collective_records", "n_p2p_records"}
    fields = tuple(name for name in ("host", "pid", "n_lines", "n_collective_records", "n_p2p_records",
                                     "n_verbose_records", "format_version", "dump_first_us", "dump_last_us",
                                     "unread_tail_bytes", "truncated", "bytes_decompressed")
                   if wanted is None or name in wanted)
    extra = tuple(name for name in ("path", "n_communicators") if wanted is None or name in wanted)
    # one pass, one list per column: not one dict per file at once (~1.5 KB each: issue 48)
    got: dict[str, list[Any]] = {name: [] for name in (*fields, *extra)}
    for log_ in logs:
        info = log_.info
        for name in fields:
            got[name].append(info[name])
        if extra:
            if "path" in got:
                got["path"].append(log_.path)
            if "n_communicators" in got:
                got["n_communicators"].append(len(log_.comms))
    if log_counts:
        log.info("%d Inspector log(s): %d collective records in %d communicator(s), %d p2p records not used",
                 n_logs, sum(got["n_collective_records"]), len(layout.comm_rows), sum(got["n_p2p_records"]))
    make: dict[str, Callable[[], list[Any]]] = {
        "rank": lambda: layout.ranks, "rank_source": lambda: [layout.rank_source] * n_logs,
        "path": lambda: got["path"], "world_size": lambda: [layout.world] * n_logs,
        "source": lambda: [INSPECTOR.name] * n_logs, "gpu": lambda: ["unknown"] * n_logs,
        "host": lambda: got["host"], "pid": lambda: got["pid"], "n_events": lambda: got["n_lines"],
        "n_kernels": lambda: [0] * n_logs, "n_collective_records": lambda: got["n_collective_records"],
        "n_p2p_records": lambda: got["n_p2p_records"], "n_verbose_records": lambda: got["n_verbose_records"],
        "n_communicators": lambda: got["n_communicators"], "format_version": lambda: got["format_version"],
        "start_ns": lambda: [int(t) * 1000 if t != MISSING else MISSING for t in got["dump_first_us"]],
        "end_ns": lambda: [int(t) * 1000 if t != MISSING else MISSING for t in got["dump_last_us"]],
        "unread_tail_bytes": lambda: got["unread_tail_bytes"], "truncated": lambda: got["truncated"],
        "bytes_decompressed": lambda: got["bytes_decompressed"], "window": lambda: [0] * n_logs}
    return {name: make[name]() for name in (make if columns is None else columns)}


def job_group_rows(layout: JobLayout) -> list[dict[str, Any]]:
    """One row per communicator of a job's logs (:data:`JOB_GROUP_COLUMNS`), by id."""
    from evtsync.trace.tables import format_ranks

    return [{"pg_name": cid, "pg_desc": row["name"], "pg_size": row["n_ranks"],
             "pg_ranks": format_ranks(tuple(row["members"][k] for k in sorted(row["members"]))),
             "backend_config": "nccl", "seen_on_ranks": format_ranks(tuple(sorted(row["members"].values())))}
            for cid, row in sorted(layout.comm_rows.items())]


def job_skipped_rows(logs: Sequence[LoggedCollectives], layout: JobLayout) -> list[dict[str, Any]]:
    """The records of a job's logs not used, by file and reason (:data:`JOB_SKIPPED_COLUMNS`)."""
    skipped: list[dict[str, Any]] = []
    incomplete: list[dict[str, Any]] = []
    for log_, rank in zip(logs, layout.ranks, strict=True):  # one pass (each file's results may be made anew)
        skipped += [{"rank": rank, "window": 0, "reason": reason, "count": n} for reason, n in log_.skipped.items()]
        if log_.info["unread_tail_bytes"]:
            incomplete.append({"rank": rank, "window": 0, "reason": "incomplete last line (log still being written?)",
                               "count": 1})
    return skipped + incomplete


def assemble_logs(logs: list[LoggedCollectives]) -> dict[str, Any]:
    """The TraceSet fields of a job's Inspector logs: ``logged`` (one row per collective record,
    global ranks), ``ranks`` (one row per file), ``process_groups`` (one per communicator)
    and ``problems`` (missing ranks, communicator members without a log, collectives seen
    by only some members), refused before the tax unless partial sets are allowed."""
    layout = job_layout(logs)
    ranks, comm_rows, owner = layout.ranks, layout.comm_rows, layout.owner
    # the collective records, with global ranks, one numpy concatenation per column
    comm_names = sorted(comm_rows)
    comm_code = {cid: i for i, cid in enumerate(comm_names)}
    lengths = [len(log_.columns["sn"]) for log_ in logs]
    rank_col = np.repeat(np.asarray(ranks, dtype=np.int32), lengths)
    pg_codes = np.concatenate([np.asarray([comm_code[c] for c in log_.comm_ids], dtype=np.int32)[log_.columns["comm"]]
                               for log_ in logs]) if logs else np.zeros(0, np.int32)

    def column(name: str) -> np.ndarray:
        return np.concatenate([log_.columns[name] for log_ in logs])

    def labels(name: str) -> pd.Categorical:
        words = sorted({w for log_ in logs for w in log_.vocabularies[name]})
        code = {w: i for i, w in enumerate(words)}
        parts = [np.asarray([code[w] for w in log_.vocabularies[name]], dtype=np.int32)[log_.columns[name]]
                 if len(log_.columns[name]) else np.zeros(0, np.int32) for log_ in logs]
        return pd.Categorical.from_codes(np.concatenate(parts) if parts else np.zeros(0, np.int32), categories=words)

    starts, stops, dumps = column("kernel_start_us"), column("kernel_stop_us"), column("dump_us")
    descs = sorted({comm_rows[c]["name"] for c in comm_names})
    desc_of_comm = np.asarray([descs.index(comm_rows[c]["name"]) for c in comm_names], dtype=np.int32)
    hosts = sorted({log_.info["host"] for log_ in logs})
    host_code = {h: i for i, h in enumerate(hosts)}
    logged = pd.DataFrame({
        "rank": rank_col, "window": np.zeros(len(rank_col), dtype=np.int32),
        "pg": pd.Categorical.from_codes(pg_codes, categories=comm_names),
        "pg_desc": pd.Categorical.from_codes(desc_of_comm[pg_codes], categories=descs),
        "local_rank": column("local_rank"), "index": column("sn"),
        "collective": labels("collective"), "timing_source": labels("timing_source"),
        "msg_bytes": column("msg_bytes"), "dur_ns": column("exec_ns"),
        "ts_ns": np.where(starts >= 0, starts * 1000, MISSING),
        "end_ns": np.where(stops >= 0, stops * 1000, MISSING),
        "dump_ns": np.where(dumps >= 0, dumps * 1000, MISSING),
        "host": pd.Categorical.from_codes(np.repeat(np.asarray([host_code[log_.info["host"]] for log_ in logs],
                                                               dtype=np.int32), lengths), categories=hosts)})
    # in (communicator, sequence number, rank) order: one numpy lexsort on the codes
    sn = logged["index"].to_numpy()
    order = np.lexsort((rank_col, sn, pg_codes))
    logged = logged.take(order).reset_index(drop=True)
    pg_sorted, sn_sorted, rank_sorted = pg_codes[order], sn[order], rank_col[order]
    dup = np.flatnonzero((pg_sorted[1:] == pg_sorted[:-1]) & (sn_sorted[1:] == sn_sorted[:-1])
                         & (rank_sorted[1:] == rank_sorted[:-1]))
    if dup.size:
        first = logged.iloc[int(dup[0]) + 1]
        raise TraceError(f"communicator {first['pg']}: collective {int(first['index'])} logged twice by rank "
                         f"{int(first['rank'])} ({owner[int(first['rank'])]}): {dup.size} repeated record(s)")
    problems = layout.problems + partial_problems(logged, comm_rows)
    return {**job_tables(logs, layout), "problems": problems, "logged": logged}


def partial_problems(logged: pd.DataFrame, comm_rows: dict[str, dict[str, Any]],
                      totals: dict[str, int] | None = None) -> list[str]:
    """One line per communicator with collectives logged by only some of its present members
    (``totals``: each communicator's number of collectives, when ``logged`` holds only some;
    by default counted in ``logged``)."""
    from evtsync.trace.tables import rank_ranges

    if logged.empty:
        return []
    out = []
    counts = logged.groupby(["pg", "index"], sort=True)["rank"].size()
    for cid, per_sn in counts.groupby(level=0, sort=True):
        present = len(comm_rows[cid]["members"])
        short = per_sn[per_sn < present]
        if short.empty:
            continue
        members = set(comm_rows[cid]["members"].values())
        sub = logged[logged["pg"] == cid]
        examples = []
        for (_, sn), _n in short.head(_NAMED_PARTIAL).items():
            have = set(sub.loc[sub["index"] == sn, "rank"].tolist())
            examples.append(f"sn {sn} lacks rank(s) {rank_ranges(members - have)}")
        total = len(per_sn) if totals is None else totals.get(str(cid), len(per_sn))
        out.append(f"communicator {cid} ({comm_rows[cid]['name'] or 'unnamed'}): {len(short)} of {total} "
                   f"collective(s) logged by only some of its {present} rank(s) with a log (ring-buffer loss, a "
                   f"rank that died, or the size cutoff): {'; '.join(examples)}"
                   + (" ..." if len(short) > _NAMED_PARTIAL else ""))
    return out



_P2P_OF = attrgetter("p2p_perf")

#: Rows of the template scanner's int64 output (:func:`evtsync.trace.scan.scan_template_lines`),
#: one per field read, and the value slot of each field read: (path, kind name, row).
_T_ID, _T_RANK, _T_NRANKS, _T_HOST, _T_PID, _T_DUMP, _T_COLL, _T_SN, _T_SIZE, _T_SOURCE = range(10)
_T_ROWS = 10
_TEMPLATE_READ: dict[tuple[str, ...], tuple[str, int]] = {
    ("header", "id"): ("str", _T_ID), ("header", "rank"): ("int", _T_RANK),
    ("header", "n_ranks"): ("int", _T_NRANKS), ("metadata", "hostname"): ("str", _T_HOST),
    ("metadata", "pid"): ("int", _T_PID), ("metadata", "dump_timestamp_us"): ("int", _T_DUMP),
    ("coll_perf", "coll"): ("str", _T_COLL), ("coll_perf", "coll_sn"): ("int", _T_SN),
    ("coll_perf", "coll_msg_size_bytes"): ("int", _T_SIZE), ("coll_perf", "coll_timing_source"): ("str", _T_SOURCE),
    ("coll_perf", "coll_exec_time_us"): ("float", 0)}
#: Fields a collective record must have (the lean struct's required ones).
_TEMPLATE_REQUIRED = (("header", "id"), ("header", "rank"), ("header", "n_ranks"), ("coll_perf", "coll"),
                      ("coll_perf", "coll_sn"), ("coll_perf", "coll_exec_time_us"))


@dataclass(frozen=True)
class _Template:
    """A line template for :func:`evtsync.trace.scan.scan_template_lines` (its literals, value
    slots and the rows they fill) and the fields read that the line has."""

    lit: np.ndarray
    lit_off: np.ndarray
    kind: np.ndarray
    col: np.ndarray
    present: frozenset[tuple[str, ...]]
    has_meta: bool


def _line_template(line: bytes) -> _Template | None:
    """The template of a plain non-verbose collective record shaped as ``line`` (its keys in
    its order, its value types), or None for any other line (a p2p or verbose record, lists,
    a read field of another type, metadata null, nesting beyond 3): msgspec then decodes.
    Every line the scanner reads must equal the template byte for byte outside the values."""
    from evtsync.trace import scan

    try:
        obj = msgspec.json.decode(line)
    except _UNDECODABLE:
        return None
    if (not isinstance(obj, dict) or "p2p_perf" in obj or not isinstance(obj.get("header"), dict)
            or not isinstance(obj.get("coll_perf"), dict) or obj["coll_perf"].get("event_trace_ts") is not None
            or not isinstance(obj.get("metadata", {}), dict)):
        return None
    lits: list[str] = []
    kinds: list[int] = []
    cols: list[int] = []
    present: set[tuple[str, ...]] = set()
    cur: list[str] = []
    skip = {str: scan.SLOT_SKIP_STR, int: scan.SLOT_SKIP_NUM, float: scan.SLOT_SKIP_NUM}
    read = {"str": scan.SLOT_STR, "int": scan.SLOT_INT, "float": scan.SLOT_FLOAT}

    def walk(value: dict[str, Any], path: tuple[str, ...]) -> bool:
        cur.append("{")
        for j, (key, v) in enumerate(value.items()):
            cur.append(("," if j else "") + msgspec.json.encode(key).decode() + ":")
            where = (*path, key)
            if isinstance(v, dict):
                if len(where) > 2 or not walk(v, where):
                    return False
                continue
            if v is None or isinstance(v, bool):
                if where in _TEMPLATE_READ:
                    return False
                cur.append(msgspec.json.encode(v).decode())
                continue
            if type(v) not in skip:
                return False  # a list
            got = _TEMPLATE_READ.get(where)
            if got is None:
                kind, col = skip[type(v)], 0
            else:
                want = got[0]
                if (want == "str") != isinstance(v, str) or (want == "int" and not isinstance(v, int)):
                    return False
                kind, col = read[want], got[1]
                present.add(where)
            if isinstance(v, str):
                cur.append('"')
            lits.append("".join(cur))
            cur.clear()
            kinds.append(kind)
            cols.append(col)
        cur.append("}")
        return True

    if not walk(obj, ()) or not all(p in present for p in _TEMPLATE_REQUIRED):
        return None
    lits.append("".join(cur))
    encoded = [x.encode() for x in lits]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(e) for e in encoded])
    return _Template(np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), offsets,
                     np.asarray(kinds, dtype=np.int64), np.asarray(cols, dtype=np.int64), frozenset(present),
                     "metadata" in obj)


_GZIP = -2  # LogRounds._fd of an open gzip file (its ByteSource is in LogRounds._gz)


def _text_bytes(paths: Iterable[str]) -> int:
    """The logs' text in bytes for the decoder's rule: plain files by their size (no open),
    gzip ones (by name) by the size their trailer records (:func:`json_bytes_estimate`)."""
    return sum(json_bytes_estimate(Path(p)) if p.endswith(".gz") else os.stat(p).st_size for p in paths)


class LogRounds:
    """Many Inspector logs read in lockstep, one block per file per round, the complete lines of
    many files decoded by one call per ~1 MiB slice and turned into job-wide columns at once
    (issue 48: a call per file and block cost ~0.15 ms each, 57,000 of them at 4,096 logs): by
    the compiled line-template scanner where it is loaded (:meth:`_scan`), else, or where it
    declines a slice, by msgspec.

    The streaming tax (:mod:`evtsync.sync.logtax`) takes each round's records with
    :meth:`round`. The per-file state is small and fixed (:meth:`state_bytes`): the open
    file (unbuffered for plain text), the unfinished last line, a few counters in arrays
    shared by all files, and the communicators the file logs; the round's text and records
    are the only memory that scales with the block size.

    The checks and counts are those of :class:`LogStream` (same errors, same words), except
    that a file's format version is read from its first record (a log is written by one
    plugin version).
    """

    def __init__(self, files: Sequence[tuple[Path, int | None]], *, salvage: bool = False,
                 block_bytes: int = BLOCK_BYTES, scan_lines: bool = True) -> None:
        # the files as a compact list (a Path per file made when needed: ~570 bytes a file held
        # otherwise, issue 48); paths[i] and given[i] read it
        self.files = FileList.of(files)
        n = len(self.files)
        self.paths, self.given = self.files.paths, self.files.ranks
        for i in range(n):
            if not os.path.isfile(self.files.path_str(i)):
                path = self.files.path(i)
                raise TraceError(f"{path}: {path_problem(path)}")
        self.salvage, self.block_bytes = salvage, block_bytes
        self.comm_code: dict[str, int] = {}
        self.comm_ids: list[str] = []
        self.comm_size: list[int] = []
        self.names: dict[str, int] = {}  # collective type -> job-wide code
        self.sources: dict[str, int] = {}  # timing source -> job-wide code
        self.host_code: dict[str, int] = {}
        self.version_code: dict[str, int] = {}
        # each file's communicators: (communicator code * n + file) -> (rank in it, n_ranks, nnodes,
        # code of its comm_name in comm_names), a sorted key array and its values (arrays, not a
        # dict per file: ~330 bytes per file of Python objects, issue 48); pairs noted since, not
        # merged yet
        self.comm_names: dict[str, int] = {}
        self._new_pairs: list[tuple[int, int, int, int, int]] = []
        self._keys = np.zeros(0, dtype=np.int64)
        self._known = np.zeros((0, 4), dtype=np.int64)
        z = np.zeros(n, dtype=np.int64)
        self.line_no, self.total = z + 1, z.copy()
        self.n_coll, self.n_p2p, self.n_neither, self.verbose = z.copy(), z.copy(), z.copy(), z.copy()
        self.dump_lo, self.dump_hi = np.full(n, np.iinfo(np.int64).max), np.full(n, MISSING, dtype=np.int64)
        self.host, self.pid, self.version = np.full(n, -1), np.full(n, MISSING, dtype=np.int64), np.full(n, -1)
        self.seen_host, self.seen_pid = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        self.extra_hosts: dict[int, set[int]] = {}  # files with records of more than one process
        self.extra_pids: dict[int, set[int]] = {}
        self.malformed: dict[int, int] = {}
        # each open plain file as its OS file descriptor (4 bytes; a file object is ~250 bytes
        # a file: issue 48), -1 when not open, GZIP when it is a gzip one in ``_gz``
        self._fd = array("i", [-1]) * n
        self._gz: dict[int, Any] = {}  # the open gzip files' ByteSource
        self._pending: dict[int, bytes] = {}  # the files' unfinished last lines (the few held)
        # each file's end (:meth:`_finish`), as arrays: ~50 bytes a file, not a dict of ~1 KB (issue 48)
        self.ended = np.zeros(n, dtype=bool)
        self.unread, self.complete_lines = z.copy(), z.copy()
        self.truncated, self.gzip = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        self.digest = np.zeros((n, 32), dtype=np.uint8)  # sha256 of the bytes before the resume point
        self.active = list(range(n))
        self.rounds = 0
        #: the compiled line-template scanner, where the trace scanner's rule loads it for these
        #: logs' bytes (:func:`evtsync.trace.decode.template_scanner`), else None (msgspec only)
        self.scanner = (template_scanner(_text_bytes(map(self.files.path_str, range(n)))) if scan_lines
                        else None)
        #: slices of lines read by the scanner and by msgspec (the scanner declined them, or no
        #: scanner), and lines of scanned slices that msgspec read alone (another layout)
        self.scanned = {"scanner": 0, "msgspec": 0, "lines alone": 0}
        self._template: _Template | None = None  # the last slice's line template

    # ---- reading
    def round(self) -> dict[str, np.ndarray]:
        """Read one block of every file not ended, decode the complete lines; the collective
        records as int64 columns (``file``, then :data:`RECORD_COLUMNS` in job-wide codes).

        The lines are decoded as they are read, in slices of whole blocks of about
        :data:`DECODE_BYTES` (one decoder call each, whatever the number of files): only one
        slice of text lives at once, not the round's (issue 48), so a round may be large."""
        chunks, owners, still, ended, sizes, parts = [], [], [], [], [], []
        size, fds, pendings = self.block_bytes, self._fd, self._pending
        read, seek = os.read, os.lseek
        held = 0
        try:
            for i in self.active:  # per file and round: one read, a few bytes operations
                fd = fds[i]
                if fd < 0:
                    fd = fds[i] = self._open(i) if fd == -1 else fd
                block = read(fd, size) if fd >= 0 else self._gz[i].read(size)
                if not block:
                    ended.append(i)
                    continue
                still.append(i)
                sizes.append(len(block))
                pending = pendings.pop(i, None)
                data = pending + block if pending else block
                cut = data.rfind(b"\n")
                if cut < 0:
                    pendings[i] = data
                    continue
                rest = len(data) - cut - 1
                if rest and fd >= 0:  # a plain file: its unfinished line is read again next round,
                    seek(fd, -rest, os.SEEK_CUR)  # not held (~half a line per file: issue 48)
                    sizes[-1] -= rest
                elif rest:
                    pendings[i] = data[cut + 1:]
                chunks.append(data[:cut])
                owners.append(i)
                held += cut
                if held >= DECODE_BYTES:
                    parts.append(self._decode_slice(chunks, owners))
                    chunks, owners, held = [], [], 0
            if chunks:
                parts.append(self._decode_slice(chunks, owners))
            self.total[still] += np.asarray(sizes, dtype=np.int64)
            self.active = still
            self.rounds += 1
            for i in ended:
                tail = self._finish(i)
                if tail is not None:
                    parts.append(tail)
        except BaseException:
            self.close()
            raise
        parts = [p for p in parts if len(p["sn"])]
        if len(parts) == 1:
            return parts[0]
        if not parts:
            return {name: np.zeros(0, dtype=np.int64) for name in ("file", *RECORD_COLUMNS)}
        return {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}

    def _decode_slice(self, chunks: list[bytes], owners: list[int]) -> dict[str, np.ndarray]:
        """A slice of the round's complete lines decoded at once: by the compiled template scanner
        where it is loaded (:meth:`_scan`), else by one msgspec call (a file's lines counted by its
        newlines); a failure, or blank lines, send each file's lines through :meth:`_lines`."""
        text = bytearray(b"\n").join(chunks)  # writable: the compiled scanner's argument type
        scanned = self._scan(text, chunks) if self.scanner is not None else None
        records = None
        if scanned is None:
            self.scanned["msgspec"] += 1
            counts = np.fromiter(map(methodcaller("count", b"\n"), chunks), np.int64, len(chunks)) + 1
            try:
                records = _DECODE_LEAN.decode_lines(text)
            except _UNDECODABLE:
                records = None
            fields = ends = None
        else:
            self.scanned["scanner"] += 1
            fields, counts, ends = scanned
        n_lines = int(counts.sum())
        owner = np.asarray(owners, dtype=np.int64)
        if fields is not None or (records is not None and len(records) == n_lines):
            files = np.repeat(owner, counts)
            first = np.cumsum(counts) - counts
            lines = np.arange(n_lines) - np.repeat(first - self.line_no[owner], counts)
            self.line_no[owner] += counts

            def raw(j: int) -> bytes:
                if ends is not None:  # the scanner's line ends
                    return bytes(text[int(ends[j - 1]) + 1 if j else 0:int(ends[j])])
                k = int(np.searchsorted(first, j, side="right")) - 1
                return chunks[k].split(b"\n")[j - int(first[k])]

            if fields is None:
                assert records is not None
                fields = self._fields(records)
            return self._checked(fields, files, lines, raw)
        out = []
        for chunk, i, n in zip(chunks, owners, counts.tolist(), strict=True):
            try:  # this file's lines alone, as LogStream decodes them
                mine = _DECODE_LEAN.decode_lines(chunk)
            except _UNDECODABLE:
                mine = None
            if mine is not None and len(mine) == n:
                out.append(self._columns(mine, np.full(n, i, dtype=np.int64), self.line_no[i] + np.arange(n),
                                         lambda j, chunk=chunk: chunk.split(b"\n")[j]))  # type: ignore[misc]
            else:
                out.append(self._lines(chunk, i, mine is None))
            self.line_no[i] += n
        return {name: np.concatenate([p[name] for p in out]) for name in out[0]}

    def _template_of(self, line: bytes) -> _Template | None:
        """The template of a slice's first ``line``: the last slice's when the line follows it (the
        scanner reads it alone: a few µs), else :func:`_line_template` of it (~0.3 ms)."""
        from evtsync.trace import scan

        last = self._template
        if last is not None and self.scanner is not None:
            one = np.frombuffer(bytearray(line), dtype=np.uint8)
            status, n, _, _ = self.scanner(one, 0, len(one), last.lit, last.lit_off, last.kind, last.col,
                                           np.empty((1, _T_ROWS), dtype=np.int64), np.empty(1), np.empty(1, np.int64),
                                           np.empty((2, 16), dtype=np.int64), np.zeros(64, dtype=np.int64), 0,
                                           scan.POW10)
            if status == scan.OK and n == 1:
                return last
        self._template = _line_template(line)
        return self._template

    def _scan(self, text: bytearray, chunks: list[bytes]) -> tuple[dict[str, Any], np.ndarray, np.ndarray] | None:
        """The fields (as :meth:`_fields` gives them) of the lines of ``text`` (``chunks`` joined by
        newlines) read by the compiled template scanner, each chunk's number of lines and where
        each line ends in ``text``. A line that does not follow the template of the slice's first
        line (a p2p or verbose record, another layout, a value outside the scanner's strict
        grammar) is decoded alone by msgspec and the scan goes on after it. None, for msgspec to
        decode the whole slice and name a bad line, where the first line has no template
        (:func:`_line_template`), a line msgspec cannot decode alone, a rank beyond 32 bits, or
        too many distinct strings."""
        from evtsync.trace import scan

        cut = text.find(b"\n")
        template = self._template_of(bytes(text if cut < 0 else text[:cut]))
        if template is None or self.scanner is None:
            return None
        buf = np.frombuffer(text, dtype=np.uint8)
        size = len(buf)
        cap = 4096  # distinct strings the scanner interns; the ids from cap up are this method's
        spans = np.empty((2, cap), dtype=np.int64)
        table = np.zeros(4 * cap, dtype=np.int64)
        extra: dict[str, int] = {}

        def word(w: str) -> int:
            return extra.setdefault(w, cap + len(extra))

        # fields the template lacks: their defaults, in every row the scanner fills
        absent = [(col, word(GPU_TIMING if path == ("coll_perf", "coll_timing_source") else "") if kind == "str"
                   else MISSING) for path, (kind, col) in _TEMPLATE_READ.items()
                  if kind != "float" and path not in template.present]

        def rows(n: int) -> np.ndarray:
            block = np.empty((n, _T_ROWS), dtype=np.int64)
            for col, value in absent:
                block[:, col] = value
            return block

        room = size // len(template.lit) + 2  # every scanned line holds the template's literals
        ints, floats, ends = rows(room), np.empty(room, dtype=np.float64), np.empty(room, dtype=np.int64)
        declined: list[tuple[int, Any]] = []
        pos = line = n_str = 0
        while pos < size:
            status, n, n_str, _ = self.scanner(buf, pos, size, template.lit, template.lit_off, template.kind,
                                               template.col, ints[line:], floats[line:], ends[line:], spans, table,
                                               n_str, scan.POW10)
            line += n
            pos = int(ends[line - 1]) + 1 if n else pos
            if status == scan.OK:
                break
            if status == scan.FULL and (n_str >= cap or 2 * (n_str + 1) > len(table)):
                return None  # too many distinct strings
            if line + 1 >= len(ends):  # more lines than room (FULL, or shorter lines declined)
                ints = np.concatenate([ints, rows(len(ends))])
                floats, ends = (np.concatenate([a, np.empty_like(a)]) for a in (floats, ends))
            if status == scan.FULL:
                continue
            end = text.find(b"\n", pos)
            end = size if end < 0 else end
            try:  # this line alone, as the msgspec path decodes it
                record = _DECODE_LEAN.decode(text[pos:end])
            except _UNDECODABLE:
                return None
            declined.append((line, record))
            ends[line] = end
            line, pos = line + 1, end + 1
        n_lines = line
        self.scanned["lines alone"] += len(declined)
        ints, floats, ends = ints[:n_lines], floats[:n_lines], ends[:n_lines]
        is_coll = np.ones(n_lines, dtype=bool)
        is_p2p = np.zeros(n_lines, dtype=bool)
        has_meta = np.full(n_lines, template.has_meta)
        if not template.has_meta:
            ints[:, _T_DUMP] = MISSING
        spans_of: list[tuple[int, int, int]] = []  # kernel spans of declined verbose records
        for at, record in declined:
            row, head, meta, perf = ints[at], record.header, record.metadata, record.coll_perf
            row[_T_ID], row[_T_RANK], row[_T_NRANKS] = word(head.id), head.rank, head.n_ranks
            has_meta[at] = meta is not None
            row[_T_HOST], row[_T_PID], row[_T_DUMP] = ((word(meta.hostname), meta.pid, meta.dump_timestamp_us)
                                                       if meta is not None else (word(""), MISSING, MISSING))
            is_coll[at] = perf is not None
            is_p2p[at] = perf is None and record.p2p_perf is not None
            if perf is not None:
                row[_T_COLL], row[_T_SN], row[_T_SIZE] = word(perf.coll), perf.coll_sn, perf.coll_msg_size_bytes
                row[_T_SOURCE], floats[at] = word(perf.coll_timing_source), perf.coll_exec_time_us
                kernel = _kernel_spans([perf])
                if kernel is not None and kernel[0][0] >= 0:
                    spans_of.append((at, int(kernel[0][0]), int(kernel[1][0])))
        if (np.abs(ints[:, _T_RANK]) >= 2**31).any() or (np.abs(ints[:, _T_NRANKS]) >= 2**31).any():
            return None  # Int32 fields: msgspec names the line
        strings = [bytes(text[a:b]).decode("ascii") for a, b in spans[:, :n_str].T.tolist()] + list(extra)
        width = cap + len(extra)

        def codes(col: int, book: dict[str, int], which: np.ndarray | None = None) -> np.ndarray:
            ids = ints[:, col] if which is None else ints[which, col]
            if declined:  # in order of first use, as msgspec's path adds new words
                first = np.full(width, len(ids))
                np.minimum.at(first, ids, np.arange(len(ids)))
                used = np.flatnonzero(first < len(ids))
                used = used[np.argsort(first[used], kind="stable")]
            else:  # the scanner numbers strings in order of first use; a default fills a whole column
                used = np.flatnonzero(np.bincount(ids, minlength=width))
            lut = np.zeros(width, dtype=np.int64)
            lut[used] = _codes([strings[k] if k < cap else strings[n_str + k - cap] for k in used.tolist()], book)
            return lut[ids]

        every_meta, every_coll = bool(has_meta.all()), bool(is_coll.all())
        meta_rows = None if every_meta else np.flatnonzero(has_meta)
        coll_rows = None if every_coll else np.flatnonzero(is_coll)

        def coll(col: int) -> np.ndarray:
            return ints[:, col].copy() if coll_rows is None else ints[coll_rows, col]

        kernel = None
        if spans_of:
            starts, stops = np.full(n_lines, MISSING, dtype=np.int64), np.full(n_lines, MISSING, dtype=np.int64)
            at_rows = [a for a, _, _ in spans_of]
            starts[at_rows], stops[at_rows] = [b for _, b, _ in spans_of], [c for _, _, c in spans_of]
            kernel = (starts, stops) if coll_rows is None else (starts[coll_rows], stops[coll_rows])
        # each chunk's lines: those ending at or before its end (the newline that follows it)
        chunk_ends = np.cumsum(np.fromiter(map(len, chunks), np.int64, len(chunks)) + 1) - 1
        counts = np.diff(np.searchsorted(ends, chunk_ends, side="right"), prepend=0)
        return {"is_coll": None if every_coll else is_coll, "is_p2p": None if every_coll else is_p2p,
                "has_meta": None if every_meta else has_meta, "dump": ints[:, _T_DUMP].copy(),
                "host": codes(_T_HOST, self.host_code, meta_rows),
                "pid": ints[:, _T_PID].copy() if meta_rows is None else ints[meta_rows, _T_PID],
                "comm": codes(_T_ID, self.comm_code), "rank": ints[:, _T_RANK].copy(),
                "n_ranks": ints[:, _T_NRANKS].copy(),
                "exec_us": floats.copy() if coll_rows is None else floats[coll_rows],
                "sn": coll(_T_SN), "collective": codes(_T_COLL, self.names, coll_rows),
                "msg_bytes": coll(_T_SIZE), "timing_source": codes(_T_SOURCE, self.sources, coll_rows),
                "kernel": kernel}, counts, ends

    def _open(self, i: int) -> int:
        """File ``i`` opened: a plain one as its OS file descriptor (no buffer, no Python object
        per file), a gzip one through :class:`ByteSource` (inflation, damage reported) kept in
        ``_gz`` (:data:`_GZIP` returned)."""
        path = self.files.path_str(i)
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            is_gzip = os.pread(fd, 2, 0) == b"\x1f\x8b"
        except BaseException:
            os.close(fd)
            raise
        if not is_gzip:
            return fd
        os.close(fd)
        self._gz[i] = ByteSource(Path(path))
        return _GZIP

    def _lines(self, chunk: bytes, i: int, check: bool) -> dict[str, np.ndarray]:
        """One file's lines one by one (blank ones skipped), naming a bad one by its line."""
        good, texts, at = [], [], []
        for k, line in enumerate(chunk.split(b"\n")):
            if not line.strip():
                continue
            try:
                if check:
                    _DECODE_ONE.decode(line)  # every field checked: this path names the bad line
                good.append(_DECODE_LEAN.decode(line))
                texts.append(line)
                at.append(int(self.line_no[i]) + k)
            except _UNDECODABLE as exc:
                if not self.salvage:
                    raise _not_a_record(self.paths[i], int(self.line_no[i]) + k, exc) from None
                self.malformed[i] = self.malformed.get(i, 0) + 1
        return self._columns(good, np.full(len(good), i, dtype=np.int64), np.asarray(at, dtype=np.int64),
                             texts.__getitem__)

    def _finish(self, i: int) -> dict[str, np.ndarray] | None:
        """File ``i`` has ended: its last line (a record, or one being written), the gzip
        check, its info; the last record's columns, if any."""
        # the gzip reader stays in _gz (close() reaches it) until the finally below: a last line
        # that fails a check raises before it
        fd, src, path = self._fd[i], self._gz.get(i), self.paths[i]
        eof_error = getattr(src, "eof_error", None)
        is_gzip = src is not None
        pending = self._pending.pop(i, b"")
        line_no = int(self.line_no[i])
        tail, unread, cols = pending.strip(), 0, None
        if tail:
            try:
                _DECODE_ONE.decode(tail)
                rec = _DECODE_LEAN.decode(tail)
            except _UNDECODABLE:
                rec = None
            if rec is not None:
                cols = self._columns([rec], np.full(1, i, dtype=np.int64), np.full(1, line_no, dtype=np.int64),
                                     lambda _: tail)
                line_no += 1
            else:
                unread = len(pending)
                log.warning("%s: last line (%d bytes, line %d) is incomplete: a log still being written? read up "
                            "to the last complete record", path, unread, line_no)
        total = int(self.total[i])
        try:
            digest = "" if is_gzip else _hash_before(path, total - unread, fd if fd >= 0 else None)
        finally:
            self._fd[i] = -1
            self._gz.pop(i, None)
            if fd >= 0:
                os.close(fd)
            if src is not None:
                src.close()
        if eof_error:
            if not self.salvage:
                raise TraceError(f"{path}: {eof_error}; pass --salvage to read up to the last complete record")
            log.warning("%s: %s; read up to the last complete record (--salvage)", path, eof_error)
        self.ended[i], self.unread[i], self.complete_lines[i] = True, unread, line_no - 1
        self.truncated[i], self.gzip[i] = bool(eof_error), is_gzip
        if digest:
            self.digest[i] = np.frombuffer(bytes.fromhex(digest), dtype=np.uint8)
        if self.n_coll[i] == 0 and not self.n_p2p[i]:
            raise TraceError(f"{path}: no NCCL Inspector records (empty log, or a log of a process that ran "
                             "no collective at or above NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES)")
        return cols

    def close(self) -> None:
        """Close every open file (idempotent)."""
        fds = self._fd
        for i, fd in enumerate(fds):
            if fd >= 0:
                fds[i] = -1
                os.close(fd)
        gz, self._gz = self._gz, {}
        for src in gz.values():
            src.close()

    # ---- records to columns, every file of the round at once
    def _columns(self, records: list[Any], files: np.ndarray, lines: np.ndarray,
                 raw: Callable[[int], bytes]) -> dict[str, np.ndarray]:
        """The records' checks and counts (as :meth:`_Builder.add`) and their collective
        columns; ``files``/``lines``: each record's file and line; ``raw(j)``: record j's text."""
        return self._checked(self._fields(records), files, lines, raw)

    def _fields(self, records: list[Any]) -> dict[str, Any]:
        """The msgspec records' fields as arrays (strings as job-wide codes), what the template
        scanner gives directly (:meth:`_scan`): ``is_coll``/``is_p2p``/``has_meta`` (None when
        every record is a collective / has metadata), ``host``/``pid`` of the records with
        metadata, ``comm``/``rank``/``n_ranks``/``dump`` of every record, the collective fields
        (``exec_us``, ``sn``, ``collective``, ``msg_bytes``, ``timing_source``, ``kernel``: None
        or the kernel spans of verbose records) of the collective records."""
        n = len(records)
        out: dict[str, Any] = {"is_coll": None, "is_p2p": None, "has_meta": None}
        perfs: list[Any] = list(map(_PERF, records))
        if None in perfs:
            is_coll = out["is_coll"] = np.fromiter((p is not None for p in perfs), bool, n)
            out["is_p2p"] = ~is_coll & np.fromiter((p is not None for p in map(_P2P_OF, records)), bool, n)
            perfs = [p for p in perfs if p is not None]
        metas = list(map(_META, records))
        if None in metas:
            out["has_meta"] = np.fromiter((m is not None for m in metas), bool, n)
            out["dump"] = np.fromiter((m.dump_timestamp_us if m else MISSING for m in metas), np.int64, n)
            metas = [m for m in metas if m is not None]
        else:
            out["dump"] = np.fromiter(map(_DUMP, metas), np.int64, n)
        out["host"] = _codes(list(map(_HOST, metas)), self.host_code).astype(np.int64)
        out["pid"] = np.fromiter(map(_PID, metas), np.int64, len(metas))
        heads = list(map(_HEADER, records))
        out["comm"] = _codes(list(map(_ID, heads)), self.comm_code).astype(np.int64)
        out["rank"] = np.fromiter(map(_RANK, heads), np.int64, n)
        out["n_ranks"] = np.fromiter(map(_NRANKS, heads), np.int64, n)
        k = len(perfs)
        out["exec_us"] = np.fromiter(map(_EXEC, perfs), np.float64, k)
        out["sn"] = np.fromiter(map(_SN, perfs), np.int64, k)
        out["collective"] = _codes(list(map(_COLL_NAME, perfs)), self.names).astype(np.int64)
        out["msg_bytes"] = np.fromiter(map(_SIZE, perfs), np.int64, k)
        out["timing_source"] = _codes(list(map(_SOURCE, perfs)), self.sources).astype(np.int64)
        out["kernel"] = _kernel_spans(perfs)
        return out

    def _checked(self, fields: dict[str, Any], files: np.ndarray, lines: np.ndarray,
                 raw: Callable[[int], bytes]) -> dict[str, np.ndarray]:
        """The checks and counts of records given by their fields (:meth:`_fields`, :meth:`_scan`),
        and their collective columns."""
        n_files = len(self.paths)
        n = len(fields["rank"])
        is_coll, has_meta = fields["is_coll"], fields["has_meta"]
        if is_coll is not None:
            is_p2p = fields["is_p2p"]
            self.n_p2p += np.bincount(files[is_p2p], minlength=n_files)
            self.n_neither += np.bincount(files[~is_coll & ~is_p2p], minlength=n_files)
        if len(fields["pid"]):
            mfiles = files if has_meta is None else files[has_meta]
            self._one_process(mfiles, fields["host"], self.host, self.seen_host, self.extra_hosts)
            self._one_process(mfiles, fields["pid"], self.pid, self.seen_pid, self.extra_pids)
        comm, local = self._check_headers(fields["comm"], fields["rank"], fields["n_ranks"], files, lines, raw)
        if n:
            fresh = np.flatnonzero(self.version[files] < 0)
            if fresh.size:  # each file's first record, decoded in full for the format version
                _, at = np.unique(files[fresh], return_index=True)
                for j in fresh[at].tolist():
                    version = ""
                    with contextlib.suppress(*_UNDECODABLE):
                        head = _DECODE_ONE.decode(raw(j))
                        version = head.metadata.inspector_output_format_version if head.metadata else ""
                    self.version[files[j]] = self.version_code.setdefault(version, len(self.version_code))
        dumps = fields["dump"]
        if is_coll is not None:
            keep = np.flatnonzero(is_coll)
            files, comm, lines, local, dumps = files[keep], comm[keep], lines[keep], local[keep], dumps[keep]
        exec_us = fields["exec_us"]
        k = len(exec_us)
        try:  # before the file's counts and columns grow; the record mapped back to its file and line
            _check_exec_times(exec_us, files)
        except _BadRecord as exc:
            raise TraceError(f"{self.paths[int(files[exc.index])]}: line {int(lines[exc.index])}: {exc}") from None
        exec_ns = np.rint(exec_us * 1000.0).astype(np.int64)
        kernel = fields["kernel"]
        out = {"file": files, "comm": comm, "local_rank": local, "sn": fields["sn"],
               "collective": fields["collective"], "msg_bytes": fields["msg_bytes"], "exec_ns": exec_ns,
               "timing_source": fields["timing_source"],
               "kernel_start_us": np.full(k, MISSING, dtype=np.int64) if kernel is None else kernel[0],
               "kernel_stop_us": np.full(k, MISSING, dtype=np.int64) if kernel is None else kernel[1],
               "dump_us": dumps}
        if not k:
            return out
        self.n_coll += np.bincount(files, minlength=n_files)
        known = dumps >= 0
        np.minimum.at(self.dump_lo, files[known], dumps[known])
        np.maximum.at(self.dump_hi, files[known], dumps[known])
        if kernel is not None:
            self.verbose += np.bincount(files[kernel[0] >= 0], minlength=n_files)
        return out

    @staticmethod
    def _one_process(files: np.ndarray, values: np.ndarray, first: np.ndarray, seen: np.ndarray,
                     extra: dict[int, set[int]]) -> None:
        """Note each file's host (or pid): the first seen, any other in ``extra`` (an error at the end)."""
        unseen = ~seen[files]
        if unseen.any():
            first[files[unseen]] = values[unseen]
            seen[files[unseen]] = True
        other = first[files] != values
        if other.any():
            for f, v in zip(files[other].tolist(), values[other].tolist(), strict=True):
                extra.setdefault(f, set()).add(v)

    def _check_headers(self, comm: np.ndarray, local: np.ndarray, n_ranks: np.ndarray, files: np.ndarray,
                       lines: np.ndarray, raw: Callable[[int], bytes]) -> tuple[np.ndarray, np.ndarray]:
        """Job-wide communicator codes and local ranks of the records (``comm``: coded in
        :attr:`comm_code`); new (file, communicator) pairs noted from their first line read in
        full; a record whose rank or size differs from its file's earlier lines refused, naming
        the line."""
        n, n_files = len(comm), len(self.paths)
        for cid in list(self.comm_code)[len(self.comm_ids):]:  # new ones, in the order of their first use
            self.comm_ids.append(cid)
            self.comm_size.append(-1)
        if not n:
            return comm, local

        def head(j: int) -> _LeanHeader:
            return _LeanHeader(self.comm_ids[int(comm[j])], int(local[j]), int(n_ranks[j]))

        key = comm * n_files + files
        where = np.searchsorted(self._keys, key)
        new = (where >= len(self._keys)) | (self._keys[np.minimum(where, len(self._keys) - 1)] != key) \
            if len(self._keys) else np.ones(n, dtype=bool)
        if new.any():  # (file, communicator) pairs not seen before: their first line read in full
            _, at = np.unique(key[new], return_index=True)
            for j in sorted(np.flatnonzero(new)[at].tolist()):
                self._note_comm(int(files[j]), self._full_header(raw(j), head(j), int(files[j]), int(lines[j])),
                                int(lines[j]))
            added = np.asarray(self._new_pairs, dtype=np.int64).reshape(-1, 5)
            self._new_pairs.clear()
            keys = np.concatenate([self._keys, added[:, 0]])
            order = np.argsort(keys, kind="stable")
            self._keys = keys[order]
            self._known = np.concatenate([self._known, added[:, 1:]])[order]
            where = np.searchsorted(self._keys, key)
        known = self._known
        bad = (local != known[where, 0]) | (n_ranks != known[where, 1])
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            self._note_comm(int(files[j]), head(j), int(lines[j]), tuple(known[where[j], :2].tolist()))
        return comm, local

    def _full_header(self, line: bytes, lean: Any, i: int, line_no: int) -> Any:
        return _full_header(self.paths[i], self.salvage, line, lean, line_no)

    def _note_comm(self, i: int, header: Any, line: int, known: tuple[int, ...] | None = None) -> None:
        """As :meth:`_Builder._note_comm`, plus the size check across files (``known``: the file's
        rank and size in the communicator, None for a new one)."""
        path = self.paths[i]
        if known is None:
            if not 0 <= header.rank < header.n_ranks:
                raise TraceError(f"{path}: line {line}: communicator {header.id}: rank {header.rank} is not "
                                 f"below n_ranks {header.n_ranks}")
            code = self.comm_code[header.id]
            if self.comm_size[code] < 0:
                self.comm_size[code] = header.n_ranks
            elif self.comm_size[code] != header.n_ranks:
                raise TraceError(f"communicator {header.id}: {path} says {header.n_ranks} ranks, other "
                                 f"logs {self.comm_size[code]}")
            name = self.comm_names.setdefault(header.comm_name, len(self.comm_names))
            self._new_pairs.append((code * len(self.paths) + i, header.rank, header.n_ranks, header.nnodes, name))
        elif known[:2] != (header.rank, header.n_ranks):
            raise TraceError(f"{path}: line {line}: communicator {header.id} logged with rank {header.rank} of "
                             f"{header.n_ranks}, earlier lines say rank {known[0]} of {known[1]} (one file "
                             "holds one process: files of two processes concatenated?)")

    # ---- what the job needs of each file
    def hosts(self) -> list[str]:
        """Each file's host name ("" when no record has metadata)."""
        names = list(self.host_code)
        return [names[h] if seen else "" for h, seen in zip(self.host.tolist(), self.seen_host.tolist(), strict=True)]

    def _file_comms(self) -> Callable[[int], dict[str, tuple[int, int, int, str]]]:
        """File ``i``'s communicators, id -> (rank in it, n_ranks, nnodes, comm_name), made from the
        pair arrays (sorted once by file here) when asked for; the strings are the job's, shared
        (issue 48: every file's dict at once, or all the pairs as Python lists, ~1 KB a file)."""
        return _CommsOf(self)

    def shells(self) -> Sequence[LoggedCollectives]:
        """Each file's communicators and given rank (no records), for :func:`global_ranks`: a
        sequence that makes each file's when read (issue 48)."""
        comms_of, path_of, rank_of = self._file_comms(), self.files.path_str, self.files.rank

        def shell(i: int) -> LoggedCollectives:
            comms = comms_of(i)
            return LoggedCollectives(path_of(i), list(comms), comms, {}, {}, given_rank=rank_of(i))

        return _Made(len(self.files), shell)

    def state_bytes(self) -> int:
        """Bytes held per file between rounds, beyond the shared arrays: its unfinished last
        line (a gzip log's: a plain log's is read again), its open file (a plain log: its OS
        descriptor, 4 bytes in an array; a gzip one: its inflating reader) and its share of the
        communicator pairs (the per-file state the tests bound)."""
        import sys

        total = sum(map(len, self._pending.values())) + sum(sys.getsizeof(s) for s in self._gz.values())
        total += sum(sys.getsizeof(vars(s)) for s in self._gz.values()) + self._fd.itemsize * len(self._fd)
        return total + self._keys.nbytes + self._known.nbytes

    def results(self) -> Sequence[LoggedCollectives]:
        """Each file's communicators, metadata and counts (no records: they were taken), after the
        end: a sequence that makes each file's :class:`LoggedCollectives` as it is read (issue 48:
        ~1.5 KB of Python objects per file held at once, otherwise)."""
        if not self.ended.all():
            raise RuntimeError("LogRounds.results() before the end of the files")
        hosts = self.hosts()
        for i in sorted(set(self.extra_hosts) | set(self.extra_pids)):
            names = list(self.host_code)
            host_set = {hosts[i]} | {names[h] for h in self.extra_hosts.get(i, ())}
            n_pids = 1 + len(self.extra_pids.get(i, ()))
            raise TraceError(f"{self.paths[i]}: records of {n_pids} processes (hosts "
                             f"{', '.join(sorted(host_set))}); an Inspector log holds one process")
        return _FileResults(self, hosts)

    def _info(self, i: int, hosts: list[str], versions: list[str]) -> dict[str, Any]:
        """File ``i``'s metadata and counts (:attr:`LoggedCollectives.info`)."""
        total, unread, complete = int(self.total[i]), int(self.unread[i]), int(self.complete_lines[i])
        has_dump = self.dump_hi[i] != MISSING
        return {"path": self.files.path_str(i), "bytes_decompressed": total, "bytes_read_now": total,
                "unread_tail_bytes": unread, "truncated": bool(self.truncated[i]),
                "n_lines": complete + (1 if unread else 0), "n_complete_lines": complete,
                "consumed_bytes": total - unread, "gzip": bool(self.gzip[i]),
                "resume_sha256": "" if self.gzip[i] else self.digest[i].tobytes().hex(),
                "host": hosts[i], "pid": int(self.pid[i]) if self.seen_pid[i] else MISSING,
                "format_version": versions[self.version[i]] if self.version[i] >= 0 else "",
                "n_collective_records": int(self.n_coll[i]), "n_p2p_records": int(self.n_p2p[i]),
                "n_verbose_records": int(self.verbose[i]),
                "dump_first_us": int(self.dump_lo[i]) if has_dump else MISSING,
                "dump_last_us": int(self.dump_hi[i]) if has_dump else MISSING}

    def _skipped(self, i: int) -> dict[str, int]:
        """File ``i``'s records not used, by reason (:attr:`LoggedCollectives.skipped`)."""
        skipped: dict[str, int] = {}
        if self.n_neither[i]:
            skipped["record with neither coll_perf nor p2p_perf"] = int(self.n_neither[i])
        if i in self.malformed:
            skipped["malformed line"] = self.malformed[i]
        if self.truncated[i]:
            skipped["gzip stream cut short (records after the cut lost)"] = 1
        return skipped


class _FileResult(LoggedCollectives):
    """One file of :meth:`LogRounds.results`: its communicators at once, its ``info`` and
    ``skipped`` made from the reader's arrays when read (issue 48: the job's tables read a few
    of them, several times over; a dict of ~20 entries per file and read cost ~5 µs)."""

    def __init__(self, results: _FileResults, i: int, comms: dict[str, tuple[int, int, int, str]]) -> None:
        reader = results.reader
        self.path, self.comm_ids, self.comms = reader.files.path_str(i), list(comms), comms
        self.columns, self.given_rank, self.vocabularies = results.columns, reader.files.rank(i), results.vocabularies
        self._results, self._i = results, i

    @property
    def info(self) -> dict[str, Any]:  # type: ignore[override]
        return self._results.reader._info(self._i, self._results.hosts, self._results.versions)

    @property
    def skipped(self) -> dict[str, int]:  # type: ignore[override]
        return self._results.reader._skipped(self._i)


class _FileResults(Sequence[LoggedCollectives]):
    """:meth:`LogRounds.results`: each file's :class:`LoggedCollectives`, made when read."""

    def __init__(self, reader: LogRounds, hosts: list[str]) -> None:
        self.reader, self.hosts, self.versions = reader, hosts, list(reader.version_code)
        self._comms_of = reader._file_comms()
        # no records (they were taken): one empty column set and one vocabulary for every file, not
        # a copy each (~2.5 KB per file at the end of the job: issue 48)
        self.columns: dict[str, Any] = {name: np.zeros(0, dtype=np.int64) for name in RECORD_COLUMNS}
        self.vocabularies = {"collective": list(reader.names), "timing_source": list(reader.sources)}

    def __len__(self) -> int:
        return len(self.reader.paths)

    def path_of(self, i: int) -> str:
        """File ``i``'s path (its result not made)."""
        return self.reader.files.path_str(i)

    def __iter__(self) -> Iterator[LoggedCollectives]:
        for i in range(len(self)):
            yield _FileResult(self, i, self._comms_of(i))

    @overload
    def __getitem__(self, i: int) -> LoggedCollectives: ...

    @overload
    def __getitem__(self, i: slice) -> list[LoggedCollectives]: ...

    def __getitem__(self, i: int | slice) -> LoggedCollectives | list[LoggedCollectives]:
        if isinstance(i, slice):
            return list(self)[i]
        n = len(self)
        if not -n <= i < n:
            raise IndexError(i)
        i %= n
        return _FileResult(self, i, self._comms_of(i))


class _RankFiles(Mapping[int, str]):
    """:attr:`JobLayout.owner`: rank -> the path of its log, from the files' ranks (in file order,
    sorted once) and their paths made when asked for; where ranks repeat, the first file's."""

    def __init__(self, ranks: Sequence[int], path_of: Callable[[int], str]) -> None:
        self._ranks = np.asarray(ranks, dtype=np.int64)
        self._order = np.argsort(self._ranks, kind="stable")
        self._sorted = self._ranks[self._order]
        self._path_of = path_of

    def first_repeat(self) -> int | None:
        """The first file, in file order, whose rank an earlier file has (None: no repeat)."""
        repeats = np.flatnonzero(self._sorted[1:] == self._sorted[:-1]) + 1
        return int(self._order[repeats].min()) if len(repeats) else None

    def __getitem__(self, rank: int) -> str:
        k = int(np.searchsorted(self._sorted, rank))
        if k == len(self._sorted) or self._sorted[k] != rank:
            raise KeyError(rank)
        return self._path_of(int(self._order[k]))

    def __iter__(self) -> Iterator[int]:
        seen: set[int] = set()
        for rank in self._ranks.tolist():  # file order, as a dict filled in file order
            if rank not in seen:
                seen.add(rank)
                yield rank

    def __len__(self) -> int:
        return len(np.unique(self._sorted))


class _CommsOf:
    """:meth:`LogRounds._file_comms`: each file's communicators from the reader's pair arrays,
    ordered by file once; the pairs of :data:`BLOCK` files at a time as Python lists (~90 KB; a call per
    file into NumPy cost ~4 µs a file, read several times over at the end of the job)."""

    BLOCK = 128

    def __init__(self, reader: LogRounds) -> None:
        self.n, self.keys, self.known = len(reader.files), reader._keys, reader._known
        file = self.keys % self.n
        self.order = np.argsort(file, kind="stable")  # by file, then communicator (the keys are sorted)
        self.bounds = np.searchsorted(file[self.order], np.arange(self.n + 1))
        self.ids, self.names = reader.comm_ids, list(reader.comm_names)
        self._lo = self._hi = 0  # the files whose pairs are in the lists
        self._bounds: list[int] = []
        self._comm: list[int] = []
        self._known: list[list[int]] = []

    def _load(self, i: int) -> None:
        lo = i - i % self.BLOCK
        hi = min(self.n, lo + self.BLOCK)
        a, b = int(self.bounds[lo]), int(self.bounds[hi])
        at = self.order[a:b]
        self._bounds = (self.bounds[lo:hi + 1] - a).tolist()
        self._comm, self._known = (self.keys[at] // self.n).tolist(), self.known[at].tolist()
        self._lo, self._hi = lo, hi

    def __call__(self, i: int) -> dict[str, tuple[int, int, int, str]]:
        if not self._lo <= i < self._hi:
            self._load(i)
        j = i - self._lo
        a, b = self._bounds[j], self._bounds[j + 1]
        ids, names = self.ids, self.names
        return {ids[c]: (v[0], v[1], v[2], names[v[3]])
                for c, v in zip(self._comm[a:b], self._known[a:b], strict=True)}


class _Made(Sequence[Any]):
    """A sequence of ``n`` items, item ``i`` made by ``make(i)`` when read."""

    def __init__(self, n: int, make: Callable[[int], Any]) -> None:
        self._n, self._make = n, make

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._make(k) for k in range(*i.indices(self._n))]
        if not -self._n <= i < self._n:
            raise IndexError(i)
        return self._make(i % self._n)

    def __iter__(self) -> Iterator[Any]:
        return map(self._make, range(self._n))
