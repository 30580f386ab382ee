"""What the what-if replays (:mod:`evtsync.critpath.replay` and, with ranks sharing cores,
:mod:`evtsync.critpath.cpushare`) share, in one home: which ranks arrive at each collective (or
paired transfer) of a profiling window, and each slice's duration factor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    import pandas as pd

    from evtsync.critpath.replay import Lane


def window_members(lanes: dict[int, Lane], window: int) -> dict[tuple[Any, int], list[int]]:
    """The ranks that arrive at each collective (or paired transfer) of one profiling window."""
    members: dict[tuple[Any, int], list[int]] = {}
    for lane in lanes.values():
        for key, (win, _, _) in lane.arrivals.items():
            if win == window:
                members.setdefault(key, []).append(lane.rank)
    return members


def slice_factors(sl: pd.DataFrame, rank: int, window: int,
                  scale: dict[tuple[int, int, int, int, str, str], float]) -> NDArray[np.float64]:
    """Each slice's duration factor of a what-if (1.0 where ``scale`` has none): looked up only when
    there are any (the measured replay has none), its key columns read as Python lists, not element
    by element (issue 48: ~1 s of the demo's attribution stage). The one lookup of both replays
    (:func:`evtsync.critpath.replay.replay`, :func:`evtsync.critpath.cpushare.replay_shared`)."""
    if not scale:
        return np.ones(len(sl))
    return np.array([scale.get((rank, window, int(st), int(sg), kd, nm), 1.0) for st, sg, kd, nm in
                     zip(sl["step"].tolist(), sl["segment"].tolist(), sl["kind"].tolist(), sl["name"].tolist(),
                         strict=True)], dtype=np.float64)
