"""A fit file altered after it was written is refused on load (issue 18), not used."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evtsync.core.errors import FitError
from evtsync.evt.bayesfit import CONTENT_ATTR, load_fit, save_fit
from evtsync.evt.fit import tree_from_draws


def _fit(tmp_path, converged: bool = True, loglik: bool = False):
    rng = np.random.default_rng(0)
    z = rng.gumbel(size=50)
    tree = tree_from_draws({"mu": rng.normal(0, 0.1, (2, 20)), "sigma": np.exp(rng.normal(0, 0.1, (2, 20)))},
                           pd.DataFrame({"cell": ["all"]}), z, np.zeros(50, dtype=int), family="gumbel")
    tree["observed_data"].attrs["sample_dims"] = []  # as ArviZ writes: a list, read back as an array
    if not converged:  # as the sampler's diagnostics would record it
        tree.attrs.update(converged=0, convergence="NOT CONVERGED: max r_hat 1.2 > 1.01")
    if loglik:  # as a sampled fit stores it
        import xarray as xr

        from evtsync.evt.fit import _loglik_tree

        tree["log_likelihood"] = xr.DataTree(_loglik_tree(tree))
    return save_fit(tree, tmp_path / "fit")


def test_round_trip_keeps_and_checks_the_checksum(tmp_path):
    path = _fit(tmp_path)
    tree = load_fit(path)
    assert len(tree.attrs[CONTENT_ATTR]) == 64


def test_altered_posterior_is_refused(tmp_path):
    h5py = pytest.importorskip("h5py")
    path = _fit(tmp_path)
    with h5py.File(path, "r+") as fh:
        fh["posterior/mu"][0, 0] = 42.0  # edited in place: same layout, another value
    with pytest.raises(FitError, match="altered"):
        load_fit(path)


def test_every_part_of_a_fit_round_trips_its_checksum(tmp_path):
    """Written, read back, written again: the same checksums (no false alarm from netCDF's types)."""
    from evtsync.evt.bayesfit import CHECKSUMS_ATTR, part_checksums

    path = _fit(tmp_path)
    tree = load_fit(path)
    import json

    recorded = json.loads(tree.attrs[CHECKSUMS_ATTR])
    assert {"attr:converged", "group:/posterior", "group:/sample_stats", "group:/observed_data"} <= set(recorded)
    assert part_checksums(tree) == recorded
    again = load_fit(save_fit(tree, tmp_path / "again"))
    assert json.loads(again.attrs[CHECKSUMS_ATTR]) == recorded


def test_a_converged_flag_set_by_hand_is_refused(tmp_path, capsys):
    """Issue 33 (7): setting ``converged`` to 1 hid NOT CONVERGED (exit 0)."""
    h5py = pytest.importorskip("h5py")
    path = _fit(tmp_path, converged=False)
    assert int(load_fit(path).attrs["converged"]) == 0
    with h5py.File(path, "r+") as fh:
        fh.attrs["converged"] = 1
    with pytest.raises(FitError, match=r"attribute 'converged' no longer matches the checksum"):
        load_fit(path)
    from evtsync.cli import main

    capsys.readouterr()
    assert main(["report", str(path.parent), "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "attribute 'converged'" in err


def test_edited_sample_stats_and_group_attributes_are_refused(tmp_path):
    h5py = pytest.importorskip("h5py")
    path = _fit(tmp_path)
    with h5py.File(path, "r+") as fh:
        name = next(iter(fh["sample_stats"].keys() - {"chain", "draw"}))
        data = fh["sample_stats"][name]
        data[...] = np.ones(data.shape, dtype=data.dtype)  # e.g. divergences made up
    with pytest.raises(FitError, match=r"group '/sample_stats'"):
        load_fit(path)
    path = _fit(tmp_path / "b")
    with h5py.File(path, "r+") as fh:
        fh["cells"].attrs["note"] = "added by hand"
    with pytest.raises(FitError, match=r"group '/cells'"):
        load_fit(path)


def test_skipped_group_is_not_read_and_the_rest_still_checked(tmp_path):
    """Issue 30 (6): the run's reader leaves out the log-likelihood (most of a fit's bytes, which
    nothing in a run reads); every other part is still checked against its checksum."""
    h5py = pytest.importorskip("h5py")
    path = _fit(tmp_path, loglik=True)
    full = load_fit(path)
    assert "log_likelihood" in full.children
    light = load_fit(path, skip=("log_likelihood", "posterior"))  # a required group is read anyway
    assert "log_likelihood" not in light.children and "posterior" in light.children
    np.testing.assert_array_equal(light["posterior"]["mu"].values, full["posterior"]["mu"].values)
    with h5py.File(path, "r+") as fh:
        fh["log_likelihood/z"][0, 0, 0] = 42.0  # a part not read: not checked, nothing of it used
    assert "log_likelihood" not in load_fit(path, skip=("log_likelihood",)).children
    with pytest.raises(FitError, match=r"group '/log_likelihood'"):
        load_fit(path)  # read in full: refused
    with h5py.File(path, "r+") as fh:
        name = next(iter(fh["sample_stats"].keys() - {"chain", "draw"}))
        data = fh["sample_stats"][name]
        data[...] = np.ones(data.shape, dtype=data.dtype)
    with pytest.raises(FitError, match=r"group '/sample_stats'"):
        load_fit(path, skip=("log_likelihood",))
