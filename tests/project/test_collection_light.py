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
import re
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
    """``fn()`` with pytest's own ``visit_Assert`` and ``run`` (the ones the wrappers wrap) installed."""
    cls = rewrite.AssertionRewriter
    ours = cls.visit_Assert, cls.run
    cls.visit_Assert = ours[0].__wrapped__  # type: ignore[attr-defined,method-assign]
    cls.run = ours[1].__wrapped__  # type: ignore[attr-defined,method-assign]
    try:
        return fn()
    finally:
        cls.visit_Assert, cls.run = ours  # type: ignore[method-assign]


def test_the_cheaper_location_fix_is_installed_for_this_pytest() -> None:
    # the installed pytest is the one it was written against; were it not, conftest leaves pytest alone
    assert _assert_locations.applicable() and _assert_locations.walrus_skip_applicable()
    assert getattr(rewrite.AssertionRewriter.visit_Assert, "_evtsync_locations", False)
    assert hasattr(rewrite.AssertionRewriter.run, "__wrapped__")


_TRAVERSE = ("def traverse_node(node):\n    yield node\n    for child in children(node):\n"
             "        yield from traverse_node(child)\n")
_VISIT = "    def visit_Assert(self, assert_):\n        for node in traverse_node(stmt):\n            pass\n"


@pytest.mark.parametrize(("text", "expected"), [
    (_TRAVERSE + _VISIT, True),  # pytest 8/9's shape: its definition, its recursion, one call
    (_TRAVERSE + _VISIT + "def other(tree):\n    return list(traverse_node(tree))\n", False),  # a 2nd caller
    (_TRAVERSE, False),  # no call: not the loop install() replaces
    (_VISIT, False),  # no definition in the module
])
def test_one_call_site_of_traverse_node_in_the_module(text: str, expected: bool) -> None:
    """install() swaps the rewrite module's traverse_node while visit_Assert runs: applicable only
    where the module calls it at that one place (hand-written module texts: 1 call site, 2, none)."""
    assert _assert_locations._one_traverse_call(text) is expected


def test_the_installed_rewrite_module_calls_traverse_node_once() -> None:
    import inspect

    text = inspect.getsource(rewrite)
    calls = [line.strip() for line in text.splitlines() if "traverse_node(" in line and "def " not in line
             and "yield from" not in line]
    assert calls == ["for node in traverse_node(stmt):"]  # a plain reading of the module's lines
    assert _assert_locations._one_traverse_call(text)


@pytest.mark.parametrize("source", [
    "def t(f, x, y):\n    assert f(x, y) == [x, y] and (x or y)\n",  # no walrus: the search is skipped
    "def t(f, x, y):\n    assert f(x, y) == [x, y] and (x or y), ':= in a string only'\n",
    "def t(f, x, y):\n    assert f(x, (x := 2)) == [x, y] and (x or y)\n",  # a walrus: pytest's own search
])
def test_the_walrus_search_is_skipped_only_without_a_walrus(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    search = rewrite._walrus_targets

    def counted(nodes: list[ast.expr]) -> set[str]:
        calls.append(1)
        return search(nodes)

    monkeypatch.setattr(rewrite, "_walrus_targets", counted)
    ours = _rewritten(source.encode(), "w.py")
    assert bool(calls) is (":=" in source)  # by hand: the source has the two bytes or not
    assert rewrite._walrus_targets is not _assert_locations._no_walrus_targets  # put back after the module
    calls.clear()
    assert ours == _with_pytests_own(lambda: _rewritten(source.encode(), "w.py"))
    assert calls  # pytest's own rewriting searched every time


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


def _copy_location_walk(statements: list[ast.stmt], assert_: ast.AST) -> None:
    """pytest's own location fix, as its ``visit_Assert`` writes it (ast.walk reaches the same nodes)."""
    for stmt in statements:
        for node in ast.walk(stmt):
            if getattr(node, "lineno", None) is None:
                ast.copy_location(node, assert_)


def _locations(tree: ast.AST) -> list[tuple[str, tuple[object, ...]]]:
    return [(type(n).__name__, tuple(getattr(n, a, "-") for a in ("lineno", "col_offset", "end_lineno", "end_col_offset")))
            for n in ast.walk(tree)]


class _Odd(ast.expr):
    """Not an ASDL signature: fix_locations cannot read this class's child fields."""

    _fields = ("inner", "items")


@pytest.mark.parametrize("odd", ["unknown class", "not a node where a node goes", "plain"])
def test_fix_locations_sets_what_copy_location_sets(odd: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # a hand-built statement (no locations, as pytest generates them) holding an original, located
    # expression: fix_locations gives the same nodes the same attributes as pytest's loop, also where
    # it must hand over to the generic walk part way through
    assert_ = ast.parse("assert x\n\n\n   ", mode="exec").body[0]
    original = ast.parse("\n\nf(a, *b, k=c)", mode="eval").body  # located nodes (line 3), as the assert's own
    assert isinstance(original, ast.Call)
    inner: ast.expr = ast.Starred(ast.Name("s", ast.Load()), ast.Load())  # generated, under a located node
    original.args.append(inner)
    value: ast.expr = ast.Dict([None, ast.Constant(1)], [ast.Name("d", ast.Load()), ast.Constant(2)])
    if odd == "unknown class":
        value = _Odd(inner=value, items=[ast.Constant(3)])  # type: ignore[call-arg]
    elif odd == "not a node where a node goes":
        value = ast.UnaryOp(ast.Not(), "text")  # type: ignore[arg-type]
    def build() -> list[ast.stmt]:
        import copy

        return [ast.If(ast.UnaryOp(ast.Not(), copy.deepcopy(original)), [ast.Expr(copy.deepcopy(value))], []),
                ast.Assign([ast.Name("@py_assert1", ast.Store())], ast.Constant(None))]
    handed_over: list[int] = []
    generic = _assert_locations.fix_locations_generic

    def counted(statements: list[ast.stmt], assert_: ast.AST) -> None:
        handed_over.append(1)
        generic(statements, assert_)

    monkeypatch.setattr(_assert_locations, "fix_locations_generic", counted)
    ours, theirs = build(), build()
    _assert_locations.fix_locations(ours, assert_)
    _copy_location_walk(theirs, assert_)
    assert [_locations(t) for t in ours] == [_locations(t) for t in theirs]
    assert bool(handed_over) is (odd != "plain")
    # by hand: generated nodes have the assert's line (1) and end column (8); the original call keeps
    # its own line (3), and the starred node pytest-style code put under it gets the assert's
    check, clear = ours
    assert isinstance(clear, ast.Assign) and isinstance(check, ast.If) and isinstance(check.test, ast.UnaryOp)
    assert clear.targets[0].lineno == 1 and clear.end_col_offset == 8
    call = check.test.operand
    assert isinstance(call, ast.Call)
    assert call.lineno == 3 and call.args[0].lineno == 3
    assert isinstance(call.args[-1], ast.Starred) and call.args[-1].lineno == 1 and call.args[-1].value.lineno == 1


def test_rewritten_code_is_pytests_own_for_every_test_module() -> None:
    # every module pytest rewrites in this suite (the test modules and conftest): identical code objects,
    # line and column tables included (~3 s: each module rewritten and compiled twice)
    files = sorted(TESTS.rglob("test_*.py"))
    files.append(TESTS / "conftest.py")
    assert len(files) > 100  # the whole suite, not a few files
    differ = []
    for path in files:
        source = path.read_bytes()
        theirs = _with_pytests_own(functools.partial(_rewritten, source, str(path)))
        if _rewritten(source, str(path)) != theirs:
            differ.append(str(path.relative_to(TESTS)))
    assert not differ, f"rewritten code differs from pytest's own in {differ}"


#: failing test modules, by file name: one without a walrus operator (pytest's walrus search skipped)
#: and one with (pytest's own search)
FAILING = {"test_failing.py": '''
def helper(v):
    return v * 2
def test_fails():
    values = [1, 2, 3]
    assert helper(len(values)) == 7 and values, "doubled"
def test_global():
    global G
    G = 1
    assert G in {2: None, **{3: 4}}
''', "test_walrus.py": '''
def test_walrus():
    d = {"a": [1]}
    assert (n := len(d["a"])) > 1 or not d
'''}


def _pytest_output(folder: Path, install: bool) -> str:
    """The report of a real ``python -m pytest`` run of :data:`FAILING` in ``folder``, with the
    cheaper rewriting installed by its conftest (``install``) or pytest's own."""
    import os
    import subprocess
    import sys

    folder.mkdir()
    for name, text in FAILING.items():
        (folder / name).write_text(text)
    (folder / "conftest.py").write_text(
        "from _pytest.assertion.rewrite import AssertionRewriter\n"
        "from tests._assert_locations import install\n"
        + ("assert install()\n" if install else "")
        + f"assert getattr(AssertionRewriter.visit_Assert, '_evtsync_locations', False) is {install}\n")
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent), "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "-q", "--tb=long", "-o", "addopts=", *FAILING],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stdout + done.stderr  # the three tests fail, nothing else
    return re.sub(r" in [0-9.]+s\b", " in <time>", done.stdout.replace(str(folder), "<folder>"))


def test_a_real_run_reports_failures_as_pytest_does(tmp_path: Path) -> None:
    # end to end, through pytest's import hook: each failing assert's report (its line, the
    # introspection text) is the one pytest's own rewriting gives, and points at the assert's line
    ours = _pytest_output(tmp_path / "ours", install=True)
    theirs = _pytest_output(tmp_path / "theirs", install=False)
    assert ours.replace("/ours/", "/x/") == theirs.replace("/theirs/", "/x/")
    # by hand: the file, the assert's line (1-based; each text starts with an empty line) and pytest's text
    for where, text in (("test_failing.py:6", "assert (6 == 7)"), ("test_failing.py:10", "assert 1 in {2: None, 3: 4}"),
                        ("test_walrus.py:4", "assert (1 > 1 or not {'a': [1]})")):
        assert f"{where}: AssertionError" in ours, (where, ours)
        assert text in ours, (text, ours)
    assert "where 6 = helper(3)" in ours and "where 3 = len([1, 2, 3])" in ours and "doubled" in ours
    assert "3 failed" in ours
