"""The report as a document (sections of paragraphs, tables, figures, alerts) and its
Markdown rendering.

:mod:`evtsync.report.html` assembles the document from a run folder and renders it as
self-contained HTML; :func:`render_markdown` renders the same document as a Markdown summary
whose figures link to the PNG files beside it.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pandas as pd

from evtsync.core.display import fmt, fmt_ci

__all__ = ["Alert", "Answer", "Caption", "Card", "Cards", "EmbeddedFigure", "Figure", "Link", "Section", "Skipped", "Table", "fmt", "fmt_ci", "human_label",
           "markdown_table", "render_markdown"]


@dataclass
class Figure:
    """A figure saved as PNG (and SVG where asked for), with its caption (what it shows, how it was
    computed)."""

    png: Path
    svg: Path | None
    caption: str


@dataclass
class EmbeddedFigure:
    """A figure held in memory as PNG bytes (a one-file report with no figures folder: the diff)."""

    png: bytes
    alt: str
    caption: str = ""
    #: the figure redrawn for a narrow screen (:func:`evtsync.plots.base.narrow_layout`), or None
    narrow: bytes | None = None


@dataclass
class Table:
    """A table with an optional caption; ``flag`` names a boolean column whose True rows are
    highlighted (e.g. non-converged fits); ``note`` a column of free text shown wrapped; ``muted``
    a boolean column whose True rows are shown greyed (e.g. no verdict)."""

    frame: pd.DataFrame
    caption: str = ""
    flag: str | None = None
    css_class: str = ""
    note: str | None = None
    muted: str | None = None


@dataclass
class Link:
    """A table cell or text that links to a section of the report (``href`` = ``#anchor``)."""

    text: str
    href: str

    def __str__(self) -> str:
        return self.text


@dataclass
class Skipped:
    """A part of the report left out, with the one-line reason (e.g. too few data)."""

    text: str


@dataclass
class Caption:
    """Small print under a table or figure (how its numbers were computed)."""

    text: str


@dataclass
class Alert:
    """A warning shown in red (``level="error"``) or amber (``level="warning"``)."""

    text: str
    level: str = "error"


@dataclass
class Answer:
    """One of the first screen's answers: ``key`` names it (the HTML id ``answer-<key>``),
    ``question`` is its lead-in ("The tax now"), ``text`` the one sentence with its number and
    interval; ``href`` the section that holds the detail ("" for none)."""

    key: str
    question: str
    text: str
    href: str = ""


@dataclass
class Card:
    """One GPU × precision of the summary as a card (the narrow-screen form of the summary table):
    a title linking to its section, and (label, value) lines; ``flag`` marks a non-converged fit."""

    title: str
    href: str
    lines: list[tuple[str, str]]
    flag: bool = False


@dataclass
class Cards:
    """The summary's cards, shown instead of its table on a narrow screen (HTML only: the Markdown
    summary has the table)."""

    cards: list[Card]


@dataclass
class Section:
    """A titled part of the report; ``level`` 2 or 3 (h2/h3); ``items`` in order."""

    title: str
    items: list[Any] = field(default_factory=list)
    level: int = 2
    anchor: str = ""


def human_label(name: Any) -> str:
    """A column name for readers: ``share_of_gpu_causes`` -> "share of GPU causes",
    ``tau_p90_us`` -> "tau p90 (µs)"; names that are not snake_case identifiers are kept."""
    text = str(name)
    if text in _SPECIAL:
        return _SPECIAL[text]
    if not re.fullmatch(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+", text):
        return text
    unit = ""
    for suffix, label in _UNITS.items():
        if text.endswith(suffix):
            text, unit = text[: -len(suffix)], f" ({label})"
            break
    words = [_WORDS.get(w, w) for w in text.split("_")]
    return " ".join(words) + unit


_SPECIAL = {"r_hat": "R-hat", "ess_bulk": "bulk ESS", "ess_tail": "tail ESS", "p_loo": "p_loo",
            "elpd_loo": "elpd_loo"}
_UNITS = {"_us": "µs", "_ns": "ns", "_gbps": "GB/s", "_bytes": "bytes", "_seconds": "s"}
_WORDS = {"gpu": "GPU", "cpu": "CPU", "pg": "PG", "n": "number of", "id": "ID", "lrt": "LRT", "aic": "AIC",
          "loo": "LOO", "elpd": "elpd", "cv": "CV", "mle": "MLE", "xi": "xi", "nccl": "NCCL"}


_MD_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", "](": "\\](", "`": "\\`"}
_MD_SPECIAL = re.compile(r"[&<>`]|\]\(")


def md_text(text: Any) -> str:
    """Text from the data (workload, PG, kernel and file names; numbers) made inert in Markdown:
    ``<``, ``>`` and ``&`` as HTML entities (Markdown viewers render raw HTML, so an injected
    ``<script>`` or ``<img onerror>`` in a trace's names would run), ``](`` and backticks escaped
    (no injected links or code spans; an interval's ``[lo, hi]`` stays as it is). Shown as the
    same characters."""
    return _MD_SPECIAL.sub(lambda m: _MD_ESCAPES[m.group(0)], str(text))


def _md_cell(value: Any) -> str:
    if isinstance(value, Link):  # a two-line cell of the HTML table ("\n") is one line here
        return f"[{md_text(value.text.replace(chr(10), ' '))}]({value.href})".replace("|", "\\|")
    return md_text(fmt(value)).replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown pipe table (text escaped, :func:`md_text`)."""
    if frame.empty:
        return "_(empty)_"
    head = "| " + " | ".join(md_text(human_label(c)).replace("|", "\\|") for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    rows = ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([head, rule, *rows])


def render_markdown(title: str, sections: list[Section], base: Path) -> str:
    """The document as Markdown; figure links are relative to ``base`` (the report's folder)."""
    lines = [f"# {md_text(title)}", ""]
    for section in sections:
        if section.anchor:
            lines += [f'<a id="{html.escape(section.anchor, quote=True)}"></a>', ""]
        lines += ["#" * section.level + " " + md_text(section.title), ""]
        for item in section.items:
            if isinstance(item, Link):
                lines += [f"[{md_text(item.text)}]({item.href})", ""]
            elif isinstance(item, Answer):
                lines += [f"**{md_text(item.question)}:** {md_text(item.text)}", ""]
            elif isinstance(item, Cards):
                continue  # the narrow-screen form of the summary table, which the Markdown has
            elif isinstance(item, Skipped | Caption):
                lines += [f"_{md_text(item.text)}_", ""]
            elif isinstance(item, str):
                lines += [md_text(item), ""]
            elif isinstance(item, Alert):
                marker = "**NOT OK:**" if item.level == "error" else "**Note:**"
                lines += [f"> {marker} {md_text(item.text)}", ""]
            elif isinstance(item, Table):
                if item.caption:
                    lines += [f"_{md_text(item.caption)}_", ""]
                lines += [markdown_table(item.frame), ""]
            elif isinstance(item, EmbeddedFigure):
                lines += [f"_(figure: {item.alt}; in the HTML report)_", ""]
            elif isinstance(item, Figure):
                rel = item.png.relative_to(base) if item.png.is_relative_to(base) else item.png
                lines += [f"![{md_text(item.caption.split('.')[0])}]({quote(rel.as_posix())})", "",
                          f"_{md_text(item.caption)}_", ""]
    return "\n".join(lines).rstrip() + "\n"
