"""The names a slice of time goes by, in the user's words (issue 46, docs/critical-path.md,
"Names of causes"): one home for the CPU/gloo main-thread timeline (:mod:`evtsync.critpath.cpu`)
and the GPU-trace event DAG (:mod:`evtsync.critpath.dag`)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

GAP_NAME = "(python gap)"
WAIT_PREFIX = "(wait) "
STEP_ANNOTATION = re.compile(r"^ProfilerStep#\d+$")
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
#: Python frames of a thread join (``Thread.join`` and the lock wait inside it; with_stack=True).
_JOIN = re.compile(r"^threading\.py\(\d+\): (join|_wait_for_tstate_lock)$")
JOIN_NAME = "(thread join)"
#: The event torch's profiler records for a pass of Python's garbage collector (``with_stack=True``
#: and ``experimental_config=_ExperimentalConfig(record_python_gc_info=True)``), and its name here.
GC_EVENT = "Python GC"
GC_NAME = "(GC pause)"
#: Separator between the enclosing annotation, the user-level op and the leaf op in a slice's name.
NAME_SEPARATOR = " > "


def is_user_note(name: str, cat: str) -> bool:
    """Whether an event is the user's own ``record_function`` annotation: not ``ProfilerStep#N``,
    not the profiler's communication annotations (``gloo:*``, ``nccl:*``) nor evtsync's own names."""
    return cat == "user_annotation" and not STEP_ANNOTATION.match(name) and name != GAP_NAME \
        and not name.startswith(("gloo:", "nccl:", WAIT_PREFIX))


def user_names(starts: np.ndarray, ends: np.ndarray, names: list[str], cats: list[str]) -> list[str]:
    """The name each event's own time goes by, in the user's words (issue 46): for an operator,
    the innermost enclosing ``record_function`` annotation and the outermost (user-level) operator
    around it before the leaf — ``expert_mm > aten::mm``, ``aten::clone > aten::copy_``; a Python
    frame inside a thread join (with_stack=True) is ``(thread join)`` (after its annotation); a pass
    of the garbage collector (torch's ``Python GC`` event) is ``(GC pause)``;
    Python frames lose their object addresses so that ranks match. Events of one thread, sorted by
    start, longer first (``starts``/``ends``: integer arrays); annotations, enqueues, waits and
    other categories keep their own names."""
    n = len(names)
    is_note = [is_user_note(names[i], cats[i]) for i in range(n)]
    is_op = [cats[i] == "cpu_op" and not names[i].startswith("c10d::") for i in range(n)]
    is_join = [cats[i] == "python_function" and bool(_JOIN.match(names[i])) for i in range(n)]
    s_list, e_list = [int(v) for v in starts], [int(v) for v in ends]
    out: list[str] = []
    stack: list[int] = []
    for i in range(n):
        while stack and e_list[stack[-1]] <= s_list[i]:
            stack.pop()
        # with_stack=True: a record_function annotation starts inside the profiler's own Python
        # calls (``__enter__``, ``_record_function_enter_new``) and outlives them; those frames are
        # closed, not the annotation clipped to them
        while stack and e_list[i] > e_list[stack[-1]] and cats[stack[-1]] == "python_function" \
                and cats[i] != "python_function":
            stack.pop()
        if stack and e_list[i] > e_list[stack[-1]]:  # improperly nested: clip to the parent
            e_list[i] = e_list[stack[-1]]
        name, cat = names[i], cats[i]
        shown = name
        if is_op[i] or cat == "python_function":
            note = [names[j] for j in stack if is_note[j]][-1:]  # the innermost annotation
            if cat == "python_function":
                joined = is_join[i] or any(is_join[j] for j in stack)
                own = GC_NAME if name == GC_EVENT else JOIN_NAME if joined else _ADDRESS.sub("", name)
                shown = NAME_SEPARATOR.join([*note, own])
            else:
                ops = [names[j] for j in stack if is_op[j]]
                top = ops[:1] if ops and ops[0] != name else []
                shown = NAME_SEPARATOR.join([*note, *top, name])
        out.append(shown)
        stack.append(i)
    return out


def user_notes(ops: pd.DataFrame) -> pd.DataFrame:
    """The user's ``record_function`` annotations among a rank's CPU ops (:func:`is_user_note`: not
    ``ProfilerStep#N``, not the communication annotations): columns start_ns, end_ns, name, tid."""
    ops = ops[(ops["cat"] == "user_annotation").to_numpy(dtype=bool)]  # few: the per-event test on those only
    names = ops["name"].astype(str)
    keep = np.array([is_user_note(n, "user_annotation") for n in names.tolist()], dtype=bool)
    sel = ops[keep]
    return pd.DataFrame({"start_ns": sel["ts_ns"].to_numpy(np.int64), "end_ns": sel["end_ns"].to_numpy(np.int64),
                         "name": names[keep].to_numpy(), "tid": sel["tid"].to_numpy() if "tid" in sel else 0})


def notes_around(notes: pd.DataFrame, at_ns: np.ndarray, to_ns: np.ndarray, tids: Sequence[Any] | None = None,
                 own: Sequence[str] | None = None) -> list[str | None]:
    """Per interval ``[at_ns[i], to_ns[i]]`` the innermost of the user's annotations (``notes``, as
    :func:`user_notes` gives them) that covers it on thread ``tids[i]`` (None: any thread), other
    than an annotation named ``own[i]`` (the interval's own event); None where none covers it.

    One home for "the user's words around" a slice of time (issue 46, docs/critical-path.md §6
    "Names in the user's words" and §8): a CPU slice's interval on the CPU side, and for a kernel on a
    GPU trace the start of its launch (the runtime or driver call of the same correlation) on the
    launching thread. Innermost = the latest-starting covering one (annotations nest)."""
    n = len(at_ns)
    result = np.full(n, None, dtype=object)
    if notes is None or notes.empty or n == 0:
        return result.tolist()
    at, to = np.asarray(at_ns, dtype=np.int64), np.asarray(to_ns, dtype=np.int64)
    own_a = np.asarray(own, dtype=object) if own is not None else None
    n_tid = notes["tid"].to_numpy()
    point_tid = np.asarray(tids, dtype=object) if tids is not None else None
    for tid in (pd.unique(n_tid) if point_tid is not None else [None]):
        sel = notes[n_tid == tid] if tid is not None else notes
        order = np.lexsort((-sel["end_ns"].to_numpy(np.int64), sel["start_ns"].to_numpy(np.int64)))
        start = sel["start_ns"].to_numpy(np.int64)[order]
        end = sel["end_ns"].to_numpy(np.int64)[order]
        name = sel["name"].to_numpy(dtype=object)[order]
        parent = _enclosing(end)
        pts = np.flatnonzero(point_tid == tid) if point_tid is not None else np.arange(n)
        if not pts.size:
            continue
        # the latest-starting annotation at or before the interval's start, then up its enclosing
        # ones until one covers the whole interval (and is not the interval's own event)
        k = np.searchsorted(start, at[pts], side="right") - 1
        while True:
            ok = k >= 0
            bad = np.zeros(len(k), dtype=bool)
            bad[ok] = end[k[ok]] < to[pts[ok]]
            if own_a is not None:
                bad[ok] |= name[k[ok]] == own_a[pts[ok]]
            if not bad.any():
                break
            k[bad] = parent[k[bad]]
        hit = k >= 0
        result[pts[hit]] = name[k[hit]]
    return [None if v is None else str(v) for v in result.tolist()]


def _enclosing(end: np.ndarray) -> np.ndarray:
    """Per event of one thread (sorted by start, longer first) the index of the event enclosing it,
    -1 at the top level (a stack sweep; a partly overlapping neighbour encloses nothing)."""
    parent = np.full(len(end), -1, dtype=np.int64)
    stack: list[int] = []
    for i, e in enumerate(end.tolist()):
        while stack and int(end[stack[-1]]) < e:
            stack.pop()
        if stack:
            parent[i] = stack[-1]
        stack.append(i)
    return parent
