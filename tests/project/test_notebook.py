"""Notebook use (issue 34 item 5): the shipped notebook docs/examples/notebook.ipynb executed by
a Jupyter kernel (nbclient), and the notebook views of fits, specifications and runs against
hand-made inputs whose numbers are known.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pandas as pd
import pytest

from evtsync.evt.mlefit import MleCellFit
from evtsync.evt.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "docs" / "examples" / "notebook.ipynb"


def _mle_table() -> pd.DataFrame:
    """Two cells fitted by hand: xi 0.12 [0.05, 0.2] and -0.03 [-0.1, 0.04]; H100 did not converge."""
    rows = []
    for gpu, xi, lo, hi, ok in (("A100", 0.12, 0.05, 0.2, True), ("H100", -0.03, -0.1, 0.04, False)):
        rows.append({"gpu": gpu, "cell": gpu, "n": 200, "level": 0.9, "family": "gev", "mu": 0.1, "sigma": 1.0,
                     "xi": xi, "xi_lo": lo, "xi_hi": hi, "converged": ok, "cov_mu_mu": 0.01, "cov_mu_sigma": 0.0,
                     "cov_mu_xi": 0.0, "cov_sigma_sigma": 0.01, "cov_sigma_xi": 0.0, "cov_xi_xi": 0.001})
    return pd.DataFrame(rows)


def test_mle_fit_shows_cells_xi_with_its_profile_interval_and_convergence() -> None:
    page = MleCellFit(_mle_table(), family="gev")._repr_html_()
    assert "ξ [90% profile-likelihood interval]" in page
    assert "<td>A100</td><td>200</td><td>0.12 [0.05, 0.2]</td>" in page
    assert "<td>H100</td><td>200</td><td>-0.03 [-0.1, 0.04]</td>" in page
    assert "NOT CONVERGED" in page and "H100" in page.split("NOT CONVERGED", 1)[1]


def test_bayes_fit_shows_its_cells_and_credible_interval() -> None:
    from evtsync.evt.bayesfit import BayesFit
    from tests.runfolder.test_diff_fits import _gumbel_tree

    page = BayesFit(_gumbel_tree(0.8, 0.45))._repr_html_()
    assert "BayesFit <b>" in page and "(gumbel, bayes)" in page
    assert "ξ [90% credible interval]" in page
    cells = re.findall(r"<td>(0 \[0, 0\])</td>", page)          # a Gumbel model fixes xi = 0 in every cell
    assert cells and "converged" in page


def test_spec_shows_family_data_and_priors() -> None:
    spec = parse_spec('name = "hand"\nfamily = "gev"\ndescription = "by hand"\n'
                      '[data]\ncolumn = "z"\ngroups = ["gpu"]\n'
                      '[mu]\npooling = "none"\nprior = { dist = "normal", mu = 0, sigma = 2 }\n'
                      '[sigma]\npooling = "none"\nprior = { dist = "halfnormal", sigma = 1 }\n'
                      '[xi]\nstructure = "pooled"\nprior = { dist = "normal", mu = 0, sigma = 0.3 }\n')
    page = spec._repr_html_()
    assert "ModelSpec <b>hand</b> (gev)" in page and "<i>by hand</i>" in page
    assert "column z, groups gpu" in page and "normal(mu=0, sigma=2)" in page
    assert "pooled; prior normal(mu=0, sigma=0.3)" in page


def test_run_shows_the_answer_table_and_stages(tmp_path: Path) -> None:
    import json

    from evtsync.pipeline.engine import Run
    from evtsync.pipeline.options import RunOptions

    run = Run(RunOptions(out=tmp_path))
    run.manifest = {"stage_order": ["tax", "prediction"],
                    "stages": {"tax": {"status": "done", "seconds": 1.5},
                               "prediction": {"status": "failed", "reason": "boom"}}}
    row = {"gpu": "H100", "precision": "bf16", "tax_median_us": 606.0, "tax_median_lo_us": 550.0,
           "tax_median_hi_us": 688.0, "tax_median_interval": "range of 4", "xi_mean": 0.17, "xi_lo": 0.099,
           "xi_hi": 0.24, "verdict": "Fréchet (xi > 0)", "converged": True}
    (tmp_path / "summary.json").write_text(json.dumps({"n": 512, "model": "gev", "rows": [row],
                                                      "loo": "LOO prefers a free shape xi"}))
    page = run._repr_html_()
    assert "606 [550, 688] (range of 4)" in page and "0.17 [0.099, 0.24]" in page
    assert "τ(n = 512) µs" in page and "LOO prefers a free shape xi" in page
    assert "prediction FAILED" in page and "<td>boom</td>" in page


@pytest.mark.slow  # ~50 s on the 2-core CI machine (a Jupyter kernel and the whole notebook); run with -m slow
def test_shipped_notebook_runs_in_a_kernel() -> None:
    """docs/examples/notebook.ipynb runs in a Jupyter kernel in the default run (CI, issue 34)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    env_path = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env_path) if p)  # the kernel imports this tree
    try:
        nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                resources={"metadata": {"path": str(ROOT)}}).execute()
    finally:
        os.environ["PYTHONPATH"] = env_path
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    # issue 49: the import and first run print at most 3 lines (the warnings: one line, run.warnings)
    first = next(cell for cell in nb.cells if cell.cell_type == "code")
    printed = [line for o in first.outputs if o.output_type == "stream" for line in o["text"].splitlines()]
    assert len(printed) <= 3, printed
    html = [o["data"]["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert any("Run folder" in h and "The answers" in h for h in html)        # the run's view
    assert any("BayesFit <b>gev</b>" in h and "ξ [90% credible interval]" in h for h in html)
    assert any("ModelSpec <b>gev</b>" in h for h in html)
    assert any("MleCellFit <b>mle-gev</b>" in h for h in html)
    pngs = [cell for cell in nb.cells if cell.cell_type == "code"
            and sum("image/png" in o.get("data", {}) for o in cell.outputs) == 1]
    assert len(pngs) == 2                                                      # each figure shown once
