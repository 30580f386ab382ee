"""Trace files below the cache's size floor are decoded on every read, never cached (issue 48:
a cache entry costs more to load than a small trace costs to decode). The test session caches
every file (tests/conftest.py sets the floor to 0); these tests put the default back."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from evtsync.core.errors import InputError
from evtsync.trace.cache import DEFAULT_CACHE_MIN_BYTES, META, cache_min_bytes
from evtsync.trace.cache_dir import CACHE_MIN_ENV
from evtsync.trace.traceset import load_traces
from tests.conftest import TRACES

DLRM = TRACES / "dlrm-8rank-v100"


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.rglob(META))


def _tables(ts) -> dict[str, pd.DataFrame]:
    return {name: getattr(ts, name).reset_index(drop=True) for name in ("kernels", "cpu_ops", "runtime", "syncs")}


def test_the_floor_is_256_kib_by_default_and_set_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_MIN_ENV, raising=False)
    assert cache_min_bytes() == DEFAULT_CACHE_MIN_BYTES == 262_144
    monkeypatch.setenv(CACHE_MIN_ENV, "1MiB")
    assert cache_min_bytes() == 1_048_576
    monkeypatch.setenv(CACHE_MIN_ENV, "0")
    assert cache_min_bytes() == 0
    monkeypatch.setenv(CACHE_MIN_ENV, "lots")
    with pytest.raises(InputError, match=CACHE_MIN_ENV):
        cache_min_bytes()


def test_small_traces_are_not_cached_and_read_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = sorted(DLRM.glob("*.json.gz"))
    assert len(files) == 8 and all(f.stat().st_size < 256 << 10 for f in files)  # 57-62 KB each
    monkeypatch.delenv(CACHE_MIN_ENV, raising=False)
    small = tmp_path / "default"
    first = load_traces(files, cache=small, jobs=1)
    again = load_traces(files, cache=small, jobs=1)
    assert _entries(small) == []  # nothing written: every read decoded the files
    # control: with the floor at 0 the same files are cached (8 entries) and read back from them
    monkeypatch.setenv(CACHE_MIN_ENV, "0")
    cached = tmp_path / "floor0"
    load_traces(files, cache=cached, jobs=1)
    assert len(_entries(cached)) == 8
    from_cache = load_traces(files, cache=cached, jobs=1)
    for name, table in _tables(first).items():
        pd.testing.assert_frame_equal(table, _tables(again)[name])
        pd.testing.assert_frame_equal(table, _tables(from_cache)[name])
