"""The test suite does not depend on the environment of whoever runs it (tests/conftest.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from tests.conftest import USER_SETTINGS

PACKAGE = Path(__file__).resolve().parents[2] / "evtsync"


def test_every_setting_evtsync_reads_from_the_environment_is_cleared_for_the_tests() -> None:
    """Read off the package's sources (a plain reading, not the code's own list): every
    ``*_ENV = "NAME"`` constant and every ``os.environ.get("EVTSYNC_...")`` (the progress bars'
    EVTSYNC_QUIET is read that way), less the cache folder and the signing key, which conftest gives each test
    process of its own."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        found |= set(re.findall(r'^[A-Z_]*_ENV = "([A-Z_]+)"', text, flags=re.MULTILINE))
        found |= set(re.findall(r'os\.environ\.get\("(EVTSYNC_[A-Z_]+)"', text))
    assert found - {"EVTSYNC_CACHE_DIR", "EVTSYNC_CACHE_KEY"} == set(USER_SETTINGS)
    assert not [name for name in USER_SETTINGS if name in os.environ]
