"""Which ranks arrive at each collective (or paired transfer) of a profiling window: one home for the
what-if replays (:mod:`evtsync.critpath.replay` and, with ranks sharing cores,
:mod:`evtsync.critpath.cpushare`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evtsync.critpath.replay import Lane


def window_members(lanes: dict[int, Lane], window: int) -> dict[tuple[Any, int], list[int]]:
    """The ranks that arrive at each collective (or paired transfer) of one profiling window."""
    members: dict[tuple[Any, int], list[int]] = {}
    for lane in lanes.values():
        for key, (win, _, _) in lane.arrivals.items():
            if win == window:
                members.setdefault(key, []).append(lane.rank)
    return members
