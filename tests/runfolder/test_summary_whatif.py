"""summary.json carries the what-if replay per job (docs/critical-path.md §8)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from evtsync.runfolder.summary import summary_numbers

DATA = Path(__file__).resolve().parents[1] / "data" / "gloo-planted"


def test_summary_carries_the_jobs_step_times(tmp_path: Path) -> None:
    (tmp_path / "tables").mkdir()
    pd.DataFrame([{"workload": "w", "gpu": "unknown", "step_time_ms": 10.0, "step_time_without_stragglers_ms": 8.0,
                   "slowdown": 1.25, "replayed_step_time_ms": 10.0, "whatif_rank_steps": 8, "whatif_backend": "cpu",
                   "whatif_not_used": "{}"}]).to_parquet(tmp_path / "tables" / "whatif_jobs.parquet")
    pd.DataFrame([{"workload": "w", "gpu": "unknown", "pg": "0", "index": 0, "valid": True, "tau_max_us": 5.0}]
                 ).to_parquet(tmp_path / "tables" / "tax_collectives.parquet")
    rows, info = summary_numbers(tmp_path, {})
    # a table written before the duration model was recorded says so
    assert info["jobs"] == [{"workload": "w", "gpu": "unknown", "step_time_ms": 10.0,
                             "step_time_without_stragglers_ms": 8.0, "slowdown": 1.25, "n_rank_steps": 8,
                             "whatif_durations": "not recorded (an older run)", "whatif_host_cores": None}]
    row = rows.iloc[0]
    assert (row["step_time_ms"], row["step_time_without_stragglers_ms"], row["slowdown"]) == (10.0, 8.0, 1.25)


def test_summary_jobs_carry_the_duration_model(tmp_path: Path) -> None:
    (tmp_path / "tables").mkdir()
    said = "processor sharing between the ranks of a core (host layout: ranks 0-1 on 1 core)"
    pd.DataFrame([{"workload": w, "gpu": "CPU", "step_time_ms": 10.0, "step_time_without_stragglers_ms": 8.0,
                   "slowdown": 1.25, "replayed_step_time_ms": 10.0, "whatif_rank_steps": 8, "whatif_backend": "cpu",
                   "whatif_durations": d, "whatif_host_cores": c, "whatif_not_used": "{}"}
                  for w, d, c in (("a", said, "0-1:1"), ("b", "independent durations (assumption 1)", None))]
                 ).to_parquet(tmp_path / "tables" / "whatif_jobs.parquet")
    _, info = summary_numbers(tmp_path, {})
    assert [(j["workload"], j["whatif_durations"], j["whatif_host_cores"]) for j in info["jobs"]] == [
        ("a", said, "0-1:1"), ("b", "independent durations (assumption 1)", None)]


def test_summary_without_a_replay_has_no_jobs(tmp_path: Path) -> None:
    (tmp_path / "tables").mkdir()
    pd.DataFrame([{"workload": "w", "gpu": "unknown", "pg": "0", "index": 0, "valid": True, "tau_max_us": 5.0}]
                 ).to_parquet(tmp_path / "tables" / "tax_collectives.parquet")
    rows, info = summary_numbers(tmp_path, {})
    assert info["jobs"] == [] and "step_time_ms" not in rows.columns


@pytest.mark.slow
def test_run_writes_the_what_if(tmp_path: Path) -> None:
    env = {**os.environ, "EVTSYNC_CACHE_DIR": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "evtsync", "run", str(DATA / "ddp"), "-o", str(tmp_path / "run"),
                           "--no-result-cache", "-q"], capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads((tmp_path / "run" / "summary.json").read_text())
    (job,) = doc["jobs"]
    assert job["workload"] == "ddp" and job["n_rank_steps"] == 16  # 4 ranks x steps 2, 3, 6, 7 (truth.json)
    assert job["step_time_without_stragglers_ms"] < job["step_time_ms"]
    table = pd.read_parquet(tmp_path / "run" / "tables" / "whatif_stragglers.parquet")
    assert {"rank", "cause", "saving_ms_per_step", "saving_share"} <= set(table.columns)
    # the largest plant (truth.json): a 30.4 ms data_loader_stall on rank 1
    assert table.iloc[0][["rank", "cause"]].tolist() == [1, "data_loader_stall"]
