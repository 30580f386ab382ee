"""The peer of each c10d::send / c10d::recv_ (evtsync/trace/p2p.py, issue 46): read from the raw
JSON with gzip + json here and compared; a tiny hand-written file for the missing-peer case."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from evtsync.trace.p2p import read_p2p_peers

PP3 = Path(__file__).resolve().parents[1] / "data" / "gloo-pipeline" / "pp3"


def test_kineto_p2p_peers_match_the_raw_concrete_inputs():
    for rank in range(3):
        path = PP3 / f"rank-{rank}.json.gz"
        with gzip.open(path, "rt") as fh:
            events = json.load(fh)["traceEvents"]
        want = sorted((e["args"]["External id"], e["name"], int(e["args"]["Concrete Inputs"][2]))
                      for e in events if e.get("name") in ("c10d::send", "c10d::recv_"))
        got, missing = read_p2p_peers(path)
        assert sorted(got.itertuples(index=False, name=None)) == want
        assert missing == {}
    # hand count (tools/record_gloo_pipeline.py, 4 recorded steps): rank 1 sends 4 to 2 and 4 to 0
    got, _ = read_p2p_peers(PP3 / "rank-1.json.gz")
    sends = got[got["name"] == "c10d::send"]["peer"].value_counts().to_dict()
    assert sends == {2: 4, 0: 4}


def test_kineto_p2p_op_without_a_peer_is_counted_not_dropped(tmp_path):
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "c10d::send", "pid": 1, "tid": 1, "ts": 10, "dur": 5,
         "args": {"External id": 7, "Concrete Inputs": ["", "", "3", "0"]}},
        {"ph": "X", "cat": "cpu_op", "name": "c10d::recv_", "pid": 1, "tid": 1, "ts": 20, "dur": 5,
         "args": {"External id": 8}},  # recorded without record_shapes: no Concrete Inputs
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 30, "dur": 5,
         "args": {"External id": 9, "Concrete Inputs": ["", "", "5"]}},
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events}))
    got, missing = read_p2p_peers(path)
    assert got.values.tolist() == [[7, "c10d::send", 3]]
    assert sum(missing.values()) == 1


def test_kineto_p2p_peers_of_a_file_without_p2p_ops(tmp_path):
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1,
                                                 "dur": 1, "pid": 1, "tid": 1}]}))
    got, missing = read_p2p_peers(path)
    assert got.empty and missing == {}


def test_kineto_p2p_peers_of_damaged_files_are_counted_or_empty(tmp_path):
    # args not an object, Concrete Inputs not a list, a truncated gzip member: no exception
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "c10d::send", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": [1]},
        {"ph": "X", "cat": "cpu_op", "name": "c10d::recv_", "pid": 1, "tid": 1, "ts": 2, "dur": 1,
         "args": {"External id": 3, "Concrete Inputs": {"2": "1"}}},
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events}))
    got, missing = read_p2p_peers(path)
    assert got.empty and sum(missing.values()) == 2
    raw = (PP3 / "rank-0.json.gz").read_bytes()
    cut = tmp_path / "rank0.json.gz"
    cut.write_bytes(raw[: len(raw) // 2])
    got, _ = read_p2p_peers(cut)
    full, _ = read_p2p_peers(PP3 / "rank-0.json.gz")
    assert len(got) < len(full)  # the events before the cut, never more
    assert set(got.itertuples(index=False, name=None)) <= set(full.itertuples(index=False, name=None))


def test_a_multi_member_gzip_gives_every_peer(tmp_path: Path) -> None:
    # gzip files may hold several members (concatenated gzip streams, as `cat a.gz b.gz` makes); the
    # trace reader reads them all, and so must the peer reader: pp3's rank 0 split into two members
    text = gzip.decompress((PP3 / "rank-0.json.gz").read_bytes())
    half = len(text) // 2
    path = tmp_path / "rank-0.json.gz"
    path.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))
    got, _ = read_p2p_peers(path)
    full, _ = read_p2p_peers(PP3 / "rank-0.json.gz")
    assert len(full) > 0 and got.equals(full)
