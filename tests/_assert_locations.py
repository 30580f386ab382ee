"""Cheaper assertion rewriting for pytest, the same code (issue 48: collection CPU on a fresh clone).

pytest rewrites every assert of a test module into statements that explain a failure, then gives
each generated AST node that has no source location the assert's one: it walks the statements
with a recursive generator (``_pytest.assertion.rewrite.traverse_node``) and calls
``ast.copy_location`` on every node without a ``lineno``, operator and context nodes included
(~800,000 node visits for the suite's ~4,100 asserts). On a fresh clone (no rewritten bytecode
cached) that walk was ~0.8 s of the ~2.5 s pytest spends rewriting the test modules.

:func:`install` wraps ``AssertionRewriter.visit_Assert``: pytest's own method runs with the walk
turned into a no-op, then the same nodes get the same attributes from one flat loop over an explicit
stack that reads each node's fields from its ``__dict__`` and skips the fields that never hold a
node needing a location (:func:`fix_locations`: ``copy_location``'s rule, ``lineno``/``col_offset``
when the assert has them, ``end_*`` whenever the assert has the attribute, only on nodes whose class
has location attributes), ~0.25 s where pytest's walk took ~0.8 s. With this and the walrus
shortcut below the rewriting is pytest's own: the code objects are identical, compared with ``marshal`` for every test module
and conftest by ``tests/project/test_collection_light.py``, which also runs a failing test file
through a real ``python -m pytest`` with and without it and finds the same report (the assert's own
line, pytest's introspection text). It is installed only where pytest's ``visit_Assert`` is the one
this was written against (its location loop found verbatim in its source) and this Python's AST
classes are as :func:`fix_locations` relies on (:func:`applicable`); anywhere else pytest is left as
it is.

:func:`install` also wraps ``AssertionRewriter.run``: for a module whose source has no ``:=`` (a
walrus operator needs that token), pytest's search of every later operand for walrus targets
(``_walrus_targets``, an ``ast.walk`` of each, for each operand of each call, comparison and boolean
operation) can only find none, so it answers the empty set at once (~0.1 s of the suite's
rewriting); any module with ``:=`` anywhere, in a string too, gets pytest's own search.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from collections.abc import Callable, Iterable
from typing import Any

#: pytest's location loop in ``visit_Assert`` (pytest 8.x-9.x), whitespace removed
_PYTEST_LOOP = ("forstmtinself.statements:fornodeintraverse_node(stmt):"
                "ifgetattr(node,\"lineno\",None)isNone:")
_LOCATION = ("lineno", "col_offset", "end_lineno", "end_col_offset")


#: ASDL types of a node's fields that never hold a node to visit: Python values (names, strings,
#: constants, numbers); the node types whose classes have neither fields nor location attributes
#: (contexts, operators) are found by :func:`_leaf_type` from this Python's classes
_SCALAR_TYPES = frozenset({"identifier", "string", "constant", "int"})


class _Unknown(Exception):
    """A node :func:`fix_locations` cannot read its child fields for: the generic walk takes over."""


def fix_locations(statements: Iterable[ast.AST], assert_: ast.AST) -> None:
    """Give every node under ``statements`` that has no ``lineno`` the location of ``assert_``, as
    ``for node in traverse_node(stmt): ast.copy_location(node, assert_)`` does for those nodes.

    One loop over an explicit stack. It reads each node's fields from its instance ``__dict__``
    instead of ``ast.iter_child_nodes``'s generator of ``getattr`` calls, and only the fields whose
    ASDL type (the class's signature, ``Name(identifier id, expr_context ctx)``) can hold a node that
    may need a location or hold one: not names, strings, constants, numbers, contexts or operators,
    whose values ``copy_location`` leaves as they are and which have no children (a third of the
    nodes pytest's walk visits). The nodes that get a location are the same, visited in another
    order, which does not matter (every node without a ``lineno`` gets the same values); a missing
    field, which ``getattr`` would find only as the class's ``None`` default, has no children.
    Writing the location into ``__dict__`` is ``setattr`` for AST nodes; :func:`applicable` checks
    the two facts this relies on: a node class has either all four location attributes or none,
    and none has a class-level ``lineno`` (so a ``lineno`` missing from ``__dict__`` is
    ``getattr(node, "lineno", None) is None``). A node whose class has no readable signature, or a
    value that is not a node where one is expected, sends the assert's statements to
    :func:`fix_locations_generic` (which finishes what this started: the same values)."""
    loc = _location_of(assert_)
    stack = list(statements)
    pop, push, extend = stack.pop, stack.append, stack.extend
    children = _CHILDREN
    try:
        while stack:
            node = pop()
            if node is None:  # a None in Dict.keys or arguments.kw_defaults
                continue
            fields = node.__dict__
            if fields.get("lineno") is None and node._attributes:
                fields.update(loc)
            names = children.get(type(node))
            if names is None:
                names = _child_fields(type(node))
            get = fields.get
            for name in names:
                value = get(name)
                if value is None:
                    continue
                if type(value) is list:
                    extend(value)
                else:
                    push(value)
    except (_Unknown, AttributeError):
        fix_locations_generic(statements, assert_)


def fix_locations_generic(statements: Iterable[ast.AST], assert_: ast.AST) -> None:
    """:func:`fix_locations` for any tree: every node ``ast.iter_child_nodes`` reaches, iteratively."""
    loc = _location_of(assert_)
    stack = list(statements)
    children = ast.iter_child_nodes
    while stack:
        node = stack.pop()
        if getattr(node, "lineno", None) is None:
            attrs = node._attributes
            for attr, value in loc.items():
                if attr in attrs:
                    setattr(node, attr, value)
        stack.extend(children(node))


def _location_of(assert_: ast.AST) -> dict[str, Any]:
    """The attributes ``ast.copy_location(node, assert_)`` sets on a node with all four."""
    return {attr: getattr(assert_, attr, None) for attr in _LOCATION
            if attr in assert_._attributes and hasattr(assert_, attr)
            and (getattr(assert_, attr) is not None or attr.startswith("end_"))}


#: node class -> the names of its fields that may hold nodes to visit (:func:`_child_fields`)
_CHILDREN: dict[type, tuple[str, ...]] = {}


def _leaf_type(asdl_type: str) -> bool:
    """Whether a field of this ASDL type never holds a node :func:`fix_locations` must visit."""
    if asdl_type in _SCALAR_TYPES:
        return True
    base = getattr(ast, asdl_type, None)
    if not (isinstance(base, type) and issubclass(base, ast.AST)):
        return False
    return all(not getattr(cls, "_fields", ()) and not getattr(cls, "_attributes", ()) for cls in _subclasses(base))


def _child_fields(cls: type) -> tuple[str, ...]:
    """The fields of node class ``cls`` that may hold nodes to visit, from its ASDL signature (its
    docstring's first line in CPython, or an ancestor's with the same fields); kept in
    :data:`_CHILDREN`. Raises :class:`_Unknown` where no signature matches ``cls._fields``."""
    fields = tuple(getattr(cls, "_fields", ()))
    for klass in cls.__mro__:
        doc = (klass.__doc__ or "").strip().splitlines()
        if not doc:
            continue
        if not fields and doc[0] == klass.__name__:
            _CHILDREN[cls] = ()
            return ()
        match = re.fullmatch(r"\w+\((.*)\)", doc[0])
        if not match:
            continue
        typed = [part.split(" ") for part in match.group(1).split(", ")]
        if all(len(pair) == 2 for pair in typed) and tuple(name for _, name in typed) == fields:
            names = tuple(name for kind, name in typed if not _leaf_type(kind.rstrip("*?")))
            _CHILDREN[cls] = names
            return names
    raise _Unknown(cls.__name__)


def _no_walk(_node: ast.AST) -> tuple[()]:
    return ()


def _subclasses(base: type = ast.AST) -> list[type]:
    """``base`` and its subclasses, recursively (by default every AST node class of this Python)."""
    classes: list[type] = []
    stack: list[type] = [base]
    while stack:
        cls = stack.pop()
        classes.append(cls)
        stack.extend(cls.__subclasses__())
    return classes


@functools.cache
def _rewrite_text() -> str | None:
    """The text of pytest's assertion-rewrite module (read once), or None where it cannot be read."""
    try:
        from _pytest.assertion import rewrite

        return inspect.getsource(rewrite)  # the module's text: the class's would parse it (~20 ms)
    except (ImportError, AttributeError, OSError, TypeError):
        return None


def _one_traverse_call(text: str) -> bool:
    """Whether ``traverse_node`` is called at exactly one place of the module (``visit_Assert``'s loop)
    besides its own definition and recursion: :func:`install` swaps the module's ``traverse_node``
    while ``visit_Assert`` runs, which another caller would see too."""
    compact = "".join(text.split())
    own = compact.count("deftraverse_node(") + compact.count("yieldfromtraverse_node(")
    return compact.count("deftraverse_node(") == 1 and compact.count("traverse_node(") - own == 1


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
                            and getattr(cls, "lineno", None) is None for cls in _subclasses())
    module_text = _rewrite_text()
    return (loop >= 0 and compact.count("traverse_node(") == 1
            and module_text is not None and _one_traverse_call(module_text)
            and compact.find("ast.copy_location(node,assert_)", loop) > loop
            and callable(getattr(rewrite, "traverse_node", None)) and nodes_as_expected)


def walrus_skip_applicable() -> bool:
    """Whether this pytest looks for walrus targets through the module function
    ``_walrus_targets``, which :func:`install` skips for a module with no walrus operator."""
    source = _rewrite_text()
    if source is None:
        return False
    from _pytest.assertion import rewrite

    return (callable(getattr(rewrite, "_walrus_targets", None)) and "_walrus_targets(" in source
            and callable(getattr(rewrite.AssertionRewriter, "run", None)))


def _no_walrus_targets(_nodes: Iterable[ast.expr]) -> set[str]:
    return set()


def install() -> bool:
    """Wrap pytest's ``visit_Assert`` and ``run`` (once; see the module docstring); False where
    not applicable (pytest is then left as it is)."""
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
    if walrus_skip_applicable():
        original_run: Callable[..., Any] = rewrite.AssertionRewriter.run

        def run(self: Any, mod: ast.Module) -> None:
            # a NamedExpr needs the ":=" token: without those two bytes in the module's source (a
            # ":=" in a string or comment only keeps pytest's search), no expression of the module
            # has a walrus target, and pytest's search through every later operand finds none
            source = getattr(self, "source", None)
            if not isinstance(source, bytes) or b":=" in source:
                original_run(self, mod)
                return
            search = rewrite._walrus_targets
            rewrite._walrus_targets = _no_walrus_targets  # type: ignore[assignment]
            try:
                original_run(self, mod)
            finally:
                rewrite._walrus_targets = search

        run.__wrapped__ = original_run  # type: ignore[attr-defined]
        rewrite.AssertionRewriter.run = run  # type: ignore[method-assign]
    return True
