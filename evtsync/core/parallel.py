"""Where per-rank work runs: in this process, a local process pool, or a Dask cluster.

Every backend runs the same function on each item and returns the results in the order
of the items, so the tables built from them do not depend on the backend.

- ``InProcess``: a plain loop (small trace sets, ``--jobs 1``, debugging).
- ``ProcessPool``: a local pool of ``--jobs`` ``forkserver`` processes; the default, needs
  no Dask. Safe from a plain script without an ``if __name__ == "__main__":`` guard: the
  workers run evtsync's own functions, so they are started without re-importing the
  caller's script (which would start the work again inside every worker); should the pool
  break all the same, the work is done in this process, with one warning.
- ``DaskCluster``: ``dask.distributed``; an existing scheduler (``--scheduler ADDRESS`` or
  the ``DASK_SCHEDULER_ADDRESS`` environment variable) or a local cluster started for the
  run (``--workers N``, or ``--scheduler local`` with one worker per core). The workers
  must be able to import evtsync and to read the trace paths (see docs/scaling.md).

Dask is imported only when a Dask backend is asked for.

Without ``--jobs``, whether the local pool runs at all is decided by :func:`pool_pays`: a
cost model of the work (CPU seconds estimated by the caller, e.g. from the trace files' sizes)
against what the pool adds (starting its processes, pickling every result back) and the
cores that are idle now. The default pool runs only where it gains wall time *and* costs at
most :data:`POOL_MAX_EXTRA_CPU` more CPU than one process (issue 30; the measured constants
are in docs/performance/reading.md).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from evtsync.core.errors import InputError
from evtsync.core.progress import progress

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

#: Environment variable naming a Dask scheduler (the one dask.distributed itself reads).
SCHEDULER_ENV = "DASK_SCHEDULER_ADDRESS"
#: ``--scheduler`` value that starts a local Dask cluster for the run.
LOCAL_DASK = "local"
#: Modules the local pool's fork server imports before forking workers.
PRELOAD = ("evtsync.trace.traceset", "evtsync.trace.cache")


#: CPU seconds a local pool costs before its first result: the fork server importing the
#: reader (pandas, pyarrow), then each worker's own start (measured on 2 cores: a 2-process pool
#: adds 0.66-0.87 s of CPU to 64-256 small ranks, of which 0.08-0.33 s is moving results).
POOL_START_CPU_S = 0.4
POOL_START_CPU_PER_WORKER_S = 0.15
#: The most extra CPU (start + moving results), as a fraction of the work's own CPU, that the
#: default pool may cost; above it the work runs in one process unless ``--jobs`` asks.
POOL_MAX_EXTRA_CPU = 0.10
#: The least wall time the default pool must save, as a fraction of the one-process time.
POOL_MIN_WALL_GAIN = 0.20


@dataclass(frozen=True)
class Work:
    """A cost estimate of ``items`` pieces of work for the pool model (CPU seconds, one core).

    ``cpu_s``: the work itself in one process; ``transfer_cpu_s``: what a pool adds to move the
    results back (pickling in the workers, unpickling here)."""

    items: int
    cpu_s: float
    transfer_cpu_s: float


def idle_cores(cores: int | None = None, load: float | None = None) -> int:
    """Cores free for a pool now: ``cores`` (default: this machine's) less the others' load (the
    1-minute load average, which counts this process too), at least 1."""
    cores = cores or os.cpu_count() or 1
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # pragma: no cover - no load average on this platform
            load = 0.0
    return max(1, min(cores, math.floor(cores + 1 - load + 0.5)))


def pool_pays(work: Work, processes: int, cores: int | None = None, start_cpu_s: float | None = None,
              per_worker_cpu_s: float | None = None) -> bool:
    """Whether a local pool of ``processes`` (no more than ``cores``, default :func:`idle_cores`)
    beats one process on ``work``: its extra CPU (start and moving results) at most
    :data:`POOL_MAX_EXTRA_CPU` of the work, and its estimated wall time (start, then the work
    and its transfers shared by the processes) at least :data:`POOL_MIN_WALL_GAIN` shorter.
    ``start_cpu_s`` and ``per_worker_cpu_s``: what starting the pool and each of its processes
    costs (default :data:`POOL_START_CPU_S`, :data:`POOL_START_CPU_PER_WORKER_S`, the trace
    reader's); a pool whose workers import more (the report's figures: matplotlib) says so."""
    n = min(processes, work.items, idle_cores() if cores is None else cores)
    if n < 2 or work.cpu_s <= 0:
        return False
    start = ((POOL_START_CPU_S if start_cpu_s is None else start_cpu_s)
             + (POOL_START_CPU_PER_WORKER_S if per_worker_cpu_s is None else per_worker_cpu_s) * n)
    extra = start + work.transfer_cpu_s
    wall = start + (work.cpu_s + work.transfer_cpu_s) / n
    return extra <= POOL_MAX_EXTRA_CPU * work.cpu_s and wall <= (1 - POOL_MIN_WALL_GAIN) * work.cpu_s


class Backend(Protocol):
    """Runs ``fn`` on each item; results in item order."""

    name: str

    def map(self, fn: Callable[[T], R], items: Sequence[T], desc: str) -> list[R]:
        """``[fn(item) for item in items]``, wherever the backend runs them."""
        ...


class InProcess:
    """Run everything in the calling process."""

    name = "in-process"

    def map(self, fn: Callable[[T], R], items: Sequence[T], desc: str) -> list[R]:
        return [fn(item) for item in progress(items, desc, len(items))]


class ProcessPool:
    """A local pool of ``jobs`` processes (forkserver: safe with threads and Dask)."""

    def __init__(self, jobs: int, preload: Sequence[str] = PRELOAD) -> None:
        if jobs < 1:
            raise InputError(f"--jobs must be at least 1, got {jobs}")
        self.jobs = jobs
        self.preload = tuple(preload)
        self.name = f"process pool ({jobs} processes)"

    def map(self, fn: Callable[[T], R], items: Sequence[T], desc: str) -> list[R]:
        ctx = multiprocessing.get_context("forkserver")
        # the fork server imports the work's modules once (``preload``: the trace reader unless
        # told otherwise); each worker forked from it starts warm. A fork server already
        # running keeps what it imported first.
        ctx.set_forkserver_preload(list(self.preload))
        try:
            with _without_main_script(fn), \
                    ProcessPoolExecutor(max_workers=min(self.jobs, len(items)), mp_context=ctx,
                                        initializer=leave_interrupts_to_the_parent) as pool:
                futures = [pool.submit(fn, item) for item in items]
                try:
                    return [fut.result() for fut in progress(futures, desc, len(items))]
                except KeyboardInterrupt:
                    stop_pool(pool)
                    raise
        except (BrokenProcessPool, RuntimeError) as exc:
            # a worker died, or the pool cannot start here; an error of the work itself
            # (a bad trace) is re-raised as it is
            if not isinstance(exc, BrokenProcessPool) and "bootstrapping" not in str(exc):
                raise
            log.warning("the process pool could not run (%s: %s); %s in this process instead "
                        "(--jobs 1 avoids the pool)", type(exc).__name__, exc, desc)
            return InProcess().map(fn, items, desc)


class JobPool:
    """A local ``forkserver`` pool for single jobs submitted one at a time, whose results the
    caller collects later (the pipeline's stage jobs): the fork server imports ``preload``
    once (a server already running keeps what it imported first), ``initializer`` runs in each
    process when it starts, and processes start, on :meth:`submit`, without re-importing the
    caller's script, as :class:`ProcessPool`'s do. Closing waits for running jobs and cancels
    the others."""

    def __init__(self, processes: int, preload: Sequence[str] = (),
                 initializer: Callable[[], None] | None = None) -> None:
        if processes < 1:
            raise InputError(f"--jobs must be at least 1, got {processes}")
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(list(preload))
        self.processes = processes
        self._pool = ProcessPoolExecutor(max_workers=processes, mp_context=ctx,
                                         initializer=functools.partial(leave_interrupts_to_the_parent, initializer))

    def submit(self, fn: Callable[[], R]) -> Future[R]:
        """Run ``fn()`` in a pool process (started now if the pool has room for one more)."""
        with _without_main_script(fn):  # processes are started here, by the executor's submit
            return self._pool.submit(fn)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> JobPool:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            stop_pool(self._pool)  # Ctrl-C: the running jobs are stopped, not waited for
        self.close()


def leave_interrupts_to_the_parent(then: Callable[[], None] | None = None) -> None:
    """Initializer of every pool process: Ctrl-C reaches the whole process group, and each
    process printed its own KeyboardInterrupt traceback (issue 33). The pool's processes ignore
    it; the parent, which gets it too, stops them (:func:`stop_pool`) and says one line.
    ``then``: the pool's own initializer, run next."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if then is not None:
        then()


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel the pending work of ``pool`` and terminate its processes now (on Ctrl-C), instead of
    waiting for the running tasks (a fit may take minutes)."""
    # terminated processes make the executor's own shutdown (by its caller) quick: it finds them
    # gone and cancels the rest. (shutdown(wait=False) first left Python 3.12.1's exit hook
    # writing to a closed pipe: "Exception ignored ... Bad file descriptor".)
    processes = list((getattr(pool, "_processes", None) or {}).values())  # the executor's own table
    for process in processes:
        with contextlib.suppress(OSError, ValueError, AttributeError):
            process.terminate()


def start_fork_server(preload: Sequence[str] = PRELOAD) -> None:
    """Start the local pool's fork server now, importing ``preload`` there, so that it boots while
    this process does other work (a :class:`ProcessPool` started later forks from it at once).
    A server already running is left as it is; where none can start, the pool says so later."""
    from multiprocessing import forkserver

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(list(preload))
    with contextlib.suppress(OSError, RuntimeError, ValueError), _without_main_script(start_fork_server):
        forkserver.ensure_running()


def _defined_in_main(fn: Callable[..., Any]) -> bool:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__module__", None) == "__main__"


@contextmanager
def _without_main_script(fn: Callable[..., Any]) -> Iterator[None]:
    """Start workers without re-importing the caller's script.

    multiprocessing's spawn and forkserver workers import the main script (as
    ``__mp_main__``) when ``__main__`` is a file run as ``python script.py``; a script that
    calls :func:`~evtsync.trace.traceset.load_traces` at its top level, with no
    ``if __name__ == "__main__":`` guard, then starts the pool again inside each worker,
    which fails ("bootstrapping phase"). The work sent to our workers is evtsync's own
    (importable) functions, so the script is not needed there: its path is hidden from
    multiprocessing while the workers start. A function defined in the script itself does
    need it, and is left alone.
    """
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or getattr(main, "__spec__", None) is not None or _defined_in_main(fn):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


class DaskCluster:
    """Tasks on a ``dask.distributed`` cluster through a ``Client``.

    Results are gathered one at a time in item order, so the client never holds more
    than the finished results; an exception raised by a task is re-raised here as is
    (an :class:`~evtsync.core.errors.EvtsyncError` keeps its one-line message).
    """

    def __init__(self, client: Any, description: str) -> None:
        self.client = client
        self.name = description

    def map(self, fn: Callable[[T], R], items: Sequence[T], desc: str) -> list[R]:
        futures = self.client.map(fn, list(items), pure=False)
        try:
            return [fut.result() for fut in progress(futures, desc, len(items))]
        finally:
            self.client.cancel(futures)


def _import_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise InputError("a Dask scheduler was asked for but dask.distributed is not installed; "
                         "install evtsync[dask] (pip install 'dask[distributed]')") from None
    return distributed


@contextmanager
def dask_backend(scheduler: str, workers: int | None = None,
                 timeout: str = "30s") -> Iterator[DaskCluster]:
    """A Dask backend on ``scheduler`` (an address, or ``"local"`` to start a cluster).

    A local cluster gets ``workers`` single-threaded worker processes (default: one per
    core) and is closed on exit; an existing cluster is only disconnected from.
    """
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be at least 1, got {workers}")
    distributed = _import_distributed()
    if scheduler == LOCAL_DASK:
        n = workers or os.cpu_count() or 1
        cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                           dashboard_address=None)
        client = distributed.Client(cluster)
        try:
            yield DaskCluster(client, f"local Dask cluster ({n} workers)")
        finally:
            client.close()
            cluster.close()
        return
    try:
        client = distributed.Client(scheduler, timeout=timeout)
    except (OSError, TimeoutError) as exc:
        raise InputError(f"cannot reach the Dask scheduler at {scheduler} ({exc}); check the "
                         f"address (--scheduler or ${SCHEDULER_ENV})") from None
    try:
        n = len(client.scheduler_info().get("workers", {}))
        yield DaskCluster(client, f"Dask cluster at {scheduler} ({n} workers)")
    finally:
        client.close()


def scheduler_address(scheduler: str | None, workers: int | None = None,
                      jobs: int | None = None) -> str | None:
    """The Dask scheduler a run uses, or None for no Dask (the local process pool).

    ``--scheduler`` if given; else ``--workers N`` asks for a local cluster (``"local"``);
    else an explicit ``--jobs`` asks for the process pool; else ``$DASK_SCHEDULER_ADDRESS``.
    ``--workers`` sizes a cluster evtsync starts, so it cannot be combined with the address
    of an existing one, and ``--jobs`` sizes the process pool, so it cannot be combined with
    either Dask option.
    """
    if workers is not None and workers < 1:
        raise InputError(f"--workers must be at least 1, got {workers}")
    if jobs is not None and jobs < 1:
        raise InputError(f"--jobs must be at least 1, got {jobs}")
    if jobs is not None and (scheduler or workers is not None):
        dask = f"--scheduler {scheduler}" if scheduler else f"--workers {workers}"
        raise InputError(f"--jobs {jobs} sizes the local process pool and {dask} asks for Dask: "
                         "give one of them")
    if scheduler and scheduler != LOCAL_DASK and workers is not None:
        raise InputError(f"--workers {workers} starts a local Dask cluster; it cannot size the "
                         f"existing cluster at --scheduler {scheduler} (drop one of them)")
    if scheduler:
        return scheduler
    if workers is not None:
        return LOCAL_DASK
    if jobs is not None:
        return None  # an explicit process pool wins over the environment
    return os.environ.get(SCHEDULER_ENV) or None


@contextmanager
def optional_dask(scheduler: str | None = None, workers: int | None = None,
                  jobs: int | None = None) -> Iterator[DaskCluster | None]:
    """The Dask backend the options ask for (see :func:`scheduler_address`), open for the
    duration of the block, or None when the run stays local."""
    address = scheduler_address(scheduler, workers, jobs)
    if not address:
        yield None
        return
    with dask_backend(address, workers) as backend:
        log.info("running on %s", backend.name)
        yield backend


@contextmanager
def backend_for(n_items: int, *, jobs: int | None = None, workers: int | None = None,
                scheduler: str | None = None, total_bytes: int = 0, parallel_min_bytes: int = 0,
                work: Work | None = None, client: Any = None) -> Iterator[Backend]:
    """The backend a run should use.

    A Dask ``client`` given by the caller wins; then a Dask cluster: ``scheduler`` (an
    address, or ``"local"``), ``workers`` (a local cluster of that many workers) or, unless
    ``jobs`` is given, the environment (see :func:`scheduler_address`). Otherwise a local
    process pool of ``jobs`` processes (default one per core; one per idle core when the caller
    estimates its ``work``), or the calling process when there is one item or ``jobs`` is 1,
    and, ``jobs`` not given, where the pool does not pay: by the cost model when the caller
    estimates its ``work`` (:func:`pool_pays`), else below ``parallel_min_bytes`` of input
    (``total_bytes``).
    """
    if client is not None:
        yield DaskCluster(client, "Dask client given by the caller")
        return
    with optional_dask(scheduler, workers, jobs) as dask:
        if dask is not None:
            yield dask
            return
    n = jobs if jobs is not None else min(n_items, os.cpu_count() or 1)
    if jobs is None and work is not None:
        idle = idle_cores()
        n = min(n, idle)  # the default pool: one process per idle core
        pays = n > 1 and pool_pays(work, n, cores=idle)
        log.debug("pool model: %d items, %.2f s of CPU, %.2f s to move results, %d idle cores: %s",
                  work.items, work.cpu_s, work.transfer_cpu_s, idle, f"{n} processes" if pays else "one process")
        if not pays:
            n = 1
    if n <= 1 or n_items <= 1 or (jobs is None and work is None and total_bytes < parallel_min_bytes):
        yield InProcess()
        return
    yield ProcessPool(n)
