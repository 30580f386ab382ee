"""Chains start apart (issue 29, item 5): each chain's start is the model's initial point plus a
uniform jitter, inside the support, different per seed; fit and run share 4 chains and seed 0."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from evtsync.core.defaults import DEFAULT_CHAINS, DEFAULT_SEED
from evtsync.evt.spec import SamplerConfig, load_spec
from tests._lazy import lazy_module

# evtsync modules that import PyMC, PyTensor, xarray or numba: imported on first use, not at collection (issue 48)
evt_fit = lazy_module("evtsync.evt.fit")
evt_model = lazy_module("evtsync.evt.model")


ROOT = Path(__file__).resolve().parents[2]


@dataclasses.dataclass
class _Compiled:
    initial_point_func: Callable


def test_each_chain_starts_elsewhere_inside_the_support() -> None:
    rng = np.random.default_rng(0)
    y = rng.gumbel(0.5, 0.6, 200)  # a narrow sample: the GEV support bounds xi's start
    spec = load_spec(ROOT / "models" / "gev.toml")
    built = evt_model.build_model(spec, evt_model.prepare_data(pd.DataFrame({"y": y}), spec))
    start = evt_fit._dispersed_starts(_Compiled(lambda seed=None: None), built).initial_point_func
    flat, to_point = evt_fit._point_splitter(built.model)
    logp = built.model.compile_logp()
    starts = np.array([start(seed) for seed in (11, 22, 33, 44)])
    assert len({tuple(np.round(s, 12)) for s in starts}) == 4
    assert np.all(np.abs(starts - flat) <= evt_fit.START_JITTER)
    assert all(np.isfinite(float(logp(to_point(s)))) for s in starts)
    assert np.array_equal(start(11), starts[0])  # the same seed, the same start


def test_fit_and_run_share_chains_and_seed() -> None:
    from evtsync.pipeline.options import RunOptions

    assert SamplerConfig().chains == DEFAULT_CHAINS == 4
    for name in ("gev", "gumbel", "frechet", "gumbel-hier", "gev-hier-gpu-precision"):
        assert load_spec(ROOT / "models" / f"{name}.toml").sampler_config().chains == 4, name
    assert RunOptions(out=Path("x")).seed == DEFAULT_SEED == 0


def test_numba_density_check_gives_the_same_starts() -> None:
    """Issue 30 (6): with nutpie's numba backend the starts are checked against the sampler's own
    compiled density (no compilation of PyMC's); the starts are those of PyMC's density check."""
    import dataclasses

    import pytest

    pytest.importorskip("nutpie")
    import pytensor

    from evtsync.evt.nutpie_numba import compile_numba_model

    rng = np.random.default_rng(0)
    y = rng.gumbel(0.5, 0.6, 2000)  # a large sample: most jittered starts fall outside the support
    spec = load_spec(ROOT / "models" / "gev.toml")
    built = evt_model.build_model(spec, evt_model.prepare_data(pd.DataFrame({"y": y}), spec))
    with pytensor.config.change_flags(numba__fastmath=False):
        compiled = compile_numba_model(built.model, [rv.name for rv in built.model.free_RVs])
    compile_logp = built.model.compile_logp
    built.model.compile_logp = None  # the numba check compiles nothing of PyMC's (a call would fail)
    numba_start = evt_fit._dispersed_starts(compiled, built).initial_point_func
    # nutpie's n_dim is at times a numpy integer (the rank model's): the numba check takes it too
    as_numpy = evt_fit._dispersed_starts(dataclasses.replace(compiled, _n_dim=np.int64(compiled._n_dim)),
                                         built).initial_point_func
    built.model.compile_logp = compile_logp
    pymc_start = evt_fit._dispersed_starts(_Compiled(lambda seed=None: None), built).initial_point_func
    flat, to_point = evt_fit._point_splitter(built.model)
    logp = built.model.compile_logp()
    outside = 0
    for seed in range(40):
        a, b = numba_start(seed), pymc_start(seed)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(as_numpy(seed), b)
        outside += not np.isfinite(float(logp(to_point(flat + np.random.default_rng(seed).uniform(-1, 1, flat.size)))))
    assert outside > 0  # the check was exercised: some first draws were outside the support
