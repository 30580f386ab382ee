"""Are two run folders the same results? Tables, fits' posteriors, summary.json, report.md.

Run by hand (not a test), e.g. after a change meant to cost less and compute the same::

    .venv/bin/python benchmarks/compare_runs.py RUN_A RUN_B [--rtol 0]

Every ``tables/*.parquet`` of either run is compared: the same columns, dtypes and rows, and
each column equal (exactly, NaN equal to NaN; numeric columns within ``--rtol`` when it is
given, the largest relative difference printed either way). Each fit's posterior and sample
statistics (``fits/*.nc``, read without the log-likelihood group) are compared array by array,
exactly. ``summary.json`` is compared after dropping what says when or how long (``created``,
``updated``, ``seconds``); ``report.md`` line by line. Exit status 0 when everything is equal
(within ``--rtol``), 1 otherwise; one line per difference.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

TIME_KEYS = {"created", "updated", "seconds", "cpu_seconds", "started", "time"}


def _column_diff(a: pd.Series, b: pd.Series, rtol: float) -> str | None:
    """None when the columns are equal (numeric: within rtol), else what differs."""
    if a.dtype != b.dtype:
        return f"dtype {a.dtype} vs {b.dtype}"
    if pd.api.types.is_numeric_dtype(a) and not pd.api.types.is_bool_dtype(a):
        x, y = a.to_numpy(dtype=float), b.to_numpy(dtype=float)
        same = (x == y) | (np.isnan(x) & np.isnan(y))
        if same.all():
            return None
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = np.abs(x - y) / np.maximum(np.abs(x), np.abs(y))
        worst = float(np.nanmax(np.where(same, 0.0, rel))) if (~same).any() else 0.0
        if rtol > 0 and worst <= rtol and not (np.isnan(x) ^ np.isnan(y)).any():
            return None
        return f"{int((~same).sum())} values differ, largest relative difference {worst:.3g}"
    if a.equals(b):
        return None
    return f"{int((a.astype(str) != b.astype(str)).sum())} values differ"


def compare_tables(a: Path, b: Path, rtol: float) -> list[str]:
    out = []
    names = sorted({p.name for p in (a / "tables").glob("*.parquet")} | {p.name for p in (b / "tables").glob("*.parquet")})
    for name in names:
        pa, pb = a / "tables" / name, b / "tables" / name
        if not pa.is_file() or not pb.is_file():
            out.append(f"tables/{name}: only in {'B' if not pa.is_file() else 'A'}")
            continue
        ta, tb = pd.read_parquet(pa), pd.read_parquet(pb)
        if list(ta.columns) != list(tb.columns) or len(ta) != len(tb):
            out.append(f"tables/{name}: columns or rows differ ({ta.shape} vs {tb.shape})")
            continue
        for col in ta.columns:
            diff = _column_diff(ta[col].reset_index(drop=True), tb[col].reset_index(drop=True), rtol)
            if diff:
                out.append(f"tables/{name}[{col}]: {diff}")
    return out


def compare_fits(a: Path, b: Path) -> list[str]:
    from evtsync.core.errors import FitError
    from evtsync.evt.fitfile import load_fit

    out = []
    names = sorted({p.name for p in (a / "fits").glob("*.nc")} | {p.name for p in (b / "fits").glob("*.nc")})
    for name in names:
        if not (a / "fits" / name).is_file() or not (b / "fits" / name).is_file():
            out.append(f"fits/{name}: only in one run")
            continue
        try:
            fa, fb = (load_fit(run / "fits" / name, skip=("log_likelihood",)) for run in (a, b))
        except FitError:  # not a GEV fit (the rank model's fits/rankmodel*.nc): its groups as written
            from evtsync.evt.fitfile import read_netcdf_tree

            fa, fb = (read_netcdf_tree(run / "fits" / name)[0] for run in (a, b))
        groups = [g for g in ("posterior", "sample_stats", "observed_data") if g in fa.children or g in fb.children]
        for group in groups:
            if group not in fa.children or group not in fb.children:
                out.append(f"fits/{name}/{group}: only in one run")
                continue
            da, db = fa[group].to_dataset(), fb[group].to_dataset()
            if set(da.data_vars) != set(db.data_vars):
                out.append(f"fits/{name}/{group}: variables differ")
                continue
            for var in da.data_vars:
                if group == "sample_stats" and var in ("time", "time_since_start"):  # wall clock of each draw
                    continue
                if not np.array_equal(da[var].values, db[var].values, equal_nan=da[var].dtype.kind == "f"):
                    out.append(f"fits/{name}/{group}/{var}: arrays differ")
    return out


def _strip(obj):
    if isinstance(obj, dict):
        return {k: _strip(v) for k, v in obj.items() if k not in TIME_KEYS}
    if isinstance(obj, list):
        return [_strip(v) for v in obj]
    return obj


def compare_texts(a: Path, b: Path) -> list[str]:
    out = []
    ja, jb = (json.loads((run / "summary.json").read_text(encoding="utf-8")) for run in (a, b))
    if _strip(ja) != _strip(jb):
        out.append("summary.json differs (times left out)")
    la, lb = ((run / "report.md").read_text(encoding="utf-8").splitlines() for run in (a, b))
    differing = [i for i, (x, y) in enumerate(zip(la, lb, strict=False)) if x != y]
    if differing or len(la) != len(lb):
        out.append(f"report.md: {len(differing)} lines differ (first: {differing[:3]}), {len(la)} vs {len(lb)} lines")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--rtol", type=float, default=0.0, help="relative tolerance of numeric table columns (default 0)")
    ap.add_argument("--no-fits", action="store_true", help="leave the fits' posteriors out")
    args = ap.parse_args()
    diffs = compare_tables(args.run_a, args.run_b, args.rtol)
    if not args.no_fits:
        diffs += compare_fits(args.run_a, args.run_b)
    diffs += compare_texts(args.run_a, args.run_b)
    for line in diffs:
        print(line)
    print("equal" if not diffs else f"{len(diffs)} difference(s)", file=sys.stderr)
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
