"""The ground truth written beside a synthetic trace set (``ground_truth.json``).

Every number here is computed from the same integer-microsecond values that the trace
files carry, so a reader that recomputes tau or z from the raw JSON gets exactly these.
Schema (``schema_version`` 1) is documented in ``docs/synth.md``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson

from evtsync._version import __version__
from evtsync.core.tableio import atomic_path
from evtsync.synth.config import DEFAULT_GEV, TRUTH_FILE, SynthConfig
from evtsync.synth.noise import pooled_z
from evtsync.synth.parents import fleet_shifts, get_parent, true_delay_sd, true_delays_us
from evtsync.synth.timeline import Simulation

TRUTH_SCHEMA_VERSION = 1


def _blocks(sim: Simulation) -> list[dict[str, Any]]:
    """Per block identity: the written busy times and spans of every instance and their z-scores."""
    cfg: SynthConfig = sim.cfg
    m = cfg.sample_size
    planted_positions = {p["position"] for p in sim.plant_records if p["kind"] == "slow_gemm"}
    blocks = []
    for p in range(sim.n_tp):
        rows = sim.design_rows[p]
        if not rows:
            continue
        busy_all = sim.durations[p][rows].sum(axis=2)           # (J, ranks)
        span_all = sim.spans[p][rows]
        inst = [(jj, j, sample) for jj, j in enumerate(rows) for sample in sim.samples]
        busy = np.array([busy_all[jj, list(sample)] for jj, _, sample in inst], dtype=float)
        span = np.array([span_all[jj, list(sample)] for jj, _, sample in inst], dtype=float)
        z_design = (np.array([sim.designs[(p, sample)].z[jj] for jj, _, sample in inst]) if cfg.parent is None
                    else np.full(len(inst), np.nan))
        z = pooled_z(busy)
        z_span = pooled_z(span)
        xbar = busy.mean(axis=1)
        s_pooled = float(np.sqrt(((busy - xbar[:, None]) ** 2).sum() / (len(inst) * (m - 1))))
        roles = [sim.program[si].roles[k] for si, k in sim.block_kernels[p]]
        a_design = float(sim.weights[p].sum())
        gaps = span - busy
        blocks.append({
            "position": p,
            "signature": [sim.kernels[r].name for r in roles],
            "roles": roles,
            "has_gemm": any(r.startswith("gemm") for r in roles),
            "a_design_us": a_design, "b_design_us": a_design * cfg.cv,
            "mean_us": float(busy.mean()), "s_pooled_us": s_pooled,
            "cv": s_pooled / float(busy.mean()),
            "planted": p in planted_positions,
            "span_gap_rank_independent": bool(np.all(gaps.max(axis=1) == gaps.min(axis=1))),
            "max_abs_z_minus_design": float(np.max(np.abs(z - z_design))) if cfg.parent is None else None,
            **({} if cfg.parent is None else {
                "true_straggler_delay_us": true_delays_us(cfg.parent, a_design * cfg.cv, _domain_sizes(cfg),
                                                     fleet_shifts(cfg.ranks, cfg.slow_ranks))}),
            "instances": [{"iteration": j, "ranks": list(sample), "busy_us": [int(v) for v in b],
                           "span_us": [int(v) for v in sp], "z": float(zz), "z_span": float(zs),
                           "z_design": float(zd), "max_rank": sample[int(np.argmax(b))],
                           "max_rank_design": (int(sample[int(sim.designs[(p, sample)].max_pos[jj])])
                                               if cfg.parent is None else None)}
                          for (jj, j, sample), b, sp, zz, zs, zd in zip(inst, busy, span, z, z_span, z_design, strict=True)],
        })
    return blocks


def _domain_sizes(cfg: SynthConfig) -> list[int]:
    """m, 2m, … up to 4096: the n of the true straggler delays (those of the tau(n) curves)."""
    from evtsync.predict.tables import domain_sizes

    return [int(n) for n in domain_sizes(cfg.sample_size, 4096)]


def _parent_truth(cfg: SynthConfig) -> dict[str, Any] | None:
    """The parent of the rank times, the departures from iid ranks, and the true mean straggler delay per
    n (in units of b) under "a job of n ranks from the same fleet"."""
    if cfg.parent is None:
        return None
    parent = get_parent(cfg.parent)
    shifts = fleet_shifts(cfg.ranks, cfg.slow_ranks)
    departures = bool(cfg.shock_sd or cfg.drift_sd or cfg.slow_ranks)
    return {"name": parent.name, "description": parent.description,
            "rank_time": ("X = a (1 + cv·eps), eps iid over ranks and iterations, mean 0, sd 1" if not departures else
                          "X = a (1 + cv·(eps + shock_i + drift_i + rho_r)), eps iid over ranks and iterations, "
                          "mean 0, sd 1; shock_i and drift_i shared by the ranks of collective i; rho_r per rank"),
            "departures": {"shock_sd": cfg.shock_sd, "drift_sd": cfg.drift_sd, "drift_shape": cfg.drift_shape,
                           "slow_ranks": {str(r): sd for r, sd in cfg.slow_ranks},
                           "unit": "b = cv·a, the sd of eps in µs"},
            "fleet": ("a job of n ranks from the same fleet: each new rank's persistent effect drawn at random "
                      "from this job's ranks' effects (0 for all but the slow ranks); shock and drift cancel in "
                      "max - mean"),
            "true_straggler_delay_sd": {str(n): true_delay_sd(cfg.parent, n, shifts) for n in _domain_sizes(cfg)},
            "definition": "E[max_n X - mean_n X] / b, b = cv·a, integrated (scipy quad, ~1e-8) from the CDF of "
                          "eps + rho, rho uniform over the fleet's rank effects (per block identity in µs: "
                          "blocks[].true_straggler_delay_us)"}


def truth_header(sim: Simulation, files: dict[int, Path]) -> dict[str, Any]:
    """Everything of the truth but the per-collective, per-block and per-cause lists."""
    cfg: SynthConfig = sim.cfg
    mu, sigma, xi = cfg.gev_params
    return {
        "schema_version": TRUTH_SCHEMA_VERSION,
        "generator": f"evtsync {__version__} synth",
        "seed": cfg.seed,
        "config": cfg.to_dict(),
        "format": cfg.format,
        "gpu": cfg.gpu,
        "gpu_name": sim.spec["props"]["name"],
        "precision": cfg.precision,
        "workload": cfg.workload,
        "time_unit": "us (integer grid)",
        "files": {str(r): p.name for r, p in files.items()},
        "hosts": {str(h): {"ranks": [r for r in range(cfg.ranks) if cfg.host_of(r) == h],
                           "clock_offset_us": cfg.clock_offsets_us[h]} for h in range(cfg.hosts)},
        "process_groups": [{k: pg[k] for k in ("pg_name", "pg_desc", "pg_size", "ranks", "kind")} for pg in sim.pgs],
        "gev": ({"mu": mu, "sigma": sigma, "xi": xi, "convention": "Coles (scipy genextreme c = -xi)",
                 "truncated_at_zero": True} if cfg.parent is None else None),
        "parent": _parent_truth(cfg),
        "gev_table": {f"{g}/{pr}": list(v) for (g, pr), v in DEFAULT_GEV.items()},
        "noise": {"cv": cfg.cv, "sample_size": cfg.sample_size, "samples": [list(s) for s in sim.samples],
                  "z_redraws": sim.z_redraws, "direction_redraws": sim.direction_redraws},
        "n_collectives": sim.n_collectives,
    }


def _causes(sim: Simulation) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    delays = []
    for d in sim.cpu_delays:
        rec = {k: v for k, v in d.items() if k != "_key"}
        if rec["collective"] is None:      # trailing kernels of the last iteration: no closing collective
            rec["gpu_idle_us"] = min(int(sim._kernel_idle.get(d["_key"], 0)), int(d["delay_us"]))
        delays.append(rec)
    return list(sim.plant_records), delays


def write_truth(sim: Simulation, files: dict[int, Path], out_dir: Path, collectives_jsonl: Path | None = None) -> Path:
    """Write ``ground_truth.json`` atomically; collectives are streamed from ``collectives_jsonl``
    (one JSON object per line, as the simulation wrote them) or taken from ``sim.collectives``."""
    plants, delays = _causes(sim)
    head = orjson.dumps(truth_header(sim, files), option=orjson.OPT_NON_STR_KEYS | orjson.OPT_INDENT_2)
    with atomic_path(out_dir / TRUTH_FILE) as tmp, open(tmp, "wb") as out:
        # readable header, then one collective / one block identity per line
        out.write(head.rstrip()[:-1].rstrip() + b',\n  "collectives": [\n')
        first = True
        if collectives_jsonl is None:
            lines: Any = (orjson.dumps(c) + b"\n" for c in sim.collectives)
        else:
            lines = open(collectives_jsonl, "rb")  # noqa: SIM115 - closed below
        try:
            for line in lines:
                if not first:
                    out.write(b",\n")
                out.write(line.rstrip(b"\n"))
                first = False
        finally:
            if hasattr(lines, "close"):
                lines.close()
        out.write(b'\n  ],\n  "blocks": [\n' + b",\n".join(orjson.dumps(b) for b in _blocks(sim)) + b"\n  ],\n")
        out.write(b'  "plants": ' + orjson.dumps(plants) + b',\n  "cpu_delays": ' + orjson.dumps(delays) + b"\n}\n")
    return out_dir / TRUTH_FILE
