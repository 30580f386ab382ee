"""The ground truth written beside a synthetic trace set (``ground_truth.json``).

Every number here is computed from the same integer-microsecond values that the trace
files carry, so a reader that recomputes tau or z from the raw JSON gets exactly these.
Schema (``schema_version`` 1) is documented in ``docs/synth.md``.
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from evtsync import __version__
from evtsync.synth.config import DEFAULT_GEV, SynthConfig
from evtsync.synth.noise import pooled_z
from evtsync.synth.timeline import Simulation
from evtsync.tableio import write_bytes_atomic

TRUTH_SCHEMA_VERSION = 1
TRUTH_FILE = "ground_truth.json"


def _collective_truth(c: dict[str, Any]) -> dict[str, Any]:
    durs = [e1 - e0 for e0, e1 in zip(c["entry_true_us"], c["end_true_us"], strict=True)]
    dmin = min(durs)
    fastest = [r for r, d in zip(c["ranks"], durs, strict=True) if d == dmin]
    out = {k: c[k] for k in ("pg", "pg_desc", "group_kind", "index", "iteration", "position", "layer",
                             "collective", "kernel", "in_nelems", "out_nelems", "bytes", "dtype", "ranks",
                             "transfer_us")}
    out.update({
        "n_ranks": len(durs),
        "duration_us": dict(zip((str(r) for r in c["ranks"]), durs, strict=True)),
        "straggler_rank": fastest[0],
        "straggler_tie": len(fastest) > 1,
        "tau_max_us": max(durs) - dmin,
        "tau_med_us": float(statistics.median(durs)) - dmin,
        "mean_delay_us": float(np.mean(durs)) - dmin,
        "end_spread_us": max(c["end_true_us"]) - min(c["end_true_us"]),
        "written_end_spread_us": max(c["written_end_us"]) - min(c["written_end_us"]),
        "planted_cause": None,
        "cpu_noise": [],
    })
    return out


def build_truth(sim: Simulation, files: dict[int, Path]) -> dict[str, Any]:
    """The ground-truth document of a finished simulation."""
    cfg: SynthConfig = sim.cfg
    colls = [_collective_truth(c) for c in sim.collectives]
    tp_lookup = {(c["iteration"], c["position"], r): c for c in colls if c["group_kind"] == "tp" for r in c["ranks"]}
    plants = []
    for eff in sim.plant_effects:
        p = eff["plant"]
        gpu_delay = p.delay_us if p.kind == "slow_gemm" else int(eff["gpu_idle_us"])
        record = {**dataclasses.asdict(p), "event": eff["event"], "gpu_delay_us": gpu_delay,
                  "cpu_extra_us": eff["cpu_extra_us"], "position": eff["position"]}
        target = tp_lookup.get((eff["iteration"], eff["position"], eff["rank"]))
        if target is not None:
            record["collective"] = {"pg": target["pg"], "index": target["index"]}
            target["planted_cause"] = {k: record[k] for k in ("kind", "rank", "iteration", "layer", "block", "event",
                                                                "delay_us", "gpu_delay_us")}
        plants.append(record)
    delays = []
    for d in sim.cpu_delays:
        key = d.pop("_key")
        # the idle this delay added: min(kernel idle, delay) (idle is linear in a binding delay)
        idle = min(int(sim._kernel_idle.get(key, 0)), int(d["delay_us"]))
        rec = {**d, "gpu_idle_us": idle}
        target = tp_lookup.get((d["iteration"], d["position"], d["rank"]))
        if target is not None:
            rec["collective"] = {"pg": target["pg"], "index": target["index"]}
            if idle:
                target["cpu_noise"].append({"rank": d["rank"], "delay_us": d["delay_us"], "gpu_idle_us": idle})
        delays.append(rec)
    planted_positions = {e["position"] for e in sim.plant_effects if e["plant"].kind == "slow_gemm"}
    blocks = []
    m = cfg.sample_size
    for p in range(sim.n_tp):
        inst = [b for b in sim.block_instances if b["position"] == p]
        if not inst:
            continue
        busy = np.array([b["busy_us"] for b in inst], dtype=float)
        span = np.array([b["span_us"] for b in inst], dtype=float)
        z = pooled_z(busy)
        z_span = pooled_z(span)
        xbar = busy.mean(axis=1)
        s_pooled = float(np.sqrt(((busy - xbar[:, None]) ** 2).sum() / (len(inst) * (m - 1))))
        names = [sim.program[si].roles[k] for si, k in sim.block_kernels[p]]
        a_design = float(sim.weights[p].sum())
        gaps = span - busy
        blocks.append({
            "position": p,
            "signature": [sim.kernels[r].name for r in names],
            "roles": names,
            "has_gemm": any(r.startswith("gemm") for r in names),
            "a_design_us": a_design, "b_design_us": a_design * cfg.cv,
            "mean_us": float(busy.mean()), "s_pooled_us": s_pooled,
            "cv": s_pooled / float(busy.mean()),
            "planted": p in planted_positions,
            "span_gap_rank_independent": bool(np.all(gaps.max(axis=1) == gaps.min(axis=1))),
            "max_abs_z_minus_design": float(np.max(np.abs(z - np.array([b["z_design"] for b in inst])))),
            "instances": [{"iteration": b["iteration"], "ranks": b["ranks"], "busy_us": b["busy_us"],
                           "span_us": b["span_us"], "z": float(zz), "z_span": float(zs),
                           "z_design": b["z_design"], "max_rank": b["ranks"][int(np.argmax(b["busy_us"]))],
                           "max_rank_design": b["max_rank_design"]}
                          for b, zz, zs in zip(inst, z, z_span, strict=True)],
        })
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
        "gev": {"mu": mu, "sigma": sigma, "xi": xi, "convention": "Coles (scipy genextreme c = -xi)",
                "truncated_at_zero": True},
        "gev_table": {f"{g}/{pr}": list(v) for (g, pr), v in DEFAULT_GEV.items()},
        "noise": {"cv": cfg.cv, "sample_size": m, "samples": [list(s) for s in sim.samples],
                  "z_redraws": sim.z_redraws, "direction_redraws": sim.direction_redraws},
        "collectives": colls,
        "blocks": blocks,
        "plants": plants,
        "cpu_delays": delays,
    }


def write_truth(truth: dict[str, Any], out_dir: Path) -> Path:
    """Write ``ground_truth.json`` atomically."""
    return write_bytes_atomic(out_dir / TRUTH_FILE, orjson.dumps(truth, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
