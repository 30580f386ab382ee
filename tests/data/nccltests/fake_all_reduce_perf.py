#!/usr/bin/env python3
"""Stand-in for nccl-tests' all_reduce_perf: replays a real log (replay_*.txt beside it).

It honours -w, -n, -N and -z in its header line and repeats the real table -N times,
scaling each cycle's times by a small deterministic factor (so cycle CV is not zero) and
recomputing algbw/busbw as nccl-tests does. With FAKE_NCCL_FAIL_Z set to a -z value it
prints an Open MPI-style failure for that value and exits 1.
"""

import math
import os
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOG = HERE / "replay_all_reduce_A100-80GB_1x8.txt"
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+(\S+)\s+\S+\s+\S+\s+(\S+)\s+(\S+)\s+\S+\s+\S+\s+(\S+)\s*$")


def option(argv, flag, default):
    if flag in argv:
        return argv[argv.index(flag) + 1]
    return default


def main():
    argv = sys.argv[1:]
    warmup, iters = option(argv, "-w", "5"), option(argv, "-n", "20")
    cycles, blocking = int(option(argv, "-N", "1")), option(argv, "-z", "0")
    if os.environ.get("FAKE_NCCL_FAIL_Z") == blocking:
        print("--------------------------------------------------------------------------")
        print("There are not enough slots available in the system to satisfy the 8")
        print("slots that were requested by the application:")
        return 1
    lines = LOG.read_text().splitlines()[1:]
    rows = [m for m in (ROW.match(x) for x in lines) if m]
    factor = 2 * 7 / 8
    for line in lines:
        if line.startswith("# nThread"):
            print(f"# nThread 1 nGpus 1 minBytes 33554432 maxBytes 1073741824 step: 2(factor) warmup iters: {warmup} "
                  f"iters: {iters} agg iters: 1 validation: 1 graph: 0")
            if blocking != "0":
                print("# Blocking Enabled: wait for completion and barrier after each collective")
        elif ROW.match(line) or line.startswith("# Out of") or line.startswith("# Avg"):
            continue
        else:
            print(line)
    for c in range(cycles):
        scale = 1.0 + 0.01 * math.sin(1.0 + c) * (1 + int(blocking))
        for m in rows:
            size, count, dtype, redop, root = m.group(1), m.group(2), m.group(3), m.group(4), m.group(5)
            out = []
            for tok in (m.group(6), m.group(8)):
                t = float(tok) * scale
                alg = int(size) / t / 1e3
                out.append(f"{t:7.1f}  {alg:6.2f}  {alg * factor:6.2f}  {0:6d}")
            print(f"{int(size):12d}  {int(count):12d}  {dtype:>8}  {redop:>6}  {int(root):6d}  " + "  ".join(out))
    print("# Out of bounds values : 0 OK")
    print("# Avg bus bandwidth    : 210.99")
    print("#")
    return 0


if __name__ == "__main__":
    sys.exit(main())
