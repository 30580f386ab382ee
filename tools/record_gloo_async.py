"""Record a real gloo data-parallel job whose gradient all_reduces are asynchronous
(``async_op=True``, waited on later with ``work.wait()``), with planted stragglers, and its clean
twin (issue 46 item 3).

Purpose
    Truth for attribution of a collective that the program does not wait for where it issues it.
    The job is the ``ddp`` job of ``tools/record_gloo_planted.py`` (4 ranks, 2 gradient buckets +
    the loss per step, steps 2-3 and 6-7 recorded) with one change: each bucket's ``all_reduce``
    is issued with ``async_op=True``; the program goes on (the next bucket, the optimizer update)
    and waits on both works with ``work.wait()`` just before the loss ``all_reduce`` (synchronous,
    as before). Plants: ``annotated_stall`` (``record_function("data_loader_stall")`` around a
    sleep) on rank 1 in step 2 and ``extra_matmul`` (``torch.mm`` until the target) on rank 3 in
    step 3, measured with ``time.perf_counter_ns`` around them; the truth is written exactly as
    ``record_gloo_planted.py`` writes it (same functions), with ``--clean`` for the twin.

How to run (a Python 3.11 venv with the CPU build of torch 2.13.0):
    VENV/bin/python tools/record_gloo_async.py --job ddp --out tests/data/gloo-async/ddpa
    VENV/bin/python tools/record_gloo_async.py --job ddp --clean --out tests/data/gloo-async/ddpa-clean
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import record_gloo_planted as base  # noqa: E402 - the recording machinery, shared

#: (rank, step, kind, target ms, where), as in record_gloo_planted.PLANTS
PLANTS = [(1, 2, "annotated_stall", 30.0, "data"), (3, 3, "extra_matmul", 25.0, "layer1")]


def _patch() -> None:
    """The ``ddp`` job of record_gloo_planted with asynchronous bucket all_reduces and these plants."""
    base.PLANTS["ddp"] = PLANTS
    sync_all_reduce = getattr(base.dist.all_reduce, "sync_all_reduce", base.dist.all_reduce)
    pending: list = []

    def all_reduce(tensor, group=None, async_op=False):  # noqa: ANN001, ANN202
        if tensor.dim() == 0:  # the loss: first wait for the buckets, then reduce it synchronously
            while pending:
                pending.pop(0).wait()
            return sync_all_reduce(tensor, group=group, async_op=async_op)
        pending.append(sync_all_reduce(tensor, group=group, async_op=True))  # a gradient bucket
        return None

    all_reduce.sync_all_reduce = sync_all_reduce  # type: ignore[attr-defined]
    base.dist.all_reduce = all_reduce


def worker(rank: int, job: str, clean: bool, out_dir: str) -> None:
    """One rank (spawned: this module is imported again in the child, which patches ``base``)."""
    _patch()
    base.worker(rank, job, clean, out_dir)


if __name__ == "__main__":
    base.PLANTS["ddp"] = PLANTS
    _spawn = base.mp.spawn

    def spawn(fn, *args, **kwargs):  # noqa: ANN001, ANN202 - route to this module's worker
        return _spawn(worker, *args, **kwargs)

    base.mp.spawn = spawn
    sys.exit(base.main())
