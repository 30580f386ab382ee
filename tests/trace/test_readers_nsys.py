"""Nsight Systems SQLite exports read into the rank tables.

Expected counts are plain ``sqlite3`` queries of the file (tests/data/nsys/README.md), not
the reader's output; damaged copies (a missing table or column, a truncated file) give a
one-line error naming what is missing.
"""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from evtsync.core.errors import TraceError
from evtsync.trace.readers import read_rank, reader_for
from evtsync.trace.traceset import load_traces

EXPORT = Path(__file__).parents[1] / "data" / "nsys" / "perlmutter-cloverleaf-cuda.sqlite"


def query(path: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_counts_equal_plain_queries() -> None:
    assert reader_for(EXPORT).name == "nsys"
    traces = load_traces([f"0={EXPORT}"], jobs=1)
    assert traces.source == "nsys"
    kernels = query(EXPORT, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]
    copies = query(EXPORT, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY")[0][0]
    runtime = query(EXPORT, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME")[0][0]
    assert (kernels, copies, runtime) == (1312, 279, 3048)  # as the data README says
    assert (traces.kernels["cat"] == "kernel").sum() == kernels
    assert (traces.kernels["cat"] == "gpu_memcpy").sum() == copies
    assert len(traces.runtime) == runtime
    assert traces.ranks["n_kernels"].tolist() == [kernels]
    # names through StringIds, per name
    by_name = dict(query(EXPORT, "SELECT s.value, COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                                 "JOIN StringIds s ON s.id = k.demangledName GROUP BY 1"))
    got = traces.kernels[traces.kernels["cat"] == "kernel"]["name"].astype(str).value_counts().to_dict()
    assert got == by_name
    # total kernel time and the first kernel's start, in ns since 1970
    total_ns, first_ns = query(EXPORT, "SELECT SUM(\"end\" - start), MIN(start) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0]
    base = query(EXPORT, "SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME")[0][0]
    kern = traces.kernels[traces.kernels["cat"] == "kernel"]
    assert int(kern["dur_ns"].sum()) == total_ns
    assert int(kern["ts_ns"].min()) == base + first_ns
    # every kernel's launch is found by its correlation id
    launches = query(EXPORT, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
                             "USING (correlationId)")[0][0]
    joined = kern.merge(traces.runtime[["correlation"]], on="correlation")
    assert len(joined) == launches == 1312
    assert set(traces.runtime["name"].astype(str)) >= {"cudaLaunchKernel", "cudaMemcpy", "cudaDeviceSynchronize"}
    assert traces.ranks["gpu"].tolist() == ["A100"]
    sync = query(EXPORT, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")[0][0]
    untab = traces.untabulated.set_index("category")["count"]
    assert untab["CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"] == sync


def test_rank_needed(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot tell which rank"):
        read_rank(EXPORT)
    named = tmp_path / "rank3.sqlite"
    shutil.copy(EXPORT, named)
    assert read_rank(named).rank == 3


def damaged(tmp_path: Path, sql: str) -> Path:
    copy = tmp_path / "rank0.sqlite"
    shutil.copy(EXPORT, copy)
    copy.chmod(0o644)
    conn = sqlite3.connect(copy)
    conn.execute(sql)
    conn.commit()
    conn.close()
    return copy


def test_missing_table(tmp_path: Path) -> None:
    copy = damaged(tmp_path, "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    with pytest.raises(TraceError, match=r"rank0.sqlite: Nsight Systems export has no table CUPTI_ACTIVITY_KIND_KERNEL") as err:
        read_rank(copy)
    assert "\n" not in str(err.value)


def test_missing_column(tmp_path: Path) -> None:
    copy = damaged(tmp_path, "ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL RENAME COLUMN correlationId TO corrId")
    with pytest.raises(TraceError, match=r"table CUPTI_ACTIVITY_KIND_KERNEL has no column correlationId"):
        read_rank(copy)
    copy2 = tmp_path / "s"
    copy2.mkdir()
    no_strings = damaged(copy2, "DROP TABLE StringIds")
    with pytest.raises(TraceError, match=r"no table StringIds \(needed for kernel names\)"):
        read_rank(no_strings)


def test_truncated(tmp_path: Path) -> None:
    cut = tmp_path / "rank0.sqlite"
    cut.write_bytes(EXPORT.read_bytes()[:1_000_000])
    with pytest.raises(TraceError, match=r"truncated Nsight Systems export: 1000000 bytes, its header says 2154496"):
        read_rank(cut)


def test_cli_says_what_it_lacks(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "evtsync", "tax", f"0={EXPORT}", "--no-cache"],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert "1 rank(s) [A100], " in run.stdout and "0 NCCL kernels (read from nsys)" in run.stdout
    assert "nothing to align" in run.stdout
    blocks = subprocess.run([sys.executable, "-m", "evtsync", "blocks", f"0={EXPORT}", "--no-cache"],
                            capture_output=True, text=True, check=False)
    assert blocks.returncode != 0 and "Traceback" not in blocks.stderr
    assert "no process group with NCCL collectives" in blocks.stderr
    attribute = subprocess.run([sys.executable, "-m", "evtsync", "attribute", f"0={EXPORT}", "--no-cache", "-o",
                                str(tmp_path / "attribution.csv")], capture_output=True, text=True, check=False)
    # issue 28: an input attribution cannot run on is a one-line error and a non-zero exit, no file
    assert attribute.returncode != 0 and "Traceback" not in attribute.stderr
    assert "nothing to attribute: no collective" in attribute.stderr
    assert not (tmp_path / "attribution.csv").exists()


@pytest.fixture(scope="module")
def synthetic_job(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201 - test fixture
    """An 8-rank synthetic job read from its Kineto traces and from nsys exports of them
    (tests/nsys_writer.py: the schema of a real export), with both tax readings."""
    from evtsync.sync.tax import tax_from_traces
    from evtsync.synth import write_demo_traces
    from evtsync.trace.traceset import expand_paths
    from tests.nsys_writer import write_export

    tmp_path = tmp_path_factory.mktemp("nsys-synth")
    traces_dir = write_demo_traces(tmp_path / "synth")
    exports = tmp_path / "nsys"
    exports.mkdir()
    for path in expand_paths([traces_dir]):
        tables = read_rank(path)
        write_export(tables, exports / f"rank{tables.rank}.sqlite")
    kineto = load_traces(traces_dir, jobs=1)
    nsys = load_traces(exports, jobs=1)
    return kineto, nsys, tax_from_traces(kineto), tax_from_traces(nsys)


def test_synthetic_job_as_nsys_exports_same_tax_and_blocks(synthetic_job) -> None:  # noqa: ANN001
    """The exports give the Kineto reading's tax, stragglers and block z-scores; they carry
    no process-group fields, so the groups are inferred per stream (same members)."""
    import numpy as np

    from evtsync.blocks.cut import compute_zscores

    kineto, nsys, (ka, kt), (na, nt) = synthetic_job
    assert nsys.source == "nsys" and nsys.rank_ids == list(range(8))
    assert len(nsys.nccl_kernels) == len(kineto.nccl_kernels) > 0
    assert sorted(na.groups["pg_ranks"]) == sorted(ka.groups["pg_ranks"])
    assert set(na.groups["pg_source"]) == {"inferred"}
    by_members = {row.pg: row.pg_ranks for row in ka.groups.itertuples()}
    key = ["pg_ranks", "index"]
    a = kt.collectives.assign(pg_ranks=kt.collectives["pg"].map(by_members)).sort_values(key)
    b = nt.collectives.sort_values(key)
    np.testing.assert_array_equal(a["tau_max_us"].to_numpy(), b["tau_max_us"].to_numpy())
    np.testing.assert_array_equal(a["straggler_rank"].to_numpy(), b["straggler_rank"].to_numpy())
    za, _ = compute_zscores(kineto)
    zb, _ = compute_zscores(nsys)
    assert len(za) == len(zb) > 0
    np.testing.assert_allclose(np.sort(za["z"].to_numpy()), np.sort(zb["z"].to_numpy()), atol=1e-9)


def test_synthetic_job_as_nsys_exports_same_attribution(synthetic_job) -> None:  # noqa: ANN001
    """Critical-path attribution from the exports: the same straggler paths and causes,
    collective by collective."""
    import numpy as np

    from evtsync.critpath.attribution import attribute

    kineto, nsys, (ka, _), (na, _) = synthetic_job
    key = ["pg_ranks", "index"]
    aa = attribute(kineto, keep_paths=False).collectives
    ab = attribute(nsys, keep_paths=False).collectives
    aa = aa.assign(pg_ranks=aa["pg"].map({row.pg: row.pg_ranks for row in ka.groups.itertuples()}))
    ab = ab.assign(pg_ranks=ab["pg"].map({row.pg: row.pg_ranks for row in na.groups.itertuples()}))
    aa, ab = aa.sort_values(key).reset_index(drop=True), ab.sort_values(key).reset_index(drop=True)
    assert len(aa) == len(ab) > 0
    for column in ("status", "straggler_rank", "path_kind", "cause_name", "cause_category"):
        assert aa[column].astype(str).tolist() == ab[column].astype(str).tolist(), column
    np.testing.assert_allclose(aa["cause_extra_us"].to_numpy(float), ab["cause_extra_us"].to_numpy(float),
                               atol=1e-6, equal_nan=True)


def test_two_processes_in_one_export_refused(tmp_path: Path) -> None:
    copy = damaged(tmp_path, "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET globalPid = globalPid + (1 << 24) "
                             "WHERE rowid % 2 = 0")
    with pytest.raises(TraceError, match=r"GPU activity of 2 processes .* one rank per file"):
        read_rank(copy)


#: NVTX_EVENTS as Nsight Systems writes it (the shared export has none: the tests add it).
NVTX_TABLE = ('CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, "end" INTEGER, eventType INTEGER NOT NULL, '
              "rangeId INTEGER, category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, "
              "textId INTEGER, domainId INTEGER)")


def _with_nvtx(tmp_path: Path, name: str, texts: list[tuple[int, str]], *, as_string_id: bool = False) -> Path:
    """A copy of the export named ``name`` with NVTX events (type, text) inserted: 59 a push/pop
    range, 34 a mark; ``as_string_id`` stores the text in StringIds (textId) as newer exports do."""
    copy = tmp_path / name
    shutil.copy(EXPORT, copy)
    copy.chmod(0o644)
    conn = sqlite3.connect(copy)
    conn.execute(NVTX_TABLE)
    for i, (kind, text) in enumerate(texts):
        end = None if kind == 34 else 2000 + i
        if as_string_id:
            sid = conn.execute("SELECT COALESCE(MAX(id), 0) + 1 FROM StringIds").fetchone()[0]
            conn.execute("INSERT INTO StringIds VALUES (?, ?)", (sid, text))
            conn.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, NULL, NULL, NULL, NULL, ?, NULL, ?, 0)",
                         (1000 + i, end, kind, 4242 << 24, sid))
        else:
            conn.execute("INSERT INTO NVTX_EVENTS VALUES (?, ?, ?, NULL, NULL, NULL, ?, ?, NULL, NULL, 0)",
                         (1000 + i, end, kind, text, 4242 << 24))
    conn.commit()
    conn.close()
    return copy


@pytest.mark.parametrize("kind, text, as_string_id", [
    (59, "rank 3", False), (34, "Rank: 3", False), (59, "NCCL AllReduce comm 0x7f rank=3 nranks=8", True),
])
def test_rank_from_nvtx(tmp_path: Path, kind: int, text: str, as_string_id: bool) -> None:
    """Issue 32 item 3: an export whose NVTX range or mark names the rank is that rank, without
    RANK=PATH; the other ranges (with digits, but no rank) do not count."""
    path = _with_nvtx(tmp_path, "export.sqlite", [(59, "step 7"), (kind, text), (59, "local_rank=1")],
                      as_string_id=as_string_id)
    traces = load_traces([path], jobs=1, cache=None)
    assert traces.rank_ids == [3]
    assert traces.ranks["rank_source"].tolist() == ["NVTX"]


def test_rank_from_nvtx_against_the_file_name(tmp_path: Path) -> None:
    agree = _with_nvtx(tmp_path, "rank3.sqlite", [(59, "rank 3")])
    assert load_traces([agree], jobs=1, cache=None).rank_ids == [3]
    clash = _with_nvtx(tmp_path, "rank5.sqlite", [(59, "rank 3")])
    with pytest.raises(TraceError, match=r"file name says rank 5, NVTX ranges/marks say rank 3"):
        load_traces([clash], jobs=1, cache=None)
    # the user's word wins over both
    assert load_traces([f"7={clash}"], jobs=1, cache=None).rank_ids == [7]
    run = subprocess.run([sys.executable, "-m", "evtsync", "blocks", str(clash), "--no-cache"],
                         capture_output=True, text=True, check=False)
    assert run.returncode != 0 and "Traceback" not in run.stderr and "file name says rank 5" in run.stderr


def test_rank_from_a_user_nvtx_pattern(tmp_path: Path) -> None:
    path = _with_nvtx(tmp_path, "export.sqlite", [(59, "worker-12 step 1"), (34, "rank 3 of a sub-group")])
    # the built-in patterns read "rank 3"; the user's pattern reads the worker number instead
    assert load_traces([path], jobs=1, cache=None).rank_ids == [3]
    traces = load_traces([path], jobs=1, cache=None, rank_from=r"nvtx:worker-(\d+)")
    assert traces.rank_ids == [12]
    with pytest.raises(TraceError, match="no NVTX range or mark matches"):
        load_traces([path], jobs=1, cache=None, rank_from=r"nvtx:gpu(\d+)")
    from evtsync.core.errors import InputError

    with pytest.raises(InputError, match="needs a group"):
        load_traces([path], jobs=1, rank_from="nvtx:worker")
    several = _with_nvtx(tmp_path, "several.sqlite", [(59, "rank 1"), (59, "rank 2")])
    with pytest.raises(TraceError, match="name 2 different ranks"):
        load_traces([several], jobs=1, cache=None)
    run = subprocess.run([sys.executable, "-m", "evtsync", "blocks", str(path), "--no-cache", "--rank-from",
                          "nvtx:worker("], capture_output=True, text=True, check=False)
    assert run.returncode == 2 and "not a regular expression" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize(("sql", "expect"), [
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon' WHERE rowid = 3",
     r"rank0.sqlite: table CUPTI_ACTIVITY_KIND_KERNEL, column start, row 3: expected an integer, found text 'soon'"),
    ("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = 'x' WHERE rowid = 2",
     r"table CUPTI_ACTIVITY_KIND_RUNTIME, column correlationId, row 2: expected an integer, found text 'x'"),
    # a float would be truncated silently by an integer read: the typed check names it
    ("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET \"end\" = 2.5 WHERE rowid = 4",
     r"table CUPTI_ACTIVITY_KIND_KERNEL, column end, row 4: expected an integer, found real 2.5"),
])
def test_non_integer_activity_values_named(tmp_path: Path, sql: str, expect: str) -> None:
    """The activity columns are read as integers in one pass (issue 48); a value of another type
    is a one-line error naming the table, row and column, not a ValueError."""
    with pytest.raises(TraceError, match=expect) as err:
        read_rank(damaged(tmp_path, sql), rank=0)
    assert "\n" not in str(err.value)


def test_kernel_columns_equal_a_plain_query() -> None:
    """Starts, durations, streams and names of the kernels against sqlite3 directly (the name
    table joined in SQL there, once per distinct id in the reader)."""
    tables = read_rank(EXPORT, rank=0)
    rows = query(EXPORT, 'SELECT k.start, k."end", k.streamId, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k '
                         "JOIN StringIds s ON s.id = k.demangledName")
    kernels = tables.kernels[tables.kernels["cat"] == "kernel"]
    assert len(kernels) == len(rows)
    base = int(kernels["ts_ns"].min()) - min(r[0] for r in rows)  # the session's start time
    got = sorted(zip((kernels["ts_ns"] - base).tolist(), kernels["dur_ns"].tolist(), kernels["stream"].tolist(),
                     kernels["name"].astype(str).tolist(), strict=True))
    assert got == sorted((r[0], r[1] - r[0], r[2], r[3]) for r in rows)
