"""hypothesis's scan of the loaded modules' constants before the first fuzz test, not at collection
(issue 48: collection CPU on a fresh clone).

hypothesis draws some test inputs (5% of draws) from the literals of the code under test: its
``_get_local_constants`` parses the source of every loaded module that is not a test, installed or
standard-library module (here evtsync's ~130), keeps the result in ``.hypothesis/constants`` by source
hash, and on each later call scans only the modules loaded since. Its pytest plugin calls it at the
end of collection when a collected test uses ``@given`` (so that the time is not counted in the first
fuzz test's draws, where its ``too_slow`` health check would see it): ~0.9 s of a fresh clone's
collection (no ``.hypothesis`` yet), ~0.1 s with one, in every process that collects the suite.

:func:`deferred` (around pytest's ``pytest_collection_modifyitems``, ``tests/conftest.py``) turns that
call into a no-op for the plugin's hook; :func:`scan_now` (in ``pytest_runtest_setup``, for the tests
the plugin marked ``hypothesis``) makes the same call before each fuzz test runs, outside hypothesis's
timing, as the plugin's comment wants. The constants a fuzz test can draw are the same: a call scans
every loaded module it has not seen, so at a test's first draw it has scanned every module loaded by
then either way. What changes is where the scan's CPU goes: the setup of the first fuzz test a process
runs, and nowhere in a process that runs none (a ``--collect-only``, a ``-k`` run without fuzz tests).
Applied only where hypothesis's plugin makes that call as this was written against (hypothesis 6.170:
:func:`applicable`); anywhere else hypothesis is left as it is.
"""

from __future__ import annotations

import contextlib
import inspect
import re
import sys
from collections.abc import Iterator
from typing import Any

#: the module of hypothesis's scan and the function's name there
_PROVIDERS = "hypothesis.internal.conjecture.providers"
_SCAN = "_get_local_constants"


def applicable() -> bool:
    """Whether hypothesis's pytest plugin calls the scan once, in its ``pytest_collection_modifyitems``
    (a look at the plugin's text: hypothesis itself is not imported)."""
    plugin = sys.modules.get("_hypothesis_pytestplugin")
    if plugin is None:
        return False
    try:
        source = inspect.getsource(plugin)
    except (OSError, TypeError):
        return False
    hook = source.find("def pytest_collection_modifyitems(")
    if hook < 0:
        return False
    # the hook's body: up to the next line at the hook's indentation (or less) that is not blank
    indent = hook - (source.rfind("\n", 0, hook) + 1)
    end = next((m.start() for m in re.finditer(rf"\n {{0,{indent}}}\S", source[hook:])), len(source) - hook) + hook
    call, imported = source.find(f"{_SCAN}()", hook), source.find(f"import {_SCAN}", hook)
    return (hook < imported < call < end and source.count(f"{_SCAN}()") == 1
            and source.count(f"import {_SCAN}") == 1)


def _providers() -> Any:
    """hypothesis's providers module where hypothesis is loaded and it has the scan, else None."""
    if "hypothesis" not in sys.modules or not applicable():
        return None
    import importlib

    try:
        module = importlib.import_module(_PROVIDERS)
    except ImportError:
        return None
    # the stand-in of deferred() returns the module's _local_constants: both must be there
    return module if callable(getattr(module, _SCAN, None)) and hasattr(module, "_local_constants") else None


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Within: hypothesis's scan does nothing (the plugin's collection-time call); put back after."""
    providers = _providers()
    if providers is None:
        yield
        return
    scan = getattr(providers, _SCAN)
    setattr(providers, _SCAN, lambda: providers._local_constants)
    try:
        yield
    finally:
        setattr(providers, _SCAN, scan)


def scan_now() -> None:
    """hypothesis's scan of the modules loaded since its last one (all of them the first time)."""
    providers = _providers()
    if providers is not None:
        getattr(providers, _SCAN)()
