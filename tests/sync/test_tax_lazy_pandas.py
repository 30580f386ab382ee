"""The NCCL Inspector tax runs without pandas (issue 48: the pandas and pyarrow import, ~0.3 s of
CPU, was most of the gap to the plain script).

In a fresh interpreter: importing what ``evtsync tax`` imports, listing a folder of logs
(``inspector_files``), reading every round of them (``LogRounds``) and the streamed tax of a clean
job (``stream_tax``, its printed report's rows) load neither pandas nor pyarrow; its tables are
built with pandas when first read, and the numbers of both are max - min of the times the test
wrote. ``evtsync tax LOGDIR`` (the report, and ``--json``) ends without pandas or pyarrow imported;
with ``-o`` it writes the tables. A Kineto trace's tax still works through the same (now lazy)
modules. The module lists come from ``sys.modules`` in the child, printed as JSON.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_CHILD = r"""
import json, sys
import evtsync.cli.tax, evtsync.sync.logtax, evtsync.sync.tax, evtsync.trace.traceset
from evtsync.trace.readers import readers
from evtsync.sync.logtax import inspector_files, stream_tax
from evtsync.trace.readers.inspector import LogRounds

readers()  # every reader's module, as the sniffing loads them
heavy = lambda: sorted(m for m in ("pandas", "pyarrow") if m in sys.modules)
out = {"imported": heavy()}
files = inspector_files(sys.argv[1])
out["files"] = len(files)
reader = LogRounds(files, block_bytes=256)
records = 0
while reader.active:
    records += len(reader.round()["sn"])
reader.close()
out["records"], out["after_reading"] = records, heavy()
got = stream_tax(files, keep_ranks=False, block_bytes=256)
out["after_tax"] = heavy()
out["summary"] = [[r["count"], r["tau_max_us"], r["n_invalid"]] for r in got.report.summary.records()]
out["tau"] = got.tables.collectives["tau_max_us"].tolist()
out["after_tables"] = heavy()
print(json.dumps(out))
"""


def _record(sn: int, rank: int, n: int, us: int) -> str:
    return json.dumps({"header": {"id": "0xw", "comm_name": "pg", "rank": rank, "n_ranks": n, "nnodes": 1},
                       "metadata": {"inspector_output_format_version": "v4.0", "dump_timestamp_us": 1000 + sn,
                                    "hostname": "h0", "pid": rank},
                       "coll_perf": {"coll": "AllReduce", "coll_sn": sn, "coll_msg_size_bytes": 1024,
                                     "coll_exec_time_us": us, "coll_timing_source": "kernel_gpu"}}) + "\n"


def _run(code: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)


def _write_logs(folder: Path, n_files: int, n_sn: int) -> list[list[int]]:
    """One world communicator, ``n_sn`` AllReduces; returns each collective's times by rank (µs)."""
    times = [[100 + (rank * 7 + sn) % 13 for rank in range(n_files)] for sn in range(n_sn)]
    for rank in range(n_files):
        (folder / f"h0-pid{rank}.log").write_text(
            "".join(_record(sn, rank, n_files, times[sn][rank]) for sn in range(n_sn)))
    return times


def test_inspector_logs_listed_read_and_taxed_without_pandas(tmp_path: Path) -> None:
    n_files, n_sn = 4, 12
    times = _write_logs(tmp_path, n_files, n_sn)
    done = _run(_CHILD, str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["imported"] == [] and got["after_reading"] == [] and got["after_tax"] == []
    assert got["files"] == n_files and got["records"] == n_files * n_sn  # every record read
    taus = [float(max(t) - min(t)) for t in times]  # the hand tax: max - min of the times
    assert got["summary"] == [[n_sn, max(taus), 0]]  # one PG, one type: every collective valid
    assert got["tau"] == taus
    assert "pandas" in got["after_tables"]  # the tables are pandas frames, built when first read


_CLI = r"""
import contextlib, io, json, sys
import evtsync.cli as c
sys.argv = ["evtsync", "tax", *sys.argv[1:]]
text = io.StringIO()
with contextlib.redirect_stdout(text):
    rc = c.main()
print(json.dumps({"rc": rc, "out": text.getvalue(),
                  "imported": sorted(m for m in ("pandas", "pyarrow") if m in sys.modules)}))
"""


def test_the_inspector_tax_command_imports_no_pandas(tmp_path: Path) -> None:
    """``evtsync tax LOGDIR`` and ``--json`` end without pandas or pyarrow; ``-o`` writes the tables."""
    logs = tmp_path / "logs"
    logs.mkdir()
    n_files, n_sn = 4, 9
    times = _write_logs(logs, n_files, n_sn)
    taus = sorted(float(max(t) - min(t)) for t in times)
    runs = {}
    for name, extra in (("report", []), ("json", ["--json"]), ("out", ["-o", str(tmp_path / "out.csv")])):
        done = _run(_CLI, str(logs), *extra)
        assert done.returncode == 0, done.stderr[-2000:]
        runs[name] = json.loads(done.stdout.strip().splitlines()[-1])
        assert runs[name]["rc"] == 0
    assert runs["report"]["imported"] == [] and runs["json"]["imported"] == []
    assert f"{n_files} rank(s) from NCCL Inspector logs" in runs["report"]["out"]
    assert f"{n_files * n_sn} collective records" in runs["report"]["out"]
    (summary,) = json.loads(runs["json"]["out"])["summary"]
    assert summary["count"] == n_sn and summary["n_invalid"] == 0
    assert summary["tau_max_us"] == max(taus) and summary["tau_median_us"] == taus[n_sn // 2]  # n odd
    assert json.loads(runs["json"]["out"])["n_mismatches"] == 0
    with open(tmp_path / "out.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(float(r["tau_max_us"]) for r in rows) == taus  # -o: the tables, one row per collective
    assert runs["out"]["out"] == runs["report"]["out"]  # the same report printed


def test_kineto_tax_through_the_lazy_modules(tmp_path: Path) -> None:
    """Two Kineto ranks, one NCCL AllReduce each (120 and 100 µs): the tax is 20 µs, the straggler rank 1."""
    for rank, dur in ((0, 120.0), (1, 100.0)):
        events = [{"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0,
                   "tid": 7, "ts": 1000.0 + 120.0 - dur, "dur": dur,
                   "args": {"stream": 7, "device": 0, "Collective name": "allreduce", "In msg nelems": 256,
                            "Out msg nelems": 256, "dtype": "Float", "Group size": 2,
                            "Process Group Name": "0", "Process Group Ranks": "[0, 1]"}}]
        (tmp_path / f"rank{rank}.json").write_text(json.dumps(
            {"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": 2}}))
    code = ("import sys, evtsync.cli as c; sys.argv = ['evtsync', 'tax', sys.argv[1], '-o', sys.argv[2]]; "
            "sys.exit(c.main())")
    done = _run(code, str(tmp_path), str(tmp_path / "out.csv"))
    assert done.returncode == 0, done.stderr[-2000:]
    with open(tmp_path / "out.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 1
    assert float(rows[0]["tau_max_us"]) == 20.0
    assert int(rows[0]["straggler_rank"]) == 1
