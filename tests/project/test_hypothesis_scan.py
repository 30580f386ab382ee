"""hypothesis's scan of the loaded modules' constants runs before the first fuzz test, not at
collection, and a fuzz test sees the same constants (tests/_hypothesis_scan.py, issue 48).

Two real ``python -m pytest`` runs of a small project (a module with two unusual literals, a fuzz
test and a plain test) in a temporary folder: one with this suite's two conftest hooks, one with
hypothesis's plugin as it is. Each records when hypothesis's scan ran (collection, a test's setup,
a test's call) and what constants the fuzz test could draw at its first example.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import _hypothesis_scan

REPO = Path(__file__).resolve().parents[2]

LOCAL_MODULE = '''
MAGIC = 918273645
WORD = "zebra-quokka"
'''

FUZZ_TESTS = '''
import json
import localmod
from hypothesis import given, settings, strategies as st
from hypothesis.internal.conjecture import providers

SEEN = []

@settings(max_examples=5, deadline=None, database=None)
@given(st.integers())
def test_fuzz(x):
    if not SEEN:  # the constants hypothesis can draw from at this test's first example
        SEEN.append(1)
        constants = providers._local_constants
        with open("seen.json", "w") as out:
            json.dump({"integers": sorted(constants.integers), "strings": sorted(constants.strings)}, out)

def test_plain():
    assert localmod.MAGIC
'''

#: a plugin of both runs (``-p probe``): counts hypothesis's scans by the phase they ran in
PROBE = '''
import json
import pytest
from hypothesis.internal.conjecture import providers

PHASE = ["start"]
CALLS = []
_scan = providers._get_local_constants

def _counted():
    CALLS.append(PHASE[0])
    return _scan()

providers._get_local_constants = _counted

@pytest.hookimpl(wrapper=True)
def pytest_collection(session):
    PHASE[0] = "collection"
    try:
        return (yield)
    finally:
        PHASE[0] = "between"

@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_setup(item):
    PHASE[0] = "setup " + item.name
    return (yield)

@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_call(item):
    PHASE[0] = "call " + item.name
    return (yield)

def pytest_sessionfinish(session):
    with open("calls.json", "w") as out:
        json.dump(CALLS, out)
'''

#: the conftest of the run with this suite's hooks: the two hooks of tests/conftest.py
OURS = "from tests.conftest import pytest_collection_modifyitems, pytest_runtest_setup  # noqa: F401\n"
#: the conftest of the run without: the same modules loaded (tests/conftest.py's), none of its hooks
THEIRS = "import tests.conftest  # noqa: F401\n"


def _run(folder: Path, ours: bool) -> tuple[list[str], dict]:
    """Run the small project in ``folder``; return the phases of hypothesis's scans and the constants
    the fuzz test saw at its first example."""
    folder.mkdir()
    (folder / "localmod.py").write_text(LOCAL_MODULE)
    (folder / "test_fuzz.py").write_text(FUZZ_TESTS)
    (folder / "probe.py").write_text(PROBE)
    (folder / "conftest.py").write_text(OURS if ours else THEIRS)
    env = {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{REPO}", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "probe", "-q",
                           "-o", "addopts=", "test_fuzz.py"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((folder / "calls.json").read_text()), json.loads((folder / "seen.json").read_text())


def test_the_scan_runs_before_the_first_fuzz_test_and_finds_the_same_constants(tmp_path: Path) -> None:
    ours_calls, ours_seen = _run(tmp_path / "ours", ours=True)
    theirs_calls, theirs_seen = _run(tmp_path / "theirs", ours=False)
    # hypothesis's plugin as it is: the scan at the end of collection
    assert "collection" in theirs_calls
    # with the hooks: none at collection; the first in the fuzz test's setup, none for the plain test
    assert "collection" not in ours_calls and ours_calls[0] == "setup test_fuzz", ours_calls
    assert not any(phase.endswith("test_plain") for phase in ours_calls if phase.startswith("setup"))
    # the fuzz test could draw the same constants, the local module's two literals among them
    assert ours_seen == theirs_seen
    assert 918273645 in ours_seen["integers"] and "zebra-quokka" in ours_seen["strings"]


def test_deferred_leaves_the_scan_as_it_was() -> None:
    pytest.importorskip("hypothesis")
    from hypothesis.internal.conjecture import providers

    scan = providers._get_local_constants
    assert _hypothesis_scan.applicable()  # the installed hypothesis's plugin is the one this was written for
    with _hypothesis_scan.deferred():
        assert providers._get_local_constants is not scan
        assert providers._get_local_constants() is providers._local_constants  # no scan
    assert providers._get_local_constants is scan


PLUGIN_INSIDE = '''
if True:
    def pytest_collection_modifyitems(items):
        if items:
            from hypothesis.internal.conjecture.providers import _get_local_constants

            _get_local_constants()

    def pytest_sessionstart(session):
        pass
'''

#: the import at module level, the call in the hook: another plugin than the one this was written for
PLUGIN_IMPORT_OUTSIDE = '''
from hypothesis.internal.conjecture.providers import _get_local_constants

if True:
    def pytest_collection_modifyitems(items):
        _get_local_constants()
'''

#: import and call both in another function after the hook
PLUGIN_CALL_AFTER = '''
if True:
    def pytest_collection_modifyitems(items):
        pass

    def pytest_sessionstart(session):
        from hypothesis.internal.conjecture.providers import _get_local_constants

        _get_local_constants()
'''


@pytest.mark.parametrize(("text", "expected"), [(PLUGIN_INSIDE, True), (PLUGIN_IMPORT_OUTSIDE, False),
                                                (PLUGIN_CALL_AFTER, False)])
def test_applicable_only_where_the_hook_imports_and_calls_the_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   text: str, expected: bool) -> None:
    """applicable() reads the plugin's text: the scan's import and its one call inside
    ``pytest_collection_modifyitems`` (written plugins, loaded from tmp_path, stand in for it)."""
    import importlib.util

    path = tmp_path / "fake_plugin.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("fake_plugin", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "_hypothesis_pytestplugin", module)  # not executed: its text is what counts
    assert _hypothesis_scan.applicable() is expected
