"""The Bayesian GEV comparators are opt-in (issue 48): `evtsync run` fits them only with
``--comparators bayes-gev`` (or ``--model``); by default each of their stages is listed as not run,
with the reason, and every downstream output still comes from the rank model, with the cheap
comparators (the GEV MLE, the paper's estimator, ranktail) labelled beside it."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pandas as pd
import pytest

from evtsync.core.defaults import BAYES_GEV, OPT_IN_REASON
from evtsync.core.errors import InputError
from evtsync.pipeline import RunOptions, build_stages, run_pipeline
from evtsync.pipeline.engine import NotApplicable, Run
from evtsync.runfolder.layout import next_step, read_manifest

REPO = Path(__file__).resolve().parents[2]
TINY = {"iterations": 4, "layers": 1}
#: the tiny demo with few draws (the rank model takes the run's --draws/--tune/--chains too)
FAST = {"draws": 60, "tune": 60, "chains": 2, "demo_overrides": TINY}


def shipped_models() -> set[str]:
    """The GEV models a run fits, read off the models folder: a model of raw block maxima is left out, and
    so is the rank model's specification (family "rankmodel": its own stage, not a GEV fit)."""
    specs = {p.stem: tomllib.loads(p.read_text(encoding="utf-8")) for p in (REPO / "models").glob("*.toml")}
    return {name for name, spec in specs.items()
            if spec.get("data", {}).get("scale") != "raw" and spec.get("family") != "rankmodel"}


def test_unknown_comparator_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"--comparators bayes: expected one of bayes-gev"):
        RunOptions(out=tmp_path / "r", comparators=["bayes"]).check()


def test_cli_refuses_unknown_comparator_without_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    from evtsync.cli import main

    with pytest.raises(SystemExit) as info:
        main(["run", "--comparators", "gev"])
    assert info.value.code != 0
    err = capsys.readouterr().err
    assert "invalid choice 'gev'" in err and "Traceback" not in err


def test_which_runs_ask_for_the_bayesian_fits() -> None:
    assert not RunOptions().bayes_gev                              # the default: the rank model alone
    assert RunOptions(comparators=[BAYES_GEV]).bayes_gev
    assert RunOptions(models=["gumbel"]).bayes_gev                  # naming models asks for them


def test_default_stages_list_the_fits_as_opt_in(tmp_path: Path) -> None:
    stages = {s.name: s for s in build_stages(Run(RunOptions(out=tmp_path / "r")))}
    fits = {n for n in stages if n.startswith("fit-")}
    assert fits == {f"fit-{m}" for m in shipped_models()} and len(fits) == 6
    for name in fits:  # listed, never silently absent; no job, so no pool process is started for them
        assert stages[name].job is None and not stages[name].shareable
        with pytest.raises(NotApplicable, match=r"not run \(opt-in: --comparators bayes-gev\)"):
            stages[name].func(Run(RunOptions(out=tmp_path / "r")))
    assert "compare" in stages and "rankmodel" in stages
    opted = {s.name: s for s in build_stages(Run(RunOptions(out=tmp_path / "r", comparators=[BAYES_GEV])))}
    assert all(opted[n].job is not None for n in fits)


def test_next_step_names_the_option() -> None:
    assert "--comparators bayes-gev" in next_step("fit-gev", OPT_IN_REASON)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory, session_figure_cache: Path) -> tuple[Path, Path, dict, dict]:
    """The tiny demo without the Bayesian comparators, then with one of them (``--model gumbel``),
    both with one result cache and the session's figure cache (tests/conftest.py)."""
    root = tmp_path_factory.mktemp("opt-in")
    cache, figures = root / "cache", str(session_figure_cache)
    plain = run_pipeline(RunOptions(out=root / "plain", result_cache=str(cache), figure_cache=figures, **FAST)).manifest
    bayes = run_pipeline(RunOptions(out=root / "bayes", result_cache=str(cache), models=["gumbel"],
                                    figure_cache=figures, **FAST)).manifest
    return root / "plain", root / "bayes", plain, bayes


@pytest.mark.slow
def test_default_run_answers_without_the_bayesian_fits(two_runs: tuple[Path, Path, dict, dict]) -> None:
    out, _, manifest, _ = two_runs
    stages = manifest["stages"]
    for name in [n for n in stages if n.startswith("fit-")] + ["compare"]:
        assert stages[name]["status"] == "not_applicable" and stages[name]["reason"] == OPT_IN_REASON, name
    assert not [p for p in (out / "fits").glob("*.nc") if not p.stem.startswith("rankmodel")]
    for name in ("mle", "rankmodel", "prediction", "predicted-vs-measured", "summary", "report"):
        assert stages[name]["status"] == "done", (name, stages[name].get("reason"))
    tau = pd.read_parquet(out / "tables" / "tau.parquet")
    # the headline rows are the rank model's, or the centred fallback of the GEV MLE of y, labelled
    head = tau[tau["default_estimate"].astype(bool)]
    assert set(head["estimator"]) <= {"rankmodel", "centred"} and "rankmodel" in set(head["estimator"])
    fallback = head[head["estimator"] == "centred"]
    assert (fallback["model"] == "mle-gev").all() and fallback["estimator_note"].str.contains("mle-gev").all()
    # the cheap comparators, labelled; no row of a Bayesian GEV model
    others = tau[~tau["default_estimate"].astype(bool)]
    assert {"paper", "ranktail"} <= set(others["estimator"])
    assert not set(tau["model"]) & shipped_models()
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    assert summary["comparators"] == {"mle": "ran", "paper": "ran", "ranktail": "ran", BAYES_GEV: OPT_IN_REASON}
    assert summary["estimator"] and all(r.get("tau_mean_us") is not None for r in summary["rows"])
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "Not computed: the Bayesian GEV fits of block maxima: not run (opt-in: --comparators bayes-gev)" in report


@pytest.mark.slow
def test_the_two_modes_never_share_a_prediction(two_runs: tuple[Path, Path, dict, dict]) -> None:
    plain, bayes, _, manifest = two_runs
    stages = manifest["stages"]
    assert stages["fit-gumbel"]["status"] == "done"
    # the stages both modes compute alike are copied; the predictions, which differ, are computed
    assert stages["zscores"].get("reused_from_cache") and stages["rankmodel"].get("reused_from_cache")
    for name in ("prediction", "predicted-vs-measured"):
        assert stages[name]["status"] == "done" and not stages[name].get("reused_from_cache"), name
    tau = pd.read_parquet(bayes / "tables" / "tau.parquet")
    assert "gumbel" in set(tau["model"])                                # the comparator's own rows
    assert read_manifest(plain)["stages"]["prediction"]["key"] != stages["prediction"]["key"]
    summary = json.loads((bayes / "summary.json").read_text(encoding="utf-8"))
    assert summary["comparators"][BAYES_GEV] == "ran"


@pytest.mark.slow
def test_diff_predict_and_bandwidth_take_a_run_without_the_bayesian_fits(
        two_runs: tuple[Path, Path, dict, dict], capsys: pytest.CaptureFixture[str]) -> None:
    from evtsync.cli import main

    plain, bayes, _, _ = two_runs
    capsys.readouterr()
    assert main(["diff", str(plain), str(bayes)]) == 0
    out = capsys.readouterr().out
    # the fit level compares the two rank models (the default estimator), not skipped for want of a GEV fit
    assert "fit level skipped" not in out and "tau(n): the rankmodel estimator (default) on both sides" in out
    # the tiny run's few draws do not converge: the commands then answer and exit 1, saying so on each row
    rc = main(["predict", str(plain), "--n", "512"])
    out = capsys.readouterr().out
    assert "rankmodel" in out and len([line for line in out.splitlines() if "n=512" in line]) == 6
    assert rc == (1 if "NOT CONVERGED" in out else 0)
    rc = main(["bandwidth", "--fit", str(plain), "--n", "512", "--topology", "full", "--bytes", "256Mi",
               "--alpha-us", "5"])
    out = capsys.readouterr().out
    assert "B*" in out and rc == (1 if "NOT CONVERGED" in out else 0)
    # the centred estimator needs a Bayesian GEV fit: the error says how to get one
    assert main(["predict", str(plain), "--n", "512", "--estimator", "centred"]) != 0
    assert "--comparators bayes-gev" in capsys.readouterr().err
