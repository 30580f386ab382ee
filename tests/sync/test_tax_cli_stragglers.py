"""`evtsync tax` prints and writes who straggles per PG; checked against a plain json reading."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys


def test_dlrm_straggler_identity_in_tax_json(traces_dir, tmp_path):
    folder = traces_dir / "dlrm-8rank-v100"
    durations = {}
    for f in sorted(folder.glob("*.json.gz")):
        rank = int(f.name.split("_")[0].removeprefix("worker"))
        with gzip.open(f, "rt") as fh:
            events = json.load(fh)["traceEvents"]
        nccl = sorted((e["ts"], e["dur"]) for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"
                      and e["name"].startswith("ncclKernel"))
        durations[rank] = [d for _, d in nccl]
    # straggler = the rank with the shortest kernel (lowest rank on ties), collective by collective
    stragglers = [min(durations, key=lambda r, i=i: (durations[r][i], r)) for i in range(8)]
    changes = sum(a != b for a, b in zip(stragglers, stragglers[1:], strict=False))
    proc = subprocess.run([sys.executable, "-m", "evtsync", "-q", "tax", str(folder), "--no-cache", "--json",
                           "-o", str(tmp_path / "tax.csv")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)["stragglers"][0]
    assert row["n_distinct"] == len(set(stragglers))
    assert row["change_rate"] == changes / 7
    assert (tmp_path / "tax_stragglers.csv").is_file() and (tmp_path / "tax_straggler_ranks.csv").is_file()
