"""The report's answer-first parts (issue 20): the summary's numbers against the tables they come
from (recomputed here with pandas and SciPy, not with the report's helpers), the in-sample label,
the pivoted B* table, skipped sections, the responsive page (viewport meta, scrollable tables),
human column labels and the timestamp.

A small run folder is written by hand: tables with known values and a manifest, no sampler.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.core.intervals import quantile_interval
from evtsync.report.context import MIN_Z_FIGURE, ReportContext
from evtsync.report.html import timestamp_text
from evtsync.report.markdown import (
    Alert,
    Figure,
    Link,
    Section,
    Skipped,
    Table,
    fmt,
    human_label,
    render_markdown,
)
from evtsync.report.render import render_html
from evtsync.report.sections import gpu as gpu_sec
from evtsync.report.sections import prediction as prediction_sec
from evtsync.report.sections import pvm as pvm_sec
from evtsync.report.sections import summary as summary_sec
from evtsync.report.sections import xi as xi_sec
from evtsync.runfolder.summary import summary_numbers
from tests._lazy import lazy_module

stats = lazy_module("scipy.stats")

MODEL = "gev-hand"


def _write(run: Path, name: str, frame: pd.DataFrame) -> None:
    (run / "tables").mkdir(parents=True, exist_ok=True)
    frame.to_parquet(run / "tables" / f"{name}.parquet")


@pytest.fixture()
def hand_run(tmp_path: Path) -> tuple[Path, dict]:
    """Two cells (A100 bf16, A100 fp32); block PG "1"; PG "9" (not a block PG) with huge taxes."""
    rng = np.random.default_rng(3)
    run = tmp_path / "run"
    rows = []
    for workload in ("w-bf16", "w-fp32"):
        for i in range(60):
            rows.append({"workload": workload, "gpu": "A100", "pg": "1", "index": i, "valid": True,
                         "tau_max_us": float(rng.lognormal(6 if workload == "w-bf16" else 8, 0.5))})
        rows.append({"workload": workload, "gpu": "A100", "pg": "1", "index": 60, "valid": False,
                     "tau_max_us": 1e9})                                   # flagged invalid: left out
        for i in range(5):
            rows.append({"workload": workload, "gpu": "A100", "pg": "9", "index": i, "valid": True,
                         "tau_max_us": 1e8})                               # not the block PG: left out
    _write(run, "tax_collectives", pd.DataFrame(rows))
    z = pd.DataFrame([{"workload": w, "gpu": "A100", "precision": p, "pg": "1", "index": i, "block": "b",
                       "z": float(rng.gumbel()), "cv": 0.02, "block_mean_us": 1000.0, "block_sd_us": 20.0}
                      for w, p in (("w-bf16", "bf16"), ("w-fp32", "fp32")) for i in range(40)])
    _write(run, "zscores", z)
    att = pd.DataFrame([{"workload": w, "gpu": "A100", "pg": "1", "index": i,
                         "status": "ok" if i < 50 else "no_tax",
                         "path_kind": "gpu_only" if i % 10 else "launch_delay", "straggler_rank": 0}
                        for w in ("w-bf16", "w-fp32") for i in range(55)])
    _write(run, "attribution_collectives", att)
    _write(run, "xi", pd.DataFrame([
        {"model": MODEL, "gpu": "A100", "precision": "bf16", "xi_mean": 0.15, "xi_lo": 0.05, "xi_hi": 0.26,
         "converged": True},
        {"model": MODEL, "gpu": "A100", "precision": "fp32", "xi_mean": -0.02, "xi_lo": -0.1, "xi_hi": 0.07,
         "converged": True}]))
    tau = []
    for p, base in (("bf16", 100.0), ("fp32", 300.0)):
        for n in (4, 128, 512, 4096):
            tau.append({"model": MODEL, "gpu": "A100", "precision": p, "n": n, "tau_mean_us": base * np.log(n),
                        "tau_lo_us": 0.8 * base * np.log(n), "tau_hi_us": 1.3 * base * np.log(n),
                        "tau_share_infinite": 0.0 if p == "bf16" else 0.02, "converged": True})
    _write(run, "tau", pd.DataFrame(tau))
    bstar = []
    for topo in ("full", "ring", "torus3d"):
        for p in ("bf16", "fp32"):
            for n in (4, 8, 128, 512, 4096):
                r = 0.5 + 0.0001 * n + (0.1 if p == "fp32" else 0.0)
                bstar.append({"model": MODEL, "topology": topo, "gpu": "A100", "precision": p, "n": n,
                              "bstar_mean_gbps": 100.0 / n, "bstar_lo_gbps": 80.0 / n, "bstar_hi_gbps": 120.0 / n,
                              "bstar_hockney_gbps": 1000.0 / n, "reduction_mean": r, "reduction_lo": r - 0.05,
                              "reduction_hi": min(r + 0.05, 1.0), "converged": p == "bf16"})
    _write(run, "bstar", pd.DataFrame(bstar))
    _write(run, "compare", pd.DataFrame([
        {"rank": 0, "model": MODEL, "family": "gev", "elpd_loo": -100.0, "se": 5.0, "elpd_diff": 0.0, "diff_se": 0.0,
         "p_loo": 3.0, "n_bad_k": 0, "converged": True},
        {"rank": 1, "model": "gumbel", "family": "gumbel", "elpd_loo": -118.1, "se": 5.5, "elpd_diff": 18.1,
         "diff_se": 5.9, "p_loo": 2.0, "n_bad_k": 0, "converged": True}]))
    manifest = {"format": "evtsync-run/1", "options": {"m": 4}, "updated": "2026-12-01T09:35:28.324587+00:00",
                "stage_order": ["tax", "attribution", "zscores", f"fit-{MODEL}", "fit-gumbel", "compare",
                                "prediction"],
                "stages": {"tax": {"status": "done"}, "attribution": {"status": "done"},
                           "zscores": {"status": "done"},
                           f"fit-{MODEL}": {"status": "done", "outputs": {f"fits/{MODEL}.nc": "x"},
                                            "summary": {"converged": True}},
                           "fit-gumbel": {"status": "done", "outputs": {"fits/gumbel.nc": "x"},
                                          "summary": {"converged": True}},
                           "compare": {"status": "done"}, "prediction": {"status": "done"}}}
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run, manifest


def _order_statistic_median_ci(x: np.ndarray, level: float) -> tuple[float, float]:
    """Textbook interval: j from the Binomial(n, 1/2) lower tail, [x_(j), x_(n-j+1)]."""
    x = np.sort(x)
    n = x.size
    j = int(stats.binom.ppf((1 - level) / 2, n, 0.5))
    while j > 0 and stats.binom.cdf(j - 1, n, 0.5) > (1 - level) / 2:
        j -= 1
    return x[j - 1], x[n - j]


def test_summary_numbers_match_the_tables_they_come_from(hand_run: tuple[Path, dict]) -> None:
    run, manifest = hand_run
    numbers, info = summary_numbers(run, manifest)
    assert info["model"] == MODEL and info["n"] == 512
    assert list(zip(numbers["gpu"], numbers["precision"], strict=True)) == [("A100", "bf16"), ("A100", "fp32")]
    coll = pd.read_parquet(run / "tables" / "tax_collectives.parquet")
    att = pd.read_parquet(run / "tables" / "attribution_collectives.parquet")
    for row, workload in zip(numbers.itertuples(), ("w-bf16", "w-fp32"), strict=True):
        taxes = coll[(coll["workload"] == workload) & coll["valid"] & (coll["pg"] == "1")]["tau_max_us"]
        assert row.n_collectives == 60
        assert row.tax_median_us == pytest.approx(taxes.median())
        assert row.tax_p90_us == pytest.approx(taxes.quantile(0.9))
        lo, hi = _order_statistic_median_ci(taxes.to_numpy(), 0.9)
        assert (row.tax_median_lo_us, row.tax_median_hi_us) == (pytest.approx(lo), pytest.approx(hi))
        assert row.tax_p90_lo_us <= row.tax_p90_us <= row.tax_p90_hi_us
        ok = att[(att["workload"] == workload) & (att["status"] == "ok")]
        assert row.n_attributed == 50 and row.n_not_attributed == 5
        assert row.gpu_only_share == pytest.approx(45 / 50)                  # i % 10 != 0 among 0..49
        assert row.gpu_only_share == pytest.approx((ok["path_kind"] == "gpu_only").mean())
    bf16, fp32 = numbers.iloc[0], numbers.iloc[1]
    assert bf16["tau_mean_us"] == pytest.approx(100 * np.log(512))
    assert (bf16["xi_lo"], bf16["xi_hi"]) == (0.05, 0.26)
    assert bf16["verdict"] == "heavy (Fréchet)" and fp32["verdict"] == "light tail (Gumbel domain)"
    assert bf16["reduction_torus3d"] == pytest.approx(0.5 + 0.0512)
    assert "2.0% of tau draws infinite" in fp32["notes"]
    assert "not attributed" in bf16["notes"]
    assert "18.1 ± 5.9" in info["loo"] and "free shape" in info["loo"] and "more than 2" in info["loo"]


def test_summary_says_when_tau_at_its_n_is_beyond_the_cells_rank_values(hand_run: tuple[Path, dict]) -> None:
    """A ranktail row with n = 512 above its cell's 300 rank values is labelled in the summary (fp32);
    a cell of 5,000 values at 512 is not (bf16), and neither is a table without the column (above)."""
    run, manifest = hand_run
    tau = pd.read_parquet(run / "tables" / "tau.parquet")
    n_values = tau["precision"].map({"bf16": 5000, "fp32": 300})
    _write(run, "tau", tau.assign(n_values=n_values, beyond_data=tau["n"] > n_values))
    numbers, info = summary_numbers(run, manifest)
    bf16, fp32 = numbers.iloc[0], numbers.iloc[1]
    assert info["n"] == 512 and not bf16["beyond_data"] and fp32["beyond_data"]
    assert "tau(n) at n = 512: beyond the data (n > N = 300 rank values)" in fp32["notes"]
    assert "beyond the data" not in bf16["notes"]


def test_p90_interval_covers_at_its_level() -> None:
    """Exponential(1), true P90 = ln 10: coverage of the order-statistic interval is at least 90%."""
    rng = np.random.default_rng(11)
    hits = sum(lo <= np.log(10) <= hi for lo, hi in
               (quantile_interval(rng.exponential(size=80), 0.9, 0.9)[1:] for _ in range(1500)))
    assert hits / 1500 >= 0.90 - 3 * np.sqrt(0.09 / 1500)
    _, lo, hi = quantile_interval(np.arange(5.0), 0.9, 0.9)   # 5 points cannot bound a P90 above
    assert hi == np.inf and np.isfinite(lo)


def test_summary_comes_first_with_links_and_flags(hand_run: tuple[Path, dict], tmp_path: Path) -> None:
    run, manifest = hand_run
    ctx = ReportContext(run, tmp_path / "out", manifest)
    [summary] = summary_sec.build(ctx)
    table = next(i for i in summary.items if isinstance(i, Table))
    assert table.css_class == "summary"
    links = [v for v in table.frame.iloc[0] if isinstance(v, Link)]
    hrefs = {v.href for v in links}
    assert {"#tax-a100", "#attribution-a100", "#xi", "#tau", "#bstar", "#cell-a100-bf16"} <= hrefs
    assert table.frame.iloc[0]["tax median (µs)"].text.startswith(fmt(
        float(np.median(pd.read_parquet(run / "tables" / "tax_collectives.parquet").query(
            "workload == 'w-bf16' and valid and pg == '1'")["tau_max_us"]))))
    # the fp32 B* rows come from a non-converged fit: its summary row is flagged
    assert table.frame["not converged"].tolist() == [False, True]
    assert "NOT converged" in table.frame.iloc[1][summary_sec.SUMMARY_NOTE]
    page = render_html("T", "sub", [summary, Section("Later", ["x"], anchor="later")])
    assert page.index("Summary: the answers") < page.index("<nav>") < page.index("Later")
    assert '<a href="#tau">' in page


def test_markdown_summary_links_to_anchors(hand_run: tuple[Path, dict], tmp_path: Path) -> None:
    run, manifest = hand_run
    ctx = ReportContext(run, tmp_path / "out", manifest)
    md = render_markdown("T", summary_sec.build(ctx), tmp_path)
    assert '<a id="summary"></a>' in md
    assert "](#tax-a100)" in md and "](#compare)" in md


def test_bstar_table_is_pivoted_cells_by_n(hand_run: tuple[Path, dict]) -> None:
    run, _ = hand_run
    bstar = pd.read_parquet(run / "tables" / "bstar.parquet")
    wide = prediction_sec.bstar_pivot(bstar[bstar["n"].isin(prediction_sec.TABLE_NS)], "reduction")
    assert len(bstar) == 30 and len(wide) == 6                      # 3 topologies × 2 cells
    assert [c for c in wide.columns if c.startswith("n = ")] == ["n = 8", "n = 128", "n = 512", "n = 4096"]
    row = wide[(wide["topology"] == "ring") & (wide["precision"] == "fp32")].iloc[0]
    assert row["n = 512"] == "65.1 [60.1, 70.1]"                   # 100 × (0.5 + 0.0512 + 0.1) ± 5
    assert bool(row["not converged"]) and not wide[wide["precision"] == "bf16"]["not converged"].any()


def test_predicted_vs_measured_is_labelled_in_sample(tmp_path: Path) -> None:
    run = tmp_path / "run"
    pvm = pd.DataFrame([{"model": MODEL, "workload": "w", "gpu": "A100", "precision": "bf16", "n": 4,
                         "n_collectives": 30, "measured_mean_us": 10.0, "measured_lo_us": 9.0,
                         "measured_hi_us": 11.0, "predicted_mean_us": 10.5, "predicted_lo_us": 9.5,
                         "predicted_hi_us": 11.5, "inside_interval": True, "level": 0.9, "converged": True}])
    _write(run, "predicted_vs_measured", pvm)
    manifest = {"options": {"m": 4}, "stages": {"predicted-vs-measured": {
        "status": "done", "summary": {"selection": "collectives", "holdout_reason": "too few z-scores"}}}}
    ctx = ReportContext(run, tmp_path / "out", manifest)
    sections = pvm_sec.build(ctx)
    assert "(in-sample)" in sections[0].title
    texts = [getattr(i, "text", i) for i in sections[0].items if not isinstance(i, Figure)]
    assert any("In-sample" in t and "k = n/m = 1" in t for t in texts)
    figure = next(i for i in sections[0].items if isinstance(i, Figure))
    assert figure.caption.startswith("In-sample")
    # no out-of-sample table: a one-line reason instead of a silent gap
    assert sections[1].items == [Skipped("Skipped — too few z-scores.")]
    _write(run, "predicted_vs_measured_holdout", pvm.assign(model="mle-gev"))
    held = pvm_sec.build(ctx)[1]
    assert held.title.startswith("Out-of-sample") and any(isinstance(i, Table) for i in held.items)


def test_cell_with_two_zscores_is_skipped_with_its_reason(tmp_path: Path) -> None:
    z = pd.DataFrame({"gpu": "V100", "precision": "fp32", "workload": "dlrm", "block": ["a", "b"],
                      "z": [0.4, 1.1], "cv": 0.02})
    ctx = ReportContext(tmp_path, tmp_path / "out", {})
    sec = gpu_sec._cell_section(ctx, "V100", "fp32", z, None, None, None, None)
    assert len(sec.items) == 1 and isinstance(sec.items[0], Skipped)
    assert "2 z-score(s)" in sec.items[0].text and f"fewer than {MIN_Z_FIGURE}" in sec.items[0].text
    assert not (tmp_path / "out" / "figures").exists()                 # no empty QQ plot drawn
    page = render_html("T", "s", [sec])
    assert '<p class="skipped">Skipped — 2 z-score(s)' in page


def test_page_is_responsive_with_scrollable_tables_and_print_styles() -> None:
    tables = [Table(pd.DataFrame({"share_of_gpu_causes": [0.5], "tau_p90_us": [3.0]}), "c"),
              Table(pd.DataFrame({"a": [1]}))]
    page = render_html("T", "s", [Section("S", tables, anchor="s")])
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in page
    assert page.count('<div class="table-wrap"><table') == page.count("<table") == 2
    css = page[page.index("<style>"):page.index("</style>")]
    assert ".table-wrap{overflow-x:auto" in css and "@media print" in css
    assert "<th>share of GPU causes</th>" in page and "<th>tau p90 (µs)</th>" in page


def test_human_labels_and_timestamp() -> None:
    assert human_label("share_of_gpu_causes") == "share of GPU causes"
    assert human_label("bstar_hockney_gbps") == "bstar hockney (GB/s)"
    assert human_label("r_hat") == "R-hat" and human_label("ess_bulk") == "bulk ESS"
    assert human_label("n") == "n" and human_label("tau median µs [90% CI]") == "tau median µs [90% CI]"
    assert timestamp_text("2026-12-01T09:35:28.324587+00:00") == "2026-12-01 09:35:28 UTC"
    assert timestamp_text("2026-12-01T10:35:28.9+01:00") == "2026-12-01 09:35:28 UTC"
    assert timestamp_text(None) == "?"


def test_log_ticks_stay_few_and_readable() -> None:
    from evtsync.plots.base import _tick_text, log_ticks

    narrow = log_ticks(180.0, 650.0)                                    # the range that crowded before
    assert 2 <= len(narrow) <= 6 and all(180 <= t <= 650 for t in narrow)
    assert [_tick_text(t) for t in narrow] == [f"{t:g}" for t in narrow]
    wide = log_ticks(0.5, 2e7)
    assert 2 <= len(wide) <= 6 and all(np.log10(t) == round(np.log10(t)) for t in wide)
    tiny = log_ticks(101.0, 104.0)
    assert len(tiny) >= 1 and all(101 <= t <= 104 for t in tiny)


def test_non_converged_fit_flags_every_row_beside_its_numbers(hand_run: tuple[Path, dict], tmp_path: Path) -> None:
    run, manifest = hand_run
    xi = pd.read_parquet(run / "tables" / "xi.parquet").assign(converged=False)
    _write(run, "xi", xi)
    ctx = ReportContext(run, tmp_path / "out", manifest)
    [summary] = summary_sec.build(ctx)
    table = next(i for i in summary.items if isinstance(i, Table))
    assert table.frame["not converged"].all()
    assert all("NOT converged" in note for note in table.frame[summary_sec.SUMMARY_NOTE])


def test_a_stage_wide_reason_is_said_once_not_per_row(hand_run: tuple[Path, dict], tmp_path: Path) -> None:
    run, manifest = hand_run
    (run / "tables" / "attribution_collectives.parquet").unlink()
    manifest["stages"]["attribution"] = {"status": "not_applicable", "reason": "no collective to attribute"}
    ctx = ReportContext(run, tmp_path / "out", manifest)
    [summary] = summary_sec.build(ctx)
    table = next(i for i in summary.items if isinstance(i, Table))
    assert not table.frame[summary_sec.SUMMARY_NOTE].str.contains("GPU-only").any()   # not repeated per row
    alerts = [i.text for i in summary.items if isinstance(i, Alert)]
    assert alerts == ["Every row of the summary: GPU-only share: stage attribution did not apply: no collective to "
                      "attribute."]
    assert (table.frame["GPU-only stragglers (%)"].map(lambda v: v.text) == "–").all()


def test_xi_forest_is_skipped_when_every_model_fixes_xi(tmp_path: Path) -> None:
    run = tmp_path / "run"
    _write(run, "xi", pd.DataFrame([{"model": "gumbel", "gpu": "A100", "precision": "bf16", "xi_mean": 0.0,
                                     "xi_lo": 0.0, "xi_hi": 0.0, "converged": True}]))
    ctx = ReportContext(run, tmp_path / "out", {})
    [sec] = xi_sec.build(ctx)
    # first the rank model's shape, missing here (a run folder without its tables: said), then the comparators'
    assert isinstance(sec.items[0], Skipped) and "rank_xi.parquet" in sec.items[0].text
    skipped = [i for i in sec.items[1:] if isinstance(i, Skipped)]
    assert len(skipped) == 1 and "free shape" in skipped[0].text
    assert not any(isinstance(i, Figure) for i in sec.items)


def test_summary_holds_bstar_in_gbps_and_what_each_interval_is(hand_run: tuple[Path, dict], tmp_path: Path) -> None:
    import json

    from evtsync.runfolder.summary import summary_document

    run, manifest = hand_run
    numbers, info = summary_numbers(run, manifest)
    bf16 = numbers.iloc[0]
    for topo in ("full", "ring", "torus3d"):          # the hand table: B* = 100/n [80/n, 120/n] GB/s, n = 512
        assert (bf16[f"bstar_{topo}_gbps"], bf16[f"bstar_{topo}_lo_gbps"], bf16[f"bstar_{topo}_hi_gbps"]) == (
            pytest.approx(100 / 512), pytest.approx(80 / 512), pytest.approx(120 / 512))
    assert bf16["tax_median_interval"] == "90%" and bf16["tax_p90_interval"] == "90%"   # 60 collectives each
    assert "Consistent" in info["loo_and_tail"]        # LOO clearly prefers xi free; bf16's interval excludes 0
    doc = json.loads(json.dumps(summary_document(numbers, info), allow_nan=False))   # strict JSON
    assert doc["n"] == 512 and doc["model"] == MODEL and len(doc["rows"]) == 2
    assert doc["rows"][0]["bstar_full_gbps"] == pytest.approx(100 / 512)
    ctx = ReportContext(run, tmp_path / "out", manifest)
    [summary] = summary_sec.build(ctx)
    table = next(i for i in summary.items if isinstance(i, Table))
    assert table.frame.iloc[0]["B*, fully connected (GB/s)"].text == "0.195 [0.156, 0.234]"
    assert info["loo_and_tail"] in summary.items


def test_a_tax_from_three_collectives_is_a_range_not_a_90_percent_interval(hand_run: tuple[Path, dict],
                                                                           tmp_path: Path) -> None:
    run, manifest = hand_run
    coll = pd.read_parquet(run / "tables" / "tax_collectives.parquet")
    three = coll[(coll["workload"] == "w-bf16") & (coll["index"] < 3) | (coll["workload"] == "w-fp32")]
    _write(run, "tax_collectives", three)
    numbers, _ = summary_numbers(run, manifest)
    bf16 = numbers.iloc[0]
    taxes = sorted(three[(three["workload"] == "w-bf16") & three["valid"] & (three["pg"] == "1")]["tau_max_us"])
    assert bf16["n_collectives"] == 3 and bf16["tax_median_interval"] == "range of 3"
    assert (bf16["tax_median_lo_us"], bf16["tax_median_hi_us"]) == (taxes[0], taxes[-1])
    assert bf16["tax_p90_hi_us"] == np.inf and "cannot bound" in bf16["tax_p90_interval"]
    [summary] = summary_sec.build(ReportContext(run, tmp_path / "out", manifest))
    table = next(i for i in summary.items if isinstance(i, Table))
    cell = table.frame.iloc[0]["tax median (µs)"].text
    assert cell.endswith("(range of 3)") and "90%" not in cell
    assert table.frame.iloc[0]["tax P90 (µs)"].text.endswith("∞]")


def test_summary_has_the_mean_cv_over_block_identities(hand_run: tuple[Path, dict]) -> None:
    """The report's "mean coefficient of variation r" is the summary stage's ``cv_mean`` (issue 31):
    a mean over the cell's block identities, not over its z-score rows (by hand: block a with r =
    0.01 and 30 rows, block b with r = 0.04 and 10 rows: (0.01 + 0.04) / 2 = 0.025, not 0.0175)."""
    run, manifest = hand_run
    z = pd.DataFrame([{"workload": "w-bf16", "gpu": "A100", "precision": "bf16", "pg": "1", "index": i,
                       "block": block, "z": 0.1 * i, "cv": cv}
                      for block, cv, k in (("a", 0.01, 30), ("b", 0.04, 10)) for i in range(k)])
    _write(run, "zscores", z)
    numbers, _ = summary_numbers(run, manifest)
    assert numbers.set_index("precision").loc["bf16", "cv_mean"] == pytest.approx(0.025)


def test_summary_caption_names_its_points_medians_not_means(hand_run: tuple[Path, dict], tmp_path: Path) -> None:
    """Issue 45: the shown tau(n) of ranktail rows are posterior medians (the demo: 1160 shown, mean
    1219.5); the caption must say so, not call them means. Here the point (median) is written apart
    from the mean, and the caption is read for the word."""
    run, manifest = hand_run
    tau = pd.read_parquet(run / "tables" / "tau.parquet")
    _write(run, "tau", tau.assign(estimator="ranktail", point_estimate="posterior median",
                                  tau_point_us=0.95 * tau["tau_mean_us"]))
    ctx = ReportContext(run, tmp_path / "out", manifest)
    [summary] = summary_sec.build(ctx)
    caption = next(str(i.text) for i in summary.items if "How the summary is computed" in str(getattr(i, "text", "")))
    assert "are means" not in caption
    assert "ranktail: posterior median" in caption
    table = next(i for i in summary.items if isinstance(i, Table)).frame
    shown = table.iloc[0]["tau(n = 512) (µs)"].text
    assert shown.startswith(fmt(0.95 * 100 * np.log(512)))  # the median shown, as the caption says


def test_tail_verdict_reads_the_rank_times_shape_and_never_calls_0_heavy(hand_run: tuple[Path, dict]) -> None:
    """Issue 45: a cell whose GEV-of-maxima xi excludes 0 (bf16: [0.05, 0.26], as a lognormal cell's
    maxima do) but whose rank times' GPD shape holds 0 is "light tail (Gumbel domain)", not heavy;
    a GPD shape interval below 0 is bounded; where no GPD shape is written, the GEV's reading
    stands, labelled by its source."""
    run, manifest = hand_run
    tau = pd.read_parquet(run / "tables" / "tau.parquet")
    gpd = {"bf16": (0.01, -0.06, 0.09), "fp32": (-0.3, -0.45, -0.2)}
    _write(run, "tau", tau.assign(**{f"gpd_xi_{k}": tau["precision"].map({p: v[i] for p, v in gpd.items()})
                                     for i, k in enumerate(("mean", "lo", "hi"))}))
    numbers, _ = summary_numbers(run, manifest)
    bf16, fp32 = numbers.iloc[0], numbers.iloc[1]
    assert bf16["verdict"] == "light tail (Gumbel domain)" and "GPD" in bf16["verdict_source"]
    assert fp32["verdict"] == "bounded (Weibull)"
    _write(run, "tau", tau)  # no GPD shape: the GEV of the maxima's verdict, said to be its
    numbers, _ = summary_numbers(run, manifest)
    assert numbers.iloc[0]["verdict"] == "heavy (Fréchet)" and "GEV" in numbers.iloc[0]["verdict_source"]


def test_loo_sentence_separates_the_shape_from_location_and_scale(hand_run: tuple[Path, dict]) -> None:
    """Issue 45: on the demo, Δelpd 79 of gev-hier over the pooled gumbel was credited to the free
    shape although gumbel-hier (per-cell location and scale, xi = 0) was 40 behind: about half is
    location and scale. The sentence compares the model of the other family with the same location
    and scale; where none was fitted it says the difference is not the shape's alone."""
    from evtsync.runfolder.summary import loo_verdict

    hier, pooled = "location and scale per cell from a population (cells by gpu, precision)", \
        "location and scale one for all cells"
    rows = [("gev-hier", "gev", 0.0, 0.0, hier), ("gumbel", "gumbel", 79.0, 11.6, pooled),
            ("gumbel-hier", "gumbel", 40.1, 9.5, hier)]  # the pooled Gumbel ranked first on purpose
    table = pd.DataFrame([{"rank": i, "model": m, "family": f, "elpd_diff": d, "diff_se": se, "location_scale": ls}
                          for i, (m, f, d, se, ls) in enumerate(rows)])
    text = loo_verdict(table)
    assert "over gumbel-hier by Δelpd 40.1" in text and "shape's gain" in text and "79" not in text
    text = loo_verdict(table[table["model"] != "gumbel-hier"])
    assert "over gumbel by Δelpd 79" in text and "not the shape's gain alone" in text
    assert "location and scale" in text
    # the comparison's own verdict says it of each pair whose structures differ, and only of those
    from evtsync.evt.compare import verdict

    lines = verdict(table.assign(elpd_loo=-table["elpd_diff"], k_good=100, k_bad=0, k_very_bad=0,
                                 converged=True)).splitlines()
    assert "not the shape's gain alone" in lines[0] and "over gumbel " in lines[0]   # pooled gumbel
    assert "not the shape's gain alone" not in lines[1] and "over gumbel-hier" in lines[1]
