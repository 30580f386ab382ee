"""Statistics and regression verdicts on constructed pairs of real logs.

A real log's table is repeated as -N cycles with per-cycle noise chosen by the test, so
the test knows each size's cycle CV independently of the code under test.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from evtsync.cli import main
from evtsync.nccltests.parse import parse_log, parse_text
from evtsync.nccltests.stats import compare_logs, cv_pct, size_stats
from tests.conftest import DATA as SHARED_DATA  # the public data copied into tests/data/public

DATA = SHARED_DATA / "nccl-tests"
BASE = DATA / "all_reduce_A100-80GB_1x8_meta-gcm-fixture.txt"
ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+(\S+)\s+\S+\s+\S+\s+(\S+)\s+(\S+)\s+\S+\s+\S+\s+(\S+)\s*$")
FACTOR = 2 * 7 / 8  # all_reduce, 8 ranks


def cycles_log(path: Path, multipliers: np.ndarray, wrong: int = 0, header_edit: tuple[str, str] | None = None) -> tuple[str, dict]:
    """Text of ``path`` with its table repeated once per row of ``multipliers`` (cycle x size).

    Returns the text and, per size, the out-of-place times written (as printed).
    """
    text = path.read_text()
    lines = text.splitlines()
    rows = [m for m in (ROW.match(x) for x in lines) if m]
    first = lines.index(rows[0].group(0))
    last = lines.index(rows[-1].group(0))
    out = lines[:first]
    if header_edit:
        out = [ln.replace(*header_edit) for ln in out]
    written: dict[int, list[float]] = {}
    for cyc in range(multipliers.shape[0]):
        for j, m in enumerate(rows):
            size = int(m.group(1))
            groups = []
            for tok in (m.group(6), m.group(8)):
                t = round(float(tok) * multipliers[cyc, j], 2)
                alg = size / t / 1e3
                groups.append(f"{t:8.2f}  {alg:6.2f}  {alg * FACTOR:6.2f}  {wrong:6d}")
            written.setdefault(size, []).append(float(f"{float(m.group(6)) * multipliers[cyc, j]:.2f}"))
            out.append(f"{size:12d}  {int(m.group(2)):12d}  {m.group(3):>8}  {m.group(4):>6}  {int(m.group(5)):6d}"
                       + "  " + "  ".join(groups))
    out += lines[last + 1 :]
    return "\n".join(out) + "\n", written


def noise(rng: np.random.Generator, n_cycles: int, cv: float, shift: float = 0.0) -> np.ndarray:
    return (1.0 + shift) * (1.0 + cv * rng.standard_normal((n_cycles, 6)))


def test_cv_is_population_sd_over_mean():
    assert cv_pct(np.array([90.0, 110.0])) == pytest.approx(10.0)  # sd 10 (ddof=0), mean 100
    assert cv_pct(np.array([1.0, 2.0, 3.0, 4.0])) == pytest.approx(np.sqrt(1.25) / 2.5 * 100)


def test_size_stats_against_values_written():
    rng = np.random.default_rng(1)
    text, written = cycles_log(BASE, noise(rng, 10, 0.02))
    stats = size_stats(parse_text(text, path="c10"))
    oop = stats[stats["placement"] == "out-of-place"].set_index("size")
    for size, values in written.items():
        v = np.array(values)
        assert oop.loc[size, "n_cycles"] == 10
        assert oop.loc[size, "median_us"] == pytest.approx(np.median(v))
        assert oop.loc[size, "p95_us"] == pytest.approx(np.percentile(v, 95))
        assert oop.loc[size, "cycle_cv_pct"] == pytest.approx(v.std() / v.mean() * 100, rel=1e-9)
        assert oop.loc[size, "stability"] == ("stable" if v.std() / v.mean() <= 0.05 else "unstable")
    assert (stats["correctness"] == "passed").all()


def test_single_cycle_stability_is_unknown():
    stats = size_stats(parse_log(BASE))
    assert (stats["stability"] == "unknown").all() and not stats["precise_claims"].any()


def test_wrong_nonzero_is_not_a_valid_baseline():
    stats = size_stats(parse_log(DATA / "bad_all_reduce_RTX3090_4x1_idx20801464614-wrong-nonzero.txt"))
    assert (stats["correctness"] == "failed").all() and not stats["valid_baseline"].any()


def test_iteration_cv_is_reported_separately():
    text = ("# nThread 1 nGpus 8 minBytes 1048576 maxBytes 1048576 step: 2(factor) warmup iters: 1 iters: 20 agg iters: 1 "
            "validation: 1 graph: 0\n")
    for cyc, icv in enumerate((2.0, 9.0, 3.0)):
        t = 50.0 + cyc
        alg = 1048576 / t / 1e3
        g = f"{t:.2f} {alg:.2f} {alg * 1.75:.2f} 0 40.00 90.00 88.00 {icv:.2f}"
        text += f"1048576 262144 float sum -1 {g} {g}\n"
    stats = size_stats(parse_text(text, path="iter", collective="all_reduce", n_ranks=8))
    row = stats[stats["placement"] == "out-of-place"].iloc[0]
    assert row["iter_cv_pct"] == 3.0 and row["iter_cv_max_pct"] == 9.0
    assert row["iter_stability"] == "unstable"
    assert row["stability"] == "stable"  # cycle CV of 50, 51, 52 is 1.6%


@pytest.mark.parametrize("shift", [0.10, -0.08])
def test_stable_pair_gives_precise_verdict(shift: float):
    rng = np.random.default_rng(7)
    old_text, old_w = cycles_log(BASE, noise(rng, 10, 0.01))
    new_text, new_w = cycles_log(BASE, noise(rng, 10, 0.01, shift=shift))
    cmp = compare_logs(parse_text(old_text, path="old"), parse_text(new_text, path="new"))
    assert cmp.config_differences == []
    for v in cmp.verdicts:
        assert v.precise, v.reasons
        assert v.verdict == ("regression" if shift > 0 else "improvement")
        # the change the test put in, within the noise of medians of 10 cycles at 1% CV
        assert v.change_pct == pytest.approx(shift * 100, abs=2.0)
    oop = [v for v in cmp.verdicts if v.placement == "out-of-place"]
    for v in oop:
        expected = (np.median(new_w[v.size]) / np.median(old_w[v.size]) - 1) * 100
        assert v.change_pct == pytest.approx(expected, abs=1e-6)


def test_stable_pair_without_change_is_no_significant_change():
    rng = np.random.default_rng(3)
    old_text, _ = cycles_log(BASE, noise(rng, 10, 0.01))
    new_text, _ = cycles_log(BASE, noise(rng, 10, 0.01))
    cmp = compare_logs(parse_text(old_text, path="old"), parse_text(new_text, path="new"))
    assert {v.verdict for v in cmp.verdicts} == {"no significant change"}
    assert all(v.precise for v in cmp.verdicts)


def test_verdict_follows_the_cv_rule_size_by_size():
    rng = np.random.default_rng(11)
    old_text, old_w = cycles_log(BASE, noise(rng, 8, 0.01))
    new_text, new_w = cycles_log(BASE, noise(rng, 8, 0.06, shift=0.15))
    cmp = compare_logs(parse_text(old_text, path="old"), parse_text(new_text, path="new"))
    checked = 0
    for v in cmp.verdicts:
        if v.placement != "out-of-place":
            continue
        new_cv = np.std(new_w[v.size]) / np.mean(new_w[v.size]) * 100
        if new_cv > 5:
            assert not v.precise and v.change_pct is None
            assert v.verdict == "unstable: no precise claim"
            assert any("NEW unstable" in r for r in v.reasons)
            checked += 1
        else:
            assert v.precise
    assert checked >= 3


@pytest.mark.parametrize(("cv", "precise"), [(0.049, True), (0.051, False)])
def test_cv_threshold_boundary(cv: float, precise: bool):
    # alternating m(1+c), m(1-c): population CV is exactly c
    alt = np.array([[1 + cv] * 6, [1 - cv] * 6] * 3)
    old_text, _ = cycles_log(BASE, alt)
    new_text, _ = cycles_log(BASE, alt * 1.2)
    cmp = compare_logs(parse_text(old_text, path="old"), parse_text(new_text, path="new"))
    assert all(v.precise is precise for v in cmp.verdicts)
    if precise:
        assert all(v.verdict == "regression" and v.change_pct == pytest.approx(20, abs=0.05) for v in cmp.verdicts)


def test_failed_correctness_and_config_mismatch_refuse_a_verdict():
    rng = np.random.default_rng(5)
    old_text, _ = cycles_log(BASE, noise(rng, 6, 0.01))
    wrong_text, _ = cycles_log(BASE, noise(rng, 6, 0.01), wrong=3)
    cmp = compare_logs(parse_text(old_text, path="old"), parse_text(wrong_text, path="new"))
    assert all(v.verdict == "no verdict" and any("failed correctness" in r for r in v.reasons) for v in cmp.verdicts)
    other_iters, _ = cycles_log(BASE, noise(rng, 6, 0.01), header_edit=("iters: 20", "iters: 100"))
    cmp = compare_logs(parse_text(old_text, path="old"), parse_text(other_iters, path="new"))
    assert cmp.config_differences == ["iters: 20 vs 100"]
    assert all(v.verdict == "no verdict" for v in cmp.verdicts)


def test_p95_moving_the_other_way_refuses_a_verdict():
    base = np.ones((10, 6))
    new = np.full((10, 6), 1.10)
    new[:2] = 0.985  # median up 10%, beyond 2 SE (about 6%)
    old = base.copy()
    old[9] = 1.30  # old had a long tail: its P95 (1.165) is above every new value
    old_text, _ = cycles_log(BASE, old)
    new_text, _ = cycles_log(BASE, new)
    cmp = compare_logs(parse_text(old_text, path="old"), parse_text(new_text, path="new"), cv_threshold=20)
    assert all(v.verdict == "no verdict" and "P95" in v.reasons[0] for v in cmp.verdicts)


def test_compare_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    rng = np.random.default_rng(9)
    old_text, _ = cycles_log(BASE, noise(rng, 10, 0.01))
    new_text, _ = cycles_log(BASE, noise(rng, 10, 0.01, shift=0.1))
    (tmp_path / "old.txt").write_text(old_text)
    (tmp_path / "new.txt").write_text(new_text)
    args = ["nccl-tests", "compare", str(tmp_path / "old.txt"), str(tmp_path / "new.txt")]
    assert main([*args, "--fail-on-regression"]) == 1
    assert "12 regression(s)" in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["n_regressions"] == 12 and len(doc["verdicts"]) == 12
    assert main(["nccl-tests", "stats", "--json", str(tmp_path / "old.txt")]) == 0
    stats = json.loads(capsys.readouterr().out)["stats"]
    assert len(stats) == 12 and all(s["n_cycles"] == 10 for s in stats)
    assert main(["nccl-tests", "stats", str(tmp_path / "old.txt")]) == 0
    assert "stable" in capsys.readouterr().out


def test_old_error_format_uses_the_footer_for_correctness():
    text = ("# nThread 1 nGpus 4 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20 validation: 1\n"
            "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
            "           8             2   float     sum    38.95    0.00    0.00  0e+00    38.48    0.00    0.00  0e+00\n"
            "# Out of bounds values : {n} {status}\n")
    ok = size_stats(parse_text(text.format(n=0, status="OK"), path="old", collective="all_reduce", n_ranks=4))
    assert (ok["correctness"] == "passed").all()
    bad = size_stats(parse_text(text.format(n=2, status="FAILED"), path="old", collective="all_reduce", n_ranks=4))
    assert (bad["correctness"] == "failed").all()


def test_unchecked_correctness_gives_no_verdict():
    a2a = DATA / "bad_alltoall_B200_1x8_idx60744093665-headerless-uint8.txt"
    text = a2a.read_text()
    rows = [ln for ln in text.splitlines() if re.match(r"^\s*[1-9]\d*\s+\d+\s+uint8", ln)]
    cycles = "\n".join(rows * 3)  # the same values thrice: CV 0, stable
    cmp = compare_logs(parse_text(cycles, path="a", collective="alltoall", n_ranks=8),
                       parse_text(cycles, path="b", collective="alltoall", n_ranks=8))
    for v in cmp.verdicts:
        if v.placement == "in-place":  # #wrong printed as N/A
            assert v.verdict == "no verdict" and any("not checked" in r for r in v.reasons)
        else:
            assert v.verdict == "no significant change" and v.precise


def test_cli_stats_shows_busbw(capsys) -> None:
    """busbw, the number nccl-tests users read first, is in the text table (issue 34): the values
    here are the log's own busbw column (line 18 and 23 of the file), read by hand."""
    from pathlib import Path

    from evtsync.cli import main

    log = Path(__file__).resolve().parents[1] / "data" / "nccltests" / "replay_all_reduce_A100-80GB_1x8.txt"
    assert main(["nccl-tests", "stats", str(log), "--placement", "out-of-place"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line.split() for line in lines if "median_us" in line)
    col = header.index("busbw_GB/s")
    rows = {line.split()[header.index("size")]: line.split()[col] for line in lines
            if line.split()[:1] == ["0"] and "out-of-place" in line}
    assert rows["32Mi"] == "170.31" and rows["1Gi"] == "231.72"


# --- issue 47 (8): damaged rows are counted, named, and refused unless --allow-damaged ---
DAMAGE_BASE = DATA / "all_reduce_H100_2x8_gcp-a3mega-ztan.txt"  # 31 result rows (8 B .. 8 GiB), lines 25-55 (read by hand)


def _damaged(tmp_path: Path, edit) -> Path:
    """A copy of DAMAGE_BASE with ``edit(lines)`` applied (1-based line numbers below)."""
    lines = DAMAGE_BASE.read_text().splitlines()
    edit(lines)
    path = tmp_path / "damaged.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def _garble(lines: list[str]) -> None:
    for n in range(40, 51):  # 11 rows: their type column garbled
        lines[n - 1] = lines[n - 1].replace("float", "fl@at")


def _garbage_in_the_middle(lines: list[str]) -> None:
    lines.insert(34, "xx garbage zz")  # becomes line 35, between rows


def _wrong_beyond_float(lines: list[str]) -> None:
    assert lines[35].split()[0] == "16384"
    fields = lines[35].split()
    fields[8] = "-1e309"  # the out-of-place #wrong
    lines[35] = "  ".join(fields)


@pytest.mark.parametrize(("edit", "named", "kept_rows"), [
    (_garble, "line(s) 40-50 (11 ", 31 - 11),
    (_garbage_in_the_middle, "line(s) 35 (1 unreadable line inside a result table", 31),
    (_wrong_beyond_float, "line(s) 36 (1 #wrong that is not a count", 31),
])
def test_stats_refuses_damaged_rows_naming_their_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                       edit, named: str, kept_rows: int) -> None:
    """Before: exit 0 with 11 rows dropped behind a "truncated log?" hint, a garbage line skipped
    silently, and #wrong -1e309 shown as "not checked"."""
    path = _damaged(tmp_path, edit)
    capsys.readouterr()
    assert main(["nccl-tests", "stats", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"evtsync: error: {path}: " in err and named in err and "--allow-damaged" in err
    assert main(["nccl-tests", "stats", str(path), "--allow-damaged", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    lines = [d["line"] for d in doc["damaged_rows"]]
    assert lines == {_garble: list(range(40, 51)), _garbage_in_the_middle: [35],
                     _wrong_beyond_float: [36]}[edit]
    assert len({r["size"] for r in doc["stats"]}) == kept_rows
    assert main(["nccl-tests", "stats", str(path), "--allow-damaged"]) == 0
    out = capsys.readouterr().out
    assert f"DAMAGED: {len(lines)} result row(s)" in out and all(f"  line {n}: " in out for n in lines)


def test_a_wrong_value_that_is_no_count_fails_correctness(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _damaged(tmp_path, _wrong_beyond_float)
    assert main(["nccl-tests", "stats", str(path), "--allow-damaged", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)["stats"]
    checks = {(r["placement"], r["size"]): r["correctness"] for r in stats}
    assert checks[("out-of-place", 16384)] == "failed" and checks[("in-place", 16384)] == "passed"


def test_an_intact_log_has_no_damaged_rows(capsys: pytest.CaptureFixture[str]) -> None:
    """No-effect case: the unedited log is read whole, exit 0, nothing flagged."""
    assert parse_log(DAMAGE_BASE).damaged == []
    assert main(["nccl-tests", "stats", str(DAMAGE_BASE), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["damaged_rows"] == [] and len({r["size"] for r in doc["stats"]}) == 31


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_stats_out_lists_the_damaged_rows_in_a_companion_table(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              suffix: str) -> None:
    """Issue 47: with --allow-damaged, ``-o OUT`` writes beside the statistics the table
    ``OUT_damaged`` of the damaged rows (log, line, reason, text), named in the printed output:
    the 11 garbled rows, lines 40-50, each with its text as the file holds it (read here by
    hand); and a log without damage gets an empty companion (no stale one from an earlier run)."""
    import pandas as pd

    path = _damaged(tmp_path, _garble)
    out = tmp_path / f"stats{suffix}"
    capsys.readouterr()
    assert main(["nccl-tests", "stats", str(path), "--allow-damaged", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    companion = tmp_path / f"stats_damaged{suffix}"
    assert f"damaged rows (11: left out, or kept failing correctness) listed in {companion}" in printed
    table = pd.read_csv(companion) if suffix == ".csv" else pd.read_parquet(companion)
    raw = path.read_text().splitlines()
    assert list(table.columns) == ["log", "line", "reason", "text"]
    assert table["line"].tolist() == list(range(40, 51))
    assert set(table["log"]) == {str(path)}
    assert [t.strip() for t in table["text"]] == [raw[n - 1].strip() for n in range(40, 51)]
    assert all("fl@at" in t for t in table["text"])
    stats = pd.read_csv(out) if suffix == ".csv" else pd.read_parquet(out)
    assert stats["size"].nunique() == 31 - 11  # the statistics leave the 11 rows out, as the companion says
    # the same OUT from an intact log: the companion is rewritten with no rows
    assert main(["nccl-tests", "stats", str(DAMAGE_BASE), "-o", str(out)]) == 0
    assert "damaged rows (0: " in capsys.readouterr().out
    again = pd.read_csv(companion) if suffix == ".csv" else pd.read_parquet(companion)
    assert again.empty and list(again.columns) == ["log", "line", "reason", "text"]
