"""Reading an Nsight Systems SQLite export (issue 48, item 3) against the plain query.

Run by hand (not a test)::

    EVTSYNC_SHARED=/work/shared .venv/bin/python benchmarks/bench_nsys.py --copies 200 --reps 3

The export: the real ``perlmutter-cloverleaf-cuda.sqlite`` of the shared data (1,312 kernels,
3,048 runtime calls, 279 memcpys) with its activity rows repeated ``--copies`` times (each
copy shifted in time past the one before, correlation ids offset; StringIds unchanged), written
once under ``--workdir``. Each method runs in a fresh process and reports the CPU seconds of
its work alone (imports done before the clock), best of ``--reps`` runs in that process:

- ``sqlite3 + pandas``: ``pandas.read_sql_query`` of the kernels joined with their names
  (start, end, device, stream, correlation id, name): what a user would write for the kernels;
- ``evtsync decode``: :func:`evtsync.trace.readers.nsys.decode_export` (kernels, memcpys,
  memsets, runtime calls, NVTX, header: every table the rank tables need);
- ``evtsync read``: ``NSYS.read(path, rank=0)``: the decode plus the rank tables.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
ACTIVITY = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_MEMCPY",
            "CUPTI_ACTIVITY_KIND_MEMSET")


def write_export(source: Path, target: Path, copies: int) -> Path:
    """``source`` with its activity rows repeated ``copies`` times (see the module docstring)."""
    if target.exists():
        return target
    tmp = target.with_name(target.name + ".tmp")
    shutil.copyfile(source, tmp)
    conn = sqlite3.connect(tmp)
    span = max(conn.execute(f'SELECT MAX("end") - MIN(start) FROM {t}').fetchone()[0] or 0 for t in ACTIVITY
               if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone()) + 1
    corr = max(conn.execute(f"SELECT MAX(correlationId) FROM {t}").fetchone()[0] or 0 for t in ACTIVITY
               if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone()) + 1
    for table in ACTIVITY:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
            continue
        cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
        conn.execute(f"CREATE TEMP TABLE base AS SELECT * FROM {table}")
        for k in range(1, copies):
            values = ", ".join(f'"{c}" + {k * span}' if c in ("start", "end") else
                               f'"{c}" + {k * corr}' if c == "correlationId" else f'"{c}"' for c in cols)
            names = ", ".join(f'"{c}"' for c in cols)
            conn.execute(f"INSERT INTO {table} ({names}) SELECT {values} FROM base")
        conn.execute("DROP TABLE base")
    conn.commit()
    conn.close()
    os.replace(tmp, target)
    return target


_CHILD = r'''
import json, sys, time
method, path = sys.argv[1], sys.argv[2]
import sqlite3, numpy, pandas
from evtsync.trace.readers.nsys import NSYS, decode_export
SQL = ('SELECT k.start, k."end", k.deviceId, k.streamId, k.correlationId, s.value AS name '
       'FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName')
def work():
    if method == "sqlite3 + pandas":
        conn = sqlite3.connect(path)
        n = len(pandas.read_sql_query(SQL, conn))
        conn.close()
        return n
    if method == "evtsync decode":
        return len(decode_export(path).columns["gpu"]["ts"])
    return len(NSYS.read(path, rank=0).kernels)
best = None
for _ in range(int(sys.argv[3])):
    t0 = time.process_time()
    n = work()
    cpu = time.process_time() - t0
    best = cpu if best is None else min(best, cpu)
print(json.dumps({"cpu_s": best, "rows": n}))
'''


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--copies", type=int, default=200)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds of all methods")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/evtsync-bench-nsys"))
    args = parser.parse_args()
    shared = Path(os.environ.get("EVTSYNC_SHARED", "/work/shared"))
    args.workdir.mkdir(parents=True, exist_ok=True)
    path = write_export(shared / "data/nsys/perlmutter-cloverleaf-cuda.sqlite",
                        args.workdir / f"cloverleaf_x{args.copies}.sqlite", args.copies)
    print(f"# {path} ({path.stat().st_size / 1e6:.1f} MB); {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"load {os.getloadavg()[0]:.2f}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    got: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for method in ("sqlite3 + pandas", "evtsync decode", "evtsync read"):
            out = subprocess.run([sys.executable, "-c", _CHILD, method, str(path), str(args.reps)], env=env,
                                 capture_output=True, text=True, check=True)
            result = json.loads(out.stdout.strip().splitlines()[-1])
            got.setdefault(method, []).append(result["cpu_s"])
            print(f"{method:>18}: {json.dumps(result)}", flush=True)
    base = min(got["sqlite3 + pandas"])
    for method in ("evtsync decode", "evtsync read"):
        print(f"# {method}: {min(got[method]):.3f} s = {min(got[method]) / base:.2f}x the plain query's {base:.3f} s")
    print(f"# load after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
