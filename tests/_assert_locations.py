"""A cheaper location fix for pytest's assertion rewriting (issue 48: collection CPU on a fresh clone).

pytest rewrites every assert of a test module into statements that explain a failure, then gives
each generated AST node that has no source location the assert's one: it walks the statements
with a recursive generator (``_pytest.assertion.rewrite.traverse_node``) and calls
``ast.copy_location`` on every node without a ``lineno``, operator and context nodes included
(~800,000 node visits for the suite's ~4,100 asserts). On a fresh clone (no rewritten bytecode
cached) that walk was ~0.8 s of the ~2.5 s pytest spends rewriting the test modules.

:func:`install` wraps ``AssertionRewriter.visit_Assert``: pytest's own method runs with the walk
turned into a no-op, then the same nodes get the same attributes from one flat loop over an explicit
stack that reads each node's fields from its ``__dict__`` (:func:`fix_locations`: ``copy_location``'s
rule, ``lineno``/``col_offset`` when the assert has them, ``end_*`` whenever the assert has the
attribute, only on nodes whose class has location attributes), ~0.45 s. Nothing else of the
rewriting changes: the code objects are identical, compared with ``marshal`` for every test module
and conftest by ``tests/project/test_collection_light.py``, which also runs a failing test file
through a real ``python -m pytest`` with and without it and finds the same report (the assert's own
line, pytest's introspection text). It is installed only where pytest's ``visit_Assert`` is the one
this was written against (its location loop found verbatim in its source) and this Python's AST
classes are as :func:`fix_locations` relies on (:func:`applicable`); anywhere else pytest is left as
it is.
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
    ``for node in traverse_node(stmt): ast.copy_location(node, assert_)`` does for those nodes.

    One loop over an explicit stack that reads each node's fields from its instance ``__dict__``
    instead of ``ast.iter_child_nodes``'s generator of ``getattr`` calls: the children are the same
    (a field's AST value, or the AST items of its list value; a missing field, which ``getattr``
    would find only as the class's ``None`` default, has none), visited in another order, which does
    not matter (every node without a ``lineno`` gets the same values). Writing the location into
    ``__dict__`` is ``setattr`` for AST nodes; :func:`applicable` checks the two facts this relies
    on: a node class has either all four location attributes or none, and none has a class-level
    ``lineno`` (so a ``lineno`` missing from ``__dict__`` is ``getattr(node, "lineno", None) is
    None``)."""
    loc = {attr: getattr(assert_, attr, None) for attr in _LOCATION
           if attr in assert_._attributes and hasattr(assert_, attr)
           and (getattr(assert_, attr) is not None or attr.startswith("end_"))}
    node_type = ast.AST
    stack = list(statements)
    pop, push, extend = stack.pop, stack.append, stack.extend
    while stack:
        node = pop()
        if not isinstance(node, node_type):  # a name in Global.names, a None in Dict.keys
            continue
        fields = node.__dict__
        if fields.get("lineno") is None and node._attributes:
            fields.update(loc)
        get = fields.get
        for name in node._fields:
            value = get(name)
            if isinstance(value, list):
                extend(value)
            elif isinstance(value, node_type):
                push(value)


def _no_walk(_node: ast.AST) -> tuple[()]:
    return ()


def _node_classes() -> list[type]:
    """Every AST node class of this Python (``ast.AST``'s subclasses, recursively)."""
    classes: list[type] = []
    stack: list[type] = [ast.AST]
    while stack:
        cls = stack.pop()
        classes.append(cls)
        stack.extend(cls.__subclasses__())
    return classes


def applicable() -> bool:
    """Whether this pytest's ``visit_Assert`` fixes locations with the loop :func:`install` replaces,
    and this Python's node classes are as :func:`fix_locations` relies on (each has all four location
    attributes or none; none has a class-level ``lineno``)."""
    try:
        from _pytest.assertion import rewrite

        source = inspect.getsource(rewrite.AssertionRewriter.visit_Assert)
    except (ImportError, AttributeError, OSError, TypeError):
        return False
    compact = "".join(source.split())
    loop = compact.find(_PYTEST_LOOP)
    nodes_as_expected = all(tuple(getattr(cls, "_attributes", ())) in ((), _LOCATION)
                            and getattr(cls, "lineno", None) is None for cls in _node_classes())
    return (loop >= 0 and compact.count("traverse_node(") == 1
            and compact.find("ast.copy_location(node,assert_)", loop) > loop
            and callable(getattr(rewrite, "traverse_node", None)) and nodes_as_expected)


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
