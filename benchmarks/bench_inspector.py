"""NCCL Inspector logs at scale (issue 32): many synthetic log files through the tax.

Run by hand (not a test)::

    .venv/bin/python benchmarks/bench_inspector.py                       # 1,000 files x 1 MB
    .venv/bin/python benchmarks/bench_inspector.py --files 1000 --mb 0.25

The job (written under ``--workdir``, default /tmp/evtsync-bench-inspector, reused when
present): ``--files`` processes (ranks), all in one world communicator (AllReduce) and in
TP communicators of 8 consecutive ranks (AllGather), one ``<host>-pid<pid>.log`` each, in
the plugin's non-verbose v4.0 format, about ``--mb`` MB per file. Execution times are
drawn per rank and collective, so every collective has a tax and a straggler.

Each method runs in a fresh process, which reports the CPU seconds of its work alone
(imports excluded) and its peak RSS (``ru_maxrss``):

- ``json.loads floor``: ``json.loads`` of every line of every file, no table, no tax (the way
  NVIDIA's exporter reads the logs, without its pandas step): the baseline;
- ``evtsync read``: ``load_traces(folder, jobs=1)``: every record into the logged table;
- ``evtsync read+tax``: the same plus ``tax_from_traces`` (matching by communicator and
  sequence number, the tax tables) and ``tax_summary``: the whole-table path;
- ``evtsync stream tax``: :func:`evtsync.sync.logtax.stream_tax` (what ``evtsync tax LOGDIR`` runs
  without ``-o``): the logs read in lockstep, each collective taxed and dropped once every
  member reported it, no per-rank rows kept, then ``tax_summary``;
- ``evtsync stream tax+ranks``: the same keeping the per-rank rows (``-o``, ``run``);
- ``imports``: the imports only (the RSS floor the others include).

MB/s per core = MB of log text / CPU seconds of one single-threaded process.

``--whole-process N`` (issue 48) instead times what a user runs, as whole processes (CPU of
the process, user + system, from ``wait4``; start-up and imports included), interleaved N
times: ``benchmarks/plain_inspector_tax.py LOGDIR`` (the plain stdlib script: max - min per
(communicator, coll_sn)), ``python -m evtsync tax LOGDIR``, and the interpreter importing what
``evtsync tax`` imports (the RSS floor the peak is compared with: without pandas since issue 48's
seventh round, when a clean job's tax no longer imports it; with pandas in the earlier rounds)::

    .venv/bin/python benchmarks/bench_inspector.py --files 256 --mb 0.93 --whole-process 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]

_TEMPLATE = ('{{"header":{{"id":"{cid}","comm_name":"{name}","rank":{local},"n_ranks":{n},"nnodes":{nodes}}},'
             '"metadata":{{"inspector_output_format_version":"v4.0","git_rev":"","rec_mechanism":"profiler_plugin",'
             '"dump_timestamp_us":{dump},"hostname":"{host}","pid":{pid}}},'
             '"coll_perf":{{"coll":"{coll}","coll_sn":{sn},"coll_msg_size_bytes":{size},"coll_exec_time_us":{us},'
             '"coll_timing_source":"kernel_gpu","coll_algobw_gbs":{bw:.6f},"coll_busbw_gbs":{bw:.6f}}}}}\n')


def _draws(n_files: int, n_sn: int, seed: int) -> tuple:
    """The execution times (µs) of every rank: world AllReduce and TP AllGather, per step."""
    import numpy as np

    rng = np.random.default_rng(seed)
    world = rng.gamma(4.0, 25.0, size=(n_sn, n_files)).astype(np.int64) + 3000
    tp = rng.gamma(2.0, 10.0, size=(n_sn, n_files)).astype(np.int64) + 400
    return world, tp


def _steps(n_files: int, mb: float) -> int:
    per_record = len(_TEMPLATE.format(cid="0x0123456789abcd", name="default_pg", local=999, n=n_files, nodes=125,
                                      dump=1748030377748202, host="node-0000", pid=100000, coll="AllReduce",
                                      sn=99999, size=1 << 27, us=61974, bw=277.2))
    return max(1, int(mb * 1e6 / per_record / 2))  # each step: one world AllReduce, one TP AllGather


def true_world_tau_median(n_files: int, mb: float, seed: int = 0) -> float:
    """The median over steps of max - min of the world AllReduce times written (the truth)."""
    import numpy as np

    world, _ = _draws(n_files, _steps(n_files, mb), seed)
    return float(np.median(world.max(axis=1) - world.min(axis=1)))


def write_job(folder: Path, n_files: int, mb: float, seed: int = 0) -> int:
    """The logs of one job; returns the total bytes."""
    folder.mkdir(parents=True, exist_ok=True)
    marker = folder / ".complete"
    if marker.exists() and json.loads(marker.read_text()) == [n_files, mb, seed]:
        return sum(p.stat().st_size for p in folder.glob("*.log"))
    for old in folder.glob("*.log"):
        old.unlink()
    n_sn = _steps(n_files, mb)
    world, tp = _draws(n_files, n_sn, seed)
    total = 0
    for r in range(n_files):
        host, pid = f"node-{r // 8:04d}", 100000 + r
        tp_id = f"0x{0xbeef000000 + r // 8:014x}"
        lines = []
        for sn in range(n_sn):
            lines.append(_TEMPLATE.format(cid="0x00000000c0ffee", name="default_pg", local=r, n=n_files,
                                          nodes=(n_files + 7) // 8, dump=1748030377748202 + sn * 5000, host=host,
                                          pid=pid, coll="AllReduce", sn=sn, size=1 << 27, us=int(world[sn, r]),
                                          bw=(1 << 27) / world[sn, r] / 1e3))
            lines.append(_TEMPLATE.format(cid=tp_id, name="tp", local=r % 8, n=8, nodes=1,
                                          dump=1748030377748202 + sn * 5000 + 10, host=host, pid=pid,
                                          coll="AllGather", sn=sn, size=1 << 22, us=int(tp[sn, r]),
                                          bw=(1 << 22) / tp[sn, r] / 1e3))
        data = "".join(lines).encode()
        (folder / f"{host}-pid{pid}.log").write_bytes(data)
        total += len(data)
    marker.write_text(json.dumps([n_files, mb, seed]))
    return total


_CHILD = r'''
import json, os, resource, sys, time
method, folder = sys.argv[1], sys.argv[2]
if method != "json.loads floor":
    import pandas, numpy, msgspec
    from evtsync.trace.traceset import load_traces
    from evtsync.sync.tax import tax_from_traces, tax_summary
    from evtsync.trace.readers import inspector  # noqa: F401
    from evtsync.sync.logtax import inspector_files, stream_tax
files = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".log"))
out = {}
t0, w0 = time.process_time(), time.perf_counter()
if method == "json.loads floor":
    n = 0
    for f in files:
        with open(f, "rb") as fh:
            for line in fh:
                json.loads(line)
                n += 1
    out["records"] = n
elif method.startswith("evtsync stream"):
    got = stream_tax(inspector_files(folder), keep_ranks=method.endswith("+ranks"))
    summary = tax_summary(got.tables)
    out["collectives"] = len(got.tables.collectives)
    out["invalid"] = int((~got.tables.collectives["valid"]).sum())
    out["tau_median_world_us"] = float(summary.set_index("pg").loc["0x00000000c0ffee", "tau_median_us"])
    out["rank_rows"] = len(got.tables.ranks)
    out.update({k: got.stats[k] for k in ("rounds", "peak_open_records")})
elif method.startswith("evtsync"):
    traces = load_traces(folder, jobs=1)
    out["records"] = len(traces.logged)
    out["read_cpu_s"] = time.process_time() - t0
    if method == "evtsync read+tax":
        alignment, tax = tax_from_traces(traces)
        summary = tax_summary(tax)
        out["collectives"] = len(tax.collectives)
        out["invalid"] = int((~tax.collectives["valid"]).sum())
        out["tau_median_world_us"] = float(summary.set_index("pg").loc["0x00000000c0ffee", "tau_median_us"])
out["cpu_s"] = time.process_time() - t0
out["wall_s"] = time.perf_counter() - w0
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
'''


def run_method(method: str, folder: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _CHILD, method, str(folder)], capture_output=True, text=True,
                          env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def process_usage(cmd: list[str], env: dict[str, str] | None = None, cwd: str | None = None) -> dict:
    """CPU (user + system, the process and the children it reaped) and peak RSS of one child
    process, from ``wait4``; ``env`` default: this environment with this checkout on PYTHONPATH."""
    env = {**os.environ, "PYTHONPATH": str(REPO)} if env is None else env
    t = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    _, status, usage = os.wait4(child.pid, 0)
    err = child.stderr.read().decode() if child.stderr else ""
    if status:
        raise SystemExit(f"{cmd} failed: {err[-2000:]}")
    return {"cpu_s": usage.ru_utime + usage.ru_stime, "peak_rss_mb": usage.ru_maxrss / 1024,
            "wall_s": time.perf_counter() - t}


def whole_process(folder: Path, total: int, reps: int, baseline: Path | None = None) -> None:
    """Interleaved whole processes: the plain script, ``evtsync tax``, the imports (see the
    docstring); ``baseline``: also ``evtsync tax`` of that checkout (on PYTHONPATH instead of this one)."""
    import statistics

    cmds = {"plain script": [sys.executable, str(HERE.parent / "plain_inspector_tax.py"), str(folder)],
            "evtsync tax": [sys.executable, "-m", "evtsync", "tax", str(folder)],
            # what `evtsync tax` imports: no pandas since issue 48's seventh round (a clean job's
            # tax is printed from NumPy arrays); the earlier rounds' floor imported it (108 MB)
            "imports": [sys.executable, "-c", "import evtsync.cli.tax, evtsync.sync.logtax, evtsync.sync.tax, "
                        "evtsync.trace.readers.inspector"]}
    envs: dict[str, dict[str, str] | None] = dict.fromkeys(cmds)
    if baseline is not None:
        cmds["baseline tax"] = cmds["evtsync tax"]
        envs["baseline tax"] = {**os.environ, "PYTHONPATH": str(baseline)}
    runs: dict[str, list[dict]] = {name: [] for name in cmds}
    for rep in range(reps):
        for name, cmd in cmds.items():
            # (python -m puts the working folder first on the path: the baseline runs in its checkout)
            got = process_usage(cmd, env=envs[name], cwd=str(baseline) if name == "baseline tax" else None)
            runs[name].append(got)
            print(f"{rep}: {name:>12}: {json.dumps(got)} load {os.getloadavg()[0]:.2f}", flush=True)
    plain = [r["cpu_s"] for r in runs["plain script"]]
    ours = [r["cpu_s"] for r in runs["evtsync tax"]]
    ratios = [p / o for p, o in zip(plain, ours, strict=True)]
    floor = statistics.median(r["peak_rss_mb"] for r in runs["imports"])
    peak = max(r["peak_rss_mb"] for r in runs["evtsync tax"])
    print(f"# CPU plain / evtsync tax, per interleaved pair: {', '.join(f'{r:.2f}' for r in ratios)} "
          f"(median {statistics.median(ratios):.2f}x); plain {statistics.median(plain):.2f} s, evtsync "
          f"{statistics.median(ours):.2f} s (median); {total / 1e6 / statistics.median(ours):.1f} MB/s per core "
          "end to end")
    print(f"# peak RSS evtsync tax {peak:.0f} MB = {peak - floor:.0f} MB above the imports' {floor:.0f} MB; plain "
          f"script {max(r['peak_rss_mb'] for r in runs['plain script']):.0f} MB")
    if baseline is not None:
        base = [r["cpu_s"] for r in runs["baseline tax"]]
        print(f"# CPU plain / baseline ({baseline}) tax per pair: "
              f"{', '.join(f'{p / b:.2f}' for p, b in zip(plain, base, strict=True))}; baseline / this "
              f"{statistics.median(b / o for b, o in zip(base, ours, strict=True)):.2f}x (median); baseline peak RSS "
              f"{max(r['peak_rss_mb'] for r in runs['baseline tax']):.0f} MB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--mb", type=float, default=1.0, help="MB of log per file (default 1)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/evtsync-bench-inspector"))
    parser.add_argument("--methods", default="imports,json.loads floor,evtsync read,evtsync read+tax,"
                        "evtsync stream tax,evtsync stream tax+ranks")
    parser.add_argument("--whole-process", type=int, default=0, metavar="N",
                        help="time the plain script and `evtsync tax` as whole processes, N interleaved pairs")
    parser.add_argument("--baseline", type=Path, default=None, metavar="CHECKOUT",
                        help="with --whole-process: also time `evtsync tax` of this checkout, interleaved")
    args = parser.parse_args()
    folder = args.workdir / f"{args.files}x{args.mb:g}MB"
    t = time.perf_counter()
    total = write_job(folder, args.files, args.mb)
    print(f"# {args.files} files, {total / 1e6:.1f} MB of logs in {folder} ({time.perf_counter() - t:.1f} s to write "
          "or reuse)")
    print(f"# {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
          f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load before {os.getloadavg()[0]:.2f}")
    if args.whole_process:
        whole_process(folder, total, args.whole_process, args.baseline)
        print(f"# load after {os.getloadavg()[0]:.2f}")
        return
    results = {}
    for method in args.methods.split(","):
        if method == "imports":
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            code = ("import resource, pandas, numpy, msgspec; from evtsync.trace.traceset import load_traces; "
                    "from evtsync.sync.tax import tax_from_traces; "
                    "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)")
            rss = float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                                       check=True).stdout)
            results[method] = {"peak_rss_mb": rss}
        else:
            results[method] = run_method(method, folder)
            results[method]["mb_per_cpu_s"] = total / 1e6 / results[method]["cpu_s"]
        print(f"{method:>20}: {json.dumps(results[method])}", flush=True)
    truth = true_world_tau_median(args.files, args.mb)
    for method in ("evtsync read+tax", "evtsync stream tax", "evtsync stream tax+ranks"):
        if method in results:
            print(f"# {method}: world AllReduce median tau_max measured {results[method]['tau_median_world_us']:.1f} "
                  f"us, written {truth:.1f} us")
    whole = results.get("evtsync read+tax")
    if whole:
        for method in ("evtsync stream tax", "evtsync stream tax+ranks"):
            if method in results:
                print(f"# {method}: peak RSS {results[method]['peak_rss_mb']:.0f} MB = "
                      f"{results[method]['peak_rss_mb'] / whole['peak_rss_mb']:.2f}x the whole-table path's "
                      f"{whole['peak_rss_mb']:.0f} MB; CPU {results[method]['cpu_s'] / whole['cpu_s']:.2f}x")
    base = results.get("json.loads floor")
    if base:
        for method in ("evtsync read", "evtsync read+tax", "evtsync stream tax", "evtsync stream tax+ranks"):
            if method in results:
                print(f"# {method}: {base['cpu_s'] / results[method]['cpu_s']:.2f}x the json.loads floor's speed")
    print(f"# load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
