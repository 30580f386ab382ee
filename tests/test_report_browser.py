"""The demo report in a real browser (issue 20): headless Chromium at 1400, 800 and 420 px.

Slow (it runs the demo); skipped where Debian's ``chromium`` is not installed. Checks that no
element sticks out of the page outside a scrollable container, every image decodes, no
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

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def _tool():
    spec = importlib.util.spec_from_file_location("check_report_browser", ROOT / "tools" / "check_report_browser.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
