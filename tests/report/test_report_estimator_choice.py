"""``evtsync report --estimator``: the report of a run folder shows the asked estimator's tau(n), B*,
what-if and predicted-vs-measured rows where the run stored them, labelled; the run's own estimator
(its manifest) by default; a clear refusal when the run has no row of the asked one.

The run folder is made by hand here, as a run lays it out (tau.parquet with every estimator and
``default_estimate``; B*, what-if and predicted vs measured by the run's estimator only: ranktail
for H100, the main model's centred fallback for B200). Every number the tests expect is read from
those parquet files with pandas and compared with the number the report prints.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from evtsync.core.errors import InputError
from evtsync.report.context import ReportContext
from evtsync.report.estimator import check_report_estimator, run_estimator
from evtsync.report.markdown import Alert, Skipped, Table
from evtsync.report.sections import prediction as prediction_sec
from evtsync.report.sections import pvm as pvm_sec
from evtsync.report.sections import whatif as whatif_sec

MAIN = "gev-hier"
NS = (4, 8, 64, 512, 4096)
FALLBACK = "fallback to the centred estimator of gev-hier: B200 not measured"
NUMBER = re.compile(r"-?[\d,]*\.?\d+")


def _tau_rows(model: str, estimator: str, gpu: str, scale: float, default: bool, note: str = "") -> list[dict]:
    """tau(n) rows of one model × cell: mean = scale·log2(2n), interval ±10% (distinct per estimator)."""
    import math

    return [{"model": model, "estimator": estimator, "gpu": gpu, "precision": "bf16", "n": n, "b_us": 2.0,
             "tau_mean_us": scale * math.log2(2 * n), "tau_lo_us": 0.9 * scale * math.log2(2 * n),
             "tau_hi_us": 1.1 * scale * math.log2(2 * n), "converged": True, "default_estimate": default,
             "estimator_note": note} for n in NS]


def _bstar_rows(estimator: str, gpu: str, value: float, note: str = "") -> list[dict]:
    return [{"model": "ranktail" if estimator == "ranktail" else MAIN, "estimator": estimator, "topology": topo,
             "gpu": gpu, "precision": "bf16", "n": n, "bstar_mean_gbps": value / n, "bstar_lo_gbps": 0.8 * value / n,
             "bstar_hi_gbps": 1.2 * value / n, "bstar_hockney_gbps": 9000.0 / n, "reduction_mean": 0.5,
             "reduction_lo": 0.4, "reduction_hi": 0.6, "eps": -0.5, "level": 0.9, "converged": True,
             "estimator_note": note}
            for topo in ("full", "ring") for n in NS]


def _pvm_rows() -> list[dict]:
    rows = []
    for workload, gpu, estimator, note, predicted in (("wh", "H100", "ranktail", "", 13.7),
                                                      ("wb", "B200", "centred", FALLBACK, 21.9)):
        for n, k in ((4, 1), (16, 4)):
            measured = 14.0 if gpu == "H100" else 20.0
            rows.append({"workload": workload, "gpu": gpu, "precision": "bf16", "n": n, "k": k, "model": MAIN,
                         "estimator": estimator, "estimator_note": note, "n_collectives": 50,
                         "measured_mean_us": measured * k, "measured_lo_us": 0.95 * measured * k,
                         "measured_hi_us": 1.05 * measured * k, "predicted_mean_us": predicted * k,
                         "predicted_lo_us": 0.9 * predicted * k, "predicted_hi_us": 1.1 * predicted * k,
                         "ratio": predicted / measured, "inside_interval": True, "within_agreement": True,
                         "beyond_m": k > 1})
    return rows


def _whatif_rows() -> list[dict]:
    return [{"preset": p, "gpu": gpu, "n": n, "flops_factor": 1.0, "estimator": e, "estimator_note": note,
             "model": "ranktail" if e == "ranktail" else MAIN, "prediction_kind": kind, "tau_mean_us": t,
             "tau_lo_us": 0.9 * t, "tau_hi_us": 1.1 * t, "nvlink_gbps": 900.0, "tflops": 989.0,
             "tflops_source": "paper", "source": "Table 1", "converged": True}
            for p, gpu, n, e, note, kind, t in (("H100-8", "H100", 8, "ranktail", "", "cell", 31.7),
                                                ("B200-72", "B200", 72, "centred", FALLBACK, "population", 57.3))]


@pytest.fixture
def hand_run(tmp_path: Path) -> Path:
    """A run folder as `evtsync run` writes it, with its estimators' rows (see the module docstring)."""
    run = tmp_path / "run"
    (run / "tables").mkdir(parents=True)
    tau = pd.DataFrame(
        _tau_rows("ranktail", "ranktail", "H100", 3.1, True)                    # the default's measured cell
        + _tau_rows(MAIN, "centred", "B200", 4.3, True, FALLBACK)              # its labelled fallback
        + _tau_rows(MAIN, "centred", "H100", 2.7, False)                       # the main model's own rows
        + _tau_rows("gumbel", "centred", "H100", 2.2, False)                   # another GEV model
        + _tau_rows("mle-gev", "paper", "H100", 2.45, False))                  # the paper's estimator
    tables = {"tau": tau, "bstar": pd.DataFrame(_bstar_rows("ranktail", "H100", 700.0)
                                                + _bstar_rows("centred", "B200", 530.0, FALLBACK)),
              "predicted_vs_measured": pd.DataFrame(_pvm_rows()), "whatif": pd.DataFrame(_whatif_rows())}
    for name, frame in tables.items():
        frame.to_parquet(run / "tables" / f"{name}.parquet")
    manifest = {"format": "evtsync-run/1", "options": {"m": 4}, "updated": "2026-12-05T04:00:00+00:00",
                "stages": {"prediction": {"status": "done", "summary": {
                               "main_model": MAIN, "eps": -0.5, "alpha_us": 5.0, "bytes": 2**28,
                               "bytes_source": "--bytes", "estimator": {"estimator": "ranktail", "explicit": False},
                               "estimator_note": FALLBACK,
                               "whatif": {"b_source": "hand", "b_us": 2.0, "not_predicted": []}}},
                           "predicted-vs-measured": {"status": "done", "summary": {"selection": "hand rows"}}}}
    (run / "manifest.json").write_text(json.dumps(manifest))
    return run


def _numbers(text: str) -> list[float]:
    """The numbers of a printed value "mean [lo, hi]"."""
    return [float(v.replace(",", "")) for v in NUMBER.findall(str(text))]


def _context(run: Path, tmp_path: Path, estimator: str | None) -> ReportContext:
    return ReportContext(run, tmp_path / "out", json.loads((run / "manifest.json").read_text()), estimator=estimator)


def _tables(sections: list) -> list[Table]:
    return [i for s in sections for i in s.items if isinstance(i, Table)]


def _assert_tau_table_shows(table: Table, rows: pd.DataFrame) -> None:
    """Every n column of the printed tau table equals mean [lo, hi] of ``rows`` (one row per cell)."""
    assert len(table.frame) == rows[["model", "gpu"]].drop_duplicates().shape[0]
    for _, printed in table.frame.iterrows():
        truth = rows[(rows["model"] == printed["model"]) & (rows["gpu"] == printed["gpu"])]
        for n in (8, 64, 512, 4096):
            r = truth[truth["n"] == n].iloc[0]
            assert _numbers(printed[f"n={n} µs [90% interval]"]) == pytest.approx(
                [r["tau_mean_us"], r["tau_lo_us"], r["tau_hi_us"]], rel=6e-3)


@pytest.mark.parametrize("estimator, model", [("paper", "mle-gev"), ("centred", MAIN), ("ranktail", "ranktail")])
def test_headline_tau_is_the_asked_estimators_rows(hand_run: Path, tmp_path: Path, estimator: str, model: str) -> None:
    """--estimator E: the headline tau(n) table holds E's rows of tau.parquet (centred: the main model's,
    not gumbel's), read back with pandas, number for number; its caption names E."""
    tau = pd.read_parquet(hand_run / "tables" / "tau.parquet")
    sections = prediction_sec.build(_context(hand_run, tmp_path, estimator))
    headline = _tables(sections)[0]
    truth = tau[(tau["estimator"] == estimator) & (tau["model"] == model)]
    _assert_tau_table_shows(headline, truth)
    assert set(headline.frame["estimator"]) == {estimator} and f"by the estimator {estimator}" in headline.caption
    assert "fallback" not in headline.frame or set(headline.frame["fallback"]) <= {""}  # its own rows, no fallback
    if estimator != "ranktail":
        assert "asked with --estimator; the run used ranktail" in headline.caption


def test_default_is_the_runs_estimator_with_its_labelled_fallback(hand_run: Path, tmp_path: Path) -> None:
    """No --estimator: the run's (manifest: ranktail), fallback rows included and labelled."""
    manifest = json.loads((hand_run / "manifest.json").read_text())
    assert run_estimator(manifest) == "ranktail"
    assert run_estimator({"stages": {"prediction": {"summary": {}}}}) == "centred"  # before estimators were named
    tau = pd.read_parquet(hand_run / "tables" / "tau.parquet")
    headline = _tables(prediction_sec.build(_context(hand_run, tmp_path, None)))[0]
    _assert_tau_table_shows(headline, tau[tau["default_estimate"]])
    assert dict(zip(headline.frame["gpu"], headline.frame["fallback"], strict=True)) == {"H100": "", "B200": "yes"}


def test_bstar_shows_only_the_rows_the_asked_estimator_made(hand_run: Path, tmp_path: Path) -> None:
    """B* is stored by the run's estimator only: --estimator centred shows its B200 (fallback) rows and
    says how many ranktail rows it left out; --estimator paper has none: skipped, saying why."""
    bstar = pd.read_parquet(hand_run / "tables" / "bstar.parquet")
    sections = prediction_sec.build(_context(hand_run, tmp_path, "centred"))
    b_section = next(s for s in sections if s.anchor == "bstar")
    alerts = [str(i.text) for i in b_section.items if isinstance(i, Alert)]
    left = int((bstar["estimator"] != "centred").sum())
    assert any(f"{left} row(s) by ranktail left out" in a for a in alerts)
    shown = [t for t in b_section.items if isinstance(t, Table)][1]  # B* in GB/s
    assert set(shown.frame["GPU"]) == {"B200"}
    truth = bstar[(bstar["estimator"] == "centred") & (bstar["topology"] == "full")].set_index("n")
    full = shown.frame[shown.frame["topology"] == "full"].iloc[0]
    for n in (8, 512):
        assert _numbers(full[f"n = {n}"]) == pytest.approx(
            truth.loc[n, ["bstar_mean_gbps", "bstar_lo_gbps", "bstar_hi_gbps"]].tolist(), rel=6e-3)
    paper = prediction_sec.build(_context(hand_run, tmp_path, "paper"))
    skipped = [i for s in paper if s.anchor == "bstar" for i in s.items]
    assert len(skipped) == 1 and isinstance(skipped[0], Skipped)
    assert "No B* by the paper estimator" in skipped[0].text and "--estimator paper" in skipped[0].text


def test_pvm_and_whatif_follow_the_asked_estimator(hand_run: Path, tmp_path: Path) -> None:
    """Predicted vs measured and what-if: the centred rows only (B200's), labelled "centred" (not
    "fallback": asked by name), the ranktail rows left out and counted; ranktail asked: H100's."""
    pvm = pd.read_parquet(hand_run / "tables" / "predicted_vs_measured.parquet")
    for estimator, gpu in (("centred", "B200"), ("ranktail", "H100")):
        ctx = _context(hand_run, tmp_path, estimator)
        beyond = next(t for t in _tables(pvm_sec.build(ctx)) if "k = n/m" in t.frame)
        truth = pvm[(pvm["estimator"] == estimator) & pvm["beyond_m"]].iloc[0]
        # the hand run's estimator, ranktail, is no longer the default (the rank model is: issue 45)
        assert list(beyond.frame["GPU"]) == [gpu] and list(beyond.frame["estimator"]) == [
            "centred" if estimator == "centred" else "ranktail"]
        assert _numbers(beyond.frame["predicted µs [90% CrI]"].iloc[0]) == pytest.approx(
            [truth["predicted_mean_us"], truth["predicted_lo_us"], truth["predicted_hi_us"]], rel=6e-3)
        assert beyond.frame["predicted / measured"].iloc[0] == pytest.approx(truth["ratio"], abs=1e-3)
        presets = pd.read_parquet(hand_run / "tables" / "whatif.parquet")
        table = _tables(whatif_sec.build(ctx))[0]
        row = presets[presets["estimator"] == estimator].iloc[0]
        assert list(table.frame["GPU"]) == [gpu]
        assert _numbers(table.frame["tau(n) µs [90% CrI]"].iloc[0]) == pytest.approx(
            [row["tau_mean_us"], row["tau_lo_us"], row["tau_hi_us"]], rel=6e-3)
        assert "fallback" not in table.frame["estimator"].iloc[0]
    paper = pvm_sec.build(_context(hand_run, tmp_path, "paper"))
    assert isinstance(paper[0].items[0], Skipped) and "No predicted vs measured by the paper" in paper[0].items[0].text


def test_a_run_without_rows_of_the_asked_estimator_is_refused(hand_run: Path, tmp_path: Path) -> None:
    """tau.parquet without paper rows: --estimator paper is refused, naming what the table holds."""
    tau = pd.read_parquet(hand_run / "tables" / "tau.parquet")
    tau[tau["estimator"] != "paper"].to_parquet(hand_run / "tables" / "tau.parquet")
    manifest = json.loads((hand_run / "manifest.json").read_text())
    with pytest.raises(InputError, match=r"no tau\(n\) row of the paper estimator.*holds centred, ranktail"):
        check_report_estimator(hand_run, manifest, "paper")
    check_report_estimator(hand_run, manifest, "centred")  # present: no error
    (hand_run / "tables" / "tau.parquet").unlink()
    with pytest.raises(InputError, match="no tables/tau.parquet"):
        check_report_estimator(hand_run, manifest, "ranktail")


def test_cli_report_estimator(hand_run: Path, tmp_path: Path) -> None:
    """The command end to end: --estimator paper writes a report whose summary shows the paper's
    tau(n) at n = 512 (from tau.parquet); a run lacking paper rows exits non-zero, no traceback."""
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, "-m", "evtsync", "report", str(hand_run), "--out", str(out),
                           "--estimator", "paper", "-j", "1", "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["estimator"] == "paper" and doc["estimator_asked"] is True
    md = (out / "report.md").read_text()
    tau = pd.read_parquet(hand_run / "tables" / "tau.parquet")
    r = tau[(tau["estimator"] == "paper") & (tau["n"] == 512)].iloc[0]
    lines = [line for line in md.splitlines() if line.startswith("|") and "mle-gev" in line]
    assert len(lines) == 1  # the headline row; the summary table is by the run's estimator
    numbers = _numbers(lines[0].split("mle-gev", 1)[1])
    triples = [numbers[i:i + 3] for i in range(len(numbers) - 2)]
    assert any(t == pytest.approx([r["tau_mean_us"], r["tau_lo_us"], r["tau_hi_us"]], rel=6e-3) for t in triples)
    assert "by the estimator paper (asked with --estimator; the run used ranktail; point: posterior mean)" in md
    tau[tau["estimator"] != "paper"].to_parquet(hand_run / "tables" / "tau.parquet")
    proc = subprocess.run([sys.executable, "-m", "evtsync", "report", str(hand_run), "--out", str(tmp_path / "r2"),
                           "--estimator", "paper", "-j", "1"], capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "--estimator paper" in proc.stderr and "no tau(n) row of the paper estimator" in proc.stderr
    assert not (tmp_path / "r2" / "report.html").exists()
