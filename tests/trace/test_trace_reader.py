"""The trace reader on every real trace in ../shared/data/traces and on damaged copies."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.core.errors import TraceError
from evtsync.trace.decode import decode_file
from evtsync.trace.traceset import load_traces
from tests.conftest import full_data_file

# Every file of the shared trace data and what the reader must do with it.
# "ok": loads; the numbers are checked against an independent json.load of the file below.
EXPECTED = {
    "critical-path/alexnet.json.gz": "ok",
    "critical-path/cuda_event_sync.json.gz": "ok",
    "critical-path/cuda_event_sync_multi_stream.json.gz": "ok",
    "critical-path/simple_add.json.gz": "ok",
    "edge-cases/amd_mi250_rocm.json.gz": "ok",  # no distributedInfo; rank from name? none -> error
    "edge-cases/cpu_only_gloo.json.gz": "ok",
    "edge-cases/gpu_user_annotation.json.gz": "ok",
    "edge-cases/large_integer.json.gz": "error: cannot tell which rank",  # no distributedInfo, no rank in name
    "edge-cases/no_distributed_info.json.gz": "error: cannot tell which rank",
    "edge-cases/no_rank.json.gz": "error: cannot tell which rank",
    "edge-cases/triton.json.gz": "error: cannot tell which rank",
    "single-rank/hta_a100_sendrecv_rank0of16.json.gz": "ok",
    "single-rank/hta_nccl_pg_fields_rank0of2.json.gz": "ok",
    "single-rank/hta_ns_time_unit_worldsize1.json.gz": "ok",
    "single-rank/hta_rank1of2.json.gz": "ok",
    "single-rank/hta_rank3of8.json.gz": "ok",
    "single-rank/hta_v100_allreduce_rank1of2.json.gz": "ok",
    "single-rank/tracelens_b200_rank0of8_pg_fields.json.gz": "ok",
    "single-rank/tracelens_h100_qwen.json.gz": "error: cannot tell which rank",
    "single-rank/tracelens_mi300_rccl_rank0of8.json.gz": "ok",
    "two-of-128-ranks/sampled_rank-0.json.gz": "ok",
    "two-of-128-ranks/sampled_rank-1.json.gz": "ok",
}
EXPECTED["edge-cases/amd_mi250_rocm.json.gz"] = "error: cannot tell which rank"
# PyTorch 1.8 generation: old category names, string tids, no distributedInfo; rank 0 from "worker0"
EXPECTED["old-formats/kineto_tb_resnet50_autograd_2021-01_worker0.pt.trace.json.gz"] = "ok"
EXPECTED["old-formats/kineto_tb_resnet50_v100_2021-02_worker0.pt.trace.json.gz"] = "ok"
#: GPU and runtime categories as every profiler generation spells them (written out here,
#: independently of evtsync's schema): current Kineto, and PyTorch 1.8's capitalised names.
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
RUNTIME_CATS = {"cuda_runtime", "cuda_driver", "Runtime"}
for _name in [f"dlrm-8rank-v100/{p}" for p in (
        "worker0_step_12.1694128201545.pt.trace.json.gz", "worker1_step_12.1694128201556.pt.trace.json.gz",
        "worker2_step_12.1694128201554.pt.trace.json.gz", "worker3_step_12.1694128201557.pt.trace.json.gz",
        "worker4_step_12.1694128201547.pt.trace.json.gz", "worker5_step_12.1694128201549.pt.trace.json.gz",
        "worker6_step_12.1694128201553.pt.trace.json.gz", "worker7_step_12.1694128201553.pt.trace.json.gz")]:
    EXPECTED[_name] = "ok"


def _raw(path: Path) -> dict:
    with gzip.open(path) if path.suffix == ".gz" else open(path, "rb") as fh:
        return json.load(fh)


def test_expectation_table_covers_every_shared_trace(traces_dir: Path, full_traces_dir: Path) -> None:
    found = {str(p.relative_to(full_traces_dir)) for p in full_traces_dir.rglob("*.json*")}
    assert found == set(EXPECTED)
    copied = {str(p.relative_to(traces_dir)) for p in traces_dir.rglob("*.json*")}
    assert copied <= set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_shared_trace_loads_or_fails_clearly(traces_dir: Path, name: str) -> None:
    path = traces_dir / name if (traces_dir / name).is_file() else full_data_file(f"traces/{name}")
    expected = EXPECTED[name]
    if expected.startswith("error"):
        with pytest.raises(TraceError) as info:
            load_traces(path)
        message = str(info.value)
        assert expected.removeprefix("error: ") in message
        assert str(path) in message and "\n" not in message
        return
    traces = load_traces(path)
    raw = _raw(path)
    events = raw["traceEvents"]
    complete = [e for e in events if e.get("ph") == "X"]
    gpu = [e for e in complete if e.get("cat") in GPU_CATS]
    runtime = [e for e in complete if e.get("cat") in RUNTIME_CATS]
    assert len(traces.kernels) == len(gpu)
    assert len(traces.runtime) == len(runtime)
    rank = raw["distributedInfo"]["rank"] if "distributedInfo" in raw else int(name.split("worker")[1][0])
    assert traces.ranks["rank"].tolist() == [rank]
    nccl = [e for e in gpu if e["name"].startswith(("ncclKernel_", "ncclDevKernel_"))]
    assert int(traces.kernels["is_nccl"].sum()) == len(nccl)
    # durations and times survive exactly (to the ns) for every GPU event
    base = int(raw.get("baseTimeNanoseconds", 0) or 0)
    expected_ts = sorted(round(e["ts"] * 1000) + base for e in gpu)
    assert traces.kernels["ts_ns"].tolist() == expected_ts
    assert sorted(traces.kernels["dur_ns"].tolist()) == sorted(round(e["dur"] * 1000) for e in gpu)
    # process-group fields are carried where the trace has them
    with_pg = [e for e in nccl if "Process Group Name" in e.get("args", {})]
    assert int(traces.nccl_kernels["pg_name"].notna().sum()) >= len(with_pg)


def test_pg_fields_and_gpu_model(traces_dir: Path) -> None:
    traces = load_traces(full_data_file("traces/single-rank/tracelens_b200_rank0of8_pg_fields.json.gz"))
    nccl = traces.nccl_kernels
    assert len(nccl) == 1
    row = nccl.iloc[0]
    # values read by hand from the raw kernel event
    assert row["collective"] == "AllGather" and row["pg_name"] == "3"
    assert row["pg_ranks"] == "[0, 1, 2, 3, 4, 5, 6, 7]"
    assert row["dtype"] == "BFloat16" and row["out_nelems"] == 201088
    assert row["msg_bytes"] == 201088 * 2
    assert traces.ranks.iloc[0]["gpu"] == "B200"
    # pg_count says 71 but torch writes only the first 15 entries of pg_config
    assert len(traces.process_groups) == 15
    # cuLaunchKernelEx in cuda_driver is tabulated with its correlation id
    driver = traces.runtime[traces.runtime["cat"] == "cuda_driver"]
    assert (driver["name"] == "cuLaunchKernelEx").any() and (driver["correlation"] >= 0).all()


def test_rccl_and_ns_display_unit(traces_dir: Path) -> None:
    path = full_data_file("traces/single-rank/tracelens_mi300_rccl_rank0of8.json.gz")
    mi300 = load_traces(path)
    # RCCL's ncclDevKernel_Generic names no collective: it comes from the record_param_comms
    # op that launched it (kernel correlation -> launch External id -> op). Independent check:
    events = _raw(path)["traceEvents"]
    launch_ext = {e["args"]["correlation"]: e["args"].get("External id") for e in events
                  if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    op_coll = {e["args"]["External id"]: e["args"]["Collective name"] for e in events
               if e.get("name") == "record_param_comms" and "Collective name" in e.get("args", {})}
    canonical = {"broadcast": "Broadcast", "allreduce": "AllReduce"}
    expected = []
    for e in sorted((e for e in events if e.get("cat") == "kernel"
                     and e["name"].startswith("ncclDevKernel_Generic")), key=lambda e: e["ts"]):
        ext = e["args"].get("External id", launch_ext.get(e["args"]["correlation"]))
        expected.append(canonical.get(op_coll.get(ext), "Unknown"))
    assert len(expected) == 17 and "Unknown" in expected and "AllReduce" in expected
    assert mi300.nccl_kernels["collective"].astype(str).tolist() == expected
    ns = load_traces(full_data_file("traces/single-rank/hta_ns_time_unit_worldsize1.json.gz"))
    assert ns.ranks.iloc[0]["display_time_unit"] == "ns"
    # ts stays µs despite displayTimeUnit ns: 2024-04-04 in unix ns
    assert 1.7e18 < ns.kernels["ts_ns"].iloc[0] < 1.8e18


def test_rank_from_file_name_warns(tmp_path: Path, traces_dir: Path, caplog) -> None:
    raw = _raw(traces_dir / "edge-cases/large_integer.json.gz")  # has ints beyond int64 in args
    target = tmp_path / "job_rank-5.json"
    target.write_text(json.dumps(raw))
    traces = load_traces(target)
    assert traces.ranks.iloc[0]["rank"] == 5
    assert traces.ranks.iloc[0]["rank_source"] == "file name"
    assert "rank 5 from the file name" in caplog.text
    assert traces.kernels["name"].tolist() == ["ncclKernel_AllReduce"]


def test_strings_with_braces_quotes_and_escapes(tmp_path: Path) -> None:
    names = ['weird {name} [x]', 'quote \\" inside', 'backslash at end \\\\', '}]{[', 'a\\\\\\"b']
    events = ",\n".join(
        f'{{"ph": "X", "cat": "kernel", "name": "{n}", "pid": 0, "tid": 7, "ts": {100 + i}, '
        f'"dur": 5, "args": {{"stream": 7, "device": 0, "correlation": {i}}}}}'
        for i, n in enumerate(names))
    text = '{"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": [\n' + events + "\n]}"
    path = tmp_path / "t.json"
    path.write_text(text)
    expected = [e["name"] for e in json.loads(text)["traceEvents"]]
    for block in (7, 13, 64, 1 << 20):  # blocks that cut events, strings and escapes anywhere
        decoded = decode_file(path, block_size=block)
        assert decoded.n_events == len(names)
        assert list(decoded.columns["gpu"]["name"]) == expected


def _cut_copy(src: Path, dst: Path, fraction: float) -> int:
    data = gzip.decompress(src.read_bytes())
    cut = int(len(data) * fraction)
    dst.write_bytes(data[:cut])
    return cut


def test_json_cut_mid_event_error_and_salvage(tmp_path: Path, traces_dir: Path) -> None:
    src = traces_dir / "dlrm-8rank-v100/worker0_step_12.1694128201545.pt.trace.json.gz"
    dst = tmp_path / "worker0_cut.json"
    _cut_copy(src, dst, 0.5)
    with pytest.raises(TraceError, match=r"cut mid-event.*decompressed byte \d+.*--salvage"):
        load_traces(dst)
    salvaged = load_traces(dst, salvage=True)
    raw_events = _raw(src)["traceEvents"]
    info = salvaged.ranks.iloc[0]
    assert info["truncated_at_byte"] > 0 and info["dropped_bytes"] > 0
    # the complete events before the cut are kept: count them independently by re-parsing
    prefix = dst.read_bytes()[: info["truncated_at_byte"]]
    kept = json.loads(prefix[prefix.index(b"[", prefix.index(b'"traceEvents"')):] + b"]")
    assert 0 < len(kept) < len(raw_events)
    kept_gpu = [e for e in kept if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    assert len(salvaged.kernels) == len(kept_gpu)


def test_truncated_gzip(tmp_path: Path, traces_dir: Path) -> None:
    src = traces_dir / "dlrm-8rank-v100/worker1_step_12.1694128201556.pt.trace.json.gz"
    data = src.read_bytes()
    dst = tmp_path / "worker1.json.gz"
    dst.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(TraceError, match=r"gzip stream ends early.*decompressed byte"):
        load_traces(dst)
    salvaged = load_traces(dst, salvage=True)
    assert 0 < len(salvaged.kernels) < 326


def test_gzip_error_offsets_and_trailing_data(tmp_path: Path, traces_dir: Path) -> None:
    """Gzip errors give the decompressed offset where the data stop being readable, and
    bytes after the last member are called trailing data, not a truncated file."""
    import gzip
    import zlib

    src = traces_dir / "dlrm-8rank-v100/worker1_step_12.1694128201556.pt.trace.json.gz"
    data = src.read_bytes()
    text = gzip.decompress(data)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(data[: len(data) * 2 // 3])
    inflater = zlib.decompressobj(wbits=31)
    readable = len(inflater.decompress(data[: len(data) * 2 // 3]))  # what zlib gets out of the cut file
    with pytest.raises(TraceError, match=r"gzip stream ends early \(truncated file\) after (\d+) decompressed") as err:
        load_traces(cut)
    at = int(str(err.value).split(" after ")[1].split()[0])
    assert abs(at - readable) < 64 * 1024 and 0 < at < len(text)
    trailing = tmp_path / "trailing.json.gz"
    trailing.write_bytes(data + b"garbage")
    with pytest.raises(TraceError, match=rf"7 byte\(s\) after the last complete gzip member \(after {len(text)} "
                                         r"decompressed bytes\) are not a complete gzip member"):
        load_traces(trailing)
    assert len(load_traces(trailing, salvage=True).kernels) == 326  # the array was complete
    padded = tmp_path / "padded.json.gz"  # NUL padding after the member, as gzip(1) accepts
    padded.write_bytes(data + b"\0" * 10_000)
    assert len(load_traces(padded).kernels) == 326


@pytest.mark.parametrize("content, message", [
    (b"", "empty file"),
    (b"   \n", "empty file"),
    (b'{"foo": 1, "bar": [1, 2]}', "not a Kineto trace"),
    (b"[1, 2, 3]", "without a \"traceEvents\""),
    (b"hello world", "not JSON"),
    (b'{"traceEvents": [1, 2]}', "not a Kineto event"),
    (b'{"distributedInfo": {"rank": 0}, "traceEvents": [{"ph": "X", "ts": 1,,}]}', "invalid JSON"),
])
def test_not_a_trace(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "rank0.json"
    path.write_bytes(content)
    with pytest.raises(TraceError, match=message) as info:
        load_traces(path)
    assert str(path) in str(info.value)


def test_duplicate_rank_and_world_size(tmp_path: Path, traces_dir: Path) -> None:
    src = traces_dir / "dlrm-8rank-v100/worker0_step_12.1694128201545.pt.trace.json.gz"
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    shutil.copy(src, a)
    shutil.copy(src, b)
    with pytest.raises(TraceError, match="two files claim rank 0"):
        load_traces([a, b])
    raw = _raw(traces_dir / "dlrm-8rank-v100/worker1_step_12.1694128201556.pt.trace.json.gz")
    raw["distributedInfo"]["world_size"] = 16
    c = tmp_path / "c.json"
    c.write_text(json.dumps(raw))
    with pytest.raises(TraceError, match="disagree on the world size"):
        load_traces([a, c])


def test_folder_ignores_non_trace_files_and_parallel_equals_serial(traces_dir: Path) -> None:
    folder = traces_dir / "dlrm-8rank-v100"  # holds a LICENSE file too
    serial = load_traces(folder, jobs=1)
    parallel = load_traces(folder, jobs=2)
    assert serial.rank_ids == list(range(8))
    for name in ("kernels", "cpu_ops", "runtime"):
        a, b = getattr(serial, name), getattr(parallel, name)
        assert a.shape == b.shape
        assert np.array_equal(a["ts_ns"].to_numpy(), b["ts_ns"].to_numpy())


def test_rank_without_nccl_kernels_concatenates_with_the_others(tmp_path: Path) -> None:
    """One rank ran compute only (no collective): its empty collective categories must not
    stop the ranks' tables from being concatenated."""
    def kernel(name: str, i: int) -> dict:
        return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 100 + 10 * i, "dur": 5,
                "args": {"device": 0, "stream": 7, "correlation": i}}

    for rank, events in ((0, [kernel("gemm_kernel", 1)]),
                         (1, [kernel("ncclKernel_AllReduce_RING_LL_Sum_float", 1), kernel("gemm_kernel", 2)])):
        (tmp_path / f"rank{rank}.json").write_text(
            json.dumps({"distributedInfo": {"rank": rank, "world_size": 2}, "traceEvents": events}))
    traces = load_traces(tmp_path, jobs=1)
    assert traces.kernels.groupby("rank")["is_nccl"].sum().to_dict() == {0: 0, 1: 1}
    assert traces.nccl_kernels["collective"].astype(str).tolist() == ["AllReduce"]


def test_pg_fields_filled_from_the_launching_op_leave_other_kernels_missing(tmp_path: Path) -> None:
    """An NCCL kernel without PG arguments takes them from its record_param_comms op (same
    External id); a compute kernel beside it keeps them missing (not the string "nan")."""
    comm_args = {"External id": 7, "Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1024,
                 "Out msg nelems": 1024, "Group size": 2, "Process Group Name": "0",
                 "Process Group Description": "default_pg", "Process Group Ranks": "[0, 1]"}
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 100, "dur": 10,
         "args": comm_args},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "pid": 0, "tid": 7,
         "ts": 200, "dur": 50, "args": {"External id": 7, "device": 0, "stream": 7, "correlation": 11}},
        {"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": 300, "dur": 50,
         "args": {"External id": 8, "device": 0, "stream": 7, "correlation": 12}},
    ]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events}))
    kernels = load_traces(path).kernels.set_index("name")
    nccl = kernels.loc["ncclDevKernel_AllReduce_Sum_f32_RING_LL"]
    assert (nccl["pg_name"], nccl["pg_ranks"], nccl["dtype"]) == ("0", "[0, 1]", "Float")
    assert nccl["collective"] == "AllReduce" and nccl["msg_bytes"] == 1024 * 4  # Float: 4 bytes
    gemm = kernels.loc["gemm_kernel"]
    for field in ("pg_name", "pg_ranks", "dtype", "collective_name", "pg_desc"):
        assert pd.isna(gemm[field]), (field, gemm[field])
