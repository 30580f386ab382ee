"""MLE profile intervals (issue 16): the work of ``evtsync fit --mle``, before and after, same run.

Run by hand (not a test)::

    /work/main/.venv/bin/python benchmarks/bench_mle.py [--sizes 6,20,200,2000] [--reps 3]
        [--baseline-rev 8e0c332~1] [--baseline-max-n 2000]

For each sample size n, one GEV sample (mu 0, sigma 1, xi 0.1; fixed seed, drawn by
``scipy.stats.genextreme``) is fitted and given the profile intervals ``fit --mle`` computes:
xi and the 10- and 100-block return levels. The CPU time (``time.process_time``) of
``fit_gev`` + the three intervals is measured for

- ``new``: this checkout's ``evtsync.evt.mle`` (best of ``--reps``);
- ``old``: ``evtsync/evt/mle.py`` at ``--baseline-rev`` (by default the commit before the
  rewrite), read with ``git show`` and imported beside the new one (one repetition: it is
  slow), for n up to ``--baseline-max-n``.

Imports are outside the clock. The intervals of both are printed so that the results can be
compared as well as the times (the old code returns NaN for an unbounded side).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from scipy import stats  # noqa: E402

from evtsync.evt import mle  # noqa: E402


def load_old(rev: str):
    """The module ``evtsync/evt/mle.py`` as of ``rev``, imported as ``mle_old``."""
    text = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:evtsync/evt/mle.py"], check=True,
                          capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "mle_old.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("mle_old", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["mle_old"] = module  # dataclasses look their module up here
    spec.loader.exec_module(module)
    return module


def work(module, x) -> tuple[float, list[tuple[float, float]]]:
    """CPU seconds of the fit + xi, 10- and 100-block profile intervals, and the intervals."""
    start = time.process_time()
    fit = module.fit_gev(x)
    out = [tuple(module.profile_ci_xi(x, fit))]
    for period in (10.0, 100.0):
        out.append(tuple(module.profile_ci_return_level(x, fit, period)))
    return time.process_time() - start, out


def fmt(iv: tuple[float, float]) -> str:
    return "[" + ", ".join("nan" if math.isnan(v) else ("-inf" if v == -math.inf else "inf" if v == math.inf
                                                           else f"{v:.4g}") for v in iv) + "]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="6,20,200,2000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--baseline-rev", default="8e0c332~1")
    ap.add_argument("--baseline-max-n", type=int, default=2000)
    args = ap.parse_args()
    old = load_old(args.baseline_rev)
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"load average {os.getloadavg()[0]:.2f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"baseline: evtsync/evt/mle.py at {args.baseline_rev}; CPU s of fit_gev + profile intervals "
          "of xi and the 10-, 100-block return levels")
    print(f"{'n':>5} {'new s':>8} {'old s':>8} {'old/new':>8}  new xi / z10 / z100 | old xi / z10 / z100")
    for n in (int(v) for v in args.sizes.split(",")):
        x = stats.genextreme.rvs(-0.1, size=n, random_state=1000 + n)
        new_runs = [work(mle, x) for _ in range(args.reps)]
        new_s = min(r[0] for r in new_runs)
        new_iv = new_runs[0][1]
        if n <= args.baseline_max_n:
            old_s, old_iv = work(old, x)
            ratio = f"{old_s / new_s:8.1f}"
            old_text = " / ".join(fmt(iv) for iv in old_iv)
            old_col = f"{old_s:8.2f}"
        else:
            ratio, old_text, old_col = f"{'-':>8}", "not run", f"{'-':>8}"
        print(f"{n:5d} {new_s:8.3f} {old_col} {ratio}  {' / '.join(fmt(iv) for iv in new_iv)} | {old_text}",
              flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
