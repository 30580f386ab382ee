"""Result objects print as a short summary of their tables (terminal and notebook)."""

from __future__ import annotations

import pandas as pd

from evtsync.sync.tax import TaxTables


def test_repr_lists_tables_with_their_shapes():
    tables = TaxTables(pd.DataFrame({"a": [1, 2, 3]}), pd.DataFrame({"b": [1], "c": [2]}))
    assert repr(tables) == "<TaxTables collectives=3 rows × 1 columns, ranks=1 rows × 2 columns>"
    page = tables._repr_html_()
    assert "<table>" in page and "3 rows × 1 columns" in page and "TaxTables" in page


def test_run_view_shows_the_point_and_reads_an_older_summary_through_its_mean():
    """The notebook view of a run: τ(n) is the row's point (tau_point_us), named with the estimator;
    a summary.json from before the point holds only tau_mean_us, which was its point then."""
    from evtsync.core.display import run_html

    stages = pd.DataFrame({"stage": ["summary"], "status": ["done"], "reason": [""], "seconds": [1.0]})
    row = {"gpu": "H100", "precision": "bf16", "tau_point_us": 31.5, "tau_mean_us": 36.0, "tau_lo_us": 25.0,
           "tau_hi_us": 60.0, "converged": True}
    new = {"n": 512, "model": "gev", "estimator": "ranktail", "point_estimate": {"ranktail": "posterior median"},
           "rows": [row]}
    page = run_html("run", stages, new)
    assert "31.5 [25, 60]" in page and "36 [" not in page
    assert "ranktail (point: posterior median)" in page
    old = {"n": 512, "model": "gev", "estimator": "centred",
           "rows": [{k: v for k, v in row.items() if k != "tau_point_us"}]}
    page = run_html("run", stages, old)
    assert "36 [25, 60]" in page and "centred (point: posterior mean)" in page
