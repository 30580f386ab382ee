"""nccl-tests log parsing: real logs, damaged copies, JSON reports, CLI errors, fuzzing.

Row counts and values are checked against the text with a separate, deliberately simple
regular expression written here (not the parser's), plus hand-read values.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evtsync.cli import main
from evtsync.core.errors import EvtsyncError, NcclTestsError
from evtsync.nccltests.parse import busbw_factor, parse_json, parse_log, parse_text
from tests.conftest import DATA as SHARED_DATA  # the public data copied into tests/data/public

DATA = SHARED_DATA / "nccl-tests"
LOCAL = Path(__file__).parents[1] / "data" / "nccltests"
ALL_LOGS = sorted(DATA.glob("*.txt"))
CLEAN = [p for p in ALL_LOGS if not p.name.startswith("bad_")]
BAD = [p for p in ALL_LOGS if p.name.startswith("bad_")]

# size count type redop root, then 2 x (time algbw busbw wrong); any prefix before size.
SIMPLE_ROW = re.compile(
    r"(?:^|\s)(\d+)\s+(\d+)\s+(float|uint8)\s+(sum|none)\s+(-1)\s+"
    r"(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s*$"
)

# Table lines per file, counted by eye from the logs (sizes from -b to -e, doubling).
EXPECTED_ROWS = {
    "all_gather_H200_2x8_skypilot-gcp-rdma.txt": 24,  # 1K .. 8G
    "all_reduce_A100-40GB_2x8_oci-hpc-oke.txt": 31,  # 8 .. 8G
    "all_reduce_A100-80GB_1x8_meta-gcm-fixture.txt": 6,  # 32M .. 1G
    "all_reduce_A100-80GB_2x8_meta-gcm-fixture.txt": 6,
    "all_reduce_H100_2x4_idx26285727504-dgx-g4.txt": 31,
    "all_reduce_H100_2x8_gcp-a3mega-ztan.txt": 31,
    "bad_all_gather_H100_2x8_gcp-cluster-toolkit-misaligned.txt": 31,  # 5 zero-byte + 256 .. 8G
    "bad_all_reduce_A100-80GB_2x8_aws-awsome-p4de-noheader.txt": 29,  # 8 .. 2G
    "bad_all_reduce_H100_1x8_idx15601983362-indented.txt": 4,  # 256M .. 2G
    "bad_all_reduce_H100_2x8_aws-awsome-p5-noheader.txt": 32,  # 8 .. 16G
    "bad_all_reduce_RTX3090_4x1_idx20801464614-wrong-nonzero.txt": 27,  # 8 .. 512M
    "bad_all_reduce_unknown_2x8_meta-gcm-mpi-slots-failure.txt": 0,
    "bad_alltoall_B200_1x8_idx60744093665-headerless-uint8.txt": 32,  # 4 zero-byte + 128 .. 16G
    "bad_reduce_scatter_B200_1x8_idx60744093665-headerless.txt": 32,
}
EXPECTED_RANKS = {
    "all_gather_H200_2x8_skypilot-gcp-rdma.txt": 16,
    "all_reduce_A100-40GB_2x8_oci-hpc-oke.txt": 16,
    "all_reduce_A100-80GB_1x8_meta-gcm-fixture.txt": 8,
    "all_reduce_A100-80GB_2x8_meta-gcm-fixture.txt": 16,
    "all_reduce_H100_2x4_idx26285727504-dgx-g4.txt": 8,
    "all_reduce_H100_2x8_gcp-a3mega-ztan.txt": 16,
    "bad_all_gather_H100_2x8_gcp-cluster-toolkit-misaligned.txt": 16,
    "bad_all_reduce_A100-80GB_2x8_aws-awsome-p4de-noheader.txt": 16,
    "bad_all_reduce_H100_1x8_idx15601983362-indented.txt": 8,
    "bad_all_reduce_H100_2x8_aws-awsome-p5-noheader.txt": 16,
    "bad_all_reduce_RTX3090_4x1_idx20801464614-wrong-nonzero.txt": 4,
    "bad_alltoall_B200_1x8_idx60744093665-headerless-uint8.txt": 8,
    "bad_reduce_scatter_B200_1x8_idx60744093665-headerless.txt": 8,
}

# Collective (from each file's '# source:' line: the command or section it quotes) and the
# footer's verdict (True OK, False FAILED, None no footer), read by hand.
EXPECTED_RUN = {
    "all_gather_H200_2x8_skypilot-gcp-rdma.txt": ("all_gather", True),
    "all_reduce_A100-40GB_2x8_oci-hpc-oke.txt": ("all_reduce", True),
    "all_reduce_A100-80GB_1x8_meta-gcm-fixture.txt": ("all_reduce", True),
    "all_reduce_A100-80GB_2x8_meta-gcm-fixture.txt": ("all_reduce", True),
    "all_reduce_H100_2x4_idx26285727504-dgx-g4.txt": ("all_reduce", True),
    "all_reduce_H100_2x8_gcp-a3mega-ztan.txt": ("all_reduce", True),
    "bad_all_gather_H100_2x8_gcp-cluster-toolkit-misaligned.txt": ("all_gather", True),
    "bad_all_reduce_A100-80GB_2x8_aws-awsome-p4de-noheader.txt": ("all_reduce", None),
    "bad_all_reduce_H100_1x8_idx15601983362-indented.txt": ("all_reduce", True),
    "bad_all_reduce_H100_2x8_aws-awsome-p5-noheader.txt": ("all_reduce", None),
    "bad_all_reduce_RTX3090_4x1_idx20801464614-wrong-nonzero.txt": ("all_reduce", False),
    "bad_alltoall_B200_1x8_idx60744093665-headerless-uint8.txt": ("alltoall", True),
    "bad_reduce_scatter_B200_1x8_idx60744093665-headerless.txt": ("reduce_scatter", True),
}


def simple_rows(text: str) -> list[tuple[str, ...]]:
    return [m.groups() for line in text.splitlines() if (m := SIMPLE_ROW.search(line))]


def test_every_data_file_is_covered():
    assert {p.name for p in ALL_LOGS} == set(EXPECTED_ROWS)


@pytest.mark.parametrize("path", [p for p in ALL_LOGS if EXPECTED_ROWS[p.name]], ids=lambda p: p.name)
def test_rows_match_the_text(path: Path):
    text = path.read_text()
    rows = simple_rows(text)
    assert len(rows) == EXPECTED_ROWS[path.name]
    parsed = parse_log(path)
    assert parsed.n_table_lines == len(rows)
    m = parsed.measurements
    assert len(m) == 2 * len(rows)
    oop = m[m["placement"] == "out-of-place"].sort_values("line")
    ip = m[m["placement"] == "in-place"].sort_values("line")
    assert [int(r[0]) for r in rows] == oop["size"].tolist()
    assert [int(r[1]) for r in rows] == oop["count"].tolist()
    assert [float(r[5]) for r in rows] == oop["time_us"].tolist()
    assert [float(r[7]) for r in rows] == oop["busbw_gbps"].tolist()
    assert [float(r[9]) for r in rows] == ip["time_us"].tolist()
    assert [float(r[10]) for r in rows] == ip["algbw_gbps"].tolist()
    wrong_ip = [math.nan if r[12] == "N/A" else float(r[12]) for r in rows]
    assert all((math.isnan(a) and math.isnan(b)) or a == b for a, b in zip(wrong_ip, ip["wrong"], strict=True))
    assert parsed.runs[0].n_ranks == EXPECTED_RANKS[path.name]
    assert len(parsed.runs) == 1 and not parsed.warnings
    run = parsed.runs[0]
    assert (run.collective, run.out_of_bounds_ok) == EXPECTED_RUN[path.name]
    assert run.failure is None and run.failed == (EXPECTED_RUN[path.name][1] is False)


def test_hand_read_values():
    m = parse_log(DATA / "all_reduce_H100_2x8_gcp-a3mega-ztan.txt").measurements
    last = m[m["size"] == 8589934592].set_index("placement")
    assert last.loc["out-of-place", "time_us"] == 47535
    assert last.loc["out-of-place", "busbw_gbps"] == 338.82
    assert last.loc["in-place", "time_us"] == 47743
    rtx = parse_log(DATA / "bad_all_reduce_RTX3090_4x1_idx20801464614-wrong-nonzero.txt")
    row = rtx.measurements[(rtx.measurements["size"] == 1048576) & (rtx.measurements["placement"] == "in-place")]
    assert row["wrong"].item() == 1.04858e06
    assert rtx.runs[0].out_of_bounds == 216 and rtx.runs[0].out_of_bounds_ok is False
    mis = parse_log(DATA / "bad_all_gather_H100_2x8_gcp-cluster-toolkit-misaligned.txt").measurements
    assert mis[(mis["size"] == 134217728) & (mis["placement"] == "out-of-place")]["time_us"].item() == 806.59
    a2a = parse_log(DATA / "bad_alltoall_B200_1x8_idx60744093665-headerless-uint8.txt").measurements
    assert a2a[a2a["placement"] == "in-place"]["wrong"].isna().all()
    assert (a2a[a2a["placement"] == "out-of-place"]["wrong"] == 0).all()


def test_metadata_of_a_full_header():
    r = parse_log(DATA / "all_reduce_H100_2x4_idx26285727504-dgx-g4.txt").runs[0]
    assert (r.n_threads, r.n_gpus_per_process, r.warmup_iters, r.iters, r.agg_iters) == (1, 4, 5, 30, 1)
    assert r.hosts == ["dgx-06", "dgx-07"] and r.gpus == ["NVIDIA H100 80GB HBM3"]
    assert r.collective == "all_reduce" and r.has_footer and r.out_of_bounds_ok
    h200 = parse_log(DATA / "all_gather_H200_2x8_skypilot-gcp-rdma.txt").runs[0]
    assert h200.nccl_version == "2.26.6+cuda12.8" and h200.min_bytes == 1024 and h200.max_bytes == 8589934592


@pytest.mark.parametrize("path", CLEAN, ids=lambda p: p.name)
def test_busbw_factor_check_passes_on_clean_logs(path: Path):
    parsed = parse_log(path)
    assert parsed.runs[0].n_flagged == 0
    assert (parsed.measurements["bw_flag"] == "").all()


def test_busbw_factor_values():
    assert busbw_factor("all_reduce", 8) == pytest.approx(1.75)
    assert busbw_factor("all_gather_perf", 16) == pytest.approx(15 / 16)
    assert busbw_factor("alltoall", 8) == pytest.approx(7 / 8)
    assert busbw_factor("broadcast", 8) == 1.0


def test_inconsistent_row_is_flagged(tmp_path: Path):
    text = (DATA / "all_reduce_A100-80GB_1x8_meta-gcm-fixture.txt").read_text()
    bad = text.replace("1149.9  116.72  204.26", "1149.9  116.72  150.00").replace("557.4  120.39", "557.4  100.39")
    parsed = parse_text(bad, path="damaged")
    flagged = parsed.measurements[parsed.measurements["bw_flag"] != ""]
    assert sorted(flagged["size"].tolist()) == [67108864, 134217728]
    assert parsed.runs[0].n_flagged == 2


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_bad_logs_give_table_or_clear_error(path: Path):
    try:
        parsed = parse_log(path)
    except NcclTestsError as exc:
        assert "\n" not in str(exc)
        assert EXPECTED_ROWS[path.name] == 0
        return
    assert parsed.n_table_lines == EXPECTED_ROWS[path.name]
    assert all(s.reason for s in parsed.skipped)


def test_mpi_failure_says_what_was_found():
    with pytest.raises(NcclTestsError, match=r"found instead an Open MPI launch failure: not enough slots.*16"):
        parse_log(DATA / "bad_all_reduce_unknown_2x8_meta-gcm-mpi-slots-failure.txt")


def test_skipped_lines_are_listed_with_reasons():
    parsed = parse_log(DATA / "bad_all_reduce_RTX3090_4x1_idx20801464614-wrong-nonzero.txt")
    reasons = {s.line: s.reason for s in parsed.skipped}
    assert reasons[1] == "comment line"  # the '# source:' line
    text_lines = (DATA / "bad_all_reduce_RTX3090_4x1_idx20801464614-wrong-nonzero.txt").read_text().splitlines()
    ucx = [i + 1 for i, ln in enumerate(text_lines) if "UCX  WARN" in ln]
    assert ucx and all(reasons[i] == "not nccl-tests output" for i in ucx)


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_cli_on_bad_logs_never_tracebacks(path: Path, capsys: pytest.CaptureFixture[str]):
    rc = main(["nccl-tests", "parse", str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    if EXPECTED_ROWS[path.name]:
        assert rc == 0 and "skipped" in out
    else:
        assert rc != 0
        assert len(err.strip().splitlines()) == 1 and err.startswith("evtsync: error:")
        assert "found instead" in err


def test_cli_missing_file_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["nccl-tests", "parse", str(tmp_path / "nope.txt")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "nope.txt" in err
    assert main(["nccl-tests", "parse", "--json", str(DATA / "all_reduce_A100-80GB_1x8_meta-gcm-fixture.txt")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["n_table_lines"] == 6 and len(doc["measurements"]) == 12
    out_csv = tmp_path / "m.csv"
    assert main(["nccl-tests", "parse", "--out", str(out_csv), str(DATA / "all_reduce_A100-80GB_1x8_meta-gcm-fixture.txt")]) == 0
    assert out_csv.read_text().count("\n") == 13


# --------------------------------------------------------------------------- damaged copies


def _real(name: str = "all_reduce_A100-80GB_1x8_meta-gcm-fixture.txt") -> str:
    return (DATA / name).read_text()


def test_mpi_tag_prefixes_and_interleaved_nccl_info():
    lines = _real().splitlines()
    damaged = []
    for i, ln in enumerate(lines):
        damaged.append(f"[1,0]<stdout>:{ln}")
        if i % 3 == 0:
            damaged.append(f"node7:1234:1250 [0] NCCL INFO Channel 0{i % 10}/32 : 0[0] -> 1[1] via P2P/IPC")
    parsed = parse_text("\n".join(damaged), path="prefixed")
    assert parsed.n_table_lines == 6 and parsed.runs[0].n_ranks == 8
    assert {s.reason for s in parsed.skipped} >= {"NCCL log line"}


def test_two_interleaved_streams_are_two_runs():
    a = _real().splitlines()
    b = _real("all_reduce_A100-80GB_2x8_meta-gcm-fixture.txt").splitlines()
    mixed = []
    for i in range(max(len(a), len(b))):
        if i < len(a):
            mixed.append(f"0: {a[i]}")
        if i < len(b):
            mixed.append(f"1: {b[i]}")
    parsed = parse_text("\n".join(mixed), path="two-tasks")
    assert [r.n_ranks for r in parsed.runs] == [8, 16]
    assert [r.stream for r in parsed.runs] == ["task 0", "task 1"]
    assert parsed.n_table_lines == 12


def test_truncated_last_row_and_missing_footer():
    text = _real()
    cut = text[: text.index("# Out of bounds")].rstrip("\n")
    cut = cut[: len(cut) - 30]
    parsed = parse_text(cut, path="truncated")
    assert parsed.n_table_lines == 5
    assert any(s.reason.startswith("incomplete") for s in parsed.skipped)
    assert not parsed.runs[0].has_footer


def test_two_runs_in_one_file_and_cycles():
    text = _real()
    rows = [ln for ln in text.splitlines() if SIMPLE_ROW.search(ln)]
    header_end = text.index(rows[0])
    footer_start = text.index("# Out of bounds")
    three_cycles = text[:header_end] + "\n".join(rows * 3) + "\n" + text[footer_start:]
    parsed = parse_text(three_cycles + "\n" + text, path="two runs")
    assert len(parsed.runs) == 2
    assert parsed.runs[0].n_cycles == 3 and parsed.runs[1].n_cycles == 1
    m = parsed.measurements
    first = m[(m["run"] == 0) & (m["placement"] == "out-of-place")]
    assert first.groupby("cycle")["size"].apply(list).tolist() == [[int(r.split()[0]) for r in rows]] * 3


def test_each_run_takes_the_binary_named_before_it():
    ar = _real().splitlines()[1:]  # without the '# source:' line
    ag = (DATA / "all_gather_H200_2x8_skypilot-gcp-rdma.txt").read_text().splitlines()[1:]
    text = "\n".join(["$ mpirun -np 8 ./build/all_reduce_perf -b 32M -e 1G", *ar,
                      "$ mpirun -np 16 ./build/all_gather_perf -b 1K -e 8G", *ag])
    parsed = parse_text(text, path="session.log")
    assert [r.collective for r in parsed.runs] == ["all_reduce", "all_gather"]
    assert [r.n_ranks for r in parsed.runs] == [8, 16]
    assert sum(r.n_flagged for r in parsed.runs) == 0


def test_single_size_cycles_are_counted():
    text = _real()
    row = next(ln for ln in text.splitlines() if SIMPLE_ROW.search(ln))
    parsed = parse_text("\n".join([row] * 5), path="N5", collective="all_reduce", n_ranks=8)
    assert parsed.runs[0].n_cycles == 5 and parsed.runs[0].n_flagged == 0


def test_per_iteration_cputime_timestamps_and_multi_type():
    header = ("# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703\n"
              "# Collective test starting: all_reduce_perf\n"
              "# nThread 1 nGpus 8 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 1 iters: 20 "
              "agg iters: 1 validation: 1 graph: 0 unalign: 0\n"
              "# Per-Iteration Report: CUDA event timing; i_* uses max over process rows \n#\n"
              "#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    "
              "i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv% timestamp\n")
    rows = []
    for dtype, ws in (("float", 4), ("half", 2)):
        for size, t in ((1048576, 50.0), (2097152, 80.0)):
            alg = size / t / 1e3
            grp = f"{t:7.2f}  {alg:6.2f}  {alg * 1.75:6.2f}       0    {t - 2:5.2f}    {t + 9:5.2f}    {t + 8:5.2f}     3.50"
            rows.append(f"{size:12d}  {size // ws:12d}  {dtype:>8}     sum      -1  {grp}  {grp}  2025-01-02 03:04:05")
    parsed = parse_text(header + "\n".join(rows) + "\n# Out of bounds values : 0 OK\n", path="periter")
    r = parsed.runs[0]
    assert r.per_iteration and r.tests_version == "2.17.6" and r.collective == "all_reduce"
    m = parsed.measurements
    assert len(m) == 8 and set(m["type"]) == {"float", "half"} and (m["cycle"] == 0).all()
    assert (m["i_cv_pct"] == 3.5).all() and (m["i_max_us"] - m["time_us"] == 9).all()
    assert r.n_flagged == 0
    cputime = header.replace("  time ", "  cputime ")
    assert parse_text(cputime + "\n".join(rows), path="cpu").runs[0].cputime


def test_old_format_without_root_and_error_column():
    text = ("# nThread 1 nGpus 4 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 validation: 1\n"
            "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
            "           8             2   float     sum    38.95    0.00    0.00  0e+00    38.48    0.00    0.00  0e+00\n"
            "          16             4   float     sum    38.17    0.00    0.00  2e-07    38.70    0.00    0.00  0e+00\n")
    parsed = parse_text(text, path="old", collective="all_reduce", n_ranks=4)
    m = parsed.measurements
    assert parsed.n_table_lines == 2 and parsed.runs[0].old_error_column
    assert m["wrong"].isna().all() and m["error"].max() == 2e-07


def _json_report(text: str) -> dict:
    """An nccl-tests -J document built from a text log by the simple regex."""
    results = []
    for r in simple_rows(text):
        def body(t, _a, _b, w, size=int(r[0])):
            # -J prints full-precision %lf values computed from the time, not the rounded columns
            alg = size / float(t) / 1e3
            return {"time": float(t), "alg_bw": round(alg, 6), "bus_bw": round(alg * 1.75, 6),
                    "nwrong": None if w == "N/A" else float(w)}
        results.append({"size": int(r[0]), "count": int(r[1]), "type": r[2], "redop": r[3], "root": f"{int(r[4]):6d}",
                        "out_of_place": body(*r[5:9]), "in_place": body(*r[9:13]),
                        "actual_iterations": 20, "experiment_name": ""})
    return {"version": 2, "start_time": "2025-01-01 00:00:00", "args": ["./build/all_reduce_perf", "-b", "32M"],
            "env": [], "nccl_version": 21602,
            "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": 33554432, "maximum_bytes": 1073741824,
                       "step_factor": 2, "warmup_iters": 5, "iterations": 20, "aggregated_iterations": 1,
                       "validation": 1, "graph": 0, "blocking_collectives": "false", "per_iter_timing": "false",
                       "parallel_init": "false",
                       "devices": [{"rank": i, "group": 0, "pid": 1, "hostname": "h", "device": i,
                                    "device_hex": "0000:00:00", "device_info": "NVIDIA A100-SXM4-80GB"}
                                   for i in range(8)]},
            "results": results, "out_of_bounds": {"count": 0, "okay": "true"},
            "average_bus_bandwidth": {"bandwidth": 210.99, "okay": "unchecked"}, "errors": [], "end_time": "x"}


def test_json_report(tmp_path: Path):
    doc = _json_report(_real())
    path = tmp_path / "report.json"
    path.write_text(json.dumps(doc))
    parsed = parse_log(path)
    assert parsed.format == "json" and parsed.n_table_lines == 6
    r = parsed.runs[0]
    assert (r.collective, r.n_ranks, r.nccl_version, r.iters) == ("all_reduce", 8, "2.16.2", 20)
    assert r.n_flagged == 0
    assert parsed.measurements["time_us"].tolist()[:2] == [344.8, 349.5]
    doc_failed = dict(doc, errors=["rank 3: Test CUDA failure common.cu:422 'uncorrectable ECC error encountered'"])
    path.write_text(json.dumps(doc_failed))
    failed = parse_log(path).runs[0]
    assert failed.failed and "uncorrectable ECC error" in failed.failure
    path.write_text(json.dumps(doc)[:-200])
    with pytest.raises(NcclTestsError, match="not valid nccl-tests JSON"):
        parse_log(path)
    with pytest.raises(NcclTestsError, match="results"):
        parse_json("{}", path="empty")


# --------------------------------------------------------------------------- fuzzing

_REAL_LINES = [p.read_text().splitlines() for p in ALL_LOGS]
_PREFIXES = st.sampled_from(["", "0: ", "12: ", "[1,0]<stdout>:", "[1,3]<stderr>: ", "    ", "host-7: ",
                             "2024-06-01T10:00:00.123Z ", "\t", "#", ">>> "])


@st.composite
def damaged_logs(draw: st.DrawFn) -> str:
    a = draw(st.sampled_from(_REAL_LINES))
    b = draw(st.sampled_from(_REAL_LINES))
    keep_a = [ln for ln in a if draw(st.booleans()) or draw(st.booleans())]
    keep_b = [ln for ln in b if draw(st.integers(0, 4)) == 0]
    merged: list[str] = []
    ia = ib = 0
    while ia < len(keep_a) or ib < len(keep_b):
        take_a = ib >= len(keep_b) or (ia < len(keep_a) and draw(st.booleans()))
        line = keep_a[ia] if take_a else keep_b[ib]
        ia, ib = (ia + 1, ib) if take_a else (ia, ib + 1)
        line = draw(_PREFIXES) + line
        if draw(st.integers(0, 9)) == 0:
            line = line[: draw(st.integers(0, len(line)))]
        if draw(st.integers(0, 19)) == 0:
            line += draw(st.text(max_size=12))
        merged.append(line)
    return "\n".join(merged)


def _parse_or_own_error(text: str) -> None:
    try:
        parsed = parse_text(text, path="fuzz")
    except EvtsyncError:
        return
    assert len(parsed.measurements) == 2 * parsed.n_table_lines
    assert all(r.n_cycles >= 1 for r in parsed.runs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_logs())
def test_fuzz_damaged_real_logs(text: str):
    _parse_or_own_error(text)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("0123456789 .-+eE#:[]<>NA/\nfloatsumne")), max_size=400))
def test_fuzz_random_text(text: str):
    _parse_or_own_error(text)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(damaged_logs())
def test_fuzz_damaged_real_logs_long(text: str):
    _parse_or_own_error(text)


def test_json_report_with_cycles_and_per_iteration(tmp_path: Path):
    doc = _json_report(_real())
    doc["config"]["per_iter_timing"] = "true"
    cycles = []
    for c in range(3):
        for res in doc["results"]:
            entry = json.loads(json.dumps(res))
            for key in ("out_of_place", "in_place"):
                t = entry[key]["time"]
                entry[f"{key}_per_iter"] = {"min_us": t - 1, "max_us": t + 5, "avg_us": t, "p50_us": t, "p95_us": t + 3,
                                            "p99_us": t + 4, "stdev_us": 1.0, "cv_pct": 1.5 + c, "times_us": [t] * 20}
            cycles.append(entry)
    doc["results"] = cycles
    path = tmp_path / "periter.json"
    path.write_text(json.dumps(doc))
    parsed = parse_log(path)
    assert parsed.runs[0].per_iteration and parsed.runs[0].n_cycles == 3 and parsed.n_table_lines == 18
    m = parsed.measurements
    assert sorted(set(m["i_cv_pct"])) == [1.5, 2.5, 3.5]
    assert (m["i_max_us"] - m["time_us"]).round(9).eq(5).all()


@pytest.mark.parametrize(
    ("text", "message"),
    [("", "the file is empty"),
     ("node1: Test NCCL failure common.cu:958 'unhandled system error'\n",
      r"failed before its first result row: \"Test NCCL failure common.cu:958 'unhandled system error'\" "
      r"\(line 1, host node1\)"),
     ("hello\nworld\n", r"2 line\(s\) of other text")],
)
def test_table_less_text_says_what_it_holds(text: str, message: str):
    with pytest.raises(NcclTestsError, match=message):
        parse_text(text, path="x")


def test_header_without_rows_is_reported():
    head = "\n".join((DATA / "all_reduce_H100_2x4_idx26285727504-dgx-g4.txt").read_text().splitlines()[:14])
    with pytest.raises(NcclTestsError, match="header but no result rows"):
        parse_text(head, path="cut")


def test_stored_damaged_copies():
    tagged = parse_log(LOCAL / "damaged_mpi_tagged_truncated_A100-80GB_1x8.txt")
    assert tagged.n_table_lines == 5 and tagged.runs[0].n_ranks == 8 and not tagged.runs[0].has_footer
    reasons = [s.reason for s in tagged.skipped]
    assert reasons.count("NCCL log line") == 7 and reasons.count("incomplete or malformed table row (truncated?)") == 1
    two = parse_log(LOCAL / "damaged_two_runs_reindented.txt")
    assert [r.n_rows for r in two.runs] == [6, 31]
    # the second paste lost its '# nThread' line: its device lines must not leak into the first run
    assert [r.gpus for r in two.runs] == [["NVIDIA A100-SXM4-80GB"], ["NVIDIA H100 80GB HBM3"]]
    assert two.runs[0].iters == 20 and two.runs[1].iters is None
    assert sum(r.n_flagged for r in two.runs) == 0


def test_damaged_average_bandwidth_footer_is_skipped_and_said():
    """Found by fuzzing: '# Avg bus bandwidth : 448.212E' is not a number. The line is
    listed as skipped, not read as 448.212 and not an exception."""
    text = _real().replace("# Avg bus bandwidth    : ", "# Avg bus bandwidth    : 448.212E\n#", 1)
    assert "448.212E" in text
    parsed = parse_text(text, path="damaged-footer")
    assert any("448.212E" in s.text and s.reason == "comment line" for s in parsed.skipped)
    assert parsed.runs and all(r.avg_busbw_gbps != 448.212 for r in parsed.runs)


# --------------------------------------------------------------------------- header generations, several tables


OLD_FIVE = LOCAL / "old_five_collectives_GTX1080_1x2_nccl-osx.txt"
# Hand count of OLD_FIVE (read in the file): five tables, each after '===begin X_perf test===',
# sizes 8 B .. 128 MiB doubling (2^3 .. 2^27 = 25 lines), 1 process x 2 GPUs (Rank 0, Rank 1).
OLD_FIVE_RUNS = [("all_reduce", 25), ("all_gather", 25), ("broadcast", 25), ("reduce", 25), ("reduce_scatter", 25)]


def test_every_old_header_generation_is_read():
    """all_reduce/reduce_scatter print redop but no root, all_gather neither, broadcast root but no
    redop, reduce both; every table has the old 'error' column instead of '#wrong'."""
    parsed = parse_log(OLD_FIVE)
    assert [(r.collective, r.n_rows) for r in parsed.runs] == OLD_FIVE_RUNS
    assert all(r.n_ranks == 2 and r.old_error_column and r.has_footer and r.out_of_bounds_ok for r in parsed.runs)
    assert all(r.n_flagged == 0 and r.failure is None for r in parsed.runs)
    assert not parsed.warnings
    # every skipped line is a '===begin' banner or the '# source:' line, nothing of a table
    assert sorted({s.reason for s in parsed.skipped}) == ["comment line", "line naming a test binary"]
    m = parsed.measurements
    ag = m[(m["run"] == 1) & (m["size"] == 134217728)].set_index("placement")
    assert ag.loc["out-of-place", "count"] == 16777216 and ag.loc["out-of-place", "time_us"] == 87825
    assert ag.loc["in-place", "algbw_gbps"] == 0.78 and ag.loc["in-place", "redop"] == "none"
    bc = m[(m["run"] == 2) & (m["size"] == 8)].set_index("placement")
    assert bc.loc["out-of-place", "root"] == 0 and bc.loc["in-place", "time_us"] == 21.28
    red = m[(m["run"] == 3) & (m["size"] == 8)].set_index("placement")
    assert (red.loc["out-of-place", "redop"], red.loc["out-of-place", "root"]) == ("sum", 0)
    assert m["wrong"].isna().all() and (m["error"] == 0).all()
    # the 2.x-era all_gather/reduce_scatter algbw is size x (n-1)/n / time with busbw = algbw
    assert [r.bw_convention for r in parsed.runs] == ["current", "old", "current", "current", "old"]


def test_collective_comes_from_the_log_before_the_file_name(tmp_path: Path):
    lying = tmp_path / "all_gather_results.txt"
    lying.write_text(OLD_FIVE.read_text())
    parsed = parse_log(lying)
    assert [r.collective for r in parsed.runs] == [c for c, _ in OLD_FIVE_RUNS]
    assert all(r.collective_source.startswith("log line") for r in parsed.runs)
    assert sum(r.n_flagged for r in parsed.runs) == 0


def test_all_gather_then_all_reduce_table_without_names_is_two_runs(tmp_path: Path):
    """No binary named anywhere: the all_reduce table is known by its columns (redop sum, root -1,
    full count); the all_gather table's columns fit all_gather and alltoall, so the file name
    decides it. Each gets its own bus-bandwidth factor: no false warnings."""
    ag = (DATA / "all_gather_H200_2x8_skypilot-gcp-rdma.txt").read_text().splitlines()[1:]
    ar = (DATA / "all_reduce_A100-40GB_2x8_oci-hpc-oke.txt").read_text().splitlines()[1:]
    path = tmp_path / "all_gather_then_more.log"
    path.write_text("\n".join(ag + ar) + "\n")
    parsed = parse_log(path)
    assert [(r.collective, r.n_rows, r.n_ranks) for r in parsed.runs] == [("all_gather", 24, 16), ("all_reduce", 31, 16)]
    assert parsed.runs[0].collective_source == "file name"
    assert parsed.runs[1].collective_source.startswith("table columns")
    assert [r.warnings for r in parsed.runs] == [[], []]
    assert [r.n_flagged for r in parsed.runs] == [0, 0]


def test_collective_test_starting_and_running_lines_name_each_table():
    ag = (DATA / "all_gather_H200_2x8_skypilot-gcp-rdma.txt").read_text().splitlines()[1:]
    ar = _real().splitlines()[1:]
    text = "\n".join(["Running: /opt/nccl-tests/build/all_reduce_perf -b 32M -e 1G", *ar,
                      "# nccl-tests version 2.17.6 nccl-headers=22807 nccl-library=22807",
                      "# Collective test starting: all_gather_perf", *ag])
    parsed = parse_text(text, path="reduce_scatter_sweep.log")  # a file name that is wrong for both
    assert [r.collective for r in parsed.runs] == ["all_reduce", "all_gather"]
    assert parsed.runs[1].collective_source == "header"
    assert sum(r.n_flagged for r in parsed.runs) == 0


def test_old_table_cycles_and_failed_footer_reach_stats():
    """-N 3 on an old all_gather table, footer FAILED: three cycles, and stats says failed."""
    from evtsync.nccltests.stats import size_stats

    lines = OLD_FIVE.read_text().splitlines()
    start = lines.index("===begin all_gather_perf test===")
    end = lines.index("===begin broadcast_perf test===")
    block = lines[start:end]
    rows = [ln for ln in block if re.match(r"^\s+\d+\s+\d+\s+float\s+\d", ln)]
    assert len(rows) == 25
    head = block[: block.index(rows[0])]
    text = "\n".join([*head, *rows, *rows, *rows, "# Out of bounds values : 3 FAILED", "# Avg bus bandwidth    : 0.3"])
    parsed = parse_text(text, path="old-N3")
    r = parsed.runs[0]
    assert (r.collective, r.n_rows, r.n_cycles, r.out_of_bounds_ok) == ("all_gather", 75, 3, False)
    stats = size_stats(parsed)
    assert set(stats["correctness"]) == {"failed"} and not stats["valid_baseline"].any()
    assert (stats["n_cycles"] == 3).all()


def test_old_header_without_rows_is_not_called_an_error_message():
    lines = OLD_FIVE.read_text().splitlines()
    head = lines[lines.index("===begin all_gather_perf test===") : lines.index("===begin all_gather_perf test===") + 10]
    assert any("error" in ln for ln in head)
    with pytest.raises(NcclTestsError, match="found a header but no result rows"):
        parse_text("\n".join(head), path="cut")


def test_table_without_rows_beside_a_good_one_is_said():
    good = _real().splitlines()
    bad = ["#       size         count      type   redop    root     time   algbw   busbw #wrong     time",
           "# Out of bounds values : 12 FAILED"]
    parsed = parse_text("\n".join([*good, *bad]), path="two")
    assert len(parsed.runs) == 1 and parsed.runs[0].n_rows == 6
    assert len(parsed.warnings) == 1 and "FAILED" in parsed.warnings[0] and "no result rows" in parsed.warnings[0]


# --------------------------------------------------------------------------- failures

FAILED_A2A = LOCAL / "failed_alltoall_H800_2x8_nccl-tests-issue355.txt"


def _ecc_log() -> str:
    """The real ztan all_reduce log cut before its 512 MiB row, then an uncorrectable ECC error on
    one host (nccl-tests' own failure line and stack line, host and pid of its device list) and
    srun's lines: the launcher's summary comes last."""
    src = (DATA / "all_reduce_H100_2x8_gcp-a3mega-ztan.txt").read_text().splitlines()
    cut = src[: next(i for i, ln in enumerate(src) if ln.lstrip().startswith("536870912 "))]
    return "\n".join([*cut,
                      "ztan-mig-gq73: Test CUDA failure common.cu:422 'uncorrectable ECC error encountered'",
                      " .. ztan-mig-gq73 pid 6735: Test failure common.cu:1034",
                      "srun: error: ztan-mig-gq73: task 10: Exited with exit code 2",
                      "srun: error: task 159: Exited with exit code 2"])


def test_failure_is_its_root_cause_with_rank_and_host():
    parsed = parse_text(_ecc_log(), path="ecc")
    r = parsed.runs[0]
    assert r.n_rows == 26  # 8 B .. 256 MiB, counted: 2^3 .. 2^28
    assert r.failure.startswith("Test CUDA failure common.cu:422 'uncorrectable ECC error encountered'")
    assert r.failure_host == "ztan-mig-gq73" and r.failure_ranks == [10]  # '#  Rank 10 ... Pid 6735'
    assert [c.split(": ", 1)[1] for c in r.failure_context] == [
        "srun: error: ztan-mig-gq73: task 10: Exited with exit code 2",
        "srun: error: task 159: Exited with exit code 2"]
    assert r.failed and parsed.failed_runs == [r]


def test_failure_reaches_stats_and_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    from evtsync.nccltests.stats import size_stats

    path = tmp_path / "ecc.log"
    path.write_text(_ecc_log())
    assert set(size_stats(parse_log(path))["correctness"]) == {"run aborted"}
    assert main(["nccl-tests", "parse", str(path)]) == 0
    out = capsys.readouterr().out
    assert "FAILED: Test CUDA failure common.cu:422 'uncorrectable ECC error encountered'" in out
    assert "rank 10" in out and "launcher: line" in out and "task 159" in out
    assert main(["nccl-tests", "stats", str(path)]) == 0
    assert "run aborted" in capsys.readouterr().out


def test_run_dying_in_its_first_row_is_one_line_with_the_cause(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(NcclTestsError) as exc:
        parse_log(FAILED_A2A)
    msg = str(exc.value)
    assert "\n" not in msg
    assert ("failed before its first result row: \"Test CUDA failure common.cu:389 'an illegal memory access "
            "was encountered'\" (line 28, host node0, rank 0, pid 62767)") in msg
    assert main(["nccl-tests", "parse", str(FAILED_A2A)]) != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "rank 0" in err


def test_launcher_error_without_root_cause_marks_the_run():
    text = _real().rstrip("\n") + "\nsrun: error: task 3: Exited with exit code 1\n"
    r = parse_text(text, path="x").runs[0]
    assert r.failed and r.failure.startswith("aborted, root cause not in the log")
    assert r.failure_context == [f"line {len(_real().splitlines()) + 1}: srun: error: task 3: Exited with exit code 1"]


def test_healthy_logs_have_no_failure():
    for p in [*CLEAN, *sorted(LOCAL.glob("*.txt"))]:
        if p == FAILED_A2A:
            continue
        assert all(r.failure is None for r in parse_log(p).runs), p.name


FIRST_GEN = LOCAL / "first_generation_all_reduce_test_TITANX_1x4_nccl1-readme.txt"


def test_first_generation_header_times_in_ms():
    """NCCL 1's all_reduce_test: 'bytes N type op ... res' header, times in ms, 'Device i -> j'
    lines. Hand count: 5 types x 4 ops = 20 lines of 10 MB; 10000000 B / 1.628 ms = 6.14 GB/s,
    the printed algbw, so 1.628 is ms: time_us 1628."""
    parsed = parse_log(FIRST_GEN)
    r = parsed.runs[0]
    assert (r.collective, r.n_rows, r.n_ranks, r.time_unit) == ("all_reduce", 20, 4, "ms")
    assert r.old_error_column and r.n_flagged == 0 and r.gpus == ["GeForce GTX TITAN X"]
    m = parsed.measurements
    first = m[(m["type"] == "char") & (m["redop"] == "sum")].set_index("placement")
    assert first.loc["out-of-place", "time_us"] == 1628.0 and first.loc["in-place", "time_us"] == 1932.0
    assert m[(m["type"] == "double") & (m["redop"] == "prod")]["error"].tolist() == [2e-16, 2e-16]
    assert sorted(set(m["type"])) == ["char", "double", "float", "half", "int"]


def test_first_generation_without_its_header_is_recognised_by_the_data():
    rows = [ln for ln in FIRST_GEN.read_text().splitlines() if ln.startswith("    10000000")]
    assert len(rows) == 20
    parsed = parse_text("\n".join(rows), path="pasted", collective="all_reduce", n_ranks=4)
    r = parsed.runs[0]
    assert r.time_unit == "ms" and r.time_unit_source.startswith("data")
    assert r.n_flagged == 0 and any("milliseconds" in w for w in r.warnings)
    assert parsed.measurements["time_us"].max() == 1932.0


def test_many_hosts_failing_name_the_first_with_its_own_pid():
    """Real logs of a broken job repeat the failure on many hosts, interleaved (nccl-tests issue
    #322 shape): the first line is the root cause, each host's pid comes from its own stack line."""
    head = _real().rstrip("\n")
    text = "\n".join([head.replace("{hostname}", "hca-63"),
                      "hca-14: Test NCCL failure common.cu:1204 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '",
                      "hca-63: Test NCCL failure common.cu:1204 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '",
                      " .. hca-63 pid 66425: Test failure common.cu:915",
                      " .. hca-14 pid 1015577: Test failure common.cu:915",
                      "mpirun detected that one or more processes exited with non-zero status, thus causing"])
    r = parse_text(text, path="many").runs[0]
    assert r.failure.startswith("Test NCCL failure common.cu:1204 'unhandled cuda error")
    assert r.failure_host == "hca-14" and "pid 1015577" in r.failure and r.failure_ranks == []
    assert r.failure_context[0].endswith("mpirun detected that one or more processes exited with non-zero status, thus causing")
    assert any("2 failure line(s)" in w for w in r.warnings)
