"""The report's "why" of the attribution: root causes, blame routed across groups, and what to
change in the profiling where a collective stays unexplained (issue 28, item 6).

Built from the run's ``attribution_collectives`` table (the columns of
:data:`evtsync.critpath.attribution.COLLECTIVE_COLUMNS`); :func:`attribution_why_items` returns
report items (tables and lines) for one GPU label of the run ("unknown" for CPU-only jobs).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from evtsync.report.markdown import Table

#: Kinds of ``unexplained_reason`` (matched by their wording in evtsync.critpath: every word of
#: an entry), each with what to change in the profiling so that the next trace explains it.
REASON_KINDS: list[tuple[str, tuple[str, ...], str]] = [
    ("first collective in the profiling window", ("first collective of its group",),
     "record more steps per window (torch.profiler.schedule(active=…) larger) so that a previous collective "
     "of the group bounds the path"),
    ("kernel without a launch link", ("no launch/correlation edge",),
     "record the CUDA runtime too (activities=[CPU, CUDA]) so that every kernel links to its launch"),
    ("delay carried over from before the window", ("already", "behind"),
     "start the profiling window earlier (schedule(wait=…) smaller, active=… larger) so that the delay's "
     "origin is inside it"),
    ("fastest rank lost time off the path", ("ahead of the fastest rank",),
     "annotate the phases of the step with record_function(...) so that the ranks' events match"),
    ("critical-parent cycle", ("cycle",), "report it: the trace's dependencies form a loop (a clock or "
                                          "correlation problem)"),
    ("path reaches the trace start", ("no parent in the trace",),
     "record a longer window so that the path reaches a previous collective"),
    ("ranks ran different work", ("no counterpart",),
     "annotate the phases with record_function(...) (or with_stack=True) so that the ranks' events match"),
    ("end times disagree (CPU-side, busy host)", ("descheduled",),
     "give each rank its own cores (fewer ranks or threads per host) or record a longer window; on an "
     "oversubscribed CPU the collective's end moves by milliseconds"),
    *(("events missing from the trace", (needle,),
       "keep record_shapes and the default CPU activity on; a trace without the collective's enqueue or kernel "
       "cannot be walked") for needle in ("no GPU node", "no c10d", "no main thread")),
]
OTHER_REASON = ("rest off the critical path",
                "record with_stack=True or more record_function(...) annotations to name the off-path time")
#: What to do about a root cause of each category.
CATEGORY_ADVICE = {
    "python_gap": "uninstrumented Python: wrap the code (data loading, logging, …) in "
                  "torch.profiler.record_function('…') to name it",
    "python": "annotated Python on the straggler: the named region itself",
    "cpu_op": "an operator ran longer on the straggler (extra or slower work)",
    "enqueue": "the collective's enqueue was slow (the thread descheduled inside it?)",
    "launch_delay": "CPU-side launch delay: the kernel was launched late",
    "synchronization": "a blocking synchronisation on the straggler",
    "collective_wait": "the straggler waited in another collective whose own root is not attributed",
}


def reason_kind(reason: Any) -> tuple[str, str]:
    """(kind, what to change in the profiling) of one ``unexplained_reason``."""
    text = "" if reason is None or (isinstance(reason, float) and pd.isna(reason)) else str(reason)
    for kind, needles, advice in REASON_KINDS:
        if all(n in text for n in needles):
            return kind, advice
    return OTHER_REASON


def root_cause_table(coll: pd.DataFrame) -> pd.DataFrame:
    """Per workload, the root causes (rank, cause, category) by the tax they account for (sum of
    tau over the collectives routed to them), with how many were reached through other groups."""
    rows = coll[coll["status"].isin(["ok", "unexplained"]) & coll["root_cause"].notna()]
    if rows.empty:
        return pd.DataFrame()
    rows = rows.assign(routed=rows["root_chain"].fillna(0).astype(float) > 0,
                       cycle=rows["root_cycle"].fillna(False).astype(bool))
    grouped = rows.groupby(["workload", "root_rank", "root_cause", "root_category"], dropna=False, sort=False)
    out = grouped.agg(collectives=("index", "size"), tax_us=("tau_max_us", "sum"),
                      through_other_collectives=("routed", "sum"), cycles_cut=("cycle", "sum")).reset_index()
    out["advice"] = out["root_category"].map(lambda c: CATEGORY_ADVICE.get(str(c), ""))
    out = out.sort_values(["workload", "tax_us"], ascending=[True, False])
    return out.groupby("workload", sort=True).head(8).reset_index(drop=True)


def unexplained_table(coll: pd.DataFrame) -> pd.DataFrame:
    """Per workload and kind of reason, the unexplained (or unattributed) collectives, the tax
    they hold and what to change in the profiling."""
    rows = coll[coll["status"].isin(["unexplained", "no_node"])]
    if rows.empty:
        return pd.DataFrame()
    kinds = [reason_kind(r) for r in rows["unexplained_reason"]]
    rows = rows.assign(reason=[k for k, _ in kinds], change=[a for _, a in kinds])
    out = rows.groupby(["workload", "reason", "change"], sort=False).agg(
        collectives=("index", "size"), tax_us=("tau_max_us", "sum")).reset_index()
    return out.sort_values(["workload", "tax_us"], ascending=[True, False]).reset_index(drop=True)[
        ["workload", "reason", "collectives", "tax_us", "change"]]


def rank_blame_table(coll: pd.DataFrame, tax_ranks: pd.DataFrame | None) -> pd.DataFrame:
    """Per workload and rank: how often it straggled, the wait it suffered against the wait it
    caused (as the straggler, and as the root after routing), from the run's tables."""
    from evtsync.critpath.attribution import rank_blame

    if tax_ranks is None or tax_ranks.empty or "workload" not in coll.columns:
        return pd.DataFrame()
    parts = []
    for workload, sub in coll.groupby("workload", sort=True):
        ranks = tax_ranks[tax_ranks["workload"].astype(str) == str(workload)]
        if len(ranks):
            parts.append(rank_blame(sub, ranks).assign(workload=workload))
    if not parts:
        return pd.DataFrame()
    out = pd.concat(parts, ignore_index=True)
    return out[["workload", "rank", "collectives", "straggled", "wait_suffered_us", "wait_caused_us",
                "wait_caused_root_us"]]


def attribution_why_items(coll: pd.DataFrame | None, gpu: str, tax_ranks: pd.DataFrame | None = None) -> list[Any]:
    """Report items for the collectives of ``gpu``: root causes, per-rank blame, unexplained reasons."""
    if coll is None or coll.empty or "root_cause" not in coll.columns:
        return []
    sub = coll[coll["gpu"].astype(str) == gpu] if "gpu" in coll.columns else coll
    items: list[Any] = []
    roots = root_cause_table(sub)
    if len(roots):
        items.append(Table(roots.rename(columns={"root_rank": "root rank", "root_cause": "root cause",
                                                 "root_category": "category", "tax_us": "tax µs",
                                                 "through_other_collectives": "via other collectives",
                                                 "cycles_cut": "cycles cut"}),
                           "Who and why: the root causes of the stragglers. A straggler whose principal cause is a "
                           "wait in another collective (of its own or another process group) passes the blame to "
                           "that collective's straggler, recursively; the root is where the chain ends "
                           "(docs/critical-path.md). Tax µs: sum of tau over the collectives routed to each root; "
                           "via other collectives: how many of them reached it through a chain."))
    if tax_ranks is not None and "gpu" in tax_ranks.columns:
        tax_ranks = tax_ranks[tax_ranks["gpu"].astype(str) == gpu]
    blame = rank_blame_table(sub, tax_ranks)
    if len(blame):
        items.append(Table(blame.rename(columns={"wait_suffered_us": "wait suffered µs",
                                                 "wait_caused_us": "wait caused as straggler µs",
                                                 "wait_caused_root_us": "wait caused as root µs"}),
                           "Per rank: the waiting it suffered (its own wait in all its collectives) against the "
                           "waiting it caused (the other members' wait in the collectives it straggled in, and in "
                           "those whose blame was routed to it as the root)."))
    unexplained = unexplained_table(sub)
    if len(unexplained):
        items.append(Table(unexplained.rename(columns={"tax_us": "tax µs", "change": "what to change in the profiling"}),
                           "Collectives whose path does not account for their tax (explained share outside "
                           "0.8–1.25) or that could not be walked, by reason, with what to record differently."))
    elif len(sub):
        items.append("Every attributed collective's path accounts for its tax (explained share 0.8–1.25).")
    return items
