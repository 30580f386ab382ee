"""Process groups and the alignment of collectives across ranks (methodology §2).

Every NCCL kernel is assigned to a process group (PG):

1. ``--pg`` overrides (:class:`PGOverride`): kernels on the given stream of the given ranks;
2. the kernel's own process-group fields (``Process Group Name`` / ``Ranks``), filled from
   the launching ``record_param_comms`` op or ``pg_config`` where the kernel lacks them;
3. otherwise inferred: per CUDA stream, the ranks whose collective end times on that
   stream move together (a constant clock offset allowed) form one group. This separates,
   e.g., two TP groups that use the same stream id on different ranks. Inferred groups
   are reported as such (``pg_source = "inferred"``).

Communication kernels are NCCL/RCCL kernels and those of the registry of name patterns
(:data:`evtsync.trace.schema.COMM_KERNEL_PATTERNS`: DeepEP, NVSHMEM, all-to-all kernels, and
the user's ``--comm-kernel REGEX=KIND``); they carry no process-group fields, so their groups
are inferred per stream like NCCL kernels without them.

Within a PG the i-th collective of every member rank is the same collective instance
(streams are ordered). With several profiling windows (see :mod:`evtsync.trace.traceset`)
each PG is aligned window by window, so a match never crosses a window boundary; the
indices continue from one window to the next (window w starts after the collectives kept
in window w-1) and every instance carries its ``window``. The match is validated: equal counts, equal collective type and
message size where known, and end times that agree within a tolerance among ranks that
share a clock. Every disagreement is reported with PG, index and rank; count or type
disagreements stop the analysis unless ``strict=False``, which keeps the common prefix and
flags the affected instances instead. Nothing is shifted to make sequences fit.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
else:  # pandas at its first use: the Inspector tax reads its logs without it (issue 48)
    from evtsync.core.lazy import pd

from evtsync.core.defaults import END_TOLERANCE_US, RANKS_PER_HOST
from evtsync.core.display import TablesDisplay
from evtsync.core.errors import AlignmentError, InputError
from evtsync.trace.schema import canonical_collective
from evtsync.trace.tables import format_ranks, is_gloo_collective, is_gloo_p2p, parse_rank_list
from evtsync.trace.traceset import TraceSet

if TYPE_CHECKING:
    from evtsync.core.parallel import Backend

log = logging.getLogger(__name__)


#: Default end-time tolerance for CPU-side (gloo) collectives: their end is recorded by a
#: worker thread that the OS may deschedule, so spreads of several ms are normal.
GLOO_END_TOLERANCE_US = 10_000.0

INSTANCE_COLUMNS = ["pg", "index", "window", "rank", "collective", "msg_bytes", "dtype", "stream",
                    "ts_ns", "dur_ns", "end_ns", "correlation", "external_id"]
MISMATCH_COLUMNS = ["pg", "index", "rank", "kind", "detail"]


@dataclass(frozen=True)
class PGOverride:
    """A user-declared process group: NCCL kernels on ``stream`` of ``ranks`` belong to ``name``."""

    name: str
    ranks: tuple[int, ...]
    stream: int | None = None

    @classmethod
    def parse(cls, text: str) -> PGOverride:
        """Parse ``NAME=RANKS[@STREAM]``; RANKS like ``0-3`` or ``0,2,4,6`` (e.g. ``tp=0-3@84``)."""
        match = re.fullmatch(r"\s*([^=\s]+)\s*=\s*([0-9,\-\s]+?)\s*(?:@\s*(-?\d+))?\s*", text)
        if not match:
            raise InputError(f"--pg {text!r}: expected NAME=RANKS[@STREAM], e.g. tp=0-3@84")
        ranks: list[int] = []
        for part in match.group(2).split(","):
            part = part.strip()
            if not part:
                continue
            bounds = re.fullmatch(r"(\d+)\s*-\s*(\d+)", part)
            if bounds:
                lo, hi = int(bounds.group(1)), int(bounds.group(2))
                if hi < lo:
                    raise InputError(f"--pg {text!r}: empty rank range {part}")
                ranks.extend(range(lo, hi + 1))
            elif part.isdigit():
                ranks.append(int(part))
            else:
                raise InputError(f"--pg {text!r}: {part!r} is not a rank or a range LO-HI of "
                                 "non-negative ranks (e.g. 0-3 or 0,2,4)")
        if len(set(ranks)) != len(ranks) or not ranks:
            raise InputError(f"--pg {text!r}: rank list is empty or repeats a rank")
        stream = int(match.group(3)) if match.group(3) is not None else None
        return cls(match.group(1), tuple(sorted(ranks)), stream)


@dataclass(repr=False)
class Alignment(TablesDisplay):
    """Collectives matched across ranks.

    - ``groups``: one row per PG: pg, pg_name, pg_desc, pg_ranks, n_ranks, pg_source,
      streams, n_collectives, present_ranks.
    - ``instances``: one row per (pg, index, rank): the matched NCCL kernel.
    - ``mismatches``: every disagreement found (pg, index, rank, kind, detail).
    - ``invalid``: set of (pg, index) instances flagged by a mismatch.
    """

    groups: pd.DataFrame
    instances: pd.DataFrame
    mismatches: pd.DataFrame
    invalid: set[tuple[str, int]] = field(default_factory=set)


def gloo_collectives(traces: TraceSet) -> pd.DataFrame:
    """CPU-side collectives of gloo jobs, shaped like NCCL kernel rows, with their PG.

    torch's profiler records a gloo collective as a ``gloo:<op>`` user annotation on one of
    the process group's worker threads (``pt_gloo_runloop``); its duration includes the
    wait for the other ranks, so it plays the NCCL kernel's role. The events carry no
    process-group field: each gloo PG owns a fixed number of worker threads, started in the
    order of the rank's ``pg_config`` entries, so the rank's gloo thread ids sorted ascending
    and cut into equal chunks map to its gloo PGs in that order. The result is validated
    later like any alignment (equal counts and types across members). Bytes are unknown.

    Point-to-point ``gloo:send`` / ``gloo:recv`` run on the calling (main) thread between two
    ranks: they are not collectives of a group and have no tax; they are counted and left out
    here (logged), and their waiting is attributed on the main thread (docs/gloo.md).
    """
    ops = traces.cpu_ops
    p2p = is_gloo_p2p(ops["name"])
    if p2p.any():
        counts = ops.loc[p2p, "name"].astype(str).value_counts()
        log.warning("gloo point-to-point: %s on the main thread(s) of rank(s) %s are not collectives of a group "
                    "and get no tax; their waiting is attributed on the main thread (docs/gloo.md)",
                    ", ".join(f"{n} {k}" for k, n in sorted(counts.items())),
                    format_ranks(tuple(sorted(int(r) for r in ops.loc[p2p, "rank"].unique()))))
    gloo = ops[is_gloo_collective(ops["name"])]
    if gloo.empty:
        return gloo.iloc[:0]
    config = {}
    for row in traces.process_groups.itertuples():
        config[str(row.pg_name)] = (row.pg_desc, row.pg_ranks, row.backend_config)
    parts = []
    for rank, sub in gloo.groupby("rank"):
        info = traces.rank_info(int(rank))
        names = [n for n in str(info.get("pg_config_names", "")).split(",") if n]
        gloo_pgs = [n for n in names if n in config and "gloo" in str(config[n][2])]
        tids = sorted(set(sub["tid"].tolist()))
        if not gloo_pgs or len(tids) % len(gloo_pgs):
            raise AlignmentError(
                f"rank {rank}: {len(tids)} gloo worker threads cannot be mapped onto its "
                f"{len(gloo_pgs)} gloo process groups in pg_config; declare the groups with --pg")
        per_pg = len(tids) // len(gloo_pgs)
        thread_pg = {tid: gloo_pgs[i // per_pg] for i, tid in enumerate(tids)}
        pg_names = sub["tid"].map(thread_pg)
        parts.append(sub.assign(
            pg_name=pg_names.to_numpy(),
            pg_desc=[config[n][0] for n in pg_names],
            pg_ranks=[f"[{config[n][1]}]" for n in pg_names],
            stream=sub["tid"].to_numpy(), device=-1, correlation=-1,
            collective=[canonical_collective(n.split(":", 1)[1]) for n in sub["name"].astype(str)],
            msg_bytes=-1, is_nccl=False))
    rows = pd.concat(parts, ignore_index=True)
    log.info("no NCCL kernels; using %d gloo collective annotations (PG from worker threads)",
             len(rows))
    return rows


def _collective_events(traces: TraceSet) -> tuple[pd.DataFrame, bool]:
    """Communication kernels (NCCL/RCCL and the registry's), or gloo annotations for
    CPU-only jobs; second value: is gloo."""
    nccl = traces.comm_kernels if "is_comm" in traces.kernels.columns else traces.nccl_kernels
    if not nccl.empty:
        other = nccl[~nccl["is_nccl"].to_numpy()]
        if len(other):
            kinds = other["collective"].astype(str).value_counts()
            log.info("communication kernels beyond NCCL: %s", ", ".join(f"{n} {k}" for k, n in kinds.items()))
        return nccl, False
    gloo = gloo_collectives(traces)
    return gloo, not gloo.empty


def _pg_members_from_config(traces: TraceSet) -> dict[str, tuple[int, ...]]:
    members: dict[str, tuple[int, ...]] = {}
    for row in traces.process_groups.itertuples():
        ranks = parse_rank_list(f"[{row.pg_ranks}]")
        if ranks is not None:
            members.setdefault(str(row.pg_name), ranks)
    return members


def _assign_groups(nccl: pd.DataFrame, traces: TraceSet, overrides: Sequence[PGOverride],
                   tolerance_us: float, strict: bool = True) -> tuple[pd.Series, dict[str, dict[str, object]]]:
    """Return the PG label of each NCCL kernel and a description of each PG."""
    labels = pd.Series(np.full(len(nccl), None, dtype=object), index=nccl.index)
    info: dict[str, dict[str, object]] = {}
    for ov in overrides:
        mask = nccl["rank"].isin(ov.ranks)
        if ov.stream is not None:
            mask &= nccl["stream"] == ov.stream
        mask &= labels.isna()
        labels[mask] = ov.name
        info[ov.name] = {"pg_name": ov.name, "pg_desc": "override", "ranks": ov.ranks,
                         "source": "override"}
        if not mask.any():
            raise InputError(f"--pg {ov.name}: no NCCL kernels on ranks {format_ranks(ov.ranks)}"
                             + (f" stream {ov.stream}" if ov.stream is not None else ""))
    config = _pg_members_from_config(traces)
    named = labels.isna() & nccl["pg_name"].notna()
    if named.any():
        sub = nccl[named]
        entries = []
        for (name, ranks_text), idx in sub.groupby(["pg_name", "pg_ranks"], observed=True,
                                                     dropna=False).groups.items():
            name = str(name)
            ranks = parse_rank_list(None if pd.isna(ranks_text) else ranks_text) or config.get(name)
            if ranks is None:
                ranks = tuple(sorted(sub.loc[idx, "rank"].unique().tolist()))
                log.warning("PG %s: member ranks not in the trace; using the ranks that ran it (%s)",
                            name, format_ranks(ranks))
            desc = sub.loc[idx, "pg_desc"].dropna()
            entries.append((name, ranks, str(desc.iloc[0]) if len(desc) else "", idx))
        names = [e[0] for e in entries]
        for name, ranks, desc, idx in entries:
            label = name if names.count(name) == 1 else f"{name}[{format_ranks(ranks)}]"
            if label in info and info[label]["ranks"] != ranks:
                raise InputError(f"PG {label}: named by --pg and by the trace with other ranks")
            info.setdefault(label, {"pg_name": name, "pg_desc": desc, "ranks": ranks,
                                    "source": "trace"})
            labels[idx] = label
    rest = labels.isna()
    if rest.any():
        for stream, sub in nccl[rest].groupby("stream"):
            clusters = _cluster_by_end_times(sub, tolerance_us)
            lonely = [c[0] for c in clusters if len(c) == 1 and len(clusters) > 1]
            if lonely:
                message = (f"stream {stream}: the collectives of rank(s) "
                           f"{format_ranks(tuple(lonely))} do not end together with any other "
                           "rank's (a missing or extra collective shifts the sequence?); "
                           "declare the process groups with --pg")
                if strict:
                    raise AlignmentError(message + " or pass --no-strict to keep them apart")
                log.warning(message)
            for members in clusters:
                label = f"stream{stream}" if len(members) == sub["rank"].nunique() else \
                    f"stream{stream}[{format_ranks(members)}]"
                info[label] = {"pg_name": label, "pg_desc": "inferred", "ranks": members,
                               "source": "inferred"}
                labels[sub.index[sub["rank"].isin(members)]] = label
        log.info("process groups inferred from streams and end times: %s",
                 ", ".join(k for k, v in info.items() if v["source"] == "inferred"))
    return labels, info


#: Share of common collectives whose end times must move together for two ranks of one
#: stream to be put in one inferred PG; the rest (at least one collective) may be outliers,
#: which the alignment then reports as end-time mismatches.
CO_MOVE_MIN_SHARE = 0.8


def _cluster_by_end_times(sub: pd.DataFrame, tolerance_us: float) -> list[tuple[int, ...]]:
    """Split the ranks of one stream into groups whose collective end times move together.

    Co-movement is tested per collective: over their common collectives, the difference of
    two ranks' end times minus its median (a clock offset) is within ``tolerance_us`` for a
    collective that both ended together. Two ranks belong together when all but a few of
    their collectives do (at least :data:`CO_MOVE_MIN_SHARE`, and every collective but one
    when there are few): a single late kernel end on one rank does not split the group
    (the alignment reports it as an end-time mismatch with rank, PG and index), while
    ranks of different groups, which end together only by chance, stay apart. With fewer
    than 3 collectives all ranks form one group.
    """
    ends = {int(r): g.sort_values("ts_ns")["end_ns"].to_numpy() for r, g in sub.groupby("rank")}
    ranks = sorted(ends)
    n_common = min(len(v) for v in ends.values())
    if n_common < 3 or len(ranks) < 2:
        return [tuple(ranks)]
    tol_ns = tolerance_us * 1000.0
    allowed = max(1, int(np.floor((1.0 - CO_MOVE_MIN_SHARE) * n_common)))
    groups: list[list[int]] = []
    for r in ranks:
        for g in groups:
            # compare with up to three members, so that an outlier of the first one does not decide
            outliers = []
            for m in g[:3]:
                diff = ends[r][:n_common] - ends[m][:n_common]
                outliers.append(int((np.abs(diff - np.median(diff)) > tol_ns).sum()))
            if min(outliers) <= allowed:
                g.append(r)
                break
        else:
            groups.append([r])
    return [tuple(g) for g in groups]


def _clock_domains(traces: TraceSet, ranks_per_host: int) -> dict[int, str]:
    domains = {}
    for row in traces.ranks.itertuples():
        domains[int(row.rank)] = row.host if row.host else f"host{int(row.rank) // ranks_per_host}"
    return domains


GROUP_COLUMNS = ["pg", "pg_name", "pg_desc", "pg_ranks", "n_ranks", "pg_source", "streams",
                 "n_collectives", "present_ranks", "windows"]
#: Columns of the NCCL kernel rows that aligning one PG needs (what a task is sent).
TASK_COLUMNS = ["rank", "window", "collective", "msg_bytes", "dtype", "stream", "ts_ns", "dur_ns", "end_ns",
                "correlation", "external_id"]


@dataclass
class GroupTask:
    """Everything needed to align one PG, independently of the others (a unit of work)."""

    label: str
    meta: dict[str, object]
    kernels: pd.DataFrame
    present: frozenset[int]
    domains: dict[int, str]
    end_tolerance_us: float
    strict: bool
    allow_partial: bool
    window: int = 0
    index_offset: int = 0


@dataclass
class GroupAlignment:
    """The alignment of one PG: its row of ``groups``, its instances, mismatches, invalid."""

    group: dict[str, object]
    instances: pd.DataFrame
    mismatches: list[tuple]
    invalid: set[tuple[str, int]]


def plan_alignment(traces: TraceSet, *, overrides: Iterable[PGOverride] = (),
                   end_tolerance_us: float = END_TOLERANCE_US, strict: bool = True,
                   allow_partial: bool = False,
                   ranks_per_host: int = RANKS_PER_HOST) -> list[GroupTask]:
    """Assign every collective to its PG and cut the work into one task per PG and window
    (sorted). The rank set is checked first (:meth:`TraceSet.check_complete`)."""
    if traces.logged is not None:
        raise InputError("NCCL Inspector logs are aligned by (communicator, sequence number) in one pass "
                         "(align_collectives / align_logged), not planned per PG")
    # every command aligns here (tax, blocks, attribute, breakdown, run): the refusal names the
    # step refused, not the tax of one of them
    traces.check_complete(allow_partial, purpose="to align its collectives")
    nccl, is_gloo = _collective_events(traces)
    if is_gloo and end_tolerance_us == END_TOLERANCE_US:
        end_tolerance_us = GLOO_END_TOLERANCE_US
    if nccl.empty:
        return []
    labels, info = _assign_groups(nccl, traces, list(overrides), end_tolerance_us, strict)
    present = frozenset(traces.rank_ids)
    domains = _clock_domains(traces, ranks_per_host)
    label_array = labels.to_numpy()
    tasks = []
    if "window" not in nccl.columns:
        nccl = nccl.assign(window=np.int32(0))
    for label, meta in sorted(info.items()):
        rows = nccl.loc[label_array == label, TASK_COLUMNS]
        if rows.empty:
            continue
        offset = 0
        for window, sub in rows.groupby("window", sort=True):
            tasks.append(GroupTask(label, meta, sub.reset_index(drop=True), present, domains,
                                   end_tolerance_us, strict, allow_partial, int(window), offset))
            offset += int(sub.groupby("rank").size().min())  # what align_group keeps: contiguous indices
    return tasks


def align_group(task: GroupTask) -> GroupAlignment:
    """Match the i-th collective of one PG across its member ranks and validate the match."""
    label, meta, sub = task.label, task.meta, task.kernels
    members: tuple[int, ...] = meta["ranks"]  # type: ignore[assignment]
    mismatches: list[tuple] = []
    invalid: set[tuple[str, int]] = set()
    missing = [r for r in members if r not in task.present]
    if missing:
        if not task.allow_partial:
            raise AlignmentError(
                f"PG {label}: member rank(s) {format_ranks(tuple(missing))} of "
                f"{format_ranks(members)} have no trace; load every member's trace or pass "
                "--allow-partial to align over the ranks present")
        log.warning("PG %s: aligning over %d of %d member ranks (missing %s)", label,
                    len(members) - len(missing), len(members), format_ranks(tuple(missing)))
    ranks_here = [r for r in members if r in task.present]
    # each rank's rows in time order (stable), as positions into ``sub``: one sort for the
    # PG, not a DataFrame per rank (that cost ~5 ms per rank at 2,048 ranks, issue 21)
    rank_col, ts = sub["rank"].to_numpy(), sub["ts_ns"].to_numpy()
    order = np.lexsort((ts, rank_col))
    by_rank = rank_col[order]
    starts = np.searchsorted(by_rank, ranks_here, side="left")
    ends = np.searchsorted(by_rank, ranks_here, side="right")
    seqs = {r: order[a:b] for r, a, b in zip(ranks_here, starts.tolist(), ends.tolist(), strict=True)}
    label_w = f"{label} window {task.window}" if task.window or task.index_offset else label
    missing_here = [r for r in ranks_here if not len(seqs[r])]
    if missing_here:
        message = (f"PG {label_w}: rank(s) {format_ranks(tuple(missing_here))} have no collective of this "
                   "group in this window")
        if not task.allow_partial:
            raise AlignmentError(message + "; pass --allow-partial to align over the others")
        log.warning(message)
        ranks_here = [r for r in ranks_here if r not in missing_here]
        seqs = {r: seqs[r] for r in ranks_here}
    counts = {r: len(s) for r, s in seqs.items()}
    n = min(counts.values())
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"rank {r}: {c}" for r, c in counts.items())
        longest = max(counts.values())
        for r, c in counts.items():
            if c != longest:
                mismatches.append((label, n + task.index_offset, r, "count",
                                   f"{c} collectives, others up to {longest}"))
        if task.strict:
            raise AlignmentError(f"PG {label_w}: ranks have different numbers of collectives "
                                 f"({detail}); pass --no-strict to align the first {n} and "
                                 "flag the rest")
        log.warning("PG %s: different numbers of collectives (%s); aligned the first %d, "
                    "dropped %d kernel(s) beyond them", label, detail, n,
                    sum(c - n for c in counts.values()))
    take = np.concatenate([seqs[r][:n] for r in ranks_here])
    inst = pd.DataFrame({
        "pg": label, "index": np.tile(np.arange(n, dtype=np.int64) + task.index_offset, len(ranks_here)),
        "window": np.int32(task.window), "rank": np.repeat(np.asarray(ranks_here, dtype=np.int32), n),
        "collective": sub["collective"].astype(str).to_numpy()[take],
        "msg_bytes": sub["msg_bytes"].to_numpy()[take], "dtype": sub["dtype"].astype(object).to_numpy()[take],
        **{name: sub[name].to_numpy()[take] for name in ("stream", "ts_ns", "dur_ns", "end_ns", "correlation",
                                                          "external_id")}})
    _validate(label, inst, task.domains, task.end_tolerance_us, mismatches, invalid, task.strict)
    if len(ranks_here) < 2:
        # one rank: every duration is its own minimum, so a tax of 0 would be a fake
        # measurement (the tax marks such instances invalid; their timing still serves blocks)
        log.warning("PG %s: only rank %s present: its %d collective(s) give no tax (one rank)",
                    label_w, format_ranks(tuple(ranks_here)), n)
    group = {
        "pg": label, "pg_name": meta["pg_name"], "pg_desc": meta["pg_desc"],
        "pg_ranks": format_ranks(members), "n_ranks": len(members), "pg_source": meta["source"],
        "streams": format_ranks(tuple(sorted(set(sub["stream"].tolist())))),
        "n_collectives": n, "present_ranks": format_ranks(tuple(ranks_here)), "windows": str(task.window)}
    return GroupAlignment(group, inst, mismatches, invalid)


def merge_alignments(parts: Sequence[GroupAlignment]) -> Alignment:
    """One Alignment from the per-PG parts (in PG order)."""
    if not parts:
        return Alignment(pd.DataFrame(columns=GROUP_COLUMNS), pd.DataFrame(columns=INSTANCE_COLUMNS),
                         pd.DataFrame(columns=MISMATCH_COLUMNS))
    mismatch_table = pd.DataFrame([m for p in parts for m in p.mismatches], columns=MISMATCH_COLUMNS)
    if len(mismatch_table):
        log.warning("%d alignment mismatch(es) found; see the mismatches table", len(mismatch_table))
    return Alignment(merge_group_rows([p.group for p in parts]),
                     pd.concat([p.instances for p in parts], ignore_index=True),
                     mismatch_table, set().union(*(p.invalid for p in parts)))


def merge_group_rows(rows: Sequence[dict[str, object]]) -> pd.DataFrame:
    """The ``groups`` table from per-(PG, window) rows: one row per PG, its collectives
    summed over windows, streams, present ranks and windows joined."""
    merged: dict[object, dict[str, object]] = {}
    for row in rows:
        if row["pg"] not in merged:
            merged[row["pg"]] = dict(row)
            continue
        into = merged[row["pg"]]
        into["n_collectives"] = int(into["n_collectives"]) + int(row["n_collectives"])  # type: ignore[call-overload]
        for key in ("streams", "present_ranks", "windows"):
            values = {int(v) for text in (into[key], row[key]) for v in str(text).split(",") if v != ""}
            into[key] = format_ranks(tuple(sorted(values)))
    return pd.DataFrame(list(merged.values()), columns=GROUP_COLUMNS)


def align_collectives(traces: TraceSet, *, overrides: Iterable[PGOverride] = (),
                      end_tolerance_us: float = END_TOLERANCE_US, strict: bool = True,
                      allow_partial: bool = False, ranks_per_host: int = RANKS_PER_HOST,
                      backend: Backend | None = None) -> Alignment:
    """Match the i-th collective of every PG across its member ranks and validate the match.

    With a ``backend`` each PG is aligned as a task of its own: same result.

    Parameters
    ----------
    traces : TraceSet
        A loaded trace set (any scope that holds the communication kernels).
    overrides : iterable of PGOverride, default ()
        Process groups named by the user (``--pg NAME=RANKS[@STREAM]``) where the trace does
        not describe them.
    end_tolerance_us : float, default 50.0
        How far apart (µs) the ends of one collective's kernels may be on its ranks before the
        instance is flagged.
    strict : bool, default True
        Stop at count/type mismatches; ``False`` keeps going, flagging them instead.
    allow_partial : bool, default False
        Align PGs over the ranks present when member ranks are missing (otherwise an
        :class:`~evtsync.core.errors.AlignmentError` names them).
    ranks_per_host : int, default 8
        Ranks per host, to tell intra-host groups from inter-host ones.
    backend : Backend or None, default None
        A process pool or Dask cluster (:mod:`evtsync.core.parallel`); None runs here.

    Returns
    -------
    Alignment
        The matched instances (one row per collective instance and rank), the PG table and what
        was flagged.

    Raises
    ------
    AlignmentError
        Missing member ranks (without ``allow_partial``) or mismatched collectives (with
        ``strict``).
    InputError
        An override that names no NCCL kernels or contradicts the trace.
    """
    if traces.logged is not None:  # NCCL Inspector logs: matched by (communicator, sequence number)
        alignment = align_logged(traces, overrides=overrides, end_tolerance_us=end_tolerance_us, strict=strict,
                                 allow_partial=allow_partial)
        note_missing_ranks(traces, alignment.groups, alignment.instances)
        return alignment
    tasks = plan_alignment(traces, overrides=overrides, end_tolerance_us=end_tolerance_us,
                           strict=strict, allow_partial=allow_partial, ranks_per_host=ranks_per_host)
    if backend is None or len(tasks) < 2:
        alignment = merge_alignments([align_group(task) for task in tasks])
    else:
        alignment = merge_alignments(backend.map(align_group, tasks, "aligning process groups"))
    note_missing_ranks(traces, alignment.groups, alignment.instances)
    return alignment


def note_missing_ranks(traces: TraceSet, *tables: pd.DataFrame) -> None:
    """Record the ranks without a trace in each table's ``attrs["missing_ranks"]`` (an
    empty list for a complete set), so outputs built from them can say so."""
    for table in tables:
        table.attrs["missing_ranks"] = list(traces.missing_ranks)


def _validate(label: str, inst: pd.DataFrame, domains: dict[int, str], tolerance_us: float,
              mismatches: list[tuple], invalid: set[tuple[str, int]], strict: bool) -> None:
    """Check type, size and end-time agreement of each instance of one PG.

    The checks are vectorised over instances; only offending instances are examined
    one by one to name the ranks at fault.
    """
    by_index = inst.groupby("index", sort=True)
    bad_types = by_index["collective"].nunique()
    for index in bad_types.index[bad_types > 1]:
        grp = inst[inst["index"] == index]
        types = grp["collective"].to_numpy()
        majority = pd.Series(types).mode().iloc[0]
        for r, t in zip(grp["rank"], types, strict=True):
            if t != majority:
                mismatches.append((label, int(index), int(r), "type", f"{t}, others {majority}"))
        invalid.add((label, int(index)))
        if strict:
            raise AlignmentError(
                f"PG {label}, collective {index}: types differ across ranks "
                f"({', '.join(f'rank {r}: {t}' for r, t in zip(grp['rank'], types, strict=True))}); "
                "the sequences do not match (pass --no-strict to flag and continue)")
    known = inst[inst["msg_bytes"] >= 0]
    if len(known):
        bad_sizes = known.groupby("index")["msg_bytes"].nunique()
        for index in bad_sizes.index[bad_sizes > 1]:
            grp = known[known["index"] == index]
            majority = int(grp["msg_bytes"].mode().iloc[0])
            for r, size in zip(grp["rank"], grp["msg_bytes"], strict=True):
                if size != majority:
                    mismatches.append((label, int(index), int(r), "size",
                                       f"{size} bytes, others {majority}"))
            invalid.add((label, int(index)))
    domain = inst["rank"].map(domains)
    ends = inst.assign(domain=domain.to_numpy()).groupby(["index", "domain"])["end_ns"]
    spread_us = (ends.max() - ends.min()) / 1000.0
    for (index, dom), spread in spread_us[spread_us > tolerance_us].items():
        grp = inst[(inst["index"] == index) & (domain == dom).to_numpy()]
        values = grp["end_ns"].to_numpy()
        worst = grp.iloc[int(np.argmax(np.abs(values - np.median(values))))]
        mismatches.append((label, int(index), int(worst["rank"]), "end_time",
                           f"end times spread {spread:.1f} us > {tolerance_us:g} us"))
        invalid.add((label, int(index)))


#: The ``pg_source`` of communicators read from NCCL Inspector logs.
LOGGED_SOURCE = "nccl-inspector"


def logged_group_row(pg: str, row: Mapping[str, Any], n_collectives: int) -> dict[str, Any]:
    """One row of the alignment's groups table (:data:`GROUP_COLUMNS`) of a communicator of logged
    collectives: ``row`` is its row of the ``process_groups`` table (``pg_desc``, ``pg_ranks``,
    ``pg_size``, ``seen_on_ranks``), ``n_collectives`` the collectives aligned on it. The one home
    of this row: :func:`align_logged_rows` and the streamed Inspector tax (report and tables)."""
    return {"pg": pg, "pg_name": pg, "pg_desc": row["pg_desc"], "pg_ranks": row["pg_ranks"],
            "n_ranks": int(row["pg_size"]), "pg_source": LOGGED_SOURCE, "streams": "",
            "n_collectives": n_collectives, "present_ranks": row["seen_on_ranks"], "windows": "0"}


def align_logged(traces: TraceSet, *, overrides: Iterable[PGOverride] = (),
                 end_tolerance_us: float = END_TOLERANCE_US, strict: bool = True,
                 allow_partial: bool = False, ranks_per_host: int = RANKS_PER_HOST,
                 backend: Backend | None = None) -> Alignment:
    """Match the collectives of NCCL Inspector logs (``traces.logged``) across ranks by
    (communicator id, sequence number): the Inspector's own identity of an operation, so
    nothing is matched by position.

    Each communicator is a PG (``pg`` = its id, ``pg_desc`` = its name). Every instance is
    validated as a Kineto one (:func:`_validate`: type, size, and, in verbose logs, kernel
    stop times within ``end_tolerance_us`` among ranks of one host). Besides: an instance
    whose ranks timed it differently (``kernel_gpu`` against ``kernel_cpu`` /
    ``collective_cpu``) is flagged (kind ``timing_source``); CPU-timed instances keep their
    source in the collective label (``"AllReduce [collective_cpu]"``), so no summary mixes
    them with GPU-timed ones; an instance logged by only some member ranks (kind
    ``partial``) is flagged. Those and missing ranks are refused first unless
    ``allow_partial`` (:meth:`TraceSet.check_complete`). ``overrides`` do not apply (the
    logs name their communicators); ``ranks_per_host`` is unused (logs name their host).
    """
    del backend, ranks_per_host  # one vectorised pass: nothing to distribute
    if list(overrides):
        raise InputError("--pg does not apply to NCCL Inspector logs: they name each collective's communicator")
    traces.check_complete(allow_partial)
    logged = traces.logged
    if logged is None or logged.empty:
        return merge_alignments([])
    return align_logged_rows(logged, traces.process_groups, end_tolerance_us=end_tolerance_us, strict=strict)


def align_logged_rows(logged: pd.DataFrame, process_groups: pd.DataFrame, *,
                      end_tolerance_us: float = END_TOLERANCE_US, strict: bool = True) -> Alignment:
    """The matching of :func:`align_logged` on rows of a ``logged`` table (sorted by ``pg``,
    ``index``, ``rank``; every row of one collective present) against the communicator
    table ``process_groups``, without the rank-set check: the unit the streaming tax of
    :mod:`evtsync.sync.logtax` applies to each batch of completed collectives.

    Parameters
    ----------
    logged : pandas.DataFrame
        Rows of :data:`~evtsync.trace.readers.inspector.LOGGED_COLUMNS`.
    process_groups : pandas.DataFrame
        ``TraceSet.process_groups`` of the logs (``pg_name``, ``pg_desc``, ``pg_ranks``,
        ``pg_size``, ``seen_on_ranks``).
    end_tolerance_us : float
        As for :func:`align_logged`.
    strict : bool, default True
        As for :func:`align_logged`.

    Returns
    -------
    Alignment
        As :func:`align_logged` returns.
    """
    mismatches: list[tuple] = []
    invalid: set[tuple[str, int]] = set()
    # one pass over all communicators (logged is sorted by pg, index, rank); the per-PG
    # checks of _validate run only for the communicators a vectorised test finds at fault
    pg_codes = np.asarray(logged["pg"].array.codes)
    pg_names = [str(c) for c in logged["pg"].array.categories]
    index = logged["index"].to_numpy()
    keys = pd.MultiIndex.from_arrays([pg_codes, index])
    per_instance = logged.groupby([pg_codes, index], sort=True)
    sizes = per_instance["rank"].size()
    meta = process_groups.set_index("pg_name")
    pg_rows = meta.to_dict("index")  # one dict per communicator: .loc per cell costs ~0.1 ms (issue 48)
    present = {pg: len(str(pg_rows[pg]["seen_on_ranks"]).split(",")) for pg in pg_names}
    n_present = np.asarray([present[pg_names[c]] for c in sizes.index.get_level_values(0)])
    for (code, sn), n in sizes[sizes.to_numpy() < n_present].items():
        label = pg_names[code]
        invalid.add((label, int(sn)))
        mismatches.append((label, int(sn), -1, "partial", f"logged by {int(n)} of {present[label]} member rank(s)"))
    source_codes = pd.Series(np.asarray(logged["timing_source"].array.codes), index=logged.index)
    n_sources = source_codes.groupby([pg_codes, index], sort=True).nunique()
    sources = _strings_of(logged["timing_source"])
    mixed_keys = n_sources.index[n_sources.to_numpy() > 1]
    mixed_rows = keys.isin(mixed_keys) if len(mixed_keys) else np.zeros(len(logged), dtype=bool)
    tag = sources.copy()
    for code, sn in mixed_keys:
        rows = (pg_codes == code) & (index == sn)
        value = ", ".join(sorted(set(sources[rows])))
        tag[rows] = value
        invalid.add((pg_names[code], int(sn)))
        mismatches.append((pg_names[code], int(sn), -1, "timing_source", f"ranks timed it differently ({value})"))
    disagree = ((per_instance["collective"].nunique() > 1) | (per_instance["msg_bytes"].nunique() > 1))
    for code in sorted(set(disagree.index[disagree.to_numpy()].get_level_values(0))):
        # type and size checks (and their errors) exactly as for Kineto; no clock domains: the
        # end check reads only the records with kernel times (verbose logs), per host
        rows = pg_codes == code
        _validate(pg_names[code], logged[rows].assign(collective=_strings_of(logged["collective"])[rows]), {},
                  end_tolerance_us, mismatches, invalid, strict)
    _check_logged_ends(logged, pg_names, pg_codes, end_tolerance_us, mismatches, invalid)
    collective = _strings_of(logged["collective"])
    flagged = (sources != "kernel_gpu") | mixed_rows
    if flagged.any():  # CPU-timed instances keep their source in the label
        collective = collective.copy()
        collective[flagged] = [f"{c} [{t}]" for c, t in zip(collective[flagged], tag[flagged], strict=True)]
    n = len(logged)
    instances = pd.DataFrame({
        "pg": pd.Categorical.from_codes(pg_codes, categories=pg_names), "index": index.astype(np.int64),
        "window": logged["window"].to_numpy(np.int32), "rank": logged["rank"].to_numpy(np.int32),
        "collective": pd.Categorical(collective), "msg_bytes": logged["msg_bytes"].to_numpy(np.int64),
        "dtype": pd.Categorical.from_codes(np.zeros(n, dtype=np.int8), categories=[""]),
        "stream": np.full(n, -1, dtype=np.int64), "ts_ns": logged["ts_ns"].to_numpy(np.int64),
        "dur_ns": logged["dur_ns"].to_numpy(np.int64), "end_ns": logged["end_ns"].to_numpy(np.int64),
        "correlation": np.full(n, -1, dtype=np.int64), "external_id": np.full(n, -1, dtype=np.int64)})
    n_collectives = sizes.groupby(level=0).size()
    groups = pd.DataFrame(
        [logged_group_row(pg, pg_rows[pg], int(n_collectives.get(code, 0)))
         for code, pg in enumerate(pg_names) if code in n_collectives.index], columns=GROUP_COLUMNS)
    table = pd.DataFrame(mismatches, columns=MISMATCH_COLUMNS)
    if len(table):
        log.warning("%d mismatch(es) among the logged collectives; see the mismatches table", len(table))
    return Alignment(groups, instances, table, invalid)


def _check_logged_ends(logged: pd.DataFrame, pg_names: list[str], pg_codes: np.ndarray, tolerance_us: float,
                       mismatches: list[tuple], invalid: set[tuple[str, int]]) -> None:
    """Verbose Inspector logs: the last kernel stop of one collective agrees across the
    ranks of one host (one clock) within ``tolerance_us``, else the match is suspect."""
    timed = (logged["end_ns"] >= 0).to_numpy()
    if not timed.any():
        return
    sub = logged[timed].assign(pg_code=pg_codes[timed])
    ends = sub.groupby(["pg_code", "index", "host"], sort=True, observed=True)["end_ns"]
    spread_us = (ends.max() - ends.min()) / 1000.0
    for (code, index, host), spread in spread_us[spread_us > tolerance_us].items():
        grp = sub[(sub["pg_code"] == code) & (sub["index"] == index) & (sub["host"] == host)]
        values = grp["end_ns"].to_numpy()
        worst = int(grp["rank"].iloc[int(np.argmax(np.abs(values - np.median(values))))])
        mismatches.append((pg_names[code], int(index), worst, "end_time",
                           f"kernel stop times on host {host} spread {spread:.1f} us > {tolerance_us:g} us"))
        invalid.add((pg_names[code], int(index)))


def _strings_of(column: pd.Series) -> np.ndarray:
    """A categorical column as an object array of its strings (no per-row conversion)."""
    cat = column.array
    return np.asarray(cat.categories.astype(object), dtype=object)[np.asarray(cat.codes)]
