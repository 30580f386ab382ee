"""The report's attribution "who and why" tables, on hand-made rows counted by hand."""

from __future__ import annotations

import pandas as pd

from evtsync.critpath.attribution import (
    reason_kind,
    root_cause_table,
    unexplained_table,
    why_tables,
)
from evtsync.report.attribution_section import attribution_why_items


def _rows() -> pd.DataFrame:
    base = dict(workload="w", gpu="unknown", root_cycle=False)
    return pd.DataFrame([
        dict(base, pg="1", index=0, straggler_rank=0, status="ok", tau_max_us=100.0, root_rank=0, root_cause="data_loader_stall",
             root_category="python", root_chain=0, unexplained_reason=None),
        dict(base, pg="4", index=0, straggler_rank=1, status="ok", tau_max_us=50.0, root_rank=0, root_cause="data_loader_stall",
             root_category="python", root_chain=1, unexplained_reason=None),
        dict(base, pg="2", index=3, straggler_rank=3, status="unexplained", tau_max_us=30.0, root_rank=3, root_cause="(python gap)",
             root_category="python_gap", root_chain=0,
             unexplained_reason="path extra 40 us of tau 30 us: first collective of its group in the profiling "
                                "window, counted from each rank's window start"),
        dict(base, pg="2", index=4, straggler_rank=None, status="no_node", tau_max_us=20.0, root_rank=None, root_cause=None,
             root_category=None, root_chain=0, unexplained_reason="rank 1: no c10d::* enqueue on the main thread"),
        dict(base, pg="2", index=5, straggler_rank=None, status="no_tax", tau_max_us=0.0, root_rank=None, root_cause=None,
             root_category=None, root_chain=0, unexplained_reason=None),
    ])


def test_root_causes_sum_the_tax_routed_to_them():
    table = root_cause_table(_rows())
    first = table.iloc[0]
    assert (first["root_rank"], first["root_cause"]) == (0, "data_loader_stall")
    assert first["collectives"] == 2 and first["tax_us"] == 150.0 and first["through_other_collectives"] == 1
    assert len(table) == 2  # the unattributed and untaxed rows have no root
    assert "record_function" in table.iloc[1]["advice"]


def test_unexplained_by_reason_with_what_to_change():
    table = unexplained_table(_rows())
    assert table["collectives"].tolist() == [1, 1]
    assert set(table["reason"]) == {"first collective in the profiling window", "events missing from the trace"}
    first = table[table["reason"] == "first collective in the profiling window"].iloc[0]
    assert "schedule(active" in first["change"]
    assert reason_kind("something new")[0] == "rest off the critical path"


def test_items_include_the_per_rank_blame_when_the_tax_ranks_are_given():
    ranks = pd.DataFrame({"workload": "w", "gpu": "unknown", "pg": ["1", "1", "4", "4"], "index": [0, 0, 0, 0],
                          "rank": [0, 1, 1, 3], "wait_us": [0.0, 100.0, 0.0, 50.0]})
    items = attribution_why_items(_rows(), "unknown", why_tables(_rows(), ranks))
    blame = items[1].frame.set_index("rank")
    # rank 0 is the root of both taxed collectives: the 150 µs that ranks 1 and 3 waited
    assert blame.loc[0, "wait caused as root µs"] == 150.0
    assert blame.loc[1, "wait suffered µs"] == 100.0 and blame.loc[3, "wait suffered µs"] == 50.0
    # as the straggler: rank 0 of the first (rank 1 waited 100 µs), rank 1 of the second (rank 3 waited 50 µs)
    assert blame.loc[0, "wait caused as straggler µs"] == 100.0 and blame.loc[1, "wait caused as straggler µs"] == 50.0


def test_a_run_folder_without_the_tables_says_how_to_get_them():
    """The report reads the stage's tables (issue 31): without them it says so, computing nothing."""
    from evtsync.report.markdown import Skipped

    items = attribution_why_items(_rows(), "unknown", {"root_causes": None, "rank_blame": None, "unexplained": None})
    assert len(items) == 1 and isinstance(items[0], Skipped) and "rerun `evtsync run --force`" in items[0].text


def test_every_root_cause_pair_is_kept_and_the_report_says_how_many_it_leaves_out():
    """Issue 46, item 4: 18 (root rank, cause) pairs; the table keeps all 18, the report shows 8 and
    names how many others are in the table file (hand count: taxes 18, 17, …, 1 µs)."""
    rows = pd.DataFrame([dict(workload="w", gpu="unknown", root_cycle=False, pg="1", index=i, straggler_rank=i % 6,
                              status="ok", tau_max_us=float(18 - i), root_rank=i % 6, root_cause=f"cause{i}",
                              root_category="cpu_op", root_chain=0, unexplained_reason=None) for i in range(18)])
    table = root_cause_table(rows)
    assert len(table) == 18 and table["tax_us"].sum() == sum(range(1, 19))
    items = attribution_why_items(rows, "unknown", why_tables(rows, None))
    shown = items[0]
    assert len(shown.frame) == 8 and shown.frame["tax µs"].tolist() == [18.0, 17, 16, 15, 14, 13, 12, 11]
    assert "10 more, each with less tax, in tables/attribution_root_causes.parquet" in shown.caption
    few = attribution_why_items(_rows(), "unknown", why_tables(_rows(), None))[0]
    assert len(few.frame) == 2 and "All 2" in few.caption and "more in" not in few.caption
