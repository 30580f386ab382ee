"""Write a rank's tables as a minimal Nsight Systems SQLite export (test helper).

The tables and columns are those of a real export (``nsys export --type sqlite``, schema
3.13, as in tests/data/nsys): ``StringIds``, ``CUPTI_ACTIVITY_KIND_KERNEL``,
``CUPTI_ACTIVITY_KIND_RUNTIME``, ``NVTX_EVENTS``, ``TARGET_INFO_GPU`` and
``TARGET_INFO_SESSION_START_TIME``, with times in ns since the session start. Used to read
one synthetic job both as Kineto traces and as nsys exports.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from evtsync.trace.tables import RankTables

SCHEMA = """
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, "end" INTEGER NOT NULL, deviceId INTEGER,
  contextId INTEGER, streamId INTEGER, correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,
  shortName INTEGER, mangledName INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, "end" INTEGER NOT NULL, eventClass INTEGER,
  globalTid INTEGER, correlationId INTEGER, nameId INTEGER, returnValue INTEGER, callchainId INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, "end" INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
  category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
  domainId INTEGER);
CREATE TABLE TARGET_INFO_GPU (vmId INTEGER, id INTEGER, name TEXT, cuDevice INTEGER);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
"""


def write_export(tables: RankTables, path: Path, gpu_name: str = "NVIDIA H200") -> None:
    """``tables``' kernels, runtime calls and user annotations as an nsys export at ``path``."""
    kernels = tables.kernels[tables.kernels["cat"].astype(str) == "kernel"]
    runtime = tables.runtime
    ranges = tables.cpu_ops[tables.cpu_ops["cat"].astype(str) == "user_annotation"]
    base = int(min(kernels["ts_ns"].min(), runtime["ts_ns"].min() if len(runtime) else 2**62))
    strings: dict[str, int] = {}

    def sid(text: str) -> int:
        return strings.setdefault(text, len(strings) + 1)

    pid = 4242
    conn = sqlite3.connect(path)
    conn.executescript(SCHEMA)
    conn.executemany(
        'INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?)',
        [(int(k.ts_ns) - base, int(k.end_ns) - base, int(k.device), int(k.stream), int(k.correlation), pid << 24,
          sid(str(k.name)), sid(str(k.name).split("(")[0][:40]), sid("_Z" + str(k.name)[:20]))
         for k in kernels.itertuples()])
    conn.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?, ?, ?, 0, NULL)",
        [(int(r.ts_ns) - base, int(r.end_ns) - base, (pid << 24) | int(r.tid), int(r.correlation),
          sid(f"{r.name}_v7000")) for r in runtime.itertuples()])
    conn.executemany(
        "INSERT INTO NVTX_EVENTS VALUES (?, ?, 59, NULL, NULL, NULL, NULL, ?, NULL, ?, 0)",
        [(int(c.ts_ns) - base, int(c.end_ns) - base, (pid << 24) | int(c.tid), sid(str(c.name)))
         for c in ranges.itertuples()])
    conn.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in strings.items()])
    conn.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 0, ?, ?)", (gpu_name, int(kernels["device"].iloc[0])))
    conn.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (base,))
    conn.commit()
    conn.close()
