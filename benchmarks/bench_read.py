"""Reading benchmark (issues 2 and 7): evtsync's reader vs the common approaches, same run.

Run by hand (not a test)::

    .venv/bin/python benchmarks/bench_read.py                      # real trace + 1 GB synthetic
    .venv/bin/python benchmarks/bench_read.py --big-mb 0           # real trace only
    .venv/bin/python benchmarks/bench_read.py --scaling 40,80,160,320,640   # + time vs events

Every measurement runs in a fresh process under ``/usr/bin/time -v`` (peak RSS = "Maximum
resident set size"); the process also reports the CPU and wall seconds of the work itself
(imports excluded). Methods, each on the same file:

- ``evtsync``: ``evtsync.trace.readers.read_rank`` (decode + typed per-rank tables) with the
  default decoder (``EVTSYNC_DECODER=auto``), **its load inside the clock**: the process
  starts without the compiled scanner, and whatever the default rule loads for this file
  (the ahead-of-time scanner, ~1 ms, or numba's just-in-time one, ~1 s) is counted; which
  decoder it used is reported (``decoder``);
- ``evtsync-msgspec``: the same with the compiled scanner switched off
  (``EVTSYNC_DECODER=msgspec``): the reader before the scanner, in the same run;
- ``json+pandas``: ``json.load`` then ``pandas.DataFrame(doc["traceEvents"])`` (the common way);
- ``orjson``: ``orjson.loads`` of the whole text, no table at all;
- ``imports``: only the imports (the RSS floor every other number includes).

Imports and pandas' first-use import of pyarrow happen before the clock starts, for every
method alike. The ahead-of-time scanner is built once per installation (the first read of a
real trace does it, or ``python -m evtsync.trace.scan``): the benchmark builds it before
measuring when it is not built yet and reports that one-time cost apart
(``scanner_build_cpu_s``, CPU of the child process).

Memory is reported three ways: the peak RSS of the process (gross: it includes the ~170 MB
of interpreter and libraries every method imports), the same net of the ``imports`` floor,
and, in one extra untimed run per method, the peak of the allocations the work itself makes
as seen by ``tracemalloc`` (Python objects and numpy buffers; started after the imports).

Throughput is MB of (decompressed) JSON per CPU-second: each method is single-threaded, so
this is MB/s per core, and CPU time is less disturbed than wall time on a shared machine.
The 1 GB rank file is written by ``evtsync synth`` (one rank of a 4-rank TP job, modern
format) under ``--workdir`` (default /tmp/evtsync-bench), never into the repository.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
SHARED_TRACES = Path(os.environ.get("EVTSYNC_SHARED", HERE.parents[2] / "shared")) / "data/traces"
#: The trace named by issue 2 (216k events), then the other real traces of the shared data
#: with the most events (one per source: HTA A100, HTA 8-rank, TraceLens MI300/RCCL, DLRM).
REAL = SHARED_TRACES / "single-rank/hta_v100_allreduce_rank1of2.json.gz"
MORE_REAL = tuple(SHARED_TRACES / name for name in (
    "single-rank/hta_a100_sendrecv_rank0of16.json.gz",
    "single-rank/hta_rank3of8.json.gz",
    "single-rank/tracelens_mi300_rccl_rank0of8.json.gz",
    "dlrm-8rank-v100/worker0_step_12.1694128201545.pt.trace.json.gz",
))
METHODS = ("imports", "evtsync", "evtsync-msgspec", "json+pandas", "orjson")
#: Synth iterations per MB of one rank file (4-rank TP job, 1 layer): measured, ~9.1 per MB.
ITERATIONS_PER_MB = 9342 / 1031


def run_method(method: str, path: str, traced: bool = False) -> dict:
    """One measurement inside the child process (``traced``: under tracemalloc, for the
    peak of the Python and numpy allocations made by the work itself)."""
    import numpy  # noqa: F401 - part of the imports floor of every method
    import orjson
    import pandas as pd

    from evtsync.trace import decode
    from evtsync.trace.readers import read_rank

    # pandas imports pyarrow for string columns on first use: done here, untimed, for all
    pd.DataFrame({"warm": ["up"]}).astype({"warm": "category"})
    if method == "evtsync-msgspec":
        os.environ[decode.DECODER_ENV] = "msgspec"
    elif method == "evtsync":
        os.environ.pop(decode.DECODER_ENV, None)  # the default, loaded inside the clock
    gz = path.endswith(".gz")
    if traced:
        import tracemalloc

        tracemalloc.start()
    t0, c0 = time.perf_counter(), time.process_time()
    rows = 0
    if method.startswith("evtsync"):
        tables = read_rank(path)
        rows = len(tables.kernels) + len(tables.cpu_ops) + len(tables.runtime) + len(tables.syncs)
    elif method == "json+pandas":
        with (gzip.open(path, "rt") if gz else open(path)) as fh:
            doc = json.load(fh)
        frame = pd.DataFrame(doc["traceEvents"])
        rows = len(frame)
    elif method == "orjson":
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as fh:
            doc = orjson.loads(fh.read())
        rows = len(doc["traceEvents"])
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    scanner = decode._scanner_state.get("scanner")
    result = {"wall_s": wall, "cpu_s": cpu, "rows": rows,
              "decoder": f"scanner ({scanner.how})" if scanner is not None else "msgspec",
              "numba_imported": "numba" in sys.modules}
    if traced:
        result["traced_peak_mb"] = tracemalloc.get_traced_memory()[1] / 1e6
        tracemalloc.stop()
    return result


def measure(method: str, path: Path, traced: bool = False) -> dict:
    """Run one method in a fresh process under /usr/bin/time -v (``traced``: tracemalloc)."""
    cmd = ["/usr/bin/time", "-v", sys.executable, str(HERE), "--child", method, str(path),
           *(["--traced"] if traced else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{method} on {path} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", proc.stderr)
    result["peak_rss_mb"] = int(rss.group(1)) / 1024 if rss else float("nan")
    return result


def ensure_scanner_built() -> float | None:
    """Build the ahead-of-time scanner when it is not built (once per installation, as the
    first read of a real trace does); the CPU seconds of that build, None when it was built."""
    import resource

    from evtsync.trace import scan

    if scan.ahead_of_time_path().is_file():
        return None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"building the ahead-of-time scanner into {scan.ahead_of_time_dir()} ...", file=sys.stderr)
    scan.build_ahead_of_time()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def json_bytes(path: Path) -> int:
    """Decompressed size of a trace file."""
    if not path.name.endswith(".gz"):
        return path.stat().st_size
    total = 0
    with gzip.open(path, "rb") as fh:
        while chunk := fh.read(1 << 24):
            total += len(chunk)
    return total


def synth_rank_file(workdir: Path, mb: int) -> Path:
    """One rank file of about ``mb`` MB from ``evtsync synth`` (reused when present)."""
    from evtsync.synth import SynthConfig, synthesize

    out = workdir / f"synth-{mb}mb"
    existing = sorted((out / "traces").glob("rank-0*.json")) if out.is_dir() else []
    if existing:
        return existing[0]
    iterations = max(2, round(mb * ITERATIONS_PER_MB))
    cfg = SynthConfig.build(ranks=4, tp=4, iterations=iterations, write_ranks=(0,), seed=1)
    print(f"writing a ~{mb} MB synthetic rank file ({iterations} iterations) in {out} ...",
          file=sys.stderr)
    return synthesize(cfg, out).traces[0]


def bench_file(path: Path, reps: int, methods: tuple[str, ...] = METHODS, traced: bool = True) -> dict:
    """Best-of-``reps`` CPU/wall and peak RSS of every method on one file; with ``traced``
    one more run per method under tracemalloc (slower, so never timed)."""
    size = json_bytes(path)
    results: dict = {"file": str(path), "json_mb": size / 1e6, "file_mb": path.stat().st_size / 1e6}
    for method in methods:
        runs = [measure(method, path) for _ in range(reps)]
        best = min(runs, key=lambda r: r["cpu_s"])
        best["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
        best["mb_per_cpu_s"] = size / 1e6 / best["cpu_s"] if method != "imports" else None
        if traced and method != "imports":
            best["traced_peak_mb"] = measure(method, path, traced=True)["traced_peak_mb"]
        results[method] = best
        print(f"  {path.name}: {method:12s} cpu {best['cpu_s']:7.2f} s  wall {best['wall_s']:7.2f} s  "
              f"peak RSS {best['peak_rss_mb']:8.0f} MB", file=sys.stderr)
    if "json+pandas" in results and "evtsync" in results:
        ev, base = results["evtsync"], results["json+pandas"]
        floor = results.get("imports", {}).get("peak_rss_mb", 0.0)
        results["speedup_vs_json_pandas"] = base["cpu_s"] / ev["cpu_s"]
        results["memory_ratio_vs_json_pandas"] = ev["peak_rss_mb"] / base["peak_rss_mb"]
        results["memory_ratio_net_of_imports"] = (ev["peak_rss_mb"] - floor) / (base["peak_rss_mb"] - floor)
        if "orjson" in results:
            results["speedup_vs_orjson"] = results["orjson"]["cpu_s"] / ev["cpu_s"]
        if "evtsync-msgspec" in results:
            results["speedup_msgspec_decoder_vs_json_pandas"] = base["cpu_s"] / results["evtsync-msgspec"]["cpu_s"]
        if "traced_peak_mb" in ev:
            results["traced_ratio_vs_json_pandas"] = ev["traced_peak_mb"] / base["traced_peak_mb"]
    return results


def scaling(workdir: Path, sizes_mb: list[int]) -> dict:
    """evtsync's CPU time against the number of events; least-squares exponent on log-log."""
    import numpy as np

    points = []
    for mb in sizes_mb:
        path = synth_rank_file(workdir, mb)
        res = measure("evtsync", path)
        points.append({"mb": path.stat().st_size / 1e6, "rows": res["rows"], "cpu_s": res["cpu_s"],
                       "wall_s": res["wall_s"], "peak_rss_mb": res["peak_rss_mb"]})
        print(f"  scaling {mb} MB: {res['rows']} rows, cpu {res['cpu_s']:.2f} s, "
              f"peak {res['peak_rss_mb']:.0f} MB", file=sys.stderr)
    x = np.log([p["rows"] for p in points])
    y = np.log([p["cpu_s"] for p in points])
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (slope * x + intercept)
    se = float(np.sqrt(resid @ resid / max(1, len(x) - 2) / ((x - x.mean()) @ (x - x.mean()))))
    return {"points": points, "exponent": float(slope), "exponent_se": se}


def markdown(report: dict) -> str:
    """The results as the tables of docs/performance/reading.md."""
    lines = []
    keys = ["real", *sorted(k for k in report if k.startswith("real:")), "big"]
    for key in keys:
        if key not in report:
            continue
        r = report[key]
        floor = r["imports"]["peak_rss_mb"]
        lines += [f"**{Path(r['file']).name}** ({r['file_mb']:.1f} MB on disk, {r['json_mb']:.1f} MB of JSON)", "",
                  "| method | CPU s | wall s | MB/s per core | peak RSS MB | net of imports MB "
                  "| tracemalloc peak MB |",
                  "|---|---|---|---|---|---|---|"]
        for method in METHODS:
            m = r[method]
            speed = "" if m["mb_per_cpu_s"] is None else f"{m['mb_per_cpu_s']:.0f}"
            traced = f"{m['traced_peak_mb']:.0f}" if "traced_peak_mb" in m else ""
            lines.append(f"| {method} | {m['cpu_s']:.2f} | {m['wall_s']:.2f} | {speed} | "
                         f"{m['peak_rss_mb']:.0f} | {m['peak_rss_mb'] - floor:.0f} | {traced} |")
        traced_ratio = (f", tracemalloc peak ratio **{r['traced_ratio_vs_json_pandas']:.2f}**"
                        if "traced_ratio_vs_json_pandas" in r else "")
        lines += ["", f"evtsync vs json+pandas: **{r['speedup_vs_json_pandas']:.2f}x** faster (CPU), "
                      f"peak RSS ratio **{r['memory_ratio_vs_json_pandas']:.2f}** "
                      f"(net of imports **{r['memory_ratio_net_of_imports']:.2f}**){traced_ratio}; "
                      f"vs orjson.loads alone: {r['speedup_vs_orjson']:.2f}x; with the msgspec decoder "
                      f"(no scanner): {r.get('speedup_msgspec_decoder_vs_json_pandas', float('nan')):.2f}x; "
                      f"default decoder: {r['evtsync'].get('decoder', '?')}, its load inside the clock "
                      f"(numba imported: {r['evtsync'].get('numba_imported', '?')}).", ""]
    measured = [report[k] for k in keys if k in report]
    if len(measured) > 1:
        lines += ["| file | MB of JSON | speedup vs json+pandas | vs orjson | peak RSS ratio | "
                  "net of imports | tracemalloc ratio |", "|---|---|---|---|---|---|---|"]
        for r in measured:
            traced = f"{r['traced_ratio_vs_json_pandas']:.2f}" if "traced_ratio_vs_json_pandas" in r else ""
            lines.append(f"| {Path(r['file']).name} | {r['json_mb']:.1f} | {r['speedup_vs_json_pandas']:.2f}x | "
                         f"{r['speedup_vs_orjson']:.2f}x | {r['memory_ratio_vs_json_pandas']:.2f} | "
                         f"{r['memory_ratio_net_of_imports']:.2f} | {traced} |")
        lines.append("")
    if "scaling" in report:
        sc = report["scaling"]
        lines += ["| file MB | rows | CPU s | peak RSS MB |", "|---|---|---|---|"]
        lines += [f"| {p['mb']:.0f} | {p['rows']} | {p['cpu_s']:.2f} | {p['peak_rss_mb']:.0f} |"
                  for p in sc["points"]]
        lines += ["", f"Fitted exponent (CPU time ~ rows^k): k = {sc['exponent']:.3f} "
                      f"± {sc['exponent_se']:.3f} (standard error of the slope)."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs=2, metavar=("METHOD", "PATH"), help=argparse.SUPPRESS)
    parser.add_argument("--traced", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--traced-big", action="store_true",
                        help="also measure the 1 GB file under tracemalloc (json+pandas then "
                             "needs several times the memory of its untraced run)")
    parser.add_argument("--real", type=Path, default=REAL, help="real trace (default: the 216k-event HTA V100 trace)")
    parser.add_argument("--more-real", type=Path, nargs="*", default=list(MORE_REAL),
                        help="further real traces, measured the same way (default: the largest "
                             "of each other source in the shared data; none: --more-real)")
    parser.add_argument("--big-mb", type=int, default=1024, help="synthetic rank file size in MB (0: skip)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions on the real trace (best CPU time)")
    parser.add_argument("--scaling", default="", help="comma-separated synthetic file sizes in MB")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/evtsync-bench"))
    parser.add_argument("--out", type=Path, default=None, help="write all results as JSON here")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_method(*args.child, traced=args.traced)))
        return
    args.workdir.mkdir(parents=True, exist_ok=True)
    report: dict = {"date_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                    "machine": f"{platform.machine()}, {os.cpu_count()} cores, "
                               f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.0f} GiB",
                    "python": platform.python_version()}
    report["scanner_build_cpu_s"] = ensure_scanner_built()
    report["load_average"] = os.getloadavg()
    report["real"] = bench_file(args.real, args.reps)
    for path in args.more_real:
        report[f"real:{path.name}"] = bench_file(path, args.reps)
    if args.big_mb:
        report["big"] = bench_file(synth_rank_file(args.workdir, args.big_mb), 1, traced=args.traced_big)
    if args.scaling:
        report["scaling"] = scaling(args.workdir, [int(v) for v in args.scaling.split(",")])
    report["load_average_after"] = os.getloadavg()
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text)
    print(text)
    print(markdown(report))


if __name__ == "__main__":
    main()
