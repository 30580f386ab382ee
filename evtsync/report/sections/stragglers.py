"""Who straggles: per process group, the ranks that were the straggler most often (their share
against the uniform 1/|R|), how often the straggler changes between consecutive collectives and
how many distinct ranks straggled, read from the tax stage's ``tables/tax_stragglers`` and
``tables/tax_straggler_ranks`` (:func:`evtsync.sync.tax.straggler_identity`, methodology §3)."""

from __future__ import annotations

import pandas as pd

from evtsync.core.display import fmt_share
from evtsync.report.context import ReportContext
from evtsync.report.markdown import Skipped, Table
from evtsync.report.wording import all_cpu, straggler_words

#: Ranks named in a PG's "top stragglers" cell.
TOP_RANKS = 3


def straggler_frame(per_pg: pd.DataFrame, per_rank: pd.DataFrame) -> pd.DataFrame:
    """One row per workload × PG: the top stragglers with their shares, 1/|R|, the change rate and
    the distinct stragglers (key columns first: workload, PG, top stragglers)."""
    rows = []
    for r in per_pg.itertuples(index=False):
        ranks = per_rank[(per_rank["workload"].astype(str) == str(r.workload))
                         & (per_rank["pg"].astype(str) == str(r.pg)) & (per_rank["n_straggled"] > 0)]
        top = ranks.sort_values(["n_straggled", "rank"], ascending=[False, True]).head(TOP_RANKS)
        named = ", ".join(f"rank {int(t.rank)} {fmt_share(t.share)}" for t in top.itertuples())
        rows.append({
            "workload": r.workload, "PG": str(r.pg) + (f" ({r.pg_desc})" if str(r.pg_desc or "") not in
                                                     ("", "None", "nan", str(r.pg)) else ""),
            "top stragglers (share of collectives)": named or "–",
            "uniform share (1 / ranks)": fmt_share(r.uniform_share),
            "change rate": fmt_share(r.change_rate),
            "distinct stragglers": f"{int(r.n_distinct)} of {int(r.n_ranks)} ranks",
            "collectives": int(r.n_collectives),
            "left out": int(r.n_skipped)})
    return pd.DataFrame(rows)


def straggler_table(ctx: ReportContext, gpu: str | None = None) -> Table | Skipped:
    """The "who straggles" table of the run (or of one GPU's workloads), or why there is none."""
    per_pg, per_rank = ctx.table("tax_stragglers"), ctx.table("tax_straggler_ranks")
    if per_pg is None or per_rank is None:
        return Skipped("No \"who straggles\" table: this run folder has no tables/tax_stragglers.parquet (its tax "
                       "stage was run by an evtsync that did not write it); rerun `evtsync run --force` to add it.")
    if gpu is not None:
        per_pg = per_pg[per_pg["gpu"].astype(str) == gpu]
        per_rank = per_rank[per_rank["gpu"].astype(str) == gpu]
    if per_pg.empty:
        return Skipped("No \"who straggles\" table: no process group with a collective.")
    frame = straggler_frame(per_pg, per_rank)
    cpu = all_cpu(per_pg["gpu"]) if "gpu" in per_pg else False
    return Table(frame, (
        f"Who straggles, per process group: the ranks that were the straggler (the last to arrive: "
        f"{straggler_words(cpu)}) most often, with their share of the PG's collectives, against the uniform share 1/|R| if every "
        "member straggled equally; change rate = share of consecutive collectives whose straggler differs; "
        "distinct stragglers = ranks that straggled at least once. Collectives flagged invalid or without a tax "
        "are left out (column 'left out')."))
