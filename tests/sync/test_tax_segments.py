"""The one home of the tax formulas (evtsync.sync.tax.tax_segments, issue 48): hand counts of
tau, the straggler (lowest rank on ties), the fastest rank, waits and shares, unknown end times,
a one-rank instance and zero durations."""

from __future__ import annotations

import numpy as np
import pytest

from evtsync.sync.tax import segment_starts, tax_segments


def test_hand_counts() -> None:
    # instance A: ranks 0..3 durations 50, 30, 30, 90 us (tie for the shortest: rank 1 straggles)
    # instance B: ranks 0..1 durations 10, 10 (no tax; straggler rank 0, the lowest)
    # instance C: one rank, duration 0
    dur_ns = np.array([50_000, 30_000, 30_000, 90_000, 10_000, 10_000, 0])
    rank = np.array([0, 1, 2, 3, 0, 1, 5])
    key = np.array([1, 1, 1, 1, 2, 2, 3])
    starts = segment_starts(key)
    assert starts.tolist() == [0, 4, 6]
    ts = np.array([100, 90, 95, 80, 7, 8, -1]) * 1000
    end = np.array([150, 120, 125, 170, 17, 18, -1]) * 1000
    end[1] = -1  # one rank of A without a known end: A's end spread unknown
    got = tax_segments(dur_ns, rank, starts, ts, end, shares=True)
    assert got["tau_max_us"].tolist() == [60.0, 0.0, 0.0]
    assert got["tau_med_us"].tolist() == [(30 + 50) / 2 - 30, 0.0, 0.0]
    assert got["mean_delay_us"].tolist() == [50.0 - 30.0, 0.0, 0.0]
    assert got["straggler_rank"].tolist() == [1, 0, 5]
    assert got["fastest_rank"].tolist() == [3, 0, 5]
    assert got["n_ranks"].tolist() == [4, 2, 1]
    assert np.isnan(got["end_spread_us"][0]) and got["end_spread_us"][1] == 1.0 and np.isnan(got["end_spread_us"][2])
    assert got["start_ns"].tolist() == [80_000, 7_000, -1_000]
    assert got["wait_us"].tolist() == [20.0, 0.0, 0.0, 60.0, 0.0, 0.0, 0.0]
    assert got["wait_share"].tolist() == pytest.approx([20 / 50, 0, 0, 60 / 90, 0, 0, 0])  # 0 where dur is 0
    assert got["is_straggler"].tolist() == [False, True, False, False, True, False, True]
    assert got["share_max"].tolist() == pytest.approx([60 / 90, 0, 0])
    assert got["share_median"].tolist() == pytest.approx([(0 + 20 / 50) / 2, 0, 0])
