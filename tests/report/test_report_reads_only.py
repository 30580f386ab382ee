"""The report only reads (issue 31): every number a run report's section shows comes from a
stage's table or summary. The sections' syntax trees are scanned for the calls that compute a
statistic from a column (a mean, a median, a sum, an extreme, a quantile, an aggregation) and
for NumPy's reductions; formatting (``fmt``, ``fmt_ci``), selection, reshaping (``pivot_table``
with ``aggfunc="first"``) and counting rows stay allowed.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPORT = Path(__file__).resolve().parents[2] / "evtsync" / "report"
#: The run report's sections, and the helpers that build their items.
SECTIONS = [*sorted((REPORT / "sections").glob("*.py")), REPORT / "attribution_section.py"]

#: Method or function names that compute a statistic from values.
REDUCTIONS = {"mean", "median", "sum", "min", "max", "std", "var", "quantile", "nanmean", "nanmedian", "nansum",
              "nanmin", "nanmax", "nanquantile", "percentile", "nanpercentile", "average", "prod", "cumsum",
              "agg", "aggregate", "describe", "corr", "cov", "sem", "mad"}


def reductions(source: str) -> list[str]:
    """The lines of ``source`` that call a reduction (``x.mean()``, ``np.median(x)``, ``g.agg(...)``)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in REDUCTIONS and not (isinstance(func, ast.Name) and name in {"min", "max", "sum"}
                                           and _over_literals(node)):
                found.append(f"line {node.lineno}: {ast.unparse(node)[:80]}")
    return found


def _over_literals(node: ast.Call) -> bool:
    """Python's min/max/sum over literal numbers only (e.g. clamping a figure width) compute no statistic."""
    return all(isinstance(a, ast.Constant) for a in node.args)


def test_the_scan_finds_what_it_should() -> None:
    """The check itself, on code written here: it flags a column mean and a NumPy median, not a
    format call or a row count."""
    flagged = reductions("a = t['cv'].mean()\nb = np.median(x)\nc = fmt(t['x'].iloc[0])\nd = len(t)\n"
                         "e = t.groupby('k')['v'].agg(all)\n")
    assert [f.split(":")[0] for f in flagged] == ["line 1", "line 2", "line 5"]


@pytest.mark.parametrize("path", SECTIONS, ids=lambda p: p.name)
def test_report_sections_compute_no_statistic(path: Path) -> None:
    found = reductions(path.read_text(encoding="utf-8"))
    assert not found, (f"{path.name} computes a statistic the stage that writes the table should write as a "
                       f"column (issue 31: the report only reads): " + "; ".join(found))


def test_inputs_read_the_tax_stage_counts(tmp_path: Path) -> None:
    """The tax stage counts each workload's inputs (``tables/tax_workloads``); the inputs section
    shows them. By hand: rank 0 split into two files, rank 1 in one: 2 ranks, 3 files, 10 + 20 + 5
    events; one aligned PG."""
    import pandas as pd

    from evtsync.pipeline.stages import _workload_inputs
    from evtsync.report.context import ReportContext
    from evtsync.report.markdown import Skipped, Table
    from evtsync.report.sections import inputs

    files = pd.DataFrame({"rank": [0, 0, 1], "n_events": [10, 20, 5], "file": ["a0", "a1", "b"]})
    groups = pd.DataFrame({"pg": ["0"], "pg_ranks": ["0,1"], "n_collectives": [7]})
    counts = _workload_inputs(files, groups).iloc[0]
    assert (counts["ranks"], counts["trace_files"], counts["events"], counts["process_groups"]) == (2, 3, 35, 1)
    run = tmp_path / "run"
    (run / "tables").mkdir(parents=True)
    files.assign(workload="w", gpu="H100").to_parquet(run / "tables" / "tax_traces.parquet")
    groups.assign(workload="w", gpu="H100").to_parquet(run / "tables" / "tax_groups.parquet")
    manifest = {"stages": {"tax": {"status": "done"}}}
    (item,) = inputs.build(ReportContext(run, tmp_path / "out", manifest))[0].items
    assert isinstance(item, Skipped) and "tax_workloads" in item.text  # an older run folder: said, not computed
    _workload_inputs(files, groups).assign(workload="w", gpu="H100").to_parquet(run / "tables" / "tax_workloads.parquet")
    (table,) = inputs.build(ReportContext(run, tmp_path / "out", manifest))[0].items
    assert isinstance(table, Table)
    row = table.frame.iloc[0]
    assert (row["ranks"], row["trace files"], row["events"], row["process groups"]) == (2, 3, 35, 1)
    assert row["PGs (label: ranks, collectives)"] == "0: 0,1 (7)"
