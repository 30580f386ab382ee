"""The report's rendering: number formatting, self-contained HTML, Markdown, single-fit reports."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.core.errors import InputError
from evtsync.report.html import build_report, render_html
from evtsync.report.markdown import Alert, Figure, Section, Table, fmt, fmt_ci, render_markdown
from tests.report_checks import PNG_MAGIC, check_self_contained


def test_fmt_significant_digits_and_specials() -> None:
    assert fmt(0.123456) == "0.123"
    assert fmt(1234.5) == "1234"          # no exponent for ordinary magnitudes
    assert fmt(12) == "12"
    assert fmt(float("nan")) == "–"
    assert fmt(float("inf")) == "∞"
    assert fmt(True) == "yes"
    assert fmt(None) == "–"
    assert fmt(3.2e-9) == "0.0000000032"  # no exponent notation (issue 34)
    assert fmt(32480.4) == "32,480" and fmt(1.5e6) == "1,500,000"
    assert fmt_ci(99.96, 99.9, 99.99) == "99.96 [99.9, 99.99]"   # not "100 [99.9, 100]"
    assert fmt_ci(0.15, 0.05, 0.26) == "0.15 [0.05, 0.26]"


def _figure(tmp_path: Path) -> Figure:
    from evtsync.plots.base import new_figure, save_png_svg

    fig, ax = new_figure()
    ax.plot([0, 1], [1, 0])
    png, svg = save_png_svg(fig, tmp_path / "figures", "line")
    return Figure(png, svg, "A line. Drawn for the test.")


def test_html_embeds_figures_flags_rows_and_escapes(tmp_path: Path) -> None:
    fig = _figure(tmp_path)
    table = Table(pd.DataFrame({"model": ["a<b", "c"], "bad": [True, False], "x": [1.5, np.nan]}), "cap", flag="bad")
    sections = [Section("S", [Alert("fit did NOT converge"), "text & more", table, fig], anchor="s")]
    page = render_html("T", "sub", sections)
    path = tmp_path / "r.html"
    path.write_text(page, encoding="utf-8")
    images = check_self_contained(path)
    assert len(images) == 1 and images[0] == fig.png.read_bytes()
    assert 'class="alert"' in page and "a&lt;b" in page and "text &amp; more" in page
    assert page.count('class="flag"') == 1
    md = render_markdown("T", sections, tmp_path)
    assert "![A line](figures/line.png)" in md
    assert "| a&lt;b | yes | 1.5 |" in md and "**NOT OK:**" in md  # escaped: viewers render raw HTML (issue 33)


def test_png_magic_is_checked(tmp_path: Path) -> None:
    bad = base64.b64encode(b"GIF89a....").decode()
    path = tmp_path / "bad.html"
    path.write_text(f'<html><body><img src="data:image/png;base64,{bad}"></body></html>')
    with pytest.raises(AssertionError):
        check_self_contained(path)
    remote = tmp_path / "remote.html"
    remote.write_text('<html><body><img src="https://example.org/x.png"></body></html>')
    with pytest.raises(AssertionError):
        check_self_contained(remote)
    assert PNG_MAGIC.startswith(b"\x89PNG")


def test_report_of_something_else_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="neither a run folder"):
        build_report(tmp_path)


def test_median_interval_covers_the_true_median_at_its_binomial_level() -> None:
    """Exponential(1) samples (true median ln 2): the order-statistic interval's coverage equals
    its exact binomial coverage 1 - 2 P(B <= j - 1), within 3 Monte-Carlo standard errors."""
    from scipy import stats

    from evtsync.core.intervals import median_interval

    rng = np.random.default_rng(7)
    n, reps = 41, 2000
    samples = rng.exponential(1.0, size=(reps, n))
    hits = 0
    for x in samples:
        _, lo, hi = median_interval(x, 0.90)
        hits += lo <= np.log(2) <= hi
    j = int(stats.binom.ppf(0.05, n, 0.5))
    exact = 1 - 2 * stats.binom.cdf(j - 1, n, 0.5)
    assert exact >= 0.90
    se = np.sqrt(exact * (1 - exact) / reps)
    assert abs(hits / reps - exact) < 3 * se
    med, lo, hi = median_interval(np.array([3.0, 1.0, 2.0]), 0.90)
    assert (med, lo, hi) == (2.0, 1.0, 3.0)         # too few points: the whole range


def test_wilson_interval_reference_values() -> None:
    """0 of 10 at 95%: [0, 0.2775] (Wilson 1927; Agresti & Coull 1998, Table 1 style value)."""
    from evtsync.core.intervals import wilson_interval

    p, lo, hi = wilson_interval(0, 10, 0.95)
    assert p == 0 and lo == 0 and hi == pytest.approx(0.2775, abs=5e-4)
    p, lo, hi = wilson_interval(5, 10, 0.95)
    assert (lo, hi) == (pytest.approx(0.2366, abs=5e-4), pytest.approx(0.7634, abs=5e-4))


def test_figures_drawn_by_worker_processes_equal_those_drawn_here(tmp_path: Path,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    """The report hands its figures to worker processes: each file must be what drawing the same
    figure in this process and saving it with save_png_svg writes, byte for byte (PNG)."""
    import functools

    from evtsync.plots import fits as fit_figs
    from evtsync.plots.base import save_png_svg
    from evtsync.report.context import ReportContext

    rng = np.random.default_rng(3)
    draws = [functools.partial(fit_figs.gev_cell, rng.gumbel(size=n), None, None, None, "none", f"cell {n}")
             for n in (40, 80, 120)]
    ctx = ReportContext(tmp_path, tmp_path / "pool", {}, svg=True)
    planned = [ctx.figure(draw, f"cell-{i}", "A cell.") for i, draw in enumerate(draws)]
    assert not (tmp_path / "pool" / "figures").exists()        # planned, not drawn yet
    ctx.draw_figures(workers=2)
    assert "could not run" not in caplog.text                  # the pool drew them, not the fallback
    for i, (draw, fig) in enumerate(zip(draws, planned, strict=True)):
        here_png, here_svg = save_png_svg(draw(), tmp_path / "here", f"cell-{i}")
        assert fig.png.read_bytes() == here_png.read_bytes()
        assert fig.svg is not None and fig.svg.read_text(encoding="utf-8").count("<svg") == 1
    assert sorted(p.name for p in (tmp_path / "pool" / "figures").iterdir()) == sorted(
        p.name for p in (tmp_path / "here").iterdir())


def test_the_figure_pool_runs_only_where_it_pays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 48: by default the figures are drawn by a pool only where it pays for its fork server's
    imports and its workers' start (at most 10% more CPU than this process, 20% less wall time, idle
    cores); ``--jobs`` is obeyed as given."""
    import functools

    from evtsync.plots import fits as fit_figs
    from evtsync.report import context
    from evtsync.report.context import ReportContext, figure_pool_pays

    # a handful of figures (~0.5 s each): the pool's ~1.5 s of start is far more than 10% of them
    assert not figure_pool_pays(4, 2, cores=2)
    assert figure_pool_pays(200, 2, cores=2)           # 100 s of drawing: the start is ~2% of it
    assert not figure_pool_pays(200, 2, cores=1)       # a busy machine: nothing to gain
    assert not figure_pool_pays(200, 1, cores=2)
    ctx = ReportContext(tmp_path, tmp_path / "out", {})
    monkeypatch.setattr("evtsync.core.parallel.idle_cores", lambda *a, **k: 1)
    assert ctx.figure_workers(None, 200) == 1 and ctx.figure_workers(3, 200) == 3
    monkeypatch.setattr("evtsync.core.parallel.idle_cores", lambda *a, **k: 2)
    monkeypatch.setattr(context.os, "sched_getaffinity", lambda _pid: {0, 1}, raising=False)
    assert ctx.figure_workers(None, 200) == 2 and ctx.figure_workers(None, 4) == 1
    # drawn here (no pool: its CPU list is not added to) and written all the same
    rng = np.random.default_rng(5)
    for i in range(3):
        ctx.figure(functools.partial(fit_figs.gev_cell, rng.gumbel(size=40), None, None, None, "none", f"c{i}"),
                   f"cell-{i}", "A cell.")
    pools = len(context.FIGURE_WORKER_CPU)
    ctx.draw_figures()
    assert len(context.FIGURE_WORKER_CPU) == pools
    assert sorted(p.name for p in (tmp_path / "out" / "figures").glob("*.png")) == [f"cell-{i}.png" for i in range(3)]
