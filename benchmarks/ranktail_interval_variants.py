"""How ranktail's interval should be built: its draws measured against the delay in µs (issue 29).

The estimator's tau(n) = b·(E[max_n u] − E[u]): u = (X − a_c)/r_c per identity, b the pipeline's
block scale. Its interval comes from draws (a GPD posterior for the tail, a Bayesian bootstrap of
the N values for the body). Which draws cover the µs delay at their level is measured here, on
data sets of the study's design with identities of different means (8 identities × S samples × 4
ranks, block times a_c + 20·X µs, a_c = 1000 + 100·c, X iid from the parent), through the
pipeline's own code (:func:`evtsync.blocks.zscores.pooled_zscores`,
:func:`evtsync.evt.ranktail.rank_values`, :func:`~evtsync.evt.ranktail.fit_rank_tail`,
:func:`evtsync.predict.tables.block_scale`). Variants of a draw d of the tail's E[max_n u]:

- ``raw``: as drawn (before 2026-12-05);
- ``cen``: minus the draw's own mean E[u] under its F̂ (the shipped construction);
- ``stud``: ``cen`` times s_obs/s_d, s the trimmed (inner 90%) body scale (the scale pinned);

each times b (``bfix``, the shipped choice) or times b·(b*/b) (``bdraw``), b* from Dirichlet weights on
each identity's samples (b's own sampling error, as if independent of the draw). The truth is the
parent's (E[max_n X] − E X)/sd X (integrated, :func:`ranktail_bias.true_delay`) times the true b of
the design, mean a_c · mean(20·sd X / a_c). The table gives coverage and the interval's width over
3.29 times the spread of the point (posterior median) across data sets (1 for a calibrated
symmetric interval).

    nice .venv/bin/python benchmarks/ranktail_interval_variants.py --datasets 50 --out variants.jsonl
    .venv/bin/python benchmarks/ranktail_interval_variants.py --table variants.jsonl

Data set r of parent p uses ``numpy.random.default_rng(200000 + 10 r + p)``, fit seed r.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ranktail_bias as rb  # noqa: E402 - the sibling script's parents and truth

IDENTITY_MEANS = 1000.0 + 100.0 * np.arange(8)
VARIANTS = ("raw_bfix", "cen_bfix", "stud_bfix", "raw_bdraw", "cen_bdraw", "stud_bdraw")


def dataset(name: str, rng: np.random.Generator, samples: int, m: int = 4) -> pd.DataFrame:
    """One data set's z-score table (identities of different means, the same sd)."""
    from evtsync.blocks.zscores import pooled_zscores

    x = rb._parent(name).rvs(size=(IDENTITY_MEANS.size, samples, m), random_state=rng)
    ident, inst, rank = np.meshgrid(np.arange(IDENTITY_MEANS.size), np.arange(samples), np.arange(m), indexing="ij")
    busy = IDENTITY_MEANS[ident] + 20.0 * x
    times = pd.DataFrame({"pg": "0", "block": ident.ravel().astype(str), "instance": inst.ravel(), "sample": 0,
                          "rank": rank.ravel(), "busy_us": busy.ravel(), "gpu": "sim", "precision": "bf16",
                          "position": ident.ravel(), "signature": "s", "index": inst.ravel(), "n_kernels": 1,
                          "n_gemm_kernels": 1})
    table, _ = pooled_zscores(times, m=m)
    return table


def true_b(name: str) -> float:
    """The design's b: mean a_c times mean (sd/a_c), a_c the identities' true means."""
    d = rb._parent(name)
    a = IDENTITY_MEANS + 20.0 * float(d.mean())
    return float(a.mean() * np.mean(20.0 * float(d.std()) / a))


def draw_parts(tail, ns, trim: float = 0.05):  # noqa: ANN001, ANN201 - a RankTail; arrays
    """E[max_n u] draws as drawn, each draw's own mean, its trimmed body scale and the data's:
    the same weights and quadrature as :func:`evtsync.evt.ranktail.expected_max_draws` (one chunk)."""
    from evtsync.evt import ranktail as rt

    ns = np.asarray(ns, float)
    u, t = tail.values, tail.threshold
    atoms = u[u <= t]
    n_tail = u.size - atoms.size
    rng = np.random.default_rng(tail.weights_seed)
    top = math.log(max(float(ns.max()), 2.0 ** 16)) + 30.0
    ww = np.linspace(0.0, top, rt._W_POINTS)
    sw = np.ones(rt._W_POINTS)
    sw[1:-1:2], sw[2:-1:2] = 4.0, 2.0
    sw *= (ww[1] - ww[0]) / 3.0
    g = rng.standard_gamma(np.ones(atoms.size), size=(tail.xi.size, atoms.size))
    total = g.sum(axis=1) + rng.standard_gamma(float(n_tail), size=tail.xi.size)
    p = g / total[:, None]
    cum = np.cumsum(p, axis=1)
    sigma, xi, c = np.exp(tail.log_sigma), tail.xi, 1.0 - cum[:, -1]
    with np.errstate(divide="ignore"):
        log_cum = np.log(cum)
    log_survive = np.log1p(-c[:, None] * np.exp(-ww)[None, :])
    growth = np.exp(xi[:, None] * ww[None, :]) * sw[None, :]
    rest = np.where(xi < 1, c * np.exp(-(1 - xi) * top) / np.maximum(1 - xi, 1e-12), np.inf)
    e = np.empty((xi.size, ns.size))
    for j, nn in enumerate(ns):
        pw = np.exp(nn * log_cum)
        body = atoms[-1] * pw[:, -1] - pw[:, :-1] @ np.diff(atoms)
        integral = np.einsum("dw,dw->d", -np.expm1(nn * log_survive), growth)
        e[:, j] = np.where(xi < 1, body + t * (1 - pw[:, -1]) + sigma * (integral + nn * rest), np.inf)
    own_mean = (p * atoms).sum(axis=1) + c * (t + sigma / np.maximum(1 - xi, 1e-12))

    def trimmed_scale(pp: np.ndarray, cc: np.ndarray) -> np.ndarray:
        w = pp * ((cc - pp >= trim) & (cc <= 1 - trim))
        mean = (w * atoms).sum(-1) / w.sum(-1)
        return np.sqrt((w * (atoms - mean[..., None]) ** 2).sum(-1) / w.sum(-1))

    p0 = np.full(atoms.size, 1.0 / u.size)
    return e, own_mean, trimmed_scale(p, cum), float(trimmed_scale(p0, np.cumsum(p0)))


def b_multipliers(table: pd.DataFrame, draws: int, rng: np.random.Generator) -> np.ndarray:
    """b*/b: each identity's pooled sd under Dirichlet weights on its samples, through b = mean a·mean r."""
    scaled, cvs = [], []
    for _, part in table.groupby("block"):
        u = np.array([np.array(s.split(","), float) for s in part["u"].astype(str)])
        # each sample's sum of squares in units of s_pooled^2: u is in r_c units, u_scale = r_c/s_pooled
        ss = ((u - u.mean(1, keepdims=True)) ** 2).sum(1) * part["u_scale"].to_numpy() ** 2
        w = rng.standard_gamma(1.0, size=(draws, ss.size))
        cv = float(part["cv"].iloc[0])
        scaled.append(cv * np.sqrt((w @ ss) / (w.sum(1) * (u.shape[1] - 1))))
        cvs.append(cv)
    return np.mean(scaled, axis=0) / np.mean(cvs)


def run(args: argparse.Namespace) -> None:
    from evtsync.evt.ranktail import fit_rank_tail, rank_values
    from evtsync.predict.tables import block_scale

    with open(args.out, "a", encoding="utf-8") as out:
        for r in range(args.first, args.first + args.datasets):
            for pi, parent in enumerate(rb.PARENTS):
                table = dataset(parent, np.random.default_rng(200000 + 10 * r + pi), args.samples)
                b = float(block_scale(table)["b_us"].iloc[0])
                tail = fit_rank_tail(rank_values(table), seed=r)
                e, own_mean, s_draw, s_obs = draw_parts(tail, rb.NS)
                bm = b_multipliers(table, e.shape[0], np.random.default_rng(r + 7))[:, None]
                cen = e - own_mean[:, None]
                stud = cen * (s_obs / s_draw)[:, None]
                draws = {"raw_bfix": e * b, "cen_bfix": cen * b, "stud_bfix": stud * b,
                         "raw_bdraw": e * b * bm, "cen_bdraw": cen * b * bm, "stud_bdraw": stud * b * bm}
                truth = [true_b(parent) * rb.true_delay(parent, n) for n in rb.NS]
                rec = {"parent": parent, "dataset": r, "n_values": int(tail.n_values), "b_us": b, "true_us": truth,
                       "load": os.getloadavg()[0]}
                for name, v in draws.items():
                    lo, med, hi = np.nanquantile(v, [0.05, 0.5, 0.95], axis=0)
                    rec[name] = [[float(lo[j]), float(med[j]), float(hi[j])] for j in range(len(rb.NS))]
                out.write(json.dumps(rec) + "\n")
                out.flush()


def table(path: str) -> None:
    records = [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    rows = []
    for r in records:
        for name in VARIANTS:
            for j, n in enumerate(rb.NS):
                lo, med, hi = r[name][j]
                t = r["true_us"][j]
                rows.append({"parent": r["parent"], "variant": name, "n": n, "covers": lo <= t <= hi,
                             "point": med / t, "width": (hi - lo) / t})
    flat = pd.DataFrame(rows)
    s = flat.groupby(["variant", "parent", "n"]).agg(sets=("covers", "size"), covered=("covers", "mean"),
                                                     point=("point", "mean"), sd=("point", "std"),
                                                     width=("width", "mean")).reset_index()
    s["calibration"] = s["width"] / (3.29 * s["sd"])
    print("| parent | n | data sets | " + " | ".join(f"{v}: 90% covering / width ÷ 3.29 sd" for v in VARIANTS) + " |")
    print("|---|---|---|" + "---|" * len(VARIANTS))
    for (parent, n), part in s.groupby(["parent", "n"]):
        cells = {r.variant: f"{r.covered:.2f} / {r.calibration:.2f}" for r in part.itertuples()}
        print(f"| {parent} | {n} | {int(part['sets'].max())} | " + " | ".join(cells.get(v, "–") for v in VARIANTS) + " |")
    load = [r["load"] for r in records if "load" in r]
    if load:
        print(f"\nload average {min(load):.1f}–{max(load):.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=50, help="data sets per parent")
    parser.add_argument("--first", type=int, default=0, help="first data set (disjoint ranges add up)")
    parser.add_argument("--samples", type=int, default=80, help="samples of 4 ranks per identity (80: 2,560 values)")
    parser.add_argument("--out", default="ranktail_interval_variants.jsonl")
    parser.add_argument("--table", metavar="JSONL", help="summarise a results file instead of running")
    args = parser.parse_args()
    if args.table:
        table(args.table)
    else:
        run(args)


if __name__ == "__main__":
    main()
