"""The GEV MLE engine against ``scipy.stats.genextreme.fit``, and the CLI's start per command (issue 30).

Run by hand (not a test)::

    /work/main/.venv/bin/python benchmarks/bench_mle.py [--sizes 100,12000,250000] [--reps 3]
        [--baseline-rev fc35d59] [--baseline-max-n 100] [--no-cli]

MLE. For each sample size n, one sample of z-scores (GEV mu 0, sigma 1, xi 0.1; fixed seed,
drawn by ``scipy.stats.genextreme``) is fitted in the same process by

- ``scipy``: ``scipy.stats.genextreme.fit(x)`` (the baseline: the optimum alone, no errors);
- ``fit``: :func:`evtsync.evt.mle.fit_gev` (the optimum with its observed information);
- ``fit --mle``: the work of ``evtsync fit --mle`` -- the fit, the profile intervals of xi and
  of the 10- and 100-block return levels, and the Gumbel likelihood-ratio test;
- ``old`` (n <= ``--baseline-max-n``): ``evtsync/evt/mle.py`` as of ``--baseline-rev`` (the
  Nelder-Mead engine), read with ``git show`` and imported beside the new one, the same work.

CPU time (``time.process_time``), best of ``--reps`` (one repetition at n >= 100,000), imports
outside the clock. The log-likelihoods are printed so that the optimum is compared as well as the
time. Targets (issue 30): ``fit --mle`` at 12k <= 2 s, at 250k <= 5 s of CPU.

CLI. The CPU time (user + system of the child, ``resource.getrusage``) of ``python -m evtsync
ARGS`` for small commands, median of ``--reps``, as a ratio to the bare interpreter
(``python -c pass``); ``python -c "import pandas"`` shows what a command that loads the table stack pays.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402
from scipy import stats  # noqa: E402

from evtsync.evt import mle  # noqa: E402

NCCL_LOG = REPO / "tests" / "data" / "nccltests" / "replay_all_reduce_A100-80GB_1x8.txt"
RETURN_PERIODS = (10.0, 100.0)


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


def cli_work(module, x: np.ndarray, new: bool) -> float:
    """What ``fit --mle`` computes; returns the GEV log-likelihood."""
    fit = module.fit_gev(x)
    module.profile_ci_xi(x, fit)
    for period in RETURN_PERIODS:
        module.profile_ci_return_level(x, fit, period)
    if new:
        module.likelihood_ratio_test(x, fit)
    else:
        module.likelihood_ratio_test(x)
    return fit.loglik


def clock(fn, reps: int) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(reps):
        start = time.process_time()
        out = fn()
        best = min(best, time.process_time() - start)
    return best, out


def scipy_fit(x: np.ndarray) -> float:
    c, loc, scale = stats.genextreme.fit(x)
    return float(np.sum(stats.genextreme.logpdf(x, c, loc, scale)))


def child_cpu(cmd: list[str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False,
                   env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_cli(reps: int) -> None:
    py = sys.executable
    cases = [
        ("python -c pass (baseline)", [py, "-c", "pass"]),
        ('python -c "import pandas"', [py, "-c", "import pandas"]),
        ("evtsync --version", [py, "-m", "evtsync", "--version"]),
        ("evtsync models", [py, "-m", "evtsync", "models"]),
        ("evtsync nccl-tests parse LOG", [py, "-m", "evtsync", "nccl-tests", "parse", str(NCCL_LOG)]),
        ("evtsync nccl-tests stats LOG", [py, "-m", "evtsync", "nccl-tests", "stats", str(NCCL_LOG)]),
        ("evtsync fit --help", [py, "-m", "evtsync", "fit", "--help"]),
        ("evtsync blocks --help", [py, "-m", "evtsync", "blocks", "--help"]),
        ("evtsync synth --help", [py, "-m", "evtsync", "synth", "--help"]),
    ]
    base = None
    print(f"\nCLI start: CPU s of the process (median of {reps}), ratio to the bare interpreter")
    for label, cmd in cases:
        value = statistics.median(child_cpu(cmd) for _ in range(reps))
        base = value if base is None else base
        print(f"  {label:34s} {value:6.3f} s  {value / base:5.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,12000,250000")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--baseline-rev", default="fc35d59")
    ap.add_argument("--baseline-max-n", type=int, default=100)
    ap.add_argument("--no-cli", action="store_true")
    args = ap.parse_args()
    old = load_old(args.baseline_rev) if args.baseline_max_n > 0 else None
    print(f"date {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC; machine {platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}; load average {os.getloadavg()}")
    print("CPU s (best of reps); ratio = engine / scipy.stats.genextreme.fit in the same run")
    for n in (int(s) for s in args.sizes.split(",")):
        x = stats.genextreme.rvs(-0.1, size=n, random_state=n)
        reps = 1 if n >= 100_000 else args.reps
        t_scipy, ll_scipy = clock(lambda x=x: scipy_fit(x), reps)
        t_fit, fit = clock(lambda x=x: mle.fit_gev(x), reps)
        t_cli, _ = clock(lambda x=x: cli_work(mle, x, True), reps)
        line = (f"n = {n:>7}: scipy fit {t_scipy:7.3f} | fit {t_fit:7.3f} ({t_fit / t_scipy:5.2f}x) | "
                f"fit --mle work {t_cli:7.3f} ({t_cli / t_scipy:5.2f}x) | loglik new - scipy "
                f"{fit.loglik - ll_scipy:+.2e}, converged {fit.converged}, {fit.newton_steps} Newton steps")
        if old is not None and n <= args.baseline_max_n:
            t_old, ll_old = clock(lambda x=x: cli_work(old, x, False), 1)
            line += f" | old fit --mle work {t_old:7.3f} (old/new {t_old / t_cli:5.1f}x, loglik new - old {fit.loglik - ll_old:+.1e})"
        print(line, flush=True)
    if not args.no_cli:
        bench_cli(args.reps)
    print(f"load average at the end {os.getloadavg()}")


if __name__ == "__main__":
    main()
