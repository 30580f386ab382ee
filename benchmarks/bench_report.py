"""The report of a run folder (issue 16): ``evtsync report`` timed against a baseline checkout.

Run by hand (not a test), on a run folder written by ``evtsync run`` (the demo: ``evtsync run
--out /tmp/demo``, about 2-3 minutes)::

    git archive <baseline-commit> | tar -x -C /tmp/report-base      # the code to compare with
    .venv/bin/python benchmarks/bench_report.py /tmp/demo --baseline-src /tmp/report-base --repeat 3

Each repeat runs ``python -m evtsync report RUN --out WORKDIR/<variant>-<i> -q`` in a fresh
process, the variants in turn: ``baseline`` (the baseline's sources first on ``PYTHONPATH``),
``new-j1`` (this checkout, ``--jobs 1``: every figure drawn in the one process), ``new-j2``
(``--jobs 2``: a pool of two figure workers, whatever the pool model says), ``new`` (this
checkout's default: a pool only where it pays, issue 48) and ``new-svg`` (``--svg``: the
baseline's PNG and SVG). Printed per variant: median wall and CPU seconds and the load average
before each run; then the ratios of the medians. CPU is that of the whole process tree: this
script is the child subreaper (``bench_demo_cpu.become_subreaper``), so the figure workers,
children of multiprocessing's fork server, are reaped here and counted (under /usr/bin/time, as
before 2026-12-06, they were not).

Then the report stage as ``evtsync run`` runs it, ``--repeat`` times per side: a fresh process
imports what the earlier stages imported and (this checkout) reads the fits into
``Run.fit_tree`` as compare, prediction and predicted-vs-measured do, then times
``evtsync.pipeline.stages._stage_report`` on a copy of the run folder (without its figures):
the baseline, this checkout with one process drawing the figures (``new-j1``) and this
checkout's default (``new``).

Then the content check: ``report.html`` and ``report.md`` compared as text without the "last
updated" stamp (the HTML embeds every PNG as base64, so equal HTML means byte-equal PNGs), the
set of figure files, each PNG byte for byte and each SVG without its ``<dc:date>`` and with
matplotlib's random element ids renumbered in order of appearance: ``new-svg`` against the
baseline in full, ``new`` against the baseline without its SVGs, ``new`` and ``new-j2`` against ``new-j1``.
The script exits 1 when the content differs.
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
sys.path.insert(0, str(HERE / "benchmarks"))
from bench_demo_cpu import become_subreaper, reap_all  # noqa: E402  (one home for the process-tree CPU)


def run_report(src: Path, run_dir: Path, out: Path, extra: list[str]) -> dict[str, float]:
    """One ``evtsync report`` in a fresh process, ``src`` first on the path: wall seconds and the CPU
    seconds of every process it started (this script is their subreaper: :func:`main`)."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PYTHONPATH": str(src), "EVTSYNC_QUIET": "1"}
    load = os.getloadavg()[0]
    cmd = [sys.executable, "-m", "evtsync", "report", str(run_dir), "--out", str(out), "-q", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    # run outside any checkout: `python -m` puts the working directory before PYTHONPATH
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, cwd=out.parent)
    reap_all()  # the fork server's orphaned workers, reparented here
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed with {src} on the path:\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": wall, "cpu_s": cpu, "load1": load}


#: The report stage as ``evtsync run`` runs it: in the process that ran the stages before it, so
#: their imports are paid and (with this checkout) the fits they read are in ``Run.fit_tree``.
IN_RUN = """
import shutil, sys, time
from pathlib import Path
src, copy, workers = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
shutil.rmtree(copy, ignore_errors=True)
shutil.copytree(src, copy, ignore=shutil.ignore_patterns("figures", "report.*"))
import scipy.stats  # noqa: F401  (the earlier stages' imports)
import evtsync.evt.compare, evtsync.predict.tables, evtsync.evt.mlefit  # noqa: F401,E401
from evtsync.pipeline import stages
from evtsync.pipeline.engine import Run
from evtsync.runfolder.layout import fitted_models, read_manifest
from evtsync.pipeline.options import RunOptions
run = Run(RunOptions(out=copy))
run.manifest = read_manifest(copy)
if hasattr(run, "fit_tree"):  # this checkout: compare, prediction and predicted-vs-measured read them
    for path in fitted_models(copy, run.manifest).values():
        run.fit_tree(path)
if workers:  # this checkout: at most this many figure processes (1: in this process)
    import evtsync.report.html
    try:
        import evtsync.report.context as figure_home  # the report split into sections (issue 31)
    except ImportError:
        figure_home = evtsync.report.html  # a checkout from before the split
    figure_home.FIGURE_WORKERS = workers
t0 = time.perf_counter()
stages._stage_report(run)
print(f"STAGE {time.perf_counter() - t0:.3f}")
"""


def run_stage(src: Path, run_dir: Path, out: Path, workers: int = 0) -> dict[str, float]:
    """The report stage of ``evtsync run`` (:data:`IN_RUN`) in a fresh process, ``src`` first on the path."""
    env = {**os.environ, "PYTHONPATH": str(src), "EVTSYNC_QUIET": "1"}
    load = os.getloadavg()[0]
    proc = subprocess.run([sys.executable, "-c", IN_RUN, str(run_dir), str(out), str(workers)], env=env,
                          capture_output=True,
                          text=True, check=False, cwd=out.parent)
    if proc.returncode != 0:
        raise SystemExit(f"the report stage failed with {src} on the path:\n{proc.stderr[-3000:]}")
    return {"stage_s": float(re.findall(r"^STAGE (\S+)$", proc.stdout, re.M)[-1]), "load1": load}


def _without_stamp(text: str) -> str:
    return re.sub(r"last updated [^.]*\.", "", text)


def _svg_normalised(text: str) -> str:
    text = re.sub(r"<dc:date>[^<]*</dc:date>", "", text)
    ids: dict[str, str] = {}
    return re.sub(r"\b[mpc][0-9a-f]{10}\b", lambda m: ids.setdefault(m.group(0), f"id{len(ids)}"), text)


def content_differences(a: Path, b: Path, b_has_svg: bool = True) -> list[str]:
    """What differs between two report folders (empty when they are the same document). When
    ``b`` was written without ``--svg``, the SVG files of ``a`` and the subtitle's "(PNG and SVG)"
    are left out of the comparison."""
    diffs = []
    for name in ("report.html", "report.md"):
        text_a = _without_stamp((a / name).read_text(encoding="utf-8"))
        if not b_has_svg:
            text_a = text_a.replace("figures (PNG and SVG) lie beside", "figures (PNG) lie beside")
        if text_a != _without_stamp((b / name).read_text(encoding="utf-8")):
            diffs.append(name)
    # every file under figures/, the narrow renderings in figures/narrow/ too (issue 49)
    fa = {p.relative_to(a / "figures").as_posix() for p in (a / "figures").rglob("*")
          if p.is_file() and (b_has_svg or p.suffix != ".svg")}
    fb = {p.relative_to(b / "figures").as_posix() for p in (b / "figures").rglob("*") if p.is_file()}
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
    ap.add_argument("--baseline-args", default="", help="extra options of the baseline's evtsync report")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/evtsync-bench-report"))
    ap.add_argument("--json", type=Path, help="also write the measurements here")
    args = ap.parse_args()
    args.run_dir, args.workdir = args.run_dir.resolve(), args.workdir.resolve()
    args.workdir.mkdir(parents=True, exist_ok=True)
    become_subreaper()
    variants = {"baseline": (args.baseline_src.resolve(), args.baseline_args.split()),
                "new-j1": (HERE, ["--jobs", "1"]), "new-j2": (HERE, ["--jobs", "2"]), "new": (HERE, []),
                "new-svg": (HERE, ["--svg"])}
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in variants}
    for i in range(args.repeat):
        for name, (src, extra) in variants.items():
            runs[name].append(run_report(src, args.run_dir, args.workdir / f"{name}-{i}", extra))
            r = runs[name][-1]
            print(f"{name:8s} run {i + 1}: {r['wall_s']:6.2f} s wall, {r['cpu_s']:6.2f} s CPU, "
                  f"load {r['load1']:.2f}", flush=True)
    med = {k: {m: statistics.median(r[m] for r in v) for m in ("wall_s", "cpu_s")} for k, v in runs.items()}
    print(f"{platform.machine()}, {os.cpu_count()} cores, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    for k in variants:
        print(f"{k:8s} median over {args.repeat}: {med[k]['wall_s']:.2f} s wall, {med[k]['cpu_s']:.2f} s CPU")
    print(f"ratio baseline / new: wall {med['baseline']['wall_s'] / med['new']['wall_s']:.2f}x; "
          f"CPU (process tree) baseline / new {med['baseline']['cpu_s'] / med['new']['cpu_s']:.2f}x, "
          f"baseline / new-j1 {med['baseline']['cpu_s'] / med['new-j1']['cpu_s']:.2f}x, "
          f"new-j2 / new-j1 (what the pool adds) {med['new-j2']['cpu_s'] / med['new-j1']['cpu_s']:.2f}x")
    stage: dict[str, list[dict[str, float]]] = {"baseline": [], "new-j1": [], "new": []}
    for i in range(args.repeat):
        for name, src, workers in (("baseline", variants["baseline"][0], 0), ("new-j1", HERE, 1), ("new", HERE, 0)):
            stage[name].append(run_stage(src, args.run_dir, args.workdir / f"stage-{name}", workers))
            print(f"report stage in a run, {name:8s} {i + 1}: {stage[name][-1]['stage_s']:6.2f} s wall, "
                  f"load {stage[name][-1]['load1']:.2f}", flush=True)
    med_stage = {k: statistics.median(r["stage_s"] for r in v) for k, v in stage.items()}
    print(f"report stage in a run: baseline {med_stage['baseline']:.2f} s, new with one process "
          f"{med_stage['new-j1']:.2f} s, new {med_stage['new']:.2f} s; ratio baseline / new "
          f"{med_stage['baseline'] / med_stage['new']:.2f}x")
    work = args.workdir
    diffs = [f"new (PNG only): {d}" for d in content_differences(work / "baseline-0", work / "new-0", False)]
    diffs += [f"new --svg: {d}" for d in content_differences(work / "baseline-0", work / "new-svg-0")]
    diffs += [f"new --jobs 1: {d}" for d in content_differences(work / "new-j1-0", work / "new-0")]
    diffs += [f"new --jobs 2: {d}" for d in content_differences(work / "new-j1-0", work / "new-j2-0")]
    print("content: the same document as the baseline's (HTML, Markdown, figure set, PNG bytes; with --svg "
          "the SVGs too; --jobs 1 the same as the pool)" if not diffs else "content DIFFERS:\n  " + "\n  ".join(diffs))
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "medians": med, "stage_in_run": stage,
                                         "content_differences": diffs},
                                        indent=2), encoding="utf-8")
    return 1 if diffs else 0


if __name__ == "__main__":
    sys.exit(main())
