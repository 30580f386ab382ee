"""Planted-cause study (slow): seven kinds of cause at several sizes relative to the noise.

Four kinds are planted by the generator (``evtsync synth --plant``: a slow GEMM, a slow
launch call, a Python gap, a blocking sync on a side-stream copy); three are injected into
a copy of a plant-free set (``evtsync inject``): a slow attention kernel and a slow
device-to-host copy (``--on kernel``), and a data-loader stall — CPU time before the first
launch of an iteration. Truth is the generator's ``ground_truth.json`` (planted collective)
or the injection manifest (the collective after the delayed event), never the attribution.

For each case: *found* = the straggler of the affected collective is the planted rank and
its principal cause is of the planted kind; *share* = its explained share (path extra /
tau). Sizes are multiples of the noise, the median tax of the plant-free set. The table
printed is the one in docs/critical-path.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.critpath import attribute
from evtsync.critpath.inject import inject_delay
from evtsync.synth import Plant, SynthConfig, synthesize

RANK, ITERATION = 1, 2
SIZES = (0.5, 2.0, 8.0, 32.0)
SEEDS = (2, 5)
CPU = ("launch_delay", "python_gap", "synchronization")
PLANTED = {"gemm": ("slow_gemm", "fwd-mlp"), "launch delay": ("cpu_launch_delay", "fwd-attn"),
           "python gap": ("python_gap", "bwd-mlp"), "blocking sync": ("blocking_sync", "bwd-attn")}
INJECTED = {"attention": dict(on="kernel", kernel="flash_fwd"), "memcpy": dict(on="kernel", kernel="Memcpy"),
            "data-loader stall": dict(on="launch", occurrence=0)}


def _config(seed: int, plants: tuple[Plant, ...] = ()) -> SynthConfig:
    return SynthConfig.build(ranks=4, tp=4, iterations=4, layers=2, seed=seed, cpu_delay_rate=0.0, plants=plants)


def found(kind: str, row: pd.Series) -> bool:
    """Whether the attributed row names the planted kind on the planted rank."""
    if row["straggler_rank"] != RANK or pd.isna(row["cause_extra_us"]):
        return False
    return {"gemm": row["cause_category"] == "gemm", "attention": row["cause_category"] == "attention",
            "memcpy": row["cause_category"] == "memcpy", "launch delay": row["path_kind"] == "launch_delay",
            "python gap": row["path_kind"] == "python_gap",
            "blocking sync": row["cause_category"] == "synchronization",
            "data-loader stall": row["path_kind"] in CPU}[kind]


def study(tmp: Path) -> pd.DataFrame:
    rows = []
    for seed in SEEDS:
        base = synthesize(_config(seed), tmp / f"base-{seed}")
        base_paths = sorted(str(p) for p in base.traces.values())
        taus = pd.DataFrame(base.truth["collectives"])["tau_max_us"]
        noise = float(taus.median())
        for size in SIZES:
            delay = int(min(20_000, round(size * noise)))
            for kind, (plant_kind, block) in PLANTED.items():
                res = synthesize(_config(seed, (Plant(plant_kind, RANK, ITERATION, 0, block, delay),)),
                                 tmp / f"p-{seed}-{size}-{plant_kind}")
                truth = pd.DataFrame(res.truth["collectives"])
                hit = truth[truth["planted_cause"].notna()].iloc[0]
                table = attribute(sorted(str(p) for p in res.traces.values()), keep_paths=False).collectives
                rows.append(_row(kind, seed, size, noise, delay, table, hit["pg"], int(hit["index"])))
            for kind, options in INJECTED.items():
                res = inject_delay(base_paths, tmp / f"i-{seed}-{size}-{kind}", rank=RANK, delay_us=delay,
                                   iteration=ITERATION, **options)
                target = res.manifest["next_collective"]
                table = attribute(sorted(str(p) for p in res.files.values()), keep_paths=False).collectives
                rows.append(_row(kind, seed, size, noise, delay, table, target["pg"], int(target["index"])))
    return pd.DataFrame(rows)


def _row(kind: str, seed: int, size: float, noise: float, delay: int, table: pd.DataFrame, pg: str,
         index: int) -> dict:
    row = table.set_index(["pg", "index"]).loc[(pg, index)]
    return {"kind": kind, "seed": seed, "size": size, "noise_us": noise, "delay_us": delay,
            "found": found(kind, row), "share": float(row["explained_share"]),
            "explained": row["status"] == "ok", "cause_extra_us": row["cause_extra_us"],
            "tau_us": float(row["tau_max_us"])}


@pytest.mark.slow
def test_planted_cause_study(tmp_path):
    score = study(tmp_path)
    recall = score.pivot_table(index="kind", columns="size", values="found", aggfunc="mean")
    share = score.pivot_table(index="kind", columns="size", values="share", aggfunc="median")
    print("\nrecall (straggler and cause kind right) by size / noise:\n" + recall.to_string())
    print("\nmedian explained share (path extra / tau):\n" + share.round(3).to_string())
    print("\nnoise (median tau of the plant-free sets):", sorted(score["noise_us"].unique()))
    lines = ["| cause | " + " | ".join(f"{s:g}× noise" for s in SIZES) + " |",
             "|---|" + "---|" * len(SIZES)]
    for kind in list(PLANTED) + list(INJECTED):
        cells = [f"{recall.loc[kind, s]:.0%} / {share.loc[kind, s]:.2f}" for s in SIZES]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    print("\n" + "\n".join(lines))
    big = score[score["size"] == max(SIZES)]
    assert big["found"].all(), big.to_string()
    assert np.all(np.abs(big["share"] - 1.0) <= 0.25), big.to_string()
