"""The command line starts without the heavy libraries (issue 16).

``evtsync --version``, ``--help``, a mistyped command, and an argument error of the commands
whose parsers are light import none of pandas, NumPy, SciPy, PyMC or matplotlib: the list of
modules comes from ``python -X importtime`` in a fresh interpreter, read as plain text.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("pandas", "numpy", "scipy", "pymc", "matplotlib", "xarray", "pytensor")


def _imported(args: list[str]) -> tuple[set[str], subprocess.CompletedProcess]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "evtsync", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=120)
    modules = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            modules.add(name.split(".")[0])
    return modules, done


@pytest.mark.parametrize("args, status", [
    (["--version"], 0), (["--help"], 0), ([], 2), (["no-such-command"], 2), (["-q", "--bogus"], 2),
    (["fit", "--bogus"], 2), (["fit", "--help"], 0), (["predict", "--bogus"], 2), (["compare", "--help"], 0),
    (["bandwidth", "--bogus"], 2), (["run", "--bogus"], 2), (["run", "--help"], 0), (["report", "--bogus"], 2),
    (["models", "--help"], 0), (["tax", "--bogus"], 2),
])
def test_start_imports_no_heavy_library(args: list[str], status: int) -> None:
    modules, done = _imported(args)
    assert done.returncode == status, done.stderr[-2000:]
    assert "evtsync" in modules  # the listing was read
    assert not modules & set(HEAVY), f"evtsync {' '.join(args)} imported {sorted(modules & set(HEAVY))}"


def test_version_prints_the_package_version() -> None:
    from evtsync import __version__

    _, done = _imported(["--version"])
    assert done.stdout.strip() == f"evtsync {__version__}"


def test_command_table_matches_the_modules() -> None:
    """The static table's help is what each module registers, and every module is listed."""
    import argparse
    import pkgutil

    import evtsync.cli as cli

    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    registered = {a.dest: a.help for a in sub._choices_actions}
    assert registered == {name: help_text for name, (_, help_text) in cli.COMMANDS.items()}
    modules = {i.name for i in pkgutil.iter_modules(cli.__path__) if not i.name.startswith("_")}
    assert modules == {module for module, _ in cli.COMMANDS.values()}


def test_only_the_chosen_command_is_built() -> None:
    import argparse

    from evtsync.cli import build_parser, command_of

    assert command_of(["-q", "fit", "z.csv"]) == "fit"
    assert command_of(["--version"]) is None
    assert command_of(["fitt"]) is None
    parser = build_parser(command_of(["fit", "z.csv", "--mle"]))
    args = parser.parse_args(["fit", "z.csv", "--mle"])
    assert args.handler.__name__ == "run_fit"
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert not sub.choices["tax"]._actions[1:]  # only -h: tax was registered by name and help


# --- issue 30 item 2: small commands start small ---------------------------------------------

#: what a small command must not load: the table and statistics stack (pyarrow comes with pandas)
TABLE_STACK = ("pandas", "pyarrow", "scipy")
NCCL_LOG = ROOT / "tests" / "data" / "nccltests" / "replay_all_reduce_A100-80GB_1x8.txt"


def _loaded_after(args: list[str]) -> tuple[set[str], int, str]:
    """Run ``evtsync ARGS`` in a fresh interpreter and read ``sys.modules`` at its end (``--help``
    ends in SystemExit, caught): the top-level packages loaded, the exit status, and stdout."""
    code = ("import json, sys\n"
            "from evtsync.cli import main\n"
            "try:\n"
            f"    rc = main({args!r})\n"
            "except SystemExit as exc:\n"
            "    rc = exc.code or 0\n"
            "print('\\nMODULES ' + json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
            "sys.exit(rc)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120)
    line = next(ln for ln in done.stdout.splitlines() if ln.startswith("MODULES "))
    return set(json.loads(line[len("MODULES "):])), done.returncode, done.stdout


@pytest.mark.parametrize("args", [
    ["models"],
    ["models", "--json"],
    ["nccl-tests", "parse", str(NCCL_LOG)],
    ["nccl-tests", "parse", str(NCCL_LOG), "--json"],
    ["nccl-tests", "stats", str(NCCL_LOG)],
    ["nccl-tests", "stats", str(NCCL_LOG), "--json"],
    ["nccl-tests", "stats", str(NCCL_LOG), str(NCCL_LOG), "--pool", "--placement", "in-place"],
], ids=lambda a: " ".join(a[:2]) + (" --json" if "--json" in a else ""))
def test_small_commands_load_no_table_stack(args: list[str]) -> None:
    """The work itself, not only the parser: ``sys.modules`` at the end of the command."""
    modules, rc, out = _loaded_after(args)
    assert rc == 0, out[-2000:]
    assert "evtsync" in modules and out.strip()
    assert not modules & set(TABLE_STACK), f"evtsync {' '.join(args)} loaded {sorted(modules & set(TABLE_STACK))}"


def test_stats_writes_its_table_with_pandas_only_then(tmp_path: Path) -> None:
    """``nccl-tests stats -o`` still writes the table (pandas is loaded for the writing): the rows
    printed and the rows written agree; the log's two placements of six sizes (32Mi to 1Gi, counted in the file)."""
    out = tmp_path / "stats.csv"
    modules, rc, stdout = _loaded_after(["nccl-tests", "stats", str(NCCL_LOG), "-o", str(out), "--json"])
    assert rc == 0, stdout[-2000:]
    assert "pandas" in modules
    printed = json.loads(stdout.split("\nMODULES ")[0])["stats"]
    import pandas as pd

    written = pd.read_csv(out)
    assert len(written) == len(printed) == 12
    assert written["median_us"].tolist() == [r["median_us"] for r in printed]


def _every_command() -> list[str]:
    from evtsync.cli import COMMANDS

    return list(COMMANDS)  # blocks and synth too: their choices come from light modules


@pytest.mark.parametrize("command", _every_command())
def test_help_of_every_command_loads_no_table_stack(command: str) -> None:
    modules, rc, out = _loaded_after([command, "--help"])
    assert rc == 0, out[-2000:]
    assert not modules & set(TABLE_STACK), f"evtsync {command} --help loaded {sorted(modules & set(TABLE_STACK))}"
