"""The free-shape rank model's chains start with every cell's largest excess well inside its GPD's
support (issue starts45): a uniform jitter of xi0 with the scale kept near the mean excess put a
cell with xi < 0 on the smooth support wall (1 + xi y_max / sigma ~ 0), where a chain of the demo's
earlier half stayed stuck (step size 1e-12, R-hat 1.59). Checked against the model's own xi and
sigma at each start and the largest excess of each cell counted from the data, not against the
start policy's predicate."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from tests._lazy import lazy_module
from tests.evt.test_rankmodel_compiled import _long, _prepared

rankmodel = lazy_module("evtsync.evt.rankmodel")
evt_fit = lazy_module("evtsync.evt.fit")

SEEDS = range(40)


@dataclasses.dataclass
class _Compiled:
    initial_point_func: Callable


def _support_gaps(model, exc: list[np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """1 + xi_c max(excess_c) / sigma_c per cell at a flat start, xi and sigma the model's deterministics."""
    import pytensor

    _, to_point = evt_fit._point_splitter(model)
    outs = model.replace_rvs_by_values([model["xi"], model["sigma"]])
    fn = pytensor.function(model.value_vars, outs, mode="FAST_COMPILE", on_unused_input="ignore")
    y_max = np.array([e.max() for e in exc])

    def gaps(x: np.ndarray) -> np.ndarray:
        point = to_point(x)
        xi, sigma = fn(*(point[v.name] for v in model.value_vars))
        return 1 + xi * y_max / sigma

    return gaps


def test_free_shape_starts_stay_off_the_support_wall() -> None:
    long = _long(0, 300)  # three cells of Gumbel rank times: the posterior's xi is near 0
    model, cells, exc, *_ = _prepared(long)
    assert len(cells) == 3
    gaps = _support_gaps(model, exc)
    old = evt_fit._dispersed_starts(_Compiled(lambda seed=None: None), _ns(model)).initial_point_func
    new = rankmodel._chain_starts(_Compiled(lambda seed=None: None), model).initial_point_func
    old_gaps = np.array([gaps(old(s)).min() for s in SEEDS])
    new_starts = np.array([new(s) for s in SEEDS])
    new_gaps = np.array([gaps(x).min() for x in new_starts])
    # the old policy drew starts on the wall for this data set (the case the fix is for)
    assert (old_gaps < 0.01).sum() >= 5, np.round(old_gaps, 3)
    assert np.all(new_gaps >= 1 - rankmodel.START_WALL_FRACTION), np.round(new_gaps, 3)
    # still dispersed: every chain elsewhere, some with xi0 below its initial 0.05, all within the jitter
    flat, _ = evt_fit._point_splitter(model)
    assert len({tuple(np.round(x, 12)) for x in new_starts}) == len(SEEDS)
    assert np.all(np.abs(new_starts - flat) <= evt_fit.START_JITTER)
    assert (new_starts[:, 0] < 0.05).sum() >= 5
    assert np.array_equal(new(7), new_starts[7])  # the same seed, the same start


def test_xi_zero_starts_are_the_shared_policy() -> None:
    """xi = 0 has no wall: its starts are the shared policy's (the GEV fits') unchanged."""
    model, *_ = _prepared(_long(0, 300), free_shape=False)
    old = evt_fit._dispersed_starts(_Compiled(lambda seed=None: None), _ns(model)).initial_point_func
    new = rankmodel._chain_starts(_Compiled(lambda seed=None: None), model).initial_point_func
    for seed in range(8):
        np.testing.assert_array_equal(new(seed), old(seed))


def _ns(model):
    import types

    return types.SimpleNamespace(model=model)
