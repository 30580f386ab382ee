"""The package type-checks: ``mypy evtsync`` with the ``[tool.mypy]`` settings of pyproject.toml.

The same check runs in CI (``make typecheck`` in ``.ci/run``, before the tests); this test makes
a local ``pytest`` catch a type error too. It uses mypy's incremental cache (``.mypy_cache`` at
the repository root, shared with ``make typecheck``): a warm run takes a few seconds, a cold
one about half a minute. Skipped where mypy is not installed (it is in the ``dev`` extra).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_mypy_passes_on_the_package() -> None:
    pytest.importorskip("mypy", reason="mypy is not installed (pip install -e '.[dev]')")
    proc = subprocess.run([sys.executable, "-m", "mypy", "evtsync"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    report = (proc.stdout + proc.stderr).strip()
    assert proc.returncode == 0, f"mypy found type errors:\n{report}"
    assert report.splitlines()[-1].startswith("Success: no issues found"), report
