"""Many small ranks (issue 21): CPU per rank file of evtsync's reader against the naive way.

Run by hand (not a test)::

    .venv/bin/python benchmarks/bench_small_ranks.py                    # 256 and 2,048 ranks of ~1 MB
    .venv/bin/python benchmarks/bench_small_ranks.py --ranks 256 --mb 1

For each study (``evtsync synth``, TP 8, ~``--mb`` MB of plain JSON per rank, written under
``--workdir``, default /tmp/evtsync-bench, and reused when present), each method runs in a
fresh process and reports the CPU seconds of its work alone (imports excluded; they are
reported separately) over every rank file, divided by the number of ranks:

- ``evtsync (all)``: ``evtsync.load_traces(folder, jobs=1)``: every table, concatenated into
  the set's DataFrames (the API default scope);
- ``evtsync msgspec-decoder (all)``: the same as ``evtsync (all)`` with the compiled scanner
  switched off (``EVTSYNC_DECODER=msgspec``): the reader before the scanner, in the same run;
- ``evtsync (collectives)``: the same with ``scope="collectives"``, what ``evtsync tax`` reads;
- ``json+pandas``: per file ``json.load`` + ``pandas.DataFrame(doc["traceEvents"])``, the
  tables not even concatenated (the baseline of issue 21);
- ``msgspec floor``: per file ``msgspec.json.decode`` of the bytes into Python objects, no
  table (what any Python JSON reader pays at least);
- ``evtsync tax``: the whole command (``--jobs 1 --no-cache --json``) under
  ``/usr/bin/time``: imports, reading, alignment, tax and output, CPU per rank.

The evtsync methods load the compiled scanner (``prepare_fast_decoder``: the ahead-of-time
module, ~1 ms, built first on a first run; numba's just-in-time scanner where it cannot be
built) before the clock, like the other imports; its CPU is reported separately
(``scanner_load_cpu_s``).

``--pool`` measures instead the reader's choice of backend (issue 30, item 4): in fresh
processes, ``load_traces(folder)`` with the default backend, with ``jobs=1`` and with ``jobs=2``
(the pool forced), each process's **total CPU with its pool's processes** (the fork server
is stopped and reaped before the process reports, so its workers' CPU is counted) and wall
time, as ratios to ``jobs=1`` in the same run, and which backend the default chose.

CPU time is the steady measure on this shared machine; the load average is recorded before
and after each study. The comparison that matters is the ratio within one run.
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

HERE = Path(__file__).resolve().parent
CHILD = r"""
import json, sys, time
t0 = time.process_time()
import msgspec, pandas as pd
import evtsync
from evtsync.trace.traceset import load_traces
pd.DataFrame({"warm": ["up"]}).astype({"warm": "category"})  # pyarrow's first-use import
imports = time.process_time() - t0
method, folder = sys.argv[1], sys.argv[2]
scanner_load = 0.0
if method.startswith("evtsync"):
    from evtsync.trace.decode import prepare_fast_decoder
    s0 = time.process_time()
    prepare_fast_decoder()
    scanner_load = time.process_time() - s0
from pathlib import Path
files = sorted(Path(folder).glob("*.json"))
c0 = time.process_time()
rows = 0
if method.startswith("evtsync"):
    scope = "collectives" if "collectives" in method else "all"
    ts = load_traces(folder, jobs=1, scope=scope)
    rows = len(ts.kernels) + len(ts.cpu_ops) + len(ts.runtime) + len(ts.syncs)
elif method == "json+pandas":
    for f in files:
        with open(f) as fh:
            rows += len(pd.DataFrame(json.load(fh)["traceEvents"]))
elif method == "msgspec floor":
    for f in files:
        rows += len(msgspec.json.decode(f.read_bytes())["traceEvents"])
cpu = time.process_time() - c0
print(json.dumps({"cpu_s": cpu, "imports_cpu_s": imports, "scanner_load_cpu_s": scanner_load, "rows": rows,
                  "files": len(files)}))
"""
POOL_CHILD = r"""
import json, resource, sys, time
import evtsync
from evtsync.trace.traceset import load_traces
import pandas as pd
pd.DataFrame({"warm": ["up"]}).astype({"warm": "category"})  # pyarrow's first-use import
folder, jobs, scope = sys.argv[1], sys.argv[2], sys.argv[3]
logs = []
import logging
class Keep(logging.Handler):
    def emit(self, record):
        logs.append(record.getMessage())
logging.getLogger("evtsync").addHandler(Keep())
logging.getLogger("evtsync").setLevel(logging.DEBUG)
def cpu():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
c0, t0 = cpu(), time.perf_counter()
ts = load_traces(folder, jobs=None if jobs == "default" else int(jobs), scope=scope)
wall = time.perf_counter() - t0
from multiprocessing import forkserver
if forkserver._forkserver._forkserver_pid is not None:
    forkserver._forkserver._stop()  # reaps the server, whose CPU includes its workers'
total = cpu() - c0
backend = next((m for m in logs if m.startswith("reading ")), "?")
print(json.dumps({"cpu_s": total, "wall_s": wall, "rows": len(ts.kernels) + len(ts.cpu_ops),
                  "backend": backend}))
"""
POOL_METHODS = ("default", "1", "2")
METHODS = ("evtsync (all)", "evtsync msgspec-decoder (all)", "evtsync (collectives)", "json+pandas",
           "msgspec floor")


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def child(method: str, folder: Path) -> dict:
    env = {**os.environ, "EVTSYNC_QUIET": "1"}
    if "msgspec-decoder" in method:
        env["EVTSYNC_DECODER"] = "msgspec"
    else:
        env.pop("EVTSYNC_DECODER", None)
    proc = subprocess.run([sys.executable, "-c", CHILD, method, str(folder)], capture_output=True,
                          text=True, check=False, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{method} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def tax_command(folder: Path) -> dict:
    """``evtsync tax`` in a fresh process under /usr/bin/time -v: CPU of the whole command."""
    sys.path.insert(0, str(HERE))
    from bench_pipeline import evtsync_cmd, timed  # one home for timing a CLI run

    res = timed([*evtsync_cmd(), "tax", str(folder), "--jobs", "1", "--no-cache", "--json"])
    return {k: v for k, v in res.items() if k != "stdout"}


def bench(workdir: Path, ranks: int, mb: float, methods: tuple[str, ...] = METHODS, tax: bool = True) -> dict:
    sys.path.insert(0, str(HERE))
    from bench_pipeline import study  # one home for writing benchmark studies

    folder = study(workdir, ranks, mb)
    size = sum(p.stat().st_size for p in folder.glob("*.json"))
    out: dict = {"ranks": ranks, "mb_per_rank": size / ranks / 1e6, "load_before": loadavg()}
    for method in methods:
        res = child(method, folder)
        res["ms_per_rank"] = res["cpu_s"] / ranks * 1000
        out[method] = res
        print(f"  {ranks} ranks, {method}: {res['ms_per_rank']:.2f} ms CPU per rank "
              f"({res['rows']} rows; imports {res['imports_cpu_s']:.2f} s, "
              f"scanner load {res['scanner_load_cpu_s']:.2f} s)", file=sys.stderr)
    if tax:
        res = tax_command(folder)
        res["ms_per_rank"] = res["cpu_s"] / ranks * 1000
        out["evtsync tax"] = res
        print(f"  {ranks} ranks, evtsync tax: {res['ms_per_rank']:.2f} ms CPU per rank, "
              f"peak {res['peak_rss_mb']:.0f} MB", file=sys.stderr)
    base = out["json+pandas"]["ms_per_rank"] if "json+pandas" in out else float("nan")
    out["methods"] = [*methods, *(["evtsync tax"] if tax else [])]
    for method in out["methods"]:
        out[method]["vs_json_pandas"] = base / out[method]["ms_per_rank"]
    out["load_after"] = loadavg()
    return out


def pool(workdir: Path, ranks: int, mb: float, scope: str) -> dict:
    """Total CPU (with the pool's processes) and wall of ``load_traces`` per backend choice."""
    sys.path.insert(0, str(HERE))
    from bench_pipeline import study  # one home for writing benchmark studies

    folder = study(workdir, ranks, mb)
    out: dict = {"ranks": ranks, "scope": scope, "load_before": loadavg(),
                 "mb_per_rank": sum(p.stat().st_size for p in folder.glob("*.json")) / ranks / 1e6}
    env = {**os.environ, "EVTSYNC_QUIET": "1"}
    for jobs in POOL_METHODS:
        proc = subprocess.run([sys.executable, "-c", POOL_CHILD, str(folder), jobs, scope],
                              capture_output=True, text=True, check=False, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"jobs={jobs} failed:\n{proc.stderr[-3000:]}")
        out[jobs] = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"  {ranks} ranks, {scope}, jobs={jobs}: CPU {out[jobs]['cpu_s']:.2f} s, wall "
              f"{out[jobs]['wall_s']:.2f} s ({out[jobs]['backend']})", file=sys.stderr)
    for jobs in POOL_METHODS:
        out[jobs]["cpu_vs_j1"] = out[jobs]["cpu_s"] / out["1"]["cpu_s"]
        out[jobs]["wall_vs_j1"] = out[jobs]["wall_s"] / out["1"]["wall_s"]
    out["load_after"] = loadavg()
    return out


def pool_markdown(results: list[dict]) -> str:
    lines = ["| ranks × MB | scope | jobs | CPU s (with workers) | CPU / jobs=1 | wall s | wall / jobs=1 "
             "| backend | load before → after |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        for jobs in POOL_METHODS:
            m = r[jobs]
            lines.append(f"| {r['ranks']} × {r['mb_per_rank']:.2f} | {r['scope']} | {jobs} | {m['cpu_s']:.2f} | "
                         f"{m['cpu_vs_j1']:.2f}× | {m['wall_s']:.2f} | {m['wall_vs_j1']:.2f}× | "
                         f"{m['backend']} | {r['load_before']} → {r['load_after']} |")
    return "\n".join(lines)


def markdown(results: list[dict]) -> str:
    lines = ["| ranks × MB | method | CPU ms per rank | json+pandas / method | load before → after |",
             "|---|---|---|---|---|"]
    for r in results:
        for method in r["methods"]:
            m = r[method]
            lines.append(f"| {r['ranks']} × {r['mb_per_rank']:.2f} | {method} | {m['ms_per_rank']:.2f} | "
                         f"{m['vs_json_pandas']:.2f}× | {r['load_before']} → {r['load_after']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", default="256,2048", help="comma-separated rank counts")
    parser.add_argument("--mb", type=float, default=1.0, help="MB of JSON per rank file")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/evtsync-bench"))
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--methods", default=",".join(METHODS),
                        help=f"comma-separated subset of: {', '.join(METHODS)}")
    parser.add_argument("--no-tax", action="store_true", help="leave out the `evtsync tax` command run")
    parser.add_argument("--pool", action="store_true",
                        help="measure the default backend against jobs=1 and jobs=2 instead (issue 30)")
    parser.add_argument("--scope", default="all", help="load_traces scope for --pool (all, collectives)")
    args = parser.parse_args()
    if args.pool:
        results = [pool(args.workdir, int(n), args.mb, args.scope) for n in args.ranks.split(",")]
        write_report("pool", results, pool_markdown(results), args.json)
        return
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    unknown = set(methods) - set(METHODS)
    if unknown:
        parser.error(f"unknown methods: {sorted(unknown)}")
    results = [bench(args.workdir, int(n), args.mb, methods, not args.no_tax) for n in args.ranks.split(",")]
    write_report("results", results, markdown(results), args.json)


def write_report(key: str, results: list[dict], table: str, path: Path | None) -> None:
    """Print the table with the machine and date; the results as JSON under ``key`` to ``path``."""
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), key: results}
    if path:
        path.write_text(json.dumps(report, indent=1))
    print(table)
    print(f"\n{report['machine']}; {report['date']}")

if __name__ == "__main__":
    main()
