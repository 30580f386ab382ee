"""Readable ``repr`` and notebook HTML for the result objects that hold several tables.

A :class:`TraceSet`, :class:`TaxTables`, :class:`Alignment`, :class:`AttributionResult` or
:class:`BlockSet` printed in a terminal or shown in a notebook lists its tables (rows ×
columns) and its scalar fields, instead of pandas' repr of every table in full.
"""

from __future__ import annotations

import dataclasses
import html
import math
from typing import Any

import numpy as np


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


#: Most significant digits :func:`fmt_ci` uses to tell a value from its interval's ends.
MAX_DIGITS = 6


def fmt(value: Any, digits: int = 3) -> str:
    """A number for reading: ``digits`` significant digits, no exponent notation (values of
    ``digits`` or more integer digits whole (from five digits with thousands separators, ``32,480``); small ones as decimals, ``0.000123``); booleans as
    yes/no; NaN as an en dash, infinities as ∞; other values as text."""
    if value is None:
        return "–"
    if isinstance(value, bool | np.bool_):
        return "yes" if value else "no"
    if isinstance(value, int | np.integer):
        return str(int(value))
    if isinstance(value, np.floating):
        value = float(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "–" if math.isnan(value) else ("∞" if value > 0 else "-∞")
        if value == 0:
            return "0"
        magnitude = math.floor(math.log10(abs(value)))
        decimals = digits - 1 - magnitude
        if decimals <= 0:                       # at least as many digits as asked for: the whole number
            return f"{value:,.0f}" if abs(value) >= 10_000 else f"{value:.0f}"
        if decimals > 12:                       # below 1e-9 and the like: nothing to read as decimals
            return f"{value:.{digits - 1}e}"
        text = f"{value:.{decimals}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    return str(value)


def fmt_ci(mean: Any, lo: Any, hi: Any, digits: int = 3) -> str:
    """``mean [lo, hi]``: a number with its interval, with as many significant digits (``digits``
    up to :data:`MAX_DIGITS`) as it takes for values that differ to read differently (a mean of
    99.96 with an upper end of 99.99 is not "100 [.., 100]")."""
    values = [mean, lo, hi]
    for d in range(digits, MAX_DIGITS + 1):
        texts = [fmt(v, d) for v in values]
        numbers = [float(v) if isinstance(v, int | float | np.integer | np.floating) else None for v in values]
        clash = any(texts[i] == texts[j] and numbers[i] is not None and numbers[j] is not None
                    and math.isfinite(numbers[i])
                    and not math.isclose(numbers[i], numbers[j], rel_tol=1e-9)
                    for i in range(3) for j in range(i + 1, 3))
        if not clash:
            break
    return f"{texts[0]} [{texts[1]}, {texts[2]}]"


def fmt_interval(mean: Any, lo: Any, hi: Any, kind: Any = None, digits: int = 3) -> str:
    """:func:`fmt_ci`, followed by what the interval is where it is not an interval at the report's
    level: ``kind`` "range of 3" (too few points for the level) is shown, a level ("90%") is not;
    an end at ±∞ (no distribution-free bound exists at the level) reads as ∞ already."""
    text = fmt_ci(mean, lo, hi, digits)
    kind = "" if kind is None or (isinstance(kind, float) and math.isnan(kind)) else str(kind)
    return f"{text} ({kind})" if kind and not kind.endswith("%") else text


def fmt_share(value: Any, digits: int = 3) -> str:
    """A proportion as a percentage (0.3125 -> "31.3%"); NaN as an en dash."""
    if value is None or (isinstance(value, float | np.floating) and not math.isfinite(float(value))):
        return "–"
    return f"{fmt(100.0 * float(value), digits)}%"
