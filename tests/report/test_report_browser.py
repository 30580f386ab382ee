"""The report in a real browser (issues 20, 34, 49): headless Chromium at 1400, 800 and a true 390 px,
and the first screen's four answers at 1280×800 and 390×844.

The demo test is slow (it runs the demo); the 390 px layout test is not. Both are skipped
where Debian's ``chromium`` is not installed. Checks that no element sticks out of the page outside a scrollable container, every image decodes, no
network request is made, and the answer (the summary and its table) is in the first screen at 1400
px; the in-sample label and the ground-truth section are present.
``tools/check_report_browser.py`` is the same check by hand, and regenerates
``docs/report-screenshot.png``.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.report.test_report_summary import hand_run  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("check_report_browser", ROOT / "tools" / "check_report_browser.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The demo's run folder (``evtsync run``, a few minutes of CPU), once for the module's slow tests."""
    if _tool().find_chromium() is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    out = tmp_path_factory.mktemp("browser-demo") / "demo"
    proc = subprocess.run([sys.executable, "-m", "evtsync", "-q", "run", "--out", str(out)],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return out


@pytest.mark.slow
def test_demo_report_in_chromium(demo_run, tmp_path):
    tool = _tool()
    out = demo_run
    results = tool.check_report(out / "report.html", tmp_path / "browser")
    assert tool.problems(results) == []
    first = " ".join(results[1400]["first_screen"]).lower()
    assert "summary" in first or "answer" in first, results[1400]["first_screen"]
    assert any(line.startswith("table:") for line in results[1400]["first_screen"]), "summary table not in view"
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "Predicted vs measured straggler delay (in-sample)" in page
    assert "Estimates vs ground truth (demo)" in page


@pytest.mark.slow
@pytest.mark.parametrize(("width", "height"), [(1280, 800), (390, 844)])
def test_demo_first_screen_answers_the_four_questions(demo_run, tmp_path, width, height):
    """Issue 49: in the demo's report, each of the four answers (the tax now, who straggles and why,
    the gain without stragglers, a bigger domain) lies inside the first viewport of a 1280×800 laptop
    and a 390×844 phone, and nothing in it overflows horizontally; the summary is cards on the phone,
    an unscrolled table on the laptop."""
    tool = _tool()
    results = tool.check_report(demo_run / "report.html", tmp_path / "browser", widths=(width,), height=height)
    r = results[width]
    assert (r["width"], r["height"]) == (width, height)
    assert list(r["answers"]) == list(tool.ANSWERS)          # all four, in the order asked
    assert tool.first_screen_problems(results) == []
    assert tool.problems(results) == []


def test_first_screen_of_a_hand_run_at_a_laptop_and_a_phone(hand_run, tmp_path):  # noqa: F811
    """The same checks on the summary of a small hand-written run folder (fast): the four answers in
    the first 1280×800 and 390×844 viewports, none overflowing; cards at 390 px."""
    from evtsync.report.context import ReportContext
    from evtsync.report.sections import summary as summary_sec
    from tests.report.test_first_screen import _with_roots

    tool = _tool()
    if tool.find_chromium() is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    from evtsync.plots.base import new_figure, png_renderings
    from evtsync.report.markdown import EmbeddedFigure, Section
    from evtsync.report.render import render_html

    run, manifest = hand_run
    _with_roots(run)
    sections = summary_sec.build(ReportContext(run, tmp_path / "out", manifest))
    fig, ax = new_figure(6, 3)
    ax.plot([0, 1], [0, 1])
    wide, narrow = png_renderings(fig)
    sections.append(Section("Figure", [EmbeddedFigure(wide, "a figure", "caption", narrow)], anchor="figure"))
    page = tmp_path / "report.html"
    page.write_text(render_html("evtsync report: hand", "Run folder " + str(run), sections), encoding="utf-8")
    for width, height in ((1280, 800), (390, 844)):
        results = tool.check_report(page, tmp_path / "browser", widths=(width,), height=height)
        assert list(results[width]["answers"]) == list(tool.ANSWERS)
        assert tool.first_screen_problems(results) == [], width


def test_layout_at_a_real_390_px(tmp_path):
    """A page with the report's widest parts — a 14-column summary table, a 12-inch figure, a long
    unbreakable path — laid out at a true 390 px (an iframe of that width: Chromium's window cannot
    go below about 500 px): nothing wider than the screen outside a scroll container, the page
    never scrolls sideways; the figure (three panels) is shown as its narrow rendering, scaled to the
    screen, its text at >= 11 px (issue 49)."""
    import pandas as pd

    from evtsync.plots.base import new_figure, png_renderings
    from evtsync.report.markdown import EmbeddedFigure, Section, Table
    from evtsync.report.render import png_width, render_html

    tool = _tool()
    if tool.find_chromium() is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    fig, axes = new_figure(12, 4, ncols=3)
    for ax in axes:
        ax.plot([0, 1], [0, 1], label="a legend entry")
        ax.set_xlabel("seconds")
        ax.legend(fontsize=7)
    figure_png, narrow = png_renderings(fig)
    wide = pd.DataFrame({f"column number {i} (µs)": ["31,403 [29,399, 33,530]"] * 4 for i in range(14)})
    page = render_html("evtsync report", "Run folder /a/very/long/path/" + "x" * 80, [
        Section("Summary: the answers", ["See tables/predicted_vs_measured_holdout.parquet" + "_" * 60,
                                         Table(wide, "caption", css_class="summary")], anchor="summary"),
        Section("Figure", [EmbeddedFigure(figure_png, "a wide figure", "caption", narrow)], anchor="figure")])
    report = tmp_path / "report.html"
    report.write_text(page, encoding="utf-8")
    results = tool.check_report(report, tmp_path / "browser", widths=(390, 1280))
    assert results[390]["width"] == 390
    assert tool.problems(results) == []
    # issue 49: the figure fits its box at both widths; on the phone the narrow rendering is shown
    # (its PNG's width), scaled to the screen, its smallest text (a 7 pt legend raised to 9 pt:
    # 9 × 110 / 72 = 13.75 px in its own pixels) at >= 11 CSS px; on the laptop the wide one
    [phone], [laptop] = results[390]["figures"], results[1280]["figures"]
    assert phone["natural"] == png_width(narrow) < png_width(figure_png) == laptop["natural"]
    assert not phone["overflow"] and not laptop["overflow"] and phone["shown"] <= 390
    assert phone["text_px"] == pytest.approx(9 * 110 / 72 * phone["shown"] / phone["natural"], abs=0.02)
    assert phone["text_px"] >= 11
    assert laptop["text_px"] == pytest.approx(7 * 110 / 72 * laptop["shown"] / laptop["natural"], abs=0.02)


def test_a_wide_figure_without_a_narrow_rendering_is_too_small_on_a_phone(tmp_path):
    """The check is not vacuous: a 12-inch figure with 10 pt text and no narrow rendering, scaled to
    a 390 px screen, shows its text below 11 px (10 × 110 / 72 × ~370 / ~1300 ≈ 4.5 px) and is
    reported; it still fits its box (scaled, not cropped)."""
    from evtsync.plots.base import new_figure, png_renderings
    from evtsync.report.markdown import EmbeddedFigure, Section
    from evtsync.report.render import render_html

    tool = _tool()
    if tool.find_chromium() is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    fig, ax = new_figure(12, 4)
    ax.plot([0, 1], [0, 1])
    wide, _ = png_renderings(fig)
    report = tmp_path / "report.html"
    report.write_text(render_html("t", "s", [Section("Figure", [EmbeddedFigure(wide, "wide only")])]), encoding="utf-8")
    results = tool.check_report(report, tmp_path / "browser", widths=(390,))
    [f] = results[390]["figures"]
    assert not f["overflow"] and f["shown"] <= 390
    assert f["text_px"] < 6
    assert any("figure text shown at" in line for line in tool.problems(results))
