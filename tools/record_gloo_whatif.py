"""Record real gloo jobs with three more kinds of straggler, and their clean twins (issue 46 item 3).

Purpose
    Truth for the what-if replay (docs/critical-path.md §8) and for attribution: the ``ddp`` job
    of ``tools/record_gloo_planted.py`` (4 ranks, 2 gradient buckets + the loss per step, steps
    2-3 and 6-7 recorded) with plants of kinds that recording lacks:

    ``gc_burst``     cyclic garbage (2,000 lists that reference themselves) made and collected
                     with ``gc.collect(1)``, again until the target time is spent: a GC pause, no profiler event
                     (expected cause ``(python gap)``);
    ``thread_join``  a background ``threading.Thread`` running ``torch.mm`` until the target time,
                     started and joined at once: the main thread waits in ``join()`` (no event on the
                     main thread: ``(python gap)``; the thread's ``aten::mm`` ops are on another thread);
                     with ``RECORD_GLOO_THREAD_WAITS=1`` (tools/record_gloo_twins.py) the thread blocks
                     (sleeps, as an I/O wait would) instead of computing;
    ``named_inner``  ``torch.mm`` calls inside ``record_function("expert_mm")``: the time is in the
                     inner op (``aten::mm``) and the user's annotation is ``expert_mm``.

    The job is ``--job ddp`` (the structure of record_gloo_planted's ddp job, these plants instead of
    its own). Each plant's duration is measured with ``time.perf_counter_ns`` around it; the truth is written
    exactly as ``record_gloo_planted.py`` writes it (same functions), with ``--clean`` for the twin.

How to run (a Python 3.11 venv with the CPU build of torch 2.13.0):
    VENV/bin/python tools/record_gloo_whatif.py --job ddp --out tests/data/gloo-whatif/ddpw
    VENV/bin/python tools/record_gloo_whatif.py --job ddp --clean --out tests/data/gloo-whatif/ddpw-clean
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record_gloo_planted as base  # noqa: E402 - the recording machinery, shared
import torch  # noqa: E402

#: (rank, step, kind, target ms, where), as in record_gloo_planted.PLANTS
PLANTS = [(1, 2, "gc_burst", 25.0, "data"), (3, 3, "thread_join", 25.0, "layer1"),
          (2, 6, "named_inner", 20.0, "layer1"), (0, 7, "thread_join", 20.0, "data")]
CAUSES = {"gc_burst": "(python gap)", "thread_join": "(python gap)", "named_inner": "aten::mm"}
#: With RECORD_GLOO_STACK (tools/record_gloo_twins.py --stack: with_stack=True, record_python_gc_info)
STACK_CAUSES = {"gc_burst": "(GC pause)", "thread_join": "(thread join)"}


def _mm_until(t0: int, target: int) -> None:
    a = torch.ones(base.HIDDEN, base.HIDDEN)
    while time.perf_counter_ns() - t0 < target:
        torch.mm(a, a)


def _io_wait(t0: int, target: int) -> None:
    """A background thread that blocks (an I/O wait, here a sleep) until the target time."""
    time.sleep(max(0, target - (time.perf_counter_ns() - t0)) / 1e9)


def plant(kind: str, target_ms: float, _old=base.plant) -> int:  # noqa: ANN001
    """One plant (the new kinds here, the others as record_gloo_planted); its duration in ns."""
    t0 = time.perf_counter_ns()
    target = int(target_ms * 1e6)
    if kind == "gc_burst" and os.environ.get("RECORD_GLOO_STACK"):
        # the same garbage made without calls (with_stack=True records every call, 4,000 a round)
        while time.perf_counter_ns() - t0 < target:
            junk = [None] * 2_000
            for i in range(2_000):
                cell: list = [None]
                cell[0] = cell  # a reference cycle: only the collector frees it
                junk[i] = cell
            del junk
            gc.collect(1)
    elif kind == "gc_burst":
        while time.perf_counter_ns() - t0 < target:
            junk = []
            for _ in range(2_000):
                cell: list = []
                cell.append(cell)  # a reference cycle: only the collector frees it
                junk.append(cell)
            del junk
            gc.collect(1)  # the young generations, where the garbage is (a full collection of torch's
            #                heap takes 125 ms at once on this machine, more than a step)
    elif kind == "thread_join":
        # RECORD_GLOO_THREAD_WAITS (tools/record_gloo_twins.py): the thread blocks instead of computing
        body = _io_wait if os.environ.get("RECORD_GLOO_THREAD_WAITS") else _mm_until
        worker = threading.Thread(target=body, args=(t0, target), name="background")
        worker.start()
        worker.join()
    elif kind == "named_inner":
        with torch.profiler.record_function("expert_mm"):
            _mm_until(t0, target)
    else:
        return _old(kind, target_ms)
    return time.perf_counter_ns() - t0


def _patch() -> None:
    """The ``ddp`` job of record_gloo_planted with this module's plants."""
    base.PLANTS["ddp"] = PLANTS
    base.EXPECTED_CAUSE.update(CAUSES)
    if os.environ.get("RECORD_GLOO_STACK"):  # with_stack=True and the GC events: named, not gaps
        base.EXPECTED_CAUSE.update(STACK_CAUSES)
    base.plant = plant


_patch()


def worker(rank: int, job: str, clean: bool, out_dir: str) -> None:
    """One rank (spawned: this module is imported again in the child, which patches ``base``)."""
    _patch()
    base.worker(rank, job, clean, out_dir)


if __name__ == "__main__":
    _spawn = base.mp.spawn

    def spawn(fn, *args, **kwargs):  # noqa: ANN001, ANN202 - route to this module's worker
        return _spawn(worker, *args, **kwargs)

    base.mp.spawn = spawn
    sys.exit(base.main())
