"""Run planner: balanced orders, the seed's matrix, and execution with a stand-in binary."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from evtsync.cli import main
from evtsync.core.errors import NcclTestsError
from evtsync.nccltests.parse import parse_log
from evtsync.nccltests.plan import (
    Matrix,
    PlanSettings,
    build_plan,
    check_balance,
    design_orders,
    latin_orders,
    load_plan,
    mirrored_orders,
    run_plan,
)

FAKE = Path(__file__).parents[1] / "data" / "nccltests" / "bin" / "all_reduce_perf"  # a stand-in


def test_latin_square_puts_every_variant_in_every_position_once():
    for k in (2, 3, 4, 5):
        orders = latin_orders(k)
        assert all(sorted(o) == list(range(k)) for o in orders)
        for pos in range(k):
            assert sorted(o[pos] for o in orders) == list(range(k))


def test_seed_warmup_square():
    values = ("0", "1", "5", "20")
    orders = design_orders(Matrix("warmup", values, "latin", 4))
    assert [[values[i] for i in o] for o in orders] == [
        ["0", "1", "5", "20"], ["1", "5", "20", "0"], ["5", "20", "0", "1"], ["20", "0", "1", "5"]]


def test_mirrored_orders_balance_mean_position():
    for k, reps in ((4, 2), (2, 2), (3, 4), (5, 4), (4, 6)):
        orders = mirrored_orders(k, reps)
        for v in range(k):
            positions = [o.index(v) for o in orders]
            assert sum(positions) / reps == pytest.approx((k - 1) / 2)
            assert len(set(positions)) > 1


def test_odd_mirror_with_two_replicates_is_refused():
    m = Matrix("noise", ("idle", "same-core", "remote"), "mirror", 2)
    with pytest.raises(NcclTestsError, match="same-core would always run at position 1"):
        check_balance(m, design_orders(m))


def test_default_plan_matches_the_seed_matrix():
    plan = build_plan(PlanSettings(binary="./build/all_reduce_perf"))
    counts = Counter(e["matrix"] for e in plan["entries"])
    # seed: 16, 8, 8, 4, 4 runs; noise gets 4 mirrored replicates (12) so that no variant is fixed
    assert counts == {"warmup": 16, "iterations": 8, "blocking": 8, "instrumentation": 4, "affinity": 4, "noise": 12}
    for e in plan["entries"]:
        argv = e["argv"]
        assert argv[:3] == ["taskset", "-c", str(e["cpu"])]
        flag = {"warmup": "-w", "iterations": "-n", "blocking": "-z", "instrumentation": "-I"}.get(e["matrix"])
        if flag:
            assert argv[argv.index(flag) + 1] == e["variant"]
        assert argv[argv.index("-N") + 1] == "10" and argv[argv.index("-C") + 1] == "0"
    noise = {e["variant"]: e["noise_cpu"] for e in plan["entries"] if e["matrix"] == "noise"}
    assert noise == {"idle": None, "same-core": 0, "remote": 1}
    for name in counts:
        entries = [e for e in plan["entries"] if e["matrix"] == name]
        for variant in {e["variant"] for e in entries}:
            assert len({e["position"] for e in entries if e["variant"] == variant}) > 1


def test_run_with_stand_in_binary(tmp_path: Path):
    settings = PlanSettings(binary=str(FAKE), cpu=None, cycles=3)
    plan = build_plan(settings, ["warmup"])
    report = run_plan(plan, tmp_path / "out", timeout_s=60)
    assert report.n_failed == 0 and len(report.records) == 16
    for rec in report.records:
        log = tmp_path / "out" / rec["log"]
        assert log.is_file() and rec["rows"] == 18  # 6 sizes x 3 cycles
        if rec["matrix"] == "warmup":
            assert parse_log(log).runs[0].warmup_iters == int(rec["variant"])
    index = json.loads((tmp_path / "out" / "index.json").read_text())
    assert len(index["runs"]) == 16
    summary = report.summary
    warm = summary[(summary["matrix"] == "warmup") & (summary["placement"] == "out-of-place")]
    assert set(warm["variant"]) == {"0", "1", "5", "20"}
    assert (warm["n_processes"] == 4).all() and (warm["n_cycles"] == 12).all()  # 4 replicates x 3 cycles pooled
    assert (tmp_path / "out" / "summary.csv").is_file()


def test_failed_run_is_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAKE_NCCL_FAIL_Z", "3")
    plan = build_plan(PlanSettings(binary=str(FAKE), cpu=None, cycles=1), ["blocking"])
    report = run_plan(plan, tmp_path / "out", timeout_s=60)
    failed = [r for r in report.records if r["status"] != "ok"]
    assert len(failed) == 2 and all(r["variant"] == "3" and r["status"] == "exit status 1" for r in failed)


def test_plan_and_run_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    plan_path = tmp_path / "plan.json"
    assert main(["nccl-tests", "plan", "--binary", str(FAKE), "--no-affinity", "--matrices", "instrumentation",
                 "--cycles", "2", "--out", str(plan_path)]) == 0
    assert "4 commands" in capsys.readouterr().out
    assert len(load_plan(plan_path)["entries"]) == 4
    assert main(["nccl-tests", "run", str(plan_path), "--out", str(tmp_path / "runs"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["status"] for r in doc["runs"]] == ["ok"] * 4
    missing = tmp_path / "plan2.json"
    assert main(["nccl-tests", "plan", "--binary", str(tmp_path / "no_such_perf"), "--no-affinity",
                 "--matrices", "warmup", "--out", str(missing)]) == 0
    capsys.readouterr()
    assert main(["nccl-tests", "run", str(missing), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "binary not found" in err and len(err.strip().splitlines()) == 1
    assert main(["nccl-tests", "plan", "--binary", "b", "--matrices", "noise", "--replicates", "noise=2"]) == 2
    assert "always run at position" in capsys.readouterr().err


def _plan_with(tmp_path: Path, argv: list[str] | None = None, log: str | None = None) -> Path:
    """A plan of the stand-in whose first entry is edited, as a plan file from elsewhere might be."""
    plan = build_plan(PlanSettings(binary=str(FAKE), cpu=None, cycles=1), ["instrumentation"])
    if argv is not None:
        plan["entries"][0]["argv"] = argv
    if log is not None:
        plan["entries"][0]["log"] = log
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan))
    return path


@pytest.mark.parametrize("argv", [
    ["sh", "-c", "touch {marker}"],
    ["mpirun", "-np", "2", "bash", "-c", "touch {marker}; all_reduce_perf"],
    ["mpirun", "--oversubscribe", "touch", "{marker}", "all_reduce_perf"],
    ["/usr/bin/env", "touch", "{marker}"],
    ["touch", "{marker}"],
])
def test_a_plan_runs_only_nccl_tests_binaries(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                              argv: list[str]) -> None:
    """Issue 33 (8): ``nccl-tests run PLAN`` executed any command a plan named (a ``sh -c`` ran)."""
    marker = tmp_path / "ran"
    plan = _plan_with(tmp_path, [a.format(marker=marker) for a in argv])
    capsys.readouterr()
    assert main(["nccl-tests", "run", str(plan), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "plan entry 0: refusing to run" in err and "--allow-any-command" in err
    assert not marker.exists() and not (tmp_path / "out").exists()  # nothing ran, nothing written


def test_any_command_runs_when_the_user_opts_in(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    plan = load_plan(_plan_with(tmp_path, ["sh", "-c", f"touch {marker}"]))
    report = run_plan(plan, tmp_path / "out", timeout_s=60, allow_any_command=True)
    assert marker.exists()
    assert report.records[0]["status"].startswith("no table")  # it ran; its output is no nccl-tests log


def test_wrapped_binaries_are_accepted() -> None:
    from evtsync.nccltests.plan import _tool_of

    for argv in (["taskset", "-c", "3", str(FAKE), "-b", "1M"],
                 ["mpirun", "-np", "16", "-x", "NCCL_DEBUG=INFO", "--bind-to", "none", "./all_reduce_perf"],
                 ["srun", "--mpi=pmix", "-N", "2", "--ntasks-per-node=8", "alltoall_perf_mpi", "-g", "1"]):
        assert _tool_of(argv)[0] is not None, argv


@pytest.mark.parametrize("log", ["../../x.log", "ABSOLUTE", "a/../../x.log"])
def test_a_plan_writes_only_under_out(tmp_path: Path, capsys: pytest.CaptureFixture[str], log: str) -> None:
    """Issue 33 (8): logs were written outside --out (``../../x.log``, absolute paths). The
    absolute path lies in this test's own folder (not the shared /tmp: issue 47, item 12)."""
    out = tmp_path / "deep" / "out"
    if log == "ABSOLUTE":
        log = str(tmp_path / "x.log")
    plan = _plan_with(tmp_path, log=log)
    capsys.readouterr()
    assert main(["nccl-tests", "run", str(plan), "--out", str(out), "--allow-any-command"]) == 2
    err = capsys.readouterr().err
    assert f"log {log!r} lies outside the output folder" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.log").exists()
    assert not out.exists()
