"""Issue 33's fault campaign, one test class per kind of fault it found: disk, outputs, ... .

Each case damages the environment (a full disk, simulated by making the writes' ``fsync`` fail
with ENOSPC, or a real 16 KiB tmpfs where the tests run as root) and asserts what a user sees:
exit status 2, exactly one ``evtsync: error:`` line naming the file and the system's reason, no
traceback, and nothing half-written (no temporaries, no partial set of tables, an earlier file
unchanged).
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from evtsync.cli import main
from evtsync.core.tableio import TEMP_SUFFIX
from tests.conftest import TRACES

DLRM = TRACES / "dlrm-8rank-v100"
ENOSPC_TEXT = os.strerror(errno.ENOSPC)  # "No space left on device"


def _disk_full_after(monkeypatch: pytest.MonkeyPatch, writes: int) -> None:
    """The disk fills after ``writes`` complete outputs: every later fsync fails with ENOSPC."""
    real, done = os.fsync, [0]

    def fsync(fd: int) -> None:
        if done[0] >= writes:
            raise OSError(errno.ENOSPC, ENOSPC_TEXT)
        done[0] += 1
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def _one_error_line(err: str) -> str:
    assert "Traceback" not in err
    lines = [x for x in err.splitlines() if x.startswith("evtsync: error:")]
    assert len(lines) == 1, err
    return lines[0]


class TestDiskFull:
    def test_tax_tables_are_all_written_or_none(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
        """``tax -o`` writes six tables; the disk fills at the third: none of them is left."""
        out = tmp_path / "out"
        out.mkdir()
        _disk_full_after(monkeypatch, 2)
        capsys.readouterr()
        assert main(["tax", "-q", str(DLRM), "--no-cache", "-o", str(out / "t.csv")]) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert f"{out}/t_mismatches.csv: cannot write: {ENOSPC_TEXT}, ENOSPC" in line
        assert "none of this command's outputs were written" in line
        assert list(out.iterdir()) == []

    def test_an_earlier_output_is_left_unchanged(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
        earlier = tmp_path / "t.csv"
        earlier.write_text("an earlier result\n")
        _disk_full_after(monkeypatch, 0)
        assert main(["tax", "-q", str(DLRM), "--no-cache", "-o", str(earlier)]) == 2
        _one_error_line(capsys.readouterr().err)
        assert earlier.read_text() == "an earlier result\n"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv"]

    def test_run_stops_with_one_line_and_no_temporaries(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
        """``run`` on a full disk: one line, exit 2, the stage not recorded as failed by the data."""
        out = tmp_path / "run"
        _disk_full_after(monkeypatch, 0)
        capsys.readouterr()
        assert main(["run", "-q", str(DLRM), "--out", str(out), "--no-cache", "--no-report", "--model", "gumbel"]) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert ENOSPC_TEXT in line and str(out) in line
        assert not [p for p in out.rglob("*") if p.name.endswith(TEMP_SUFFIX)]

    def test_real_full_tmpfs(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """The same on a real 16 KiB tmpfs (root only; skipped elsewhere)."""
        mnt = tmp_path / "tiny"
        mnt.mkdir()
        if os.geteuid() != 0 or shutil.which("mount") is None or subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=16k", "tmpfs", str(mnt)], capture_output=True).returncode:
            pytest.skip("needs root and tmpfs to mount a tiny file system")
        try:
            assert main(["tax", "-q", str(DLRM), "--no-cache", "-o", str(mnt / "t.csv"), "--plot", str(mnt / "t.png")]) == 2
            line = _one_error_line(capsys.readouterr().err)
            assert ENOSPC_TEXT in line
            assert list(mnt.iterdir()) == []
        finally:
            subprocess.run(["umount", str(mnt)], check=False)


@pytest.fixture(scope="module")
def dlrm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run folder of the DLRM traces (tax, attribution; too few z-scores for fits)."""
    out = tmp_path_factory.mktemp("run") / "dlrm"
    assert main(["run", "-q", str(DLRM), "--out", str(out), "--no-cache", "--model", "gumbel"]) == 0
    return out


class TestIntegrity:
    def test_report_and_diff_refuse_a_table_edited_after_the_run(self, dlrm_run: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
        """Issue 33 (7): run tables edited x10 were accepted by ``report`` and ``diff``
        (verdict "higher +5458.5 µs") although the manifest stores every output's SHA-256."""
        import pandas as pd

        edited = tmp_path / "edited"
        shutil.copytree(dlrm_run, edited)
        assert main(["diff", str(dlrm_run), str(edited), "--json"]) == 0  # unchanged: compared
        table_file = edited / "tables" / "tax_collectives.parquet"
        table = pd.read_parquet(table_file)
        table["tau_max_us"] *= 10
        table.to_parquet(table_file, index=False)
        capsys.readouterr()
        assert main(["diff", str(dlrm_run), str(edited)]) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert f"{edited}: tables/tax_collectives.parquet changed after `evtsync run` wrote it" in line
        assert main(["report", str(edited), "--out", str(tmp_path / "rep")]) == 2
        line = _one_error_line(capsys.readouterr().err)
        assert "tables/tax_collectives.parquet changed after `evtsync run` wrote it" in line
        assert not (tmp_path / "rep" / "report.html").exists()


class TestClocksAndMessages:
    def test_a_clock_offset_is_shown_in_its_own_unit(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Issue 33 (11): rank 2's clock 5 s ahead was reported as "starts +0.00 h from them"."""
        import gzip
        import json

        folder = tmp_path / "offset"
        folder.mkdir()
        for path in sorted(DLRM.glob("*.json.gz")):
            raw = json.loads(gzip.decompress(path.read_bytes()))
            if raw["distributedInfo"]["rank"] == 2:
                for e in raw["traceEvents"]:
                    if isinstance(e.get("ts"), int | float):
                        e["ts"] += 5_000_000  # µs
            (folder / path.name.removesuffix(".gz")).write_text(json.dumps(raw))
        capsys.readouterr()
        assert main(["tax", "-q", str(folder), "--no-cache"]) == 2
        line = _one_error_line(capsys.readouterr().err)
        import re

        # 5 s plus the ranks' own few ms of start difference: seconds, not "+0.00 h"
        assert "does not overlap in time" in line and re.search(r"\(starts \+5\.0\d s from them\)", line)
        assert "refusing to align its collectives" in line  # not "the tax": blocks, breakdown ... say it too

    def test_format_offset_by_hand(self) -> None:
        from evtsync.core.units import format_offset

        assert [format_offset(v) for v in (5e9, -320e3, 9e12, 123.4e6, 0)] == [
            "+5.00 s", "-320 µs", "+2.50 h", "+123 ms", "+0.00 ns"]

    def test_not_converged_is_said_once_per_fit(self, caplog: pytest.LogCaptureFixture) -> None:
        """Issue 33 (11): the warning came 13 times in one run (once per prediction table)."""
        import numpy as np
        import pandas as pd

        from evtsync.evt.fit import tree_from_draws
        from evtsync.predict.tables import tau_table

        rng = np.random.default_rng(1)
        tree = tree_from_draws({"mu": rng.normal(0, 0.1, (2, 20)), "sigma": np.exp(rng.normal(0, 0.1, (2, 20)))},
                               pd.DataFrame({"cell": ["all"]}), rng.gumbel(size=50), np.zeros(50, dtype=int),
                               family="gumbel")
        tree.attrs.update(model_name="once-test", converged=0, convergence="NOT CONVERGED: max r_hat 1.3 > 1.01")
        caplog.set_level("WARNING", logger="evtsync")
        tables = [tau_table(tree, [8, 16], 10.0) for _ in range(3)]
        notes = [r for r in caplog.records if "NOT CONVERGED" in r.getMessage()]
        assert len(notes) == 1 and "once-test" in notes[0].getMessage()
        assert all(not t["converged"].any() for t in tables)  # every table still carries the flag


class TestTruncatedLog:
    def test_a_cut_nccl_tests_table_is_said(self, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
        """Issue 33 (11): a table cut after 2 of its sizes parsed without a word. The header of
        this real log announces 32 MiB .. 1 GiB by factor 2: 6 sizes (counted by hand)."""
        from evtsync.nccltests.parse import parse_log

        src = (TRACES.parent / "nccl-tests" / "all_reduce_A100-80GB_1x8_meta-gcm-fixture.txt").read_text()
        lines = src.splitlines(keepends=True)
        cut = tmp_path / "cut.txt"
        cut.write_text("".join(lines[:19]))  # header, devices, column header, 2 result rows
        assert parse_log(TRACES.parent / "nccl-tests" / "all_reduce_A100-80GB_1x8_meta-gcm-fixture.txt").runs[0].warnings == []
        run = parse_log(cut).runs[0]
        assert len(run.warnings) == 1
        assert run.warnings[0].startswith("the table holds 2 of the 6 sizes its header announces")
        assert "no footer" in run.warnings[0]
        capsys.readouterr()
        assert main(["nccl-tests", "parse", str(cut)]) == 0
        assert "warning: the table holds 2 of the 6 sizes" in capsys.readouterr().out


class TestReportMarkdown:
    def test_report_md_keeps_injected_html_inert(self, tmp_path: Path) -> None:
        """Issue 33 (11): report.md kept a trace's injected HTML raw (Markdown viewers render it)."""
        import pandas as pd

        from evtsync.report.markdown import Alert, Caption, Section, Table, render_markdown

        evil = '<script>alert(1)</script><img src=x onerror=alert(2)> [click](javascript:alert(3)) `x`'
        sections = [Section(f"workload {evil}", [f"PG {evil}", Alert(evil), Caption(evil),
                                                  Table(pd.DataFrame({"pg": [evil], evil: [1.5]}), caption=evil)])]
        md = render_markdown(f"T {evil}", sections, tmp_path)
        import re

        for raw in ("<script", "<img", "`x`"):
            assert raw not in md
        assert not re.search(r"(?<!\\)\]\(javascript", md)  # the brackets are escaped: no link
        # title, heading, text, alert, small print, table caption, column label, cell: 8 (by hand)
        assert md.count("&lt;script&gt;alert(1)&lt;/script&gt;") == 8


class TestInterrupts:
    def test_ctrl_c_stops_the_pool_without_worker_tracebacks(self, tmp_path: Path) -> None:
        """Issue 33 (11): Ctrl-C printed a KeyboardInterrupt traceback from every pool process.
        Ctrl-C reaches the whole foreground process group: here SIGINT is sent to the group of a
        script whose job pool runs a 60 s job beside an idle process. Its processes must leave the interrupt to the
        parent, which stops them at once: one line, exit 130, well before the tasks would end."""
        import signal
        import sys
        import time

        script = tmp_path / "pool.py"
        script.write_text(  # as the run's job pool: one process busy with a long job, one idle
            "import functools, sys, time\n"
            "from evtsync.core.parallel import JobPool\n"
            "try:\n"
            "    with JobPool(2) as pool:\n"
            "        short = pool.submit(functools.partial(time.sleep, 0.5))\n"
            "        long = pool.submit(functools.partial(time.sleep, 60))\n"
            "        short.result()\n"
            "        print('started', flush=True)\n"
            "        long.result()\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted', file=sys.stderr)\n"
            "    sys.exit(130)\n")
        import evtsync

        env = {**os.environ, "PYTHONPATH": str(Path(evtsync.__file__).resolve().parent.parent)}  # this evtsync
        # a terminal's foreground job gets Ctrl-C; a job started in the background of a
        # non-interactive shell (a CI runner's `cmd &`, nohup) inherits SIGINT ignored, and Python
        # then installs no KeyboardInterrupt handler: restore the default as a terminal has it
        proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True, env=env,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        time.sleep(1)  # the long job runs, the other process waits for work
        began = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=30)
        finally:
            with __import__("contextlib").suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        assert time.monotonic() - began < 20  # not the tasks' 60 s
        assert proc.returncode == 130, err
        assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
        assert err.strip() == "interrupted"


class TestTemporaries:
    def test_a_command_leaves_nothing_in_tmpdir(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        """Issue 33 (11): each rerun left ~17 files in $TMPDIR (PyTensor's numba backend writes the
        source of every compiled function with NamedTemporaryFile(delete=False), in this process
        and in the pool's). What a command's process or its children leave there goes with it."""
        import sys
        import tempfile

        import evtsync.cli.models as models_cli

        tmpdir = tmp_path / "tmp"
        tmpdir.mkdir()
        monkeypatch.setenv("TMPDIR", str(tmpdir))
        monkeypatch.setattr(tempfile, "tempdir", None)  # read $TMPDIR again

        def leaves_temporaries(args: object) -> int:
            with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as fh:
                fh.write("def f(): pass\n")  # as PyTensor does
            subprocess.run([sys.executable, "-c", "import tempfile; tempfile.mkstemp()"], check=True)
            return 0

        monkeypatch.setattr(models_cli, "run", leaves_temporaries)
        assert main(["models"]) == 0
        assert list(tmpdir.iterdir()) == []
        assert os.environ["TMPDIR"] == str(tmpdir) and tempfile.gettempdir() == str(tmpdir)  # restored

    @pytest.mark.slow
    def test_a_real_fit_leaves_nothing_in_tmpdir(self, tmp_path: Path) -> None:
        """The same with a real Bayesian fit in a child ``evtsync`` process (PyTensor's numba backend)."""
        import sys

        import numpy as np
        import pandas as pd

        import evtsync

        z = tmp_path / "z.csv"
        # y, the centred maxima: the column the shipped models fit by default (issue 29)
        pd.DataFrame({"y": np.random.default_rng(0).gumbel(size=200)}).to_csv(z, index=False)
        tmpdir = tmp_path / "tmp"
        tmpdir.mkdir()
        env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONPATH": str(Path(evtsync.__file__).resolve().parent.parent)}
        done = subprocess.run([sys.executable, "-m", "evtsync", "-q", "fit", str(z), "--model", "gumbel", "--draws",
                               "50", "--tune", "50", "--chains", "1", "--out", str(tmp_path / "fit")],
                              env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode in (0, 1), done.stderr[-2000:]
        assert list(tmpdir.iterdir()) == []


class TestInstall:
    def test_the_fit_engine_is_checked_before_any_sampling(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
        """Issue 33 (9): without h5netcdf, ``fit`` sampled for minutes, then failed writing the fit.
        (It is a core dependency now; a broken install is still said before the first draw.)"""
        import numpy as np
        import pandas as pd

        import evtsync.evt.bayesfit as bayesfit
        import evtsync.evt.fit as fit
        from evtsync.core.errors import FitError

        def missing() -> None:
            raise FitError("writing and reading fits needs h5netcdf and h5py (No module named 'h5netcdf')")

        def no_sampling(*args: object, **kwargs: object) -> None:
            raise AssertionError("sampling started before the fit file's engine was checked")

        monkeypatch.setattr(bayesfit, "require_netcdf_engine", missing)
        monkeypatch.setattr(fit, "fit_table", no_sampling)
        z = tmp_path / "z.csv"
        pd.DataFrame({"z": np.random.default_rng(0).gumbel(size=100)}).to_csv(z, index=False)
        capsys.readouterr()
        assert main(["fit", str(z), "--model", "gumbel", "--out", str(tmp_path / "fit")]) == 2
        assert "needs h5netcdf" in _one_error_line(capsys.readouterr().err)
        assert main(["run", str(DLRM), "--out", str(tmp_path / "run"), "--model", "gumbel", "--no-cache"]) == 2
        assert "needs h5netcdf" in _one_error_line(capsys.readouterr().err)
        assert not (tmp_path / "run").exists()  # refused before the run folder was made
