"""evtsync through its Python API alone: traces -> tax -> attribution -> fit -> prediction -> figures.

Run it as a plain script (no ``if __name__ == "__main__":`` guard is needed, also when the
reader uses its process pool):

    python docs/examples/api_walkthrough.py [OUT_DIR]

It writes a small synthetic job (8 ranks, TP 4, H200 bf16, with known ground truth) under
OUT_DIR (default: a temporary folder), then measures, explains, models and predicts its tax,
and saves the figures as PNG files beside it. ``tests/project/test_examples.py`` (slow) runs it.
"""

import sys
import tempfile
from pathlib import Path

import evtsync
from evtsync.plots import base, predictions
from evtsync.plots import tax as tax_plots
from evtsync.predict.tables import block_scale
from evtsync.synth import SynthConfig, synthesize

out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="evtsync-example-"))
out.mkdir(parents=True, exist_ok=True)

# 1. A job: one Kineto trace per rank (here synthetic, so that the truth is known).
job = synthesize(SynthConfig.build(ranks=8, tp=4, iterations=40, seed=3), out / "job")
traces = evtsync.load_traces(job.traces_dir, cache=None)
print(traces)

# 2. Measure: the tax of every collective, per rank, and where each rank's GPU time went.
tax = evtsync.tax_table(traces)
print(f"{len(tax)} collectives, median tau_max {tax['tau_max_us'].median():.0f} µs")
breakdown = evtsync.step_breakdown(traces)
print(breakdown[["rank", "span_us", "sync_wait_share", "compute_share", "idle_share"]])

# 3. Explain: why the straggler was late (critical-path attribution).
causes = evtsync.attribute(traces)
print(f"GPU-only straggler paths: {causes.gpu_only_share:.0%}")
print(causes.summary.head())

# 4. Model: pooled z-scores of the compute-block maxima, MLE per cell, then a Bayesian fit.
z = evtsync.zscore_table(traces)
cells = evtsync.mle_cell_table(z)
print(cells[["cell", "family", "n", "mu", "sigma", "xi", "xi_lo", "xi_hi"]])
spec = evtsync.load_spec(evtsync.resolve_model("gev"))
fit = evtsync.BayesFit(evtsync.fit_table(z, spec, draws=800, tune=800, chains=2, seed=1, progress=False))
print(fit)
print(fit.posterior["xi"].mean().item(), "posterior mean xi;", fit.convergence_note)

# 5. Predict: tau(n) for larger domains and the optimal bandwidth B*, with 90% intervals.
b_us = block_scale(z)["b_us"].iloc[0]                 # b = r·a of the blocks (methodology §7)
tau = evtsync.tau_table(fit, n=[8, 64, 512], block_sd_us=float(b_us))
print(tau[["n", "tau_point_us", "point_estimate", "tau_lo_us", "tau_hi_us", "level", "converged"]])
bstar = evtsync.bandwidth_table(fit, ["full", "ring"], [8, 128, 512], alpha_us=5.0, size_bytes=2**28,
                                block_sd_us=float(b_us))

# 6. Figures: the same functions the CLI and the report draw with.
for name, fig in {"tax_cdf": tax_plots.tax_cdfs(tax), "tau": predictions.tau_curves(tau),
                  "bstar": predictions.bstar_curves(bstar)}.items():
    path = base.save_figure(fig, out / f"{name}.png")
    print("wrote", path)
