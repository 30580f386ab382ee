"""``evtsync fit`` and ``evtsync bandwidth`` end to end through the CLI entry point."""

from __future__ import annotations

import json
import math
import sys
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.cli import main
from evtsync.evt import mle
from tests._lazy import lazy_module
from tests.conftest import DATA as SHARED_DATA  # the public data copied into tests/data/public

stats = lazy_module("scipy.stats")

DATA = SHARED_DATA / "evt"
KEYS = ["family", "n", "mu", "sigma", "xi", "se", "loglik", "aic"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["-q", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_fit_json_port_pirie(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", str(DATA / "portpirie.csv"), "--mle", "--family", "gev",
                       "--column", "SeaLevel", "--json")
    assert code == 0
    record = json.loads(out)
    assert list(record)[: len(KEYS)] == KEYS
    assert set(record["se"]) == {"mu", "sigma", "xi"}
    # Coles (2001) §3.4.1 values, as in test_mle
    assert round(record["mu"], 2) == 3.87 and round(record["xi"], 3) == -0.050
    assert round(record["loglik"], 2) == 4.34 and record["converged"] is True
    lo, hi = record["xi_profile_ci"]["lower"], record["xi_profile_ci"]["upper"]
    assert lo < record["xi"] < hi
    assert record["lrt_gumbel"]["deviance"] == pytest.approx(0.24, abs=0.005)


def test_fit_gumbel_glass_negated_single_column(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "fit", str(DATA / "glass.csv"), "--mle", "--family", "gumbel", "--negate", "--json")
    assert code == 0
    record = json.loads(out)
    strengths = pd.read_csv(DATA / "glass.csv")["Strength"].to_numpy()
    loc, scale = stats.gumbel_r.fit(-strengths)
    assert record["family"] == "gumbel" and record["xi"] == 0.0 and record["n"] == 63
    assert record["mu"] == pytest.approx(loc, abs=1e-6) and record["sigma"] == pytest.approx(scale, rel=1e-6)
    assert set(record["se"]) == {"mu", "sigma"} and record["column"] == "Strength"


def test_fit_zscore_table_default_column_filter_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A z-score table (column z) with two GPUs; --where selects one; NaN rows are skipped and counted."""
    rng = np.random.default_rng(5)
    z_h200 = stats.genextreme.rvs(-0.15, loc=0.9, scale=0.5, size=800, random_state=rng)
    z_a100 = stats.gumbel_r.rvs(loc=3.0, scale=0.2, size=300, random_state=rng)
    table = pd.DataFrame({
        "z": np.concatenate([z_h200, [np.nan, np.nan], z_a100]),
        "gpu": ["H200"] * 802 + ["A100"] * 300,
        "precision": "bf16",
    })
    path = tmp_path / "zscores.parquet"
    table.to_parquet(path)
    plot = tmp_path / "diag.png"
    code, out, err = run(capsys, "fit", str(path), "--mle", "--where", "gpu=H200", "--json", "--plot", str(plot))
    assert code == 0
    record = json.loads(out)
    assert record["n"] == 800 and record["skipped_rows"] == 2
    direct = mle.fit_gev(z_h200)
    assert record["xi"] == pytest.approx(direct.xi, abs=1e-9)
    assert abs(record["xi"] - 0.15) < 3.5 * record["se"]["xi"]
    assert plot.read_bytes().startswith(b"\x89PNG")
    # text output names the estimates and the interval
    code, out, _ = run(capsys, "fit", str(path), "--mle", "--where", "gpu=A100", "--family", "gumbel")
    assert code == 0 and "Gumbel MLE of 'z'" in out and "sigma" in out


def test_fit_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "fit", str(DATA / "portpirie.csv"), "--mle")
    assert code == 2 and "choose one with --column" in err and err.count("\n") == 1
    code, _, err = run(capsys, "fit", str(DATA / "portpirie.csv"), "--mle", "--column", "Nope")
    assert code == 2 and "no column 'Nope'" in err
    code, _, err = run(capsys, "fit", str(tmp_path / "missing.csv"), "--mle")
    assert code == 2 and "no such file" in err
    with pytest.raises(SystemExit):
        main(["fit", str(DATA / "glass.csv")])  # neither --mle nor --model
    with pytest.raises(SystemExit):
        main(["fit", str(DATA / "glass.csv"), "--mle", "--model", "m.toml"])
    capsys.readouterr()


def test_fit_model_delegates(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    seen = {}
    fake = types.ModuleType("evtsync.cli._bayes")
    fake.run_bayesian_fit = lambda args: seen.setdefault("args", args) and 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "evtsync.cli._bayes", fake)
    code, _, _ = run(capsys, "fit", "z.parquet", "--model", "m.toml", "--out", "fits/x", "--draws", "50",
                     "--tune", "60", "--chains", "2", "--seed", "3", "--sampler", "pymc")
    assert code == 0
    args = seen["args"]
    assert (args.model, args.out, args.draws, args.tune, args.chains, args.seed, args.sampler) == (
        "m.toml", "fits/x", 50, 60, 2, 3, "pymc")


def test_bandwidth_json_with_gumbel_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "bandwidth", "--topology", "ring,full", "--topology", "torus3d", "--n", "8", "128,512",
                       "--alpha-us", "5", "--bytes", "256MiB", "--eps", "-0.5",
                       "--gumbel", "1.7342", "1.0", "--block-sd-us", "130.4", "--m", "4", "--json")
    assert code == 0
    records = json.loads(out)
    assert [(r["topology"], r["n"]) for r in records] == [
        (t, n) for t in ("ring", "full", "torus3d") for n in (8, 128, 512)]
    for r in records:  # the columns of `bandwidth --fit` (one table builder): a point fit is one draw
        assert {"p", "q", "tau_mean_us", "bstar_mean_gbps", "bstar_hockney_gbps", "reduction_mean"} <= set(r)
        tau = 130.4 * (1.7342 + 1.0 * (np.euler_gamma + math.log(r["n"] / 4)))
        assert r["tau_mean_us"] == pytest.approx(tau, rel=1e-12) and r["tau_lo_us"] == r["tau_hi_us"] == r["tau_mean_us"]
        floor_us = r["p"] * 5 + tau
        assert r["bstar_mean_gbps"] == pytest.approx(r["q"] * 256 * 2**20 / floor_us * 1e6 / 1e9, rel=1e-12)
        assert r["reduction_mean"] == pytest.approx(tau / floor_us, rel=1e-12)
        assert r["fit_kind"] == "point" and r["model"] == "gumbel"
    full = {r["n"]: r for r in records if r["topology"] == "full"}
    assert full[8]["bstar_mean_gbps"] / full[512]["bstar_mean_gbps"] == pytest.approx(2.06, abs=0.01)


def test_bandwidth_tau_gev_flops_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "fig12.svg"
    code, out, _ = run(capsys, "bandwidth", "--topology", "full", "--n", "8", "--alpha-us", "5", "--bytes", "1e8",
                       "--tau-us", "400", "--flops-factor", "2", "--json", "--plot", str(plot))
    assert code == 0
    (rec,) = json.loads(out)
    assert rec["tau_mean_us"] == 200.0 and rec["reduction_mean"] == pytest.approx(200 / 210)
    assert b"<svg" in plot.read_bytes()[:3000]
    code, out, _ = run(capsys, "bandwidth", "--topology", "ring", "--n", "16", "--alpha-us", "5", "--bytes", "1e8",
                       "--gev", "0.5", "0.6", "0.2", "--block-sd-us", "10")
    assert code == 0 and "ring" in out and "GB/s" in out


def test_bandwidth_errors(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["bandwidth", "--topology", "full", "--alpha-us", "5", "--bytes", "1e8"]
    code, _, err = run(capsys, *base, "--n", "10", "--gumbel", "1", "1", "--block-sd-us", "1")
    assert code == 2 and "multiple of m = 4" in err
    code, _, err = run(capsys, *base, "--n", "8", "--gumbel", "1", "1")
    assert code == 2 and "--block-sd-us" in err
    code, _, err = run(capsys, *base, "--n", "8", "--tau-us", "1", "--eps", "-1.5")
    assert code == 2 and "(-1, 0)" in err
    code, _, err = run(capsys, "bandwidth", "--topology", "mesh", "--alpha-us", "5", "--bytes", "1e8",
                       "--n", "8", "--tau-us", "1")
    assert code == 2 and "unknown topology" in err


def test_bandwidth_alpha_from_log(capsys: pytest.CaptureFixture[str]) -> None:
    """alpha comes from a real nccl-tests log through alpha_from_log; a failed log is refused.

    The sweep's intercept p·alpha is read under each topology's p at the log's 16 ranks: the
    fully connected topology has p = 2 (a ring-fitted alpha, intercept / 30, is not reused);
    ``--alpha-topology ring`` declares the machine's topology and reuses its per-step alpha."""
    from evtsync.nccltests.alpha import alpha_from_log

    logs = DATA.parent / "nccl-tests"
    good = logs / "all_reduce_H100_2x8_gcp-a3mega-ztan.txt"
    ring = alpha_from_log(good)
    assert ring.n_ranks == 16 and ring.p == 30
    code, out, _ = run(capsys, "bandwidth", "--topology", "full", "--n", "8", "--alpha-from", str(good),
                       "--bytes", "1e8", "--tau-us", "0", "--json")
    assert code == 0
    (rec,) = json.loads(out)
    assert rec["alpha_us"] == pytest.approx(ring.intercept_us / 2) and rec["reduction_mean"] == 0.0
    code, out, _ = run(capsys, "bandwidth", "--topology", "full", "--n", "8", "--alpha-from", str(good),
                       "--alpha-topology", "ring", "--bytes", "1e8", "--tau-us", "0")
    assert code == 0 and "reused (--alpha-topology ring)" in out
    assert f"{ring.alpha_us:.4g} µs" in out
    bad = logs / "bad_all_reduce_RTX3090_4x1_idx20801464614-wrong-nonzero.txt"
    code, _, err = run(capsys, "bandwidth", "--topology", "full", "--n", "8", "--alpha-from", str(bad),
                       "--bytes", "1e8", "--tau-us", "0")
    assert code == 2 and "not a valid baseline" in err


def test_fit_not_converged_exit_status_and_null_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """True xi = -1.5: the GEV likelihood is unbounded at xi -> -1; the command says so (exit 1)
    and its JSON stays valid (no NaN tokens: standard errors are null)."""
    path = tmp_path / "bounded.csv"
    pd.DataFrame({"m": stats.genextreme.rvs(1.5, size=100, random_state=0)}).to_csv(path, index=False)
    code, out, _ = run(capsys, "fit", str(path), "--mle", "--no-profile", "--json")
    assert code == 1
    record = json.loads(out)
    assert record["converged"] is False and "-1" in record["message"]
    assert "NaN" not in out
