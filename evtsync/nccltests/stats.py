"""Statistics and verdicts for nccl-tests results, following the seed's rules (methodology §9).

Per size and placement: median, P95 and cycle CV over the ``-N`` cycles (CV = population
sd / mean x 100%), and the iteration CV printed by ``-I 1`` where present. A precise
relative difference may be stated only when the cycle CV is <= 5% on every side involved;
otherwise the data are kept, reported as unstable, and no precise percentage is given.
``#wrong`` != 0 makes a result invalid as a baseline. A regression verdict between two runs
compares medians only when both sides are stable, the P95 moves the same way, correctness
passed and the configuration matches; otherwise it says why no verdict can be given.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from evtsync.core.errors import NcclTestsError
from evtsync.nccltests.parse import ParsedLog, RunInfo

if TYPE_CHECKING:  # pandas is imported by the functions that build tables (CLI start-up cost)
    import pandas as pd

log = logging.getLogger("evtsync.nccltests.stats")

CV_THRESHOLD_PCT = 5.0
KEY = ["type", "redop", "root", "size", "count", "placement"]


def cv_pct(values: np.ndarray) -> float:
    """Coefficient of variation in percent: population standard deviation / mean x 100."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0 or v.mean() == 0:
        return math.nan
    return float(v.std(ddof=0) / v.mean() * 100.0)


def _correctness(wrong: np.ndarray, error: np.ndarray) -> tuple[str, float]:
    """``passed`` when every printed ``#wrong`` is 0; ``failed`` when one is anything else (a
    count > 0, or a value no count can be: negative, infinite, ``-1e309``); ``not checked``
    only when none was printed (``N/A``)."""
    w = np.asarray(wrong, dtype=float)
    printed = w[~np.isnan(w)]
    if printed.size:
        total = float(np.abs(printed).sum())
        return ("failed" if (printed != 0).any() else "passed"), total
    if np.isfinite(np.asarray(error, dtype=float)).any():
        return "max-error only (old format)", math.nan
    return "not checked", math.nan


def _number(value: Any) -> float:
    """A measurement cell as a float (a missing one as NaN, as in the DataFrame)."""
    return math.nan if value is None else float(value)


def size_stats(
    logs: ParsedLog | list[ParsedLog],
    *,
    run: int | None = None,
    pool_runs: bool = False,
    cv_threshold: float = CV_THRESHOLD_PCT,
    min_cycles: int = 3,
) -> pd.DataFrame:
    """One row per (type, redop, root, size, count, placement) with median, P95, CVs and status.

    ``pool_runs`` pools every run of every log given (e.g. the replicates of one variant of a
    planned experiment, as the seed pools 4 processes x 10 cycles); otherwise runs are kept
    apart (column ``run``). ``stability`` is ``stable`` (cycle CV <= threshold with at least
    ``min_cycles`` cycles), ``unstable`` or ``unknown`` (too few cycles to tell). The rows of
    :func:`size_stats_records` as a DataFrame.
    """
    import pandas as pd

    return pd.DataFrame(size_stats_records(logs, run=run, pool_runs=pool_runs, cv_threshold=cv_threshold,
                                           min_cycles=min_cycles))


def size_stats_records(
    logs: ParsedLog | list[ParsedLog],
    *,
    run: int | None = None,
    pool_runs: bool = False,
    cv_threshold: float = CV_THRESHOLD_PCT,
    min_cycles: int = 3,
) -> list[dict[str, Any]]:
    """The rows of :func:`size_stats` as plain dicts, in the same order, computed from the logs'
    measurement records without pandas (``evtsync nccl-tests stats`` starts small, issue 30).

    Parameters
    ----------
    logs : ParsedLog or list of ParsedLog
        Parsed nccl-tests logs (:func:`evtsync.nccltests.parse_log`).
    run : int or None, default None
        Only this run of each log (None: every run).
    pool_runs : bool, default False
        Pool every run of every log into one row per size (replicate processes).
    cv_threshold : float, default 5.0
        Largest cycle CV (%) called stable.
    min_cycles : int, default 3
        Cycles needed to judge stability.

    Returns
    -------
    list of dict
        One dict per (source, run,) type, redop, root, size, count, placement, sorted by source,
        run, placement, type, redop, root and size: the columns of :func:`size_stats`.

    Raises
    ------
    NcclTestsError
        No measurement (with a size > 0) to summarise.
    """
    items = logs if isinstance(logs, list) else [logs]
    footer: dict[tuple[int, int], bool | None] = {}
    aborted: dict[tuple[int, int], str] = {}
    rows: list[dict[str, Any]] = []
    for i, pl in enumerate(items):
        for r in pl.runs:
            footer[(i, r.index)] = r.out_of_bounds_ok
            if r.failure is not None:
                aborted[(i, r.index)] = r.failure
        rows += [{**m, "source": i} for m in pl.rows if run is None or m["run"] == run]
    if not rows:
        raise NcclTestsError("no measurements to summarise")
    group_cols = KEY if pool_runs else ["source", "run", *KEY]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for m in rows:
        if m["size"] > 0:
            groups.setdefault(tuple(m[c] for c in group_cols), []).append(m)
    out = []
    for key, g in groups.items():
        times = np.array([_number(m["time_us"]) for m in g], dtype=float)
        times = times[np.isfinite(times)]
        n = int(times.size)
        cyc_cv = cv_pct(times) if n >= 2 else math.nan
        icv = np.array([_number(m["i_cv_pct"]) for m in g], dtype=float)
        icv = icv[np.isfinite(icv)]
        status, wrong_total = _correctness(np.array([_number(m["wrong"]) for m in g], dtype=float),
                                           np.array([_number(m["error"]) for m in g], dtype=float))
        members = list(dict.fromkeys((m["source"], m["run"]) for m in g))
        oks = {footer.get(k) for k in members}
        if status.startswith("max-error"):
            if oks == {True}:
                status = "passed"
            elif False in oks:
                status = "failed"
        elif status in ("passed", "not checked") and False in oks:
            status = "failed (footer)"  # the run's out-of-bounds footer says FAILED
        if any(k in aborted for k in members):
            status = "run aborted"  # the process died: a result that may be cut or corrupt
        if n < max(min_cycles, 2):
            stability = "unknown"
        else:
            stability = "stable" if cyc_cv <= cv_threshold else "unstable"
        busbw = np.array([_number(m["busbw_gbps"]) for m in g], dtype=float)
        row = dict(zip(group_cols, key, strict=True))
        row.update(
            n_cycles=n,
            median_us=float(np.median(times)) if n else math.nan,
            p95_us=float(np.percentile(times, 95)) if n else math.nan,
            mean_us=float(times.mean()) if n else math.nan,
            min_us=float(times.min()) if n else math.nan,
            max_us=float(times.max()) if n else math.nan,
            cycle_cv_pct=cyc_cv,
            iter_cv_pct=float(np.median(icv)) if icv.size else math.nan,
            iter_cv_max_pct=float(icv.max()) if icv.size else math.nan,
            iter_stability=("unknown" if not icv.size else
                            "stable" if icv.max() <= cv_threshold else "unstable"),
            busbw_median_gbps=float(np.nanmedian(busbw)) if (~np.isnan(busbw)).any() else math.nan,
            wrong_total=wrong_total,
            correctness=status,
            valid_baseline=status == "passed",
            stability=stability,
            precise_claims=stability == "stable",
            n_flagged=sum(m["bw_flag"] != "" for m in g),
        )
        out.append(row)
    if not out:
        raise NcclTestsError("no measurements with a size > 0 to summarise")
    order = [c for c in ("source", "run", "placement", "type", "redop", "root", "size") if c in out[0]]
    return sorted(out, key=lambda r: tuple(r[c] for c in order))  # stable, as the table's sort


# --------------------------------------------------------------------------- compare

_CONFIG_FIELDS = ("collective", "n_ranks", "gpus", "iters", "agg_iters", "blocking",
                  "per_iteration", "cputime", "graph")


@dataclass
class SizeVerdict:
    """Regression verdict for one size/placement, with its reasons."""

    size: int
    placement: str
    type: str
    redop: str
    verdict: str
    precise: bool
    change_pct: float | None
    observed_change_pct: float | None
    p95_change_pct: float | None
    old_median_us: float | None
    new_median_us: float | None
    old_cv_pct: float | None
    new_cv_pct: float | None
    reasons: list[str] = field(default_factory=list)


@dataclass
class Comparison:
    """Result of comparing two nccl-tests logs (OLD baseline vs NEW)."""

    old: str
    new: str
    config_differences: list[str]
    config_caveats: list[str]
    verdicts: list[SizeVerdict]
    threshold_pct: float
    cv_threshold_pct: float

    @property
    def n_regressions(self) -> int:
        """Number of sizes with a precise regression verdict."""
        return sum(v.verdict == "regression" for v in self.verdicts)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        d = asdict(self)
        d["n_regressions"] = self.n_regressions
        return d


def _config_view(info: RunInfo) -> dict[str, Any]:
    return {f: getattr(info, f) for f in _CONFIG_FIELDS}


def _known(v: Any) -> bool:
    return v is not None and v != [] and v != ""


def compare_config(old: RunInfo, new: RunInfo) -> tuple[list[str], list[str]]:
    """(differences that forbid a verdict, fields that could not be checked)."""
    diffs, caveats = [], []
    a, b = _config_view(old), _config_view(new)
    for f in _CONFIG_FIELDS:
        if f in ("per_iteration", "cputime"):
            if a[f] != b[f] and (old.has_table_header or old.has_header) and (new.has_table_header or new.has_header):
                diffs.append(f"{f}: {a[f]} vs {b[f]}")
            continue
        if _known(a[f]) and _known(b[f]):
            if a[f] != b[f]:
                diffs.append(f"{f}: {a[f]} vs {b[f]}")
        elif _known(a[f]) or _known(b[f]) or f in ("iters", "gpus"):
            caveats.append(f"{f} not recorded in {'OLD' if not _known(a[f]) else 'NEW'} log: cannot confirm it matches")
    if _known(old.warmup_iters) and _known(new.warmup_iters) and old.warmup_iters != new.warmup_iters:
        caveats.append(f"warmup iters differ: {old.warmup_iters} vs {new.warmup_iters}")
    return diffs, caveats


def compare_logs(
    old: ParsedLog,
    new: ParsedLog,
    *,
    old_run: int | None = None,
    new_run: int | None = None,
    threshold_pct: float = 2.0,
    cv_threshold: float = CV_THRESHOLD_PCT,
    min_cycles: int = 3,
) -> Comparison:
    """Regression verdict per size between a baseline (OLD) and a candidate (NEW) log.

    A precise verdict (``regression``, ``improvement`` or ``no significant change``) needs:
    matching configuration, correctness passed on both sides, both cycle CVs <= ``cv_threshold``
    with at least ``min_cycles`` cycles, and P95 moving the same way as the median. A change
    counts when it exceeds both ``threshold_pct`` and twice its standard error from the cycle
    CVs (sqrt(cv_old^2/n_old + cv_new^2/n_new)). Otherwise the verdict says why none is given.
    """
    ri_old, ri_new = old.run(old_run), new.run(new_run)
    diffs, caveats = compare_config(ri_old, ri_new)
    s_old = size_stats(old, run=ri_old.index, cv_threshold=cv_threshold, min_cycles=min_cycles)
    s_new = size_stats(new, run=ri_new.index, cv_threshold=cv_threshold, min_cycles=min_cycles)
    key = ["placement", "type", "redop", "root", "size"]
    merged = s_old.merge(s_new, on=key, how="outer", suffixes=("_old", "_new"), indicator=True)
    verdicts = []
    for r in merged.to_dict(orient="records"):
        verdicts.append(_verdict(r, diffs, threshold_pct, cv_threshold))
    return Comparison(old=old.path, new=new.path, config_differences=diffs, config_caveats=caveats,
                      verdicts=verdicts, threshold_pct=threshold_pct, cv_threshold_pct=cv_threshold)


def _f(v: Any) -> float | None:
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _verdict(r: dict[str, Any], diffs: list[str], threshold: float, cv_threshold: float) -> SizeVerdict:
    base = dict(size=int(r["size"]), placement=r["placement"], type=r["type"], redop=r["redop"])
    om, nm = _f(r.get("median_us_old")), _f(r.get("median_us_new"))
    op, np95 = _f(r.get("p95_us_old")), _f(r.get("p95_us_new"))
    ocv, ncv = _f(r.get("cycle_cv_pct_old")), _f(r.get("cycle_cv_pct_new"))
    observed = (nm / om - 1.0) * 100.0 if om and nm else None
    p95_change = (np95 / op - 1.0) * 100.0 if op and np95 else None
    common: dict[str, Any] = dict(observed_change_pct=observed, p95_change_pct=p95_change, old_median_us=om,
                  new_median_us=nm, old_cv_pct=ocv, new_cv_pct=ncv)
    reasons: list[str] = []
    if r["_merge"] != "both":
        side = "OLD" if r["_merge"] == "left_only" else "NEW"
        return SizeVerdict(**base, verdict="no verdict", precise=False, change_pct=None,
                           reasons=[f"size measured only in {side}"], **common)
    if r["count_old"] != r["count_new"]:
        reasons.append(f"element count differs ({r['count_old']} vs {r['count_new']})")
    reasons += [f"configuration differs: {d}" for d in diffs]
    for side, sfx in (("OLD", "_old"), ("NEW", "_new")):
        corr = r[f"correctness{sfx}"]
        if corr == "failed":
            reasons.append(f"{side} failed correctness (#wrong total {r[f'wrong_total{sfx}']:g}): not a valid baseline")
        elif corr != "passed":
            reasons.append(f"{side} correctness {corr}: unverified throughput, not a valid baseline")
    for side, sfx, cv in (("OLD", "_old", ocv), ("NEW", "_new", ncv)):
        stab = r[f"stability{sfx}"]
        if stab == "unstable":
            reasons.append(f"{side} unstable: cycle CV {cv:.2f}% > {cv_threshold:g}%")
        elif stab == "unknown":
            reasons.append(f"{side} stability unknown: {r[f'n_cycles{sfx}']} cycle(s); run with -N >= 3")
    if reasons:
        unstable_only = all("unstable" in x or "stability unknown" in x for x in reasons)
        verdict = "unstable: no precise claim" if unstable_only else "no verdict"
        if observed is not None and unstable_only:
            reasons.append(f"observed median change {observed:+.1f}% (not a precise claim)")
        return SizeVerdict(**base, verdict=verdict, precise=False, change_pct=None, reasons=reasons, **common)
    assert observed is not None and ocv is not None and ncv is not None
    noise = 2.0 * math.sqrt(ocv**2 / r["n_cycles_old"] + ncv**2 / r["n_cycles_new"])
    band = max(threshold, noise)
    if abs(observed) <= band:
        return SizeVerdict(**base, verdict="no significant change", precise=True, change_pct=observed,
                           reasons=[f"|change| {abs(observed):.2f}% <= max(threshold {threshold:g}%, "
                                    f"2 SE {noise:.2f}%)"], **common)
    if p95_change is None or (p95_change > 0) != (observed > 0):
        return SizeVerdict(**base, verdict="no verdict", precise=False, change_pct=None,
                           reasons=[f"median moves {observed:+.2f}% but P95 moves {p95_change:+.2f}%"
                                    if p95_change is not None else "P95 unavailable"], **common)
    verdict = "regression" if observed > 0 else "improvement"
    return SizeVerdict(**base, verdict=verdict, precise=True, change_pct=observed,
                       reasons=[f"median {observed:+.2f}% and P95 {p95_change:+.2f}% beyond "
                                f"max(threshold {threshold:g}%, 2 SE {noise:.2f}%)"], **common)
