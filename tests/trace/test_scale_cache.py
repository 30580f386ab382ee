"""The per-rank Parquet cache (issue 7): same tables, no JSON parsing on a hit, damage rebuilt."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

import evtsync.trace.traceset as traceset
from evtsync.cli import main
from evtsync.trace.cache import RankCache, read_rank_cached
from evtsync.trace.readers import read_rank
from evtsync.trace.traceset import load_traces

TABLES = ("kernels", "cpu_ops", "runtime", "syncs")


@pytest.fixture()
def dlrm_copy(tmp_path: Path, traces_dir: Path) -> Path:
    """Two DLRM ranks copied to a writable folder (the cache key includes path and mtime)."""
    folder = tmp_path / "traces"
    folder.mkdir()
    for src in sorted((traces_dir / "dlrm-8rank-v100").glob("worker[01]_*.json.gz")):
        shutil.copy(src, folder / src.name)
    return folder


def _assert_same(a: traceset.TraceSet, b: traceset.TraceSet) -> None:
    for name in (*TABLES, "ranks", "process_groups", "skipped"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name))


def test_second_load_comes_from_the_cache_without_parsing(dlrm_copy: Path, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    plain = load_traces(dlrm_copy, jobs=1)
    first = load_traces(dlrm_copy, jobs=1, cache=cache)
    _assert_same(plain, first)
    entries = [p for p in cache.glob("*/*") if p.is_dir()]
    assert len(entries) == 2
    assert not list(cache.glob("*/.*.tmp"))  # no temporary folders left behind

    def no_parsing(*args: object, **kwargs: object) -> None:
        raise AssertionError("JSON parsed despite a cache hit")

    from evtsync.trace.readers import (
        kineto,  # the Kineto reader behind the reader seam decodes JSON
    )

    monkeypatch.setattr(kineto, "decode_file", no_parsing)
    second = load_traces(dlrm_copy, jobs=1, cache=cache)
    _assert_same(plain, second)


def test_a_changed_trace_misses_the_cache(dlrm_copy: Path, tmp_path: Path) -> None:
    cache = RankCache(tmp_path / "cache")
    path = sorted(dlrm_copy.iterdir())[0]
    key = cache.key(path, salvage=False)
    read_rank_cached(str(path), False, str(cache.folder))
    assert cache.entry(key).is_dir()
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert cache.key(path, salvage=False) != key
    assert cache.key(path, salvage=True) != cache.key(path, salvage=False)


@pytest.mark.parametrize("damage", ["truncate", "flip", "remove", "meta"])
def test_damaged_entry_is_reported_and_rebuilt(dlrm_copy: Path, tmp_path: Path, damage: str,
                                               caplog: pytest.LogCaptureFixture) -> None:
    cache_dir = tmp_path / "cache"
    path = str(sorted(dlrm_copy.iterdir())[0])
    expected = read_rank(path)
    read_rank_cached(path, False, str(cache_dir))
    entry = RankCache(cache_dir).entry(RankCache(cache_dir).key(path, False))
    target = entry / ("meta.json" if damage == "meta" else "kernels.parquet")
    data = target.read_bytes()
    if damage == "truncate":
        target.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        target.write_bytes(data[:100] + bytes([data[100] ^ 0xFF]) + data[101:])
    elif damage == "remove":
        target.unlink()
    else:
        target.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="evtsync.trace.cache"):
        rebuilt = read_rank_cached(path, False, str(cache_dir))
    assert "damaged cache entry" in caplog.text
    for name in TABLES:
        pd.testing.assert_frame_equal(getattr(rebuilt, name), getattr(expected, name))
    again = read_rank_cached(path, False, str(cache_dir))  # the rebuilt entry is sound
    pd.testing.assert_frame_equal(again.kernels, expected.kernels)


def test_reader_warnings_are_replayed_on_a_hit(tmp_path: Path, traces_dir: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    src = traces_dir / "edge-cases/no_distributed_info.json.gz"
    path = tmp_path / "rank-5.json.gz"
    shutil.copy(src, path)
    for _ in range(2):
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            tables = read_rank_cached(str(path), False, str(tmp_path / "cache"))
        assert tables.rank == 5
        assert "using rank 5 from the file name" in caplog.text


def test_cli_uses_the_cache_folder_and_no_cache_writes_nothing(dlrm_copy: Path, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cli-cache"
    outputs = []
    for _ in range(2):
        assert main(["tax", str(dlrm_copy), "--cache", str(cache), "--json", "--allow-partial"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
    assert len([p for p in cache.glob("*/*") if p.is_dir()]) == 2
    other = tmp_path / "unused"
    assert main(["tax", str(dlrm_copy), "--cache", str(other), "--no-cache", "--json",
                 "--allow-partial"]) == 0
    assert capsys.readouterr().out == outputs[0]
    assert not other.exists()


def test_an_edit_with_the_timestamp_restored_misses_the_cache(tmp_path: Path, traces_dir: Path) -> None:
    """Issue 33 (11): the key trusted size + mtime (+ first and last 64 KiB): an edit in the middle
    of a plain JSON trace, with its modification time set back, returned the stale tables."""
    import gzip
    import json

    src = sorted((traces_dir / "dlrm-8rank-v100").glob("worker0_*.json.gz"))[0]
    raw = json.loads(gzip.decompress(src.read_bytes()))
    nccl = sorted((e for e in raw["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("nccl")),
                  key=lambda e: e["ts"])
    target = nccl[len(nccl) // 2]
    old_dur = target["dur"]
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps(raw))
    assert load_traces(path, jobs=1, cache=tmp_path / "cache").nccl_kernels["dur_ns"].tolist().count(old_dur * 1000)
    text = path.read_text()
    needle = f'"dur": {old_dur}, '
    at = text.index(needle, text.index(f'"ts": {target["ts"]}') - 400)  # this kernel's own dur
    new_dur = old_dur + 1 if len(str(old_dur + 1)) == len(str(old_dur)) else old_dur - 1
    stat = path.stat()
    path.write_text(text[:at] + f'"dur": {new_dur}, ' + text[at + len(needle):])  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the editor restores the timestamp
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns
    again = load_traces(path, jobs=1, cache=tmp_path / "cache")
    assert (again.nccl_kernels["dur_ns"] == new_dur * 1000).sum() >= 1  # the edit is read, not the cache


def test_the_cache_is_capped_and_pruned_least_recently_used_first(dlrm_copy: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    load_traces(dlrm_copy, jobs=1, cache=cache)
    entries = RankCache(cache).entries()
    assert len(entries) == 2
    one = max(e.size for e in entries)
    monkeypatch.setenv("EVTSYNC_CACHE_MAX_BYTES", str(one + 10))  # room for one entry
    first = sorted(dlrm_copy.iterdir())[0]
    load_traces(first, jobs=1, cache=cache)  # rank 0 used last: rank 1's entry goes
    left = RankCache(cache).entries()
    assert len(left) == 1 and sum(e.size for e in left) <= one + 10
    assert left[0].path.name == RankCache(cache).key(first, salvage=False)
    capsys.readouterr()
    assert main(["cache", "--dir", str(cache), "--json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["entries"] == 1
    assert main(["cache", "--dir", str(cache), "--prune", "--max-size", "1"]) == 0  # 1 byte: nothing fits
    assert "removed 1 entry" in capsys.readouterr().out
    assert RankCache(cache).entries() == []
    assert main(["cache", "--dir", str(cache), "--max-size", "1G"]) == 2  # a cap without --prune: said


def test_a_load_of_hits_only_under_the_same_cap_does_not_walk_the_cache(dlrm_copy: Path, tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Pruning walks every entry (~0.1 ms each): it is needed only when a store added bytes or the
    cap changed, not on every warm load of a large set."""
    cache = tmp_path / "cache"
    load_traces(dlrm_copy, jobs=1, cache=cache)  # stores 2 entries, then prunes
    walks = []
    real = RankCache.entries
    monkeypatch.setattr(RankCache, "entries", lambda self: walks.append(1) or real(self))
    load_traces(dlrm_copy, jobs=1, cache=cache)  # hits only, same cap
    assert walks == []
    monkeypatch.setenv("EVTSYNC_CACHE_MAX_BYTES", str(10 << 30))  # another cap: prune again
    load_traces(dlrm_copy, jobs=1, cache=cache)
    assert walks == [1]
    load_traces(dlrm_copy, jobs=1, cache=cache, salvage=True)  # other keys: new entries stored, pruned
    assert walks == [1, 1]
    load_traces(dlrm_copy, jobs=1, cache=cache, salvage=True)  # hits again
    assert walks == [1, 1]
