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

REPORT = Path(__file__).resolve().parent.parent / "evtsync" / "report"
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
