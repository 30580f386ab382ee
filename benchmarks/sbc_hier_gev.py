"""Simulation-based calibration (SBC, Talts et al. 2018) of the main model (issue 19).

For each replicate: one parameter set drawn from the prior of
``models/gev-hier-gpu-precision.toml`` (:func:`evtsync.evt.model.draw_prior`, the model's
one forward sampler), z-scores simulated from it (3 GPUs x 2 precisions, ``--n`` per cell),
the model fitted at the spec's default settings (:func:`evtsync.evt.fit.fit_table`), and the
rank of each true parameter among the posterior draws thinned to ``THIN_DRAWS`` roughly
independent ones (every ``k``-th draw of each chain). For a correct prior, likelihood and
sampler the ranks are uniform on 0 .. THIN_DRAWS.

Every replicate is appended as one JSON line to ``--out`` as soon as it is done, so a killed
run continues where it stopped (``--replicates`` is the total wanted). A replicate whose data
the model refuses (scale guard) is recorded as refused, and one whose fit is not converged
(R-hat > 1.01, bulk or tail ESS < 400, divergences) is kept and counted: nothing is dropped.

Run by hand (one process, one core per chain):

    nice -n 15 .venv/bin/python benchmarks/sbc_hier_gev.py --replicates 100 --out sbc.jsonl
    .venv/bin/python benchmarks/sbc_hier_gev.py --summary sbc.jsonl --plot docs/sbc_hier_gev.png
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
SPEC_PATH = ROOT / "models" / "gev-hier-gpu-precision.toml"
GPUS, PRECISIONS = ["A100", "B200", "H200"], ["bf16", "fp32"]
#: Posterior draws each rank is computed among (thinned evenly over the chains).
THIN_DRAWS = 99
#: Bins of the rank histogram and of the chi-square test (THIN_DRAWS + 1 = 100 rank values).
BINS = 10
#: Hyper-parameters ranked (those the model has; the cell parameters are added per cell).
HYPER = ("xi0", "xi_sd_gpu", "xi_sd_precision", "xi_sd_cell", "mu_mean", "mu_sd", "sigma_gmean", "log_sigma_sd")
CELL_PARAMS = ("xi", "mu", "sigma")


def cell_template(spec, n_per_cell: int):
    """The model's cell structure (3 x 2) as :class:`~evtsync.evt.model.ModelData` (values unused,
    in the model's data column: ``y`` for the shipped models since issue 29)."""
    from evtsync.evt.model import prepare_data

    rows = [{"gpu": g, "precision": p, spec.column: float(k)} for g in GPUS for p in PRECISIONS
            for k in range(n_per_cell)]
    return prepare_data(pd.DataFrame(rows), spec, "SBC template")


def thin(values: np.ndarray, n_keep: int = THIN_DRAWS) -> np.ndarray:
    """``n_keep`` draws of (chain, draw[, ...]) taken every k-th draw of each chain."""
    n_chain, n_draw = values.shape[:2]
    per_chain = int(np.ceil(n_keep / n_chain))
    step = max(n_draw // per_chain, 1)
    kept = values[:, ::step][:, :per_chain]
    return kept.reshape(n_chain * kept.shape[1], *values.shape[2:])[:n_keep]


def replicate_data(spec, index: int, n_per_cell: int, seed: int) -> tuple[dict, pd.DataFrame, np.random.Generator]:
    """Replicate ``index``'s true parameters (by posterior name), its z-score table and the
    generator that then draws the fit's seed (every replicate is reproducible on its own)."""
    from evtsync.evt.model import draw_prior, simulate_zscore_table

    rng = np.random.default_rng([seed, index])
    template = cell_template(spec, n_per_cell)
    prior = draw_prior(spec, template, 1, rng)
    cells = template.cells[["cell", "gpu", "precision"]].copy()
    for name in CELL_PARAMS:
        cells[name] = prior[name][0]
    truth = {name: float(prior[name][0]) for name in HYPER if name in prior}
    for name in CELL_PARAMS:
        truth.update({f"{name}[{c}]": float(v) for c, v in zip(cells["cell"], cells[name], strict=True)})
    table = simulate_zscore_table(cells, n_per_cell, seed=int(rng.integers(2**31 - 1)))
    return truth, table, rng


def support_diagnosis(spec, records: list[dict]) -> str:
    """Which cells' true sigma lies below the model's smooth support bound (there the model's
    prior is zero, so the truth cannot be recovered), and the rank histograms of sigma, xi and
    mu pooled over cells inside and outside it. A diagnosis, not a calibration test (it selects
    on the truth)."""
    from scipy import stats

    from evtsync.evt.model import prepare_data, support_bound, support_widths

    groups: dict[bool, dict[str, list[int]]] = {True: {n: [] for n in CELL_PARAMS},
                                                False: {n: [] for n in CELL_PARAMS}}
    excess = []
    for r in records:
        if r["status"] != "fitted":
            continue
        _, table, _ = replicate_data(spec, r["replicate"], r["n_per_cell"], r["seed"])
        data = prepare_data(table, spec)
        widths = support_widths(data)
        for i, cell in enumerate(data.cell_labels):
            z = data.z_model[data.cell_slice(i)]
            mu, sigma, xi = (r["truth"][f"{n}[{cell}]"] for n in ("mu", "sigma", "xi"))
            terms = [xi * (mu - z.min()), xi * (mu - z.max())]
            smooth = float(support_bound(terms, widths[i]))
            excess.append((smooth - max(0.0, *terms)) / sigma)
            for n in CELL_PARAMS:
                groups[sigma >= smooth][n].append(r["ranks"][f"{n}[{cell}]"])
    n_out, n_all = len(groups[False]["sigma"]), len(excess)
    lines = [f"cells whose true sigma lies below the smooth support bound: {n_out} of {n_all}; the bound exceeds "
             f"the exact one by a median {np.median(excess):.1%} of the true sigma (90% quantile "
             f"{np.quantile(excess, 0.9):.1%})"]
    for inside, label in ((True, "inside"), (False, "outside")):
        for n in CELL_PARAMS:
            ranks = np.array(groups[inside][n], dtype=int)
            if len(ranks):
                counts = np.bincount(ranks * BINS // (THIN_DRAWS + 1), minlength=BINS)
                lines.append(f"- {label} ({len(ranks)} cells), {n}: {' '.join(map(str, counts))}; "
                             f"chi-square p {stats.chisquare(counts).pvalue:.3g}")
    return "\n".join(lines)


def run_replicate(spec, index: int, n_per_cell: int, seed: int, compiled_cache: dict | None = None,
                  extend: int = 0) -> dict:
    """One SBC replicate: prior draw, simulated data, fit, ranks of the truths.

    ``compiled_cache`` is passed to :func:`~evtsync.evt.fit.fit_table`: replicates of the same
    structure reuse one compiled model (the same draws as a fresh compilation, ~20 s less each).
    ``extend``: the sampler's ``extend`` setting (0 is the spec's default).
    """
    from evtsync.core.errors import InputError
    from evtsync.evt.fit import fit_table

    truth, table, rng = replicate_data(spec, index, n_per_cell, seed)
    record = {"replicate": index, "seed": seed, "n_per_cell": n_per_cell, "extend": extend, "truth": truth,
              "load_avg": round(os.getloadavg()[0], 2)}
    start = time.perf_counter()
    try:
        config = spec.sampler_config().override(seed=int(rng.integers(2**31 - 1)), extend=extend)
        tree = fit_table(table, spec, sampler=config, source=f"SBC replicate {index}", compiled_cache=compiled_cache)
    except InputError as exc:  # the scale guard refused the data: counted, not ranked
        record.update({"status": "refused", "reason": str(exc), "wall_s": round(time.perf_counter() - start, 1)})
        return record
    post = tree["posterior"].to_dataset()
    ranks = {}
    for name in truth:
        base, _, cell = name.partition("[")
        values = post[base].values if not cell else post[base].sel(cell=cell.rstrip("]")).values
        kept = thin(values)
        ranks[name] = int(np.sum(kept < truth[name]))
    record.update({
        "status": "fitted", "wall_s": round(time.perf_counter() - start, 1),
        "timings": json.loads(tree.attrs["timings"]), "compiled_model_reused": int(tree.attrs["compiled_model_reused"]),
        "ranks": ranks, "thin_draws": THIN_DRAWS,
        "draws": int(tree.attrs["draws"]), "tune": int(tree.attrs["tune"]), "chains": int(tree.attrs["chains"]),
        "converged": bool(int(tree.attrs["converged"])), "divergences": int(tree.attrs["divergences"]),
        "max_rhat": float(tree.attrs["max_rhat"]), "min_ess_bulk": float(tree.attrs["min_ess_bulk"]),
        "convergence": tree.attrs["convergence"], "extended": tree.attrs["extended"],
        "target_accept": float(tree.attrs["target_accept"]),
        "posterior_predictive_fits": int(tree.attrs["posterior_predictive_fits"]),
        "support_transform_cells": json.loads(tree.attrs["sigma_support_transform_cells"]),
        "xi_parametrization": json.loads(tree.attrs["xi_parametrization"]),
    })
    return record


def read_records(path: Path) -> list[dict]:
    """The replicates recorded so far (a half-written last line from a killed run is ignored)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            logging.warning("%s: ignoring an unreadable line (killed mid-write?)", path)
    return out


def uniformity(records: list[dict], converged_only: bool = False) -> pd.DataFrame:
    """Per parameter: replicates, rank histogram (BINS bins) and the chi-square p-value of uniformity."""
    from scipy import stats

    fitted = [r for r in records if r["status"] == "fitted" and (r["converged"] or not converged_only)]
    rows = []
    if not fitted:
        return pd.DataFrame(rows)
    for name in fitted[0]["ranks"]:
        ranks = np.array([r["ranks"][name] for r in fitted])
        width = (THIN_DRAWS + 1) / BINS
        counts = np.bincount((ranks // width).astype(int), minlength=BINS)
        chi2, p = stats.chisquare(counts)
        rows.append({"parameter": name, "replicates": len(ranks), "counts": counts.tolist(), "chi2": chi2,
                     "p_value": p, "mean_rank": ranks.mean() / THIN_DRAWS})
    return pd.DataFrame(rows)


def plot_ranks(table: pd.DataFrame, path: Path, title: str) -> Path:
    """Rank histograms, one panel per parameter, with the 99% band of a uniform histogram."""
    from scipy import stats

    from evtsync.plots.base import plt, save_figure

    n_par = len(table)
    cols = 6
    rows = int(np.ceil(n_par / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(2.3 * cols, 1.9 * rows), squeeze=False)
    for ax, (_, r) in zip(axes.ravel(), table.iterrows(), strict=False):
        n = r["replicates"]
        lo, hi = stats.binom.ppf([0.005, 0.995], n, 1 / BINS)
        ax.axhspan(lo, hi, color="0.88")
        ax.axhline(n / BINS, color="0.5", lw=0.8)
        ax.bar(np.arange(BINS), r["counts"], width=0.9, color="C0")
        ax.set_title(f"{r['parameter']}\np = {r['p_value']:.2f}", fontsize=8)
        ax.set_xticks([])
        ax.tick_params(labelsize=7)
    for ax in axes.ravel()[n_par:]:
        ax.axis("off")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110)


def summary(records: list[dict]) -> str:
    """Markdown: counts by status and convergence, timings, the per-parameter uniformity table."""
    fitted = [r for r in records if r["status"] == "fitted"]
    refused = [r for r in records if r["status"] == "refused"]
    bad = [r for r in fitted if not r["converged"]]
    div = [r for r in fitted if r["divergences"] > 0]
    lines = [f"replicates: {len(records)} ({len(fitted)} fitted, {len(refused)} refused by the scale guard); "
             f"not converged: {len(bad)} (with divergences: {len(div)}, total divergences "
             f"{sum(r['divergences'] for r in fitted)}; R-hat > 1.01: {sum(r['max_rhat'] > 1.01 for r in fitted)}; "
             f"bulk ESS < 400: {sum(r['min_ess_bulk'] < 400 for r in fitted)})"]
    if fitted:
        walls = np.array([r["wall_s"] for r in fitted])
        lines.append(f"wall per replicate: median {np.median(walls):.1f} s, max {walls.max():.1f} s; "
                     f"load average median {np.median([r['load_avg'] for r in fitted]):.1f}")
        for label, group in (("compiled", [r for r in fitted if not r.get("compiled_model_reused")]),
                             ("reused compiled model", [r for r in fitted if r.get("compiled_model_reused")])):
            if group:
                t = {k: np.median([r["timings"][k] for r in group]) for k in ("compile_s", "sampling_s")}
                lines.append(f"- {label}: {len(group)} replicates, median wall {np.median([r['wall_s'] for r in group]):.1f} s "
                             f"(compile {t['compile_s']:.1f} s, sampling {t['sampling_s']:.1f} s), median load "
                             f"{np.median([r['load_avg'] for r in group]):.1f}")
    for r in bad:
        lines.append(f"- replicate {r['replicate']}: {r['convergence']}")
    for r in refused:
        lines.append(f"- replicate {r['replicate']} refused: {r['reason'][:160]}")
    table = uniformity(records)
    conv = uniformity(records, converged_only=True).set_index("parameter") if bad else None
    if not table.empty:
        head = "| parameter | replicates | rank counts (10 bins) | chi-square (9 df) | p | mean rank / L |"
        if conv is not None:
            head += " p (converged only) |"
        lines += ["", head, "|---" * (7 if conv is not None else 6) + "|"]
        for _, r in table.iterrows():
            line = (f"| {r['parameter']} | {r['replicates']} | {' '.join(map(str, r['counts']))} | {r['chi2']:.1f} | "
                    f"{r['p_value']:.3f} | {r['mean_rank']:.3f} |")
            if conv is not None:
                line += f" {conv.loc[r['parameter'], 'p_value']:.3f} |"
            lines.append(line)
        p = table["p_value"].to_numpy()
        lines.append(f"\n{len(p)} parameters: smallest p {p.min():.3f} (Bonferroni threshold 0.05/{len(p)} = "
                     f"{0.05 / len(p):.4f}); p < 0.05 in {int((p < 0.05).sum())} (expected by chance "
                     f"{0.05 * len(p):.1f} if independent)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=100, help="total replicates wanted in --out")
    parser.add_argument("--out", type=Path, help="JSON lines, one per replicate (appended; a rerun resumes)")
    parser.add_argument("--n", type=int, default=150, help="z-scores per cell (6 cells)")
    parser.add_argument("--seed", type=int, default=19)
    parser.add_argument("--extend", type=int, default=0, help="the sampler's extend setting (spec default 0)")
    parser.add_argument("--indices", type=int, nargs="*", help="run only these replicate indices")
    parser.add_argument("--summary", type=Path, help="print the markdown summary of an output and exit")
    parser.add_argument("--replace", type=Path,
                        help="with --summary: replicates in this file replace those of the same index")
    parser.add_argument("--diagnose", action="store_true",
                        help="with --summary: ranks of cells whose true sigma is inside / outside the support bound")
    parser.add_argument("--plot", type=Path, help="with --summary: write the rank histograms (PNG)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    if args.summary:
        records = read_records(args.summary)
        if args.replace:
            by_index = {r["replicate"]: r for r in read_records(args.replace)}
            records = [by_index.get(r["replicate"], r) for r in records]
        print(summary(records))
        if args.diagnose:
            from evtsync.evt.spec import load_spec

            print("\n" + support_diagnosis(load_spec(SPEC_PATH), records))
        if args.plot:
            fitted = sum(r["status"] == "fitted" for r in records)
            plot_ranks(uniformity(records), args.plot,
                       f"SBC of gev-hier-gpu-precision: {fitted} replicates, 3x2 cells of {records[0]['n_per_cell']}, "
                       f"ranks among {THIN_DRAWS} thinned draws; grey: 99% band of a uniform bin")
        return
    from evtsync.evt.spec import load_spec

    spec = load_spec(SPEC_PATH)
    records = read_records(args.out) if args.out else []
    compiled_cache: dict = {}
    done = {r["replicate"] for r in records if r.get("seed") == args.seed and r.get("n_per_cell") == args.n
            and r.get("extend", 0) == args.extend}
    for index in (args.indices if args.indices is not None else range(args.replicates)):
        if index in done:
            continue
        record = run_replicate(spec, index, args.n, args.seed, compiled_cache, args.extend)
        state = record["status"] if record["status"] == "refused" else record["convergence"]
        print(f"replicate {index}: {record['wall_s']} s (load {record['load_avg']}); {state}", flush=True)
        if args.out:
            with args.out.open("a") as fh:
                fh.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
