"""Collection imports no heavy library (issue 48): every xdist worker collects the whole suite, so a
test module that imports SciPy, xarray, PyMC, numba or matplotlib at module level costs each worker
that import before any test runs. tests/conftest.py records, during this session's own collection,
which collected node first brought each of :data:`tests.conftest.HEAVY_AT_COLLECTION` into
``sys.modules``; a default run collects every test module, a run of a few files checks those.
"""

from __future__ import annotations

import ast
import functools
import marshal
from collections.abc import Callable
from pathlib import Path

import pytest
from _pytest.assertion import rewrite

from tests import _assert_locations
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


# ---- pytest's assertion rewriting with the cheaper location fix (tests/_assert_locations.py)

TESTS = Path(__file__).resolve().parent.parent

#: every construct the rewriter explains differently, and the nodes it generates without a location
ASSERT_KINDS = '''
import math
def f(x, *a, **k):
    return x
def test_kinds():
    x, y, d = 1, [1, 2], {"a": 1}
    assert x == 1
    assert x == 1, f"message {x!r}"
    assert not (x > 3)
    assert x < 2 <= 3 != 4
    assert x and y or d
    assert f(x, *y, key=d["a"], **d) == 1
    assert math.isclose(-x, -1.0) and y[0] in {1, 2}
    assert (n := len(y)) == 2 and n
    assert [v for v in y if v] == y
    assert (lambda z: z)(x) is not None
    assert d.get("a") is x
    assert x @ 1 if False else True
    assert {**d}.keys() >= {"a"}
    assert f"{x:>3}" == "  1"
    assert True, [v for v in y]
'''


def _rewritten(source: bytes, name: str) -> bytes:
    """The marshalled code object of ``source`` as pytest's rewriting (with whatever ``visit_Assert``
    is installed now) compiles it."""
    tree = ast.parse(source, filename=name)
    rewrite.rewrite_asserts(tree, source, name, None)
    return marshal.dumps(compile(tree, name, "exec", dont_inherit=True))


def _with_pytests_own[T](fn: Callable[[], T]) -> T:
    """``fn()`` with pytest's own ``visit_Assert`` (the one the wrapper wraps) installed."""
    ours = rewrite.AssertionRewriter.visit_Assert
    rewrite.AssertionRewriter.visit_Assert = ours.__wrapped__  # type: ignore[attr-defined]
    try:
        return fn()
    finally:
        rewrite.AssertionRewriter.visit_Assert = ours


def test_the_cheaper_location_fix_is_installed_for_this_pytest() -> None:
    # the installed pytest is the one it was written against; were it not, conftest leaves pytest alone
    assert _assert_locations.applicable()
    assert getattr(rewrite.AssertionRewriter.visit_Assert, "_evtsync_locations", False)


def test_rewritten_code_is_pytests_own_for_every_kind_of_assert() -> None:
    ours = _rewritten(ASSERT_KINDS.encode(), "kinds.py")
    assert ours == _with_pytests_own(lambda: _rewritten(ASSERT_KINDS.encode(), "kinds.py"))
    namespace: dict[str, object] = {}
    exec(marshal.loads(ours), namespace)  # runs: every assert holds
    namespace["test_kinds"]()  # type: ignore[operator]


def test_a_failing_assert_still_explains_itself() -> None:
    code = marshal.loads(_rewritten(b"def t():\n    x = [1, 2]\n    assert len(x) == 3, 'short'\n", "fail.py"))
    namespace: dict[str, object] = {}
    exec(code, namespace)
    with pytest.raises(AssertionError) as err:
        namespace["t"]()  # type: ignore[operator]
    assert "short" in str(err.value) and "assert 2 == 3" in str(err.value) and "where 2 = len([1, 2])" in str(err.value)
    assert err.traceback[-1].lineno + 1 == 3  # the assert's own line (pytest's lineno is 0-based)


def test_rewritten_code_is_pytests_own_for_the_largest_test_modules() -> None:
    # the 2 largest test modules (most asserts and kinds of them) and conftest: identical code objects,
    # line and column tables included
    files = sorted(TESTS.rglob("test_*.py"), key=lambda p: p.stat().st_size, reverse=True)[:2]
    files.append(TESTS / "conftest.py")
    for path in files:
        source = path.read_bytes()
        theirs = _with_pytests_own(functools.partial(_rewritten, source, str(path)))
        assert _rewritten(source, str(path)) == theirs, path
