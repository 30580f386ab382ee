"""A study goes on past a bad workload and says so (issue 18).

A study folder of two good synthetic workloads (A100 bf16, H100 fp32; 8 ranks, 4 iterations, one
layer) plus a damaged copy of the first (one rank file removed): ``evtsync run`` must

- produce the good workloads' tables, z-scores and fit — the same numbers as a study of the two
  good workloads alone, read independently (the damaged one changes nothing in them);
- record the bad workload in the manifest (stage, the cause: the missing rank's number);
- print it, and exit with the documented status 3 (0 only with ``--allow-failed-workloads``);
- say at the top of the report's summary which workload failed and why, and in the fit which
  workloads it lacks.

The reports here are about their text: their figures are one-pixel placeholders
(:func:`tests.report_checks.placeholder_figures`; ~18 of the ~36 s of the study's run on 2 cores,
issue 48). The figures are tested in tests/report and by the tiny demo's report
(tests/pipeline/test_run_pipeline.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from evtsync.cli import main
from evtsync.evt.bayesfit import load_fit
from evtsync.runfolder.layout import failed_workloads, read_manifest
from evtsync.synth import SynthConfig, synthesize
from tests.report_checks import placeholder_figures

FAST = ["--model", "gumbel", "--draws", "60", "--tune", "60", "--chains", "2", "-q"]
GOOD = (("a100-bf16", "A100", "bf16"), ("h100-fp32", "H100", "fp32"))


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("study")
    good = root / "good"
    for i, (name, gpu, precision) in enumerate(GOOD):
        cfg = SynthConfig.build(workload=name, gpu=gpu, precision=precision, iterations=4, layers=1, seed=i,
                                gzip=True)
        synthesize(cfg, good / name)
    mixed = root / "mixed"
    shutil.copytree(good, mixed)
    broken = mixed / "zz-damaged"
    shutil.copytree(good / "a100-bf16", broken)
    rank5 = sorted((broken / "traces").glob("*5*.json*"))
    assert len(rank5) == 1, rank5
    rank5[0].unlink()
    return root


@pytest.fixture(scope="module")
def mixed_run(study: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    import contextlib
    import io

    out = tmp_path_factory.mktemp("runs") / "mixed"
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.MonkeyPatch.context() as mp:
        placeholder_figures(mp)
        status = main(["run", str(study / "mixed"), "--out", str(out), *FAST])
    return out, status, err.getvalue()


def test_study_goes_on_and_exits_3(mixed_run: tuple[Path, int, str]) -> None:
    out, status, err = mixed_run
    assert status == 3, err
    assert "zz-damaged" in err and "FAILED" in err
    assert "rank(s) 5" in err  # the cause, not a consequence
    manifest = read_manifest(out)
    failed = failed_workloads(manifest)
    assert set(failed) == {"zz-damaged"}
    assert failed["zz-damaged"]["stage"] == "tax" and "5" in failed["zz-damaged"]["reason"]
    stages = manifest["stages"]
    for name in ("tax", "zscores", "mle", "fit-gumbel", "report"):
        assert stages[name]["status"] == "done", (name, stages[name].get("reason"))


def test_good_workloads_get_their_results(mixed_run: tuple[Path, int, str], study: Path, tmp_path: Path) -> None:
    out, _, _ = mixed_run
    coll = pd.read_parquet(out / "tables" / "tax_collectives.parquet")
    assert set(coll["workload"]) == {"a100-bf16", "h100-fp32"}
    z = pd.read_parquet(out / "tables" / "zscores.parquet")
    assert set(z["workload"]) == {"a100-bf16", "h100-fp32"}
    # the same z-scores as `evtsync blocks` gives on each good workload alone
    for name, _, precision in GOOD:
        alone = tmp_path / f"{name}.csv"
        assert main(["-q", "blocks", str(study / "good" / name / "traces"), "--workload", name, "--precision",
                     precision, "--no-cache", "-o", str(alone)]) == 0
        mine = z[z["workload"] == name]
        assert len(mine) == len(pd.read_csv(alone)) > 0
        assert sorted(mine["z"].round(9)) == sorted(pd.read_csv(alone)["z"].round(9))


def test_fit_and_report_name_the_lacking_workload(mixed_run: tuple[Path, int, str]) -> None:
    out, _, _ = mixed_run
    manifest = read_manifest(out)
    lacking = manifest["stages"]["fit-gumbel"]["summary"]["workloads_lacking"]
    assert list(lacking) == ["zz-damaged"] and "tax" in lacking["zz-damaged"]
    tree = load_fit(out / "fits" / "gumbel.nc")
    assert "zz-damaged" in tree.attrs["workloads_lacking"]
    assert tree.attrs["workloads"] == "a100-bf16, h100-fp32"
    html = (out / "report.html").read_text(encoding="utf-8")
    summary = html[html.index('id="summary"'):]
    head = summary[:summary.index("<table")]  # before the summary's table: at the top
    assert "INCOMPLETE study: workload zz-damaged FAILED in stage tax" in head
    assert "pools a100-bf16, h100-fp32 only" in head


def test_allow_failed_workloads_exits_0_but_still_says_it(mixed_run: tuple[Path, int, str],
                                                         capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    placeholder_figures(monkeypatch)  # should the report be made again
    out, _, _ = mixed_run
    study_dir = Path(read_manifest(out)["options"]["traces"][0])
    status = main(["run", str(study_dir), "--out", str(out), "--allow-failed-workloads", *FAST])
    err = capsys.readouterr().err
    assert status == 0
    assert "INCOMPLETE study: workload zz-damaged FAILED" in err  # reused stages keep the record


def test_every_workload_failing_fails_the_stage(study: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    only_bad = tmp_path / "bad"
    shutil.copytree(study / "mixed" / "zz-damaged", only_bad / "zz-damaged")
    status = main(["run", str(only_bad), "--out", str(tmp_path / "out"), "--no-report", *FAST])
    err = capsys.readouterr().err
    assert status == 1
    assert "FAILED tax" in err and "rank(s) 5" in err


def test_a_workload_failing_after_the_tax_is_left_out_from_that_stage_on(
        traces_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Two copies of the real DLRM set; the attribution of the second raises the package's own
    error (injected): the first is attributed, the second recorded as failed there, exit 3."""
    import evtsync.critpath.attribution as attribution
    from evtsync.core.errors import AlignmentError
    from evtsync.runfolder.layout import incomplete_notes

    study = tmp_path / "study"
    for name in ("first", "second"):
        shutil.copytree(traces_dir / "dlrm-8rank-v100", study / name)
    real = attribution.attribute

    def attribute(traces, **kwargs):  # noqa: ANN001, ANN003, ANN202 - the library's signature
        if "second" in str(traces.ranks["path"].iloc[0]):
            raise AlignmentError("injected: rank 3 cannot be attributed")
        return real(traces, **kwargs)

    monkeypatch.setattr(attribution, "attribute", attribute)
    out = tmp_path / "out"
    status = main(["-q", "run", str(study), "--out", str(out), "--no-cache", "--model", "gumbel", "--no-report"])
    err = capsys.readouterr().err
    assert status == 3, err
    manifest = read_manifest(out)
    assert manifest["stages"]["attribution"]["status"] == "done"
    assert failed_workloads(manifest) == {"second": {"stage": "attribution",
                                                     "reason": "AlignmentError: injected: rank 3 cannot be attributed"}}
    attributed = pd.read_parquet(out / "tables" / "attribution_collectives.parquet")
    assert set(attributed["workload"]) == {"first"}
    assert set(pd.read_parquet(out / "tables" / "tax_collectives.parquet")["workload"]) == {"first", "second"}
    assert "from stage attribution on" in incomplete_notes(manifest)[0]
    assert "INCOMPLETE study: workload second FAILED in stage attribution" in err
