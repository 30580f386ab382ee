"""The demo's synthetic study kept in the cache folder (issue 30, item 6): a second demo with the
same settings and code copies the files the first one synthesised; a change of settings or code
synthesises again; a damaged entry is removed, a folder the cache did not write is never used.

The truth every test checks against is a fresh synthesis of the same tiny study (4 iterations,
1 layer per workload) written by :func:`evtsync.synth.study` itself, file by file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evtsync.core.tableio import file_sha256
from evtsync.pipeline.democache import (
    DEMO_CACHE_KEEP,
    DEMO_CACHE_MARKER,
    DEMO_META,
    DemoCache,
    demo_key,
)
from evtsync.pipeline.engine import Run
from evtsync.pipeline.options import DEMO_OVERRIDES, DEMO_STUDY, RunOptions
from evtsync.pipeline.stages import _stage_demo

TINY = {"iterations": 4, "layers": 1}


def _files(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): file_sha256(p) for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def truth(tmp_path_factory) -> dict[str, str]:
    """The tiny study as the synthesiser writes it (the reference for every copy)."""
    from evtsync.synth import study

    folder = tmp_path_factory.mktemp("truth")
    study(folder, DEMO_STUDY, **{**DEMO_OVERRIDES, **TINY})
    return _files(folder)


def _demo(out: Path, cache: Path | None, code: str = "code-1", **overrides) -> tuple[Run, dict]:
    run = Run(RunOptions(out=out, demo_overrides={**TINY, **overrides},
                         demo_cache=None if cache is None else str(cache)))
    run.code = code  # the source digest: fixed here, changed to stand for a code change
    return run, _stage_demo(run)


def test_second_demo_copies_the_first_ones_study(tmp_path, truth):
    cache = tmp_path / "cache"
    run1, first = _demo(tmp_path / "run1", cache)
    assert "from_cache" not in first and first["files"] == len(truth)
    assert _files(run1.path("inputs/demo")) == truth
    run2, second = _demo(tmp_path / "run2", cache)
    assert second["from_cache"] == str(cache / demo_key(DEMO_STUDY, {**DEMO_OVERRIDES, **TINY}, "code-1"))
    assert _files(run2.path("inputs/demo")) == truth  # the same bytes as a synthesis
    assert second["workloads"] == first["workloads"] and second["files"] == first["files"]
    # the stage records every file it wrote, as when it synthesises
    assert sorted(run2.outputs["demo"]) == sorted(run1.outputs["demo"])


def test_other_settings_or_code_synthesise_again(tmp_path, truth):
    cache = tmp_path / "cache"
    _demo(tmp_path / "run1", cache)
    _, other_code = _demo(tmp_path / "run2", cache, code="code-2")
    assert "from_cache" not in other_code
    run3, other_settings = _demo(tmp_path / "run3", cache, seed=5)
    assert "from_cache" not in other_settings
    assert _files(run3.path("inputs/demo")) != truth  # another seed: other traces
    assert len({p.name for p in cache.iterdir()}) == 3
    assert demo_key(DEMO_STUDY, {"a": 1}, "x") != demo_key(DEMO_STUDY, {"a": 2}, "x") != demo_key(DEMO_STUDY, {"a": 2}, "y")


def test_no_cache_folder_no_cache(tmp_path, truth):
    run, summary = _demo(tmp_path / "run1", None)
    assert "from_cache" not in summary and _files(run.path("inputs/demo")) == truth
    assert not (tmp_path / "cache").exists()


def test_damaged_entry_is_removed_and_synthesised_again(tmp_path, truth):
    cache = tmp_path / "cache"
    _demo(tmp_path / "run1", cache)
    entry = next(cache.iterdir())
    victim = next(p for p in (entry / "files").rglob("*") if p.is_file())
    victim.write_bytes(victim.read_bytes()[:-1] + b"?")
    run2, summary = _demo(tmp_path / "run2", cache)
    assert "from_cache" not in summary and _files(run2.path("inputs/demo")) == truth
    assert (entry / DEMO_META).is_file()  # stored again, intact
    _, third = _demo(tmp_path / "run3", cache)
    assert "from_cache" in third


def test_a_linked_file_is_not_followed(tmp_path, truth):
    cache = tmp_path / "cache"
    _demo(tmp_path / "run1", cache)
    entry = next(cache.iterdir())
    victim = next(p for p in (entry / "files").rglob("*") if p.is_file())
    outside = tmp_path / "outside"
    outside.write_bytes(victim.read_bytes())  # same bytes, so only the link itself is wrong
    victim.unlink()
    victim.symlink_to(outside)
    _, summary = _demo(tmp_path / "run2", cache)
    assert "from_cache" not in summary
    assert outside.is_file()  # removed the entry, not what its link pointed to


@pytest.mark.parametrize("meta", [None, {"marker": "someone else", "files": {}},
                                  {"marker": DEMO_CACHE_MARKER, "key": "another key", "files": {}}])
def test_foreign_folder_is_never_used_nor_touched(tmp_path, truth, meta):
    cache = tmp_path / "cache"
    key = demo_key(DEMO_STUDY, {**DEMO_OVERRIDES, **TINY}, "code-1")
    foreign = cache / key
    (foreign / "files").mkdir(parents=True)
    (foreign / "files" / "note.txt").write_text("not a demo study")
    if meta is not None:
        (foreign / DEMO_META).write_text(json.dumps(meta))
    before = _files(foreign)
    for i in range(2):
        run, summary = _demo(tmp_path / f"run{i}", cache)
        assert "from_cache" not in summary and _files(run.path("inputs/demo")) == truth
    assert _files(foreign) == before  # neither read into a run, nor removed, nor overwritten


def test_keeps_the_most_recently_used_entries(tmp_path):
    cache = DemoCache(tmp_path / "cache")
    src = tmp_path / "src"
    (src / "w").mkdir(parents=True)
    (src / "w" / "f.txt").write_text("x")
    foreign = tmp_path / "cache" / "not-ours"
    foreign.mkdir(parents=True)
    keys = [f"{i:064x}" for i in range(DEMO_CACHE_KEEP + 2)]
    for key in keys:
        cache.store(key, src, [src / "w" / "f.txt"])
    kept = {p.name for p in cache.folder.iterdir()}
    assert foreign.is_dir() and len(kept) == DEMO_CACHE_KEEP + 1
    assert kept - {"not-ours"} <= set(keys) and keys[-1] in kept
    dest = tmp_path / "dest"
    assert cache.fetch(keys[-1], dest) == [dest / "w" / "f.txt"]
    assert (dest / "w" / "f.txt").read_text() == "x"
