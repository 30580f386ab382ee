"""The generator's modern format against what today's torch (2.13) writes, field by field.

The fixtures in tests/data/gloo-torch2.13 were recorded by tools/record_gloo_traces.py.
They are CPU-only (gloo), so the comparison covers what both kinds of trace share: the
top-level keys, distributedInfo and pg_config keys, the CPU-side event categories and
phases, the keys of each kind of event, the argument names of cpu ops and annotations,
and the metadata events. Every key the real traces carry must appear in the synthetic
ones unless it is listed below as intentionally omitted, with the reason. The test reads
both with plain json (not the package's reader), so it fails if the generator drops a field.
"""

from __future__ import annotations

import collections
import gzip
import json
from pathlib import Path

import pytest

from evtsync.synth import SynthConfig, synthesize

REAL = Path(__file__).resolve().parents[1] / "data" / "gloo-torch2.13"

#: Present in the real torch 2.13 traces, intentionally absent from synthetic ones.
INTENTIONAL = {
    ("category", "s/fwdbwd"): "forward-backward flow arrows link autograd ops; evtsync never reads them",
    ("category", "f/fwdbwd"): "as above",
}


def _load(path: Path) -> dict:
    with gzip.open(path) if path.suffix == ".gz" else open(path, "rb") as fh:
        return json.load(fh)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict], list[dict]]:
    out = tmp_path_factory.mktemp("synth")
    result = synthesize(SynthConfig.build(seed=5, iterations=2), out)
    synthetic = [_load(p) for p in sorted(result.traces.values())]
    real = [_load(p) for p in sorted(REAL.glob("rank-*.json.gz"))]
    assert len(real) == 4
    return real, synthetic


def _missing(real_keys: set, synth_keys: set, kind: str) -> set:
    return {k for k in real_keys - synth_keys if (kind, k) not in INTENTIONAL}


def test_top_level_and_distributed_info(pair) -> None:
    real, synth = pair
    for r in real:
        assert not _missing(set(r), set(synth[0]), "top")
        assert not _missing(set(r["distributedInfo"]), set(synth[0]["distributedInfo"]), "distributedInfo")
        for entry in r["distributedInfo"]["pg_config"]:
            assert not _missing(set(entry), set(synth[0]["distributedInfo"]["pg_config"][0]), "pg_config")
        assert isinstance(r["baseTimeNanoseconds"], int) and isinstance(synth[0]["baseTimeNanoseconds"], int)
        assert r["displayTimeUnit"] == synth[0]["displayTimeUnit"]


def _by_kind(trace: dict) -> dict[str, list[dict]]:
    kinds = collections.defaultdict(list)
    for e in trace["traceEvents"]:
        kinds[f"{e.get('ph')}/{e.get('cat')}"].append(e)
    return kinds


def test_categories_event_keys_and_argument_names(pair) -> None:
    real, synth = pair
    synth_kinds = _by_kind(synth[0])
    for r in real:
        real_kinds = _by_kind(r)
        assert not _missing(set(real_kinds), set(synth_kinds), "category")
        for kind, events in real_kinds.items():
            if kind not in synth_kinds:
                continue
            real_keys = set().union(*(set(e) for e in events))
            synth_keys = set().union(*(set(e) for e in synth_kinds[kind]))
            assert not _missing(real_keys, synth_keys, f"keys {kind}"), kind
        # argument names of CPU ops and annotations, for the events of the same role
        for kind, name_filter in (("X/cpu_op", lambda n: True),
                                  ("X/user_annotation", lambda n: n.startswith(("gloo:", "nccl:")))):
            real_args = set().union(*(set(e.get("args", {})) for e in real_kinds[kind] if name_filter(e["name"])))
            synth_args = set().union(*(set(e.get("args", {})) for e in synth_kinds[kind] if name_filter(e["name"])))
            assert not _missing(real_args, synth_args, f"args {kind}"), (kind, real_args - synth_args)


def test_metadata_events(pair) -> None:
    real, synth = pair
    real_meta = {e["name"] for r in real for e in r["traceEvents"] if e.get("ph") == "M"}
    synth_meta = {e["name"] for e in synth[0]["traceEvents"] if e.get("ph") == "M"}
    assert not _missing(real_meta, synth_meta, "metadata")


def test_timestamps_are_floats_relative_to_base(pair) -> None:
    real, synth = pair
    for trace in (real[0], synth[0]):
        xs = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
        assert all(isinstance(e["ts"], float) for e in xs)
        absolute_us = trace["baseTimeNanoseconds"] / 1000 + xs[0]["ts"]
        assert 1.6e15 < absolute_us < 2.0e15  # a unix time in µs (2020–2033)
