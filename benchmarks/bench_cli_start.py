"""CPU time of the command line's start (issue 16), against ``python -c pass`` and ``import pandas``.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/bench_cli_start.py [--reps 7]

Each command runs ``--reps`` times in a fresh interpreter; the table gives the median user +
system CPU seconds of the child (``resource.getrusage(RUSAGE_CHILDREN)``) and the ratio to the
bare interpreter and to a process that only imports pandas, all measured in this same run.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASES = {
    "python -c pass (baseline)": ["-c", "pass"],
    "python -c 'import pandas' (baseline)": ["-c", "import pandas"],
    "evtsync --version": ["-m", "evtsync", "--version"],
    "evtsync --help": ["-m", "evtsync", "--help"],
    "evtsync fit --help": ["-m", "evtsync", "fit", "--help"],
    "evtsync run --bogus (argument error)": ["-m", "evtsync", "run", "--bogus"],
}


def cpu_seconds(args: list[str]) -> float:
    """User + system CPU seconds of one child interpreter running ``args``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, *args], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    opts = parser.parse_args()
    results = {}
    for _ in range(opts.reps):  # interleaved, so that load changes hit every case alike
        for name, args in CASES.items():
            results.setdefault(name, []).append(cpu_seconds(args))
    bare = statistics.median(results["python -c pass (baseline)"])
    pandas = statistics.median(results["python -c 'import pandas' (baseline)"])
    print(f"load average {os.getloadavg()[0]:.2f}; median of {opts.reps} runs; CPU s = user + system")
    print(f"{'command':42s} {'CPU s':>7s} {'/ bare':>7s} {'/ pandas':>9s}")
    for name, values in results.items():
        med = statistics.median(values)
        print(f"{name:42s} {med:7.3f} {med / bare:7.2f} {med / pandas:9.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
