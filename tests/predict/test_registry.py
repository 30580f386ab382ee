"""One home for the estimators of tau(n) (issue 45, item 5): the registry
(:mod:`evtsync.predict.registry`) and a scan of the package source that fails when the code
branches on an estimator's name again (at most 2 comparisons of a name to a literal)."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from evtsync.core.defaults import DEFAULT_ESTIMATOR, ESTIMATOR_NAMES
from evtsync.core.errors import InputError
from evtsync.evt.fit import tree_from_draws
from evtsync.predict import registry

PACKAGE = Path(__file__).resolve().parents[2] / "evtsync"
#: The done-when of issue 45: at most this many places compare an estimator's name to a literal.
MOST_NAME_BRANCHES = 2
EULER = 0.5772156649015329


def _names_in(node: ast.AST) -> set[str]:
    """The estimator names a literal operand holds (a string, or a tuple/list/set of strings)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value} & set(ESTIMATOR_NAMES)
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return set().union(*(_names_in(e) for e in node.elts)) if node.elts else set()
    return set()


def name_branches(root: Path = PACKAGE) -> list[str]:
    """Every place in the package that compares something to an estimator's name written as a
    literal (``x == "ranktail"``, ``e not in (None, "paper")``), or that keys a dict literal by two
    or more names outside the registry (a wording table): "path:line: source". A comparison of a
    sampler *parametrization* ("centred"/"noncentred" in evtsync.evt.model) is another concept and
    is not counted."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "registry.py" and path.parent.name == "predict":
            continue
        text = path.read_text(encoding="utf-8")
        if not any(f'"{n}"' in text or f"'{n}'" in text for n in ESTIMATOR_NAMES):
            continue  # no name written as a literal: nothing to compare with
        for node in ast.walk(ast.parse(text)):
            hit = False
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                named = [o for o in operands if _names_in(o)]
                others = " ".join(ast.unparse(o) for o in operands if o not in named) if named else ""
                hit = bool(named) and "parametrization" not in others
            elif isinstance(node, ast.Dict):
                hit = sum(bool(_names_in(k)) for k in node.keys if k is not None) >= 2
            if hit:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}: {ast.unparse(node)[:120]}")
    return found


def test_at_most_two_places_compare_an_estimator_name_to_a_literal() -> None:
    branches = name_branches()
    assert len(branches) <= MOST_NAME_BRANCHES, "branches on an estimator's name (use evtsync.predict.registry):\n" + \
        "\n".join(branches)


def test_the_scan_finds_a_name_branch(tmp_path: Path) -> None:
    """The scan is not blind: a planted branch, a membership test and a wording dict are found; a
    parametrization comparison and a plain string are not."""
    pkg = tmp_path / "evtsync"
    pkg.mkdir()
    (pkg / "m.py").write_text(
        "def f(e, parametrization):\n"
        "    if e == 'ranktail':\n        return 1\n"
        "    if e not in (None, 'paper'):\n        return 2\n"
        "    if parametrization['mu'] == 'centred':\n        return 3\n"
        "    words = {'centred': 'a', 'paper': 'b'}\n"
        "    return 'ranktail: the default'\n", encoding="utf-8")
    found = name_branches(pkg)
    assert [line.split(":")[1] for line in found] == ["2", "4", "8"]


def test_the_registry_holds_every_estimator_with_what_it_says() -> None:
    assert registry.names() == ESTIMATOR_NAMES and registry.default().name == DEFAULT_ESTIMATOR
    for name in registry.names():
        e = registry.get(name)
        assert e.name == name and e.column and e.meaning and e.interval and e.needs and e.refit, name
        assert e.fallback is None or e.fallback in ESTIMATOR_NAMES
        assert registry.of_column(e.column).column == e.column
        # the estimators that share a column (rankmodel and ranktail: u) are told apart by the fit's name
        assert registry.of_fit(SimpleNamespace(name=name), e.column) is e
    assert [e for e in registry.names() if registry.get(e).column == "u"] == ["rankmodel", "ranktail"]
    # the default's fallback is a GEV estimator (no per-rank values needed), and has none itself
    fallback = registry.get(registry.default().fallback)
    assert not fallback.per_rank and fallback.fallback is None
    with pytest.raises(InputError, match="expected one of centred, paper, rankmodel, ranktail"):
        registry.get("bogus")


def test_interval_words_give_each_estimator_its_own() -> None:
    assert registry.interval_words("ranktail") == "GPD grid posterior and Bayesian bootstrap"
    mixed = registry.interval_words(["ranktail", "centred", "ranktail"], ["centred"])
    assert mixed == ("ranktail: GPD grid posterior and Bayesian bootstrap; centred (fallback rows): posterior of "
                     "the GEV model: credible interval")


def test_centred_tau_draws_are_the_gumbel_closed_form() -> None:
    """tau(n) of a Gumbel (xi = 0) fit is b (mu + sigma (gamma + ln(n/m))): the class's draws meet it."""
    cells = pd.DataFrame({"cell": ["H100|bf16", "A100|bf16"], "gpu": ["H100", "A100"], "precision": ["bf16"] * 2})
    shape = (1, 20, 2)
    mu, sigma = np.broadcast_to([0.8, 0.6], shape).copy(), np.broadcast_to([0.5, 0.4], shape).copy()
    tree = tree_from_draws({"mu": mu, "sigma": sigma, "xi": np.zeros(shape)}, cells, np.linspace(0, 2, 40),
                           np.repeat([0, 1], 20))
    from evtsync.evt.bayesfit import as_fit

    draws = registry.get("centred").tau_draws(as_fit(tree), [8, 64], np.array([20.0, 5.0]), [1, 0], 4)
    assert draws.shape == (20, 2, 2)
    for j, n in enumerate((8, 64)):
        assert draws[0, 0, j] == pytest.approx(20.0 * (0.6 + 0.4 * (EULER + np.log(n / 4))))
        assert draws[0, 1, j] == pytest.approx(5.0 * (0.8 + 0.5 * (EULER + np.log(n / 4))))


def test_a_run_folder_without_what_an_estimator_needs_is_refused_by_name(tmp_path: Path) -> None:
    from evtsync.runfolder.layout import run_folder

    (tmp_path / "tables").mkdir()
    with pytest.raises(InputError, match=r"tables/mle\.parquet"):
        registry.get("paper").load_run(run_folder(tmp_path, {}))
    with pytest.raises(InputError, match=r"tables/zscores\.parquet"):
        registry.get("ranktail").load_run(run_folder(tmp_path, {}))
    with pytest.raises(InputError, match=r"fits/rankmodel\.nc.*tables/zscores\.parquet"):
        registry.get("rankmodel").load_run(run_folder(tmp_path, {}))
    # a fit file the run's manifest does not list is never read as the run's fit
    (tmp_path / "fits").mkdir()
    (tmp_path / "fits" / "rankmodel.nc").write_bytes(b"not written by evtsync run")
    with pytest.raises(InputError, match=r"neither a rank-model fit"):
        registry.get("rankmodel").load_run(run_folder(tmp_path, {}))
    assert registry.get("centred").load_run(run_folder(tmp_path, {})) is None  # no Bayesian fit: no main model
    with pytest.raises(InputError, match="needs a GEV fit of y"):
        registry.get("centred").load_table(pd.DataFrame({"u": [0.0]}))


def test_interval_words_follow_the_fit_behind_the_rows() -> None:
    # a run without the Bayesian GEV comparators falls back to the GEV MLE of y (model "mle-gev"): its
    # rows' intervals are an MLE's approximate ones, never called a posterior's credible interval
    words = registry.interval_words(["rankmodel", "rankmodel", "centred"], ["centred"],
                                    ["rankmodel", "rankmodel", "mle-gev"])
    assert words == ("rankmodel: posterior of the rank model (nutpie, 4 chains): credible interval; "
                     "centred (fallback rows): GEV MLE of y per cell: approximate confidence interval "
                     "(parameter draws from the MLE's asymptotic normal)")
    assert registry.interval_words("centred", (), ["gev-hier-gpu-precision"]) == \
        "posterior of the GEV model: credible interval"
    assert "credible" not in registry.interval_words(["centred"], (), ["mle-gev"])
    # without the model column the estimator's own wording (tables written before it)
    assert registry.interval_words(["centred"]) == "posterior of the GEV model: credible interval"
