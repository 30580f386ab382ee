"""The report's first screen (issue 49): four answers in order — the tax now, who straggles and why,
the gain without stragglers, what a bigger domain pays — each one sentence with its number and
interval, then the table (one card per GPU × precision on a narrow screen), then LOO and the methods.

A small run folder written by hand (tests/report/test_report_summary.py's ``hand_run``) with root
causes whose shares are counted by hand here; the browser check of the real demo is
tests/report/test_report_browser.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.report.context import ReportContext
from evtsync.report.markdown import Answer, Cards, Section, Table, render_markdown
from evtsync.report.render import render_html
from evtsync.report.sections import summary as summary_sec
from evtsync.runfolder.summary import summary_numbers
from tests._lazy import lazy_module
from tests.report.test_report_summary import _write, hand_run  # noqa: F401 - the fixture

stats = lazy_module("scipy.stats")  # imported on first use, not at collection (issue 48)

ORDER = ["tax", "who", "without", "bigger"]


def _with_roots(run: Path) -> None:
    """Root causes by hand: in w-fp32 (the costlier cell) 20 collectives of tax 10 routed to rank 0's
    gemm, 20 of tax 30 to rank 1's gemm, 10 of tax 5 to rank 2's memcpy; in w-bf16 every one (tax 7) to
    rank 3: 40 to its gemm, 10 to its memcpy."""
    att = pd.read_parquet(run / "tables" / "attribution_collectives.parquet")
    rank = np.where(att["index"] < 20, 0, np.where(att["index"] < 40, 1, 2))
    tax = np.where(rank == 0, 10.0, np.where(rank == 1, 30.0, 5.0))
    fp32 = att["workload"] == "w-fp32"
    att = att.assign(root_rank=np.where(fp32, rank, 3), tau_max_us=np.where(fp32, tax, 7.0),
                     root_cause=np.where(rank == 2, "Memcpy DtoH", "sm90_xmma_gemm_bf16"),
                     root_category=np.where(rank == 2, "memcpy", "gemm"))
    _write(run, "attribution_collectives", att)


def test_root_causes_and_mean_tax_against_a_hand_count(hand_run: tuple[Path, dict]) -> None:  # noqa: F811
    run, manifest = hand_run
    _with_roots(run)
    numbers, _ = summary_numbers(run, manifest)
    fp32 = numbers.set_index("precision").loc["fp32"]
    # statuses 'ok' (index < 50) only: 20·10 + 20·30 + 10·5 = 850 µs walked to a root
    assert fp32["root_tax_us"] == pytest.approx(850.0)
    assert (fp32["root1_rank"], fp32["root1_share"]) == (1, pytest.approx(600 / 850))
    assert (fp32["root2_rank"], fp32["root2_share"]) == (0, pytest.approx(200 / 850))
    assert fp32["n_root_causes"] == 3
    assert (fp32["root_top_category"], fp32["root_top_category_share"]) == ("gemm", pytest.approx(800 / 850))
    bf16 = numbers.set_index("precision").loc["bf16"]
    assert (bf16["root1_rank"], bf16["root1_cause"], bf16["root1_share"]) == (3, "sm90_xmma_gemm_bf16", 0.8)
    assert (bf16["root2_rank"], bf16["root2_cause"], bf16["root2_share"]) == (3, "Memcpy DtoH", pytest.approx(0.2))
    # the mean tax per collective with its Student-t 90% interval, from SciPy on the raw table
    coll = pd.read_parquet(run / "tables" / "tax_collectives.parquet")
    x = coll.query("workload == 'w-fp32' and valid and pg == '1'")["tau_max_us"].to_numpy()
    lo, hi = stats.t.interval(0.9, x.size - 1, loc=x.mean(), scale=stats.sem(x))
    assert (fp32["tax_mean_us"], fp32["tax_mean_lo_us"], fp32["tax_mean_hi_us"]) == (
        pytest.approx(x.mean()), pytest.approx(lo), pytest.approx(hi))
    assert fp32["tax_total_ms"] == pytest.approx(x.sum() / 1000)


def test_four_answers_in_order_before_the_table_then_loo(hand_run: tuple[Path, dict], tmp_path: Path) -> None:  # noqa: F811
    run, manifest = hand_run
    _with_roots(run)
    [summary] = summary_sec.build(ReportContext(run, tmp_path / "out", manifest))
    answers = [i for i in summary.items if isinstance(i, Answer)]
    assert [a.key for a in answers] == ORDER
    kinds = [type(i).__name__ for i in summary.items]
    assert kinds.index("Answer") < kinds.index("Table") < kinds.index("Cards")
    loo_at = next(k for k, i in enumerate(summary.items) if "LOO" in str(getattr(i, "text", i)))
    assert loo_at > kinds.index("Cards")
    tax, who, without, bigger = (a.text for a in answers)
    numbers, _ = summary_numbers(run, manifest)
    fp32 = numbers.set_index("precision").loc["fp32"]      # the costlier cell (lognormal 8 against 6)
    assert "A100 fp32" in tax and "A100 bf16" in tax and re.search(r"\d \[\d[\d,.]*, \d[\d,.]*\] µs", tax)
    assert "root cause #1 of 3 is rank 1 of w-fp32: gemm sm90_xmma_gemm_bf16 (70.6%)" in who   # 600 / 850
    assert "#2 rank 0 of w-fp32" in who and "(23.5%)" in who                          # 200 / 850
    assert "gemm kernels are the root cause of 94.1%" in who                          # 800 / 850
    assert "persistently" not in who  # the summary estimates no slow rank: nothing said about one
    assert "at most" in without and "not a replay" in without
    assert summary_sec.fmt(fp32["tax_mean_us"]) in without
    assert "n = 512" in bigger and "tau(n)" in bigger and "B*" in bigger and "[" in bigger


def test_step_time_and_slow_rank_are_said_where_the_summary_has_them(hand_run: tuple[Path, dict],  # noqa: F811
                                                                     tmp_path: Path) -> None:
    """The fields another stage may add: summary.json's step times (a counterfactual replay) and a
    summary row's slow_rank_text; the first screen uses them as given."""
    run, manifest = hand_run
    _with_roots(run)
    _write(run, "whatif_stragglers", pd.DataFrame({"rank": [5, 2], "cause": ["GC pause", "gemm"],
                                                   "saving_ms_per_step": [3.5, 1.0], "saving_share": [0.5, 0.1]}))
    numbers, info = summary_numbers(run, manifest)
    records = numbers.to_dict(orient="records")
    for r in records:
        r["slow_rank_text"] = "rank 1 is persistently slow"
    info.update(step_time_ms=100.0, step_time_without_stragglers_ms=80.0)
    ctx = ReportContext(run, tmp_path / "out", manifest)
    answers = {a.key: a.text for a in summary_sec.first_answers(records, info, ctx, "ranktail")}
    assert "80 ms per step instead of 100 ms (−20%" in answers["without"]
    assert "fixing GC pause on rank 5 alone saves 3.5 ms" in answers["without"]
    assert answers["who"].endswith("; rank 1 is persistently slow.")


def test_step_times_of_summary_json_jobs_reach_the_first_screen(hand_run: tuple[Path, dict],  # noqa: F811
                                                                tmp_path: Path) -> None:
    """The replay's step times as the run writes them (summary.json ``jobs``; a cell holding one job
    carries them in its row): one job's are said; with two jobs and no row's own, no single number."""
    run, manifest = hand_run
    numbers, info = summary_numbers(run, manifest)
    records = numbers.to_dict(orient="records")
    ctx = ReportContext(run, tmp_path / "out", manifest)
    info["jobs"] = [{"workload": "w", "step_time_ms": 50.0, "step_time_without_stragglers_ms": 40.0}]
    answers = {a.key: a.text for a in summary_sec.first_answers(records, info, ctx, "ranktail")}
    assert "40 ms per step instead of 50 ms (−20%" in answers["without"]
    info["jobs"] = info["jobs"] * 2
    answers = {a.key: a.text for a in summary_sec.first_answers(records, info, ctx, "ranktail")}
    assert "per step" not in answers["without"] and "not a replay" in answers["without"]
    info["jobs"] = [{"workload": "w", "step_time_ms": 50.0, "step_time_without_stragglers_ms": 50.0}]
    answers = {a.key: a.text for a in summary_sec.first_answers(records, info, ctx, "ranktail")}
    # a replay that finds no straggler op (the demo's ordinary variation) says so, not "−0%"
    assert "−0%" not in answers["without"] and "finds no straggler op" in answers["without"]
    assert "5 robust sd and 5% of the step" in answers["without"] and "50 ms step stays" in answers["without"]
    info["jobs"] = info["jobs"] * 2
    for r in records:  # the row's own step times come first
        r.update(step_time_ms=30.0, step_time_without_stragglers_ms=27.0)
    answers = {a.key: a.text for a in summary_sec.first_answers(records, info, ctx, "ranktail")}
    assert "27 ms per step instead of 30 ms (−10%" in answers["without"]


def test_html_has_answer_ids_cards_per_row_and_markdown_has_no_cards(hand_run: tuple[Path, dict],  # noqa: F811
                                                                     tmp_path: Path) -> None:
    run, manifest = hand_run
    _with_roots(run)
    [summary] = summary_sec.build(ReportContext(run, tmp_path / "out", manifest))
    page = render_html("T", "sub", [summary])
    at = [page.index(f'id="answer-{k}"') for k in ORDER]
    assert at == sorted(at) and at[-1] < page.index('class="table-wrap summary-wrap"') < page.index('class="cards"')
    assert page.count('<div class="card"') == 1 and page.count('<div class="card flag"') == 1  # fp32 not converged
    cards = next(i for i in summary.items if isinstance(i, Cards))
    assert [c.title for c in cards.cards] == ["A100 bf16", "A100 fp32"]
    assert "@media (max-width:600px)" in page and ".cards{display:block}" in page
    md = render_markdown("T", [summary], tmp_path)
    assert md.index("**The tax now:**") < md.index("**A bigger domain:**") < md.index("| GPU × precision")
    assert "card" not in md
    table = md[md.index("| GPU × precision"):].split("\n\n")[0].splitlines()
    assert len(table) == 2 + 2 and all(line.startswith("|") and line.endswith("|") for line in table)  # 2 rows
    assert "rank 1 (w-fp32) gemm, 70.6%" in table[3]            # the two-line cell on one line


def test_a_run_without_attribution_says_why_in_the_who_answer(hand_run: tuple[Path, dict],  # noqa: F811
                                                             tmp_path: Path) -> None:
    run, manifest = hand_run
    (run / "tables" / "attribution_collectives.parquet").unlink()
    manifest["stages"]["attribution"] = {"status": "not_applicable", "reason": "no kernel events"}
    (run / "manifest.json").write_text(json.dumps(manifest))
    [summary] = summary_sec.build(ReportContext(run, tmp_path / "out", manifest))
    who = next(i for i in summary.items if isinstance(i, Answer) and i.key == "who")
    assert "no root causes" in who.text and "no kernel events" in who.text
    assert any(isinstance(i, Table) for i in summary.items)


def test_demo_note_says_the_settings_are_a_real_runs() -> None:
    from evtsync.core.defaults import DEFAULT_CHAINS, DEFAULT_DRAWS, DEFAULT_TUNE

    real = {"sampling": {"draws": DEFAULT_DRAWS, "tune": DEFAULT_TUNE, "chains": DEFAULT_CHAINS}}
    assert "the same as a real run's" in summary_sec.demo_note(real)
    short = summary_sec.demo_note({"sampling": {"draws": 60, "tune": 60, "chains": 2}})
    assert "60 draws" in short and f"a real run's defaults: {DEFAULT_DRAWS}" in short
    assert "rank model" not in short  # a manifest without the rankmodel stage: nothing said of it
    # the headline's settings are the rank model's own, as its stage recorded them
    ranked = summary_sec.demo_note({**real, "stages": {"rankmodel": {"summary": {"draws": 2000, "tune": 1000,
                                                                                 "chains": 4}}}})
    assert "the rank model (the headline) fitted with 2000 draws, 1000 tuning steps, 4 chains" in ranked


def test_sections_keep_plain_text_items() -> None:
    """An Answer is the only new item the renderers meet; a section without answers renders as before."""
    page = render_html("T", "s", [Section("S", ["plain"], anchor="s")])
    assert "<p>plain</p>" in page and 'class="answers"' not in page
