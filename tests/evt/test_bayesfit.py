"""The fit object: labelled dimensions, the spec parsed back, format version, save/load, no PyMC.

The fit tree is built from known draws (``tree_from_draws``), so every expected value is the
input itself, not the code's output; one real sampled fit (short chains) checks the
spec/provenance round trip of a file written by ``fit_table``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.core.errors import FitError
from evtsync.evt.bayesfit import FIT_FORMAT, FORMAT_ATTR, BayesFit, CellFit, load_fit
from evtsync.evt.fit import tree_from_draws
from tests._lazy import lazy_module

xr = lazy_module("xarray")

ROOT = Path(__file__).resolve().parents[2]
CELLS = pd.DataFrame({"cell": ["B200|bf16", "B200|fp32", "H200|bf16", "H200|fp32"],
                      "gpu": ["B200", "B200", "H200", "H200"], "precision": ["bf16", "fp32", "bf16", "fp32"]})
# distinct constant xi per cell so that every selection has one known answer
XI = {"B200|bf16": 0.01, "B200|fp32": 0.02, "H200|bf16": 0.13, "H200|fp32": 0.14}


def _tree(cells: pd.DataFrame = CELLS) -> xr.DataTree:
    rng = np.random.default_rng(0)
    n = len(cells)
    xi = np.broadcast_to(np.array([XI[c] for c in cells["cell"]]), (2, 50, n)).copy()
    draws = {"mu": 1.0 + 0.01 * rng.standard_normal((2, 50, n)), "sigma": np.full((2, 50, n), 0.5), "xi": xi}
    z = rng.gumbel(size=40)
    return tree_from_draws(draws, cells, z, np.arange(40) % n, model_name="toy")


def test_posterior_selects_by_gpu_and_precision(tmp_path: Path) -> None:
    fit = BayesFit(_tree())
    path = fit.save(tmp_path / "toy")
    back = BayesFit.load(path.parent)
    for f in (fit, back):
        xi = f.posterior["xi"]
        assert set(xi.dims) == {"chain", "draw", "gpu", "precision"}
        assert float(xi.sel(gpu="H200", precision="bf16").mean()) == pytest.approx(0.13)
        assert float(xi.sel(gpu="B200", precision="fp32").mean()) == pytest.approx(0.02)
        cp = f.cell_parameters()
        assert float(cp["xi"].sel(gpu="H200", precision="fp32").mean()) == pytest.approx(0.14)
        assert list(cp["cell_label"].values) == list(CELLS["cell"])
    assert back.format_version == FIT_FORMAT
    np.testing.assert_array_equal(back.tree["posterior"]["mu"].values, fit.tree["posterior"]["mu"].values)


def test_incomplete_grid_is_nan_where_no_cell(tmp_path: Path) -> None:
    cells = CELLS.iloc[[0, 1, 2]].reset_index(drop=True)  # no H200|fp32
    fit = BayesFit(_tree(cells))
    xi = fit.posterior["xi"]
    assert np.isnan(xi.sel(gpu="H200", precision="fp32")).all()
    assert float(xi.sel(gpu="H200", precision="bf16").mean()) == pytest.approx(0.13)
    assert fit.cell_parameters().sizes["cell"] == 3


def test_newer_format_is_refused_with_the_way_out(tmp_path: Path) -> None:
    tree = _tree()
    tree.attrs[FORMAT_ATTR] = FIT_FORMAT + 1
    path = tmp_path / "new.nc"
    tree.to_netcdf(path, engine="h5netcdf")
    with pytest.raises(FitError, match="newer than this evtsync reads.*upgrade evtsync"):
        BayesFit.load(path)
    tree.attrs[FORMAT_ATTR] = "x1"
    tree.to_netcdf(path, engine="h5netcdf")
    with pytest.raises(FitError, match="unknown fit format"):
        load_fit(path)


def test_file_without_a_version_loads_as_version_0(tmp_path: Path) -> None:
    tree = _tree()
    del tree.attrs[FORMAT_ATTR]
    tree.to_netcdf(tmp_path / "old.nc", engine="h5netcdf")
    assert BayesFit.load(tmp_path / "old.nc").format_version == 0


def test_fit_object_is_a_cell_fit_and_loads_without_pymc(tmp_path: Path) -> None:
    fit = BayesFit(_tree())
    assert isinstance(fit, CellFit)
    mu, sigma, xi = fit.cell_draws()
    assert mu.shape == (100, 4) and np.allclose(xi[:, 2], 0.13)
    fit.save(tmp_path / "toy")
    code = ("import sys; from evtsync.evt.bayesfit import BayesFit; f = BayesFit.load(sys.argv[1]); "
            "f.posterior; f.cell_parameters(); print(f.converged); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pymc', 'pytensor', 'numba', 'matplotlib')))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "toy")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True", "[]"]


def test_spec_is_parsed_back_from_the_stored_text(tmp_path: Path) -> None:
    from evtsync.evt.spec import load_spec

    path = ROOT / "models" / "gev-hier-gpu-precision.toml"
    tree = _tree()
    tree.attrs.update(model_spec_text=path.read_text(encoding="utf-8"), model_spec_path=str(path), seed=3)
    back = BayesFit.load(BayesFit(tree).save(tmp_path / "t"))
    expected = load_spec(path)
    assert back.spec.name == expected.name and back.spec.xi == expected.xi and back.spec.groups == expected.groups
    assert back.provenance["seed"] == 3 and back.provenance["model_spec_path"] == str(path)
    del tree.attrs["model_spec_text"]
    with pytest.raises(FitError, match="no model specification text"):
        _ = BayesFit(tree).spec


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_sampled_fit_knows_its_spec_and_provenance(tmp_path: Path) -> None:
    from evtsync.evt.fit import fit_table
    from evtsync.evt.model import simulate_zscore_table
    from evtsync.evt.spec import load_spec

    truth = pd.DataFrame({"gpu": ["H200", "H200", "B200", "B200"], "precision": ["bf16", "fp32"] * 2,
                          "mu": [0.8, 0.75, 0.7, 0.72], "sigma": [0.5, 0.45, 0.4, 0.42], "xi": [0.1, 0, 0, -0.1]})
    table = simulate_zscore_table(truth, 100, seed=3)
    spec = load_spec(ROOT / "models" / "gev-hier-gpu-precision.toml")
    tree = fit_table(table, spec, draws=60, tune=60, chains=1, seed=5, source="sim", source_sha256="f00")
    fit = BayesFit(tree)
    path = fit.save(tmp_path / "hier")
    back = BayesFit.load(path)
    assert back.spec == spec.__class__(**{**back.spec.__dict__})  # a ModelSpec
    assert back.spec.name == "gev-hier-gpu-precision" and back.spec.groups == ("gpu", "precision")
    assert back.spec.text == (ROOT / "models" / "gev-hier-gpu-precision.toml").read_text(encoding="utf-8")
    prov = back.provenance
    assert prov["input_sha256"] == "f00" and prov["seed"] == 5 and prov["draws"] == 60
    assert "pymc" in prov["package_versions"]
    assert back.convergence["converged"] is back.converged
    assert "max_rhat" in back.convergence
    assert back.prior_predictive_check is not None and "observed" in back.prior_predictive_check
    # truth H200|bf16 has xi = 0.1; the labelled selection reads that cell
    sel = back.posterior["xi"].sel(gpu="H200", precision="bf16").values
    direct = tree["posterior"]["xi"].sel(cell="H200|bf16").values
    np.testing.assert_array_equal(sel, direct)
