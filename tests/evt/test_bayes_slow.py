"""Slow statistical studies of the Bayesian GEV (run with ``pytest -m slow``).

- recovery of per-cell xi (0, 0.15, negative) at realistic sizes: 90% intervals;
- simulation-based calibration: interval coverage within binomial error of nominal;
- the glass-fibre data set against maximum likelihood (weak priors);
- LOO prefers the true family.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.evt import gev
from evtsync.evt.spec import load_spec, parse_spec
from tests._lazy import lazy_module
from tests.conftest import DATA as SHARED_DATA  # the public data copied into tests/data/public
from tests.evt.test_bayes_fit import WEAK_GEV

# evtsync modules that import PyMC, PyTensor, xarray or numba: imported on first use, not at collection (issue 48)
evt_compare = lazy_module("evtsync.evt.compare")
evt_fit = lazy_module("evtsync.evt.fit")
evt_model = lazy_module("evtsync.evt.model")
stats = lazy_module("scipy.stats")

pytestmark = pytest.mark.slow

MODELS = Path(__file__).resolve().parents[2] / "models"

# xi = xi0 + delta_gpu + delta_precision: bf16 is 0.15 above fp32; A100 and H200 equal, B200 0.2 lower.
TRUTH6 = pd.DataFrame({
    "gpu": ["H200", "H200", "A100", "A100", "B200", "B200"],
    "precision": ["bf16", "fp32"] * 3,
    "mu": [0.80, 0.75, 0.90, 0.85, 0.70, 0.72],
    "sigma": [0.50, 0.45, 0.55, 0.50, 0.40, 0.42],
    "xi": [0.15, 0.0, 0.15, 0.0, -0.05, -0.20],
})


def test_hierarchical_recovery_90_percent_intervals():
    """18 cell parameters, each 90% interval should contain its truth; the count of hits is
    Binomial(18, 0.9) for a calibrated posterior, so at least 13 (P(X <= 12) = 0.6%)."""
    table = evt_model.simulate_zscore_table(TRUTH6, 3000, seed=101)
    spec = load_spec(MODELS / "gev-hier-gpu-precision.toml")
    tree = evt_fit.fit_table(table, spec, draws=1000, tune=1000, chains=2, seed=5)
    assert evt_fit.is_converged(tree), tree.attrs["convergence"]
    params = evt_fit.cell_parameters(tree)
    hits, xi_hits = 0, 0
    for _, row in TRUTH6.iterrows():
        cell = f"{row['gpu']}|{row['precision']}"
        for name in ("mu", "sigma", "xi"):
            lo, hi = np.quantile(params[name].sel(cell=cell).values, [0.05, 0.95])
            inside = lo <= row[name] <= hi
            hits += inside
            xi_hits += inside and name == "xi"
    assert hits >= 13, hits
    assert xi_hits >= 4, xi_hits  # Binomial(6, 0.9): P(X <= 3) = 1.6%


CALIBRATION_SPEC = """
name = "gev-calibration"
family = "gev"
[data]
column = "z"
[mu]
prior = { dist = "normal", mu = 0.8, sigma = 0.2 }
[sigma]
prior = { dist = "lognormal", mu = -0.7, sigma = 0.2 }
[xi]
prior = { dist = "normal", mu = 0.05, sigma = 0.1 }
"""


def test_simulation_based_calibration_coverage():
    """Parameters drawn from the prior, data from them, 90% posterior intervals: their coverage
    over the prior is exactly 90% for a correct sampler and likelihood (SBC). 30 data sets x 3
    parameters = 90 intervals; Binomial(90, 0.9) has sd 2.85, so hits within 81 +- 9 (3.2 sd)."""
    spec = parse_spec(CALIBRATION_SPEC, "calibration.toml")
    rng = np.random.default_rng(2024)
    hits = 0
    n_sets = 30
    for i in range(n_sets):
        truth = {"mu": rng.normal(0.8, 0.2), "sigma": np.exp(rng.normal(-0.7, 0.2)), "xi": rng.normal(0.05, 0.1)}
        z = gev.rvs(truth["mu"], truth["sigma"], truth["xi"], rng=rng, size=200)
        tree = evt_fit.fit_table(pd.DataFrame({"z": z}), spec, draws=400, tune=300, chains=1, seed=i)
        for name, value in truth.items():
            lo, hi = np.quantile(tree["posterior"][name].values, [0.05, 0.95])
            hits += lo <= value <= hi
    assert abs(hits - 0.9 * 3 * n_sets) <= 9, hits




def test_glass_posterior_agrees_with_mle():
    """Negated glass-fibre strengths (Coles 2001: mu = -1.64, sigma = 0.27, xi = -0.084): the
    posterior median within half a standard error of the MLE (standard errors from the
    package's independent MLE module), posterior sd within 30% of the standard error."""
    from evtsync.evt import mle

    z = -pd.read_csv(SHARED_DATA / "evt" / "glass.csv")["Strength"].to_numpy()
    ref = mle.fit_mle(z, "gev")
    assert (round(ref.mu, 2), round(ref.sigma, 2), round(ref.xi, 3)) == (-1.64, 0.27, -0.084)
    tree = evt_fit.fit_table(pd.DataFrame({"z": z}), parse_spec(WEAK_GEV, "weak.toml"), draws=2000, tune=500,
                     chains=2, seed=3)
    assert evt_fit.is_converged(tree), tree.attrs["convergence"]
    for name in ("mu", "sigma", "xi"):
        draws = tree["posterior"][name].values.ravel()
        se = ref.se[name]
        assert abs(np.median(draws) - getattr(ref, name)) < 0.5 * se, name
        assert abs(draws.std() / se - 1) < 0.3, name


def _pooled_fits(z, names, seed):
    table = pd.DataFrame({"y": z})  # the shipped models fit the column y
    return [evt_fit.fit_table(table, load_spec(MODELS / f"{n}.toml"), draws=500, tune=500, chains=2, seed=seed)
            for n in names]


def test_loo_does_not_prefer_gev_on_gumbel_data():
    z = stats.gumbel_r.rvs(loc=0.8, scale=0.5, size=3000, random_state=np.random.default_rng(7))
    trees = _pooled_fits(z, ["gumbel", "gev"], seed=1)
    table, words = evt_compare.compare_fits(trees)
    row = table.set_index("model")
    if table.iloc[0]["model"] == "gev":
        # GEV may edge ahead by chance, but not by more than 2 SE
        assert row.loc["gumbel", "elpd_diff"] < 2 * row.loc["gumbel", "diff_se"], words
    assert "no clear preference" in words or words.startswith("gumbel")


def test_loo_prefers_heavy_tail_on_frechet_data():
    z = gev.rvs(0.8, 0.5, 0.15, rng=np.random.default_rng(8), size=5000)
    trees = _pooled_fits(z, ["gumbel", "frechet", "gev"], seed=2)
    table, words = evt_compare.compare_fits(trees)
    row = table.set_index("model")
    assert table.iloc[0]["model"] in ("frechet", "gev"), words
    assert row.loc["gumbel", "elpd_diff"] > 2 * row.loc["gumbel", "diff_se"], words


def test_same_seed_same_draws_with_a_fresh_compilation_cache(tmp_path):
    """The first run on a machine compiles the model; later runs load it from PyTensor's cache.
    Both must give the same draws for the same seed (fast-math broke this)."""
    import os
    import subprocess
    import sys

    script = (
        "import numpy as np, pandas as pd\n"
        "from evtsync.evt.fit import fit_table\n"
        "from evtsync.evt.spec import load_spec\n"
        "from evtsync.evt import gev\n"
        f"spec = load_spec({str(MODELS / 'gev.toml')!r})\n"
        "z = gev.rvs(0.8, 0.5, 0.1, rng=np.random.default_rng(0), size=3000)\n"
        "tree = fit_table(pd.DataFrame({'y': z}), spec, draws=200, tune=200, chains=2, seed=4)\n"
        "print(repr(float(tree['posterior']['xi'].values.sum())))\n"
    )
    env = dict(os.environ, PYTENSOR_FLAGS=f"base_compiledir={tmp_path / 'pytensor'}")
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
            for _ in range(2)]
    first, second = (r.stdout.strip().splitlines()[-1] for r in runs)
    assert first == second


def _benchmark(name: str):
    """``benchmarks/NAME.py`` as a module (the studies' one home for their cases and code)."""
    import importlib.util

    path = Path(__file__).resolve().parents[2] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _study():
    """The simulation study's cases (benchmarks/study_hier_gev.py: one home for the grid)."""
    return _benchmark("study_hier_gev")


@pytest.mark.parametrize("name", ["spread 0, 2000 per cell", "spread 0.15, 200 per cell",
                                  "spread 0.05, mixed sizes"])
def test_main_model_samples_cleanly_from_no_effect_to_strong_effect(name):
    """Issue 19: at the default settings, 0 divergences with no effect and with a strong one,
    and the 6 cell xi's 90% intervals cover their truth (Binomial(6, 0.9): P(X <= 3) = 1.6%)."""
    study = _study()
    case = next(c for c in study.cases() if c["name"] == name)
    result = study.run_case(case, seed=11)
    assert result["divergences"] == 0, result["convergence"]
    assert sum(c["xi"]["inside"] for c in result["cells"]) >= 4, result["cells"]


def test_off_surface_small_cell_is_covered_or_flagged():
    """Issue 19's case: a 200-z-score cell with xi = 0.05 where the additive surface of five
    5,000-z-score cells says 0.30. Without a cell term it got 0.282 [0.258, 0.307] and
    'converged'. Now its 90% interval must contain 0.05, or the posterior predictive check
    must name the cell."""
    study = _study()
    case = next(c for c in study.cases() if c["name"].startswith("off-surface"))
    result = study.run_case(case, seed=11)
    small = next(c for c in result["cells"] if c["n"] == 200)
    assert small["xi"]["inside"] or ("does not fit" in result["ppc"] and small["cell"] in result["ppc"]), small
    assert result["divergences"] == 0, result["convergence"]


def _sbc():
    """benchmarks/sbc_hier_gev.py as a module (the SBC study of the main model)."""
    return _benchmark("sbc_hier_gev")


def test_sbc_thinning_and_uniformity_test_on_hand_made_ranks():
    """Thinning keeps every 20th draw of each chain of 2 x 1000 (99 draws, hand-listed ends);
    ranks 0..99 once each fill the 10 bins evenly (chi-square 0, p = 1); ranks all 50 fill one
    bin (p ~ 0)."""
    sbc = _sbc()
    draws = np.arange(2000).reshape(2, 1000)  # value = chain * 1000 + draw
    kept = sbc.thin(draws)
    assert len(kept) == 99 == sbc.THIN_DRAWS
    assert (kept[0], kept[1], kept[49], kept[50], kept[-1]) == (0, 20, 980, 1000, 1960)
    even = [{"status": "fitted", "converged": True, "ranks": {"xi0": k}} for k in range(100)]
    table = sbc.uniformity(even)
    assert table.loc[0, "counts"] == [10] * 10 and table.loc[0, "chi2"] == 0 and table.loc[0, "p_value"] == 1
    piled = [{"status": "fitted", "converged": True, "ranks": {"xi0": 50}} for _ in range(100)]
    assert sbc.uniformity(piled).loc[0, "p_value"] < 1e-100
    # refused and (for converged_only) non-converged replicates are left out of the ranks, and counted
    mixed = even[:10] + [{"status": "refused", "reason": "scale"},
                         {"status": "fitted", "converged": False, "ranks": {"xi0": 3}}]
    assert sbc.uniformity(mixed).loc[0, "replicates"] == 11
    assert sbc.uniformity(mixed, converged_only=True).loc[0, "replicates"] == 10


def test_sbc_runs_resumes_and_writes_its_histogram(tmp_path):
    """Two replicates, then a rerun asking for three adds only the third (resumable); every
    rank lies in 0..99 for xi0, the spreads and every cell's xi, mu and sigma; the summary
    counts them and the rank-histogram PNG is written."""
    import subprocess
    import sys

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "sbc_hier_gev.py"
    out = tmp_path / "sbc.jsonl"
    for total in (2, 3):
        subprocess.run([sys.executable, str(script), "--replicates", str(total), "--n", "100", "--out", str(out)],
                       check=True, capture_output=True, text=True)
    sbc = _sbc()
    records = sbc.read_records(out)
    assert sorted(r["replicate"] for r in records) == [0, 1, 2]
    cells = [f"{g}|{p}" for g in ("A100", "B200", "H200") for p in ("bf16", "fp32")]
    expected = {"xi0", "xi_sd_gpu", "xi_sd_precision", "xi_sd_cell", "mu_mean", "mu_sd", "sigma_gmean",
                "log_sigma_sd"} | {f"{n}[{c}]" for n in ("xi", "mu", "sigma") for c in cells}
    for r in records:
        assert r["status"] in ("fitted", "refused"), r
        if r["status"] == "fitted":
            assert set(r["ranks"]) == expected
            assert all(0 <= v <= sbc.THIN_DRAWS for v in r["ranks"].values()), r["ranks"]
            assert (r["draws"], r["tune"], r["chains"]) == (2000, 2000, 4)  # the main model's own (issue 45)
    png = tmp_path / "ranks.png"
    done = subprocess.run([sys.executable, str(script), "--summary", str(out), "--plot", str(png)],
                          check=True, capture_output=True, text=True)
    assert done.stdout.startswith("replicates: 3 (")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_reused_compiled_model_gives_the_draws_of_a_fresh_compilation():
    """fit_table's compiled_cache: a model compiled on data set A and reused on B (same 3 x 2
    structure) gives bit for bit the draws of a fresh compilation on B with the same seed, so
    nothing of A's data is left in the reused model; the fit records the reuse."""
    spec = load_spec(MODELS / "gev-hier-gpu-precision.toml")
    truth_b = TRUTH6.assign(xi=TRUTH6["xi"] + 0.1, mu=TRUTH6["mu"] - 0.2)
    table_a = evt_model.simulate_zscore_table(TRUTH6, 150, seed=1)
    table_b = evt_model.simulate_zscore_table(truth_b, 150, seed=2)
    cache: dict = {}
    first = evt_fit.fit_table(table_a, spec, draws=200, tune=200, seed=3, compiled_cache=cache)
    reused = evt_fit.fit_table(table_b, spec, draws=200, tune=200, seed=3, compiled_cache=cache)
    fresh = evt_fit.fit_table(table_b, spec, draws=200, tune=200, seed=3)
    assert (first.attrs["compiled_model_reused"], reused.attrs["compiled_model_reused"]) == (0, 1)
    assert len(cache) == 1
    for name in ("xi", "mu", "sigma", "xi0", "xi_sd_cell", "log_sigma_sd"):
        np.testing.assert_array_equal(reused["posterior"][name].values, fresh["posterior"][name].values)
    assert not np.array_equal(first["posterior"]["xi"].values, fresh["posterior"]["xi"].values)


def test_extend_continues_the_same_chains_when_only_ess_fails():
    """[sampling] extend = 1: a fit whose bulk ESS is short of 400 (2 chains x 100 draws) and
    has no divergence continues its chains to 200 draws. The longer run is the same chains
    (its first 100 draws are those of the run without extension, same seed), the fit says
    what the shorter run gave, and the verdict is that of the longer run."""
    from evtsync.evt.fit import check_convergence
    from evtsync.evt.spec import SamplerConfig

    spec = load_spec(MODELS / "gev.toml")
    table = pd.DataFrame({"y": gev.rvs(0.8, 0.5, 0.1, rng=np.random.default_rng(4), size=500)})
    plain = evt_fit.fit_table(table, spec, sampler=SamplerConfig(draws=100, tune=300, chains=2, seed=7))
    assert not evt_fit.is_converged(plain) and plain.attrs["divergences"] == 0, plain.attrs["convergence"]
    assert plain.attrs["extended"] == "no"
    longer = evt_fit.fit_table(table, spec, sampler=SamplerConfig(draws=100, tune=300, chains=2, seed=7, extend=1))
    assert longer["posterior"].sizes["draw"] == 200 and longer.attrs["draws"] == 200
    np.testing.assert_array_equal(longer["posterior"]["xi"].values[:, :100], plain["posterior"]["xi"].values)
    assert longer.attrs["extended"].startswith("100 draws per chain gave NOT CONVERGED")
    assert "chains continued to 200 draws" in longer.attrs["convergence"]
    assert bool(longer.attrs["converged"]) == check_convergence(longer).converged


def test_extend_setting_is_read_from_the_spec_and_checked():
    """[sampling] extend: absent = 0 (the default), an integer >= 0, anything else named in the error."""
    from evtsync.core.errors import ModelSpecError

    base = (MODELS / "gev.toml").read_text()
    assert parse_spec(base, "gev.toml").sampler_config().extend == 0
    assert parse_spec(base + "\n[sampling]\nextend = 2\n", "x.toml").sampler_config().extend == 2
    with pytest.raises(ModelSpecError, match="sampling.extend"):
        parse_spec(base + "\n[sampling]\nextend = -1\n", "x.toml")
