"""Rank sets (issue 18), ranks given by the user and communication kernels beyond NCCL
(issue 14), on damaged copies of the real DLRM set."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from evtsync.cli import main
from evtsync.core.errors import InputError, TraceError
from evtsync.trace.traceset import load_traces
from tests.conftest import full_data_file

DLRM = "dlrm-8rank-v100"


def _load(path: Path) -> dict:
    with gzip.open(path) as fh:
        return json.load(fh)


def _copy_dlrm(traces_dir: Path, folder: Path, change=None) -> Path:
    """The DLRM set as plain JSON, ``change(rank, raw)`` applied (returns None to leave the rank out)."""
    folder.mkdir()
    for path in sorted((traces_dir / DLRM).glob("*.json.gz")):
        raw = _load(path)
        rank = raw["distributedInfo"]["rank"]
        raw = change(rank, raw) if change else raw
        if raw is not None:
            (folder / path.name.removesuffix(".gz")).write_text(json.dumps(raw))
    return folder


# --- completeness -----------------------------------------------------------------------

def test_missing_rank_is_an_error_then_reported_with_allow_partial(traces_dir: Path, tmp_path: Path,
                                                                    capsys) -> None:
    from evtsync import tax_table

    folder = _copy_dlrm(traces_dir, tmp_path / "no5", lambda r, raw: None if r == 5 else raw)
    traces = load_traces(folder, jobs=1)
    assert traces.missing_ranks == (5,)
    with pytest.raises(TraceError, match=r"rank\(s\) 5 have no trace file \(world size 8; 7 rank\(s\) present"):
        tax_table(traces)
    table = tax_table(traces, allow_partial=True)
    assert table.attrs["missing_ranks"] == [5]
    assert set(table["n_ranks"]) == {7}
    capsys.readouterr()  # what the library calls above logged (through an earlier test's CLI handler)
    assert main(["tax", "-q", "--no-cache", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if x.startswith("evtsync: error:")]
    assert "rank(s) 5 have no trace file" in line
    assert main(["tax", "--no-cache", "--allow-partial", str(folder)]) == 0
    assert "INCOMPLETE rank set (--allow-partial): rank(s) 5 have no trace file" in capsys.readouterr().out


def test_another_jobs_trace_as_rank_3_is_an_error(traces_dir: Path, tmp_path: Path) -> None:
    from evtsync import tax_table

    folder = _copy_dlrm(traces_dir, tmp_path / "foreign", lambda r, raw: None if r == 3 else raw)
    foreign = full_data_file("traces/single-rank/hta_rank3of8.json.gz")  # rank 3 of 8, an A100 job of 2022
    shutil.copy(foreign, folder / "worker3.json.gz")
    with pytest.raises(TraceError) as info:
        tax_table(folder)
    message = str(info.value)
    assert "\n" not in message and "worker3.json.gz" in message
    assert "7 rank(s) have GPU model V100, but rank 3" in message and "A100" in message
    assert "does not overlap in time" in message


@pytest.mark.parametrize("damage, expected", [
    (lambda raw: {**raw, "traceEvents": []}, "rank 2 (.*worker2.*): empty trace"),
    (lambda raw: {**raw, "traceEvents": [e for e in raw["traceEvents"] if e.get("cat") != "kernel"]},
     "rank 2 (.*worker2.*): no GPU kernels, while 7 other file"),
    (lambda raw: {**raw, "traceEvents": [{k: v for k, v in e.items() if not (e.get("cat") == "kernel" and k == "dur")}
                                         for e in raw["traceEvents"]]},
     r"rank 2 (.*worker2.*): \d+ kernel\(s\) without a numeric dur"),
])
def test_damaged_rank_is_an_error_naming_rank_and_file(traces_dir: Path, tmp_path: Path, damage, expected) -> None:
    from evtsync import tax_table

    folder = _copy_dlrm(traces_dir, tmp_path / "bad", lambda r, raw: damage(raw) if r == 2 else raw)
    with pytest.raises(TraceError, match=expected):
        tax_table(folder)


def test_one_rank_of_a_two_rank_job_gives_no_tax_without_a_word(traces_dir: Path) -> None:
    from evtsync import tax_table

    path = full_data_file("traces/single-rank/hta_v100_allreduce_rank1of2.json.gz")
    with pytest.raises(TraceError, match=r"rank\(s\) 0 have no trace file \(world size 2"):
        tax_table(path)
    partial = tax_table(path, allow_partial=True)
    assert len(partial) > 0 and not partial["valid"].any()  # one rank: tau = 0 is no measurement


# --- ranks given by the user --------------------------------------------------------------

def test_rank_from_order_and_rank_equals_path(traces_dir: Path, tmp_path: Path) -> None:
    path = traces_dir / "edge-cases/no_rank.json.gz"
    with pytest.raises(TraceError, match="cannot tell which rank.*--rank-from order"):
        load_traces(path)
    assert load_traces(path, rank_from="order").ranks.iloc[0][["rank", "rank_source"]].tolist() == [0, "given"]
    given = load_traces(f"3={path}")
    assert given.ranks.iloc[0][["rank", "rank_source"]].tolist() == [3, "given"]
    # two rankless files: 0 and 1 in the order given
    other = tmp_path / "b.json.gz"
    shutil.copy(traces_dir / "edge-cases/no_distributed_info.json.gz", other)
    both = load_traces([path, other], rank_from="order")
    assert both.ranks[["rank", "path"]].values.tolist() == [[0, str(path)], [1, str(other)]]
    with pytest.raises(InputError, match="--rank-from order numbers the files itself"):
        load_traces([f"0={path}"], rank_from="order")


def test_cli_rank_from_on_a_single_gpu_trace(traces_dir: Path, capsys) -> None:
    path = full_data_file("traces/single-rank/tracelens_h100_qwen.json.gz")  # no distributedInfo, no rank in the name
    assert main(["tax", "--no-cache", str(path)]) == 2
    assert "--rank-from" in capsys.readouterr().err
    assert main(["tax", "--no-cache", "--rank-from", "order", str(path)]) == 0
    assert main(["tax", "--no-cache", f"0={path}"]) == 0


# --- communication kernels beyond NCCL ------------------------------------------------------------

DEEPEP = {"SendRecv": "void deep_ep::internode::dispatch<true, 8, 3, 1>(int4*, float*, int*)",
          "AllReduce": "void deep_ep::internode::combine<__nv_bfloat16, 8>(int4*, float*)"}


def _as_deepep(rank: int, raw: dict) -> dict:
    for e in raw["traceEvents"]:
        if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_"):
            e["name"] = DEEPEP["SendRecv" if "SendRecv" in e["name"] else "AllReduce"]
    return raw


def test_deepep_kernels_are_aligned_and_taxed_like_nccl(traces_dir: Path, tmp_path: Path) -> None:
    from evtsync import tax_table

    folder = _copy_dlrm(traces_dir, tmp_path / "ep", _as_deepep)
    traces = load_traces(folder, jobs=1)
    assert traces.nccl_kernels.empty and len(traces.comm_kernels) == 64
    original = tax_table(traces_dir / DLRM)
    ep = tax_table(traces)
    assert ep["collective"].tolist() == original["collective"].map(
        {"SendRecv": "EPDispatch", "AllReduce": "EPCombine"}).tolist()
    assert ep["tau_max_us"].tolist() == original["tau_max_us"].tolist()


def test_user_comm_kernel_pattern_and_one_rank(traces_dir: Path, tmp_path: Path, caplog) -> None:
    from evtsync import tax_table

    caplog.set_level("INFO", logger="evtsync")  # what was found is said at INFO (the CLI's -v)

    def rename(rank: int, raw: dict) -> dict:
        for e in raw["traceEvents"]:
            if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_"):
                e["name"] = "my_moe_exchange_kernel<bf16>"
        return raw

    folder = _copy_dlrm(traces_dir, tmp_path / "custom", rename)
    assert load_traces(folder, jobs=1).comm_kernels.empty  # not a known name
    traces = load_traces(folder, jobs=1, comm_kernels=["my_moe_exchange=AllToAll"])
    assert len(traces.comm_kernels) == 64
    assert set(tax_table(traces)["collective"]) == {"AllToAll"}
    with pytest.raises(InputError, match="REGEX=KIND"):
        load_traces(folder, comm_kernels=["no-kind"])
    # one rank: what was found is said; no tax is claimed
    one = load_traces(folder / "worker0_step_12.1694128201545.pt.trace.json", comm_kernels=["my_moe_exchange=AllToAll"])
    table = tax_table(one, allow_partial=True)
    assert "communication kernels beyond NCCL: 8 AllToAll" in caplog.text
    assert not table["valid"].any()


def test_cli_comm_kernel_option(traces_dir: Path, tmp_path: Path, capsys) -> None:
    folder = _copy_dlrm(traces_dir, tmp_path / "ep", _as_deepep)
    assert main(["tax", "--no-cache", "--json", str(folder)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {s["collective"] for s in out["summary"]} == {"EPDispatch", "EPCombine"}
    assert main(["tax", "--no-cache", "--json", "--comm-kernel", "deep_ep::internode::dispatch=Dispatch",
                 str(folder)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {s["collective"] for s in out["summary"]} == {"Dispatch", "EPCombine"}


def test_rank_from_order_numbers_a_folder_in_natural_order(traces_dir: Path, tmp_path: Path) -> None:
    """Issue 33 (1): with 11+ rankless files, ``trace_10`` sorted before ``trace_2`` and ranks
    were wrong from the 11th file on. The truth is the number each file's name carries."""
    for i in range(12):
        shutil.copy(traces_dir / "edge-cases/no_rank.json.gz", tmp_path / f"trace_{i}.json.gz")
    ranks = load_traces(tmp_path, rank_from="order", jobs=1).ranks
    by_rank = {int(r): Path(p).name for r, p in ranks[["rank", "path"]].values}
    assert by_rank == {i: f"trace_{i}.json.gz" for i in range(12)}


def test_rank_from_order_refuses_files_listed_against_their_numbers(traces_dir: Path, tmp_path: Path) -> None:
    """A shell glob lists trace_0 trace_1 trace_10 trace_11 trace_2 ...: refused, not mis-ranked."""
    files = []
    for i in range(12):
        files.append(tmp_path / f"trace_{i}.json.gz")
        shutil.copy(traces_dir / "edge-cases/no_rank.json.gz", files[-1])
    globbed = sorted(str(f) for f in files)  # text order, as the shell gives it
    with pytest.raises(InputError, match=r"trace_11\.json\.gz is given before trace_2\.json\.gz"):
        load_traces(globbed, rank_from="order")
    assert main(["tax", *globbed, "--rank-from", "order", "--no-cache"]) == 2


def test_rank_without_collective_kernels_is_part_of_rank_set_completeness(traces_dir: Path, tmp_path: Path,
                                                                           capsys) -> None:
    """Issue 33 (2): rank 4 keeps its compute kernels but lost its 8 NCCL kernels; the groups
    were inferred from the other 7 ranks and the tax computed over 7 of 8 with exit 0."""
    from evtsync import tax_table

    def drop_nccl(rank: int, raw: dict) -> dict:
        if rank == 4:
            raw["traceEvents"] = [e for e in raw["traceEvents"]
                                  if not (e.get("cat") == "kernel" and e.get("name", "").startswith("nccl"))]
        return raw

    folder = _copy_dlrm(traces_dir, tmp_path / "no_nccl4", drop_nccl)
    traces = load_traces(folder, jobs=1)
    with pytest.raises(TraceError, match=r"rank 4 \(\S*worker4_\S*\): \d+ GPU kernel\(s\) but no NCCL collective "
                                         r"kernel, while 7 other file\(s\) have them"):
        tax_table(traces)
    table = tax_table(traces, allow_partial=True)  # opted in: over the 7 ranks, said so
    assert set(table["n_ranks"]) == {7}
    capsys.readouterr()
    assert main(["tax", "-q", "--no-cache", str(folder)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "no NCCL collective kernel" in err
    assert main(["tax", "--no-cache", "--allow-partial", str(folder)]) == 0
    assert "INCOMPLETE rank set (--allow-partial): rank 4" in capsys.readouterr().out
