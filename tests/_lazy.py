"""Modules imported on first use, for the test modules' module-level names (issue 48: collection
imports no heavy library; a test that uses ``stats.norm`` imports SciPy's stats then, once)."""

from __future__ import annotations

import importlib
import sys
from typing import Any


class _LazyModule:
    """Stands for the module ``name`` until an attribute is asked for, then forwards to it."""

    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(object.__getattribute__(self, "_name")), attr)

    def __repr__(self) -> str:
        return f"<lazy module {object.__getattribute__(self, '_name')}>"


def lazy_module(name: str) -> Any:
    """The module ``name`` if already imported, else a stand-in that imports it on first use."""
    return sys.modules.get(name) or _LazyModule(name)
