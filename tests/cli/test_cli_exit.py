"""The ``evtsync`` program exits without the interpreter's teardown (issue 48), and without losing
what an exit must do: its status, everything it printed (also into a pipe), the exit handlers
(``atexit``), the threads that are not daemons. Each case is a fresh interpreter running
:func:`evtsync.cli.console_main`, read from outside: its status, its output, files it wrote.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _program(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    """``code`` (which may set things up), then the program with ``sys.argv`` as ``code`` left it."""
    script = tmp_path / "prog.py"
    script.write_text(code + "\nfrom evtsync.cli import console_main\nconsole_main()\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=120, check=False)


def test_exit_handlers_threads_and_output_survive_the_quick_exit(tmp_path: Path) -> None:
    done = _program(f"""
import atexit, sys, threading, time
from pathlib import Path
atexit.register(lambda: Path({str(tmp_path / 'atexit')!r}).write_text("ran"))
def late():
    time.sleep(0.3)
    Path({str(tmp_path / 'thread')!r}).write_text("joined")
threading.Thread(target=late).start()      # not a daemon: the exit waits for it
sys.stdout.write("x" * 100_000)              # buffered, into a pipe: flushed before the exit
sys.argv = ["evtsync", "models"]
""", tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("x" * 100_000)
    # the whole listing came through: its last line names the last shipped specification file
    last = sorted(path.stem for path in (ROOT / "models").glob("*.toml"))[-1]
    assert done.stdout.rstrip().splitlines()[-1].split()[0] == last
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "joined"


def test_the_teardown_is_skipped(tmp_path: Path) -> None:
    # an object alive at the end is not finalized one by one (that is the teardown saved); the same
    # program ending through the interpreter's own exit finalizes it
    setup = f"""
import sys
from pathlib import Path
class Kept:
    def __del__(self):
        Path({str(tmp_path / 'finalized')!r}).write_text("yes")
KEPT = Kept()
sys.argv = ["evtsync", "models"]
"""
    assert _program(setup, tmp_path).returncode == 0
    assert not (tmp_path / "finalized").exists()
    plain = subprocess.run([sys.executable, "-c", setup + "\nfrom evtsync.cli import main\nsys.exit(main())\n"],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                           cwd=tmp_path, timeout=120, check=False)
    assert plain.returncode == 0 and (tmp_path / "finalized").read_text() == "yes"


def test_without_the_private_exit_hook_the_interpreter_exits_as_usual(tmp_path: Path) -> None:
    # an interpreter without CPython's atexit._run_exitfuncs: the program's own exit, so the exit
    # handlers still run (the quick exit would have skipped them) and the status is kept
    done = _program(f"""
import atexit, sys
from pathlib import Path
atexit.register(lambda: Path({str(tmp_path / 'atexit')!r}).write_text("ran"))
del atexit._run_exitfuncs
sys.argv = ["evtsync", "tax", {str(tmp_path / 'no-such-folder')!r}]
""", tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert (tmp_path / "atexit").read_text() == "ran"


def test_the_status_of_an_error_is_kept(tmp_path: Path) -> None:
    # an input error: one line on stderr and the error's status (2, docs/cli.md), through the quick exit
    done = _program(f"import sys\nsys.argv = ['evtsync', 'tax', {str(tmp_path / 'no-such-folder')!r}]", tmp_path)
    assert done.returncode == 2
    assert done.stderr.startswith("evtsync: error:") and "no-such-folder" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_reader_that_went_away_is_no_error(tmp_path: Path) -> None:
    # ``evtsync models | head -1``: the output's pipe is closed; no "error" line, status 0 (before,
    # the OSError handler caught BrokenPipeError first: "evtsync: error: Broken pipe", status 2)
    done = _program("""
import sys
class ClosedPipe:
    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")
    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")
sys.stdout = ClosedPipe()
sys.argv = ["evtsync", "models"]
""", tmp_path)
    assert done.returncode == 0 and done.stderr == ""
