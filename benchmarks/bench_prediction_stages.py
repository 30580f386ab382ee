"""CPU of the prediction and predicted-vs-measured stages on a finished run folder, this checkout against a
baseline, interleaved (issue 48: the rank model's tau draws).

Run by hand (not a test)::

    git -C /work/main archive main | tar -x -C /tmp/base
    .venv/bin/python benchmarks/bench_prediction_stages.py --run RUN_FOLDER --baseline-src /tmp/base --rounds 2

Each measurement is a fresh process (``PYTHONPATH`` its checkout, run in it) on its own copy of the run
folder (an ``evtsync run`` folder whose stages are done): it runs the two stages' functions as the run
does, in one process (prediction, then predicted-vs-measured: the second reuses the rank model's draws
the first made), and prints each one's process CPU seconds (its imports included, as in a run) and the
CPU of the rank model's quadrature (``_delay_draws``), of ranktail's draws (``expected_max_draws``) and of
the out-of-sample refit (``fit_table``) inside them. The baseline runs first in each round.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "benchmarks"))
from bench_small_ranks import loadavg  # noqa: E402  (one home for the load average)

WORKER = r"""
import functools, json, shutil, sys, time
from pathlib import Path
import evtsync.evt.rankmodel as R
import evtsync.evt.ranktail as T
from evtsync.pipeline.engine import Run
from evtsync.pipeline.options import RunOptions
from evtsync.pipeline import stages as S
inner = {}
def timed(mod, name):
    f = getattr(mod, name)
    @functools.wraps(f)
    def w(*a, **k):
        c0 = time.process_time()
        try:
            return f(*a, **k)
        finally:
            inner[name] = inner.get(name, 0.0) + time.process_time() - c0
    setattr(mod, name, w)
for mod, name in ((R, "_delay_draws"), (T, "expected_max_draws"), (R, "fit_table")):
    timed(mod, name)
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
shutil.copytree(src, dst)
run = Run(RunOptions(out=dst))
run.manifest = json.loads((dst / "manifest.json").read_text())
out = {}
for name, fn in (("prediction", S._stage_prediction), ("predicted-vs-measured", S._stage_predicted_vs_measured)):
    inner.clear()
    c0 = time.process_time()
    fn(run)
    out[name] = {"cpu_s": time.process_time() - c0, **{k: round(v, 3) for k, v in inner.items()}}
print(json.dumps(out))
"""


def measure(src: Path, run: Path, work: Path) -> dict:
    """The two stages' CPU with the code of ``src`` on a copy of ``run`` under ``work``."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run([sys.executable, "-c", WORKER, str(run.resolve()), str(work / "run")], env=env, cwd=src,
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, required=True, help="a finished evtsync run folder (its stages done)")
    ap.add_argument("--baseline-src", type=Path, required=True, help="a checkout of the code to compare with")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, help="also append the results as JSON lines here")
    args = ap.parse_args()
    rows = []
    for r in range(args.rounds):
        for label, src in (("baseline", args.baseline_src.resolve()), ("this", HERE)):
            with tempfile.TemporaryDirectory() as tmp:
                load = loadavg()
                res = measure(src, args.run, Path(tmp))
            row = {"round": r + 1, "code": label, "load_before": load, "date": time.strftime("%Y-%m-%d %H:%M UTC",
                   time.gmtime()), "machine": f"{platform.node()} {os.cpu_count()} cores", **res}
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        with args.out.open("a", encoding="utf-8") as fh:
            fh.writelines(json.dumps(row) + "\n" for row in rows)


if __name__ == "__main__":
    main()
