"""The report of a run folder (issue 16): ``evtsync report`` timed against a baseline checkout.

Run by hand (not a test), on a run folder written by ``evtsync run`` (the demo: ``evtsync run
--out /tmp/demo``, about 2-3 minutes)::

    git archive <baseline-commit> | tar -x -C /tmp/report-base      # the code to compare with
    .venv/bin/python benchmarks/bench_report.py /tmp/demo --baseline-src /tmp/report-base --repeat 3

Each repeat runs ``python -m evtsync report RUN --out WORKDIR/<variant>-<i> -q`` once with the
baseline's sources first on ``PYTHONPATH`` and once with this checkout's, alternating, each a
fresh process. Printed per variant: median wall seconds, the CPU seconds of the reaped process
tree (the figure workers are children of multiprocessing's fork server and may be missing from
it), the load average before each run; then the ratio baseline / new of the medians.

Then the content check: the two reports must be the same document. ``report.html`` and
``report.md`` are compared as text without the "last updated" stamp (the HTML embeds every PNG
as base64, so equal HTML means byte-equal PNGs), the set of figure files must match, each PNG
byte for byte and each SVG without its ``<dc:date>`` and with matplotlib's random element ids
renumbered in order of appearance. The script exits 1 when the content differs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def run_report(src: Path, run_dir: Path, out: Path) -> dict[str, float]:
    """One ``evtsync report`` in a fresh process with ``src`` first on the path."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(src), "EVTSYNC_QUIET": "1"}
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "evtsync", "report", str(run_dir), "--out", str(out), "-q"],
                          env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"evtsync report failed with {src} on the path:\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "load1": load}


def _without_stamp(text: str) -> str:
    return re.sub(r"last updated [^.]*\.", "", text)


def _svg_normalised(text: str) -> str:
    text = re.sub(r"<dc:date>[^<]*</dc:date>", "", text)
    ids: dict[str, str] = {}
    return re.sub(r"\b[mpc][0-9a-f]{10}\b", lambda m: ids.setdefault(m.group(0), f"id{len(ids)}"), text)


def content_differences(a: Path, b: Path) -> list[str]:
    """What differs between two report folders (empty when they are the same document)."""
    diffs = []
    for name in ("report.html", "report.md"):
        if _without_stamp((a / name).read_text(encoding="utf-8")) != _without_stamp((b / name).read_text(encoding="utf-8")):
            diffs.append(name)
    fa = {p.name for p in (a / "figures").iterdir()}
    fb = {p.name for p in (b / "figures").iterdir()}
    diffs += [f"figure only in one report: {n}" for n in sorted(fa ^ fb)]
    for name in sorted(fa & fb):
        x, y = a / "figures" / name, b / "figures" / name
        same = (_svg_normalised(x.read_text(encoding="utf-8")) == _svg_normalised(y.read_text(encoding="utf-8"))
                if name.endswith(".svg") else x.read_bytes() == y.read_bytes())
        if not same:
            diffs.append(f"figure differs: {name}")
    return diffs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path, help="run folder written by `evtsync run`")
    ap.add_argument("--baseline-src", type=Path, required=True, help="checkout of the baseline code")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/evtsync-bench-report"))
    ap.add_argument("--json", type=Path, help="also write the measurements here")
    args = ap.parse_args()
    variants = {"baseline": args.baseline_src.resolve(), "new": HERE}
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
    for i in range(args.repeat):
        for name, src in variants.items():
            runs[name].append(run_report(src, args.run_dir, args.workdir / f"{name}-{i}"))
            r = runs[name][-1]
            print(f"{name:8s} run {i + 1}: {r['wall_s']:6.2f} s wall, {r['cpu_s']:6.2f} s CPU (reaped), "
                  f"load {r['load1']:.2f}", flush=True)
    med = {k: statistics.median(r["wall_s"] for r in v) for k, v in runs.items()}
    print(f"{platform.machine()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    for k in variants:
        print(f"{k:8s} median wall {med[k]:.2f} s over {args.repeat}")
    print(f"ratio baseline / new: {med['baseline'] / med['new']:.2f}x")
    diffs = content_differences(args.workdir / "baseline-0", args.workdir / "new-0")
    print("content: the same document (HTML, Markdown, figure set, PNG bytes, SVG)" if not diffs
          else "content DIFFERS:\n  " + "\n  ".join(diffs))
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "median_wall_s": med, "content_differences": diffs},
                                        indent=2), encoding="utf-8")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
