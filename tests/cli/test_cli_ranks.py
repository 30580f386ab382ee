"""``evtsync ranks`` (issue 45 item 4) end to end, in process: rank times simulated physically with
NumPy (a shock shared by the ranks of each iteration, one rank persistently +1.5 sd slow, idiosyncratic
normal noise), turned into a z-score table by the package's own blocks step (as the rank model's tests
do: their generator is imported), then the command's printed answer, JSON and written tables checked
against the simulation's truth."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.blocks.zscores import pooled_zscores
from evtsync.cli import main
from tests.evt.test_rankmodel import M, _times

B_US = 10.0  # the simulation's idiosyncratic sd (µs)
SLOW_US = 1.5 * B_US  # rank 3's persistent effect (µs per block)
FAST = ["--draws", "300", "--n", "8", "512", "--seed", "3"]


def _zscores(iters: int, slow: bool, seed: int) -> pd.DataFrame:
    """(iterations, 8 ranks) of block times in µs: shared shock (sd b), rank 3 +1.5 b when ``slow``, noise
    N(0, b²); through `pooled_zscores` (the blocks step) as a z-score table."""
    rng = np.random.default_rng(seed)
    rho = np.zeros(8)
    rho[3] = 1.5 if slow else 0.0
    times = 1000.0 + B_US * (rng.standard_normal(iters)[:, None] + rho[None, :] + rng.standard_normal((iters, 8)))
    table, _ = pooled_zscores(_times(np.stack([times[:, 0::2], times[:, 1::2]], axis=1)), m=M)
    return table


def _no_nan(word: str) -> None:
    raise AssertionError(f"--json printed {word}: not strict JSON")


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A hand-made run folder holding the z-score table (its manifest lists no outputs), given to `ranks`
    with --json and -o outside it; the folder's files before and after."""
    root = tmp_path_factory.mktemp("ranks")
    run = root / "run"
    (run / "tables").mkdir(parents=True)
    _zscores(400, slow=True, seed=0).to_parquet(run / "tables" / "zscores.parquet")
    (run / "manifest.json").write_text(json.dumps({"format": "evtsync-run/1"}))
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = main(["ranks", str(run), *FAST, "--json", "-o", str(root / "out")])
    return {"rc": rc, "json": json.loads(out.getvalue(), parse_constant=_no_nan), "out": root / "out", "run": run, "before": before}


def test_the_slow_rank_is_named_with_an_interval_that_holds_the_truth(slow_run: dict) -> None:
    assert slow_run["rc"] == 0
    res = slow_run["json"]
    effects = pd.DataFrame(res["rank_effects"])
    slow = effects[effects["slow"]]
    assert list(slow["rank"]) == ["|0|3"]  # workload|pg|rank: the simulated slow node, and only it
    row = slow.iloc[0]
    assert row["vs_others_lo_us"] <= SLOW_US <= row["vs_others_hi_us"]  # µs per block against the other ranks
    text = res["slow_rank_text"]["H100|bf16"]
    assert text.startswith("rank 3 (PG 0) of H100 bf16 is persistently slow") and "90% interval" in text
    assert "without it tau(512) would be" in text
    # removing the slow rank lowers tau(512) (a fleet without the bad node)
    assert row["tau_without_median_sd"] < row["tau_with_median_sd"]
    # the per-iteration shock (variance b² of a total ~b²(1 + 1 + 1.5²·7/64)) is found shared
    shares = res["variance_shares"][0]
    assert 0.3 < shares["share_shared"] < 0.6 and shares["share_rank"] > 0.05
    assert {r["n"] for r in res["tau"]} == {8, 512}
    assert all(r["point"] == "posterior median" and r["fleet_assumption"] == "a job of n ranks from the same fleet"
               for r in res["tau"])
    assert res["convergence"] and isinstance(res["converged"], bool)
    assert res["xi"][0]["verdict"] in ("light tail (Gumbel domain)", "heavy (Fréchet)", "bounded (Weibull)")


def test_out_writes_the_fit_and_tables_and_the_run_folder_is_untouched(slow_run: dict) -> None:
    from evtsync.evt.rankmodel import load_rank_model

    out: Path = slow_run["out"]
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["rankmodel.nc", "rankmodel.nc.sig", "rank_effects.parquet", "variance_shares.parquet", "xi.parquet",
         "tau.parquet"])  # .sig: the fit's signature file (core.trust.sign_file, docs/security.md)
    effects = pd.read_parquet(out / "rank_effects.parquet")
    assert len(effects) == 8 and effects["slow"].sum() == 1  # 8 simulated ranks, one slow
    tau = pd.read_parquet(out / "tau.parquet")
    assert list(tau["n"]) == [8, 512] and (tau["tau_lo_us"] <= tau["tau_median_us"]).all()
    assert load_rank_model(out / "rankmodel.nc").cells["n_ranks"].tolist() == [8]
    run: Path = slow_run["run"]
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == slow_run["before"]


def test_iid_ranks_name_no_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "z.parquet"
    _zscores(300, slow=False, seed=5).to_parquet(path)
    assert main(["ranks", str(path), *FAST, "--fleet", "these-plus-typical"]) == 0
    text = capsys.readouterr().out
    assert "H100|bf16: no rank is credibly slow" in text and "persistently slow:" not in text
    assert "rule: a rank is named persistently slow when" in text
    assert "tau(n) for these ranks plus typical ones from the same fleet (posterior median [90% interval]" in text
    assert "Convergence:" in text


@pytest.mark.parametrize("case", ["missing", "other-table", "folder", "suffix"])
def test_bad_input_is_one_line_and_exit_2(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "input.parquet"
    if case == "other-table":  # a table of another kind: no u / rank columns
        pd.DataFrame({"z": [1.0, 2.0], "gpu": "H100", "precision": "bf16"}).to_parquet(path)
    elif case == "folder":
        path = tmp_path
    elif case == "suffix":
        path = tmp_path / "trace.json"
        path.write_text("{}")
    assert main(["ranks", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("evtsync: error: ") and "\n" not in err and "Traceback" not in err
    assert str(path) in err


def test_out_inside_a_run_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"format": "evtsync-run/1"}))
    assert main(["ranks", str(tmp_path / "missing.parquet"), "-o", str(tmp_path / "ranks")]) == 2
    err = capsys.readouterr().err
    assert "run folder" in err and not (tmp_path / "ranks").exists()
