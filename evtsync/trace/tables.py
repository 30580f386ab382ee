"""Turn one decoded trace into typed pandas tables (one rank's share of a TraceSet).

Times become int64 nanoseconds on the trace's own clock: absolute unix time for traces
with absolute µs, ``baseTimeNanoseconds`` + ts for newer relative traces. ``ts`` and
``dur`` are always microseconds in Kineto; ``displayTimeUnit`` only changes how viewers
display them (checked on the ``ns`` trace in the shared data), so it is recorded, not applied.
"""

from __future__ import annotations

import ast
import functools
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
else:  # pandas at its first use: the Inspector tax reads its logs without it (issue 48)
    from evtsync.core.lazy import pd

from evtsync.core.errors import TraceError
from evtsync.trace.decode import TABLE_FIELDS, DecodedTrace, string_dtype
from evtsync.trace.ranks import CPU_DEVICE_LABEL, detect_rank, gpu_model
from evtsync.trace.schema import (
    IGNORED_CATEGORIES,
    NCCL_KERNEL_RE,
    PROFILER_STEP_RE,
    canonical_category,
    canonical_collective,
    dtype_size,
)

log = logging.getLogger(__name__)

MISSING = -1


#: Reading scopes, each a subset of the one before: ``all`` rows; ``blocks``, what compute
#: blocks and z-scores read (GPU kernels, ProfilerStep ranges, gloo collectives, the launches
#: of NCCL kernels); ``collectives``, what alignment and the tax read (NCCL kernels, gloo
#: collectives).
SCOPES = ("all", "blocks", "collectives")


#: The four tables of one rank, in the order of a TraceSet's (and of RankTables' arguments).
TABLE_NAMES = ("kernels", "cpu_ops", "runtime", "syncs")

#: One table as columns: name -> numpy array or :class:`pandas.Categorical`, all of one length.
Columns = dict[str, Any]


def column_array(frame: pd.DataFrame, j: int) -> Any:
    """The values of column ``j`` of ``frame`` without building a Series (~1 µs, not ~17 µs)."""
    getter = getattr(frame, "_get_column_array", None)  # pandas' own fast path (private)
    return getter(j) if getter is not None else frame.iloc[:, j].array


def as_columns(table: pd.DataFrame | Columns) -> Columns:
    """A table as :data:`Columns` (a DataFrame's column arrays are shared, not copied)."""
    if isinstance(table, pd.DataFrame):
        return {str(col): column_array(table, j) for j, col in enumerate(table.columns)}
    return dict(table)


def n_rows(columns: Columns) -> int:
    """Rows of a table held as columns."""
    return len(next(iter(columns.values()))) if columns else 0


def _take(columns: Columns, rows: np.ndarray) -> Columns:
    return {name: values[rows] for name, values in columns.items()}


class RankTables:
    """One rank's tables and metadata, as returned by a reader worker.

    The tables are held as :data:`Columns` and become DataFrames only when asked for
    (``kernels``, ``cpu_ops``, ``runtime``, ``syncs``; built once, then reused): a set of many
    small ranks is concatenated column by column without a DataFrame per rank, whose fixed
    cost (~1 ms per table) dominated reading 1 MB ranks (issue 21). The frames are views
    of the columns: change a table with :meth:`set_column`.
    """

    def __init__(self, rank: int, info: dict[str, Any], kernels: pd.DataFrame | Columns,
                 cpu_ops: pd.DataFrame | Columns, runtime: pd.DataFrame | Columns,
                 syncs: pd.DataFrame | Columns, pg_config: list[dict[str, Any]] | None = None,
                 skipped: dict[str, int] | None = None, untabulated: list[list[Any]] | None = None) -> None:
        self.rank = rank
        self.info = info
        self.columns: dict[str, Columns] = {
            name: as_columns(table) for name, table in zip(TABLE_NAMES, (kernels, cpu_ops, runtime, syncs),
                                                           strict=True)}
        self.pg_config = pg_config if pg_config is not None else []
        self.skipped = skipped if skipped is not None else {}
        #: events that went to no table: ``[phase, category as written, count]`` rows
        self.untabulated = untabulated if untabulated is not None else []
        self._frames: dict[str, pd.DataFrame] = {}

    def frame(self, table: str) -> pd.DataFrame:
        """One of :data:`TABLE_NAMES` as a DataFrame (sharing the columns' memory)."""
        if table not in self._frames:
            self._frames[table] = pd.DataFrame(self.columns[table], copy=False)
        return self._frames[table]

    kernels = property(lambda self: self.frame("kernels"), doc="GPU events (kernels, memcpy, memset).")
    cpu_ops = property(lambda self: self.frame("cpu_ops"), doc="CPU ops and user annotations.")
    runtime = property(lambda self: self.frame("runtime"), doc="CUDA runtime / driver calls.")
    syncs = property(lambda self: self.frame("syncs"), doc="CUDA synchronisation events.")

    def set_column(self, table: str, name: str, values: Any) -> None:
        """Add or replace a column of one table (its DataFrame is rebuilt when next asked for)."""
        self.columns[table][name] = values
        self._frames.pop(table, None)

    def __getstate__(self) -> dict[str, Any]:  # ship columns only: frames are rebuilt on demand
        return {**self.__dict__, "_frames": {}}

    def in_scope(self, scope: str) -> RankTables:
        """The rank's tables reduced to what a reading ``scope`` keeps (see :data:`SCOPES`);
        reduced tables keep their columns. Metadata unchanged."""
        if scope == "all":
            return self
        kernels, cpu_ops, runtime = (self.columns[t] for t in ("kernels", "cpu_ops", "runtime"))
        # communication kernels: NCCL's and the registry's (evtsync.trace.kernels.mark_comm_kernels)
        nccl = np.asarray(kernels["is_comm" if "is_comm" in kernels else "is_nccl"], dtype=bool)
        gloo = category_flags(cpu_ops["name"], _is_gloo_name)  # collectives and point-to-point (counted later)
        if scope == "collectives":
            keep = {"kernels": nccl, "cpu_ops": gloo, "runtime": np.zeros(n_rows(runtime), dtype=bool)}
        elif scope == "blocks":
            steps = category_flags(cpu_ops["name"], _is_profiler_step)
            launches = kernels["correlation"][nccl]
            keep = {"kernels": category_flags(kernels["cat"], is_kernel_category),
                    "cpu_ops": gloo | steps,
                    "runtime": np.isin(runtime["correlation"], launches[launches >= 0])}
        else:
            raise ValueError(f"unknown reading scope {scope!r}; expected one of {SCOPES}")
        syncs = self.columns["syncs"]
        tables = {name: _take(self.columns[name], rows) for name, rows in keep.items()}
        return RankTables(rank=self.rank, info=self.info, **tables,
                          syncs=_take(syncs, np.zeros(n_rows(syncs), dtype=bool)), pg_config=self.pg_config,
                          skipped=self.skipped, untabulated=self.untabulated)


#: gloo's point-to-point annotations: recorded on the calling (main) thread, not on a process
#: group's worker thread, and between two ranks, not the group (docs/gloo.md, issue 46).
GLOO_P2P_NAMES = frozenset({"gloo:send", "gloo:recv", "gloo:recv_anysource"})
#: The ``c10d::`` ops that enqueue point-to-point work (any backend): not a collective's enqueue.
C10D_P2P_NAMES = frozenset({"c10d::send", "c10d::recv_", "c10d::recv_any_source_"})


def is_gloo_collective(names: pd.Series | pd.Categorical | np.ndarray) -> np.ndarray:
    """Rows that are gloo collectives (``gloo:<op>`` annotations, see docs/gloo.md), not
    point-to-point ``gloo:send`` / ``gloo:recv`` (:func:`is_gloo_p2p`)."""
    return category_flags(names, _is_gloo_collective_name)


def is_gloo_p2p(names: pd.Series | pd.Categorical | np.ndarray) -> np.ndarray:
    """Rows that are gloo point-to-point operations (:data:`GLOO_P2P_NAMES`)."""
    return category_flags(names, _is_gloo_p2p_name)


def _time_ns(values: np.ndarray, base_ns: int) -> np.ndarray:
    """µs (int64 or float64) -> int64 ns plus the trace's base time."""
    if values.dtype.kind == "i":
        return values.astype(np.int64, copy=False) * 1000 + base_ns
    return np.rint(values * 1000.0).astype(np.int64) + base_ns


def _str_column(values: list[Any]) -> pd.Categorical:
    """Loose values (None: missing) as a categorical of strings with sorted categories."""
    if any(v is not None and not isinstance(v, str) for v in values):
        values = [None if v is None else str(v) for v in values]
    return pd.Categorical(values)


#: Largest |µs| value that fits int64 nanoseconds with room for the base time (~146 years).
_MAX_US = 4.6e15


def _check_times(values: np.ndarray, name: str, table: str, decoded: DecodedTrace) -> None:
    """Refuse timestamps or durations that are not finite or do not fit int64 nanoseconds (they
    would become garbage silently in the cast), naming the file and the field."""
    if values.dtype.kind != "f" or values.size == 0:
        return
    bad = ~np.isfinite(values) | (np.abs(values) > _MAX_US)
    if bad.any():
        first = values[np.flatnonzero(bad)[0]]
        what = {"ts": "timestamp", "dur": "duration"}.get(name, name)
        raise TraceError(f"{decoded.path}: absurd {what}: {int(bad.sum())} {table} event(s) with a {name!r} "
                         f"that is not finite or beyond any real trace (the first: {float(first):g} µs)")


def _table_columns(decoded: DecodedTrace, table: str, base_ns: int) -> Columns:
    """One table's columns in time order; the decoder's columns are handed over, not copied twice."""
    cols = decoded.columns[table]
    out: Columns = {}
    for name, kind in TABLE_FIELDS[table]:
        values = cols.pop(name)
        if kind == "t":
            _check_times(values, name, table, decoded)
            out[name + "_ns"] = _time_ns(values, 0 if name == "dur" else base_ns)
        else:
            out[name] = values
    if "dur_ns" in out:
        out["end_ns"] = out["ts_ns"] + out["dur_ns"]
    _in_time_order(out)
    return out


def _in_time_order(columns: dict[str, Any]) -> None:
    """Reorder the columns of one table by ``ts_ns`` (stable), in place in the dict.

    Done on the numpy arrays and categorical codes before any DataFrame exists (pandas'
    per-column take and delete cost more than the sort); each old column is released as
    its reordered copy replaces it, so the peak is the table plus one column.

    Everything downstream sees rows in time order, including the two look-ups that resolve
    duplicate ids (a launch's correlation, a ``record_param_comms`` external id): ties
    there go by time, not by position in the file.
    """
    ts = columns["ts_ns"]
    if ts.size < 2 or bool((ts[1:] >= ts[:-1]).all()):
        return
    order = np.argsort(ts, kind="stable")
    for name, values in columns.items():
        if isinstance(values, pd.Categorical):
            columns[name] = pd.Categorical.from_codes(values.codes[order], dtype=values.dtype, validate=False)
        else:
            columns[name] = values[order]


def parse_rank_list(text: Any) -> tuple[int, ...] | None:
    """``"[0, 1, 2, 3]"`` (or a list) -> (0, 1, 2, 3); None when absent or unreadable."""
    if text is None:
        return None
    if isinstance(text, list | tuple):
        values = tuple(text)
        try:
            return _cached_rank_tuple(values)
        except TypeError:  # unhashable members (nested lists): not a rank list
            return None
    return _parse_rank_text(str(text))


@functools.lru_cache(maxsize=1024)
def _cached_rank_tuple(values: tuple[Any, ...]) -> tuple[int, ...] | None:
    return _rank_tuple(values)


@functools.lru_cache(maxsize=1024)
def _parse_rank_text(text: str) -> tuple[int, ...] | None:
    """Memoised: every rank file repeats its job's PG rank lists, and a world-size list
    parsed per file made reading 2,048 ranks quadratic (issue 21)."""
    try:
        return _rank_tuple(ast.literal_eval(text))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _rank_tuple(values: Any) -> tuple[int, ...] | None:
    if isinstance(values, int):
        values = [values]
    if not isinstance(values, list | tuple) or not all(isinstance(v, int) for v in values):
        return None
    return tuple(int(v) for v in values)


def format_ranks(ranks: Sequence[int]) -> str:
    """Canonical text of a rank list: ``"0,1,2,3"`` (memoised, as :func:`parse_rank_list`)."""
    return _format_rank_tuple(tuple(ranks))


@functools.lru_cache(maxsize=1024)
def _format_rank_tuple(ranks: tuple[int, ...]) -> str:
    return ",".join(str(r) for r in ranks)


def category_flags(column: pd.Series | pd.Categorical | np.ndarray, test: Callable[[str], bool]) -> np.ndarray:
    """``test`` of each row's string, evaluated once per category (missing rows: False).

    For a categorical the per-category answers are kept per (dtype, ``test``): the ranks of
    a job share their dtypes (:func:`~evtsync.trace.decode.string_dtype`), so a named
    ``test`` runs once per process and category list, not once per rank file (issue 21).
    """
    values = column.array if isinstance(column, pd.Series) else column
    if not isinstance(values, pd.Categorical):
        return np.array([not pd.isna(v) and test(str(v)) for v in values], dtype=bool)
    dtype = values.dtype
    key = (id(dtype), test)
    hit = _FLAGS.get(key)
    if hit is not None and hit[0] is dtype:  # the dtype held by the entry: its id is not reused
        per_category = hit[1]
    else:
        per_category = np.array([test(c) for c in category_strings(dtype)] + [False], dtype=bool)
        if len(_FLAGS) > _MAX_FLAGS:
            _FLAGS.clear()
        _FLAGS[key] = (dtype, per_category)
    return per_category[np.asarray(values.codes)]  # code -1 (missing) takes the final False


_FLAGS: dict[tuple[int, Callable[[str], bool]], tuple[pd.CategoricalDtype, np.ndarray]] = {}
_CATEGORY_STRINGS: dict[int, tuple[pd.CategoricalDtype, list[str]]] = {}
_MAX_FLAGS = 1 << 12


def category_strings(dtype: pd.CategoricalDtype) -> list[str]:
    """The categories of ``dtype`` as Python strings, kept per dtype (iterating a pandas
    string Index costs ~3 µs per element; every rank's tables share a few dtypes)."""
    hit = _CATEGORY_STRINGS.get(id(dtype))
    if hit is not None and hit[0] is dtype:
        return hit[1]
    strings = [str(c) for c in dtype.categories.tolist()]
    if len(_CATEGORY_STRINGS) > _MAX_FLAGS:
        _CATEGORY_STRINGS.clear()
    _CATEGORY_STRINGS[id(dtype)] = (dtype, strings)
    return strings


def is_kernel_category(category: str) -> bool:
    """A GPU compute kernel's category (not memcpy or memset)."""
    return category == "kernel"


def is_nccl_kernel_name(name: str) -> bool:
    """An NCCL/RCCL collective kernel's name (:data:`~evtsync.trace.schema.NCCL_KERNEL_RE`)."""
    return NCCL_KERNEL_RE.match(name) is not None


def _is_gloo_name(name: str) -> bool:
    return name.startswith("gloo:")


def _is_gloo_p2p_name(name: str) -> bool:
    return name in GLOO_P2P_NAMES


def _is_gloo_collective_name(name: str) -> bool:
    return name.startswith("gloo:") and name not in GLOO_P2P_NAMES


def _is_profiler_step(name: str) -> bool:
    return PROFILER_STEP_RE.match(name) is not None


def _is_record_param_comms(name: str) -> bool:
    return name == "record_param_comms"


def _lookup(keys: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Positions in sorted unique ``keys`` of each ``wanted`` value, and whether it is there."""
    if not keys.size:
        return np.zeros(len(wanted), dtype=np.int64), np.zeros(len(wanted), dtype=bool)
    pos = np.minimum(np.searchsorted(keys, wanted), keys.size - 1)
    return pos, keys[pos] == wanted


def string_values(column: pd.Categorical) -> np.ndarray:
    """A categorical's values as an object array, None where missing (not NaN, which
    ``astype(object)`` gives and ``str()`` would turn into the string "nan")."""
    values = np.asarray(column.astype(object), dtype=object)
    values[np.asarray(column.codes) < 0] = None
    return values


def _missing(values: Any) -> np.ndarray:
    """Rows without a value: -1 in an integer column, a missing code in a categorical."""
    if isinstance(values, pd.Categorical):
        return np.asarray(values.codes) < 0
    return np.asarray(values) == MISSING


_PG_FIELDS = ("collective_name", "in_nelems", "out_nelems", "group_size", "dtype", "pg_name",
              "pg_desc", "pg_ranks")


def _annotate_kernels(kernels: Columns, cpu_ops: Columns) -> None:
    """Add NCCL columns: is_nccl, collective, msg_bytes; fill PG fields from the launching op."""
    names = kernels["name"]
    kernels["is_nccl"] = category_flags(names, is_nccl_kernel_name) & category_flags(kernels["cat"], is_kernel_category)
    comm = category_flags(cpu_ops["name"], _is_record_param_comms) & (cpu_ops["external_id"] >= 0)
    nccl_idx = np.flatnonzero(kernels["is_nccl"])
    if nccl_idx.size and comm.any():
        comm_rows = np.flatnonzero(comm)
        comm_ext = cpu_ops["external_id"][comm_rows]
        # one op per external id, the last in time (rows are in time order)
        keys, from_end = np.unique(comm_ext[::-1], return_index=True)
        op_of_key = comm_rows[len(comm_rows) - 1 - from_end]
        pos, found = _lookup(keys, kernels["external_id"][nccl_idx])
        for name in _PG_FIELDS:
            col = kernels[name]
            take = _missing(col)[nccl_idx] & found
            if not take.any():
                continue
            rows, source = nccl_idx[take], op_of_key[pos[take]]
            if isinstance(col, np.ndarray):
                filled = col.copy()
                filled[rows] = cpu_ops[name][source]
                kernels[name] = filled
            else:
                obj = string_values(col)
                obj[rows] = string_values(cpu_ops[name])[source]
                kernels[name] = _str_column(list(obj))
    codes = np.full(len(names), -1, dtype=np.int32)
    categories: list[str] = []
    if nccl_idx.size:
        # the collective of each distinct (collective-name argument, kernel name) pair, once
        arg_codes = np.asarray(kernels["collective_name"].codes)[nccl_idx].astype(np.int64)
        name_codes = np.asarray(names.codes)[nccl_idx].astype(np.int64)
        pairs, inverse = np.unique(arg_codes * (len(names.categories) + 1) + name_codes, return_inverse=True)
        arg_cats, name_cats = kernels["collective_name"].categories, names.categories
        per_pair = []
        for pair in pairs.tolist():
            arg, kernel = divmod(pair, len(names.categories) + 1)
            from_args = canonical_collective(None if arg < 0 else str(arg_cats[arg]))
            per_pair.append(from_args if from_args != "Unknown" else canonical_collective(str(name_cats[kernel])))
        categories = sorted(set(per_pair))
        code_of = {name: code for code, name in enumerate(categories)}
        codes[nccl_idx] = np.array([code_of[c] for c in per_pair], dtype=np.int32)[inverse.ravel()]
    # categories typed as strings even when empty: ranks without NCCL kernels concatenate
    # with the others (one category dtype)
    kernels["collective"] = pd.Categorical.from_codes(codes, dtype=string_dtype(categories), validate=False)
    dtypes = kernels["dtype"]
    per_category = np.array([dtype_size(str(d)) for d in dtypes.categories] + [0], dtype=np.int64)
    sizes = per_category[np.asarray(dtypes.codes)]  # code -1 (missing) takes the final 0
    nelems = np.maximum(kernels["in_nelems"], kernels["out_nelems"])
    kernels["msg_bytes"] = np.where((sizes > 0) & (nelems >= 0), nelems * sizes, MISSING)


def _external_ids_from_launches(kernels: Columns, runtime: Columns) -> None:
    """Give GPU events without an ``External id`` the one of their launch (same correlation)."""
    ext = kernels["external_id"]
    lacking = np.flatnonzero(ext == MISSING)
    if not lacking.size or not n_rows(runtime):
        return
    launches = (runtime["correlation"] >= 0) & (runtime["external_id"] >= 0)
    corr, launch_ext = runtime["correlation"][launches], runtime["external_id"][launches]
    keys, first = np.unique(corr, return_index=True)  # the first launch of a correlation in time
    pos, found = _lookup(keys, kernels["correlation"][lacking])
    ext = ext.copy()
    ext[lacking] = np.where(found, launch_ext[first][pos] if keys.size else MISSING, MISSING)
    kernels["external_id"] = ext


def _check_layout(decoded: DecodedTrace) -> None:
    """Refuse a file whose complete events all went to no table: an unknown layout.

    A file of only metadata, flows and the profiler's own range is an empty trace (judged
    with the rank set, see :mod:`evtsync.trace.ranks`); one that holds complete events of
    categories evtsync does not know, and nothing it reads, would silently give nothing.
    """
    if any(len(cols["ts"]) for cols in decoded.columns.values()):
        return
    unknown = {cat: n for (ph, cat), n in decoded.untabulated.items()
               if ph == "X" and canonical_category(cat) not in IGNORED_CATEGORIES}
    if unknown:
        listed = ", ".join(f"{cat!r} ({n})" for cat, n in sorted(unknown.items(), key=lambda kv: -kv[1]))
        raise TraceError(
            f"{decoded.path}: no kernels, CPU ops or runtime calls found: its {sum(unknown.values())} complete "
            f"events have categories {listed}, none of which evtsync knows (a profiler layout it does not "
            "read; see docs/user-guide.md, supported profiler versions)")


def _time_span(tables: tuple[Columns, ...]) -> tuple[int, int]:
    """First start and last end (ns) over the rows of ``tables``; (-1, -1) when empty."""
    starts = [int(t["ts_ns"].min()) for t in tables if n_rows(t)]
    ends = [int(t["end_ns"].max()) for t in tables if n_rows(t)]
    return (min(starts), max(ends)) if starts else (MISSING, MISSING)


#: GPU events further than this from the rank's median GPU timestamp are not of this trace (ns).
ABSURD_TS_NS = 7 * 86_400 * 10**9


def check_gpu_timing(kernels: pd.DataFrame | Columns, path: str) -> None:
    """Refuse GPU events whose timing cannot be true, naming the cause (issue 18): a negative
    duration, a collective kernel of zero duration, a timestamp days away from every other
    event of the rank, or the same event twice (same stream, start, duration and name).

    These would otherwise surface as a consequence — a rank whose collectives "do not end
    together" with its peers — far from their cause.
    """
    cols = as_columns(kernels)
    if not n_rows(cols):
        return
    dur = np.asarray(cols["dur_ns"])
    ts = np.asarray(cols["ts_ns"])

    def first(mask: np.ndarray) -> str:
        i = int(np.flatnonzero(mask)[0])
        return (f"{int(mask.sum())} GPU event(s), the first {str(cols['name'][i])[:60]!r} at "
                f"ts {ts[i] / 1000:.0f} µs with dur {dur[i] / 1000:g} µs")

    negative = dur < 0
    if negative.any():
        raise TraceError(f"{path}: negative duration: {first(negative)}")
    comm = np.asarray(cols["is_comm" if "is_comm" in cols else "is_nccl"], dtype=bool)
    zero = comm & (dur == 0)
    if zero.any():
        raise TraceError(f"{path}: collective kernel of zero duration (a kernel that waits for its peers "
                         f"cannot take no time): {first(zero)}")
    median = np.median(ts)
    far = np.abs(ts.astype(np.float64) - float(median)) > ABSURD_TS_NS
    if far.any():
        raise TraceError(f"{path}: absurd timestamp, days away from the rank's other GPU events "
                         f"(median {median / 1000:.0f} µs): {first(far)}")
    # only rows whose start repeats can be duplicates: compare the four fields of those alone
    order = np.argsort(ts, kind="stable")
    repeats = ts[order][1:] == ts[order][:-1]
    if repeats.any():
        shared = np.unique(np.concatenate([order[1:][repeats], order[:-1][repeats]]))
        names = cols["name"]
        name_key = np.asarray(names.codes) if isinstance(names, pd.Categorical) else \
            pd.factorize(np.asarray(names, dtype=object))[0]
        keys = (name_key[shared], dur[shared], np.asarray(cols["stream"])[shared], ts[shared])
        by_key = np.lexsort(keys)  # stable: equal events keep their order (the first is kept)
        same = np.ones(len(shared) - 1, dtype=bool)
        for key in keys:
            same &= key[by_key][1:] == key[by_key][:-1]
        dup = np.zeros(len(ts), dtype=bool)
        dup[shared[by_key[1:][same]]] = True
        if dup.any():
            raise TraceError(f"{path}: duplicate events (same stream, start, duration and name): {first(dup)}")


def build_rank_tables(decoded: DecodedTrace, rank: int | None = None) -> RankTables:
    """Typed tables of one decoded trace file, with rank and hardware metadata.

    ``rank`` is the user's word for the file's rank (``--rank-from``, ``RANK=PATH``); it
    wins over ``distributedInfo`` and the file name (see :func:`~evtsync.trace.ranks.detect_rank`).
    """
    _check_layout(decoded)
    header = decoded.header
    rank, rank_source = detect_rank(decoded.path, header, given=rank)
    base = header.get("baseTimeNanoseconds")
    if isinstance(base, float) and math.isfinite(base) and base.is_integer():
        base = int(base)
    if base is not None and (isinstance(base, bool) or not isinstance(base, int) or base < 0):
        raise TraceError(f"{decoded.path}: baseTimeNanoseconds {base!r} is not a count of nanoseconds since 1970 "
                         "(expected a whole number >= 0)")
    base_ns = int(base) if base else 0
    if base_ns > 2**62:  # int64 ns overflow once event times are added (2**62 ns is year 2116)
        raise TraceError(f"{decoded.path}: baseTimeNanoseconds {base_ns} is beyond any real clock "
                         "(expected nanoseconds since 1970)")
    kernels, cpu_ops, runtime, syncs = (_table_columns(decoded, t, base_ns) for t in ("gpu", "cpu", "runtime", "sync"))
    # GPU events: the device and stream are in args; pid/tid repeat them when args lack them.
    for name, fallback in (("device", "pid"), ("stream", "tid")):
        col = kernels[name]
        kernels[name] = np.where(col == MISSING, kernels[fallback], col)
    _external_ids_from_launches(kernels, runtime)
    _annotate_kernels(kernels, cpu_ops)
    check_gpu_timing(kernels, str(decoded.path))
    tables = [{"rank": np.full(n_rows(t), rank, dtype=np.int32), **t} for t in (kernels, cpu_ops, runtime, syncs)]
    info_raw = header.get("distributedInfo")
    info_block: dict = info_raw if isinstance(info_raw, dict) else {}
    devices = kernels["device"]
    device = int(np.bincount(devices[devices >= 0]).argmax()) if (devices >= 0).any() else None
    pg_raw = info_block.get("pg_config")
    pg_config: list = pg_raw if isinstance(pg_raw, list) else []
    host = header.get("host_name") or header.get("hostname")
    start_ns, end_ns = _time_span((kernels, cpu_ops, runtime, syncs))
    info = {
        "rank": rank,
        "rank_source": rank_source,
        "path": str(decoded.path),
        "world_size": int(info_block["world_size"]) if isinstance(info_block.get("world_size"), int) else MISSING,
        "backend": str(info_block.get("backend", "")),
        "nccl_version": str(info_block.get("nccl_version", "")),
        # no deviceProperties and no GPU event: a CPU-only rank, not an "unknown" GPU
        "gpu": gpu_model(header, device) if device is not None or header.get("deviceProperties") else CPU_DEVICE_LABEL,
        "device": MISSING if device is None else device,
        "host": str(host) if host else "",
        "base_time_ns": base_ns,
        "display_time_unit": str(header.get("displayTimeUnit", "")),
        "schema_version": header.get("schemaVersion", MISSING) if isinstance(header.get("schemaVersion"), int) else MISSING,
        "pg_config_names": ",".join(str(p.get("pg_name", "")) for p in pg_config if isinstance(p, dict)),
        "n_events": decoded.n_events,
        "n_kernels": int(category_flags(kernels["cat"], is_kernel_category).sum()),
        "n_kernels_without_dur": int(decoded.skipped.get("kernel event without numeric ts/dur", 0)),
        "n_cpu_ops": n_rows(cpu_ops),
        "n_runtime": n_rows(runtime),
        "n_nccl_kernels": int(kernels["is_nccl"].sum()),
        "start_ns": start_ns,
        "end_ns": end_ns,
        "truncated_at_byte": MISSING if decoded.truncated_at is None else decoded.truncated_at,
        "dropped_bytes": decoded.dropped_bytes,
        "bytes_decompressed": decoded.bytes_read,
    }
    kernel_t, cpu_op_t, runtime_t, sync_t = tables
    return RankTables(rank, info, kernel_t, cpu_op_t, runtime_t, sync_t, pg_config=[p for p in pg_config if isinstance(p, dict)],
                      skipped=dict(decoded.skipped),
                      untabulated=[[ph, cat, n] for (ph, cat), n in sorted(decoded.untabulated.items())])


def rank_ranges(ranks: Iterable[int]) -> str:
    """Sorted ranks as short text: ``[0, 1, 2, 5, 7, 8]`` -> ``"0-2,5,7,8"`` (runs of 3+ as ranges)."""
    values = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        parts.extend([f"{values[i]}-{values[j]}"] if j - i >= 2 else [str(v) for v in values[i:j + 1]])
        i = j + 1
    return ",".join(parts)
