"""``evtsync run --host-cores LAYOUT``: the host layout reaches the attribution stage's what-if replay
(docs/critical-path.md §8, "Ranks sharing cores"), its result key, summary.json's ``jobs`` and the
report's first screen.

Truth: the step time read from the raw trace files with ``json`` alone, and the layout as typed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from evtsync.core.errors import InputError
from evtsync.pipeline import RunOptions, build_stages
from evtsync.pipeline.engine import Run
from evtsync.report.sections import summary as summary_sec
from tests.critpath.test_critpath_replay import _raw_step_ms

PP3 = Path(__file__).resolve().parents[1] / "data" / "gloo-twins" / "pp3"


def _attribution_params(tmp_path: Path, host_cores: str | None) -> dict:
    run = Run(RunOptions(traces=[str(PP3)], out=tmp_path / "r", host_cores=host_cores))
    (stage,) = [s for s in build_stages(run) if s.name == "attribution"]
    return stage.params(run)


def test_the_layout_is_part_of_the_attribution_key(tmp_path: Path) -> None:
    plain = _attribution_params(tmp_path, None)
    two = _attribution_params(tmp_path, "2")
    assert "host_cores" not in plain  # no layout: the key as before (earlier results stay valid)
    assert two["host_cores"] == "2" and {k: v for k, v in two.items() if k != "host_cores"} == plain
    assert _attribution_params(tmp_path, "2:shared")["host_cores"] == "2:shared"


@pytest.mark.parametrize(("spec", "said"), [("0-1;2", "expected N, N:shared or RANKS:CORES"),
                                            ("0", "expected at least 1 core")])
def test_a_malformed_layout_is_refused_before_any_work(tmp_path: Path, spec: str, said: str) -> None:
    with pytest.raises(InputError, match=said):
        RunOptions(traces=[str(PP3)], out=tmp_path / "r", host_cores=spec).check()
    # a well-formed layout passes the check whatever ranks it names (fitting the job is the replay's check)
    RunOptions(traces=[str(PP3)], out=tmp_path / "ok", host_cores="0-7:2").check()
    done = subprocess.run([sys.executable, "-m", "evtsync", "run", str(PP3), "-o", str(tmp_path / "cli"),
                           "--host-cores", spec, "--no-cache", "-q"], capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr and said in done.stderr
    assert not (tmp_path / "cli").exists()


def test_run_passes_the_layout_to_the_what_if(tmp_path: Path) -> None:
    env = {**os.environ, "EVTSYNC_CACHE_DIR": str(tmp_path / "cache")}
    spec = "0-1:1;2:1"
    done = subprocess.run([sys.executable, "-m", "evtsync", "run", str(PP3), "-o", str(tmp_path / "run"),
                           "--host-cores", spec, "--no-result-cache", "-q"], capture_output=True, text=True,
                          env=env, check=False)
    assert done.returncode == 0, done.stderr
    (job,) = json.loads((tmp_path / "run" / "summary.json").read_text())["jobs"]
    assert job["whatif_host_cores"] == spec
    assert job["whatif_durations"].startswith("processor sharing") and \
        "ranks 0-1 on 1 core; ranks 2 on 1 core" in job["whatif_durations"]
    assert job["step_time_ms"] == pytest.approx(_raw_step_ms(PP3), abs=0.01)
    jobs = pd.read_parquet(tmp_path / "run" / "tables" / "whatif_jobs.parquet")
    assert jobs["whatif_host_cores"].tolist() == [spec]
    report = (tmp_path / "run" / "report.md").read_text()
    assert f"counterfactual replay of the step; ranks sharing cores (--host-cores {spec})" in report


def test_first_screen_names_the_duration_model() -> None:
    one = {"whatif_durations": "independent …", "whatif_host_cores": None}
    assert summary_sec._duration_words({"jobs": [one]}) == "; op durations independent"
    assert summary_sec._duration_words({"jobs": [{**one, "whatif_host_cores": "2"}] * 2}) == \
        "; ranks sharing cores (--host-cores 2)"
    # jobs under different models, or a run that did not record it: nothing said here (summary.json has it)
    assert summary_sec._duration_words({"jobs": [one, {**one, "whatif_host_cores": "2"}]}) == ""
    assert summary_sec._duration_words({"jobs": [{"step_time_ms": 1.0}]}) == ""
    # a run whose what-if table predates the columns, as summary.json gives it: not "independent"
    older = {"whatif_durations": "not recorded (an older run)", "whatif_host_cores": None}
    assert summary_sec._duration_words({"jobs": [older]}) == ""
    assert summary_sec._duration_words({}) == ""
