"""Model specification files: every shipped model loads; bad files fail naming file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from evtsync.core.errors import ModelSpecError
from evtsync.evt.spec import load_spec, parse_spec

# the GEV specifications (the rank model's own file, family "rankmodel", has its loader: test_rankmodel_spec.py)
MODELS = sorted(p for p in (Path(__file__).resolve().parents[2] / "models").glob("*.toml") if p.stem != "rankmodel")

BASE = """
name = "t"
family = "gev"
[data]
groups = ["gpu", "precision"]
[mu]
pooling = "none"
prior = { dist = "normal", mu = 0.0, sigma = 2.0 }
[sigma]
pooling = "none"
prior = { dist = "halfnormal", sigma = 1.0 }
[xi]
structure = "additive"
prior = { dist = "normal", mu = 0.0, sigma = 0.3 }
factors = ["gpu", "precision"]
group_sd_prior = { dist = "halfnormal", sigma = 0.1 }
"""


def test_shipped_models_load():
    names = {load_spec(p).name for p in MODELS}
    assert {"gumbel", "frechet", "gev", "gev-hier-gpu-precision", "gumbel-hier"} <= names
    main = load_spec(next(p for p in MODELS if p.stem == "gev-hier-gpu-precision"))
    assert main.xi.structure == "additive" and main.xi.factors == ("gpu", "precision")
    assert main.text.startswith("#") and "xi0" in main.text


def test_base_parses_with_defaults():
    spec = parse_spec(BASE, "base.toml")
    assert spec.column == "z" and spec.xi.parametrization == "auto" and spec.xi.centred_min_obs == 1000
    assert spec.sampling == {}
    tuned = parse_spec(BASE + "[sampling]\ndraws = 500\ntarget_accept = 0.9\n", "t.toml")
    assert tuned.sampling == {"draws": 500, "target_accept": 0.9}
    assert parse_spec(BASE + '[sampling]\ntarget_accept = "auto"\n', "t.toml").sampling == {"target_accept": "auto"}


def test_sampling_table_fills_the_sampler_config():
    spec = parse_spec(BASE + '[sampling]\ndraws = 500\nchains = 3\nseed = 7\nsampler = "pymc"\n', "t.toml")
    config = spec.sampler_config()
    assert (config.draws, config.tune, config.chains, config.seed, config.sampler) == (500, 1000, 3, 7, "pymc")
    assert config.override(chains=None, draws=200).draws == 200 and config.override(chains=None).chains == 3
    assert parse_spec(BASE, "t.toml").sampler_config().chains == 4  # one default for fit and run (issue 29)


def test_target_accept_auto_rule():
    from evtsync.core.errors import InputError
    from evtsync.evt.fit import AUTO_TARGET_MAX_OBS, resolve_target_accept

    # 0.99 for a few thousand z-scores (cells of a few hundred), 0.95 up to 20,000, 0.8 above
    assert resolve_target_accept("auto", 1908) == resolve_target_accept(None, 5000) == 0.99
    assert resolve_target_accept("auto", 5001) == resolve_target_accept(None, AUTO_TARGET_MAX_OBS) == 0.95
    assert resolve_target_accept("auto", 250_000) == 0.8
    assert resolve_target_accept(0.9, 250_000) == 0.9
    for bad in (1.0, 0.0, "high"):
        with pytest.raises(InputError, match="--target-accept must lie in"):
            resolve_target_accept(bad, 10)


@pytest.mark.parametrize(
    ("edit", "key"),
    [
        (lambda t: "colour = 3\n" + t, "colour"),
        (lambda t: t.replace('pooling = "none"\nprior = { dist = "normal"', 'pooling = "some"\nprior = { dist = "normal"'), "mu.pooling"),
        (lambda t: t.replace('dist = "halfnormal", sigma = 1.0', 'dist = "normal", mu = 0.0, sigma = 1.0'), "sigma.prior.dist"),
        (lambda t: t.replace('{ dist = "halfnormal", sigma = 0.1 }', '{ dist = "halfnormal", sigma = -0.1 }'), "xi.group_sd_prior.sigma"),
        (lambda t: t.replace('factors = ["gpu", "precision"]', 'factors = ["gpu", "node"]'), "xi.factors"),
        (lambda t: t.replace('family = "gev"', 'family = "pareto"'), "family"),
        (lambda t: t.replace('family = "gev"', 'family = "gumbel"'), "xi"),
        (lambda t: t.replace('{ dist = "normal", mu = 0.0, sigma = 0.3 }', '{ dist = "normal", sigma = 0.3 }'), "xi.prior.mu"),
        (lambda t: t.replace('{ dist = "normal", mu = 0.0, sigma = 2.0 }', '{ dist = "normal", mu = "a", sigma = 2.0 }'), "mu.prior.mu"),
        (lambda t: t.replace('groups = ["gpu", "precision"]', "groups = []"), "mu.pooling"),
        (lambda t: t.replace('{ dist = "halfnormal", sigma = 1.0 }', '{ dist = "halfnormal", sigma = 1.0 }\nsupport_transform = "maybe"'), "sigma.support_transform"),
        (lambda t: t + "[sampling]\ntarget_accept = 1.0\n", "sampling.target_accept"),
        (lambda t: t + "[sampling]\ntarget_accept = \"high\"\n", "sampling.target_accept"),
        (lambda t: t + "[sampling]\nsampler = \"stan\"\n", "sampling.sampler"),
        (lambda t: t + "[sampling]\nbackend = \"cuda\"\n", "sampling.backend"),
        (lambda t: t + "[sampling]\nadaptation = \"dense\"\n", "sampling.adaptation"),
        (lambda t: t + "[sampling]\nseed = -1\n", "sampling.seed"),
        (lambda t: t.replace('pooling = "none"\nprior = { dist = "normal"', 'pooling = "partial"\nprior = { dist = "normal"'),
         "mu.population_sd_prior"),
        (lambda t: t.replace('pooling = "none"\nprior = { dist = "normal", mu = 0.0, sigma = 2.0 }',
                             'pooling = "none"\nprior = { dist = "normal", mu = 0.0, sigma = 2.0 }\n'
                             'population_sd_prior = { dist = "lognormal", mu = 0.0, sigma = 1.0 }'),
         "mu.population_sd_prior"),
        (lambda t: t + 'cell_sd_prior = { dist = "normal", mu = 0.0, sigma = 1.0 }\n', "xi.cell_sd_prior.dist"),
        (lambda t: t + "many_levels = 1\n", "xi.many_levels"),
        (lambda t: t.replace('groups = ["gpu", "precision"]', 'groups = ["gpu", "precision"]\nscale = "mm"'), "data.scale"),
    ],
)
def test_errors_name_file_and_key(edit, key):
    with pytest.raises(ModelSpecError) as info:
        parse_spec(edit(BASE), "models/broken.toml")
    msg = str(info.value)
    assert msg.startswith("models/broken.toml: key '") and f"'{key}'" in msg
    assert "\n" not in msg


def test_frechet_needs_positive_prior_and_no_additive():
    text = BASE.replace('family = "gev"', 'family = "frechet"')
    with pytest.raises(ModelSpecError, match="xi.prior.dist"):
        parse_spec(text, "f.toml")


def test_invalid_toml_and_missing_file(tmp_path):
    with pytest.raises(ModelSpecError, match="not valid TOML"):
        parse_spec("name = ", "bad.toml")
    with pytest.raises(ModelSpecError, match="no such model specification"):
        load_spec(tmp_path / "nope.toml")
