"""Every command block of README.md and docs/ is either executed here or says why not (issue 34 item 6).

A fenced block is preceded by one marker line, ``<!-- docs-test: KIND [note] -->``:

- ``run``: executed by the default test run in a scratch folder; ``slow``: the same in the slow
  run. Input files the commands name are taken from tests/data, else from the shared data
  (skipped where absent). A command shown as ``$ evtsync …`` followed by its output has that
  output checked: every output line without an ellipsis must appear in what the command
  printed (whitespace aside; a line wrapped in the docs may span several printed words).
- ``user-data``: needs the reader's own traces, fits or machine (named in the note);
- ``synopsis``: a usage pattern with placeholders, not a command; ``output``: printed text;
- ``covered``: run by the test named in the note (e.g. the full demo, a slow test);
- ``benchmark``: a measurement that takes minutes of CPU, run by hand (docs/performance.md).

docs/cli.md is generated from the parser (tests/report/test_report_cli_docs.py) and left out.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("EVTSYNC_SHARED", ROOT.parent / "shared")) / "data"
KINDS = {"run", "slow", "user-data", "synopsis", "output", "covered", "benchmark"}
FENCE = re.compile(r"^(?P<marker>[ ]*<!-- docs-test: (?P<kind>[a-z-]+)(?P<note>[^>]*?)-->\n)?"
                   r"[ ]*```(?P<lang>\w*)\n(?P<body>.*?)^[ ]*```", re.S | re.M)


@dataclass
class Block:
    """One fenced block of a document, with its marker."""

    path: Path
    line: int
    kind: str | None
    note: str
    lang: str
    body: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks() -> list[Block]:
    """Every fenced block of README.md and docs/*.md (docs/cli.md is generated)."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if path.name == "cli.md":
            continue
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            line = text[: m.start("lang")].count("\n") + 1
            out.append(Block(path, line, m.group("kind"), (m.group("note") or "").strip(), m.group("lang"),
                             m.group("body")))
    return out


def test_every_block_says_whether_it_runs() -> None:
    unmarked = [str(b) for b in blocks() if b.kind is None]
    unknown = [f"{b} ({b.kind})" for b in blocks() if b.kind is not None and b.kind not in KINDS]
    assert not unmarked, "blocks without a <!-- docs-test: KIND --> line before them: " + ", ".join(unmarked)
    assert not unknown, f"unknown docs-test kinds (expected one of {sorted(KINDS)}): " + ", ".join(unknown)
    for b in blocks():
        if b.kind in ("user-data", "covered"):
            assert b.note, f"{b}: say what data it needs or which test runs it"


def _commands(body: str) -> list[tuple[str, list[str]]]:
    """(command, its documented output lines) in a block; ``$ `` marks commands followed by output,
    plain lines are commands without output; ``\\`` continues a command, ``#`` starts a comment."""
    lines = body.splitlines()
    prompted = any(line.startswith("$ ") for line in lines)
    out: list[tuple[str, list[str]]] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if prompted and not line.startswith("$ "):
            if out:
                out[-1][1].append(line)
            i += 1
            continue
        command = line[2:] if line.startswith("$ ") else line
        while command.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            command = command.rstrip()[:-1] + " " + lines[i].strip()
        command = re.sub(r"\s+#.*$", "", command).strip()
        if command and not command.startswith("#"):
            out.append((command, []))
        i += 1
    return out


def _inputs(command: str, cwd: Path) -> None:
    """Link every file the command names that exists in tests/data or the shared data into ``cwd``."""
    for word in shlex.split(command):
        name = Path(word).name
        if not re.search(r"\.(txt|log|csv|parquet|json|gz)$", name) or (cwd / name).exists():
            continue
        found = [*(ROOT / "tests" / "data").rglob(name), *(SHARED.rglob(name) if SHARED.is_dir() else [])]
        if found:
            (cwd / name).symlink_to(found[0])


def _normal(text: str) -> str:
    return " ".join(text.split())


def _run_block(block: Block, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    bindir = tmp_path / "bin"  # `evtsync` and `python` as this interpreter with this tree
    bindir.mkdir()
    for name, target in (("evtsync", f'exec "{sys.executable}" -m evtsync "$@"'),
                         ("python", f'exec "{sys.executable}" "$@"'), ("python3", f'exec "{sys.executable}" "$@"')):
        (bindir / name).write_text(f"#!/bin/sh\n{target}\n")
        (bindir / name).chmod(0o755)
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"
    work = tmp_path / "work"
    work.mkdir()
    for command, expected in _commands(block.body):
        _inputs(command, work)
        missing = [w for w in shlex.split(command) if re.search(r"\.(txt|log|csv)$", w) and not (work / w).exists()
                   and not (ROOT / w).exists()]
        if missing:
            pytest.skip(f"{block}: input {missing[0]} not found (tests/data or the shared data)")
        proc = subprocess.run(command, shell=True, cwd=work, env=env, capture_output=True, text=True, timeout=900)
        printed = _normal(proc.stdout + "\n" + proc.stderr)
        shows_error = any(line.startswith("evtsync: error") for line in expected)
        assert (proc.returncode != 0) == shows_error, f"{block}: `{command}` exit {proc.returncode}: {proc.stderr[-800:]}"
        assert "Traceback" not in proc.stderr, f"{block}: `{command}`: {proc.stderr[-800:]}"
        for line in expected:
            if line.strip() and "..." not in line and "…" not in line:
                assert _normal(line) in printed, f"{block}: `{command}` did not print: {line!r}"


@pytest.mark.parametrize("block", [b for b in blocks() if b.kind == "run"], ids=str)
def test_documented_commands_run(block: Block, tmp_path: Path) -> None:
    _run_block(block, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in blocks() if b.kind == "slow"], ids=str)
def test_documented_long_commands_run(block: Block, tmp_path: Path) -> None:
    _run_block(block, tmp_path)
