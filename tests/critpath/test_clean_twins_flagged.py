"""Issue 46, "Done when": no cause of a clean twin above half the smallest plant goes unflagged.

Each real gloo recording has a clean twin (the same program without its plants). Every (root rank,
cause) pair of the twin's root-cause table whose tax exceeds half the smallest plant of the planted
job (its duration measured by the job's own clock, ``measured_us`` in the truth file) must carry a
flag (:func:`evtsync.critpath.attribution.root_cause_flags`). Three twins recorded once did not meet
it (measured 2026-12-06, numbers in SUPERSEDED and docs/critical-path.md, "Flags of root causes"); the
same jobs recorded five times interleaved with their twins (tests/data/gloo-twins) replace them here."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import evtsync.critpath as cp
from evtsync.critpath.attribution import root_cause_flags, root_cause_table
from evtsync.trace.traceset import load_traces

DATA = Path(__file__).parents[1] / "data"
JOBS = {"ddp": "gloo-planted", "tpdp": "gloo-planted", "tpdp8": "gloo-planted", "pp3": "gloo-pipeline",
        "ddpw": "gloo-whatif", "ddpa": "gloo-async",
        # tools/record_gloo_twins.py: recorded 5 times interleaved with their twins, ranks pinned
        "twins/tpdp": "gloo-twins", "twins/ddpw": "gloo-twins", "twins/ddpa": "gloo-twins", "twins/ddpws": "gloo-twins",
        "twins/tpdp8": "gloo-twins", "twins/ddp": "gloo-twins", "twins/pp3": "gloo-twins"}
#: Single recordings (each job and its clean twin once, one after the other) superseded here by the
#: same job recorded five times interleaved: their planted − clean lies outside the range of the
#: twins' five repeats (read from the raw files by tests/critpath/test_critpath_replay.py,
#: ``test_superseded_single_recordings_lie_outside_their_twins_repeats``; docs/critical-path.md,
#: "Flags of root causes"). What they showed here, measured 2026-12-06:
SUPERSEDED = {
    "tpdp": "twins/tpdp; tpdp-clean: rank 3 'MmBackward0 > aten::mm' 20.1 ms over 4 ok collectives (largest "
            "9.5 ms), rank 1 the same cause 11.6 ms over 3 (largest 6.5 ms); half the smallest plant is 10.05 ms",
    "tpdp8": "twins/tpdp8; tpdp8-clean: rank 4 '(enqueue) c10d::allreduce_' 21.0 ms over 6 collectives (largest "
             "7.5 ms, 33 % unexplained); half the smallest plant is 10.08 ms",
    "ddpa": "twins/ddpa; ddpa-clean: rank 2 '(python gap)' 17.9 ms on one ok collective (10.6 ms of it on the path); "
            "half the smallest plant is 12.53 ms",
    "ddp": "twins/ddp (it met the check)", "ddpw": "twins/ddpw (it met the check)",
}
#: twins that miss the check (measured)
GAP = {
    "twins/tpdp8": "tpdp8-clean (8 ranks on 2 cores): rank 3 'c10d::allreduce_' (the enqueue op's own time) 29.0 ms "
                   "over 14 collectives (largest 6.5 ms, 18 % unexplained); half the smallest plant is 10.04 ms",
}


def _roots(folder: Path) -> pd.DataFrame:
    result = cp.attribute(load_traces([folder], cache=False))
    return root_cause_table(result.collectives.assign(workload="job"))


def _param(job: str):  # noqa: ANN202
    if job in SUPERSEDED:
        return pytest.param(job, marks=pytest.mark.skip(reason=f"superseded by {SUPERSEDED[job]}"))
    if job in GAP:
        return pytest.param(job, marks=pytest.mark.xfail(strict=True, reason=GAP[job]))
    return job


@pytest.mark.parametrize("job", [_param(j) for j in sorted(JOBS)])
def test_clean_twin_causes_above_half_the_smallest_plant_are_flagged(job):
    folder, name = DATA / JOBS[job], job.rsplit("/", 1)[-1]
    truth = json.loads((folder / f"{name}.truth.json").read_text())
    half = min(p["measured_us"] for p in truth["plants"]) / 2
    roots = _roots(folder / f"{name}-clean")
    big = roots[roots["tax_us"] > half]
    unflagged = big[big["flag"].isna()]
    assert unflagged.empty, unflagged[["root_rank", "root_cause", "collectives", "tax_us"]].to_string()


def test_flags_tiny_cases():
    # 10 ms with 6 unexplained: flagged; 10 ms with exactly half unexplained: flagged; 4.9 of 10: not;
    # no tax at all: not
    roots = pd.DataFrame({"tax_us": [10e3, 10e3, 10e3, 0.0], "unexplained_tax_us": [6e3, 5e3, 4.9e3, 0.0]})
    assert root_cause_flags(roots) == ["unexplained", "unexplained", None, None]
    assert root_cause_flags(roots.iloc[:0]) == []


def test_root_cause_table_counts_unexplained_tax():
    # hand-built rows: rank 1's cause has one ok (4 ms) and one unexplained (6 ms) collective; rank 2's
    # one ok collective stopped with a root_reason (3 ms)
    coll = pd.DataFrame({
        "workload": ["w"] * 3, "index": [0, 1, 2], "status": ["ok", "unexplained", "ok"],
        "tau_max_us": [4e3, 6e3, 3e3], "root_rank": [1, 1, 2], "root_cause": ["aten::mm", "aten::mm", "x"],
        "root_category": ["cpu_op"] * 3, "root_chain": [0, 0, 1], "root_cycle": [False] * 3,
        "root_reason": [None, None, "the chain reaches ..."]})
    table = root_cause_table(coll).set_index("root_rank")
    assert table.loc[1, "tax_us"] == 10e3 and table.loc[1, "unexplained_tax_us"] == 6e3
    assert table.loc[1, "flag"] == "unexplained" and table.loc[2, "flag"] == "unexplained"
    assert root_cause_table(coll.assign(status="ok", root_reason=None))["flag"].isna().all()
