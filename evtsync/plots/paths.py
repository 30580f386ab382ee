"""A Fig. 4-style view of one collective: the straggler's critical path against the fastest rank's.

Input: the ``paths`` table of :func:`evtsync.critpath.attribution.attribute` (one row per event
on either path: ``pg``, ``index``, ``rank``, ``role`` "straggler"/"fastest", ``name``, ``kind``,
``start_ns``, ``end_ns``, and on the straggler's rows ``extra_us``, the event's time over its
counterpart on the fastest rank). Each path is drawn on two lanes (GPU events; CPU-side events)
with time measured from the path's own first event (both ranks leave the previous collective
together, SPEC §4), so the straggler's path visibly ends later; the event with the largest
extra time (the principal cause) is outlined and named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from evtsync.errors import InputError
from evtsync.plots.base import new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

KIND_COLOURS = {"gpu": "C0", "cpu_op": "C1", "python": "C4", "python_gap": "C7", "launch": "C2", "sync": "C3",
                "runtime": "C5"}
ROLES = ("straggler", "fastest")


def straggler_vs_fastest(paths: pd.DataFrame, pg: Any, index: int, collectives: pd.DataFrame | None = None) -> Figure:
    """The two critical paths of collective ``index`` of process group ``pg`` as a timeline."""
    need = ["pg", "index", "role", "name", "kind", "start_ns", "end_ns"]
    missing = [c for c in need if c not in paths.columns]
    if missing:
        raise InputError(f"paths table: missing column(s) {missing} (expected the attribution's paths table)")
    sel = paths[(paths["pg"].astype(str) == str(pg)) & (paths["index"].astype(int) == int(index))]
    if sel.empty:
        raise InputError(f"paths table: no path kept for collective {index} of PG {pg!r} "
                         "(attribute with the paths kept, or pick an attributed collective)")
    fig, ax = new_figure(9.0, 3.6)
    lanes, labels = [], []
    cause = None
    for role in ROLES:
        part = sel[sel["role"] == role]
        if part.empty:
            continue
        t0 = float(part["start_ns"].min())
        rank = int(part["rank"].iloc[0]) if "rank" in part else -1
        for side, is_gpu in (("GPU", True), ("CPU", False)):
            y = len(lanes)
            rows = part[(part["kind"] == "gpu") == is_gpu]
            for r in rows.itertuples():
                start = (float(r.start_ns) - t0) / 1e3
                width = max((float(r.end_ns) - float(r.start_ns)) / 1e3, 1e-3)
                ax.broken_barh([(start, width)], (y - 0.35, 0.7), facecolor=KIND_COLOURS.get(str(r.kind), "0.5"),
                               edgecolor="none", alpha=0.85)
                extra = float(getattr(r, "extra_us", np.nan) or np.nan) if role == "straggler" else np.nan
                if np.isfinite(extra) and (cause is None or extra > cause[0]):
                    cause = (extra, start, width, y, str(r.name))
            lanes.append(y)
            labels.append(f"{role} (rank {rank}) {side}")
    if cause is not None and cause[0] > 0:
        extra, start, width, y, name = cause
        ax.broken_barh([(start, width)], (y - 0.45, 0.9), facecolor="none", edgecolor="red", lw=1.5)
        ax.annotate(f"largest extra: {name[:48]} (+{extra:.1f} µs)", (start + width / 2, y + 0.45),
                    xytext=(0, 8), textcoords="offset points", ha="center", fontsize=7, color="red")
    ax.set_yticks(lanes, labels, fontsize=7)
    ax.invert_yaxis()
    title = f"PG {pg}, collective {index}: straggler vs fastest critical path"
    if collectives is not None and {"pg", "index", "tau_max_us"} <= set(collectives.columns):
        row = collectives[(collectives["pg"].astype(str) == str(pg)) & (collectives["index"].astype(int) == int(index))]
        if len(row):
            title += f" (tax {float(row['tau_max_us'].iloc[0]):.1f} µs)"
    ax.set(xlabel="time since the path's first event (µs)", title=title)
    from matplotlib.patches import Patch

    handles = [Patch(color=c, label=k) for k, c in KIND_COLOURS.items() if k in set(sel["kind"])]
    if handles:  # below the axes: never over the lanes
        ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2),
                  ncol=min(len(handles), 6), frameon=False)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig
