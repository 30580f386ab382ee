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
    process of its own, and the cache's size floor, which conftest sets to 0 (every trace cached)."""
    found: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        found |= set(re.findall(r'^[A-Z_]*_ENV = "([A-Z_]+)"', text, flags=re.MULTILINE))
        found |= set(re.findall(r'os\.environ\.get\("(EVTSYNC_[A-Z_]+)"', text))
    assert found - {"EVTSYNC_CACHE_DIR", "EVTSYNC_CACHE_KEY", "EVTSYNC_CACHE_MIN_BYTES"} == set(USER_SETTINGS)
    assert os.environ["EVTSYNC_CACHE_MIN_BYTES"] == "0"
    assert not [name for name in USER_SETTINGS if name in os.environ]


def test_no_test_looks_into_the_shared_temporary_folder() -> None:
    """Issue 47 (12): a test asserted that no ``evtsync-setups-*`` folder appeared in the shared
    temporary folder, and failed when another test process made one. Read off the test sources:
    none names ``tempfile.gettempdir()`` (but to compare it with its own ``tmp_path``/``tmpdir``) or a
    literal ``/tmp/`` path (a test points ``tempfile`` at its own ``tmp_path`` instead); conftest.py,
    which makes the per-process folders, is exempt."""
    tests = PACKAGE.parent / "tests"
    offenders = [f"{path.relative_to(tests)}:{i}" for path in sorted(tests.rglob("*.py")) if path.name != "conftest.py"
                 and path != Path(__file__).resolve()
                 for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                 if ("gettempdir()" in line and not re.search(r"\btmp(dir|_path)\b", line))
                 or re.search(r"[\"']/tmp/", line)]
    assert not offenders, offenders
