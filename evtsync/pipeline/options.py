"""What defines a run of the pipeline: :class:`RunOptions`, the workloads found in TRACES, and the
demo's settings. Checked before any work starts (:meth:`RunOptions.check`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evtsync.core.defaults import (
    BAYES_GEV,
    COMPARATOR_CHOICES,
    DEFAULT_CHAINS,
    DEFAULT_DRAWS,
    DEFAULT_EPS,
    DEFAULT_M,
    DEFAULT_SAMPLER,
    DEFAULT_TUNE,
    DEMO_CHAINS,
    DEMO_DRAWS,
    DEMO_TUNE,
    OPT_IN_REASON,
)
from evtsync.core.errors import InputError

__all__ = ["BAYES_GEV", "COMPARATOR_CHOICES", "OPT_IN_REASON", "RunOptions", "Workload", "default_out",
           "discover_workloads"]
from evtsync.core.reference import DGX_H200_ALPHA_US

#: Settings of the demo study (see :func:`evtsync.synth.study`).
DEMO_STUDY = "demo"
DEMO_OVERRIDES: dict[str, Any] = {"gzip": True}


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
    sampler: str = DEFAULT_SAMPLER
    block_pg: str | None = None
    pg_overrides: list[str] = field(default_factory=list)
    m: int = DEFAULT_M
    time: str = "busy"
    models_dir: Path | None = None
    models: list[str] = field(default_factory=list)
    alpha_us: float = DGX_H200_ALPHA_US
    bytes: float | None = None
    eps: float = DEFAULT_EPS
    salvage: bool = False
    jobs: int | None = None
    workers: int | None = None
    scheduler: str | None = None
    cache: str | None = None
    #: folder of report figures kept by a hash of their input tables and the code (reused by any
    #: run folder whose figure data has not changed; None: every figure is drawn)
    figure_cache: str | None = None
    #: folder of stage results kept across run folders, by their key
    #: (:mod:`evtsync.pipeline.resultcache`; None: every stage is computed in this folder)
    result_cache: str | None = None
    strict: bool = True
    allow_partial: bool = False
    end_tolerance_us: float | None = None
    ranks_per_host: int | None = None
    rank_from: str = "file"
    comm_kernels: list[str] = field(default_factory=list)
    report: bool = True
    demo_overrides: dict[str, Any] = field(default_factory=dict)
    #: opt-in comparators (:data:`COMPARATOR_CHOICES`); ``models`` given implies ``bayes-gev``
    comparators: list[str] = field(default_factory=list)
    #: the host layout for the what-if replay of CPU-side (gloo) jobs (``--host-cores``; None: durations
    #: independent; docs/critical-path.md §8, "Ranks sharing cores")
    host_cores: str | None = None

    @property
    def is_demo(self) -> bool:
        """Whether this run uses the bundled demo study."""
        return not self.traces

    @property
    def bayes_gev(self) -> bool:
        """Whether the run fits the Bayesian GEV comparators (``--comparators bayes-gev``, or ``--model``
        naming some of them)."""
        return BAYES_GEV in self.comparators or bool(self.models)

    def check(self) -> None:
        """Refuse bad options before any work: sample size, sampler settings, elasticity, output folder."""
        from evtsync.core.tableio import check_output_dir

        if self.m < 2:
            raise InputError(f"--m {self.m}: the sample size must be >= 2")
        unknown = [c for c in self.comparators if c not in COMPARATOR_CHOICES]
        if unknown:
            raise InputError(f"--comparators {', '.join(unknown)}: expected one of {', '.join(COMPARATOR_CHOICES)}")
        for name, value in self.sampling().items():
            if value < 1:
                raise InputError(f"--{name} must be >= 1, got {value}")
        if not -1 < self.eps < 0:
            raise InputError(f"--eps {self.eps}: the target elasticity must lie in (-1, 0)")
        if self.host_cores is not None:  # its form; whether it fits each job's ranks is the what-if's check
            from evtsync.critpath.cpushare import parse_host_cores

            parse_host_cores(self.host_cores, None)
        from evtsync.runfolder.layout import check_run_folder

        out = self.out or default_out(self)
        check_output_dir(out, "--out")
        check_run_folder(out, self.traces, force=self.force)  # not the inputs', nor the user's own files

    def sampling(self, spec_sampling: dict[str, Any] | None = None) -> dict[str, int]:
        """Draws, tune and chains of a fit: the user's flags; else the model's ``[sampling]`` table
        (``spec_sampling``: the main model asks for 2000 / 2000, which converge on the demo for seeds
        0-9, docs/bayesian.md); else the demo's settings for the demo, the real-run defaults otherwise."""
        spec_sampling = spec_sampling or {}
        defaults = ((DEMO_DRAWS, DEMO_TUNE, DEMO_CHAINS) if self.is_demo
                    else (DEFAULT_DRAWS, DEFAULT_TUNE, DEFAULT_CHAINS))
        base = {k: int(spec_sampling.get(k, d)) for k, d in zip(("draws", "tune", "chains"), defaults, strict=True)}
        given = {"draws": self.draws, "tune": self.tune, "chains": self.chains}
        return {k: base[k] if (v := given[k]) is None else int(v) for k in base}  # 0 is refused, not the default


@dataclass
class Workload:
    """One job's traces: a name and its trace files."""

    name: str
    files: list[Path]


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
    from evtsync.trace.traceset import trace_files_in

    return bool(trace_files_in(folder))


def _window_folders(folder: Path) -> bool:
    """Whether every subfolder holding traces is a profiling window (torchtitan ``iteration_N``)."""
    from evtsync.trace.traceset import WINDOW_FOLDER_RE

    subs = [p for p in folder.iterdir() if p.is_dir() and _has_traces(p)]
    return bool(subs) and all(WINDOW_FOLDER_RE.match(p.name) for p in subs)


def discover_workloads(paths: Sequence[str | os.PathLike[str]]) -> list[Workload]:
    """Workloads from TRACES: a folder of traces is one workload; a folder of such folders
    (or of ``<name>/traces/`` folders, as ``evtsync synth`` writes) is a study of several;
    loose files together form one workload named after their folder."""
    from evtsync.trace.traceset import expand_paths

    workloads: list[Workload] = []
    loose: list[Path] = []
    for item in paths:
        path = Path(item)
        if path.is_dir() and not _has_traces(path) and _window_folders(path):
            workloads.append(Workload(path.name, expand_paths([path])))  # iteration_N/: windows of one job
        elif path.is_dir() and not _has_traces(path):
            subs = sorted(p for p in path.iterdir() if p.is_dir())
            found = []
            for sub in subs:
                folder = sub / "traces" if (sub / "traces").is_dir() else sub
                if _has_traces(folder):
                    found.append(Workload(sub.name, expand_paths([folder])))
            if (path / "traces").is_dir() and _has_traces(path / "traces"):
                found = [Workload(path.name, expand_paths([path / "traces"]))]
            if not found:
                from evtsync.trace.traceset import unrecognised_note

                raise InputError(f"{path}: holds no trace files (Kineto *.json(.gz), nsys *.sqlite, NCCL Inspector "
                                 f"*.log/*.jsonl(.gz)) and no folders of them{unrecognised_note(path)}")
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


