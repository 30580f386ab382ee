"""alpha and B: known truth, interval coverage, real H100/A100 logs, switch warnings, CLI."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from evtsync.cli import main
from evtsync.core.errors import NcclTestsError
from evtsync.nccltests.alpha import AlphaFit, alpha_from_log, fit_alpha, hockney_pq
from evtsync.nccltests.parse import MEASUREMENT_COLUMNS, ParsedLog, RunInfo
from tests.conftest import DATA as SHARED_DATA  # the public data copied into tests/data/public

DATA = SHARED_DATA / "nccl-tests"
GIB = 1 << 30
ROW = re.compile(r"^\s*(?:\d+:\s+)?(\d+)\s+\d+\s+\w+\s+\w+\s+-?\d+\s+(\S+)\s+\S+\s+(\S+)\s+")


def synthetic(sizes: np.ndarray, times: np.ndarray, n_ranks: int = 8, collective: str = "all_reduce") -> ParsedLog:
    rows = [dict(run=0, cycle=0, line=i, size=int(s), count=int(s) // 4, type="float", redop="sum", root=-1,
                 placement="out-of-place", time_us=float(t), algbw_gbps=math.nan, busbw_gbps=math.nan, wrong=0.0,
                 error=math.nan, i_min_us=math.nan, i_max_us=math.nan, i_p99_us=math.nan, i_cv_pct=math.nan,
                 bw_flag="") for i, (s, t) in enumerate(zip(sizes, times, strict=True))]
    info = RunInfo(index=0, collective=collective, n_ranks=n_ranks)
    assert all(list(r) == MEASUREMENT_COLUMNS for r in rows)
    return ParsedLog("synthetic", "text", [info], rows, [])


def test_pq_follow_spec_section_8():
    assert hockney_pq("all_reduce", "ring", 8) == (14, 1.75)
    p, q = hockney_pq("all_reduce", "3d-torus", 512)
    assert p == pytest.approx(6 * (8 - 1)) and q == pytest.approx(2 * 511 / 512)
    assert hockney_pq("all_reduce", "fully-connected", 128) == (2, pytest.approx(2 * 127 / 128))
    assert hockney_pq("all_gather", "ring", 16) == (15, 15 / 16)
    assert hockney_pq("all_reduce", "torus3d", 8) == hockney_pq("all_reduce", "torus", 8)  # bandwidth CLI's names
    assert hockney_pq("all_reduce", "full", 8) == (2, 1.75)
    with pytest.raises(NcclTestsError, match="unknown topology"):
        hockney_pq("all_reduce", "hypercube-ish", 8)


def test_exact_data_recover_alpha_and_b():
    alpha, bw, n = 5.0, 450.0, 8
    p, q = hockney_pq("all_reduce", "ring", n)
    sizes = 2.0 ** np.arange(28, 34)
    times = p * alpha + q * sizes / (bw * 1e3)
    fit = fit_alpha(synthetic(sizes, times, n), size_range=(GIB, 8 * GIB))
    assert fit.alpha_us == pytest.approx(alpha, rel=1e-8)
    assert fit.bandwidth_gbps == pytest.approx(bw, rel=1e-10)
    assert fit.size_range_bytes == (GIB, 8 * GIB) and fit.n_points == 4
    fc = fit_alpha(synthetic(sizes, times, n), size_range=(GIB, 8 * GIB), topology="fully-connected")
    assert fc.alpha_us == pytest.approx(alpha * p / 2, rel=1e-8)  # same intercept, p = 2


def _coverage(n_sims: int, seed: int) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    alpha, bw, n = 5.0, 400.0, 8
    p, q = hockney_pq("all_reduce", "ring", n)
    sizes = np.repeat(2.0 ** np.arange(24, 34), 3)
    truth = p * alpha + q * sizes / (bw * 1e3)
    hit_a = hit_b = 0
    for _ in range(n_sims):
        times = truth * (1 + 0.02 * rng.standard_normal(truth.size))
        fit = fit_alpha(synthetic(sizes, times, n), size_range=(sizes.min(), sizes.max()), level=0.9)
        hit_a += fit.alpha_interval_us[0] <= alpha <= fit.alpha_interval_us[1]
        hit_b += fit.bandwidth_interval_gbps[0] <= bw <= fit.bandwidth_interval_gbps[1]
    return hit_a / n_sims, hit_b / n_sims


def test_interval_coverage_is_nominal():
    # 2% multiplicative noise, 10 sizes x 3 cycles; 90% intervals; binomial SE of the rate ~ 0.021
    n_sims = 200
    cov_a, cov_b = _coverage(n_sims, seed=2)
    tol = 3.5 * math.sqrt(0.9 * 0.1 / n_sims)
    assert abs(cov_a - 0.9) < tol and abs(cov_b - 0.9) < tol


@pytest.mark.slow
def test_interval_coverage_is_nominal_long():
    n_sims = 2000
    cov_a, cov_b = _coverage(n_sims, seed=3)
    tol = 3.5 * math.sqrt(0.9 * 0.1 / n_sims)
    assert abs(cov_a - 0.9) < tol and abs(cov_b - 0.9) < tol


def _text_points(path: Path, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    pts = [(int(m.group(1)), float(m.group(2))) for ln in path.read_text().splitlines() if (m := ROW.match(ln))]
    arr = np.array([(s, t) for s, t in pts if lo <= s <= hi])
    return arr[:, 0], arr[:, 1]


@pytest.mark.parametrize(
    ("name", "n_ranks"),
    [("all_reduce_H100_2x8_gcp-a3mega-ztan.txt", 16), ("all_reduce_H100_2x4_idx26285727504-dgx-g4.txt", 8),
     ("all_reduce_A100-40GB_2x8_oci-hpc-oke.txt", 16), ("bad_all_reduce_H100_2x8_aws-awsome-p5-noheader.txt", 16)],
)
def test_real_logs_one_to_four_gib(name: str, n_ranks: int):
    fit = alpha_from_log(DATA / name, size_range=(GIB, 4 * GIB), topology="ring", level=0.9)
    assert isinstance(fit, AlphaFit)
    assert fit.size_range_bytes == (GIB, 4 * GIB) and fit.n_ranks == n_ranks and fit.collective == "all_reduce"
    assert fit.alpha_interval_us[0] < fit.alpha_us < fit.alpha_interval_us[1]
    assert fit.bandwidth_interval_gbps[0] < fit.bandwidth_gbps < fit.bandwidth_interval_gbps[1]
    # independent check: with three points the weighted line must pass within the residuals;
    # B from the end points' secant is inside the interval for these near-linear sweeps
    sizes, times = _text_points(DATA / name, GIB, 4 * GIB)
    q = 2 * (n_ranks - 1) / n_ranks
    secant_b = q * (sizes[-1] - sizes[0]) / (times[-1] - times[0]) / 1e3
    assert fit.bandwidth_interval_gbps[0] <= secant_b <= fit.bandwidth_interval_gbps[1]
    json.dumps(fit.to_dict())


def test_h100_ztan_alpha_and_b_plausible():
    fit = alpha_from_log(DATA / "all_reduce_H100_2x8_gcp-a3mega-ztan.txt", size_range=(GIB, 4 * GIB))
    busbw = {1 * GIB: 297.86, 2 * GIB: 318.40, 4 * GIB: 330.58}  # printed, out-of-place
    # T = p*alpha + q*S/B with alpha > 0 implies busbw(S) < B at every size
    assert fit.alpha_interval_us[0] > 0
    assert fit.bandwidth_gbps > max(busbw.values())
    assert fit.max_abs_residual_pct < 1.0


def test_default_range_is_the_linear_regime_and_stated():
    fit = alpha_from_log(DATA / "all_reduce_A100-80GB_2x8_meta-gcm-fixture.txt")
    assert fit.range_source.startswith("linear regime")
    assert fit.size_range_bytes[1] == GIB and fit.max_abs_residual_pct <= 5.0
    a100 = alpha_from_log(DATA / "all_reduce_A100-40GB_2x8_oci-hpc-oke.txt")
    # the busbw jump between 512 MiB and 1 GiB (165 -> 219 GB/s) bounds the linear regime
    assert a100.size_range_bytes[0] == GIB


def test_switch_inside_a_chosen_range_warns():
    fit = alpha_from_log(DATA / "all_reduce_A100-40GB_2x8_oci-hpc-oke.txt", size_range=(256 << 20, 8 * GIB))
    assert any("512MiB and 1GiB" in w and "switch" in w for w in fit.warnings)
    assert any("not linear" in w for w in fit.warnings)
    clean = alpha_from_log(DATA / "all_reduce_H100_2x8_gcp-a3mega-ztan.txt", size_range=(GIB, 8 * GIB))
    assert not any("switch" in w for w in clean.warnings)


def test_all_gather_h200_uses_one_phase_ring():
    fit = alpha_from_log(DATA / "all_gather_H200_2x8_skypilot-gcp-rdma.txt", size_range=(GIB, 8 * GIB))
    assert (fit.p, fit.q) == (15, 15 / 16) and fit.collective == "all_gather"


def test_too_few_points_is_a_clear_error():
    with pytest.raises(NcclTestsError, match="size range .* holds 1 size"):
        alpha_from_log(DATA / "all_reduce_A100-80GB_1x8_meta-gcm-fixture.txt", size_range=(GIB, 4 * GIB))


def test_alpha_cli(capsys: pytest.CaptureFixture[str]):
    log = str(DATA / "all_reduce_H100_2x8_gcp-a3mega-ztan.txt")
    assert main(["nccl-tests", "alpha", log, "--range", "1Gi:4Gi"]) == 0
    out = capsys.readouterr().out
    assert "size range 1Gi..4Gi" in out and "alpha =" in out and "interval" in out
    assert main(["nccl-tests", "alpha", log, "--range", "1Gi:4Gi", "--json", "--topology", "nvswitch"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["topology"] == "full" and doc["size_range_bytes"] == [GIB, 4 * GIB]
    # one size convention (evtsync.core.units): 8G is 8e9 bytes, below the log's 8 GiB = 8.59e9 size
    assert main(["nccl-tests", "alpha", log, "--range", "1G:8G", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["size_range_bytes"] == [GIB, 4 * GIB]
    assert main(["nccl-tests", "alpha", log, "--range", "4G:1G"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evtsync: error:") and "Traceback" not in err


def test_alpha_refuses_a_log_that_failed_correctness(shared_data) -> None:
    """methodology §9: a result with #wrong != 0 is not a valid baseline, so no alpha from it."""
    path = shared_data / "nccl-tests/bad_all_reduce_RTX3090_4x1_idx20801464614-wrong-nonzero.txt"
    wrong_rows = [line for line in path.read_text().splitlines()
                  if line.strip() and line.strip()[0].isdigit() and len(line.split()) >= 12
                  and line.split()[8] not in ("0", "N/A")]
    assert wrong_rows, "the fixture must hold rows with #wrong != 0"
    with pytest.raises(NcclTestsError, match="not a valid baseline"):
        alpha_from_log(path, size_range=(1, 1 << 40))


def test_old_generation_logs_take_correctness_from_the_footer() -> None:
    """The 2.x-era all_reduce table of tests/data (error column, footer '0 OK') fits without a
    correctness warning; the same table with a FAILED footer is refused; an aborted run warns."""
    from evtsync.nccltests.parse import parse_text

    local = Path(__file__).parents[1] / "data" / "nccltests" / "old_five_collectives_GTX1080_1x2_nccl-osx.txt"
    lines = local.read_text().splitlines()
    block = lines[lines.index("===begin all_reduce_perf test===") : lines.index("===begin all_gather_perf test===")]
    ok = fit_alpha(parse_text("\n".join(block), path="old"), size_range=(1 << 20, 1 << 27))
    assert not any("correctness" in w for w in ok.warnings)
    failed = "\n".join(block).replace("# Out of bounds values : 0 OK", "# Out of bounds values : 4 FAILED")
    with pytest.raises(NcclTestsError, match="footer says FAILED"):
        fit_alpha(parse_text(failed, path="old-failed"), size_range=(1 << 20, 1 << 27))
    aborted = "\n".join(block) + "\nOrlando: Test CUDA failure common.cu:422 'uncorrectable ECC error encountered'\n"
    fit = fit_alpha(parse_text(aborted, path="old-aborted"), size_range=(1 << 20, 1 << 27))
    assert any("the run aborted (Test CUDA failure common.cu:422" in w for w in fit.warnings)
