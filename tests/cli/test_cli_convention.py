"""The command-line convention of docs/cli.md ("Conventions"), checked over every command of
:data:`evtsync.cli.COMMANDS` by parsing their parsers (issue 34 item 1).

A new command or option that breaks the convention fails here, naming itself.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from evtsync.cli import COMMANDS, build_parser, main
from evtsync.cli._common import OUT_KINDS, DeprecatedAlias, ListOption, interval_level
from evtsync.core.defaults import INTERVAL_LEVEL

ROOT = Path(__file__).resolve().parents[2]

#: Repeatable options whose values are patterns or specifications that may themselves hold
#: commas (a regular expression, ``tp=0,1,2,3``, ``KIND:RANK:…``): one value per use, by design.
ONE_VALUE_PER_USE = {"--pg", "--comm-kernel", "--category", "--gemm-pattern", "--where", "--plant", "--replicates",
                     "--design", "--extra"}


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[tuple[str, argparse.ArgumentParser]]:
    out = []
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs and path:
        out.append((" ".join(path), parser))
    for action in subs:
        for name, child in action.choices.items():
            out += _leaves(child, (*path, name))
    return out


PARSER = build_parser()
LEAVES = dict(_leaves(PARSER))


def test_every_command_is_walked() -> None:
    assert {name.split()[0] for name in LEAVES} == set(COMMANDS)
    assert len(LEAVES) >= len(COMMANDS) + 5  # nccl-tests has six subcommands


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_every_command_prints_json(name: str) -> None:
    flags = {opt for a in LEAVES[name]._actions for opt in a.option_strings}
    assert "--json" in flags, f"evtsync {name} has no --json"


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_the_output_is_always_o_out(name: str) -> None:
    parser = LEAVES[name]
    outputs = [a for a in parser._actions
               if a.dest == "out" or {"-o", "--out", "--output", "--out-dir"} & set(a.option_strings)]
    if not outputs:
        return
    visible = [a for a in outputs if a.help != argparse.SUPPRESS]
    assert len(visible) == 1 and visible[0].option_strings == ["-o", "--out"] and visible[0].dest == "out", \
        f"evtsync {name}: the output option must be -o/--out, got {[a.option_strings for a in visible]}"
    for alias in outputs:
        if alias is not visible[0]:
            assert isinstance(alias, DeprecatedAlias) and alias.dest == "out", \
                f"evtsync {name}: {alias.option_strings} must be a hidden deprecated alias of -o/--out"
    assert parser.get_default("out_kind") in OUT_KINDS, f"evtsync {name}: -o/--out declares no kind"


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_one_level_option_with_one_default(name: str) -> None:
    for action in LEAVES[name]._actions:
        if action.dest == "level" and not isinstance(action, DeprecatedAlias):
            assert action.option_strings == ["--level"], f"evtsync {name}: {action.option_strings}"
            assert action.default == INTERVAL_LEVEL and action.type is interval_level, f"evtsync {name}: --level"
        if {"--ci-level", "--confidence", "--credible-level"} & set(action.option_strings):
            assert isinstance(action, DeprecatedAlias) and action.dest == "level", f"evtsync {name}: {action}"


@pytest.mark.parametrize("name", sorted(LEAVES))
def test_list_options_take_spaces_or_commas(name: str) -> None:
    for action in LEAVES[name]._actions:
        if not action.option_strings or isinstance(action, DeprecatedAlias):
            continue
        repeatable = action.nargs in ("+", "*") or isinstance(action, argparse._AppendAction | argparse._ExtendAction)
        if not repeatable or set(action.option_strings) & ONE_VALUE_PER_USE:
            continue
        assert isinstance(action, ListOption), f"evtsync {name} {action.option_strings}: a list option must be a ListOption"
        assert len(action.examples) == 2, f"evtsync {name} {action.option_strings}: give two example values"
        spaced, commas = argparse.Namespace(), argparse.Namespace()
        action(LEAVES[name], spaced, list(action.examples))
        action(LEAVES[name], commas, [",".join(action.examples)])
        assert getattr(spaced, action.dest) == getattr(commas, action.dest) and len(getattr(spaced, action.dest)) == 2


def test_topology_full_ring_with_spaces_or_commas(capsys: pytest.CaptureFixture[str]) -> None:
    """The case issue 34 names: `--n 8 64` worked but `--topology full ring` failed."""
    base = ["bandwidth", "--n", "8", "64", "--alpha-us", "5", "--bytes", "1Gi", "--tau-us", "3", "--json"]
    assert main([*base, "--topology", "full", "ring"]) == 0
    spaced = json.loads(capsys.readouterr().out)
    assert main([*base, "--topology", "full,ring"]) == 0
    commas = json.loads(capsys.readouterr().out)
    assert spaced == commas
    assert [(r["topology"], r["n"]) for r in spaced] == [("full", 8), ("full", 64), ("ring", 8), ("ring", 64)]


@pytest.mark.parametrize("argv", [
    ["bandwidth", "--topology", "ring", "--n", "8", "--alpha-us", "5", "--tau-us", "3", "--bytes"],
    ["diff", "a", "b", "--bytes"],
    ["run", "--bytes"],
])
def test_one_size_convention(argv: list[str]) -> None:
    """K/M/G/T are powers of ten and Ki/Mi/Gi/Ti powers of two in every size option."""
    parse = build_parser(argv[0]).parse_args
    assert parse([*argv, "1G"]).bytes == 1e9
    assert parse([*argv, "1Gi"]).bytes == 2**30
    assert parse([*argv, "256MiB"]).bytes == 256 * 2**20


def test_nccl_tests_sizes_are_passed_as_exact_byte_counts() -> None:
    """nccl-tests reads its own -b/-e suffixes as powers of two: the plan passes the byte count."""
    from evtsync.nccltests.plan import PlanSettings, build_plan

    settings = PlanSettings(binary="all_reduce_perf", min_bytes="1M", max_bytes="64Mi", cpu=None)
    argv = build_plan(settings, ["warmup"])["entries"][0]["argv"]
    assert argv[argv.index("-b") + 1] == "1000000" and argv[argv.index("-e") + 1] == str(64 * 2**20)
    args = build_parser("nccl-tests").parse_args(["nccl-tests", "plan", "--binary", "x"])
    assert (args.min_bytes, args.max_bytes) == ("1Mi", "64Mi")  # the old defaults' 2^20 and 2^26 bytes


def test_old_spellings_still_work_and_say_they_are_deprecated(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser("tax").parse_args(["tax", "x", "--output", "t.csv"])
    assert args.out == "t.csv"
    assert "--output is deprecated; use -o/--out" in capsys.readouterr().err
    args = build_parser("fit").parse_args(["fit", "z.csv", "--mle", "--ci-level", "0.8"])
    assert args.level == 0.8
    assert "--ci-level is deprecated; use --level" in capsys.readouterr().err
    assert "--output" not in build_parser("tax")._subparsers._group_actions[0].choices["tax"].format_help()


@pytest.mark.parametrize("text", ["0", "1", "90", "x"])
def test_level_outside_0_1_is_refused_at_parse_time(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser("predict").parse_args(["predict", "fit", "--level", text])
    assert "level in (0, 1)" in capsys.readouterr().err


def test_required_output_is_checked_after_aliases(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inject", str(tmp_path), "--rank", "0", "--delay-ms", "1"]) == 2
    assert "-o/--out" in capsys.readouterr().err


def test_docs_state_the_convention() -> None:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    head = text.split("## `evtsync`")[0]
    for words in ("-o/--out", "--json", "--level", "Gi", "commas", "deprecated", "-v"):
        assert words in head, f"docs/cli.md's conventions do not mention {words}"


def test_bandwidth_writes_a_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`bandwidth -o` (issue 34: it could not write a table). B* by hand for a ring of 8:
    p = 2(n-1) = 14, q = 2(n-1)/n = 1.75; B* = q S (1+eps) / (-eps (p alpha + tau))
    = 1.75 * 1e9 * 0.5 / (0.5 * (14 * 5 + 10) µs) = 21875 GB/s."""
    from evtsync.core.tableio import read_table

    out = tmp_path / "bstar.csv"
    assert main(["bandwidth", "--topology", "ring", "--n", "8", "--alpha-us", "5", "--bytes", "1G", "--tau-us", "10",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    table = read_table(out)
    assert len(table) == 1 and table.loc[0, "bstar_mean_gbps"] == pytest.approx(21875.0)
    assert main(["bandwidth", "--topology", "ring", "--n", "8", "--alpha-us", "5", "--bytes", "1G", "--tau-us", "10",
                 "--flops-factor", "1", "2", "-o", str(tmp_path / "sweep.parquet")]) == 0
    assert (tmp_path / "sweep_scaling.parquet").is_file() and len(read_table(tmp_path / "sweep.parquet")) == 2
