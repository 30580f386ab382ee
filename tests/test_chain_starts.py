"""Chains start apart (issue 29, item 5): each chain's start is the model's initial point plus a
uniform jitter, inside the support, different per seed; fit and run share 4 chains and seed 0."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from evtsync.defaults import DEFAULT_CHAINS, DEFAULT_SEED
from evtsync.evt.fit import START_JITTER, _dispersed_starts, _point_splitter
from evtsync.evt.model import build_model, prepare_data
from evtsync.evt.spec import SamplerConfig, load_spec

ROOT = Path(__file__).resolve().parent.parent


@dataclasses.dataclass
class _Compiled:
    initial_point_func: Callable


def test_each_chain_starts_elsewhere_inside_the_support() -> None:
    rng = np.random.default_rng(0)
    y = rng.gumbel(0.5, 0.6, 200)  # a narrow sample: the GEV support bounds xi's start
    spec = load_spec(ROOT / "models" / "gev.toml")
    built = build_model(spec, prepare_data(pd.DataFrame({"y": y}), spec))
    start = _dispersed_starts(_Compiled(lambda seed=None: None), built).initial_point_func
    flat, to_point = _point_splitter(built.model)
    logp = built.model.compile_logp()
    starts = np.array([start(seed) for seed in (11, 22, 33, 44)])
    assert len({tuple(np.round(s, 12)) for s in starts}) == 4
    assert np.all(np.abs(starts - flat) <= START_JITTER)
    assert all(np.isfinite(float(logp(to_point(s)))) for s in starts)
    assert np.array_equal(start(11), starts[0])  # the same seed, the same start


def test_fit_and_run_share_chains_and_seed() -> None:
    from evtsync.pipeline.options import RunOptions

    assert SamplerConfig().chains == DEFAULT_CHAINS == 4
    for name in ("gev", "gumbel", "frechet", "gumbel-hier", "gev-hier-gpu-precision"):
        assert load_spec(ROOT / "models" / f"{name}.toml").sampler_config().chains == 4, name
    assert RunOptions(out=Path("x")).seed == DEFAULT_SEED == 0
