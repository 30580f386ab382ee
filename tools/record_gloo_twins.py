"""Record a planted gloo job and its clean twin several times, interleaved, and keep one pair whose
step-time difference is the repeats' median (issue 46: truth for the what-if replay).

Purpose
    The what-if replay (docs/critical-path.md §8) predicts the step time saved by removing a job's
    plants; its truth is the planted job's measured step time minus its clean twin's. On a shared
    2-core machine one recording of each does not give that truth: the twins of
    tests/data/gloo-planted and gloo-whatif ran under different load (ddpw-clean's steps are 16 ms,
    ddpw's non-planted time alone is ~80 ms per step; tpdp-clean's step 3 is 49 ms, tpdp's 100 ms for
    a 25 ms plant). This script records the pair ``--repeats`` times in the order P C, C P, P C, …
    (alternating which twin goes first), with every rank pinned to one core (ranks in contiguous
    blocks: rank r on core r * n_cores // world, ``RECORD_GLOO_PIN``) and one torch thread, and with the ``thread_join`` plant's thread
    blocking instead of computing (``RECORD_GLOO_THREAD_WAITS``), so that a plant delays its own
    rank and takes no CPU from the others where its kind allows it (a GC burst and ``torch.mm``
    plants still compute: that is what they are).

    Per repeat it reads each recording's step time from the raw trace files (per file the span from
    its first ``ProfilerStep#N`` start to its last one's end, summed over files, over the steps:
    the definition the tests use), keeps the pair whose difference is nearest the median of the
    repeats' differences, and writes into both truth files (beside the kept folders) a ``twins``
    object: every repeat's planted and clean step time, difference, plants' measured durations and
    load average, the median difference, and which repeat was kept.

How to run (a Python 3.11 venv with the CPU build of torch 2.13.0)
    VENV/bin/python tools/record_gloo_twins.py --job tpdp --repeats 3 --out tests/data/gloo-twins
    (writes tests/data/gloo-twins/tpdp, tpdp-clean and their truth files; --job tpdp8, ddp (the other
    jobs of record_gloo_planted.py), ddpw, ddpa, pp3 (record_gloo_pipeline.py: 3 pipeline stages
    joined by gloo send/recv) too)
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: job name -> (recording script, its arguments)
JOBS = {"tpdp": ("record_gloo_planted.py", ["--job", "tpdp"]),
        "tpdp8": ("record_gloo_planted.py", ["--job", "tpdp8"]),
        "ddp": ("record_gloo_planted.py", ["--job", "ddp"]),
        "ddpw": ("record_gloo_whatif.py", ["--job", "ddp"]),
        "ddpa": ("record_gloo_async.py", ["--job", "ddp"]),
        "pp3": ("record_gloo_pipeline.py", [])}


def step_ms(folder: Path) -> float:
    """Mean step time (ms) read from the raw traces (module doc)."""
    span, steps = 0.0, 0
    # record_gloo_pipeline.py names its files rank-<r>.json.gz, the others <name>.pt.trace.json.gz
    for f in sorted(folder.glob("*.json.gz")):
        with gzip.open(f, "rt") as fh:
            events = json.load(fh)["traceEvents"]
        st = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
        span += max(float(e["ts"]) + float(e["dur"]) for e in st) - min(float(e["ts"]) for e in st)
        steps += len(st)
    return span / steps / 1000.0


def record(job: str, clean: bool, out: Path, stack: bool = False) -> dict:
    """One recording into ``out`` (new); its truth."""
    script, args = JOBS[job]
    env = dict(os.environ, RECORD_GLOO_PIN="1", RECORD_GLOO_THREAD_WAITS="1")
    if stack:
        env["RECORD_GLOO_STACK"] = "1"
    cmd = [sys.executable, str(HERE / script), *args, "--out", str(out)] + (["--clean"] if clean else [])
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return json.loads(out.with_name(out.name + ".truth.json").read_text())


def main() -> int:
    """Record the repeats, keep the median pair, write the truth files."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", choices=sorted(JOBS), required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stack", action="store_true", help="with_stack=True and the GC events "
                        "(record_python_gc_info): Python frames, thread joins and GC pauses named")
    parser.add_argument("--name", help="the kept folders' name (default: the job's)")
    parser.add_argument("--out", type=Path, required=True, help="the folder to hold JOB and JOB-clean (new)")
    args = parser.parse_args()
    name = args.name or args.job
    keep_p, keep_c = args.out / name, args.out / f"{name}-clean"
    if keep_p.exists() or keep_c.exists():
        print(f"record_gloo_twins: {keep_p} or {keep_c} exists", file=sys.stderr)
        return 1
    tmp = Path(tempfile.mkdtemp(prefix=f"twins-{args.job}-"))
    repeats = []
    for i in range(args.repeats):
        order = (False, True) if i % 2 == 0 else (True, False)
        got = {}
        for clean in order:
            folder = tmp / f"r{i}" / (f"{args.job}-clean" if clean else args.job)
            folder.parent.mkdir(parents=True, exist_ok=True)
            truth = record(args.job, clean, folder, args.stack)
            got[clean] = (folder, truth, step_ms(folder))
        p_ms, c_ms = got[False][2], got[True][2]
        repeats.append({"repeat": i, "planted_first": i % 2 == 0, "planted_step_ms": round(p_ms, 3),
                        "clean_step_ms": round(c_ms, 3), "difference_ms": round(p_ms - c_ms, 3),
                        "plants_measured_us": [p["measured_us"] for p in got[False][1]["plants"]],
                        "load_average_at_start": got[order[0]][1]["load_average_at_start"],
                        "load_average_at_end": got[order[1]][1]["load_average_at_end"]})
        print(f"repeat {i}: planted {p_ms:.2f} ms, clean {c_ms:.2f} ms, difference {p_ms - c_ms:.2f} ms; "
              f"load {repeats[-1]['load_average_at_start'][0]}")
    diffs = [r["difference_ms"] for r in repeats]
    median = statistics.median(diffs)
    kept = min(range(len(repeats)), key=lambda i: (abs(diffs[i] - median), repeats[i]["load_average_at_start"][0]))
    twins = {"repeats": repeats, "median_difference_ms": round(median, 3), "kept_repeat": kept,
             "order": "P C C P P C ... (alternating which twin goes first)",
             "pinned": "ranks in contiguous blocks per core (rank r on core r * n_cores // world)",
             "thread_join_thread": "blocks (sleep)", "with_stack": args.stack}
    args.out.mkdir(parents=True, exist_ok=True)
    for src_name, dst in ((args.job, keep_p), (f"{args.job}-clean", keep_c)):
        src = tmp / f"r{kept}" / src_name
        shutil.copytree(src, dst)
        truth = json.loads(src.with_name(src_name + ".truth.json").read_text())
        truth["twins"] = twins
        dst.with_name(dst.name + ".truth.json").write_text(json.dumps(truth, indent=1) + "\n")
    shutil.rmtree(tmp)
    print(f"kept repeat {kept}: difference {diffs[kept]:.2f} ms (median {median:.2f} ms of {diffs})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
