"""Time `evtsync run` on the bundled demo: the first run, then a rerun that reuses every stage.

    .venv/bin/python benchmarks/run_demo.py [OUT_DIR]

Prints the wall time of each run, the ratio first/rerun, and each stage's seconds from the
manifest. The first run is the number `make demo` users wait for; the rerun measures the
cost of the cache checks (hashing every trace file and output).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from evtsync.run import RunOptions, run_pipeline, stage_table


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="evtsync-demo-")) / "demo"
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
