"""The block-wise numpy reader (issue 7): same tables as the raw JSON says, bounded memory.

Expected values come from ``json.loads`` of the raw text (the common approach), never from
the reader under test. Block sizes are varied so that blocks cut events, strings, escapes
and event separators anywhere, and both splitting paths (the msgspec-checked fast split
and the structural scan) are exercised.
"""

from __future__ import annotations

import gzip
import json
import tracemalloc
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.core.errors import TraceError
from evtsync.trace.decode import decode_file
from evtsync.trace.readers import read_rank
from tests.conftest import full_data_file

DLRM0 = "dlrm-8rank-v100/worker0_step_12.1694128201545.pt.trace.json.gz"
BLOCKS = (97, 4096, 65_536, 1 << 24)


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        return json.load(fh)["traceEvents"]


def _expected_kernels(events: list[dict]) -> pd.DataFrame:
    rows = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    frame = pd.DataFrame({
        "name": [e["name"] for e in rows],
        "ts_ns": [int(round(e["ts"] * 1000)) for e in rows],
        "dur_ns": [int(round(e["dur"] * 1000)) for e in rows],
        "correlation": [e.get("args", {}).get("correlation", -1) for e in rows],
        "stream": [e.get("args", {}).get("stream", e["tid"]) for e in rows],
    })
    return frame.sort_values("ts_ns", kind="stable").reset_index(drop=True)


@pytest.mark.parametrize("block", BLOCKS)
def test_kernels_match_raw_json_at_every_block_size(traces_dir: Path, block: int) -> None:
    path = traces_dir / DLRM0
    events = _events(path)
    expected = _expected_kernels(events)
    from evtsync.trace.tables import build_rank_tables

    decoded = decode_file(path, block_size=block)
    assert decoded.category_counts == dict(Counter(e.get("cat") or "(none)" for e in events))
    tables = build_rank_tables(decoded)
    got = tables.kernels[["name", "ts_ns", "dur_ns", "correlation", "stream"]].copy()
    got["name"] = got["name"].astype(str)
    pd.testing.assert_frame_equal(got, expected, check_dtype=False)
    assert tables.info["n_events"] == len(events)
    cpu = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    assert len(tables.cpu_ops[tables.cpu_ops["cat"] == "cpu_op"]) == len(cpu)
    ext = sorted(e["args"]["External id"] for e in cpu if "External id" in e.get("args", {}))
    ops = tables.cpu_ops[tables.cpu_ops["cat"] == "cpu_op"]
    assert sorted(ops.loc[ops["external_id"] >= 0, "external_id"]) == ext


def _write(path: Path, events: list[dict], header: dict | None = None, indent: int | None = None) -> Path:
    doc = {**(header or {"distributedInfo": {"rank": 0, "world_size": 1}}), "traceEvents": events}
    path.write_text(json.dumps(doc, indent=indent))
    return path


def test_separators_inside_strings_and_nested_objects(tmp_path: Path) -> None:
    """``}, {`` inside names and arrays of objects inside args: every cut is still exact."""
    events = []
    for i in range(300):
        events.append({"ph": "X", "cat": "kernel", "name": ["k}, {x", 'q\\"}, {"', "plain", "}\n,\n{"][i % 4],
                       "pid": 0, "tid": 7, "ts": 1000 + i, "dur": 3,
                       "args": {"stream": 7, "device": 0, "correlation": i,
                                "shapes": [{"a": 1}, {"b": [{"c": 2}]}]}})
    for indent in (None, 2):
        path = _write(tmp_path / f"t{indent}.json", events, indent=indent)
        expected = [e["name"] for e in json.loads(path.read_text())["traceEvents"]]
        for block in (31, 257, 4096, 1 << 20):
            decoded = decode_file(path, block_size=block)
            assert decoded.n_events == len(events)
            assert list(decoded.columns["gpu"]["name"]) == expected
            assert decoded.columns["gpu"]["correlation"].tolist() == list(range(300))


def test_fractional_times_in_a_later_block_make_the_column_float(tmp_path: Path) -> None:
    """Integer µs in the first blocks and fractional ones later: ns = round(µs * 1000)."""
    events = [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 5}", "pid": 1, "tid": 2,
               "ts": 5_000_000 + 10 * i + (0.25 if i >= 400 else 0), "dur": 7} for i in range(500)]
    path = _write(tmp_path / "mixed.json", events)
    cpu = read_rank(path).cpu_ops
    expected = np.rint(np.array([e["ts"] for e in events]) * 1000.0).astype(np.int64)
    assert cpu["ts_ns"].tolist() == expected.tolist()
    decoded = decode_file(path, block_size=2048)
    assert decoded.columns["cpu"]["ts"].dtype == np.float64


def test_loose_argument_types_become_strings_and_missing_values(tmp_path: Path) -> None:
    """A PG name written as an int in one event and a string in another; ids as strings."""
    def kernel(i: int, pg: object, ext: object) -> dict:
        return {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                "pid": 0, "tid": 7, "ts": 100 * i, "dur": 5,
                "args": {"stream": 7, "device": 0, "correlation": i, "Process Group Name": pg,
                         "External id": ext}}

    events = [kernel(0, 3, "17"), kernel(1, "3", 18), kernel(2, None, "x"), kernel(3, "tp", None)]
    path = _write(tmp_path / "loose.json", events)
    for block in (64, 1 << 20):
        decoded = decode_file(path, block_size=block)
        pg = [None if pd.isna(v) else v for v in decoded.columns["gpu"]["pg_name"]]
        assert pg == ["3", "3", None, "tp"]
        assert decoded.columns["gpu"]["external_id"].tolist() == [17, 18, -1, -1]
    assert read_rank(path).kernels["pg_name"].cat.categories.tolist() == ["3", "tp"]


def test_events_without_numeric_times_are_counted_not_kept(tmp_path: Path) -> None:
    good = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2,
            "ts": 10, "dur": 2, "args": {"correlation": 5}}
    bad = {**good, "ts": None}
    path = _write(tmp_path / "bad_ts.json", [good, bad, good])
    tables = read_rank(path)
    assert len(tables.runtime) == 2
    assert tables.skipped == {"cuda_runtime event without numeric ts/dur": 1}


def test_cut_file_error_offset_and_salvage_at_small_blocks(tmp_path: Path, traces_dir: Path) -> None:
    data = gzip.decompress((traces_dir / DLRM0).read_bytes())
    cut = data[: len(data) * 2 // 3]
    path = tmp_path / "cut.json"
    path.write_bytes(cut)
    last_end = cut.rstrip().rfind(b"}")  # not exact: the last complete event ends at or before it
    n_complete = len(json.loads(cut[: cut.rfind(b"},") + 1] + b"]}")["traceEvents"])
    for block in (4096, 1 << 24):
        with pytest.raises(TraceError, match=r"cut mid-event.*decompressed byte (\d+)") as err:
            decode_file(path, block_size=block)
        offset = int(str(err.value).split("decompressed byte ")[1].split()[0])
        assert offset <= last_end + 1
        assert cut[offset - 1: offset] == b"}"
        salvaged = decode_file(path, salvage=True, block_size=block)
        assert salvaged.n_events == n_complete
        assert salvaged.truncated_at == offset
        assert salvaged.dropped_bytes == len(cut) - offset


def test_peak_memory_is_a_fraction_of_the_file(tmp_path: Path, traces_dir: Path) -> None:
    """Reading a ~20 MB trace in 1 MB blocks: traced peak well below the file's size."""
    data = gzip.decompress((full_data_file("traces/single-rank/hta_rank1of2.json.gz")).read_bytes())
    path = tmp_path / "big.json"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        decoded = decode_file(path, block_size=1 << 20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoded.n_events > 100_000
    assert peak < 0.5 * len(data), f"peak {peak / 1e6:.1f} MB for a {len(data) / 1e6:.1f} MB file"


def test_args_null_and_absent_args_give_missing_values(tmp_path: Path) -> None:
    base = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 2, "dur": 2}
    events = [{**base, "ts": 10, "args": {"correlation": 5, "External id": 9}},
              {**base, "ts": 20, "args": None}, {**base, "ts": 30},
              {**base, "ts": 40, "args": {"correlation": 6}}]
    runtime = read_rank(_write(tmp_path / "null_args.json", events)).runtime
    assert runtime["correlation"].tolist() == [5, -1, -1, 6]
    assert runtime["external_id"].tolist() == [9, -1, -1, -1]


def test_events_of_every_phase_and_of_none_are_counted_and_only_complete_ones_kept(tmp_path: Path) -> None:
    """Phase-typed decoding skips flows/instants/metadata; blocks with an event of no or an
    unknown phase fall back to the permissive decoder: same counts and rows either way."""
    events: list[dict] = []
    phases = ["X", "s", "f", "i", "M", "C", "X", "b", "e", "X"]
    for i in range(600):
        ph = phases[i % len(phases)]
        event = {"ph": ph, "cat": ["cpu_op", "ac2g", "cpu_instant_event", None][i % 4],
                 "name": f"ev{i}", "pid": 1, "tid": 2, "ts": 1000 + i, "dur": 2,
                 "args": {"External id": i, "labels": [{"x": 1}]}}
        if i == 450:
            del event["ph"]          # no phase: kept out of every table, still counted
        if i == 520:
            event["ph"] = "Z"        # a phase the format does not define
        events.append(event)
    path = _write(tmp_path / "phases.json", events)
    expected_ops = [e["args"]["External id"] for e in events
                    if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    for block in (97, 4096, 1 << 20):
        decoded = decode_file(path, block_size=block)
        assert decoded.n_events == len(events)
        assert decoded.category_counts == dict(Counter(e.get("cat") or "(none)" for e in events))
        assert decoded.columns["cpu"]["external_id"].tolist() == expected_ops


def test_only_complete_events_are_held_to_the_schema_wherever_the_blocks_fall(tmp_path: Path) -> None:
    """An instant event with list ``args`` decodes whether or not a phase-less event shares
    its block; a complete event with a list ``args`` is an error at every block size."""
    base = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 10 * i, "dur": 5}
            for i in range(200)]
    odd = {"ph": "i", "cat": "cpu_instant_event", "name": "marker", "ts": 5, "s": "t", "args": [1, 2]}
    no_phase = {"cat": "python_function", "name": "no phase", "ts": 7, "dur": 1}
    for name, events in (("far", base[:100] + [odd] + base[100:] + [no_phase]),
                         ("near", base[:100] + [odd, no_phase] + base[100:])):
        path = _write(tmp_path / f"{name}.json", events)
        for block in (256, 4096, 1 << 20):
            decoded = decode_file(path, block_size=block)
            assert decoded.n_events == 202
            assert len(decoded.columns["gpu"]["name"]) == 200
    bad = base[:100] + [{**base[0], "args": [1, 2]}, no_phase] + base[100:]
    path = _write(tmp_path / "bad.json", bad)
    for block in (256, 1 << 20):
        with pytest.raises(TraceError, match="is not a Kineto event"):
            decode_file(path, block_size=block)


@pytest.mark.parametrize("decoder", ["msgspec", "scanner"])
def test_decoding_while_something_holds_a_view_of_the_block(traces_dir: Path, monkeypatch, decoder: str) -> None:
    """Dask's worker profiler keeps the frames of running tasks alive from another thread
    (``sys._current_frames``), so the decoder's view of a block can outlive the call that
    used it, and resizing the pending buffer raised BufferError (seen once in a Dask run of
    the full suite). Here every block's view is kept alive on purpose: same columns, with
    the msgspec path and with the compiled scanner."""
    import evtsync.trace.decode as decode

    path = traces_dir / "dlrm-8rank-v100/worker0_step_12.1694128201545.pt.trace.json.gz"
    expected = decode_file(path, block_size=1 << 14)
    held = []
    if decoder == "msgspec":
        monkeypatch.setenv(decode.DECODER_ENV, "msgspec")
        original = decode._decode_events

        def holding(data):  # noqa: ANN001, ANN202 - a stand-in with the same signature
            held.append(data)  # what a profiler's reference to the frame does
            return original(data)

        monkeypatch.setattr(decode, "_decode_events", holding)
    else:
        monkeypatch.setenv(decode.DECODER_ENV, "scanner")
        original_scan = decode._scan_route

        def holding(scanner, block, decoder):  # noqa: ANN001, ANN202 - same signature
            held.append(block)
            return original_scan(scanner, block, decoder)

        monkeypatch.setattr(decode, "_scan_route", holding)
    decoded = decode_file(path, block_size=1 << 14)
    assert len(held) > 1
    for table, cols in expected.columns.items():
        for name, values in cols.items():
            assert pd.Series(np.asarray(decoded.columns[table][name])).equals(pd.Series(np.asarray(values))), \
                (table, name)


def test_a_set_of_ranks_with_different_names_concatenates_to_every_file_s_rows(tmp_path: Path,
                                                                               traces_dir: Path) -> None:
    """The set's tables are the files' rows one after the other, whatever categories each file
    has: ranks whose kernel names, PG names and argument values differ (one rank with no
    NCCL kernel at all, whose string arguments are all missing) against a plain json reading."""
    src = _events(full_data_file("traces/single-rank/hta_nccl_pg_fields_rank0of2.json.gz"))  # kernels with PG names
    files = []
    for rank in range(3):
        events = []
        for e in src:
            e = json.loads(json.dumps(e))
            if e.get("cat") == "kernel" and rank == 1:
                e["name"] = f"rank1_only_{e['name'][:20]}"  # no NCCL kernel on this rank
            if rank == 2 and isinstance(e.get("args"), dict) and "Process Group Name" in e["args"]:
                e["args"]["Process Group Name"] = "pg_of_rank_2"
            events.append(e)
        path = tmp_path / f"rank{rank}.json"
        path.write_text(json.dumps({"distributedInfo": {"rank": rank, "world_size": 3}, "traceEvents": events}))
        files.append(path)
    from evtsync.trace.traceset import load_traces

    traces = load_traces(tmp_path, jobs=1, rank_from="file")
    kernels = traces.kernels
    assert isinstance(kernels["name"].dtype, pd.CategoricalDtype)
    for rank, path in enumerate(files):
        expected = _expected_kernels(_events(path))
        got = kernels[kernels["rank"] == rank].reset_index(drop=True)
        assert got["name"].astype(str).tolist() == expected["name"].tolist()
        assert got["ts_ns"].tolist() == expected["ts_ns"].tolist()
        raw = [e for e in _events(path) if e.get("ph") == "X" and e.get("cat") == "kernel"]
        pg_names = sorted({str(e["args"]["Process Group Name"]) for e in raw
                           if "Process Group Name" in e.get("args", {})})
        assert sorted(got["pg_name"].dropna().astype(str).unique()) == pg_names
        assert pg_names == (["pg_of_rank_2"] if rank == 2 else ["0"])  # the set differs by rank
    assert not kernels.loc[kernels["rank"] == 1, "is_nccl"].any()
    assert kernels.loc[kernels["rank"] == 1, "collective"].isna().all()


def test_arguments_few_events_carry_on_different_rows_match_the_raw_json(tmp_path: Path) -> None:
    """Arguments present on a few events each, on different rows per argument (the reader
    converts such columns on the rows that hold them only), one of them with loose types,
    next to a dense one: every value lands on its own row, against a plain json reading."""
    events = []
    for i in range(600):
        args: dict = {"External id": i}
        if i % 37 == 0:
            args["Process Group Name"] = f"pg{i % 3}"
        if i % 53 == 3:
            args["In msg nelems"] = 1000 + i
        if i % 41 == 5:
            args["dtype"] = 7 if i == 5 else "Float"  # an int once: made a string
        if i % 11 == 0:
            args["Sequence number"] = str(i) if i == 22 else i  # a numeric string once
        if i % 2:
            args["Group size"] = 8  # dense: half the rows
        events.append({"ph": "X", "cat": "cpu_op", "name": f"op{i % 5}", "pid": 1, "tid": 1,
                       "ts": 10 * i, "dur": 3, "args": args})
    path = _write(tmp_path / "sparse.json", events)
    raw = [e["args"] for e in _events(path)]
    from evtsync.trace.tables import build_rank_tables

    for block in (997, 1 << 20):
        ops = build_rank_tables(decode_file(path, block_size=block)).cpu_ops
        assert ops["pg_name"].astype(object).where(ops["pg_name"].notna(), None).tolist() == \
            [a.get("Process Group Name") for a in raw]
        assert ops["in_nelems"].tolist() == [a.get("In msg nelems", -1) for a in raw]
        assert ops["dtype"].astype(object).where(ops["dtype"].notna(), None).tolist() == \
            [None if "dtype" not in a else str(a["dtype"]) for a in raw]
        assert ops["seq"].tolist() == [int(a.get("Sequence number", -1)) for a in raw]
        assert ops["group_size"].tolist() == [a.get("Group size", -1) for a in raw]
        assert ops["external_id"].tolist() == list(range(600))
