"""The run folder's layout: where each stage's outputs live, the manifest, and queries on it.

The report and other readers of a run folder use this module, never the engine::

    run_dir/
      manifest.json            stages: key, status, reason, seconds, outputs (sha256 each)
      inputs/demo/             the demo study's traces (demo run only)
      tables/*.parquet         tax_*, attribution_*, zscores, mle, compare, tau, bstar, xi, ...,
                               summary (the answer table, one row per GPU × precision)
      summary.json             the answer table as JSON (``evtsync run --json`` prints it)
      fits/<model>.nc          one Bayesian fit per model (BayesFit files)
      figures/, report.html, report.md

The run folder owns only the files its manifest lists; nothing else in it is touched.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from evtsync.core.defaults import MAIN_MODEL_PREFERENCE
from evtsync.core.errors import InputError
from evtsync.core.tableio import TEMP_SUFFIX, file_sha256, read_table

MANIFEST = "manifest.json"
#: The lock a running ``evtsync run`` holds on its folder.
LOCK = ".lock"
MANIFEST_FORMAT = "evtsync-run/1"
TABLES = "tables"
FITS = "fits"
INPUTS = "inputs"

STATUS_DONE = "done"
STATUS_NA = "not_applicable"
STATUS_UNAVAILABLE = "unavailable"
STATUS_FAILED = "failed"
#: A stage's status in words, for readers.
STATUS_TEXT = {"done": "done", "not_applicable": "did not apply", "unavailable": "unavailable",
               "failed": "FAILED", "not run": "not run"}

#: The table of each stage's main output (relative to the run folder).
TABLE_FILES = {name: f"{TABLES}/{name}.parquet" for name in (
    "tax_collectives", "tax_ranks", "tax_summary", "tax_groups", "tax_mismatches", "tax_traces", "tax_workloads",
    "attribution_collectives", "attribution_summary", "attribution_validation", "attribution_paths",
    "attribution_root_causes", "attribution_rank_blame", "attribution_unexplained", "zscores", "blocks_dropped",
    "mle", "compare", "tau", "bstar", "xi", "xi_population", "block_scale", "predicted_vs_measured",
    "predicted_vs_measured_holdout", "tax_stragglers", "tax_straggler_ranks", "whatif", "whatif_jobs",
    "whatif_stragglers", "bstar_flops",
    "flops_scaling", "summary", "truth_xi", "truth_attribution",
    "rank_effects", "rank_variance", "rank_xi", "rank_loo")}
#: The run's answer table as JSON (the same rows as ``tables/summary.parquet``), beside the manifest.
SUMMARY_JSON = "summary.json"
#: The report's files in the run folder (beside ``figures/``).
REPORT_HTML = "report.html"
REPORT_MD = "report.md"


def being_written(run_dir: str | os.PathLike[str]) -> bool:
    """Whether an ``evtsync run`` holds the run folder's lock right now (its tables are in flux)."""
    import fcntl

    lock = Path(run_dir) / LOCK
    if not lock.is_file():
        return False
    with open(lock) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


def enclosing_run(path: str | os.PathLike[str]) -> Path | None:
    """The run folder (a folder holding ``manifest.json``) that is ``path`` or holds it, if any:
    its files are the run's, listed in its manifest, and nothing else writes there."""
    here = Path(path).resolve()
    for folder in (here, *here.parents):
        if (folder / MANIFEST).is_file():
            return folder
    return None


def table_path(run_dir: str | os.PathLike[str], name: str) -> Path:
    """Path of the run table ``name`` (e.g. ``"tau"``)."""
    return Path(run_dir) / TABLE_FILES.get(name, f"{TABLES}/{name}.parquet")


def read_manifest(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a run folder (empty dict when there is none)."""
    path = Path(run_dir) / MANIFEST
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable run manifest ({exc}); rerun `evtsync run` with --force to rebuild "
                         "it (every stage runs again)") from exc
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise InputError(f"{path}: not an evtsync run manifest (format {found!r}); rerun `evtsync run` with "
                         "--force to rebuild it, or choose another --out")
    problem = manifest_shape_problem(data)
    if problem:
        raise InputError(f"{path}: damaged run manifest ({problem}); rerun `evtsync run` with --force to rebuild "
                         "it (every stage runs again)")
    check_manifest_outputs(run_dir, data)
    return data


#: The manifest's fields that readers use, with the JSON type each must have.
_MANIFEST_FIELDS = {"stages": dict, "stage_order": list, "workloads": list, "options": dict, "history": list,
                    "file_hashes": dict, "sampling": dict}
#: A stage entry's fields, with their JSON types.
_STAGE_FIELDS = {"status": str, "reason": str, "key": str, "outputs": dict, "summary": dict,
                 "failed_workloads": dict, "cached_from": dict}


def manifest_shape_problem(data: dict[str, Any]) -> str:
    """What in a manifest's structure is not what ``evtsync run`` writes (a list where a mapping
    of stages belongs, an output digest that is not text), or "" when the shape is sound: the
    readers then never meet a type they cannot handle (issue 47's fuzz suite)."""
    names = {dict: "a mapping", list: "a list", str: "text"}
    for key, kind in _MANIFEST_FIELDS.items():
        if key in data and not isinstance(data[key], kind):
            return f"{key!r} is {type(data[key]).__name__}, not {names[kind]}"
    if not all(isinstance(name, str) for name in data.get("stage_order", [])):
        return "'stage_order' holds a name that is not text"
    if not all(isinstance(w, dict) for w in data.get("workloads", [])):
        return "'workloads' holds an entry that is not a mapping"
    for name, entry in data.get("stages", {}).items():
        if not isinstance(entry, dict):
            return f"stage {name!r} is {type(entry).__name__}, not a mapping"
        for key, kind in _STAGE_FIELDS.items():
            if key in entry and not isinstance(entry[key], kind):
                return f"stage {name!r}: {key!r} is {type(entry[key]).__name__}, not {names[kind]}"
        if not all(isinstance(v, str) for v in entry.get("outputs", {}).values()):
            return f"stage {name!r}: an output's SHA-256 is not text"
    return ""


def check_manifest_outputs(run_dir: str | os.PathLike[str], manifest: dict[str, Any]) -> None:
    """Refuse a manifest any of whose stages lists an output outside the run folder (absolute,
    with ``..``, or through a link out: :func:`evtsync.core.trust.contained`): the run deletes
    and replaces the outputs it lists, and the readers read them, so an edited manifest could
    otherwise make evtsync delete or read any file (docs/security.md)."""
    from evtsync.core.trust import contained

    path = Path(run_dir) / MANIFEST
    stages = manifest.get("stages", {})
    if not isinstance(stages, dict):
        raise InputError(f"{path}: 'stages' is a {type(stages).__name__}, not a mapping; rerun `evtsync run` "
                         "with --force to rebuild the manifest (every stage runs again)")
    for name, entry in stages.items():
        outputs = entry.get("outputs", {}) if isinstance(entry, dict) else None
        if not isinstance(outputs, dict):
            raise InputError(f"{path}: stage {name!r} is not a mapping with an 'outputs' mapping; rerun "
                             "`evtsync run` with --force to rebuild the manifest (every stage runs again)")
        for rel in outputs:
            contained(run_dir, rel, f"{path}: stage {name!r} lists an output that",
                      hint="was the manifest edited? Check who changed it; `evtsync run --force` rebuilds it "
                           "(every stage runs again) without touching that path")


#: The folders of a run whose files its readers (report, diff) take as data: each file is checked
#: against the SHA-256 the manifest recorded when the run wrote it (:func:`read_verified_manifest`).
VERIFIED_FOLDERS = (TABLES, FITS)


def changed_outputs(run_dir: str | os.PathLike[str], manifest: dict[str, Any]) -> list[str]:
    """The tables and fits of a run (relative paths) whose content differs from what the run wrote."""
    changed = []
    for entry in manifest.get("stages", {}).values():
        for rel, digest in (entry.get("outputs") or {}).items():
            path = Path(run_dir) / rel
            if Path(rel).parts[0] in VERIFIED_FOLDERS and path.is_file() and file_sha256(path) != digest:
                changed.append(rel)
    return sorted(changed)


def read_verified_manifest(run_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a run folder (:func:`read_manifest`), after checking every table and fit
    it lists against the SHA-256 recorded when the run wrote it: a file edited since (a table's
    values multiplied by 10) is refused by name, never reported or compared."""
    manifest = read_manifest(run_dir)
    changed = changed_outputs(run_dir, manifest)
    if changed:
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        raise InputError(f"{run_dir}: {shown} changed after `evtsync run` wrote {'it' if len(changed) == 1 else 'them'} "
                         f"(SHA-256 differs from the one in {MANIFEST}); rerun `evtsync run` with the same inputs "
                         "and --out to rebuild, instead of reading altered results")
    return manifest


def check_run_folder(out: str | os.PathLike[str], inputs: Sequence[str | os.PathLike[str]] = (),
                     force: bool = False) -> None:
    """Refuse, before any work, a run folder that would write among files that are not the run's.

    ``out`` may not be, nor lie inside, a folder of the inputs (the manifest and tables would be
    read as traces by later commands); it must be absent, empty, or a run folder (its
    ``manifest.json`` is checked by :func:`read_manifest`). A non-empty folder without a
    manifest holds the user's own files, which the run's ``report.html``, ``tables/`` and so on
    would replace: refused unless ``force``.
    """
    target = Path(out).resolve()
    for item in inputs:
        path = Path(item).resolve()
        if not path.exists():
            continue  # said by the reader, naming it
        folder = path if path.is_dir() else path.parent
        # a folder of traces or of workloads: nothing of the run inside it; loose files: not beside them
        if target == folder or (path.is_dir() and folder in target.parents):
            raise InputError(f"--out {out}: is {'the' if target == folder else 'inside the'} input folder "
                             f"{item}: the run's manifest.json, tables and report would lie among the traces "
                             "(and be read as traces by later commands); choose a folder outside the inputs")
    if not target.is_dir() or (target / MANIFEST).exists():
        return
    own = {LOCK}
    foreign = sorted(p.name for p in target.iterdir() if p.name not in own and not p.name.endswith(TEMP_SUFFIX))
    if foreign and not force:
        shown = ", ".join(foreign[:3]) + (f" and {len(foreign) - 3} more" if len(foreign) > 3 else "")
        raise InputError(f"--out {out}: a non-empty folder that is not an evtsync run folder (no {MANIFEST}; "
                         f"holds {shown}): the run would replace files of the same names; choose an empty or "
                         "new folder, or pass --force to write into it anyway")


def fitted_models(run_dir: Path, manifest: dict[str, Any]) -> dict[str, Path]:
    """Model name -> netCDF path of every Bayesian fit of a run that has results."""
    out = {}
    for name, entry in manifest.get("stages", {}).items():
        if name.startswith("fit-") and entry.get("status") == STATUS_DONE:
            for rel in entry.get("outputs", {}):
                if Path(rel).suffix == ".nc":  # not its signature file, NAME.nc.sig (core.trust.sign_file)
                    out[Path(rel).stem] = run_dir / rel
    return out


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
    for preferred in MAIN_MODEL_PREFERENCE:
        if preferred in fitted:
            return preferred
    return sorted(fitted)[0]


def failed_workloads(manifest: dict[str, Any]) -> dict[str, dict[str, str]]:
    """Workloads of a study that failed in a per-workload stage (tax, attribution, zscores) while
    the others went on: name -> ``{"stage": ..., "reason": ...}``, first failure only, in run order.

    Each such stage records them in its manifest entry (``failed_workloads``), so a reused stage
    keeps them."""
    stages = manifest.get("stages", {})
    out: dict[str, dict[str, str]] = {}
    for name in manifest.get("stage_order", list(stages)):
        for workload, reason in stages.get(name, {}).get("failed_workloads", {}).items():
            out.setdefault(workload, {"stage": name, "reason": str(reason)})
    return out


def missing_ranks(manifest: dict[str, Any]) -> dict[str, list[int]]:
    """Workload -> the ranks without a trace file, for workloads analysed with ``--allow-partial``
    over an incomplete rank set (recorded by the tax stage; empty when every rank set is whole)."""
    summary = manifest.get("stages", {}).get("tax", {}).get("summary") or {}
    return {w: [int(r) for r in ranks] for w, ranks in summary.get("missing_ranks", {}).items() if ranks}


def incomplete_notes(manifest: dict[str, Any]) -> list[str]:
    """One line per way the run's results are incomplete: a workload of the study that failed
    (the others' results leave it out), a workload whose rank set lacks ranks (``--allow-partial``).
    The CLI prints them and the report shows them at the top of its summary."""
    notes = []
    failed = failed_workloads(manifest)
    if failed:
        names = [w.get("name") for w in manifest.get("workloads", [])]
        kept = [n for n in names if n not in failed]
        for name, info in failed.items():
            since = "every table" if info["stage"] == "tax" else f"from stage {info['stage']} on, every table"
            notes.append(f"INCOMPLETE study: workload {name} FAILED in stage {info['stage']} ({info['reason']}); "
                         f"{since}, fit and prediction of this run leaves it out"
                         + (f" and pools {', '.join(kept)} only" if kept else ""))
    problems = (manifest.get("stages", {}).get("tax", {}).get("summary") or {}).get("rank_problems", {})
    missing = missing_ranks(manifest)
    for name in sorted(set(problems) | set(missing)):
        detail = "; ".join(problems.get(name, []))
        if name in missing:
            notes.append(f"INCOMPLETE rank set (--allow-partial): workload {name} has no trace of rank(s) "
                         f"{', '.join(map(str, missing[name]))}; its tables, fits and predictions lack them"
                         + (f" ({detail})" if detail else ""))
        elif detail:
            notes.append(f"rank set not one whole job, analysed as asked (--allow-partial): workload {name}: {detail}")
    return notes


def stage_table(manifest: dict[str, Any]) -> pd.DataFrame:
    """One row per stage of a run: name, status, reason, seconds (in run order); a stage copied
    from the result cache says so in its reason, with when and at what CPU cost it was computed."""
    stages = manifest.get("stages", {})
    order = manifest.get("stage_order", list(stages))
    rows = [{"stage": name, "status": stages.get(name, {}).get("status", "not run"),
             "reason": stage_reason(stages.get(name, {})),
             "seconds": stages.get(name, {}).get("seconds", float("nan"))} for name in order]
    return pd.DataFrame(rows, columns=["stage", "status", "reason", "seconds"])


def stage_reason(entry: dict[str, Any]) -> str:
    """A stage's reason (why it did not apply or failed), and for a stage copied from the result
    cache, where from: "copied from the result cache (computed DATE in N s of CPU)"."""
    reason = str(entry.get("reason", "") or "")
    origin = entry.get("reused_from_cache")
    if not origin:
        return reason
    note = (f"copied from the result cache (computed {str(origin.get('computed', '?'))[:16].replace('T', ' ')} UTC "
            f"in {float(origin.get('cpu_seconds') or 0):.1f} s of CPU)")
    return f"{reason}; {note}" if reason else note


#: The stages whose results a stage reads (a fit stage is any ``fit-<model>``): where a stage did
#: not run, :func:`root_cause` follows these back to the first one that did not.
UPSTREAM = {"zscores": ("tax",), "attribution": ("tax",), "mle": ("zscores",), "fit-": ("zscores",), "rankmodel": ("zscores",),
            "compare": ("fit-",), "prediction": ("zscores", "fit-"), "predicted-vs-measured": ("prediction",)}


def root_cause(manifest: dict[str, Any], stage: str) -> tuple[str, str]:
    """(stage, reason) of the stage that explains why ``stage`` has no result: the first stage up
    its chain (:data:`UPSTREAM`) that did not run, or ``stage`` itself."""
    stages = manifest.get("stages", {})
    for parent in UPSTREAM.get("fit-" if stage.startswith("fit-") else stage, ()):
        names = [n for n in stages if n.startswith("fit-")] if parent == "fit-" else [parent]
        entries = [stages.get(n, {}) for n in names]
        if names and all(e.get("status") != STATUS_DONE for e in entries):
            return root_cause(manifest, names[0])
    return stage, str(stages.get(stage, {}).get("reason") or "")


def next_step(stage: str, reason: str) -> str:
    """What a user can do where ``stage`` could not compute (its ``reason``), in one sentence; ""
    where the reason is about the data themselves and there is nothing to change."""
    text = reason.lower()
    if "z-score" in text and ("fewer than" in text or "cell has" in text):
        return ("Next: profile more training steps — each step adds one z-score per kept compute block — e.g. "
                "torch.profiler.profile(schedule=torch.profiler.schedule(wait=1, warmup=1, active=20), ...) with "
                "prof.step() once per step, until each GPU × precision cell has at least 30, then rerun "
                "`evtsync run` on the new traces.")
    if "no compute block" in text or "no such pg" in text or ("process group" in text and "block" in text):
        return ("Next: name the process group the compute blocks sit between with `evtsync run --pg PG` (the PGs "
                "are listed in the Inputs table; docs/blocks.md).")
    if "not installed" in text:
        return "Next: install the module named above into this environment and rerun `evtsync run`."
    if "opt-in: --comparators" in text:
        return ("Next: `evtsync run --comparators bayes-gev` with the same --out fits the Bayesian GEV comparators "
                "(the other stages are reused; on the demo ~55 s more CPU).")
    if "nothing to compare" in text:
        return ("Next: fit a Gumbel and a free-shape model (the default model set does both; do not restrict "
                "`--model` to one) to compare them.")
    if "cell only" in text or "one level" in text:
        return ("Nothing to do: with a single cell the pooled model answers; traces of another GPU or precision "
                "would give this model something to pool.")
    return ""


@functools.cache
def source_digest() -> str:
    """SHA-256 over the package's Python sources: a code change invalidates cached stages.

    Computed once per process, so that a run is judged against the code it runs with."""
    root = Path(__file__).resolve().parent.parent  # the evtsync package
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class RunFolderView:
    """A run folder as an estimator reads it (:class:`evtsync.predict.registry.RunFolder`): its
    tables and its main Bayesian fit, by the manifest given (checked by the caller)."""

    run_dir: Path
    manifest: dict[str, Any]

    def table_path(self, name: str) -> Path:
        """The path of the run table ``name`` (:func:`table_path`)."""
        return table_path(self.run_dir, name)

    def main_fit_path(self) -> Path | None:
        """The netCDF fit of :func:`main_model` (None when the run has no Bayesian fit)."""
        name = main_model(self.run_dir, self.manifest)
        return fitted_models(self.run_dir, self.manifest)[name] if name is not None else None

    def output_path(self, rel: str) -> Path | None:
        """The output ``rel`` (e.g. ``fits/rankmodel.nc``) when a stage of the manifest lists it as
        written and the file is there (its SHA-256 checked by :func:`read_verified_manifest` when
        the manifest was read by :func:`run_folder`), else None: a file the run did not write is
        never read as its result."""
        listed = any(rel in (entry.get("outputs") or {}) for entry in self.manifest.get("stages", {}).values())
        path = self.run_dir / rel
        return path if listed and path.is_file() else None


def run_folder(run_dir: str | os.PathLike[str], manifest: dict[str, Any] | None = None) -> RunFolderView:
    """The run folder ``run_dir`` for :meth:`evtsync.predict.registry.Estimator.load_run`, with its
    manifest (read and checked against its recorded hashes when not given)."""
    return RunFolderView(Path(run_dir), manifest if manifest is not None else read_verified_manifest(run_dir))
