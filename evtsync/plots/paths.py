"""A Fig. 4-style view of one collective: the straggler's critical path against the fastest rank's.

Input: the ``paths`` table of :func:`evtsync.critpath.attribution.attribute` (one row per event
on either path: ``pg``, ``index``, ``rank``, ``role`` "straggler"/"fastest", ``name``, ``kind``,
``start_ns``, ``end_ns``, and on the straggler's rows ``extra_us``, the event's time over its
counterpart on the fastest rank). Each path is drawn on up to two lanes (GPU events; CPU-side events;
a lane without events is left out)
with time measured from the path's own first event
(in µs, ms or s by the paths' span: :func:`time_unit`) (both ranks leave the previous collective
together, methodology §4), so the straggler's path visibly ends later; the event with the largest
extra time (the principal cause) is outlined and named above the lanes, inside the axes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from evtsync.core.display import fmt
from evtsync.core.errors import InputError
from evtsync.plots.base import new_figure

if TYPE_CHECKING:
    from matplotlib.figure import Figure

KIND_COLOURS = {"gpu": "C0", "cpu_op": "C1", "python": "C4", "python_gap": "C7", "launch": "C2", "sync": "C3",
                "runtime": "C5"}
ROLES = ("straggler", "fastest")


def time_unit(span_ns: float) -> tuple[float, str]:
    """Nanoseconds per unit and the unit's name for a time axis spanning ``span_ns``: µs below
    2 ms, ms below 2 s, s above (an axis reads in whole numbers of one unit, with no offset)."""
    if span_ns < 2e6:
        return 1e3, "µs"
    if span_ns < 2e9:
        return 1e6, "ms"
    return 1e9, "s"


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
    # one lane per role × side that holds events (no empty CPU lane for a GPU-only path)
    lane_rows = []
    for role in ROLES:
        part = sel[sel["role"] == role]
        if part.empty:
            continue
        t0 = float(part["start_ns"].min())
        rank = int(part["rank"].iloc[0]) if "rank" in part else -1
        for side, is_gpu in (("GPU", True), ("CPU", False)):
            rows = part[(part["kind"] == "gpu") == is_gpu]
            if len(rows):
                lane_rows.append((f"{role} (rank {rank}) {side}", role, rows, t0))
    span_ns = max(float(rows["end_ns"].max()) - t0 for _, _, rows, t0 in lane_rows)
    scale, unit = time_unit(span_ns)
    fig, ax = new_figure(9.0, 1.2 + 0.55 * len(lane_rows))
    lanes, labels = [], []
    cause = None
    for y, (label, role, rows, t0) in enumerate(lane_rows):
        for r in rows.itertuples():
            start = (float(r.start_ns) - t0) / scale
            width = max((float(r.end_ns) - float(r.start_ns)) / scale, 1e-6 * span_ns / scale)
            ax.broken_barh([(start, width)], (y - 0.35, 0.7), facecolor=KIND_COLOURS.get(str(r.kind), "0.5"),
                           edgecolor="none", alpha=0.85)
            extra = float(getattr(r, "extra_us", np.nan) or np.nan) if role == "straggler" else np.nan
            if np.isfinite(extra) and (cause is None or extra > cause[0]):
                cause = (extra, start, width, y, str(r.name))
        lanes.append(y)
        labels.append(label)
    ax.set_xlim(0, span_ns / scale * 1.02)
    ax.set_ylim(len(lanes) - 0.5, -0.5 - (0.9 if cause is not None else 0.0))  # room above the first lane
    if cause is not None and cause[0] > 0:
        extra, start, width, y, name = cause
        ax.broken_barh([(start, width)], (y - 0.45, 0.9), facecolor="none", edgecolor="red", lw=1.5)
        # the label beside the bar, in the free band above the lanes, kept inside the axes
        right = start + width / 2 > 0.5 * span_ns / scale
        ax.annotate(f"principal cause: {name[:48]} (+{fmt(extra)} µs)", (start + width / 2, y - 0.45),
                    xytext=(0.98 if right else 0.02, 0.97), textcoords="axes fraction", ha="right" if right else "left",
                    va="top", fontsize=8, color="red",
                    arrowprops={"arrowstyle": "-", "color": "red", "lw": 0.8})
    ax.set_yticks(lanes, labels, fontsize=8)
    title = f"PG {pg}, collective {index}: straggler vs fastest critical path"
    if collectives is not None and {"pg", "index", "tau_max_us"} <= set(collectives.columns):
        row = collectives[(collectives["pg"].astype(str) == str(pg)) & (collectives["index"].astype(int) == int(index))]
        if len(row):
            title += f" (tax {fmt(float(row['tau_max_us'].iloc[0]))} µs)"
    ax.set(xlabel=f"time since the path's first event ({unit})", title=title)
    ax.ticklabel_format(axis="x", style="plain", useOffset=False)
    from matplotlib.patches import Patch

    handles = [Patch(color=c, label=k) for k, c in KIND_COLOURS.items() if k in set(sel["kind"])]
    if handles:  # right of the axes: never over the lanes or the axis label
        ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    return fig
