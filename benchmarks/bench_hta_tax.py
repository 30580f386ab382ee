"""``evtsync tax`` on the real 8-rank DLRM traces against HTA, whole cold processes (issue 48).

Run by hand (not a test)::

    python -m venv /tmp/hta && /tmp/hta/bin/pip install HolisticTraceAnalysis   # never into .venv
    EVTSYNC_SHARED=/work/shared .venv/bin/python benchmarks/bench_hta_tax.py \\
        --hta-python /tmp/hta/bin/python --reps 5

What a user runs, each in a fresh process, interleaved ``--reps`` times (CPU = user + system of
the process and its reaped children, from ``wait4``; interpreter start and imports included):

- ``HTA``: HolisticTraceAnalysis' ``TraceAnalysis(trace_dir)`` (reads the eight traces), then
  ``get_potential_stragglers()`` and ``get_comm_comp_overlap(visualize=False)``: its straggler
  and communication/computation analysis, the anchor issue 48 names;
- ``evtsync tax, fresh cache``: ``python -m evtsync tax DIR`` with an empty trace cache (the
  decoded traces are written to it);
- ``evtsync tax, warm cache``: the same again with that cache filled (a second look at the same
  traces; since issue 48 files under 256 KiB are not cached, so for these traces it is a
  second cold read);
- ``baseline src, fresh cache`` (``--baseline-src DIR``): ``evtsync tax`` from another source
  tree, e.g. ``git archive <commit> | tar -x -C DIR``, interleaved with the rest.

The traces are copied to a temporary folder first (HTA reads every file in its folder; the
shared folder also holds the licence), and every process runs there, not in the checkout
(``python -m evtsync`` would import the checkout's code from the current folder ahead of
``PYTHONPATH``: ``--baseline-src`` would not be the baseline).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from bench_inspector import process_usage  # benchmarks/ is on the path: this file runs as a script

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("EVTSYNC_SHARED", REPO.parent / "shared"))
DLRM = SHARED / "data" / "traces" / "dlrm-8rank-v100"

HTA_SCRIPT = """
import logging, sys
logging.disable(logging.WARNING)
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1])
print(analysis.get_potential_stragglers())
print(analysis.get_comm_comp_overlap(visualize=False))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hta-python", required=True, help="the python of a venv with HolisticTraceAnalysis")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", type=Path, help="write every measurement here")
    ap.add_argument("--baseline-src", type=Path, help="also run `evtsync tax` (fresh cache) from this source tree "
                    "(e.g. a `git archive` of an earlier commit), interleaved")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("EVTSYNC_CACHE_DIR", None)
    runs: dict[str, list[dict[str, float]]] = {"HTA": [], "evtsync tax, fresh cache": [], "evtsync tax, warm cache": []}
    if args.baseline_src:
        runs["baseline src, fresh cache"] = []
    with tempfile.TemporaryDirectory(prefix="bench-hta-") as tmp:
        traces = Path(tmp) / "dlrm"
        traces.mkdir()
        for f in sorted(DLRM.glob("*.json.gz")):
            shutil.copy(f, traces / f.name)
        hta_script = Path(tmp) / "hta_tax.py"
        hta_script.write_text(HTA_SCRIPT)
        print(f"{len(list(traces.iterdir()))} traces, load {os.getloadavg()[0]:.2f}", flush=True)
        for rep in range(args.reps):
            cache = Path(tmp) / f"cache{rep}"
            runs["HTA"].append(process_usage([args.hta_python, str(hta_script), str(traces)], env, tmp))
            evt = [sys.executable, "-m", "evtsync", "tax", str(traces)]
            runs["evtsync tax, fresh cache"].append(process_usage(evt, {**env, "EVTSYNC_CACHE_DIR": str(cache)}, tmp))
            runs["evtsync tax, warm cache"].append(process_usage(evt, {**env, "EVTSYNC_CACHE_DIR": str(cache)}, tmp))
            shutil.rmtree(cache, ignore_errors=True)
            if args.baseline_src:
                base_env = {**env, "PYTHONPATH": str(args.baseline_src), "EVTSYNC_CACHE_DIR": str(cache)}
                runs["baseline src, fresh cache"].append(process_usage(evt, base_env, tmp))
                shutil.rmtree(cache, ignore_errors=True)
            print(f"rep {rep + 1}: " + ", ".join(f"{k} {v[-1]['cpu_s']:.2f} s" for k, v in runs.items())
                  + f" (load {os.getloadavg()[0]:.2f})", flush=True)
    hta = [r["cpu_s"] for r in runs["HTA"]]
    for name, rs in runs.items():
        cpu = [r["cpu_s"] for r in rs]
        ratios = [c / h for c, h in zip(cpu, hta, strict=True)]
        print(f"{name:26s} CPU median {statistics.median(cpu):.2f} s, peak RSS median "
              f"{statistics.median(r['peak_rss_mb'] for r in rs):.0f} MB, / HTA per pair: "
              + ", ".join(f"{x:.2f}" for x in ratios) + f" (median {statistics.median(ratios):.2f})")
    if args.json:
        args.json.write_text(json.dumps({"load_after": os.getloadavg(), "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
