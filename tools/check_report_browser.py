#!/usr/bin/env python3
"""Render an evtsync report in headless Chromium and check it as a reader's browser shows it.

For each width (default 1400, 800 and a phone's 390 px, laid out at exactly that width in an
iframe: Chromium's own window cannot go below about 500 px) the report is loaded from a copy that carries a
small probe script; Chromium runs it and ``--dump-dom`` returns its findings:

- elements that stick out of the page horizontally and are not inside a scrollable container
  (a clipped table or figure),
- images that did not decode (``naturalWidth == 0``), figures wider than their box, and (at a
  phone's width) figures whose smallest text is shown below 11 px (its size in the PNG's pixels,
  from the report's ``data-fonts``, times the scale it is shown at),
- a layout width other than the one asked for,
- resources fetched from the network (``performance.getEntriesByType('resource')``: a
  self-contained report fetches none; ``data:`` URIs are not listed),
- the page's headings visible in the first screen (to check that the answer comes first).

Screenshots of the first screen are written beside the findings (``--out``), one per width.
Exit status 1 when any check fails. Needs Debian's ``chromium`` (``apt-get install chromium``).

    python tools/check_report_browser.py fits/demo/report.html --out /tmp/browser
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from evtsync.report.render import MIN_FIGURE_TEXT_PX, NARROW_MEDIA

PROBE = r"""
<script>
window.addEventListener('load', function () {
  var W = document.documentElement.clientWidth, H = window.innerHeight;
  function scrollable(el) {
    for (var p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      var ov = getComputedStyle(p).overflowX;
      if (ov === 'auto' || ov === 'scroll' || ov === 'hidden') return true;
    }
    return false;
  }
  var overflow = [], wide = [];
  document.querySelectorAll('body *').forEach(function (el) {
    var r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > W + 1 && wide.length < 5) wide.push(el.tagName.toLowerCase() + '.' + (typeof el.className === 'string' ? el.className : '') + ' ' + Math.round(r.left) + '..' + Math.round(r.right));
    if (r.width > 0 && r.right > W + 1 && !scrollable(el)) {
      var parentOut = el.parentElement && el.parentElement.getBoundingClientRect().right > W + 1;
      if (!parentOut) overflow.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
        (el.className && typeof el.className === 'string' ? '.' + el.className.split(' ')[0] : '') +
        ' right=' + Math.round(r.right) + ' > ' + W);
    }
  });
  var broken = [], figures = [];
  document.querySelectorAll('img').forEach(function (img) {
    if (!img.complete || img.naturalWidth === 0) { broken.push(img.alt || img.src.slice(0, 60)); return; }
    // the smallest text of the rendering shown (the <picture> may pick the narrow one): its size in
    // the PNG's own pixels (data-fonts "width:px ...", written by the report) times the scale shown
    var r = img.getBoundingClientRect(), box = (img.closest('figure') || document.body).getBoundingClientRect();
    var font = null;
    (img.getAttribute('data-fonts') || '').split(' ').forEach(function (pair) {
      var p = pair.split(':');
      if (p.length === 2 && +p[0] === img.naturalWidth) font = +p[1];
    });
    figures.push({alt: (img.alt || '').slice(0, 50), natural: img.naturalWidth, shown: Math.round(r.width * 10) / 10,
      text_px: font === null ? null : Math.round(font * r.width / img.naturalWidth * 100) / 100,
      overflow: r.right > box.right + 1 || r.left < box.left - 1 || r.right > W + 1});
  });
  var fetched = performance.getEntriesByType('resource').map(function (e) { return e.name; })
    .filter(function (n) { return !n.startsWith('data:'); });
  var first = [];
  document.querySelectorAll('h1, h2, h3, .headline, .summary').forEach(function (el) {
    var r = el.getBoundingClientRect();
    if (r.top < H && r.bottom > 0) first.push(el.tagName.toLowerCase() + ': ' + el.textContent.trim().slice(0, 80));
  });
  var answers = {};
  document.querySelectorAll('.answer').forEach(function (el) {
    var r = el.getBoundingClientRect(), over = [];
    [el].concat(Array.prototype.slice.call(el.querySelectorAll('*'))).forEach(function (e) {
      var q = e.getBoundingClientRect();
      if (q.width > 0 && (q.right > W + 1 || q.left < -1)) over.push(e.tagName.toLowerCase() + ' ' + Math.round(q.left) + '..' + Math.round(q.right));
      if (e.scrollWidth > e.clientWidth + 1) over.push(e.tagName.toLowerCase() + ' scrolls ' + e.scrollWidth + ' > ' + e.clientWidth);
    });
    answers[el.id] = {top: Math.round(r.top), bottom: Math.round(r.bottom), left: Math.round(r.left),
      right: Math.round(r.right), overflow: over};
  });
  function shown(el) { return el && el.getBoundingClientRect().height > 0; }
  var wrap = document.querySelector('.summary-wrap'), cards = document.querySelector('.cards');
  var summary = {table_shown: shown(wrap), table_scroll: wrap ? wrap.scrollWidth : 0,
    table_box: wrap ? wrap.clientWidth : 0, cards_shown: shown(cards), cards_overflow: []};
  document.querySelectorAll('.card').forEach(function (c) {
    var q = c.getBoundingClientRect();
    if (shown(c) && (q.right > W + 1 || c.scrollWidth > c.clientWidth + 1)) summary.cards_overflow.push(
      c.textContent.trim().slice(0, 30) + ' ' + Math.round(q.right) + ' / ' + c.scrollWidth);
  });
  var small = [];
  document.querySelectorAll('p, dd, dt, td, th, figcaption, li').forEach(function (e) {
    var size = parseFloat(getComputedStyle(e).fontSize);
    if (shown(e) && size < 11 && small.length < 5) small.push(e.tagName.toLowerCase() + ' ' + size + 'px');
  });
  var findings = JSON.stringify({width: W, height: H, scroll_width: document.documentElement.scrollWidth,
    overflow: overflow, broken_images: broken, figures: figures, n_images: document.images.length,
    network: fetched, first_screen: first, wide: wide, answers: answers, summary: summary, small_text: small});
  parent.postMessage(findings, '*');
});
</script>
"""

WIDTHS = (1400, 800, 390)




def find_chromium() -> str | None:
    """The Chromium binary, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _chromium(binary: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    base = [binary, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--no-first-run", "--disable-extensions", "--virtual-time-budget=8000",
            "--host-resolver-rules=MAP * ~NOTFOUND"]
    return subprocess.run([*base, *args], capture_output=True, text=True, timeout=timeout)


HOST = """<!doctype html><html><head><style>body{margin:0}iframe{border:0;display:block}</style></head>
<body><iframe src="report.html" style="width:%dpx;height:%dpx"></iframe>
<script>window.addEventListener('message', function (e) {
  var out = document.createElement('pre'); out.id = 'evtsync-browser-probe'; out.textContent = e.data;
  document.body.appendChild(out); });</script></body></html>"""


def check_report(report: Path, out: Path, widths=WIDTHS, height: int = 900) -> dict:
    """Findings per width (see the module docstring), and screenshots in ``out``.

    The report is shown in an iframe of the exact width: Chromium's window is at least 500 px
    wide, and the narrow (phone) layout is the one that clips tables.
    """
    binary = find_chromium()
    if binary is None:
        raise RuntimeError("chromium not found: apt-get install chromium")
    out.mkdir(parents=True, exist_ok=True)
    text = report.read_text(encoding="utf-8")
    probed = text.replace("</body>", PROBE + "</body>") if "</body>" in text else text + PROBE
    results = {}
    with tempfile.TemporaryDirectory(prefix="evtsync-browser-") as tmp:
        page = Path(tmp) / "report.html"
        page.write_text(probed, encoding="utf-8")
        for width in widths:
            host = Path(tmp) / f"host-{width}.html"
            host.write_text(HOST % (width, height), encoding="utf-8")
            window = f"--window-size={max(width, 500)},{height}"
            proc = _chromium(binary, window, "--dump-dom", host.as_uri())
            found = re.search(r'<pre id="evtsync-browser-probe">(.*?)</pre>', proc.stdout, re.S)
            if not found:
                raise RuntimeError(f"the probe did not run at {width} px: {proc.stderr[-500:]}")
            import html as _html

            results[width] = json.loads(_html.unescape(found.group(1)))
            shot = out / f"report-{width}.png"
            _chromium(binary, window, f"--screenshot={shot}", host.as_uri())
            results[width]["screenshot"] = str(shot)
    return results


def problems(results: dict) -> list[str]:
    """Every failed check, one line each."""
    lines = []
    for width, r in results.items():
        for item in r["overflow"]:
            lines.append(f"{width} px: overflows the page: {item}")
        if r["scroll_width"] > r["width"] + 1:
            lines.append(f"{width} px: the page scrolls sideways ({r['scroll_width']} px wide; e.g. {r.get('wide')})")
        if r["width"] != width:
            lines.append(f"{width} px: the page was laid out {r['width']} px wide, not {width}")
        for item in r["broken_images"]:
            lines.append(f"{width} px: image does not decode: {item}")
        lines += figure_problems(width, r)
        for item in r["network"]:
            lines.append(f"{width} px: network request: {item}")
        if r["n_images"] == 0:
            lines.append(f"{width} px: no images at all")
    return lines


def figure_problems(width: int, r: dict) -> list[str]:
    """Figures that stick out of their box, and (at <= :data:`NARROW_MEDIA` px, a phone) figures
    whose smallest text is shown below :data:`MIN_FIGURE_TEXT_PX` CSS pixels or of unknown size."""
    lines = []
    for f in r.get("figures", []):
        if f["overflow"]:
            lines.append(f"{width} px: figure wider than its box: {f['alt']} ({f['shown']} px shown)")
        if width <= NARROW_MEDIA and f["text_px"] is None:
            lines.append(f"{width} px: figure text size unknown (no data-fonts for its {f['natural']} px rendering): {f['alt']}")
        elif width <= NARROW_MEDIA and f["text_px"] < MIN_FIGURE_TEXT_PX:
            lines.append(f"{width} px: figure text shown at {f['text_px']} px < {MIN_FIGURE_TEXT_PX}: {f['alt']} "
                         f"({f['natural']} px shown at {f['shown']})")
    return lines


#: The first screen's answers (evtsync.report.sections.summary.first_answers), by HTML id, in order.
ANSWERS = ("answer-tax", "answer-who", "answer-without", "answer-bigger")


def first_screen_problems(results: dict) -> list[str]:
    """Every failed first-screen check (issue 49), one line each: per width, each of the four
    answers present, inside the first viewport (top >= 0, bottom <= the window's height) and with
    nothing in it wider than the screen or scrolling sideways; at <= 600 px the summary shown as
    cards (none overflowing) instead of its table and no text below 11 px; above, the summary table
    not scrolling sideways."""
    lines = []
    for width, r in results.items():
        found = r.get("answers", {})
        for key in ANSWERS:
            a = found.get(key)
            if a is None:
                lines.append(f"{width} px: {key} missing")
                continue
            if a["top"] < 0 or a["bottom"] > r["height"]:
                lines.append(f"{width} px: {key} outside the first screen (top {a['top']}, bottom {a['bottom']} "
                             f"of {r['height']})")
            for item in a["overflow"]:
                lines.append(f"{width} px: {key} overflows horizontally: {item}")
        s = r.get("summary", {})
        if width <= 600:
            if s.get("table_shown") or not s.get("cards_shown"):
                lines.append(f"{width} px: the summary is not shown as cards (table shown {s.get('table_shown')})")
            for item in s.get("cards_overflow", []):
                lines.append(f"{width} px: a summary card overflows: {item}")
            for item in r.get("small_text", []):
                lines.append(f"{width} px: text below 11 px: {item}")
        elif s.get("table_scroll", 0) > s.get("table_box", 0) + 1:
            lines.append(f"{width} px: the summary table scrolls sideways ({s['table_scroll']} px in a "
                         f"{s['table_box']} px box)")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("--out", type=Path, default=Path("browser-check"))
    parser.add_argument("--width", type=int, action="append", default=None)
    parser.add_argument("--height", type=int, default=900, help="the window's height (default 900)")
    args = parser.parse_args(argv)
    results = check_report(args.report, args.out, tuple(args.width or WIDTHS), args.height)
    (args.out / "findings.json").write_text(json.dumps(results, indent=2))
    bad = problems(results) + first_screen_problems(results)
    for width, r in results.items():
        print(f"{width} px: {r['n_images']} images, page width {r['scroll_width']}, first screen: "
              + " | ".join(r["first_screen"][:6]))
    for line in bad:
        print(line)
    print("OK" if not bad else f"{len(bad)} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
