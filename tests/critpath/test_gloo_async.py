"""Attribution on a real gloo job whose gradient all_reduces are asynchronous (``async_op=True``,
waited on later with ``work.wait()``), issue 46 item 3.

Truth is independent of evtsync: ``tests/data/gloo-async/<job>.truth.json`` was written by
``tools/record_gloo_async.py`` from its plan, the program's own log of the collectives it issued
and the plants' durations measured with ``time.perf_counter_ns`` (see the README there)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evtsync.critpath as cp
from evtsync.trace.traceset import load_traces

DATA = Path(__file__).parents[1] / "data" / "gloo-async"


@pytest.fixture(scope="module")
def results() -> dict[str, cp.AttributionResult]:
    return {job: cp.attribute(load_traces([DATA / job], cache=False)) for job in ("ddpa", "ddpa-clean")}


def test_async_plants_named_with_rank_and_cause(results):
    truth = json.loads((DATA / "ddpa.truth.json").read_text())
    table = results["ddpa"].collectives
    assert results["ddpa"].cpu_side
    assert len(truth["plants"]) == 2
    for plant in truth["plants"]:
        for affected in plant["affected"]:  # one group (default_pg, all ranks): pg of the only group
            row = table[table["index"] == affected["index"]].iloc[0]
            assert row["straggler_rank"] == affected["straggler"] == plant["rank"]
            assert row["cause_name"] == plant["cause"]
            assert row["root_rank"] == plant["rank"] and row["root_cause"] == plant["cause"]
            assert row["cause_extra_us"] == pytest.approx(plant["measured_us"], rel=0.25)


def test_async_clean_twin_names_no_plant(results):
    """No-effect: the clean twin has neither planted cause as a root of more than half a plant."""
    truth = json.loads((DATA / "ddpa.truth.json").read_text())
    half = min(p["measured_us"] for p in truth["plants"]) / 2
    table = results["ddpa-clean"].collectives
    named = table[table["cause_name"].isin({p["cause"] for p in truth["plants"]})
                  & (table["cause_extra_us"] > half)]
    assert named.empty, named[["index", "straggler_rank", "cause_name", "cause_extra_us"]].to_string()
