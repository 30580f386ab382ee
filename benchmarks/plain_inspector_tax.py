"""The plain script a user would write for the tax of NCCL Inspector logs (issue 48's anchor):
the standard library's json, max - min of the execution times per (communicator, coll_sn),
the median per communicator. Run: ``python benchmarks/plain_inspector_tax.py LOGDIR``."""

import json
import os
import statistics
import sys

folder = sys.argv[1]
low: dict = {}
high: dict = {}
for name in sorted(os.listdir(folder)):
    if not name.endswith((".log", ".jsonl")):
        continue
    with open(os.path.join(folder, name), "rb") as fh:
        for line in fh:
            record = json.loads(line)
            perf = record.get("coll_perf")
            if perf is None:
                continue
            key = (record["header"]["id"], perf["coll_sn"])
            t = perf["coll_exec_time_us"]
            if key in low:
                low[key] = min(low[key], t)
                high[key] = max(high[key], t)
            else:
                low[key] = high[key] = t
tau: dict = {}
for (comm, sn), t in high.items():
    tau.setdefault(comm, []).append(t - low[comm, sn])
for comm, values in sorted(tau.items()):
    print(f"{comm}: {len(values)} collectives, median tau {statistics.median(values)} us")
