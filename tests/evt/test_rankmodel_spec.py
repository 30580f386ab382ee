"""The rank model's specification (``models/rankmodel.toml``, evtsync.evt.spec.load_rank_spec): the
shipped file loads and is what the model reads; a bad file is refused naming the file and the key;
the GEV tooling leaves the file alone (it is not a GEV model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evtsync.core.defaults import RANKTAIL_XI_PRIOR_SD
from evtsync.core.errors import ModelSpecError
from evtsync.evt.spec import RANK_FAMILY, load_rank_spec, load_spec, parse_rank_spec

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "models" / "rankmodel.toml"

GOOD = """
name = "r"
family = "rankmodel"
[xi]
prior = { dist = "normal", mu = 0.0, sigma = 0.3 }
spread_prior = { dist = "halfnormal", sigma = 0.1 }
[sigma]
population_sd_prior = { dist = "halfnormal", sigma = 0.3 }
[rho]
population_sd_prior = { dist = "halfnormal", sigma = 1.0 }
[sampling]
draws = 200
tune = 100
chains = 2
target_accept = 0.9
adaptation = "diag"
"""


def test_the_shipped_file_loads_and_is_read_by_the_model() -> None:
    # read off the file itself (tomllib), not through the loader under test
    import tomllib

    raw = tomllib.loads(SHIPPED.read_text(encoding="utf-8"))
    spec = load_rank_spec()  # the shipped one, found as the package finds models/
    assert Path(spec.path).resolve() == SHIPPED.resolve()
    assert spec.text == SHIPPED.read_text(encoding="utf-8")
    assert (spec.draws, spec.tune, spec.chains) == tuple(raw["sampling"][k] for k in ("draws", "tune", "chains"))
    assert spec.target_accept == raw["sampling"]["target_accept"]
    assert spec.sigma_spread_prior.dist == raw["sigma"]["population_sd_prior"]["dist"]
    # xi0's prior is ranktail's: the one-cell agreement with ranktail's grid posterior rests on it
    assert spec.xi_prior.dist == "normal" and spec.xi_prior.params == {"mu": 0.0, "sigma": RANKTAIL_XI_PRIOR_SD}
    # the module's constants are the file's (the pipeline and the CLI import them)
    from evtsync.evt import rankmodel

    assert raw["sampling"]["draws"] == rankmodel.RANKMODEL_DRAWS
    assert raw["sampling"]["target_accept"] == rankmodel.RANKMODEL_TARGET_ACCEPT
    with pytest.raises(AttributeError):
        rankmodel.RANKMODEL_NO_SUCH_CONSTANT  # noqa: B018


def test_a_good_file_parses_to_its_values(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text(GOOD, encoding="utf-8")
    spec = load_rank_spec(path)
    assert (spec.name, spec.draws, spec.tune, spec.chains, spec.target_accept) == ("r", 200, 100, 2, 0.9)
    assert spec.xi_spread_prior.dist == "halfnormal" and spec.xi_spread_prior.params == {"sigma": 0.1}
    assert spec.rho_spread_prior.params == {"sigma": 1.0}


@pytest.mark.parametrize("edit, key, what", [
    (("adaptation = \"diag\"", "adaptation = \"diag\"\nthinning = 2"), "sampling.thinning", "unknown key"),
    (("[rho]", "[rho]\nspread = 1"), "rho.spread", "unknown key"),
    (("name = \"r\"", "name = \"r\"\nseed = 3"), "'seed'", "unknown key"),
    (("draws = 200", "draws = \"200\""), "sampling.draws", "integer"),
    (("draws = 200", "draws = 0"), "sampling.draws", "integer >= 1"),
    (("chains = 2", "chains = 2.5"), "sampling.chains", "integer"),
    (("target_accept = 0.9", "target_accept = 1.2"), "sampling.target_accept", "in \\(0, 1\\)"),
    (("target_accept = 0.9", "target_accept = \"auto\""), "sampling.target_accept", "number in \\(0, 1\\)"),
    (("adaptation = \"diag\"", "adaptation = \"dense\""), "sampling.adaptation", "expected one of"),
    (("spread_prior = { dist = \"halfnormal\", sigma = 0.1 }", "spread_prior = { dist = \"normal\", mu = 0.0, sigma = 0.1 }"),
     "xi.spread_prior.dist", "positive"),
    (("population_sd_prior = { dist = \"halfnormal\", sigma = 0.3 }", "population_sd_prior = { dist = \"halfnormal\", sigma = -1 }"),
     "sigma.population_sd_prior.sigma", "must be > 0"),
    (("population_sd_prior = { dist = \"halfnormal\", sigma = 0.3 }", "population_sd_prior = { dist = \"halfnormal\" }"),
     "sigma.population_sd_prior.sigma", "missing"),
    (("prior = { dist = \"normal\", mu = 0.0, sigma = 0.3 }", "prior = \"normal\""), "xi.prior", "expected a table"),
    (("tune = 100\n", ""), "sampling.tune", "missing"),
    (("family = \"rankmodel\"", "family = \"gev\""), "family", "expected one of"),
])
def test_a_bad_file_is_refused_naming_the_file_and_the_key(tmp_path: Path, edit: tuple[str, str], key: str,
                                                            what: str) -> None:
    old, new = edit
    assert old in GOOD
    path = tmp_path / "bad.toml"
    path.write_text(GOOD.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(ModelSpecError, match=f"{path}.*{key}.*{what}"):
        load_rank_spec(path)


def test_missing_or_broken_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(ModelSpecError, match="no such rank-model specification file"):
        load_rank_spec(tmp_path / "none.toml")
    with pytest.raises(ModelSpecError, match="not valid TOML"):
        parse_rank_spec("name = ", "x.toml")
    with pytest.raises(ModelSpecError, match="x.toml: key 'xi': missing"):
        parse_rank_spec('name = "r"\nfamily = "rankmodel"\n', "x.toml")


def test_the_gev_tooling_leaves_the_rank_models_file_alone() -> None:
    from evtsync.evt.catalog import list_models, model_paths

    # `evtsync run` fits model_paths() as GEV models: the rank model's file is not among them
    assert SHIPPED.name not in {p.name for p in model_paths()}
    assert "gev-hier-gpu-precision.toml" in {p.name for p in model_paths()}
    # `evtsync models` lists it, with its family
    assert any(e.path.name == SHIPPED.name and e.family == RANK_FAMILY for e in list_models())
    # asked to read it as a GEV model (`evtsync fit --model rankmodel`), the GEV loader says what it is
    with pytest.raises(ModelSpecError, match="'family'.*rank model's specification"):
        load_spec(SHIPPED)


@pytest.mark.slow  # two small fits, each with its compilation: ~3 min on the loaded shared machine
def test_fit_rank_model_uses_the_given_spec(tmp_path: Path) -> None:
    # a fit records the specification it read, and the sampler settings come from it
    import numpy as np
    import pandas as pd

    from evtsync.evt.rankmodel import fit_rank_model

    rng = np.random.default_rng(0)
    n_coll, k = 150, 4
    long = pd.DataFrame({"value": rng.gumbel(size=n_coll * k), "collective": np.repeat(np.arange(n_coll), k).astype(str),
                         "rank": np.tile(np.arange(k), n_coll).astype(str), "gpu": "G", "precision": "p",
                         "order": np.repeat(np.arange(n_coll), k).astype(float)})
    path = tmp_path / "r.toml"
    path.write_text(GOOD.replace("draws = 200", "draws = 60").replace("tune = 100", "tune = 50"), encoding="utf-8")
    fit = fit_rank_model(long, spec=path, seed=1)
    assert fit.posterior.sizes["draw"] == 60 and fit.posterior.sizes["chain"] == 2
    assert fit.attrs["model_spec"] == str(path) and fit.attrs["target_accept"] == 0.9
    assert fit.attrs["model_spec_text"] == path.read_text(encoding="utf-8")
    fit = fit_rank_model(long, spec=path, seed=1, draws=40, chains=1)  # keywords override the file
    assert fit.posterior.sizes["draw"] == 40 and fit.posterior.sizes["chain"] == 1
