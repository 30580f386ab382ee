"""The stage result cache across run folders (issue 30, item 6; evtsync.pipeline.resultcache).

A second run into a new folder copies every shareable stage (the same bytes, checked by hashing
both folders' files here, independently of the manifest) and computes the others; a change of
input, parameter or seed misses; a tampered or linked entry is detected, removed and computed
again with a warning; ``--no-result-cache`` and ``--force`` compute everything; the cap removes
the least recently used entry; a folder the cache did not write is never used nor removed.

Most tests run a small pipeline of made-up stages through the real engine (each stage counts
its own calls: the truth of "computed" against "copied"); the end-to-end tests run the tiny
demo study (4 iterations, 1 layer, the Gumbel model, 60 draws).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
from collections import Counter
from pathlib import Path

import pytest

from evtsync.core.errors import InputError
from evtsync.pipeline import RunOptions, StageEvent, run_pipeline
from evtsync.pipeline.engine import Run, Stage, execute
from evtsync.pipeline.resultcache import RESULT_CACHE_MARKER, RESULT_META, ResultCache
from tests.conftest import TEST_SOURCE_DIGEST, TINY_DEMO_OPTIONS

CALLS: Counter[str] = Counter()


def _hashes(root: Path, rels: list[str] | None = None) -> dict[str, str]:
    """SHA-256 of the files under ``root`` (all, or ``rels``), read here, not from a manifest."""
    paths = [root / r for r in rels] if rels is not None else sorted(p for p in root.rglob("*") if p.is_file())
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


def _stages(param: int = 1, fail: bool = False):
    """Stage a (shareable; two files, one in a subfolder), b (shareable; reads a's), c (not
    shareable: it names the run folder) and, with ``fail``, d (shareable, fails)."""
    def stage_a(run: Run) -> dict:
        CALLS["a"] += 1
        run.produced("a", run.write_json("tables/a.json", {"values": [param, 2 * param, 3 * param]}),
                     run.write_json("inputs/x/a-note.json", {"param": param}))
        return {"param": param}

    def stage_b(run: Run) -> dict:
        CALLS["b"] += 1
        values = json.loads(run.path("tables/a.json").read_text())["values"]
        run.produced("b", run.write_json("tables/b.json", {"sum": sum(values)}))
        return {"sum": sum(values)}

    def stage_c(run: Run) -> dict:
        CALLS["c"] += 1
        run.produced("c", run.write_json("c.json", {"folder": str(run.out)}))
        return {}

    def stage_d(run: Run) -> dict:
        CALLS["d"] += 1
        raise InputError("d cannot")

    def build(run: Run) -> list[Stage]:
        stages = [Stage("a", stage_a, (), lambda r: {"param": param}, shareable=True),
                  Stage("b", stage_b, ("a",), lambda r: {}, shareable=True),
                  Stage("c", stage_c, ("a", "b"), lambda r: {})]
        if fail:
            stages.append(Stage("d", stage_d, ("a",), lambda r: {}, shareable=True))
        return stages
    return build


def _go(out: Path, cache: Path | None, param: int = 1, fail: bool = False, force: bool = False,
        max_bytes: int | None = None) -> tuple[Run, Counter[str], list[StageEvent]]:
    CALLS.clear()
    events: list[StageEvent] = []
    run = Run(RunOptions(out=out, force=force, result_cache=None if cache is None else str(cache)),
              on_stage=events.append)
    if max_bytes is not None and run.result_cache is not None:
        run.result_cache.max_bytes = max_bytes
    execute(run, _stages(param, fail))
    return run, Counter(CALLS), events


def test_second_run_copies_the_shareable_stages_byte_for_byte(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, calls1, _ = _go(tmp_path / "run1", cache)
    assert calls1 == {"a": 1, "b": 1, "c": 1}
    second, calls2, events = _go(tmp_path / "run2", cache)
    assert calls2 == {"c": 1}  # a and b copied, c (not shareable) computed
    assert [(e.stage, e.action) for e in events if e.action != "start"] == [("a", "cached"), ("b", "cached"),
                                                                            ("c", "ran")]
    rels = ["tables/a.json", "inputs/x/a-note.json", "tables/b.json"]
    assert _hashes(second.out, rels) == _hashes(first.out, rels)
    assert json.loads((second.out / "c.json").read_text()) == {"folder": str(second.out)}
    for name in ("a", "b"):
        old, new = first.manifest["stages"][name], second.manifest["stages"][name]
        assert new["outputs"] == old["outputs"] and list(new["outputs"]) == list(old["outputs"])
        assert new["status"] == "done" and new["summary"] == old["summary"]
        origin = new["reused_from_cache"]
        assert origin["run_folder"] == str(first.out.resolve()) and origin["computed"] == old["started"]
        assert origin["cpu_seconds"] == old["cpu_seconds"] and origin["seconds"] == old["seconds"]
        assert origin["key"] == second.result_key(_stages()(second)[0 if name == "a" else 1])
    assert "reused_from_cache" not in second.manifest["stages"]["c"]
    # the copies are the run folder's own: a rerun there reuses them as any finished stage
    _, calls3, events3 = _go(tmp_path / "run2", cache)
    assert calls3 == {} and {e.action for e in events3} == {"reused"}


def test_a_changed_parameter_misses_and_its_dependents_too(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _go(tmp_path / "run1", cache, param=1)
    run, calls, _ = _go(tmp_path / "run2", cache, param=2)
    assert calls == {"a": 1, "b": 1, "c": 1}
    assert json.loads((run.out / "tables/b.json").read_text()) == {"sum": 12}
    _, calls, _ = _go(tmp_path / "run3", cache, param=1)  # both results are kept
    assert calls == {"c": 1}


def test_force_and_no_result_cache_compute_everything(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _go(tmp_path / "run1", cache)
    _, calls, events = _go(tmp_path / "run2", cache, force=True)
    assert calls == {"a": 1, "b": 1, "c": 1} and "cached" not in {e.action for e in events}
    before = _hashes(cache)
    _, calls, events = _go(tmp_path / "run3", None)
    assert calls == {"a": 1, "b": 1, "c": 1} and "cached" not in {e.action for e in events}
    assert _hashes(cache) == before  # neither read nor written


def test_failures_are_never_kept(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, _, _ = _go(tmp_path / "run1", cache, fail=True)
    assert first.manifest["stages"]["d"]["status"] == "failed"
    assert sorted(e.stage for e in ResultCache(cache).entries()) == ["a", "b"]
    _, calls, _ = _go(tmp_path / "run2", cache, fail=True)
    assert calls["d"] == 1


def _entry_of(cache: Path, stage: str) -> Path:
    return next(e.path for e in ResultCache(cache).entries() if e.stage == stage)


def test_a_tampered_entry_is_removed_with_a_warning_and_recomputed(tmp_path: Path,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    cache = tmp_path / "cache"
    first, _, _ = _go(tmp_path / "run1", cache)
    victim = _entry_of(cache, "a") / "files" / "tables" / "a.json"
    victim.write_bytes(victim.read_bytes()[:-1] + b" ")  # one byte changed, same size
    with caplog.at_level(logging.WARNING, logger="evtsync.pipeline.resultcache"):
        second, calls, _ = _go(tmp_path / "run2", cache)
    assert calls == {"a": 1, "c": 1}  # a recomputed; b's input is the same bytes: copied
    assert any("damaged" in r.getMessage() and "a.json differs from its hash" in r.getMessage()
               for r in caplog.records)
    assert _hashes(second.out, ["tables/a.json"]) == _hashes(first.out, ["tables/a.json"])
    assert not list(second.out.rglob("*.tmp"))  # nothing of the refused copy is left
    intact = _entry_of(cache, "a") / "files" / "tables" / "a.json"  # stored again by the recomputation
    assert hashlib.sha256(intact.read_bytes()).hexdigest() == _hashes(first.out, ["tables/a.json"])["tables/a.json"]


def test_a_linked_file_in_an_entry_is_not_followed(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _go(tmp_path / "run1", cache)
    victim = _entry_of(cache, "b") / "files" / "tables" / "b.json"
    outside = tmp_path / "outside.json"
    outside.write_bytes(victim.read_bytes())  # the same bytes: only the link is wrong
    victim.unlink()
    victim.symlink_to(outside)
    _, calls, _ = _go(tmp_path / "run2", cache)
    assert calls == {"b": 1, "c": 1}
    assert outside.is_file()  # the entry was removed, not what its link pointed to


@pytest.mark.parametrize("meta", [None, {"marker": "someone else's", "key": "K"},
                                  {"marker": RESULT_CACHE_MARKER, "key": "another key", "files": {}, "entry": {}}])
def test_a_foreign_folder_is_never_used_nor_removed(tmp_path: Path, meta: dict | None) -> None:
    cache = tmp_path / "cache"
    first, _, _ = _go(tmp_path / "run1", cache)
    entry = _entry_of(cache, "a")
    key = entry.name
    import shutil

    shutil.rmtree(entry)
    foreign = cache / key  # a folder of someone else's where a's entry would be
    (foreign / "files" / "tables").mkdir(parents=True)
    (foreign / "files" / "tables" / "a.json").write_text("not a result")
    if meta is not None:
        (foreign / RESULT_META).write_text(json.dumps({**meta, "key": key if meta.get("key") == "K" else meta["key"]}))
    before = _hashes(foreign)
    _, calls, _ = _go(tmp_path / "run2", cache)
    assert calls["a"] == 1  # computed, not read from the foreign folder
    ResultCache(cache).prune(0, stale_after_s=0.0)  # what `evtsync cache --clear` does
    assert _hashes(foreign) == before and not [e for e in ResultCache(cache).entries()]


def test_the_cap_removes_the_least_recently_used(tmp_path: Path) -> None:
    cache = ResultCache(tmp_path / "cache", max_bytes=10_000)
    src = tmp_path / "src"
    (src / "t").mkdir(parents=True)
    keys = {}
    for name in ("one", "two", "three"):
        (src / "t" / f"{name}.bin").write_bytes(os.urandom(4000))
        rel = f"t/{name}.bin"
        keys[name] = hashlib.sha256(name.encode()).hexdigest()
        digest = hashlib.sha256((src / rel).read_bytes()).hexdigest()
        assert cache.store(keys[name], name, "probe", src, {rel: digest}, {"status": "done"})
        meta = cache.folder / keys[name] / RESULT_META
        os.utime(meta, (1_000_000 + len(keys), 1_000_000 + len(keys)))  # stored in this order, long ago
        if name == "two":
            assert cache.fetch(keys["one"], tmp_path / "dest") is not None  # "one" used after "two" was stored
    kept = {e.stage for e in cache.entries()}
    assert kept == {"one", "three"}  # 12,000 bytes > 10,000: "two", the least recently used, removed
    big = src / "t" / "big.bin"
    big.write_bytes(os.urandom(20_000))
    assert not cache.store("f" * 64, "big", "probe", src, {"t/big.bin": hashlib.sha256(big.read_bytes()).hexdigest()},
                           {"status": "done"})  # beyond the cap by itself: not kept, nothing removed for it
    assert {e.stage for e in cache.entries()} == {"one", "three"}


def test_the_result_key_covers_trace_bytes_libraries_and_seed(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from evtsync.pipeline.options import Workload
    from evtsync.pipeline.stages import build_stages

    trace = tmp_path / "traces" / "rank0.json"
    trace.parent.mkdir()
    trace.write_bytes(b'{"traceEvents": [1, 2, 3]}')

    def keys(**options) -> dict[str, str]:
        run = Run(RunOptions(traces=[str(trace.parent)], out=tmp_path / "out", models=["gumbel"], **options))
        run.workloads = [Workload("traces", [trace])]
        return {st.name: run.result_key(st) for st in build_stages(run) if st.shareable}

    base = keys()
    assert set(base) >= {"tax", "zscores", "attribution", "mle", "fit-gumbel"}
    stat = trace.stat()
    trace.write_bytes(b'{"traceEvents": [1, 2, 4]}')  # one byte, same size and time
    os.utime(trace, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    changed = keys()
    assert changed["tax"] != base["tax"] and changed["attribution"] != base["attribution"]
    trace.write_bytes(b'{"traceEvents": [1, 2, 3]}')
    assert keys() == base
    assert keys(seed=1)["fit-gumbel"] != base["fit-gumbel"] and keys(seed=1)["tax"] == base["tax"]
    assert keys(draws=61)["fit-gumbel"] != base["fit-gumbel"]
    import evtsync.pipeline.resultcache as rc

    monkeypatch.setattr(rc, "library_versions", lambda: {"numpy": "0.0"})
    assert set(keys().values()).isdisjoint(base.values())


def test_which_stages_are_shared(tmp_path: Path) -> None:
    from evtsync.pipeline.stages import build_stages

    shared = {st.name: st.shareable for st in build_stages(Run(RunOptions(out=tmp_path / "o", models=["gumbel"])))}
    assert shared == {"demo": True, "tax": True, "zscores": True, "attribution": True, "mle": True,
                      "fit-gumbel": True, "rankmodel": True, "compare": True, "prediction": True,
                      "predicted-vs-measured": True, "summary": False, "report": False}
    random_seed = build_stages(Run(RunOptions(out=tmp_path / "o", models=["gumbel"], seed=None)))  # type: ignore[arg-type]
    assert not next(st for st in random_seed if st.name == "fit-gumbel").shareable
    assert not next(st for st in random_seed if st.name == "rankmodel").shareable  # a random seed is never shared


def test_cache_command_shows_and_clears_only_its_entries(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evtsync.cli import main

    _go(tmp_path / "run1", tmp_path / "cache" / "results")
    foreign = tmp_path / "cache" / "results" / "mine"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("x")
    assert main(["cache", "--dir", str(tmp_path / "cache"), "--json"]) == 0
    state = json.loads(capsys.readouterr().out)["result_cache"]
    assert state["entries"] == 2 and state["stages"] == ["a", "b"] and state["bytes"] > 0
    assert main(["cache", "--dir", str(tmp_path / "cache"), "--clear"]) == 0
    text = capsys.readouterr().out
    assert "removed 2 result entries" in text
    assert ResultCache(tmp_path / "cache" / "results").entries() == [] and (foreign / "keep.txt").is_file()


def _job_value(n: int) -> int:
    CALLS[f"job{n}"] += 1
    return 10 * n


def _job_stages(run: Run) -> list[Stage]:
    """Stage a, then two job stages (their work a picklable call, as the fits')."""
    def job_stage(n: int) -> Stage:
        def job(r: Run):
            return functools.partial(_job_value, n)

        def body(r: Run) -> dict:
            value = r.job_result(f"j{n}", job(r))
            r.produced(f"j{n}", r.write_json(f"fits/j{n}.json", {"value": value}))
            return {"value": value}
        return Stage(f"j{n}", body, ("a",), lambda r: {"n": n}, job=job, shareable=True)
    return [*_stages()(run)[:1], job_stage(1), job_stage(2)]


class _InlinePool:
    """Stands for the process pool: runs each job at once, here."""

    processes = 2

    def submit(self, fn):
        from concurrent.futures import Future

        future: Future = Future()
        future.set_result(fn())
        return future


def test_no_pool_opens_for_jobs_that_will_be_copied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[int] = []

    def open_pool(self: Run, processes: int, stages: list, stack) -> _InlinePool:
        opened.append(processes)
        self._job_pool = _InlinePool()
        return self._job_pool

    monkeypatch.setattr(Run, "_open_job_pool", open_pool)
    cache = tmp_path / "cache"
    for i, expect_pool in enumerate((True, False)):  # the first run computes both jobs: a pool
        CALLS.clear()
        opened.clear()
        run = Run(RunOptions(out=tmp_path / f"run{i}", jobs=2, result_cache=str(cache)))
        execute(run, _job_stages)
        assert bool(opened) is expect_pool
        assert ({"a": 1, "job1": 1, "job2": 1} if expect_pool else {}) == CALLS
        assert json.loads((run.out / "fits" / "j2.json").read_text()) == {"value": 20}


# ---- end to end: the tiny demo study

TINY = TINY_DEMO_OPTIONS["demo_overrides"]
FAST = TINY_DEMO_OPTIONS

#: The package's source digest is part of every stage key: other work on the sources while these
#: tests run must not change the keys.
FIXED_DIGEST = TEST_SOURCE_DIGEST


@pytest.fixture(scope="module")
def first_demo(tiny_demo: tuple[Path, dict, list[StageEvent]]) -> tuple[Path, dict]:
    """The tiny demo computed into ``<root>/one`` with the result cache ``<root>/cache``: the test
    process's (:func:`tests.conftest.tiny_demo`, shared with tests/pipeline/test_run_pipeline.py; issue
    48). The three tests below start from it; the one that needs a second run from the cache does it
    itself."""
    return tiny_demo[0], tiny_demo[1]


def test_second_demo_copies_every_shareable_stage(first_demo: tuple[Path, dict], tmp_path: Path,
                                                  session_figure_cache: Path) -> None:
    """The tiny demo again, into a fresh folder with the first one's result cache: every shareable
    stage copied byte for byte, the summary and the report computed (the report made from copied
    stages; its figures one-pixel placeholders, :func:`tests.report_checks.placeholder_figures`: this
    test is about the result cache, and drawing them, ~18 s on 2 cores, was most of its time unless
    another tiny demo of this worker had drawn them into the session's figure cache; issue 48)."""
    from tests.report_checks import placeholder_figures

    one, m1 = first_demo
    events: list[StageEvent] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("evtsync.pipeline.engine.source_digest", lambda: FIXED_DIGEST)
        placeholder_figures(mp)
        second = run_pipeline(RunOptions(out=tmp_path / "two", result_cache=str(one.parent / "cache"),
                                         figure_cache=str(session_figure_cache), **FAST),
                              on_stage=events.append)
    two, m2 = second.out, second.manifest
    copied = {n for n, e in m2["stages"].items() if "reused_from_cache" in e}
    done = {n for n, e in m1["stages"].items() if e["status"] == "done"}
    assert copied == done - {"summary", "report"}
    assert {"demo", "tax", "zscores", "attribution", "mle", "fit-gumbel", "prediction"} <= copied
    assert {e.stage for e in events if e.action == "cached"} == copied
    assert {e.stage for e in events if e.action == "ran"} == set(m2["stages"]) - copied  # summary, report, …
    assert m2["stages"]["report"]["status"] == "done" and "report" not in copied  # made again, from copied stages
    for name in copied:
        rels = list(m1["stages"][name]["outputs"])
        assert _hashes(two, rels) == _hashes(one, rels), name
    # the demo's traces and the fit: the same bytes, found by walking both folders
    assert _hashes(two / "inputs") == _hashes(one / "inputs")
    assert _hashes(two / "fits") == _hashes(one / "fits")
    assert json.loads((two / "summary.json").read_text()) == json.loads((one / "summary.json").read_text())
    from evtsync.evt.fitfile import load_fit

    assert load_fit(two / "fits" / "gumbel.nc").attrs["input_path"] == "tables/zscores.parquet"


def test_another_seed_copies_the_tables_and_samples_again(first_demo: tuple[Path, dict], tmp_path: Path) -> None:
    one, _ = first_demo
    cache = one.parent / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("evtsync.pipeline.engine.source_digest", lambda: FIXED_DIGEST)
        run = run_pipeline(RunOptions(out=tmp_path / "seed1", result_cache=str(cache), seed=1, report=False, **FAST))
    copied = {n for n, e in run.manifest["stages"].items() if "reused_from_cache" in e}
    assert copied == {"demo", "tax", "zscores", "attribution", "mle"}
    assert run.manifest["stages"]["fit-gumbel"]["status"] == "done"
    assert _hashes(run.out, ["fits/gumbel.nc"]) != _hashes(one, ["fits/gumbel.nc"])


def test_cli_says_which_stages_were_copied(first_demo: tuple[Path, dict], tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from evtsync.cli import main

    one = first_demo[0]
    monkeypatch.setattr("evtsync.pipeline.engine.source_digest", lambda: FIXED_DIGEST)
    monkeypatch.setattr("evtsync.pipeline.stages.DEMO_OVERRIDES", {"gzip": True, **TINY})
    # the CLI's cache folder holds the result cache in results/: the module's entries, moved there
    (tmp_path / "c").mkdir()
    (one.parent / "cache").rename(tmp_path / "c" / "results")
    try:
        args = ["run", "--out", str(tmp_path / "three"), "--cache", str(tmp_path / "c"), "--draws", "60", "--tune",
                "60", "--chains", "2", "--model", "gumbel", "--no-report"]
        assert main(args) == 0
        lines = capsys.readouterr().err.splitlines()  # the stage lines
        assert any(line.split()[:1] == ["fit-gumbel"] and "copied from the result cache" in line for line in lines)
        assert not any(line.split()[:1] == ["summary"] and "copied" in line for line in lines)
    finally:
        (tmp_path / "c" / "results").rename(one.parent / "cache")
    given: list[RunOptions] = []

    def record(options: RunOptions, on_stage=None):
        given.append(options)
        raise InputError("stopped by the test")

    monkeypatch.setattr("evtsync.pipeline.run_pipeline", record)
    for extra in ([], ["--no-result-cache"], ["--no-cache"]):
        assert main(["run", "--out", str(tmp_path / "five"), "--cache", str(tmp_path / "c"), *extra]) == 2
    assert [o.result_cache for o in given] == [str(tmp_path / "c" / "results"), None, None]
