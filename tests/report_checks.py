"""Checks shared by the report tests: an HTML report is self-contained and its images decode."""

from __future__ import annotations

import base64
import binascii
from html.parser import HTMLParser
from pathlib import Path

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class _Collector(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "img":
            self.images.append(values.get("src") or "")
        for key in ("src", "href"):
            value = values.get(key) or ""
            if tag != "a" and value and not value.startswith("data:"):
                self.external.append(f"<{tag} {key}={value}>")
        if tag in ("script", "link") and (values.get("src") or values.get("href")):
            self.external.append(f"<{tag}>")


def check_self_contained(path: Path) -> list[bytes]:
    """Parse the HTML; assert it loads nothing from outside and every <img> is a data: URI
    holding a decodable PNG (or SVG that parses). Returns the decoded images."""
    import xml.etree.ElementTree as ET

    parser = _Collector()
    parser.feed(path.read_text(encoding="utf-8"))
    assert not parser.external, f"external resources: {parser.external[:5]}"
    decoded = []
    for src in parser.images:
        head, _, payload = src.partition(",")
        assert head.startswith("data:image/") and head.endswith(";base64"), head[:40]
        try:
            data = base64.b64decode(payload, validate=True)
        except binascii.Error as exc:  # pragma: no cover - the assertion message is the point
            raise AssertionError(f"image does not decode: {exc}") from exc
        if head.startswith("data:image/png"):
            assert data.startswith(PNG_MAGIC)
        else:
            assert ET.fromstring(data).tag.endswith("svg")
        decoded.append(data)
    return decoded


def _one_pixel_png() -> bytes:
    """A valid 1x1 grey PNG, built here (signature, IHDR, IDAT, IEND)."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0)  # 1x1, 8-bit greyscale
    return PNG_MAGIC + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00\x80")) + chunk(b"IEND", b"")


def placeholder_figures(monkeypatch: object) -> None:
    """Make every report built while ``monkeypatch`` (a ``pytest.MonkeyPatch``) is active write a
    one-pixel PNG (and SVG when asked) for each figure it plans, wide and narrow, instead of drawing
    it: for tests whose subject is the pipeline or the report's text, not its figures (drawing them
    is ~18 s of a tiny run's report on 2 cores; issue 48). The files are where the real ones would be,
    so the report embeds them and the run's manifest records them as usual. The figures themselves
    are tested in tests/report and by the tiny demo's report in tests/pipeline/test_run_pipeline.py."""
    from evtsync.plots.base import narrow_png_path
    from evtsync.report.context import ReportContext

    png_bytes = _one_pixel_png()

    def draw_figures(self: ReportContext, workers: int | None = None) -> None:
        jobs, self._figures = self._figures, []
        for _draw, stem, svg in jobs:
            png = self.fig_dir / f"{stem}.png"
            for path in (png, narrow_png_path(png)):
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(png_bytes)
            if svg:
                png.with_suffix(".svg").write_text('<svg xmlns="http://www.w3.org/2000/svg"/>', encoding="utf-8")

    monkeypatch.setattr(ReportContext, "draw_figures", draw_figures)  # type: ignore[attr-defined]
