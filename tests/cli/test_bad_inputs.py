"""Bad input, table-driven (issue 18): every case runs the CLI as a user would, on damaged copies
of the real data in tests/data/public (copies of the public data), and asserts

- a non-zero exit status,
- one line on stderr that starts ``evtsync: error:`` and names the culprit (file, rank, option),
  matched against a hand-written pattern of the *cause* (not a consequence),
- no traceback, no numpy/pandas warning on the terminal,
- no half-written output left behind, and no file outside the outputs touched.

The copies are made in a temporary folder; tests/data/public (copies of the public data) is never written.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import TRACES, file_hashes, full_data_file, link_session_scanner

DLRM = TRACES / "dlrm-8rank-v100"
pytestmark = pytest.mark.skipif(not DLRM.is_dir(), reason=f"shared data not found at {DLRM}")


def _load(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def _save(doc: dict, path: Path) -> None:
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)


def _dlrm_copy(tmp: Path) -> Path:
    out = tmp / "dlrm"
    shutil.copytree(DLRM, out)
    return out


def _rank_file(folder: Path, rank: int) -> Path:
    return next(folder.glob(f"worker{rank}_*.json.gz"))


def _edit_kernels(folder: Path, rank: int, edit: Callable[[list[dict]], None]) -> None:
    path = _rank_file(folder, rank)
    doc = _load(path)
    kernels = [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]
    edit(kernels)
    _save(doc, path)


@dataclass
class Case:
    """A damaged input and what the one error line must say."""

    name: str
    make: Callable[[Path], list[str]]  # builds the input in tmp, returns the CLI arguments
    expect: str  # regex the error line must match (case-insensitive)


def _missing_rank(tmp: Path) -> list[str]:
    folder = _dlrm_copy(tmp)
    _rank_file(folder, 5).unlink()
    return ["tax", str(folder), "--no-cache"]


def _foreign_rank(tmp: Path) -> list[str]:
    folder = _dlrm_copy(tmp)
    _rank_file(folder, 3).unlink()
    shutil.copy(full_data_file("traces/single-rank/hta_rank3of8.json.gz"), folder / "worker3_other_job.json.gz")
    return ["tax", str(folder), "--no-cache"]


def _empty_rank(tmp: Path) -> list[str]:
    folder = _dlrm_copy(tmp)
    path = _rank_file(folder, 2)
    doc = _load(path)
    doc["traceEvents"] = []
    _save(doc, path)
    return ["tax", str(folder), "--no-cache"]


def _no_dur(tmp: Path) -> list[str]:
    folder = _dlrm_copy(tmp)

    def drop(kernels: list[dict]) -> None:
        for k in kernels:
            k.pop("dur", None)

    _edit_kernels(folder, 4, drop)
    return ["tax", str(folder), "--no-cache"]


def _one_of_two(tmp: Path) -> list[str]:
    shutil.copy(full_data_file("traces/single-rank/hta_rank1of2.json.gz"), tmp / "rank1.json.gz")
    return ["tax", str(tmp / "rank1.json.gz"), "--no-cache"]


def _negative_dur(tmp: Path) -> list[str]:
    folder = _dlrm_copy(tmp)

    def negate(kernels: list[dict]) -> None:
        nccl = [k for k in kernels if k["name"].startswith("ncclKernel")]
        nccl[2]["dur"] = -5

    _edit_kernels(folder, 1, negate)
    return ["tax", str(folder), "--no-cache"]


def _absurd_ts(tmp: Path) -> list[str]:
    folder = _dlrm_copy(tmp)

    def far(kernels: list[dict]) -> None:
        kernels[10]["ts"] = 1e30

    _edit_kernels(folder, 6, far)
    return ["tax", str(folder), "--no-cache"]


def _duplicate_event(tmp: Path) -> list[str]:
    folder = _dlrm_copy(tmp)
    path = _rank_file(folder, 2)
    doc = _load(path)
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel"))
    doc["traceEvents"].append(dict(kernel))  # the same event written twice
    _save(doc, path)
    return ["tax", str(folder), "--no-cache"]


def _truncated_json(tmp: Path) -> list[str]:
    folder = _dlrm_copy(tmp)
    path = _rank_file(folder, 0)
    raw = gzip.decompress(path.read_bytes())
    cut = raw.rfind(b'"name"', 0, len(raw) // 2)
    broken = raw[:cut] + b'"name": ]' + raw[cut + 6:]
    path.write_bytes(gzip.compress(broken))
    (tmp / "expected_byte").write_text(str(cut))
    return ["tax", str(folder), "--no-cache"]


def _pg(text: str) -> Callable[[Path], list[str]]:
    return lambda tmp: ["tax", str(DLRM), "--no-cache", "--pg", text]


CASES = [
    Case("missing rank", _missing_rank, r"rank\S* 5\b.*(missing|no trace)"),
    Case("foreign rank file", _foreign_rank, r"(another job|foreign).*worker3_other_job|worker3_other_job.*(another job|foreign)"),
    Case("empty traceEvents", _empty_rank, r"worker2_.*(no events|empty)"),
    Case("kernels without dur", _no_dur, r"(rank 4|worker4_).*dur"),
    Case("one rank of a two-rank job", _one_of_two, r"rank\S* 0\b.*(missing|no trace)"),
    Case("negative kernel duration", _negative_dur, r"(rank 1\b|worker1_).*negative duration"),
    Case("duplicate event", _duplicate_event, r"worker2_.*duplicate events"),
    Case("absurd timestamp", _absurd_ts, r"(rank 6\b|worker6_).*timestamp"),
    Case("pg open range", _pg("tp=0-"), r"--pg 'tp=0-'"),
    Case("pg negative rank", _pg("tp=-3"), r"--pg 'tp=-3'"),
    Case("pg double range", _pg("tp=0-3-5"), r"--pg 'tp=0-3-5'"),
    Case("tax output under /proc", lambda tmp: ["tax", str(DLRM), "--no-cache", "-o", "/proc/evtsync/tax.parquet"],
         r"/proc/evtsync"),
    Case("run --out is a file", lambda tmp: (tmp.joinpath("f").write_text("x"), ["run", str(DLRM), "--out", str(tmp / "f")])[1],
         r"/f\b.*(not a folder|is a file|exists)"),
    Case("fit of equal maxima (numpy must stay quiet)",
         lambda tmp: (tmp.joinpath("z.csv").write_text("z\n" + "2.5\n" * 40), ["fit", str(tmp / "z.csv"), "--mle"])[1],
         r"z\.csv: all 40 values of 'z' are equal"),
    Case("fit of maxima of order 1e-300 (a scipy ValueError before)",
         lambda tmp: (tmp.joinpath("z.csv").write_text("z\n" + "".join(f"{1e-300 * (i + 1)}\n" for i in range(40))),
                      ["fit", str(tmp / "z.csv"), "--mle"])[1], r"z\.csv.*rescale"),
    Case("bandwidth with xi >= 1", lambda tmp: ["bandwidth", "--topology", "full", "--n", "8", "--alpha-us", "5",
                                                "--bytes", "1e9", "--gev", "0.9", "0.35", "1.2", "--block-sd-us", "18"],
         r"xi.*(>= ?1|≥ ?1).*infinite|infinite.*xi"),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gives_one_clear_line(case: Case, tmp_path: Path):
    work = tmp_path / "in"
    work.mkdir()
    argv = case.make(work)
    before = file_hashes(work)
    env = {**os.environ, "EVTSYNC_CACHE_DIR": str(link_session_scanner(tmp_path / "cache"))}
    proc = subprocess.run([sys.executable, "-m", "evtsync", "-q", *argv], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    err = proc.stderr.strip()
    assert proc.returncode != 0, f"exit 0 on bad input; stdout: {proc.stdout[-800:]}"
    assert "Traceback" not in err, err
    assert "Warning" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("evtsync: error:")]
    assert len(errors) == 1, err
    import re

    assert re.search(case.expect, errors[0], re.IGNORECASE), errors[0]
    after = file_hashes(work)
    changed = {k for k in before if after.get(k) != before[k]}
    assert not changed, f"input files touched: {changed}"
    leftovers = [p for p in tmp_path.rglob("*.tmp")]
    assert not leftovers, leftovers


def test_truncated_json_names_the_true_position(tmp_path: Path):
    work = tmp_path / "in"
    work.mkdir()
    argv = _truncated_json(work)
    proc = subprocess.run([sys.executable, "-m", "evtsync", "-q", *argv], capture_output=True, text=True,
                          env={**os.environ, "EVTSYNC_CACHE_DIR": str(link_session_scanner(tmp_path / "cache"))})
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "worker0_" in line
    expected = int((work / "expected_byte").read_text())
    import re

    found = re.search(r"byte (\d+)", line)
    assert found, line
    # the error is where the damage is (within one event), not at the start of traceEvents
    assert abs(int(found.group(1)) - expected) < 2000, (line, expected)


def test_missing_rank_with_allow_partial_says_what_is_missing(tmp_path: Path):
    work = tmp_path / "in"
    work.mkdir()
    argv = _missing_rank(work) + ["--allow-partial", "--json"]
    proc = subprocess.run([sys.executable, "-m", "evtsync", "-q", *argv], capture_output=True, text=True,
                          env={**os.environ, "EVTSYNC_CACHE_DIR": str(link_session_scanner(tmp_path / "cache"))})
    assert proc.returncode == 0, proc.stderr
    assert "5" in json.dumps(json.loads(proc.stdout).get("missing_ranks", "")), proc.stdout[:500]


def test_outputs_follow_the_umask(tmp_path: Path):
    out = tmp_path / "tax.csv"
    proc = subprocess.run([sys.executable, "-m", "evtsync", "-q", "tax", str(DLRM), "--no-cache", "-o", str(out)],
                          capture_output=True, text=True, env={**os.environ, "EVTSYNC_CACHE_DIR": str(link_session_scanner(tmp_path / "c"))},
                          preexec_fn=lambda: os.umask(0o022))
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_mode & 0o777 == 0o644
