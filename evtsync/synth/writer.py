"""Kineto JSON output, modern (2024+) or legacy (2023), streamed and written atomically.

A rank file is written as it is simulated: the header (top-level keys and ``M`` metadata
events), then each iteration's events as they come, then the closing keys — memory stays
bounded by one iteration whatever the number of iterations. Each file goes to a temporary
name through :func:`evtsync.core.tableio.atomic_path` and is renamed when complete; gzip output
has a fixed header (no name, mtime 0) so that the same seed gives the same bytes.

Layout, as Kineto writes it: ``schemaVersion``, ``deviceProperties``, (modern: CUDA/CUPTI
versions), ``distributedInfo``, ``record_shapes``, (modern: ``host_name``, ``trace_id``), ``traceEvents``,
``traceName``, (modern: ``displayTimeUnit`` ``"ms"`` and ``baseTimeNanoseconds``).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import io
from pathlib import Path
from typing import IO, Any

import orjson

from evtsync.core.tableio import atomic_path
from evtsync.synth.config import GPU_MODELS, SynthConfig
from evtsync.synth.timeline import (
    AUTOGRAD_TID_OFFSET,
    COMPUTE_STREAM,
    EP_STREAM,
    FSDP_STREAM,
    LEGACY_EPOCH_US,
    MODERN_BASE_NS,
    MODERN_REL0_US,
    SIDE_STREAM,
    TP_STREAM,
    Simulation,
)

NCCL_VERSION = "2.21.5"

#: zlib level of gzip output (``SynthConfig.gzip``; the demo's 88 rank files): 1, the fastest. On the
#: demo's 194 MB of JSON (2026-12-06, 2-core VM) level 1 compresses in 0.73 s of CPU against level 5's
#: 1.34 s, to 19.6 MB against 14.4 MB, and decompresses in 0.37 s against 0.32 (issue 48: the cold
#: demo's CPU; docs/performance/synth.md). The JSON inside is the same at any level.
GZIP_LEVEL = 1


def trace_file_name(cfg: SynthConfig, rank: int) -> str:
    """File name of one rank, in the style of real traces (``rank-3.<ms>.pt.trace.json``)."""
    epoch_ms = (LEGACY_EPOCH_US if cfg.format == "legacy" else MODERN_BASE_NS // 1000 + MODERN_REL0_US) // 1000
    stamp = epoch_ms + 1201 + 3 * rank + cfg.clock_offsets_us[cfg.host_of(rank)] // 1000
    suffix = ".pt.trace.json" + (".gz" if cfg.gzip else "")
    if cfg.format == "legacy":
        return f"worker{rank}_step_{cfg.first_step + cfg.iterations - 1}.{stamp}{suffix}"
    return f"rank-{rank}.{stamp}{suffix}"


class RankFile:
    """One rank's trace file being streamed out."""

    def __init__(self, sim: Simulation, rank: int, tmp: Path) -> None:
        self.sim = sim
        self.cfg = sim.cfg
        self.rank = rank
        self.modern = sim.modern
        self._raw: IO[bytes] = open(tmp, "wb")  # noqa: SIM115 - closed in close()
        self._out: gzip.GzipFile | io.BufferedWriter = (
            gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, mtime=0, compresslevel=GZIP_LEVEL)
            if self.cfg.gzip else io.BufferedWriter(self._raw, 1 << 20))
        self._first = True
        self.first_ts: int | float | None = None
        self._last_ts: int | float | None = None
        self.n_events = 0

    def header(self) -> None:
        """Top-level keys before ``traceEvents`` and the metadata events."""
        cfg, sim, rank = self.cfg, self.sim, self.rank
        props = GPU_MODELS[cfg.gpu]["props"]
        devices = [{"id": i, **props} for i in range(min(cfg.gpus_per_host, cfg.ranks))]
        top: dict[str, Any] = {"schemaVersion": 1, "deviceProperties": devices}
        if self.modern:
            top.update({"cupti_version": 24, "cuda_runtime_version": 12040, "cuda_driver_version": 12040})
            member = [pg for pg in sim.pgs if rank in pg["ranks"]]
            top["distributedInfo"] = {
                "backend": "nccl", "rank": rank, "world_size": cfg.ranks, "pg_count": len(sim.pgs),
                "pg_config": [{k: pg[k] for k in ("pg_name", "pg_desc", "backend_config", "pg_size", "ranks")} for pg in member],
                "nccl_version": NCCL_VERSION}
            top["record_shapes"] = 1
            top["host_name"] = f"gpu-node-{cfg.host_of(rank)}"
            top["trace_id"] = hashlib.sha256(f"{cfg.seed}:{rank}".encode()).hexdigest()[:32].upper()
        else:
            top["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": cfg.ranks}
            top["record_shapes"] = 1
        body = orjson.dumps(top)
        self._out.write(body[:-1] + b', "traceEvents": [\n')

    def metadata(self, t0: int | float) -> list[dict[str, Any]]:
        """``M`` events naming the process, the GPUs, the streams and the CPU thread."""
        sim, rank = self.sim, self.rank
        state = sim.states[rank]
        pname = "python3.10" if self.modern else "python3"
        ev: list[dict[str, Any]] = []

        def meta(name: str, pid: int | str, tid: int, args: dict[str, Any]) -> None:
            ev.append({"name": name, "ph": "M", "ts": t0, "pid": pid, "tid": tid, "args": args})

        meta("process_name", state.pid, 0, {"name": pname})
        meta("process_labels", state.pid, 0, {"labels": "CPU"})
        meta("process_sort_index", state.pid, 0, {"sort_index": state.pid})
        for dev in range(min(self.cfg.gpus_per_host, self.cfg.ranks)):
            meta("process_name", dev, 0, {"name": pname})
            meta("process_labels", dev, 0, {"labels": f"GPU {dev}"})
            meta("process_sort_index", dev, 0, {"sort_index": 16777216 + dev})
        streams = [COMPUTE_STREAM, TP_STREAM]
        if self.cfg.fsdp_groups:
            streams.append(FSDP_STREAM)
        if self.cfg.ep_groups:
            streams.append(EP_STREAM)
        if any(p.kind == "blocking_sync" and p.rank == rank for p in self.cfg.plants):
            streams.append(SIDE_STREAM)
        for s in streams:
            meta("thread_name", state.device, s, {"name": f"stream {s} "})
            meta("thread_sort_index", state.device, s, {"sort_index": s})
        meta("thread_name", state.pid, state.pid, {"name": f"thread {state.pid} ({'pt_main_thread' if self.modern else 'python3'})"})
        meta("thread_sort_index", state.pid, state.pid, {"sort_index": state.pid})
        bwd = state.pid + AUTOGRAD_TID_OFFSET
        meta("thread_name", state.pid, bwd, {"name": f"thread {bwd} ({'pt_autograd_0' if self.modern else 'python3'})"})
        meta("thread_sort_index", state.pid, bwd, {"sort_index": bwd})
        ev.append({"name": "process_sort_index", "ph": "M", "ts": t0, "pid": "Spans", "tid": 0, "args": {"sort_index": 536870912}})
        ev.append({"name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g", "pid": "Traces",
                   "tid": "Trace PyTorch Profiler", "ts": t0})
        return ev

    def events(self, events: list[dict[str, Any]]) -> None:
        """Append events (one iteration's) to the file."""
        if not events:
            return
        if self.first_ts is None:
            self.first_ts = min(e["ts"] for e in events) - (1 if not self.modern else 1.0)
            events = self.metadata(self.first_ts) + events
        self._last_ts = max([e["ts"] + e.get("dur", 0) for e in events])   # the end of this (the latest) chunk
        # one dumps call per chunk (several times faster than one per event), then one event
        # per line as Kineto writes them. ``},{"`` occurs only between two events: an event's
        # arguments hold numbers, strings, lists of them and one level of dicts, never a list
        # of dicts (tests/synth/test_synth_format.py checks one event per line)
        chunk = orjson.dumps(events)[1:-1].replace(b'},{"', b'},\n{"')
        if not self._first:
            self._out.write(b",\n")
        self._out.write(chunk)
        self._first = False
        self.n_events += len(events)

    def close(self, name: str) -> None:
        """Close ``traceEvents`` with the profiler span and the trailing keys."""
        t0 = self.first_ts if self.first_ts is not None else 0
        t1 = self._last_ts if self._last_ts is not None else t0
        tail: list[dict[str, Any]] = [{"ph": "X", "cat": "Trace", "ts": t0, "dur": t1 - t0, "pid": "Spans", "tid": "PyTorch Profiler",
                 "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
                {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": t1 + (1.0 if self.modern else 1)}]
        self.events(tail)
        end: dict[str, Any] = {"traceName": f"./traces/{name.removesuffix('.gz')}"}
        if self.modern:
            end["displayTimeUnit"] = "ms"
            end["baseTimeNanoseconds"] = MODERN_BASE_NS
        self._out.write(b"\n], " + orjson.dumps(end)[1:] + b"\n")
        self._out.close()
        if not self._raw.closed:
            self._raw.close()


def write_traces(sim: Simulation, out_dir: Path) -> dict[int, Path]:
    """Run ``sim`` and stream every written rank's trace into ``out_dir``; returns the paths."""
    cfg = sim.cfg
    paths = {r: out_dir / trace_file_name(cfg, r) for r in cfg.ranks_to_write()}
    with contextlib.ExitStack() as stack:
        files: dict[int, RankFile] = {}
        for r, path in paths.items():
            tmp = stack.enter_context(atomic_path(path))
            files[r] = RankFile(sim, r, tmp)
        try:
            for f in files.values():
                f.header()

            def sink(rank: int, _iteration: int, events: list[dict[str, Any]]) -> None:
                files[rank].events(events)

            sim.run(sink)
            for r, f in files.items():
                f.close(paths[r].name)
        except BaseException:
            for f in files.values():
                with contextlib.suppress(Exception):
                    f._out.close()
                    f._raw.close()
            raise
    return paths
