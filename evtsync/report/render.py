"""The one HTML renderer and stylesheet of evtsync's reports (run, fit and diff).

A report is a list of :class:`~evtsync.report.markdown.Section` (paragraphs, tables, figures,
alerts); :func:`render_html` turns it into one self-contained page: styles inline, every
figure embedded as a base64 PNG, so it opens without a network.
"""

from __future__ import annotations

import base64
import html
import re
from typing import Any

from evtsync.report.markdown import (
    Alert,
    Answer,
    Caption,
    Cards,
    EmbeddedFigure,
    Figure,
    Link,
    Section,
    Skipped,
    Table,
    fmt,
    human_label,
)
from evtsync.runfolder.layout import STATUS_TEXT

_CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;max-width:1240px;margin:1em auto;
padding:0 1em;color:#1d1d1f;line-height:1.45}
p,li,figcaption,.caption,.alert,.warning,h1,h2,h3{overflow-wrap:anywhere}
h1{font-size:1.55em;border-bottom:2px solid #ddd;padding-bottom:.2em;margin:.3em 0}
h2{font-size:1.3em;margin-top:1.8em;border-bottom:1px solid #e5e5e5}
h3{font-size:1.08em;margin-top:1.3em}
p.subtitle{font-size:.85em;color:#555;margin:.2em 0 .6em}
.table-wrap{overflow-x:auto;max-width:100%;margin:.4em 0;border:1px solid #e2e2e2;border-radius:6px}
table{border-collapse:collapse;font-size:.86em}
th,td{border:1px solid #d0d0d0;padding:.25em .55em;text-align:right;vertical-align:top}
th{background:#f3f3f3}
td:first-child,th:first-child{text-align:left;position:sticky;left:0;z-index:1;background:#fff}
th:first-child{background:#f3f3f3}
.table-wrap table{margin:0}
tr.flag td{background:#fde2e2;color:#9b1111;font-weight:600}
tr.muted td{color:#8a6d00}
table.summary{font-size:.85em}
table.summary th,table.summary td{padding:.2em .4em}
table.summary td{white-space:nowrap}
table.summary .ci{font-size:.85em;color:#555}
table.summary th{font-size:.92em}
table.summary td.note{white-space:normal;text-align:left;font-size:.92em;color:#7f0f0f}
a{color:#0b57d0}
.alert{border-left:6px solid #c62828;background:#fde2e2;color:#7f0f0f;padding:.45em .9em;margin:.4em 0;
font-weight:600}
.warning{border-left:6px solid #d89b00;background:#fff4d6;color:#5c4300;padding:.45em .9em;margin:.4em 0;
font-size:.92em}
figure{margin:1em 0}
figure img{max-width:100%;height:auto;border:1px solid #eee;display:block}
figcaption{font-size:.88em;color:#444;max-width:60em}
.caption{font-size:.88em;color:#444;margin:.5em 0 .2em}
.skipped{color:#666;font-style:italic}
.status-done{color:#1b5e20}.status-not_applicable,.status-unavailable{color:#8a6d00}
.status-failed{color:#b71c1c;font-weight:700}
nav ul{columns:3;font-size:.88em;margin:.3em 0}
.answers{margin:.5em 0 .8em}
p.answer{margin:.35em 0;padding:.3em .7em;border-left:4px solid #0b57d0;background:#f4f7fd}
p.answer strong{color:#0b3d91}
.cards{display:none}
.card{border:1px solid #d0d0d0;border-radius:6px;padding:.4em .7em;margin:.5em 0}
.card.flag{border-color:#c62828;background:#fde2e2}
.card-title{font-weight:700;margin:0 0 .2em}
.card dl{margin:0;display:grid;grid-template-columns:minmax(6.5em,auto) 1fr;gap:.1em .6em;font-size:.9em}
.card dt{color:#555}.card dd{margin:0;overflow-wrap:anywhere;min-width:0}
.scroll-hint{display:none;font-size:.8em;color:#666;margin:.1em 0 .6em}
.table-wrap.scrolls+.scroll-hint{display:block}
@media (max-width:700px){nav ul{columns:1}body{padding:0 .5em}table{font-size:.8em}
figure{margin:1em -.5em}figcaption{padding:0 .5em}}
@media (max-width:600px){.table-wrap.summary-wrap,.table-wrap.summary-wrap+.scroll-hint{display:none}
.cards{display:block}h1{font-size:1.3em}p.answer{padding:.25em .5em}}
@media print{body{max-width:none;margin:0;font-size:10pt}nav,.no-print{display:none}
.table-wrap{overflow:visible}table{font-size:8pt}figure,table,tr{break-inside:avoid}
h2,h3{break-after:avoid}a{color:inherit;text-decoration:none}
tr.flag td{-webkit-print-color-adjust:exact;print-color-adjust:exact}}
"""


# --------------------------------------------------------------------------- rendering

#: The least size, in CSS pixels, of a figure's text as shown at 390 px (issue 49): a figure whose
#: text would be smaller when scaled to the width carries a narrow rendering
#: (:func:`evtsync.plots.base.narrow_layout`), shown at <= :data:`NARROW_MEDIA` px.
MIN_FIGURE_TEXT_PX = 11.0
NARROW_MEDIA = 600


def png_width(png: bytes) -> int | None:
    """The pixel width of a PNG (from its IHDR chunk), or None for bytes that are not a PNG."""
    if len(png) < 24 or png[:8] != b"\x89PNG\r\n\x1a\n":
        return None
    return int.from_bytes(png[16:20], "big")


def png_text(png: bytes, key: str) -> str | None:
    """The value of the PNG's ``tEXt`` chunk ``key`` (matplotlib's ``savefig(metadata=...)``), or None."""
    pos = 8
    while pos + 8 <= len(png):
        length = int.from_bytes(png[pos:pos + 4], "big")
        kind = png[pos + 4:pos + 8]
        if kind == b"tEXt":
            name, _, value = png[pos + 8:pos + 8 + length].partition(b"\0")
            if name.decode("latin-1") == key:
                return value.decode("latin-1")
        if kind in (b"IDAT", b"IEND"):
            return None
        pos += 12 + length
    return None


def _fonts(png: bytes) -> str:
    """``width:px`` of a PNG: its pixel width and its smallest text in its own pixels (empty when
    the PNG does not say); the browser check scales it to the shown width."""
    from evtsync.plots.base import FONT_KEY

    width, font = png_width(png), png_text(png, FONT_KEY)
    return f"{width}:{font}" if width and font else ""


def _img_tag(png: bytes, alt: str, narrow: bytes | None = None) -> str:
    """An inline ``<img>`` scaled to the width of its box; with ``narrow`` (the figure redrawn for a
    narrow screen) a ``<picture>`` that shows it at <= :data:`NARROW_MEDIA` px."""
    data = base64.b64encode(png).decode("ascii")
    fonts = " ".join(f for f in (_fonts(png), _fonts(narrow) if narrow else "") if f)
    attr = f' data-fonts="{fonts}"' if fonts else ""
    img = f'<img alt="{html.escape(alt)}"{attr} src="data:image/png;base64,{data}">'
    if narrow is None:
        return img
    small = base64.b64encode(narrow).decode("ascii")
    return (f'<picture><source media="(max-width:{NARROW_MEDIA}px)" srcset="data:image/png;base64,{small}">'
            f"{img}</picture>")


def _cell_html(column: Any, value: Any, two_lines: bool = False) -> str:
    if isinstance(value, Link):
        found = (re.fullmatch(r"(.+?)\n(.+)", value.text, re.S) or re.fullmatch(r"(.+?) (\[.+\])", value.text)
                 if two_lines else None)
        if found:
            rest = "<br>".join(html.escape(line) for line in found.group(2).split("\n"))  # every line its own
            return (f'<a href="{html.escape(value.href)}">{html.escape(found.group(1))}<br>'
                    f'<span class="ci">{rest}</span></a>')
        return f'<a href="{html.escape(value.href)}">{html.escape(value.text)}</a>'
    if column == "status":
        return (f'<span class="status-{html.escape(str(value))}">'
                f'{html.escape(STATUS_TEXT.get(str(value), str(value)))}</span>')
    return html.escape(fmt(value))


def _table_html(table: Table) -> str:
    frame = table.frame
    out = []
    if table.caption:
        out.append(f'<p class="caption">{html.escape(table.caption)}</p>')
    if frame.empty:
        return "".join(out) + "<p><em>(empty)</em></p>"
    # the note column (free text) is a full-width row under its row: beside the numbers it made the
    # summary table scroll sideways on a laptop (issue 49)
    cols = [c for c in frame.columns if c not in (table.flag, table.muted) and str(c) != str(table.note)]
    css = f' class="{html.escape(table.css_class)}"' if table.css_class else ""
    wrap = "table-wrap summary-wrap" if table.css_class == "summary" else "table-wrap"
    out.append(f'<div class="{wrap}"><table{css}><thead><tr>'
               + "".join(f"<th>{html.escape(human_label(c))}</th>" for c in cols) + "</tr></thead><tbody>")
    for _, row in frame.iterrows():
        flagged = table.flag is not None and bool(row.get(table.flag, False))
        muted = table.muted is not None and bool(row.get(table.muted, False))
        cells = [f"<td>{_cell_html(c, row[c], table.css_class == 'summary')}</td>" for c in cols]
        css_row = ' class="flag"' if flagged else (' class="muted"' if muted else "")
        out.append(f"<tr{css_row}>" + "".join(cells) + "</tr>")
        text = fmt(row[table.note]) if table.note is not None and table.note in frame.columns else ""
        if text not in ("", "–"):
            out.append(f'<tr{css_row}><td class="note" colspan="{len(cols)}">{html.escape(human_label(table.note))}: '
                       f"{html.escape(text)}</td></tr>")
    out.append("</tbody></table></div>")
    out.append(f'<p class="scroll-hint">{SCROLL_HINT}</p>')
    return "".join(out)


#: Under a table wider than its box (marked by :data:`_SCRIPT`): how to see the rest.
SCROLL_HINT = "↔ This table is wider than the screen: scroll it sideways inside its box."

#: Marks each table or figure box whose content is wider than the box (class ``scrolls``), so that
#: its :data:`SCROLL_HINT` shows; run at load and on resize. The page needs no script otherwise.
_SCRIPT = ("<script>(function(){function mark(){document.querySelectorAll('.table-wrap').forEach(function(w){"
           "w.classList.toggle('scrolls',w.scrollWidth>w.clientWidth+1);});}"
           "window.addEventListener('load',mark);window.addEventListener('resize',mark);})();</script>")


def _answers_html(answers: list[Answer]) -> str:
    """The first screen's answers, one paragraph each (``id="answer-<key>"``)."""
    out = ['<div class="answers">']
    for a in answers:
        lead = html.escape(a.question)
        lead = f'<a href="{html.escape(a.href)}">{lead}</a>' if a.href else lead
        out.append(f'<p class="answer" id="answer-{html.escape(a.key)}"><strong>{lead}:</strong> '
                   f'{html.escape(a.text)}</p>')
    return "".join(out) + "</div>"


def _cards_html(cards: Cards) -> str:
    """The summary as one card per GPU × precision (shown instead of its table at ≤ 600 px)."""
    out = ['<div class="cards">']
    for card in cards.cards:
        lines = "".join(f"<dt>{html.escape(k)}</dt><dd>{html.escape(v)}</dd>" for k, v in card.lines)
        out.append(f'<div class="card{" flag" if card.flag else ""}"><p class="card-title">'
                   f'<a href="{html.escape(card.href)}">{html.escape(card.title)}</a></p><dl>{lines}</dl></div>')
    return "".join(out) + "</div>"


def render_html(title: str, subtitle: str, sections: list[Section]) -> str:
    """The document as one self-contained HTML page (figures embedded as base64 PNG).

    The table of contents follows the first section (the summary, when there is one)."""
    body = [f"<h1>{html.escape(title)}</h1>", f'<p class="subtitle">{html.escape(subtitle)}</p>']
    toc = [f'<li><a href="#{s.anchor}">{html.escape(s.title)}</a></li>' for s in sections if s.level == 2 and s.anchor]
    nav = "<nav><ul>" + "".join(toc) + "</ul></nav>" if toc else ""
    for i, section in enumerate(sections):
        anchor = f' id="{html.escape(section.anchor)}"' if section.anchor else ""
        body.append(f"<h{section.level}{anchor}>{html.escape(section.title)}</h{section.level}>")
        answers: list[Answer] = []
        for item in [*section.items, None]:
            if isinstance(item, Answer):
                answers.append(item)
                continue
            if answers:  # consecutive answers are one block
                body.append(_answers_html(answers))
                answers = []
            if isinstance(item, Cards):
                body.append(_cards_html(item))
            elif isinstance(item, Link):
                body.append(f'<p><a href="{html.escape(item.href)}">{html.escape(item.text)}</a></p>')
            elif isinstance(item, Skipped):
                body.append(f'<p class="skipped">{html.escape(item.text)}</p>')
            elif isinstance(item, Caption):
                body.append(f'<p class="caption">{html.escape(item.text)}</p>')
            elif isinstance(item, str):
                body.append(f"<p>{html.escape(item)}</p>")
            elif isinstance(item, Alert):
                body.append(f'<div class="{"alert" if item.level == "error" else "warning"}">{html.escape(item.text)}</div>')
            elif isinstance(item, Table):
                body.append(_table_html(item))
            elif isinstance(item, EmbeddedFigure):
                body.append(f"<figure>{_img_tag(item.png, item.alt, item.narrow)}"
                            + (f"<figcaption>{html.escape(item.caption)}</figcaption>" if item.caption else "")
                            + "</figure>")
            elif isinstance(item, Figure):
                from evtsync.plots.base import narrow_png_path

                narrow = narrow_png_path(item.png)
                body.append(f"<figure>{_img_tag(item.png.read_bytes(), item.caption.split('.')[0], narrow.read_bytes() if narrow.is_file() else None)}"
                            f"<figcaption>{html.escape(item.caption)}</figcaption></figure>")
        if i == 0 and nav:
            body.append(nav)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(body) + f"\n{_SCRIPT}</body></html>\n")

