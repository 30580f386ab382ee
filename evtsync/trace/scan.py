# ruff: noqa: SIM108, SIM109, SIM114 - explicit comparisons, the plainest code for numba to compile
"""Compiled columnar scanner of one block of Kineto trace events (issues 16 and 21).

:func:`scan_block` reads the bytes ``[ev, ev, ...]`` that the decoder (:mod:`evtsync.trace.decode`)
cuts from a trace and writes, per event, its phase, category and name (as ids of the block's
unique strings), pid, tid, ts and dur, and the ``args`` keys evtsync reads into preallocated
numpy arrays, without one Python object per event. Every other key is skipped (its value is
still checked to be valid JSON).

The scanner implements a narrow, strict grammar and **declines** (returns a non-zero status)
for anything outside it: invalid JSON, a non-object entry, an unknown or missing phase, a
duplicate or escaped key, raw control characters, invalid UTF-8, a bad escape or a lone
surrogate in any string, too deep nesting, and (for complete ``"X"`` events) any read field of
a type the typed msgspec decoding would reject or treat loosely. The caller then decodes the
block with msgspec as before, so what a file decodes to never depends on the scanner.

Numbers: integers are exact int64 (a larger one makes a read field declined); a float whose
decimal mantissa is an exact integer below 2**53 and whose decimal exponent is within ±22 is
computed with one IEEE multiplication or division by an exact power of ten (Clinger's fast
path: correctly rounded, so bit-identical to any correct parser); other floats are recorded
by their span for the caller to convert with Python's ``float``.

Strings are interned per block in an open-addressing hash table over their raw bytes (with a
generation stamp, so the table is never cleared): the caller decodes each unique span once.

:func:`scan_template_lines` (issue 48) reads NCCL Inspector log lines that all follow the
template of one line (its keys in their order, its value types: built by
:func:`evtsync.trace.readers.inspector._line_template`), comparing the literal parts byte for
byte and parsing only the values read; it stops at any other line, which the caller decodes
otherwise before it calls again after it. It is compiled into the same module as :func:`scan_block`.

Two ways to run it, the same code (only NumPy and numba are used here):

- **ahead of time** (the default): :func:`build_ahead_of_time` compiles :func:`scan_block` with
  numba's AOT compiler (``numba.pycc``) into a plain extension module, once per version of this
  file and of NumPy, in ``<cache>/scanner/`` (:func:`evtsync.trace.cache_dir.default_cache_dir`);
  :func:`load_ahead_of_time` imports it in ~1 ms **without importing numba** (numba's import
  and its cached JIT code cost ~1 s of CPU per process, docs/performance/reading.md), only
  when it, its folder and the folders above could not have been written by another user
  (:func:`evtsync.core.trust.unsafe_reason`; else the just-in-time scanner, with a warning
  saying what to do: docs/security.md);
- **just in time**: :func:`jit_scan_block` imports numba and compiles the functions here with
  ``cache=True`` (reused by later processes) and ``nogil=True`` (threads scan blocks in
  parallel): the fallback where the module cannot be built (no C compiler).

The functions marked :func:`_compiled` stay plain Python until one of these compiles them;
importing this module does not import numba.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

# -- layout of the per-event int64 matrix ---------------------------------------------------
COL_PHASE, COL_CAT, COL_NAME, COL_PID, COL_TID, COL_TS, COL_DUR, COL_FLAGS = range(8)
#: first column of the ``args`` keys (in the order of the key table given to the scanner)
COL_ARGS = 8
#: name id of an event without ``name`` (its name is the empty string, as msgspec's default)
NAME_ABSENT = -2

# -- per-event flags ------------------------------------------------------------------------
TS_FLOAT, DUR_FLOAT, TS_NUMBER, DUR_NUMBER, PID_LOOSE, TID_LOOSE = 1, 2, 4, 8, 16, 32

# -- status codes ---------------------------------------------------------------------------
OK = 0
FULL = 1  # the event or string capacity was too small: scan again with larger arrays
DECLINED: dict[int, str] = {
    2: "invalid JSON",
    3: "an entry that is not an object",
    4: "an event without a known phase",
    5: "a duplicate key",
    6: "an escaped key",
    7: "a field of a complete event of a type outside the fast grammar",
    8: "a category that is not a string",
    9: "a string with control characters, invalid UTF-8, a bad escape or a lone surrogate",
    10: "nesting deeper than the fast path follows",
    11: "text after the array",
}
_INVALID, _NOT_OBJECT, _PHASE, _DUPLICATE, _ESCAPED_KEY, _TYPE, _CATEGORY, _STRING, _DEPTH, _TRAILING = range(2, 12)

#: exact powers of ten (10**22 is the largest exactly representable)
POW10 = np.array([float(10**k) for k in range(23)], dtype=np.float64)
_MAX_EXACT = 1 << 53
_MAX_DEPTH = 64

#: top-level keys the scanner reads, in this order (codes 0..7)
TOP_KEYS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args")
_K_PH, _K_CAT, _K_NAME, _K_PID, _K_TID, _K_TS, _K_DUR, _K_ARGS = range(8)

_QUOTE, _BACKSLASH, _COMMA, _COLON = 34, 92, 44, 58
_LBRACE, _RBRACE, _LBRACKET, _RBRACKET = 123, 125, 91, 93
_MINUS, _PLUS, _DOT, _ZERO, _NINE = 45, 43, 46, 48, 57

#: A call between compiled functions costs ~15 ns here (numba's status and tuple protocol),
#: more than most tokens take: the common tokens (keys, ASCII strings, plain integers) are
#: therefore read inline in :func:`scan_block` and the helpers serve the rarer ones
#: (numba's ``inline="always"`` made the compilation take minutes and the scanner slower).
#: names of the functions numba compiles (callees first), filled by :func:`_compiled`
_COMPILED: list[str] = []


def _compiled[F: Callable[..., Any]](func: F) -> F:
    """Mark a function for numba: it is compiled (and its module global replaced by the
    compiled dispatcher) by :func:`jit_scan_block` or :func:`build_ahead_of_time`."""
    _COMPILED.append(func.__name__)
    return func


def key_table(keys: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Keys as (concatenated UTF-8 bytes, offsets) arrays for the scanner."""
    encoded = [k.encode("utf-8") for k in keys]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in encoded])
    return np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), offsets


@_compiled
def _ws(buf, i, n):
    while i < n:
        c = buf[i]
        if c != 32 and c != 10 and c != 13 and c != 9:
            return i
        i += 1
    return i


@_compiled
def _hex(c):
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


@_compiled
def _u4(buf, i, n):
    """Value of the 4 hex digits at ``i`` or -1."""
    if i + 4 > n:
        return -1
    v = 0
    for k in range(4):
        h = _hex(buf[i + k])
        if h < 0:
            return -1
        v = v * 16 + h
    return v


@_compiled
def _string(buf, i, n):
    """The string whose opening quote is at ``i``: (index past its closing quote, has an
    escape); (-1, _) when it is not a strict, valid JSON string of valid UTF-8."""
    i += 1
    escaped = False
    while i < n:
        c = buf[i]
        if c == _QUOTE:
            return i + 1, escaped
        if c == _BACKSLASH:
            escaped = True
            if i + 1 >= n:
                return -1, escaped
            e = buf[i + 1]
            if e == 117:  # \uXXXX
                v = _u4(buf, i + 2, n)
                if v < 0 or 0xDC00 <= v <= 0xDFFF:
                    return -1, escaped
                if 0xD800 <= v <= 0xDBFF:  # must be followed by a low surrogate
                    if i + 7 >= n or buf[i + 6] != _BACKSLASH or buf[i + 7] != 117:
                        return -1, escaped
                    w = _u4(buf, i + 8, n)
                    if w < 0xDC00 or w > 0xDFFF:
                        return -1, escaped
                    i += 12
                else:
                    i += 6
                continue
            if e == _QUOTE or e == _BACKSLASH or e == 47 or e == 98 or e == 102 or e == 110 or e == 114 or e == 116:
                i += 2
                continue
            return -1, escaped
        if c < 32:
            return -1, escaped
        if c < 128:
            i += 1
            continue
        # UTF-8: well-formed sequences only (no overlongs, surrogates or code points > U+10FFFF)
        if 0xC2 <= c <= 0xDF:
            if i + 1 >= n or not (0x80 <= buf[i + 1] <= 0xBF):
                return -1, escaped
            i += 2
        elif 0xE0 <= c <= 0xEF:
            if i + 2 >= n:
                return -1, escaped
            c1 = buf[i + 1]
            lo = 0xA0 if c == 0xE0 else 0x80
            hi = 0x9F if c == 0xED else 0xBF
            if not (lo <= c1 <= hi) or not (0x80 <= buf[i + 2] <= 0xBF):
                return -1, escaped
            i += 3
        elif 0xF0 <= c <= 0xF4:
            if i + 3 >= n:
                return -1, escaped
            c1 = buf[i + 1]
            lo = 0x90 if c == 0xF0 else 0x80
            hi = 0x8F if c == 0xF4 else 0xBF
            if not (lo <= c1 <= hi) or not (0x80 <= buf[i + 2] <= 0xBF) or not (0x80 <= buf[i + 3] <= 0xBF):
                return -1, escaped
            i += 4
        else:
            return -1, escaped
    return -1, escaped


@_compiled
def _number(buf, i, n, pow10):
    """The JSON number at ``i``: (end, kind, int value, float value). kind: 0 an int64,
    1 a float computed exactly, 2 a float to convert by its text, 3 an integer beyond
    int64, -1 not a strict JSON number."""
    neg = False
    if buf[i] == _MINUS:
        neg = True
        i += 1
        if i >= n:
            return i, -1, 0, 0.0
    c = buf[i]
    acc = 0  # the integer, accumulated negatively (int64 holds -2**63)
    big = False
    mant = 0  # decimal mantissa of a float while it is exact (< 2**53)
    inexact = False
    if c == _ZERO:
        i += 1
        if i < n and _ZERO <= buf[i] <= _NINE:
            return i, -1, 0, 0.0  # leading zero
    elif _ZERO < c <= _NINE:
        while i < n:
            c = buf[i]
            if c < _ZERO or c > _NINE:
                break
            d = c - _ZERO
            if acc < -922337203685477580 or (acc == -922337203685477580 and d > (8 if neg else 7)):
                big = True
            else:
                acc = acc * 10 - d
            if not inexact:
                if mant > (_MAX_EXACT - d) // 10:
                    inexact = True
                else:
                    mant = mant * 10 + d
            i += 1
    else:
        return i, -1, 0, 0.0
    is_float = False
    exp10 = 0
    if i < n and buf[i] == _DOT:
        is_float = True
        i += 1
        digits = 0
        while i < n:
            c = buf[i]
            if c < _ZERO or c > _NINE:
                break
            d = c - _ZERO
            if not inexact:
                if mant > (_MAX_EXACT - d) // 10:
                    inexact = True
                else:
                    mant = mant * 10 + d
                    exp10 -= 1
            digits += 1
            i += 1
        if digits == 0:
            return i, -1, 0, 0.0
    if i < n and (buf[i] == 101 or buf[i] == 69):  # e E
        is_float = True
        i += 1
        eneg = False
        if i < n and (buf[i] == _PLUS or buf[i] == _MINUS):
            eneg = buf[i] == _MINUS
            i += 1
        digits = 0
        e = 0
        while i < n:
            c = buf[i]
            if c < _ZERO or c > _NINE:
                break
            if e < 100000:
                e = e * 10 + (c - _ZERO)
            digits += 1
            i += 1
        if digits == 0:
            return i, -1, 0, 0.0
        exp10 += -e if eneg else e
    if not is_float:
        if big:
            return i, 3, 0, 0.0
        return i, 0, (acc if neg else -acc), 0.0
    if inexact or exp10 > 22 or exp10 < -22:
        return i, 2, 0, 0.0
    f = float(mant)
    if exp10 >= 0:
        f = f * pow10[exp10]
    else:
        f = f / pow10[-exp10]
    return i, 1, 0, (-f if neg else f)


@_compiled
def _literal(buf, i, n):
    """End of the literal true/false/null at ``i`` and its kind (0 null, 1 bool) or (-1, -1)."""
    c = buf[i]
    if c == 110 and i + 4 <= n and buf[i + 1] == 117 and buf[i + 2] == 108 and buf[i + 3] == 108:
        return i + 4, 0
    if c == 116 and i + 4 <= n and buf[i + 1] == 114 and buf[i + 2] == 117 and buf[i + 3] == 101:
        return i + 4, 1
    if (c == 102 and i + 5 <= n and buf[i + 1] == 97 and buf[i + 2] == 108 and buf[i + 3] == 115
            and buf[i + 4] == 101):
        return i + 5, 1
    return -1, -1


@_compiled
def _skip(buf, i, n, stack):
    """Index past the JSON value at ``i`` (whitespace before it skipped), or -status. Strings,
    numbers and literals are read inline (no call per token), strictly: a number must be
    well-formed and followed by a delimiter, a string valid (see :func:`_string`)."""
    depth = 0
    while True:
        while i < n and _WS[buf[i]] != 0:
            i += 1
        if i >= n:
            return -_INVALID
        c = buf[i]
        if c == _LBRACE or c == _LBRACKET:
            i += 1
            while i < n and _WS[buf[i]] != 0:
                i += 1
            if i >= n:
                return -_INVALID
            if (c == _LBRACE and buf[i] == _RBRACE) or (c == _LBRACKET and buf[i] == _RBRACKET):
                i += 1
            else:
                if depth >= _MAX_DEPTH:
                    return -_DEPTH
                stack[depth] = c
                depth += 1
                if c == _LBRACE:  # a key, then its value
                    if buf[i] != _QUOTE:
                        return -_INVALID
                    j = i + 1
                    while j < n and _SPECIAL[buf[j]] == 0:
                        j += 1
                    if j < n and buf[j] == _QUOTE:
                        i = j + 1
                    else:
                        i, _esc = _string(buf, i, n)
                        if i < 0:
                            return -_STRING
                    while i < n and _WS[buf[i]] != 0:
                        i += 1
                    if i >= n or buf[i] != _COLON:
                        return -_INVALID
                    i += 1
                continue
        elif c == _QUOTE:
            j = i + 1
            while j < n and _SPECIAL[buf[j]] == 0:
                j += 1
            if j < n and buf[j] == _QUOTE:
                i = j + 1
            else:
                i, _esc = _string(buf, i, n)
                if i < 0:
                    return -_STRING
        elif c == _MINUS or _ZERO <= c <= _NINE:
            j = i + 1 if c == _MINUS else i
            if j >= n:
                return -_INVALID
            d = buf[j]
            if d == _ZERO:
                j += 1
            elif _ZERO < d <= _NINE:
                while j < n and _ZERO <= buf[j] <= _NINE:
                    j += 1
            else:
                return -_INVALID
            if j < n and buf[j] == _DOT:
                j += 1
                k = j
                while j < n and _ZERO <= buf[j] <= _NINE:
                    j += 1
                if j == k:
                    return -_INVALID
            if j < n and (buf[j] == 101 or buf[j] == 69):
                j += 1
                if j < n and (buf[j] == _PLUS or buf[j] == _MINUS):
                    j += 1
                k = j
                while j < n and _ZERO <= buf[j] <= _NINE:
                    j += 1
                if j == k:
                    return -_INVALID
            i = j  # a digit after a leading zero fails the delimiter check below
        elif c == 110 and i + 4 <= n and buf[i + 1] == 117 and buf[i + 2] == 108 and buf[i + 3] == 108:
            i += 4
        elif c == 116 and i + 4 <= n and buf[i + 1] == 114 and buf[i + 2] == 117 and buf[i + 3] == 101:
            i += 4
        elif (c == 102 and i + 5 <= n and buf[i + 1] == 97 and buf[i + 2] == 108 and buf[i + 3] == 115
              and buf[i + 4] == 101):
            i += 5
        else:
            return -_INVALID
        # a value is complete: close containers or go on to the next element
        while True:
            if depth == 0:
                return i
            while i < n and _WS[buf[i]] != 0:
                i += 1
            if i >= n:
                return -_INVALID
            c = buf[i]
            top = stack[depth - 1]
            if c == _COMMA:
                i += 1
                while i < n and _WS[buf[i]] != 0:
                    i += 1
                if top == _LBRACE:
                    if i >= n or buf[i] != _QUOTE:
                        return -_INVALID
                    j = i + 1
                    while j < n and _SPECIAL[buf[j]] == 0:
                        j += 1
                    if j < n and buf[j] == _QUOTE:
                        i = j + 1
                    else:
                        i, _esc = _string(buf, i, n)
                        if i < 0:
                            return -_STRING
                    while i < n and _WS[buf[i]] != 0:
                        i += 1
                    if i >= n or buf[i] != _COLON:
                        return -_INVALID
                    i += 1
                break
            if (c == _RBRACE and top == _LBRACE) or (c == _RBRACKET and top == _LBRACKET):
                depth -= 1
                i += 1
                continue
            return -_INVALID


@_compiled
def _match(buf, start, end, kbytes, koffs):
    """Index of the key ``buf[start:end]`` in the key table, or -1."""
    length = end - start
    for k in range(len(koffs) - 1):
        ks = koffs[k]
        if koffs[k + 1] - ks != length:
            continue
        same = True
        for j in range(length):
            if buf[start + j] != kbytes[ks + j]:
                same = False
                break
        if same:
            return k
    return -1


#: bytes that end the fast reading of a string: the quote, a backslash, control characters
#: and every non-ASCII byte (those go through :func:`_string`, which checks them)
_SPECIAL = np.zeros(256, dtype=np.uint8)
_SPECIAL[:32] = 1
_SPECIAL[_QUOTE] = 1
_SPECIAL[_BACKSLASH] = 1
_SPECIAL[128:] = 1
_HASH_SIZE = 256
_WS = np.zeros(256, dtype=np.uint8)
_WS[[32, 10, 13, 9]] = 1
# value kinds of the generic value reader
_V_STR, _V_INT, _V_FLOAT, _V_SLOW, _V_BIG, _V_NULL, _V_OTHER = range(7)


def _key_slot(key: bytes, mult: int) -> int:
    return (len(key) * mult + key[0] * 7 + key[-1]) & (_HASH_SIZE - 1)


def arg_key_hash(keys: tuple[str, ...]) -> tuple[np.ndarray, int]:
    """A collision-free slot table of the ``args`` keys (slot -> key index or -1) and its
    multiplier, for the scanner's one-lookup key matching."""
    encoded = [k.encode("utf-8") for k in keys]
    for mult in range(31, 10_000):
        slots = [_key_slot(k, mult) for k in encoded]
        if len(set(slots)) == len(slots):
            table = np.full(_HASH_SIZE, -1, dtype=np.int64)
            table[slots] = np.arange(len(slots))
            return table, mult
    raise ValueError("no collision-free slot table for these keys")  # pragma: no cover


@_compiled
def scan_block(buf, n, phase_of, arg_bytes, arg_offs, arg_is_str, arg_hash, arg_mult, pow10,
               ints, floats, slow, str_span, str_escaped, hash_gen, hash_id, gen):
    """Scan the JSON array of events in ``buf[:n]`` into the given arrays.

    ``phase_of[c]``: phase code of the one-character phase ``c`` (-1 unknown). The ``args``
    keys read: ``arg_bytes``/``arg_offs`` (:func:`key_table`), ``arg_is_str`` (a string,
    else an int64 argument), ``arg_hash``/``arg_mult`` (:func:`arg_key_hash`). Per event
    ``e``: ``ints[:, e]`` holds the columns ``COL_*`` (rows of ``ints``) (arguments from ``COL_ARGS`` in key order;
    int arguments -1 when absent, string arguments a string id or -1), ``floats[e]`` the
    float ts and dur. ``slow[k]`` = (event, 0 ts / 1 dur, start, end) of floats to convert
    by their text; ``str_span[s]`` the span of unique string ``s``, ``str_escaped[s]``
    whether it holds a backslash escape. Returns (status, events, strings, slow floats).
    """
    stack = np.empty(_MAX_DEPTH, dtype=np.uint8)
    n_args = len(arg_offs) - 1
    cap = ints.shape[1]
    n_ev = 0
    n_str = 0
    n_slow = 0
    i = _ws(buf, 0, n)
    if i >= n or buf[i] != _LBRACKET:
        return _INVALID, 0, 0, 0
    i = _ws(buf, i + 1, n)
    if i < n and buf[i] == _RBRACKET:
        i = _ws(buf, i + 1, n)
        return (OK if i == n else _TRAILING), 0, 0, 0
    while True:  # one event per iteration
        if i >= n:
            return _INVALID, n_ev, n_str, n_slow
        if buf[i] != _LBRACE:
            return _NOT_OBJECT, n_ev, n_str, n_slow
        if n_ev >= cap:
            return FULL, n_ev, n_str, n_slow
        e = n_ev
        ints[COL_PHASE, e] = -1
        ints[COL_CAT, e] = -1
        ints[COL_NAME, e] = NAME_ABSENT
        ints[COL_PID, e] = -1
        ints[COL_TID, e] = -1
        ints[COL_TS, e] = 0
        ints[COL_DUR, e] = 0
        for a in range(n_args):
            ints[COL_ARGS + a, e] = -1
        flags = 0
        seen = 0
        arg_seen = 0
        bad = False  # a field a complete event would be held to has a type outside the grammar
        level = 0  # 0: the event's own keys, 1: the keys of its args
        i += 1
        while i < n and _WS[buf[i]] != 0:
            i += 1
        if i < n and buf[i] == _RBRACE:
            return _PHASE, n_ev, n_str, n_slow  # {} has no phase
        while True:  # one "key": value per iteration
            # -- the key --
            if i >= n or buf[i] != _QUOTE:
                return _INVALID, n_ev, n_str, n_slow
            ks = i + 1
            j = ks
            while j < n and _SPECIAL[buf[j]] == 0:
                j += 1
            if j >= n:
                return _INVALID, n_ev, n_str, n_slow
            if buf[j] == _QUOTE:
                ke = j
                i = j + 1
                length = ke - ks
                key = -1
                if level == 0:
                    if length == 2:
                        b0, b1 = buf[ks], buf[ks + 1]
                        if b0 == 112 and b1 == 104:  # ph
                            key = _K_PH
                        elif b0 == 116 and b1 == 115:  # ts
                            key = _K_TS
                    elif length == 3:
                        b0, b1, b2 = buf[ks], buf[ks + 1], buf[ks + 2]
                        if b0 == 99 and b1 == 97 and b2 == 116:  # cat
                            key = _K_CAT
                        elif b0 == 112 and b1 == 105 and b2 == 100:  # pid
                            key = _K_PID
                        elif b0 == 116 and b1 == 105 and b2 == 100:  # tid
                            key = _K_TID
                        elif b0 == 100 and b1 == 117 and b2 == 114:  # dur
                            key = _K_DUR
                    elif length == 4:
                        b0, b1, b2, b3 = buf[ks], buf[ks + 1], buf[ks + 2], buf[ks + 3]
                        if b0 == 110 and b1 == 97 and b2 == 109 and b3 == 101:  # name
                            key = _K_NAME
                        elif b0 == 97 and b1 == 114 and b2 == 103 and b3 == 115:  # args
                            key = _K_ARGS
                    if key >= 0:
                        if seen & (1 << key):
                            return _DUPLICATE, n_ev, n_str, n_slow
                        seen |= 1 << key
                elif length > 0:
                    cand = arg_hash[(length * arg_mult + buf[ks] * 7 + buf[ke - 1]) & (_HASH_SIZE - 1)]
                    if cand >= 0 and arg_offs[cand + 1] - arg_offs[cand] == length:
                        k0 = arg_offs[cand]
                        same = True
                        for m in range(length):
                            if buf[ks + m] != arg_bytes[k0 + m]:
                                same = False
                                break
                        if same:
                            key = cand
                            if arg_seen & (1 << cand):
                                return _DUPLICATE, n_ev, n_str, n_slow
                            arg_seen |= 1 << cand
            else:  # an escape, control character or non-ASCII byte in the key
                i, esc = _string(buf, i, n)
                if i < 0:
                    return _STRING, n_ev, n_str, n_slow
                if esc:
                    return _ESCAPED_KEY, n_ev, n_str, n_slow
                key = -1  # every key read is ASCII
            while i < n and _WS[buf[i]] != 0:
                i += 1
            if i >= n or buf[i] != _COLON:
                return _INVALID, n_ev, n_str, n_slow
            i += 1
            while i < n and _WS[buf[i]] != 0:
                i += 1
            if i >= n:
                return _INVALID, n_ev, n_str, n_slow
            c = buf[i]
            # -- args: the keys of the object are read next --
            if level == 0 and key == _K_ARGS and c == _LBRACE:
                i += 1
                while i < n and _WS[buf[i]] != 0:
                    i += 1
                if i < n and buf[i] == _RBRACE:
                    i += 1
                else:
                    level = 1
                    continue
            else:
                # -- the value, of any type --
                vstart = i
                vend = i
                esc = False
                ival = 0
                fval = 0.0
                if c == _QUOTE:
                    j = i + 1
                    while j < n and _SPECIAL[buf[j]] == 0:
                        j += 1
                    if j < n and buf[j] == _QUOTE:
                        i = j + 1
                    else:
                        i, esc = _string(buf, i, n)
                        if i < 0:
                            return _STRING, n_ev, n_str, n_slow
                    vstart += 1
                    vend = i - 1
                    vkind = _V_STR
                elif _ZERO <= c <= _NINE or c == _MINUS:
                    # inline: integers of up to 18 digits, and decimals without exponent
                    # whose digits make an exact mantissa (Clinger's fast path); the rest by
                    # _number
                    neg = c == _MINUS
                    j = i + 1 if neg else i
                    first = j
                    v = 0
                    while j < n and j - first < 19:
                        d = buf[j]
                        if d < _ZERO or d > _NINE:
                            break
                        v = v * 10 + (d - _ZERO)
                        j += 1
                    digits = j - first
                    plain = 0 < digits <= 18 and not (buf[first] == _ZERO and digits > 1)
                    fraction = 0
                    if plain and j < n and buf[j] == _DOT:
                        j += 1
                        while j < n and j - first < 20:
                            d = buf[j]
                            if d < _ZERO or d > _NINE:
                                break
                            v = v * 10 + (d - _ZERO)
                            j += 1
                            fraction += 1
                        plain = fraction > 0 and digits + fraction <= 18 and v <= _MAX_EXACT
                    if plain and j < n:
                        d = buf[j]
                        plain = d != 101 and d != 69 and not (_ZERO <= d <= _NINE)
                    if plain:
                        if fraction:
                            vkind = _V_FLOAT
                            fval = float(v) / pow10[fraction]
                            if neg:
                                fval = -fval
                        else:
                            vkind = _V_INT
                            ival = -v if neg else v
                        i = j
                    else:
                        i, nkind, ival, fval = _number(buf, i, n, pow10)
                        if nkind < 0:
                            return _INVALID, n_ev, n_str, n_slow
                        vkind = _V_INT if nkind == 0 else (_V_FLOAT if nkind == 1 else (
                            _V_SLOW if nkind == 2 else _V_BIG))
                    vend = i
                elif c == _LBRACE or c == _LBRACKET:
                    i = _skip(buf, i, n, stack)
                    if i < 0:
                        return -i, n_ev, n_str, n_slow
                    vkind = _V_OTHER
                else:
                    i, lkind = _literal(buf, i, n)
                    if i < 0:
                        return _INVALID, n_ev, n_str, n_slow
                    vkind = _V_NULL if lkind == 0 else _V_OTHER
                # -- what the value is to the field read --
                intern_col = -1  # the column that gets the id of the value's text
                if key < 0:
                    pass
                elif level == 1:
                    if arg_is_str[key]:
                        if vkind == _V_STR or (vkind == _V_INT and not (ival == 0 and buf[vstart] == _MINUS)):
                            # a string, or an integer whose digits are the string the msgspec
                            # path makes of it ("-0" is written "0")
                            intern_col = COL_ARGS + key
                        elif vkind != _V_NULL:  # null reads as absent
                            bad = True
                    elif vkind == _V_INT:
                        ints[COL_ARGS + key, e] = ival
                    elif vkind != _V_NULL:
                        bad = True
                elif key == _K_PH:
                    if vkind != _V_STR or esc or vend - vstart != 1 or phase_of[buf[vstart]] < 0:
                        return _PHASE, n_ev, n_str, n_slow
                    ints[COL_PHASE, e] = phase_of[buf[vstart]]
                elif key == _K_CAT or key == _K_NAME:
                    if vkind == _V_STR:
                        intern_col = COL_CAT if key == _K_CAT else COL_NAME
                    elif key == _K_CAT:
                        if vkind != _V_NULL:  # null is no category, anything else is invalid
                            return _CATEGORY, n_ev, n_str, n_slow
                    else:
                        bad = True  # a name that is not a string
                elif key == _K_PID or key == _K_TID:
                    if vkind == _V_INT:
                        ints[COL_PID if key == _K_PID else COL_TID, e] = ival
                    elif vkind == _V_STR or vkind == _V_NULL:  # read loosely by the msgspec path
                        flags |= PID_LOOSE if key == _K_PID else TID_LOOSE
                    else:
                        bad = True
                elif key == _K_TS or key == _K_DUR:
                    field = 0 if key == _K_TS else 1
                    if vkind == _V_INT:
                        ints[COL_TS + field, e] = ival
                        flags |= TS_NUMBER if field == 0 else DUR_NUMBER
                    elif vkind == _V_FLOAT or vkind == _V_SLOW:
                        floats[e, field] = fval
                        flags |= (TS_NUMBER | TS_FLOAT) if field == 0 else (DUR_NUMBER | DUR_FLOAT)
                        if vkind == _V_SLOW:
                            slow[n_slow, 0] = e
                            slow[n_slow, 1] = field
                            slow[n_slow, 2] = vstart
                            slow[n_slow, 3] = vend
                            n_slow += 1
                    elif vkind != _V_NULL:  # null is a missing time
                        bad = True
                else:  # args that are not an object (null included)
                    bad = True
                if intern_col >= 0:  # the block's id of this text (FNV-1a, open addressing)
                    # FNV-1a over the length and at most the first and last 16 bytes (long
                    # kernel names share neither often; strings of one slot chain are
                    # compared in full)
                    h = np.uint64(14695981039346656037) ^ np.uint64(vend - vstart)
                    mid = vstart + 16 if vend - vstart > 32 else vend
                    for m in range(vstart, mid):
                        h = (h ^ np.uint64(buf[m])) * np.uint64(1099511628211)
                    for m in range(max(mid, vend - 16), vend):
                        h = (h ^ np.uint64(buf[m])) * np.uint64(1099511628211)
                    mask = len(hash_gen) - 1
                    slot = np.int64(h & np.uint64(mask))
                    length = vend - vstart
                    while True:
                        if hash_gen[slot] != gen:  # a free slot: a new string
                            if n_str >= len(str_span):
                                return FULL, n_ev, n_str, n_slow
                            hash_gen[slot] = gen
                            hash_id[slot] = n_str
                            str_span[n_str, 0] = vstart
                            str_span[n_str, 1] = vend
                            str_escaped[n_str] = esc
                            sid = n_str
                            n_str += 1
                            break
                        sid = hash_id[slot]
                        s0 = str_span[sid, 0]
                        if str_span[sid, 1] - s0 == length:
                            same = True
                            for m in range(length):
                                if buf[s0 + m] != buf[vstart + m]:
                                    same = False
                                    break
                            if same:
                                break
                        slot = (slot + 1) & mask
                    ints[intern_col, e] = sid
            # -- after the value: the next key, or the end of args / of the event --
            done = False
            while True:
                while i < n and _WS[buf[i]] != 0:
                    i += 1
                if i >= n:
                    return _INVALID, n_ev, n_str, n_slow
                c = buf[i]
                if c == _COMMA:
                    i += 1
                    while i < n and _WS[buf[i]] != 0:
                        i += 1
                    break
                if c == _RBRACE:
                    i += 1
                    if level == 1:
                        level = 0
                        continue
                    done = True
                    break
                return _INVALID, n_ev, n_str, n_slow
            if done:
                break
        if ints[COL_PHASE, e] < 0:
            return _PHASE, n_ev, n_str, n_slow
        if bad and ints[COL_PHASE, e] == 0:
            return _TYPE, n_ev, n_str, n_slow
        ints[COL_FLAGS, e] = flags
        n_ev += 1
        while i < n and _WS[buf[i]] != 0:
            i += 1
        if i >= n:
            return _INVALID, n_ev, n_str, n_slow
        if buf[i] == _COMMA:
            i += 1
            while i < n and _WS[buf[i]] != 0:
                i += 1
            continue
        if buf[i] == _RBRACKET:
            i = _ws(buf, i + 1, n)
            return (OK if i == n else _TRAILING), n_ev, n_str, n_slow
        return _INVALID, n_ev, n_str, n_slow


# -- NCCL Inspector lines against a template (issue 48) --------------------------------------
#: Kinds of the value slots of a line template (:func:`scan_template_lines`): a string or a JSON
#: number skipped (checked), a string read (its id among the block's unique strings), an integer
#: read (int64), a number read as a float.
SLOT_SKIP_STR, SLOT_SKIP_NUM, SLOT_STR, SLOT_INT, SLOT_FLOAT = range(5)
#: Status of :func:`scan_template_lines` besides :data:`OK` and :data:`FULL`: a line that is not
#: the template (its position returned), the caller's fallback decodes the block.
TEMPLATE_MISMATCH = 12


@_compiled
def scan_template_lines(buf, first, n, lit, lit_off, kind, col, ints, floats, ends, spans, table, n_str, pow10):
    """Read the lines of ``buf[first:n]`` (newline-separated, no blank line) that all follow one
    template: literal ``k`` (``lit[lit_off[k]:lit_off[k + 1]]``) then value slot ``k``
    (``kind[k]``, into column ``col[k]`` of line ``l``'s row of ``ints``, or ``floats[l]``), ...,
    then the last literal; it stops at the first line that does not (the caller decodes that
    line otherwise and calls again after it).

    Strict: a string slot holds printable ASCII without escapes (anything else: mismatch); a
    read integer is a plain JSON integer of at most 18 digits; a read float is a JSON number
    computed exactly (Clinger's fast path, as :func:`_number`); a skipped number is checked to
    be a JSON number. Read strings are interned (``table``: open addressing over their bytes,
    ``spans``: each unique string's start and end, ``n_str`` of them known from earlier calls on
    the same buffer); ``ends``: where each line ends (its newline, or ``n``). Returns (status,
    lines read, unique strings, byte position of a mismatch)."""
    n_slots = len(kind)
    mask = len(table) - 1
    cap = spans.shape[1]
    line = 0
    i = first
    max_lines = ints.shape[0]
    while i < n:
        if line >= max_lines:
            return FULL, line, n_str, i
        for k in range(n_slots + 1):
            a = lit_off[k]
            b = lit_off[k + 1]
            if i + (b - a) > n:
                return TEMPLATE_MISMATCH, line, n_str, i
            for j in range(a, b):
                if buf[i] != lit[j]:
                    return TEMPLATE_MISMATCH, line, n_str, i
                i += 1
            if k == n_slots:
                break
            t = kind[k]
            if t == SLOT_SKIP_STR:
                while i < n:
                    c = buf[i]
                    if c == _QUOTE:
                        break
                    if c < 32 or c > 126 or c == _BACKSLASH:
                        return TEMPLATE_MISMATCH, line, n_str, i
                    i += 1
                if i >= n:
                    return TEMPLATE_MISMATCH, line, n_str, i
                i += 1  # the closing quote
            elif t == SLOT_STR:
                start = i
                h = 0
                while i < n:
                    c = buf[i]
                    if c == _QUOTE:
                        break
                    if c < 32 or c > 126 or c == _BACKSLASH:
                        return TEMPLATE_MISMATCH, line, n_str, i
                    h = h * 31 + c
                    i += 1
                if i >= n:
                    return TEMPLATE_MISMATCH, line, n_str, i
                size = i - start
                h = h ^ (h >> 17)
                slot = h & mask
                found = -1
                while table[slot] != 0:
                    sid = table[slot] - 1
                    s0 = spans[0, sid]
                    if spans[1, sid] - s0 == size:
                        same = True
                        for m in range(size):
                            if buf[s0 + m] != buf[start + m]:
                                same = False
                                break
                        if same:
                            found = sid
                            break
                    slot = (slot + 1) & mask
                if found < 0:
                    if n_str >= cap or 2 * (n_str + 1) > len(table):
                        return FULL, line, n_str, i
                    spans[0, n_str] = start
                    spans[1, n_str] = i
                    table[slot] = n_str + 1
                    found = n_str
                    n_str += 1
                ints[line, col[k]] = found
                i += 1  # the closing quote
            else:  # a JSON number: an integer read, a float read, or one skipped (checked)
                neg = False
                if i < n and buf[i] == _MINUS:
                    neg = True
                    i += 1
                start = i
                mant = 0
                while i < n:
                    c = buf[i]
                    if c < _ZERO or c > _NINE:
                        break
                    mant = mant * 10 + (c - _ZERO)
                    i += 1
                digits = i - start
                if digits == 0 or (digits > 1 and buf[start] == _ZERO):
                    return TEMPLATE_MISMATCH, line, n_str, i
                frac = 0
                if i < n and buf[i] == _DOT:
                    i += 1
                    f0 = i
                    while i < n:
                        c = buf[i]
                        if c < _ZERO or c > _NINE:
                            break
                        mant = mant * 10 + (c - _ZERO)
                        i += 1
                    frac = i - f0
                    if frac == 0:
                        return TEMPLATE_MISMATCH, line, n_str, i
                exp = False
                if i < n and (buf[i] == 101 or buf[i] == 69):  # e E: skipped numbers only
                    exp = True
                    i += 1
                    if i < n and (buf[i] == _PLUS or buf[i] == _MINUS):
                        i += 1
                    e0 = i
                    while i < n and _ZERO <= buf[i] <= _NINE:
                        i += 1
                    if i == e0:
                        return TEMPLATE_MISMATCH, line, n_str, i
                if t == SLOT_INT:
                    if frac or exp or digits > 18:
                        return TEMPLATE_MISMATCH, line, n_str, i
                    ints[line, col[k]] = -mant if neg else mant
                elif t == SLOT_FLOAT:
                    # exact: a decimal mantissa below 2**53 (15 digits) over a power of ten <= 22
                    if exp or digits + frac > 15 or frac > 22:
                        return TEMPLATE_MISMATCH, line, n_str, i
                    v = float(mant) / pow10[frac]
                    floats[line] = -v if neg else v
        ends[line] = i
        line += 1
        if i < n:
            if buf[i] != 10:
                return TEMPLATE_MISMATCH, line - 1, n_str, i
            i += 1
            if i >= n:
                return TEMPLATE_MISMATCH, line, n_str, i  # a blank last line
    return OK, line, n_str, n


# -- compiling and loading ------------------------------------------------------------------
#: The signature the ahead-of-time module exports: the arrays the decoder passes (C-contiguous,
#: writable) and the 4 counts returned.
AOT_SIGNATURE = (
    "UniTuple(int64, 4)(uint8[::1], int64, int64[::1], uint8[::1], int64[::1], boolean[::1], "
    "int64[::1], int64, float64[::1], int64[:, ::1], float64[:, ::1], int64[:, ::1], int64[:, ::1], "
    "boolean[::1], int64[::1], int64[::1], int64)")
#: The signature of :func:`scan_template_lines` in the ahead-of-time module.
TEMPLATE_SIGNATURE = (
    "UniTuple(int64, 4)(uint8[::1], int64, int64, uint8[::1], int64[::1], int64[::1], int64[::1], "
    "int64[:, ::1], float64[::1], int64[::1], int64[:, ::1], int64[::1], int64, float64[::1])")
#: CPU time a build may take before it is abandoned (it takes ~10-20 s of CPU on 2 cores)
BUILD_TIMEOUT_S = 600
_jit_lock = threading.Lock()


def _jit_all(cache: bool) -> None:
    """Replace each function marked :func:`_compiled` by its numba dispatcher (idempotent)."""
    import numba

    with _jit_lock:
        module = globals()
        for name in _COMPILED:
            if not isinstance(module[name], numba.core.dispatcher.Dispatcher):
                module[name] = numba.njit(cache=cache, nogil=True)(module[name])


def jit_scan_block() -> Callable[..., tuple[int, int, int, int]]:
    """:func:`scan_block` compiled just in time by numba (from numba's cache after the first
    time); imports numba (~0.5 s) and loads its CPU target and the code (~0.6 s)."""
    _jit_all(cache=True)
    return globals()["scan_block"]


def jit_template_lines() -> Callable[..., tuple[int, int, int, int]]:
    """:func:`scan_template_lines` compiled just in time (as :func:`jit_scan_block`)."""
    _jit_all(cache=True)
    return globals()["scan_template_lines"]


@functools.cache
def ahead_of_time_name() -> str:
    """Module name of the ahead-of-time scanner for this source and NumPy: a hash of both,
    so an edited scanner or another NumPy never loads a stale build."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    digest.update(f"{np.__version__}|{sys.implementation.cache_tag}|{sys.platform}".encode())
    return f"_evtsync_scan_{digest.hexdigest()[:16]}"


def _suffix() -> str:
    import importlib.machinery

    return importlib.machinery.EXTENSION_SUFFIXES[0]


def ahead_of_time_dir() -> Path:
    """Where the ahead-of-time module lives: ``<cache>/scanner`` (``$EVTSYNC_CACHE_DIR``,
    ``$XDG_CACHE_HOME/evtsync`` or ``~/.cache/evtsync``, as the table cache)."""
    from evtsync.trace.cache_dir import default_cache_dir

    return default_cache_dir() / "scanner"


def ahead_of_time_path(directory: Path | None = None) -> Path:
    """The file of this source's ahead-of-time module in ``directory`` (default
    :func:`ahead_of_time_dir`)."""
    return (directory or ahead_of_time_dir()) / f"{ahead_of_time_name()}{_suffix()}"


def load_ahead_of_time(directory: Path | None = None) -> Callable[..., tuple[int, int, int, int]] | None:
    """The ahead-of-time :func:`scan_block`, or None when it has not been built (numba is not
    imported: the module is plain machine code with NumPy's C API)."""
    module = _load_module(directory)
    return None if module is None else module.scan_block


def load_ahead_of_time_template(directory: Path | None = None) -> Callable[..., tuple[int, int, int, int]] | None:
    """The ahead-of-time :func:`scan_template_lines` (the same module as :func:`load_ahead_of_time`),
    or None when it has not been built."""
    module = _load_module(directory)
    return None if module is None else module.scan_template_lines


_modules: dict[Path, Any] = {}


def _load_module(directory: Path | None) -> Any:
    """The ahead-of-time module, loaded once per process (refused from a folder others can write)."""
    path = ahead_of_time_path(directory)
    refused = _refused(path)
    if refused is not None:
        raise RuntimeError(refused)
    if path in _modules:
        return _modules[path]
    if not path.is_file():
        return None
    spec = importlib.util.spec_from_file_location(path.name.split(".")[0], path)
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _modules[path] = module
    return module


def _refused(path: Path) -> str | None:
    """Why the compiled module ``path`` must not be loaded (or built) there: it, its folder or one
    above could have been written by another user (:func:`evtsync.core.trust.unsafe_reason`);
    loading it runs its code."""
    from evtsync.core.trust import private_folder_problem

    return private_folder_problem(path, "the compiled trace scanner")


def build_failure(directory: Path | None = None) -> str | None:
    """Why the last build of this source's module failed (recorded so that later processes
    do not try again), or None."""
    marker = ahead_of_time_path(directory).with_suffix(".failed")
    try:
        return marker.read_text(errors="replace").strip() or "unknown error"
    except OSError:
        return None


def build_ahead_of_time(directory: Path | None = None) -> Path:
    """Compile :func:`scan_block` with numba's AOT compiler into ``directory`` (default
    :func:`ahead_of_time_dir`) in a child process, once: the file appears whole (written
    under a temporary name, then renamed), and processes that build at the same time wait
    for the first (a lock file beside it). Raises RuntimeError when the build fails (no C
    compiler, numba without ``pycc``); the reason is recorded beside it and returned by
    :func:`build_failure` to later processes."""
    import subprocess
    import tempfile

    directory = directory or ahead_of_time_dir()
    target = ahead_of_time_path(directory)
    refused = _refused(target)
    if refused is not None:
        raise RuntimeError(refused)
    if target.is_file():
        return target
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _build_lock(target), tempfile.TemporaryDirectory(prefix=".build-", dir=directory) as tmp:
        if target.is_file():  # another process built it while this one waited
            return target
        failure = build_failure(directory)
        if failure is not None:
            raise RuntimeError(f"building the ahead-of-time trace scanner failed ({failure})")
        # this file run as a script: the child needs numba and NumPy, not evtsync on its path
        cmd = [sys.executable, str(Path(__file__).resolve()), "--build-into", tmp, ahead_of_time_name()]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        else:
            built = Path(tmp) / target.name
            if done.returncode == 0 and built.is_file():
                os.replace(built, target)
                return target
            lines = (done.stderr or done.stdout or "").strip().splitlines()
            reason = f"exit {done.returncode}: {lines[-1] if lines else 'no output'}"
        with contextlib.suppress(OSError):  # (under the lock: a waiting process reads it)
            target.with_suffix(".failed").write_text(reason + "\n")
    raise RuntimeError(f"building the ahead-of-time trace scanner failed ({reason})")


@contextlib.contextmanager
def _build_lock(target: Path) -> Any:
    """Hold an exclusive lock on ``<target>.lock`` (processes reading in parallel that all
    find the module missing build it once: the others wait, then load it)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - no POSIX locks: concurrent builds each rename whole files
        yield
        return
    with open(target.with_suffix(".lock"), "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _build_into(directory: str, name: str) -> None:
    """The child of :func:`build_ahead_of_time`: compile and write ``name`` into ``directory``."""
    from numba.pycc import CC

    _jit_all(cache=False)  # the callees as dispatchers, which the AOT compiler links in
    compiler = CC(name)
    compiler.output_dir = directory
    compiler.verbose = False
    compiler.export("scan_block", AOT_SIGNATURE)(globals()["scan_block"].py_func)
    compiler.export("scan_template_lines", TEMPLATE_SIGNATURE)(globals()["scan_template_lines"].py_func)
    compiler.compile()


if __name__ == "__main__":  # pragma: no cover - build_ahead_of_time's child
    if len(sys.argv) == 4 and sys.argv[1] == "--build-into":
        _build_into(sys.argv[2], sys.argv[3])
    else:  # the library prints nothing: building by hand is a command (evtsync cache --build-scanner)
        logging.basicConfig()
        log.error("usage: python -m evtsync.trace.scan --build-into DIR NAME (the build's child process); "
                  "to build the scanner by hand: evtsync cache --build-scanner")
        raise SystemExit(2)
