"""summary.json and the report say what the hierarchical rank model says (issue 45, items 3, 4, 6): its
tables in a run folder (the ``rankmodel`` stage's schema) written here by hand with known values — a slow
rank with its effect and interval, variance shares, xi per cell and pooled, the LOO of xi free against
xi = 0 — and read back from summary.json, the first screen, the xi and the comparison sections; a cell
whose xi interval holds 0 is never called heavy or bounded, even where the table's own verdict column
says otherwise; a run folder without the tables still gets its summary and report, saying why."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.report.context import ReportContext
from evtsync.report.markdown import Alert, Answer, Caption, Skipped, Table, render_markdown
from evtsync.report.sections import compare as compare_sec
from evtsync.report.sections import summary as summary_sec
from evtsync.report.sections import xi as xi_sec
from evtsync.runfolder.summary import summary_document, summary_numbers
from tests.report import test_report_summary as hand
from tests.report.test_report_summary import _write

LIGHT, HEAVY, BOUNDED = "light tail (Gumbel domain)", "heavy (Fréchet)", "bounded (Weibull)"
FLEET = "a job of n ranks from the same fleet"
SLOW = "|0|3"  # workload|pg|rank


@pytest.fixture()
def hand_run(tmp_path: Path) -> tuple[Path, dict]:
    """tests/report/test_report_summary.py's run folder written by hand: A100 bf16 and fp32, no rank tables."""
    return hand.hand_run.__wrapped__(tmp_path)


def _fit_file(run: Path, converged: bool, note: str) -> None:
    """fits/rankmodel.nc with the attributes a rank-model fit carries (format, convergence, chains)."""
    import xarray as xr

    (run / "fits").mkdir(exist_ok=True)
    tree = xr.DataTree(xr.Dataset(attrs={"format": "evtsync-rankmodel-1", "converged": int(converged),
                                         "convergence": note, "chains": 4}))
    tree.to_netcdf(run / "fits" / "rankmodel.nc", engine="h5netcdf")


def _rank_tables(run: Path, shared_bf16: float = 0.45, converged: bool = True) -> None:
    cells = [("A100", "bf16"), ("A100", "fp32")]
    effects = []
    for gpu, precision in cells:
        for r in range(8):
            slow = precision == "bf16" and r == 3
            effects.append({
                "cell": f"{gpu}|{precision}", "gpu": gpu, "precision": precision, "rank": f"|0|{r}",
                "rho_mean": 1.3 if slow else -0.02, "rho_lo": 1.1 if slow else -0.2, "rho_hi": 1.5 if slow else 0.2,
                "vs_others_mean": 1.5 if slow else -0.2, "vs_others_lo": 1.2 if slow else -0.4,
                "vs_others_hi": 1.8 if slow else 0.1, "level": 0.9, "p_positive": 0.999 if slow else 0.45,
                "slow": slow, "b_us": 10.0, "rho_mean_us": 13.0 if slow else -0.2, "rho_lo_us": 11.0 if slow else -2.0,
                "rho_hi_us": 15.0 if slow else 2.0, "vs_others_mean_us": 15.0 if slow else -2.0,
                "vs_others_lo_us": 12.0 if slow else -4.0, "vs_others_hi_us": 18.0 if slow else 1.0,
                "tau_without_n": 512 if slow else np.nan, "tau_without_median_us": 30.0 if slow else np.nan,
                "tau_without_lo_us": 28.0 if slow else np.nan, "tau_without_hi_us": 35.0 if slow else np.nan,
                "tau_with_median_us": 35.5 if slow else np.nan})
    _write(run, "rank_effects", pd.DataFrame(effects))
    _write(run, "rank_variance", pd.DataFrame([
        {"cell": "A100|bf16", "gpu": "A100", "precision": "bf16", "share_shared": shared_bf16, "share_rank": 0.05,
         "share_rank_lo": 0.02, "share_rank_hi": 0.1, "share_idiosyncratic": 0.95 - shared_bf16,
         "share_drift": shared_bf16 / 3, "share_shocks": 2 * shared_bf16 / 3, "drift_range_sd": 3.0, "sd_unit": "sd"},
        {"cell": "A100|fp32", "gpu": "A100", "precision": "fp32", "share_shared": 0.05, "share_rank": 0.0,
         "share_rank_lo": 0.0, "share_rank_hi": 0.01, "share_idiosyncratic": 0.95, "share_drift": 0.01,
         "share_shocks": 0.04, "drift_range_sd": 0.2, "sd_unit": "sd"}]))
    xi = [  # the bf16 row's own verdict column is wrong on purpose: its interval holds 0
        {"kind": "cell", "cell": "A100|bf16", "gpu": "A100", "precision": "bf16", "xi_mean": 0.03, "xi_median": 0.02,
         "xi_lo": -0.05, "xi_hi": 0.10, "level": 0.9, "p_xi_positive": 0.7, "verdict": HEAVY},
        {"kind": "cell", "cell": "A100|fp32", "gpu": "A100", "precision": "fp32", "xi_mean": 0.11, "xi_median": 0.1,
         "xi_lo": 0.02, "xi_hi": 0.2, "level": 0.9, "p_xi_positive": 0.97, "verdict": HEAVY},
        {"kind": "gpu", "cell": "", "gpu": "A100", "precision": "", "xi_mean": 0.07, "xi_median": 0.06,
         "xi_lo": -0.01, "xi_hi": 0.15, "level": 0.9, "p_xi_positive": 0.9, "verdict": LIGHT},
        {"kind": "precision", "cell": "", "gpu": "", "precision": "bf16", "xi_mean": 0.03, "xi_median": 0.02,
         "xi_lo": -0.05, "xi_hi": 0.10, "level": 0.9, "p_xi_positive": 0.7, "verdict": LIGHT},
        {"kind": "precision", "cell": "", "gpu": "", "precision": "fp32", "xi_mean": -0.3, "xi_median": -0.3,
         "xi_lo": -0.5, "xi_hi": -0.1, "level": 0.9, "p_xi_positive": 0.01, "verdict": BOUNDED}]
    _write(run, "rank_xi", pd.DataFrame(xi))
    _write(run, "rank_loo", pd.DataFrame([
        {"model": "xi free", "elpd_loo": -100.0, "se": 10.0, "p_loo": 4.0, "pareto_k_gt_0.7": 0, "n_obs": 200,
         "d_elpd": 0.0, "d_se": 0.0},
        {"model": "xi = 0 (Gumbel domain)", "elpd_loo": -110.0, "se": 11.0, "p_loo": 3.0, "pareto_k_gt_0.7": 1,
         "n_obs": 200, "d_elpd": -10.0, "d_se": 3.0}]))
    _fit_file(run, converged, "converged: max R-hat 1.003" if converged else
              "NOT CONVERGED: max R-hat 1.05 (xi0), min bulk ESS 80 (xi0), divergences 0")
    tau = pd.read_parquet(run / "tables" / "tau.parquet")
    _write(run, "tau", tau.assign(estimator="rankmodel", default_estimate=True))


def _sections(run: Path, manifest: dict, tmp_path: Path) -> tuple[list, str]:
    ctx = ReportContext(run, tmp_path / "out", manifest)
    sections = summary_sec.build(ctx) + xi_sec.build(ctx) + compare_sec.build(ctx)
    return sections, render_markdown("T", sections, tmp_path / "out")


def test_summary_json_holds_the_rank_models_answers(hand_run: tuple[Path, dict]) -> None:
    run, manifest = hand_run
    _rank_tables(run)
    numbers, info = summary_numbers(run, manifest)
    doc = json.loads(json.dumps(summary_document(numbers, info), allow_nan=False))
    block = doc["rank_model"]
    assert block["available"] and block["converged"] is True and block["level"] == 0.9
    assert block["model"] == "hierarchical rank model (PyMC, nutpie, 4 chains)"
    assert block["fleet_assumption"] == FLEET
    cells = {(c["gpu"], c["precision"]): c for c in block["cells"]}
    (slow,) = cells[("A100", "bf16")]["slow_ranks"]
    assert slow["rank"] == SLOW and cells[("A100", "fp32")]["slow_ranks"] == []
    assert (slow["vs_others_mean_us"], slow["vs_others_lo_us"], slow["vs_others_hi_us"]) == (15.0, 12.0, 18.0)
    assert slow["p_positive"] == 0.999
    assert (slow["tau_without_median_us"], slow["tau_without_lo_us"], slow["tau_without_hi_us"],
            slow["tau_with_median_us"]) == (30.0, 28.0, 35.0, 35.5)
    assert "without it tau(512) would be 30 µs [28, 35] instead of 35.5 µs" in slow["text"]
    v = cells[("A100", "bf16")]["variance_shares"]
    assert (v["shared"], v["rank"], v["rank_lo"], v["rank_hi"], v["drift_range_sd"]) == (0.45, 0.05, 0.02, 0.1, 3.0)
    # xi per cell with P(xi > 0): the verdict read from the interval, not the table's (wrong) column
    assert cells[("A100", "bf16")]["xi"] == {"median": 0.02, "mean": 0.03, "lo": -0.05, "hi": 0.1, "level": 0.9,
                                             "p_positive": 0.7, "verdict": LIGHT}
    assert cells[("A100", "fp32")]["xi"]["verdict"] == HEAVY
    pooled = {(p["kind"], p["level_name"]): p["verdict"] for p in block["pooled_xi"]}
    assert pooled == {("gpu", "A100"): LIGHT, ("precision", "bf16"): LIGHT, ("precision", "fp32"): BOUNDED}
    loo = block["loo"]
    assert (loo["preferred"], loo["preferred_family"], loo["d_elpd"], loo["d_se"], loo["clear"]) == \
        ("xi free", "free", 10.0, 3.0, True)
    assert doc["loo"] == loo["sentence"] and "shape's gain alone" in doc["loo"]
    assert doc["loo_comparators"].startswith("LOO prefers")  # the GEV fits' line, kept, not the headline
    rows = {r["precision"]: r for r in doc["rows"]}
    assert rows["bf16"]["verdict"] == LIGHT and rows["fp32"]["verdict"] == HEAVY  # never heavy with 0 inside
    assert rows["bf16"]["slow_rank_text"].startswith("rank 3 (PG 0) of A100 bf16 is persistently slow: +15 µs per "
                                                     "block [90% interval +12 to +18]")
    assert "slow_rank_text" not in rows["fp32"] or not rows["fp32"]["slow_rank_text"]
    assert rows["bf16"]["fleet_assumption"] == FLEET and rows["bf16"]["share_shared"] == 0.45


def test_report_names_the_slow_rank_the_shared_share_and_the_model(hand_run: tuple[Path, dict],
                                                                    tmp_path: Path) -> None:
    run, manifest = hand_run
    _rank_tables(run)
    sections, md = _sections(run, manifest, tmp_path)
    answers = {a.key: a.text for a in sections[0].items if isinstance(a, Answer)}
    assert "rank 3 (PG 0) of A100 bf16 is persistently slow: +15 µs per block [90% interval +12 to +18]" in answers["who"]
    assert "P(rho > 0) = 0.999" in answers["who"]
    assert "45% on A100 bf16 (drift over the job 3 sd)" in answers["who"] and "cancel in max − mean" in answers["who"]
    assert "A100 fp32 (drift" not in answers["who"]  # 5%: not material
    assert FLEET in answers["bigger"]
    captions = " ".join(i.text for i in sections[0].items if isinstance(i, Caption))
    assert "hierarchical rank model (PyMC, nutpie, 4 chains)" in captions and f"tau(n) is for {FLEET}" in captions
    assert "posterior median shown" in captions  # the tail column's point is the median, and says so
    table = next(i for i in sections[0].items if isinstance(i, Table))
    tails = [link.text for link in table.frame["tail, xi"]]
    assert tails[0].startswith("light (Gumbel)\nrank model 0.02\n[-0.05, 0.1]\nP(xi > 0) 0.7")
    assert tails[1].startswith("heavy (Fréchet)\nrank model 0.1\n[0.02, 0.2]")
    assert not any(isinstance(i, Alert) and "NOT" in i.text for i in sections[0].items)
    # the xi section: the rank model first, per cell and pooled; the GEV fits labelled comparators
    xi_items = sections[1].items
    cells, pooled = xi_items[0].frame, xi_items[1].frame
    assert list(cells["tail verdict (from the interval)"]) == [LIGHT, HEAVY]
    assert list(cells["P(xi > 0)"]) == ["0.7", "0.97"]
    assert list(pooled["level"]) == ["A100", "bf16", "fp32"]
    assert list(pooled["tail verdict (from the interval)"]) == [LIGHT, LIGHT, BOUNDED]
    assert "Comparators (GEV of block maxima) — not the headline" in xi_items[2].text
    # the comparison: the rank model's LOO first, then the GEV fits as comparators
    compare = sections[2].items
    assert compare[0].startswith("Verdict: Rank model, PSIS-LOO") and "xi free is preferred" in compare[0]
    assert list(compare[1].frame["model"]) == ["xi free", "xi = 0 (Gumbel domain)"]
    assert compare[-1].caption.startswith("Comparators (GEV of block maxima) — not the headline")
    assert "heavy (Fréchet) | rank model 0.02" not in md  # the markdown report: no verdict beside an interval holding 0
    # the tau(n) section's headline table states the fleet assumption of the rank model's tau(n)
    from evtsync.report.sections import prediction as prediction_sec

    tau_items = prediction_sec.build(ReportContext(run, tmp_path / "out2", manifest))[0].items
    headline = next(i for i in tau_items if isinstance(i, Table) and i.caption.startswith("Headline"))
    assert f"for {FLEET}" in headline.caption


def test_an_interval_holding_zero_is_never_heavy_or_bounded(hand_run: tuple[Path, dict], tmp_path: Path) -> None:
    """Cells with intervals by hand, each row's verdict column saying heavy: only those above 0 are."""
    run, manifest = hand_run
    _rank_tables(run)
    intervals = {"bf16": (-0.2, 0.0), "fp32": (0.0, 0.3)}  # 0 at an end is inside the interval
    xi = pd.read_parquet(run / "tables" / "rank_xi.parquet")
    for p, (lo, hi) in intervals.items():
        xi.loc[(xi["kind"] == "cell") & (xi["precision"] == p), ["xi_lo", "xi_hi", "verdict"]] = [lo, hi, HEAVY]
    _write(run, "rank_xi", xi)
    numbers, _ = summary_numbers(run, manifest)
    assert list(numbers["verdict"]) == [LIGHT, LIGHT]
    sections, md = _sections(run, manifest, tmp_path)
    assert list(sections[1].items[0].frame["tail verdict (from the interval)"]) == [LIGHT, LIGHT]
    table = next(i for i in sections[0].items if isinstance(i, Table))
    assert all(link.text.startswith("light (Gumbel)") for link in table.frame["tail, xi"])


def test_a_small_shared_share_gets_no_sentence(hand_run: tuple[Path, dict], tmp_path: Path) -> None:
    run, manifest = hand_run
    _rank_tables(run, shared_bf16=0.1)
    sections, _ = _sections(run, manifest, tmp_path)
    who = next(a.text for a in sections[0].items if isinstance(a, Answer) and a.key == "who")
    assert "cancel in max − mean" not in who and "rank 3" in who


def test_a_rank_model_that_did_not_converge_is_flagged_on_the_first_screen(hand_run: tuple[Path, dict],
                                                                          tmp_path: Path) -> None:
    run, manifest = hand_run
    _rank_tables(run, converged=False)
    numbers, info = summary_numbers(run, manifest)
    assert info["rank_model"]["converged"] is False
    assert not numbers["converged"].any() and numbers["notes"].str.contains("rank model NOT converged").all()
    assert "NOT CONVERGED: max R-hat 1.05" in numbers["slow_rank_text"].iloc[0]
    sections, _ = _sections(run, manifest, tmp_path)
    first = sections[0].items[0]
    assert isinstance(first, Alert) and first.text.startswith(
        "The hierarchical rank model (PyMC, nutpie, 4 chains): NOT CONVERGED: max R-hat 1.05")


def test_the_convergence_the_stage_recorded_is_read_from_the_manifest(hand_run: tuple[Path, dict]) -> None:
    # the rankmodel stage records its fit's convergence in the manifest: the summary takes it from
    # there (the fit file's attributes only for older run folders); here the file says converged and
    # the manifest, written by hand, says not, with 2 chains: the manifest's words are the ones shown
    run, manifest = hand_run
    _rank_tables(run, converged=True)
    manifest["stages"]["rankmodel"] = {"status": "done", "summary": {"fit": {
        "converged": False, "convergence": "NOT CONVERGED: max R-hat 1.07 (xi[A100|bf16])", "chains": 2}}}
    numbers, info = summary_numbers(run, manifest)
    block = info["rank_model"]
    assert block["converged"] is False and "R-hat 1.07" in block["convergence"]
    assert block["model"] == "hierarchical rank model (PyMC, nutpie, 2 chains)"
    (run / "fits" / "rankmodel.nc").unlink()  # not read at all when the manifest holds it
    assert summary_numbers(run, manifest)[1]["rank_model"]["converged"] is False


@pytest.mark.parametrize("stage", [None, {"status": "not_applicable", "reason": "a cell has 90 rank values; the "
                                                                              "tail needs at least 200"}])
def test_a_run_folder_without_the_rank_tables_says_why(hand_run: tuple[Path, dict], tmp_path: Path,
                                                       stage: dict | None) -> None:
    run, manifest = hand_run
    if stage is not None:
        manifest["stages"]["rankmodel"] = stage
    numbers, info = summary_numbers(run, manifest)
    block = json.loads(json.dumps(summary_document(numbers, info), allow_nan=False))["rank_model"]
    want = stage["reason"] if stage else "made before the rank model's stage"
    assert block["available"] is False and want in block["reason"]
    assert "slow_rank_text" not in numbers and "rank_xi_lo" not in numbers  # nothing invented
    sections, md = _sections(run, manifest, tmp_path)
    assert "The hierarchical rank model is not in this run" in md and want in md
    for section in sections[1:]:  # xi and compare: the rank model's part says why, the comparators follow
        assert isinstance(section.items[0], Skipped)
        text = section.items[0].text  # the reason, or (said once already) a pointer to it
        assert (want in text or "reason given above (stage rankmodel)" in text) if stage else "rank_" in text


# ----------------------------------------------------------------------------------- from fits (slow)


@pytest.mark.slow  # ~40 s on the shared 2-core machine: two fits of 4,800 rank values (first compilation)
def test_one_planted_slow_rank_is_named_with_an_interval_covering_its_effect(hand_run: tuple[Path, dict],
                                                                             tmp_path: Path) -> None:
    """Ranks simulated as in tests/evt/test_rankmodel.py (through the z-score table): in A100 bf16 rank 3 is
    persistently +1.5 sd slow (b = 10 µs: +15 µs per block against the other ranks), A100 fp32 has no slow
    rank; the tables are the library's on these fits (tests/runfolder/rank_tables.py)."""
    from evtsync.evt.rankmodel import fit_rank_model
    from tests.evt.test_rankmodel import _job
    from tests.runfolder.rank_tables import write_rank_tables

    run, manifest = hand_run
    rng = np.random.default_rng(5)
    b, planted = 10.0, 1.5
    rho = np.zeros(8)
    rho[3] = planted
    parts, b_us = [], {}
    for precision, effect in (("bf16", rho), ("fp32", np.zeros(8))):
        long, b_hat = _job(1000.0 + b * (effect[None, :] + rng.standard_normal((300, 8))), "A100", precision)
        parts.append(long)
        b_us[f"A100|{precision}"] = b_hat
    long = pd.concat(parts, ignore_index=True)
    fit = fit_rank_model(long, seed=1)
    write_rank_tables(run, fit, fit_rank_model(long, seed=1, free_shape=False), b_us)
    numbers, info = summary_numbers(run, manifest)
    doc = json.loads(json.dumps(summary_document(numbers, info), allow_nan=False))
    cells = {c["precision"]: c for c in doc["rank_model"]["cells"]}
    (slow,) = cells["bf16"]["slow_ranks"]
    assert slow["rank"] == SLOW and cells["fp32"]["slow_ranks"] == []
    assert slow["vs_others_lo_us"] <= planted * b <= slow["vs_others_hi_us"], slow
    assert slow["tau_without_median_us"] < slow["tau_with_median_us"]
    assert doc["rank_model"]["converged"] is fit.converged
    sections, md = _sections(run, manifest, tmp_path)
    assert "rank 3 (PG 0) of A100 bf16 is persistently slow" in md
    assert f"[90% interval {slow['vs_others_lo_us']:+.3g} to {slow['vs_others_hi_us']:+.3g}]" in md


def _demo_parents(run: Path) -> dict[tuple[str, str], str]:
    """(gpu, precision) -> the parent of the demo's rank times, read from each workload's ground_truth.json."""
    out = {}
    for path in sorted((run / "inputs").rglob("ground_truth.json")):
        truth = json.loads(path.read_text(encoding="utf-8"))
        parent = truth["parent"]["name"] if isinstance(truth["parent"], dict) else truth["parent"]
        out[(str(truth["gpu"]), str(truth["precision"]))] = parent
    return out


@pytest.mark.slow  # ~60 s: the tiny demo run (its traces, tax and z-scores) and two rank-model fits
def test_demo_cells_are_called_light_unless_the_rank_models_interval_excludes_zero(tmp_path: Path) -> None:
    """The demo plants normal, lognormal and Gumbel rank times: all in the Gumbel domain. Each cell's
    verdict in summary.json and the report is "light tail (Gumbel domain)" unless the rank model's xi
    interval excludes 0 (a finite sample's GPD shape, e.g. a normal's, may lie below 0), never the GEV's."""
    from evtsync.evt.rankmodel import fit_rank_model, rank_table_from_zscores
    from evtsync.pipeline import RunOptions, run_pipeline
    from tests.runfolder.rank_tables import write_rank_tables

    run = tmp_path / "demo"
    manifest = run_pipeline(RunOptions(out=run, draws=60, tune=60, chains=2, models=["gumbel"], report=False,
                                       demo_overrides={"iterations": 4, "layers": 1})).manifest
    parents = _demo_parents(run)
    assert set(parents.values()) == {"normal", "lognormal", "gumbel"}  # the Gumbel domain, every one
    long = rank_table_from_zscores(pd.read_parquet(run / "tables" / "zscores.parquet"))
    fit = fit_rank_model(long, seed=0)
    write_rank_tables(run, fit, fit_rank_model(long, seed=0, free_shape=False), {})
    numbers, _ = summary_numbers(run, manifest)
    assert set(zip(numbers["gpu"], numbers["precision"], strict=True)) == set(parents)
    xi = pd.read_parquet(run / "tables" / "rank_xi.parquet").query("kind == 'cell'").set_index(["gpu", "precision"])
    for r in numbers.itertuples():
        lo, hi = xi.loc[(r.gpu, r.precision), ["xi_lo", "xi_hi"]]
        want = HEAVY if lo > 0 else BOUNDED if hi < 0 else LIGHT
        assert (r.rank_xi_lo, r.rank_xi_hi) == (lo, hi)
        assert r.verdict == want, (r.gpu, r.precision, parents[(r.gpu, r.precision)], lo, hi, r.verdict)
    sections, _ = _sections(run, manifest, tmp_path)
    shown = sections[1].items[0].frame
    assert list(shown["tail verdict (from the interval)"]) == list(numbers["verdict"])
