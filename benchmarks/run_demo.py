"""Time `evtsync run` on the bundled demo: the first run, then a rerun that reuses every stage.

    .venv/bin/python benchmarks/run_demo.py [OUT_DIR]
    .venv/bin/python benchmarks/run_demo.py --cli --rounds 2 [OUT_DIR]   # issue 16: the command itself

Default: prints the wall time of each run, the ratio first/rerun, and each stage's seconds from
the manifest. The first run is the number `make demo` users wait for; the rerun measures the
cost of the cache checks (hashing every trace file and output).

``--cli``: the `make demo` command (`evtsync run --out DIR -q`) as a fresh process, timed from
start to exit, alternately with the default `--jobs` (the fits side by side in a pool) and with
`--jobs 1` (every stage in one process, the same-run baseline), ``--rounds`` times each; the
load average before and after each run, the ratio of the medians.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from evtsync.pipeline import RunOptions, run_pipeline, stage_table


def _cli(out: Path, rounds: int) -> None:
    evtsync = [sys.executable, "-m", "evtsync"]
    walls: dict[str, list[float]] = {"default --jobs": [], "--jobs 1": []}
    for _ in range(rounds):
        for label, extra in (("default --jobs", []), ("--jobs 1", ["--jobs", "1"])):
            shutil.rmtree(out, ignore_errors=True)
            load = os.getloadavg()[0]
            start = time.perf_counter()
            subprocess.run([*evtsync, "run", "--out", str(out), "-q", *extra], check=True,
                           stdout=subprocess.DEVNULL)
            wall = time.perf_counter() - start
            walls[label].append(wall)
            print(f"{label:15s} {wall:6.1f} s wall   load {load:.2f} -> {os.getloadavg()[0]:.2f}", flush=True)
    med = {k: statistics.median(v) for k, v in walls.items()}
    print(f"median: default {med['default --jobs']:.1f} s, --jobs 1 {med['--jobs 1']:.1f} s; "
          f"ratio --jobs 1 / default {med['--jobs 1'] / med['default --jobs']:.2f}x")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=None)
    parser.add_argument("--cli", action="store_true", help="time the `make demo` command, default --jobs vs --jobs 1")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="evtsync-demo-")) / "demo"
    if args.cli:
        _cli(out, args.rounds)
        return 0
    if out.exists():
        shutil.rmtree(out)
    start = time.perf_counter()
    run = run_pipeline(RunOptions(out=out))
    first = time.perf_counter() - start
    table = stage_table(run.manifest)
    start = time.perf_counter()
    run_pipeline(RunOptions(out=out))
    rerun = time.perf_counter() - start
    print(table.to_string(index=False))
    print(f"first run: {first:.1f} s wall; rerun (every stage reused): {rerun:.2f} s; ratio {first / rerun:.0f}x")
    print(f"run folder: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
