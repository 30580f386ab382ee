"""Alignment and tax on real traces, checked against values computed from the raw JSON."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from evtsync.cli import main
from evtsync.core.errors import AlignmentError, InputError, TraceError
from evtsync.sync.collectives import PGOverride, align_collectives
from evtsync.sync.tax import compute_tax, tax_summary
from evtsync.trace.traceset import load_traces
from tests.conftest import full_data_file

REPO = Path(__file__).resolve().parents[2]
GLOO = REPO / "tests/data/gloo-torch2.13"


def _raw(path: Path) -> dict:
    with gzip.open(path) as fh:
        return json.load(fh)


def _raw_nccl_durations(folder: Path) -> dict[int, list[tuple[int, int]]]:
    """rank -> [(ts, dur)] of its NCCL kernels in time order, straight from the JSON."""
    out = {}
    for path in sorted(folder.glob("*.json.gz")):
        raw = _raw(path)
        kernels = [e for e in raw["traceEvents"] if e.get("cat") == "kernel"
                   and e["name"].startswith(("ncclKernel_", "ncclDevKernel_"))]
        out[raw["distributedInfo"]["rank"]] = sorted((e["ts"], e["dur"]) for e in kernels)
    return out


def test_dlrm_all_collectives_aligned_and_tau_equals_raw(traces_dir: Path) -> None:
    folder = traces_dir / "dlrm-8rank-v100"
    traces = load_traces(folder)
    alignment = align_collectives(traces)
    assert alignment.mismatches.empty
    assert len(alignment.groups) == 1
    group = alignment.groups.iloc[0]
    assert group["pg_ranks"] == "0,1,2,3,4,5,6,7" and group["pg_source"] == "inferred"
    assert group["n_collectives"] == 8
    tables = compute_tax(alignment)
    table = tables.collectives
    assert len(table) == 8 and (table["n_ranks"] == 8).all()
    assert (table["end_spread_us"] <= 10).all()
    raw = _raw_nccl_durations(folder)
    assert sorted(raw) == list(range(8)) and all(len(v) == 8 for v in raw.values())
    for i in range(8):
        durs = [raw[r][i][1] for r in range(8)]
        ends = [raw[r][i][0] + raw[r][i][1] for r in range(8)]
        row = table[table["index"] == i].iloc[0]
        assert row["tau_max_us"] == max(durs) - min(durs)
        assert row["tau_med_us"] == statistics.median(durs) - min(durs)
        assert row["mean_delay_us"] == pytest.approx(statistics.mean(durs) - min(durs), abs=1e-9)
        assert row["straggler_rank"] == durs.index(min(durs))
        assert row["fastest_rank"] == durs.index(max(durs))
        assert row["end_spread_us"] == max(ends) - min(ends)
    per_rank = tables.ranks
    assert len(per_rank) == 64
    share = per_rank["wait_share"].to_numpy()
    assert ((share >= 0) & (share < 1)).all()
    assert per_rank.groupby("index")["is_straggler"].sum().eq(1).all()
    summary = tax_summary(tables)
    assert set(summary["collective"]) == {"SendRecv", "AllReduce"}
    assert summary["count"].sum() == 8


def test_missing_member_rank_is_an_error_unless_partial(traces_dir: Path) -> None:
    traces = load_traces(full_data_file("traces/single-rank/tracelens_b200_rank0of8_pg_fields.json.gz"))
    # the rank set is checked before any alignment (issue 18): the ranks and the world size named
    with pytest.raises(TraceError, match=r"rank\(s\) 1-7 have no trace file \(world size 8"):
        align_collectives(traces)
    partial = align_collectives(traces, allow_partial=True)
    assert partial.groups.iloc[0]["pg_source"] == "trace"
    assert partial.groups.iloc[0]["pg_desc"] == "undefined"


def _dlrm_copy_without_kernel(traces_dir: Path, tmp_path: Path, rank: int, which: int) -> Path:
    folder = tmp_path / "dlrm"
    folder.mkdir()
    for path in (traces_dir / "dlrm-8rank-v100").glob("*.json.gz"):
        raw = _raw(path)
        if raw["distributedInfo"]["rank"] == rank:
            nccl = [e for e in raw["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl")]
            raw["traceEvents"].remove(sorted(nccl, key=lambda e: e["ts"])[which])
        (folder / path.name.replace(".gz", "")).write_text(json.dumps(raw))
    return folder


def test_different_numbers_of_collectives(traces_dir: Path, tmp_path: Path) -> None:
    folder = _dlrm_copy_without_kernel(traces_dir, tmp_path, rank=3, which=7)
    traces = load_traces(folder)
    with pytest.raises(AlignmentError, match=r"different numbers of collectives.*rank 3: 7"):
        align_collectives(traces)
    loose = align_collectives(traces, strict=False)
    assert loose.groups.iloc[0]["n_collectives"] == 7
    row = loose.mismatches[loose.mismatches["kind"] == "count"]
    assert row["rank"].tolist() == [3]


def test_removed_middle_kernel_is_detected_not_shifted(traces_dir: Path, tmp_path: Path) -> None:
    # dropping collective 4 (an AllReduce) on rank 3 shifts its later kernels: the type check
    # (SendRecv vs AllReduce at index 4) or the count check must stop the alignment
    folder = _dlrm_copy_without_kernel(traces_dir, tmp_path, rank=3, which=4)
    with pytest.raises(AlignmentError):
        align_collectives(load_traces(folder))


def test_gloo_cpu_collectives_aligned_across_four_ranks(caplog, recwarn) -> None:
    caplog.set_level("WARNING", logger="evtsync")
    traces = load_traces(GLOO)
    assert not caplog.records and not recwarn.list  # today's torch output loads cleanly
    assert traces.nccl_kernels.empty
    alignment = align_collectives(traces)
    assert alignment.mismatches.empty
    groups = alignment.groups.set_index("pg_desc")
    # pg_config of the four ranks together (read from the raw files)
    expected = {}
    n_gloo = 0
    for path in sorted(GLOO.glob("rank-*.json.gz")):
        raw = _raw(path)
        for entry in raw["distributedInfo"]["pg_config"]:
            expected[entry["pg_desc"]] = ",".join(map(str, entry["ranks"]))
        n_gloo += sum(1 for e in raw["traceEvents"] if str(e.get("name", "")).startswith("gloo:"))
    assert {d: groups.loc[d, "pg_ranks"] for d in groups.index} == expected
    assert set(expected) == {"default_pg", "TP01", "TP23", "FSDP02", "FSDP13"}
    assert len(alignment.instances) == n_gloo
    tables = compute_tax(alignment)
    assert (tables.collectives["tau_max_us"] >= 0).all()
    assert tables.collectives["valid"].all()


def test_pg_override_parsing() -> None:
    assert PGOverride.parse("tp=0-3@84") == PGOverride("tp", (0, 1, 2, 3), 84)
    assert PGOverride.parse("fsdp=0,4") == PGOverride("fsdp", (0, 4), None)
    for bad in ("tp", "tp=", "tp=1,1", "tp=3-1"):
        with pytest.raises(InputError):
            PGOverride.parse(bad)


def test_pg_override_names_the_group(traces_dir: Path) -> None:
    traces = load_traces(traces_dir / "dlrm-8rank-v100")
    alignment = align_collectives(traces, overrides=[PGOverride.parse("world=0-7@84")])
    assert alignment.groups["pg"].tolist() == ["world"]
    assert alignment.groups.iloc[0]["pg_source"] == "override"


def test_cli_tax_outputs_and_plot(traces_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "tax.parquet"
    plot = tmp_path / "cdf.png"
    assert main(["tax", str(traces_dir / "dlrm-8rank-v100"), "-o", str(out), "--plot", str(plot)]) == 0
    text = capsys.readouterr().out
    assert "SendRecv" in text and "AllReduce" in text
    import pandas as pd

    table = pd.read_parquet(out)
    ranks = pd.read_parquet(tmp_path / "tax_ranks.parquet")
    assert len(table) == 8 and len(ranks) == 64
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*.tmp"))


def test_cli_no_nccl_kernels_exits_zero(traces_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "tax.csv"
    assert main(["tax", str(traces_dir / "critical-path/simple_add.json.gz"), "-o", str(out)]) == 0
    assert "no NCCL kernels" in capsys.readouterr().out
    assert out.read_text().startswith("pg,")


@pytest.mark.parametrize("args, message", [
    (["tax", "/nonexistent/trace.json"], "no such file"),
    (["tax"], "give TRACES or --demo"),
])
def test_cli_errors_are_one_line(args: list[str], message: str, capsys) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_cli_cut_trace_error_then_salvage(traces_dir: Path, tmp_path: Path, capsys) -> None:
    data = gzip.decompress((traces_dir / "dlrm-8rank-v100/worker0_step_12.1694128201545.pt.trace.json.gz").read_bytes())
    cut = tmp_path / "rank0.json"
    cut.write_bytes(data[: len(data) // 2])
    assert main(["tax", str(cut)]) == 2
    err = capsys.readouterr().err
    assert "decompressed byte" in err and "--salvage" in err and "Traceback" not in err
    assert main(["tax", "--salvage", str(cut)]) == 2  # rank 0 of 8 alone: refused (issue 18)
    assert "rank(s) 1-7 have no trace file" in capsys.readouterr().err
    assert main(["tax", "--salvage", "--allow-partial", str(cut)]) == 0
    assert "no NCCL kernels" in capsys.readouterr().out  # the first half holds none of them


@pytest.mark.parametrize("source", ["dlrm", "gloo", "synthetic"])
def test_collectives_scope_gives_the_same_alignment_and_tax(source: str, traces_dir: Path,
                                                            tmp_path: Path) -> None:
    """``scope="collectives"`` (what ``evtsync tax`` reads) keeps every row the tax needs:
    NCCL traces, gloo traces (CPU-side collectives) and a synthetic study read in a process
    pool (reduced tables pickled back) give the full path's alignment and tax tables."""
    import pandas as pd

    from evtsync.sync.tax import tax_from_traces

    if source == "dlrm":
        folder, jobs = traces_dir / "dlrm-8rank-v100", 1
    elif source == "gloo":
        folder, jobs = GLOO, 1
    else:
        from evtsync.synth import SynthConfig, synthesize

        folder = synthesize(SynthConfig.build(ranks=8, tp=4, iterations=2, layers=1, seed=5), tmp_path).traces_dir
        jobs = 2
    full = load_traces(folder, jobs=1)
    small = load_traces(folder, jobs=jobs, scope="collectives")
    assert small.scope == "collectives" and full.scope == "all"
    assert len(small.kernels) == len(full.nccl_kernels)
    assert len(small.kernels) + len(small.cpu_ops) < len(full.kernels) + len(full.cpu_ops)
    assert small.runtime.empty and small.syncs.empty
    full_alignment, full_tax = tax_from_traces(full)
    small_alignment, small_tax = tax_from_traces(small)
    assert len(full_tax.collectives) > 0
    pd.testing.assert_frame_equal(small_tax.collectives, full_tax.collectives)
    pd.testing.assert_frame_equal(small_tax.ranks, full_tax.ranks)
    pd.testing.assert_frame_equal(small_alignment.groups, full_alignment.groups)
    pd.testing.assert_frame_equal(small_alignment.mismatches, full_alignment.mismatches)


def test_reduced_scopes_are_refused_where_they_lack_rows(traces_dir: Path) -> None:
    from evtsync.blocks.cut import cut_blocks
    from evtsync.critpath import attribute

    folder = traces_dir / "dlrm-8rank-v100"
    small = load_traces(folder, jobs=1, scope="collectives")
    blocks_scope = load_traces(folder, jobs=1, scope="blocks")
    for run, scope in ((lambda: cut_blocks(small), "collectives"), (lambda: attribute(small), "collectives"),
                       (lambda: attribute(blocks_scope), "blocks")):
        with pytest.raises(InputError, match=f"loaded with scope='{scope}'"):
            run()
    with pytest.raises(InputError, match="scope 'some': expected one of all, blocks, collectives"):
        load_traces(folder, scope="some")


def _dlrm_with_a_late_allreduce(traces_dir: Path, tmp_path: Path) -> tuple[Path, dict[int, list[tuple[str, int]]]]:
    """DLRM with rank 3's second AllReduce moved 1 ms later, and every rank's NCCL kernels
    (kind, dur) in time order from the raw JSON."""
    folder = tmp_path / "late"
    folder.mkdir()
    durations: dict[int, list[tuple[str, int]]] = {}
    for path in sorted((traces_dir / "dlrm-8rank-v100").glob("*.json.gz")):
        raw = _raw(path)
        rank = raw["distributedInfo"]["rank"]
        nccl = sorted((e for e in raw["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl")),
                      key=lambda e: e["ts"])
        if rank == 3:
            [e for e in nccl if "AllReduce" in e["name"]][1]["ts"] += 1000
        durations[rank] = [("AllReduce" if "AllReduce" in e["name"] else "other", e["dur"]) for e in nccl]
        (folder / path.name.removesuffix(".gz")).write_text(json.dumps(raw))
    return folder, durations


def test_summary_leaves_out_the_collectives_flagged_invalid(traces_dir: Path, tmp_path: Path, capsys) -> None:
    """Issue 33 (3): the summary's median included collectives whose end times disagree.
    Rank 3's second AllReduce is moved 1 ms later (its duration unchanged): that collective's
    end times spread 1 ms > 50 µs, so it is invalid. The truth is computed from the raw JSON:
    the AllReduce tau median over the two others."""
    folder, durations = _dlrm_with_a_late_allreduce(traces_dir, tmp_path)
    kinds = [k for k, _ in durations[0]]
    allreduce = [i for i, k in enumerate(kinds) if k == "AllReduce"]
    late = allreduce[1]
    taus = [max(durations[r][i][1] for r in durations) - min(durations[r][i][1] for r in durations)
            for i in allreduce if i != late]
    alignment = align_collectives(load_traces(folder, jobs=1))
    assert alignment.invalid == {(alignment.groups.iloc[0]["pg"], late)}
    summary = tax_summary(compute_tax(alignment)).set_index("collective")
    row = summary.loc["AllReduce"]
    assert (row["count"], row["n_invalid"]) == (2, 1)
    assert row["tau_median_us"] == pytest.approx(statistics.median(taus))
    assert row["tau_max_us"] == pytest.approx(max(taus))
    capsys.readouterr()
    assert main(["tax", "--no-cache", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "1 of 8 collective(s) flagged invalid are left out of these statistics" in out


def test_attribute_leaves_out_the_collectives_flagged_invalid(traces_dir: Path, tmp_path: Path, capsys) -> None:
    """Issue 33 (3), ``attribute``: the invalid collective is neither listed nor counted in the
    cause categories; the table keeps it with valid = False."""
    import pandas as pd

    folder, durations = _dlrm_with_a_late_allreduce(traces_dir, tmp_path)
    late = [i for i, (k, _) in enumerate(durations[0]) if k == "AllReduce"][1]
    out = tmp_path / "a.csv"
    capsys.readouterr()
    assert main(["attribute", str(folder), "--no-cache", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("7 collective(s):")  # 8 NCCL collectives, 1 flagged
    assert "1 collective(s) flagged invalid by the alignment checks are left out" in printed
    table = pd.read_csv(out)
    assert table.loc[~table["valid"], "index"].tolist() == [late]
    summary = pd.read_csv(tmp_path / "a_summary.csv")
    assert summary["count"].sum() == ((table["status"] == "ok") & table["valid"]).sum()
