"""Units in text. Time offsets: :func:`format_offset` (``+5.00 s``, ``-320 µs``, ``+2.50 h``).

Byte sizes, one convention for every command: SI prefixes are powers of ten
(``K`` = 10³, ``M`` = 10⁶, ``G`` = 10⁹, ``T`` = 10¹²), IEC prefixes powers of two (``Ki`` = 2¹⁰,
``Mi`` = 2²⁰, ``Gi`` = 2³⁰, ``Ti`` = 2⁴⁰); a trailing ``B`` is optional and case is ignored.

    parse_bytes("256MiB") == 268435456;  parse_bytes("1G") == 1e9;  parse_bytes("4096") == 4096

nccl-tests reads its own ``-b``/``-e`` suffixes as powers of two (its ``1G`` is 2³⁰ bytes):
evtsync never passes a suffix to it, only the exact byte count (:func:`nccl_tests_size`), so a
size means the same number of bytes on both sides of the call. Sizes are printed by
:func:`format_bytes` in the same notation (``1Gi``, ``1G``, else the plain count).
"""

from __future__ import annotations

import re

from evtsync.core.errors import InputError

_PREFIX = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
           "ki": 2.0**10, "mi": 2.0**20, "gi": 2.0**30, "ti": 2.0**40}
_PATTERN = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMgGtT][iI]?)?[bB]?\s*")
#: Help text of every size option (``--bytes``, ``--range``, ``--min-bytes`` …).
SIZE_HELP = "bytes; K/M/G/T = 10^3/10^6/10^9/10^12, Ki/Mi/Gi/Ti = 2^10/2^20/2^30/2^40"


def parse_bytes(text: str, what: str = "byte count") -> float:
    """Bytes from ``"268435456"``, ``"256MiB"``, ``"0.27GB"``, ``"1e9"``; ``InputError`` otherwise."""
    match = _PATTERN.fullmatch(str(text))
    if not match:
        raise InputError(f"not a {what}: {text!r} (e.g. 268435456, 256MiB = 2^28, 0.27GB = 2.7e8)")
    value = float(match.group(1)) * _PREFIX[(match.group(2) or "").lower()]
    if not value > 0:
        raise InputError(f"{what} must be > 0 bytes; got {text!r}")
    return value


def format_bytes(n: float) -> str:
    """``2**30`` -> ``"1Gi"``, ``1e9`` -> ``"1G"``, ``1000`` -> ``"1K"``, ``1500`` -> ``"1500"``: the
    largest prefix that divides ``n`` exactly (IEC first), else the plain count."""
    value = float(n)
    if value.is_integer() and value > 0:
        whole = int(value)
        for unit, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10),
                             ("T", 10**12), ("G", 10**9), ("M", 10**6), ("K", 10**3)):
            if whole >= factor and whole % factor == 0:
                return f"{whole // factor}{unit}"
        return str(whole)
    return f"{value:g}"


def nccl_tests_size(text: str) -> str:
    """A size for nccl-tests' ``-b``/``-e``: the exact byte count of ``text`` under evtsync's
    convention (``"1Mi"`` -> ``"1048576"``, ``"1M"`` -> ``"1000000"``), so nccl-tests, whose
    suffixes are powers of two, runs the size the user meant."""
    value = parse_bytes(text, "nccl-tests size")
    if not value.is_integer():
        raise InputError(f"nccl-tests size {text!r} is {value:g} bytes: give a whole number of bytes")
    return str(int(value))
_OFFSET_UNITS = ((3600e9, "h"), (60e9, "min"), (1e9, "s"), (1e6, "ms"), (1e3, "µs"), (1.0, "ns"))


def format_offset(ns: float) -> str:
    """A signed time difference in the largest unit that keeps it >= 1, three significant
    figures: ``format_offset(5e9) == "+5.00 s"`` (a 5 s clock offset was shown as "+0.00 h")."""
    size = abs(ns)
    for scale, unit in _OFFSET_UNITS:
        if size >= scale or unit == "ns":
            value = ns / scale
            digits = max(0, 2 - len(str(int(abs(value)))) + 1)
            return f"{value:+.{digits}f} {unit}"
    raise AssertionError("unreachable")
