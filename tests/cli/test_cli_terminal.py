"""A quiet terminal (issue 34 item 2): warnings and results by default, INFO under -v, log
lines never written through a progress bar, each warning once, and a stage's cost in CPU time."""

from __future__ import annotations

import io
import logging
import re
import time
from pathlib import Path

import pytest

from evtsync.cli import main
from evtsync.core.progress import BarSafeHandler, write_line


@pytest.fixture
def table_without_z(tmp_path: Path) -> Path:
    """Block maxima in a column named `x`: `fit --mle` says at INFO level which column it used."""
    path = tmp_path / "maxima.csv"
    path.write_text("x\n" + "\n".join(str(v) for v in (1.2, 0.3, 2.5, 1.1, 0.7, 3.9, 1.8, 0.2, 1.4, 2.2, 0.9, 1.6)))
    return path


def test_info_only_under_v(table_without_z: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", str(table_without_z), "--mle", "--no-profile"]) == 0
    quiet = capsys.readouterr()
    assert "GEV MLE of 'x'" in quiet.out and "INFO" not in quiet.err and quiet.err == ""
    assert main(["-v", "fit", str(table_without_z), "--mle", "--no-profile"]) == 0
    assert "evtsync: INFO: " in capsys.readouterr().err
    assert main(["fit", str(table_without_z), "--mle", "--no-profile", "-vv"]) == 0  # after the command too
    assert "evtsync: INFO: " in capsys.readouterr().err


def _handler_on(stream: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> logging.Logger:
    monkeypatch.setattr("sys.stderr", stream)
    logger = logging.getLogger("evtsync.test_terminal")
    handler = BarSafeHandler()
    handler.setFormatter(logging.Formatter("evtsync: %(levelname)s: %(message)s"))
    logger.handlers[:] = [handler]
    logger.propagate = False
    return logger


def test_log_lines_are_written_above_a_progress_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a bar on the terminal a record is written by tqdm.write: the bar's line is cleared
    (carriage return) first, so the record starts its own line; without the redirection it would
    be appended to the bar's text ("…[00:00<?, ?it/s]evtsync: WARNING: …")."""
    from tqdm import tqdm

    stream = io.StringIO()
    logger = _handler_on(stream, monkeypatch)
    with tqdm(total=10, desc="work", file=stream, leave=False, mininterval=0) as bar:
        bar.update(3)
        logger.warning("half way")
        write_line("  stage                    done")
        bar.update(3)
    text = stream.getvalue()
    assert re.search(r"(?:^|[\r\n])evtsync: WARNING: half way\n", text)
    assert re.search(r"(?:^|[\r\n])  stage                    done\n", text)
    assert not re.search(r"\][ \t]*evtsync", text)  # never on the bar's line


def test_each_warning_once(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    logger = _handler_on(stream, monkeypatch)
    for _ in range(3):
        logger.warning("fit gev: NOT CONVERGED")
    logger.warning("fit gumbel: NOT CONVERGED")
    assert stream.getvalue().splitlines() == ["evtsync: WARNING: fit gev: NOT CONVERGED",
                                              "evtsync: WARNING: fit gumbel: NOT CONVERGED"]


def _busy_job() -> str:
    logging.getLogger("evtsync.pipeline.test").warning("said in the worker")
    start = time.process_time()
    while time.process_time() - start < 0.2:
        pass
    return "result"


def test_a_pool_job_reports_its_cpu_time_and_its_log(caplog: pytest.LogCaptureFixture) -> None:
    """The wrapper a pool worker runs each job in: the job's CPU seconds (its cost, not the main
    process's waiting) and its log records, which the main process logs again under its bars."""
    from evtsync.pipeline.engine import _cpu_timed

    result, cpu, records = _cpu_timed(_busy_job)
    assert result == "result" and cpu >= 0.2
    assert [r.getMessage() for r in records] == ["said in the worker"] and records[0].levelno == logging.WARNING


def test_run_json_and_stage_lines_are_documented() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "tutorial.md").read_text(encoding="utf-8")
    assert "CPU time (the stage's cost) and wall time" in text and "running…" not in text


def test_repeated_v_before_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-vvv", "models", "--json"]) == 0
    assert capsys.readouterr().out.lstrip().startswith("[")


def test_waiting_for_a_pool_job_shows_a_live_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    """`run`'s fits in a pool: the main process's bar says the job is alive and how many are done."""
    from concurrent.futures import ThreadPoolExecutor

    from evtsync.core.progress import set_progress, wait_for

    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    set_progress(True)
    try:
        with ThreadPoolExecutor(1) as pool:
            future = pool.submit(time.sleep, 1.2)
            assert wait_for(future, "fit-gev: running in a pool process", lambda: "1 of 2 pool jobs done") is None
    finally:
        set_progress(None)
    text = stream.getvalue()
    assert "fit-gev: running in a pool process: 00:0" in text and "1 of 2 pool jobs done" in text


def test_a_warning_for_several_cells_is_said_once_with_its_count(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49: the demo said "ranktail A100|bf16: small cell …" three times, once per cell. The
    handler writes the first and, at the end, one line with every such warning's count and other
    cells; an exact repeat is counted too; a warning with other numbers is another warning."""
    stream = io.StringIO()
    logger = _handler_on(stream, monkeypatch)
    handler = logger.handlers[0]
    for cell in ("A100|bf16", "H100|bf16", "H200|bf16"):
        logger.warning("ranktail %s: small cell: 632 rank values", cell)
    logger.warning("ranktail H100|fp32: small cell: 480 rank values")   # other numbers: its own line
    logger.warning("prior-dominated")
    logger.warning("prior-dominated")
    lines = stream.getvalue().splitlines()
    assert lines == ["evtsync: WARNING: ranktail A100|bf16: small cell: 632 rank values",
                     "evtsync: WARNING: ranktail H100|fp32: small cell: 480 rank values",
                     "evtsync: WARNING: prior-dominated"]
    assert handler.repeat_lines() == [
        'evtsync: warnings said once above that came more often: "ranktail A100|bf16: small cell: 632 rank val…" '
        '3×, also for H100|bf16, H200|bf16; "prior-dominated" 2×']


def test_collector_keeps_each_warning_once_with_its_count() -> None:
    """A run where logging is not set up (a notebook) keeps its warnings (run.warnings), counted."""
    from evtsync.core.progress import WarningCollector

    logger = logging.getLogger("evtsync.test_collector")
    collector = WarningCollector()
    logger.addHandler(collector)
    try:
        logger.info("not a warning")
        for cell in ("A100|bf16", "H100|bf16"):
            logger.warning("ranktail %s: small cell", cell)
        logger.error("fit gev NOT CONVERGED")
    finally:
        logger.removeHandler(collector)
    assert collector.counted() == [("ranktail A100|bf16: small cell", 2), ("fit gev NOT CONVERGED", 1)]
