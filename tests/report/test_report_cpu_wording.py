"""Backend-true words on CPU/gloo jobs (issue 46, item 6): never "NCCL", "GPU" or "unknown" for a job
that has no GPU, and no e-notation for a number (an interval end that is 0 up to rounding reads 0).

Truth: the recordings hold no GPU (read with gzip + json: no ``deviceProperties``, no kernel event),
and hand-computed numbers.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evtsync.core.display import fmt, fmt_ci
from evtsync.core.intervals import wilson_interval
from evtsync.report.wording import all_cpu, device_word, straggler_words, tau_words

DATA = Path(__file__).parents[1] / "data"


def test_wording_by_device_label():
    assert all_cpu(["CPU", "CPU"]) and not all_cpu(["CPU", "H100"]) and not all_cpu([])
    assert device_word(True) == "device" and device_word(False) == "GPU"
    assert "NCCL" not in tau_words(True) + straggler_words(True) and "gloo" in tau_words(True)
    assert tau_words(False) == "NCCL kernel duration" and straggler_words(False) == "shortest NCCL kernel"


def test_small_numbers_never_in_e_notation_and_rounding_residue_reads_0():
    assert fmt(3.47e-16) == "0" and fmt(-2e-17) == "0"
    assert fmt(5e-11) == "0.00000000005"
    # a lower end of 3.47e-16 beside an upper end of 40.3: 0 up to rounding
    assert fmt_ci(0.0, 3.47e-16, 40.3) == "0 [0, 40.3]"
    # a genuinely small interval is not zeroed: its ends are as large as its value
    assert fmt_ci(2e-6, 1e-6, 3e-6) == "0.000002 [0.000001, 0.000003]"


def test_wilson_interval_of_no_success_starts_at_exactly_0():
    # k = 0 of 6: p = 0, the Wilson lower end is 0 by the formula (centre = half), not rounding residue
    p, lo, hi = wilson_interval(0, 6)
    assert p == 0.0 and lo == 0.0 and 0 < hi < 1
    p, lo, hi = wilson_interval(6, 6)
    assert p == 1.0 and hi == 1.0 and 0 < lo < 1


def test_cli_tax_on_a_gloo_job_says_cpu_and_gloo():
    first = DATA / "gloo-pipeline" / "pp3" / "rank-0.json.gz"
    with gzip.open(first, "rt") as fh:
        doc = json.load(fh)
    assert not doc.get("deviceProperties") and not any(e.get("cat") == "kernel" for e in doc["traceEvents"])
    proc = subprocess.run([sys.executable, "-m", "evtsync", "tax", str(first.parent), "--no-cache"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "3 rank(s) [CPU]" in proc.stdout and "gloo collective" in proc.stdout
    assert not re.search(r"NCCL|unknown|GPU", proc.stdout)


@pytest.mark.slow
def test_run_report_on_a_gloo_job_never_says_nccl_gpu_or_unknown(tmp_path):
    from evtsync.cli import main

    out = tmp_path / "run"
    assert main(["-q", "run", str(DATA / "gloo-planted" / "ddp"), "--out", str(out), "--no-cache"]) == 0
    text = (out / "report.md").read_text()
    # model identifiers (fit-gev-hier-gpu-precision) and anchors are names, not prose: drop them first
    prose = re.sub(r"[\w-]*gpu-[\w-]*", "", text)
    assert not re.search(r"NCCL|GPU|unknown", prose), re.findall(r".{40}(?:NCCL|GPU|unknown).{20}", prose)[:5]
    assert not re.search(r"\d\.?\d*e-\d", text)
    assert "CPU all" in text
