"""The streaming tax of NCCL Inspector logs (evtsync.sync.logtax, issue 32): the same tables as the
whole-table path (load_traces + tax_from_traces, the reference) on synthetic jobs, whole,
gzipped, growing, partial and mismatched, read in many small rounds; collectives leave memory
once every member has reported them (hand counts of what stays open)."""

from __future__ import annotations

import gzip
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from evtsync.core.errors import AlignmentError, TraceError
from evtsync.core.tableio import json_text
from evtsync.sync import logtax
from evtsync.sync.logtax import inspector_files, stream_tax
from evtsync.sync.tax import straggler_identity, tax_from_traces, tax_summary
from evtsync.synth import SynthConfig, synthesize
from evtsync.synth.inspector import write_inspector_logs
from evtsync.trace.traceset import load_traces

#: Tiny blocks: a few records per file and round, so that collectives complete across rounds.
SMALL = 2048


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("logtax")
    result = synthesize(SynthConfig.build(ranks=16, tp=8, fsdp=2, iterations=4, layers=1, seed=5), out)
    write_inspector_logs(result.traces_dir, out / "inspector", verbose=True)
    return out / "inspector"


@pytest.fixture()
def job(clean: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "inspector"
    shutil.copytree(clean, folder)
    return folder


def _given(folder: Path) -> list[str]:
    """RANK=PATH for every log (the synthetic job has no communicator spanning every rank)."""
    return [f"{i}={p}" for i, p in enumerate(sorted(folder.iterdir(), key=lambda p: int(p.name.split("pid")[1]
                                                                                         .split(".")[0])))]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def _same(paths: list[str], *, allow_partial: bool = False, strict: bool = True, salvage: bool = False) -> dict:
    """Both paths on ``paths``: every table equal; returns the streaming's stats."""
    traces = load_traces(paths, jobs=1, salvage=salvage)
    alignment, tables = tax_from_traces(traces, allow_partial=allow_partial, strict=strict)
    files = inspector_files(paths)
    assert files is not None
    stats = {}
    for block, keep in ((SMALL, True), (None, False)):
        with pytest.MonkeyPatch.context() as patch:  # small blocks: also many small tax batches
            if block:
                patch.setattr(logtax, "TAX_BATCH_RECORDS", 64)
            got = stream_tax(files, allow_partial=allow_partial, strict=strict, salvage=salvage, block_bytes=block,
                             keep_ranks=keep)
        assert got.stats["streamed"]
        pd.testing.assert_frame_equal(tables.collectives, got.tables.collectives)
        if keep:
            pd.testing.assert_frame_equal(tables.ranks, got.tables.ranks)
            stats = got.stats
        else:
            assert got.tables.ranks.empty
        pd.testing.assert_frame_equal(tax_summary(tables), tax_summary(got.tables))
        for want, have in zip(straggler_identity(tables), straggler_identity(got.tables), strict=True):
            pd.testing.assert_frame_equal(want, have)
        pd.testing.assert_frame_equal(alignment.groups, got.alignment.groups)
        pd.testing.assert_frame_equal(alignment.mismatches, got.alignment.mismatches)
        assert alignment.invalid == got.alignment.invalid
        for name in ("ranks", "process_groups", "skipped", "untabulated"):
            pd.testing.assert_frame_equal(getattr(traces, name), getattr(got.traces, name), obj=name)
        assert traces.problems == got.traces.problems and traces.missing_ranks == got.traces.missing_ranks
        assert tables.collectives.attrs == got.tables.collectives.attrs
        if got.report is not None:  # a clean job: the printed report's rows, from the arrays (issue 48)
            assert not keep and not traces.problems and not len(alignment.mismatches)
            for want, have in ((tax_summary(tables), got.report.summary), (alignment.groups, got.report.groups),
                               (straggler_identity(tables)[0], got.report.stragglers)):
                assert json_text(have) == json_text(want)
            assert [r["n_collective_records"] for r in got.report.ranks.records()] == \
                traces.ranks["n_collective_records"].tolist()
    return stats


def test_whole_job_equal_and_memory_bounded(job: Path) -> None:
    paths = _given(job)
    n_records = sum(len(_lines(p)) for p in job.iterdir())
    stats = _same(paths)
    files = inspector_files(paths)
    assert files is not None and stream_tax(files, keep_ranks=False).report is not None  # clean: printed from arrays
    assert stats["rounds"] > 3 and stats["left_open_at_end"] == 0
    # collectives left memory as they completed: far fewer records open at once than in the files
    assert stats["peak_open_records"] < n_records / 2


def test_gzip_and_growing_logs(job: Path) -> None:
    files = sorted(job.iterdir())
    for path in files[:5]:  # five logs gzipped
        Path(f"{path}.gz").write_bytes(gzip.compress(path.read_bytes()))
        path.unlink()
    growing = files[7]
    with open(growing, "a") as fh:  # a record being written: half a line
        fh.write('{"header":{"id":"0x1","rank":0,"n_ranks":2},"coll_perf":{"coll":"AllRed')
    stats = _same(_given(job))
    assert stats["left_open_at_end"] == 0


def test_ring_buffer_loss_refused_then_taxed_with_allow_partial(job: Path) -> None:
    victim = sorted(job.iterdir())[3]
    lines = _lines(victim)
    lost = [lines[2], lines[5], lines[9]]  # three records the ring buffer dropped (hand count)
    victim.write_text("".join(line for line in lines if line not in lost))
    paths = _given(job)
    with pytest.raises(TraceError, match="logged by only some") as old:
        tax_from_traces(load_traces(paths, jobs=1))
    files = inspector_files(paths)
    assert files is not None
    with pytest.raises(TraceError, match="logged by only some") as new:
        stream_tax(files, block_bytes=SMALL)
    assert str(old.value) == str(new.value)
    stats = _same(paths, allow_partial=True)
    assert stats["left_open_at_end"] == 3


def test_missing_rank_file(job: Path) -> None:
    paths = _given(job)
    del paths[5]
    stats = _same(paths, allow_partial=True)
    # rank 5's TP and FSDP communicators never complete: every collective of theirs stayed open
    assert stats["left_open_at_end"] > 0


def test_mismatched_type_and_timing_source(job: Path) -> None:
    victim = sorted(job.iterdir())[2]
    lines = _lines(victim)
    record = json.loads(lines[4])
    record["coll_perf"]["coll"] = "Broadcast"
    lines[4] = json.dumps(record) + "\n"
    record = json.loads(lines[6])
    record["coll_perf"]["coll_timing_source"] = "collective_cpu"
    lines[6] = json.dumps(record) + "\n"
    victim.write_text("".join(lines))
    paths = _given(job)
    with pytest.raises(AlignmentError, match="types differ"):
        stream_tax(inspector_files(paths) or [], block_bytes=SMALL)
    _same(paths, strict=False)


def test_repeated_record_is_an_error(job: Path) -> None:
    victim = sorted(job.iterdir())[1]
    lines = _lines(victim)
    victim.write_text("".join(lines + [lines[0]]))  # its first record again, at the end
    files = inspector_files(_given(job))
    assert files is not None
    with pytest.raises(TraceError, match="logged twice"):
        stream_tax(files, block_bytes=SMALL)


def test_not_inspector_logs_are_not_streamed(tmp_path: Path) -> None:
    trace = tmp_path / "rank0.json"
    trace.write_text(json.dumps({"traceEvents": [], "distributedInfo": {"rank": 0}}))
    assert inspector_files([trace]) is None


def test_api_and_cli_stream_inspector_folders(job: Path, tmp_path: Path) -> None:
    import subprocess
    import sys

    import evtsync

    paths = _given(job)
    _, tables = tax_from_traces(load_traces(paths, jobs=1))
    pd.testing.assert_frame_equal(evtsync.tax_table(paths), tables.collectives)
    pd.testing.assert_frame_equal(evtsync.tax_table(paths, per_rank=True), tables.ranks)
    out = tmp_path / "tax.parquet"
    run = subprocess.run([sys.executable, "-m", "evtsync", "tax", *paths, "--no-cache", "-o", str(out), "--json"],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert len(pd.read_parquet(out)) == len(tables.collectives)
    ranks = pd.read_parquet(tmp_path / "tax_ranks.parquet")
    assert len(ranks) == len(tables.ranks) and (ranks["wait_us"].to_numpy() == tables.ranks["wait_us"].to_numpy()).all()
    summary = json.loads(run.stdout)["summary"]
    assert [s["count"] for s in summary] == tax_summary(tables)["count"].tolist()


def _record(cid: str, local: int, n: int, sn: int, us: int, host: str, pid: int) -> str:
    return json.dumps({"header": {"id": cid, "comm_name": "pg", "rank": local, "n_ranks": n, "nnodes": 1},
                       "metadata": {"inspector_output_format_version": "v4.0", "dump_timestamp_us": 1000 + sn,
                                    "hostname": host, "pid": pid},
                       "coll_perf": {"coll": "AllReduce", "coll_sn": sn, "coll_msg_size_bytes": 1024,
                                     "coll_exec_time_us": us, "coll_timing_source": "kernel_gpu"}}) + "\n"


def test_ranks_known_only_at_the_end_fall_back_to_the_whole_table_path(tmp_path: Path) -> None:
    """Two processes: the communicator every log has in its first blocks (0xa) numbers them one
    way, a larger id logged later (0xb, which the rule picks: most ranks, then the id) the other
    way. The streamed pass guessed from the first blocks, so it reads the logs again whole: the
    same tables, said in a warning."""
    for pid, (local_a, local_b) in ((1, (0, 1)), (2, (1, 0))):
        lines = [_record("0xa", local_a, 2, sn, 100 + 7 * pid + sn, "h", pid) for sn in range(40)]
        lines += [_record("0xb", local_b, 2, sn, 200 + 3 * pid, "h", pid) for sn in range(3)]
        (tmp_path / f"h-pid{pid}.log").write_text("".join(lines))
    files = inspector_files(tmp_path)
    assert files is not None
    got = stream_tax(files, block_bytes=1024)
    assert got.stats == {"streamed": False}
    _, tables = tax_from_traces(load_traces(tmp_path, jobs=1))
    pd.testing.assert_frame_equal(tables.collectives, got.tables.collectives)
    # the global ranks are those of 0xb: pid 2 is its rank 0
    assert got.traces.ranks.set_index("rank")["pid"].to_dict() == {0: 2, 1: 1}


@pytest.mark.parametrize("n_files", [4, 32])
def test_open_records_bounded_by_the_round_not_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         n_files: int) -> None:
    """Memory flat in the number of files (issue 48), counted in records held, not timed: the
    same 16 KiB of text per round over 4 or 32 logs of one world communicator (the same total
    bytes) keeps at most two rounds of records open (those read in the round, and those of the
    round before still waiting for a slower member) plus one partial line per file."""
    monkeypatch.setattr(logtax, "MIN_BLOCK_BYTES", 256)
    monkeypatch.setattr(logtax, "TAX_BATCH_RECORDS", 300)  # complete collectives taxed 300 records at a time
    n_sn = 1280 // n_files * 4  # 5,120 records in all at both sizes
    for pid in range(n_files):
        lines = [_record("0xw", pid, n_files, sn, 100 + (pid * 7 + sn) % 13, f"h{pid // 8}", pid)
                 for sn in range(n_sn)]
        (tmp_path / f"h{pid // 8}-pid{pid}.log").write_text("".join(lines))
    size = len(_record("0xw", 10, n_files, 100, 100, "h0", 10))
    files = inspector_files(tmp_path)
    assert files is not None
    round_bytes = 16 << 10
    got = stream_tax(files, round_bytes=round_bytes)
    assert got.stats["streamed"] and len(got.tables.collectives) == n_sn
    # the tax of every collective: max - min of the times written (a hand rule, not the code)
    written = [[100 + (pid * 7 + sn) % 13 for pid in range(n_files)] for sn in range(n_sn)]
    assert got.tables.collectives["tau_max_us"].tolist() == [float(max(w) - min(w)) for w in written]
    bound = 2 * round_bytes // size + 2 * n_files
    assert got.stats["peak_open_records"] <= bound < n_files * n_sn / 2
    # held at once: the open ones and at most one batch (plus one round) of complete ones not taxed yet
    assert got.stats["peak_held_records"] <= bound + 300 + round_bytes // size < n_files * n_sn / 2


# ---- issue 48, second round: one decode per round over every file (LogRounds)

def _world(folder: Path, n_files: int, n_sn: int) -> list[list[int]]:
    """``n_files`` logs of one world communicator, ``n_sn`` AllReduces each; the times written."""
    folder.mkdir(parents=True, exist_ok=True)
    times = [[100 + (pid * 7 + sn) % 13 for pid in range(n_files)] for sn in range(n_sn)]
    for pid in range(n_files):
        (folder / f"h{pid // 8}-pid{pid}.log").write_text(
            "".join(_record("0xw", pid, n_files, sn, times[sn][pid], f"h{pid // 8}", pid) for sn in range(n_sn)))
    return times


class _Counting:
    """The bulk decoder, counting its calls."""

    def __init__(self, inner: object) -> None:
        self.inner, self.calls = inner, 0

    def decode_lines(self, text: bytes) -> list:
        self.calls += 1
        return self.inner.decode_lines(text)  # type: ignore[attr-defined]

    def decode(self, text: bytes) -> object:
        return self.inner.decode(text)  # type: ignore[attr-defined]


@pytest.mark.parametrize("n_files", [4, 64])
def test_one_decode_call_per_round_whatever_the_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      n_files: int) -> None:
    """Counted, not timed: each round's blocks of all files go through ONE msgspec call (a call
    per file and block was the cost at 4,096 logs; a round above DECODE_BYTES of text, 1 MiB, is
    decoded in slices of whole blocks); the tax is max - min of the times written."""
    from evtsync.trace.readers import inspector

    counting = _Counting(inspector._DECODE_LEAN)
    monkeypatch.setattr(inspector, "_DECODE_LEAN", counting)
    monkeypatch.setenv("EVTSYNC_DECODER", "msgspec")  # msgspec's calls are counted (not the compiled scanner's)
    times = _world(tmp_path, n_files, 40)
    got = stream_tax(inspector_files(tmp_path) or [], block_bytes=1024)
    assert got.stats["streamed"] and got.stats["rounds"] > 3
    assert 0 < counting.calls <= got.stats["rounds"]
    assert got.tables.collectives["tau_max_us"].tolist() == [float(max(t) - min(t)) for t in times]


def test_a_folder_of_logs_is_sniffed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Listing a folder of Inspector logs reads each file's first bytes once (the listing's
    sniff is what inspector_files decides by: it was twice, ~0.1 s at 4,096 logs); a stdout
    ``.log`` beside them is not taken, and a file given by name is still sniffed."""
    from evtsync.trace import readers

    _world(tmp_path / "logs", 6, 2)
    (tmp_path / "logs" / "stdout.log").write_text("epoch 1 loss 0.3\n")
    heads: list[str] = []
    real = readers.head_bytes
    monkeypatch.setattr(readers, "head_bytes", lambda path, *a: heads.append(Path(path).name) or real(path, *a))
    files = inspector_files(tmp_path / "logs")
    assert files is not None and len(files) == 6
    assert sorted(heads) == sorted(p.name for p in (tmp_path / "logs").iterdir())  # 7 files, once each
    heads.clear()
    one = tmp_path / "logs" / "h0-pid0.log"
    assert inspector_files([one]) == [(one, None)] and heads == ["h0-pid0.log"]


@pytest.mark.parametrize("n_files", [8, 64])
def test_per_file_state_small_and_flat(tmp_path: Path, n_files: int) -> None:
    """Between rounds a file holds at most one unfinished line (blocks of 100 bytes: every
    record, ~330 bytes, is split across rounds) and ~1-2 KB of fixed state, whatever the number
    of files; every record comes out exactly once with the time written."""
    from evtsync.trace.readers.inspector import LogRounds

    times = _world(tmp_path, n_files, 6)
    line = max(len(_record("0xw", pid, n_files, sn, 112, f"h{pid // 8}", pid)) for pid in range(n_files)
               for sn in range(6))
    files = inspector_files(tmp_path) or []
    reader = LogRounds(files, block_bytes=100)
    seen = []
    per_file = []
    while reader.active:
        cols = reader.round()
        seen += list(zip(cols["file"].tolist(), cols["sn"].tolist(), cols["exec_ns"].tolist(), strict=True))
        assert max(map(len, reader._pending.values()), default=0) < line
        per_file.append(reader.state_bytes() / n_files)
    assert max(per_file) < line + 2048
    assert reader.rounds > 6 * line // 100
    rank_of = {i: int(p.name.split("pid")[1].split(".")[0]) for i, (p, _) in enumerate(files)}
    assert sorted((rank_of[f], sn, ns) for f, sn, ns in seen) == sorted(
        (pid, sn, times[sn][pid] * 1000) for pid in range(n_files) for sn in range(6))
    results = reader.results()
    assert [r.info["n_collective_records"] for r in results] == [6] * n_files
    assert [r.info["n_lines"] for r in results] == [6] * n_files


def test_last_line_cut_blank_and_malformed_lines(tmp_path: Path) -> None:
    """Among 12 logs one ends mid-line (a record being written: counted, not read), one has a
    blank line and one a malformed line (an error naming file and line; with --salvage counted):
    the streamed tables equal the whole-table path's, the counts are the hand counts."""
    times = _world(tmp_path, 12, 30)
    cut = tmp_path / "h0-pid3.log"
    extra = _record("0xw", 3, 12, 30, 100, "h0", 3)
    cut.write_text(cut.read_text() + extra[:57])
    blank = tmp_path / "h0-pid5.log"
    lines = _lines(blank)
    blank.write_text("".join(lines[:10] + ["\n"] + lines[10:]))
    bad = tmp_path / "h1-pid9.log"
    lines = _lines(bad)
    bad.write_text("".join(lines[:4] + ['{"header": oops}\n'] + lines[4:]))
    files = inspector_files(tmp_path)
    assert files is not None
    with pytest.raises(TraceError, match=re.escape(f"{bad}: line 5: not an NCCL Inspector record")):
        stream_tax(files, block_bytes=700)
    got = stream_tax(files, block_bytes=700, salvage=True)
    assert got.stats["streamed"]
    assert got.tables.collectives["tau_max_us"].tolist() == [float(max(t) - min(t)) for t in times]
    skipped = got.traces.skipped.set_index(["rank", "reason"])["count"].to_dict()
    assert skipped == {(9, "malformed line"): 1, (3, "incomplete last line (log still being written?)"): 1}
    ranks = got.traces.ranks.set_index("rank")
    assert ranks.loc[3, "unread_tail_bytes"] == 57 and ranks.loc[3, "n_events"] == 31
    assert ranks.loc[5, "n_events"] == 31 and ranks.loc[9, "n_events"] == 31 and ranks.loc[0, "n_events"] == 30
    whole = load_traces(tmp_path, jobs=1, salvage=True)
    _, tables = tax_from_traces(whole)
    pd.testing.assert_frame_equal(tables.collectives, got.tables.collectives)
    pd.testing.assert_frame_equal(whole.ranks.drop(columns="format_version"),
                                  got.traces.ranks.drop(columns="format_version"))


def test_many_files_few_lines_and_a_rank_changed_mid_file(tmp_path: Path) -> None:
    """300 logs of 2 records each: one round, the hand tax; a record whose header says another
    rank, in a later round, is refused naming its file and line."""
    times = _world(tmp_path, 300, 2)
    got = stream_tax(inspector_files(tmp_path) or [])
    assert got.stats["rounds"] <= 2
    assert got.tables.collectives["tau_max_us"].tolist() == [float(max(t) - min(t)) for t in times]
    assert got.traces.ranks["n_collective_records"].tolist() == [2] * 300
    lines = [_record("0xw", 7, 8, sn, 100, "h0", 7) for sn in range(8)]
    lines[6] = _record("0xw", 6, 8, 6, 100, "h0", 7)
    folder = tmp_path / "b"
    _world(folder, 8, 8)
    (folder / "h0-pid7.log").write_text("".join(lines))
    with pytest.raises(TraceError, match=r"h0-pid7.log: line 7: communicator 0xw logged with rank 6 of 8, "
                                         r"earlier lines say rank 7 of 8"):
        stream_tax(inspector_files(folder) or [], block_bytes=600)


def _hand_job(folder: Path, source: str = "collective_cpu") -> None:
    """Three processes (ranks 0-2) of one world communicator (0xw), AllReduce sn 1 and 2 with the
    times below; ranks 0 and 1 also share 0xp, one AllGather timed by ``source``."""
    world = {1: (100, 130, 100), 2: (50, 40, 90)}
    for pid in range(3):
        lines = [_record("0xw", pid, 3, sn, world[sn][pid], "h", pid) for sn in (1, 2)]
        if pid < 2:
            record = json.loads(_record("0xp", pid, 2, 1, (10, 12)[pid], "h", pid))
            record["coll_perf"].update(coll="AllGather", coll_timing_source=source)
            lines.append(json.dumps(record) + "\n")
        (folder / f"h-pid{pid}.log").write_text("".join(lines))


@pytest.mark.parametrize("keep", [True, False])
def test_numpy_batch_tax_by_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep: bool) -> None:
    """The NumPy batch tax (issue 48) against a hand count: tau = max - min, the straggler the
    shortest (rank 0 on the tie at sn 1), wait shares, the CPU-timed label; and it did run."""
    _hand_job(tmp_path)
    taken = []
    clean = logtax._Job._tax_clean
    monkeypatch.setattr(logtax._Job, "_tax_clean", lambda self, rec: taken.append(clean(self, rec))
                        or taken[-1])
    got = stream_tax(inspector_files(tmp_path) or [], keep_ranks=keep).tables
    assert taken and all(taken)
    coll = got.collectives.set_index(["pg", "index"])
    assert coll.loc[("0xw", 1), ["tau_max_us", "tau_med_us", "mean_delay_us"]].tolist() == [30.0, 0.0, 10.0]
    assert coll.loc[("0xw", 2), ["tau_max_us", "tau_med_us", "mean_delay_us"]].tolist() == [50.0, 10.0, 20.0]
    assert coll.loc[("0xw", 1), ["straggler_rank", "fastest_rank"]].tolist() == [0, 1]
    assert coll.loc[("0xw", 2), ["straggler_rank", "fastest_rank"]].tolist() == [1, 2]
    assert coll.loc[("0xp", 1), "collective"] == "AllGather [collective_cpu]"
    assert coll.loc[("0xp", 1), "tau_max_us"] == 2.0 and coll["valid"].all()
    if keep:
        ranks = got.ranks.set_index(["pg", "index", "rank"])
        assert ranks.loc[("0xw", 2, 2), "wait_share"] == pytest.approx(50 / 90)
        assert ranks.loc[("0xw", 2, 0), "wait_share"] == pytest.approx(10 / 50)
        assert ranks["is_straggler"].sum() == 3
    else:
        shares = got.instance_shares.set_index(["pg", "index"])
        assert shares.loc[("0xw", 2), "max"] == pytest.approx(50 / 90)
        assert shares.loc[("0xw", 2), "median"] == pytest.approx(10 / 50)
        assert shares.loc[("0xw", 1), "median"] == 0.0
        assert got.members == {"0xw": [0, 1, 2], "0xp": [0, 1]}


def test_numpy_batch_tax_declines_what_the_checks_flag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ranks that timed one collective differently: the NumPy batch tax computes nothing and the
    pandas path names the mismatch (no silent tax of a flagged collective)."""
    _hand_job(tmp_path, source="kernel_gpu")
    path = tmp_path / "h-pid1.log"
    path.write_text(path.read_text().replace('"kernel_gpu"}}\n', '"collective_cpu"}}\n', 1))
    taken = []
    clean = logtax._Job._tax_clean
    monkeypatch.setattr(logtax._Job, "_tax_clean", lambda self, rec: taken.append(clean(self, rec))
                        or taken[-1])
    got = stream_tax(inspector_files(tmp_path) or [])
    assert taken == [False]
    assert got.alignment.mismatches[["pg", "index", "kind"]].values.tolist() == [["0xw", 1, "timing_source"]]
    assert got.tables.collectives.set_index(["pg", "index"]).loc[("0xw", 1), "valid"] == False  # noqa: E712


def test_numpy_batch_tax_equals_the_pandas_one_bit_for_bit(job: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On the verbose synthetic job (kernel stop times: the end check runs) the NumPy batch tax
    gives the pandas path's tables exactly (both compute every number with tax.tax_segments:
    one home of the formulas, the mean delay included)."""
    files = inspector_files(_given(job)) or []
    for keep in (True, False):
        fast = stream_tax(files, block_bytes=SMALL, keep_ranks=keep).tables
        with monkeypatch.context() as patch:
            patch.setattr(logtax._Job, "_tax_clean", lambda self, rec: False)
            slow = stream_tax(files, block_bytes=SMALL, keep_ranks=keep).tables
        pd.testing.assert_frame_equal(fast.collectives, slow.collectives, check_exact=True)
        pd.testing.assert_frame_equal(fast.ranks, slow.ranks, check_exact=True)
        if not keep:
            pd.testing.assert_frame_equal(fast.instance_shares, slow.instance_shares, check_exact=True)
            assert fast.members == slow.members


def _held(folder: Path, n_files: int) -> int:
    """Bytes the reader holds once every one of ``n_files`` logs has ended and ``results()`` has
    been built (tracemalloc: what stays allocated besides the caller's own file list)."""
    import tracemalloc

    from evtsync.trace.readers.inspector import LogRounds

    _world(folder, n_files, 3)
    files = inspector_files(folder) or []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        reader = LogRounds(files, block_bytes=4096)
        while reader.active:
            reader.round()
        results = reader.results()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(results) == n_files
    return held


def test_memory_per_file_at_the_end_small(tmp_path: Path) -> None:
    """Issue 48 (memory flat in the number of files): what one more file costs once read (its
    file closed; its info, host, communicators and counts kept for the per-rank table) is under
    400 bytes, from 64 to 256 files (after a warm-up: the reader's one-off buffers). Measured
    ~220-245: the per-file arrays (counts, end, digest) and its communicator pairs; a file's
    ``LoggedCollectives`` is made when ``results()`` is read. Before, ~1.5 KB (an info dict and
    a communicators dict per file), and ~4 KB before that (ten empty arrays, two vocabulary
    lists and a second info dict per file in ``results()``, a dict entry per (file,
    communicator) pair)."""
    _held(tmp_path / "warm", 8)
    per_file = (_held(tmp_path / "b", 256) - _held(tmp_path / "a", 64)) / 192
    assert 0 < per_file < 400, per_file


def _listed_and_open(folder: Path, n_files: int) -> tuple[int, int]:
    """Bytes held once ``n_files`` logs are listed (``inspector_files``) and all of them are open
    and part read (one round of 600-byte blocks: no file has ended), and the peak of the listing
    alone (tracemalloc, started before the listing)."""
    import tracemalloc

    from evtsync.trace.readers.inspector import LogRounds

    _world(folder, n_files, 3)
    inspector_files(folder / "h0-pid0.log")  # the readers' modules imported, their registries made
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        files = inspector_files(folder) or []
        listing_peak = tracemalloc.get_traced_memory()[1] - before
        reader = LogRounds(files, block_bytes=600)
        reader.round()
        assert len(reader.active) == n_files  # every file open, none ended
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        if "reader" in locals():
            reader.close()
    return held, listing_peak


def test_memory_per_file_listed_and_open_small(tmp_path: Path) -> None:
    """Issue 48 (memory flat in the number of files): what one more log costs while the files are
    listed and open, from 64 to 256 logs: the file list (a compact FileList: the name, an offset
    and a rank), the open file (an OS descriptor, 4 bytes) and the reader's per-file arrays, under
    400 bytes; the listing's peak (natural-key sort) under 400 bytes a file. Measured ~275 and ~120;
    main before (52a6a65: a list of (Path, rank), a tuple key per name, a file object per open
    log) ~1,170 and ~840."""
    _listed_and_open(tmp_path / "warm", 8)
    small, large = _listed_and_open(tmp_path / "a", 64), _listed_and_open(tmp_path / "b", 256)
    held, peak = ((b - a) / 192 for a, b in zip(small, large, strict=True))
    assert 0 < held < 400, held
    assert 0 < peak < 400, peak


def test_each_rank_names_its_file_and_a_rank_twice_names_both(tmp_path: Path) -> None:
    """The layout's rank -> file map (made from arrays, each path when asked for) gives each rank its
    log, streamed and from a plain list of results; a seventh log claiming rank 2 of the world
    communicator is an error naming the first log of rank 2 and the repeat, in the streamed tax
    and in the whole-table path."""
    from evtsync.trace.readers.inspector import LogRounds, job_layout

    _world(tmp_path / "ok", 6, 3)
    reader = LogRounds(inspector_files(tmp_path / "ok") or [])
    while reader.active:
        reader.round()
    want = {r: str(tmp_path / "ok" / f"h0-pid{r}.log") for r in range(6)}
    for logs in (reader.results(), list(reader.results())):
        owner = job_layout(logs).owner
        assert dict(owner) == want and list(owner) == list(range(6)) and len(owner) == 6
        assert 6 not in owner
    bad = tmp_path / "twice"
    _world(bad, 6, 3)
    (bad / "h9-pid9.log").write_text("".join(_record("0xw", 2, 6, sn, 100, "h9", 9) for sn in range(3)))
    message = re.escape(f"two Inspector logs are rank 2: {bad}/h0-pid2.log and {bad}/h9-pid9.log (the same process")
    with pytest.raises(TraceError, match=message):
        stream_tax(inspector_files(bad) or [])
    with pytest.raises(TraceError, match=message):
        load_traces(bad, jobs=1)


def test_gzip_log_whose_last_line_fails_a_check_is_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A gzipped log whose last line (no newline after it) is a record that fails a check (another
    rank of the communicator than its earlier lines): the error names the file and line, and the
    gzip reader is closed (it was taken out of the reader's table before the check ran: left open)."""
    from evtsync.trace.readers import inspector

    opened: list[object] = []

    class Recorded(inspector.ByteSource):  # type: ignore[misc, valid-type]
        def __init__(self, path: Path) -> None:
            super().__init__(path)
            opened.append(self)

    monkeypatch.setattr(inspector, "ByteSource", Recorded)
    _world(tmp_path, 4, 5)
    plain = tmp_path / "h0-pid3.log"
    text = plain.read_text() + _record("0xw", 2, 4, 5, 100, "h0", 3).rstrip("\n")
    (tmp_path / "h0-pid3.log.gz").write_bytes(gzip.compress(text.encode()))
    plain.unlink()
    with pytest.raises(TraceError, match=r"h0-pid3\.log\.gz: line 6: communicator 0xw logged with rank 2 of 4"):
        stream_tax(inspector_files(tmp_path) or [])
    assert len(opened) == 1 and opened[0]._raw.closed  # type: ignore[attr-defined]


def test_tables_that_failed_to_build_fail_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tables of a clean job are built at their first read, which consumes the job's batches: a
    build that fails (forced, after the batches were taken) raises again at the next read instead of
    giving tables without the collectives (the hand job has 3: 0xw sn 1, 2 and 0xp sn 1)."""
    _hand_job(tmp_path)
    got = stream_tax(inspector_files(tmp_path) or [])
    assert got.stats["collectives"] == 3
    real, calls = logtax.TaxTables, []

    def failing(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("forced")
        return real(*args, **kwargs)

    monkeypatch.setattr(logtax, "TaxTables", failing)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="forced"):
            got.tables  # noqa: B018
    assert len(calls) == 1  # built once, not again without its batches
    fresh = stream_tax(inspector_files(tmp_path) or []).tables  # the same logs read again: the 3 collectives
    assert len(fresh.collectives) == 3


def test_a_file_listed_twice_is_refused_naming_both_arguments(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """The same folder twice, a folder and a file in it, a symlink in the folder to another of its
    logs, a hard link: refused while listing (streamed and whole-table path alike, one check), the
    error naming the file and both arguments; the CLI exits 2 without a traceback. (Before, the
    streamed tax kept every record to the end, read the job again, then said two logs are rank 0.)"""
    import os

    from evtsync.cli import main
    from evtsync.core.errors import InputError

    folder = tmp_path / "d"
    _world(folder, 3, 4)
    log0 = folder / "h0-pid0.log"
    cases = [([folder, folder], f"{log0} and {log0} are the same file, arguments 1 ({folder}) and 2 ({folder})"),
             ([folder, log0], f"{log0} and {log0} are the same file, arguments 1 ({folder}) and 2 ({log0})"),
             ([log0, str(log0)], f"{log0} and {log0} are the same file, arguments 1 ({log0}) and 2")]
    for args, message in cases:
        with pytest.raises(InputError, match=re.escape(message)):
            inspector_files(args)
        with pytest.raises(InputError, match=re.escape(message)):
            load_traces(args, jobs=1)
    assert main(["tax", "--no-cache", str(folder), str(folder)]) == 2
    err = capsys.readouterr().err
    assert f"{log0} and {log0} are the same file" in err and "Traceback" not in err
    # a symlink in the folder to another of its logs: the same file, both found in one argument
    linked = tmp_path / "linked"
    _world(linked, 3, 4)
    (linked / "h0-pid9.log").symlink_to(linked / "h0-pid1.log")
    message = f"{linked}/h0-pid1.log and {linked}/h0-pid9.log are the same file, both found in argument 1"
    for listing in (inspector_files, lambda p: load_traces(p, jobs=1)):
        with pytest.raises(InputError, match=re.escape(message)):
            listing(linked)
    (linked / "h0-pid9.log").unlink()
    os.link(linked / "h0-pid2.log", tmp_path / "hard.log")  # a hard link named on its own
    with pytest.raises(InputError, match=re.escape(f"{linked}/h0-pid2.log and {tmp_path}/hard.log are the same")):
        inspector_files([linked, tmp_path / "hard.log"])
    # no repeat: the three logs, the hand tax
    assert len(stream_tax(inspector_files(linked) or []).tables.collectives) == 4


def test_kineto_named_files_in_a_folder_are_judged_by_the_listing(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The listing is the one place that says which reader each folder file has: a Kineto-named
    file is sniffed there when the caller counts (inspector_files does), once, not again after.
    A Kineto trace beside Inspector logs: not streamed; an Inspector log named ``.json``: streamed,
    the hand tax (max - min of the times written); a ``.json`` no reader recognises: not streamed."""
    from evtsync.trace import readers
    from evtsync.trace.traceset import list_inputs

    times = _world(tmp_path / "named", 3, 2)
    (tmp_path / "named" / "h0-pid2.log").rename(tmp_path / "named" / "h0-pid2.json")
    heads: list[str] = []
    real = readers.head_bytes
    monkeypatch.setattr(readers, "head_bytes", lambda path, *a: heads.append(Path(path).name) or real(path, *a))
    files = inspector_files(tmp_path / "named")
    assert files is not None and [p.name for p, _ in files] == ["h0-pid0.log", "h0-pid1.log", "h0-pid2.json"]
    assert sorted(heads) == ["h0-pid0.log", "h0-pid1.log", "h0-pid2.json"]  # each once
    got = stream_tax(files).tables.collectives
    assert got["tau_max_us"].tolist() == [float(max(t) - min(t)) for t in times]
    mixed = tmp_path / "mixed"
    _world(mixed, 3, 2)
    (mixed / "rank0.json").write_text(json.dumps({"traceEvents": [], "distributedInfo": {"rank": 0}}))
    assert inspector_files(mixed) is None
    (mixed / "rank0.json").write_text("not a trace\n")
    assert inspector_files(mixed) is None
    # without a count asked for, the listing takes Kineto names without reading them
    heads.clear()
    assert len(list_inputs([mixed])) == 4 and "rank0.json" not in heads


def test_counts_logged_once_and_the_report_made_only_when_asked(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    """The job's counts line (3 logs, 8 collective records by hand: 2 of 0xw each, 1 of 0xp on two
    ranks) is logged once when both the printed report and the tables are made; ``report=False``
    (``evtsync tax --plot``, which reads the tables) makes no report."""
    import logging

    _hand_job(tmp_path)
    files = inspector_files(tmp_path) or []
    with caplog.at_level(logging.INFO, logger="evtsync"):
        got = stream_tax(files, keep_ranks=False)
        assert got.report is not None
        assert len(got.tables.collectives) == 3
    counts = [r.getMessage() for r in caplog.records if "Inspector log(s):" in r.getMessage()]
    assert counts == ["3 Inspector log(s): 8 collective records in 2 communicator(s), 0 p2p records not used"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="evtsync"):
        quiet = stream_tax(files, keep_ranks=False, report=False)
        assert quiet.report is None and len(quiet.tables.collectives) == 3
    assert sum("Inspector log(s):" in r.getMessage() for r in caplog.records) == 1
