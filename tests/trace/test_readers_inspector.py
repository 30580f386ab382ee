"""NCCL Inspector logs: reading, matching by (communicator, sequence number), tax.

Every expected value is a hand count from the records written in the test. The record
layout is the one of the Inspector README (NVIDIA/nccl ``ext-profiler/inspector/README.md``,
format "v4.0", facts in shared/formats/nccl-inspector.md): the README's two example records
are used verbatim in ``test_readme_examples``.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest

from evtsync.core.errors import InputError, TraceError
from evtsync.sync.tax import straggler_identity, tax_from_traces, tax_summary
from evtsync.trace.readers import reader_for
from evtsync.trace.readers.inspector import read_log
from evtsync.trace.traceset import load_traces

#: The README's non-verbose example record, verbatim.
README_RECORD = (
    '{"header": {"id": "0x7f8c496ae9f661", "rank": 2, "n_ranks": 8, "nnodes": 1}, "metadata": '
    '{"inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism": "profiler_plugin", '
    '"dump_timestamp_us": 1748030377748202, "hostname": "example-hostname", "pid": 1639453}, '
    '"coll_perf": {"coll": "AllReduce", "coll_sn": 1407, "coll_msg_size_bytes": 17179869184, '
    '"coll_exec_time_us": 61974, "coll_algobw_gbs": 277.210914, "coll_busbw_gbs": 485.119099}}')
#: The README's verbose example record (pretty-printed there; one line in a log).
README_VERBOSE = {
    "header": {"id": "0xe62dedaa97644a", "rank": 4, "n_ranks": 8, "nnodes": 1},
    "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "9019a1912-dirty",
                 "rec_mechanism": "nccl_profiler_interface", "dump_timestamp_us": 1752867229276385,
                 "hostname": "example-hostname", "pid": 438776},
    "coll_perf": {"coll": "ReduceScatter", "coll_sn": 1231, "coll_msg_size_bytes": 2147483648,
                  "coll_exec_time_us": 41057, "coll_timing_source": "kernel_gpu",
                  "coll_algobw_gbs": 418.439467, "coll_busbw_gbs": 366.134533,
                  "event_trace_sn": {"coll_start_sn": 1, "coll_stop_sn": 2,
                                     "kernel_events": [{"channel_id": 0, "kernel_start_sn": 3,
                                                        "kernel_stop_sn": 48, "kernel_record_sn": 47}]},
                  "event_trace_ts": {"coll_start_ts": 1752867229235059, "coll_stop_ts": 1752867229235064,
                                     "kernel_events": [{"channel_id": 0, "kernel_start_ts": 1752867229235181,
                                                        "kernel_stop_ts": 1752867229275811,
                                                        "kernel_record_ts": 1752867229275811}]}}}

#: A 4-rank job on two hosts: exec times (µs) of AllReduce sn 1, 2, 3 on the world
#: communicator per rank, and of AllGather sn 1 on a 2-rank "tp" communicator of ranks 0, 1.
WORLD_US = {0: [100, 130, 90], 1: [120, 100, 95], 2: [80, 125, 60], 3: [110, 90, 99]}
TP_US = {0: 50, 1: 70}


def record(comm: str, name: str, rank: int, n_ranks: int, coll: str, sn: int, exec_us: float, *,
           host: str, pid: int, source: str = "kernel_gpu", size: int = 1 << 20,
           kernel_us: tuple[int, int] | None = None) -> str:
    """One log line."""
    perf = {"coll": coll, "coll_sn": sn, "coll_msg_size_bytes": size, "coll_exec_time_us": exec_us,
            "coll_timing_source": source, "coll_algobw_gbs": 1.0, "coll_busbw_gbs": 1.0}
    if kernel_us is not None:
        perf["event_trace_ts"] = {"coll_start_ts": kernel_us[0] - 5, "coll_stop_ts": kernel_us[0],
                                  "kernel_events": [{"channel_id": 0, "kernel_start_ts": kernel_us[0],
                                                     "kernel_stop_ts": kernel_us[1],
                                                     "kernel_record_ts": kernel_us[1]}]}
    return json.dumps({"header": {"id": comm, "comm_name": name, "rank": rank, "n_ranks": n_ranks, "nnodes": 2},
                       "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "",
                                    "rec_mechanism": "profiler_plugin", "dump_timestamp_us": 1748030377748202 + sn,
                                    "hostname": host, "pid": pid},
                       "coll_perf": perf}) + "\n"


def write_job(folder: Path, *, skip: set[tuple[int, int]] = frozenset(), ranks: range = range(4),
              sources: dict[tuple[int, int], str] | None = None) -> Path:
    """The 4-rank job of WORLD_US/TP_US, one ``<host>-pid<pid>.log`` per rank; ``skip``
    leaves out (rank, sn) AllReduce records, ``sources`` sets timing sources."""
    folder.mkdir(parents=True, exist_ok=True)
    for r in ranks:
        host, pid = f"node{r // 2}", 1000 + r
        lines = [record("0xworld", "default_pg", r, 4, "AllReduce", sn, us, host=host, pid=pid,
                        source=(sources or {}).get((r, sn), "kernel_gpu"))
                 for sn, us in enumerate(WORLD_US[r], start=1) if (r, sn) not in skip]
        if r in TP_US:
            lines.append(record("0xtp01", "tp", r, 2, "AllGather", 1, TP_US[r], host=host, pid=pid, size=8192))
        (folder / f"{host}-pid{pid}.log").write_text("".join(lines))
    return folder


def test_readme_examples(tmp_path: Path) -> None:
    path = tmp_path / "example-hostname-pid1639453.log"
    path.write_text(README_RECORD + "\n")
    assert reader_for(path).name == "nccl-inspector"
    got = read_log(path)
    assert got.n_records == 1
    assert got.comms["0x7f8c496ae9f661"] == (2, 8, 1, "")
    cols = got.columns
    assert cols["sn"].tolist() == [1407]
    assert cols["exec_ns"].tolist() == [61974000]
    assert cols["msg_bytes"].tolist() == [17179869184]
    # the example predates coll_timing_source: those logs kept GPU-timed operations only
    assert [got.vocabularies["timing_source"][c] for c in cols["timing_source"]] == ["kernel_gpu"]
    assert cols["kernel_start_us"].tolist() == [-1]
    assert got.info["host"] == "example-hostname" and got.info["pid"] == 1639453
    verbose = tmp_path / "example-hostname-pid438776.jsonl"
    verbose.write_text(json.dumps(README_VERBOSE) + "\n")
    got = read_log(verbose)
    assert got.comms["0xe62dedaa97644a"] == (4, 8, 1, "")
    assert got.columns["exec_ns"].tolist() == [41057000]
    assert got.columns["kernel_start_us"].tolist() == [1752867229235181]
    assert got.columns["kernel_stop_us"].tolist() == [1752867229275811]
    assert got.info["n_verbose_records"] == 1
    # two processes' records in one file: refused, naming the file
    mixed = tmp_path / "mixed.log"
    mixed.write_text(README_RECORD + "\n" + json.dumps(README_VERBOSE) + "\n")
    with pytest.raises(TraceError, match="mixed.log: records of 2 processes"):
        read_log(mixed)


def test_tax_by_hand(tmp_path: Path) -> None:
    traces = load_traces(write_job(tmp_path / "job"), jobs=1)
    assert traces.source == "nccl-inspector"
    assert traces.rank_ids == [0, 1, 2, 3]
    assert set(traces.ranks["rank_source"]) == {"world communicator 0xworld"}
    alignment, tax = tax_from_traces(traces)
    world = tax.collectives[tax.collectives["pg"] == "0xworld"].sort_values("index")
    # sn 1: 100,120,80,110 -> tau 40, straggler 2; sn 2: 130,100,125,90 -> 40, rank 3;
    # sn 3: 90,95,60,99 -> 39, rank 2
    assert world["tau_max_us"].tolist() == [40.0, 40.0, 39.0]
    assert world["straggler_rank"].tolist() == [2, 3, 2]
    assert world["fastest_rank"].tolist() == [1, 0, 3]
    assert world["pg_desc"].tolist() == ["default_pg"] * 3
    assert world["valid"].all()
    assert world["end_spread_us"].isna().all()  # no kernel times: unknown, not 0
    # sn 1, rank 1 waited (120-80)/120 of its execution
    row = tax.ranks[(tax.ranks["pg"] == "0xworld") & (tax.ranks["index"] == 1) & (tax.ranks["rank"] == 1)]
    assert row["wait_share"].iloc[0] == pytest.approx(40 / 120)
    tp = tax.collectives[tax.collectives["pg"] == "0xtp01"]
    assert tp["tau_max_us"].tolist() == [20.0] and tp["straggler_rank"].tolist() == [0]
    assert alignment.groups.set_index("pg").loc["0xtp01", "pg_ranks"] == "0,1"
    summary = tax_summary(tax).set_index("pg")
    assert summary.loc["0xworld", "count"] == 3 and summary.loc["0xworld", "tau_median_us"] == 40.0
    stragglers, _ = straggler_identity(tax)
    world_s = stragglers.set_index("pg").loc["0xworld"]
    assert world_s["top_rank"] == 2 and world_s["top_share"] == pytest.approx(2 / 3)
    assert world_s["change_rate"] == 1.0  # 2 -> 3 -> 2


def test_partial_collective_refused_then_counted(tmp_path: Path) -> None:
    traces = load_traces(write_job(tmp_path / "job", skip={(3, 2)}), jobs=1)
    assert any("1 of 3 collective(s)" in p and "sn 2 lacks rank(s) 3" in p for p in traces.problems)
    with pytest.raises(TraceError, match="sn 2 lacks rank"):
        tax_from_traces(traces)
    alignment, tax = tax_from_traces(traces, allow_partial=True)
    world = tax.collectives[tax.collectives["pg"] == "0xworld"].set_index("index")
    assert world.loc[2, "n_ranks"] == 3 and not world.loc[2, "valid"]
    assert world.loc[1, "valid"] and world.loc[3, "valid"]
    partial = alignment.mismatches[alignment.mismatches["kind"] == "partial"]
    assert partial[["pg", "index"]].values.tolist() == [["0xworld", 2]]
    assert tax_summary(tax).set_index("pg").loc["0xworld", "n_invalid"] == 1


def test_missing_rank(tmp_path: Path) -> None:
    traces = load_traces(write_job(tmp_path / "job", ranks=range(3)), jobs=1)
    assert traces.missing_ranks == (3,)
    with pytest.raises(TraceError, match=r"rank\(s\) 3 have no Inspector log"):
        tax_from_traces(traces)
    _, tax = tax_from_traces(traces, allow_partial=True)
    world = tax.collectives[tax.collectives["pg"] == "0xworld"]
    assert world["n_ranks"].tolist() == [3, 3, 3]
    # ranks 0-2 only: sn 1: 100,120,80 -> 40; sn 2: 130,100,125 -> 30; sn 3: 90,95,60 -> 35
    assert world["tau_max_us"].tolist() == [40.0, 30.0, 35.0]


def test_cpu_timings_kept_apart(tmp_path: Path) -> None:
    # sn 3 timed on the CPU by every rank; sn 2 by rank 1 only (mixed: not comparable)
    sources = {(r, 3): "collective_cpu" for r in range(4)} | {(1, 2): "kernel_cpu"}
    alignment, tax = tax_from_traces(load_traces(write_job(tmp_path / "job", sources=sources), jobs=1))
    world = tax.collectives[tax.collectives["pg"] == "0xworld"].set_index("index")
    assert world.loc[1, "collective"] == "AllReduce"
    assert world.loc[3, "collective"] == "AllReduce [collective_cpu]"
    assert world.loc[2, "collective"] == "AllReduce [kernel_cpu, kernel_gpu]" and not world.loc[2, "valid"]
    kinds = alignment.mismatches.set_index("index")["kind"]
    assert kinds.loc[2] == "timing_source"
    summary = tax_summary(tax).query("pg == '0xworld'").set_index("collective")
    # the mixed one is flagged invalid: counted apart, in no statistic (issue 33)
    assert summary["count"].to_dict() == {"AllReduce": 1, "AllReduce [collective_cpu]": 1,
                                          "AllReduce [kernel_cpu, kernel_gpu]": 0}
    assert summary["n_invalid"].to_dict() == {"AllReduce": 0, "AllReduce [collective_cpu]": 0,
                                              "AllReduce [kernel_cpu, kernel_gpu]": 1}


def test_verbose_kernel_times_check_alignment(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    # 2 ranks on one host; sn 1 stops agree within 3 µs, sn 2 stops 900 µs apart
    stops = {0: [1_000_100, 2_000_100], 1: [1_000_103, 2_001_000]}
    for r in range(2):
        lines = [record("0xc", "dp", r, 2, "AllReduce", sn, 90 + 10 * r, host="h", pid=r,
                        kernel_us=(stops[r][sn - 1] - 90 - 10 * r, stops[r][sn - 1])) for sn in (1, 2)]
        (folder / f"h-pid{r}.log").write_text("".join(lines))
    alignment, tax = tax_from_traces(load_traces(folder, jobs=1), end_tolerance_us=100)
    coll = tax.collectives.set_index("index")
    assert coll.loc[1, "valid"] and coll.loc[1, "end_spread_us"] == 3.0
    assert not coll.loc[2, "valid"] and coll.loc[2, "end_spread_us"] == 900.0
    assert alignment.mismatches["kind"].tolist() == ["end_time"]


def test_gzip_jsonl_growing_and_malformed(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job")
    plain = sorted(job.iterdir())
    # rank 0 gzipped as .jsonl.gz, rank 1 as .log.gz: same tax
    for path, suffix in ((plain[0], ".jsonl.gz"), (plain[1], ".log.gz")):
        path.with_name(path.stem + suffix).write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
    # rank 2: a log still being written, its last record cut mid-line
    growing = plain[2]
    growing.write_text(growing.read_text() + '{"header": {"id": "0xworld", "rank": 2, "n_ra')
    traces = load_traces(job, jobs=1)
    row = traces.ranks.set_index("rank").loc[2]
    assert row["unread_tail_bytes"] == len('{"header": {"id": "0xworld", "rank": 2, "n_ra')
    assert row["n_collective_records"] == 3
    assert traces.skipped["reason"].tolist() == ["incomplete last line (log still being written?)"]
    _, tax = tax_from_traces(traces)
    assert tax.collectives.query("pg == '0xworld'")["tau_max_us"].tolist() == [40.0, 40.0, 39.0]
    # a malformed line inside a log is an error naming file and line, unless salvaged
    bad = plain[3]
    lines = bad.read_text().splitlines(keepends=True)
    bad.write_text(lines[0] + "not json\n" + "".join(lines[1:]))
    with pytest.raises(TraceError, match=rf"{bad.name}: line 2: not an NCCL Inspector record"):
        load_traces(job, jobs=1)
    salvaged = load_traces(job, jobs=1, salvage=True)
    skipped = salvaged.skipped.set_index(["rank", "reason"])["count"]
    assert skipped.loc[(3, "malformed line")] == 1


def test_p2p_counted_and_stdout_log_ignored(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job")
    log0 = next(job.glob("node0-pid1000.log"))
    p2p = {"header": {"id": "0xworld", "rank": 0, "n_ranks": 4, "nnodes": 2},
           "metadata": {"hostname": "node0", "pid": 1000, "dump_timestamp_us": 1},
           "p2p_perf": {"p2p": "Send", "p2p_sn": 1, "p2p_peer": 1, "p2p_msg_size_bytes": 65536,
                        "p2p_exec_time_us": 12, "p2p_timing_source": "kernel_gpu"}}
    log0.write_text(log0.read_text() + json.dumps(p2p) + "\n" + json.dumps(p2p) + "\n")
    (job / "train-stdout.log").write_text("epoch 1 loss 0.3\n")  # not a log of the Inspector
    traces = load_traces(job, jobs=1)
    assert len(traces.ranks) == 4
    assert traces.untabulated[["rank", "category", "count"]].values.tolist() == [[0, "p2p_perf", 2]]
    assert traces.ranks.set_index("rank").loc[0, "n_p2p_records"] == 2


def test_no_world_communicator_needs_ranks(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    for r in range(2):  # two processes in two different pair communicators only
        (folder / f"h-pid{r}.log").write_text(record(f"0xc{r}", "", 0, 2, "AllReduce", 1, 10, host="h", pid=r))
    with pytest.raises(TraceError, match="no communicator is logged by all of them"):
        load_traces(folder, jobs=1)


def test_mixing_sources_refused(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job")
    (job / "rank9.json").write_text('{"traceEvents": []}')
    with pytest.raises(InputError, match="cannot be mixed"):
        load_traces(job, jobs=1)


def test_cli_tax_on_log_folder(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job")
    out = tmp_path / "tax.csv"
    run = subprocess.run([sys.executable, "-m", "evtsync", "tax", str(job), "--no-cache", "-o", str(out)],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert "4 rank(s) from NCCL Inspector logs" in run.stdout and "default_pg" in run.stdout
    import pandas as pd

    table = pd.read_csv(out)
    assert table.query("pg == '0xworld'")["tau_max_us"].tolist() == [40.0, 40.0, 39.0]
    blocks = subprocess.run([sys.executable, "-m", "evtsync", "blocks", str(job), "--no-cache"],
                            capture_output=True, text=True, check=False)
    assert blocks.returncode != 0 and "Traceback" not in blocks.stderr
    assert "NCCL Inspector logs" in blocks.stderr


def test_type_disagreement_stops_unless_not_strict(tmp_path: Path) -> None:
    from evtsync.core.errors import AlignmentError

    job = write_job(tmp_path / "job")
    path = job / "node1-pid1002.log"  # rank 2 logs its sn 2 as a ReduceScatter
    lines = path.read_text().splitlines(keepends=True)
    lines[1] = lines[1].replace('"AllReduce"', '"ReduceScatter"')
    path.write_text("".join(lines))
    traces = load_traces(job, jobs=1)
    with pytest.raises(AlignmentError, match="collective 2: types differ across ranks"):
        tax_from_traces(traces)
    alignment, tax = tax_from_traces(traces, strict=False)
    world = tax.collectives.query("pg == '0xworld'").set_index("index")
    assert world["valid"].tolist() == [True, False, True]
    assert alignment.mismatches[["index", "rank", "kind"]].values.tolist() == [[2, 2, "type"]]


def test_process_pool_reads_the_same(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job")
    pooled = load_traces(job, jobs=2)
    alone = load_traces(job, jobs=1)
    assert pooled.logged.equals(alone.logged) and pooled.ranks.equals(alone.ranks)


@pytest.mark.slow
def test_run_on_inspector_logs(tmp_path: Path) -> None:
    """``evtsync run`` on a folder of logs: the tax stage runs, every stage that needs a
    kernel timeline is recorded as not applicable with the reason."""
    job = write_job(tmp_path / "job")
    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "evtsync", "run", str(job), "--out", str(out), "-q"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    text = json.dumps(manifest)
    assert "needs a kernel timeline, but these are NCCL Inspector logs" in text


def test_truncated_gzip_is_an_error_unless_salvaged(tmp_path: Path) -> None:
    job = write_job(tmp_path / "job")
    path = job / "node1-pid1003.log"
    packed = gzip.compress(path.read_bytes())
    path.unlink()
    cut = job / "node1-pid1003.log.gz"
    cut.write_bytes(packed[: len(packed) - 30])  # the trailer and the end of the last member gone
    with pytest.raises(TraceError, match=r"node1-pid1003.log.gz: gzip stream ends early.*--salvage"):
        load_traces(job, jobs=1)
    traces = load_traces(job, jobs=1, salvage=True)
    skipped = traces.skipped.set_index(["rank", "reason"])["count"]
    assert skipped.loc[(3, "gzip stream cut short (records after the cut lost)")] == 1


@pytest.mark.slow
def test_dask_reads_the_same(tmp_path: Path) -> None:
    """Thousands of logs go to Dask like trace files: the tables do not depend on it."""
    pytest.importorskip("distributed")
    job = write_job(tmp_path / "job")
    on_dask = load_traces(job, workers=2)
    alone = load_traces(job, jobs=1)
    assert on_dask.logged.equals(alone.logged) and on_dask.ranks.equals(alone.ranks)


def test_follower_reads_only_appended_bytes(tmp_path: Path) -> None:
    from evtsync.trace.follow import LogFollower

    job = write_job(tmp_path / "job", skip={(r, 3) for r in range(4)})  # sn 3 not yet logged
    follower = LogFollower(job)
    first = follower.refresh()
    assert follower.last_bytes_read == sum(p.stat().st_size for p in job.iterdir())
    assert sorted(set(first.logged.query("pg == '0xworld'")["index"])) == [1, 2]
    # the job goes on: every rank logs sn 3; rank 0 is caught mid-record
    appended = 0
    for r in range(4):
        path = job / f"node{r // 2}-pid{1000 + r}.log"
        line = record("0xworld", "default_pg", r, 4, "AllReduce", 3, WORLD_US[r][2], host=f"node{r // 2}",
                      pid=1000 + r)
        text = line if r else line[:40]
        with path.open("a") as fh:
            fh.write(text)
        appended += len(text)
    second = follower.refresh()
    assert follower.last_bytes_read == appended  # only the new bytes
    assert second.ranks.set_index("rank").loc[0, "unread_tail_bytes"] == 40
    with (job / "node0-pid1000.log").open("a") as fh:
        fh.write(line_rest := record("0xworld", "default_pg", 0, 4, "AllReduce", 3, WORLD_US[0][2], host="node0",
                                     pid=1000)[40:])
    third = follower.refresh()
    assert follower.last_bytes_read == 40 + len(line_rest)  # the cut record again, then the rest
    whole = load_traces(job, jobs=1)
    assert third.logged.equals(whole.logged)
    _, tax = tax_from_traces(third)
    assert tax.collectives.query("pg == '0xworld'")["tau_max_us"].tolist() == [40.0, 40.0, 39.0]
    # a file rewritten before the point read is read whole again
    path = job / "node1-pid1003.log"
    path.write_text(path.read_text().replace('"coll_exec_time_us": 110', '"coll_exec_time_us": 111'))
    fourth = follower.refresh()
    assert follower.last_bytes_read == path.stat().st_size
    assert fourth.logged.equals(load_traces(job, jobs=1).logged)


def test_bad_fields_named(tmp_path: Path) -> None:
    path = tmp_path / "h-pid1.log"
    path.write_text(record("0xc", "", 0, 2, "AllReduce", 1, -5, host="h", pid=1))
    with pytest.raises(TraceError, match=r"h-pid1.log: line 1: coll_exec_time_us -5 is negative"):
        read_log(path)
    path.write_text(record("0xc", "", 0, 2, "AllReduce", 1, 5, host="h", pid=1).replace('"coll_sn": 1, ', ""))
    with pytest.raises(TraceError, match=r"h-pid1.log: line 1: not an NCCL Inspector record .*coll_sn"):
        read_log(path)
    path.write_text(record("0xc", "", 3, 2, "AllReduce", 1, 5, host="h", pid=1))
    with pytest.raises(TraceError, match=r"h-pid1.log: line 1: communicator 0xc: rank 3 is not below n_ranks 2"):
        read_log(path)


def test_inspector_logs_use_the_pool_cost_model() -> None:
    """One rule for every reader (issue 32): the pool model, no byte threshold of its own. By
    hand from the constants: 1,000 logs of 10 KB are 1 s of reading at most, under the pool's
    own start (0.7 s on 2 cores): one process; 1,000 logs of 20 MB (~130 s of reading, ~8 s to
    move the columns) pay for a pool on 2 idle cores."""
    from evtsync.core.parallel import pool_pays
    from evtsync.trace.readers.inspector import inspector_work

    small = inspector_work([10_000] * 1000)
    assert small.items == 1000 and small.cpu_s < 1.0
    assert not pool_pays(small, 2, cores=2)
    large = inspector_work([20_000_000] * 1000)
    assert 100 < large.cpu_s < 200 and large.transfer_cpu_s < 0.1 * large.cpu_s
    assert pool_pays(large, 2, cores=2)
    import evtsync.trace.traceset as traceset

    assert not hasattr(traceset, "INSPECTOR_PARALLEL_MIN_BYTES")


def test_typed_errors_name_file_and_line(tmp_path: Path) -> None:
    """A bad field on a later line (not the first of its communicator or batch) is named by its
    line; a bad comm_name is checked on a communicator's first line (issue 48's lean decoding
    reads it there only)."""
    good = [record("0xc", "pg", 0, 2, "AllReduce", sn, 5, host="h", pid=1) for sn in range(4)]
    path = tmp_path / "h-pid1.log"
    bad = good[:2] + [good[2].replace('"coll_sn": 2', '"coll_sn": "two"')] + good[3:]
    path.write_text("".join(bad))
    with pytest.raises(TraceError, match=r"h-pid1.log: line 3: not an NCCL Inspector record .*int.*coll_sn"):
        read_log(path)
    got = read_log(path, salvage=True)
    assert got.n_records == 3 and got.skipped == {"malformed line": 1}
    path.write_text(good[0].replace('"comm_name": "pg"', '"comm_name": 7') + "".join(good[1:]))
    with pytest.raises(TraceError, match=r"h-pid1.log: line 1: not an NCCL Inspector record .*comm_name"):
        read_log(path)


@pytest.mark.parametrize("blank", [False, True])
def test_rank_conflict_after_salvaged_lines_names_the_true_line(tmp_path: Path, blank: bool) -> None:
    """Issue 47: after salvaged (damaged) lines, and blank ones, a record whose rank conflicts
    with the earlier lines is named by its line in the file, counted here by hand: lines 1-2
    rank 0 of 2, lines 3-4 garbage (salvaged), [line 5 blank,] then rank 1 of 2 on the same
    communicator: line 5 (6 with the blank line)."""
    good = [record("0xc", "pg", 0, 2, "AllReduce", sn, 5, host="h", pid=1) for sn in range(2)]
    other = record("0xc", "pg", 1, 2, "AllReduce", 2, 5, host="h", pid=1)
    lines = [*good, "not json at all\n", '{"header": 3}\n', *(["\n"] if blank else []), other]
    path = tmp_path / "h-pid1.log"
    path.write_text("".join(lines))
    expected = 6 if blank else 5
    assert lines[expected - 1] == other  # the hand count: 1-based line of the conflicting record
    with pytest.raises(TraceError, match=rf"h-pid1.log: line {expected}: communicator 0xc logged with rank 1 of 2"):
        read_log(path, salvage=True)


def test_rank_conflict_after_blank_lines_names_the_true_line(tmp_path: Path) -> None:
    """The bulk decoder (no damaged line) counts blank lines too: the conflict on line 4."""
    good = record("0xc", "pg", 0, 2, "AllReduce", 0, 5, host="h", pid=1)
    other = record("0xc", "pg", 1, 2, "AllReduce", 1, 5, host="h", pid=1)
    path = tmp_path / "h-pid1.log"
    path.write_text(good + "\n\n" + other)
    with pytest.raises(TraceError, match=r"h-pid1.log: line 4: communicator 0xc logged with rank 1 of 2"):
        read_log(path)
