"""The reader as a plain script calls it (issue 21): no ``__main__`` guard needed for the
process pool; ``cache=False`` / ``None`` write nothing, a path is that cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from evtsync.trace.traceset import load_traces

REPO = Path(__file__).resolve().parents[2]


def test_pool_from_a_script_without_main_guard(traces_dir: Path, tmp_path: Path) -> None:
    script = tmp_path / "plain.py"
    script.write_text(
        "import evtsync\n"
        f"traces = evtsync.load_traces({str(traces_dir / 'dlrm-8rank-v100')!r}, jobs=2, cache=False)\n"
        "print(len(traces.kernels), len(traces.rank_ids))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    # kernels of the 8 DLRM ranks (GPU events: 245+310+246+315+251+245+246+246 kernels, 16 memcpy
    # each, 6 memsets on ranks 3 and 4), counted from the files' category inventory by hand
    assert done.stdout.split() == [str(2104 + 8 * 16 + 12), "8"]
    assert "bootstrapping" not in done.stderr and "falls back" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.py"]  # cache=False: nothing written


@pytest.mark.parametrize("cache", [False, None])
def test_no_cache_writes_nothing(traces_dir: Path, tmp_path: Path, monkeypatch, cache) -> None:
    home = tmp_path / "cachehome"
    monkeypatch.setenv("EVTSYNC_CACHE_DIR", str(home))
    monkeypatch.chdir(tmp_path)
    load_traces(traces_dir / "dlrm-8rank-v100", cache=cache, jobs=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_cache_path_is_that_cache(traces_dir: Path, tmp_path: Path) -> None:
    first = load_traces(traces_dir / "dlrm-8rank-v100/worker0_step_12.1694128201545.pt.trace.json.gz",
                        cache=tmp_path / "c", jobs=1)
    entries = list((tmp_path / "c").rglob("meta.json"))
    assert len(entries) == 1
    again = load_traces(traces_dir / "dlrm-8rank-v100/worker0_step_12.1694128201545.pt.trace.json.gz",
                        cache=tmp_path / "c", jobs=1)
    assert again.kernels.equals(first.kernels) and again.untabulated.equals(first.untabulated)


def test_job_pool_from_a_script_without_main_guard(tmp_path: Path) -> None:
    """The pipeline's job pool (the fits of ``evtsync run``) started from a plain script: its
    processes must not re-import the script (which would start the pool again inside them)."""
    script = tmp_path / "plain_jobs.py"
    script.write_text(
        "import functools, math\n"
        "from evtsync.core.parallel import JobPool\n"
        "with JobPool(2) as pool:\n"
        "    futures = [pool.submit(functools.partial(math.sqrt, x)) for x in (4.0, 9.0)]\n"
        "    print(*(f.result() for f in futures))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["2.0", "3.0"]
    assert "bootstrapping" not in done.stderr
