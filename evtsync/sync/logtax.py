"""The tax of a folder of NCCL Inspector logs, streamed: memory bounded by the open collectives.

The whole-table path (:func:`~evtsync.trace.traceset.load_traces`, then
:func:`~evtsync.sync.tax.tax_from_traces`) keeps every record of every file (~190 bytes each at its
peak) before matching them. Here every rank's file is read in lockstep, one block per file
per round, the round's blocks of all files decoded a ~1 MiB slice at a time (the compiled
line-template scanner, else msgspec) and turned into columns
(:class:`~evtsync.trace.readers.inspector.LogRounds`, issue 48); after each round the
collectives that every member rank of their communicator has reported (same communicator
id, same sequence number, ``n_ranks`` records) are matched and taxed exactly as
:func:`~evtsync.sync.collectives.align_logged` and :func:`~evtsync.sync.tax.compute_tax` do
(docs/methodology.md §3; a batch no check flags is taxed by :meth:`_Job._tax_clean`, the
others by those two functions, which name the mismatches; both compute the numbers with
:func:`~evtsync.sync.tax.tax_segments`): their rows of the tax tables
are kept, their records dropped. A
collective some member never reports (ring-buffer loss, a rank that died, the size cutoff,
a log cut short) stays open until the files end; it is then counted by communicator and
reported as the whole-table path does (refused unless ``allow_partial``).

The tables equal those of the whole-table path (same rows, order, values and dtypes; tested).
The job is kept as NumPy arrays (each clean batch's columns) until a table is read: when no
collective was flagged, none is left open and the rank set is complete, :attr:`LogTax.report`
holds what ``evtsync tax`` prints (the rows of the groups, summary and stragglers tables, by
the NumPy cores of :func:`~evtsync.sync.tax.tax_summary` and
:func:`~evtsync.sync.tax.straggler_identity`), and pandas is imported only if the tables are
asked for (``-o``, ``--plot``, ``evtsync run``, the Python API; issue 48).
Memory: one slice of text and its decoded records (:data:`~evtsync.trace.readers.inspector.DECODE_BYTES`),
the columns of one round's records (:data:`ROUND_BYTES` of text over all files, at least
:data:`MIN_BLOCK_BYTES` per file), per file its open file (a plain log: its OS descriptor, 4
bytes in an array, its unfinished last line read again next round, not held; a gzip log: its
inflating reader and that line) and ~200-250 bytes of arrays once
read (its counts, end and communicator pairs: ``LogRounds.state_bytes``, bounded in the tests),
the records of the collectives still open, those of complete
collectives waiting for the next tax batch (:data:`TAX_BATCH_RECORDS`), and the output: one row
per collective, one per file (the per-rank table), and, unless
``keep_ranks=False``, one row per rank of each collective (``TaxTables.ranks``; without it
the per-collective wait shares the summary needs are kept instead).
"""

from __future__ import annotations

import logging
import os
import resource
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
else:  # pandas at its first use: the Inspector tax reads its logs without it (issue 48)
    from evtsync.core.lazy import pd

from evtsync.core.defaults import END_TOLERANCE_US
from evtsync.core.errors import InputError, TraceError
from evtsync.core.tableio import Rows
from evtsync.sync.collectives import (
    GROUP_COLUMNS,
    LOGGED_SOURCE,
    MISMATCH_COLUMNS,
    Alignment,
    align_logged_rows,
    logged_group_row,
    note_missing_ranks,
)
from evtsync.sync.tax import (
    RANK_COLUMNS,
    STRAGGLER_COLUMNS,
    SUMMARY_COLUMNS,
    TAX_COLUMNS,
    TaxTables,
    code_groups,
    compute_tax,
    segment_starts,
    straggler_rows,
    summary_rows,
    tax_segments,
)
from evtsync.trace.filelist import FileList
from evtsync.trace.readers.inspector import (
    BLOCK_BYTES,
    GPU_TIMING,
    JOB_SKIPPED_COLUMNS,
    LOGGED_COLUMNS,
    MISSING,
    JobLayout,
    LoggedCollectives,
    LogRounds,
    global_ranks,
    job_group_rows,
    job_layout,
    job_rank_columns,
    job_skipped_rows,
    job_tables,
    partial_problems,
)
from evtsync.trace.traceset import TraceSet, empty_event_tables, list_inputs

log = logging.getLogger(__name__)

#: Text read per round over all files (each file's block: this over the number of files). The
#: round's lines are decoded as they are read, one slice of ~1 MiB of text at a time
#: (:class:`~evtsync.trace.readers.inspector.LogRounds`), so what a round holds is its records'
#: columns (~90 bytes per record, ~1/5 of their text): 16 MiB keeps that ~3 MB and makes blocks of
#: 4 KiB at 4,096 logs (4 MiB, when the text of a round lived at once, made 1 KiB blocks and
#: 230,000 reads of 229 MB; issue 48).
ROUND_BYTES = 16 << 20
#: Records of complete collectives taxed together (~100 bytes each until then, and ~2 copies of
#: them while a batch is taxed). The NumPy batch tax (issue 48) costs a few ms per call; 20,000
#: lowered the traced peak at 256 logs by 3 MB for +0.07 s of CPU, 10,000 by 3.6 MB for +0.25 s.
TAX_BATCH_RECORDS = 50_000
#: Smallest block read from one file per round (many files: the round's text is split).
MIN_BLOCK_BYTES = 1 << 10
#: Columns of the open records (one int array each): the file, then the record's fields in
#: job-wide codes (communicator, collective type, timing source).
_OPEN = ("file", "comm", "local_rank", "sn", "collective", "msg_bytes", "exec_ns", "timing_source",
         "kernel_start_us", "kernel_stop_us", "dump_us")
#: Columns of the tax table that are constants per PG (or per job), filled in at the end.
_PER_PG = ("pg_desc", "pg_ranks", "pg_source", "dtype")
#: The columns of the per-rank (per-file) table a printed report reads (:class:`LogReport`).
_REPORT_RANK_COLUMNS = ("rank", "rank_source", "n_collective_records", "n_p2p_records", "n_verbose_records",
                        "unread_tail_bytes")
#: Order of the mismatch kinds in the whole-table path's table (align_logged's passes).
_KIND_BLOCK = {"partial": 0, "timing_source": 1, "type": 2, "size": 2, "end_time": 3}


class LogTax:
    """What :func:`stream_tax` returns: the job's TraceSet (its ``logged`` table left empty:
    the records were dropped once taxed), the alignment (``instances`` empty, for the same
    reason), the tax tables and the streaming's own counts (``stats``).

    When no collective was flagged, none left open and the rank set is complete, the three are
    built (with pandas) at the first read of one of them, and ``report`` holds what
    ``evtsync tax`` prints, from the job's NumPy arrays (issue 48); else ``report`` is None."""

    def __init__(self, traces: TraceSet | None, alignment: Alignment | None, tables: TaxTables | None,
                 stats: dict[str, Any] | None = None, *, report: LogReport | None = None,
                 build: Callable[[], tuple[TraceSet, Alignment, TaxTables]] | None = None) -> None:
        self._built = None if build is not None else (traces, alignment, tables)
        self._build = build
        self._failed: BaseException | None = None
        self.stats = stats or {}
        self.report = report

    def _parts(self) -> tuple[Any, Any, Any]:
        """The three, built at the first call. The build runs once: it consumes the job's batches
        (``_assemble``), so a failed build is kept and raised again at every later call (a second
        build would make tables without the collectives taxed, and no error)."""
        if self._built is None:
            if self._failed is not None:
                raise self._failed
            build, self._build = self._build, None
            assert build is not None
            try:
                self._built = build()
            except BaseException as exc:
                self._failed = exc
                raise
        return self._built

    @property
    def traces(self) -> TraceSet:
        """The job's TraceSet (``logged`` empty)."""
        return self._parts()[0]

    @property
    def alignment(self) -> Alignment:
        """The alignment (``instances`` empty)."""
        return self._parts()[1]

    @property
    def tables(self) -> TaxTables:
        """The tax tables."""
        return self._parts()[2]


@dataclass(repr=False)
class LogReport:
    """What ``evtsync tax`` prints of a streamed job, without pandas (issue 48): the attributes of
    its TraceSet (``ranks``, ``rank_ids``, ``logged``, ``problems``, ``skipped``, ``missing_ranks``)
    and of its Alignment (``groups``, ``mismatches``, ``instances``) the report reads, and the
    tables of :func:`~evtsync.sync.tax.tax_summary` and the first of
    :func:`~evtsync.sync.tax.straggler_identity` (the same rows, computed by the same NumPy cores),
    as :class:`~evtsync.core.tableio.Rows`. ``ranks`` holds the columns of the per-rank table the
    report reads (:data:`_REPORT_RANK_COLUMNS`), one row per file, by rank."""

    ranks: Rows
    groups: Rows
    summary: Rows
    stragglers: Rows
    skipped: Rows
    problems: list[str]
    missing_ranks: tuple[int, ...]
    logged: Rows = field(default_factory=lambda: Rows(LOGGED_COLUMNS, []))
    mismatches: Rows = field(default_factory=lambda: Rows(MISMATCH_COLUMNS, []))
    instances: Rows = field(default_factory=lambda: Rows(["pg", "index"], []))

    @property
    def rank_ids(self) -> list[int]:
        """Sorted ranks present."""
        return sorted(set(self.ranks["rank"].tolist()))


def inspector_files(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
                    rank_from: str = "file") -> FileList | None:
    """The files of ``paths`` when every one is an NCCL Inspector log, else None.

    Parameters
    ----------
    paths : path or iterable of paths
        Files and/or folders, as :func:`~evtsync.trace.traceset.load_traces` takes them.
    rank_from : {"file", "order"}, default "file"
        As for :func:`~evtsync.trace.traceset.load_traces`.

    Returns
    -------
    sequence of (Path, int or None) or None
        Each file with its given rank (``RANK=PATH`` or ``order``), as a compact
        :class:`~evtsync.trace.filelist.FileList` (each pair made when read: issue 48, ~570
        bytes of ``Path`` per file otherwise), or None (some other source, or a mix that
        :func:`~evtsync.trace.traceset.load_traces` refuses by name).
    """
    from collections import Counter

    from evtsync.trace.readers import reader_for

    if isinstance(paths, str | os.PathLike):
        paths = [paths]
    sniffed: Counter[str] = Counter()  # the reader of every folder file, sniffed once while listing them
    files = list_inputs(list(paths), rank_from, sniffed)
    if any(name != LOGGED_SOURCE for name in sniffed):  # a folder's file that another reader reads
        return None
    # the listing sniffed every folder file (trace_files_in): those named one by one are left
    if all(reader_for(files.path_str(i)).name == LOGGED_SOURCE for i in range(len(files)) if files.is_named(i)):
        return files
    return None


class _Open:
    """The records of the collectives not yet complete, as parallel int64 arrays."""

    def __init__(self) -> None:
        self.parts: list[dict[str, np.ndarray]] = []
        self.n = 0

    def add(self, columns: dict[str, np.ndarray]) -> None:
        if len(columns["sn"]):
            self.parts.append(columns)
            self.n += len(columns["sn"])

    def take_all(self, names: tuple[str, ...] = _OPEN) -> dict[str, np.ndarray]:
        if not self.parts:
            out = {name: np.zeros(0, dtype=np.int64) for name in names}
        elif len(self.parts) == 1:
            out = self.parts[0]
        else:
            out = {name: np.concatenate([p[name] for p in self.parts]) for name in names}
        self.parts, self.n = [], 0
        return out


class _Job:
    """Job-wide codes of communicators and vocabularies, the files' ranks, and the rows taxed."""

    def __init__(self, reader: LogRounds, keep_ranks: bool, end_tolerance_us: float, strict: bool) -> None:
        self.reader = reader
        self.keep_ranks, self.end_tolerance_us, self.strict = keep_ranks, end_tolerance_us, strict
        # job-wide codes: the reader's (one dict/list per job, shared)
        self.comm_code, self.comm_ids, self.comm_size = reader.comm_code, reader.comm_ids, reader.comm_size
        self.words: dict[str, dict[str, int]] = {"collective": reader.names, "timing_source": reader.sources}
        self.ranks: np.ndarray | None = None  # global rank of each file, once known
        self.open = _Open()
        self.done = _Open()  # records of complete collectives not taxed yet (with their "rank")
        # the batches taxed, in order: a clean batch's arrays (_tax_clean), or the frames of the
        # pandas path (collectives, then ranks or shares) for a batch the checks flagged
        self.batches: list[dict[str, Any] | tuple[pd.DataFrame, pd.DataFrame]] = []
        # each PG's member ranks seen: sorted unique (job-wide communicator code << 32 | rank) keys,
        # ~8 bytes a member (a set of ints per PG: ~90, issue 48)
        self.member_keys = np.zeros(0, dtype=np.int64)
        self.mismatches: list[pd.DataFrame] = []
        self.invalid: set[tuple[str, int]] = set()
        self.done_keys: list[tuple[np.ndarray, np.ndarray]] = []  # (communicator, sequence number) taxed
        self.n_done = 0
        self.peak_open = 0
        self.peak_held = 0  # records held at once: open, or complete and not taxed yet
        self.rounds = 0
        self.counts_logged = False  # the job's counts logged (job_rank_columns): by the report or the tables

    @property
    def hosts(self) -> list[str]:
        """Each file's host name."""
        return self.reader.hosts()

    def path(self, i: int) -> Path:
        """File ``i``'s path."""
        return self.reader.paths[i]

    def resolve_ranks(self) -> None:
        """The files' global ranks from what has been read so far (checked at the end)."""
        try:
            ranks, _, _ = global_ranks(self.reader.shells())
        except TraceError:
            return  # no communicator in every file yet: keep reading (records stay open)
        if len(set(ranks)) == len(ranks):
            self.ranks = np.asarray(ranks, dtype=np.int64)

    # ---- completing collectives
    def complete(self, final: bool = False, groups: pd.DataFrame | None = None) -> dict[str, np.ndarray] | None:
        """Tax the collectives every member has reported; keep the rest open (``final``:
        return the rest instead)."""
        self.peak_open = max(self.peak_open, self.open.n)
        self.peak_held = max(self.peak_held, self.open.n + self.done.n)
        if self.ranks is None or not self.open.n:
            return self.open.take_all() if final else None
        rec = self.open.take_all()
        rank = self.ranks[rec["file"]]
        order = np.lexsort((rank, rec["sn"], rec["comm"]))
        rec = {name: col[order] for name, col in rec.items()}
        rank = rank[order]
        comm, sn = rec["comm"], rec["sn"]
        n = len(sn)
        new = np.ones(n, dtype=bool)
        new[1:] = (comm[1:] != comm[:-1]) | (sn[1:] != sn[:-1])
        same_rank = ~new[1:] & (rank[1:] == rank[:-1])
        if same_rank.any():
            at = int(np.flatnonzero(same_rank)[0]) + 1
            raise TraceError(f"communicator {self.comm_ids[int(comm[at])]}: collective {int(sn[at])} logged twice "
                             f"by rank {int(rank[at])} ({self.path(int(rec['file'][at]))}): "
                             f"{int(same_rank.sum())} repeated record(s)")
        starts = np.flatnonzero(new)
        counts = np.diff(np.append(starts, n))
        full = counts >= np.asarray(self.comm_size, dtype=np.int64)[comm[starts]]
        done_rows = np.repeat(full, counts)
        if final:
            return rec
        if done_rows.any():
            self.done.add({**{k: v[done_rows] for k, v in rec.items()}, "rank": rank[done_rows]})
            if self.done.n >= TAX_BATCH_RECORDS:
                self.flush(groups)
        rest = ~done_rows
        if rest.any():
            self.open.add({k: v[rest] for k, v in rec.items()})
        return None

    def flush(self, groups: pd.DataFrame | None = None) -> None:
        """Tax the completed collectives gathered so far (:data:`TAX_BATCH_RECORDS`: a tax call
        has a fixed cost, so they run on batches of complete collectives, not on every round's)."""
        if not self.done.n:
            return
        rec = self.done.take_all(_OPEN + ("rank",))
        rank = rec.pop("rank")
        self._tax(rec, rank, groups)

    def pg_codes(self, comm: np.ndarray) -> tuple[list[str], np.ndarray]:
        """The communicators of ``comm`` (job-wide codes) as the batch's PG labels: their sorted
        ids and each record's code among them (the categorical the whole-table path builds)."""
        codes = np.unique(comm)
        names = sorted(self.comm_ids[int(c)] for c in codes)
        position = {name: k for k, name in enumerate(names)}
        remap = np.zeros(len(self.comm_ids), dtype=np.int32)
        remap[codes] = [position[self.comm_ids[int(c)]] for c in codes]
        return names, remap[comm]

    def host_of_file(self) -> tuple[list[str], np.ndarray]:
        """The job's sorted host names and each file's code among them."""
        file_hosts = self.hosts
        hosts = sorted(set(file_hosts))
        host_code = {h: k for k, h in enumerate(hosts)}
        return hosts, np.asarray([host_code[h] for h in file_hosts], dtype=np.int32)

    def frame(self, rec: dict[str, np.ndarray], rank: np.ndarray) -> pd.DataFrame:
        """Records (sorted by communicator, sequence number, rank) as ``logged`` rows."""
        names, pg = self.pg_codes(rec["comm"])

        def labels(kind: str) -> pd.Categorical:
            book = self.words[kind]
            words = sorted(book)
            where = np.zeros(len(book), dtype=np.int32)
            for w, c in book.items():
                where[c] = words.index(w)
            return pd.Categorical.from_codes(where[rec[kind]], categories=words)

        hosts, host_of_file = self.host_of_file()
        starts, stops, dumps = rec["kernel_start_us"], rec["kernel_stop_us"], rec["dump_us"]
        n = len(pg)
        return pd.DataFrame({
            "rank": rank.astype(np.int32), "window": np.zeros(n, dtype=np.int32),
            "pg": pd.Categorical.from_codes(pg, categories=names),
            "pg_desc": pd.Categorical.from_codes(np.zeros(n, dtype=np.int32), categories=[""]),
            "local_rank": rec["local_rank"].astype(np.int32), "index": rec["sn"],
            "collective": labels("collective"), "timing_source": labels("timing_source"),
            "msg_bytes": rec["msg_bytes"], "dur_ns": rec["exec_ns"],
            "ts_ns": np.where(starts >= 0, starts * 1000, MISSING),
            "end_ns": np.where(stops >= 0, stops * 1000, MISSING),
            "dump_ns": np.where(dumps >= 0, dumps * 1000, MISSING),
            "host": pd.Categorical.from_codes(host_of_file[rec["file"]], categories=hosts)}, columns=LOGGED_COLUMNS)

    def _tax(self, rec: dict[str, np.ndarray], rank: np.ndarray, groups: pd.DataFrame | None) -> None:
        rec["rank"] = rank  # the batch is the callee's: reordered in place with the other columns
        if groups is None and self._tax_clean(rec):
            return
        rank = rec.pop("rank")
        order = np.lexsort((rank, rec["sn"], rec["comm"]))
        _permute(rec, order)
        rank = rank[order]
        logged = self.frame(rec, rank)
        if groups is None:  # complete collectives: never partial, so the member counts do not matter
            names = list(logged["pg"].array.categories)
            groups = pd.DataFrame({"pg_name": names, "pg_desc": "", "pg_ranks": "",
                                   "pg_size": [self.comm_size[self.comm_code[c]] for c in names],
                                   "seen_on_ranks": "0"})
        alignment = align_logged_rows(logged, groups, end_tolerance_us=self.end_tolerance_us, strict=self.strict)
        tables = compute_tax(alignment)
        # per PG constants (filled in at the end) dropped, the type label as a categorical: the
        # rows kept until the end are most of the memory that grows with the logs
        coll = tables.collectives.drop(columns=list(_PER_PG))
        coll["collective"] = coll["collective"].astype("category")
        if self.keep_ranks:
            self.batches.append((coll, tables.ranks))
        else:
            shares = tables.ranks.groupby(["pg", "index"], observed=True)["wait_share"].agg(["max", "median"])
            self.batches.append((coll, shares.reset_index()))
        for pg, ranks in tables.ranks.groupby("pg", observed=True)["rank"].unique().items():
            self._note_members(np.full(len(ranks), self.comm_code[str(pg)], dtype=np.int64), np.asarray(ranks))
        if len(alignment.mismatches):
            self.mismatches.append(alignment.mismatches)
        self.invalid |= alignment.invalid
        self._note_done(rec["comm"], rec["sn"], len(tables.collectives))

    def _note_members(self, comm: np.ndarray, rank: np.ndarray) -> None:
        """Note the ranks seen in the collectives of each communicator (job-wide codes)."""
        self.member_keys = np.union1d(self.member_keys, (comm.astype(np.int64) << 32) | rank.astype(np.int64))

    def members(self) -> dict[str, list[int]]:
        """Each PG's member ranks seen, sorted."""
        if not len(self.member_keys):
            return {}
        codes, ranks = _split_pairs(self.member_keys)
        return {self.comm_ids[c]: r.tolist() for c, r in zip(codes, ranks, strict=True)}

    def _note_done(self, comm: np.ndarray, sn: np.ndarray, n_collectives: int) -> None:
        """Remember the (communicator, sequence number) keys taxed (a repeated record is found at the end)."""
        first = np.ones(len(sn), dtype=bool)
        first[1:] = (comm[1:] != comm[:-1]) | (sn[1:] != sn[:-1])
        self.done_keys.append((comm[first], sn[first]))
        self.n_done += n_collectives

    def _tax_clean(self, rec: dict[str, np.ndarray]) -> bool:
        """The tax of a batch of complete collectives in NumPy, when none of them is flagged.

        The same rows, values and dtypes as :func:`~evtsync.sync.collectives.align_logged_rows`
        + :func:`~evtsync.sync.tax.compute_tax`: both compute every number with
        :func:`~evtsync.sync.tax.tax_segments` (docs/methodology.md §3: tau_max = max − min of
        the ranks' durations, the straggler = the rank of the shortest, lowest rank on ties,
        wait = duration − the shortest). ``rec``: the batch's columns and ``rank``, reordered in place
        (by PG, sequence number, rank). Returns False, keeping nothing, when a check of the
        alignment would flag a collective of the batch (its ranks disagree on the type, size
        or timing source; kernel stop times on one host further apart than the end
        tolerance): the pandas path then names the mismatches. Issue 48: the pandas steps
        cost ~0.1 s per batch whatever its size."""
        pg_names, pg = self.pg_codes(rec["comm"])
        order = np.lexsort((rec["rank"], rec["sn"], pg))
        _permute(rec, order)  # in place, column by column: one column's copy at a time (issue 48)
        pg, sn, rank = pg[order], rec["sn"], rec["rank"]
        n = len(sn)
        starts = segment_starts(pg, sn)
        counts = np.diff(np.append(starts, n))
        seg = np.repeat(np.arange(len(starts)), counts)
        same = seg[1:] == seg[:-1]
        if any((same & (rec[name][1:] != rec[name][:-1])).any() for name in ("collective", "msg_bytes",
                                                                                 "timing_source")):
            return False
        stops = rec["kernel_stop_us"]
        timed = stops >= 0
        if timed.any():  # the end check of align_logged_rows: per collective and host
            _, host_of_file = self.host_of_file()
            t_seg, t_host, t_stop = seg[timed], host_of_file[rec["file"][timed]], stops[timed]
            by = np.lexsort((t_host, t_seg))
            t_seg, t_host, t_stop = t_seg[by], t_host[by], t_stop[by]
            cut = np.flatnonzero(np.r_[True, (t_seg[1:] != t_seg[:-1]) | (t_host[1:] != t_host[:-1])])
            spread_us = np.maximum.reduceat(t_stop, cut) - np.minimum.reduceat(t_stop, cut)
            if (spread_us > self.end_tolerance_us).any():
                return False
        ts_ns = np.where(rec["kernel_start_us"] >= 0, rec["kernel_start_us"] * 1000, MISSING)
        end_ns = np.where(stops >= 0, stops * 1000, MISSING)
        got = tax_segments(rec["exec_ns"], rank, starts, ts_ns, end_ns, shares=not self.keep_ranks)
        labels, label_codes = self._labels(rec["collective"], rec["timing_source"])
        batch: dict[str, Any] = {
            "pg_names": pg_names, "labels": labels, "pg": pg[starts], "index": sn[starts].astype(np.int64),
            "collective": label_codes[starts], "bytes": rec["msg_bytes"][starts].astype(np.int64),
            **{c: got[c] for c in ("n_ranks", "tau_max_us", "tau_med_us", "mean_delay_us", "straggler_rank",
                                   "fastest_rank", "min_dur_us", "max_dur_us", "end_spread_us", "start_ns")},
            "valid": counts > 1}
        if self.keep_ranks:
            batch["ranks"] = {"pg": pg, "index": sn.astype(np.int64), "rank": rank.astype(np.int32),
                              "collective": label_codes, "ts_ns": ts_ns, "end_ns": end_ns,
                              **{c: got[c] for c in ("dur_us", "wait_us", "wait_share", "is_straggler")}}
        else:
            batch["share_max"], batch["share_median"] = got["share_max"], got["share_median"]
        self.batches.append(batch)
        self._note_members(np.asarray([self.comm_code[n] for n in pg_names], dtype=np.int64)[pg], rank)
        self._note_done(rec["comm"], sn, len(starts))
        return True

    def _labels(self, collective: np.ndarray, source: np.ndarray) -> tuple[list[str], np.ndarray]:
        """The collective labels of records (the type; CPU-timed ones with their timing source,
        as :func:`~evtsync.sync.collectives.align_logged_rows` writes them) as sorted categories and codes."""
        names = {c: w for w, c in self.words["collective"].items()}
        sources = {c: w for w, c in self.words["timing_source"].items()}
        width = max(len(sources), 1)
        pairs, inverse = np.unique(collective.astype(np.int64) * width + source, return_inverse=True)
        words = [names[int(p) // width] if sources[int(p) % width] == GPU_TIMING
                 else f"{names[int(p) // width]} [{sources[int(p) % width]}]" for p in pairs]
        cats = sorted(set(words))
        where = np.asarray([cats.index(w) for w in words], dtype=np.int32)
        return cats, where[inverse.reshape(-1)]


def _permute(columns: dict[str, np.ndarray], order: np.ndarray) -> None:
    """Reorder every column of ``columns`` by ``order``, in place in the dict."""
    for name, col in columns.items():
        columns[name] = col[order]


def _split_pairs(pairs: np.ndarray) -> tuple[list[int], list[np.ndarray]]:
    """Sorted ``(code << 32) | value`` keys as each code and its values."""
    codes = pairs >> 32
    cut = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    return codes[cut].tolist(), np.split(pairs & 0xFFFFFFFF, cut[1:])


def _block_bytes(n_files: int, round_bytes: int) -> int:
    return int(min(BLOCK_BYTES, max(MIN_BLOCK_BYTES, round_bytes // max(1, n_files))))


def _enough_file_handles(n_files: int) -> bool:
    """Raise the soft limit of open files to hold every log open at once, if the hard limit allows."""
    need = n_files + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return True
    if hard != resource.RLIM_INFINITY and hard < need:
        return False
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    except (ValueError, OSError):
        return False
    return True


def stream_tax(files: Sequence[tuple[Path, int | None]], *, salvage: bool = False, keep_ranks: bool = True,
               round_bytes: int = ROUND_BYTES, end_tolerance_us: float = END_TOLERANCE_US,
               strict: bool = True, allow_partial: bool = False, overrides: Iterable[Any] = (),
               ranks_per_host: int | None = None, block_bytes: int | None = None, report: bool = True) -> LogTax:
    """The tax of a job's NCCL Inspector logs, read in lockstep (see the module docstring).

    Parameters
    ----------
    files : sequence of (Path, int or None)
        The logs, each with its given rank (:func:`inspector_files`).
    salvage : bool, default False
        As for :func:`~evtsync.trace.readers.inspector.read_log`.
    keep_ranks : bool, default True
        Keep ``TaxTables.ranks`` (one row per rank of each collective: memory grows with the
        records again, ~60 bytes each); False keeps the per-collective wait shares instead
        (``TaxTables.instance_shares``) and the member ranks, all :func:`~evtsync.sync.tax.tax_summary`
        and :func:`~evtsync.sync.tax.straggler_identity` read.
    round_bytes : int
        Text decoded per round over all files (each file's block: this over the number of
        files, between 1 KiB and 4 MiB).
    end_tolerance_us, strict, allow_partial
        As for :func:`~evtsync.sync.collectives.align_logged`.
    overrides : iterable
        Must be empty (``--pg`` does not apply to Inspector logs).
    ranks_per_host : int or None
        Unused (the logs name their hosts).
    block_bytes : int or None
        Each file's block per round, overriding ``round_bytes`` (tests: many small rounds).
    report : bool, default True
        Make :attr:`LogTax.report` (a clean job, ``keep_ranks=False``); False: not made (a caller
        that reads the tables anyway, e.g. ``evtsync tax --plot``).

    Returns
    -------
    LogTax
        The TraceSet, alignment and tax tables, and ``stats`` (rounds, peak open records,
        collectives completed while reading and left open at the end).

    Raises
    ------
    TraceError
        As :func:`~evtsync.trace.traceset.load_traces` and the whole-table path; a partial
        job without ``allow_partial``.
    AlignmentError
        Collectives whose type differs across ranks (with ``strict``).
    """
    del ranks_per_host
    if list(overrides):
        raise InputError("--pg does not apply to NCCL Inspector logs: they name each collective's communicator")
    if not files:
        raise TraceError("no NCCL Inspector logs given")
    if not _enough_file_handles(len(files)):
        log.warning("%d Inspector logs cannot be open at once (limit of open files): reading them whole instead "
                    "(memory grows with the records)", len(files))
        return _whole(files, salvage, end_tolerance_us, strict, allow_partial)
    block = block_bytes or _block_bytes(len(files), round_bytes)
    reader = LogRounds(files, salvage=salvage, block_bytes=block)
    job = _Job(reader, keep_ranks, end_tolerance_us, strict)
    try:
        while reader.active:
            job.open.add(reader.round())
            job.rounds = reader.rounds
            if job.ranks is None:
                job.resolve_ranks()
            job.complete()
        job.flush()
    finally:
        reader.close()
    results = reader.results()
    layout = job_layout(results)
    if job.ranks is None or list(job.ranks) != layout.ranks:
        log.warning("the ranks of the Inspector logs are known only from their whole content (no communicator "
                    "logged by every file in their first blocks): reading them whole instead")
        return _whole(files, salvage, end_tolerance_us, strict, allow_partial)
    return _finish(job, results, layout, allow_partial, report)


def _whole(files: Sequence[tuple[Path, int | None]], salvage: bool, end_tolerance_us: float, strict: bool,
           allow_partial: bool) -> LogTax:
    """The whole-table path (the fallback)."""
    from evtsync.sync.tax import tax_from_traces
    from evtsync.trace.traceset import load_traces

    traces = load_traces([f"{rank}={path}" if rank is not None else str(path) for path, rank in files],
                         salvage=salvage, jobs=1)
    alignment, tables = tax_from_traces(traces, end_tolerance_us=end_tolerance_us, strict=strict,
                                        allow_partial=allow_partial)
    return LogTax(traces, alignment, tables, {"streamed": False})


def _finish(job: _Job, results: Sequence[LoggedCollectives], layout: JobLayout, allow_partial: bool,
            want_report: bool = True) -> LogTax:
    """The open collectives (reported by only some members), the rank-set check, the tables: built
    at their first use, with the printed report from arrays, when every batch was clean, none is
    left open and the rank set is complete (issue 48: pandas is not imported then)."""
    rec = job.complete(final=True)
    assert rec is not None and job.ranks is not None
    n_open = int(np.unique(np.stack([rec["comm"], rec["sn"]]), axis=1).shape[1]) if len(rec["sn"]) else 0
    clean = not n_open and not layout.problems and all(isinstance(b, dict) for b in job.batches)
    stats: dict[str, Any] = {"streamed": True, "rounds": job.rounds, "peak_open_records": job.peak_open,
             "peak_held_records": job.peak_held, "collectives": 0, "left_open_at_end": n_open}
    if clean:
        stats["collectives"] = sum(len(b["index"]) for b in job.batches if isinstance(b, dict))
        report = _report(job, results, layout) if want_report and not job.keep_ranks else None
        got = LogTax(None, None, None, stats, report=report,
                     build=lambda: _tables(job, results, layout, rec, allow_partial))
    else:
        got = LogTax(*_tables(job, results, layout, rec, allow_partial), stats)
        stats["collectives"] = len(got.tables.collectives)
    log.info("NCCL Inspector logs streamed in %d round(s): %d collective(s), at most %d record(s) open at once, "
             "%d collective(s) still open at the end", job.rounds, stats["collectives"], job.peak_open, n_open)
    return got


def _pg_counts(job: _Job) -> dict[str, int]:
    """The collectives taxed per communicator."""
    totals: dict[str, int] = {}
    for batch in job.batches:
        if isinstance(batch, dict):
            codes, counts = np.unique(batch["pg"], return_counts=True)
            pairs = zip((batch["pg_names"][c] for c in codes.tolist()), counts.tolist(), strict=True)
        else:
            pairs = batch[0]["pg"].astype(str).value_counts().items()
        for pg, k in pairs:
            totals[str(pg)] = totals.get(str(pg), 0) + int(k)
    return totals


def _tables(job: _Job, results: Sequence[LoggedCollectives], layout: JobLayout, rec: dict[str, np.ndarray],
            allow_partial: bool) -> tuple[TraceSet, Alignment, TaxTables]:
    """The TraceSet, alignment and tax tables of the whole-table path (pandas)."""
    tables = job_tables(results, layout, log_counts=not job.counts_logged)
    groups = tables["process_groups"]
    comm_rows = layout.comm_rows
    assert job.ranks is not None
    leftover = job.frame(rec, job.ranks[rec["file"]]) if len(rec["sn"]) else None
    problems = list(layout.problems)
    if leftover is not None:
        totals = _pg_counts(job)
        keys = pd.MultiIndex.from_arrays([rec["comm"], rec["sn"]])
        done = (pd.MultiIndex.from_arrays([np.concatenate([c for c, _ in job.done_keys]),
                                           np.concatenate([n for _, n in job.done_keys])])
                if job.done_keys else None)
        if done is not None and keys.isin(done).any():
            at = int(np.flatnonzero(keys.isin(done))[0])
            raise TraceError(f"communicator {job.comm_ids[int(rec['comm'][at])]}: collective {int(rec['sn'][at])} "
                             f"logged twice by rank {int(job.ranks[rec['file'][at]])} "
                             f"({job.path(int(rec['file'][at]))}): a repeated record")
        left_counts = leftover.groupby("pg", observed=True)["index"].nunique()
        every = {pg: totals.get(pg, 0) + int(left_counts.get(pg, 0)) for pg in comm_rows}
        problems += partial_problems(leftover, comm_rows, every)
    kernels, cpu_ops, runtime, syncs = empty_event_tables()
    traces = TraceSet(kernels=kernels, cpu_ops=cpu_ops, runtime=runtime, syncs=syncs, problems=problems,
                      logged=pd.DataFrame(columns=LOGGED_COLUMNS), **tables)
    traces.check_complete(allow_partial)
    if leftover is not None:
        job._tax(rec, job.ranks[rec["file"]], groups)
    alignment, tax = _assemble(job, groups, sorted(comm_rows))
    note_missing_ranks(traces, alignment.groups, alignment.instances)
    note_missing_ranks(traces, tax.collectives, tax.ranks)
    return traces, alignment, tax


def _report(job: _Job, results: Sequence[LoggedCollectives], layout: JobLayout) -> LogReport:
    """What ``evtsync tax`` prints of a clean job, from the batches' arrays: the rows of
    :func:`_assemble`'s groups table, :func:`~evtsync.sync.tax.tax_summary` and
    :func:`~evtsync.sync.tax.straggler_identity` (their NumPy cores) without building a frame."""
    comm_names = sorted(layout.comm_rows)
    where = {name: k for k, name in enumerate(comm_names)}
    batches = [b for b in job.batches if isinstance(b, dict)]
    labels = sorted({w for b in batches for w in b["labels"]})
    label_at = {w: k for k, w in enumerate(labels)}

    def joined(name: str) -> np.ndarray:
        return np.concatenate([b[name] for b in batches]) if batches else np.zeros(0)

    pg = (np.concatenate([np.asarray([where[n] for n in b["pg_names"]], dtype=np.int64)[b["pg"]] for b in batches])
          if batches else np.zeros(0, dtype=np.int64))
    coll = (np.concatenate([np.asarray([label_at[w] for w in b["labels"]], dtype=np.int64)[b["collective"]]
                            for b in batches]) if batches else np.zeros(0, dtype=np.int64))
    # the description of each PG as the tax table's pg_desc column writes it
    desc = np.asarray([str(layout.comm_rows[c]["name"]) for c in comm_names], dtype=object)[pg]
    valid = joined("valid").astype(bool)
    tau = joined("tau_max_us").astype(float)
    summary = summary_rows(code_groups([pg, coll], [comm_names, labels]), desc, valid, tau,
                           joined("tau_med_us").astype(float), joined("share_max").astype(float),
                           joined("share_median").astype(float))
    members = job.members()
    stragglers, _ = straggler_rows(code_groups([pg], [comm_names]), joined("index").astype(np.int64),
                                   valid & (tau > 0), joined("straggler_rank"), desc, members, rank_rows=False)
    n_coll = np.bincount(pg, minlength=len(comm_names))
    group_rows = [logged_group_row(g["pg_name"], g, int(n_coll[where[g["pg_name"]]]))
                  for g in job_group_rows(layout) if n_coll[where[g["pg_name"]]]]
    files = job_rank_columns(results, layout, _REPORT_RANK_COLUMNS)  # logs the job's counts, once:
    job.counts_logged = True  # not again if the tables are built too
    order = sorted(range(len(layout.ranks)), key=layout.ranks.__getitem__)  # by rank, as the ranks table
    ranks = Rows.from_columns({name: [files[name][i] for i in order] for name in _REPORT_RANK_COLUMNS})
    return LogReport(ranks=ranks, groups=Rows(GROUP_COLUMNS, group_rows), summary=Rows(SUMMARY_COLUMNS, summary),
                     stragglers=Rows(STRAGGLER_COLUMNS, stragglers),
                     skipped=Rows(JOB_SKIPPED_COLUMNS, job_skipped_rows(results, layout)),
                     problems=list(layout.problems), missing_ranks=tuple(layout.missing))


def _concat(frames: list[pd.DataFrame], categories: dict[str, list[str] | None]) -> pd.DataFrame:
    """The batches' rows as one frame, each of ``categories``' columns one categorical over the
    given categories (None: the sorted union of the batches'), recoded batch by batch (a plain
    ``pd.concat`` of categoricals with different categories makes object columns: ~10 times
    the memory at a million rows)."""
    union = {col: cats if cats is not None else sorted({str(c) for f in frames for c in f[col].array.categories})
             for col, cats in categories.items()}
    for frame in frames:
        for col, cats in union.items():
            frame[col] = frame[col].cat.set_categories(pd.Index(cats, dtype=frame[col].array.categories.dtype))
    out = pd.concat(frames, ignore_index=True)
    frames.clear()
    return out


def _assemble(job: _Job, groups: pd.DataFrame, comm_names: list[str]) -> tuple[Alignment, TaxTables]:
    """The tables of the whole-table path from the batches' rows."""
    meta = groups.set_index("pg_name")
    frames, second = [], []
    for batch in job.batches:
        coll_frame, other = _batch_frames(batch, job.keep_ranks) if isinstance(batch, dict) else batch
        frames.append(coll_frame)
        second.append(other)
    job.batches.clear()
    if frames:
        coll = _concat(frames, {"pg": comm_names, "collective": None})
        order = np.lexsort((coll["index"].to_numpy(), coll["pg"].array.codes))
        coll = coll.take(order).reset_index(drop=True)
        codes = np.asarray(coll["pg"].array.codes)
        per_pg = meta.reindex(comm_names)
        coll["pg_desc"] = pd.array(per_pg["pg_desc"].astype(str).to_numpy()[codes], dtype="str")
        coll["pg_ranks"] = pd.array(per_pg["pg_ranks"].astype(str).to_numpy()[codes], dtype="str")
        coll["pg_source"] = pd.array(np.full(len(coll), LOGGED_SOURCE, dtype=object), dtype="str")
        coll["dtype"] = pd.array(np.full(len(coll), "", dtype=object), dtype="str")
        coll["collective"] = coll["collective"].astype("str")
        coll = coll[TAX_COLUMNS]
    else:
        coll = compute_tax(Alignment(pd.DataFrame(columns=GROUP_COLUMNS), pd.DataFrame(),
                                     pd.DataFrame(columns=MISMATCH_COLUMNS), set())).collectives
    if job.keep_ranks and second:
        ranks = _concat(second, {"pg": comm_names, "collective": None})
        order = np.lexsort((ranks["rank"].to_numpy(), ranks["index"].to_numpy(), ranks["pg"].array.codes))
        ranks = ranks.take(order).reset_index(drop=True)
    else:
        ranks = pd.DataFrame(columns=RANK_COLUMNS)
    shares = None
    if not job.keep_ranks:
        shares = (pd.concat(second, ignore_index=True) if second
                  else pd.DataFrame(columns=["pg", "index", "max", "median"]))
        shares["pg"] = shares["pg"].astype(str)
    members = job.members() if not job.keep_ranks else None
    tax = TaxTables(coll, ranks, instance_shares=shares, members=members)
    # the alignment's tables: communicators with collectives, mismatches in the whole-table order
    n_coll = coll["pg"].astype(str).value_counts() if len(coll) else pd.Series(dtype=np.int64)
    rows = meta.to_dict("index")  # one dict per communicator: .loc per cell cost ~0.1 ms (513 of them)
    group_rows = pd.DataFrame([logged_group_row(pg, rows[pg], int(n_coll[pg])) for pg in comm_names
                               if pg in n_coll.index], columns=GROUP_COLUMNS)
    if job.mismatches:
        mism = pd.concat(job.mismatches, ignore_index=True)
        code = {pg: i for i, pg in enumerate(comm_names)}
        kind = mism["kind"].astype(str)
        block = kind.map(_KIND_BLOCK).fillna(4).to_numpy()
        pg_code = mism["pg"].astype(str).map(code).to_numpy()
        within = np.where(block == 2, kind.map({"type": 0, "size": 1}).fillna(0).to_numpy(), 0)
        # partial / timing / end: by (pg, index); type and size: per pg, types then sizes
        order = np.lexsort((mism["index"].to_numpy(), within, np.where(block == 2, pg_code, 0),
                            np.where(block == 2, 0, pg_code), block))
        mism = mism.take(order).reset_index(drop=True)
    else:
        mism = pd.DataFrame(columns=MISMATCH_COLUMNS)
    empty = pd.DataFrame({"pg": pd.Categorical([], categories=comm_names), "index": np.zeros(0, np.int64)})
    return Alignment(group_rows, empty, mism, set(job.invalid)), tax


def _batch_frames(batch: dict[str, Any], keep_ranks: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A clean batch's arrays (:meth:`_Job._tax_clean`) as the frames of the pandas path: its
    collectives (less the per-PG constants), then its ranks (``keep_ranks``) or wait shares."""
    pg_cat, labels = pd.Index(batch["pg_names"]), pd.Index(batch["labels"])
    pg, n = batch["pg"], len(batch["pg"])
    coll = pd.DataFrame({
        "pg": pd.Categorical.from_codes(pg, categories=pg_cat), "index": batch["index"],
        "window": np.zeros(n, dtype=np.int32),
        "collective": pd.Categorical.from_codes(batch["collective"], categories=labels),
        **{c: batch[c] for c in ("bytes", "n_ranks", "tau_max_us", "tau_med_us", "mean_delay_us", "straggler_rank",
                                 "fastest_rank", "min_dur_us", "max_dur_us", "end_spread_us", "start_ns", "valid")}})
    if keep_ranks:
        r = batch["ranks"]
        other = pd.DataFrame({
            "pg": pd.Categorical.from_codes(r["pg"], categories=pg_cat), "index": r["index"],
            "window": np.zeros(len(r["pg"]), dtype=np.int32), "rank": r["rank"],
            "collective": pd.Categorical.from_codes(r["collective"], categories=labels),
            **{c: r[c] for c in ("dur_us", "wait_us", "wait_share", "is_straggler", "ts_ns", "end_ns")}})
    else:
        other = pd.DataFrame({"pg": pd.Categorical.from_codes(pg, categories=pg_cat), "index": batch["index"],
                              "max": batch["share_max"], "median": batch["share_median"]})
    return coll, other
