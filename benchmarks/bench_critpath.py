"""Benchmark: critical-path DAG + walk on one synthetic rank of about a million events.

Builds the rank's tables directly (a GPU-bound training loop: per op a ``cpu_op`` holding an
inner ``cpu_op`` holding a launch; compute kernels on one stream, an NCCL collective every
50 ops on another, a ``cudaStreamSynchronize`` every 2,000 ops), then times, in a fresh
subprocess per measurement (so that peak RSS is that measurement's own):

- ``evtsync``: :func:`build_rank_dag` + a walk from every collective back to the previous
  one with occurrence keys (what :func:`evtsync.critpath.attribute` does per rank);
- ``baseline``: the paper's algorithm written plainly in Python (per-edge tuples in dict
  adjacency lists, one global ``heapq`` for cross-stream edges, a stack for CPU slices, a
  walk by scanning parents), at a smaller size, and evtsync at that same size for the ratio.

Run by hand: ``.venv/bin/python benchmarks/bench_critpath.py [--events 1000000]``.

``--scale ITERATIONS[,ITERATIONS...]`` measures instead the memory of attributing a whole
multi-rank set (issue 15): ``evtsync synth`` writes ``--ranks`` ranks of that many
iterations into ``--out`` (reused when there), then, each in a fresh subprocess, the
in-process attribution (one process holds every rank's tables and DAG: the baseline) and
the per-rank tasks on a process pool of ``--jobs`` (the caller reads only the collectives;
each task reads one rank): wall time, the caller's peak RSS, every worker's peak RSS (as
the tasks report it) and whether the two tables are identical.

``--cli ITERATIONS`` runs the command itself, ``evtsync attribute --jobs JOBS --cache``, on
``--ranks`` synthetic ranks of that many iterations (9,000: about 1.0 GB per rank; written into
``--out`` when missing, about 6 min of CPU for 8 GB), and samples the peak RSS (VmHWM) of every
process in its tree twice a second: the caller, the fork server and each pool worker.
"""

from __future__ import annotations

import argparse
import heapq
import json
import subprocess
import sys
import time

import numpy as np
import pandas as pd

US = 1000


def make_rank(n_events: int, seed: int = 0) -> tuple[pd.DataFrame, ...]:
    """Tables of one rank with about ``n_events`` events (4 per op: 2 ops, 1 launch, 1 kernel)."""
    rng = np.random.default_rng(seed)
    n_ops = n_events // 4
    op_dur = rng.integers(8, 14, n_ops) * US
    gap = rng.integers(1, 4, n_ops) * US
    is_nccl = (np.arange(n_ops) % 50) == 49
    is_sync = (np.arange(n_ops) % 2000) == 1999
    k_dur = np.where(is_nccl, 60 * US, rng.integers(20, 120, n_ops) * US)
    cpu_t = 0
    comp_ready = 0
    op_ts = np.empty(n_ops, np.int64)
    k_ts = np.empty(n_ops, np.int64)
    sync_ts, sync_end = [], []
    launch_off = 5 * US
    for i in range(n_ops):
        t = cpu_t + int(gap[i])
        op_ts[i] = t
        launch_end = t + launch_off + 5 * US
        start = max(comp_ready + US, launch_end + 4 * US)
        k_ts[i] = start
        comp_ready = start + int(k_dur[i])
        cpu_t = t + int(op_dur[i])
        if is_sync[i]:
            sync_ts.append(cpu_t + US)
            cpu_t = max(cpu_t + 6 * US, comp_ready + 2 * US)
            sync_end.append(cpu_t - US)
    corr = np.arange(n_ops, dtype=np.int64) + 1
    names = np.where(is_nccl, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "sm90_xmma_gemm_bf16bf16_bf16f32")
    kernels = pd.DataFrame({
        "cat": pd.Categorical(["kernel"] * n_ops), "name": pd.Categorical(names), "device": np.zeros(n_ops, np.int64),
        "stream": np.where(is_nccl, 20, 7).astype(np.int64), "ts_ns": k_ts, "dur_ns": k_dur.astype(np.int64),
        "end_ns": k_ts + k_dur, "correlation": corr, "is_nccl": is_nccl})
    outer = pd.DataFrame({"cat": "cpu_op", "name": "aten::linear", "ts_ns": op_ts, "dur_ns": op_dur - US})
    inner = pd.DataFrame({"cat": "cpu_op", "name": "aten::mm", "ts_ns": op_ts + 2 * US, "dur_ns": op_dur - 4 * US})
    cpu_ops = pd.concat([outer, inner], ignore_index=True)
    cpu_ops["pid"], cpu_ops["tid"] = 1, 1
    cpu_ops["end_ns"] = cpu_ops["ts_ns"] + cpu_ops["dur_ns"]
    cpu_ops["cat"] = pd.Categorical(cpu_ops["cat"])
    cpu_ops["name"] = pd.Categorical(cpu_ops["name"])
    launches = pd.DataFrame({"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts_ns": op_ts + launch_off,
                             "dur_ns": 5 * US, "correlation": corr})
    syncs_rt = pd.DataFrame({"cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts_ns": np.array(sync_ts, np.int64),
                             "dur_ns": np.array(sync_end, np.int64) - np.array(sync_ts, np.int64),
                             "correlation": -np.arange(1, len(sync_ts) + 1)})
    runtime = pd.concat([launches, syncs_rt], ignore_index=True)
    runtime["pid"], runtime["tid"], runtime["stream"] = 1, 1, -1
    runtime["end_ns"] = runtime["ts_ns"] + runtime["dur_ns"]
    runtime["cat"] = pd.Categorical(runtime["cat"])
    runtime["name"] = pd.Categorical(runtime["name"])
    syncs = pd.DataFrame({"name": pd.Categorical([]), "ts_ns": np.zeros(0, np.int64), "end_ns": np.zeros(0, np.int64),
                          "stream": np.zeros(0, np.int64), "correlation": np.zeros(0, np.int64),
                          "wait_on_stream": np.zeros(0, np.int64), "wait_on_event_corr": np.zeros(0, np.int64),
                          "sync_kind": pd.Categorical([])})
    return kernels, cpu_ops, runtime, syncs


def run_evtsync(n_events: int) -> dict:
    from evtsync.critpath.dag import Vocabulary, build_rank_dag
    from evtsync.critpath.walk import KeyIndex, Walker, Window

    kernels, cpu_ops, runtime, syncs = make_rank(n_events)
    n = len(kernels) + len(cpu_ops) + len(runtime)
    t0 = time.perf_counter()
    dag = build_rank_dag(kernels, cpu_ops, runtime, syncs, rank=0, vocab=Vocabulary())
    t1 = time.perf_counter()
    keys, walker = KeyIndex(dag), Walker(dag)
    rows = kernels.index[kernels["is_nccl"].to_numpy()].to_numpy()
    gpu = dag.kind == 0
    node_of = pd.Series(np.flatnonzero(gpu), index=dag.row[gpu]).loc[rows].to_numpy()
    steps = 0
    prev = -1
    for node in node_of.tolist():
        if prev >= 0:
            launch = dag.launch_of(prev)
            win = Window(int(dag.end[prev]), int(dag.end[launch]) if launch >= 0 else int(dag.end[prev]),
                         int(dag.start[node]))
        else:
            win = Window(np.iinfo(np.int64).min, np.iinfo(np.int64).min, int(dag.start[node]))
        path = walker.path(node, win, prev)
        if len(path):
            keys.occurrence(path, win)
        steps += len(path)
        prev = node
    t2 = time.perf_counter()
    return {"events": n, "nodes": dag.n_nodes, "edges": dag.n_edges, "collectives": len(node_of),
            "path_steps": steps, "dag_s": t1 - t0, "walk_s": t2 - t1, "total_s": t2 - t0}


def run_baseline(n_events: int) -> dict:
    """The algorithm written plainly: Python objects per event and per edge."""
    kernels, cpu_ops, runtime, _ = make_rank(n_events)
    t0 = time.perf_counter()
    cpu = [(int(s), int(e), str(nm), "op") for s, e, nm in zip(cpu_ops["ts_ns"], cpu_ops["end_ns"], cpu_ops["name"],
                                                                strict=True)]
    cpu += [(int(s), int(e), str(nm), int(c)) for s, e, nm, c in zip(runtime["ts_ns"], runtime["end_ns"],
                                                                      runtime["name"], runtime["correlation"],
                                                                      strict=True)]
    cpu.sort(key=lambda x: (x[0], -x[1]))
    slices, stack, cursor = [], [], None
    for s, e, name, tag in cpu:  # exclusive slices with a stack
        while stack and stack[-1][1] <= s:
            top = stack.pop()
            slices.append((cursor, top[1], top[2], top[3]))
            cursor = top[1]
        if stack and cursor is not None and s > cursor:
            slices.append((cursor, s, stack[-1][2], stack[-1][3]))
        stack.append((s, e, name, tag))
        cursor = s
    while stack:
        top = stack.pop()
        slices.append((cursor, top[1], top[2], top[3]))
        cursor = top[1]
    nodes = [("gpu", int(s), int(e), int(st), int(c), bool(nc)) for s, e, st, c, nc in
             zip(kernels["ts_ns"], kernels["end_ns"], kernels["stream"], kernels["correlation"], kernels["is_nccl"],
                 strict=True)]
    parents: dict[int, list[tuple[int, int, str]]] = {i: [] for i in range(len(nodes) + len(slices))}
    order = sorted(range(len(nodes)), key=lambda i: nodes[i][1])
    heap: list[tuple[int, int]] = []
    last_on_stream: dict[int, int] = {}
    for i in order:
        _, s, e, st, _, _ = nodes[i]
        if st in last_on_stream:
            parents[i].append((last_on_stream[st], nodes[last_on_stream[st]][2], "stream"))
        while heap and heap[0][0] <= s:
            end, j = heapq.heappop(heap)
            parents[i].append((j, end, "cross"))
        heapq.heappush(heap, (e, i))
        last_on_stream[st] = i
    base = len(nodes)
    by_corr = {n[4]: i for i, n in enumerate(nodes)}
    for k, (_s, e, _, tag) in enumerate(slices):
        if k:
            parents[base + k].append((base + k - 1, slices[k - 1][1], "thread"))
        if tag != "op" and tag in by_corr:
            parents[by_corr[tag]].append((base + k, e, "launch"))
    end_of = [n[2] for n in nodes] + [sl[1] for sl in slices]
    t1 = time.perf_counter()
    steps, prev = 0, -1
    for i in order:
        if not nodes[i][5]:
            continue
        n = i
        while True:
            cands = parents[n]
            if not cands:
                break
            p = max(cands, key=lambda c: c[1])[0]
            if p == prev or (prev >= 0 and end_of[p] <= nodes[prev][2]):
                break
            steps += 1
            n = p
        prev = i
    t2 = time.perf_counter()
    return {"events": len(cpu) + len(nodes), "path_steps": steps, "dag_s": t1 - t0, "walk_s": t2 - t1,
            "total_s": t2 - t0}


def measure(kind: str, n_events: int) -> dict:
    """Run one measurement in a subprocess; add its peak RSS (MiB)."""
    code = (f"import json, resource, sys; sys.path.insert(0, 'benchmarks'); import bench_critpath as b; "
            f"r = b.run_{kind}({n_events}); "
            "r['peak_rss_mib'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024; print(json.dumps(r))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_attribution(folder: str, mode: str, jobs: int, cache: str) -> dict:
    """Attribute a trace folder in-process (``mode == "in-process"``) or as per-rank tasks."""
    import hashlib

    from evtsync.core.parallel import ProcessPool
    from evtsync.critpath import attribute

    t0 = time.perf_counter()
    if mode == "in-process":
        result = attribute(folder, keep_paths=False)
    else:
        result = attribute(folder, keep_paths=False, backend=ProcessPool(jobs), read_options={"cache": cache})
    wall = time.perf_counter() - t0
    table = result.collectives
    digest = hashlib.sha256(pd.util.hash_pandas_object(table.astype(str), index=False).to_numpy().tobytes())
    return {"mode": mode, "wall_s": wall, "collectives": len(table), "table_sha256": digest.hexdigest()[:16],
            "worker_peak_rss_mib": [float(v) for v in result.dag_stats.get("peak_rss_mb", pd.Series()).tolist()],
            "explained": int((table["status"] == "ok").sum())}


def measure_attribution(folder: str, mode: str, jobs: int, cache: str) -> dict:
    code = (f"import json, resource, sys; sys.path.insert(0, 'benchmarks'); import bench_critpath as b; "
            f"r = b.run_attribution({folder!r}, {mode!r}, {jobs}, {cache!r}); "
            "r['caller_peak_rss_mib'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024; "
            "print(json.dumps(r))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def scale(iterations: list[int], ranks: int, jobs: int, out: str) -> None:
    """The --scale benchmark (see the module docstring)."""
    import os
    from pathlib import Path

    from evtsync.synth import SynthConfig, synthesize

    rows = []
    for n in iterations:
        folder = Path(out) / f"r{ranks}-it{n}"
        if not (folder / "ground_truth.json").is_file():
            t0 = time.perf_counter()
            synthesize(SynthConfig.build(ranks=ranks, iterations=n, seed=5), folder)
            print(f"synth {ranks} ranks x {n} iterations: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        traces = folder / "traces"
        sizes = [p.stat().st_size for p in traces.iterdir()]
        cache = str(folder / "cache")
        base = measure_attribution(str(traces), "in-process", jobs, cache)
        tasks = measure_attribution(str(traces), "tasks", jobs, cache)
        row = {"ranks": ranks, "iterations": n, "mb_per_rank": sum(sizes) / len(sizes) / 1e6,
               "total_mb": sum(sizes) / 1e6, "load_avg": os.getloadavg()[0], "in_process": base, "tasks": tasks,
               "identical": base["table_sha256"] == tasks["table_sha256"]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| ranks × MB/rank | total MB | in-process: time, peak | tasks (pool of "
          f"{jobs}): time, caller peak, largest worker peak | worker peak / MB per rank | identical |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        b, t = r["in_process"], r["tasks"]
        worker = max(t["worker_peak_rss_mib"]) if t["worker_peak_rss_mib"] else float("nan")
        print(f"| {r['ranks']} × {r['mb_per_rank']:.0f} | {r['total_mb']:.0f} | {b['wall_s']:.0f} s, "
              f"{b['caller_peak_rss_mib']:.0f} MiB | {t['wall_s']:.0f} s, {t['caller_peak_rss_mib']:.0f} MiB, "
              f"{worker:.0f} MiB | {worker / r['mb_per_rank']:.1f} | {r['identical']} |")


def _proc_children(pid: int) -> list[int]:
    import os

    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def _proc_memory(pid: int) -> tuple[float, float, str] | None:
    """(VmHWM, VmRSS in MiB, command line) of one process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")[:160]
        return int(fields["VmHWM"].split()[0]) / 1024, int(fields["VmRSS"].split()[0]) / 1024, cmd
    except (OSError, KeyError):
        return None


def run_with_tree_peaks(cmd: list[str], interval_s: float = 0.5) -> dict:
    """Run ``cmd``; every ``interval_s`` read VmHWM (the kernel's own peak RSS) of every process
    in its tree — pool workers are children of a fork server, so ``ru_maxrss`` of the caller
    does not see them. Linux only. Returns the per-process peaks, the wall time and the load."""
    import os

    t0 = time.time()
    load0 = os.getloadavg()
    proc = subprocess.Popen(cmd)
    peaks: dict[int, dict] = {}
    while proc.poll() is None:
        todo, seen = [proc.pid], set()
        while todo:
            pid = todo.pop()
            if pid in seen:
                continue
            seen.add(pid)
            mem = _proc_memory(pid)
            if mem:
                row = peaks.setdefault(pid, {"pid": pid, "cmd": mem[2], "first_seen_s": round(time.time() - t0, 1),
                                             "peak_hwm_mib": 0.0})
                row["peak_hwm_mib"] = max(row["peak_hwm_mib"], mem[0])
                row["last_seen_s"] = round(time.time() - t0, 1)
            todo += _proc_children(pid)
        time.sleep(interval_s)
    return {"command": cmd, "returncode": proc.returncode, "wall_s": time.time() - t0, "load_at_start": load0,
            "load_at_end": os.getloadavg(), "processes": sorted(peaks.values(), key=lambda r: r["first_seen_s"])}


def cli_study(iterations: int, ranks: int, jobs: int, out: str) -> None:
    """The --cli benchmark: ``evtsync attribute`` itself (a pool of ``jobs``) on ``ranks`` synthetic
    ranks of ``iterations`` iterations (9,000: ~1.0 GB per rank), every process's peak RSS."""
    from pathlib import Path

    from evtsync.synth import SynthConfig, synthesize

    folder = Path(out) / f"r{ranks}-it{iterations}"
    if not (folder / "ground_truth.json").is_file():
        synthesize(SynthConfig.build(ranks=ranks, iterations=iterations, seed=5), folder)
    result = run_with_tree_peaks([sys.executable, "-m", "evtsync", "attribute", str(folder / "traces"),
                                  "-o", str(Path(out) / "attr.parquet"), "--jobs", str(jobs),
                                  "--cache", str(Path(out) / "cache")])
    print(json.dumps(result, indent=1))
    for row in result["processes"]:
        print(f"{row['pid']:>8} {row['peak_hwm_mib']:8.0f} MiB  {row['cmd'][:100]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--baseline-events", type=int, default=100_000)
    parser.add_argument("--scale", default=None, metavar="ITERATIONS[,...]",
                        help="multi-rank attribution memory benchmark at these iteration counts")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--out", default="/tmp/bench_critpath")
    parser.add_argument("--cli", type=int, default=None, metavar="ITERATIONS",
                        help="run `evtsync attribute` on --ranks synthetic ranks of ITERATIONS iterations "
                             "(9000: ~1 GB each) in --out with a pool of --jobs; peak RSS of every process")
    args = parser.parse_args()
    if args.cli:
        cli_study(args.cli, args.ranks, args.jobs, args.out)
        return
    if args.scale:
        scale([int(x) for x in args.scale.split(",")], args.ranks, args.jobs, args.out)
        return
    big = measure("evtsync", args.events)
    small = measure("evtsync", args.baseline_events)
    base = measure("baseline", args.baseline_events)
    print(json.dumps({"evtsync_large": big, "evtsync_small": small, "baseline_small": base}, indent=2))
    print(f"\n{big['events']:,} events: DAG {big['dag_s']:.2f} s + walk {big['walk_s']:.2f} s = "
          f"{big['total_s']:.2f} s, peak RSS {big['peak_rss_mib']:.0f} MiB "
          f"({big['nodes']:,} nodes, {big['edges']:,} edges, {big['collectives']:,} walks, "
          f"{big['path_steps']:,} path steps)")
    print(f"{small['events']:,} events: evtsync {small['total_s']:.3f} s vs plain-Python baseline "
          f"{base['total_s']:.3f} s (ratio {base['total_s'] / small['total_s']:.1f}x); peak RSS "
          f"{small['peak_rss_mib']:.0f} vs {base['peak_rss_mib']:.0f} MiB")


if __name__ == "__main__":
    main()
