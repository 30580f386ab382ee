"""Did it get better? Two runs compared collective by collective, with intervals and a verdict.

Each side is a set of tax tables (methodology §3) — from a run folder or from traces — and the
comparison is made per *role* (the PG's description where the traces give one, e.g. ``TP``,
else its name) and collective type:

- the shift of the tax distribution: differences B − A of the median and of the P90 of
  ``tau_max``, each with a percentile-bootstrap interval (the two sides resampled
  independently; distribution-free: no shape is assumed for the tax);
- the shift of the median wait share of the fastest rank (the rank that waited longest) and of
  the straggler's identity: the change rate (share of consecutive collectives whose straggler
  differs) and the number of distinct stragglers;
- a verdict per row in the spirit of the nccl-tests rules: ``lower`` / ``higher`` when the
  interval of the median difference excludes zero, ``no difference`` when it contains zero,
  ``no verdict`` with the reason for refusing: too few collectives on a side, a configuration
  that differs (group size, message sizes, GPU model) so that the two are not the same
  experiment, or a role present on one side only.

A different GPU model is refused unless ``allow=("gpu",)`` — comparing generations is a
legitimate question, and then the reason column says that the GPUs differ.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evtsync.core.defaults import DEFAULT_EPS, DEFAULT_M
from evtsync.core.errors import InputError
from evtsync.predict import registry

log = logging.getLogger(__name__)

#: Fewer valid collectives than this on a side of a row: no verdict.
MIN_COLLECTIVES = 20
#: Bootstrap resamples of each side.
N_BOOTSTRAP = 2000
#: Differences a comparison may be allowed to cross (``allow=``).
ALLOWABLE = ("gpu", "bytes", "group_size")

DIFF_COLUMNS = [
    "role", "collective", "n_a", "n_b", "group_size_a", "group_size_b", "gpu_a", "gpu_b",
    "median_a_us", "median_b_us", "d_median_us", "d_median_lo_us", "d_median_hi_us", "d_median_rel",
    "p90_a_us", "p90_b_us", "d_p90_us", "d_p90_lo_us", "d_p90_hi_us",
    "fastest_wait_share_a", "fastest_wait_share_b",
    "change_rate_a", "change_rate_b", "distinct_stragglers_a", "distinct_stragglers_b",
    "level", "verdict", "reason",
]


@dataclass
class RunTables:
    """One side of a comparison: its tax tables and a label for the outputs.

    ``collectives`` needs ``pg``, ``collective``, ``tau_max_us``; it may carry ``pg_desc``,
    ``n_ranks``, ``bytes``, ``valid``, ``straggler_rank``, ``index``, ``gpu`` and ``window``.
    ``ranks`` (the per-rank table) gives the wait shares when present.
    """

    label: str
    collectives: pd.DataFrame
    ranks: pd.DataFrame | None = None
    gpu: str | None = None
    notes: list[str] = field(default_factory=list)
    #: ranks of the job without a trace (a side analysed with --allow-partial)
    missing_ranks: list[int] = field(default_factory=list)


def role_of(table: pd.DataFrame) -> pd.Series:
    """The PG's role: its description when the traces give one, else its name."""
    name = table["pg"].astype(str)
    if "pg_desc" not in table.columns:
        return name
    desc = table["pg_desc"].astype("string").fillna("").str.strip()
    return desc.where(desc.ne("") & desc.ne("nan") & desc.ne("undefined"), name).astype(str)


def valid_collectives(table: pd.DataFrame) -> pd.DataFrame:
    """The collectives the alignment checks kept (all of them where the table has no ``valid``)."""
    if "valid" in table.columns:
        return table[table["valid"].fillna(False).astype(bool)]
    return table


def _bootstrap_diff(a: np.ndarray, b: np.ndarray, q: float, level: float, n_boot: int,
                    rng: np.random.Generator) -> tuple[float, float, float]:
    """Quantile q of b minus that of a, with a percentile-bootstrap ``level`` interval."""
    point = float(np.quantile(b, q) - np.quantile(a, q))
    diffs = np.empty(n_boot)
    chunk = max(1, int(2e6 // max(len(a), len(b), 1)))
    for lo in range(0, n_boot, chunk):
        k = min(chunk, n_boot - lo)
        qa = np.quantile(rng.choice(a, size=(k, len(a)), replace=True), q, axis=1)
        qb = np.quantile(rng.choice(b, size=(k, len(b)), replace=True), q, axis=1)
        diffs[lo:lo + k] = qb - qa
    lo_q, hi_q = np.quantile(diffs, [(1 - level) / 2, (1 + level) / 2])
    return point, float(lo_q), float(hi_q)


def straggler_statistics(collectives: pd.DataFrame) -> tuple[float, int]:
    """Change rate of the straggler between consecutive collectives, pooled over the PGs of the
    rows given (one role and collective type), and the number of distinct stragglers.

    Per PG the statistics are :func:`evtsync.sync.tax.straggler_identity`'s (methodology §3); the change
    rate is pooled as changes over pairs, and the distinct stragglers are summed over the PGs
    (the PGs of one role — the TP groups of a mesh, say — have disjoint members).
    """
    from evtsync.sync.tax import TaxTables, straggler_identity

    needed = {"pg", "index", "straggler_rank", "tau_max_us"}
    if collectives.empty or not needed <= set(collectives.columns):
        return float("nan"), 0
    coll = collectives.copy()
    if "valid" not in coll.columns:
        coll["valid"] = True
    if "pg_desc" not in coll.columns:
        coll["pg_desc"] = ""
    parts = []
    for _, grp in coll.groupby([c for c in ("pg", "window") if c in coll.columns], sort=False):
        per_pg, _ = straggler_identity(TaxTables(grp, pd.DataFrame(columns=["pg", "rank"])))
        parts.append(per_pg)
    table = pd.concat(parts, ignore_index=True)
    pairs = table["n_pairs"].sum()
    changes = (table["change_rate"].fillna(0.0) * table["n_pairs"]).sum()
    return (float(changes / pairs) if pairs else float("nan")), int(table["n_distinct"].sum())


def _fastest_wait_share(side: RunTables, rows: pd.DataFrame) -> float:
    """Median over instances of the largest wait share (the first rank to arrive)."""
    if side.ranks is None or side.ranks.empty or "index" not in rows.columns:
        return float("nan")
    keys = [c for c in ("workload", "window", "pg", "index") if c in rows.columns and c in side.ranks.columns]
    per = side.ranks.groupby(keys)["wait_share"].max()
    picked = per.reindex(pd.MultiIndex.from_frame(rows[keys]) if len(keys) > 1 else rows[keys[0]])
    return float(np.nanmedian(picked.to_numpy())) if picked.notna().any() else float("nan")


def _config(rows: pd.DataFrame, side: RunTables) -> dict[str, object]:
    sizes = sorted(set(rows["n_ranks"].astype(int))) if "n_ranks" in rows.columns else []
    nbytes = sorted(set(rows["bytes"].astype(np.int64))) if "bytes" in rows.columns else []
    gpu = side.gpu
    if gpu is None and "gpu" in rows.columns and len(rows):
        gpu = ", ".join(sorted(set(rows["gpu"].astype(str))))
    return {"group_size": sizes, "bytes": [b for b in nbytes if b >= 0], "gpu": gpu}


def _differences(ca: dict[str, object], cb: dict[str, object]) -> list[tuple[str, str]]:
    """(what, text) for each configuration that differs between the two sides."""
    out = []
    if ca["group_size"] and cb["group_size"] and ca["group_size"] != cb["group_size"]:
        out.append(("group_size", f"group size differs ({_fmt(ca['group_size'])} vs {_fmt(cb['group_size'])})"))
    if ca["bytes"] and cb["bytes"] and ca["bytes"] != cb["bytes"]:
        out.append(("bytes", f"message sizes differ ({_fmt(ca['bytes'])} vs {_fmt(cb['bytes'])} bytes)"))
    if ca["gpu"] and cb["gpu"] and ca["gpu"] != cb["gpu"]:
        out.append(("gpu", f"GPU differs ({ca['gpu']} vs {cb['gpu']})"))
    return out


def _fmt(values: object) -> str:
    vals = list(values)  # type: ignore[call-overload]
    return ",".join(map(str, vals[:4])) + ("…" if len(vals) > 4 else "")


def diff_tax(a: RunTables, b: RunTables, *, level: float | None = None, n_boot: int = N_BOOTSTRAP,
             min_collectives: int = MIN_COLLECTIVES, allow: Iterable[str] = (), seed: int = 0) -> pd.DataFrame:
    """One row per role × collective type: the shift B − A of the tax and a verdict.

    ``level`` is the interval level (the package default, 90%, when None); ``allow`` names
    configuration differences (:data:`ALLOWABLE`) that should not prevent a verdict.
    """
    from evtsync.core.defaults import INTERVAL_LEVEL

    level = INTERVAL_LEVEL if level is None else float(level)
    if not 0 < level < 1:
        raise InputError(f"diff: the interval level must lie in (0, 1), got {level}")
    allow = set(allow)
    unknown = allow - set(ALLOWABLE)
    if unknown:
        raise InputError(f"diff: cannot allow {sorted(unknown)}; choose from {', '.join(ALLOWABLE)}")
    for side in (a, b):
        missing = {"pg", "collective", "tau_max_us"} - set(side.collectives.columns)
        if missing:
            raise InputError(f"diff: the tax table of {side.label} lacks column(s) {sorted(missing)}")
    rng = np.random.default_rng(seed)
    va, vb = valid_collectives(a.collectives).copy(), valid_collectives(b.collectives).copy()
    va["role"], vb["role"] = role_of(va), role_of(vb)
    keys = sorted(set(zip(va["role"], va["collective"], strict=True))
                  | set(zip(vb["role"], vb["collective"], strict=True)))
    rows = []
    for role, coll in keys:
        ra = va[(va["role"] == role) & (va["collective"] == coll)]
        rb = vb[(vb["role"] == role) & (vb["collective"] == coll)]
        ca, cb = _config(ra, a), _config(rb, b)
        row: dict[str, object] = {c: np.nan for c in DIFF_COLUMNS}
        row.update({"role": role, "collective": coll, "n_a": len(ra), "n_b": len(rb), "level": level,
                    "group_size_a": _fmt(ca["group_size"]), "group_size_b": _fmt(cb["group_size"]),
                    "gpu_a": ca["gpu"], "gpu_b": cb["gpu"]})
        reasons: list[str] = []
        if ra.empty or rb.empty:
            row.update(verdict="no verdict", reason=f"only in {a.label if rb.empty else b.label}")
            rows.append(row)
            continue
        ta, tb = ra["tau_max_us"].to_numpy(float), rb["tau_max_us"].to_numpy(float)
        median_a = float(np.median(ta))
        row["median_a_us"], row["median_b_us"] = median_a, float(np.median(tb))
        row["p90_a_us"], row["p90_b_us"] = float(np.quantile(ta, 0.9)), float(np.quantile(tb, 0.9))
        d, lo, hi = _bootstrap_diff(ta, tb, 0.5, level, n_boot, rng)
        row.update(d_median_us=d, d_median_lo_us=lo, d_median_hi_us=hi,
                   d_median_rel=d / median_a if median_a else np.nan)
        d90, lo90, hi90 = _bootstrap_diff(ta, tb, 0.9, level, n_boot, rng)
        row.update(d_p90_us=d90, d_p90_lo_us=lo90, d_p90_hi_us=hi90)
        row["fastest_wait_share_a"] = _fastest_wait_share(a, ra)
        row["fastest_wait_share_b"] = _fastest_wait_share(b, rb)
        row["change_rate_a"], row["distinct_stragglers_a"] = straggler_statistics(ra)
        row["change_rate_b"], row["distinct_stragglers_b"] = straggler_statistics(rb)
        refuse = []
        if min(len(ra), len(rb)) < min_collectives:
            refuse.append(f"too few collectives ({len(ra)} vs {len(rb)}; a verdict needs "
                          f"≥ {min_collectives} on each side)")
        for what, text in _differences(ca, cb):
            (reasons if what in allow else refuse).append(text if what not in allow else f"{text}, allowed")
        if refuse:
            row.update(verdict="no verdict", reason="; ".join(refuse + reasons))
        else:
            verdict = "lower" if hi < 0 else "higher" if lo > 0 else "no difference"
            row.update(verdict=verdict, reason="; ".join(reasons) or
                       f"{level:.0%} interval of the median difference {'excludes' if verdict != 'no difference' else 'contains'} 0")
        rows.append(row)
    table = pd.DataFrame(rows, columns=DIFF_COLUMNS)
    table.attrs.update({"a": a.label, "b": b.label, "level": level, "n_boot": n_boot,
                        "notes": [*a.notes, *b.notes]})
    return label_rank_sets(table, a, b)


def label_rank_sets(table: pd.DataFrame, a: RunTables, b: RunTables) -> pd.DataFrame:
    """Say which ranks each side lacks (``attrs["missing_ranks"]``: ``{"a": [...], "b": [...]}``) and
    refuse a verdict when the two rank sets differ: the tax of a job without some ranks is not the
    tax of the whole job, so a shift could be the missing ranks' doing. When both sides lack the
    same ranks the verdict stands, and its reason says so."""
    missing = {"a": sorted(a.missing_ranks), "b": sorted(b.missing_ranks)}
    table.attrs["missing_ranks"] = missing
    if not missing["a"] and not missing["b"]:
        return table

    def lacks(side: RunTables, ranks: list[int]) -> str:
        return f"{side.label} lacks rank(s) {', '.join(map(str, ranks))}" if ranks else f"{side.label} has every rank"

    judged = table["verdict"] != "no verdict"
    if missing["a"] != missing["b"]:
        text = f"rank sets differ ({lacks(a, missing['a'])}; {lacks(b, missing['b'])})"
        table.loc[judged, "verdict"] = "no verdict"
    else:
        text = f"both sides lack rank(s) {', '.join(map(str, missing['a']))} (--allow-partial)"
    table["reason"] = [f"{text}; {r}" if r else text for r in table["reason"].fillna("")]
    table.attrs["notes"] = [*table.attrs.get("notes", []), text]
    return table


def tables_from_traces(paths, label: str | None = None, **options) -> RunTables:
    """A side of a comparison read from traces (loaded and taxed here)."""
    from evtsync.sync.tax import tax_from_traces
    from evtsync.trace.traceset import load_traces

    align_keys = {"overrides", "end_tolerance_us", "strict", "allow_partial", "ranks_per_host"}
    align = {k: options.pop(k) for k in list(options) if k in align_keys}
    traces = load_traces(paths, scope="collectives", **options)
    _, tables = tax_from_traces(traces, **align)
    gpus = traces.ranks["gpu"].astype(str)
    gpu = ", ".join(sorted(set(gpus))) if len(gpus) else None
    return RunTables(label or str(paths), tables.collectives, tables.ranks, gpu=gpu,
                     missing_ranks=[int(r) for r in traces.missing_ranks])


def tables_from_run(run_dir, label: str | None = None, workload: str | None = None) -> RunTables:
    """A side of a comparison read from a run folder's tax tables (``evtsync run --out``)."""
    from pathlib import Path

    from evtsync.core.tableio import read_table
    from evtsync.runfolder.layout import missing_ranks, read_verified_manifest, table_path

    run_dir = Path(run_dir)
    manifest = read_verified_manifest(run_dir)  # its tables as the run wrote them, or refused
    path = table_path(run_dir, "tax_collectives")
    if not path.is_file():
        raise InputError(f"diff: {run_dir} holds no tax table ({path.relative_to(run_dir)}): is it the "
                         "folder of an `evtsync run`, and did its tax stage finish?")
    coll = read_table(str(path))
    ranks_path = table_path(run_dir, "tax_ranks")
    ranks = read_table(str(ranks_path)) if ranks_path.is_file() else None
    if workload is not None:
        if "workload" not in coll.columns or workload not in set(coll["workload"]):
            have = sorted(set(coll["workload"])) if "workload" in coll.columns else []
            raise InputError(f"diff: {run_dir} has no workload {workload!r} (it has {', '.join(have) or 'none'})")
        coll = coll[coll["workload"] == workload]
        if ranks is not None and "workload" in ranks.columns:
            ranks = ranks[ranks["workload"] == workload]
    elif "workload" in coll.columns and coll["workload"].nunique() > 1:
        names = sorted(set(coll["workload"]))
        raise InputError(f"diff: {run_dir} holds {len(names)} workloads ({', '.join(names)}); "
                         "choose one with --workload-a/--workload-b")
    names = sorted(set(coll["workload"].astype(str))) if "workload" in coll.columns else []
    lacking = missing_ranks(manifest).get(workload or (names[0] if len(names) == 1 else ""), [])
    return RunTables(label or str(run_dir), coll.reset_index(drop=True),
                     None if ranks is None else ranks.reset_index(drop=True), missing_ranks=lacking)


def run_workloads(path) -> list[str]:
    """The workloads of a run folder's tax table, sorted ([] for traces, or a run without the column)."""
    from pathlib import Path

    from evtsync.runfolder.layout import table_path

    if not (Path(path) / "manifest.json").is_file():
        return []
    table = table_path(Path(path), "tax_collectives")
    if not table.is_file():
        return []
    import pyarrow.parquet as pq

    if table.suffix == ".parquet":
        if "workload" not in pq.read_schema(table).names:
            return []
        column = pq.read_table(table, columns=["workload"]).column("workload").to_pylist()
    else:
        from evtsync.core.tableio import read_table

        frame = read_table(str(table))
        column = frame["workload"].tolist() if "workload" in frame.columns else []
    return sorted({str(w) for w in column})


def matching_workloads(a, b, workload_a: str | None = None, workload_b: str | None = None
                       ) -> tuple[list[tuple[str | None, str | None]], list[str]]:
    """Which workloads of A and B to compare, and notes on those left out.

    Given ``workload_a``/``workload_b``: that pair. Two run folders of several workloads: every
    workload present in both, by name (a study before and after a change), each compared with its
    namesake; the workloads found on one side only are named in the notes. A run folder of several
    workloads against traces, or two studies without a workload in common: ``InputError`` naming
    the workloads to choose from with ``--workload-a/--workload-b``.
    """
    if workload_a is not None or workload_b is not None:
        return [(workload_a, workload_b)], []
    in_a, in_b = run_workloads(a), run_workloads(b)
    if len(in_a) <= 1 and len(in_b) <= 1:
        return [(None, None)], []
    if in_a and in_b:
        common = [w for w in in_a if w in in_b]
        if common:
            notes = [f"workload {w} is only in {side}: not compared"
                     for side, own, other in (("A", in_a, in_b), ("B", in_b, in_a)) for w in own if w not in other]
            return [(w, w) for w in common], notes
    raise InputError(f"diff: no workload to compare by name: A holds {', '.join(in_a) or 'one trace set'}, "
                     f"B holds {', '.join(in_b) or 'one trace set'}; choose with --workload-a NAME and --workload-b NAME")


def diff_runs(a, b, *, label_a: str | None = None, label_b: str | None = None, workload_a: str | None = None,
              workload_b: str | None = None, load_options: Mapping[str, object] | None = None,
              **diff_options) -> tuple[pd.DataFrame, RunTables, RunTables]:
    """:func:`diff_tax` of two runs (run folders or traces) over their matching workloads
    (:func:`matching_workloads`): one table, with a ``workload`` column (A's name) when several
    workloads were compared, and both sides as read (their workloads' collectives together)."""
    for side, path in (("A", a), ("B", b)):
        if isinstance(path, (str, os.PathLike)) and not os.path.exists(path):
            from evtsync.core.errors import path_problem

            raise InputError(f"diff: {side} {path}: {path_problem(path, 'file or folder')} (expected a run folder "
                             "or traces)")
    pairs, notes = matching_workloads(a, b, workload_a, workload_b)
    options = dict(load_options or {})
    tables, sides_a, sides_b = [], [], []
    for wa, wb in pairs:
        side_a = load_side(a, label_a or str(a), wa, **options)
        side_b = load_side(b, label_b or str(b), wb, **options)
        table = diff_tax(side_a, side_b, **diff_options)
        if len(pairs) > 1:
            table.insert(0, "workload", wa)
        tables.append(table)
        sides_a.append(side_a)
        sides_b.append(side_b)
    if len(pairs) == 1:
        table = tables[0]
        table.attrs["notes"] = [*table.attrs.get("notes", []), *notes]
        return table, sides_a[0], sides_b[0]
    table = pd.concat(tables, ignore_index=True)
    table.attrs.update({k: v for k, v in tables[0].attrs.items() if k not in ("notes", "missing_ranks")})
    table.attrs["notes"] = [f"{len(pairs)} workloads compared, each with its namesake: "
                            f"{', '.join(str(w) for w, _ in pairs)}", *notes,
                            *dict.fromkeys(n for t, (w, _) in zip(tables, pairs, strict=True)
                                           for n in (f"{w}: {x}" for x in t.attrs.get("notes", [])))]
    table.attrs["missing_ranks"] = {side: sorted({r for t in tables for r in t.attrs.get("missing_ranks", {}).get(side, [])})
                                    for side in ("a", "b")}
    return table, _joined(sides_a), _joined(sides_b)


def _joined(sides: list[RunTables]) -> RunTables:
    """One side of several workloads: their collectives (and rank tables) together."""
    ranks = [s.ranks for s in sides if s.ranks is not None]
    return RunTables(sides[0].label, pd.concat([s.collectives for s in sides], ignore_index=True),
                     pd.concat(ranks, ignore_index=True) if ranks else None,
                     notes=[n for s in sides for n in s.notes],
                     missing_ranks=sorted({r for s in sides for r in s.missing_ranks}))


def load_side(path, label: str | None = None, workload: str | None = None, **options) -> RunTables:
    """A run folder (it has a manifest.json) or traces (files or folders of them)."""
    from pathlib import Path

    paths = [path] if isinstance(path, str | Path) else list(path)
    if len(paths) == 1 and (Path(paths[0]) / "manifest.json").is_file():
        return tables_from_run(paths[0], label, workload)
    if workload is not None:
        raise InputError("diff: --workload applies to run folders only")
    return tables_from_traces([str(p) for p in paths], label, **options)


FIT_DIFF_COLUMNS = [
    "cell", "gpu", "precision", "quantity", "n", "a_median", "b_median", "d_mean", "d_lo", "d_median", "d_hi",
    "prob_lower", "level", "model_a", "model_b", "verdict", "reason", "beyond_data",
]


def diff_fits(fit_a, fit_b, *, n: Iterable[int] = (8, 64, 512), block_sd_us: float | Mapping[str, float] = 1.0,
              m: int = DEFAULT_M, level: float | None = None, seed: int = 0,
              block_sd_b_us: float | Mapping[str, float] | None = None, refuse: Iterable[str] = ()) -> pd.DataFrame:
    """Per GPU × precision cell of both fits: the posterior of Δξ = ξ_B − ξ_A and of Δτ(n).

    Both fits must give the same estimator of tau(n) (:func:`same_estimator`): two GEV fits
    (centred or paper; Δξ and Δτ), or two ranktail fits of the runs' z-score tables
    (:class:`~evtsync.evt.ranktail.RankTailFit`: Δτ only, it has no GEV shape xi).

    The two fits are independent posteriors (different data), so a draw of the difference is
    a draw of B minus a draw of A paired at random (both resampled to the larger count, with
    ``seed``); Δτ(n) uses the same block sd ``b`` on both sides, so it isolates the change in
    the tail of the z-scores (methodology §7), not a change in the block's spread (``block_sd_us``: one
    value, or one per cell name, e.g. A's measured b from :func:`fit_of_run`); ``block_sd_b_us``
    gives B its own b instead (each run's measured b: Δτ is then the change of the whole tax, b
    and tail together). Verdict per row
    ("lower" / "higher" / "no difference" by the ``level`` interval of the difference), or
    "no verdict" when either fit is not converged or the cell is in one fit only, or with the
    reasons in ``refuse`` (configurations that differ, e.g. the sample size m of the z-scores).
    ``beyond_data``: a ranktail Δτ row whose n exceeds the cell's rank values on either side (the
    GPD tail's extrapolation; ``attrs["beyond_data_note"]`` says so and names N).
    """
    from evtsync.core.defaults import INTERVAL_LEVEL
    from evtsync.evt.bayesfit import as_fit

    level = INTERVAL_LEVEL if level is None else float(level)
    if not 0 < level < 1:
        raise InputError(f"diff: the interval level must lie in (0, 1), got {level}")
    fa, fb = as_fit(fit_a), as_fit(fit_b)
    estimator = same_estimator(fa, fb)
    ns = [int(v) for v in n]
    cells_a, cells_b, pick_a, pick_b = _paired_picks(fa, fb, seed)
    unconverged = [*_unconverged(fa, fb), *refuse]
    rank_values = _fewest_rank_values(fa, fb)
    # a per-rank estimator (ranktail) has no GEV shape xi to compare (evtsync.predict.registry)
    gev_shape = not (estimator in registry.names() and registry.get(estimator).per_rank)
    rows = []
    for cell in sorted(set(cells_a) | set(cells_b)):
        parts = cell.split("|")
        base = {"cell": cell, "gpu": parts[0] if len(parts) == 2 else "", "precision": parts[1] if len(parts) == 2 else "",
                "level": level, "model_a": fa.name, "model_b": fb.name, "estimator": estimator}
        if cell not in cells_a or cell not in cells_b:
            rows.append({**base, "quantity": "xi" if gev_shape else "tau_us", "verdict": "no verdict",
                         "reason": f"cell only in {'B' if cell not in cells_a else 'A'}"})
            continue
        quantities: list[tuple[str, int | None, np.ndarray, np.ndarray]] = []
        if gev_shape:
            quantities.append(("xi", None, _cell_xi(fa, cells_a[cell], pick_a), _cell_xi(fb, cells_b[cell], pick_b)))
        b_a, b_b, missing_b = _block_sds(block_sd_us, block_sd_b_us, cell)
        if missing_b:
            rows += [{**base, "quantity": "tau_us", "n": nn, "verdict": "no verdict", "reason": missing_b}
                     for nn in ns]
        else:
            assert b_a is not None and b_b is not None  # no reason: both sides have b
            tau_a = _cell_tau(fa, cells_a[cell], pick_a, b_a, ns, m)
            tau_b = _cell_tau(fb, cells_b[cell], pick_b, b_b, ns, m)
            quantities += [("tau_us", nn, tau_a[:, j], tau_b[:, j]) for j, nn in enumerate(ns)]
        for name, nn, va, vb in quantities:
            with np.errstate(invalid="ignore"):
                d = vb - va
            verdict, reason, s = _verdict(d, level, unconverged)
            rows.append({**base, "quantity": name, "n": nn, "a_median": float(np.median(va)),
                         "b_median": float(np.median(vb)), "d_mean": float(s["mean"]), "d_lo": float(s["lo"]),
                         "d_median": float(s["median"]), "d_hi": float(s["hi"]), "prob_lower": float(np.mean(d < 0)),
                         "verdict": verdict, "reason": reason,
                         "beyond_data": nn is not None and nn > rank_values.get(cell, np.inf)})
    table = _beyond_data_note(pd.DataFrame(rows, columns=FIT_DIFF_COLUMNS), rank_values)
    table.attrs.update({"a": fa.name, "b": fb.name, "level": level, "estimator": estimator,
                        "block_sd_us": _plain(block_sd_us),
                        "block_sd_b_us": _plain(block_sd_us if block_sd_b_us is None else block_sd_b_us),
                        "pairing": "independent posteriors: draws paired at random"})
    return table


def _fewest_rank_values(fa: Any, fb: Any) -> dict[str, float]:
    """Per cell: the fewer of the two sides' N rank values (ranktail fits; {} for GEV fits, which
    extrapolate by k = n/m instead: methodology §7)."""
    counts: dict[str, float] = {}
    for fit in (fa, fb):
        if hasattr(fit, "cell_info"):
            for cell, n_values in fit.cell_info().set_index("cell")["n_values"].items():
                counts[str(cell)] = min(counts.get(str(cell), np.inf), float(n_values))
    return counts


def _beyond_data_note(table: pd.DataFrame, rank_values: dict[str, float]) -> pd.DataFrame:
    """``beyond_data`` as bool (rows without a tau: False) and, when a row is beyond its cell's
    rank values on either side, the note :data:`~evtsync.predict.tables.BEYOND_DATA_NOTE` with
    those cells' N in ``attrs["beyond_data_note"]``."""
    from evtsync.predict.tables import beyond_data_note, beyond_data_rows

    table["beyond_data"] = beyond_data_rows(table)
    if table["beyond_data"].any():
        beyond = table[table["beyond_data"]]
        cells = sorted(set(beyond["cell"].astype(str)))
        ratios = [float(n) / rank_values[str(c)] for n, c in zip(beyond["n"], beyond["cell"], strict=True)]
        table.attrs["beyond_data_note"] = (f"{beyond_data_note(ratios)} (N, the fewer of A's and B's: "
                                           + ", ".join(f"{c} {int(rank_values[c])}" for c in cells) + ")")
    return table


def _plain(block_sd_us: float | Mapping[str, float]) -> float | dict[str, float]:
    return dict(block_sd_us) if isinstance(block_sd_us, Mapping) else float(block_sd_us)


def _block_sds(block_sd_us: float | Mapping[str, float], block_sd_b_us: float | Mapping[str, float] | None,
               cell: str) -> tuple[float | None, float | None, str]:
    """b of A and of B for a cell (B's is A's unless given) and, when one is missing, the reason."""
    b_a = _block_sd_of(block_sd_us, cell)
    b_b = b_a if block_sd_b_us is None else _block_sd_of(block_sd_b_us, cell)
    if b_a is None or b_b is None:
        side = "A" if b_a is None else "B"
        return b_a, b_b, f"no block sd b for cell {cell}" + ("" if block_sd_b_us is None else f" in {side}")
    return b_a, b_b, ""


def _block_sd_of(block_sd_us: float | Mapping[str, float], cell: str) -> float | None:
    """b (µs) of a cell: the one value, or the cell's entry of a mapping (None when it has none)."""
    if isinstance(block_sd_us, Mapping):
        value = block_sd_us.get(cell)
        return None if value is None or not np.isfinite(float(value)) else float(value)
    return float(block_sd_us)


def _unconverged(fa: Any, fb: Any) -> list[str]:
    """"A's fit NAME not converged" for each side whose fit is flagged (the reason for no verdict)."""
    return [f"{side}'s fit {f.name} not converged" for side, f in (("A", fa), ("B", fb)) if not f.converged]


def _verdict(d: np.ndarray, level: float, refuse: list[str]) -> tuple[str, str, dict[str, np.ndarray]]:
    """Verdict and reason for posterior draws ``d`` of a difference B − A, and their summary."""
    from evtsync.predict.tables import summarise

    s = summarise(d, level)
    lo, hi = float(s["lo"]), float(s["hi"])
    if refuse:
        return "no verdict", "; ".join(refuse), s
    verdict = "lower" if hi < 0 else "higher" if lo > 0 else "no difference"
    return verdict, f"{level:.0%} interval of B − A {'contains' if verdict == 'no difference' else 'excludes'} 0", s


# --------------------------------------------------------------------------- ΔB*

BSTAR_DIFF_COLUMNS = [
    "cell", "gpu", "precision", "topology", "n", "eps", "p", "q", "alpha_us", "alpha_source", "bytes",
    "block_sd_us", "block_sd_b_us", "m", "a_median_gbps", "b_median_gbps", "d_mean_gbps", "d_lo_gbps", "d_median_gbps",
    "d_hi_gbps", "d_rel_lo", "d_rel_median", "d_rel_hi", "prob_lower", "level", "model_a", "model_b", "verdict",
    "reason", "beyond_data",
]


@dataclass
class BandwidthInputs:
    """What B* (methodology §8) needs besides the tax, the same for both sides of a ΔB*: the topologies
    (they give p and q), alpha per topology (µs, a point and optionally draws), the buffer size
    S (bytes), the elasticities eps, the sample size m, and a sentence saying where they came from."""

    topologies: list[str]
    alpha_us: dict[str, float]
    size_bytes: float
    eps: list[float] = field(default_factory=lambda: [DEFAULT_EPS])
    m: int = DEFAULT_M
    alpha_draws_us: dict[str, Any] | None = None
    source: str = "given"

    def describe(self) -> str:
        """The inputs in words, for every output that shows ΔB*."""
        alphas = ", ".join(f"{t} {a:.4g} µs" for t, a in self.alpha_us.items())
        draws = " (with its interval's draws)" if self.alpha_draws_us else ""
        return (f"B* = q·S·(1+eps)/(−eps·(p·alpha + tau)) with topologies {', '.join(self.topologies)}, alpha "
                f"{alphas}{draws}, S = {self.size_bytes:.6g} bytes, eps {', '.join(f'{e:g}' for e in self.eps)}, "
                f"m = {self.m}; the same on both sides ({self.source})")


def same_estimator(fit_a: Any, fit_b: Any) -> str:
    """The estimator of tau(n) both fits give (:func:`evtsync.predict.tables.estimator_of`): a fit of
    the centred maximum y against one of z would compare two different quantities, so it is refused."""
    from evtsync.predict.tables import estimator_of

    ea, eb = estimator_of(fit_a), estimator_of(fit_b)
    if ea != eb:
        raise InputError(f"diff: fit A ({fit_a.name}) gives the {ea or 'unknown'} estimator of tau(n) and fit B "
                         f"({fit_b.name}) the {eb or 'unknown'} one (fits of columns y and z of the z-score table): "
                         "refit both with the same data column")
    return ea or "unknown"


def _draw_count(fit: Any) -> int:
    """Draws per cell of a fit (a per-rank fit: of E[max_n])."""
    if hasattr(fit, "expected_max"):
        return int(fit.expected_max([1], [0]).shape[0])
    return int(fit.cell_draws()[0].shape[0])


def _paired_picks(fa: Any, fb: Any, seed: int) -> tuple[dict[str, int], dict[str, int], np.ndarray, np.ndarray]:
    """Cell indices of both fits and the draw indices that resample both to a common count, paired at random."""
    rng = np.random.default_rng(seed)
    cells_a = {str(c): i for i, c in enumerate(fa.cells["cell"])}
    cells_b = {str(c): i for i, c in enumerate(fb.cells["cell"])}
    count_a, count_b = _draw_count(fa), _draw_count(fb)
    size = max(count_a, count_b)
    pick_a = rng.choice(count_a, size=size, replace=count_a < size)
    pick_b = rng.choice(count_b, size=size, replace=count_b < size)
    return cells_a, cells_b, pick_a, pick_b


def _cell_xi(fit: Any, index: int, pick: np.ndarray) -> np.ndarray:
    """The GEV shape's draws of one cell, resampled by ``pick``."""
    return np.asarray(fit.cell_draws()[2])[pick][:, index]


def _cell_tau(fit: Any, index: int, pick: np.ndarray, b: float, ns: list[int], m: int) -> np.ndarray:
    """tau(n) draws (sample, len(ns)) of one cell, resampled by ``pick``: b·E_(n/m) of a GEV fit's
    parameters, or b·E[max_n] of a per-rank fit (the rank model, ranktail: :mod:`evtsync.predict.tables`)."""
    from evtsync.predict.tables import domain_sizes_for, predicted_tax_curve_us

    if hasattr(fit, "expected_max"):
        domain_sizes_for(fit, ns, m)  # a per-rank fit: any n
        return float(b) * np.asarray(fit.expected_max(ns, [index]), dtype=float)[:, 0, :][pick]
    mu, sigma, xi = (np.asarray(d)[pick][:, index] for d in fit.cell_draws())
    return np.asarray(predicted_tax_curve_us(b, mu, sigma, xi, ns, m))


def diff_bstar(fit_a, fit_b, inputs: BandwidthInputs, *, n: Iterable[int] = (8, 64, 512),
               block_sd_us: float | Mapping[str, float] = 1.0, level: float | None = None,
               seed: int = 0, block_sd_b_us: float | Mapping[str, float] | None = None,
               refuse: Iterable[str] = ()) -> pd.DataFrame:
    """Per GPU × precision cell of both fits, topology, n and eps: the posterior of
    ΔB* = B*_B − B*_A (GB/s, methodology §8) with its ``level`` interval and a verdict.

    B* is computed draw by draw by :func:`evtsync.predict.tables.bstar_draws_gbps` (the one home of
    the B* computation) from each side's tau(n) = b·E_(n/m) (:func:`diff_fits`' pairing: draws of
    the two independent posteriors paired at random; the same b on both sides unless
    ``block_sd_b_us`` gives B its own, as in :func:`diff_fits`). ``inputs`` —
    topology (p, q), alpha, S, eps, m — are the same for both sides, and so are alpha's draws when
    it has them (one alpha draw per pair), so ΔB* isolates the change in the tax. Verdict as in
    :func:`diff_fits`: "lower" / "higher" / "no difference" by the interval of B − A; "no
    verdict" with the reason when a fit is not converged, the cell is in one fit only or has no
    b; ``refuse`` as in :func:`diff_fits`. ``d_rel_lo``/``_median``/``_hi`` summarise
    B*_B / B*_A − 1 alike; ``beyond_data`` as in :func:`diff_fits`.
    """
    from evtsync.core.defaults import INTERVAL_LEVEL
    from evtsync.evt.bayesfit import as_fit
    from evtsync.predict.tables import (
        bstar_draws_gbps,
        domain_sizes_for,
        summarise,
    )

    level = INTERVAL_LEVEL if level is None else float(level)
    if not 0 < level < 1:
        raise InputError(f"diff: the interval level must lie in (0, 1), got {level}")
    if not inputs.topologies:
        raise InputError("diff: ΔB* needs at least one topology")
    for e in inputs.eps:
        if not -1 < e < 0:
            raise InputError(f"diff: eps must lie in (-1, 0); got {e:g}")
    ns = [int(v) for v in n]
    fa, fb = as_fit(fit_a), as_fit(fit_b)
    for f in (fa, fb):  # a per-rank fit: any n; a GEV fit: multiples of m
        domain_sizes_for(f, ns, inputs.m)
    estimator = same_estimator(fa, fb)
    cells_a, cells_b, pick_a, pick_b = _paired_picks(fa, fb, seed)
    unconverged = [*_unconverged(fa, fb), *refuse]
    rank_values = _fewest_rank_values(fa, fb)
    common = {"bytes": float(inputs.size_bytes), "m": inputs.m, "level": level, "model_a": fa.name, "model_b": fb.name,
              "estimator": estimator,
              "alpha_source": "draws" if inputs.alpha_draws_us else "point"}
    rows: list[dict[str, Any]] = []
    for cell in sorted(set(cells_a) | set(cells_b)):
        parts = cell.split("|")
        base = {"cell": cell, "gpu": parts[0] if len(parts) == 2 else "",
                "precision": parts[1] if len(parts) == 2 else "", **common}
        b_a, b_b, missing_b = _block_sds(block_sd_us, block_sd_b_us, cell)
        if cell not in cells_a or cell not in cells_b or missing_b:
            reason = (f"cell only in {'B' if cell not in cells_a else 'A'}" if cell not in cells_a or cell not in cells_b
                      else missing_b)
            rows.append({**base, "verdict": "no verdict", "reason": reason})
            continue
        assert b_a is not None and b_b is not None  # no reason: both sides have b
        tau = np.stack([_cell_tau(fa, cells_a[cell], pick_a, b_a, ns, inputs.m),
                        _cell_tau(fb, cells_b[cell], pick_b, b_b, ns, inputs.m)], axis=1)  # (sample, side, n)
        for k, topo in enumerate(inputs.topologies):
            for eps in inputs.eps:
                out = bstar_draws_gbps(tau, topo, ns, inputs.alpha_us, inputs.size_bytes, eps,
                                       alpha_draws_us=inputs.alpha_draws_us, seed=seed + 1 + k)
                bstar = out["bstar_gbps"]
                for j, nn in enumerate(ns):
                    va, vb = bstar[:, 0, j], bstar[:, 1, j]
                    with np.errstate(invalid="ignore", divide="ignore"):
                        d, rel = vb - va, vb / va - 1
                    verdict, reason, s = _verdict(d, level, unconverged)
                    rs = summarise(rel, level)
                    rows.append({**base, "topology": out["topology"], "n": nn, "eps": eps, "p": float(out["p"][j]),
                                 "q": float(out["q"][j]), "alpha_us": out["alpha_us"], "block_sd_us": b_a,
                                 "block_sd_b_us": b_b,
                                 "a_median_gbps": float(np.median(va)), "b_median_gbps": float(np.median(vb)),
                                 "d_mean_gbps": float(s["mean"]), "d_lo_gbps": float(s["lo"]),
                                 "d_median_gbps": float(s["median"]), "d_hi_gbps": float(s["hi"]),
                                 "d_rel_lo": float(rs["lo"]), "d_rel_median": float(rs["median"]),
                                 "d_rel_hi": float(rs["hi"]), "prob_lower": float(np.mean(d < 0)),
                                 "verdict": verdict, "reason": reason,
                                 "beyond_data": nn > rank_values.get(cell, np.inf)})
    table = _beyond_data_note(pd.DataFrame(rows, columns=BSTAR_DIFF_COLUMNS), rank_values)
    table.attrs.update({"a": fa.name, "b": fb.name, "level": level, "inputs": inputs.describe(), "estimator": estimator,
                        "pairing": "independent posteriors: draws paired at random; the same alpha draw on both sides"})
    return table


@dataclass
class RunFit:
    """A run folder's main Bayesian fit with what its prediction stage used: b per cell and the
    B* inputs (alpha, S, eps, m) of ``evtsync run``."""

    path: Any  # the main Bayesian fit, None in a run without one (the rank model's alone)
    model: str | None
    block_sd_us: dict[str, float]
    alpha_us: float | None
    size_bytes: float | None
    bytes_source: str
    eps: float | None
    m: int
    topologies: list[str] = field(default_factory=list)
    zscores: Any = None  # the run's tables/zscores.parquet (the ranktail estimator's input), None without
    run_dir: Any = None  # the run folder


def estimator_fits_of_runs(run_a: RunFit, run_b: RunFit, estimator: str | None = None,
                           seed: int = 0) -> tuple[Any, Any, str]:
    """The fits two runs are compared with, both of one estimator of tau(n), and a note saying which.

    ``estimator`` None: the default, the rank model of each run (``fits/rankmodel.nc``, the draws
    the run's own predictions used; a run written before the rankmodel stage: fitted to its z-score
    table); when either side cannot give it (no table, a table without ``u``, a cell with too few
    rank values), both sides fall back to their main GEV fit's centred estimator, said in the note
    and logged. A named estimator is obeyed strictly: a per-rank one from each run (ranktail fitted
    to both tables), centred from both main fits, paper from both runs' GEV MLE of z
    (``tables/mle.parquet``).

    Raises
    ------
    InputError
        A named estimator that a side cannot give, naming it.
    """
    import logging

    from evtsync.runfolder.layout import run_folder

    wanted = registry.get(estimator)
    sides = (("A", run_a), ("B", run_b))
    if wanted.per_rank:
        try:
            fits = [_per_rank_fit(side, run, wanted, seed) for side, run in sides]
        except InputError as exc:
            if estimator is not None or wanted.fallback is None:
                raise
            fallback = registry.get(wanted.fallback)
            note = (f"tau(n): the default {wanted.name} estimator cannot compare these runs ({exc}); both sides fall "
                    f"back to their main model's {fallback.name} estimator ({run_a.model}, {run_b.model})")
            logging.getLogger(__name__).warning("%s", note)
            return _main_fit(run_a), _main_fit(run_b), note
        return fits[0], fits[1], (f"tau(n): the {wanted.name} estimator{' (default)' if estimator is None else ''} on "
                                  "both sides, each run's own fit of its per-rank values")
    if wanted.per_model:  # the runs' main GEV models
        return (_main_fit(run_a), _main_fit(run_b),
                f"tau(n): the {wanted.name} estimator of both runs' main models ({run_a.model}, {run_b.model})")
    missing = []
    fits = []
    for side, run in sides:
        try:
            fits.append(wanted.load_run(run_folder(run.run_dir), seed=seed))
        except InputError:
            missing.append(side)
    if missing:
        raise InputError(f"diff: --estimator {wanted.name} needs each run's {wanted.needs}; {' and '.join(missing)} "
                         "lack it")
    return fits[0], fits[1], f"tau(n): the {wanted.name} estimator on both sides ({wanted.meaning})"


def _per_rank_fit(side: str, run: RunFit, wanted: Any, seed: int) -> Any:
    """A per-rank estimator's fit of one run (its registry class's ``load_run``: the rank model's
    fits/rankmodel.nc; ranktail fitted to the run's z-score table), or of its z-score table
    (``load_table``) when the run folder is not known; every refused cell is an ``InputError``."""
    from evtsync.core.tableio import read_table
    from evtsync.runfolder.layout import run_folder

    if run.run_dir is not None and (run.zscores is not None or (Path(run.run_dir) / "fits").is_dir()):
        fit = wanted.load_run(run_folder(run.run_dir), seed=seed)
        refused = dict(getattr(fit, "refused", {}) or {})
        if refused:
            cell, why = next(iter(refused.items()))
            raise InputError(f"diff: {side}'s run: the {wanted.name} estimator refused cell {cell}: {why}")
        return fit
    if run.zscores is None:
        raise InputError(f"diff: {side}'s run has no z-score table (tables/zscores.parquet), which the {wanted.name} "
                         "estimator needs")
    return wanted.load_table(read_table(str(run.zscores)), source=str(run.zscores), seed=seed)


def _main_fit(run: RunFit) -> Any:
    """A run's main Bayesian fit (the one :func:`fit_of_run` found); ``InputError`` for a run that
    fitted none (the Bayesian GEV comparators are opt-in: ``evtsync run --comparators bayes-gev``)."""
    from evtsync.core.defaults import OPT_IN_REASON
    from evtsync.evt.bayesfit import BayesFit

    if run.path is None:
        raise InputError(f"diff: {run.run_dir} has no Bayesian GEV fit, the centred estimator's input (the comparator "
                         f"fits were {OPT_IN_REASON}, or did not finish)")
    return BayesFit.load(run.path)


def fit_of_run(run_dir) -> RunFit | None:
    """The main fit of a run folder (:func:`evtsync.runfolder.layout.main_model`; ``path`` None when it
    has none but its rank model finished: the Bayesian GEV comparators are opt-in), or None when the
    run has neither.

    ``block_sd_us``: b per cell name ("GPU|precision") from the run's ``block_scale`` table (a
    pooled fit's one cell gets the median over the cells, said in the caller); alpha, S and eps
    from the manifest's prediction stage summary (None when that stage did not run); the
    topologies of its ``bstar`` table (empty when it has none).
    """
    from pathlib import Path

    from evtsync.core.tableio import read_table
    from evtsync.runfolder.layout import (
        fitted_models,
        main_model,
        read_verified_manifest,
        table_path,
    )

    run_dir = Path(run_dir)
    manifest = read_verified_manifest(run_dir)
    name = main_model(run_dir, manifest)
    if name is None and manifest.get("stages", {}).get("rankmodel", {}).get("status") != "done":
        return None
    # a run without the Bayesian GEV comparators (opt-in, issue 48): the rank model alone (path None)
    path = fitted_models(run_dir, manifest)[name] if name is not None else None
    scales_path = table_path(run_dir, "block_scale")
    scales: dict[str, float] = {}
    if scales_path.is_file():
        table = read_table(str(scales_path))
        scales = {f"{g}|{p}": float(b) for g, p, b in zip(table["gpu"], table["precision"], table["b_us"], strict=True)}
        if scales:
            scales.setdefault("all", float(np.median(list(scales.values()))))
    bstar_path = table_path(run_dir, "bstar")
    topologies = (list(dict.fromkeys(read_table(str(bstar_path))["topology"].astype(str)))
                  if bstar_path.is_file() else [])
    stage = manifest.get("stages", {}).get("prediction", {})
    summary = stage.get("summary", {}) if stage.get("status") == "done" else {}
    m = int(manifest.get("options", {}).get("m", 4) or 4)
    zscores = table_path(run_dir, "zscores")
    return RunFit(path, name, scales, summary.get("alpha_us"), summary.get("bytes"),
                  str(summary.get("bytes_source", "")), summary.get("eps"), m, topologies,
                  zscores if zscores.is_file() else None, run_dir)
