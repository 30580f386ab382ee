"""``predict``/``bandwidth`` what-if options end to end: alpha's uncertainty carried into B*,
several eps, a FLOPS sweep with the scaling requirement, unseen hardware and presets."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.cli import main
from evtsync.core.reference import PRESETS, REFERENCE_TFLOPS
from evtsync.evt.bayesfit import save_fit
from evtsync.evt.fit import tree_from_draws
from evtsync.nccltests.alpha import alpha_from_log
from evtsync.predict.hockney import get_topology
from tests._lazy import lazy_module
from tests.conftest import DATA
from tests.predict.test_predict_population import _hier_tree

stats = lazy_module("scipy.stats")

LOG = DATA / "nccl-tests" / "all_reduce_A100-80GB_1x8_meta-gcm-fixture.txt"
S = 256 * 2**20


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["-q", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def constant_fit(tmp_path: Path) -> Path:
    """A pooled Gumbel fit whose every draw is mu = 1, sigma = 0.5: tau is known exactly."""
    tree = tree_from_draws({"mu": np.full((2, 10000), 1.0), "sigma": np.full((2, 10000), 0.5)},
                           pd.DataFrame({"cell": ["all"]}), np.random.default_rng(0).gumbel(size=30),
                           np.zeros(30, dtype=int), model_name="const", family="gumbel")
    return save_fit(tree, tmp_path / "const").parent


def _bstar_gbps(alpha: float, tau: float, n: int, eps: float = -0.5) -> float:
    topo = get_topology("ring")
    p, q = float(topo.p(n)), float(topo.q(n))
    return q * S * (1 + eps) / (-eps * (p * alpha + tau)) * 1e6 / 1e9


def test_alpha_from_log_widens_bstar_interval(constant_fit: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ring = alpha_from_log(LOG)
    assert ring.topology == "ring" and ring.n_ranks == 8
    base = ["bandwidth", "--fit", str(constant_fit), "--topology", "ring", "--n", "8", "64", "--bytes", str(S),
            "--block-sd-us", "20", "--json"]
    code, out, _ = run(capsys, *base, "--alpha-us", str(ring.alpha_us))
    assert code == 0
    point = {r["n"]: r for r in json.loads(out)}
    code, out, _ = run(capsys, *base, "--alpha-from", str(LOG))
    assert code == 0
    draws = {r["n"]: r for r in json.loads(out)}
    for n in (8, 64):
        tau = 20.0 * (1.0 + 0.5 * (np.euler_gamma + math.log(n / 4)))   # Gumbel E_k by hand
        assert point[n]["bstar_hi_gbps"] - point[n]["bstar_lo_gbps"] == pytest.approx(0, abs=1e-9)
        assert point[n]["bstar_mean_gbps"] == pytest.approx(_bstar_gbps(ring.alpha_us, tau, n), rel=1e-9)
        d = draws[n]
        assert d["alpha_source"] == "draws" and d["bstar_hi_gbps"] > d["bstar_lo_gbps"] * 1.05
        # alpha's posterior: Student-t (dof = points - 2) through the fit's own 90% interval,
        # restricted to alpha >= 0; B* falls with alpha, so its interval is the image of alpha's
        dof = ring.n_points - 2
        se = (ring.alpha_interval_us[1] - ring.alpha_us) / stats.t.ppf(0.95, dof)
        below = stats.t.cdf(-ring.alpha_us / se, dof)
        lo, hi = (ring.alpha_us + se * stats.t.ppf(below + q * (1 - below), dof) for q in (0.05, 0.95))
        assert d["alpha_lo_us"] == pytest.approx(lo, rel=0.03) and d["alpha_hi_us"] == pytest.approx(hi, rel=0.03)
        assert d["bstar_lo_gbps"] == pytest.approx(_bstar_gbps(hi, tau, n), rel=0.03)
        assert d["bstar_hi_gbps"] == pytest.approx(_bstar_gbps(lo, tau, n), rel=0.03)
        assert d["bstar_hockney_hi_gbps"] > d["bstar_hockney_lo_gbps"]


def test_several_eps_and_flops_sweep_with_scaling_requirement(constant_fit: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "fig13.svg"
    code, out, _ = run(capsys, "bandwidth", "--fit", str(constant_fit), "--topology", "full", "--n", "256,4096",
                       "--bytes", str(S), "--block-sd-us", "20", "--alpha-us", "5", "--eps=-0.5,-0.1",
                       "--flops-factor", "1..8", "--json", "--plot", str(plot))
    assert code == 0 and b"<svg" in plot.read_bytes()[:3000]
    result = json.loads(out)
    rows = result["rows"]
    assert {(r["eps"], r["flops_factor"]) for r in rows} == {(e, f) for e in (-0.5, -0.1) for f in (1, 2, 4, 8)}
    for r in result["flops_scaling"]:
        tau = 20.0 * (1.0 + 0.5 * (np.euler_gamma + math.log(r["n"] / 4)))
        growth = (2 * 5 + tau) / (2 * 5 + tau / 8)   # fully connected p = 2; B*(8)/B*(1)
        assert r["growth_median"] == pytest.approx(growth, rel=1e-9)
        assert r["scaling_reduction_median"] == pytest.approx(1 - growth / 8, rel=1e-9)
        assert r["roofline_growth"] == 8 and r["hockney_growth"] == 1
    code, out, _ = run(capsys, "bandwidth", "--topology", "full", "--n", "8,64", "--bytes", str(S), "--tau-us", "40",
                       "--alpha-us", "5", "--eps", "-0.5", "-0.1", "--json", "--plot", str(tmp_path / "p.png"))
    assert code == 0 and len(json.loads(out)) == 4


def test_predict_unseen_gpu_is_population_level(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fit = save_fit(_hier_tree(), tmp_path / "hier").parent
    code, out, _ = run(capsys, "predict", str(fit), "--preset", "NVL72", "--precision", "bf16", "--block-sd-us", "20",
                       "--json")
    assert code == 0
    (rec,) = json.loads(out)
    assert rec["cell"] == "B200|bf16" and rec["prediction_kind"] == "population" and rec["n"] == 72
    assert rec["flops_factor"] == pytest.approx(PRESETS["NVL72"]["tflops"] / REFERENCE_TFLOPS)
    code, out, _ = run(capsys, "predict", str(fit), "--gpu", "B200", "--precision", "bf16", "--n", "72",
                       "--block-sd-us", "20")
    assert code == 0 and "[population-level]" in out and "NOTE: population-level prediction" in out
    code, out, _ = run(capsys, "bandwidth", "--fit", str(fit), "--gpu", "B200", "--precision", "bf16", "--n", "72",
                       "--topology", "full", "--alpha-us", "5", "--bytes", "1e8", "--block-sd-us", "20")
    assert code == 0 and "[population-level]" in out


def test_model_without_population_refuses_through_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fit = save_fit(_hier_tree(pooling="none"), tmp_path / "raw").parent
    code, _, err = run(capsys, "predict", str(fit), "--gpu", "B200", "--precision", "bf16", "--n", "72",
                       "--block-sd-us", "20")
    assert code == 2 and "mu is one value per cell" in err and "gev-hier-gpu-precision" in err
    assert "Traceback" not in err


def test_paper_reference_numbers_for_the_flops_figure(capsys: pytest.CaptureFixture[str]) -> None:
    """The paper's §6 text, with its Gumbel tax (b = 130.4 µs, mu 1.7342, sigma 1, as the
    98.69%/37.26%/81.67% reductions imply) and alpha = 5 µs on the fully connected topology:
    Hockney's B* "up to ~53 TB/s"; at n = 4096 "bandwidth is already saturated with today's
    450 GB/s"; B* grows more slowly than the FLOPS (scaling reduction > 0, growing with F)."""
    code, out, _ = run(capsys, "bandwidth", "--topology", "full", "--n", "256", "4096", "--alpha-us", "5",
                       "--bytes", "256MiB", "--gumbel", "1.7342", "1.0", "--block-sd-us", "130.4",
                       "--flops-factor", "1,2,4,8,16", "--json")
    assert code == 0
    result = json.loads(out)
    base = {r["n"]: r for r in result["rows"] if r["flops_factor"] == 1}
    assert base[4096]["bstar_hockney_gbps"] == pytest.approx(53_700, rel=0.01)
    assert base[4096]["bstar_mean_gbps"] == pytest.approx(450, rel=0.03)
    for r in result["flops_scaling"]:
        assert r["hockney_growth"] == pytest.approx(1.0) and r["roofline_growth"] == 16
        assert 0 < r["scaling_reduction_median"] < 0.2 and r["growth_median"] < 16


def test_presets_follow_the_seeds_table_1_and_label_datasheet_values() -> None:
    """Table 1 as the seeds' summary (001) prints it, typed here by hand: GPUs per domain and
    NVLink GB/s per GPU; the TFLOPS the seeds do not give are labelled as datasheet values."""
    table_1 = {"A100": (8, 300.0), "H100": (8, 450.0), "H200": (8, 450.0), "B200": (72, 900.0)}
    for name, preset in PRESETS.items():
        n, gbps = table_1[str(preset["gpu"])]
        assert (preset["n"], preset["nvlink_gbps"]) == (n, gbps), name
        if preset["tflops"] == 989.0:  # the paper's H200 ("989 BF16 peak TFLOPS")
            assert preset["tflops_source"] == "paper"
        else:
            assert preset["tflops_source"] == "datasheet" and "NVIDIA" in preset["source"] \
                and "datasheet" in preset["source"] and "not the paper" in preset["source"], name
