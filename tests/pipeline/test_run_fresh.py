"""`evtsync run` from scratch, each test on inputs of its own: resuming after a kill, the real
8-rank DLRM traces where most stages do not apply, a failed stage recorded and retried, and a
bad option refused. Split from tests/pipeline/test_run_pipeline.py (whose tests share the tiny
demo run of a module fixture), so that the default run's workers (whole files each) can balance
the two halves.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from evtsync.pipeline import MANIFEST, STATUS_DONE, STATUS_NA, read_manifest
from tests.pipeline.test_run_pipeline import FAST, FIXED_DIGEST, _assert_outputs_intact, _run


@pytest.fixture(scope="module", autouse=True)
def fixed_source_digest() -> None:
    """The package's source digest fixed, as in tests/pipeline/test_run_pipeline.py."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("evtsync.pipeline.engine.source_digest", lambda: FIXED_DIGEST)
        yield


def test_killed_run_resumes_without_redoing_finished_stages(tmp_path: Path) -> None:
    out = tmp_path / "killed"
    code = ("import sys; from pathlib import Path; import evtsync.pipeline as r; import evtsync.pipeline.engine as e; "
            f"e.source_digest = lambda: {FIXED_DIGEST!r}; "
            f"r.run_pipeline(r.RunOptions(out=Path(sys.argv[1]), **{FAST!r}))")
    proc = subprocess.Popen([sys.executable, "-c", code, str(out)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env={**os.environ, "EVTSYNC_QUIET": "1"})
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            manifest = read_manifest(out) if (out / MANIFEST).is_file() else {}
            if manifest.get("stages", {}).get("tax", {}).get("status") == STATUS_DONE:
                break
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.2)
        else:
            pytest.fail("the tax stage did not finish in time")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed = read_manifest(out)
    finished = {n for n, e in killed["stages"].items() if e["status"] == STATUS_DONE}
    assert {"demo", "tax"} <= finished
    assert "report" not in finished
    manifest, events = _run(out, report=False)
    actions = {e.stage: e.action for e in events if e.action != "start"}
    for name in finished:
        assert actions[name] == "reused", (name, actions, killed.get("source_digest"), manifest.get("source_digest"),
                                           killed["stages"][name]["key"], manifest["stages"][name]["key"])
    assert manifest["stages"]["fit-gumbel"]["status"] == STATUS_DONE
    reused_history = [h for h in manifest["history"] if h["action"] == "reused"]
    assert {h["stage"] for h in reused_history} >= {"demo", "tax"}
    _assert_outputs_intact(out, manifest)


def test_dlrm_traces_report_which_stages_did_not_apply(traces_dir: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The report is read for its text: its figures are one-pixel placeholders (issue 48)."""
    from tests.report_checks import placeholder_figures

    placeholder_figures(monkeypatch)
    out = tmp_path / "dlrm"
    manifest, _ = _run(out, traces=[str(traces_dir / "dlrm-8rank-v100")], models=["gumbel", "gev"])
    stages = manifest["stages"]
    assert stages["tax"]["status"] == STATUS_DONE
    assert stages["attribution"]["status"] == STATUS_DONE
    coll = pd.read_parquet(out / "tables" / "tax_collectives.parquet")
    assert len(coll) == 8 and set(coll["workload"]) == {"dlrm-8rank-v100"}
    assert set(coll["gpu"]) == {"V100"}
    # 8 collectives in one step leave far too few GEMM blocks for any fit
    not_applied = {n for n, e in stages.items() if e["status"] == STATUS_NA}
    assert {"fit-gumbel", "fit-gev", "compare", "prediction", "predicted-vs-measured"} <= not_applied
    for name in not_applied:
        assert stages[name]["reason"], name
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "Stages that did not apply" in html
    assert "fewer than 30 for a Bayesian fit" in html
    assert "no tensor-parallel process group" in html
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "not_applicable" in md or "did not apply" in md


def test_failed_stage_is_recorded_then_retried_and_force_redoes_all(traces_dir: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import evtsync.pipeline.stages as run_module
    from evtsync.cli import main
    from evtsync.core.errors import InputError

    out = tmp_path / "dlrm"
    traces = str(traces_dir / "dlrm-8rank-v100")

    def broken(run: run_module.Run) -> dict:
        raise InputError("injected failure")

    with monkeypatch.context() as mp:
        mp.setattr(run_module, "_stage_attribution", broken)
        status = main(["-q", "run", traces, "--out", str(out), "--model", "gumbel", "--no-report"])
    assert status == 1
    assert "FAILED attribution" in capsys.readouterr().err
    stages = read_manifest(out)["stages"]
    assert stages["attribution"]["status"] == "failed"
    assert "injected failure" in stages["attribution"]["reason"]
    assert stages["zscores"]["status"] == STATUS_DONE           # the run went on past the failure
    manifest, events = _run(out, traces=[traces], report=False)
    actions = {e.stage: e.action for e in events if e.action != "start"}
    assert actions["attribution"] == "ran" and actions["tax"] == "reused"
    assert manifest["stages"]["attribution"]["status"] == STATUS_DONE
    _, events = _run(out, traces=[traces], report=False, force=True)
    assert {e.action for e in events if e.action != "start"} == {"ran"}


def test_cli_run_quiet_and_bad_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evtsync.cli import main

    assert main(["run", "--out", str(tmp_path / "x"), "--eps", "0.5"]) == 2
    assert "--eps" in capsys.readouterr().err
    assert main(["run", str(tmp_path / "missing"), "--out", str(tmp_path / "y")]) == 2
    assert "no such file or folder" in capsys.readouterr().err


def test_a_bad_trace_path_is_refused_before_the_job_pool_opens(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The pool's processes import the samplers (10-20 s on 2 cores): a refusal must not wait for them."""
    from evtsync.cli import main
    from evtsync.pipeline import engine

    opened: list[int] = []
    monkeypatch.setattr(engine.Run, "_open_job_pool", lambda self, processes, *a, **k: opened.append(processes))
    assert main(["run", str(tmp_path / "missing"), "--out", str(tmp_path / "y"), "--jobs", "2"]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert opened == []
