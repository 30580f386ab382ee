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
