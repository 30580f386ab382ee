"""The main job: traces → tax → attribution → z-scores → fits → predictions → report.

``run_pipeline(RunOptions(...))`` runs the stages of a study in order and writes every
stage's output into one run folder as soon as the stage finishes:

=====================  ==============================================  =====================
stage                  what it computes (SPEC section)                 outputs
=====================  ==============================================  =====================
demo                   the bundled synthetic study (demo run only)     ``inputs/demo/``
tax                    alignment and synchronization tax (§2, §3)      ``tables/tax_*.parquet``
attribution            critical-path causes of the straggler (§4)      ``tables/attribution_*``
zscores                compute blocks and pooled z-scores (§5)         ``tables/zscores.parquet``
mle                    Gumbel/GEV maximum likelihood per cell (§6)     ``tables/mle.parquet``
fit-<model>            Bayesian fit of each ``models/*.toml`` (§6)     ``fits/<model>.nc``
compare                PSIS-LOO comparison of the fits (§6)            ``tables/compare.parquet``
prediction             tau(n) and B* with credible bands (§7, §8)      ``tables/tau.parquet`` …
predicted-vs-measured  predicted vs measured straggler delay (§7)      ``tables/predicted_vs_measured.parquet``
report                 HTML report, Markdown summary, figures          ``report.html`` …
=====================  ==============================================  =====================

Caching. Each stage has a key: the SHA-256 of its parameters, the content hashes of the
files it reads (trace files, or the outputs of the stages it depends on), the package
version and a digest of the package's source. The manifest ``manifest.json`` records each
stage's key, status and the SHA-256 of each output; a stage whose key matches and whose
outputs are intact is reused, otherwise it runs again (``force`` redoes every stage). Every
output and the manifest are written atomically (temporary file + rename) and the manifest
is rewritten after each stage, so a run killed at any point leaves finished stages intact
and the next run resumes after them.

Stages that do not apply to the data (no tensor-parallel blocks, no GEMM blocks, too few
z-scores, one cell only) are recorded as ``not_applicable`` with the reason; stages whose
module is not installed as ``unavailable``; stages that raised as ``failed`` with the
message. The report lists them all.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evtsync.defaults import (  # noqa: F401 - re-exported: callers read them here
    DEFAULT_CHAINS,
    DEFAULT_DRAWS,
    DEFAULT_TUNE,
    DEMO_CHAINS,
    DEMO_DRAWS,
    DEMO_TUNE,
    INTERVAL_LEVEL,
)
from evtsync.errors import EvtsyncError, InputError
from evtsync.parallel import optional_dask
from evtsync.progress import progress
from evtsync.tableio import file_sha256, read_table, write_table, write_text_atomic

log = logging.getLogger("evtsync.run")

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "evtsync-run/1"
TABLES = "tables"
FITS = "fits"

#: Settings of the demo study (see :func:`evtsync.synth.study`).
DEMO_STUDY = "demo"
DEMO_OVERRIDES: dict[str, Any] = {"gzip": True}

#: Fewest z-scores for a maximum-likelihood GEV fit of a cell, and for a Bayesian fit.
MIN_Z_MLE = 20
MIN_Z_BAYES = 30
#: Central credible / confidence level of every interval the run reports.
LEVEL = INTERVAL_LEVEL
#: Largest domain size of the tau(n) and B* curves.
N_MAX = 4096
TOPOLOGIES = ("full", "ring", "torus3d")

STATUS_DONE = "done"
STATUS_NA = "not_applicable"
STATUS_UNAVAILABLE = "unavailable"
STATUS_FAILED = "failed"
#: Statuses that are reused when the stage key matches (failures are always retried).
CACHEABLE = (STATUS_DONE, STATUS_NA)


class NotApplicable(Exception):  # noqa: N818 - a stage outcome, not an error
    """Raised by a stage whose computation does not apply to the data, with the reason."""


class Unavailable(Exception):  # noqa: N818 - a stage outcome, not an error
    """Raised by a stage whose module is not installed, with the reason."""


@dataclass
class RunOptions:
    """Everything that defines a run. ``traces`` empty means the bundled demo study."""

    traces: list[str] = field(default_factory=list)
    out: Path | None = None
    force: bool = False
    draws: int | None = None
    tune: int | None = None
    chains: int | None = None
    seed: int = 0
    sampler: str = "nutpie"
    block_pg: str | None = None
    pg_overrides: list[str] = field(default_factory=list)
    m: int = 4
    time: str = "busy"
    models_dir: Path | None = None
    models: list[str] = field(default_factory=list)
    alpha_us: float = 5.0
    bytes: float | None = None
    eps: float = -0.5
    salvage: bool = False
    jobs: int | None = None
    workers: int | None = None
    scheduler: str | None = None
    cache: str | None = None
    strict: bool = True
    allow_partial: bool = False
    end_tolerance_us: float | None = None
    ranks_per_host: int | None = None
    report: bool = True
    demo_overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def is_demo(self) -> bool:
        """Whether this run uses the bundled demo study."""
        return not self.traces

    def sampling(self) -> dict[str, int]:
        """Draws, tune and chains: the user's, else the demo's or the real-run defaults."""
        d, t, c = (DEMO_DRAWS, DEMO_TUNE, DEMO_CHAINS) if self.is_demo else \
            (DEFAULT_DRAWS, DEFAULT_TUNE, DEFAULT_CHAINS)
        return {"draws": int(self.draws or d), "tune": int(self.tune or t), "chains": int(self.chains or c)}


@dataclass
class Workload:
    """One job's traces: a name and its trace files."""

    name: str
    files: list[Path]


@dataclass
class StageEvent:
    """What happened to a stage, handed to the caller's ``on_stage`` callback."""

    stage: str
    action: str          # "start", "ran", "reused"
    status: str = ""
    reason: str = ""
    seconds: float = 0.0


# --------------------------------------------------------------------------- helpers

def default_models_dir() -> Path:
    """The folder of the shipped model specifications (see :mod:`evtsync.evt.catalog`)."""
    from evtsync.evt.catalog import default_models_dir as catalog_dir

    return catalog_dir()


def default_out(options: RunOptions) -> Path:
    """``fits/demo`` for the demo, else ``fits/<name of the (first) trace folder>``."""
    if options.is_demo:
        return Path("fits") / "demo"
    first = Path(options.traces[0])
    name = first.name if first.is_dir() else first.parent.name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return Path("fits") / (name or "run")


def _has_traces(folder: Path) -> bool:
    return any(p.is_file() and p.name.lower().endswith((".json", ".json.gz")) for p in folder.iterdir())


def discover_workloads(paths: Sequence[str | os.PathLike[str]]) -> list[Workload]:
    """Workloads from TRACES: a folder of traces is one workload; a folder of such folders
    (or of ``<name>/traces/`` folders, as ``evtsync synth`` writes) is a study of several;
    loose files together form one workload named after their folder."""
    from evtsync.trace.traceset import expand_paths

    workloads: list[Workload] = []
    loose: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_dir() and not _has_traces(path):
            subs = sorted(p for p in path.iterdir() if p.is_dir())
            found = []
            for sub in subs:
                folder = sub / "traces" if (sub / "traces").is_dir() else sub
                if _has_traces(folder):
                    found.append(Workload(sub.name, expand_paths([folder])))
            if (path / "traces").is_dir() and _has_traces(path / "traces"):
                found = [Workload(path.name, expand_paths([path / "traces"]))]
            if not found:
                raise InputError(f"{path}: holds no trace files (*.json, *.json.gz) and no folders of them")
            workloads.extend(found)
        elif path.is_dir():
            workloads.append(Workload(path.name, expand_paths([path])))
        else:
            loose.extend(expand_paths([path]))
    if loose:
        parents = {p.parent.name for p in loose}
        workloads.append(Workload(parents.pop() if len(parents) == 1 else "traces", loose))
    names = [w.name for w in workloads]
    for i, w in enumerate(workloads):
        if names.count(w.name) > 1:
            w.name = f"{w.name}-{i}"
    return workloads


@functools.cache
def source_digest() -> str:
    """SHA-256 over the package's Python sources: a code change invalidates cached stages.

    Computed once per process, so that a run is judged against the code it runs with."""
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _json_ready(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Path):
        return str(value)
    return value


def read_manifest(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a run folder (empty dict when there is none)."""
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable run manifest: {exc}") from exc
    if data.get("format") != MANIFEST_FORMAT:
        raise InputError(f"{path}: not an evtsync run manifest (format {data.get('format')!r})")
    return data


@contextlib.contextmanager
def _run_lock(out: Path) -> Iterator[None]:
    """Hold an exclusive lock on the run folder so that two runs never write it at once."""
    import fcntl

    lock_path = out / ".lock"
    with open(lock_path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            raise InputError(f"{out}: another `evtsync run` is writing this folder") from exc
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# --------------------------------------------------------------------------- the run

@dataclass
class _Stage:
    name: str
    func: Callable[[Run], dict[str, Any]]
    needs: tuple[str, ...]
    params: Callable[[Run], dict[str, Any]]


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
        #: Dask backend of the run (``workers``/``scheduler``/environment), open during it
        self.backend: Any = None
        self.code = source_digest()
        self.outputs: dict[str, list[str]] = {}

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
        write_text_atomic(self.path(rel), json.dumps(_json_ready(data), indent=2, sort_keys=True))
        return rel

    def table(self, rel: str) -> pd.DataFrame:
        """Read a table written by an earlier stage."""
        return read_table(self.path(rel))

    def save_manifest(self) -> None:
        """Rewrite the manifest atomically."""
        self.manifest["updated"] = pd.Timestamp.now(tz="UTC").isoformat()
        write_text_atomic(self.path(MANIFEST), json.dumps(_json_ready(self.manifest), indent=2))

    # ---- traces
    def align_options(self) -> dict[str, Any]:
        """Keyword arguments of :func:`evtsync.align_collectives`."""
        from evtsync.collectives import END_TOLERANCE_US, RANKS_PER_HOST, PGOverride

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
            where = ({"client": self.backend.client} if self.backend is not None else {"jobs": o.jobs})
            self._traces[workload.name] = load_traces(workload.files, salvage=o.salvage, cache=o.cache, **where)
        return self._traces[workload.name]

    def alignment(self, workload: Workload) -> Any:
        """The alignment of a workload's collectives (memoised)."""
        if workload.name not in self._alignments:
            from evtsync.collectives import align_collectives

            self._alignments[workload.name] = align_collectives(self.traces(workload), backend=self.backend,
                                                                **self.align_options())
        return self._alignments[workload.name]

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

    def stage_key(self, stage: _Stage) -> str:
        """Hash of the stage's parameters, inputs, package version and source digest."""
        from evtsync import __version__

        upstream = {n: self.stage_entry(n).get("outputs", {}) | {"status": self.stage_entry(n).get("status")}
                    for n in stage.needs}
        return _key(stage.name, stage.params(self), upstream, __version__, self.code)

    def run_stage(self, stage: _Stage) -> None:
        """Reuse the stage when its key matches and its outputs are intact; else run it."""
        stages = self.manifest.setdefault("stages", {})
        key = self.stage_key(stage)
        old = stages.get(stage.name, {})
        if (not self.options.force and old.get("key") == key and old.get("status") in CACHEABLE
                and self._intact(old)):
            self._history(stage.name, "reused", old["status"])
            self.on_stage(StageEvent(stage.name, "reused", old["status"], old.get("reason", "")))
            return
        self.on_stage(StageEvent(stage.name, "start"))
        started = time.perf_counter()
        entry: dict[str, Any] = {"key": key, "started": pd.Timestamp.now(tz="UTC").isoformat()}
        self.outputs[stage.name] = []
        try:
            summary = stage.func(self) or {}
            entry.update(status=STATUS_DONE, reason="", summary=summary)
        except NotApplicable as exc:
            entry.update(status=STATUS_NA, reason=str(exc))
        except Unavailable as exc:
            entry.update(status=STATUS_UNAVAILABLE, reason=str(exc))
        except EvtsyncError as exc:
            entry.update(status=STATUS_FAILED, reason=f"{type(exc).__name__}: {exc}")
            log.warning("stage %s failed: %s", stage.name, exc)
        except (ArithmeticError, LookupError, ValueError, TypeError, RuntimeError, OSError) as exc:
            entry.update(status=STATUS_FAILED, reason=f"{type(exc).__name__}: {exc}")
            log.warning("stage %s failed", stage.name, exc_info=True)
        written = self.outputs.pop(stage.name, [])
        if entry["status"] != STATUS_DONE:
            written = []
        entry["outputs"] = {rel: file_sha256(self.path(rel)) for rel in written}
        for rel in set(old.get("outputs", {})) - set(entry["outputs"]):
            self.path(rel).unlink(missing_ok=True)
        entry["seconds"] = round(time.perf_counter() - started, 3)
        stages[stage.name] = entry
        self._history(stage.name, "ran", entry["status"])
        self.save_manifest()
        self.on_stage(StageEvent(stage.name, "ran", entry["status"], entry.get("reason", ""), entry["seconds"]))

    def produced(self, stage: str, *rels: str) -> None:
        """Record output files of the running stage."""
        self.outputs.setdefault(stage, []).extend(rels)

    def _history(self, stage: str, action: str, status: str) -> None:
        hist = self.manifest.setdefault("history", [])
        hist.append({"time": pd.Timestamp.now(tz="UTC").isoformat(), "stage": stage, "action": action,
                     "status": status})
        del hist[:-500]


# --------------------------------------------------------------------------- stages

def _stage_demo(run: Run) -> dict[str, Any]:
    try:
        from evtsync.synth import study
    except ImportError as exc:
        raise Unavailable(f"evtsync.synth is not installed ({exc})") from exc
    folder = run.path("inputs/demo")
    overrides = {**DEMO_OVERRIDES, **run.options.demo_overrides}
    results = study(folder, DEMO_STUDY, **overrides)
    files = []
    for res in results:
        files.extend(str(p.relative_to(run.out)) for p in sorted(res.traces.values()))
        files.append(str(res.truth_path.relative_to(run.out)))
    run.produced("demo", *files)
    return {"workloads": [r.out_dir.name for r in results], "files": len(files)}


def _tag(table: pd.DataFrame, workload: str, gpu: str) -> pd.DataFrame:
    table = table.copy()
    table.insert(0, "workload", workload)
    table.insert(1, "gpu", gpu)
    return table


def _gpu_of(traces: Any) -> str:
    gpus = traces.ranks["gpu"].astype(str)
    return str(gpus.mode().iloc[0]) if len(gpus) else "unknown"


def _stage_tax(run: Run) -> dict[str, Any]:
    from evtsync.tax import compute_tax, tax_summary

    parts: dict[str, list[pd.DataFrame]] = {k: [] for k in
                                            ("collectives", "ranks", "summary", "groups", "mismatches", "traces")}
    for w in progress(run.workloads, "tax", len(run.workloads), "workload"):
        traces = run.traces(w)
        gpu = _gpu_of(traces)
        alignment = run.alignment(w)
        tables = compute_tax(alignment)
        parts["collectives"].append(_tag(tables.collectives, w.name, gpu))
        parts["ranks"].append(_tag(tables.ranks, w.name, gpu))
        parts["summary"].append(_tag(tax_summary(tables), w.name, gpu))
        parts["groups"].append(_tag(alignment.groups, w.name, gpu))
        parts["mismatches"].append(_tag(alignment.mismatches, w.name, gpu))
        info = traces.ranks.drop(columns=[c for c in ("path",) if c in traces.ranks]).copy()
        info["file"] = traces.ranks["path"].map(lambda p: Path(str(p)).name)
        parts["traces"].append(_tag(info.drop(columns=["gpu"]), w.name, gpu))
    counts = {}
    for name, frames in parts.items():
        frames = [f for f in frames if len(f)] or frames[:1]
        table = pd.concat(frames, ignore_index=True)
        for col in table.columns:
            if table[col].dtype == object:
                table[col] = table[col].map(lambda v: v if v is None or isinstance(v, str | int | float | bool)
                                            else str(v))
        run.produced("tax", run.write_table(f"{TABLES}/tax_{name}.parquet", table))
        counts[name] = len(table)
    if counts["collectives"] == 0:
        log.warning("no collectives in any workload")
    return {"workloads": len(run.workloads), "collectives": counts["collectives"],
            "mismatches": counts["mismatches"]}


def _stage_attribution(run: Run) -> dict[str, Any]:
    try:
        from evtsync.critpath.attribution import attribute
    except ImportError as exc:
        raise Unavailable(f"evtsync.critpath is not installed ({exc})") from exc
    run.require("tax")
    collectives, summaries, validations = [], [], []
    reasons = []
    for w in progress(run.workloads, "attribution", len(run.workloads), "workload"):
        traces = run.traces(w)
        gpu = _gpu_of(traces)
        alignment = run.alignment(w)
        if alignment.instances.empty:
            reasons.append(f"{w.name}: no collectives")
            continue
        try:
            result = attribute(traces, alignment=alignment)
        except InputError as exc:
            reasons.append(f"{w.name}: {exc}")
            continue
        collectives.append(_tag(result.collectives, w.name, gpu))
        summary = result.summary.copy()
        summary["gpu_only_share"] = result.gpu_only_share
        summaries.append(_tag(summary, w.name, gpu))
        validations.append(_tag(result.validation, w.name, gpu))
    if not collectives:
        raise NotApplicable("no collective to attribute: " + "; ".join(reasons))
    table = pd.concat(collectives, ignore_index=True)
    run.produced("attribution",
                 run.write_table(f"{TABLES}/attribution_collectives.parquet", _stringify(table)),
                 run.write_table(f"{TABLES}/attribution_summary.parquet",
                                 _stringify(pd.concat(summaries, ignore_index=True))),
                 run.write_table(f"{TABLES}/attribution_validation.parquet",
                                 _stringify(pd.concat(validations, ignore_index=True))))
    ok = table[table["status"] == "ok"]
    return {"collectives": len(table), "attributed": len(ok),
            "gpu_only_share": float((ok["path_kind"] == "gpu_only").mean()) if len(ok) else None,
            "skipped_workloads": reasons}


def _stringify(table: pd.DataFrame) -> pd.DataFrame:
    """Object columns with mixed values as strings, so that Parquet can store them."""
    table = table.copy()
    for col in table.columns:
        if table[col].dtype == object:
            values = table[col]
            types = {type(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))}
            if len(types) > 1 or (types and not types <= {str, bool, int, float}):
                table[col] = values.map(lambda v: None if v is None else str(v))
    return table


def _stage_zscores(run: Run) -> dict[str, Any]:
    try:
        from evtsync.blocks import compute_zscores
    except ImportError as exc:
        raise Unavailable(f"evtsync.blocks is not installed ({exc})") from exc
    run.require("tax")
    o = run.options
    tables, dropped, reasons = [], [], []
    for w in progress(run.workloads, "blocks and z-scores", len(run.workloads), "workload"):
        traces = run.traces(w)
        alignment = run.alignment(w)
        try:
            table, blocks = compute_zscores(traces, alignment=alignment, pg=o.block_pg, m=o.m, time=o.time,
                                            workload=w.name, backend=run.backend)
        except InputError as exc:
            reasons.append(f"{w.name}: {exc}")
            continue
        if len(blocks.dropped):
            dropped.append(blocks.dropped.assign(workload=w.name))
        if table.empty:
            why = blocks.dropped["reason"].value_counts() if len(blocks.dropped) else pd.Series(dtype=int)
            detail = ", ".join(f"{n} {r}" for r, n in why.items()) or "no blocks between the collectives"
            reasons.append(f"{w.name}: no compute block with GEMM kernels kept (block samples dropped: {detail})")
            continue
        tables.append(table)
    if dropped:
        run.produced("zscores", run.write_table(f"{TABLES}/blocks_dropped.parquet",
                                                _stringify(pd.concat(dropped, ignore_index=True))))
    if not tables:
        raise NotApplicable("; ".join(reasons) or "no workloads")
    z = _stringify(pd.concat(tables, ignore_index=True))
    run.produced("zscores", run.write_table(f"{TABLES}/zscores.parquet", z))
    drops = pd.concat(dropped, ignore_index=True)["reason"].value_counts().to_dict() if dropped else {}
    not_tp = []
    for w in run.workloads:
        groups = run.alignment(w).groups
        used = groups[groups["pg"].astype(str).isin(z.loc[z["workload"] == w.name, "pg"].astype(str))]
        text = (used["pg_desc"].astype(str) + " " + used["pg_name"].astype(str)).str.lower()
        if len(used) and not text.str.contains(r"(?<![a-z])(?:tp|tensor)", regex=True).any():
            not_tp.append(f"{w.name}: PG {', '.join(used['pg'].astype(str))} ({', '.join(used['pg_desc'].astype(str))})")
    return {"zscores": len(z), "cells": _cells(z).to_dict(orient="records"), "skipped_workloads": reasons,
            "dropped": {str(k): int(v) for k, v in drops.items()},
            "not_tensor_parallel": not_tp,
            "block_pgs": sorted(z["pg"].astype(str).unique().tolist()) if "pg" in z else []}


def _drop_note(run: Run) -> str:
    """``; block samples dropped: N reason, …`` from the z-score stage's summary, or empty."""
    summary = run.stage_entry("zscores").get("summary", {})
    note = ""
    if summary.get("not_tensor_parallel"):
        note += ("; no tensor-parallel process group, blocks were cut between the collectives of "
                 + "; ".join(summary["not_tensor_parallel"]))
    if summary.get("dropped"):
        note += "; block samples dropped: " + ", ".join(f"{n} {reason}" for reason, n in summary["dropped"].items())
    return note


def _cells(z: pd.DataFrame) -> pd.DataFrame:
    return z.groupby(["gpu", "precision"], sort=True).size().rename("n").reset_index()


def _stage_mle(run: Run) -> dict[str, Any]:
    from scipy import stats

    from evtsync.evt import mle

    run.require("zscores")
    z = run.table(f"{TABLES}/zscores.parquet")
    groups = [("all", "all", z["z"].to_numpy(float))]
    groups += [(g, p, sub["z"].to_numpy(float)) for (g, p), sub in z.groupby(["gpu", "precision"], sort=True)]
    rows = []
    for gpu, precision, values in groups:
        values = values[np.isfinite(values)]
        if len(values) < MIN_Z_MLE:
            rows.append({"gpu": gpu, "precision": precision, "family": "gev", "n": len(values),
                         "note": f"fewer than {MIN_Z_MLE} z-scores: not fitted"})
            continue
        gum = mle.fit_gumbel(values)
        gev = mle.fit_gev(values)
        try:
            lo, hi = mle.profile_ci_xi(values, gev, level=LEVEL)
        except (EvtsyncError, ValueError, RuntimeError) as exc:
            log.info("profile interval of xi (%s %s): %s", gpu, precision, exc)
            lo, hi = float("nan"), float("nan")
        deviance = max(0.0, 2.0 * (gev.loglik - gum.loglik))
        pvalue = float(stats.chi2.sf(deviance, 1))
        zq = stats.norm.ppf(0.5 + LEVEL / 2)
        for fit in (gum, gev):
            row = {"gpu": gpu, "precision": precision, "family": fit.family, "n": fit.n,
                   "mu": fit.mu, "mu_se": fit.se.get("mu"), "sigma": fit.sigma, "sigma_se": fit.se.get("sigma"),
                   "xi": fit.xi, "xi_se": fit.se.get("xi", 0.0), "loglik": fit.loglik, "aic": fit.aic,
                   "converged": bool(fit.converged), "note": fit.message}
            for name in ("mu", "sigma"):
                se = row[f"{name}_se"]
                row[f"{name}_lo"] = row[name] - zq * se if se is not None else float("nan")
                row[f"{name}_hi"] = row[name] + zq * se if se is not None else float("nan")
            if fit.family == "gev":
                row.update(xi_lo=lo, xi_hi=hi, lrt_deviance=deviance, lrt_pvalue=pvalue)
            else:
                row.update(xi_lo=0.0, xi_hi=0.0)
            rows.append(row)
    table = pd.DataFrame(rows)
    if "mu" not in table:
        raise NotApplicable(f"no GPU × precision cell has {MIN_Z_MLE} z-scores for a maximum-likelihood fit "
                            f"({len(z)} in all{_drop_note(run)})")
    run.produced("mle", run.write_table(f"{TABLES}/mle.parquet", table))
    return {"fits": len(table)}


def _model_paths(run: Run) -> list[Path]:
    from evtsync.evt.catalog import model_paths, models_dir

    folder = models_dir(run.options.models_dir)
    paths = model_paths(folder)
    if not paths:
        raise InputError(f"{folder}: holds no model specifications (*.toml); give --models-dir DIR of them")
    if run.options.models:
        wanted = set(run.options.models)
        paths = [p for p in paths if p.stem in wanted]
        missing = wanted - {p.stem for p in paths}
        if missing:
            raise InputError(f"--model {', '.join(sorted(missing))}: not in {folder}")
    return paths


def _fit_stage(model_path: Path) -> Callable[[Run], dict[str, Any]]:
    def stage(run: Run) -> dict[str, Any]:
        from evtsync.evt.fit import fit_table, save_fit
        from evtsync.evt.spec import load_spec
        from evtsync.progress import progress_enabled

        run.require("zscores")
        spec = load_spec(model_path)
        rel = f"{TABLES}/zscores.parquet"
        z = run.table(rel)
        z = z[np.isfinite(pd.to_numeric(z[spec.column], errors="coerce"))]
        if len(z) < MIN_Z_BAYES:
            raise NotApplicable(f"{len(z)} z-scores, fewer than {MIN_Z_BAYES} for a Bayesian fit{_drop_note(run)}")
        if spec.groups:
            missing = [g for g in spec.groups if g not in z.columns]
            if missing:
                raise NotApplicable(f"the z-score table has no column(s) {missing} named by data.groups")
            n_cells = len(z.groupby(list(spec.groups)))
            if n_cells < 2:
                raise NotApplicable(f"one {' × '.join(spec.groups)} cell only: the per-cell model is the pooled one")
            if spec.xi.structure == "additive":
                levels = {f: z[f].nunique() for f in spec.xi.factors}
                if all(v < 2 for v in levels.values()):
                    raise NotApplicable(f"every factor of xi has one level ({levels}): nothing to pool")
        s = run.options.sampling()
        tree = fit_table(z, spec, draws=s["draws"], tune=s["tune"], chains=s["chains"], seed=run.options.seed,
                         sampler=run.options.sampler, source=str(run.path(rel)),
                         source_sha256=file_sha256(run.path(rel)), command="evtsync run",
                         progress=progress_enabled())
        out = f"{FITS}/{spec.name}.nc"
        save_fit(tree, run.path(out))
        run.produced(f"fit-{model_path.stem}", out)
        return {"model": spec.name, "family": spec.family, "n_obs": int(tree.attrs["n_obs"]),
                "converged": bool(int(tree.attrs["converged"])), "convergence": tree.attrs["convergence"],
                "sampling_seconds": float(tree.attrs.get("sampling_seconds", 0.0)), **s}
    return stage


def fitted_models(run_dir: Path, manifest: dict[str, Any]) -> dict[str, Path]:
    """Model name -> netCDF path of every Bayesian fit of a run that has results."""
    out = {}
    for name, entry in manifest.get("stages", {}).items():
        if name.startswith("fit-") and entry.get("status") == STATUS_DONE:
            for rel in entry.get("outputs", {}):
                out[Path(rel).stem] = run_dir / rel
    return out


def compare_fits(trees: dict[str, Any]) -> tuple[pd.DataFrame, str]:
    """PSIS-LOO comparison of fits of the same z-scores (:func:`evtsync.evt.compare.compare_fits`):
    one row per model, best first, and the verdict in words.

    Columns: rank, model, family, elpd_loo, se, p_loo, elpd_diff (best minus this model),
    dse (standard error of that difference), n_bad_k (observations with Pareto k > 0.7),
    converged.
    """
    from evtsync.errors import FitError
    from evtsync.evt import compare

    if len(trees) < 2:
        raise NotApplicable(f"{len(trees)} fitted model(s): nothing to compare")
    try:
        table, verdict = compare.compare_fits(list(trees.values()))
    except FitError as exc:
        raise NotApplicable(str(exc)) from exc
    table = table.rename(columns={"diff_se": "dse"})
    table["n_bad_k"] = table["k_bad"].astype(int) + table["k_very_bad"].astype(int)
    return table, verdict


def _load_trees(run: Run) -> dict[str, Any]:
    from evtsync.evt.fit import load_fit

    return {name: load_fit(path) for name, path in fitted_models(run.out, run.manifest).items()}


def _stage_compare(run: Run) -> dict[str, Any]:
    trees = _load_trees(run)
    table, verdict = compare_fits(trees)
    run.produced("compare", run.write_table(f"{TABLES}/compare.parquet", table))
    return {"models": table["model"].tolist(), "best": table["model"].iloc[0], "verdict": verdict}


def main_model(run_dir: Path, manifest: dict[str, Any]) -> str | None:
    """The model predictions are reported with: the best converged model by LOO, else the
    best by LOO, else the hierarchical GEV, else any fitted model."""
    fitted = fitted_models(run_dir, manifest)
    if not fitted:
        return None
    cmp_path = run_dir / TABLES / "compare.parquet"
    if manifest.get("stages", {}).get("compare", {}).get("status") == STATUS_DONE and cmp_path.is_file():
        table = read_table(cmp_path)
        table = table[table["model"].isin(fitted)]
        conv = table[table["converged"].astype(bool)]
        if len(conv):
            return str(conv.iloc[0]["model"])
        if len(table):
            return str(table.iloc[0]["model"])
    for preferred in ("gev-hier-gpu-precision", "gev", "gumbel"):
        if preferred in fitted:
            return preferred
    return sorted(fitted)[0]


def cell_draws(tree: Any, gpu: str, precision: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Posterior draws (flattened) of mu, sigma, xi for a GPU × precision cell of a fit.

    Pooled fits (one cell) give their single cell for every GPU × precision.
    """
    from evtsync.evt.fit import cell_parameters

    params = cell_parameters(tree)
    cells = tree["cells"].to_dataset()
    idx = 0
    if "gpu" in cells and "precision" in cells:
        match = np.flatnonzero((cells["gpu"].values.astype(str) == gpu)
                               & (cells["precision"].values.astype(str) == precision))
        if match.size == 0:
            raise KeyError(f"{gpu}|{precision}")
        idx = int(match[0])
    elif cells.sizes["cell"] > 1:
        raise KeyError(f"{gpu}|{precision}")
    return tuple(params[p].isel(cell=idx).values.ravel() for p in ("mu", "sigma", "xi"))  # type: ignore[return-value]


def block_scale(z: pd.DataFrame) -> pd.DataFrame:
    """Per GPU × precision: b = mean r × mean a over block identities (the paper's b = r·a)."""
    ident = z.groupby(["gpu", "precision", "block"], sort=True).agg(a=("block_mean_us", "first"),
                                                                     r=("cv", "first"), b=("block_sd_us", "first"))
    per_cell = ident.groupby(["gpu", "precision"]).agg(mean_a_us=("a", "mean"), mean_r=("r", "mean"),
                                                       n_blocks=("a", "size"))
    per_cell["b_us"] = per_cell["mean_a_us"] * per_cell["mean_r"]
    return per_cell.reset_index()


def domain_sizes(m: int, n_max: int = N_MAX) -> np.ndarray:
    """m, 2m, 4m, … up to n_max: the domain sizes of the tau(n) and B* curves."""
    sizes = [m]
    while sizes[-1] * 2 <= n_max:
        sizes.append(sizes[-1] * 2)
    return np.array(sizes, dtype=np.int64)


def _summ(draws: np.ndarray, axis: int = 0) -> dict[str, np.ndarray]:
    lo, hi = (1 - LEVEL) / 2, 1 - (1 - LEVEL) / 2
    finite = np.where(np.isfinite(draws), draws, np.nan)
    return {"mean": np.nanmean(finite, axis=axis), "q_lo": np.nanquantile(finite, lo, axis=axis),
            "median": np.nanquantile(finite, 0.5, axis=axis), "q_hi": np.nanquantile(finite, hi, axis=axis),
            "share_infinite": np.mean(~np.isfinite(draws), axis=axis)}


def _message_bytes(run: Run) -> tuple[float, str]:
    if run.options.bytes:
        return float(run.options.bytes), "--bytes"
    z = run.table(f"{TABLES}/zscores.parquet")
    coll = run.table(f"{TABLES}/tax_collectives.parquet")
    used = coll[coll["pg"].astype(str).isin(z["pg"].astype(str).unique()) & (coll["bytes"] > 0)]
    if len(used):
        return float(used["bytes"].median()), "median message size of the block PG's collectives"
    return float(256 * 2**20), "default 256 MiB (the traces record no message sizes)"


def _stage_prediction(run: Run) -> dict[str, Any]:
    from evtsync import hockney
    from evtsync.evt.fit import is_converged, load_fit
    from evtsync.evt.predict import predicted_tax_curve_us

    run.require("zscores")
    fitted = fitted_models(run.out, run.manifest)
    if not fitted:
        raise NotApplicable("no Bayesian fit has results")
    main = main_model(run.out, run.manifest)
    z = run.table(f"{TABLES}/zscores.parquet")
    scales = block_scale(z)
    m = run.options.m
    ns = domain_sizes(m)
    size_bytes, size_source = _message_bytes(run)
    tau_rows, b_rows, xi_rows, pop_rows = [], [], [], []
    for model, path in fitted.items():
        tree = load_fit(path)
        converged = is_converged(tree)
        for cell in scales.itertuples():
            try:
                mu, sigma, xi = cell_draws(tree, cell.gpu, cell.precision)
            except KeyError:
                continue
            xs = _summ(xi)
            xi_rows.append({"model": model, "gpu": cell.gpu, "precision": cell.precision, "converged": converged,
                            **{f"xi_{k}": float(v) for k, v in xs.items() if k != "share_infinite"}})
            tau = predicted_tax_curve_us(cell.b_us, mu, sigma, xi, ns, m)       # (draws, n)
            ts = _summ(tau)
            for j, n in enumerate(ns):
                tau_rows.append({"model": model, "gpu": cell.gpu, "precision": cell.precision, "n": int(n),
                                 "b_us": cell.b_us, "converged": converged,
                                 **{f"tau_{k}_us" if k != "share_infinite" else "tau_share_infinite":
                                    float(v[j]) for k, v in ts.items()}})
            if model != main:
                continue
            for topo_name in TOPOLOGIES:
                topo = hockney.get_topology(topo_name)
                p = np.array([float(topo.p(int(n))) for n in ns])
                q = np.array([float(topo.q(int(n))) for n in ns])
                bstar = hockney.optimal_bandwidth(size_bytes, run.options.alpha_us, np.where(
                    np.isfinite(tau), tau, np.nan), p, q, run.options.eps) / 1e9
                red = hockney.bandwidth_reduction(run.options.alpha_us, tau, p)
                bh = hockney.hockney_bandwidth(size_bytes, run.options.alpha_us, p, q, run.options.eps) / 1e9
                bs, rs = _summ(bstar), _summ(red)
                for j, n in enumerate(ns):
                    b_rows.append({"model": model, "gpu": cell.gpu, "precision": cell.precision,
                                   "topology": topo.name, "n": int(n), "p": p[j], "q": q[j],
                                   "alpha_us": run.options.alpha_us, "bytes": size_bytes, "eps": run.options.eps,
                                   "bstar_hockney_gbps": float(bh[j]), "converged": converged,
                                   **{f"bstar_{k}_gbps": float(v[j]) for k, v in bs.items() if k != "share_infinite"},
                                   **{f"reduction_{k}": float(v[j]) for k, v in rs.items() if k != "share_infinite"}})
        post = tree["posterior"].to_dataset()
        for var in post.data_vars:
            if var == "xi0" or (var.startswith(("xi_delta_", "xi_sd_")) and not var.endswith("_raw")):
                da = post[var]
                extra = [d for d in da.dims if d not in ("chain", "draw")]
                flat = da.stack(sample=("chain", "draw")).transpose(*extra, "sample")
                labels = [f"{var}[{v}]" for v in da[extra[0]].values] if extra else [var]
                values = flat.values.reshape(len(labels), -1)
                for label, v in zip(labels, values, strict=True):
                    s = _summ(v)
                    pop_rows.append({"model": model, "parameter": label, "converged": converged,
                                     **{k: float(x) for k, x in s.items() if k != "share_infinite"}})
    if not tau_rows:
        raise NotApplicable("no fit covers the GPU × precision cells of the z-scores")
    run.produced("prediction",
                 run.write_table(f"{TABLES}/tau.parquet", pd.DataFrame(tau_rows)),
                 run.write_table(f"{TABLES}/bstar.parquet", pd.DataFrame(b_rows)),
                 run.write_table(f"{TABLES}/xi.parquet", pd.DataFrame(xi_rows)),
                 run.write_table(f"{TABLES}/xi_population.parquet",
                                 pd.DataFrame(pop_rows, columns=["model", "parameter", "converged", "mean", "q_lo",
                                                                 "median", "q_hi"])),
                 run.write_table(f"{TABLES}/block_scale.parquet", scales))
    return {"main_model": main, "domain_sizes": ns.tolist(), "bytes": size_bytes, "bytes_source": size_source,
            "alpha_us": run.options.alpha_us, "eps": run.options.eps, "level": LEVEL}


def _stage_predicted_vs_measured(run: Run) -> dict[str, Any]:
    from evtsync.evt import gev
    from evtsync.evt.fit import is_converged, load_fit

    run.require("zscores", "prediction")
    main = main_model(run.out, run.manifest)
    if main is None:
        raise NotApplicable("no Bayesian fit has results")
    tree = load_fit(fitted_models(run.out, run.manifest)[main])
    z = run.table(f"{TABLES}/zscores.parquet")
    coll = run.table(f"{TABLES}/tax_collectives.parquet")
    coll = coll[coll["valid"].astype(bool)]
    filtered_by = "all valid collectives that follow a kept GEMM block"
    if run.done("attribution"):
        att = run.table(f"{TABLES}/attribution_collectives.parquet")
        gpu_only = att[(att["status"] == "ok") & (att["path_kind"] == "gpu_only")][["workload", "pg", "index"]]
        coll = coll.merge(gpu_only, on=["workload", "pg", "index"], how="inner")
        filtered_by = "valid collectives after a kept GEMM block whose straggler path is GPU-only"
    blocks = z.drop_duplicates(["workload", "pg", "index", "block"])[
        ["workload", "gpu", "precision", "pg", "index", "block", "block_sd_us"]].copy()
    blocks["next_index"] = blocks["index"].astype(np.int64) + 1
    joined = blocks.merge(coll[["workload", "pg", "index", "mean_delay_us", "n_ranks"]],
                          left_on=["workload", "pg", "next_index"], right_on=["workload", "pg", "index"],
                          suffixes=("", "_coll"))
    if joined.empty:
        raise NotApplicable(f"no {filtered_by}")
    m = run.options.m
    rows = []
    for (workload, gpu, precision, n), grp in joined.groupby(["workload", "gpu", "precision", "n_ranks"], sort=True):
        n = int(n)
        if n % m:
            continue
        try:
            mu, sigma, xi = cell_draws(tree, gpu, precision)
        except KeyError:
            continue
        ek = np.asarray(gev.expected_max(mu, sigma, xi, n // m))
        pred = float(grp["block_sd_us"].mean()) * ek
        ps = _summ(pred)
        measured = grp["mean_delay_us"].to_numpy(float)
        se = float(measured.std(ddof=1) / np.sqrt(len(measured))) if len(measured) > 1 else float("nan")
        from scipy import stats

        tq = float(stats.t.ppf(0.5 + LEVEL / 2, max(len(measured) - 1, 1)))
        rows.append({"workload": workload, "gpu": gpu, "precision": precision, "n": n, "model": main,
                     "n_collectives": len(measured), "measured_mean_us": float(measured.mean()),
                     "measured_lo_us": float(measured.mean() - tq * se), "measured_hi_us": float(measured.mean() + tq * se),
                     "predicted_mean_us": float(ps["mean"]), "predicted_lo_us": float(ps["q_lo"]),
                     "predicted_hi_us": float(ps["q_hi"]), "mean_block_sd_us": float(grp["block_sd_us"].mean()),
                     "converged": is_converged(tree)})
    if not rows:
        raise NotApplicable(f"no {filtered_by} in a group whose size is a multiple of m = {m}")
    table = pd.DataFrame(rows)
    run.produced("predicted-vs-measured", run.write_table(f"{TABLES}/predicted_vs_measured.parquet", table))
    return {"model": main, "selection": filtered_by, "rows": len(table)}


def _stage_report(run: Run) -> dict[str, Any]:
    from evtsync.report.html import build_report

    run.save_manifest()
    written = build_report(run.out, run.out)
    run.produced("report", *[str(Path(p).relative_to(run.out)) for p in written])
    return {"files": len(written)}


def _stages(run: Run) -> list[_Stage]:
    o = run.options
    sampling = o.sampling()

    def none(_run: Run) -> dict[str, Any]:
        return {}

    def traces_params(r: Run) -> dict[str, Any]:
        return {"files": r.trace_hashes(), "align": {k: str(v) for k, v in r.align_options().items()},
                "salvage": o.salvage}

    stages = []
    if o.is_demo:
        stages.append(_Stage("demo", _stage_demo, (), lambda r: {"study": DEMO_STUDY,
                                                                  "overrides": {**DEMO_OVERRIDES, **o.demo_overrides}}))
    stages += [
        _Stage("tax", _stage_tax, (), traces_params),
        _Stage("attribution", _stage_attribution, ("tax",), traces_params),
        _Stage("zscores", _stage_zscores, ("tax",),
               lambda r: {**traces_params(r), "pg": o.block_pg, "m": o.m, "time": o.time}),
        _Stage("mle", _stage_mle, ("zscores",), lambda r: {"level": LEVEL, "min": MIN_Z_MLE}),
    ]
    models = _model_paths(run)
    for path in models:
        text = path.read_text(encoding="utf-8")
        stages.append(_Stage(f"fit-{path.stem}", _fit_stage(path), ("zscores",),
                             lambda r, text=text: {"spec": text, **sampling, "seed": o.seed, "sampler": o.sampler,
                                                   "min": MIN_Z_BAYES}))
    fit_names = tuple(f"fit-{p.stem}" for p in models)
    stages += [
        _Stage("compare", _stage_compare, fit_names, none),
        _Stage("prediction", _stage_prediction, ("zscores", "tax", "compare", *fit_names),
               lambda r: {"m": o.m, "alpha": o.alpha_us, "bytes": o.bytes, "eps": o.eps, "level": LEVEL,
                          "n_max": N_MAX}),
        _Stage("predicted-vs-measured", _stage_predicted_vs_measured,
               ("zscores", "tax", "attribution", "prediction", "compare", *fit_names),
               lambda r: {"m": o.m, "level": LEVEL}),
    ]
    if o.report:
        all_names = tuple(s.name for s in stages)
        stages.append(_Stage("report", _stage_report, all_names, none))
    return stages


def _clean_temporaries(out: Path) -> int:
    """Remove temporary files left by a run killed while writing (``.NAME.XXXX.tmp``)."""
    count = 0
    for p in out.rglob(".*.tmp"):
        if p.is_file():
            p.unlink(missing_ok=True)
            count += 1
    if count:
        log.info("removed %d temporary file(s) left by an interrupted run", count)
    return count


def run_pipeline(options: RunOptions, on_stage: Callable[[StageEvent], None] | None = None) -> Run:
    """Run (or resume) every stage of a study into ``options.out``; returns the finished run.

    ``on_stage`` is called with a :class:`StageEvent` when a stage starts, runs or is reused.
    Stage failures are recorded, not raised; the caller reads ``run.manifest["stages"]``.
    """
    if options.m < 2:
        raise InputError(f"--m {options.m}: the sample size must be >= 2")
    s = options.sampling()
    for name, value in s.items():
        if value < 1:
            raise InputError(f"--{name} must be >= 1, got {value}")
    run = Run(options, on_stage)
    run.out.mkdir(parents=True, exist_ok=True)
    with _run_lock(run.out), contextlib.ExitStack() as stack:
        # one Dask cluster (if asked for) for the whole run: reading, alignment, blocks
        run.backend = stack.enter_context(optional_dask(options.scheduler, options.workers, options.jobs))
        stack.callback(setattr, run, "backend", None)  # the run outlives its cluster
        _clean_temporaries(run.out)
        old = read_manifest(run.out)
        run.manifest = old or {"format": MANIFEST_FORMAT, "created": pd.Timestamp.now(tz="UTC").isoformat()}
        from evtsync import __version__

        run.manifest.update({
            "format": MANIFEST_FORMAT, "evtsync_version": __version__, "source_digest": run.code,
            "demo": options.is_demo,
            "options": {k: v for k, v in dataclasses.asdict(options).items() if k not in ("force",)},
            "backend": run.backend.name if run.backend is not None else "local",
            "sampling": s, "level": LEVEL,
        })
        stages = _stages(run)
        run.manifest["stage_order"] = [st.name for st in stages]
        for name in list(run.manifest.get("stages", {})):
            if name not in run.manifest["stage_order"]:
                for rel in run.manifest["stages"][name].get("outputs", {}):
                    run.path(rel).unlink(missing_ok=True)
                del run.manifest["stages"][name]
        if not options.is_demo:
            run.workloads = discover_workloads(options.traces)
        for stage in progress(stages, "evtsync run", len(stages), "stage"):
            if stage.name == "tax" and options.is_demo:
                if not run.done("demo"):
                    entry = run.stage_entry("demo")
                    raise EvtsyncError(f"the demo study could not be written: {entry.get('reason', '')}")
                run.workloads = discover_workloads([run.path("inputs/demo")])
            if stage.name == "tax":
                run.manifest["workloads"] = [{"name": w.name, "files": [str(f) for f in w.files]}
                                             for w in run.workloads]
            run.run_stage(stage)
        run.save_manifest()
    return run


def stage_table(manifest: dict[str, Any]) -> pd.DataFrame:
    """One row per stage of a run: name, status, reason, seconds (in run order)."""
    stages = manifest.get("stages", {})
    order = manifest.get("stage_order", list(stages))
    rows = [{"stage": name, "status": stages.get(name, {}).get("status", "not run"),
             "reason": stages.get(name, {}).get("reason", ""),
             "seconds": stages.get(name, {}).get("seconds", float("nan"))} for name in order]
    return pd.DataFrame(rows, columns=["stage", "status", "reason", "seconds"])
