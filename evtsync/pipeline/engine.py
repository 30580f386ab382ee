"""The pipeline's engine: stages with cache keys, resume, the run folder's manifest and lock.

Each stage has a key: the SHA-256 of its parameters, the content hashes of the files it reads
(trace files, or the outputs of the stages it depends on), the package version and a digest of
the package's source. The manifest records each stage's key, status and the SHA-256 of each
output; a stage whose key matches and whose outputs are intact is reused, otherwise it runs
again (``force`` redoes every stage). Every output and the manifest are written atomically; the
manifest is written before the first stage and rewritten after each, so a run killed at any
point (a full disk included) leaves a folder the next run recognises as its own, with finished
stages intact, and resumes after them.

A stage ends ``done``, ``not_applicable`` (:class:`NotApplicable`, with the reason),
``unavailable`` (:class:`Unavailable`) or ``failed`` — only for the package's own errors
(:class:`~evtsync.core.errors.EvtsyncError`); any other exception is a bug and propagates.

In a study of several workloads, the stages that read traces run each workload on its own
(:meth:`Run.per_workload`): a workload whose work raises the package's own error is recorded in
the stage's manifest entry (``failed_workloads``) and left out from then on, and the stage goes on
with the others; it fails only when every workload does.

A stage may declare a ``job``: its heavy, self-contained work (a Bayesian fit), which depends
only on stages already finished. As soon as the inputs of several such stages that must run are
ready, it starts all their jobs at once in a pool of processes (``--jobs``, default one per
core), so that one fit compiles and samples while another does, and while the stages before them
go on in this process; each stage's body then takes its job's result in stage order, and everything else (manifest, outputs, errors) is as if the body
had done the work itself. ``--jobs 1`` runs them in this process.

A stage may be *shareable* (:attr:`Stage.shareable`: its outputs are a function of its key, and
name neither the run folder nor the time): its ``done`` results are kept in the result cache
across run folders (:mod:`evtsync.pipeline.resultcache`) under :meth:`Run.result_key`, and a run
in another folder whose stage has the same key copies them instead of computing them (the
manifest entry says so: ``reused_from_cache``). No pool process is started for a job whose
stage will be copied.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from evtsync.core.errors import EvtsyncError, InputError, OutputError
from evtsync.core.tableio import (
    TEMP_SUFFIX,
    file_sha256,
    json_ready,
    read_table,
    write_table,
    write_text_atomic,
)
from evtsync.pipeline.options import RunOptions, Workload, default_out, discover_workloads
from evtsync.runfolder.layout import (
    LOCK,
    MANIFEST,
    STATUS_DONE,
    STATUS_FAILED,
    STATUS_NA,
    STATUS_UNAVAILABLE,
    source_digest,
)

if TYPE_CHECKING:
    from evtsync.core.parallel import JobPool
    from evtsync.pipeline.resultcache import ResultCache

log = logging.getLogger("evtsync.pipeline")

#: Statuses that are reused when the stage key matches (failures are always retried).
CACHEABLE = (STATUS_DONE, STATUS_NA)
#: Folders of a run that only the run writes (temporaries of killed runs are removed there).
RUN_FOLDERS = ("tables", "fits", "figures", "inputs")


class NotApplicable(Exception):  # noqa: N818 - a stage outcome, not an error
    """Raised by a stage whose computation does not apply to the data, with the reason."""


class Unavailable(Exception):  # noqa: N818 - a stage outcome, not an error
    """Raised by a stage whose module is not installed, with the reason."""


@dataclass
class StageEvent:
    """What happened to a stage, handed to the caller's ``on_stage`` callback."""

    stage: str
    action: str          # "start", "ran", "reused" (this run folder's), "cached" (copied from the result cache)
    status: str = ""
    reason: str = ""
    seconds: float = 0.0
    #: CPU time the stage cost (this process, plus its job's process when it ran in the pool):
    #: its work, where ``seconds`` (wall clock) includes waiting for a job that ran beside others
    cpu_seconds: float = 0.0
    #: for a stage copied from the result cache: where, when and at what cost it was computed
    cached_from: dict[str, Any] = field(default_factory=dict)


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


@contextlib.contextmanager
def _run_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on the run folder so that two runs never write it at once."""
    import fcntl

    lock_path = out / LOCK
    with open(lock_path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise InputError(f"{out}: another `evtsync run` is writing this folder") from exc
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@dataclass
class Stage:
    """One stage: its name, body, the stages it reads, and the parameters of its cache key."""

    name: str
    func: Callable[[Run], dict[str, Any]]
    needs: tuple[str, ...]
    params: Callable[[Run], dict[str, Any]]
    #: the stage's heavy work, runnable in another process: given the run, a picklable
    #: zero-argument callable (or :class:`NotApplicable`); the body gets its result from
    #: :meth:`Run.job_result`
    job: Callable[[Run], Callable[[], Any]] | None = None
    #: run once in each pool process when it starts (a picklable function), e.g. compiling
    #: what every job of the kind compiles first
    job_warm_up: Callable[[], None] | None = None
    #: whether its ``done`` results may be copied into another run folder from the result cache:
    #: only when its outputs are a function of :meth:`Run.result_key` (they name neither the run
    #: folder nor the time, nor read the manifest; a fit's random seed is fixed)
    shareable: bool = False


class Run:
    """State of one pipeline run: options, run folder, manifest and loaded traces."""

    def __init__(self, options: RunOptions, on_stage: Callable[[StageEvent], None] | None = None) -> None:
        self.options = options
        self.out = Path(options.out or default_out(options))
        self.on_stage = on_stage or (lambda event: None)
        self.manifest: dict[str, Any] = {}
        self.workloads: list[Workload] = []
        self._traces: dict[str, Any] = {}
        self._alignments: dict[str, Any] = {}
        self._tax: dict[str, Any] = {}
        #: what :meth:`once` computed: (file, what) -> (the file's size and mtime, value)
        self._once: dict[tuple[Path, str], tuple[Any, Any]] = {}
        #: Dask backend of the run (``workers``/``scheduler``/environment), open during it
        self.backend: Any = None
        self.code = source_digest()
        self.outputs: dict[str, list[str]] = {}
        #: the warnings of a run where logging was not set up (a notebook), each with its count:
        #: (message, count), said in one line at the end (:func:`evtsync.pipeline.run_pipeline`)
        self.warnings: list[tuple[str, int]] = []
        #: per running stage: workload -> why it failed there (the study went on without it)
        self.failures: dict[str, dict[str, str]] = {}
        #: jobs started ahead of their stage (:meth:`start_jobs`): stage name -> future
        self._jobs: dict[str, Any] = {}
        #: every future started in the pool (for the wait bar's count of finished jobs)
        self._started_jobs: list[Any] = []
        self._jobs_considered: set[str] = set()
        #: stage name -> where its job ran, recorded in its manifest entry
        self._job_places: dict[str, str] = {}
        self._job_cpu: dict[str, float] = {}  # CPU seconds of the jobs that ran in the pool, by stage
        self._job_pool: Any = None
        #: the stage results kept across run folders (None: ``--no-result-cache``)
        self.result_cache: ResultCache | None = None
        if options.result_cache is not None:
            from evtsync.pipeline.resultcache import ResultCache

            self.result_cache = ResultCache(options.result_cache)

    def _cache(self) -> ResultCache:
        """The result cache, where the caller has checked it is on (:meth:`_shares`)."""
        if self.result_cache is None:
            raise RuntimeError("the result cache is off (--no-result-cache): no stage shares results")
        return self.result_cache

    def _repr_html_(self) -> str:
        """The run in a notebook: its folder, the answer table (``summary.json``) and its stages."""
        from evtsync.core.display import run_html
        from evtsync.runfolder.layout import SUMMARY_JSON, stage_table

        path = self.out / SUMMARY_JSON
        summary = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        return run_html(self.out, stage_table(self.manifest), summary)

    # ---- files
    def path(self, rel: str) -> Path:
        """Absolute path of a run-folder file."""
        return self.out / rel

    def write_table(self, rel: str, table: pd.DataFrame) -> str:
        """Write a stage output table atomically; returns its relative path."""
        write_table(table, self.path(rel))
        return rel

    def write_json(self, rel: str, data: Any) -> str:
        """Write a stage output JSON atomically; returns its relative path."""
        write_text_atomic(self.path(rel), json.dumps(json_ready(data), indent=2, sort_keys=True))
        return rel

    def remove_outputs(self, rels: Iterable[str]) -> None:
        """Delete outputs the manifest listed that the run no longer writes: each only when it lies
        inside the run folder (:func:`evtsync.core.trust.contained`; :func:`read_manifest` refused a
        manifest naming one outside before the run began, so this is the second check)."""
        from evtsync.core.trust import contained

        for rel in rels:
            path = contained(self.out, rel, f"{self.path(MANIFEST)}: an output")
            if path.is_dir() and not path.is_symlink():
                raise InputError(f"{self.path(MANIFEST)}: output {rel!r} is a folder, not a file the run wrote; "
                                 "refused (was the manifest edited? `evtsync run --force` rebuilds it)")
            path.unlink(missing_ok=True)

    def table(self, rel: str) -> pd.DataFrame:
        """Read a table written by an earlier stage."""
        return read_table(self.path(rel))

    def save_manifest(self) -> None:
        """Rewrite the manifest atomically."""
        self.manifest["updated"] = pd.Timestamp.now(tz="UTC").isoformat()
        write_text_atomic(self.path(MANIFEST), json.dumps(json_ready(self.manifest), indent=2))

    # ---- traces
    def align_options(self) -> dict[str, Any]:
        """Keyword arguments of :func:`evtsync.align_collectives`."""
        from evtsync.sync.collectives import END_TOLERANCE_US, RANKS_PER_HOST, PGOverride

        o = self.options
        return {"overrides": [PGOverride.parse(t) for t in o.pg_overrides],
                "end_tolerance_us": END_TOLERANCE_US if o.end_tolerance_us is None else o.end_tolerance_us,
                "strict": o.strict, "allow_partial": o.allow_partial,
                "ranks_per_host": RANKS_PER_HOST if o.ranks_per_host is None else o.ranks_per_host}

    def traces(self, workload: Workload) -> Any:
        """The loaded :class:`~evtsync.trace.traceset.TraceSet` of a workload (memoised)."""
        if workload.name not in self._traces:
            from evtsync.trace.traceset import load_traces

            o = self.options
            if self.backend is None:
                from evtsync.sync.logtax import inspector_files, stream_tax

                logs = inspector_files(workload.files, o.rank_from)
                if logs is not None:  # NCCL Inspector logs: streamed, memory bounded by the open collectives
                    streamed = stream_tax(logs, salvage=o.salvage, **self.align_options())
                    self._traces[workload.name] = streamed.traces
                    self._alignments[workload.name] = streamed.alignment
                    self._tax[workload.name] = streamed.tables
                    return streamed.traces
            where = ({"client": self.backend.client} if self.backend is not None else {"jobs": o.jobs})
            self._traces[workload.name] = load_traces(workload.files, salvage=o.salvage, cache=o.cache,
                                                      rank_from=o.rank_from, comm_kernels=o.comm_kernels, **where)
        return self._traces[workload.name]

    def alignment(self, workload: Workload) -> Any:
        """The alignment of a workload's collectives (memoised)."""
        traces = self.traces(workload)  # (streamed Inspector logs come aligned and taxed)
        if workload.name not in self._alignments:
            from evtsync.sync.collectives import align_collectives

            self._alignments[workload.name] = align_collectives(traces, backend=self.backend,
                                                                **self.align_options())
        return self._alignments[workload.name]

    def tax(self, workload: Workload) -> Any:
        """The :class:`~evtsync.sync.tax.TaxTables` of a workload's alignment (memoised: the ``tax``
        stage computes them, ``attribution`` reuses them)."""
        alignment = self.alignment(workload)
        if workload.name not in self._tax:
            from evtsync.sync.tax import compute_tax

            self._tax[workload.name] = compute_tax(alignment)
        return self._tax[workload.name]

    # ---- fits
    def fit_tree(self, path: str | Path) -> Any:
        """The fit tree of ``path`` (:func:`evtsync.evt.bayesfit.load_fit`), read once per run:
        compare, prediction, predicted-vs-measured and the report share it. A file rewritten since
        (other size or mtime) is read again. Its ``log_likelihood`` group is not read: none of
        them uses it (compare recomputes the pointwise log-likelihood), and it is most of the
        file (112 MB of a demo fit's ~114)."""
        from evtsync.evt.bayesfit import fit_path, load_fit

        # load_fit names a missing file
        return self._once_at(fit_path(path).resolve(), "fit tree",
                             lambda: load_fit(path, skip=("log_likelihood",)))

    def once(self, rel: str, what: str, compute: Callable[[], Any]) -> Any:
        """``compute()``, computed once per run from the run folder's file ``rel`` (``what`` names the
        value and whatever else it depends on): the stages that need the same value share it. A file
        rewritten since (other size or mtime) computes it again."""
        return self._once_at(self.path(rel).resolve(), what, compute)

    def _once_at(self, path: Path, what: str, compute: Callable[[], Any]) -> Any:
        """:meth:`once` for a resolved ``path``: the value kept with the file's (mtime, size) stamp."""
        stat = path.stat() if path.is_file() else None
        stamp = (stat.st_mtime_ns, stat.st_size) if stat else (-1, -1)
        hit = self._once.get((path, what))
        if hit is None or hit[0] != stamp:
            self._once[(path, what)] = hit = (stamp, compute())
        return hit[1]

    def rank_model(self, rel: str, seed: int, fit: Any = None) -> Any:
        """The run's rank model ``rel`` as the prediction tables take it
        (:class:`~evtsync.evt.rankmodel.RankModelPrediction` with ``seed``), read once per run and its
        tau draws per (cell, n) kept (:func:`evtsync.predict.estimator.cache_expected_max`): prediction
        and predicted-vs-measured share the same draws (issue 45, item 2) instead of drawing them twice.
        The draws of a (cell, n) depend only on the fit, the seed, the cell and n, so the tables are
        those each stage would make alone. A file rewritten since (other size or mtime) is read again.
        ``fit``: the fit the caller has just written to ``rel`` (:meth:`RankModelFit.save`), kept as the
        file's value (stamped with the file as written) instead of read back (issue 48: ~0.5 s a demo)."""
        from evtsync.evt.rankmodel import RankModelPrediction, load_rank_model
        from evtsync.predict.estimator import cache_expected_max

        what = f"rank model, seed {seed}"
        if fit is not None:  # replaces what was kept for the file before it was written
            self._once.pop((self.path(rel).resolve(), what), None)
        return self.once(rel, what, lambda: cache_expected_max(RankModelPrediction(
            fit if fit is not None else load_rank_model(self.path(rel)), seed=seed)))

    def trace_hashes(self) -> dict[str, str]:
        """SHA-256 of every trace file, reusing the manifest's when size and mtime match."""
        known = self.manifest.setdefault("file_hashes", {})
        out = {}
        for w in self.workloads:
            for f in w.files:
                st = f.stat()
                rec = known.get(str(f))
                if not rec or rec.get("size") != st.st_size or rec.get("mtime_ns") != st.st_mtime_ns:
                    rec = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": file_sha256(f)}
                    known[str(f)] = rec
                out[f"{w.name}/{f.name}"] = rec["sha256"]
        return out

    def before_tax(self) -> None:
        """Find the workloads (the demo's once its stage wrote them) and record them in the manifest."""
        if self.options.is_demo:
            if not self.done("demo"):
                entry = self.stage_entry("demo")
                raise EvtsyncError(f"the demo study could not be written: {entry.get('reason', '')}")
            self.workloads = discover_workloads([self.path("inputs/demo")])
        elif not self.workloads:
            self.workloads = discover_workloads(self.options.traces)
        self.manifest["workloads"] = [{"name": w.name, "files": [str(f) for f in w.files]} for w in self.workloads]

    def live_workloads(self) -> list[Workload]:
        """The study's workloads that did not fail in an earlier stage."""
        from evtsync.runfolder.layout import failed_workloads

        failed = failed_workloads(self.manifest)
        return [w for w in self.workloads if w.name not in failed]

    def per_workload(self, stage: str, label: str, body: Callable[[Workload], Any]) -> list[tuple[Workload, Any]]:
        """``body(w)`` for each live workload of the study, each isolated: a workload whose body
        raises the package's own error is recorded as failed in this stage (the manifest's
        ``failed_workloads`` of the stage) and the study goes on with the others. When every
        workload fails, the stage fails (with the one error, or all of them on one line)."""
        from evtsync.core.progress import progress

        live = self.live_workloads()
        results: list[tuple[Workload, Any]] = []
        errors: list[EvtsyncError] = []
        failures = self.failures.setdefault(stage, {})
        for w in progress(live, label, len(live), "workload"):
            try:
                results.append((w, body(w)))
            except OutputError:
                raise  # a full disk is not the workload's fault: the run stops, saying so
            except EvtsyncError as exc:
                failures[w.name] = f"{type(exc).__name__}: {exc}"
                errors.append(exc)
                log.warning("workload %s failed in stage %s; the study goes on without it: %s", w.name, stage, exc)
        if errors and not results:
            if len(errors) == 1:
                raise errors[0]
            raise EvtsyncError("every workload failed: " + "; ".join(f"{n}: {r}" for n, r in failures.items()))
        return results

    # ---- stage bookkeeping
    def stage_entry(self, name: str) -> dict[str, Any]:
        """The manifest record of a stage (empty when it never ran)."""
        return self.manifest.get("stages", {}).get(name, {})

    def done(self, name: str) -> bool:
        """Whether a stage finished with results."""
        return self.stage_entry(name).get("status") == STATUS_DONE

    def require(self, *names: str) -> None:
        """Raise NotApplicable naming the first upstream stage without results."""
        for name in names:
            entry = self.stage_entry(name)
            if entry.get("status") != STATUS_DONE:
                reason = entry.get("reason") or entry.get("status") or "did not run"
                if reason.startswith("needs stage "):
                    raise NotApplicable(reason)
                raise NotApplicable(f"needs stage {name}, which has no results ({reason})")

    def _intact(self, entry: dict[str, Any]) -> bool:
        for rel, digest in entry.get("outputs", {}).items():
            p = self.path(rel)
            if not p.is_file() or file_sha256(p) != digest:
                log.info("output %s is missing or changed; its stage runs again", rel)
                return False
        return True

    def stage_key(self, stage: Stage) -> str:
        """Hash of the stage's parameters, inputs, package version and source digest."""
        from evtsync._version import __version__

        upstream = {n: self.stage_entry(n).get("outputs", {}) | {"status": self.stage_entry(n).get("status")}
                    for n in stage.needs}
        return _key(stage.name, stage.params(self), upstream, __version__, self.code)

    def _portable(self, path: str) -> str:
        """A path as the result key sees it: relative to the run folder when inside it (the demo's
        traces), else absolute."""
        resolved = Path(path).resolve()
        root = self.out.resolve()
        return resolved.relative_to(root).as_posix() if resolved.is_relative_to(root) else str(resolved)

    def result_key(self, stage: Stage, key: str | None = None) -> str:
        """The key of the stage's result in the result cache: its :meth:`stage_key` (name,
        parameters, inputs by content, version, source digest), the versions of the libraries
        whose numbers flow into outputs, the study's workloads and trace files (paths relative
        to the run folder when inside it) and the workloads that failed so far with their reasons
        (they are named in outputs such as a fit's ``workloads_lacking``)."""
        from evtsync.pipeline.resultcache import RESULT_CACHE_MARKER, library_versions
        from evtsync.runfolder.layout import failed_workloads

        workloads = [{"name": w.name, "files": [self._portable(str(f)) for f in w.files]} for w in self.workloads]
        return _key(RESULT_CACHE_MARKER, key or self.stage_key(stage), library_versions(), workloads,
                    failed_workloads(self.manifest))

    def result_probe(self, stage: Stage) -> str:
        """What a result of the stage is stored with besides its key: its name, parameters, version,
        source digest and libraries, without its inputs (known before the run, unlike its key):
        whether the cache may hold a job stage's result decides whether the run warms the pool."""
        from evtsync._version import __version__
        from evtsync.pipeline.resultcache import library_versions

        return _key("probe", stage.name, stage.params(self), __version__, self.code, library_versions())

    def _shares(self, stage: Stage) -> bool:
        """Whether the stage's result may come from (and go to) the result cache."""
        return stage.shareable and self.result_cache is not None and not self.options.force

    def _reusable(self, stage: Stage, key: str) -> bool:
        old = self.manifest.get("stages", {}).get(stage.name, {})
        return (not self.options.force and old.get("key") == key and old.get("status") in CACHEABLE
                and self._intact(old))

    def start_jobs(self, stages: list[Stage], stack: contextlib.ExitStack) -> None:
        """Start, in a process pool, the jobs of ``stages`` that will run (not reused, applicable),
        when there are at least two and ``--jobs`` allows more than one process."""
        jobs = self._job_processes()
        stages = [st for st in stages if st.job is not None and st.name not in self._jobs_considered]
        self._jobs_considered.update(st.name for st in stages)
        if jobs < 2 or len(stages) < 2:
            return
        todo = []
        for stage in stages:
            key = self.stage_key(stage)
            if self._reusable(stage, key):
                continue
            if self._shares(stage) and self._cache().holds(self.result_key(stage, key)):
                continue  # copied when its turn comes (or, if the entry proves damaged, run here)
            try:
                assert stage.job is not None  # stages without a job were filtered out above
                todo.append((stage.name, stage.job(self)))
            except (NotApplicable, Unavailable, EvtsyncError):
                continue  # the body meets the same outcome when it runs, and records it
        if len(todo) < 2:
            return
        if self._job_pool is None:
            self._open_job_pool(min(jobs, len(todo)), stages, stack)
        log.info("starting %d stage jobs in %d processes: %s", len(todo), self._job_pool.processes,
                 ", ".join(name for name, _ in todo))
        for name, fn in todo:
            self._jobs[name] = self._job_pool.submit(functools.partial(_cpu_timed, fn))
            self._started_jobs.append(self._jobs[name])

    def _job_processes(self) -> int:
        import os

        return self.options.jobs or os.cpu_count() or 1

    def _open_job_pool(self, processes: int, stages: list[Stage], stack: contextlib.ExitStack) -> JobPool:
        from evtsync.core.parallel import JobPool

        warm_up = next((st.job_warm_up for st in stages if st.job_warm_up is not None), None)
        self._job_pool = stack.enter_context(JobPool(processes, JOB_PRELOAD, warm_up))
        return self._job_pool

    def warm_job_pool(self, stages: list[Stage], stack: contextlib.ExitStack) -> None:
        """Open the job pool before any stage runs, its processes warming up (imports, the jobs'
        common compilation) on the core the first stages leave idle, when the run is fresh: at
        least two job stages and none of them finished before (a rerun that may reuse them all
        opens no pool), nor all of them kept in the result cache with the same parameters and
        code (:meth:`result_probe`)."""
        jobs = self._job_processes()
        job_stages = [st for st in stages if st.job is not None]
        if jobs < 2 or len(job_stages) < 2 or self._job_pool is not None:
            return
        if any(self.done(st.name) for st in job_stages) and not self.options.force:
            return
        if all(self._shares(st) for st in job_stages):
            probes = {self.result_probe(st) for st in job_stages}
            if self._cache().holds_probe(probes) == probes:
                # a result of each job stage with these parameters and code is in the result
                # cache: most likely copied, so no pool now (it opens later if they must run)
                return
        processes = min(jobs, len(job_stages))
        pool = self._open_job_pool(processes, job_stages, stack)
        for _ in range(processes):  # a task per process makes the pool start them all now
            pool.submit(_nothing)

    def add_worker_cpu(self, stage_name: str, seconds: float) -> None:
        """Count ``seconds`` of CPU spent for the running stage in other processes (e.g. the report's
        figure workers) in its ``cpu_seconds``, as a job's in the pool is."""
        self._job_cpu[stage_name] = self._job_cpu.get(stage_name, 0.0) + float(seconds)

    def job_result(self, stage_name: str, job: Callable[[], Any]) -> Any:
        """The result of the running stage's job: from the pool when :meth:`start_jobs` started it
        (its errors re-raised here), else ``job()`` run now in this process."""
        future = self._jobs.pop(stage_name, None)
        if future is None:
            self._job_places[stage_name] = "this process"
            return job()
        from concurrent.futures.process import BrokenProcessPool

        from evtsync.core.progress import wait_for

        try:
            result, cpu_seconds, records = wait_for(
                future, f"{stage_name}: running in a pool process",
                lambda: f"{sum(f.done() for f in self._started_jobs)} of {len(self._started_jobs)} pool jobs done")
        except BrokenProcessPool as exc:
            log.warning("the process running stage %s died (%s); it runs again in this process", stage_name, exc)
            self._job_places[stage_name] = "this process (after the pool broke)"
            return job()
        self._job_places[stage_name] = f"a pool of {self._job_pool.processes} processes"
        self._job_cpu[stage_name] = cpu_seconds
        for record in records:  # what the job logged in its process, said here, in order
            logging.getLogger(record.name).handle(record)
        return result

    def run_stage(self, stage: Stage) -> None:
        """Reuse the stage when its key matches and its outputs are intact; else run it."""
        stages = self.manifest.setdefault("stages", {})
        key = self.stage_key(stage)
        old = stages.get(stage.name, {})
        if self._reusable(stage, key):
            self._history(stage.name, "reused", old["status"])
            self.on_stage(StageEvent(stage.name, "reused", old["status"], old.get("reason", "")))
            return
        shares = self._shares(stage)
        result_key = self.result_key(stage, key) if shares else ""
        if shares and self._copy_from_cache(stage, key, result_key, old):
            return
        self.on_stage(StageEvent(stage.name, "start"))
        started = time.perf_counter()
        cpu_started = time.process_time()
        entry: dict[str, Any] = {"key": key, "started": pd.Timestamp.now(tz="UTC").isoformat()}
        self.outputs[stage.name] = []
        self.failures[stage.name] = {}
        try:
            summary = stage.func(self) or {}
            entry.update(status=STATUS_DONE, reason="", summary=summary)
        except NotApplicable as exc:
            entry.update(status=STATUS_NA, reason=str(exc))
        except Unavailable as exc:
            entry.update(status=STATUS_UNAVAILABLE, reason=str(exc))
        except OutputError:
            # the disk is full (or the folder unwritable): not a result of the stage. The run stops;
            # the manifest keeps the stage's previous entry, whose hashes no longer match any output
            # replaced meanwhile, so a rerun redoes it
            raise
        except EvtsyncError as exc:
            entry.update(status=STATUS_FAILED, reason=f"{type(exc).__name__}: {exc}")
            log.warning("stage %s failed: %s", stage.name, exc)
        written = self.outputs.pop(stage.name, [])
        failed = self.failures.pop(stage.name, {})
        if failed:
            entry["failed_workloads"] = failed
        if entry["status"] != STATUS_DONE:
            written = []
        entry["outputs"] = {rel: file_sha256(self.path(rel)) for rel in written}
        self.remove_outputs(set(old.get("outputs", {})) - set(entry["outputs"]))
        entry["seconds"] = round(time.perf_counter() - started, 3)
        entry["cpu_seconds"] = round(time.process_time() - cpu_started + self._job_cpu.pop(stage.name, 0.0), 3)
        if stage.name in self._job_places:
            # a job started ahead ran beside others: the stage's seconds are its wait, not its work
            entry["job_ran_in"] = self._job_places.pop(stage.name)
        stages[stage.name] = entry
        self._history(stage.name, "ran", entry["status"])
        if shares and entry["status"] == STATUS_DONE:
            kept: dict[str, Any] = {k: entry[k] for k in ("status", "reason", "summary", "failed_workloads") if k in entry}
            kept["cached_from"] = {"run_folder": str(self.out.resolve()), "computed": entry["started"],
                                   "seconds": entry["seconds"], "cpu_seconds": entry["cpu_seconds"]}
            self._cache().store(result_key, stage.name, self.result_probe(stage), self.out, entry["outputs"],
                                    json_ready(kept))
        self.save_manifest()
        self.on_stage(StageEvent(stage.name, "ran", entry["status"], entry.get("reason", ""), entry["seconds"],
                                 entry["cpu_seconds"]))

    def _copy_from_cache(self, stage: Stage, key: str, result_key: str, old: dict[str, Any]) -> bool:
        """Copy the stage's result from the result cache into the run folder and record it
        (``reused_from_cache``: the key, where, when and at what cost it was computed); False
        when the cache has no usable entry (the stage is computed)."""
        started = time.perf_counter()
        cpu_started = time.process_time()
        when = pd.Timestamp.now(tz="UTC").isoformat()
        hit = self._cache().fetch(result_key, self.out)
        if hit is None:
            return False
        future = self._jobs.pop(stage.name, None)
        if future is not None:  # started before the entry appeared (another run stored it meanwhile)
            future.cancel()
        kept = hit.entry
        entry: dict[str, Any] = {"key": key, "started": when, "status": kept.get("status", STATUS_DONE),
                                 "reason": kept.get("reason", ""), "summary": kept.get("summary", {})}
        if kept.get("failed_workloads"):
            entry["failed_workloads"] = kept["failed_workloads"]
        entry["outputs"] = hit.outputs
        self.remove_outputs(set(old.get("outputs", {})) - set(hit.outputs))
        entry["seconds"] = round(time.perf_counter() - started, 3)
        entry["cpu_seconds"] = round(time.process_time() - cpu_started, 3)
        entry["reused_from_cache"] = {"key": result_key, "cache": str(hit.folder), **kept.get("cached_from", {})}
        self.manifest.setdefault("stages", {})[stage.name] = entry
        self._history(stage.name, "cached", entry["status"])
        self.save_manifest()
        self.on_stage(StageEvent(stage.name, "cached", entry["status"], entry["reason"], entry["seconds"],
                                 entry["cpu_seconds"], kept.get("cached_from", {})))
        return True

    def produced(self, stage: str, *rels: str) -> None:
        """Record output files of the running stage."""
        self.outputs.setdefault(stage, []).extend(rels)

    def _history(self, stage: str, action: str, status: str) -> None:
        hist = self.manifest.setdefault("history", [])
        hist.append({"time": pd.Timestamp.now(tz="UTC").isoformat(), "stage": stage, "action": action,
                     "status": status})
        del hist[:-500]


def _nothing() -> None:
    """A task that only makes the pool start a process."""


class _RecordList(logging.Handler):
    """Keeps the log records of a job run in a pool's worker, to be logged again in the main
    process (whose handler writes them above the progress bars, once each)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        record.msg, record.args = record.getMessage(), None  # picklable, whatever the arguments were
        record.exc_info = record.exc_text = None
        self.records.append(record)


def _cpu_timed(job: Callable[[], Any]) -> tuple[Any, float, list[logging.LogRecord]]:
    """``job()``, the CPU seconds it took in the process that ran it (a pool's worker) and the
    log records it wrote there, which the main process logs when it takes the result."""
    root = logging.getLogger("evtsync")
    keep = _RecordList()
    propagate = root.propagate
    root.addHandler(keep)
    root.propagate = False  # not written by the worker itself, under the main process's bars
    started = time.process_time()
    try:
        result = job()
    finally:
        root.removeHandler(keep)
        root.propagate = propagate
    return result, time.process_time() - started, keep.records


#: Modules the fork server of the job pool imports once for every process: the fit's and the
#: model's (PyMC, PyTensor, numba), nutpie and ArviZ's stats. Missing ones are skipped by multiprocessing.
JOB_PRELOAD = ("evtsync.evt.fit", "evtsync.evt.model", "nutpie", "arviz_stats")


def clean_temporaries(out: Path) -> int:
    """Remove temporary files that evtsync's atomic writes left in the run's own folders when a
    run was killed (``.NAME.XXXXXXXX.evtsync.tmp``); no other file is touched."""
    count = 0
    places = [out] + [out / name for name in RUN_FOLDERS if (out / name).is_dir()]
    for place in places:
        pattern = f"**/.*{TEMP_SUFFIX}" if place != out else f".*{TEMP_SUFFIX}"
        for p in place.glob(pattern):
            if p.is_file():
                p.unlink(missing_ok=True)
                count += 1
    if count:
        log.info("removed %d temporary file(s) left by an interrupted run", count)
    return count


def execute(run: Run, build_stages: Callable[[Run], list[Stage]]) -> Run:
    """Run (or resume) the stages of ``build_stages(run)`` into ``run.out``; returns the run.

    Stage failures (package errors) are recorded, not raised; the caller reads
    ``run.manifest["stages"]``.
    """
    import dataclasses

    from evtsync.core.parallel import optional_dask
    from evtsync.core.progress import progress
    from evtsync.runfolder.layout import MANIFEST_FORMAT, read_manifest

    options = run.options
    options.check()
    # refusals that need no lock come before the run folder (and its lock) is made: a refused run
    # leaves nothing behind; both are checked again under the lock
    if not options.force:
        read_manifest(run.out)
    build_stages(run)  # an unknown --model or an empty --models-dir
    try:
        run.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"--out {run.out}: cannot create the run folder: {exc.strerror or exc}") from exc
    with _run_lock(run.out), contextlib.ExitStack() as stack:
        # one Dask cluster (if asked for) for the whole run: reading, alignment, blocks
        run.backend = stack.enter_context(optional_dask(options.scheduler, options.workers, options.jobs))
        stack.callback(setattr, run, "backend", None)  # the run outlives its cluster
        if options.is_demo:
            # the bundled demo's traces are read once per installation: they use the compiled trace
            # scanner where it is built, but do not build it (~10 s of CPU to save ~0.7 s here)
            from evtsync.trace.decode import scanner_build_deferred

            stack.enter_context(scanner_build_deferred())
        clean_temporaries(run.out)
        try:
            old = read_manifest(run.out)
        except InputError:
            if not options.force:
                raise
            log.warning("%s: unreadable manifest replaced (--force); every stage runs again", run.out / MANIFEST)
            old = {}
        run.manifest = old or {"format": MANIFEST_FORMAT, "created": pd.Timestamp.now(tz="UTC").isoformat()}
        from evtsync._version import __version__
        from evtsync.core.defaults import INTERVAL_LEVEL

        run.manifest.update({
            "format": MANIFEST_FORMAT, "evtsync_version": __version__, "source_digest": run.code,
            "demo": options.is_demo,
            "options": {k: v for k, v in dataclasses.asdict(options).items() if k not in ("force",)},
            "backend": run.backend.name if run.backend is not None else "local",
            "sampling": options.sampling(), "level": INTERVAL_LEVEL,
        })
        stages = build_stages(run)
        run.manifest["stage_order"] = [st.name for st in stages]
        for name in list(run.manifest.get("stages", {})):
            if name not in run.manifest["stage_order"]:
                run.remove_outputs(run.manifest["stages"][name].get("outputs", {}))
                del run.manifest["stages"][name]
        # the manifest before any output (issue 47): a run stopped at any point from here on (a full
        # disk in its first stage) leaves a folder that a rerun recognises as its own, and resumes
        run.save_manifest()
        finished: set[str] = set()
        if not options.is_demo:
            # the trace paths first: a bad one is refused before the job pool opens (its processes
            # import the samplers, 10-20 s on 2 cores, which a refusal would wait for)
            run.before_tax()
        run.warm_job_pool(stages, stack)
        for i, stage in enumerate(progress(stages, "evtsync run", len(stages), "stage")):
            if stage.name == "tax":
                run.before_tax()
            # the jobs of this and later stages whose inputs are ready start now, so that they run
            # beside this stage (and one another)
            run.start_jobs([s for s in stages[i:] if s.job is not None and set(s.needs) <= finished], stack)
            run.run_stage(stage)
            finished.add(stage.name)
        run.save_manifest()
    return run
