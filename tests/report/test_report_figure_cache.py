"""The report's figure cache (issue 30, item 6): a figure whose input table and code have not
changed is copied from the cache, byte for byte what drawing it gives, into any run folder; a
change of its data draws it again; a damaged entry is said, removed and drawn again."""

from __future__ import annotations

import functools
import logging

import pandas as pd

from evtsync.plots.base import new_figure
from evtsync.report.context import ReportContext

DRAWN: list[int] = []


def bars(table: pd.DataFrame):  # a figure function of the kind evtsync.plots has
    """A bar chart of ``table``; counts its calls in DRAWN."""
    DRAWN.append(len(table))
    fig, ax = new_figure(3, 2)
    ax.bar(table["x"], table["y"])
    return fig


def report_figures(out, cache, table: pd.DataFrame) -> bytes:
    """Plan and draw one figure of ``table`` into ``out`` (one process); its PNG's bytes."""
    ctx = ReportContext(out, out, {}, svg=True, figure_cache=cache)
    figure = ctx.figure(functools.partial(bars, table), "bars", "caption")
    ctx.draw_figures(workers=1)
    assert figure.svg is not None and figure.svg.is_file()
    return figure.png.read_bytes()


def test_a_figure_is_drawn_once_and_copied_into_another_folder(tmp_path):
    DRAWN.clear()
    table = pd.DataFrame({"x": ["a", "b", "c"], "y": [1.0, 3.0, 2.0]})
    plain = report_figures(tmp_path / "plain", None, table)
    first = report_figures(tmp_path / "run1", tmp_path / "cache", table)
    assert len(DRAWN) == 2                     # without a cache, and the first time with it
    again = report_figures(tmp_path / "run2", tmp_path / "cache", table.copy())
    assert len(DRAWN) == 2                     # same data, same code: copied, not drawn
    assert again == first == plain            # the bytes drawing gives
    assert (tmp_path / "run2" / "figures" / "bars.svg").read_bytes() == \
        (tmp_path / "run1" / "figures" / "bars.svg").read_bytes()
    changed = table.assign(y=[1.0, 3.0, 2.5])
    report_figures(tmp_path / "run3", tmp_path / "cache", changed)
    assert len(DRAWN) == 3                     # its data changed: drawn again
    assert len([p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]) == 2


def test_a_damaged_entry_is_said_removed_and_drawn_again(tmp_path, caplog):
    DRAWN.clear()
    table = pd.DataFrame({"x": ["a", "b"], "y": [1.0, 2.0]})
    first = report_figures(tmp_path / "run1", tmp_path / "cache", table)
    (entry,) = [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".")]
    png = entry / "figure.png"
    png.write_bytes(png.read_bytes()[:100])    # cut mid-file
    with caplog.at_level(logging.WARNING, logger="evtsync.report.context"):
        again = report_figures(tmp_path / "run2", tmp_path / "cache", table)
    assert len(DRAWN) == 2
    assert again == first
    assert any("damaged" in r.getMessage() and entry.name in r.getMessage() for r in caplog.records)
    assert (entry / "figure.png").read_bytes() == first   # the entry is written again, whole
