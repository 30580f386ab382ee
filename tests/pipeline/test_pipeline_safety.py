"""The run folder is the user's: evtsync run touches only what it wrote (issue 18).

Temporaries of killed runs are removed by their mark only; a corrupt manifest says how to get
out and ``--force`` rebuilds it; output paths are checked before any work; outputs get the
umask's mode; the engine records only the package's own errors as failed stages.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from evtsync.cli import main
from evtsync.core.errors import InputError
from evtsync.core.tableio import (
    TEMP_SUFFIX,
    atomic_path,
    check_output_dir,
    check_output_file,
    write_text_atomic,
)
from evtsync.pipeline import RunOptions, read_manifest, run_pipeline
from evtsync.pipeline.engine import clean_temporaries

FAST = {"draws": 30, "tune": 30, "chains": 1, "models": ["gumbel"], "report": False}


def test_only_evtsyncs_own_temporaries_are_removed(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    (out / "tables").mkdir()
    user = [out / "sub" / ".draft.tmp", out / ".notes.tmp", out / "tables" / ".mine.tmp"]
    for p in user:
        p.write_text("x")
    ours = [out / f".manifest.json.abc123{TEMP_SUFFIX}", out / "tables" / f".tau.parquet.k9{TEMP_SUFFIX}"]
    for p in ours:
        p.write_text("half")
    assert clean_temporaries(out) == 2
    assert all(p.exists() for p in user) and not any(p.exists() for p in ours)


def test_outputs_get_the_umask_mode(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        path = write_text_atomic(tmp_path / "a.txt", "x")
        assert path.stat().st_mode & 0o777 == 0o640
    finally:
        os.umask(old)
    with atomic_path(tmp_path / "b.bin") as tmp:
        assert tmp.name.endswith(TEMP_SUFFIX)
        tmp.write_bytes(b"1")
    assert (tmp_path / "b.bin").stat().st_mode & 0o777 == 0o666 & ~old


def test_output_paths_are_checked_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    afile = tmp_path / "file"
    afile.write_text("keep me")
    with pytest.raises(InputError, match="existing file, not a folder"):
        check_output_dir(afile)
    with pytest.raises(InputError, match="is a file, not a folder"):
        check_output_dir(afile / "sub")
    with pytest.raises(InputError, match="is a folder"):
        check_output_file(tmp_path, "-o")
    # the CLI: one line, exit 2, nothing written, the file untouched
    for out in (afile, afile / "sub"):
        assert main(["-q", "run", "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("evtsync: error: --out") and "Traceback" not in err[0]
    assert afile.read_text() == "keep me"
    assert main(["-q", "run", "--out", "/proc/evtsync-test"]) == 2
    assert "evtsync: error: --out /proc/evtsync-test" in capsys.readouterr().err


def test_fit_out_that_is_a_file_fails_before_sampling(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pandas as pd

    table = tmp_path / "z.csv"
    pd.DataFrame({"y": [0.1, 0.5, 0.9] * 20}).to_csv(table, index=False)
    afile = tmp_path / "taken"
    afile.write_text("x")
    assert main(["-q", "fit", str(table), "--model", "gumbel", "--out", str(afile)]) == 2
    assert "existing file, not a folder" in capsys.readouterr().err
    assert main(["-q", "fit", str(table), "--model", "gumbel", "--plot", str(tmp_path / "p.gif")]) == 2
    assert "unknown figure format" in capsys.readouterr().err


def test_corrupt_manifest_names_the_way_out_and_force_rebuilds(traces_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "manifest.json").write_text("{not json")
    (out / "mine.txt").write_text("user file")
    options = dict(traces=[str(traces_dir / "dlrm-8rank-v100")], out=out, **FAST)
    with pytest.raises(InputError, match="unreadable run manifest.*--force"):
        run_pipeline(RunOptions(**options))
    run = run_pipeline(RunOptions(**options, force=True))
    assert read_manifest(out)["stages"]["tax"]["status"] == "done"
    assert (out / "mine.txt").read_text() == "user file"  # not the run's: untouched
    assert "mine.txt" not in str(run.manifest["stages"])


def test_programming_errors_propagate_instead_of_failing_a_stage(traces_dir: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import evtsync.pipeline.stages as stages

    def buggy(run: stages.Run) -> dict:
        raise TypeError("a bug, not bad input")

    monkeypatch.setattr(stages, "_stage_attribution", buggy)
    with pytest.raises(TypeError, match="a bug"):
        run_pipeline(RunOptions(traces=[str(traces_dir / "dlrm-8rank-v100")], out=tmp_path / "r", **FAST))


def test_report_refuses_a_folder_that_a_run_is_writing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import fcntl

    out = tmp_path / "run"
    out.mkdir()
    with open(out / ".lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a running `evtsync run` does
        assert main(["-q", "report", str(out)]) == 2
        assert "is writing this folder now" in capsys.readouterr().err
    assert not (out / "report.html").exists()


def test_run_refuses_a_non_empty_folder_that_is_not_a_run_folder(traces_dir: Path, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33 (4): ``run --out DIR`` replaced the user's report.html, report.md and
    tables/tax_collectives.parquet in a folder that was never a run folder."""
    mine = tmp_path / "mine"
    (mine / "tables").mkdir(parents=True)
    files = {mine / "report.html": "<p>my report</p>", mine / "report.md": "# mine",
             mine / "tables" / "tax_collectives.parquet": "my table"}
    for path, text in files.items():
        path.write_text(text)
    capsys.readouterr()
    assert main(["run", str(traces_dir / "dlrm-8rank-v100"), "--out", str(mine), "--no-report"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (line,) = [x for x in err.splitlines() if "error:" in x]
    assert f"--out {mine}: a non-empty folder that is not an evtsync run folder" in line
    assert "report.html" in line and "--force" in line
    assert {p: p.read_text() for p in files} == files  # nothing touched
    assert sorted(p.name for p in mine.iterdir()) == ["report.html", "report.md", "tables"]  # no lock left
    # opted in: the check passes (the run would write there), an empty or new folder needs nothing
    RunOptions(traces=[str(traces_dir / "dlrm-8rank-v100")], out=mine, force=True).check()
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "new"):
        RunOptions(traces=[str(traces_dir / "dlrm-8rank-v100")], out=out).check()


def test_run_refuses_to_write_into_its_input_folder(traces_dir: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 33 (4): ``run X --out X`` wrote manifest.json among the traces, and every later
    ``tax X`` failed on it; inside X it would be read as a workload. Refused even with --force."""
    import shutil

    traces = tmp_path / "job"
    shutil.copytree(traces_dir / "dlrm-8rank-v100", traces)
    before = sorted(p.name for p in traces.iterdir())
    for out, force in ((traces, []), (traces / "results", ["--force"]), (traces, ["--force"])):
        capsys.readouterr()
        assert main(["run", str(traces), "--out", str(out), "--no-report", *force]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and f"--out {out}: is " in err and "input folder" in err
    loose = [str(p) for p in sorted(traces.glob("*.json.gz"))]
    with pytest.raises(InputError, match="is the input folder"):
        RunOptions(traces=loose, out=traces).check()  # files given one by one: their folder
    assert sorted(p.name for p in traces.iterdir()) == before
