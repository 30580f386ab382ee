"""Modules imported on first use, for the test modules' module-level names (issue 48: collection
imports no heavy library; a test that uses ``stats.norm`` imports SciPy's stats then, once)."""

from __future__ import annotations

import importlib
import sys
from typing import Any

#: attributes asked by tools that inspect a test module's names, answered without importing
_NOT_FORWARDED = frozenset({"_mock_name", "_pytestfixturefunction", "_fixture_function_marker"})
#: dunder names a test may really want from the module itself
_FORWARDED_DUNDERS = frozenset({"__version__", "__file__", "__path__", "__all__", "__name__", "__doc__"})


class _LazyModule:
    """Stands for the module ``name`` until an attribute is asked for, then forwards to it."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr: str) -> Any:
        if attr in _NOT_FORWARDED or (attr.startswith("__") and attr.endswith("__") and attr not in _FORWARDED_DUNDERS):
            # pytest's collection asks every module-level name for ``__test__``, ``__bases__``,
            # ``__wrapped__`` and (doctest) ``_mock_name``: answering them would import the module
            raise AttributeError(attr)
        return getattr(importlib.import_module(object.__getattribute__(self, "_name")), attr)

    def __repr__(self) -> str:
        return f"<lazy module {object.__getattribute__(self, '_name')}>"


def lazy_module(name: str) -> Any:
    """The module ``name`` if already imported, else a stand-in that imports it on first use."""
    return sys.modules.get(name) or _LazyModule(name)
