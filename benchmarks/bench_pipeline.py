"""Whole-pipeline benchmark (issue 7): ``evtsync tax`` on synthetic studies, by backend.

Run by hand (not a test)::

    .venv/bin/python benchmarks/bench_pipeline.py                       # defaults below
    .venv/bin/python benchmarks/bench_pipeline.py --many-ranks 256 --big-ranks 64 --big-mb 16   # quicker

1. Many small ranks: a ``--many-ranks`` study (TP 8, 2 iterations, 2 layers, ~0.25 MB per rank) through
   ``evtsync tax`` in-process (``--jobs 1``), with no option (in-process below 256 MB of
   traces) and with a pool of 2 processes; seconds per rank, and the part of the run that is
   reading vs the rest (Python API timers).
2. Big ranks: a ``--big-ranks`` x ``--big-mb`` MB study through ``evtsync tax`` in-process
   (``--jobs 1``), with 2 pool processes (``--jobs 2``) and on a local Dask cluster of 2
   workers (``--workers 2``), all without the cache; then twice with ``--cache`` (a cold run that writes the cache and a
   warm run that reads it). The Dask run must print the same summary as the others.

Each CLI run is a fresh process under ``/usr/bin/time -v``: wall time, CPU time of the
process tree (user + sys of reaped children; the pool's workers are children of the fork
server, so their CPU is not in it) and the peak RSS of the largest process.
Studies are written by ``evtsync synth`` under ``--workdir`` (default /tmp/evtsync-bench).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

#: Synth iterations per MB of one rank file (2 layers; measured on a 4-rank TP 4 job).
ITERATIONS_PER_MB = 9342 / 1031


def evtsync_cmd() -> list[str]:
    return [sys.executable, "-m", "evtsync"]


def timed(cmd: list[str], env: dict[str, str] | None = None) -> dict:
    """Run ``cmd`` under /usr/bin/time -v; wall, CPU (tree) and peak RSS, plus stdout."""
    full = ["/usr/bin/time", "-v", *cmd]
    t0 = time.perf_counter()
    proc = subprocess.run(full, capture_output=True, text=True, check=False,
                          env={**os.environ, "EVTSYNC_QUIET": "1", **(env or {})})
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")

    def field(name: str) -> float:
        match = re.search(rf"{re.escape(name)}: ([\d.:]+)", proc.stderr)
        return float(match.group(1)) if match else float("nan")

    return {"wall_s": wall, "cpu_s": field("User time (seconds)") + field("System time (seconds)"),
            "peak_rss_mb": field("Maximum resident set size (kbytes)") / 1024, "stdout": proc.stdout}


def study(workdir: Path, ranks: int, mb: float) -> Path:
    """A synthetic study of ``ranks`` ranks, about ``mb`` MB per rank (reused when present)."""
    from evtsync.synth import SynthConfig, synthesize

    out = workdir / f"study-{ranks}x{mb:g}mb"
    traces = out / "traces"
    if traces.is_dir() and len(list(traces.glob("*.json"))) == ranks:
        return traces
    shutil.rmtree(out, ignore_errors=True)
    iterations = max(2, round(mb * ITERATIONS_PER_MB))
    print(f"writing {ranks} ranks x ~{mb:g} MB ({iterations} iterations) in {out} ...", file=sys.stderr)
    cfg = SynthConfig.build(ranks=ranks, tp=8, iterations=iterations, seed=3)
    return synthesize(cfg, out).traces_dir


def summary_of(stdout: str) -> object:
    return json.loads(stdout)["summary"]


def many_ranks(workdir: Path, ranks: int) -> dict:
    from evtsync.sync.tax import tax_from_traces
    from evtsync.trace.traceset import load_traces

    traces_dir = study(workdir, ranks, 0.12)
    size_mb = sum(p.stat().st_size for p in traces_dir.iterdir()) / 1e6
    out: dict = {"ranks": ranks, "total_mb": size_mb}
    for label, extra in (("in-process (--jobs 1)", ["--jobs", "1"]),
                         ("default (no option)", []), ("pool, 2 processes", ["--jobs", "2"])):
        res = timed([*evtsync_cmd(), "tax", str(traces_dir), "--no-cache", "--json", *extra])
        res["s_per_rank"] = res["wall_s"] / ranks
        out[label] = {k: v for k, v in res.items() if k != "stdout"}
        print(f"  {ranks} ranks, {label}: {res['wall_s']:.1f} s wall, {res['s_per_rank'] * 1000:.1f} ms "
              "per rank", file=sys.stderr)
    t0 = time.process_time()
    traces = load_traces(traces_dir, jobs=1)
    t_read = time.process_time() - t0
    tax_from_traces(traces)
    t_tax = time.process_time() - t0 - t_read
    out["api_in_process"] = {"read_cpu_s": t_read, "align_tax_cpu_s": t_tax,
                             "read_ms_per_rank": t_read / ranks * 1000,
                             "align_tax_ms_per_rank": t_tax / ranks * 1000}
    return out


def big_ranks(workdir: Path, ranks: int, mb: float) -> dict:
    traces_dir = study(workdir, ranks, mb)
    size_mb = sum(p.stat().st_size for p in traces_dir.iterdir()) / 1e6
    out: dict = {"ranks": ranks, "mb_per_rank": size_mb / ranks, "total_mb": size_mb}
    base = [*evtsync_cmd(), "tax", str(traces_dir), "--json"]
    runs = {
        "in-process (--jobs 1)": [*base, "--no-cache", "--jobs", "1"],
        "pool, 2 processes (--jobs 2)": [*base, "--no-cache", "--jobs", "2"],
        "Dask local, 2 workers (--workers 2)": [*base, "--no-cache", "--workers", "2"],
    }
    cache = workdir / "bench-cache"
    shutil.rmtree(cache, ignore_errors=True)
    runs["cache cold (writes), 2 processes"] = [*base, "--cache", str(cache), "--jobs", "2"]
    runs["cache warm (reads), 2 processes"] = [*base, "--cache", str(cache), "--jobs", "2"]
    reference = None
    for label, cmd in runs.items():
        res = timed(cmd)
        summary = summary_of(res["stdout"])
        if reference is None:
            reference = summary
        res["same_summary_as_first"] = summary == reference
        res["mb_per_s_wall"] = size_mb / res["wall_s"]
        out[label] = {k: v for k, v in res.items() if k != "stdout"}
        print(f"  {ranks}x{mb:g} MB, {label}: {res['wall_s']:.1f} s wall, {res['cpu_s']:.1f} s CPU, "
              f"peak {res['peak_rss_mb']:.0f} MB, same result: {res['same_summary_as_first']}",
              file=sys.stderr)
    shutil.rmtree(cache, ignore_errors=True)
    return out


def markdown(report: dict) -> str:
    """The results as the tables of docs/performance/reading.md."""
    lines = []
    if "many_ranks" in report:
        m = report["many_ranks"]
        lines += [f"**{m['ranks']} ranks, {m['total_mb']:.0f} MB in all**", "",
                  "| run | wall s | CPU s | s per rank (wall) | peak RSS MB |", "|---|---|---|---|---|"]
        for label, r in m.items():
            if isinstance(r, dict) and "wall_s" in r:
                lines.append(f"| {label} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['s_per_rank']:.3f} | "
                             f"{r['peak_rss_mb']:.0f} |")
        api = m["api_in_process"]
        lines += ["", f"In-process API: reading {api['read_ms_per_rank']:.1f} ms per rank, alignment + tax "
                      f"{api['align_tax_ms_per_rank']:.1f} ms per rank (CPU).", ""]
    if "big_ranks" in report:
        b = report["big_ranks"]
        lines += [f"**{b['ranks']} ranks x {b['mb_per_rank']:.1f} MB ({b['total_mb']:.0f} MB in all)**", "",
                  "| run | wall s | CPU s (tree) | MB/s (wall) | peak RSS MB (largest process) | same summary |",
                  "|---|---|---|---|---|---|"]
        for label, r in b.items():
            if isinstance(r, dict) and "wall_s" in r:
                lines.append(f"| {label} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['mb_per_s_wall']:.0f} | "
                             f"{r['peak_rss_mb']:.0f} | {r['same_summary_as_first']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--many-ranks", type=int, default=256)
    parser.add_argument("--big-ranks", type=int, default=64)
    parser.add_argument("--big-mb", type=float, default=200.0,
                        help="MB per rank of the big study (default 200, issue 7: 12.9 GB of JSON for "
                             "64 ranks, ~7 minutes to write; needs ~15 GB of disk under --workdir)")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/evtsync-bench"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    report: dict = {"date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                    "python": platform.python_version()}
    if args.many_ranks:
        report["many_ranks"] = many_ranks(args.workdir, args.many_ranks)
    if args.big_ranks:
        report["big_ranks"] = big_ranks(args.workdir, args.big_ranks, args.big_mb)
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text)
    print(text)
    print(markdown(report))


if __name__ == "__main__":
    main()
