"""A fit file altered after it was written is refused on load (issue 18), not used."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from evtsync.errors import FitError
from evtsync.evt.bayesfit import CONTENT_ATTR, load_fit, save_fit
from evtsync.evt.fit import tree_from_draws


def _fit(tmp_path):
    rng = np.random.default_rng(0)
    z = rng.gumbel(size=50)
    tree = tree_from_draws({"mu": rng.normal(0, 0.1, (2, 20)), "sigma": np.exp(rng.normal(0, 0.1, (2, 20)))},
                           pd.DataFrame({"cell": ["all"]}), z, np.zeros(50, dtype=int), family="gumbel")
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
