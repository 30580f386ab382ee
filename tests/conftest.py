"""Shared fixtures: paths to the real public data the tests read.

The small folders of the public data set are copied into ``tests/data/public`` (sources and
licences in its README), so the suite runs on a clone alone: ``DATA``/``TRACES`` and the
``shared_data``/``traces_dir`` fixtures point there. The larger files (``traces/single-rank``,
the full ``traces/old-formats``, ``nsys``) live only in the full set, ``$EVTSYNC_SHARED/data``
(default ``../shared/data`` beside the clone): ``FULL_DATA``/``FULL_TRACES`` and the
``full_data``/``full_traces_dir`` fixtures, whose tests skip with a reason when it is absent.
Nothing here reads a file at import.

The default run is parallel (pytest-xdist, one worker per logical CPU, whole files to a worker:
:func:`pytest_cmdline_main`), and every test process keeps the evtsync caches in a temporary
folder of its own (:func:`pytest_configure`): the suite never reads or writes the user's cache,
and workers never share one.
"""

from __future__ import annotations

import gc
import os
import shutil
import sys
import tempfile
from collections.abc import Generator, Mapping
from pathlib import Path
from typing import Any

import pytest

from evtsync.core.trust import KEY_ENV
from evtsync.trace.cache_dir import CACHE_ENV, CACHE_MIN_ENV
from tests import _hypothesis_scan
from tests._assert_locations import install as _cheaper_assert_locations

# before any test module is rewritten: pytest's assertion rewriting with a cheaper location fix and
# walrus search, the same code objects for less of its CPU (tests/_assert_locations.py)
_cheaper_assert_locations()

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "public"
TRACES = DATA / "traces"
SHARED = Path(os.environ.get("EVTSYNC_SHARED", REPO.parent / "shared"))
FULL_DATA = SHARED / "data"
FULL_TRACES = FULL_DATA / "traces"
FULL_DATA_MISSING = f"the full public data set is not at {FULL_DATA} (set EVTSYNC_SHARED)"

#: How the default run spreads the tests over workers: a whole file to one worker, so that a
#: module-scoped fixture (the tiny pipeline run, the fitted models, the synthetic studies) is
#: computed once, not once per worker that happens to get one of its tests. Files balance well
#: enough when none is a large share of one worker's time: tests/pipeline/test_run_pipeline.py
#: (~30% before) was split in two for that (tests/pipeline/test_run_fresh.py), and the two
#: workers' summed test times differed by 1-4% in the runs of 2026-12-05.
DIST_MODE = "loadfile"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """The default run in parallel: ``-n logical`` unless ``-n`` is given (``-n 0`` runs in this
    process; ``-p no:xdist`` too, or where pytest-xdist is not installed), and ``--dist loadfile``
    unless ``--dist`` is given. Set here rather than in ``addopts`` so that a run without the
    plugin still parses its options. Logical CPUs, not xdist's ``auto`` (physical cores, by
    psutil): a CI machine's 2 vCPUs may be one core with two threads."""
    if not config.pluginmanager.has_plugin("xdist") or hasattr(config, "workerinput"):
        return
    if config.option.numprocesses is None and not config.option.tx:
        config.option.numprocesses = "logical"
    if config.option.dist == "no":  # xdist puts it back to "no" when -n 0
        config.option.dist = DIST_MODE


#: Test files that share one session fixture too costly to compute twice (the tiny demo,
#: :func:`tiny_demo`): the default run sends them to one worker as one unit, so the fixture is
#: computed once per session instead of once in each worker at the same time (~37 s each on 2 cores,
#: against ~21 s once: issue 48, "no test over 30 s").
SHARED_FIXTURE_FILES = ("tests/pipeline/test_run_pipeline.py", "tests/pipeline/test_result_cache.py")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile`` with :data:`SHARED_FIXTURE_FILES` as one unit (xdist's own file
    scheduler otherwise: each file to one worker); other ``--dist`` modes are xdist's."""
    if config.option.dist != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class _SharedFixtureFiles(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return SHARED_FIXTURE_FILES[0] if scope in SHARED_FIXTURE_FILES else scope

    return _SharedFixtureFiles(config, log)


def pytest_configure(config: pytest.Config) -> None:
    """Point evtsync's caches (trace tables, results, figures, the compiled scanner and models:
    all under ``$EVTSYNC_CACHE_DIR``) at a temporary folder of this process, removed at the end:
    the tests never read what an earlier run or the user left in ``~/.cache/evtsync`` nor
    write there, and two workers never race on one cache. Subprocesses the tests start inherit
    it; a test about the default location sets its own. The caches' signing key
    (``$EVTSYNC_CACHE_KEY``) is a file in another temporary folder, one for the session, made by the
    controller before the workers start (so that the session's figure cache, :func:`session_figure_cache`,
    is trusted by every worker). Runs in each xdist worker too (after the controller), which then replaces the controller's folder by its own. The user's settings
    that change what evtsync does (:data:`USER_SETTINGS`) are removed for the session: a test
    that needs one sets it itself.

    One exception: the compiled trace scanner (``<cache>/scanner``, ~40 s of CPU to build on 2
    cores) is one folder for the whole session, made by the controller before it starts the
    workers and linked into each process's cache (:func:`link_session_scanner`): built once,
    by the first process that needs it (the others wait on its lock:
    :func:`evtsync.trace.scan.build_ahead_of_time`), not once per worker and per test that
    starts from an empty cache."""
    for name in USER_SETTINGS:
        os.environ.pop(name, None)
    # every trace is cached, the small test traces too (the default bypasses files under 256 KiB:
    # evtsync.trace.cache.cache_min_bytes; tests/trace/test_cache_small.py tests the default)
    os.environ[CACHE_MIN_ENV] = "0"
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    if SCANNER_ENV not in os.environ:  # the controller (or a run without xdist): the workers inherit it
        os.environ[SCANNER_ENV] = tempfile.mkdtemp(prefix="evtsync-tests-scanner-")
        config.stash[_SCANNER_FOLDER] = os.environ[SCANNER_ENV]
    folder = tempfile.mkdtemp(prefix=f"evtsync-tests-{worker}-")
    config.stash[_CACHE_FOLDER] = folder
    os.environ[CACHE_ENV] = folder
    # the caches' signing key, outside the caches as the user's is: one for the session, made here by
    # the controller before it starts the workers (they only read it; a worker making it on first use
    # could read another's half-written key), so that every process trusts the session's figure cache
    from evtsync.core.trust import signing_key

    if KEY_DIR_ENV not in os.environ:
        config.stash[_KEY_FOLDER] = os.environ[KEY_DIR_ENV] = tempfile.mkdtemp(prefix="evtsync-tests-key-")
        config.stash[_FIGURES_FOLDER] = os.environ[FIGURES_ENV] = tempfile.mkdtemp(prefix="evtsync-tests-figures-")
    os.environ[KEY_ENV] = str(Path(os.environ[KEY_DIR_ENV]) / "cache-key")
    if _KEY_FOLDER in config.stash:
        signing_key()  # made now, while no other process of the session runs
    link_session_scanner(Path(folder))


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove this process's cache folder (:func:`pytest_configure`), and the session's scanner
    folder in the process that made it (an xdist worker has done it already: :func:`pytest_sessionfinish`)."""
    _remove_folders(config)


def _remove_folders(config: pytest.Config) -> None:
    """Remove the folders :func:`pytest_configure` made, once."""
    if _SCANNER_FOLDER in config.stash:
        os.environ.pop(SCANNER_ENV, None)
    if _KEY_FOLDER in config.stash:
        os.environ.pop(KEY_DIR_ENV, None)
        os.environ.pop(FIGURES_ENV, None)
    for key in (_CACHE_FOLDER, _KEY_FOLDER, _SCANNER_FOLDER, _FIGURES_FOLDER):
        folder = config.stash.get(key, None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
            del config.stash[key]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """In an xdist worker: finish the slow part of the teardown here, before the worker reports
    "workerfinished" (xdist sends it after every other ``pytest_sessionfinish``), and then ignore
    SIGINT. On that report the controller ends the worker's gateway, and execnet interrupts a worker
    still busy 5 s later with a SIGINT to itself (execnet/gateway_base.py, ``_terminate_execution``):
    the KeyboardInterrupt landed in whatever the worker was doing — removing its cache folder, or
    llvmlite freeing compiled code — and ``make test`` ended with that traceback (issue 49). So the
    cache folder goes and the garbage (numba's and llvmlite's compiled code among it) is collected
    here; what is left after the report is short, and a late SIGINT is ignored (execnet then waits
    10 s more before it ends the process, without a traceback)."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    import contextlib
    import gc
    import signal

    _remove_folders(session.config)
    gc.collect()
    with contextlib.suppress(ValueError):  # not the main thread: nothing to protect here
        signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session) -> Generator[None, object, object]:
    """Collect with Python's cyclic garbage collector paused (issue 48): rewriting the test modules'
    asserts allocates millions of AST nodes, which set off ~2,000 collections that walk the growing
    heap (1.1-1.4 s of a 5-7 s collection, 2026-12-06) and free nothing that the one collection at
    the end does not (28,000 objects either way; peak memory +3 MB: docs/performance.md, "test
    collection"). The collector runs again from the first test on, with what collection left alive
    frozen (``gc.freeze``: the modules, functions and items every test process keeps to its end):
    the first collection after the pause, and pytest's two full ones at the end of the session
    (its unraisable-exception check), do not walk those ~260,000 objects again (~0.1 s of a
    collection; every later full collection of the run is shorter too). The cyclic garbage of
    collection (~30,000 objects) is frozen with them, kept to the end of the process (peak memory of
    a collection within 2 MB of before: docs/performance/cli.md).
    Records, as it goes, which collected module first brought in a heavy library
    (:func:`pytest_collectreport`, :data:`HEAVY_IMPORTED`)."""
    record_heavy_imports("before collection (a plugin or conftest.py)", sys.modules, HEAVY_IMPORTED)
    enabled = gc.isenabled()
    gc.disable()
    try:
        return (yield)
    finally:
        if enabled:
            gc.freeze()
            gc.enable()


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems() -> Generator[None, object, object]:
    """hypothesis's scan of the loaded modules' constants not at the end of collection, where its
    plugin makes it (~0.9 s of a fresh clone's collection), but before the first fuzz test
    (:func:`pytest_runtest_setup`); the same constants (tests/_hypothesis_scan.py)."""
    with _hypothesis_scan.deferred():
        return (yield)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a fuzz test (one hypothesis's plugin marked ``hypothesis``): hypothesis's scan of the
    modules loaded since its last one, all of them the first time (tests/_hypothesis_scan.py), outside
    hypothesis's timing of the test's draws."""
    if item.get_closest_marker("hypothesis") is not None:
        _hypothesis_scan.scan_now()


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """Note the heavy libraries the collector just reported on imported (:data:`HEAVY_AT_COLLECTION`)."""
    record_heavy_imports(report.nodeid, sys.modules, HEAVY_IMPORTED)


#: Libraries no test module may import at collection (issue 48: a collection, in every xdist worker,
#: pays for what the test modules import at module level; a test imports these when it runs, through
#: tests/_lazy.py or in its body). tests/project/test_collection_light.py checks the record below.
HEAVY_AT_COLLECTION = ("scipy", "xarray", "dask", "distributed", "numba", "llvmlite", "pymc", "pytensor",
                       "arviz", "nutpie", "matplotlib", "zarr")
#: Each heavy library imported by the end of collection -> the node (or "before collection") that did it.
HEAVY_IMPORTED: dict[str, str] = {}


def record_heavy_imports(where: str, modules: Mapping[str, object], record: dict[str, str]) -> None:
    """Set ``record[name] = where`` for each :data:`HEAVY_AT_COLLECTION` library ``name`` now in
    ``modules`` (``sys.modules``) and not yet in ``record``: the first place that imported it."""
    for name in HEAVY_AT_COLLECTION:
        if name in modules and name not in record:
            record[name] = where


_CACHE_FOLDER = pytest.StashKey[str]()
_SCANNER_FOLDER = pytest.StashKey[str]()
_KEY_FOLDER = pytest.StashKey[str]()
_FIGURES_FOLDER = pytest.StashKey[str]()

#: The environment variables evtsync reads, besides the cache folder, that would change what a
#: test sees if the user running the suite had set them: the trace decoder, a dask cluster to
#: send work to, the caches' size limits, quiet mode (tests/project/test_test_isolation.py checks
#: the list against the package's sources).
USER_SETTINGS = ("EVTSYNC_DECODER", "DASK_SCHEDULER_ADDRESS", "EVTSYNC_CACHE_MAX_BYTES",
                 "EVTSYNC_RESULT_CACHE_MAX_BYTES", "EVTSYNC_QUIET", "EVTSYNC_FIT_READ_TIMEOUT")

#: The environment variable naming the session's scanner folder (:func:`pytest_configure`).
SCANNER_ENV = "EVTSYNC_TESTS_SCANNER_DIR"
#: The environment variables naming the session's signing-key folder and its report figure cache
#: (:func:`pytest_configure`, :func:`session_figure_cache`), made by the controller.
KEY_DIR_ENV = "EVTSYNC_TESTS_KEY_DIR"
FIGURES_ENV = "EVTSYNC_TESTS_FIGURES_DIR"


@pytest.fixture(scope="session")
def session_figure_cache() -> Path:
    """The test session's report figure cache (issue 48), one folder for every process of the
    session, signed with the session's key: a report of tables another test's report has drawn
    (the tiny demo, run by several test files) copies its figures, verified, instead of drawing
    them again (~11 s of CPU each); a figure of other tables is drawn and kept. Only a figure
    whose pickled input tables, code digest and matplotlib version are the same is reused
    (:func:`evtsync.report.context.figure_key`)."""
    return Path(os.environ[FIGURES_ENV])


def link_session_scanner(cache: Path) -> Path:
    """Make ``cache`` (an evtsync cache folder, created if missing) use the session's compiled
    trace scanner: ``cache/scanner`` a link to the one folder of the test session. For tests
    that give a command a fresh cache of its own (``$EVTSYNC_CACHE_DIR``) about something other
    than the scanner's build: the build (tested in tests/trace/test_trace_scan.py) then happens
    at most once a session, not in each such test. Returns ``cache``."""
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "scanner").symlink_to(os.environ[SCANNER_ENV], target_is_directory=True)
    return cache


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


#: The tiny demo study's run options (4 iterations and one layer a workload; the Gumbel model, 60 draws):
#: the pipeline tests' small end-to-end run (tests/pipeline/test_run_pipeline.py, test_result_cache.py).
TINY_DEMO_OPTIONS: dict = {"draws": 60, "tune": 60, "chains": 2, "models": ["gumbel"],
                           "demo_overrides": {"iterations": 4, "layers": 1}}
#: The package's source digest as the pipeline tests fix it: it is part of every stage key, and other
#: work on the source tree while they run must not invalidate their stages.
TEST_SOURCE_DIGEST = "test-source-digest"


@pytest.fixture(scope="session")
def tiny_demo(tmp_path_factory: pytest.TempPathFactory, session_figure_cache: Path) -> tuple[Path, dict, list]:
    """The tiny demo run (:data:`TINY_DEMO_OPTIONS`), once per test process (issue 48: two test files
    each ran it, ~25 s of CPU a time): ``<root>/one``, with the result cache ``<root>/cache`` it filled
    and its report, whose figures are one-pixel placeholders
    (:func:`tests.report_checks.placeholder_figures`; tests/pipeline/test_run_pipeline.py draws them
    where it reads them). Returns the run folder, its manifest and its stage events. Users copy the
    folder to change it; a rerun in place must leave its outputs as they are."""
    from evtsync.pipeline import RunOptions, run_pipeline
    from tests.report_checks import placeholder_figures

    root = tmp_path_factory.mktemp("tiny-demo")
    events: list = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("evtsync.pipeline.engine.source_digest", lambda: TEST_SOURCE_DIGEST)
        placeholder_figures(mp)
        run = run_pipeline(RunOptions(out=root / "one", result_cache=str(root / "cache"),
                                      figure_cache=str(session_figure_cache), **TINY_DEMO_OPTIONS),
                           on_stage=events.append)
    return run.out, run.manifest, events
