"""A cheaper location fix for pytest's assertion rewriting (issue 48: collection CPU on a fresh clone).

pytest rewrites every assert of a test module into statements that explain a failure, then gives
each generated AST node that has no source location the assert's one: it walks the statements
with a recursive generator (``_pytest.assertion.rewrite.traverse_node``) and calls
``ast.copy_location`` on every node without a ``lineno``, operator and context nodes included.
On a fresh clone (no rewritten bytecode cached) that walk was ~0.5 s of the ~3 s pytest spends
rewriting the suite's ~3,900 asserts.

:func:`install` wraps ``AssertionRewriter.visit_Assert``: pytest's own method runs with the walk
turned into a no-op, then the same nodes get the same attributes from an iterative walk
(``copy_location``'s rule: ``lineno``/``col_offset`` when the assert has them, ``end_*`` whenever
the assert has the attribute, only on nodes whose class has location attributes). Nothing else of
the rewriting changes: the code objects are identical, compared with ``marshal`` for every test
module by ``tests/project/test_collection_light.py``. It is installed only where pytest's
``visit_Assert`` is the one this was written against (its location loop found verbatim in its
source); any other pytest is left as it is.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable, Iterable
from typing import Any

#: pytest's location loop in ``visit_Assert`` (pytest 8.x-9.x), whitespace removed
_PYTEST_LOOP = ("forstmtinself.statements:fornodeintraverse_node(stmt):"
                "ifgetattr(node,\"lineno\",None)isNone:")
_LOCATION = ("lineno", "col_offset", "end_lineno", "end_col_offset")


def fix_locations(statements: Iterable[ast.AST], assert_: ast.AST) -> None:
    """Give every node under ``statements`` that has no ``lineno`` the location of ``assert_``, as
    ``for node in traverse_node(stmt): ast.copy_location(node, assert_)`` does for those nodes."""
    loc = [(attr, getattr(assert_, attr, None)) for attr in _LOCATION
           if attr in assert_._attributes and hasattr(assert_, attr)
           and (getattr(assert_, attr) is not None or attr.startswith("end_"))]
    stack = list(statements)
    children = ast.iter_child_nodes
    while stack:
        node = stack.pop()
        if getattr(node, "lineno", None) is None:
            attrs = node._attributes
            for attr, value in loc:
                if attr in attrs:
                    setattr(node, attr, value)
        stack.extend(children(node))


def _no_walk(_node: ast.AST) -> tuple[()]:
    return ()


def applicable() -> bool:
    """Whether this pytest's ``visit_Assert`` fixes locations with the loop :func:`install` replaces."""
    try:
        from _pytest.assertion import rewrite

        source = inspect.getsource(rewrite.AssertionRewriter.visit_Assert)
    except (ImportError, AttributeError, OSError, TypeError):
        return False
    compact = "".join(source.split())
    loop = compact.find(_PYTEST_LOOP)
    return (loop >= 0 and compact.count("traverse_node(") == 1
            and compact.find("ast.copy_location(node,assert_)", loop) > loop
            and callable(getattr(rewrite, "traverse_node", None)))


def install() -> bool:
    """Wrap pytest's ``visit_Assert`` (once; see the module docstring); False where not applicable."""
    if not applicable():
        return False
    from _pytest.assertion import rewrite

    original: Callable[..., Any] = rewrite.AssertionRewriter.visit_Assert
    if getattr(original, "_evtsync_locations", False):
        return True

    def visit_Assert(self: Any, assert_: ast.Assert) -> list[ast.stmt]:  # noqa: N802 - pytest's name
        walk = rewrite.traverse_node
        rewrite.traverse_node = _no_walk  # type: ignore[assignment]
        try:
            statements = original(self, assert_)
        finally:
            rewrite.traverse_node = walk
        fix_locations(statements, assert_)
        return statements

    visit_Assert._evtsync_locations = True  # type: ignore[attr-defined]
    visit_Assert.__wrapped__ = original  # type: ignore[attr-defined]
    rewrite.AssertionRewriter.visit_Assert = visit_Assert  # type: ignore[method-assign]
    return True
