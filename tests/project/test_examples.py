"""The executed examples under docs/examples/ (slow): run as a user would, as plain scripts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_api_walkthrough_runs_as_a_plain_script(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "docs" / "examples" / "api_walkthrough.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=1800, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("tax_cdf", "tau", "bstar"):
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    assert "Traceback" not in proc.stderr
