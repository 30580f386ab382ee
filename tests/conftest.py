"""Shared fixtures: paths to the real public data the tests read.

The small folders of the public data set are copied into ``tests/data/public`` (sources and
licences in its README), so the suite runs on a clone alone: ``DATA``/``TRACES`` and the
``shared_data``/``traces_dir`` fixtures point there. The larger files (``traces/single-rank``,
the full ``traces/old-formats``, ``nsys``) live only in the full set, ``$EVTSYNC_SHARED/data``
(default ``../shared/data`` beside the clone): ``FULL_DATA``/``FULL_TRACES`` and the
``full_data``/``full_traces_dir`` fixtures, whose tests skip with a reason when it is absent.
Nothing here reads a file at import.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "public"
TRACES = DATA / "traces"
SHARED = Path(os.environ.get("EVTSYNC_SHARED", REPO.parent / "shared"))
FULL_DATA = SHARED / "data"
FULL_TRACES = FULL_DATA / "traces"
FULL_DATA_MISSING = f"the full public data set is not at {FULL_DATA} (set EVTSYNC_SHARED)"


def file_hashes(root: Path) -> dict[str, str]:
    """SHA-256 of every file below ``root`` by relative path: to check that nothing was touched."""
    import hashlib

    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def full_data_file(relative: str) -> Path:
    """A file of the full public data set, or skip the calling test with the reason."""
    path = FULL_DATA / relative
    if not path.is_file():
        pytest.skip(f"{relative}: {FULL_DATA_MISSING}")
    return path


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The public data copied into the repository (tests/data/public)."""
    return DATA


@pytest.fixture(scope="session")
def traces_dir(shared_data: Path) -> Path:
    """tests/data/public/traces."""
    return shared_data / "traces"


@pytest.fixture(scope="session")
def full_data() -> Path:
    """The full public data set (../shared/data); tests needing it skip when it is absent."""
    if not FULL_DATA.is_dir():
        pytest.skip(FULL_DATA_MISSING)
    return FULL_DATA


@pytest.fixture(scope="session")
def full_traces_dir(full_data: Path) -> Path:
    """../shared/data/traces (the full set)."""
    return full_data / "traces"
