"""Attribution memory (issue 30, item 5): peak RSS of ``evtsync attribute`` against the rank count.

Run by hand (not a test)::

    git -C /work/main archive main | tar -x -C /tmp/attr-base      # the code to compare with
    .venv/bin/python benchmarks/bench_attribute_memory.py --baseline-src /tmp/attr-base
    .venv/bin/python benchmarks/bench_attribute_memory.py --ranks 32 64 128 --mb 0.5 --big-ranks 8 --big-mb 16

For each synthetic study (``evtsync synth`` through :func:`bench_pipeline.study`: TP 8, ~``--mb`` MB
of plain JSON per rank, written under ``--workdir`` and reused when present) the whole command
``evtsync attribute FOLDER --jobs 1 --no-cache -o OUT`` runs in a fresh process under
``/usr/bin/time -v`` (:func:`bench_pipeline.timed`): peak resident set size of the process, CPU
(user + system) and wall time. ``--jobs 1``: everything in one process, the case where the whole
set's tables used to be held. With ``--baseline-src`` the same command runs on that checkout too, in
the same run, alternating, and its collectives table must equal this checkout's exactly
(``pandas.testing.assert_frame_equal``).

Reported per checkout: peak RSS at each rank count, and the slope of peak RSS against the rank
count over the small-rank studies (least squares, MB per rank): flat means memory is bounded by the
largest rank, not by the set; then the ratio of this checkout's peak RSS to the baseline's.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_pipeline import study, timed  # noqa: E402  (one home for studies and timing)
from bench_small_ranks import loadavg  # noqa: E402


def attribute_run(src: Path, folder: Path, out: Path) -> dict:
    """``evtsync attribute`` of ``folder`` with the code of ``src``, in a fresh process."""
    out.parent.mkdir(parents=True, exist_ok=True)
    # ``-P``: the current folder is not put before PYTHONPATH, so ``src`` is the code that runs
    res = timed([sys.executable, "-P", "-m", "evtsync", "attribute", str(folder), "--jobs", "1", "--no-cache", "-o", str(out)],
                env={"PYTHONPATH": str(src)})
    return {k: v for k, v in res.items() if k != "stdout"}


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
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/evtsync-bench"))
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()

    src = HERE.parent
    checkouts = {"this": src, **({"baseline": args.baseline_src.resolve()} if args.baseline_src else {})}
    studies = [(n, args.mb) for n in args.ranks] + ([(args.big_ranks, args.big_mb)] if args.big_ranks else [])
    results: dict = {"machine": f"{platform.node()} {os.cpu_count()} cores", "python": platform.python_version(),
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_before": loadavg(),
                     "studies": []}
    for i, (ranks, mb) in enumerate(studies):
        folder = study(args.workdir, ranks, mb)
        size_mb = sum(p.stat().st_size for p in folder.glob("*.json")) / 1e6
        row: dict = {"ranks": ranks, "mb_per_rank": size_mb / ranks, "small": i < len(args.ranks)}
        for name, code in checkouts.items():
            row[name] = attribute_run(code, folder, args.workdir / f"attr-{name}-{ranks}x{mb:g}" / "collectives.parquet")
            print(f"{ranks} ranks x {size_mb / ranks:.2f} MB, {name}: peak {row[name]['peak_rss_mb']:.0f} MB, "
                  f"CPU {row[name]['cpu_s']:.1f} s", file=sys.stderr)
        if "baseline" in checkouts:
            row["identical"] = same_tables(args.workdir / f"attr-this-{ranks}x{mb:g}" / "collectives.parquet",
                                           args.workdir / f"attr-baseline-{ranks}x{mb:g}" / "collectives.parquet")
            row["rss_ratio"] = row["this"]["peak_rss_mb"] / row["baseline"]["peak_rss_mb"]
            row["cpu_ratio"] = row["this"]["cpu_s"] / row["baseline"]["cpu_s"]
        results["studies"].append(row)
    small = [r for r in results["studies"] if r["small"]]
    results["slope_mb_per_rank"] = {name: slope([(r["ranks"], r[name]["peak_rss_mb"]) for r in small])
                                    for name in checkouts}
    results["load_after"] = loadavg()

    print(f"\n{results['date']}, {results['machine']}, load {results['load_before']} -> {results['load_after']}")
    print("| ranks | MB/rank | " + " | ".join(f"{n} peak RSS MB | {n} CPU s" for n in checkouts)
          + (" | RSS ratio | CPU ratio | identical |" if "baseline" in checkouts else " |"))
    print("|" + "---|" * (2 + 2 * len(checkouts) + (3 if "baseline" in checkouts else 0)))
    for r in results["studies"]:
        cells = [str(r["ranks"]), f"{r['mb_per_rank']:.2f}"]
        cells += [f"{r[n]['peak_rss_mb']:.0f} | {r[n]['cpu_s']:.1f}" for n in checkouts]
        if "baseline" in checkouts:
            cells += [f"{r['rss_ratio']:.2f}", f"{r['cpu_ratio']:.2f}", str(r["identical"])]
        print("| " + " | ".join(cells) + " |")
    print("slope of peak RSS over " + ", ".join(map(str, args.ranks)) + " ranks (MB per rank): "
          + ", ".join(f"{n} {s:.2f}" for n, s in results["slope_mb_per_rank"].items()))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
