"""Turn one decoded trace into typed pandas tables (one rank's share of a TraceSet).

Times become int64 nanoseconds on the trace's own clock: absolute unix time for traces
with absolute µs, ``baseTimeNanoseconds`` + ts for newer relative traces. ``ts`` and
``dur`` are always microseconds in Kineto; ``displayTimeUnit`` only changes how viewers
display them (checked on the ``ns`` trace in the shared data), so it is recorded, not applied.
"""

from __future__ import annotations

import ast
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from evtsync.errors import TraceError
from evtsync.trace.decode import TABLE_FIELDS, DecodedTrace
from evtsync.trace.ranks import detect_rank, gpu_model
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


@dataclass
class RankTables:
    """One rank's tables and metadata, as returned by a reader worker."""

    rank: int
    info: dict[str, Any]
    kernels: pd.DataFrame
    cpu_ops: pd.DataFrame
    runtime: pd.DataFrame
    syncs: pd.DataFrame
    pg_config: list[dict[str, Any]] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)
    #: events that went to no table: ``[phase, category as written, count]`` rows
    untabulated: list[list[Any]] = field(default_factory=list)

    def in_scope(self, scope: str) -> RankTables:
        """The rank's tables reduced to what a reading ``scope`` keeps (see :data:`SCOPES`);
        reduced tables keep their columns. Metadata unchanged."""
        if scope == "all":
            return self
        kernels, cpu_ops, runtime = self.kernels, self.cpu_ops, self.runtime
        # communication kernels: NCCL's and the registry's (evtsync.kernels.mark_comm_kernels)
        nccl = kernels["is_comm" if "is_comm" in kernels.columns else "is_nccl"].to_numpy()
        gloo = is_gloo_collective(cpu_ops["name"])
        if scope == "collectives":
            kernels, cpu_ops, runtime = kernels[nccl], cpu_ops[gloo], runtime.iloc[:0]
        elif scope == "blocks":
            steps = _category_flags(cpu_ops["name"], lambda n: PROFILER_STEP_RE.match(n) is not None)
            launches = kernels.loc[nccl, "correlation"].to_numpy()
            kernels = kernels[(kernels["cat"] == "kernel").to_numpy()]
            cpu_ops = cpu_ops[gloo | steps]
            runtime = runtime[runtime["correlation"].isin(launches[launches >= 0]).to_numpy()]
        else:
            raise ValueError(f"unknown reading scope {scope!r}; expected one of {SCOPES}")
        return RankTables(rank=self.rank, info=self.info, kernels=kernels, cpu_ops=cpu_ops,
                          runtime=runtime, syncs=self.syncs.iloc[:0], pg_config=self.pg_config,
                          skipped=self.skipped, untabulated=self.untabulated)


def is_gloo_collective(names: pd.Series) -> np.ndarray:
    """Rows that are gloo collectives (``gloo:<op>`` annotations, see docs/gloo.md)."""
    return _category_flags(names, lambda n: n.startswith("gloo:"))


def _time_ns(values: np.ndarray, base_ns: int) -> np.ndarray:
    """µs (int64 or float64) -> int64 ns plus the trace's base time."""
    if values.dtype.kind == "i":
        return values.astype(np.int64, copy=False) * 1000 + base_ns
    return np.rint(values * 1000.0).astype(np.int64) + base_ns


def _str_column(values: list[Any]) -> pd.Categorical:
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


def _frame(decoded: DecodedTrace, table: str, base_ns: int) -> pd.DataFrame:
    """One table's DataFrame; the decoder's columns are handed over, not copied twice."""
    cols = decoded.columns[table]
    out: dict[str, Any] = {}
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
    # no consolidation copy of the columns; an object column index while columns are added
    # (inserting into pandas' pyarrow-backed string index costs ~1 ms per column)
    return pd.DataFrame(out, copy=False, columns=pd.Index(list(out), dtype=object))


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
        values = text
    else:
        try:
            values = ast.literal_eval(str(text))
        except (ValueError, SyntaxError):
            return None
    if isinstance(values, int):
        values = [values]
    if not isinstance(values, list | tuple) or not all(isinstance(v, int) for v in values):
        return None
    return tuple(int(v) for v in values)


def format_ranks(ranks: tuple[int, ...]) -> str:
    """Canonical text of a rank list: ``"0,1,2,3"``."""
    return ",".join(str(r) for r in ranks)


def _category_flags(column: pd.Series, test: Callable[[str], bool]) -> np.ndarray:
    """``test`` of each row's string, evaluated once per category (missing rows: False)."""
    if not isinstance(column.dtype, pd.CategoricalDtype):
        return np.array([not pd.isna(v) and test(str(v)) for v in column], dtype=bool)
    per_category = np.array([test(str(c)) for c in column.cat.categories] + [False], dtype=bool)
    return per_category[column.cat.codes.to_numpy()]


def _annotate_kernels(kernels: pd.DataFrame, cpu_ops: pd.DataFrame) -> pd.DataFrame:
    """Add NCCL columns: is_nccl, collective, msg_bytes; fill PG fields from the launching op."""
    names = kernels["name"]
    kernels["is_nccl"] = _category_flags(names, lambda n: NCCL_KERNEL_RE.match(n) is not None) \
        & (kernels["cat"] == "kernel").to_numpy()
    comm_ops = cpu_ops[_category_flags(cpu_ops["name"], lambda n: n == "record_param_comms")
                       & (cpu_ops["external_id"] >= 0).to_numpy()]
    nccl_idx = np.flatnonzero(kernels["is_nccl"].to_numpy())
    fields = ["collective_name", "in_nelems", "out_nelems", "group_size", "dtype", "pg_name",
              "pg_desc", "pg_ranks"]
    if nccl_idx.size and len(comm_ops):
        by_ext = comm_ops.drop_duplicates("external_id", keep="last").set_index("external_id")
        ext = kernels["external_id"].to_numpy()[nccl_idx]
        found = np.isin(ext, by_ext.index.to_numpy())
        for name in fields:
            col = kernels[name]
            missing = (col.isna() if col.dtype != np.int64 else col.eq(MISSING)).to_numpy()[nccl_idx]
            take = missing & found
            if take.any():
                values = by_ext.loc[ext[take], name].to_numpy()
                if col.dtype == np.int64:
                    arr = col.to_numpy().copy()
                    arr[nccl_idx[take]] = values
                    kernels[name] = arr
                else:
                    obj = np.array(col.astype(object), dtype=object)
                    obj[nccl_idx[take]] = values
                    kernels[name] = _str_column(list(obj))
    codes = np.full(len(kernels), -1, dtype=np.int32)
    categories: list[str] = []
    if nccl_idx.size:
        arg_names = kernels["collective_name"].astype(object).to_numpy()[nccl_idx]
        kernel_names = names.astype(object).to_numpy()[nccl_idx]
        from_args = [canonical_collective(None if pd.isna(a) else str(a)) for a in arg_names]
        per_kernel = [a if a != "Unknown" else canonical_collective(k)
                      for a, k in zip(from_args, kernel_names, strict=True)]
        categories = sorted(set(per_kernel))
        code_of = {name: code for code, name in enumerate(categories)}
        codes[nccl_idx] = [code_of[name] for name in per_kernel]
    # from codes: building the categorical from a column of strings costs ~10 ms per rank
    # categories typed as strings even when empty: ranks without NCCL kernels concatenate
    # with the others (union_categoricals needs one category dtype)
    kernels["collective"] = pd.Categorical.from_codes(codes, categories=pd.Index(categories, dtype="str"),
                                                      validate=False)
    dtypes = kernels["dtype"]
    if isinstance(dtypes.dtype, pd.CategoricalDtype):
        per_category = np.array([dtype_size(str(d)) for d in dtypes.cat.categories] + [0], dtype=np.int64)
        sizes = per_category[dtypes.cat.codes.to_numpy()]  # code -1 (missing) takes the final 0
    else:
        sizes = np.array([0 if pd.isna(d) else dtype_size(str(d)) for d in dtypes.astype(object)],
                         dtype=np.int64)
    nelems = np.maximum(kernels["in_nelems"].to_numpy(), kernels["out_nelems"].to_numpy())
    kernels["msg_bytes"] = np.where((sizes > 0) & (nelems >= 0), nelems * sizes, MISSING)
    return kernels


def _external_ids_from_launches(kernels: pd.DataFrame, runtime: pd.DataFrame) -> None:
    """Give GPU events without an ``External id`` the one of their launch (same correlation)."""
    ext = kernels["external_id"].to_numpy()
    lacking = ext == MISSING
    if not lacking.any() or runtime.empty:
        return
    launches = runtime[(runtime["correlation"] >= 0) & (runtime["external_id"] >= 0)]
    by_corr = launches.drop_duplicates("correlation").set_index("correlation")["external_id"]
    found = by_corr.reindex(kernels["correlation"].to_numpy()[lacking]).to_numpy()
    ext = ext.copy()
    ext[np.flatnonzero(lacking)] = np.where(np.isnan(found), MISSING, found).astype(np.int64)
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


def _time_span(frames: tuple[pd.DataFrame, ...]) -> tuple[int, int]:
    """First start and last end (ns) over the rows of ``frames``; (-1, -1) when empty."""
    starts = [int(f["ts_ns"].min()) for f in frames if len(f)]
    ends = [int(f["end_ns"].max()) for f in frames if len(f)]
    return (min(starts), max(ends)) if starts else (MISSING, MISSING)


#: GPU events further than this from the rank's median GPU timestamp are not of this trace (ns).
ABSURD_TS_NS = 7 * 86_400 * 10**9


def check_gpu_timing(kernels: pd.DataFrame, path: str) -> None:
    """Refuse GPU events whose timing cannot be true, naming the cause (issue 18): a negative
    duration, a collective kernel of zero duration, a timestamp days away from every other
    event of the rank, or the same event twice (same stream, start, duration and name).

    These would otherwise surface as a consequence — a rank whose collectives "do not end
    together" with its peers — far from their cause.
    """
    if kernels.empty:
        return
    dur = kernels["dur_ns"].to_numpy()
    ts = kernels["ts_ns"].to_numpy()

    def first(mask: np.ndarray) -> str:
        i = int(np.flatnonzero(mask)[0])
        return (f"{int(mask.sum())} GPU event(s), the first {str(kernels['name'].iloc[i])[:60]!r} at "
                f"ts {ts[i] / 1000:.0f} µs with dur {dur[i] / 1000:g} µs")

    negative = dur < 0
    if negative.any():
        raise TraceError(f"{path}: negative duration: {first(negative)}")
    comm = kernels["is_comm" if "is_comm" in kernels.columns else "is_nccl"].to_numpy(dtype=bool)
    zero = comm & (dur == 0)
    if zero.any():
        raise TraceError(f"{path}: collective kernel of zero duration (a kernel that waits for its peers "
                         f"cannot take no time): {first(zero)}")
    median = np.median(ts)
    far = np.abs(ts.astype(np.float64) - float(median)) > ABSURD_TS_NS
    if far.any():
        raise TraceError(f"{path}: absurd timestamp, days away from the rank's other GPU events "
                         f"(median {median / 1000:.0f} µs): {first(far)}")
    # only rows whose start repeats can be duplicates: hash the four columns of those alone
    dup = np.zeros(len(kernels), dtype=bool)
    shared_ts = pd.Series(ts).duplicated(keep=False).to_numpy()
    if shared_ts.any():
        key = kernels.loc[shared_ts, ["stream", "ts_ns", "dur_ns", "name"]]
        dup[np.flatnonzero(shared_ts)] = key.duplicated(keep="first").to_numpy()
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
    kernels = _frame(decoded, "gpu", base_ns)
    cpu_ops = _frame(decoded, "cpu", base_ns)
    runtime = _frame(decoded, "runtime", base_ns)
    syncs = _frame(decoded, "sync", base_ns)
    # GPU events: the device and stream are in args; pid/tid repeat them when args lack them.
    for name, fallback in (("device", "pid"), ("stream", "tid")):
        col = kernels[name].to_numpy()
        kernels[name] = np.where(col == MISSING, kernels[fallback].to_numpy(), col)
    _external_ids_from_launches(kernels, runtime)
    kernels = _annotate_kernels(kernels, cpu_ops)
    check_gpu_timing(kernels, str(decoded.path))
    for frame in (kernels, cpu_ops, runtime, syncs):
        frame.insert(0, "rank", np.int32(rank))
        frame.columns = pd.Index(list(frame.columns), dtype="str")
    info_block = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
    devices = kernels["device"].to_numpy()
    device = int(np.bincount(devices[devices >= 0]).argmax()) if (devices >= 0).any() else None
    pg_config = info_block.get("pg_config") if isinstance(info_block.get("pg_config"), list) else []
    host = header.get("host_name") or header.get("hostname")
    start_ns, end_ns = _time_span((kernels, cpu_ops, runtime, syncs))
    info = {
        "rank": rank,
        "rank_source": rank_source,
        "path": str(decoded.path),
        "world_size": int(info_block["world_size"]) if isinstance(info_block.get("world_size"), int) else MISSING,
        "backend": str(info_block.get("backend", "")),
        "nccl_version": str(info_block.get("nccl_version", "")),
        "gpu": gpu_model(header, device),
        "device": MISSING if device is None else device,
        "host": str(host) if host else "",
        "base_time_ns": base_ns,
        "display_time_unit": str(header.get("displayTimeUnit", "")),
        "schema_version": header.get("schemaVersion", MISSING) if isinstance(header.get("schemaVersion"), int) else MISSING,
        "pg_config_names": ",".join(str(p.get("pg_name", "")) for p in pg_config if isinstance(p, dict)),
        "n_events": decoded.n_events,
        "n_kernels": int((kernels["cat"] == "kernel").sum()),
        "n_kernels_without_dur": int(decoded.skipped.get("kernel event without numeric ts/dur", 0)),
        "n_cpu_ops": len(cpu_ops),
        "n_runtime": len(runtime),
        "n_nccl_kernels": int(kernels["is_nccl"].sum()),
        "start_ns": start_ns,
        "end_ns": end_ns,
        "truncated_at_byte": MISSING if decoded.truncated_at is None else decoded.truncated_at,
        "dropped_bytes": decoded.dropped_bytes,
        "bytes_decompressed": decoded.bytes_read,
    }
    return RankTables(rank=rank, info=info, kernels=kernels, cpu_ops=cpu_ops, runtime=runtime,
                      syncs=syncs, pg_config=[p for p in pg_config if isinstance(p, dict)],
                      skipped=dict(decoded.skipped),
                      untabulated=[[ph, cat, n] for (ph, cat), n in sorted(decoded.untabulated.items())])
