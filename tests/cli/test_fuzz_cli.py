"""Hypothesis fuzzing of the CLI's arguments (issue 18): whatever strings a user types for --pg,
--rank-from, the numeric flags, --gev, --level or the output paths, ``evtsync`` never lets an
exception escape (a traceback), and exits 0, or 2 with exactly one error line.

Derandomized (the same examples on every run, so CI is reproducible) and bounded (a few dozen
examples per command on a 4-rank synthetic trace set), so the file runs in seconds.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evtsync.cli import main

ERROR_LINE = re.compile(r"^(evtsync: error: |evtsync [\w -]+: error: )")
FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

#: numbers as users type them, and what they mistype
numbers = st.one_of(
    st.integers(-10**6, 10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["0", "-0", "1e30", "-1e30", "nan", "inf", "-inf", "1e-320", "", " ", "1,2", "0x10", "1_000"]),
    st.text(alphabet="0123456789.-+eEnaif, ", max_size=8),
)
pg_texts = st.one_of(st.text(alphabet="tp=0123456789-,@ x", max_size=14),
                     st.sampled_from(["tp=0-3", "tp=0-3@7", "tp=0-", "=", "tp=0--3", "tp=0-3@", "tp=,", "a=b=c"]))
names = st.text(alphabet="abc./-_~ \\x:é", min_size=0, max_size=10)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from evtsync.synth import SynthConfig, synthesize

    out = tmp_path_factory.mktemp("tiny")
    return synthesize(SynthConfig.build(ranks=4, tp=4, iterations=1, layers=1, seed=0), out / "set").traces_dir


@pytest.fixture(scope="module")
def fit_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import numpy as np
    import pandas as pd

    from evtsync.evt.bayesfit import save_fit
    from evtsync.evt.fit import tree_from_draws

    rng = np.random.default_rng(0)
    z = rng.gumbel(size=50)
    tree = tree_from_draws({"mu": rng.normal(0, 0.1, (2, 20)), "sigma": np.exp(rng.normal(0, 0.1, (2, 20)))},
                           pd.DataFrame({"cell": ["all"]}), z, np.zeros(50, dtype=int), family="gumbel")
    out = tmp_path_factory.mktemp("fit") / "fit"
    save_fit(tree, out)
    return out


def _check(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    try:
        status = main(["-q", *argv])
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        status = exc.code
    err = capsys.readouterr().err
    assert status in (0, 2), (argv, status, err[-800:])
    if status:
        errors = [line for line in err.splitlines() if ERROR_LINE.match(line)]
        assert len(errors) == 1, (argv, err[-800:])


def changes(fields: dict[str, st.SearchStrategy[str]], most: int = 2) -> st.SearchStrategy[dict[str, str]]:
    """Up to ``most`` of ``fields`` given fuzzed values; the others keep a valid one, so that the
    examples reach the checks behind the parser, not only argparse's."""
    keys = sorted(fields)
    return st.lists(st.sampled_from(keys), max_size=most, unique=True).flatmap(
        lambda chosen: st.fixed_dictionaries({k: fields[k] for k in chosen}))


def _argv(base: dict[str, str], change: dict[str, str]) -> list[str]:
    out = []
    for key, value in {**base, **change}.items():
        if key.startswith("--"):
            out.append(f"{key}={value}")
        else:  # multi-valued: space separated after the option
            out += [key.lstrip("_"), *value.split(" ")]
    return out


TAX = {"--pg": "tp=0-3", "--rank-from": "file", "--end-tolerance-us": "100", "--ranks-per-host": "8", "--jobs": "1"}


@FUZZ
@given(change=changes({"--pg": pg_texts, "--rank-from": st.sampled_from(["order", "guess", "", "FILE"]),
                       "--end-tolerance-us": numbers, "--ranks-per-host": numbers, "--jobs": numbers,
                       "--comm-kernel": st.text(alphabet="ab(*[=.AllToAl", max_size=8)}))
def test_tax_arguments(tiny: Path, capsys: pytest.CaptureFixture[str], change: dict[str, str]) -> None:
    _check(["tax", str(tiny), "--no-cache", *_argv(TAX, change)], capsys)


@FUZZ
@given(name=names, suffix=st.sampled_from(["", ".csv", ".parquet", ".csv.gz", ".xlsx", "/", "/x.csv"]),
       where=st.sampled_from(["tmp", "/proc", "/", "file"]), option=st.sampled_from(["-o", "--plot"]))
def test_tax_output_paths(tiny: Path, tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str],
                          name: str, suffix: str, where: str, option: str) -> None:
    base = tmp_path_factory.mktemp("o")
    (base / "afile").write_text("x")
    root = {"tmp": str(base), "/proc": "/proc", "/": "/", "file": str(base / "afile")}[where]
    _check(["tax", str(tiny), "--no-cache", option, f"{root}/{name}{suffix}"], capsys)
    if where == "file":
        assert (base / "afile").read_text() == "x"


BANDWIDTH = {"--topology": "full", "--alpha-us": "5", "--bytes": "1e9", "--eps": "-0.5", "_--gev": "0.2 0.35 0.1",
             "--block-sd-us": "18", "_--n": "8 64", "--m": "4", "--flops-factor": "1"}
gev_texts = st.tuples(numbers, numbers, numbers).map(" ".join)


@FUZZ
@given(change=changes({"--topology": st.sampled_from(["ring", "torus3d", "ring,full", "star", "", "full,"]),
                       "--alpha-us": numbers, "--bytes": numbers, "--eps": numbers, "_--gev": gev_texts,
                       "--block-sd-us": numbers, "_--n": st.lists(numbers, min_size=1, max_size=2).map(" ".join),
                       "--m": numbers,
                       "--flops-factor": st.one_of(numbers, st.sampled_from(["0.5..4", "4..0.5", "1..", "..", "1,2"]))}))
def test_bandwidth_numbers(capsys: pytest.CaptureFixture[str], change: dict[str, str]) -> None:
    _check(["bandwidth", *_argv(BANDWIDTH, change)], capsys)


PREDICT = {"--level": "0.9", "--block-sd-us": "10", "--m": "4", "_--n": "8 64"}


@FUZZ
@given(change=changes({"--level": numbers, "--block-sd-us": numbers, "--m": numbers,
                       "_--n": st.lists(numbers, min_size=1, max_size=2).map(" ".join),
                       "--gpu": st.sampled_from(["H200", "B200", "", "x y"]),
                       "--preset": st.sampled_from(["B200", "NVL72", "nope", ""]),
                       "--cv": numbers, "--flops-factor": numbers}))
def test_predict_numbers(fit_dir: Path, capsys: pytest.CaptureFixture[str], change: dict[str, str]) -> None:
    _check(["predict", str(fit_dir), *_argv(PREDICT, change)], capsys)


@settings(max_examples=12, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(change=changes({"--level": numbers, "--min-collectives": numbers,
                       "--allow": st.sampled_from(["gpu", "bytes", "rank", ""]), "--seed": numbers}),
       blocks=changes({"--m": numbers, "--time": st.sampled_from(["span", "window", "wall"]),
                       "--gemm-pattern": st.text(alphabet="ab(*[.|", max_size=6), "--precision": names}))
def test_diff_and_blocks_numbers(tiny: Path, capsys: pytest.CaptureFixture[str], change: dict[str, str],
                                 blocks: dict[str, str]) -> None:
    _check(["diff", str(tiny), str(tiny), "--no-cache", *_argv({"--level": "0.9"}, change)], capsys)
    _check(["blocks", str(tiny), "--no-cache", *_argv({"--m": "4"}, blocks)], capsys)
