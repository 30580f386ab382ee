"""Several profiling windows per rank (issue 14): flat handler folders, torchtitan
``iteration_N/`` folders, any mix; one workload pooling all windows, never aligning across
a window boundary. Built from copies of the real DLRM set, shifted in time."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from evtsync.core.errors import TraceError
from evtsync.trace.traceset import load_traces

DLRM = "dlrm-8rank-v100"
SHIFT_US = 30_000_000  # the second window: 30 s later (windows are seconds to minutes apart)


def _load(path: Path) -> dict:
    with gzip.open(path) as fh:
        return json.load(fh)


def _shifted(raw: dict, shift_us: int, later_step: int = 12) -> dict:
    """The same step profiled again ``shift_us`` later, as one process writes it: CUPTI
    correlation ids, External ids and the ProfilerStep number go on increasing."""
    for e in raw["traceEvents"]:
        if isinstance(e.get("ts"), int | float):
            e["ts"] += shift_us
        args = e.get("args") or {}
        for key in ("correlation", "External id"):
            if isinstance(args.get(key), int) and args[key] > 0:
                args[key] += 10_000_000
        if e.get("ph") in ("s", "f") and isinstance(e.get("id"), int):
            e["id"] += 10_000_000
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            e["name"] = f"ProfilerStep#{int(e['name'].split('#')[1]) + later_step}"
    return raw


def _dlrm(traces_dir: Path) -> dict[int, dict]:
    return {r: _load(p) for r, p in
            ((int(p.name.split("_")[0].removeprefix("worker")), p) for p in (traces_dir / DLRM).glob("*.json.gz"))}


def _flat_two_windows(traces_dir: Path, folder: Path, shift_us: int = SHIFT_US) -> Path:
    """tensorboard_trace_handler layout: worker<r>.<ts>.pt.trace.json, two per rank."""
    folder.mkdir()
    for rank, raw in _dlrm(traces_dir).items():
        (folder / f"worker{rank}.1694128201545.pt.trace.json").write_text(json.dumps(raw))
        (folder / f"worker{rank}.1694128231545.pt.trace.json").write_text(json.dumps(_shifted(raw, shift_us)))
    return folder


def _nccl_count_by_hand(traces_dir: Path) -> int:
    return sum(1 for raw in _dlrm(traces_dir).values() for e in raw["traceEvents"]
               if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_"))


def test_flat_folder_of_two_windows_is_one_workload_with_twice_the_collectives(traces_dir: Path,
                                                                               tmp_path: Path) -> None:
    from evtsync import tax_table

    folder = _flat_two_windows(traces_dir, tmp_path / "flat")
    traces = load_traces(folder, jobs=1)
    assert traces.rank_ids == list(range(8)) and traces.n_windows == 2
    assert sorted(traces.ranks.groupby("window")["rank"].apply(sorted).tolist()) == [list(range(8))] * 2
    assert len(traces.nccl_kernels) == 2 * _nccl_count_by_hand(traces_dir) == 128
    assert not traces.problems
    one = tax_table(traces_dir / DLRM)
    both = tax_table(traces)
    assert len(one) == 8 and len(both) == 16  # DLRM: 8 collectives per rank and window
    assert both["window"].tolist() == [0] * 8 + [1] * 8
    assert both["index"].tolist() == list(range(16))
    # the same step profiled twice: the same tax in each window, never matched across them
    cols = ["collective", "tau_max_us", "straggler_rank"]
    for w in (0, 1):
        assert both[both["window"] == w][cols].reset_index(drop=True).equals(one[cols])
    per_rank = tax_table(traces, per_rank=True)
    assert set(per_rank["window"]) == {0, 1} and len(per_rank) == 128


def test_torchtitan_iteration_folders_and_a_mix(traces_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "profile_trace"
    raws = _dlrm(traces_dir)
    for n, shift in ((10, 0), (20, SHIFT_US)):
        sub = root / f"iteration_{n}"
        sub.mkdir(parents=True)
        for rank, raw in raws.items():
            (sub / f"rank{rank}_trace.json").write_text(json.dumps(_shifted(json.loads(json.dumps(raw)), shift)))
    traces = load_traces(root, jobs=1)
    assert traces.n_windows == 2 and len(traces.nccl_kernels) == 128
    # any mix: window 0 from the torchtitan folder, window 1 as loose files
    mix = load_traces([root / "iteration_10", *sorted((root / "iteration_20").glob("*.json"))], jobs=1)
    assert mix.n_windows == 2 and len(mix.ranks) == 16


def test_overlapping_files_of_one_rank_are_an_error(traces_dir: Path, tmp_path: Path) -> None:
    folder = _flat_two_windows(traces_dir, tmp_path / "flat", shift_us=2_000)  # 2 ms: the same step
    with pytest.raises(TraceError, match=r"two files claim rank 0 over the same time: .*worker0\..* overlap"):
        load_traces(folder, jobs=1)


def test_a_window_missing_a_rank_is_reported_and_refused_before_the_tax(traces_dir: Path,
                                                                       tmp_path: Path) -> None:
    from evtsync import tax_table

    folder = _flat_two_windows(traces_dir, tmp_path / "flat")
    (folder / "worker5.1694128231545.pt.trace.json").unlink()
    traces = load_traces(folder, jobs=1)
    assert traces.problems == ["window 1: rank(s) 5 have no file in it"]
    with pytest.raises(TraceError, match=r"window 1: rank\(s\) 5 have no file in it.*--allow-partial"):
        tax_table(traces)
    partial = tax_table(traces, allow_partial=True)
    assert len(partial) == 16
    assert partial[partial["window"] == 1]["n_ranks"].unique().tolist() == [7]


def test_zscores_pool_the_windows_without_blocks_across_them(traces_dir: Path, tmp_path: Path) -> None:
    from evtsync.blocks.cut import DROP_WINDOWS, compute_zscores

    folder = _flat_two_windows(traces_dir, tmp_path / "flat")
    one_table, one = compute_zscores(traces_dir / DLRM, m=4, keep_all=True)
    two_table, two = compute_zscores(folder, m=4, keep_all=True)
    assert "window" in two.times.columns and set(two.times["window"]) == set(range(2))
    # every block of one window appears in both; the one between the windows is dropped
    assert len(one.times) > 0 and len(two.times) == 2 * len(one.times)
    crossing = two.dropped[two.dropped["reason"] == DROP_WINDOWS]
    assert set(crossing["index"]) == {7}
    assert len(two_table) == 2 * len(one_table)
    # the same blocks in both windows: one identity each, pooled over the two windows
    assert set(two.times["block"]) == set(one.times["block"])
    assert (two.times.groupby("block")["window"].nunique() == 2).all()
