"""Corpus test: every trace file in ../shared/data, read by evtsync and by a plain ``json``
reading written here, must give the same counts (issue 14).

The independent counter below knows the category spellings of every profiler generation
(current Kineto and PyTorch 1.8's capitalised names) and the NCCL kernel names of every NCCL
generation, written out by hand; it does not call evtsync's decoder or schema. Every event
of the file must be accounted for: tabulated, counted as not tabulated, or skipped.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from evtsync.trace.traceset import load_traces
from tests.conftest import DATA, FULL_DATA, full_data_file

# --- the plain reading ---------------------------------------------------------------------

#: Categories per table as the profilers write them. PyTorch >= 1.9 Kineto: lower-case names;
#: PyTorch 1.8 (early 2021): "Kernel", "Memcpy", "Memset", "Runtime", "Operator".
GPU_SPELLINGS = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
KERNEL_SPELLINGS = {"kernel", "Kernel"}
CPU_SPELLINGS = {"cpu_op", "user_annotation", "python_function", "gpu_user_annotation", "Operator"}
RUNTIME_SPELLINGS = {"cuda_runtime", "cuda_driver", "Runtime"}
SYNC_SPELLINGS = {"cuda_sync"}
#: NCCL/RCCL kernels: ncclKernel_* (NCCL 2.8-2.18), ncclDevKernel_* (2.19+, RCCL), and the
#: NCCL 2.4-2.7 names such as ncclAllReduceRingLLKernel_sum_f32.
NCCL_NAME = re.compile(r"^(void )?nccl(Kernel_|DevKernel_|(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|"
                       r"SendRecv|Send|Recv)[A-Za-z]*Kernel)")


def _load(path: Path) -> dict:
    with gzip.open(path) if path.suffix == ".gz" else open(path, "rb") as fh:
        return json.load(fh)


def plain_counts(path: Path) -> dict[str, int]:
    """Counts of a plain json reading: complete events with numeric ts and dur per table."""
    events = _load(path)["traceEvents"]

    def timed(e: dict) -> bool:
        return e.get("ph") == "X" and all(isinstance(e.get(k), int | float) and not isinstance(e.get(k), bool)
                                          for k in ("ts", "dur"))

    complete = [e for e in events if timed(e)]
    counts = {
        "events": len(events),
        "gpu": sum(e.get("cat") in GPU_SPELLINGS for e in complete),
        "kernels": sum(e.get("cat") in KERNEL_SPELLINGS for e in complete),
        "cpu_ops": sum(e.get("cat") in CPU_SPELLINGS for e in complete),
        "runtime": sum(e.get("cat") in RUNTIME_SPELLINGS for e in complete),
        "syncs": sum(e.get("cat") in SYNC_SPELLINGS for e in complete),
        "nccl": sum(e.get("cat") in KERNEL_SPELLINGS and bool(NCCL_NAME.match(e.get("name", ""))) for e in complete),
    }
    tabulated = GPU_SPELLINGS | CPU_SPELLINGS | RUNTIME_SPELLINGS | SYNC_SPELLINGS
    counts["not_tabulated"] = sum(not (e.get("ph") == "X" and e.get("cat") in tabulated) for e in events)
    counts["untimed"] = sum(e.get("ph") == "X" and e.get("cat") in tabulated and not timed(e) for e in events)
    return counts


def _trace_files(shared: Path) -> list[Path]:
    return sorted(p for p in shared.rglob("*") if p.is_file() and p.name.endswith((".json", ".json.gz")))


# --- the test ---------------------------------------------------------------------------

def test_corpus_has_traces(full_data: Path) -> None:
    files = _trace_files(full_data)
    assert len(files) >= 30, files  # the shared data's traces/ folder (its README lists them)


def _corpus_ids() -> list[str]:
    """The files to parametrize over: the copies in tests/data/public, and the full public set
    where it is present (a file of the full set only skips when the set is absent)."""
    ids = {str(p.relative_to(DATA)) for p in _trace_files(DATA)}
    if FULL_DATA.is_dir():
        ids |= {str(p.relative_to(FULL_DATA)) for p in _trace_files(FULL_DATA)}
    return sorted(ids)


@pytest.mark.parametrize("name", _corpus_ids())
def test_every_shared_trace_is_read_completely(name: str) -> None:
    path = DATA / name if (DATA / name).is_file() else full_data_file(name)
    expected = plain_counts(path)
    # order: files without any rank are rank 0 (each is read alone here)
    traces = load_traces(path, rank_from="order", jobs=1)
    kernels = traces.kernels
    assert len(kernels) == expected["gpu"]
    assert int((kernels["cat"] == "kernel").sum()) == expected["kernels"]
    assert len(traces.cpu_ops) == expected["cpu_ops"]
    assert len(traces.runtime) == expected["runtime"]
    assert len(traces.syncs) == expected["syncs"]
    assert int(kernels["is_nccl"].sum()) == expected["nccl"]
    # nothing lost without a word: every event is tabulated, counted as not, or skipped
    assert int(traces.untabulated["count"].sum()) == expected["not_tabulated"]
    assert int(traces.skipped["count"].sum()) == expected["untimed"]
    info = traces.ranks.iloc[0]
    assert info["n_events"] == expected["events"]
    assert (info["n_kernels"], info["n_cpu_ops"], info["n_runtime"]) == (
        expected["kernels"], expected["cpu_ops"], expected["runtime"])


OLD_EXCERPT = Path(__file__).parents[1] / "data/old-formats/kineto_tb_resnet50_v100_2021-02_worker0_excerpt.pt.trace.json.gz"


def test_old_generation_excerpt_in_tests_data_is_read_completely() -> None:
    """The same check on the excerpt kept in tests/data (runs without the shared data)."""
    expected = plain_counts(OLD_EXCERPT)
    assert (expected["kernels"], expected["cpu_ops"], expected["runtime"]) == (600, 2545, 530)  # its README
    traces = load_traces(OLD_EXCERPT, jobs=1)
    assert (len(traces.kernels), len(traces.cpu_ops), len(traces.runtime)) == (
        expected["gpu"], expected["cpu_ops"], expected["runtime"])
    assert int(traces.untabulated["count"].sum()) == expected["not_tabulated"]
    assert traces.ranks.iloc[0]["rank"] == 0 and traces.ranks.iloc[0]["rank_source"] == "file name"


def test_old_generation_trace_reads_like_a_new_one(traces_dir: Path) -> None:
    """PyTorch 1.8: ``Kernel``/``Runtime``/``Operator`` categories, ``tid: "stream 7"``,
    ``external id`` in lower case. Values checked against the raw events by hand."""
    path = full_data_file("traces/old-formats/kineto_tb_resnet50_v100_2021-02_worker0.pt.trace.json.gz")
    raw = _load(path)["traceEvents"]
    traces = load_traces(path, jobs=1)
    kernels = traces.kernels[traces.kernels["cat"] == "kernel"]
    assert set(traces.kernels["cat"].astype(str)) == {"kernel", "gpu_memcpy", "gpu_memset"}
    assert set(traces.cpu_ops["cat"].astype(str)) == {"cpu_op"}
    assert set(traces.runtime["cat"].astype(str)) == {"cuda_runtime"}
    # "tid": "stream 7" -> stream 7 (also in args.stream); CPU tids "1890023232" -> ints
    assert set(kernels["tid"]) == {7} and set(kernels["stream"]) == {7}
    cpu_tids = {int(e["tid"]) for e in raw if e.get("cat") == "Operator"}
    assert set(traces.cpu_ops["tid"]) == cpu_tids
    # the lower-case "external id" links GPU events and runtime calls to their ops
    ext = Counter(e["args"]["external id"] for e in raw if e.get("cat") in ("Kernel", "Memcpy", "Memset"))
    assert Counter(traces.kernels["external_id"].tolist()) == ext
    assert (traces.runtime["external_id"] >= 0).all()
    # what was not tabulated is said, by phase and category as written
    untab = traces.untabulated.set_index(["phase", "category"])["count"].to_dict()
    flows = Counter((e["ph"], e["cat"]) for e in raw if e.get("cat") == "async")
    assert untab[("s", "async")] == flows[("s", "async")] and untab[("f", "async")] == flows[("f", "async")]
    assert untab[("X", "Trace")] == 1


def _write(raw: dict, path: Path) -> None:
    path.write_text(json.dumps(raw))


def _as_old_generation(raw: dict) -> dict:
    """A copy in the PyTorch 1.8 spelling (and odd cases): categories renamed, GPU tids as
    "stream N", "External id" written "external id" on GPU and runtime events."""
    rename = {"kernel": "Kernel", "gpu_memcpy": "Memcpy", "gpu_memset": "Memset", "cuda_runtime": "Runtime",
              "cpu_op": "Operator", "ac2g": "async", "user_annotation": "USER_ANNOTATION"}
    for e in raw["traceEvents"]:
        cat = e.get("cat")
        if cat in rename:
            e["cat"] = rename[cat]
        if cat in ("kernel", "gpu_memcpy", "gpu_memset") and isinstance(e.get("tid"), int):
            e["tid"] = f"stream {e['tid']}"
        args = e.get("args")
        if cat in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_runtime") and isinstance(args, dict) \
                and "External id" in args:
            args["external id"] = args.pop("External id")
    return raw


def test_renamed_category_copy_of_dlrm_gives_the_same_tax(traces_dir: Path, tmp_path: Path) -> None:
    from evtsync import tax_table

    folder = tmp_path / "old"
    folder.mkdir()
    for path in sorted((traces_dir / "dlrm-8rank-v100").glob("*.json.gz")):
        _write(_as_old_generation(_load(path)), folder / path.name.removesuffix(".gz"))
    original = tax_table(traces_dir / "dlrm-8rank-v100")
    renamed = tax_table(folder)
    assert len(original) == 8 and len(renamed) == 8
    cols = ["pg", "index", "collective", "tau_max_us", "tau_med_us", "straggler_rank", "valid"]
    assert renamed[cols].equals(original[cols])
    # hand check: the AllReduce median tax the issue quotes for this set
    allreduce = original[original["collective"] == "AllReduce"]["tau_max_us"]
    assert float(allreduce.median()) == pytest.approx(582.0)


def test_unknown_layout_is_an_error_naming_its_categories(tmp_path: Path, traces_dir: Path) -> None:
    raw = _load(traces_dir / "dlrm-8rank-v100/worker0_step_12.1694128201545.pt.trace.json.gz")
    for e in raw["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") != "Trace":
            e["cat"] = {"kernel": "GpuKernelActivity"}.get(e["cat"], "HostActivity")
    path = tmp_path / "worker0.json"
    _write(raw, path)
    from evtsync.core.errors import TraceError

    with pytest.raises(TraceError, match=r"no kernels, CPU ops or runtime calls.*'HostActivity' \(\d+\), "
                                         r"'GpuKernelActivity' \(245\)") as info:
        load_traces(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_unknown_category_next_to_known_ones_is_counted_and_warned(tmp_path: Path, traces_dir: Path,
                                                                   caplog) -> None:
    raw = _load(traces_dir / "dlrm-8rank-v100/worker0_step_12.1694128201545.pt.trace.json.gz")
    memcpys = [e for e in raw["traceEvents"] if e.get("cat") == "gpu_memcpy"]
    for e in memcpys:
        e["cat"] = "gpu_memcpy_v2"
    path = tmp_path / "worker0.json"
    _write(raw, path)
    traces = load_traces(path)
    row = traces.untabulated[traces.untabulated["category"] == "gpu_memcpy_v2"].iloc[0]
    assert (row["phase"], row["count"], row["reason"]) == ("X", len(memcpys), "unknown category")
    assert f"{len(memcpys)} complete event(s) of unknown categories not tabulated: 'gpu_memcpy_v2'" in caplog.text
