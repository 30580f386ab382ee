"""Attribution memory (issue 30, item 5): peak RSS of ``evtsync attribute`` against the rank count.

Run by hand (not a test)::

    git -C /work/main archive main | tar -x -C /tmp/attr-base      # the code to compare with
    .venv/bin/python benchmarks/bench_attribute_memory.py --baseline-src /tmp/attr-base
    .venv/bin/python benchmarks/bench_attribute_memory.py --ranks 32 64 128 --mb 0.5 --big-ranks 8 --big-mb 16
    .venv/bin/python benchmarks/bench_attribute_memory.py --baseline-src /tmp/before --also main=/tmp/main \
        --cache off warm

For each synthetic study (``evtsync synth`` through :func:`bench_pipeline.study`: TP 8, ~``--mb`` MB
of plain JSON per rank, written under ``--workdir`` and reused when present) the whole command
``evtsync attribute FOLDER --jobs 1 --no-cache -o OUT`` runs in a fresh process under
``/usr/bin/time -v`` (:func:`bench_pipeline.timed`): peak resident set size of the process, CPU
(user + system) and wall time. ``--jobs 1``: everything in one process, the case where the whole
set's tables used to be held. With ``--baseline-src`` the same command runs on that checkout too, in
the same run, alternating, and its collectives table must equal this checkout's exactly
(``pandas.testing.assert_frame_equal``).

``--also NAME=PATH`` adds further checkouts (compared with this one like the baseline). ``--cache``
chooses the reading modes, each measured for every checkout: ``off`` (``--no-cache``), ``cold``
(the trace cache on, in a new empty folder: the first run, which writes it) and ``warm`` (the same
folder again: every later run). Each cache folder links the installed scanner (``scanner/``), so
that no mode compiles it. ``--reps N``: N runs of each checkout and mode, interleaved, medians
reported (CPU times on a shared 2-core machine vary by ±20% from run to run); a cold run that is
only there to fill the cache for the warm ones runs in the first repetition only. Before the clock, every checkout runs once on the first study
(unrecorded): one-time costs (byte-compiling, numba caches) are not counted.

Reported per checkout and mode: peak RSS at each rank count, and the slope of peak RSS against the
rank count over the small-rank studies (least squares, MB per rank): flat means memory is bounded
by the largest rank, not by the set; then the ratios of this checkout's peak RSS and CPU to each
other checkout's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_pipeline import study, timed  # noqa: E402  (one home for studies and timing)
from bench_small_ranks import loadavg  # noqa: E402


def attribute_run(src: Path, folder: Path, out: Path, mode: str = "off", cache: Path | None = None) -> dict:
    """``evtsync attribute`` of ``folder`` with the code of ``src``, in a fresh process (``mode``
    ``off``: ``--no-cache``; else the trace cache in ``cache``)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    # ``-P``: the current folder is not put before PYTHONPATH, so ``src`` is the code that runs
    env = {"PYTHONPATH": str(src)}
    flags = ["--no-cache"]
    if mode != "off":
        assert cache is not None
        env["EVTSYNC_CACHE_DIR"] = str(cache)
        flags = []
    res = timed([sys.executable, "-P", "-m", "evtsync", "attribute", str(folder), "--jobs", "1", *flags, "-o", str(out)],
                env=env)
    return {k: v for k, v in res.items() if k != "stdout"}


def new_cache(workdir: Path, name: str) -> Path:
    """An empty trace-cache folder that links the installed scanner (no mode compiles it)."""
    import shutil

    from evtsync.trace.scan import ahead_of_time_dir

    folder = workdir / f"cache-{name}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if ahead_of_time_dir().is_dir():
        (folder / "scanner").symlink_to(ahead_of_time_dir().resolve())
    return folder


def same_tables(a: Path, b: Path) -> bool:
    """The two collectives tables are equal (exactly; raises with the difference when not)."""
    import pandas as pd

    pd.testing.assert_frame_equal(pd.read_parquet(a), pd.read_parquet(b), check_exact=True)
    return True


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of peak RSS (MB) against ranks."""
    x, y = np.array([p[0] for p in points], float), np.array([p[1] for p in points], float)
    return float(np.polyfit(x, y, 1)[0]) if len(points) > 1 else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[32, 64, 128], help="small-rank studies")
    ap.add_argument("--mb", type=float, default=0.5, help="MB per rank of the small-rank studies")
    ap.add_argument("--big-ranks", type=int, default=8, help="ranks of the larger study (0: none)")
    ap.add_argument("--big-mb", type=float, default=16.0, help="MB per rank of the larger study")
    ap.add_argument("--baseline-src", type=Path, help="a checkout of the code to compare with")
    ap.add_argument("--also", action="append", default=[], metavar="NAME=PATH", help="a further checkout")
    ap.add_argument("--cache", nargs="+", choices=["off", "cold", "warm"], default=["off"],
                    help="reading modes (default: off, i.e. --no-cache)")
    ap.add_argument("--reps", type=int, default=1, help="runs per checkout and mode (medians reported)")
    ap.add_argument("--no-warmup", action="store_true", help="skip the unrecorded first run of each checkout")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/evtsync-bench"))
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()

    src = HERE.parent
    checkouts = {"this": src, **({"baseline": args.baseline_src.resolve()} if args.baseline_src else {})}
    for item in args.also:
        name, _, path = item.partition("=")
        checkouts[name] = Path(path).resolve()
    others = [n for n in checkouts if n != "this"]
    modes = [m for m in ("off", "cold", "warm") if m in args.cache]
    if "warm" in modes and "cold" not in modes:
        modes.insert(modes.index("warm"), "cold")  # a warm run needs the cold one before it
    studies = [(n, args.mb) for n in args.ranks] + ([(args.big_ranks, args.big_mb)] if args.big_ranks else [])
    results: dict = {"machine": f"{platform.node()} {os.cpu_count()} cores", "python": platform.python_version(),
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_before": loadavg(),
                     "modes": [m for m in modes if m in args.cache], "studies": []}
    if not args.no_warmup:
        first = study(args.workdir, *studies[0])
        for name, code in checkouts.items():
            attribute_run(code, first, args.workdir / f"attr-warmup-{name}" / "collectives.parquet")
    for i, (ranks, mb) in enumerate(studies):
        folder = study(args.workdir, ranks, mb)
        size_mb = sum(p.stat().st_size for p in folder.glob("*.json")) / 1e6
        runs: dict[tuple[str, str], list[dict]] = {}
        for rep in range(args.reps):   # repetitions interleaved: checkouts alternate within each mode
            for mode in modes:
                if mode == "cold" and rep and "cold" not in args.cache:
                    continue  # the warm runs' cache is written once, by the first repetition
                for name, code in checkouts.items():
                    cache = None if mode == "off" else (
                        new_cache(args.workdir, f"{name}-{ranks}x{mb:g}") if mode == "cold"
                        else args.workdir / f"cache-{name}-{ranks}x{mb:g}")
                    res = attribute_run(code, folder, args.workdir / f"attr-{name}-{ranks}x{mb:g}-{mode}"
                                        / "collectives.parquet", mode, cache)
                    runs.setdefault((mode, name), []).append(res)
                    print(f"{ranks} ranks x {size_mb / ranks:.2f} MB, cache {mode}, {name}: peak "
                          f"{res['peak_rss_mb']:.0f} MB, CPU {res['cpu_s']:.2f} s", file=sys.stderr)
        for mode in modes:
            row: dict = {"ranks": ranks, "mb_per_rank": size_mb / ranks, "small": i < len(args.ranks), "mode": mode,
                         "reps": args.reps}
            for name in checkouts:
                got = runs[(mode, name)]
                row[name] = {"cpu_s": statistics.median(r["cpu_s"] for r in got),
                             "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in got),
                             "wall_s": statistics.median(r["wall_s"] for r in got),
                             "cpu_s_all": [r["cpu_s"] for r in got]}
            for other in others:
                row[f"identical_{other}"] = same_tables(
                    args.workdir / f"attr-this-{ranks}x{mb:g}-{mode}" / "collectives.parquet",
                    args.workdir / f"attr-{other}-{ranks}x{mb:g}-{mode}" / "collectives.parquet")
                row[f"rss_ratio_{other}"] = row["this"]["peak_rss_mb"] / row[other]["peak_rss_mb"]
                row[f"cpu_ratio_{other}"] = row["this"]["cpu_s"] / row[other]["cpu_s"]
            if mode in args.cache:
                results["studies"].append(row)
    results["slope_mb_per_rank"] = {
        f"{name} {mode}": slope([(r["ranks"], r[name]["peak_rss_mb"]) for r in results["studies"]
                                 if r["small"] and r["mode"] == mode])
        for name in checkouts for mode in results["modes"]}
    results["load_after"] = loadavg()

    print(f"\n{results['date']}, {results['machine']}, load {results['load_before']} -> {results['load_after']}")
    head = ["ranks", "MB/rank", "cache"] + [f"{n} peak RSS MB | {n} CPU s" for n in checkouts]
    head += [f"RSS / {o} | CPU / {o}" for o in others] + (["identical"] if others else [])
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * (3 + 2 * len(checkouts) + 2 * len(others) + (1 if others else 0)))
    for r in results["studies"]:
        cells = [str(r["ranks"]), f"{r['mb_per_rank']:.2f}", r["mode"]]
        cells += [f"{r[n]['peak_rss_mb']:.0f} | {r[n]['cpu_s']:.2f}" for n in checkouts]
        cells += [f"{r[f'rss_ratio_{o}']:.2f} | {r[f'cpu_ratio_{o}']:.2f}" for o in others]
        if others:
            cells.append(str(all(r[f"identical_{o}"] for o in others)))
        print("| " + " | ".join(cells) + " |")
    print("slope of peak RSS over " + ", ".join(map(str, args.ranks)) + " ranks (MB per rank): "
          + ", ".join(f"{n} {s:.2f}" for n, s in results["slope_mb_per_rank"].items()))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
