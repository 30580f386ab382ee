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

The evtsync methods load the compiled scanner (``prepare_fast_decoder``: numba's import and
the compiled code from numba's cache, or its compilation on a first run) before the clock,
like the other imports; its CPU is reported separately (``scanner_load_cpu_s``).

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
    args = parser.parse_args()
    methods = tuple(m.strip() for m in args.methods.split(",") if m.strip())
    unknown = set(methods) - set(METHODS)
    if unknown:
        parser.error(f"unknown methods: {sorted(unknown)}")
    results = [bench(args.workdir, int(n), args.mb, methods, not args.no_tax) for n in args.ranks.split(",")]
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.python_version()}",
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "results": results}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    print(markdown(results))
    print(f"\n{report['machine']}; {report['date']}")


if __name__ == "__main__":
    main()
