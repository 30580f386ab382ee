"""The report in a real browser (issues 20, 34): headless Chromium at 1400, 800 and a true 390 px.

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

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("check_report_browser", ROOT / "tools" / "check_report_browser.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_demo_report_in_chromium(tmp_path):
    tool = _tool()
    if tool.find_chromium() is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    out = tmp_path / "demo"
    proc = subprocess.run([sys.executable, "-m", "evtsync", "-q", "run", "--out", str(out)],
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    results = tool.check_report(out / "report.html", tmp_path / "browser")
    assert tool.problems(results) == []
    first = " ".join(results[1400]["first_screen"]).lower()
    assert "summary" in first or "answer" in first, results[1400]["first_screen"]
    assert any(line.startswith("table:") for line in results[1400]["first_screen"]), "summary table not in view"
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "Predicted vs measured straggler delay (in-sample)" in page
    assert "Estimates vs ground truth (demo)" in page


def test_layout_at_a_real_390_px(tmp_path):
    """A page with the report's widest parts — a 14-column summary table, a 12-inch figure, a long
    unbreakable path — laid out at a true 390 px (an iframe of that width: Chromium's window cannot
    go below about 500 px): nothing wider than the screen outside a scroll container, the page
    never scrolls sideways, the figure keeps a legible width."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from evtsync.report.markdown import EmbeddedFigure, Section, Table
    from evtsync.report.render import render_html

    tool = _tool()
    if tool.find_chromium() is None:
        pytest.skip("chromium not installed (apt-get install chromium)")
    fig, ax = plt.subplots(figsize=(12, 4))
    ax.plot([0, 1], [0, 1], label="a legend entry")
    ax.legend()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    wide = pd.DataFrame({f"column number {i} (µs)": ["31,403 [29,399, 33,530]"] * 4 for i in range(14)})
    page = render_html("evtsync report", "Run folder /a/very/long/path/" + "x" * 80, [
        Section("Summary: the answers", ["See tables/predicted_vs_measured_holdout.parquet" + "_" * 60,
                                         Table(wide, "caption", css_class="summary")], anchor="summary"),
        Section("Figure", [EmbeddedFigure(buf.getvalue(), "a wide figure", "caption")], anchor="figure")])
    report = tmp_path / "report.html"
    report.write_text(page, encoding="utf-8")
    results = tool.check_report(report, tmp_path / "browser", widths=(390,))
    assert results[390]["width"] == 390
    assert tool.problems(results) == []
