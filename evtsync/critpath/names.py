"""The names a slice of time goes by, in the user's words (issue 46, docs/critical-path.md,
"Names of causes"): one home for the CPU/gloo main-thread timeline (:mod:`evtsync.critpath.cpu`)
and the GPU-trace event DAG (:mod:`evtsync.critpath.dag`)."""

from __future__ import annotations

import re

import numpy as np

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
