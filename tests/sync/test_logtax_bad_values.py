"""Impossible values and undecodable lines on the one-decode-per-round path (LogRounds, through
``stream_tax`` and ``evtsync tax FOLDER``) and on the per-file path (``read_log``): a duration of
1e18 µs (once wrapped to a "negative" int64), JSON nested 200,000 deep (once a RecursionError
traceback). Each is one error naming the file and the line, counted by hand in the test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evtsync.cli import main
from evtsync.core.errors import TraceError
from evtsync.sync.logtax import inspector_files, stream_tax
from evtsync.trace.readers.inspector import read_log


def _record(local: int, n: int, sn: int, us: float, pid: int) -> str:
    return json.dumps({"header": {"id": "0xw", "comm_name": "pg", "rank": local, "n_ranks": n, "nnodes": 1},
                       "metadata": {"inspector_output_format_version": "v4.0", "dump_timestamp_us": 1000 + sn,
                                    "hostname": "h", "pid": pid},
                       "coll_perf": {"coll": "AllReduce", "coll_sn": sn, "coll_msg_size_bytes": 1024,
                                     "coll_exec_time_us": us, "coll_timing_source": "kernel_gpu"}}) + "\n"


def _world(folder: Path, n_files: int, n_sn: int) -> list[Path]:
    """``n_files`` logs of one world communicator, ``n_sn`` AllReduces each (line k: sn k - 1)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for pid in range(n_files):
        path = folder / f"h-pid{pid}.log"
        path.write_text("".join(_record(pid, n_files, sn, 100 + pid + sn, pid) for sn in range(n_sn)))
        paths.append(path)
    return paths


def _set_line(path: Path, line: int, text: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[line - 1] = text
    path.write_text("".join(lines))


def _files(folder: Path) -> list:
    files = inspector_files(folder)
    assert files is not None
    return files


# block_bytes: None (every file whole in one round), 600 (a record or two per file and round:
# line 3 is read in a later round than lines 1-2)
@pytest.mark.parametrize("block_bytes", [None, 600])
@pytest.mark.parametrize(("value", "word"), [("1e18", "too large"), ("1e+18", "too large"), ("-5", "negative"),
                                             ("1000000000000000000", "too large")])
def test_an_impossible_duration_names_its_file_and_line(tmp_path: Path, block_bytes: int | None, value: str,
                                                        word: str) -> None:
    paths = _world(tmp_path, 6, 10)
    bad = paths[4]  # not the round's first file: the record is mapped back through the other files' lines
    _set_line(bad, 3, _record(4, 6, 2, 7.0, 4).replace('"coll_exec_time_us": 7.0', f'"coll_exec_time_us": {value}'))
    with pytest.raises(TraceError) as caught:
        stream_tax(_files(tmp_path), block_bytes=block_bytes)
    message = str(caught.value)
    assert message.startswith(f"{bad}: line 3: coll_exec_time_us ") and word in message, message
    assert "negative" not in message or word == "negative"


def test_a_bad_duration_in_a_round_that_falls_back_file_by_file(tmp_path: Path) -> None:
    """Another file's malformed line (salvaged) sends the round through the per-file decode:
    the 1e18 is still named by its own file and line."""
    paths = _world(tmp_path, 5, 8)
    _set_line(paths[1], 2, '{"header": oops}\n')
    _set_line(paths[3], 3, _record(3, 5, 2, 1e18, 3))
    with pytest.raises(TraceError, match=rf"^{paths[3]}: line 3: coll_exec_time_us 1e\+18 is too large"):
        stream_tax(_files(tmp_path), salvage=True)


def test_a_bad_duration_on_the_last_line_without_newline(tmp_path: Path) -> None:
    paths = _world(tmp_path, 4, 3)
    paths[2].write_text(paths[2].read_text()[:-1].rsplit("\n", 1)[0] + "\n" + _record(2, 4, 2, 1e18, 2).rstrip("\n"))
    with pytest.raises(TraceError, match=rf"^{paths[2]}: line 3: coll_exec_time_us 1e\+18 is too large"):
        stream_tax(_files(tmp_path))
    with pytest.raises(TraceError, match=rf"^{paths[2]}: line 3: coll_exec_time_us 1e\+18 is too large"):
        read_log(paths[2])


def test_cli_tax_on_a_folder_names_file_and_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _world(tmp_path / "logs", 6, 10)
    _set_line(paths[5], 3, _record(5, 6, 2, 1e18, 5))
    capsys.readouterr()
    assert main(["-q", "tax", str(tmp_path / "logs"), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.startswith("evtsync: error:")]
    assert len(lines) == 1 and f"{paths[5]}: line 3: " in lines[0] and "too large" in lines[0], err


def _deep(pid: int, n: int, sn: int) -> str:
    return _record(pid, n, sn, 100, pid).replace('"coll_perf":', '"x": ' + "[" * 200_000 + "]" * 200_000
                                                   + ', "coll_perf":')


@pytest.mark.parametrize("block_bytes", [None, 600])
def test_json_nested_200000_deep_names_its_file_and_line(tmp_path: Path, block_bytes: int | None) -> None:
    paths = _world(tmp_path, 5, 6)
    _set_line(paths[2], 2, _deep(2, 5, 1))
    with pytest.raises(TraceError, match=rf"^{paths[2]}: line 2: not an NCCL Inspector record \(JSON nested too "
                                         r"deeply to decode\)"):
        stream_tax(_files(tmp_path), block_bytes=block_bytes)
    # with --salvage: the line is counted, not read (that rank then lacks sn 1: a partial collective)
    got = stream_tax(_files(tmp_path), block_bytes=block_bytes, salvage=True, allow_partial=True)
    skipped = got.traces.skipped.set_index(["rank", "reason"])["count"].to_dict()
    assert skipped == {(2, "malformed line"): 1}
    assert got.traces.ranks.set_index("rank")["n_collective_records"].to_dict() == {0: 6, 1: 6, 2: 5, 3: 6, 4: 6}


def test_read_log_names_the_line_after_blank_and_salvaged_lines(tmp_path: Path) -> None:
    """The per-file path: a blank line and a salvaged malformed line before the 1e18 keep the line
    numbers of the file (records 1, blank 2, malformed 3, record 4, bad 5)."""
    path = tmp_path / "h-pid0.log"
    path.write_text(_record(0, 1, 0, 5, 0) + "\n" + '{"header": oops}\n' + _record(0, 1, 1, 5, 0)
                    + _record(0, 1, 2, 1e18, 0) + _record(0, 1, 3, 5, 0))
    with pytest.raises(TraceError, match=rf"^{path}: line 5: coll_exec_time_us 1e\+18 is too large"):
        read_log(path, salvage=True)
    path.write_text(_record(0, 1, 0, 5, 0) + "\n" + _record(0, 1, 1, 5, 0) + _record(0, 1, 2, -1, 0))
    with pytest.raises(TraceError, match=rf"^{path}: line 4: coll_exec_time_us -1 is negative"):
        read_log(path)
    path.write_text(_record(0, 1, 0, 5, 0) + _deep(0, 1, 1))
    with pytest.raises(TraceError, match=rf"^{path}: line 2: .*JSON nested too deeply to decode"):
        read_log(path)
