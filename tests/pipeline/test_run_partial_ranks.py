"""A run folder made with ``--allow-partial`` over an incomplete rank set keeps which ranks it lacks
(issue 18), and ``evtsync diff`` says them per side and refuses a verdict when the two sides' rank
sets differ.

The data: the real 8-rank DLRM set with rank 5's file removed (a copy); the hand-known truth is
"rank 5 has no trace". The reports here are read for their text: their figures are one-pixel
placeholders (:func:`tests.report_checks.placeholder_figures`; issue 48).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evtsync.cli import main
from evtsync.runfolder.layout import incomplete_notes, missing_ranks, read_manifest
from tests.report_checks import placeholder_figures


@pytest.fixture(scope="module")
def partial_run(tmp_path_factory: pytest.TempPathFactory, traces_dir: Path) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("partial")
    folder = root / "dlrm"
    shutil.copytree(traces_dir / "dlrm-8rank-v100", folder)
    next(folder.glob("worker5_*.json.gz")).unlink()
    out = root / "run"
    with pytest.MonkeyPatch.context() as mp:
        placeholder_figures(mp)
        assert main(["-q", "run", str(folder), "--out", str(out), "--allow-partial", "--no-cache", "--model",
                     "gumbel"]) == 0
    return out, folder


def test_run_folder_records_the_missing_ranks(partial_run: tuple[Path, Path]) -> None:
    out, _ = partial_run
    manifest = read_manifest(out)
    assert missing_ranks(manifest) == {"dlrm": [5]}
    notes = incomplete_notes(manifest)
    assert len(notes) == 1 and "rank(s) 5" in notes[0] and "dlrm" in notes[0]
    html = (out / "report.html").read_text(encoding="utf-8")
    summary = html[html.index('id="summary"'):]
    assert "INCOMPLETE rank set (--allow-partial): workload dlrm has no trace of rank(s) 5" in summary[:4000]


def test_diff_refuses_a_verdict_across_different_rank_sets(partial_run: tuple[Path, Path], traces_dir: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = partial_run
    whole = traces_dir / "dlrm-8rank-v100"
    assert main(["-q", "diff", str(whole), str(out), "--no-cache", "--min-collectives", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["missing_ranks"] == {"a": [], "b": [5]}
    assert doc["rows"] and all(r["verdict"] == "no verdict" for r in doc["rows"])
    assert all("rank sets differ" in r["reason"] and "lacks rank(s) 5" in r["reason"] for r in doc["rows"])
    assert main(["-q", "diff", str(whole), str(out), "--no-cache", "--min-collectives", "1"]) == 0
    text = capsys.readouterr().out
    assert f"B = {out}  (INCOMPLETE rank set: no trace of rank(s) 5)" in text
    assert f"A = {whole}\n" in text


def test_diff_of_two_equally_partial_sides_keeps_the_verdict_and_says_so(partial_run: tuple[Path, Path],
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out, _ = partial_run
    assert main(["-q", "diff", str(out), str(out), "--min-collectives", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["missing_ranks"] == {"a": [5], "b": [5]}
    verdicts = {r["verdict"] for r in doc["rows"]}
    assert verdicts == {"no difference"}  # the same tables on both sides
    assert all("both sides lack rank(s) 5" in r["reason"] for r in doc["rows"])


def test_report_command_prints_the_missing_ranks(partial_run: tuple[Path, Path], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    placeholder_figures(monkeypatch)
    out, _ = partial_run
    assert main(["-q", "report", str(out), "--out", str(tmp_path / "rep")]) == 0
    assert "INCOMPLETE rank set (--allow-partial): workload dlrm has no trace of rank(s) 5" in capsys.readouterr().err
