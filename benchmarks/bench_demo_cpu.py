"""CPU of the warm demo (issue 30, item 6): ``evtsync run --out FRESH_DIR -q``, summed over processes.

Run by hand (not a test)::

    git -C /work/main archive main | tar -x -C /tmp/demo-base       # the code to compare with
    .venv/bin/python benchmarks/bench_demo_cpu.py --baseline-src /tmp/demo-base [--workdir /tmp/demo-cpu]

"Warm": the caches a second demo on the same machine finds (PyTensor's compiled models, numba's,
evtsync's figure cache), and a fresh run folder each time, so every stage runs. The runs, in
order, each a fresh process on a fresh folder: the baseline checkout (``--baseline-src``, when
given), this checkout with an empty figure cache (the first demo: it fills the cache) and this
checkout again (the warm demo). The cache folder is ``WORKDIR/cache`` (``EVTSYNC_CACHE_DIR``).

CPU is summed over every process of the run: this script makes itself the child subreaper
(Linux ``prctl(PR_SET_CHILD_SUBREAPER)``), so the pool workers (children of multiprocessing's fork
server, which outlives nothing here) are reparented to it and reaped by it; their user + system
time is then in ``getrusage(RUSAGE_CHILDREN)``, which ``/usr/bin/time`` misses. Printed: CPU,
wall, load average before and after, and each stage's CPU seconds from the run's manifest (its
work in the main process plus its job's in a pool process; ``--json`` keeps the wall seconds
too). The baseline's single run starts with empty numba and compiled-model caches, so it is not
a warm run: ``--warm-baseline`` runs it again at the end, the ratio is then to that run.

``--result-cache``: the runs are this checkout's first demo (every cache empty: it fills them,
the result cache too), a warm demo with ``--no-result-cache`` (the baseline: every stage computed,
the other caches warm) and a warm demo that copies the shareable stages from the result cache
(evtsync.pipeline.resultcache); the ratio is warm / baseline, and ``benchmarks/compare_runs.py``
compares the two run folders (``WORKDIR/run1`` and ``WORKDIR/run2``).

``--cold`` (issue 48, "Done when"): every run is a cold demo, ``evtsync run --no-result-cache`` with a
fresh, empty cache folder of its own (``WORKDIR/cache-<i>``: trace cache, compiled models, figures),
the baseline (``--baseline-src``) and this checkout interleaved ``--rounds`` times (baseline first in
each round). ``--extra ARG`` (repeatable) is passed to this checkout's runs only (e.g.
``--extra=--comparators --extra=bayes-gev`` for this checkout with the opt-in comparators).
PyTensor's own compile folder (``~/.pytensor``) is not emptied: its C modules are a machine's, not
a run's.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
PR_SET_CHILD_SUBREAPER = 36
sys.path.insert(0, str(HERE / "benchmarks"))
from bench_small_ranks import loadavg  # noqa: E402  (one home for the load average)


def become_subreaper() -> None:
    """Orphaned descendants are reparented to this process (so their CPU time is counted here)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise SystemExit(f"prctl(PR_SET_CHILD_SUBREAPER) failed: errno {ctypes.get_errno()}")


def reap_all() -> None:
    """Wait for every remaining descendant (reparented here) to exit."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def demo_run(src: Path, out: Path, cache: Path, extra: tuple[str, ...] = ()) -> dict:
    """One ``evtsync run --out out -q [extra…]`` with the code of ``src``: CPU of every process, wall, stages."""
    shutil.rmtree(out, ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = loadavg()
    t0 = time.perf_counter()
    # ``-P``: the current folder is not put before PYTHONPATH, so ``src`` is the code that runs
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-P", "-m", "evtsync", "run", "--out", str(out), "-q", *extra],
                                env={**os.environ, "PYTHONPATH": str(src), "EVTSYNC_CACHE_DIR": str(cache),
                                     "EVTSYNC_QUIET": "1"}, stdout=subprocess.DEVNULL, stderr=err)
        # the main process's own rusage, with the children it waited for (e.g. the trace scanner's
        # build), apart from the processes reparented here (fork servers and their workers)
        _, status, main_usage = os.wait4(proc.pid, 0)
        reap_all()
        wall = time.perf_counter() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            raise SystemExit(f"evtsync run failed ({code}):\n{err.read().decode(errors='replace')[-3000:]}")
    manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
    stages = {name: entry.get("seconds") for name, entry in manifest.get("stages", {}).items()}
    # a stage's CPU: its work in this process plus its job's in a pool process (the engine's
    # ``cpu_seconds``); its wall seconds include waiting for jobs that ran beside others
    stage_cpu = {name: entry.get("cpu_seconds") for name, entry in manifest.get("stages", {}).items()}
    return {"cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            "main_process_cpu_s": main_usage.ru_utime + main_usage.ru_stime, "wall_s": wall, "load_before": load, "load_after": loadavg(), "stage_seconds": stages,
            "stage_cpu_s": stage_cpu}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baseline-src", type=Path, help="a checkout of the code to compare with")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/evtsync-demo-cpu"))
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--warm-baseline", action="store_true",
                    help="run the baseline a second time after this checkout's runs: its warm run (the first "
                         "fills its numba, demo and compiled-model caches), printed as 'baseline, warm'")
    ap.add_argument("--result-cache", action="store_true",
                    help="this checkout only: first demo, warm demo with --no-result-cache (the baseline), "
                         "warm demo copying from the result cache")
    ap.add_argument("--cold", action="store_true",
                    help="cold demos (--no-result-cache, a fresh cache folder each), baseline and this checkout "
                         "interleaved --rounds times")
    ap.add_argument("--rounds", type=int, default=1, help="with --cold: interleaved rounds (default 1)")
    ap.add_argument("--extra", action="append", default=[], help="with --cold: an argument added to this "
                    "checkout's runs (repeatable)")
    args = ap.parse_args()
    become_subreaper()
    cache = args.workdir / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    runs: list[tuple[str, Path, tuple[str, ...]]]
    cold = ("--no-result-cache",)
    if args.cold:
        runs = []
        for r in range(args.rounds):
            if args.baseline_src:
                runs.append((f"baseline, cold #{r + 1}", args.baseline_src.resolve(), cold))
            runs.append((f"this, cold #{r + 1}", HERE, (*cold, *args.extra)))
    elif args.result_cache:
        runs = [("this, first (caches empty)", HERE, ()),
                ("baseline, warm (--no-result-cache)", HERE, ("--no-result-cache",)), ("this, warm", HERE, ())]
    else:
        runs = ([("baseline", args.baseline_src.resolve(), ())] if args.baseline_src else []) + \
            [("this, first (figure cache empty)", HERE, ()), ("this, warm", HERE, ())] + \
            ([("baseline, warm", args.baseline_src.resolve(), ())] if args.baseline_src and args.warm_baseline
             else [])
    results: dict = {"machine": f"{platform.node()} {os.cpu_count()} cores",
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "runs": {}}
    for i, (name, src, extra) in enumerate(runs):
        if args.cold:  # a fresh cache folder for each cold run
            cache = args.workdir / f"cache-{i}"
            shutil.rmtree(cache, ignore_errors=True)
        res = demo_run(src, args.workdir / f"run{i}", cache, extra)
        results["runs"][name] = res
        print(f"{name}: CPU {res['cpu_s']:.1f} s (all processes), wall {res['wall_s']:.1f} s, "
              f"load {res['load_before']} -> {res['load_after']}", file=sys.stderr)
    print(f"\n{results['date']}, {results['machine']}")
    names = list(results["runs"])
    stage_names = list(dict.fromkeys(s for n in names for s in results["runs"][n]["stage_cpu_s"]))
    print("| run | CPU s (all processes) | wall s | load before | sum of stage CPU | "
          + " | ".join(stage_names) + " |   (stages: CPU s)")
    print("|" + "---|" * (5 + len(stage_names)))
    for name in names:
        r = results["runs"][name]
        cpu = {k: (v if v is not None else float("nan")) for k, v in r["stage_cpu_s"].items()}
        print(f"| {name} | {r['cpu_s']:.1f} | {r['wall_s']:.1f} | {r['load_before']} | {sum(cpu.values()):.1f} | "
              + " | ".join(f"{cpu.get(s, float('nan')):.2f}" for s in stage_names) + " |")
    base = (results["runs"].get("baseline, warm") or results["runs"].get("baseline")
            or results["runs"].get("baseline, warm (--no-result-cache)"))
    if args.cold:
        for who in ("baseline", "this"):
            cpus = [r["cpu_s"] for n, r in results["runs"].items() if n.startswith(who)]
            if cpus:
                print(f"{who}: cold CPU (all processes) " + ", ".join(f"{c:.1f}" for c in cpus) + " s")
    elif base:
        print(f"warm / baseline CPU: {results['runs']['this, warm']['cpu_s'] / base['cpu_s']:.2f}")
    # start-up and everything outside the stages: the CPU of the process tree less the stages' own
    # (each stage's work in the main process plus its job's in a pool process): process starts,
    # imports in the main process and the pool's workers, the pool's warm-up, the CLI
    for name, r in results["runs"].items():
        staged = sum(v for v in r["stage_cpu_s"].values() if v is not None)
        print(f"{name}: outside the stages (start-up, imports, pool warm-up) {r['cpu_s'] - staged:.1f} s "
              f"= {(r['cpu_s'] - staged) / r['cpu_s']:.0%} of {r['cpu_s']:.1f} s; the main process (with the "
              f"children it waited for) {r['main_process_cpu_s']:.1f} s, the others (fork servers, pool and "
              f"figure workers) {r['cpu_s'] - r['main_process_cpu_s']:.1f} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
