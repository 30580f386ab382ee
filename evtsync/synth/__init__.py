"""Synthetic multi-rank Kineto trace sets with ground truth (``evtsync synth``).

``synthesize(config, out_dir)`` simulates a tensor-parallel transformer job and writes one
trace per rank (modern 2024+ or legacy 2023 format) plus ``ground_truth.json``: every
collective's per-rank durations, straggler and tax, every compute block's run times and
pooled z-scores (drawn from a stated GEV), and the effects of planted causes.
``study(out_dir)`` writes several workloads (GPU model x precision) for the demo.

Importing the package is light (no NumPy or SciPy: ``evtsync synth --help`` reads its choices
from :mod:`evtsync.synth.config`); :func:`synthesize` imports the simulation's modules.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from evtsync.core.errors import InputError
from evtsync.synth.config import (
    DEFAULT_GEV,
    GPU_MODELS,
    PLANT_KINDS,
    TRUTH_FILE,
    Plant,
    SynthConfig,
)

__all__ = ["DEFAULT_GEV", "GPU_MODELS", "PLANT_KINDS", "STUDIES", "TRACES_DIR", "TRUTH_FILE", "Plant",
           "SynthConfig", "SynthResult", "study", "synthesize", "write_demo_traces"]

log = logging.getLogger("evtsync.synth")


#: Sub-folder of the output folder holding the rank traces (only them, so that the folder
#: can be handed to any trace reader); ``ground_truth.json`` sits beside it.
TRACES_DIR = "traces"


@dataclass
class SynthResult:
    """What one call wrote: the trace paths by rank, the ground truth and a short summary."""

    out_dir: Path
    traces: dict[int, Path]
    truth_path: Path
    summary: dict[str, Any]
    _truth: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def traces_dir(self) -> Path:
        """The folder of the rank traces."""
        return self.out_dir / TRACES_DIR

    @property
    def truth(self) -> dict[str, Any]:
        """``ground_truth.json``, read on first use (it can be large for long runs)."""
        if self._truth is None:
            self._truth = orjson.loads(self.truth_path.read_bytes())
        return self._truth


def synthesize(config: SynthConfig, out_dir: str | Path) -> SynthResult:
    """Simulate ``config`` and write its traces and ``ground_truth.json`` into ``out_dir``."""
    from evtsync.synth.timeline import Simulation
    from evtsync.synth.truth import write_truth
    from evtsync.synth.writer import trace_file_name, write_traces

    config.validate()
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError(f"synth: {out} exists and is not a folder")
    expected = {trace_file_name(config, r) for r in config.ranks_to_write()}
    traces_dir = out / TRACES_DIR
    if traces_dir.is_dir():
        stale = sorted(p.name for p in traces_dir.iterdir()
                       if p.name.endswith((".json", ".json.gz")) and p.name not in expected)
        if stale:
            raise InputError(f"synth: {traces_dir} already holds {len(stale)} trace file(s) this run would not "
                             f"overwrite (e.g. {stale[0]}); a reader would mix them in: remove them or choose "
                             f"another folder")
    out.mkdir(parents=True, exist_ok=True)
    sim = Simulation(config)
    fd, tmp_name = tempfile.mkstemp(prefix=".collectives.", suffix=".jsonl.tmp", dir=out)
    try:
        with os.fdopen(fd, "wb") as jsonl:
            dumps = orjson.dumps
            sim.collective_sink = lambda record: jsonl.write(dumps(record) + b"\n")
            traces = write_traces(sim, out / TRACES_DIR)
        truth_path = write_truth(sim, traces, out, Path(tmp_name))
    finally:
        Path(tmp_name).unlink(missing_ok=True)
    taus = sorted(sim.tp_tau_max)
    summary = {"n_collectives": sim.n_collectives, "n_tp_collectives": len(taus),
               "median_tp_tau_max_us": taus[len(taus) // 2] if taus else 0,
               "n_blocks": sum(1 for p in range(sim.n_tp) if sim.design_rows[p]),
               "n_plants": len(sim.plant_records), "gev": dict(zip(("mu", "sigma", "xi"), config.gev_params, strict=True)),
               "parent": config.parent}
    log.info("wrote %d rank traces (%s format, %s %s) and %s: %d collectives, %d block identities",
             len(traces), config.format, config.gpu, config.precision, truth_path.name, sim.n_collectives,
             summary["n_blocks"])
    if sim.z_redraws:
        log.info("noise design redrew %d z-score sets to keep the pooled sd feasible", sim.z_redraws)
    return SynthResult(out, traces, truth_path, summary)


#: Named studies: several workloads, each written to its own folder. The demo simulates ranks
#: (issue 29): every rank's block time is drawn iid from a stated parent (normal on A100,
#: lognormal on H100, Gumbel on H200), z-scores come from the traces like any others, and the
#: truth states the mean straggler delay per n. The bf16 workloads have TP groups of m = 4 (or
#: 8) ranks, the fp32 ones a single TP group of 16 or 32 ranks, so that the prediction is
#: checked against measured delays beyond the fitted sample size. ``gev-design``: the earlier
#: demo, whose z-scores follow a stated GEV per GPU x precision by construction.
STUDIES: dict[str, list[dict[str, Any]]] = {
    "demo": [
        {"workload": "a100-bf16", "gpu": "A100", "precision": "bf16", "parent": "normal", "ranks": 8, "tp": 4},
        {"workload": "a100-fp32", "gpu": "A100", "precision": "fp32", "parent": "normal", "ranks": 16, "tp": 16},
        {"workload": "h100-bf16", "gpu": "H100", "precision": "bf16", "parent": "lognormal", "ranks": 8, "tp": 8},
        {"workload": "h100-fp32", "gpu": "H100", "precision": "fp32", "parent": "lognormal", "ranks": 16, "tp": 16},
        {"workload": "h200-bf16", "gpu": "H200", "precision": "bf16", "parent": "gumbel", "ranks": 8, "tp": 4},
        {"workload": "h200-fp32", "gpu": "H200", "precision": "fp32", "parent": "gumbel", "ranks": 32, "tp": 32},
    ],
    "gev-design": [
        {"workload": "a100-bf16", "gpu": "A100", "precision": "bf16"},
        {"workload": "a100-fp32", "gpu": "A100", "precision": "fp32"},
        {"workload": "h100-bf16", "gpu": "H100", "precision": "bf16"},
        {"workload": "h100-fp32", "gpu": "H100", "precision": "fp32"},
        {"workload": "h200-bf16", "gpu": "H200", "precision": "bf16"},
        {"workload": "h200-fp32", "gpu": "H200", "precision": "fp32"},
    ],
    # simulated ranks (issue 29): one TP group of 16, 32 and 64 ranks, each from a stated parent,
    # so that predictions fitted on samples of m = 4 are checked against measured delays at n > m
    "ranks": [
        {"workload": "h100-bf16-normal-16", "gpu": "H100", "precision": "bf16", "parent": "normal",
         "ranks": 16, "tp": 16},
        {"workload": "h200-bf16-lognormal-32", "gpu": "H200", "precision": "bf16", "parent": "lognormal",
         "ranks": 32, "tp": 32},
        {"workload": "a100-bf16-gumbel-64", "gpu": "A100", "precision": "bf16", "parent": "gumbel",
         "ranks": 64, "tp": 64},
    ],
}


def study(out_dir: str | Path, name: str = "demo", **overrides: Any) -> list[SynthResult]:
    """Write every workload of study ``name`` into ``out_dir/<workload>/``.

    ``overrides`` are :meth:`SynthConfig.build` arguments applied to every workload (the
    GPU, precision and workload name of each entry win); each workload gets its own seed
    (base seed + index) so their noise is independent.
    """
    if name not in STUDIES:
        raise InputError(f"synth: unknown study {name!r}; expected one of {', '.join(STUDIES)}")
    base_seed = int(overrides.pop("seed", 0))
    overrides.pop("gev", None)
    results = []
    for i, entry in enumerate(STUDIES[name]):
        cfg = SynthConfig.build(**{**overrides, **entry, "seed": base_seed + i})
        results.append(synthesize(cfg, Path(out_dir) / entry["workload"]))
    return results


def replace(config: SynthConfig, **changes: Any) -> SynthConfig:
    """A validated copy of ``config`` with ``changes``."""
    new = dataclasses.replace(config, **changes)
    new.validate()
    return new


def write_demo_traces(out_dir: str | Path, **overrides: Any) -> Path:
    """The default 8-rank set (seed 0) in ``out_dir``; returns the folder of its traces."""
    cfg = SynthConfig.build(**overrides)
    return synthesize(cfg, out_dir).traces_dir
