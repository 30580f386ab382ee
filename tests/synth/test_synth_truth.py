"""The ground truth of ``evtsync synth`` is what the trace files say.

tau, stragglers and z-scores are recomputed here from the raw JSON (json/gzip only, never
the package's reader) with the SPEC formulas and compared with ``ground_truth.json``.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evtsync.cli import main
from evtsync.core.errors import InputError
from evtsync.synth import Plant, SynthConfig, synthesize
from evtsync.synth.timeline import COMPUTE_STREAM, TP_STREAM


def _load(path: Path) -> dict[str, Any]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def _raw(res) -> dict[int, list[dict[str, Any]]]:
    return {r: _load(p)["traceEvents"] for r, p in res.traces.items()}


def _nccl_by_pg(res, events: dict[int, list[dict[str, Any]]]) -> dict[tuple[str, int], dict[int, dict[str, Any]]]:
    """(pg, index) -> rank -> kernel event; PG from the kernel args (modern) or the stream (legacy)."""
    truth = res.truth
    pg_of_stream = {}
    for pg in truth["process_groups"]:
        for r in pg["ranks"]:
            if pg["kind"] == "tp":
                pg_of_stream[(r, TP_STREAM)] = pg["pg_name"]
            elif pg["kind"] == "fsdp":
                pg_of_stream[(r, 28)] = pg["pg_name"]
    out: dict[tuple[str, int], dict[int, dict[str, Any]]] = defaultdict(dict)
    for r, ev in events.items():
        counters: dict[str, int] = defaultdict(int)
        kernels = sorted((e for e in ev if e.get("cat") == "kernel" and e["name"].startswith(("ncclKernel_", "ncclDevKernel_"))),
                         key=lambda e: e["ts"])
        for e in kernels:
            pg = e["args"].get("Process Group Name") or pg_of_stream[(r, e["tid"])]
            out[(pg, counters[pg])][r] = e
            counters[pg] += 1
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory):
    cfg = SynthConfig.build(ranks=8, tp=4, iterations=8, layers=1, cpu_delay_rate=0.0, seed=11)
    return synthesize(cfg, tmp_path_factory.mktemp("base"))


@pytest.fixture(scope="module")
def legacy(tmp_path_factory: pytest.TempPathFactory):
    cfg = SynthConfig.build(ranks=8, tp=4, iterations=8, layers=1, cpu_delay_rate=0.0, seed=11, format="legacy",
                            gzip=True)
    return synthesize(cfg, tmp_path_factory.mktemp("legacy"))


@pytest.mark.parametrize("which", ["base", "legacy"])
def test_tau_and_straggler_equal_raw_json(which, request) -> None:
    res = request.getfixturevalue(which)
    colls = _nccl_by_pg(res, _raw(res))
    truth = {(c["pg"], c["index"]): c for c in res.truth["collectives"]}
    assert set(colls) == set(truth)
    for key, per_rank in colls.items():
        t = truth[key]
        assert sorted(per_rank) == t["ranks"]
        d = {r: e["dur"] for r, e in per_rank.items()}
        dmin = min(d.values())
        assert t["duration_us"] == {str(r): v for r, v in d.items()}
        assert t["tau_max_us"] == max(d.values()) - dmin
        assert t["tau_med_us"] == statistics.median(d.values()) - dmin
        assert t["mean_delay_us"] == pytest.approx(float(np.mean(list(d.values()))) - dmin, abs=1e-9)
        assert d[t["straggler_rank"]] == dmin
        ends = [e["ts"] + e["dur"] for e in per_rank.values()]
        assert max(ends) - min(ends) <= 2          # same host: end times agree
        assert t["end_spread_us"] == max(ends) - min(ends)
        assert t["bytes"] == t["out_nelems"] * 2 or t["bytes"] == t["in_nelems"] * 2


def _blocks_from_raw(res, events) -> dict[tuple[int, int], dict[int, list[tuple[str, float]]]]:
    """(iteration, position) -> rank -> [(kernel name, dur)] of the compute blocks, from raw GPU times."""
    n_tp = len(res.truth["blocks"])
    out: dict[tuple[int, int], dict[int, list[tuple[str, float]]]] = defaultdict(dict)
    for r, ev in events.items():
        colls = sorted((e for e in ev if e.get("cat") == "kernel" and e["tid"] == TP_STREAM), key=lambda e: e["ts"])
        comp = sorted((e for e in ev if e.get("cat") == "kernel" and e["tid"] == COMPUTE_STREAM), key=lambda e: e["ts"])
        k = 0
        current: list[tuple[str, float]] = []
        for e in comp:
            while k < len(colls) and colls[k]["ts"] < e["ts"] + e["dur"]:
                if k > 0:     # a block needs a preceding collective
                    out[(k // n_tp, k % n_tp)][r] = current
                current = []
                k += 1
            current.append((e["name"], e["dur"]))
        if k < len(colls):
            out[(k // n_tp, k % n_tp)][r] = current
    return out


def test_z_scores_equal_spec_formula_on_raw_kernels(base) -> None:
    raw = _blocks_from_raw(base, _raw(base))
    m = base.truth["noise"]["sample_size"]
    for block in base.truth["blocks"]:
        p = block["position"]
        rows, expected = [], []
        for inst in block["instances"]:
            per_rank = raw[(inst["iteration"], p)]
            rows.append([sum(d for _, d in per_rank[r]) for r in inst["ranks"]])
            expected.append(inst["z"])
            assert rows[-1] == inst["busy_us"]
            assert [n for n, _ in per_rank[inst["ranks"][0]]] == block["signature"]
        x = np.array(rows, dtype=float)
        xbar = x.mean(axis=1)
        s_pooled = np.sqrt(((x - xbar[:, None]) ** 2).sum() / (len(rows) * (m - 1)))
        z = (x.max(axis=1) - xbar) / s_pooled
        np.testing.assert_allclose(z, expected, rtol=0, atol=1e-12)
        # the written (integer) durations move z from the designed GEV draw by at most (1 + z) / (b - 1)
        b = block["s_pooled_us"]
        design = np.array([i["z_design"] for i in block["instances"]])
        assert np.all(np.abs(z - design) <= (1 + design) / (b - 1))
        assert block["cv"] == pytest.approx(0.02, rel=0.02)
        # span = busy + a gap that is the same on every rank of an instance: z from spans is z
        assert block["span_gap_rank_independent"]
        np.testing.assert_allclose([i["z_span"] for i in block["instances"]], expected, atol=1e-12)


def test_modern_and_legacy_describe_the_same_timeline(base, legacy) -> None:
    def strip(truth):
        colls = [{k: v for k, v in c.items() if k not in ("kernel", "written_end_spread_us")} for c in truth["collectives"]]
        blocks = [{k: v for k, v in b.items() if k != "signature"} for b in truth["blocks"]]
        return colls, blocks
    assert strip(base.truth) == strip(legacy.truth)


def test_deterministic_bytes(tmp_path: Path) -> None:
    def digest(folder: Path) -> dict[str, str]:
        return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(folder.rglob("*")) if p.is_file()}
    cfg = SynthConfig.build(ranks=4, tp=4, iterations=2, layers=1, gzip=True, seed=5)
    synthesize(cfg, tmp_path / "a")
    synthesize(cfg, tmp_path / "b")
    synthesize(SynthConfig.build(ranks=4, tp=4, iterations=2, layers=1, gzip=True, seed=6), tmp_path / "c")
    a, b, c = digest(tmp_path / "a"), digest(tmp_path / "b"), digest(tmp_path / "c")
    assert a == b
    assert a.keys() == c.keys() and all(a[k] != c[k] for k in a)


def test_only_rank_writes_the_same_file(tmp_path: Path) -> None:
    full = synthesize(SynthConfig.build(ranks=8, tp=4, iterations=2, layers=1, seed=8), tmp_path / "full")
    one = synthesize(SynthConfig.build(ranks=8, tp=4, iterations=2, layers=1, seed=8, write_ranks=(5,)), tmp_path / "one")
    assert list(one.traces) == [5]
    assert one.traces[5].read_bytes() == full.traces[5].read_bytes()
    assert one.truth["collectives"] == full.truth["collectives"]


def test_hosts_have_own_clocks(tmp_path: Path) -> None:
    cfg = SynthConfig.build(ranks=16, tp=8, fsdp=2, iterations=2, layers=1, clock_offset_us=[0, 7321], seed=2)
    res = synthesize(cfg, tmp_path)
    colls = _nccl_by_pg(res, _raw(res))
    truth = {(c["pg"], c["index"]): c for c in res.truth["collectives"]}
    for key, per_rank in colls.items():
        ends = {r: e["ts"] + e["dur"] for r, e in per_rank.items()}
        by_host = defaultdict(list)
        for r, t in ends.items():
            by_host[r // 8].append(t - 7321 * (r // 8))
        for values in by_host.values():
            assert max(values) - min(values) <= 2
        if truth[key]["group_kind"] == "fsdp":       # FSDP groups span both hosts
            assert len(by_host) == 2
            assert abs(truth[key]["written_end_spread_us"] - 7321) <= 2
            assert truth[key]["end_spread_us"] <= 2
        assert truth[key]["tau_max_us"] == max(e["dur"] for e in per_rank.values()) - min(e["dur"] for e in per_rank.values())


@pytest.mark.parametrize("kind,block", [("slow_gemm", "fwd-mlp"), ("cpu_launch_delay", "fwd-attn"),
                                        ("python_gap", "bwd-mlp"), ("blocking_sync", "bwd-attn")])
def test_plant_makes_the_planted_rank_the_straggler(kind, block, tmp_path: Path) -> None:
    plant = Plant(kind, rank=2, iteration=2, layer=0, block=block, delay_us=20000)
    cfg = SynthConfig.build(ranks=4, tp=4, iterations=4, layers=1, plants=(plant,), cpu_delay_rate=0.0, seed=4)
    res = synthesize(cfg, tmp_path)
    (record,) = res.truth["plants"]
    assert record["gpu_delay_us"] >= 20000
    target = [c for c in res.truth["collectives"] if c["planted_cause"]]
    assert len(target) == 1
    c = target[0]
    assert c["straggler_rank"] == 2 and c["tau_max_us"] > 15000
    assert c["planted_cause"]["kind"] == kind and c["iteration"] == 2
    raw = _raw(res)
    colls = _nccl_by_pg(res, raw)
    durs = {r: e["dur"] for r, e in colls[(c["pg"], c["index"])].items()}
    assert min(durs, key=durs.get) == 2
    names = {e["name"] for e in raw[2]}
    assert record["event"] in names or kind == "python_gap"
    if kind == "blocking_sync":
        # the planted sync, then the one the profiler's stop makes at the end of the trace
        sync = sorted((e for e in raw[2] if e["name"] == "cudaDeviceSynchronize"), key=lambda e: e["ts"])
        assert len(sync) == 2 and sync[0]["dur"] >= 20000
        copy = [e for e in raw[2] if e.get("cat") == "gpu_memcpy" and e["tid"] == 60]
        assert len(copy) == 1 and copy[0]["ts"] + copy[0]["dur"] <= sync[0]["ts"] + sync[0]["dur"]
    if kind == "cpu_launch_delay":
        assert max(e["dur"] for e in raw[2] if e["name"] == record["event"]) >= 20000


@pytest.mark.parametrize("kwargs,message", [
    ({"ranks": 8, "tp": 3}, "does not divide"),
    ({"ranks": 8, "tp": 2}, "multiple of the sample size"),
    ({"ranks": 8, "tp": 4, "fsdp": 3}, "--fsdp 3"),
    ({"ranks": 8, "tp": 4, "ep": 3}, "--ep 3"),
    ({"ranks": 8, "tp": 4, "gpu": "K80"}, "unknown GPU model"),
    ({"ranks": 8, "tp": 4, "gpu": "V100", "precision": "bf16"}, "no bf16"),
    ({"ranks": 8, "tp": 4, "precision": "fp8"}, "unknown precision"),
    ({"ranks": 8, "tp": 4, "format": "2022"}, "unknown format"),
    ({"ranks": 8, "tp": 4, "iterations": 0}, "iterations"),
    ({"ranks": 8, "tp": 4, "cv": 0.5}, "cv"),
    ({"ranks": 8, "tp": 4, "gev": (0.9, -0.1, 0.1)}, "sigma"),
    ({"ranks": 8, "tp": 4, "gev": (-3.0, 0.1, -0.5)}, "upper end point"),
    ({"ranks": 16, "tp": 4, "clock_offset_us": [0, 1, 2]}, "clock offsets"),
    ({"ranks": 8, "tp": 4, "plants": (Plant("slow_gemm", 9, 0, 0, "fwd-mlp", 10),)}, "rank outside"),
    ({"ranks": 8, "tp": 4, "plants": (Plant("slow_cpu", 1, 0, 0, "fwd-mlp", 10),)}, "unknown kind"),
    ({"ranks": 8, "tp": 4, "plants": (Plant("slow_gemm", 1, 0, 0, "middle", 10),)}, "block must be"),
    ({"ranks": 8, "tp": 4, "plants": (Plant("slow_gemm", 1, 50, 0, "fwd-mlp", 10),)}, "iteration outside"),
])
def test_config_errors_are_clear(kwargs, message) -> None:
    with pytest.raises(InputError, match=message) as info:
        SynthConfig.build(**kwargs)
    assert "\n" not in str(info.value) and str(info.value).startswith("synth:")


def test_default_config_is_valid() -> None:
    SynthConfig().validate()
    assert SynthConfig.build() == SynthConfig()


def test_infeasible_noise_design_is_a_clear_error(tmp_path: Path) -> None:
    cfg = SynthConfig.build(ranks=4, tp=4, iterations=3, layers=1, gev=(3.0, 0.1, 0.0))
    with pytest.raises(InputError, match="pooled sd 1"):
        synthesize(cfg, tmp_path)
    assert not any(tmp_path.rglob("*.json"))


def test_cli_runs_and_reports_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cli"
    code = main(["-q", "synth", str(out), "--ranks", "4", "--tp", "4", "--iterations", "2", "--layers", "1",
                 "--format", "legacy", "--gzip", "--plant", "slow_gemm:1:1:0:fwd-mlp:5000", "--cuda-sync-events"])
    assert code == 0
    truth = json.loads((out / "ground_truth.json").read_text())
    assert truth["schema_version"] == 1 and truth["format"] == "legacy" and len(truth["files"]) == 4
    assert len(list((out / "traces").glob("worker*_step_*.pt.trace.json.gz"))) == 4
    assert "4 legacy traces" in capsys.readouterr().out
    assert main(["-q", "synth", str(tmp_path / "bad"), "--plant", "slow_gemm:1"]) == 2
    assert "KIND:RANK:ITERATION:LAYER:BLOCK:DELAY_US" in capsys.readouterr().err
    assert main(["-q", "synth", str(tmp_path / "bad2"), "--tp", "3"]) == 2


def test_demo_study_simulates_ranks_with_groups_beyond_m(tmp_path: Path) -> None:
    assert main(["-q", "synth", str(tmp_path), "--study", "demo", "--iterations", "2", "--layers", "1"]) == 0
    parents, sizes = {}, {}
    for folder in sorted(p for p in tmp_path.iterdir() if p.is_dir()):
        truth = json.loads((folder / "ground_truth.json").read_text())
        parents[folder.name] = truth["parent"]["name"]
        sizes[folder.name] = max(pg["pg_size"] for pg in truth["process_groups"] if pg["kind"] == "tp")
        assert truth["gev"] is None and "4096" in truth["parent"]["true_straggler_delay_sd"]
    assert parents == {"a100-bf16": "normal", "a100-fp32": "normal", "h100-bf16": "lognormal",
                       "h100-fp32": "lognormal", "h200-bf16": "gumbel", "h200-fp32": "gumbel"}
    assert sizes == {"a100-bf16": 4, "a100-fp32": 16, "h100-bf16": 8, "h100-fp32": 16, "h200-bf16": 4,
                     "h200-fp32": 32}


def test_study_writes_one_folder_per_workload(tmp_path: Path) -> None:
    code = main(["-q", "synth", str(tmp_path), "--study", "gev-design", "--ranks", "4", "--tp", "4",
                 "--iterations", "2", "--layers", "1"])
    assert code == 0
    xis = {}
    for folder in sorted(p for p in tmp_path.iterdir() if p.is_dir()):
        truth = json.loads((folder / "ground_truth.json").read_text())
        xis[folder.name] = truth["gev"]["xi"]
        assert truth["workload"] == folder.name
    assert set(xis) == {"a100-bf16", "a100-fp32", "h100-bf16", "h100-fp32", "h200-bf16", "h200-fp32"}
    assert {0.0, 0.15} <= set(xis.values()) and min(xis.values()) < 0


def test_other_layouts_run(tmp_path: Path) -> None:
    res = synthesize(SynthConfig.build(ranks=16, tp=8, fsdp=2, ep=4, tp_mode="rs_ag", iterations=3, layers=1,
                                       gpu="A100", precision="fp32", seed=9, cpu_delay_rate=0.0), tmp_path)
    # FSDP and EP collectives do not break span = busy + a rank-independent gap
    assert all(b["span_gap_rank_independent"] for b in res.truth["blocks"])
    assert not [b for b in res.truth["blocks"] if b["has_gemm"] and b["max_abs_z_minus_design"] > 0.05]
    kinds = {c["group_kind"] for c in res.truth["collectives"]}
    assert kinds == {"tp", "fsdp", "ep"}
    colls = {c["collective"] for c in res.truth["collectives"]}
    assert colls == {"_reduce_scatter_base", "_allgather_base", "all_to_all"}
    assert res.truth["noise"]["samples"][0] == [0, 2, 4, 6]      # a TP group of 8: even and odd ranks
    assert res.truth["gpu_name"] == "NVIDIA A100-SXM4-80GB"


def test_refuses_to_mix_with_other_runs_traces(tmp_path: Path) -> None:
    synthesize(SynthConfig.build(ranks=8, tp=4, iterations=1, layers=1), tmp_path)
    synthesize(SynthConfig.build(ranks=8, tp=4, iterations=1, layers=1, seed=3), tmp_path)   # same names: overwritten
    with pytest.raises(InputError, match="already holds 8 trace file"):
        synthesize(SynthConfig.build(ranks=4, tp=4, iterations=1, layers=1, format="legacy"), tmp_path)
