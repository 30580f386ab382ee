"""Shared fixtures: paths to the real public data in ../shared/data."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("EVTSYNC_SHARED", REPO.parent / "shared"))
DATA = SHARED / "data"
TRACES = DATA / "traces"


def file_hashes(root: Path) -> dict[str, str]:
    """SHA-256 of every file below ``root`` by relative path: to check that nothing was touched."""
    import hashlib

    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real public data folder (../shared/data); tests needing it skip when absent."""
    if not DATA.is_dir():
        pytest.skip(f"shared data not found at {DATA}")
    return DATA


@pytest.fixture(scope="session")
def traces_dir(shared_data: Path) -> Path:
    """../shared/data/traces."""
    return shared_data / "traces"
