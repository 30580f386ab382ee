"""The nutpie model compiled with cached C wrappers (evtsync.evt.nutpie_numba) against
nutpie's own compilation of the same PyMC model: same logp, same gradient, same draws."""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.util

import numpy as np
import pytest

from evtsync.evt import nutpie_numba
from evtsync.evt.nutpie_numba import compile_numba_model
from tests._lazy import lazy_module

# imported on first use, not at collection (issue 48); skipped where they are not installed
pm = lazy_module("pymc")
nutpie = lazy_module("nutpie")
pytensor = lazy_module("pytensor")
pytestmark = pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("pymc", "nutpie", "pytensor")),
                                reason="pymc, nutpie and pytensor needed")

_DOUBLE_P = ctypes.POINTER(ctypes.c_double)
_LOGP_C = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_uint64, _DOUBLE_P, _DOUBLE_P, _DOUBLE_P, ctypes.c_void_p)
_EXPAND_C = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_uint64, ctypes.c_uint64, _DOUBLE_P, _DOUBLE_P, ctypes.c_void_p)


def _model(n: int = 300, seed: int = 0) -> pm.Model:
    """A small model with shared data of rank 0, 1 and 2 (the three shapes the wrappers unpack)."""
    rng = np.random.default_rng(seed)
    with pm.Model() as model:
        y = pm.Data("y", rng.gumbel(1.0, 2.0, size=n))
        scale = pm.Data("scale", np.float64(1.5))
        design = pm.Data("design", rng.normal(size=(n, 2)))
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        sigma = pm.HalfNormal("sigma", scale)
        pm.Deterministic("twice", 2 * sigma)
        pm.Gumbel("obs", mu=design @ beta, beta=sigma, observed=y)
    return model


def _compile_both(model):
    free = [rv.name for rv in model.free_RVs]
    with pytensor.config.change_flags(numba__fastmath=False):
        ours = compile_numba_model(model, free)
        theirs = nutpie.compile_pymc_model(model, backend="numba", jitter_rvs=set(), var_names=free)
    return ours, theirs


def _logp(compiled, x: np.ndarray) -> tuple[int, float, np.ndarray]:
    fn = _LOGP_C(compiled.compiled_logp_func.address)
    grad, logp = np.zeros(compiled.n_dim), np.zeros(())
    code = fn(compiled.n_dim, x.ctypes.data_as(_DOUBLE_P), grad.ctypes.data_as(_DOUBLE_P),
              logp.ctypes.data_as(_DOUBLE_P), compiled.user_data.ctypes.data)
    return code, float(logp), grad


def _expand(compiled, x: np.ndarray) -> tuple[int, np.ndarray]:
    fn = _EXPAND_C(compiled.compiled_expand_func.address)
    out = np.zeros(compiled.n_expanded)
    code = fn(compiled.n_dim, compiled.n_expanded, x.ctypes.data_as(_DOUBLE_P), out.ctypes.data_as(_DOUBLE_P),
              compiled.user_data.ctypes.data)
    return code, out


@pytest.fixture(scope="module")
def compiled_pair():
    model = _model()
    return model, *_compile_both(model)


def _point(x: np.ndarray) -> dict[str, np.ndarray]:
    return {"beta": x[:2], "sigma_log__": x[2]}


def test_cached_wrappers_compute_what_nutpies_compute(compiled_pair):
    model, ours, theirs = compiled_pair
    assert ours.n_dim == theirs.n_dim == 3
    assert ours.shape_info[0] == theirs.shape_info[0]
    rng = np.random.default_rng(1)
    for _ in range(5):
        x = rng.normal(size=ours.n_dim)
        code, logp, grad = _logp(ours, x)
        assert code == 0
        assert (code, logp) == _logp(theirs, x)[:2]
        np.testing.assert_array_equal(grad, _logp(theirs, x)[2])
        np.testing.assert_array_equal(_expand(ours, x)[1], _expand(theirs, x)[1])
    # an independent check of the logp at one point: the model's own compiled logp
    x = np.array([0.3, -0.2, np.log(1.7)])
    assert _logp(ours, x)[1] == pytest.approx(float(model.compile_logp()(_point(x))), rel=1e-12)


def test_cached_wrappers_give_nutpies_draws(compiled_pair):
    _, ours, theirs = compiled_pair
    a = nutpie.sample(ours, draws=100, tune=100, chains=2, cores=1, seed=7, progress_bar=False)
    b = nutpie.sample(theirs, draws=100, tune=100, chains=2, cores=1, seed=7, progress_bar=False)
    for name in ("beta", "sigma"):
        np.testing.assert_array_equal(a["posterior"][name].values, b["posterior"][name].values)


def test_a_second_compilation_loads_the_wrappers_from_the_cache():
    model = _model(n=310)  # its own structure, so the first compilation here writes the entry
    free = [rv.name for rv in model.free_RVs]
    with pytensor.config.change_flags(numba__fastmath=False):
        compile_numba_model(model, free)
        again = compile_numba_model(_model(n=310, seed=5), free)
    assert again.compiled_logp_func.cache_hits == 1
    assert again.compiled_expand_func.cache_hits == 1


def test_new_data_reach_the_cached_wrappers(compiled_pair):
    """``with_data`` (how studies reuse a compiled model) swaps the arrays the wrappers read."""
    _, ours, _ = compiled_pair
    other = _model(seed=3)
    x = np.random.default_rng(2).normal(size=3)
    swapped = ours.with_data(y=other["y"].get_value(), design=other["design"].get_value())
    assert _logp(swapped, x)[1] == pytest.approx(float(other.compile_logp()(_point(x))), rel=1e-12)
    assert _logp(swapped, x)[1] != _logp(ours, x)[1]


def test_unknown_nutpie_internals_fall_back_to_nutpie(monkeypatch, caplog):
    monkeypatch.setattr(nutpie_numba, "_MODEL_FIELDS", frozenset({"something else"}))
    model = _model(n=50)
    with caplog.at_level("DEBUG", logger="evtsync.evt.nutpie_numba"):
        compiled = compile_numba_model(model, [rv.name for rv in model.free_RVs])
    assert "model fields differ" in caplog.text
    assert len(next(iter(compiled.shared_var_keys.values()))) == 32  # nutpie's own uuid keys
    assert _logp(compiled, np.zeros(3))[0] == 0


@pytest.mark.slow  # ~17 s: every graph compiled afresh
def test_without_pytensors_numba_cache_nutpie_compiles(caplog):
    model = _model(n=60)
    with pytensor.config.change_flags(numba__cache=False), caplog.at_level("DEBUG", logger="evtsync.evt.nutpie_numba"):
        compiled = compile_numba_model(model, [rv.name for rv in model.free_RVs])
    assert "cache is off" in caplog.text
    assert dataclasses.is_dataclass(compiled) and _logp(compiled, np.zeros(3))[0] == 0


def test_the_compiled_model_cache_gives_the_same_model(tmp_path, monkeypatch, compiled_pair):
    """With a cache key, the rewritten PyTensor functions are stored (first compilation) and
    loaded (second, on another model object built the same way): logp, gradient, expansion,
    initial point and draws equal to nutpie's own compilation; another key is another entry,
    and an unreadable entry is compiled again and replaced."""
    monkeypatch.setenv("EVTSYNC_CACHE_DIR", str(tmp_path))
    _, _, theirs = compiled_pair
    free = [rv.name for rv in _model().free_RVs]
    calls = []
    real = nutpie.compile_pymc._make_functions
    monkeypatch.setattr(nutpie.compile_pymc, "_make_functions", lambda *a, **k: calls.append(1) or real(*a, **k))
    with pytensor.config.change_flags(numba__fastmath=False):
        first = compile_numba_model(_model(), free, cache_key="k1")
        entries = list((tmp_path / "models").glob("*.pkl"))
        again = compile_numba_model(_model(), free, cache_key="k1")
    assert len(calls) == 1 and len(entries) == 1  # the second compilation built nothing
    rng = np.random.default_rng(4)
    for _ in range(3):
        x = rng.normal(size=3)
        assert _logp(first, x)[:2] == _logp(again, x)[:2] == _logp(theirs, x)[:2]
        np.testing.assert_array_equal(_logp(again, x)[2], _logp(theirs, x)[2])
        np.testing.assert_array_equal(_expand(again, x)[1], _expand(theirs, x)[1])
    np.testing.assert_array_equal(again.initial_point_func(3), theirs.initial_point_func(3))
    a = nutpie.sample(again, draws=50, tune=50, chains=1, cores=1, seed=7, progress_bar=False)
    b = nutpie.sample(theirs, draws=50, tune=50, chains=1, cores=1, seed=7, progress_bar=False)
    np.testing.assert_array_equal(a["posterior"]["beta"].values, b["posterior"]["beta"].values)
    entries[0].write_bytes(b"not a pickle")
    with pytensor.config.change_flags(numba__fastmath=False):
        compile_numba_model(_model(), free, cache_key="k1")
        compile_numba_model(_model(), free, cache_key="k2")
    assert len(calls) == 3 and len(list((tmp_path / "models").glob("*.pkl"))) == 2
