"""``evtsync inject``: a known CPU delay moves the trace consistently and the critical path with it.

The expected movement of the delayed kernel is computed here from the raw JSON of the base
trace (how far ahead of its kernel the launch returned), independently of the propagation
code: a delay shorter than that lead is absorbed, a longer one moves the kernel by the rest.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evtsync.core.errors import InputError
from evtsync.critpath import attribute
from evtsync.critpath.inject import inject_delay
from evtsync.synth import SynthConfig, synthesize

RANK, ITERATION, KERNEL = 1, 2, "nvjet"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    out = tmp_path_factory.mktemp("inject-base")
    cfg = SynthConfig.build(ranks=4, tp=4, iterations=4, layers=2, seed=3, cpu_delay_rate=0.0)
    res = synthesize(cfg, out)
    paths = sorted(str(p) for p in res.traces.values())
    return paths, res.traces[RANK], attribute(paths)


def _events(path: Path) -> list[dict]:
    return json.loads(Path(path).read_text())["traceEvents"]


def _hand_target(path: Path) -> tuple[dict, dict]:
    """The first launch in the 3rd ProfilerStep whose kernel matches KERNEL, and its kernel."""
    events = [e for e in _events(path) if e.get("ph") == "X"]
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    step = steps[ITERATION]
    kernels = {e["args"]["correlation"]: e for e in events if e.get("cat") == "kernel"}
    launches = sorted((e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                       and step["ts"] <= e["ts"] < step["ts"] + step["dur"]
                       and e["args"].get("correlation") in kernels
                       and re.search(KERNEL, kernels[e["args"]["correlation"]]["name"])), key=lambda e: e["ts"])
    launch = launches[0]
    return launch, kernels[launch["args"]["correlation"]]


@pytest.mark.parametrize("delay_ms", [0, 1, 5, 20])
def test_inject_moves_the_critical_path_to_the_cpu(tmp_path, base, delay_ms):
    paths, rank_file, baseline = base
    launch, kernel = _hand_target(rank_file)
    lead_us = kernel["ts"] - (launch["ts"] + launch["dur"])  # the launch returned this early
    expected_shift_us = max(0.0, delay_ms * 1000 - lead_us)
    result = inject_delay(paths, tmp_path / "out", rank=RANK, delay_us=delay_ms * 1000, iteration=ITERATION,
                          kernel=KERNEL)
    m = result.manifest
    assert m["launch"]["correlation"] == launch["args"]["correlation"]
    assert m["kernel"]["start_shift_us"] == pytest.approx(expected_shift_us)
    # the rewritten JSON: the launch moved by the delay, its kernel by the expected shift, and
    # nothing on that thread before the launch moved
    new = {(e.get("cat"), e["args"].get("correlation"), e["ts"]): e for e in _events(result.files[RANK])
           if e.get("ph") == "X" and isinstance(e.get("args"), dict)}
    corr = launch["args"]["correlation"]
    new_launch = next(e for (c, k, _), e in new.items() if c == launch["cat"] and k == corr)
    new_kernel = next(e for (c, k, _), e in new.items() if c == "kernel" and k == corr)
    assert new_launch["ts"] - launch["ts"] == pytest.approx(delay_ms * 1000)
    assert new_kernel["ts"] - kernel["ts"] == pytest.approx(expected_shift_us)
    old_before = sorted((e["ts"], e["dur"]) for e in _events(rank_file) if e.get("ph") == "X"
                        and e.get("tid") == launch["tid"] and e["ts"] + e["dur"] <= launch["ts"])
    new_before = sorted((e["ts"], e["dur"]) for e in _events(result.files[RANK]) if e.get("ph") == "X"
                        and e.get("tid") == launch["tid"] and e["ts"] + e["dur"] <= launch["ts"])
    assert new_before == old_before
    after = attribute(sorted(str(p) for p in result.files.values()))
    noise = float(baseline.collectives["tau_max_us"].max())
    if expected_shift_us > noise:
        first = m["first_collective_moved"]
        row = after.collectives.set_index(["pg", "index"]).loc[(first["pg"], first["index"])]
        assert row["straggler_rank"] == RANK
        assert row["path_kind"] == "launch_delay"
        assert row["cause_category"] == "launch_delay"
        # the delay sits in the CPU time before the launch; what reached the GPU (the delay
        # less the launch's lead over its kernel, which the fastest rank's head start had
        # too) is the kernel's shift, and the path explains the tax
        assert abs(row["cause_extra_us"] - expected_shift_us) <= noise
        assert row["status"] == "ok"
        assert abs(row["path_extra_us"] - row["tau_max_us"]) <= 0.05 * row["tau_max_us"]
    else:
        # absorbed by the CPU's lead: no collective moves and the attribution is unchanged
        assert m["collectives_moved"] == 0
        cols = ["pg", "index", "straggler_rank", "path_kind", "cause_name", "cause_extra_us"]
        assert after.collectives[cols].equals(baseline.collectives[cols])
    # validation (a) holds on the result (tolerance as in test_critpath_attribution), by OLS
    # and Theil-Sen, with every collective and with the explained ones
    v = after.validation.set_index(["scope", "subset"])
    for subset in ("all", "explained"):
        assert abs(v.loc[("1", subset), "slope"] - 1.0) < 0.01
        assert abs(v.loc[("1", subset), "theil_slope"] - 1.0) < 0.01
        assert v.loc[("1", subset), "r2"] > 0.99


def test_inject_rejects_bad_requests(tmp_path, base):
    paths, _, _ = base
    with pytest.raises(InputError, match="outside 0..20000"):
        inject_delay(paths, tmp_path / "a", rank=RANK, delay_us=25_000)
    with pytest.raises(InputError, match="rank 9 is not in the trace set"):
        inject_delay(paths, tmp_path / "b", rank=9, delay_us=100)
    with pytest.raises(InputError, match="iteration 40 is not among them"):
        inject_delay(paths, tmp_path / "c", rank=RANK, delay_us=100, iteration=40)
    with pytest.raises(InputError, match="occurrence 10000 is not among them"):
        inject_delay(paths, tmp_path / "d", rank=RANK, delay_us=100, iteration=0, kernel=KERNEL, occurrence=10000)
    with pytest.raises(InputError, match="holds the input traces"):
        inject_delay(paths, Path(paths[0]).parent.parent, rank=RANK, delay_us=100)


def test_cli_inject_then_attribute(tmp_path, base):
    paths, _, _ = base
    out = tmp_path / "cli"
    run = [sys.executable, "-m", "evtsync", "-q"]
    proc = subprocess.run(run + ["inject", *paths, "-o", str(out), "--rank", str(RANK), "--delay-ms", "20",
                                 "--iteration", str(ITERATION), "--kernel", KERNEL],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "collective(s) end later" in proc.stdout
    table = tmp_path / "attr.csv"
    proc = subprocess.run(run + ["attribute", str(out / "traces"), "-o", str(table), "--plot",
                                 str(tmp_path / "attr.png"), "--paths"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "GPU-only straggler paths" in proc.stdout
    for suffix in ("", "_summary", "_validation", "_paths"):
        assert (tmp_path / f"attr{suffix}.csv").is_file()
    assert (tmp_path / "attr.png").stat().st_size > 1000
    proc = subprocess.run(run + ["inject", *paths, "-o", str(tmp_path / "x"), "--rank", "1", "--delay-ms", "30"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("evtsync: error: inject: delay 30000")


def test_injection_at_trace_start_is_accounted(tmp_path):
    """Issue 15's case: 8 ranks, seed 5, 20 ms before rank 3's first launch. The moved
    collective (the first of its PG, no previous one) must carry the delay in its cause and
    its tax in its path; its PG's regression keeps slope 1 with the injected row in it."""
    base = synthesize(SynthConfig.build(ranks=8, seed=5), tmp_path / "S")
    result = inject_delay(sorted(str(p) for p in base.traces.values()), tmp_path / "I", rank=3, delay_us=20_000)
    first = result.manifest["first_collective_moved"]
    after = attribute(sorted(str(p) for p in result.files.values()))
    row = after.collectives.set_index(["pg", "index"]).loc[(first["pg"], first["index"])]
    assert row["straggler_rank"] == 3
    assert row["status"] == "ok"
    assert abs(row["cause_extra_us"] - 20_000) <= 0.05 * 20_000
    assert abs(row["path_extra_us"] - row["tau_max_us"]) <= 0.05 * row["tau_max_us"]
    assert row["path_kind"] == row["cause_category"] == "launch_delay"
    v = after.validation[after.validation["subset"] == "all"].set_index("scope")
    assert abs(v.loc[str(first["pg"]), "slope"] - 1.0) < 0.01
    assert abs(v.loc[str(first["pg"]), "theil_slope"] - 1.0) < 0.01


def test_demo_gpu_only_share_matches_truth(tmp_path):
    """The GPU-only straggler-path share of a demo workload against its ground truth: a
    collective has a CPU cause when a planted CPU cause or a random CPU delay made its
    straggler's GPU wait (``planted_cause`` / ``cpu_noise`` of ground_truth.json)."""
    res = synthesize(SynthConfig.build(gpu="H100", precision="bf16", seed=2, gzip=True), tmp_path / "demo")
    truth = res.truth["collectives"]

    def cpu_caused(c: dict) -> bool:
        plant = c.get("planted_cause")
        if plant and plant["kind"] != "slow_gemm":
            return True
        return any(n["rank"] == c["straggler_rank"] and n["gpu_idle_us"] > 0 for n in c.get("cpu_noise") or [])

    truth_share = 1.0 - sum(cpu_caused(c) for c in truth) / len(truth)
    result = attribute(sorted(str(p) for p in res.traces.values()))
    table = result.collectives
    attributed = table[table["status"].isin(["ok", "unexplained"])]
    share = float((attributed["path_kind"] == "gpu_only").mean())
    assert abs(share - truth_share) <= 0.02, (share, truth_share)
    assert abs(result.gpu_only_share - truth_share) <= 0.02


def test_cli_inject_sweep(tmp_path, base):
    """``evtsync inject --sweep 0,1,5,20``: absorbed delays leave the next collective's cause
    on the GPU; the 20 ms one moves it to the delayed rank's CPU, with an extra between
    the delay less the launch's lead (read from the raw JSON here) and the delay."""
    paths, rank_file, _ = base
    launch, kernel = _hand_target(rank_file)
    lead_us = kernel["ts"] - (launch["ts"] + launch["dur"])
    out = tmp_path / "sweep"
    proc = subprocess.run([sys.executable, "-m", "evtsync", "-q", "inject", *paths, "-o", str(out), "--rank", str(RANK),
                           "--iteration", str(ITERATION), "--kernel", KERNEL, "--sweep", "0,1,5,20"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    import pandas as pd

    table = pd.read_csv(out / "sweep.csv").set_index("delay_ms")
    assert list(table.index) == [0, 1, 5, 20]
    assert table["lead_us"].eq(lead_us).all()
    for d in (0, 1, 5):
        assert table.loc[d, "collectives_moved"] == 0 and not table.loc[d, "cause_moved"]
        assert table.loc[d, "path_kind"] == "gpu_only"
    row = table.loc[20]
    assert row["cause_moved"] and row["straggler_rank"] == RANK and row["path_kind"] == "launch_delay"
    assert 20_000 - lead_us - 500 <= row["cause_extra_us"] <= 20_000 + 50
    assert row["within_lead"]
    for d in (0, 1, 5, 20):
        assert (out / f"delay-{d}ms" / "traces").is_dir()
    bad = subprocess.run([sys.executable, "-m", "evtsync", "inject", *paths, "-o", str(tmp_path / "x"), "--rank", "1",
                          "--sweep", "0,1", "--delay-ms", "2"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "give one of --delay-ms" in bad.stderr


def test_gpu_only_share_with_cpu_noise_matches_truth(tmp_path):
    """With random CPU delays that reach the GPU (ground truth ``cpu_noise`` with
    ``gpu_idle_us`` > 0 on the straggler), the collectives they hit get a CPU path kind and
    the others a GPU-only one: the share within 2 points, and collective by collective."""
    cfg = SynthConfig.build(ranks=4, tp=4, iterations=6, layers=2, seed=3, cpu_delay_rate=0.1,
                            cpu_delay_mean_us=2000.0)
    res = synthesize(cfg, tmp_path / "noisy")
    truth = {(str(c["pg"]), int(c["index"])): any(n["rank"] == c["straggler_rank"] and n["gpu_idle_us"] > 0
                                                  for n in c.get("cpu_noise") or [])
             for c in res.truth["collectives"]}
    assert 0 < sum(truth.values()) < len(truth)  # the case has both kinds
    table = attribute(sorted(str(p) for p in res.traces.values()), keep_paths=False).collectives
    found = {(str(r.pg), int(r.index)): r.path_kind != "gpu_only" for r in table.itertuples()}
    truth_share = 1 - sum(truth.values()) / len(truth)
    share = 1 - sum(found.values()) / len(found)
    assert abs(share - truth_share) <= 0.02
    agree = sum(found[k] == v for k, v in truth.items()) / len(truth)
    assert agree >= 0.98
