"""Collection imports no heavy library (issue 48): every xdist worker collects the whole suite, so a
test module that imports SciPy, xarray, PyMC, numba or matplotlib at module level costs each worker
that import before any test runs. tests/conftest.py records, during this session's own collection,
which collected node first brought each of :data:`tests.conftest.HEAVY_AT_COLLECTION` into
``sys.modules``; a default run collects every test module, a run of a few files checks those.
"""

from __future__ import annotations

from tests.conftest import HEAVY_AT_COLLECTION, HEAVY_IMPORTED, record_heavy_imports


def test_collection_imported_no_heavy_library() -> None:
    found = "; ".join(f"{name} by {where}" for name, where in HEAVY_IMPORTED.items())
    assert not HEAVY_IMPORTED, (
        f"collection imported {found}: import it where it is used (tests/_lazy.py's lazy_module, or in the "
        "test or fixture); `python -X importtime -m pytest -s --collect-only -q -n 0 FILE` shows the chain")


def test_record_names_the_first_importer_only() -> None:
    record: dict[str, str] = {}
    record_heavy_imports("before collection", {"numpy": object(), "pandas": object()}, record)
    assert record == {}  # not heavy here: nothing recorded
    record_heavy_imports("tests/a.py", {"numpy": object(), "scipy": object(), "scipy.stats": object()}, record)
    record_heavy_imports("tests/b.py", {"scipy": object(), "xarray": object()}, record)
    assert record == {"scipy": "tests/a.py", "xarray": "tests/b.py"}


def test_heavy_list_names_top_level_packages() -> None:
    # sys.modules is checked by the package's own name: a dotted name would never match a first import
    assert HEAVY_AT_COLLECTION and all(name and "." not in name for name in HEAVY_AT_COLLECTION)
