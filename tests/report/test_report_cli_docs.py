"""docs/cli.md is generated from the CLI and must be up to date."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tool():
    spec = importlib.util.spec_from_file_location("gen_cli_docs", ROOT / "tools" / "gen_cli_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_current() -> None:
    import re
    import sys

    import pytest

    tool = _tool()
    current = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    rendered_with = re.search(rf"{tool.PYTHON_TAG} (\d+\.\d+)", current)
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    if rendered_with and rendered_with.group(1) != here:
        pytest.skip(f"docs/cli.md was rendered with Python {rendered_with.group(1)}, this is {here}")
    text = tool.render()
    assert (ROOT / "docs" / "cli.md").read_text(encoding="utf-8") == text, \
        "docs/cli.md is out of date: run .venv/bin/python tools/gen_cli_docs.py"


def test_cli_reference_covers_every_command() -> None:
    from evtsync.cli import build_parser

    text = _tool().render()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    for name in sub.choices:
        assert f"`evtsync {name}`" in text
    assert "--force" in text and "FIT_OR_RUN_DIR" in text
