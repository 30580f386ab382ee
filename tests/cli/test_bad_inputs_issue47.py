"""Issue 47 (items 4-7, 9-11): inputs that ended in a traceback, a wrong number or a misleading
message, and a run folder a full disk left unresumable. Each case asserts what a user sees: exit
status 2 with exactly one ``evtsync: error:`` line stating the cause (the file, and the line,
table, column or row at fault), no traceback, and nothing written where it does not belong.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from evtsync.cli import main
from tests.conftest import TRACES

DLRM = TRACES / "dlrm-8rank-v100"
NSYS_EXPORT = Path(__file__).resolve().parents[1] / "data" / "nsys" / "perlmutter-cloverleaf-cuda.sqlite"


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``evtsync -q ARGV`` in this process: exit 2, one error line, no traceback; the line."""
    capsys.readouterr()
    assert main(["-q", *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.startswith("evtsync: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture(scope="module")
def inspector_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Inspector logs of a 4-rank synthetic job (4 lines each)."""
    from evtsync.synth import SynthConfig, synthesize
    from evtsync.synth.inspector import write_inspector_logs

    out = tmp_path_factory.mktemp("insp")
    job = synthesize(SynthConfig.build(ranks=4, tp=4, iterations=1, layers=1, seed=0), out / "set")
    write_inspector_logs(job.traces_dir, out / "logs")
    return out / "logs"


def _edited_logs(source: Path, dest: Path, line: int, old: str, new: str) -> Path:
    """A copy of the logs with ``old`` replaced by ``new`` on ``line`` (1-based) of rank 1's log."""
    shutil.copytree(source, dest)
    target = sorted(dest.iterdir())[1]
    lines = target.read_text().splitlines(keepends=True)
    assert old in lines[line - 1]
    lines[line - 1] = lines[line - 1].replace(old, new)
    target.write_text("".join(lines))
    return target


class TestDeepJson:
    """Item 4: 200,000 nested ``[`` ended in a RecursionError traceback."""

    def test_a_deep_array_is_one_line(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        deep = tmp_path / "deep.json"
        deep.write_text("[" * 200_000)
        line = _error(["tax", str(deep), "--no-cache"], capsys)
        assert str(deep) in line and "nested deeper" in line

    def test_deep_nesting_inside_an_event(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        deep = tmp_path / "rank0.json"
        deep.write_text('{"traceEvents": [{"ph": "X", "args": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}]}")
        assert "nested deeper" in _error(["tax", str(deep), "--no-cache"], capsys)

    def test_deep_nesting_in_an_inspector_line_names_the_line(self, inspector_logs: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
        log = _edited_logs(inspector_logs, tmp_path / "logs", 2, '"coll_perf":', '"x": ' + "[" * 100_000
                           + "]" * 100_000 + ', "coll_perf":')
        line = _error(["tax", str(tmp_path / "logs"), "--no-cache"], capsys)
        assert f"{log}: line 2: " in line and "nested too deeply" in line


class TestInspectorValues:
    """Item 7: ``coll_exec_time_us`` = 1e18 overflowed to a "negative" duration."""

    @pytest.mark.parametrize(("value", "word"), [("1e18", "too large"), ("-5", "negative"), ("1e400", "out of range")])
    def test_an_impossible_duration_is_named_with_its_line(self, inspector_logs: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str], value: str,
                                                           word: str) -> None:
        text = sorted(inspector_logs.iterdir())[1].read_text().splitlines()[2]
        old = text[text.index('"coll_exec_time_us":'):].split(",")[0]
        log = _edited_logs(inspector_logs, tmp_path / "logs", 3, old, f'"coll_exec_time_us":{value}')
        line = _error(["tax", str(tmp_path / "logs"), "--no-cache"], capsys)
        assert f"{log}: line 3: " in line and "coll_exec_time_us" in line and word in line, line

    def test_an_integer_beyond_int64_is_named(self, inspector_logs: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
        log = _edited_logs(inspector_logs, tmp_path / "logs", 2, '"coll_sn":1,', f'"coll_sn":{2**64 - 1},')
        line = _error(["tax", str(tmp_path / "logs"), "--no-cache"], capsys)
        assert f"{log}: line 2: " in line and "coll_sn" in line


class TestNsysColumns:
    """Item 5: text in the kernel ``start`` column ended in a ValueError traceback."""

    @pytest.mark.parametrize("command", ["tax", "attribute"])
    def test_text_in_a_time_column_names_table_column_and_row(self, tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str],
                                                              command: str) -> None:
        export = tmp_path / "rank0.sqlite"
        shutil.copyfile(NSYS_EXPORT, export)
        with sqlite3.connect(export) as conn:
            row = conn.execute("SELECT rowid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1 OFFSET 5").fetchone()[0]
            conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc' WHERE rowid = ?", (row,))
        line = _error([command, f"0={export}", "--no-cache"], capsys)
        assert f"{export}: table CUPTI_ACTIVITY_KIND_KERNEL, column start, row {row}: expected an integer, " \
               "found text 'abc'" in line


class TestMessagesStateTheCause:
    """Item 9: messages that named a cause other than the real one."""

    def test_dev_null_is_a_device_not_a_missing_file(self, capsys: pytest.CaptureFixture[str]) -> None:
        line = _error(["tax", "/dev/null", "--no-cache"], capsys)
        assert "character device" in line and "no such" not in line

    def test_a_folder_of_false_exports_says_what_they_hold(self, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
        folder = tmp_path / "set"
        folder.mkdir()
        (folder / "a.sqlite").write_text("hello\n")
        zeroed = folder / "b.sqlite"
        shutil.copyfile(NSYS_EXPORT, zeroed)
        with open(zeroed, "r+b") as fh:
            fh.write(bytes(100))
        line = _error(["tax", str(folder), "--no-cache"], capsys)
        assert "2 file(s) have a trace file's name but not its content" in line
        assert "a.sqlite starts with b'hello\\n'" in line
        line = _error(["tax", str(zeroed), "--no-cache"], capsys)
        assert "not an SQLite file" in line and "zero bytes" in line

    def test_diff_names_the_missing_side(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """A study's run folder (two workloads) against a missing B said "B holds one trace set"."""
        import pandas as pd

        study = tmp_path / "study"
        (study / "tables").mkdir(parents=True)
        (study / "manifest.json").write_text('{"format": "evtsync-run/1", "stages": {}}')
        pd.DataFrame({"workload": ["a", "b"]}).to_parquet(study / "tables" / "tax_collectives.parquet")
        missing = tmp_path / "nonexistent"
        for argv in (["diff", str(study), str(missing)], ["diff", str(missing), str(DLRM)]):
            line = _error([*argv, "--no-cache"], capsys)
            side = "B" if argv[2] == str(missing) else "A"
            assert f"{side} {missing}: no such file or folder" in line and "trace set" not in line


def test_stats_sniffs_a_binary_file_before_parsing(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Item 10: a 2 MB .sqlite took 33 s of line parsing before its refusal: it is refused from
    its first bytes, and the line parser never sees it."""
    from evtsync.nccltests import parse

    def no_parsing(*args: object, **kwargs: object) -> None:
        raise AssertionError("parsed line by line")

    monkeypatch.setattr(parse, "parse_text", no_parsing)
    line = _error(["nccl-tests", "stats", str(NSYS_EXPORT)], capsys)
    assert f"{NSYS_EXPORT}: an SQLite database" in line and "not an nccl-tests log" in line


class TestReportOfAFit:
    """Item 11: ``report RUN/fits/gev.nc`` wrote report.html, report.md and figures/ into the run."""

    @pytest.fixture()
    def run_with_fit(self, tmp_path: Path) -> Path:
        import numpy as np
        import pandas as pd

        from evtsync.evt.bayesfit import save_fit
        from evtsync.evt.fit import tree_from_draws

        rng = np.random.default_rng(0)
        z = rng.gumbel(size=50)
        tree = tree_from_draws({"mu": rng.normal(0, 0.1, (2, 20)), "sigma": np.exp(rng.normal(0, 0.1, (2, 20)))},
                               pd.DataFrame({"cell": ["all"]}), z, np.zeros(50, dtype=int), family="gumbel")
        run = tmp_path / "run"
        (run / "fits").mkdir(parents=True)
        (run / "manifest.json").write_text('{"format": "evtsync-run/1", "stages": {}}')
        save_fit(tree, run / "fits" / "gumbel.nc")
        return run

    def test_a_fit_file_needs_o(self, run_with_fit: Path, capsys: pytest.CaptureFixture[str]) -> None:
        before = sorted(p.name for p in (run_with_fit / "fits").iterdir())
        line = _error(["report", str(run_with_fit / "fits" / "gumbel.nc")], capsys)
        assert "-o DIR" in line
        assert sorted(p.name for p in (run_with_fit / "fits").iterdir()) == before

    def test_o_inside_a_run_folder_is_refused(self, run_with_fit: Path, capsys: pytest.CaptureFixture[str]) -> None:
        before = sorted(p.name for p in (run_with_fit / "fits").iterdir())
        line = _error(["report", str(run_with_fit / "fits" / "gumbel.nc"), "-o", str(run_with_fit / "fits")], capsys)
        assert f"the run folder {run_with_fit}" in line
        assert sorted(p.name for p in (run_with_fit / "fits").iterdir()) == before


def test_a_run_stopped_by_a_full_disk_resumes_with_the_same_command(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Item 6: the disk filled after five atomic writes (the tax stage's first tables), which left
    them without a manifest, and the same command was then refused ("not an evtsync run folder")
    unless --force. Now the manifest is the first write: the folder is the run's, and resumes."""
    from tests.cli.test_bad_inputs_faults import _disk_full_after

    out = tmp_path / "run"
    argv = ["run", str(DLRM), "--out", str(out), "--no-cache", "--no-report", "--model", "gumbel"]
    _disk_full_after(monkeypatch, 5)
    assert "No space left on device" in _error(argv, capsys)
    assert len(list((out / "tables").iterdir())) >= 4  # the stage's first tables are there
    monkeypatch.undo()  # space freed
    capsys.readouterr()
    assert main(["-q", *argv]) == 0, capsys.readouterr().err
    assert (out / "manifest.json").is_file() and (out / "tables" / "tax_collectives.parquet").is_file()
