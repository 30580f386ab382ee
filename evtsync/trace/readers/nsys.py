"""Nsight Systems SQLite exports (``nsys export --type sqlite``): one file per rank.

The schema changes between Nsight Systems releases, so the tables and columns are read
from the file (``sqlite_master``, ``PRAGMA table_info``), never assumed. What is read, into
the same tables as a Kineto trace (times: ns since the session start, plus the session's
``utcEpochNs`` as the base time):

- ``CUPTI_ACTIVITY_KIND_KERNEL`` (required): GPU kernels, names through ``StringIds``
  (``demangledName``, else ``shortName``, else ``mangledName``); ``deviceId``, ``streamId``,
  ``correlationId``. NCCL kernels are recognised by name as in Kineto traces.
- ``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``_MEMSET``: copies and memsets (GPU table).
- ``CUPTI_ACTIVITY_KIND_RUNTIME``: CUDA runtime calls with their ``correlationId`` (which
  links a launch to its kernel) and the calling process/thread from ``globalTid``.
- ``NVTX_EVENTS``: NVTX push/pop and start/end ranges as user annotations (CPU table).
- ``TARGET_INFO_GPU``: the GPU model; ``TARGET_INFO_SESSION_START_TIME``: the base time.

Rows of other tables with per-event data are counted in ``TraceSet.untabulated``. The rank
comes from the user (``RANK=PATH``, ``--rank-from order``), else from the NVTX ranges and marks
that name one (``rank 3``, ``Rank: 3``, torch's ``... rank=3``, or the user's
``--rank-from nvtx:REGEX``), else from the file name; NVTX and file name disagreeing is an
error (an export carries no distributed rank of its own). The file's kernels must come from one process (one rank per file).
What an export lacks compared with Kineto: no PyTorch ops or ``record_param_comms`` (so no
process-group fields: groups are inferred per stream; no message sizes).
"""

from __future__ import annotations

import itertools
import logging
import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
else:  # pandas at its first use: the Inspector tax reads its logs without it (issue 48)
    from evtsync.core.lazy import pd
from numpy.typing import ArrayLike

from evtsync.core.errors import TraceError, describe_start, path_problem
from evtsync.trace.decode import TABLE_FIELDS, DecodedTrace, string_dtype
from evtsync.trace.tables import MISSING, RankTables, build_rank_tables

log = logging.getLogger(__name__)

SQLITE_MAGIC = b"SQLite format 3\x00"
KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
#: Kernel name columns, in order of preference (ids into ``StringIds``).
NAME_COLUMNS = ("demangledName", "shortName", "mangledName")
#: Tables read into the rank tables (the rest of the per-event tables are counted only).
READ_TABLES = (KERNEL_TABLE, "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
               "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds", "TARGET_INFO_GPU",
               "TARGET_INFO_SESSION_START_TIME")
#: Per-event tables not read (counted as untabulated when they have rows).
COUNTED_TABLES = ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
                  "CUDA_GPU_MEMORY_USAGE_EVENTS", "OSRT_API", "SCHED_EVENTS", "COMPOSITE_EVENTS",
                  "MPI_P2P_EVENTS", "MPI_COLLECTIVES_EVENTS", "NVTX_PAYLOAD_SCHEMAS")
#: NVTX event types that are ranges (push/pop 59, start/end 60; NvtxPushPopRange, NvtxStartEndRange).
NVTX_RANGE_TYPES = (59, 60)


class _Schema:
    """The tables and columns one export has."""

    def __init__(self, conn: sqlite3.Connection, path: Path) -> None:
        self.path = path
        self.conn = conn
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        self.columns: dict[str, list[str]] = {
            name: [r[1] for r in conn.execute(f'PRAGMA table_info("{name}")')] for name in names}

    def has(self, table: str, *columns: str) -> bool:
        return table in self.columns and all(c in self.columns[table] for c in columns)

    def need(self, table: str, *columns: str, purpose: str) -> None:
        """Raise a one-line error naming the missing table or column."""
        if table not in self.columns:
            raise TraceError(f"{self.path}: Nsight Systems export has no table {table} (needed for {purpose}); "
                             "export with `nsys export --type sqlite` from a report captured with CUDA "
                             "tracing (`nsys profile -t cuda,nvtx`)")
        lacking = [c for c in columns if c not in self.columns[table]]
        if lacking:
            raise TraceError(f"{self.path}: table {table} has no column {', '.join(lacking)} (needed for "
                             f"{purpose}); its columns: {', '.join(self.columns[table])}")

    def first_of(self, table: str, candidates: Sequence[str]) -> str | None:
        return next((c for c in candidates if self.has(table, c)), None)


def _strings(values: Sequence[Any]) -> pd.Categorical:
    """Loose strings (None: missing) as a categorical with sorted categories."""
    present = set(values)
    present.discard(None)
    if not present:  # all missing (the columns an export has no source for)
        return pd.Categorical.from_codes(np.full(len(values), -1, dtype=np.int32), dtype=string_dtype([]))
    cats = sorted(present)
    where = {c: i for i, c in enumerate(cats)}
    codes = np.asarray([where.get(v, -1) for v in values], dtype=np.int32)
    return pd.Categorical.from_codes(codes, dtype=string_dtype(cats))


def _coded(codes: np.ndarray, words: Sequence[str]) -> pd.Categorical:
    """Codes into ``words`` (-1: missing) as a categorical with sorted categories."""
    order = np.argsort(np.asarray(words, dtype=object), kind="stable") if len(words) else np.zeros(0, np.int64)
    rank = np.empty(len(words), dtype=np.int32)
    rank[order] = np.arange(len(words), dtype=np.int32)
    new = np.where(codes >= 0, rank[np.maximum(codes, 0)] if len(words) else -1, -1).astype(np.int32)
    return pd.Categorical.from_codes(new, dtype=string_dtype([words[i] for i in order]))


def _ints(values: Sequence[Any]) -> np.ndarray:
    return np.asarray([MISSING if v is None else v for v in values], dtype=np.int64)


def _us(values: ArrayLike) -> np.ndarray:
    """ns integers -> µs floats (what the Kineto decoder's ``t`` columns hold)."""
    return np.asarray(values, dtype=np.int64).astype(np.float64) / 1000.0


def _empty_columns(table: str, n: int = 0) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, kind in TABLE_FIELDS[table]:
        if kind == "t":
            out[name] = np.zeros(n, dtype=np.float64)
        elif kind == "i":
            out[name] = np.full(n, MISSING, dtype=np.int64)
        else:
            out[name] = _strings([None] * n)
    return out


def check_types(schema: _Schema, table: str, columns: Sequence[str], kind: str = "integer",
                nullable: Sequence[str] = ()) -> None:
    """Refuse, naming the file, table, column, row and value, a cell of ``columns`` whose SQLite
    type is not ``kind`` (``integer``, ``text``; NULL only in the ``nullable`` ones). SQLite
    stores any value in any column, so a damaged or hand-edited export can hold text where
    nanoseconds belong; one scan of the table, stopped at the first bad cell."""
    present = [c for c in columns if schema.has(table, c)]
    if not present:
        return
    allowed = {c: f"('{kind}', 'null')" if c in nullable else f"('{kind}')" for c in present}
    cond = " OR ".join(f'typeof("{c}") NOT IN {allowed[c]}' for c in present)
    picked = ", ".join(f'typeof("{c}"), quote("{c}")' for c in present)
    rows = _query(schema, f'SELECT rowid, {picked} FROM "{table}" WHERE {cond} LIMIT 1')
    if not rows:
        return
    row = rows[0]
    for i, column in enumerate(present):
        found, value = row[1 + 2 * i], row[2 + 2 * i]
        if found != kind and not (found == "null" and column in nullable):
            shown = str(value)[:40]
            raise TraceError(f"{schema.path}: table {table}, column {column}, row {row[0]}: expected "
                             f"{'an integer' if kind == 'integer' else kind}, found {found} {shown} (damaged "
                             "Nsight Systems export)")


def _query(schema: _Schema, sql: str) -> list[tuple[Any, ...]]:
    try:
        return schema.conn.execute(sql).fetchall()
    except sqlite3.DatabaseError as exc:
        raise TraceError(f"{schema.path}: damaged Nsight Systems export ({exc}) while reading: {sql}") from None


def _int_columns(schema: _Schema, table: str, columns: Sequence[str], where: str = "",
                 required: Sequence[str] = ("start", '"end"')) -> np.ndarray:
    """Integer ``columns`` of ``table`` (SQL expressions; NULL read as :data:`MISSING`, except in
    ``required`` ones, where it is an error), as an (n, len(columns)) int64 matrix filled
    straight from the cursor (no tuple per row kept).

    The one place the numeric activity columns are read: a value that is not an integer
    (text, a float, a blob) is a one-line error naming the export, table, column and row
    (typed checks of the columns belong here).
    """
    select = ", ".join(c if c in required else f"COALESCE({c}, {MISSING})" for c in columns)
    sql = f"SELECT {select} FROM {table} {where}"
    k = len(columns)
    try:
        rows = schema.conn.execute(sql)
        flat = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64)
    except sqlite3.DatabaseError as exc:
        raise TraceError(f"{schema.path}: damaged Nsight Systems export ({exc}) while reading: {sql}") from None
    except (TypeError, ValueError, OverflowError):
        _raise_not_integer(schema, sql, table, columns)
    return flat.reshape(-1, k)


def _raise_not_integer(schema: _Schema, sql: str, table: str, columns: Sequence[str]) -> None:
    """Name the first value of ``sql``'s rows that is not an integer."""
    for row_no, row in enumerate(schema.conn.execute(sql)):
        for column, value in zip(columns, row, strict=True):
            if not isinstance(value, int) or not -(1 << 63) <= value < (1 << 63):
                raise TraceError(f"{schema.path}: table {table}, row {row_no + 1}: column {column} holds "
                                 f"{value!r} ({type(value).__name__}); expected an integer")
    raise TraceError(f"{schema.path}: table {table}: a column of {', '.join(columns)} is not an integer")


def _string_table(schema: _Schema, ids: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The ``StringIds`` values of ``ids``, joined once: (code of each id into the returned
    words, -1 where the id is not in the table or is :data:`MISSING`; the words)."""
    wanted, inverse = np.unique(ids, return_inverse=True)
    known = dict(_query(schema, "SELECT id, value FROM StringIds")) if len(wanted) else {}
    words: list[str] = []
    code_of = np.full(len(wanted), -1, dtype=np.int64)
    for i, sid in enumerate(wanted.tolist()):
        value = known.get(sid)
        if value is not None:
            code_of[i] = len(words)
            words.append(str(value))
    return code_of[inverse].reshape(ids.shape), words


_GPU = ("start", '"end"', "deviceId", "streamId", "correlationId")


def _gpu_rows(schema: _Schema) -> tuple[dict[str, Any], int]:
    """Kernels, memcpys and memsets as the GPU table's columns; the one process they came from.

    Only the columns used are read, as integers (:func:`_int_columns`); the kernels' names by
    their string ids, looked up in ``StringIds`` once per distinct id (:func:`_string_table`).
    """
    schema.need(KERNEL_TABLE, "start", "end", "deviceId", "streamId", "correlationId", purpose="GPU kernels")
    name_col = schema.first_of(KERNEL_TABLE, NAME_COLUMNS)
    if name_col is None:
        raise TraceError(f"{schema.path}: table {KERNEL_TABLE} has none of the name columns "
                         f"{', '.join(NAME_COLUMNS)}; its columns: {', '.join(schema.columns[KERNEL_TABLE])}")
    schema.need("StringIds", "id", "value", purpose="kernel names")
    check_types(schema, KERNEL_TABLE, ("start", "end", "deviceId", "streamId", "correlationId", name_col,
                                       "globalPid"), nullable=("deviceId", "streamId", "correlationId", name_col,
                                                               "globalPid"))
    check_types(schema, "StringIds", ("id",))
    check_types(schema, "StringIds", ("value",), kind="text", nullable=("value",))
    blocks = []  # (int matrix: start, end, device, stream, correlation, pid, name id; category)
    pid = "globalPid" if schema.has(KERNEL_TABLE, "globalPid") else "NULL"
    blocks.append((_int_columns(schema, KERNEL_TABLE, (*_GPU, pid, name_col)), "kernel"))
    for table, category in (("CUPTI_ACTIVITY_KIND_MEMCPY", "gpu_memcpy"), ("CUPTI_ACTIVITY_KIND_MEMSET", "gpu_memset")):
        if schema.has(table, "start", "end", "deviceId", "streamId", "correlationId"):
            check_types(schema, table, ("start", "end", "deviceId", "streamId", "correlationId", "globalPid"),
                        nullable=("deviceId", "streamId", "correlationId", "globalPid"))
            pid = "globalPid" if schema.has(table, "globalPid") else "NULL"
            blocks.append((_int_columns(schema, table, (*_GPU, pid)), category))
    pids = np.unique(np.concatenate([m[:, 5] for m, _ in blocks]))
    processes = [int(p) for p in pids if p != MISSING]
    if len(processes) > 1:
        raise TraceError(f"{schema.path}: GPU activity of {len(processes)} processes (globalPid "
                         f"{', '.join(str(p >> 24 & 0xFFFFFF) for p in processes[:8])}) in one export; evtsync "
                         "reads one rank per file: capture one report per rank (e.g. `nsys profile -o "
                         "rank%q{RANK}`)")
    kernels = blocks[0][0]
    n = sum(len(m) for m, _ in blocks)
    cols = _empty_columns("gpu", n)
    if n:
        codes, words = _string_table(schema, kernels[:, 6])
        unnamed = int((codes < 0).sum())
        if unnamed:
            raise TraceError(f"{schema.path}: {unnamed} kernel(s) whose {name_col} is not in StringIds "
                             "(damaged export)")
        labels = {"gpu_memcpy": "Memcpy", "gpu_memset": "Memset"}
        names = list(words)
        name_codes = [codes]
        for matrix, category in blocks[1:]:
            if labels[category] not in names:
                names.append(labels[category])
            name_codes.append(np.full(len(matrix), names.index(labels[category]), dtype=np.int64))
        cats = ["kernel", "gpu_memcpy", "gpu_memset"]
        cat_codes = np.concatenate([np.full(len(m), cats.index(c), dtype=np.int64) for m, c in blocks])
        every = np.concatenate([m[:, :5] for m, _ in blocks])
        start, end = every[:, 0], every[:, 1]
        used = sorted(set(cat_codes.tolist()))
        cols.update(cat=_coded(np.searchsorted(used, cat_codes), [cats[i] for i in used]),
                    name=_coded(np.concatenate(name_codes), names), pid=every[:, 2].copy(),
                    tid=every[:, 3].copy(), ts=_us(start), dur=_us(end - start), device=every[:, 2].copy(),
                    stream=every[:, 3].copy(), correlation=every[:, 4].copy())
    return cols, (processes[0] if processes else MISSING)


def _split_tid(global_tid: Sequence[Any] | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """nsys ``globalTid`` -> (pid, tid): bits 24-47 and 0-23."""
    values = global_tid if isinstance(global_tid, np.ndarray) else _ints(global_tid)
    return (values >> 24) & 0xFFFFFF, values & 0xFFFFFF


def _runtime_rows(schema: _Schema) -> dict[str, Any]:
    table = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if table not in schema.columns:
        log.info("%s: no %s table: no CUDA runtime calls (launch gaps unknown)", schema.path, table)
        return _empty_columns("runtime")
    schema.need(table, "start", "end", "globalTid", "correlationId", "nameId", purpose="CUDA runtime calls")
    check_types(schema, table, ("start", "end", "globalTid", "correlationId", "nameId"),
                nullable=("globalTid", "correlationId", "nameId"))
    matrix = _int_columns(schema, table, ("start", '"end"', "globalTid", "correlationId", "nameId"))
    cols = _empty_columns("runtime", len(matrix))
    if len(matrix):
        codes, words = _string_table(schema, matrix[:, 4])
        pid, tid = _split_tid(matrix[:, 2])
        # CUPTI names carry the API version ("cudaLaunchKernel_v7000"); Kineto's do not (cleaned
        # once per distinct name; two versions of one call become one name)
        clean = sorted({w.split("_v")[0] for w in words})
        remap = np.asarray([clean.index(w.split("_v")[0]) for w in words], dtype=np.int64)
        start, end = matrix[:, 0], matrix[:, 1]
        cols.update(cat=_coded(np.zeros(len(matrix), dtype=np.int64), ["cuda_runtime"]),
                    name=_coded(np.where(codes >= 0, remap[np.maximum(codes, 0)] if len(words) else -1, -1), clean),
                    pid=pid, tid=tid, ts=_us(start), dur=_us(end - start), correlation=matrix[:, 3].copy())
    return cols


def _nvtx_rows(schema: _Schema) -> dict[str, Any]:
    table = "NVTX_EVENTS"
    if table not in schema.columns:
        return _empty_columns("cpu")
    schema.need(table, "start", "end", "globalTid", "eventType", purpose="NVTX ranges")
    if schema.has(table, "textId"):
        text = "COALESCE(n.text, s.value)" if schema.has(table, "text") else "s.value"
        join = "LEFT JOIN StringIds s ON s.id = n.textId"
    else:
        schema.need(table, "text", purpose="NVTX range names")
        text, join = "n.text", ""
    check_types(schema, table, ("start", "end", "globalTid", "eventType", "textId"),
                nullable=("end", "globalTid", "eventType", "textId"))
    types = ", ".join(str(t) for t in NVTX_RANGE_TYPES)
    rows = _query(schema, f'SELECT n.start, n."end", n.globalTid, {text} FROM {table} n {join} '
                          f'WHERE n.eventType IN ({types}) AND n."end" IS NOT NULL')
    cols = _empty_columns("cpu", len(rows))
    if rows:
        start, end, gtid, name = zip(*rows, strict=True)
        pid, tid = _split_tid(gtid)
        cols.update(cat=_strings(["user_annotation"] * len(rows)),
                    name=_strings(["" if v is None else str(v) for v in name]), pid=pid, tid=tid,
                    ts=_us(start), dur=_us(np.asarray(end, dtype=np.int64) - np.asarray(start, dtype=np.int64)))
    return cols


def _nvtx_texts(schema: _Schema) -> list[str]:
    """The distinct texts of every NVTX event (ranges and marks) that hold a digit."""
    table = "NVTX_EVENTS"
    if not schema.has(table):
        return []
    parts = []
    if schema.has(table, "text"):
        parts.append(f"SELECT DISTINCT text FROM {table} WHERE text IS NOT NULL")
    if schema.has(table, "textId") and schema.has("StringIds", "id", "value"):
        parts.append(f"SELECT DISTINCT s.value FROM {table} n JOIN StringIds s ON s.id = n.textId")
    if not parts:
        return []
    rows = _query(schema, " UNION ".join(parts))
    return sorted({str(r[0]) for r in rows if r[0] is not None and any(c.isdigit() for c in str(r[0]))})


def _header(schema: _Schema) -> dict[str, Any]:
    header: dict[str, Any] = {}
    if schema.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        row = _query(schema, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME LIMIT 1")
        if row and isinstance(row[0][0], int):
            header["baseTimeNanoseconds"] = int(row[0][0])
    if schema.has("TARGET_INFO_GPU", "name"):
        id_col = schema.first_of("TARGET_INFO_GPU", ("cuDevice", "id"))
        rows = _query(schema, f"SELECT {id_col or 'NULL'}, name FROM TARGET_INFO_GPU")
        header["deviceProperties"] = [{"id": i, "name": n} for i, n in rows]
    if schema.has("META_DATA_EXPORT", "name", "value"):
        meta = dict(_query(schema, "SELECT name, value FROM META_DATA_EXPORT"))
        header["nsys_version"] = str(meta.get("EXPORT_PRODUCT_VERSION", ""))
    return header


def _untabulated(schema: _Schema) -> dict[tuple[str, str], int]:
    out = {}
    for table in COUNTED_TABLES:
        if table in schema.columns:
            n = _query(schema, f'SELECT COUNT(*) FROM "{table}"')[0][0]
            if n:
                out[("nsys", table)] = int(n)
    return out


def decode_export(path: str | os.PathLike[str], rank_pattern: str | None = None) -> DecodedTrace:
    """One export as the decoder's columns (the Kineto decoder's output shape).

    The header's ``nvtxRanks`` holds the ranks its NVTX ranges and marks name (``rank 3``,
    ``Rank: 3``, ``rank=3``; with ``rank_pattern``, the user's ``nvtx:REGEX`` instead), for
    :func:`~evtsync.trace.ranks.detect_rank`."""
    from evtsync.trace.ranks import nvtx_rank_claims, nvtx_rank_pattern

    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: {path_problem(path)}")
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(100)
    if not head.startswith(SQLITE_MAGIC):
        raise TraceError(f"{path}: not an SQLite file: it {describe_start(head[:64])} (expected an `nsys export "
                         "--type sqlite` output, which starts with 'SQLite format 3')")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size  # SQLite writes 1 for 64 KiB pages
    pages = int.from_bytes(head[28:32], "big")
    if pages and size < page_size * pages:
        raise TraceError(f"{path}: truncated Nsight Systems export: {size} bytes, its header says "
                         f"{page_size * pages} ({pages} pages of {page_size})")
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    except sqlite3.Error as exc:
        raise TraceError(f"{path}: cannot open the SQLite export ({exc})") from None
    try:
        schema = _Schema(conn, path)
        gpu, _ = _gpu_rows(schema)
        runtime = _runtime_rows(schema)
        cpu = _nvtx_rows(schema)
        header = _header(schema)
        header["nvtxRanks"] = nvtx_rank_claims(_nvtx_texts(schema), nvtx_rank_pattern(rank_pattern))
        if rank_pattern:
            header["nvtxRankPattern"] = rank_pattern[len("nvtx:"):] if rank_pattern.startswith("nvtx:") \
                else rank_pattern
        untabulated = _untabulated(schema)
    except sqlite3.DatabaseError as exc:
        raise TraceError(f"{path}: damaged Nsight Systems export ({exc})") from None
    finally:
        conn.close()
    n_events = sum(len(c["ts"]) for c in (gpu, runtime, cpu)) + sum(untabulated.values())
    return DecodedTrace(path=path, header=header,
                        columns={"gpu": gpu, "cpu": cpu, "runtime": runtime, "sync": _empty_columns("sync")},
                        untabulated=untabulated, n_events=n_events, bytes_read=size)


class NsysReader:
    """Nsight Systems SQLite exports (see the module docstring)."""

    name = "nsys"
    description = "Nsight Systems SQLite exports"
    suffixes: tuple[str, ...] = (".sqlite", ".sqlite3", ".nsys.sqlite")
    produces = "ranks"

    def sniff(self, head: bytes) -> bool:
        """SQLite's magic header (the tables are checked when read)."""
        return head.startswith(SQLITE_MAGIC)

    def read(self, path: str | os.PathLike[str], *, salvage: bool = False, rank: int | None = None,
             rank_from: str | None = None) -> RankTables:
        """One export's rank tables (``salvage`` does not apply: SQLite pages are whole or not);
        ``rank_from`` ``"nvtx:REGEX"``: the rank from the NVTX texts that REGEX matches."""
        decoded = decode_export(path, rank_from if rank_from and rank_from.startswith("nvtx:") else None)
        tables = build_rank_tables(decoded, rank=rank)
        tables.info["nsys_version"] = decoded.header.get("nsys_version", "")
        return tables

    def cost(self, path: str | os.PathLike[str]) -> int:
        """The file's size."""
        return os.path.getsize(path)


NSYS = NsysReader()
