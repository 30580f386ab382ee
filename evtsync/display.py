"""Readable ``repr`` and notebook HTML for the result objects that hold several tables.

A :class:`TraceSet`, :class:`TaxTables`, :class:`Alignment`, :class:`AttributionResult` or
:class:`BlockSet` printed in a terminal or shown in a notebook lists its tables (rows ×
columns) and its scalar fields, instead of pandas' repr of every table in full.
"""

from __future__ import annotations

import dataclasses
import html
from typing import Any


def _fields(obj: Any) -> list[tuple[str, Any]]:
    return [(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)]


def _describe(value: Any) -> str:
    shape = getattr(value, "shape", None)
    if shape is not None and len(shape) == 2:
        return f"{shape[0]:,} rows × {shape[1]} columns"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, set | frozenset | tuple | list):
        items = sorted(value, key=str) if isinstance(value, set | frozenset) else list(value)
        text = ", ".join(map(str, items[:8]))
        return f"{len(items)} item(s)" + (f": {text}" if items else "") + ("…" if len(items) > 8 else "")
    return str(value)


class TablesDisplay:
    """Mixin for dataclasses of tables: a short ``repr`` and a notebook table (``_repr_html_``).

    The dataclass must be declared with ``repr=False`` so that this ``__repr__`` is used.
    """

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={_describe(value)}" for name, value in _fields(self))
        return f"<{type(self).__name__} {inner}>"

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td><code>{html.escape(name)}</code></td><td>{html.escape(_describe(value))}</td></tr>"
                       for name, value in _fields(self))
        doc = (type(self).__doc__ or "").strip().splitlines()[0] if type(self).__doc__ else ""
        return (f"<div><b>{html.escape(type(self).__name__)}</b> — {html.escape(doc)}"
                f"<table>{rows}</table></div>")
