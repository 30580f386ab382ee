"""The rank model's tau-draw quadrature (evtsync.evt.rankmodel._delay_draws; docs/methodology.md, "The
rank model", the quadrature and its error) against truths computed outside it: closed forms (the
maximum of n draws of a discrete uniform, of an exponential and of a generalized Pareto), an exact
piecewise integral of the same mixture with scipy's adaptive quadrature, and a Monte Carlo simulation of
n ranks drawn from the same distribution; tiny n (2, 3) and large n (4096)."""

from __future__ import annotations

import numpy as np
import pytest

from tests._lazy import lazy_module

# imported on first use, not at collection (issue 48)
rankmodel = lazy_module("evtsync.evt.rankmodel")
integrate = lazy_module("scipy.integrate")
special = lazy_module("scipy.special")

NS = [1, 2, 3, 8, 64, 512, 4096]
#: the tail's stated tolerance (docs/methodology.md: Simpson's rule in w), relative to D(n)
REL = 1e-4


def _comp(shift: list[float], weight: list[float], own: list[float] | None = None, draws: int = 1) -> dict:
    return {"pop_shift": np.tile(np.asarray(shift, float), (draws, 1)),
            "pop_w": np.tile(np.asarray(weight, float) / np.sum(weight), (draws, 1)),
            "own": np.tile(np.asarray(own if own is not None else [], float), (draws, 1))}


def _point(atoms, counts, n_tail, t, sigma, xi, comp, ns) -> np.ndarray:
    """One draw of D(n) with the body's weights its counts (no bootstrap)."""
    return rankmodel._delay_draws(np.asarray(atoms, float), np.asarray(counts, float), n_tail, t, np.array([sigma]),
                                  np.array([xi]), comp, np.asarray(ns, float), None)[0]


def _step(atoms, t: float, shifts) -> float:
    """The body grid's step h: the stated bound of the body's error, |error of D(n)| <= h (each of its
    steps is placed within h/2 of where it is, in E[max_n] and in E[mean] alike)."""
    every = np.append(np.asarray(shifts, float), 0.0)
    return (t + every.max() - float(np.min(atoms)) - every.min()) / (rankmodel._BODY_POINTS - 5)


def _close(ours: np.ndarray, truth: np.ndarray, h: float) -> None:
    np.testing.assert_allclose(ours, truth, rtol=REL, atol=h)


def _gpd_survival(y: np.ndarray, sigma: float, xi: float) -> np.ndarray:
    y = np.maximum(y, 0.0)
    if xi == 0:
        return np.exp(-y / sigma)
    z = 1 + xi * y / sigma
    return np.where(z > 0, np.maximum(z, 1e-300) ** (-1 / xi), 0.0)


def _exact(atoms, counts, n_tail, t, sigma, xi, shifts, weights, n, own=()) -> float:
    """D(n) by scipy's adaptive quadrature of 1 − F_max between the breakpoints of the same mixture
    (each rank: a shift drawn with ``weights``, plus e from the atoms' weights and the GPD tail above
    t; ``own``: fixed ranks' shifts, the other n − len(own) ranks new), and E[mean] in closed form."""
    atoms, counts = np.asarray(atoms, float), np.asarray(counts, float)
    total = counts.sum() + n_tail
    g, c = counts / total, n_tail / total
    shifts, weights = np.asarray(shifts, float), np.asarray(weights, float) / np.sum(weights)

    def f_e(y: float) -> float:
        return float(g[atoms <= y].sum()) if y <= t else 1 - c * float(_gpd_survival(np.array(y - t), sigma, xi))

    def f_max(x: float) -> float:
        pop = sum(w * f_e(x - s) for s, w in zip(shifts, weights, strict=True))
        out = pop ** (n - len(own))
        for s in own:
            out *= f_e(x - s)
        return out

    every = np.concatenate([shifts, np.asarray(own, float)])
    cuts = np.unique(np.concatenate([(atoms[:, None] + every[None, :]).ravel(), t + every]))
    e_max = cuts[0] + sum(integrate.quad(lambda x: 1 - f_max(x), a, b, epsabs=1e-13, epsrel=1e-12, limit=200)[0]
                          for a, b in zip(cuts[:-1], cuts[1:], strict=True))
    e_max += integrate.quad(lambda x: 1 - f_max(x), cuts[-1], np.inf, epsabs=1e-13, epsrel=1e-12, limit=400)[0]
    e_tail = t + sigma / (1 - xi)
    e_one = float(g @ atoms) + c * e_tail
    e_mean = ((n - len(own)) * (float(weights @ shifts) + e_one) + sum(s + e_one for s in own)) / n
    return e_max - e_mean


def test_a_discrete_uniform_without_tail_is_the_closed_form() -> None:
    # K equally likely values 0, δ, …, (K−1)δ and no tail: E[max_n] = δ Σ_{k=1}^{K−1} (1 − (k/K)^n), mean δ(K−1)/2
    k, delta = 7, 0.5
    atoms = delta * np.arange(k)
    ours = _point(atoms, np.ones(k), 0, float(atoms[-1]), 1.0, 0.0, _comp([0.0], [1.0]), NS)
    truth = np.array([delta * sum(1 - (j / k) ** n for j in range(1, k)) - delta * (k - 1) / 2 for n in NS])
    assert truth[-1] == pytest.approx(delta * (k - 1) / 2, rel=1e-12)  # n = 4096: the top value surely
    h = _step(atoms, float(atoms[-1]), [0.0])
    assert h < 0.01 * truth[1]  # the bound is a test: under 1% of D(2)
    _close(ours, truth, h)
    assert ours[0] == 0.0  # n = 1: no straggler


@pytest.mark.parametrize("xi", [0.0, 0.3, -0.25])
def test_a_pure_gpd_tail_is_the_closed_form(xi: float) -> None:
    # (almost) no body: one atom at t = 0 of weight 1e-12; e ~ GPD(sigma, xi). E[max_n] = sigma/xi (n B(n, 1 − xi) − 1)
    # (the minimum of n uniform survivals is Beta(1, n)); sigma·H_n at xi = 0; the mean sigma/(1 − xi)
    sigma = 1.7
    ours = _point([0.0], [1.0], 10 ** 12, 0.0, sigma, xi, _comp([0.0], [1.0]), NS)
    ns = np.asarray(NS, float)
    if xi == 0:
        e_max = sigma * np.array([np.sum(1 / np.arange(1, n + 1)) for n in NS])
    else:
        e_max = sigma / xi * (np.exp(np.log(ns) + special.betaln(ns, 1 - xi)) - 1)
    _close(ours, e_max - sigma / (1 - xi), 1e-9)


@pytest.mark.parametrize("xi", [0.15, -0.1])
def test_a_mixture_of_shifted_ranks_with_a_body_and_a_tail_is_the_exact_integral(xi: float) -> None:
    # three rank effects (one slow rank), a body of 25 unequal atoms, 10% in the GPD tail: the adaptive
    # quadrature of the same mixture (scipy, piecewise between every shifted atom) is the truth
    rng = np.random.default_rng(4)
    atoms = np.sort(rng.normal(size=25))
    t = float(atoms[-1]) + 0.05
    counts = rng.integers(1, 5, size=25).astype(float)
    n_tail = int(round(counts.sum() / 9))
    shifts, weights = [-0.2, 0.0, 0.9], [3.0, 4.0, 1.0]
    ours = _point(atoms, counts, n_tail, t, 0.6, xi, _comp(shifts, weights), NS)
    truth = np.array([_exact(atoms, counts, n_tail, t, 0.6, xi, shifts, weights, n) for n in NS])
    _close(ours, truth, _step(atoms, t, shifts))


def test_these_plus_typical_with_more_ranks_than_mixture_components_is_finite_and_exact() -> None:
    # 30 observed ranks (more than the 24 components a draw keeps): their shifts take two values, so
    # grouping them loses nothing; the fleet "these plus n − 30 new ones" against the exact integral
    # (main's integrator gave NaN here: the ranks' multiplicities were not normalised)
    atoms = np.linspace(-2.0, 1.0, 40)
    own = [0.0] * 20 + [0.4] * 10
    comp = _comp([0.0, 0.4], [2.0, 1.0], own)
    ns = [30, 31, 64, 4096]
    ours = _point(atoms, np.ones(40), 5, 1.0, 0.5, 0.1, comp, ns)
    assert np.all(np.isfinite(ours))
    truth = np.array([_exact(atoms, np.ones(40), 5, 1.0, 0.5, 0.1, [0.0, 0.4], [2.0, 1.0], n, own=own) for n in ns])
    _close(ours, truth, _step(atoms, 1.0, [0.0, 0.4]))


def test_monte_carlo_of_n_simulated_ranks_agrees_with_the_bootstrap_draws() -> None:
    # the draws with Bayesian-bootstrap weights (rng given): each draw's D(n) against a Monte Carlo of
    # max − mean of n ranks simulated from that draw's own distribution (weights recovered by re-drawing
    # the same gammas), within 4 Monte Carlo standard errors, at n = 2, 3 and 4096
    atoms = np.linspace(-1.5, 1.0, 30)
    counts = np.full(30, 3.0)
    n_tail, t, sigma, xi = 10, 1.0, np.array([0.5, 0.8]), np.array([0.1, -0.05])
    comp = _comp([0.0, 0.5], [3.0, 1.0], draws=2)
    ns = [2, 3, 4096]
    ours = rankmodel._delay_draws(atoms, counts, n_tail, t, sigma, xi, comp, np.asarray(ns, float),
                                  np.random.default_rng(7))
    rng = np.random.default_rng(7)  # the same gamma draws as the integrator's single chunk
    g = rng.standard_gamma(counts, size=(2, counts.size))
    g_tail = rng.standard_gamma(float(n_tail), size=2)
    sim = np.random.default_rng(8)
    for d in range(2):
        p = np.append(g[d], g_tail[d]) / (g[d].sum() + g_tail[d])
        for j, n in enumerate(ns):
            reps = 400_000 // n if n > 3 else 400_000
            which = sim.choice(31, size=(reps, n), p=p)
            u = sim.uniform(size=(reps, n))
            tail = t + sigma[d] / xi[d] * (u ** -xi[d] - 1)
            e = np.where(which < 30, atoms[np.minimum(which, 29)], tail)
            v = e + np.where(sim.uniform(size=(reps, n)) < 0.25, 0.5, 0.0)
            x = v.max(axis=1) - v.mean(axis=1)
            se = x.std() / np.sqrt(reps)
            assert abs(ours[d, j] - x.mean()) < 4 * se + _step(atoms, t, [0.0, 0.5]), (d, n, ours[d, j], x.mean(), se)


def test_draws_of_one_n_do_not_depend_on_the_other_n_asked() -> None:
    # the run computes each (cell, n) once (cache_expected_max): asking n alone or among others is the same
    atoms = np.linspace(-1.0, 1.0, 50)
    comp = _comp([0.0, 0.3], [1.0, 1.0], draws=120)
    args = (atoms, np.ones(50), 8, 1.0, np.full(120, 0.4), np.full(120, 0.05), comp)
    both = rankmodel._delay_draws(*args, np.array([3.0, 512.0]), np.random.default_rng(1))
    alone = rankmodel._delay_draws(*args, np.array([512.0]), np.random.default_rng(1))
    np.testing.assert_array_equal(both[:, 1], alone[:, 0])
