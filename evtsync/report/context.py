"""What the report's section builders share: the run folder, its manifest, its tables, the
figures planned for the report and drawn after the text."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import multiprocessing
import os
import pickle
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evtsync.core.defaults import INTERVAL_LEVEL as LEVEL
from evtsync.core.tableio import atomic_path, file_sha256, read_table
from evtsync.evt.mlefit import MIN_Z_MLE
from evtsync.plots.base import PLOT_MODULES, draw_png_svg, narrow_png_path
from evtsync.report.markdown import Figure
from evtsync.runfolder.layout import STATUS_TEXT, next_step, root_cause

log = logging.getLogger(__name__)

#: The interval level in words, for captions ("90%").
PCT = f"{LEVEL:.0%}"

FIGURES = "figures"

#: Fewest z-scores of a cell for its histogram, QQ plot and MLE table (the MLE's own minimum).
MIN_Z_FIGURE = MIN_Z_MLE

#: Most worker processes that draw a report's figures (a 2-core machine uses both cores).
FIGURE_WORKERS = 4

#: The figure pool's cost model (issue 48; :func:`figure_pool_pays`; measured on the tiny demo's 22
#: figures, 2-core VM, docs/performance/report.md): CPU seconds one figure takes to draw and save
#: (wide and narrow PNG); moving one figure's tables to a worker and its result back; the pool's
#: fork server (a fresh interpreter importing numpy, pandas, matplotlib and evtsync.plots, 0.9-1.1
#: s; a fork server another pool of the run started first has not imported matplotlib, and its
#: workers then import it, 0.36 s each: about the same for 2-3 workers); what each worker's first
#: figure costs more than the others (fonts); and what this process saves when the pool draws and
#: it has not imported matplotlib yet (the import and that warm-up).
FIGURE_CPU_S = 0.5
FIGURE_TRANSFER_CPU_S = 0.005
FIGURE_POOL_START_CPU_S = 1.0
FIGURE_WORKER_WARMUP_CPU_S = 0.1
MATPLOTLIB_IMPORT_CPU_S = 0.45

#: A figure cache entry's list of files with their SHA-256 (checked before an entry is reused).
FIGURE_META = "meta.json"

#: A planned figure: (draw, stem, svg), see :meth:`ReportContext.figure`.
FigureJob = tuple[Callable[[], Any], str, bool]


def figure_key(job: FigureJob) -> str | None:
    """Cache key of a planned figure: SHA-256 of its drawing call pickled (the figure function's
    name and every table and value bound to it) and its SVG flag, with the digest of evtsync's
    sources (:func:`evtsync.runfolder.layout.source_digest`: any code change misses) and
    matplotlib's version. None when the call cannot be pickled (the figure is then always drawn)."""
    import matplotlib

    from evtsync.runfolder.layout import source_digest

    draw, _stem, svg = job
    try:
        data = pickle.dumps((draw, svg), protocol=5)
    except (pickle.PicklingError, TypeError, AttributeError):
        return None
    digest = hashlib.sha256(data)
    digest.update(f"{source_digest()} matplotlib {matplotlib.__version__}".encode())
    return digest.hexdigest()


class FigureCache:
    """Figures drawn earlier, by :func:`figure_key` (so a figure whose input tables and code have
    not changed is drawn once, whatever run folder it goes to): ``folder/KEY/`` holds
    ``figure.png``, ``figure-narrow.png`` (its narrow rendering) (and ``figure.svg``) and :data:`FIGURE_META`, the files' SHA-256, signed with
    the user's key (:func:`evtsync.core.trust.sign_listing`). An entry is written into a
    temporary folder and renamed into place; a damaged or untrusted one (a file missing or
    differing from its hash, no signature of this key) is reported with a warning, removed and
    drawn again."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)

    def fetch(self, key: str, png: Path, svg: Path | None) -> bool:
        """Copy the entry of ``key`` to ``png`` (and ``svg``), atomically; False when there is none."""
        entry = self.folder / key
        meta_path = entry / FIGURE_META
        if not meta_path.is_file():
            return False
        from evtsync.core.trust import SigningKeyError, listing_problem

        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            untrusted = listing_problem(meta)  # an entry someone else wrote or edited is never used
            if untrusted is not None:
                raise ValueError(f"not trusted: {untrusted}")
            files = meta["files"]
            wanted = {"figure.png": png, **({"figure-narrow.png": narrow_png_path(png)}
                                            if "figure-narrow.png" in files else {}),
                      **({"figure.svg": svg} if svg is not None else {})}
            for name in wanted:
                if file_sha256(entry / name) != files[name]:
                    raise ValueError(f"{name} differs from its hash")
        except SigningKeyError as exc:
            from evtsync.core.trust import warn_once

            warn_once(f"figure cache {self.folder}: not used, every figure is drawn ({exc})")
            return False
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("figure cache entry %s is damaged (%s): removed, the figure is drawn again", entry, exc)
            shutil.rmtree(entry, ignore_errors=True)
            return False
        for name, dest in wanted.items():
            dest.parent.mkdir(parents=True, exist_ok=True)
            with atomic_path(dest) as tmp:
                shutil.copyfile(entry / name, tmp)
        return True

    def store(self, key: str, png: Path, svg: Path | None) -> None:
        """Keep ``png`` (and ``svg``) as the entry of ``key`` (an entry already there is kept)."""
        entry = self.folder / key
        if entry.is_dir():
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        from evtsync.core.trust import SigningKeyError, sign_listing

        tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=self.folder))
        try:
            files = {}
            narrow = narrow_png_path(png)  # a figure drawn without a narrow rendering has none to keep
            for name, src in (("figure.png", png), ("figure-narrow.png", narrow if narrow.is_file() else None),
                              ("figure.svg", svg)):
                if src is not None:
                    shutil.copyfile(src, tmp / name)
                    files[name] = file_sha256(tmp / name)
            (tmp / FIGURE_META).write_text(json.dumps(sign_listing({"files": files})), encoding="utf-8")
            os.rename(tmp, entry)
        except (OSError, SigningKeyError) as exc:  # stored first by another process, an unwritable cache, no key
            shutil.rmtree(tmp, ignore_errors=True)
            if not entry.is_dir():
                log.warning("figure cache %s: entry not written (%s)", self.folder, exc)

# --------------------------------------------------------------------------- helpers

class ReportContext:
    """What the section builders share: the run folder, its manifest, the figure folder."""

    def __init__(self, run_dir: Path, out: Path, manifest: dict[str, Any],
                 load_fit: Callable[[Path], Any] | None = None, svg: bool = False,
                 figure_cache: str | os.PathLike[str] | None = None, estimator: str | None = None) -> None:
        self.run_dir = run_dir
        self.asked_estimator = estimator  # ``evtsync report --estimator``; None: the run's own
        self._view: Any = None
        self.figure_cache = FigureCache(figure_cache) if figure_cache is not None else None
        self.out = out
        self.fig_dir = out / FIGURES
        self.manifest = manifest
        self.written: list[Path] = []
        self._load_fit = load_fit
        self._figures: list[FigureJob] = []
        self.svg = svg
        self._explained: set[tuple[str, str]] = set()
        self._main_fit: tuple[Any, str | None] | None = None

    def main_fit(self) -> tuple[Any, str | None]:
        """The main model's :class:`~evtsync.evt.bayesfit.BayesFit` and name ((None, None) without
        one), read once per report (through the run's reader when the pipeline gives one)."""
        if self._main_fit is None:
            from evtsync.evt.bayesfit import BayesFit, fit_path, load_fit
            from evtsync.runfolder.layout import fitted_models, main_model

            name = main_model(self.run_dir, self.manifest)
            if name is None:
                self._main_fit = (None, None)
            else:
                path = fitted_models(self.run_dir, self.manifest)[name]
                self._main_fit = (BayesFit((self._load_fit or load_fit)(path), fit_path(path)), name)
        return self._main_fit

    @property
    def estimator(self) -> Any:
        """The :class:`~evtsync.report.estimator.EstimatorView` of the report: which estimator's
        rows of tau(n), B*, what-if and predicted vs measured it shows."""
        if self._view is None:
            from evtsync.report.estimator import estimator_view

            self._view = estimator_view(self.run_dir, self.manifest, self.asked_estimator)
        return self._view

    def stage(self, name: str) -> dict[str, Any]:
        return self.manifest.get("stages", {}).get(name, {})

    def done(self, name: str) -> bool:
        return self.stage(name).get("status") == "done"

    def table(self, name: str) -> pd.DataFrame | None:
        path = self.run_dir / "tables" / f"{name}.parquet"
        return read_table(path) if path.is_file() else None

    def figure(self, draw: Callable[[], Any], stem: str, caption: str) -> Figure:
        """Plan ``figures/stem.png`` (and ``.svg`` when the report was asked for SVG): ``draw`` (a
        figure function of :mod:`evtsync.plots` bound to its tables with ``functools.partial``) is
        called by :meth:`draw_figures`, after the text."""
        png, svg = self.fig_dir / f"{stem}.png", (self.fig_dir / f"{stem}.svg" if self.svg else None)
        # a stem planned again replaces the earlier plan (as saving it again would overwrite the file)
        self._figures = [job for job in self._figures if job[1] != stem] + [(draw, stem, self.svg)]
        files = [png, narrow_png_path(png), *([svg] if svg is not None else [])]
        self.written = [p for p in self.written if p not in files] + files
        return Figure(png, svg, caption)

    def figure_workers(self, workers: int | None = None, figures: int | None = None) -> int:
        """How many processes draw ``figures`` figures: ``workers`` (``--jobs``); by default one per
        idle core (at most :data:`FIGURE_WORKERS`) where the pool pays for its start and imports
        (:func:`figure_pool_pays`), else 1 (this process); 1 in a daemon process, which may not
        start any. ``figures`` None: the most the default may start."""
        if multiprocessing.current_process().daemon:
            return 1
        if workers is not None:
            return workers
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        workers = min(cores, FIGURE_WORKERS)
        return workers if figures is None or figure_pool_pays(figures, workers) else 1

    def draw_figures(self, workers: int | None = None) -> None:
        """Draw and save every planned figure, in ``workers`` processes (default: one per idle core,
        at most :data:`FIGURE_WORKERS`, where that pays: :func:`figure_pool_pays`; else in this
        process): drawing and saving them is most of a report's time. One worker draws them in
        this process. With a figure cache, a figure drawn before from the same tables by the same
        code is copied, not drawn."""
        from evtsync.core.parallel import InProcess, ProcessPool

        jobs, self._figures = self._figures, []
        keys = [figure_key(job) if self.figure_cache is not None else None for job in jobs]
        todo = []
        for job, key in zip(jobs, keys, strict=True):
            png, svg = self.fig_dir / f"{job[1]}.png", (self.fig_dir / f"{job[1]}.svg" if job[2] else None)
            if key is None or self.figure_cache is None or not self.figure_cache.fetch(key, png, svg):
                todo.append((job, key, png, svg))
        if self.figure_cache is not None:
            log.info("report figures: %d reused from %s, %d drawn", len(jobs) - len(todo),
                     self.figure_cache.folder, len(todo))
        if not todo:
            return
        workers = min(self.figure_workers(workers, len(todo)), len(todo))
        log.debug("report figures: %d to draw in %s", len(todo),
                  f"{workers} processes" if workers > 1 else "this process")
        if workers > 1:  # the workers' drawing CPU, which this process's clock does not see, is kept
            cpu = ProcessPool(workers, preload=PLOT_MODULES).map(
                functools.partial(_timed_draw, self.fig_dir), [t[0] for t in todo], "report figures")
            FIGURE_WORKER_CPU.append(float(sum(cpu)))
        else:
            InProcess().map(functools.partial(draw_png_svg, self.fig_dir), [t[0] for t in todo], "report figures")
        if self.figure_cache is not None:
            for _job, key, png, svg in todo:
                if key is not None:
                    self.figure_cache.store(key, png, svg)

    def why_not(self, name: str) -> str:
        """Why stage ``name`` has no result, in one line: its reason, the upstream stage that
        caused it (:func:`~evtsync.runfolder.layout.root_cause`) and what to do next; a cause
        already explained earlier in the report is referred to, not repeated."""
        entry = self.stage(name)
        status = STATUS_TEXT.get(entry.get("status", "not run"), entry.get("status", "not run"))
        cause, reason = root_cause(self.manifest, name)
        if (cause, reason) in self._explained:
            return f"Stage {name} {status}, for the reason given above (stage {cause})."
        self._explained.add((cause, reason))
        text = f"Stage {name} {status}: {entry.get('reason') or 'no reason recorded'}."
        if cause != name:
            cause_status = self.stage(cause).get("status", "not run")
            text += (f" Because stage {cause} {STATUS_TEXT.get(cause_status, cause_status)}"
                     + (" for the same reason." if reason and reason == entry.get("reason") else
                        f": {reason or 'no reason recorded'}."))
        step = next_step(cause, reason)
        return f"{text} {step}" if step else text


def figure_pool_pays(figures: int, processes: int, cores: int | None = None) -> bool:
    """Whether ``processes`` figure workers (no more than ``cores``, default the idle ones:
    :func:`~evtsync.core.parallel.idle_cores`) should draw ``figures`` figures rather than this
    process: the rule every local pool follows (:func:`~evtsync.core.parallel.pool_pays`: at most
    10% more CPU, at least 20% less wall time), with the figure pool's own start costs (its fork
    server's imports, each worker's first figure) less the matplotlib import this process then
    does not need (:data:`FIGURE_POOL_START_CPU_S` and the constants beside it)."""
    import sys

    from evtsync.core.parallel import POOL_START_CPU_PER_WORKER_S, Work, pool_pays

    saved = 0.0 if "matplotlib.figure" in sys.modules else MATPLOTLIB_IMPORT_CPU_S
    work = Work(items=figures, cpu_s=FIGURE_CPU_S * figures, transfer_cpu_s=FIGURE_TRANSFER_CPU_S * figures)
    return pool_pays(work, processes, cores, start_cpu_s=max(0.0, FIGURE_POOL_START_CPU_S - saved),
                     per_worker_cpu_s=POOL_START_CPU_PER_WORKER_S + FIGURE_WORKER_WARMUP_CPU_S)


#: CPU seconds the figure workers of this process's reports spent drawing (one entry per pool): the
#: pipeline's report stage counts them as its own (issue 48: a stage's CPU includes its workers').
FIGURE_WORKER_CPU: list[float] = []


def _timed_draw(folder: Path, job: Any) -> float:
    """:func:`~evtsync.plots.base.draw_png_svg` in a figure worker; the CPU seconds it took there."""
    import time

    from evtsync.plots.base import draw_png_svg

    started = time.process_time()
    draw_png_svg(folder, job)
    return time.process_time() - started


def slug(text: str) -> str:
    """``text`` as an HTML anchor or file-name part: lower case, runs of other characters as ``-``."""
    return "".join(ch if ch.isalnum() else "-" for ch in str(text).lower()).strip("-")


def fit_rows(run_dir: Path, manifest: dict[str, Any]) -> pd.DataFrame:
    """One row per Bayesian fit stage of the run: status, convergence, sampling settings, seconds."""
    rows = []
    for name, entry in manifest.get("stages", {}).items():
        if not name.startswith("fit-"):
            continue
        s = entry.get("summary", {})
        rows.append({"model": name[4:], "status": entry.get("status"), "converged": s.get("converged"),
                     "convergence": s.get("convergence", entry.get("reason", "")), "z-scores": s.get("n_obs"),
                     "draws": s.get("draws"), "tune": s.get("tune"), "chains": s.get("chains"),
                     # a fit copied from the result cache: the seconds of its computation
                     "seconds": entry.get("reused_from_cache", {}).get("seconds", entry.get("seconds"))})
    return pd.DataFrame(rows)



def mle_parameters(mle: pd.DataFrame | None, family: str, **cell: str) -> dict[str, float] | None:
    """mu, sigma, xi of ``family``'s maximum-likelihood fit in the MLE table's row of ``cell``
    (column=value pairs, e.g. ``gpu="H100", precision="bf16"``); None where the table has no
    converged fit there."""
    if mle is None or "mu" not in mle:
        return None
    mask = mle["family"] == family
    for column, value in cell.items():
        mask &= mle[column].astype(str) == str(value)
    row = mle[mask]
    if row.empty or not np.isfinite(row["mu"].iloc[0]) or not bool(row.get("converged", pd.Series([True])).iloc[0]):
        return None
    r = row.iloc[0]
    return {"mu": float(r["mu"]), "sigma": float(r["sigma"]), "xi": float(r["xi"])}


#: Columns of a prediction table that are keys or bookkeeping, not labels a reader needs per row.
NOT_LABELS = frozenset({"cell", "fit_kind", "level", "converged", "n", "k", "topology", "eps", "flops_factor",
                        # why a row fell back to the centred estimator: a sentence, shown as a note (and
                        # a short "fallback" label column), not as a table label
                        "estimator_note", "ranktail_note"})


def label_columns(frame: pd.DataFrame, keys: list[str]) -> list[str]:
    """The text columns of ``frame`` besides ``keys`` that hold one value per key (labels such as
    how a row was predicted): a pivoted table shows them beside its keys, whatever the stage wrote."""
    if frame.empty:
        return []
    text = [c for c in frame.columns if c not in keys and c not in NOT_LABELS
            and not pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])]
    per_key = frame.groupby(keys, sort=False)
    return [c for c in text if int(per_key[c].nunique(dropna=False).max()) == 1]
