"""Benchmark: the ``attribution`` stage of ``evtsync run`` on an existing run folder (issue 16).

Reads the workloads of RUN_DIR's manifest (e.g. the demo's, made once by
``evtsync run --out RUN_DIR``), loads each workload's traces and aligns its collectives
(not timed: the ``tax`` stage before it does that in a run), then times the stage itself
(:func:`evtsync.pipeline.stages._stage_attribution`: one :func:`evtsync.critpath.attribute`
per workload and the tables written) with its tables written under ``--out``, and compares
them with RUN_DIR's own ``tables/attribution_*.parquet`` (``pandas.testing.assert_frame_equal``,
exact: ``check_exact=True``).

Each measurement runs in a fresh subprocess; ``--baseline-src DIR`` (a checkout of other
code, e.g. ``git archive main | tar -x -C DIR``) measures that code too, in the same run,
alternating with this checkout's, and prints the ratio. Reported: wall time, CPU time
(``os.times``: user + system of the process and its reaped children) and
``time.process_time``; the median of ``--repeat`` runs. ``--phases`` adds a run of each
checkout that sums the CPU time of its main functions (:data:`PHASES`).

Run by hand::

    .venv/bin/python benchmarks/bench_attribution_demo.py /tmp/hatt/demo --out /tmp/hatt/bench \\
        [--baseline-src /tmp/hatt/base] [--repeat 3] [--phases] [--profile /tmp/hatt/attr.pstats]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
TABLES = ("collectives", "summary", "validation", "paths")


#: (module, function) pairs whose CPU time ``--phases`` adds up, each where its callers look it up.
PHASES = (
    ("evtsync.critpath.attribution", "straggler_task"), ("evtsync.critpath.attribution", "fastest_task"),
    ("evtsync.critpath.tasks", "_rank_setup"), ("evtsync.critpath.tasks", "build_rank_dag"),
    ("evtsync.critpath.tasks", "rank_instance_nodes"), ("evtsync.critpath.attribution", "combine"),
    ("evtsync.critpath.attribution", "regress_path_on_tax"), ("evtsync.critpath.attribution", "paths_table_of"),
    ("evtsync.critpath.attribution", "compute_tax"),
)


def _time_phases() -> dict[str, float]:
    """Wrap the :data:`PHASES` functions (those this checkout has) to add up their CPU time."""
    import functools
    import importlib

    spent: dict[str, float] = {}
    for module_name, name in PHASES:
        module = importlib.import_module(module_name)
        plain = getattr(module, name, None)
        if plain is None:
            continue

        def timed(*args, _plain=plain, _key=name, **kwargs):  # type: ignore[no-untyped-def]
            t = time.process_time()
            try:
                return _plain(*args, **kwargs)
            finally:
                spent[_key] = spent.get(_key, 0.0) + time.process_time() - t

        setattr(module, name, functools.wraps(plain)(timed))
    return spent


def measure(run_dir: Path, out: Path, profile: str | None, phases: bool = False) -> dict:
    """Time the attribution stage once in this process (traces loaded and aligned first)."""
    from evtsync.pipeline.engine import Run
    from evtsync.pipeline.options import RunOptions, Workload
    from evtsync.pipeline.stages import _stage_attribution

    manifest = json.loads((run_dir / "manifest.json").read_text(encoding="utf-8"))
    run = Run(RunOptions(out=out))
    run.manifest = {"stages": {"tax": {"status": "done"}}}
    run.workloads = [Workload(w["name"], [Path(f) for f in w["files"]]) for w in manifest["workloads"]]
    for w in run.workloads:  # what the tax stage leaves memoised in a run
        run.alignment(w)
        if hasattr(run, "tax"):  # the tax tables too, since the run memoises them
            run.tax(w)
    results = _record_results()
    spent = _time_phases() if phases else {}
    import scipy.stats  # noqa: F401  (the demo stage before imports it: not attribution's cost in a run)
    n_events = sum(len(t.kernels) + len(t.cpu_ops) + len(t.runtime) for t in run._traces.values())
    prof = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
    t0, c0, p0 = time.perf_counter(), os.times(), time.process_time()
    if prof is not None:
        prof.enable()
    summary = _stage_attribution(run)
    if prof is not None:
        prof.disable()
        prof.dump_stats(profile)
    wall, c1, cpu = time.perf_counter() - t0, os.times(), time.process_time() - p0
    _dump(results, run.workloads, out / "full")
    cpu_tree = (c1.user - c0.user) + (c1.system - c0.system) + (c1.children_user - c0.children_user) + \
        (c1.children_system - c0.children_system)
    return {"wall_s": wall, "cpu_s": cpu_tree, "process_time_s": cpu, "workloads": len(run.workloads),
            "events": n_events, "collectives": summary["collectives"], "attributed": summary["attributed"],
            "phases_cpu_s": spent}


def _record_results() -> list:
    """Keep every :func:`attribute` result of the stage (the stage imports it at call time)."""
    import evtsync.critpath.attribution as attribution

    results: list = []
    plain = attribution.attribute

    def recording(*args, **kwargs):  # type: ignore[no-untyped-def]
        res = plain(*args, **kwargs)
        results.append(res)
        return res

    attribution.attribute = recording
    return results


def _dump(results: list, workloads: list, folder: Path) -> None:
    """Every table of every workload's whole result (not only what the stage writes), pickled."""
    folder.mkdir(parents=True, exist_ok=True)
    for w, res in zip(workloads, results, strict=True):
        stats = res.dag_stats.drop(columns=["peak_rss_mb"], errors="ignore")
        for name, table in (("collectives", res.collectives), ("summary", res.summary),
                            ("validation", res.validation), ("paths", res.paths), ("dag_stats", stats)):
            table.to_pickle(folder / f"{w.name}.{name}.pkl")


def compare_full(a: Path, b: Path) -> list[str]:
    """The whole results of two runs (every workload's every table), exact."""
    import pandas as pd

    out = []
    for f in sorted(a.glob("*.pkl")):
        x, y = pd.read_pickle(f), pd.read_pickle(b / f.name)
        try:
            pd.testing.assert_frame_equal(x, y, check_exact=True)
            out.append(f"{f.stem}: identical ({len(x)} x {x.shape[1]})")
        except AssertionError as exc:
            out.append(f"{f.stem}: DIFFERENT: " + " ".join(str(exc).split())[:300])
    return out


def compare(run_dir: Path, out: Path) -> dict[str, str]:
    """Each attribution table under ``out`` against RUN_DIR's: 'identical' or the difference."""
    import pandas as pd

    verdict = {}
    for name in TABLES:
        rel = f"tables/attribution_{name}.parquet"
        a, b = pd.read_parquet(run_dir / rel), pd.read_parquet(out / rel)
        try:
            pd.testing.assert_frame_equal(a, b, check_exact=True)
            verdict[name] = f"identical ({len(a)} x {a.shape[1]})"
        except AssertionError as exc:
            verdict[name] = "DIFFERENT: " + " ".join(str(exc).split())[:300]
    return verdict


def subprocess_run(src: Path, run_dir: Path, out: Path, profile: str | None, phases: bool) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), str(run_dir), "--out", str(out), "--child"]
    if profile:
        cmd += ["--profile", profile]
    if phases:
        cmd += ["--phases"]
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True, cwd=src)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--out", type=Path, default=Path("/tmp/bench_attribution_demo"))
    parser.add_argument("--baseline-src", type=Path, default=None)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--profile", default=None, help="write a cProfile of the stage (this checkout) here")
    parser.add_argument("--phases", action="store_true",
                        help="one more run of each checkout that adds up the CPU time of its main functions "
                             "(wrappers, not a profiler; nested: _rank_setup holds build_rank_dag)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        res = measure(args.run_dir, args.out, args.profile, args.phases)
        print(json.dumps(res))
        return
    print(f"load average at the start: {os.getloadavg()}")
    sources = {"new": HERE}
    if args.baseline_src is not None:
        sources["baseline"] = args.baseline_src.resolve()
    runs: dict[str, list[dict]] = {k: [] for k in sources}
    for i in range(args.repeat):
        for label, src in sources.items():
            out = args.out / label
            prof = args.profile if (label == "new" and i == 0) else None
            runs[label].append(subprocess_run(src, args.run_dir, out, prof, False))
    if args.phases:
        for label, src in sources.items():
            res = subprocess_run(src, args.run_dir, args.out / f"{label}-phases", None, True)
            print(f"{label}, CPU by function (a run of its own, {res['cpu_s']:.2f} s CPU in all): " +
                  ", ".join(f"{k} {v:.2f} s" for k, v in res["phases_cpu_s"].items()))
    print(f"load average at the end: {os.getloadavg()}")
    med = {}
    for label, rs in runs.items():
        med[label] = {k: statistics.median(r[k] for r in rs) for k in ("wall_s", "cpu_s", "process_time_s")}
        print(f"{label}: runs {[round(r['wall_s'], 2) for r in rs]} s wall; median wall {med[label]['wall_s']:.2f} s, "
              f"CPU {med[label]['cpu_s']:.2f} s, process_time {med[label]['process_time_s']:.2f} s; "
              f"{rs[0]['workloads']} workloads, {rs[0]['events']} events, {rs[0]['collectives']} collectives "
              f"({rs[0]['attributed']} attributed)")
        for name, verdict in compare(args.run_dir, args.out / label).items():
            print(f"  tables/attribution_{name}.parquet vs {args.run_dir}: {verdict}")
    if "baseline" in med:
        print("whole attribute() results, new vs baseline (peak_rss_mb of dag_stats left out):")
        for line in compare_full(args.out / "baseline" / "full", args.out / "new" / "full"):
            print("  " + line)
        for k in ("wall_s", "cpu_s"):
            print(f"ratio baseline / new, {k}: {med['baseline'][k] / med['new'][k]:.2f}x")


if __name__ == "__main__":
    main()
