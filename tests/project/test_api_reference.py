"""docs/api-reference.md is generated from the docstrings and must be up to date; every public
name has a docstring."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("gen_api_docs", ROOT / "tools" / "gen_api_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_reference_is_current() -> None:
    text = _tool().render()
    assert (ROOT / "docs" / "api-reference.md").read_text(encoding="utf-8") == text, \
        "docs/api-reference.md is out of date: run .venv/bin/python tools/gen_api_docs.py"


def test_every_public_name_is_documented() -> None:
    assert "(no docstring)" not in _tool().render()
