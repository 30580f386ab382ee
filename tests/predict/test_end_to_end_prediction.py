"""End to end: synth -> blocks -> Bayesian fit -> predict recovers the generating tau(n).

Two generators. (1) The GEV design draws the pooled z-scores of every compute block from a
known GEV; the package cuts the blocks from the traces, computes the z-scores, fits a GEV of z
in PyMC and predicts the paper's tau(n) = b * E_k, whose 90% interval must contain what the
generating GEV implies (methodology §7). (2) Simulated ranks from a normal parent: the shipped model
fits the centred maxima y, and its tau(n) interval must contain the true mean straggler delay
of n ranks stated by the truth (integrated from the parent), for n = 8 to 512.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import evtsync
from evtsync.predict.tables import predicted_tax_us
from evtsync.synth import SynthConfig, synthesize

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("e2e")
    result = synthesize(SynthConfig.build(ranks=8, tp=8, iterations=40, seed=21), out)
    traces = evtsync.load_traces(result.traces_dir)
    return result.truth, evtsync.zscore_table(traces)


def test_zscores_come_from_the_generating_gev(study) -> None:
    truth, z = study
    assert len(z) >= 600 and z["z"].gt(0).all()
    assert set(z["gpu"]) == {truth["gpu"]} and set(z["precision"]) == {truth["precision"]}


def test_bayesian_fit_then_predict_recovers_tau_n(study) -> None:
    truth, z = study
    mu, sigma, xi = (truth["gev"][k] for k in ("mu", "sigma", "xi"))
    spec = replace(evtsync.load_spec(ROOT / "models" / "gev.toml"), column="z")  # the design's statistic
    fit = evtsync.fit_table(z, spec, draws=1000, tune=1000, chains=2, seed=3)  # bulk ESS >= 400
    assert bool(fit.attrs["converged"]), "the pooled GEV on ~600 z-scores must converge"
    block_sd = float(z["block_sd_us"].median())
    n = [8, 64, 512]
    summary = evtsync.tau_summary(fit, n=n, block_sd_us=block_sd, m=4, level=0.9, estimator="paper")
    expected = predicted_tax_us(block_sd, mu, sigma, xi, np.array(n), 4)
    for row, true_tau in zip(summary.sort_values("n").itertuples(), expected, strict=True):
        assert row.tau_lo_us <= true_tau <= row.tau_hi_us, (row.n, true_tau, row)
        assert row.tau_hi_us - row.tau_lo_us < 0.6 * true_tau  # informative, not vacuous


def test_simulated_ranks_bayesian_fit_of_y_covers_the_true_straggler_delay(tmp_path: Path) -> None:
    result = synthesize(SynthConfig.build(ranks=8, tp=8, iterations=40, seed=5, parent="normal"), tmp_path)
    z = evtsync.zscore_table(evtsync.load_traces(result.traces_dir))
    spec = evtsync.load_spec(ROOT / "models" / "gev.toml")
    assert spec.column == "y"
    fit = evtsync.fit_table(z, spec, draws=1000, tune=1000, chains=4, seed=3)
    assert bool(fit.attrs["converged"]) and fit.attrs["data_column"] == "y"
    truth = result.truth["parent"]["true_straggler_delay_sd"]
    summary = evtsync.tau_summary(fit, n=[8, 64, 512], block_sd_us=1.0, m=4, level=0.9)  # in units of b
    for row in summary.itertuples():
        assert row.estimator == "centred"
        assert row.tau_lo_us <= truth[str(row.n)] <= row.tau_hi_us, (row.n, truth[str(row.n)], row)
