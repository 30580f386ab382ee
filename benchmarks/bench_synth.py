"""Benchmark of ``evtsync synth``: streaming writer vs building the whole trace in memory.

Run by hand (not a test):  .venv/bin/python benchmarks/bench_synth.py [--iterations N] [--big-mb 1024]

1. the same 4-rank layout (rank 0 written) at ``--iterations`` is written twice, each in a
   fresh process: by ``evtsync synth`` (streamed, one iteration in memory) and by the common
   approach (collect every event in one list, then ``json.dump`` the whole dict). Wall time,
   CPU time and peak RSS of each, and their ratios, are printed;
2. with ``--big-mb``, one rank file of about that size is written by ``evtsync synth`` alone
   (the synthetic 1 GB rank file the reader benchmark needs), with its time and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import json, resource, sys, time
from pathlib import Path
from evtsync.synth import SynthConfig, synthesize
from evtsync.synth.timeline import Simulation
mode, out, iterations = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
cfg = SynthConfig.build(ranks=4, tp=4, iterations=iterations, write_ranks=(0,), seed=1)
t0, c0 = time.perf_counter(), time.process_time()
if mode == "stream":
    res = synthesize(cfg, out)
    size = res.traces[0].stat().st_size
else:
    sim = Simulation(cfg)
    events = []
    sim.run(lambda rank, it, ev: events.extend(ev))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "rank-0.json"
    with open(path, "w") as fh:
        json.dump({"schemaVersion": 1, "traceEvents": events}, fh)
    size = path.stat().st_size
print(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "bytes": size}))
"""


def child(mode: str, out: Path, iterations: int) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(out), str(iterations)],
                          capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=400, help="iterations of the comparison (default 400)")
    parser.add_argument("--big-mb", type=int, default=0, help="also write one rank file of about this many MB")
    args = parser.parse_args()
    print(f"machine: {os.uname().machine}, {os.cpu_count()} cores; date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    with tempfile.TemporaryDirectory() as tmp:
        ours = child("stream", Path(tmp) / "stream", args.iterations)
        base = child("inmemory", Path(tmp) / "inmemory", args.iterations)
    mb = ours["bytes"] / 1e6
    print(f"comparison at {args.iterations} iterations, rank file {mb:.1f} MB:")
    for name, r in (("evtsync synth (streamed)", ours), ("in-memory list + json.dump", base)):
        print(f"  {name:28s} wall {r['wall_s']:7.1f} s  cpu {r['cpu_s']:7.1f} s  peak RSS {r['peak_rss_mb']:7.0f} MB")
    print(f"  ratio: cpu {base['cpu_s'] / ours['cpu_s']:.2f}x faster, peak RSS {ours['peak_rss_mb'] / base['peak_rss_mb']:.2f} of baseline")
    if args.big_mb:
        iterations = int(args.iterations * args.big_mb / mb) + 1
        with tempfile.TemporaryDirectory() as tmp:
            big = child("stream", Path(tmp) / "big", iterations)
        print(f"big file: {iterations} iterations, {big['bytes'] / 1e6:.0f} MB in wall {big['wall_s']:.0f} s, "
              f"cpu {big['cpu_s']:.0f} s, peak RSS {big['peak_rss_mb']:.0f} MB")
    print(f"(this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
