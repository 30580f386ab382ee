"""The report's "why" of the attribution: root causes, blame routed across groups, and what to
change in the profiling where a collective stays unexplained (issue 28, item 6).

Read from the attribution stage's tables (``attribution_root_causes``, ``attribution_rank_blame``,
``attribution_unexplained``: :func:`evtsync.critpath.attribution.why_tables`);
:func:`attribution_why_items` returns report items (tables and lines) for one GPU label of the
run ("unknown" for CPU-only jobs).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from evtsync.report.markdown import Skipped, Table

#: Root causes shown per GPU label in the report; the rest are counted and left to the table file.
ROOT_CAUSES_SHOWN = 8
ROOT_CAUSES_FILE = "tables/attribution_root_causes.parquet"


def attribution_why_items(coll: pd.DataFrame | None, gpu: str, why: dict[str, pd.DataFrame | None]) -> list[Any]:
    """Report items for the collectives of ``gpu``: root causes, per-rank blame, unexplained
    reasons, read from the attribution stage's tables (``why``: ``root_causes``, ``rank_blame``,
    ``unexplained``, :func:`evtsync.critpath.attribution.why_tables`)."""
    if coll is None or coll.empty or "root_cause" not in coll.columns:
        return []
    if any(why.get(name) is None for name in ("root_causes", "rank_blame", "unexplained")):
        return [Skipped("No root-cause tables: this run folder has no tables/attribution_root_causes.parquet "
                        "(its attribution stage was run by an evtsync that left them to the report); rerun "
                        "`evtsync run --force` to add them.")]

    def on_gpu(table: pd.DataFrame | None) -> pd.DataFrame:
        assert table is not None
        return table[table["gpu"].astype(str) == gpu] if len(table) and "gpu" in table else table.iloc[:0]

    sub = coll[coll["gpu"].astype(str) == gpu] if "gpu" in coll.columns else coll
    items: list[Any] = []
    roots = on_gpu(why["root_causes"]).drop(columns=["gpu"])
    if len(roots) > ROOT_CAUSES_SHOWN:
        # the largest first (the stage sorts by tax); never cut without a word (issue 46, item 4)
        rest = len(roots) - ROOT_CAUSES_SHOWN
        roots = roots.sort_values("tax_us", ascending=False, kind="stable")
        more = (f"The {ROOT_CAUSES_SHOWN} (root rank, cause) pairs with the most tax of {len(roots)}; "
                f"{rest} more, each with less tax, in {ROOT_CAUSES_FILE}.")
        roots = roots.head(ROOT_CAUSES_SHOWN)
    else:
        more = f"All {len(roots)} (root rank, cause) pair(s)."
    if len(roots):
        items.append(Table(roots.rename(columns={"root_rank": "root rank", "root_cause": "root cause",
                                                 "root_category": "category", "tax_us": "tax µs",
                                                 "unexplained_tax_us": "of it unexplained µs",
                                                 "through_other_collectives": "via other collectives",
                                                 "cycles_cut": "cycles cut"}).reset_index(drop=True),
                           "Who and why: the root causes of the stragglers. A straggler whose principal cause is a "
                           "wait in another collective (of its own or another process group) passes the blame to "
                           "that collective's straggler, recursively; the root is where the chain ends "
                           "(docs/critical-path.md). Tax µs: sum of tau over the collectives routed to each root; "
                           "via other collectives: how many of them reached it through a chain; flag 'unexplained': at least "
                           "half of its tax is on collectives that are unexplained or stopped with a reason; 'scheduling': "
                           "the root is time inside a c10d call outside its collective's run, the thread waiting for "
                           "a core (or the GIL). " + more))
    blame = on_gpu(why["rank_blame"]).drop(columns=["gpu"])
    if len(blame):
        items.append(Table(blame.rename(columns={"wait_suffered_us": "wait suffered µs",
                                                 "wait_caused_us": "wait caused as straggler µs",
                                                 "wait_caused_root_us": "wait caused as root µs"}).reset_index(drop=True),
                           "Per rank: the waiting it suffered (its own wait in all its collectives) against the "
                           "waiting it caused (the other members' wait in the collectives it straggled in, and in "
                           "those whose blame was routed to it as the root)."))
    unexplained = on_gpu(why["unexplained"]).drop(columns=["gpu"])
    if len(unexplained):
        items.append(Table(unexplained.rename(columns={"tax_us": "tax µs", "change": "what to change in the profiling"})
                           .reset_index(drop=True),
                           "Collectives whose path does not account for their tax (explained share outside "
                           "0.8–1.25) or that could not be walked, by reason, with what to record differently."))
    elif len(sub):
        items.append("Every attributed collective's path accounts for its tax (explained share 0.8–1.25).")
    return items
