"""`evtsync attribute --plot-path`: the straggler-vs-fastest path view (paper's Fig. 4) is drawn."""

from __future__ import annotations

import subprocess
import sys


def test_plot_path_of_a_named_collective_and_a_bad_name(traces_dir, tmp_path):
    base = [sys.executable, "-m", "evtsync", "-q", "attribute", str(traces_dir / "dlrm-8rank-v100"), "--no-cache",
            "-o", str(tmp_path / "att.csv")]
    ok = subprocess.run(base + ["--plot-path", str(tmp_path / "p.png"), "--collective", "stream84:3"],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = subprocess.run(base + ["--plot-path", str(tmp_path / "q.png"), "--collective", "stream84:99"],
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "no such collective" in bad.stderr and "Traceback" not in bad.stderr
