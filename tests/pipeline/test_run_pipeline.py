"""`evtsync run`: the pipeline end to end on a tiny demo study (one run, a module fixture, that
the tests read, copy or run again: stage caching, the report, the tables, the fits' pool). Runs
from scratch on inputs of their own (resuming after a kill, the real 8-rank DLRM traces, a failed
stage, a bad option) are in tests/pipeline/test_run_fresh.py.

The default tests use a tiny study (4 iterations, 1 layer per workload) and the Gumbel model
only, with a few draws; the full demo with every model is a ``slow`` test.
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.core.tableio import file_sha256
from evtsync.pipeline import (
    MANIFEST,
    STATUS_DONE,
    STATUS_NA,
    RunOptions,
    StageEvent,
    read_manifest,
    run_pipeline,
)
from tests.conftest import REPO, TEST_SOURCE_DIGEST, TINY_DEMO_OPTIONS
from tests.report_checks import PNG_MAGIC

TINY = TINY_DEMO_OPTIONS["demo_overrides"]
FAST = TINY_DEMO_OPTIONS


def _run(out: Path, **kwargs) -> tuple[dict, list[StageEvent]]:
    events: list[StageEvent] = []
    options = RunOptions(out=out, **{**FAST, **kwargs})
    run = run_pipeline(options, on_stage=events.append)
    return run.manifest, events


def _assert_outputs_intact(out: Path, manifest: dict) -> None:
    for name, entry in manifest["stages"].items():
        for rel, digest in entry.get("outputs", {}).items():
            assert file_sha256(out / rel) == digest, f"{name}: {rel} differs from the manifest"
    assert not list(out.rglob(".*.tmp")), "temporary files left behind"
    mask = os.umask(0o022)
    os.umask(mask)
    for path in [out / "manifest.json", *out.glob("tables/*.parquet")]:
        assert path.stat().st_mode & 0o777 == 0o666 & ~mask, path  # the umask's mode, not mkstemp's 0600


#: The package's source digest is part of every stage key; other work on the source tree while
#: these tests run must not invalidate their stages, so the tests fix it.
FIXED_DIGEST = TEST_SOURCE_DIGEST


@pytest.fixture(scope="module", autouse=True)
def fixed_source_digest() -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("evtsync.pipeline.engine.source_digest", lambda: FIXED_DIGEST)
        yield


@pytest.fixture(scope="module")
def figure_cache(session_figure_cache: Path) -> Path:
    """The session's figure cache (as ``evtsync run`` keeps one in its cache folder; tests/conftest.py):
    the tiny run's report draws every figure into it unless another test file's tiny demo drew them
    first, and a later report of the same tables (the tests that rebuild the report to check its
    text) copies those instead of drawing them again (~11 s of CPU a report); a figure of other
    tables is drawn."""
    return session_figure_cache


@pytest.fixture(scope="module")
def tiny_run(tiny_demo: tuple[Path, dict, list[StageEvent]]) -> tuple[Path, dict, list[StageEvent]]:
    """The tiny demo run of the test process (tests/conftest.py, :func:`tests.conftest.tiny_demo`,
    shared with tests/pipeline/test_result_cache.py), report included, its figures one-pixel
    placeholders: the tests of this file read the run's tables, its manifest and its report's text;
    drawing the figures (~18 s on 2 cores, most of the report stage) is :func:`drawn_report`'s, for
    the tests that read them (issue 48: this fixture was 39 s on CI)."""
    return tiny_demo


@pytest.fixture(scope="module")
def drawn_report(tiny_run: tuple[Path, dict, list[StageEvent]], tmp_path_factory: pytest.TempPathFactory,
                 figure_cache: Path) -> Path:
    """The tiny run's report again, its figures drawn (into the session's figure cache, or copied from
    it where another test file's tiny demo drew them): the folder it was written to. The tests that
    rebuild the report from the cache ask for it first, so that they copy these figures, not draw them."""
    from evtsync.report.html import build_report

    folder = tmp_path_factory.mktemp("drawn") / "report"
    build_report(tiny_run[0], folder, figure_cache=figure_cache)
    return folder


def test_tiny_demo_runs_every_stage(tiny_run: tuple[Path, dict, list[StageEvent]]) -> None:
    out, manifest, _ = tiny_run
    status = {n: e["status"] for n, e in manifest["stages"].items()}
    expected_done = ["demo", "tax", "attribution", "zscores", "mle", "fit-gumbel", "prediction",
                     "predicted-vs-measured", "report"]
    for name in expected_done:
        assert status[name] == STATUS_DONE, (name, manifest["stages"][name].get("reason"))
    # one model only: nothing to compare, and the report says so
    assert status["compare"] == STATUS_NA
    assert "nothing to compare" in manifest["stages"]["compare"]["reason"]
    z = pd.read_parquet(out / "tables" / "zscores.parquet")
    cells = set(zip(z["gpu"], z["precision"], strict=True))
    assert cells == {(g, p) for g in ("A100", "H100", "H200") for p in ("bf16", "fp32")}
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "did not apply" in html and "nothing to compare" in html
    # the what-if section: presets without traces, each row saying how it was predicted
    whatif = html.split('id="whatif"', 1)[1].split("<h2", 1)[0]
    assert "NVL72" in whatif and "B200" in whatif and ("pooled" in whatif or "population" in whatif)
    _assert_outputs_intact(out, manifest)


def test_rerun_reuses_every_stage(tiny_run: tuple[Path, dict, list[StageEvent]]) -> None:
    out, manifest, _ = tiny_run
    before = {rel: d for e in manifest["stages"].values() for rel, d in e.get("outputs", {}).items()}
    again, events = _run(out)
    finished = {e.stage: e.action for e in events if e.action != "start"}
    assert set(finished.values()) == {"reused"}, finished
    after = {rel: d for e in again["stages"].values() for rel, d in e.get("outputs", {}).items()}
    assert after == before


def test_changed_output_is_recomputed(tiny_run: tuple[Path, dict, list[StageEvent]], tmp_path: Path) -> None:
    src, _, _ = tiny_run
    out = tmp_path / "copy"
    shutil.copytree(src, out)
    (out / "tables" / "mle.parquet").write_bytes(b"not parquet")       # a damaged output
    manifest, events = _run(out, report=False)
    ran = {e.stage for e in events if e.action == "ran"}
    assert "mle" in ran
    assert {"demo", "tax", "attribution", "zscores", "fit-gumbel"}.isdisjoint(ran)
    pd.read_parquet(out / "tables" / "mle.parquet")                     # readable again
    _assert_outputs_intact(out, manifest)


def test_parameter_change_reruns_only_dependent_stages(tiny_run: tuple[Path, dict, list[StageEvent]],
                                                       tmp_path: Path) -> None:
    src, _, _ = tiny_run
    out = tmp_path / "copy"
    shutil.copytree(src, out)
    manifest, events = _run(out, report=False, alpha_us=9.0)
    ran = {e.stage for e in events if e.action == "ran"}
    assert ran == {"prediction", "predicted-vs-measured", "summary"}  # the answer table reads the predictions
    bstar = pd.read_parquet(out / "tables" / "bstar.parquet")
    assert (bstar["alpha_us"] == 9.0).all()


def test_predicted_delay_matches_measured_on_the_synthetic_study(tiny_run: tuple[Path, dict, list[StageEvent]]) -> None:
    """The study's block times are drawn so that the mean straggler delay is b·E_k: the
    measured mean (90% t interval) and the prediction (90% credible interval) must agree
    within their combined uncertainty (3 standard errors of the measured mean)."""
    out, _, _ = tiny_run
    pvm = pd.read_parquet(out / "tables" / "predicted_vs_measured.parquet")
    assert len(pvm) == 6
    for row in pvm.itertuples():
        se = (row.measured_hi_us - row.measured_lo_us) / (2 * 1.7)
        gap = abs(row.measured_mean_us - row.predicted_mean_us)
        assert gap < 3 * se + (row.predicted_hi_us - row.predicted_lo_us), row


def test_tau_table_default_rows_are_the_rank_model_and_ranktail_a_comparator(
        tiny_run: tuple[Path, dict, list[StageEvent]]) -> None:
    """The default rows of tau.parquet are the rank model's (issue 45) for every cell whose z-scores
    hold at least RANKTAIL_MIN_VALUES rank values (counted here from the table); the ranktail rows
    stay beside them, labelled, not the default; the rankmodel stage wrote its fits and tables."""
    from evtsync.core.defaults import RANKTAIL_MIN_VALUES

    out, manifest, _ = tiny_run
    z = pd.read_parquet(out / "tables" / "zscores.parquet")
    z = z[z["has_gemm"]]
    counts = z.groupby(["gpu", "precision"])["u"].agg(lambda s: sum(len(v.split(",")) for v in s))
    enough = {f"{g}|{p}" for (g, p), c in counts.items() if c >= RANKTAIL_MIN_VALUES}
    assert enough  # the tiny study has cells the rank model can fit
    tau = pd.read_parquet(out / "tables" / "tau.parquet")
    default = tau[tau["default_estimate"].astype(bool)]
    rm = default[default["estimator"] == "rankmodel"]
    assert set(rm["cell"]) == enough and (rm["model"] == "rankmodel").all()
    assert len(rm) == len(enough) * len(set(tau["n"]))
    assert (default["estimator"] != "ranktail").all()
    assert not rm[["tau_lo_us", "tau_median_us", "tau_hi_us"]].isna().any().any()
    assert (rm["tau_lo_us"] <= rm["tau_median_us"]).all() and (rm["tau_median_us"] <= rm["tau_hi_us"]).all()
    # the point (issue 29): the rank model's posterior median, the GEV fits' posterior mean, each labelled
    assert (rm["tau_point_us"] == rm["tau_median_us"]).all() and (rm["point_estimate"] == "posterior median").all()
    # its convergence is carried on every row (the tiny run's few draws need not converge)
    entry = manifest["stages"]["rankmodel"]
    assert (rm["converged"] == entry["summary"]["fit"]["converged"]).all()
    rt = tau[tau["estimator"] == "ranktail"]
    assert set(rt["cell"]) == enough and not rt["default_estimate"].astype(bool).any()
    gev = tau[tau["fit_kind"] == "bayes"]
    assert len(gev) and (gev["tau_point_us"] == gev["tau_mean_us"]).all()
    assert (gev["point_estimate"] == "posterior mean").all()
    # the stage's outputs, listed in the manifest and present
    for rel in ("fits/rankmodel.nc", "fits/rankmodel-gumbel.nc", "tables/rank_effects.parquet",
                "tables/rank_variance.parquet", "tables/rank_xi.parquet", "tables/rank_loo.parquet"):
        assert rel in entry["outputs"] and (out / rel).is_file(), rel
    info = entry["summary"]
    assert {"fit", "fit_gumbel", "cpu_seconds", "fleet"} <= set(info)
    assert info["fleet"] == "a job of n ranks from the same fleet"
    xi = pd.read_parquet(out / "tables" / "rank_xi.parquet")
    assert set(xi["kind"]) == {"cell", "gpu", "precision"}
    assert set(xi.loc[xi["kind"] == "gpu", "gpu"]) == {"A100", "H100", "H200"}
    assert set(xi.loc[xi["kind"] == "precision", "precision"]) == {"bf16", "fp32"}
    loo = pd.read_parquet(out / "tables" / "rank_loo.parquet")
    assert set(loo["model"]) == {"xi free", "xi = 0 (Gumbel domain)"}
    effects = pd.read_parquet(out / "tables" / "rank_effects.parquet")
    # rho in µs is rho in sd units times the cell's b (the block-scale table's)
    scales = pd.read_parquet(out / "tables" / "block_scale.parquet")
    b = dict(zip(scales["gpu"] + "|" + scales["precision"], scales["b_us"], strict=True))
    np.testing.assert_allclose(effects["rho_mean_us"], effects["rho_mean"] * effects["cell"].map(b))


def test_manifest_is_json_with_stage_order(tiny_run: tuple[Path, dict, list[StageEvent]]) -> None:
    out, _, _ = tiny_run
    data = json.loads((out / MANIFEST).read_text())
    assert data["stage_order"][0] == "demo" and data["stage_order"][-1] == "report"
    assert data["sampling"] == {"draws": 60, "tune": 60, "chains": 2}


@pytest.mark.slow
def test_full_demo_with_every_model(tmp_path: Path) -> None:
    """The demo as `make demo` runs it with every Bayesian GEV comparator (opt-in, issue 48: all models,
    the demo's sampler settings)."""
    from evtsync.cli import main

    out = tmp_path / "demo"
    assert main(["-q", "run", "--out", str(out), "--comparators", "bayes-gev"]) == 0
    manifest = read_manifest(out)
    assert all(e["status"] == STATUS_DONE for e in manifest["stages"].values()), \
        {n: e.get("reason") for n, e in manifest["stages"].items()}
    compare = pd.read_parquet(out / "tables" / "compare.parquet")
    # one row per shipped model of z-scores: read off the models/ folder's TOML files (a model of
    # raw block maxima, data.scale = "raw", is left out of a run)
    # (the rank model's specification, family "rankmodel", is not a GEV model: its stage is `rankmodel`)
    shipped = {p.stem for p in (REPO / "models").glob("*.toml")
               if tomllib.loads(p.read_text(encoding="utf-8")).get("data", {}).get("scale") != "raw"
               and tomllib.loads(p.read_text(encoding="utf-8")).get("family") != "rankmodel"}
    assert len(shipped) == 6  # the six of the demo (docs/bayesian.md): a model added or removed shows here
    assert sorted(compare["model"]) == sorted(shipped)


def test_report_embeds_every_figure_and_each_decodes(tiny_run: tuple[Path, dict, list[StageEvent]],
                                                     drawn_report: Path) -> None:
    """The run's report (placeholder figures) and the same report with its figures drawn: each embeds
    every figure it wrote, and each embedded image decodes; the drawn ones are real plots."""
    from tests.report_checks import check_self_contained

    out, _, _ = tiny_run
    for folder in (out, drawn_report):
        images = check_self_contained(folder / "report.html")
        pngs = sorted((folder / "figures").glob("*.png"))
        assert len(images) == len(pngs) >= 12
        assert not list((folder / "figures").glob("*.svg"))          # SVG only when asked for (--svg)
        assert "figures (PNG) lie beside" in (folder / "report.html").read_text(encoding="utf-8")
    drawn = sorted(p.name for p in (drawn_report / "figures").glob("*.png"))
    assert drawn == sorted(p.name for p in (out / "figures").glob("*.png"))  # the run planned the same figures
    for name in drawn:
        data = (drawn_report / "figures" / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 5000, name  # a drawn plot, not a one-pixel stand-in


def test_report_of_one_fit(tiny_run: tuple[Path, dict, list[StageEvent]], tmp_path: Path) -> None:
    from evtsync.evt.fit import is_converged, load_fit
    from evtsync.report.html import build_report
    from tests.report_checks import check_self_contained

    out, _, _ = tiny_run
    fit = out / "fits" / "gumbel.nc"
    written = build_report(fit, tmp_path / "rep", svg=True)
    html = tmp_path / "rep" / "report.html"
    assert html in written and (tmp_path / "rep" / "report.md") in written
    pngs, svgs = sorted((tmp_path / "rep" / "figures").glob("*.png")), sorted((tmp_path / "rep" / "figures").glob("*.svg"))
    assert [p.stem for p in pngs] == [p.stem for p in svgs] and len(pngs) == 1     # svg=True: each figure twice
    import xml.etree.ElementTree as ET

    assert ET.parse(svgs[0]).getroot().tag.endswith("svg")
    assert len(check_self_contained(html)) == 1          # one cell (pooled), Gumbel: no xi forest
    text = html.read_text(encoding="utf-8")
    assert "Cell all" in text and "posterior mean [90% CrI]" in text
    assert ("did NOT converge" in text) == (not is_converged(load_fit(fit)))


def test_report_estimator_on_a_real_run(tiny_run: tuple[Path, dict, list[StageEvent]], tmp_path: Path,
                                        figure_cache: Path, drawn_report: Path) -> None:
    """`evtsync report --estimator centred` on a real run: the headline tau(n) table holds the main
    model's centred rows of tables/tau.parquet (read here with pandas), number for number; a fit's
    report refuses --estimator (it has no tau(n))."""
    import re

    from evtsync.core.errors import InputError
    from evtsync.report.html import build_report

    out, _, _ = tiny_run
    build_report(out, tmp_path / "rep", workers=1, estimator="centred", figure_cache=figure_cache)
    md = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    section = md.split("## Predicted tax tau(n)", 1)[1]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = []
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != len(header) or cells[0] == header[0]:
            break  # the next table (the alternatives) starts
        rows.append(dict(zip(header, cells, strict=True)))
    tau = pd.read_parquet(out / "tables" / "tau.parquet")
    truth = tau[(tau["estimator"] == "centred") & (tau["model"] == "gumbel")]
    assert rows and len(rows) == truth[["gpu", "precision"]].drop_duplicates().shape[0]
    for row in rows:
        assert (row["model"], row["estimator"]) == ("gumbel", "centred")
        r = truth[(truth["gpu"] == row["gpu"]) & (truth["precision"] == row["precision"]) & (truth["n"] == 64)].iloc[0]
        shown = [float(v.replace(",", "")) for v in re.findall(r"-?[\d,]*\.?\d+", row["n=64 µs [90% interval]"])]
        assert shown == pytest.approx([r["tau_mean_us"], r["tau_lo_us"], r["tau_hi_us"]], rel=6e-3)
    assert "by the estimator centred (asked with --estimator; the run used rankmodel; point: posterior mean)" in md
    with pytest.raises(InputError, match="one fit, whose report shows no tau"):
        build_report(out / "fits" / "gumbel.nc", tmp_path / "fit", estimator="centred")


@pytest.mark.slow  # ~30 s (a local dask cluster); the backend's table equality also runs in tests/core/test_scale_dask.py
def test_run_on_a_local_dask_cluster_gives_the_same_tables(tiny_run: tuple[Path, dict, list[StageEvent]],
                                                           tmp_path: Path) -> None:
    """``evtsync run --workers 1``: reading, alignment and blocks as Dask tasks; the tax and
    z-score tables equal those of the local run, and the manifest names the backend."""
    pytest.importorskip("distributed")
    out, manifest, _ = tiny_run
    assert manifest["backend"] == "local"
    copy = tmp_path / "dask"
    shutil.copytree(out / "inputs", copy / "inputs")  # the same demo traces (never rewritten)
    # force: a folder holding only the copied inputs is not a run folder yet (refused otherwise)
    options = RunOptions(out=copy, traces=[str(copy / "inputs" / "demo")], workers=1, report=False, force=True,
                         **{k: v for k, v in FAST.items() if k != "demo_overrides"})
    run = run_pipeline(options)
    assert run.manifest["backend"] == "local Dask cluster (1 workers)"
    assert run.manifest["stages"]["zscores"]["status"] == STATUS_DONE
    local = [out / "tables" / "zscores.parquet", *sorted((out / "tables").glob("tax_*.parquet")),
             *sorted((out / "tables").glob("blocks_dropped.parquet"))]
    assert len(local) >= 2
    for path in local:
        pd.testing.assert_frame_equal(pd.read_parquet(copy / "tables" / path.name), pd.read_parquet(path))


def test_pipeline_tables_equal_the_api_on_the_same_fit(tiny_run: tuple[Path, dict, list[StageEvent]]) -> None:
    """The run's tau, B*, xi and predicted-vs-measured tables are what the public API gives for
    the same fit file and inputs: one prediction path for CLI, pipeline and report."""
    from evtsync.evt.bayesfit import BayesFit
    from evtsync.predict import tables as predict

    out, manifest, _ = tiny_run
    fit = BayesFit.load(out / "fits" / "gumbel.nc")
    z = pd.read_parquet(out / "tables" / "zscores.parquet")
    scales = predict.block_scale(z)
    summary = manifest["stages"]["prediction"]["summary"]
    ns = summary["domain_sizes"]
    tau = predict.tau_table(fit, ns, scales, m=4)
    run_tau = pd.read_parquet(out / "tables" / "tau.parquet")
    gumbel = run_tau[run_tau["model"] == "gumbel"].reset_index(drop=True)
    # the run's table also holds the per-rank rows (rank model, ranktail), whose own columns (their cells' sizes
    # and notes) are empty here,
    # and marks the default estimator's rows: a gumbel row is one exactly when it is a labelled fallback
    others = [c for c in gumbel.columns if c not in tau.columns]
    ranktail_own = ("n_values", "n_exceedances", "ranktail_note", "beyond_data", "beyond_data_accuracy",
                    "gpd_xi_mean", "gpd_xi_lo", "gpd_xi_hi")  # its cells' sizes, notes and GPD shape (issue 45)
    assert set(others) <= {*ranktail_own, "default_estimate", "estimator_note"}
    assert gumbel[[c for c in others if c in ranktail_own]].isna().all().all()
    fallback = gumbel["estimator_note"].fillna("").astype(str) != ""
    assert (fallback == gumbel["default_estimate"].astype(bool)).all()
    pd.testing.assert_frame_equal(gumbel[list(tau.columns)], tau, check_dtype=False)
    # B* and predicted-vs-measured are the default estimator's (the rank model, the main fit's centred as fallback)
    from evtsync.core.defaults import DEFAULT_SEED
    from evtsync.predict import registry
    from evtsync.predict.estimator import choose_estimator, predict_table
    from evtsync.runfolder.layout import run_folder

    # the run's rank model (fits/rankmodel.nc, checked against the manifest), loaded as the CLI loads it
    choice = choose_estimator(None, gev=fit, fitted=registry.get(None).load_run(run_folder(out), seed=DEFAULT_SEED),
                              seed=DEFAULT_SEED)
    bstar = predict_table(choice, predict.bandwidth_table, ["full", "ring", "torus3d"], ns, summary["alpha_us"],
                          summary["bytes"], scales, summary["eps"], 4)
    pd.testing.assert_frame_equal(pd.read_parquet(out / "tables" / "bstar.parquet"), bstar, check_dtype=False)
    assert summary["estimator"]["estimator"] == "rankmodel" and summary["estimator"]["fallback"] == "centred"
    measured, _ = predict.measured_delays(z, pd.read_parquet(out / "tables" / "tax_collectives.parquet"),
                                          pd.read_parquet(out / "tables" / "attribution_collectives.parquet"))
    pvm = predict_table(choice, predict.predicted_vs_measured, measured, 4, source="predicted-vs-measured")
    pd.testing.assert_frame_equal(pd.read_parquet(out / "tables" / "predicted_vs_measured.parquet"), pvm,
                                  check_dtype=False)
    # the CLI computes the same numbers for one cell and b
    cell = scales.iloc[0]
    one = predict.tau_table(fit, ns, float(cell["b_us"]), m=4)
    row = run_tau[(run_tau["model"] == "gumbel") & (run_tau["gpu"] == cell["gpu"])
                  & (run_tau["precision"] == cell["precision"])]
    assert one["tau_mean_us"].to_numpy()[: len(ns)] == pytest.approx(row["tau_mean_us"].to_numpy(), rel=1e-12)


def test_report_draws_fig13_and_the_path_view(tiny_run: tuple[Path, dict, list[StageEvent]], tmp_path: Path,
                                              figure_cache: Path, drawn_report: Path) -> None:
    """The run's report carries the paper's Fig. 13 (B* as FLOPS grow, n = 256 and 4096) with the
    bandwidth-scaling requirement, and one Fig. 4-style path view per GPU; a run folder without
    the kept paths says why instead of leaving the view out."""
    import re

    from evtsync.report.html import build_report

    out, _, _ = tiny_run
    md = (out / "report.md").read_text(encoding="utf-8")
    assert (out / "figures" / "bstar-flops.png").is_file()
    # the requirement by hand: growth = (p·alpha + tau) / (p·alpha + tau/16) is monotone in tau, so its
    # posterior median is that of the H200 bf16 cell's median tau at n = 256 (fully connected: p = 2, alpha = 5)
    tau = pd.read_parquet(out / "tables" / "tau.parquet")
    ref = tau[(tau["gpu"] == "H200") & (tau["precision"] == "bf16") & (tau["n"] == 256)].iloc[0]
    want = (2 * 5.0 + ref["tau_median_us"]) / (2 * 5.0 + ref["tau_median_us"] / 16)
    growth = float(re.search(r"\| full \| 256 \| ([0-9.]+) \[", md).group(1))
    assert growth == pytest.approx(want, rel=0.01)
    # the path view: per GPU, the attributed collective with the largest tax
    coll = pd.read_parquet(out / "tables" / "attribution_collectives.parquet")
    ok = coll[coll["status"] == "ok"]
    for gpu, grp in ok.groupby("gpu"):
        top = grp.sort_values("tau_max_us", ascending=False).iloc[0]
        assert (out / "figures" / f"path-{gpu.lower()}.png").is_file()
        assert f"collective {int(top['index'])} of PG {top['pg']} in workload {top['workload']}" in md
    # without the kept paths, the report says so
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    (copy / "tables" / "attribution_paths.parquet").unlink()
    build_report(copy, tmp_path / "rep", figure_cache=figure_cache)  # its other figures: copied, not drawn
    text = (tmp_path / "rep" / "report.md").read_text(encoding="utf-8")
    assert text.count("No straggler-vs-fastest path view: this run folder has no tables/attribution_paths.parquet") == 3


def test_fits_run_side_by_side_in_a_pool_and_give_the_same_draws(tiny_run: tuple[Path, dict, list[StageEvent]],
                                                                  tmp_path: Path) -> None:
    """With two models and --jobs 2 the fits are jobs of a process pool: each fit stage says
    where its fit ran, and the gumbel fit's draws are those of the in-process run (same seed).
    The run is the tiny run's folder again with its fit removed and the GEV model added, without
    the report: the stages before the fits are reused (the same z-scores as a fresh run's: the
    demo is seeded), both fits run."""
    import xarray as xr

    out_single, manifest_single, _ = tiny_run
    assert manifest_single["stages"]["fit-gumbel"]["job_ran_in"] == "this process"  # one fit: no pool
    out = tmp_path / "demo"
    shutil.copytree(out_single, out)
    (out / "fits" / "gumbel.nc").unlink()
    manifest, events = _run(out, models=["gumbel", "gev"], jobs=2, report=False)
    ran = {e.stage for e in events if e.action == "ran"}
    assert {"fit-gumbel", "fit-gev"} <= ran and {"demo", "tax", "attribution", "zscores"}.isdisjoint(ran), ran
    for name in ("fit-gumbel", "fit-gev"):
        entry = manifest["stages"][name]
        assert entry["status"] == STATUS_DONE, entry.get("reason")
        assert entry["job_ran_in"] == "a pool of 2 processes"
        assert entry["cpu_seconds"] > 0  # the fit's own CPU in its pool process: the stage's cost
    _assert_outputs_intact(out, manifest)
    pooled = xr.open_datatree(out / "fits" / "gumbel.nc")
    single = xr.open_datatree(out_single / "fits" / "gumbel.nc")
    for var in single["posterior"].data_vars:
        np.testing.assert_array_equal(pooled["posterior"][var].values, single["posterior"][var].values)
    assert pooled.attrs["workloads"] == single.attrs["workloads"]


def test_a_run_reads_each_fit_once_and_a_rewritten_fit_again(tiny_run: tuple[Path, dict, list[StageEvent]],
                                                             tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """compare, prediction, predicted-vs-measured and the report share Run.fit_tree: one read per
    fit file, and a file rewritten since (another size or mtime) is read again."""
    from evtsync.evt import bayesfit
    from evtsync.pipeline.engine import Run
    from evtsync.pipeline.options import RunOptions

    out, _, _ = tiny_run
    fit = tmp_path / "fits" / "gumbel.nc"
    fit.parent.mkdir()
    shutil.copy2(out / "fits" / "gumbel.nc", fit)
    reads: list[Path] = []
    real = bayesfit.load_fit
    monkeypatch.setattr(bayesfit, "load_fit", lambda p, **kw: reads.append(Path(p)) or real(p, **kw))
    run = Run(RunOptions(out=tmp_path))
    first = run.fit_tree(fit)
    # the run reads no log-likelihood (issue 30 item 6: nothing of it uses that group)
    assert "log_likelihood" not in first.children and "log_likelihood" in real(fit).children
    assert run.fit_tree(fit) is first and run.fit_tree(tmp_path / "fits" / "." / "gumbel.nc") is first
    assert len(reads) == 1
    stat = fit.stat()
    os.utime(fit, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))     # written again, one second later
    second = run.fit_tree(fit)
    assert len(reads) == 2 and second is not first
    assert run.fit_tree(fit) is second and len(reads) == 2


def test_summary_stage_writes_the_answer_table(tiny_run: tuple[Path, dict, list[StageEvent]],
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """tables/summary.parquet and summary.json hold the report's answer table, recomputed here
    from the stages' tables with pandas; `evtsync run --json` prints the JSON."""
    from evtsync.cli.run import run_summary

    out, manifest, _ = tiny_run
    assert manifest["stages"]["summary"]["status"] == STATUS_DONE
    table = pd.read_parquet(out / "tables" / "summary.parquet")
    doc = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert [(r["gpu"], r["precision"]) for r in doc["rows"]] == list(zip(table["gpu"], table["precision"], strict=True))
    coll = pd.read_parquet(out / "tables" / "tax_collectives.parquet")
    z = pd.read_parquet(out / "tables" / "zscores.parquet")
    bstar = pd.read_parquet(out / "tables" / "bstar.parquet")
    for row in doc["rows"]:
        workloads = set(z[(z["gpu"] == row["gpu"]) & (z["precision"] == row["precision"])]["workload"])
        pgs = set(zip(z["workload"], z["pg"].astype(str), strict=True))
        taxes = coll[coll["workload"].isin(workloads) & coll["valid"].astype(bool)
                     & np.array([(w, str(p)) in pgs for w, p in zip(coll["workload"], coll["pg"], strict=True)])
                     ]["tau_max_us"]
        assert row["n_collectives"] == len(taxes) and row["tax_median_us"] == pytest.approx(taxes.median())
        b = bstar[(bstar["topology"] == "ring") & (bstar["gpu"] == row["gpu"])
                  & (bstar["precision"] == row["precision"]) & (bstar["n"] == doc["n"])]
        # the B* table's point: its posterior median for a per-rank row (the rank model), else the posterior mean
        point = "bstar_median_gbps" if b["estimator"].iloc[0] in ("rankmodel", "ranktail") else "bstar_mean_gbps"
        assert row["bstar_ring_gbps"] == pytest.approx(float(b[point].iloc[0]))
    # who straggles: the most frequent straggler of each PG, counted here from the collectives
    per_pg = pd.read_parquet(out / "tables" / "tax_stragglers.parquet")
    for r in per_pg.itertuples():
        used = coll[(coll["workload"] == r.workload) & (coll["pg"].astype(str) == str(r.pg))
                    & coll["valid"].astype(bool) & (coll["tau_max_us"] > 0)]
        counts = used["straggler_rank"].value_counts()
        assert counts.iloc[0] == round(r.top_share * len(used)) and r.top_rank in counts[counts == counts.iloc[0]].index
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "B*, fully connected (GB/s)" in md and "top stragglers (share of collectives)" in md
    assert run_summary(out, manifest) == doc  # what `evtsync run --json` prints under "summary"
    # the demo's truth beside the estimates, read here from each ground_truth.json: the planted xi,
    # or for simulated ranks (gev null) the true mean straggler delay per n against tau(n)/b
    truth = pd.read_parquet(out / "tables" / "truth_xi.parquet")
    delay_path = out / "tables" / "truth_delay.parquet"
    delay = pd.read_parquet(delay_path) if delay_path.is_file() else pd.DataFrame(columns=["workload", "model"])
    xi = pd.read_parquet(out / "tables" / "xi.parquet")
    tau = pd.read_parquet(out / "tables" / "tau.parquet")
    truths = sorted((out / "inputs" / "demo").glob("*/ground_truth.json"))
    assert truths
    for path in truths:
        planted = json.loads(path.read_text(encoding="utf-8"))
        workload = planted.get("workload", path.parent.name)
        if planted["gev"] is not None:
            row = truth.set_index("workload").loc[workload]
            assert row["true_xi"] == planted["gev"]["xi"]
            est = xi[(xi["model"] == doc["model"]) & (xi["gpu"] == planted["gpu"])
                     & (xi["precision"] == planted["precision"])]
            assert bool(row["model_covers"]) == bool(est["xi_lo"].iloc[0] <= planted["gev"]["xi"] <= est["xi_hi"].iloc[0])
            continue
        true = planted["parent"]["true_straggler_delay_sd"]
        rows = delay[(delay["workload"] == workload) & (delay["model"] == doc["model"])]
        assert planted["config"]["sample_size"] in set(rows["n"])  # n = m at least
        for r in rows.itertuples():
            assert r.true_delay_sd == true[str(r.n)]
            t = tau[(tau["model"] == doc["model"]) & (tau["gpu"] == planted["gpu"])
                    & (tau["precision"] == planted["precision"]) & (tau["n"] == r.n)].iloc[0]
            assert bool(r.covers) == bool(t["tau_lo_us"] <= true[str(r.n)] * t["b_us"] <= t["tau_hi_us"])
    assert "Estimates vs ground truth (demo)" in md and "covers" in md
def test_run_json_prints_the_outcome(tiny_run: tuple[Path, dict, list[StageEvent]],
                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`evtsync run --json`: one strict JSON document with every stage's status, wall and CPU
    seconds, and the exit status of the text output (issue 34)."""
    import json
    from types import SimpleNamespace

    from evtsync.cli.run import _print_json
    from evtsync.pipeline.options import Workload

    out, manifest, _ = tiny_run
    result = SimpleNamespace(out=out, manifest=manifest, workloads=[Workload("a100-bf16", [out / "x.json"])])
    assert _print_json(result, [], out / "report.html", False) == 0

    def refuse(constant: str) -> None:
        raise ValueError(constant)

    doc = json.loads(capsys.readouterr().out, parse_constant=refuse)
    assert {n: e["status"] for n, e in doc["stages"].items()} == {n: e["status"] for n, e in manifest["stages"].items()}
    assert doc["stages"]["tax"]["cpu_seconds"] == manifest["stages"]["tax"]["cpu_seconds"] >= 0
    assert doc["workloads"] == [{"name": "a100-bf16", "n_traces": 1}] and doc["run_folder"] == str(out)
    assert doc["summary"] == json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert _print_json(result, ["tax"], None, False) == 1
