"""CPU cost of parsing a small nccl-tests log through the CLI (issue 16), baseline in the same run.

Run by hand (not a test)::

    /work/main/.venv/bin/python benchmarks/bench_nccltests_parse.py [--reps 5] [--baseline /work/main]

Each measurement is a fresh process; its CPU time (user + system, from ``wait4``'s rusage)
is the number reported, the best of ``--reps`` (CPU time is steadier than wall time on a
shared machine). Commands, all on the same 2 KB log
(``../shared/data/nccl-tests/all_reduce_A100-80GB_1x8_meta-gcm-fixture.txt``):

- ``python -c pass``: the interpreter's floor;
- ``baseline CLI``: ``python -m evtsync nccl-tests parse LOG`` with the code at ``--baseline``
  (by default the main checkout);
- ``this CLI``: the same command with this checkout's code (includes whatever the other
  command modules import while the parser is built);
- ``nccl-tests command alone``: this checkout's ``evtsync.cli.nccltests`` registered on its own
  parser and run, i.e. the cost once the CLI imports only the command it runs; the process
  also reports whether pandas, scipy or numpy were imported.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
LOG = REPO.parent / "shared" / "data" / "nccl-tests" / "all_reduce_A100-80GB_1x8_meta-gcm-fixture.txt"

ALONE = """
import argparse, sys
from evtsync.cli import nccltests
p = argparse.ArgumentParser(prog="evtsync")
sub = p.add_subparsers(dest="command")
nccltests.register(sub)
a = p.parse_args(["nccl-tests", "parse", sys.argv[1]])
rc = a.handler(a)
heavy = [m for m in ("pandas", "scipy", "numpy") if m in sys.modules]
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
raise SystemExit(rc)
"""


def cpu_of(cmd: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(CPU seconds, wall seconds, stderr) of one fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {err}")
    return usage.ru_utime + usage.ru_stime, wall, err


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--baseline", default="/work/main", help="checkout whose code is the baseline")
    args = ap.parse_args()
    py = sys.executable
    here = dict(os.environ, PYTHONPATH=str(REPO))
    base = dict(os.environ, PYTHONPATH=args.baseline)
    cases = [
        ("python -c pass", [py, "-c", "pass"], here),
        ("baseline CLI", [py, "-m", "evtsync", "nccl-tests", "parse", str(LOG)], base),
        ("this CLI", [py, "-m", "evtsync", "nccl-tests", "parse", str(LOG)], here),
        ("nccl-tests command alone", [py, "-c", ALONE, str(LOG)], here),
    ]
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}; "
          f"load average {os.getloadavg()[0]:.2f}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")
    print(f"log: {LOG.name} ({LOG.stat().st_size} bytes); best of {args.reps} fresh processes")
    best: dict[str, float] = {}
    for name, cmd, env in cases:
        runs = [cpu_of(cmd, env) for _ in range(args.reps)]
        cpu = min(r[0] for r in runs)
        wall = min(r[1] for r in runs)
        heavy = next((ln.split("=", 1)[1] for ln in runs[0][2].splitlines() if ln.startswith("HEAVY=")), None)
        best[name] = cpu
        extra = "" if heavy is None else f"   heavy modules imported: {heavy or 'none'}"
        print(f"{name:28s} CPU {cpu:6.3f} s   wall {wall:6.3f} s{extra}")
    print(f"this CLI / baseline CLI: {best['this CLI'] / best['baseline CLI']:.2f}; "
          f"command alone / baseline CLI: {best['nccl-tests command alone'] / best['baseline CLI']:.2f}")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
