"""The estimator's report content in the one-module-per-section report (issue 29, ported after the
merge of the section split): the demo truth of simulated ranks against tau(n) of the main model
and of the paper's estimator, the paper's rows in the tau table, the prior-dominated labels and
the "beyond m" table of predicted vs measured.

Every expected value is written here by hand from the small tables the tests write.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from evtsync.pipeline.truth import truth_delay_table, truth_tables
from evtsync.predict.tables import beyond_data_accuracy
from evtsync.report.context import ReportContext
from evtsync.report.markdown import Table, render_markdown
from evtsync.report.sections import prediction as prediction_sec
from evtsync.report.sections import pvm as pvm_sec
from evtsync.report.sections import truth as truth_sec
from evtsync.report.sections import whatif as whatif_sec
from evtsync.report.sections import xi as xi_sec

MAIN = "gev-hand"


def _write(run: Path, name: str, frame: pd.DataFrame) -> None:
    (run / "tables").mkdir(parents=True, exist_ok=True)
    frame.to_parquet(run / "tables" / f"{name}.parquet")


def _truth() -> dict:
    """A simulated-ranks truth as the synth writes it: no GEV, a parent with the true delay per n."""
    return {"workload": "w", "gpu": "H100", "precision": "bf16", "gev": None,
            "parent": {"name": "normal", "true_straggler_delay_sd": {"4": 1.0, "8": 1.5, "512": 3.0, "4096": 3.5}},
            "config": {"sample_size": 4},
            "process_groups": [{"pg_size": 8, "kind": "tp"}, {"pg_size": 2, "kind": "dp"}],
            "collectives": []}


def _tau() -> pd.DataFrame:
    """tau rows with b = 2 µs: the main model at n = 4, 8, 512 (none at 4096); the paper's at 4, 8."""
    rows = []
    for n, (lo, mean, hi) in {4: (1.8, 2.0, 2.2), 8: (2.8, 3.2, 3.6), 512: (6.2, 6.6, 7.0)}.items():
        rows.append({"model": MAIN, "estimator": "centred", "gpu": "H100", "precision": "bf16", "n": n,
                     "b_us": 2.0, "tau_lo_us": lo, "tau_mean_us": mean, "tau_hi_us": hi, "converged": True})
    for n, (lo, mean, hi) in {4: (1.9, 2.0, 2.1), 8: (2.4, 2.6, 2.8)}.items():
        rows.append({"model": "mle-gev", "estimator": "paper", "gpu": "H100", "precision": "bf16", "n": n,
                     "b_us": 2.0, "tau_lo_us": lo, "tau_mean_us": mean, "tau_hi_us": hi, "converged": True})
    return pd.DataFrame(rows)


def test_truth_delay_of_simulated_ranks_by_hand() -> None:
    """tau/b over the true delay and whether the interval covers it, at n = m, the TP group size
    and 512 (4096: no tau row of either model, so no row); no xi row for a truth without GEV."""
    delay = truth_delay_table({"w": _truth()}, _tau(), MAIN)
    got = {(r.model, r.n): r for r in delay.itertuples()}
    assert set(got) == {(MAIN, 4), (MAIN, 8), (MAIN, 512), ("mle-gev", 4), ("mle-gev", 8)}
    # main at n = 8: tau/b = 1.6 [1.4, 1.8], truth 1.5 -> ratio 1.0667, covered
    r = got[(MAIN, 8)]
    assert r.ratio_mean == pytest.approx(1.6 / 1.5) and r.ratio_lo == pytest.approx(1.4 / 1.5)
    assert r.covers and r.measured_here and r.estimator == "centred"
    # the paper at n = 8: tau/b = 1.3 [1.2, 1.4] misses 1.5
    r = got[("mle-gev", 8)]
    assert r.ratio_mean == pytest.approx(1.3 / 1.5) and not r.covers and r.estimator == "paper"
    # main at 512: 3.3 [3.1, 3.5] against 3.0: missed; n = 4 is not the TP group
    assert not got[(MAIN, 512)].covers and not got[(MAIN, 4)].measured_here
    xi, att = truth_tables({"w": _truth()}, None, None, None, MAIN)
    assert xi.empty and list(att["workload"]) == ["w"]


def test_truth_section_shows_the_delay_against_both_estimators(tmp_path: Path) -> None:
    run = tmp_path / "run"
    xi, att = truth_tables({"w": _truth()}, None, None, None, MAIN)
    _write(run, "truth_xi", xi)
    _write(run, "truth_attribution", att)
    _write(run, "truth_delay", truth_delay_table({"w": _truth()}, _tau(), MAIN))
    ctx = ReportContext(run, tmp_path / "out", {"demo": True, "stages": {"demo": {"status": "done"}}})
    sections = truth_sec.build(ctx)
    md = render_markdown("t", sections, tmp_path)
    assert "simulate ranks" in md and "Planted GEV" not in md
    table = next(i for i in sections[0].items if isinstance(i, Table)).frame
    assert list(table["n"]) == [4, 8, 512]
    assert list(table[f"{MAIN} (centred): covers"]) == [True, True, False]
    assert table["mle-gev (paper): covers"].tolist()[:2] == [True, False]
    assert pd.isna(table["mle-gev (paper): covers"].iloc[2])  # no paper row at 512
    assert list(table["measured here"]) == ["", "yes", ""]


def test_tau_table_shows_the_paper_estimator_beside_the_main_model(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write(run, "tau", _tau().assign(prediction_kind="cell").astype({"n": int}))
    manifest = {"stages": {"prediction": {"status": "done", "summary": {"main_model": MAIN}}}}
    ctx = ReportContext(run, tmp_path / "out", manifest)
    sections = prediction_sec.build(ctx)
    # a run folder from before ranktail was the default: the main model's rows are the headline,
    # the paper's the labelled alternative
    headline, others = [i for i in sections[0].items if isinstance(i, Table)]
    assert set(zip(headline.frame["model"], headline.frame["estimator"], strict=True)) == {(MAIN, "centred")}
    assert set(zip(others.frame["model"], others.frame["estimator"], strict=True)) == {("mle-gev", "paper")}
    assert "biased low" in others.caption
    paper = others.frame[others.frame["model"] == "mle-gev"].iloc[0]
    assert paper["n=8 µs [90% interval]"].startswith("2.6")


def test_tau_headline_is_the_rank_model_default_with_labelled_fallback_and_alternatives(tmp_path: Path) -> None:
    """The run's tau table marks the default estimator's rows: the rank model's for a measured cell, the main
    model's centred rows where it fell back (estimator_note); the headline shows those, labelled."""
    run = tmp_path / "run"
    base = _tau().assign(prediction_kind="cell").astype({"n": int})
    main = base[base["model"] == MAIN]
    # the rank model's point is its posterior median (here 3.1 at n = 8, below the mean 3.2); the GEV rows' the mean
    rank = main.assign(model="rankmodel", estimator="rankmodel", default_estimate=True, estimator_note="",
                       tau_point_us=main["tau_mean_us"] - 0.1, point_estimate="posterior median")
    fallback = main.assign(gpu="B200", default_estimate=True, estimator_note="fallback to the centred estimator",
                           tau_point_us=main["tau_mean_us"], point_estimate="posterior mean")
    rest = base.assign(default_estimate=False, estimator_note="", tau_point_us=base["tau_mean_us"],
                       point_estimate="posterior mean")
    _write(run, "tau", pd.concat([rank, fallback, rest], ignore_index=True))
    manifest = {"stages": {"prediction": {"status": "done", "summary": {"main_model": MAIN}}}}
    sections = prediction_sec.build(ReportContext(run, tmp_path / "out", manifest))
    headline, others = [i for i in sections[0].items if isinstance(i, Table)]
    assert "rankmodel (default; point: posterior median)" in headline.caption
    assert "centred (fallback, labelled; point: posterior mean)" in headline.caption
    h = headline.frame.set_index("gpu")
    assert h.loc["H100", "n=8 µs [90% interval]"].startswith("3.1 ")  # the median, not the mean 3.2
    assert h.loc["B200", "n=8 µs [90% interval]"].startswith("3.2 ")
    assert h.loc["H100", "point_estimate"] == "posterior median" and h.loc["B200", "point_estimate"] == "posterior mean"
    assert h.loc["H100", "estimator"] == "rankmodel" and h.loc["H100", "fallback"] == ""
    assert h.loc["B200", "estimator"] == "centred" and h.loc["B200", "fallback"] == "yes"
    assert set(others.frame["estimator"]) == {"centred", "paper"}
    assert any("Not every headline row" in str(getattr(i, "text", i)) for i in sections[0].items)


def test_a_fallback_row_carries_its_own_interval_wording(tmp_path: Path) -> None:
    """Issue 45: the headline's fallback rows (centred, a GEV posterior) were captioned with the GPD's
    interval wording ("GPD grid posterior and Bayesian bootstrap"); each estimator's rows now say how
    their own interval is made."""
    run = tmp_path / "run"
    main = _tau().assign(prediction_kind="cell").astype({"n": int})
    main = main[main["model"] == MAIN]
    rank = main.assign(model="ranktail", estimator="ranktail", default_estimate=True, estimator_note="")
    fallback = main.assign(gpu="B200", default_estimate=True, estimator_note="fallback to the centred estimator")
    _write(run, "tau", pd.concat([rank, fallback], ignore_index=True))
    manifest = {"stages": {"prediction": {"status": "done", "summary": {"main_model": MAIN}}}}
    sections = prediction_sec.build(ReportContext(run, tmp_path / "out", manifest))
    headline = next(i for i in sections[0].items if isinstance(i, Table))
    assert "ranktail: GPD grid posterior and Bayesian bootstrap" in headline.caption
    assert "centred (fallback rows): posterior of the GEV model: credible interval" in headline.caption
    # only ranktail rows: its own wording alone
    _write(run, "tau", rank.reset_index(drop=True))
    sections = prediction_sec.build(ReportContext(run, tmp_path / "out", manifest))
    headline = next(i for i in sections[0].items if isinstance(i, Table))
    assert "(GPD grid posterior and Bayesian bootstrap)" in headline.caption and "credible" not in headline.caption


def test_tau_values_beyond_the_cells_rank_values_are_marked(tmp_path: Path) -> None:
    """A ranktail row whose n exceeds its cell's N rank values (300 here, n = 512 beyond it, 4 and 8
    within) is marked † in the table, the table says N, and a note says what it means."""
    run = tmp_path / "run"
    main = _tau().assign(prediction_kind="cell").astype({"n": int})
    main = main[main["model"] == MAIN]
    rank = main.assign(model="ranktail", estimator="ranktail", default_estimate=True, estimator_note="",
                       tau_point_us=main["tau_mean_us"], point_estimate="posterior median", n_values=300,
                       beyond_data=main["n"] > 300,
                       beyond_data_accuracy=[beyond_data_accuracy(n / 300) if n > 300 else "" for n in main["n"]])
    _write(run, "tau", rank.reset_index(drop=True))
    manifest = {"stages": {"prediction": {"status": "done", "summary": {"main_model": MAIN}}}}
    sections = prediction_sec.build(ReportContext(run, tmp_path / "out", manifest))
    headline = next(i for i in sections[0].items if isinstance(i, Table))
    row = headline.frame.iloc[0]
    assert row["N rank values"] == "300"
    assert row["n=512 µs [90% interval]"].endswith(" †") and not row["n=8 µs [90% interval]"].endswith("†")
    assert "†: n beyond the cell's N rank values" in headline.caption
    note = next(str(i.text) for i in sections[0].items if str(getattr(i, "text", "")).startswith("† Beyond the data"))
    # n = 512 is 1.71 N: between the study's 1.6 N and 6.4 N, so the 6.4 N accuracy is quoted, not 1.6 N's
    assert "n exceeds" in note and "0.91-1.05" in note and "0.95-1.04" not in note
    # the same table without the column (a run folder from before it): nothing marked, no note
    _write(run, "tau", rank.drop(columns=["beyond_data"]).reset_index(drop=True))
    sections = prediction_sec.build(ReportContext(run, tmp_path / "out", manifest))
    headline = next(i for i in sections[0].items if isinstance(i, Table))
    assert "†" not in "".join(headline.frame.astype(str).to_numpy().ravel()) and "†" not in headline.caption


def test_population_spreads_show_prior_and_prior_dominance(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write(run, "xi", pd.DataFrame({"model": [MAIN], "gpu": ["H100"], "precision": ["bf16"], "xi_mean": [0.1],
                                    "xi_lo": [0.0], "xi_hi": [0.2], "converged": [True]}))
    _write(run, "xi_population", pd.DataFrame({
        "model": [MAIN, MAIN], "parameter": ["xi0", "xi_sd_gpu"], "mean": [0.1, 0.3], "lo": [0.0, 0.02],
        "hi": [0.2, 0.9], "prior": [None, "HalfNormal(0.5)"], "prior_lo": [None, 0.03],
        "prior_hi": [None, 0.98], "prior_dominated": [None, True], "converged": [True, True]}))
    ctx = ReportContext(run, tmp_path / "out", {})
    table = next(i for i in xi_sec.build(ctx)[0].items
                 if isinstance(i, Table) and "parameter" in i.frame).frame.set_index("parameter")
    assert table.loc["xi_sd_gpu", "prior-dominated"] == "yes" and table.loc["xi0", "prior-dominated"] == ""
    assert table.loc["xi_sd_gpu", "prior [90%]"].startswith("HalfNormal(0.5) [0.03")


def test_whatif_labels_prior_dominated_rows(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write(run, "whatif", pd.DataFrame({
        "preset": ["a", "b"], "gpu": ["H200", "B200"], "n": [8, 8], "flops_factor": [1.0, 2.0],
        "prediction_kind": ["cell", "population"], "prior_dominated": [False, True],
        "prior_dominated_spreads": ["", "xi_sd_gpu"], "tau_mean_us": [1.0, 2.0], "tau_lo_us": [0.5, 1.0],
        "tau_hi_us": [1.5, 3.0], "nvlink_gbps": [900, 1800], "tflops": [989, 2250], "tflops_source": ["", ""],
        "source": ["s", "s"], "converged": [True, True]}))
    manifest = {"stages": {"prediction": {"status": "done", "summary": {
        "main_model": MAIN, "whatif": {"b_us": 1.0, "b_source": "x", "not_predicted": []}}}}}
    items = whatif_sec.build(ReportContext(run, tmp_path / "out", manifest))[0].items
    table = next(i for i in items if isinstance(i, Table)).frame
    assert list(table["prediction"]) == ["cell", "population (prior-dominated: xi_sd_gpu)"]


def test_pvm_beyond_m_table_by_hand(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write(run, "predicted_vs_measured", pd.DataFrame({
        "model": [MAIN] * 2, "estimator": ["centred"] * 2, "workload": ["w4", "w16"], "gpu": ["H100"] * 2,
        "precision": ["bf16"] * 2, "n": [4, 16], "n_collectives": [10, 12],
        "measured_mean_us": [2.0, 5.0], "measured_lo_us": [1.8, 4.5], "measured_hi_us": [2.2, 5.5],
        "predicted_mean_us": [2.1, 5.2], "predicted_lo_us": [1.9, 4.0], "predicted_hi_us": [2.3, 6.0],
        "inside_interval": [True, True], "k": [1.0, 4.0], "ratio": [2.1 / 2.0, 5.2 / 5.0],
        "within_agreement": [True, True], "beyond_m": [False, True]}))
    agreement = {"groups": 2, "ratio_median": 1.045, "ratio_min": 1.04, "ratio_max": 1.05, "inside": 2}
    manifest = {"options": {"m": 4}, "stages": {"predicted-vs-measured": {"status": "done", "summary": {
        "agreement": agreement}}}}
    items = pvm_sec.build(ReportContext(run, tmp_path / "out", manifest))[0].items
    beyond = next(i for i in items if isinstance(i, Table))
    assert list(beyond.frame["workload"]) == ["w16"] and list(beyond.frame["k = n/m"]) == [4.0]
    assert beyond.frame["predicted / measured"].iloc[0] == pytest.approx(1.04)  # 5.2 / 5.0
    assert bool(beyond.frame["agrees (within ±5% and inside the interval)"].iloc[0]) and "n > m = 4" in beyond.caption
    line = next(i for i in items if isinstance(i, str) and "Predicted (the point estimate) / measured" in i)
    assert "median 1.04, range 1.04 – 1.05 over 2 workload group(s)" in line and "in 2 of 2" in line  # fmt: 3 digits


def test_mle_table_flags_a_boundary_fit(tmp_path: Path) -> None:
    """A GEV fit that ended on xi = -1 (issue 29, item 7) is shown as boundary and not converged."""
    import numpy as np

    from evtsync.report.context import MIN_Z_FIGURE
    from evtsync.report.sections import gpu as gpu_sec

    z = pd.DataFrame({"gpu": "H100", "precision": "bf16", "workload": "w", "block": "b", "cv": 0.02,
                      "z": np.linspace(-1.0, 2.0, MIN_Z_FIGURE + 5)})
    mle = pd.DataFrame({"gpu": ["H100"] * 2, "precision": ["bf16"] * 2, "family": ["gumbel", "gev"], "n": [25, 25],
                        "mu": [0.1, 0.2], "mu_lo": [0.0, 0.1], "mu_hi": [0.2, 0.3], "sigma": [1.0, 1.1],
                        "sigma_lo": [0.9, 1.0], "sigma_hi": [1.1, 1.2], "xi": [0.0, -1.0], "xi_lo": [0.0, -1.0],
                        "xi_hi": [0.0, -0.9], "aic": [10.0, 9.0], "lrt_pvalue": [None, 0.01],
                        "converged": [True, False], "boundary": [False, True]})
    ctx = ReportContext(tmp_path, tmp_path / "out", {})
    sec = gpu_sec._cell_section(ctx, "H100", "bf16", z, mle, None, None, None)
    table = next(i for i in sec.items if isinstance(i, Table) and "family" in i.frame)
    assert list(table.frame["boundary xi = −1"]) == [False, True]
    assert list(table.frame["not converged"]) == [False, True] and table.flag == "not converged"


def test_what_the_bstar_bands_hold_fixed_goes_to_the_caption_once() -> None:
    """One value in every row: said once in the caption, not repeated per row; values that differ
    stay in the table."""
    same = pd.DataFrame({"n": [8, 64], "b_uncertainty": ["b fixed"] * 2, "alpha_uncertainty": ["alpha fixed"] * 2})
    table, caption = prediction_sec._held_fixed(same)
    assert list(table.columns) == ["n"] and caption == " The bands carry the fit's uncertainty only: b fixed, alpha fixed."
    differ = same.assign(b_uncertainty=["b fixed", "b sampled"])
    table, caption = prediction_sec._held_fixed(differ)
    assert "b_uncertainty" in table and caption == ""
