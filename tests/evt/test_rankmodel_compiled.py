"""The rank model's graph holds its data as ``pm.Data`` (evtsync.evt.rankmodel._model_data), so one
compiled model serves every data set of its structure (the run's and its earlier half's): checked
against a fresh compilation of the second data set and against the log densities written out here
with NumPy/SciPy; and the fits of one data set share their body frames (SIMEX), checked against a
fresh computation."""

from __future__ import annotations

import ctypes

import numpy as np
import pandas as pd
import pytest

from tests._lazy import lazy_module

rankmodel = lazy_module("evtsync.evt.rankmodel")
stats = lazy_module("scipy.stats")


def _long(seed: int, iters: int, cells=(("A100", "bf16"), ("H100", "bf16"), ("H100", "fp32"))) -> pd.DataFrame:
    """A long rank table: 8 ranks per collective, Gumbel rank times with a shared shock, one rank slow."""
    rng = np.random.default_rng(seed)
    parts = []
    for gpu, precision in cells:
        x = rng.gumbel(size=(iters, 8)) + rng.standard_normal(iters)[:, None]
        x[:, 3] += 0.3
        parts.append(pd.DataFrame({"value": x.ravel(), "collective": np.repeat(np.arange(iters), 8).astype(str),
                                   "rank": np.tile(np.arange(8), iters).astype(str), "gpu": gpu,
                                   "precision": precision, "order": np.repeat(np.arange(iters), 8)}))
    return pd.concat(parts, ignore_index=True)


def _prepared(long: pd.DataFrame, free_shape: bool = True):
    """The model fit_rank_model samples, prepared by its own path (rankmodel._prepare_model)."""
    from evtsync.evt.spec import load_rank_spec

    spec = load_rank_spec()
    model, cells, exc, thresholds, _ = rankmodel._prepare_model(long, free_shape=free_shape, source="test",
                                                                spec=spec)
    return model, cells, exc, thresholds, spec


def _logp(compiled, x: np.ndarray) -> float:
    """The sampler's own compiled log density (nutpie's C callback) at ``x``."""
    doubles = ctypes.POINTER(ctypes.c_double)
    n_dim = int(compiled._n_dim)
    x = np.ascontiguousarray(x, dtype=np.float64)
    grad, value = np.empty(n_dim), np.full((), np.nan)
    code = compiled.compiled_logp_func.ctypes(n_dim, x.ctypes.data_as(doubles), grad.ctypes.data_as(doubles),
                                              value.ctypes.data_as(doubles),
                                              compiled.user_data.ctypes.data_as(ctypes.c_void_p))
    assert code == 0
    return float(value[()])


def test_the_potentials_are_the_gpd_and_normal_densities_written_out(tmp_path) -> None:
    """The padded excess matrix and the flat rank arrays give the densities of the model as stated
    (docs/methodology.md): sum of GPD log densities of each cell's excesses, and of Normal(0, sd) log
    densities of the rank effects' estimates, sd^2 = sigma_rho^2 (1 - 1/K) + se^2."""
    model, cells, exc, thresholds, _ = _prepared(_long(0, 300))
    point = model.initial_point()
    rng = np.random.default_rng(1)
    point = {k: v + 0.1 * rng.standard_normal(np.shape(v)) for k, v in point.items()}
    import pytensor

    outs = model.replace_rvs_by_values([model["gpd"], model["rho_population"], model["sigma"], model["xi"]])
    evaluate = pytensor.function(model.value_vars, outs, mode="FAST_COMPILE", on_unused_input="ignore")
    gpd, rho, sigma, xi = evaluate(*(point[v.name] for v in model.value_vars))
    hand = sum(stats.genpareto.logpdf(e, xi[i], scale=sigma[i]).sum() for i, e in enumerate(exc))
    assert float(gpd) == pytest.approx(hand, rel=1e-10)
    sigma_rho = np.exp(point["sigma_rho_log__"])
    hand_rho = sum(stats.norm.logpdf(c.rho_hat, 0.0, np.sqrt(sigma_rho[i] ** 2 * (1 - 1 / c.rank_k) + c.rho_se ** 2)).sum()
                   for i, c in enumerate(cells))
    assert float(rho) == pytest.approx(hand_rho, rel=1e-10)


@pytest.mark.slow  # a numba compilation of the model (~15 s quiet; minutes under load when not in PyTensor's cache)
def test_one_compiled_model_serves_another_data_set_of_its_structure(tmp_path, monkeypatch) -> None:
    """Data set A is compiled and cached; data set B (other values, other sizes, the same cells) is
    served from the cache with B's data: its log density equals a fresh compilation of B's at random
    points, and the cache was read (nutpie's graph functions were not built a second time)."""
    import pytensor
    from nutpie import compile_pymc as cp

    from evtsync.evt.nutpie_numba import compile_numba_model

    monkeypatch.setenv("EVTSYNC_CACHE_DIR", str(tmp_path / "cache"))
    model_a, *_, spec = _prepared(_long(0, 300))
    model_b, *_ = _prepared(_long(5, 170))
    key_a = rankmodel._structure_key(model_a, True, spec)
    assert key_a == rankmodel._structure_key(model_b, True, spec)
    free = [rv.name for rv in model_a.free_RVs]
    built = []
    real = cp._make_functions
    monkeypatch.setattr(cp, "_make_functions", lambda *a, **k: built.append(1) or real(*a, **k))
    with pytensor.config.change_flags(numba__fastmath=False):
        rankmodel._with_model_data(compile_numba_model(model_a, free, cache_key=key_a), model_a)
        assert built == [1] and len(list((tmp_path / "cache" / "models").glob("*.pkl"))) == 1
        cached = rankmodel._with_model_data(compile_numba_model(model_b, free, cache_key=key_a), model_b)
        assert built == [1]  # read from the cache
        fresh = compile_numba_model(model_b, free)
        stale = compile_numba_model(model_b, free, cache_key=key_a)  # read from the cache, A's data kept
    rng = np.random.default_rng(3)
    flat = np.concatenate([np.ravel(v) for v in model_b.initial_point().values()])
    for _ in range(5):
        x = flat + rng.uniform(-0.3, 0.3, flat.size)
        assert _logp(cached, x) == pytest.approx(_logp(fresh, x), rel=1e-12, abs=1e-9)
    # A's data really differ: served without B's data, the density would be A's
    assert _logp(stale, flat) != pytest.approx(_logp(fresh, flat), rel=1e-6)


def test_another_structure_gets_another_key() -> None:
    long = _long(0, 300)
    model, *_, spec = _prepared(long)
    key = rankmodel._structure_key(model, True, spec)
    gumbel, *_ = _prepared(long, free_shape=False)
    two_cells, *_ = _prepared(_long(0, 300, cells=(("A100", "bf16"), ("H100", "bf16"))))
    assert len({key, rankmodel._structure_key(gumbel, False, spec), rankmodel._structure_key(two_cells, True, spec)}) == 3


def test_a_shared_value_outside_the_models_data_is_not_served() -> None:
    """A compiled model holding a shared variable that is not one of the model's data could carry
    another data set's value: it is refused (None), and the caller compiles for these data; one
    whose shared variables are all the model's data gets the model's values."""
    import types

    import pymc as pm
    import pytensor

    hidden = pytensor.shared(np.ones(3), name="hidden")
    with pm.Model() as model:
        data = pm.Data("values", np.arange(3.0))
    old = pytensor.shared(np.zeros(5), name="values")  # as a cache entry holds it: another data set's value

    class Compiled(types.SimpleNamespace):  # nutpie's fields that _with_model_data reads
        def with_data(self, **updates):
            return updates

    assert rankmodel._with_model_data(Compiled(shared_var_keys={hidden: "s0"}), model) is None
    assert rankmodel._with_model_data(Compiled(shared_var_keys={old: "s0", hidden: "s1"}), model) is None
    served = rankmodel._with_model_data(Compiled(shared_var_keys={old: "s0"}), model)
    np.testing.assert_array_equal(served["values"], data.get_value())


def test_the_fits_of_one_data_set_share_their_body_frames() -> None:
    """The memo returns what a fresh computation gives (same data, same seed), and another seed or
    other data are not served from it."""
    long = _long(0, 60, cells=(("A100", "bf16"), ("H100", "bf16")))
    cells = rankmodel.decompose(long, "centre", "test", True)
    thresholds = [float(np.quantile(c.w, 0.95)) for c in cells]
    rankmodel._BODY_MEMO.clear()
    atoms, boot = rankmodel._body_frames(cells, thresholds, "centre", 4)
    atoms.loc[0, "atom"] = -99.0  # a caller's change does not reach the memo
    again, boot_again = rankmodel._body_frames(cells, thresholds, "centre", 4)
    rankmodel._BODY_MEMO.clear()
    fresh, boot_fresh = rankmodel._body_frames(cells, thresholds, "centre", 4)
    pd.testing.assert_frame_equal(again, fresh)
    for a, b in zip(boot_again, boot_fresh, strict=True):
        pd.testing.assert_frame_equal(a, b)
    other_seed, _ = rankmodel._body_frames(cells, thresholds, "centre", 5)
    assert not other_seed.equals(fresh)
    other = rankmodel.decompose(_long(1, 60, cells=(("A100", "bf16"), ("H100", "bf16"))), "centre", "test", True)
    other_atoms, _ = rankmodel._body_frames(other, thresholds, "centre", 4)
    assert not other_atoms.equals(fresh)
