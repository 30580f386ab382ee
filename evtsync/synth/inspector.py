"""NCCL Inspector logs of a synthetic job, written from its Kineto traces.

What the NCCL Inspector plugin would have logged for the same run: one file per process,
``<host>-pid<pid>.log`` (``.log.gz`` with ``compress``), one JSON record per completed
collective per communicator (format "v4.0", see shared/formats/nccl-inspector.md), in the
order the collectives completed on that rank. The records come from the job's traces read
back (:func:`~evtsync.trace.traceset.load_traces`, aligned with
:func:`~evtsync.sync.collectives.align_collectives`), so the two readings of one job share
their source and can be compared: communicator id = a hash of the PG's name and ranks,
``comm_name`` = the PG's description, ``rank`` = the rank's position in the PG's sorted
member list, ``coll_sn`` = the aligned instance index, ``coll_exec_time_us`` = the NCCL
kernel's duration rounded to whole µs as the plugin writes it, timing source
``kernel_gpu``; ``verbose`` adds ``event_trace_ts`` with the kernel's start and stop on
channel 0. Collectives NCCL runs as grouped point-to-point operations (AllToAll,
SendRecv) become ``p2p_perf`` records (the Inspector logs them so), which carry no
collective tax. ``min_size_bytes`` mimics ``NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES`` (0 here:
keep all; the plugin's default is 8192).

The synthetic job has no collective on the world communicator, so the logs do not say
each process's global rank: read them with ``--rank-from order`` (the files are named so
that name order is rank order within 10 hosts) or ``RANK=PATH``; :func:`write_inspector_logs`
returns the path of each rank.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from evtsync.core.errors import InputError

log = logging.getLogger(__name__)

#: The Inspector's output format version written.
FORMAT_VERSION = "v4.0"
#: Collective types NCCL runs (and the Inspector logs) as collectives; the rest are p2p.
LOGGED_AS_COLLECTIVE = frozenset({"AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce"})
#: Bus-bandwidth factor of each collective over n ranks (nccl-tests' convention).
_BUS_FACTOR = {"AllReduce": lambda n: 2 * (n - 1) / n, "AllGather": lambda n: (n - 1) / n,
               "ReduceScatter": lambda n: (n - 1) / n}
_FIRST_PID = 10000
INSPECTOR_DIR = "inspector"


def communicator_id(pg_name: str, pg_ranks: str) -> str:
    """A stable 56-bit hex id for a PG, like the plugin's communicator hashes."""
    digest = hashlib.sha256(f"{pg_name}|{pg_ranks}".encode()).hexdigest()
    return "0x" + digest[:14]


def write_inspector_logs(traces_dir: str | os.PathLike[str], out_dir: str | os.PathLike[str], *,
                         verbose: bool = False, compress: bool = False, min_size_bytes: int = 0) -> dict[int, Path]:
    """Write the Inspector logs of the job whose Kineto traces are in ``traces_dir``.

    Returns the file of each rank. Refuses to write into a folder holding other files
    (a reader would mix them in); files this function wrote before are replaced.
    """
    from evtsync.sync.collectives import align_collectives
    from evtsync.trace.traceset import load_traces

    if min_size_bytes < 0:
        raise InputError(f"min_size_bytes {min_size_bytes}: expected >= 0")
    traces = load_traces(traces_dir, scope="collectives", jobs=1)
    alignment = align_collectives(traces)
    inst = alignment.instances
    groups = alignment.groups.set_index("pg")
    hosts = traces.ranks.drop_duplicates("rank").set_index("rank")["host"].to_dict()
    suffix = ".log.gz" if compress else ".log"
    out = Path(out_dir)
    names = {r: f"{hosts.get(r) or 'synth-host'}-pid{_FIRST_PID + r}{suffix}" for r in traces.rank_ids}
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if p.name not in set(names.values()))
        if foreign:
            raise InputError(f"{out} already holds {len(foreign)} file(s) this writer would not replace "
                             f"(e.g. {foreign[0]}); a reader would mix them in: choose an empty folder")
    out.mkdir(parents=True, exist_ok=True)
    members = {pg: [int(v) for v in str(row["pg_ranks"]).split(",")] for pg, row in groups.iterrows()}
    comm = {pg: communicator_id(str(row["pg_name"]), str(row["pg_ranks"])) for pg, row in groups.iterrows()}
    nnodes = {pg: len({hosts.get(r) for r in ranks}) for pg, ranks in members.items()}
    written: dict[int, Path] = {}
    n_coll = n_p2p = n_small = 0
    for rank, sub in inst.sort_values(["rank", "end_ns", "pg", "index"], kind="stable").groupby("rank", sort=True):
        rank = int(rank)
        host = hosts.get(rank) or "synth-host"
        lines = []
        for row in sub.itertuples(index=False):
            ranks = members[row.pg]
            size = int(row.msg_bytes) if row.msg_bytes >= 0 else 0
            if size < min_size_bytes:
                n_small += 1
                continue
            record = _record(row, comm[row.pg], str(groups.loc[row.pg, "pg_desc"] or "unknown"), ranks, rank,
                             host, size, verbose, nnodes[row.pg])
            n_coll += "coll_perf" in record
            n_p2p += "p2p_perf" in record
            lines.append(orjson.dumps(record))
        data = b"\n".join(lines) + b"\n" if lines else b""
        target = out / names[rank]
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_bytes(gzip.compress(data, mtime=0) if compress else data)
        os.replace(tmp, target)
        written[rank] = target
    log.info("wrote %d NCCL Inspector log(s) to %s: %d collective and %d p2p record(s)%s", len(written), out,
             n_coll, n_p2p, f"; {n_small} below {min_size_bytes} bytes not logged" if n_small else "")
    return written


def _record(row: Any, comm_id: str, comm_name: str, ranks: list[int], rank: int, host: str, size: int,
            verbose: bool, nnodes: int) -> dict[str, Any]:
    """One log record of one rank's share of one aligned collective."""
    n = len(ranks)
    exec_us = int(np.rint(row.dur_ns / 1000.0))
    start_us, stop_us = int(row.ts_ns // 1000), int(row.end_ns // 1000)
    algobw = size / exec_us / 1e3 if exec_us > 0 else 0.0
    record: dict[str, Any] = {
        "header": {"id": comm_id, "comm_name": comm_name, "rank": ranks.index(rank), "n_ranks": n,
                   "nnodes": nnodes},
        "metadata": {"inspector_output_format_version": FORMAT_VERSION, "git_rev": "evtsync-synth",
                     "rec_mechanism": "nccl_profiler_interface", "dump_timestamp_us": stop_us,
                     "hostname": host, "pid": _FIRST_PID + rank}}
    if row.collective in LOGGED_AS_COLLECTIVE:
        perf: dict[str, Any] = {"coll": row.collective, "coll_sn": int(row.index), "coll_msg_size_bytes": size,
                                "coll_exec_time_us": exec_us, "coll_timing_source": "kernel_gpu",
                                "coll_algobw_gbs": round(algobw, 6),
                                "coll_busbw_gbs": round(algobw * _BUS_FACTOR.get(row.collective, lambda _: 1.0)(n),
                                                        6)}
        if verbose:
            perf["event_trace_ts"] = {"coll_start_ts": start_us, "coll_stop_ts": start_us,
                                      "kernel_events": [{"channel_id": 0, "kernel_start_ts": start_us,
                                                         "kernel_stop_ts": stop_us, "kernel_record_ts": stop_us}]}
        record["coll_perf"] = perf
    else:
        record["p2p_perf"] = {"p2p": "Send", "p2p_sn": int(row.index), "p2p_peer": -1, "p2p_msg_size_bytes": size,
                              "p2p_exec_time_us": exec_us, "p2p_timing_source": "kernel_gpu",
                              "p2p_algobw_gbs": round(algobw, 6), "p2p_busbw_gbs": round(algobw, 6)}
    return record
