"""The bundled demo reads its traces without building the compiled trace scanner (issue 48): a cold
demo built it (~10 s of CPU, counted in no stage) for a read it saves ~0.7 s on. The run opens
``evtsync.trace.decode.scanner_build_deferred`` around its stages for the demo only; the rule itself
is tested in tests/trace/test_trace_scan.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evtsync.pipeline.engine import Run, Stage, execute
from evtsync.pipeline.options import RunOptions
from evtsync.trace import decode
from tests.conftest import TRACES


def test_only_the_demo_defers_the_scanner_build(tmp_path: Path) -> None:
    seen: dict[bool, int] = {}

    def probe(run: Run) -> dict[str, Any]:
        seen[run.options.is_demo] = decode._build_deferred[0]
        return {}

    def stages(_run: Run) -> list[Stage]:
        return [Stage("probe", probe, (), lambda _r: {})]

    execute(Run(RunOptions(out=str(tmp_path / "demo"))), stages)
    execute(Run(RunOptions(traces=[str(TRACES / "dlrm-8rank-v100")], out=str(tmp_path / "real"))), stages)
    assert seen == {True: 1, False: 0}
    assert decode._build_deferred[0] == 0  # closed with the run
