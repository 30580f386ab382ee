"""The compiled line-template scanner of NCCL Inspector logs (issue 48: evtsync.trace.scan.
scan_template_lines, used by LogRounds): what it reads equals what msgspec reads, and the values
written by the test; any line outside its strict grammar sends the slice to msgspec, which gives
the same result or names the same bad line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.core.errors import TraceError
from evtsync.sync.logtax import stream_tax
from evtsync.trace import decode
from evtsync.trace.readers.inspector import LogRounds, _line_template

N_RANKS, N_SN = 4, 60


@pytest.fixture(autouse=True)
def _own_scanner_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """The scanner these tests load stays theirs: a later test in this process starts without it
    (once loaded, a process uses it for every later file, whatever its size)."""
    monkeypatch.setattr(decode, "_scanner_state", {})


def _record(rank: int, sn: int, exec_us: float, *, shape: str = "plain") -> dict:
    """One record as the plugin writes it (v4.0, non-verbose); ``shape`` varies the layout."""
    header = {"id": "0x00000000c0ffee", "comm_name": "world", "rank": rank, "n_ranks": N_RANKS, "nnodes": 1}
    meta = {"inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism": "profiler_plugin",
            "dump_timestamp_us": 1_000_000 + sn * 10, "hostname": f"node-{rank}", "pid": 100 + rank}
    perf = {"coll": "AllReduce" if sn % 3 else "AllGather", "coll_sn": sn, "coll_msg_size_bytes": 1 << 20,
            "coll_exec_time_us": exec_us, "coll_timing_source": "kernel_gpu", "coll_algobw_gbs": 12.5,
            "coll_busbw_gbs": 1.5e1}
    if shape == "no-metadata":
        return {"header": header, "coll_perf": perf}
    if shape == "few-fields":  # only the required fields: size, timing source and metadata absent
        return {"header": {k: header[k] for k in ("id", "rank", "n_ranks")},
                "coll_perf": {k: perf[k] for k in ("coll", "coll_sn", "coll_exec_time_us")}}
    if shape == "reordered":  # another key order and extra (nested) keys, on every line
        return {"coll_perf": dict(reversed(perf.items())), "extra": {"a": None, "b": True, "c": "x"},
                "metadata": meta, "header": dict(reversed(header.items()))}
    return {"header": header, "metadata": meta, "coll_perf": perf}


def _times(shape: str) -> np.ndarray:
    """The execution times written (µs): integers, and fractions exact in binary and not."""
    rng = np.random.default_rng(7)
    us = rng.integers(50, 5000, size=(N_SN, N_RANKS)).astype(float)
    if shape != "integers":
        us[::2] += rng.choice([0.5, 0.25, 0.1, 0.123], size=(N_SN // 2 + N_SN % 2, N_RANKS))
    return us


def _write(folder: Path, shape: str = "plain", edit: dict | None = None) -> tuple[Path, np.ndarray]:
    """A job of N_RANKS logs; ``edit``: {(rank, line index): replacement text} for damaged lines."""
    folder.mkdir()
    us = _times(shape)
    for r in range(N_RANKS):
        lines = [json.dumps(_record(r, sn, float(us[sn, r]) if us[sn, r] % 1 else int(us[sn, r]), shape=shape),
                            separators=(",", ":")) for sn in range(N_SN)]
        for (rank, at), text in (edit or {}).items():
            if rank == r:
                lines[at] = text
        (folder / f"node-{r}-pid{100 + r}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder, us


def _read(folder: Path, scan: bool, monkeypatch: pytest.MonkeyPatch, **kw) -> tuple[object, dict]:
    """Every round's columns of LogRounds (with the scanner, or msgspec only), its file results
    and the slice counts; or the error."""
    monkeypatch.setenv(decode.DECODER_ENV, "scanner" if scan else "msgspec")
    files = [(p, None) for p in sorted(folder.glob("*.log"))]
    try:
        reader = LogRounds(files, block_bytes=kw.get("block_bytes", 4096), salvage=kw.get("salvage", False))
        parts = []
        while reader.active:
            parts.append(reader.round())
        cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        infos = [(r.info, r.skipped, r.comms) for r in reader.results()]
        out: object = (cols, infos, list(reader.comm_code), list(reader.names), list(reader.sources))
    except TraceError as exc:
        return ("error", str(exc)), {}
    return out, dict(reader.scanned)


def _same(a: object, b: object) -> None:
    if isinstance(b, tuple) and b and b[0] == "error":
        assert a == b
        return
    assert isinstance(a, tuple) and isinstance(b, tuple)
    cols_a, cols_b = a[0], b[0]
    assert cols_a.keys() == cols_b.keys()
    for k in cols_a:
        assert cols_a[k].dtype == cols_b[k].dtype and np.array_equal(cols_a[k], cols_b[k]), k
    assert a[1:] == b[1:]


@pytest.mark.parametrize("shape", ["plain", "integers", "no-metadata", "few-fields", "reordered"])
def test_scanner_reads_what_msgspec_reads_and_what_was_written(shape: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    folder, us = _write(tmp_path / "job", shape)
    fast, counts = _read(folder, True, monkeypatch)
    slow, slow_counts = _read(folder, False, monkeypatch)
    assert counts["scanner"] > 0 and counts["msgspec"] == counts["lines alone"] == 0, counts  # all scanned
    assert slow_counts["scanner"] == 0
    _same(fast, slow)
    cols = fast[0]  # type: ignore[index]
    # the values the test wrote: each record's execution time in ns, rounded as the reader does
    expect = np.rint(us[cols["sn"], cols["file"]] * 1000.0).astype(np.int64)
    assert np.array_equal(cols["exec_ns"], expect)
    assert sorted(zip(cols["file"].tolist(), cols["sn"].tolist(), strict=True)) == [(r, s) for r in range(N_RANKS)
                                                                       for s in range(N_SN)]
    if shape != "few-fields":
        assert set(cols["msg_bytes"].tolist()) == {1 << 20}
    else:
        assert set(cols["msg_bytes"].tolist()) == {-1}  # absent: MISSING, as msgspec's default


def test_template_of_other_lines_is_none() -> None:
    plain = _record(0, 1, 10)
    assert _line_template(json.dumps(plain, separators=(",", ":")).encode()) is not None
    p2p = {"header": plain["header"], "metadata": plain["metadata"], "p2p_perf": {"p2p": "Send"}}
    verbose = json.loads(json.dumps(plain))
    verbose["coll_perf"]["event_trace_ts"] = {"kernel_events": [{"kernel_start_ts": 1}]}
    wrong = json.loads(json.dumps(plain))
    wrong["header"]["rank"] = "0"
    for other in (p2p, verbose, wrong, {**plain, "metadata": None}, [plain]):
        assert _line_template(json.dumps(other).encode()) is None


GOOD = json.dumps(_record(1, 10, 400), separators=(",", ":"))

#: Lines outside the scanner's grammar (the first: as json.dumps writes it, with spaces), each
#: replacing rank 1's line 10; the slice goes to msgspec, which reads it or names it.
DECLINED = {
    "spaces": json.dumps(_record(1, 10, 400)),
    "escaped host": GOOD.replace('"node-1"', '"node\\u002d1"'),
    "non-ASCII name": GOOD.replace('"world"', '"w\u00f6rld"'),
    "key order": json.dumps({"metadata": _record(1, 10, 400)["metadata"], "header": _record(1, 10, 400)["header"],
                             "coll_perf": _record(1, 10, 400)["coll_perf"]}, separators=(",", ":")),
    "exponent": GOOD.replace('"coll_exec_time_us":400', '"coll_exec_time_us":4.0e2'),
    "17 digits": GOOD.replace('"coll_exec_time_us":400', '"coll_exec_time_us":400.00000000000001'),
    "19-digit pid": GOOD.replace('"pid":101', '"pid":1000000000000000101'),
    "rank as float": GOOD.replace('"rank":1', '"rank":1.0'),
    "rank beyond 32 bits": GOOD.replace('"rank":1', '"rank":4294967297'),
    "leading zero": GOOD.replace('"coll_sn":10', '"coll_sn":010'),
    "p2p": json.dumps({"header": _record(1, 10, 400)["header"], "p2p_perf": {"p2p": "Send", "p2p_sn": 3}},
                      separators=(",", ":")),
    "blank": "",
    "crlf": GOOD + "\r",
    "duplicate key": GOOD.replace('"nnodes":1', '"nnodes":1,"nnodes":1'),
    "not JSON": GOOD[:-5],
}


#: The damaged lines that are errors (without --salvage), and a word of the message.
ERRORS = {"rank beyond 32 bits": "line 11", "rank as float": "line 11", "not JSON": "line 11",
          "leading zero": "line 11", "19-digit pid": "records of 2 processes"}


@pytest.mark.parametrize("name", sorted(DECLINED))
def test_declined_lines_read_by_msgspec(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _ = _write(tmp_path / "job", edit={(1, 10): DECLINED[name]})
    fast, counts = _read(folder, True, monkeypatch)
    slow, _ = _read(folder, False, monkeypatch)
    _same(fast, slow)
    if name not in ERRORS:
        assert not (isinstance(fast, tuple) and fast[0] == "error"), fast
    else:
        assert fast[0] == "error" and ERRORS[name] in fast[1], fast  # type: ignore[index]
    # the line read alone by msgspec, or (a line msgspec cannot read alone, blank lines) the slice
    assert counts.get("lines alone", 0) == 1 or counts.get("msgspec", 0) >= 1 or fast[0] == "error"  # type: ignore[index]


def test_declined_with_salvage_counts_the_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, _ = _write(tmp_path / "job", edit={(1, 10): DECLINED["not JSON"]})
    fast, _ = _read(folder, True, monkeypatch, salvage=True)
    slow, _ = _read(folder, False, monkeypatch, salvage=True)
    _same(fast, slow)
    assert fast[1][1][1] == {"malformed line": 1}  # type: ignore[index]


def test_stream_tax_tables_equal_with_and_without_scanner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, us = _write(tmp_path / "job", "plain")
    files = [(p, None) for p in sorted(folder.glob("*.log"))]
    monkeypatch.setenv(decode.DECODER_ENV, "scanner")
    fast = stream_tax(files, block_bytes=2048)
    monkeypatch.setenv(decode.DECODER_ENV, "msgspec")
    slow = stream_tax(files, block_bytes=2048)
    pd.testing.assert_frame_equal(fast.tables.collectives, slow.tables.collectives)
    pd.testing.assert_frame_equal(fast.tables.ranks, slow.tables.ranks)
    pd.testing.assert_frame_equal(fast.traces.ranks, slow.traces.ranks)
    # tau_max = max - min of the times written, per collective (the hand truth)
    coll = fast.tables.collectives.sort_values("index")
    truth = (np.rint(us * 1000).max(axis=1) - np.rint(us * 1000).min(axis=1)) / 1000.0
    assert np.allclose(coll["tau_max_us"].to_numpy(), truth, rtol=0, atol=1e-9)


def test_refused_scanner_module_means_msgspec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """A compiled module in a folder others could write is not loaded (docs/security.md): the logs
    are decoded by msgspec, the same columns, the reason logged."""
    from evtsync.trace import scan

    folder, _ = _write(tmp_path / "job")
    slow, _ = _read(folder, False, monkeypatch)
    monkeypatch.setattr(decode, "SCANNER_MIN_BYTES", 0)  # these small logs would not load it
    monkeypatch.setattr(scan, "_refused", lambda path: f"{path}: planted, a folder others can write")
    monkeypatch.setenv(decode.DECODER_ENV, "auto")
    files = [(p, None) for p in sorted(folder.glob("*.log"))]
    with caplog.at_level("WARNING"):
        reader = LogRounds(files, block_bytes=4096)
    assert reader.scanner is None and "planted, a folder others can write" in caplog.text
    parts = []
    while reader.active:
        parts.append(reader.round())
    cols = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    assert reader.scanned["scanner"] == 0 and reader.scanned["msgspec"] > 0
    for k, col in cols.items():
        assert np.array_equal(col, slow[0][k]), k  # type: ignore[index]


def test_mixed_lines_read_alone_the_rest_scanned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Short p2p records on all but the first line of ranks 2 and 3 (more lines than the
    template's room, which grows), verbose and reordered records on rank 1: each read alone by
    msgspec, the other lines scanned; the columns, counts and kernel spans equal the msgspec path's."""
    edit = {(r, at): json.dumps({"header": {"id": "0xp2p", "rank": r - 2, "n_ranks": 2}, "p2p_perf": {"p2p": "Send"}},
                                separators=(",", ":")) for r in (2, 3) for at in range(1, N_SN)}
    verbose = _record(1, 7, 400)
    verbose["coll_perf"]["event_trace_ts"] = {"kernel_events": [{"kernel_start_ts": 5, "kernel_stop_ts": 9}]}
    edit[(1, 7)] = json.dumps(verbose, separators=(",", ":"))
    edit[(1, 8)] = json.dumps(_record(1, 8, 400, shape="reordered"), separators=(",", ":"))
    folder, _ = _write(tmp_path / "job", edit=edit)
    fast, counts = _read(folder, True, monkeypatch, block_bytes=1 << 20)  # one slice: every file at once
    slow, _ = _read(folder, False, monkeypatch, block_bytes=1 << 20)
    _same(fast, slow)
    assert counts["msgspec"] == 0 and counts["lines alone"] == len(edit), counts
    cols, infos = fast[0], fast[1]  # type: ignore[index]
    assert infos[2][0]["n_p2p_records"] == N_SN - 1 and infos[1][0]["n_verbose_records"] == 1
    at = np.flatnonzero((cols["file"] == 1) & (cols["sn"] == 7))
    assert cols["kernel_start_us"][at].tolist() == [5] and cols["kernel_stop_us"][at].tolist() == [9]
