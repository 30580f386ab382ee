"""Every ``--json`` prints strict JSON (issue 31): missing values are ``null``, never a bare
``NaN``/``Infinity``, and nothing is written as its ``str`` (no ``default=str``).

The inputs are chosen to produce missing values: the gloo traces (CPU collectives only, no GPU
kernel, so no GPU-only share and no kernel durations), a tiny table of maxima, nccl-tests logs
with failed and damaged runs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.cli import main
from evtsync.cli._common import emit_json
from evtsync.core.tableio import json_ready, json_text

DATA = Path(__file__).resolve().parents[1] / "data"
GLOO = DATA / "gloo-torch2.13"
NCCL = DATA / "nccltests"


def _refuse(constant: str) -> float:
    raise ValueError(f"not strict JSON: bare {constant}")


def strict_loads(text: str) -> object:
    """json.loads that refuses NaN, Infinity and -Infinity (what JavaScript and jq refuse)."""
    return json.loads(text, parse_constant=_refuse)


def _nulls(value: object) -> int:
    if isinstance(value, dict):
        return sum(_nulls(v) for v in value.values())
    if isinstance(value, list):
        return sum(_nulls(v) for v in value)
    return int(value is None)


def test_json_text_turns_every_missing_value_into_null() -> None:
    frame = pd.DataFrame({"a": [1.0, np.nan], "b": pd.array([1, None], dtype="Int64"),
                          "t": [pd.Timestamp("2026-01-02"), pd.NaT]})
    doc = {"nan": float("nan"), "inf": np.float32("inf"), "neg": -math.inf, "na": pd.NA, "frame": frame,
           "array": np.array([1.5, np.nan]), "path": Path("x/y"), "set": {"b", "a"}, "int": np.int64(3)}
    out = strict_loads(json_text(doc))
    assert out == {"nan": None, "inf": None, "neg": None, "na": None,
                   "frame": [{"a": 1.0, "b": 1, "t": "2026-01-02T00:00:00"}, {"a": None, "b": None, "t": None}],
                   "array": [1.5, None], "path": "x/y", "set": ["a", "b"], "int": 3}


def test_json_text_refuses_unknown_types_instead_of_printing_their_str() -> None:
    class Opaque:
        pass

    with pytest.raises(TypeError):
        json_text({"x": Opaque()})
    assert json_ready(Opaque) is Opaque  # left as it is for json_text to refuse


def test_emit_json_prints_one_document(capsys) -> None:
    emit_json({"x": float("nan")}, indent=None)
    assert capsys.readouterr().out == '{"x": null}\n'


COMMANDS = {
    "tax": ["tax", str(GLOO)],
    "breakdown": ["breakdown", str(GLOO)],  # no GPU events: the main threads are broken down instead
    "attribute": ["attribute", str(GLOO)],
    "blocks": ["blocks", str(GLOO), "--keep-all", "--m", "2"],
    "models": ["models"],
    "nccl-tests parse": ["nccl-tests", "parse", str(NCCL / "damaged_two_runs_reindented.txt")],
    # a log with a damaged row: refused unless --allow-damaged, whose JSON lists the row (issue 47)
    "nccl-tests stats": ["nccl-tests", "stats", str(NCCL / "damaged_mpi_tagged_truncated_A100-80GB_1x8.txt"),
                         str(NCCL / "replay_all_reduce_A100-80GB_1x8.txt"), "--allow-damaged"],
    "nccl-tests alpha": ["nccl-tests", "alpha", str(NCCL / "replay_all_reduce_A100-80GB_1x8.txt")],
    "bandwidth": ["bandwidth", "--topology", "ring", "full", "--n", "8", "--alpha-us", "5", "--bytes", "1Gi",
                  "--tau-us", "0"],
}


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_json_output_parses_strictly(name: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    status = main([*COMMANDS[name], "--json"])
    captured = capsys.readouterr()
    assert status in (0, 1), captured.err
    doc = strict_loads(captured.out)
    assert doc not in ({}, [], None)
    if name == "breakdown":
        # a gloo job (4 ranks, one window, no GPU events): one row per rank from its main thread (issue 28)
        assert sorted(r["rank"] for r in doc["rows"]) == [0, 1, 2, 3]
        assert {r["timeline"] for r in doc["rows"]} == {"cpu"} and doc["missing_ranks"] == []
    if name in ("attribute", "nccl-tests stats"):
        assert _nulls(doc) > 0  # the input does produce missing values, printed as null
