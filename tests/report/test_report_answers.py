"""The report's answers as a reader needs them (issue 34 item 3) and the report as a reader of the
stages' tables (issue 31 item 3), on small hand-made inputs with hand-counted expectations:

- who straggles, per PG, against a straggler sequence counted by hand;
- intervals from too few points named for what they are ("range of n"), with the coverage of
  [min, max] computed by hand (1 − 2·0.5^n);
- a "what to do next" line where a stage could not compute, said once, not once per section;
- one sentence reconciling LOO and the per-cell tail verdicts;
- the critical-path figure: no empty lane, an axis in ms/s with no offset, the cause's label
  inside the axes;
- figures carry their legible width; the sections are one module each, in one list.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.core.intervals import median_interval, median_interval_kind
from evtsync.report.context import ReportContext
from evtsync.report.render import png_width, render_html
from evtsync.report.sections import RUN_SECTIONS
from evtsync.report.sections.stragglers import straggler_frame
from evtsync.runfolder.layout import next_step, root_cause
from evtsync.runfolder.summary import reconcile_loo_tail
from evtsync.sync.tax import TaxTables, straggler_identity


def _collectives(stragglers: list[int], taxes: list[float] | None = None, pg: str = "1") -> pd.DataFrame:
    taxes = taxes or [10.0] * len(stragglers)
    return pd.DataFrame({"pg": pg, "pg_desc": "tp", "index": range(len(stragglers)), "collective": "AllReduce",
                         "valid": True, "tau_max_us": taxes, "straggler_rank": stragglers})


def test_who_straggles_by_hand() -> None:
    # PG of ranks 0..3; stragglers 0 0 1 2 2 0, then one collective without a tax (left out)
    coll = _collectives([0, 0, 1, 2, 2, 0, 3], [5.0] * 6 + [0.0])
    ranks = pd.DataFrame({"pg": "1", "rank": [0, 1, 2, 3]})
    per_pg, per_rank = straggler_identity(TaxTables(coll, ranks))
    frame = straggler_frame(per_pg.assign(workload="w"), per_rank.assign(workload="w"))
    row = frame.iloc[0]
    # by hand: rank 0 straggled 3 of 6, rank 2 2 of 6, rank 1 1 of 6; rank 3 only where there was no tax
    assert row["top stragglers (share of collectives)"] == "rank 0 50%, rank 2 33.3%, rank 1 16.7%"
    assert row["uniform share (1 / ranks)"] == "25%"
    assert row["change rate"] == "60%"                        # 0→0 same, 0→1, 1→2, 2→2 same, 2→0: 3 of 5
    assert row["distinct stragglers"] == "3 of 4 ranks"
    assert (row["collectives"], row["left out"]) == (6, 1)
    assert list(frame.columns[:3]) == ["workload", "PG", "top stragglers (share of collectives)"]  # key columns first


@pytest.mark.parametrize(("n", "kind"), [(3, "range of 3"), (4, "range of 4"), (5, "90%"), (40, "90%")])
def test_a_median_interval_from_too_few_points_is_called_a_range(n: int, kind: str) -> None:
    # [min, max] of n points covers the median with probability 1 − 2·0.5^n: 0.75 for 3, 0.875 for 4,
    # 0.9375 for 5 — below 90% for 3 and 4, so those are ranges, not 90% intervals
    assert median_interval_kind(n, 0.9) == kind
    if n <= 5:
        values = np.arange(float(n))
        assert median_interval(values, 0.9)[1:] == (0.0, float(n - 1))
        assert (1 - 2 * 0.5**n >= 0.9) == (kind == "90%")


def test_summary_shows_a_range_as_a_range() -> None:
    from evtsync.core.display import fmt_interval

    assert fmt_interval(582.0, 221.0, 883.0, "range of 3") == "582 [221, 883] (range of 3)"
    assert fmt_interval(582.0, 221.0, 883.0, "90%") == "582 [221, 883]"
    assert fmt_interval(582.0, 221.0, float("inf"), None) == "582 [221, ∞]"


def _manifest_too_few_zscores() -> dict:
    reason = "2 z-scores, fewer than 30 for a Bayesian fit (block samples dropped: 6 no GEMM kernel)"
    return {"stage_order": ["tax", "zscores", "fit-gumbel", "fit-gev", "compare", "prediction", "summary"],
            "stages": {"tax": {"status": "done"}, "zscores": {"status": "done"},
                       "fit-gumbel": {"status": "not_applicable", "reason": reason},
                       "fit-gev": {"status": "not_applicable", "reason": reason},
                       "compare": {"status": "not_applicable", "reason": "0 fitted model(s): nothing to compare"},
                       "prediction": {"status": "not_applicable", "reason": "no Bayesian fit has results"}}}


def test_what_to_do_next_follows_the_chain_to_its_cause() -> None:
    manifest = _manifest_too_few_zscores()
    stage, reason = root_cause(manifest, "prediction")
    assert stage == "fit-gumbel" and reason.startswith("2 z-scores, fewer than 30")
    assert root_cause(manifest, "compare")[0] == "fit-gumbel"       # not its own "nothing to compare"
    step = next_step(stage, reason)
    assert "profile more training steps" in step and "torch.profiler.schedule" in step and "at least 30" in step
    assert next_step("attribution", "no collective to attribute") == ""   # nothing a user can change


def test_a_reason_is_explained_once_then_referred_to(tmp_path: Path) -> None:
    ctx = ReportContext(tmp_path, tmp_path / "out", _manifest_too_few_zscores())
    first = ctx.why_not("prediction")
    assert "Because stage fit-gumbel did not apply: 2 z-scores, fewer than 30" in first
    assert "profile more training steps" in first
    again = [ctx.why_not(name) for name in ("prediction", "compare", "prediction")]
    for text in again:
        assert "fewer than 30" not in text and "reason given above (stage fit-gumbel)" in text


def _compare(best: str, diff: float, se: float) -> pd.DataFrame:
    other = "gumbel" if best == "gev" else "gev"
    return pd.DataFrame({"rank": [0, 1], "model": [best, other], "family": [best, other],
                         "elpd_diff": [0.0, diff], "diff_se": [0.0, se]})


def test_one_sentence_reconciles_loo_and_the_tail_verdicts() -> None:
    verdicts = ["heavy (Fréchet)", "light tail (Gumbel domain)", "bounded (Weibull)"]
    unclear = reconcile_loo_tail(_compare("gev", 3.0, 2.5), verdicts)      # 3 < 2 × 2.5: no clear preference
    assert "does not clearly separate" in unclear and "2 of 3 cell(s)" in unclear
    assert unclear.count(".") == 1                                          # one sentence
    clear = reconcile_loo_tail(_compare("gev", 18.0, 5.0), verdicts)
    assert clear.startswith("Consistent") and "2 of 3" in clear
    gumbel = reconcile_loo_tail(_compare("gumbel", 18.0, 5.0), ["light tail (Gumbel domain)"] * 2)
    assert gumbel.startswith("Consistent") and "every cell" in gumbel
    assert reconcile_loo_tail(None, verdicts) == ""


def _paths(gpu_only: bool) -> pd.DataFrame:
    rows = []
    for role, rank, gemm_ms in (("straggler", 6, 560.0), ("fastest", 4, 10.0)):
        t = 0.0
        for name, kind, ms in (("gemm", "gpu", gemm_ms), ("launch", "cpu_op", 0.0 if gpu_only else 2.0),
                               ("nccl", "gpu", 1000.0)):
            if ms == 0:
                continue
            rows.append({"pg": "2", "index": 140, "rank": rank, "role": role, "name": name, "kind": kind,
                         "start_ns": t * 1e6, "end_ns": (t + ms) * 1e6,
                         "extra_us": (gemm_ms - 10.0) * 1e3 if role == "straggler" and name == "gemm" else 0.0})
            t += ms
    return pd.DataFrame(rows)


@pytest.mark.parametrize("gpu_only", [True, False])
def test_path_figure_has_no_empty_lane_and_reads_in_ms(gpu_only: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from evtsync.plots.paths import straggler_vs_fastest, time_unit

    fig = straggler_vs_fastest(_paths(gpu_only), "2", 140)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert len(labels) == (2 if gpu_only else 4)          # a path without CPU events has no CPU lane
    assert all("CPU" not in label for label in labels) == gpu_only
    assert "(ms)" in ax.get_xlabel()                      # 1.56 s span: milliseconds
    fig.canvas.draw()
    assert ax.xaxis.get_major_formatter().get_offset() == ""
    label = next(t for t in ax.texts if "principal cause" in t.get_text())
    assert "+550,000 µs" in label.get_text() or "+550000 µs" in label.get_text()
    box, axes_box = label.get_window_extent(), ax.get_window_extent()
    assert axes_box.x0 - 1 <= box.x0 and box.x1 <= axes_box.x1 + 1   # inside the axes
    assert time_unit(5e5) == (1e3, "µs") and time_unit(3e9) == (1e9, "s")


def test_figures_scale_to_the_width_with_a_narrow_rendering(tmp_path: Path) -> None:
    """Issue 49: a figure is scaled to its box (no minimum width, no scroll box); the report's
    figures carry a narrow rendering (4 in wide, panels in one column, text >= 9 pt) picked at
    <= 600 px, and each PNG says its smallest text in its own pixels (read back here from the PNG
    chunk, against the sizes set by hand: 7 pt legend → 7 × 110 / 72, raised to 9 pt when narrow)."""
    import base64
    import re

    import matplotlib.pyplot as plt

    from evtsync.plots.base import FONT_KEY, new_figure, png_renderings
    from evtsync.report.markdown import EmbeddedFigure, Section
    from evtsync.report.render import png_text

    fig, axes = new_figure(9, 3, ncols=2)
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="line")
        ax.legend(fontsize=7)
    wide, narrow = png_renderings(fig)
    assert float(png_text(wide, FONT_KEY)) == pytest.approx(7 * 110 / 72, abs=0.01)
    assert float(png_text(narrow, FONT_KEY)) == pytest.approx(9 * 110 / 72, abs=0.01)
    w, n = (plt.imread(io.BytesIO(p)).shape for p in (wide, narrow))
    assert png_width(wide) == w[1] and png_width(narrow) == n[1]
    assert n[1] <= 4 * 110 + 20 < w[1] and n[0] > n[1]   # narrow and taller: two panels stacked
    page = render_html("T", "s", [Section("S", [EmbeddedFigure(wide, "a figure", "", narrow)])])
    assert "figure img{max-width:100%;height:auto" in page and "legible-width" not in page
    source = re.search(r'<source media="\(max-width:600px\)" srcset="data:image/png;base64,([^"]+)">', page)
    assert source and base64.b64decode(source.group(1)) == narrow
    assert f'data-fonts="{w[1]}:{7 * 110 / 72:.2f} {n[1]}:{9 * 110 / 72:.2f}"' in page
    # an image with neither the narrow rendering nor font metadata is embedded plainly
    assert "<picture>" not in render_html("T", "s", [Section("S", [EmbeddedFigure(b"not a png", "x")])])


def test_the_font_chunk_is_what_savefig_metadata_writes() -> None:
    """The smallest-text chunk is added to the PNG after saving (issue 48: one layout pass fewer):
    the bytes must be those matplotlib writes when given the same metadata itself (its PNG writer is
    the independent reference), the value the 8 pt tick labels set by hand (8 × 110 / 72)."""
    from evtsync.plots.base import FIGURE_DPI, FONT_KEY, new_figure, png_renderings

    def figure():
        fig, ax = new_figure(4, 3)
        ax.plot([0, 1, 2], [3, 1, 2])
        ax.tick_params(labelsize=8)
        ax.set_xlabel("x", fontsize=10)
        return fig

    wide, _ = png_renderings(figure())
    reference = io.BytesIO()
    figure().savefig(reference, format="png", dpi=FIGURE_DPI, bbox_inches="tight",
                     metadata={FONT_KEY: f"{8 * 110 / 72:.2f}"})
    assert wide == reference.getvalue()
    blank, _ = new_figure(2, 2)
    blank.axes[0].set_axis_off()                                        # no text at all: no chunk
    assert FONT_KEY.encode() not in png_renderings(blank)[0]


def test_the_comparators_caption_says_how_to_add_the_bayesian_fits_once(tmp_path: Path) -> None:
    """A default run (the Bayesian GEV fits opt-in): the comparison section's caption gives the stage's
    reason, then which comparators ran; the command that adds the fits appears once, not once in the
    stage's next step and again in the comparators sentence (review of issue 48)."""
    from evtsync.pipeline.options import OPT_IN_REASON
    from evtsync.report.sections import compare

    stage = {"status": "not_applicable", "reason": OPT_IN_REASON}
    manifest = {"stages": {"tax": {"status": "done"}, "zscores": {"status": "done"},
                           "fit-gumbel": dict(stage), "compare": dict(stage),
                           "prediction": {"status": "done", "summary": {"comparators": {
                               "mle": "ran", "paper": "ran", "ranktail": "ran", "bayes-gev": OPT_IN_REASON}}}}}
    [section] = compare.build(ReportContext(tmp_path, tmp_path / "out", manifest))
    caption = " ".join(item.text for item in section.items if hasattr(item, "text"))
    assert "Because stage fit-gumbel did not apply for the same reason." in caption
    assert caption.count("not run (opt-in: --comparators bayes-gev)") == 1   # the reason said once too
    assert caption.count("evtsync run --comparators bayes-gev") == 1
    assert "Comparators computed in this run: the GEV MLE" in caption and "ranktail" in caption
    assert "Not computed: the Bayesian GEV fits of block maxima" in caption


def test_sections_are_one_module_each_in_one_list() -> None:
    modules = [builder.__module__ for builder in RUN_SECTIONS]
    assert len(set(modules)) == len(modules) and modules[0].endswith(".summary")
    assert all(m.startswith("evtsync.report.sections.") for m in modules)
    html_source = (Path(__file__).resolve().parents[2] / "evtsync" / "report" / "html.py").read_text()
    assert len(html_source.splitlines()) < 150                         # the entry point only


def test_attribution_stage_writes_the_wilson_intervals_by_hand() -> None:
    """9 attributed collectives, 6 with a GPU-only straggler path; categories 5 gemm, 3 attention,
    1 launch delay (and 2 collectives not attributed, left out). Wilson's interval by its textbook
    formula: (p + z²/2n ± z·sqrt(p(1−p)/n + z²/4n²)) / (1 + z²/n), z the 95% normal quantile."""
    from scipy import stats

    from evtsync.pipeline.stages import attribution_with_intervals

    coll = pd.DataFrame({"status": ["ok"] * 9 + ["no_tax"] * 2,
                         "path_kind": ["gpu_only"] * 6 + ["launch_delay"] * 3 + ["gpu_only"] * 2})
    summary = pd.DataFrame({"category": ["gemm", "attention", "launch_delay"], "count": [5, 3, 1]})
    out = attribution_with_intervals(summary, coll)
    z = stats.norm.ppf(0.95)

    def wilson(k: int, n: int) -> tuple[float, float]:
        p = k / n
        centre, half = p + z * z / (2 * n), z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        return (centre - half) / (1 + z * z / n), (centre + half) / (1 + z * z / n)

    assert (out["n_attributed"] == 9).all() and out["gpu_only_share"].iloc[0] == pytest.approx(6 / 9)
    assert (out["gpu_only_share_lo"].iloc[0], out["gpu_only_share_hi"].iloc[0]) == pytest.approx(wilson(6, 9))
    for row, k in zip(out.itertuples(), (5, 3, 1), strict=True):
        assert row.collective_share == pytest.approx(k / 9)
        assert (row.collective_share_lo, row.collective_share_hi) == pytest.approx(wilson(k, 9))


def test_pivoted_prediction_tables_show_the_label_columns_a_stage_writes() -> None:
    """A label the prediction stage adds (here an estimator name, one per row key) is shown beside
    the keys; bookkeeping columns and per-n values are not."""
    from evtsync.report.context import label_columns
    from evtsync.report.sections.prediction import bstar_pivot

    rows = [{"model": "m", "topology": "ring", "gpu": "H100", "precision": "bf16", "n": n, "estimator": "exact",
             "fit_kind": "bayes", "bstar_mean_gbps": 1.0, "bstar_lo_gbps": 0.5, "bstar_hi_gbps": 2.0,
             "converged": True} for n in (8, 64)]
    frame = pd.DataFrame(rows)
    assert label_columns(frame, ["topology", "gpu", "precision"]) == ["model", "estimator"]
    wide = bstar_pivot(frame, "bstar")
    assert list(wide.columns) == ["topology", "GPU", "precision", "model", "estimator", "n = 8", "n = 64",
                                  "not converged"]
    assert wide.iloc[0]["estimator"] == "exact" and wide.iloc[0]["n = 8"] == "1 [0.5, 2]"
