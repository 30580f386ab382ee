"""Result objects print as a short summary of their tables (terminal and notebook)."""

from __future__ import annotations

import pandas as pd

from evtsync.sync.tax import TaxTables


def test_repr_lists_tables_with_their_shapes():
    tables = TaxTables(pd.DataFrame({"a": [1, 2, 3]}), pd.DataFrame({"b": [1], "c": [2]}))
    assert repr(tables) == "<TaxTables collectives=3 rows × 1 columns, ranks=1 rows × 2 columns>"
    page = tables._repr_html_()
    assert "<table>" in page and "3 rows × 1 columns" in page and "TaxTables" in page
