"""Compute blocks and pooled z-scores on hand-built Kineto traces with known block times.

Each test writes a small multi-rank job as real Kineto JSON (the reader, the PG alignment and
the block cutting all run on it) and computes the expected numbers directly from the times it
wrote: nothing expected here comes from evtsync.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evtsync.blocks.cut import compute_zscores, cut_blocks, zscore_table
from evtsync.blocks.zscores import pooled_sd, pooled_zscores
from evtsync.cli import main
from evtsync.core.errors import InputError, TraceError
from evtsync.sync.collectives import align_collectives
from evtsync.trace.traceset import load_traces

GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"
NVJET = "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_NTN"
NORM = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)"
ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)"
COMPUTE, SIDE, TP_STREAM, OTHER_STREAM = 7, 60, 24, 28
T0 = 1_000_000


@dataclass
class Job:
    """What a hand-built job wrote: trace folder and, per (rank, iteration, block), the block's
    busy, span and window time in µs."""

    folder: Path
    busy: dict[tuple[int, int, int], int]
    span: dict[tuple[int, int, int], int]
    window: dict[tuple[int, int, int], int]


def write_job(folder: Path, *, ranks: int, iterations: int, program: list[list[tuple[str, int]]],
              dur: Callable[[int, int, int, int], int], steps: bool = True, pg_desc: str = "mesh_tp",
              first_step: int = 5, write: Callable[[int], bool] = lambda r: True,
              other_pg_kernel: bool = False) -> Job:
    """A TP job: per iteration, block b's kernels then AllReduce b, for every block of ``program``.

    ``program[b]`` lists (kernel name, stream); kernels on one stream run back to back with a
    1 µs gap, each stream starting 3 µs after the previous collective ended. ``dur(rank,
    iteration, block, k)`` gives kernel k's duration. Every collective ends at the same time on
    every rank (the last arrival + 20 µs). With ``other_pg_kernel`` each rank also runs a
    NCCL kernel of another PG inside block 0 (which must not count as compute).
    """
    folder.mkdir(parents=True, exist_ok=True)
    events: dict[int, list[dict]] = {r: [] for r in range(ranks)}
    corr = {r: 0 for r in range(ranks)}
    busy, span, window = {}, {}, {}
    pg_ranks = str(list(range(ranks)))

    def kernel(r: int, name: str, stream: int, ts: int, d: int, args: dict | None = None) -> None:
        corr[r] += 1
        events[r].append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts,
                          "dur": d, "args": {"device": 0, "stream": stream, "correlation": corr[r],
                                             **(args or {})}})
        events[r].append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1,
                          "tid": 1, "ts": ts - 50, "dur": 4, "args": {"correlation": corr[r]}})

    prev_end = T0
    for it in range(iterations):
        it_start = prev_end
        for b, block in enumerate(program):
            arrivals = []
            for r in range(ranks):
                free: dict[int, int] = {}
                intervals = []
                for k, (name, stream) in enumerate(block):
                    start = free.get(stream, prev_end + 3)
                    d = dur(r, it, b, k)
                    kernel(r, name, stream, start, d)
                    intervals.append((start, start + d))
                    free[stream] = start + d + 1
                if other_pg_kernel and b == 0:
                    kernel(r, "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                           OTHER_STREAM, prev_end + 3, 400,
                           {"Collective name": "allgather", "Process Group Name": "9",
                            "Process Group Description": "mesh_dp", "Process Group Ranks": f"[{r}]",
                            "dtype": "BFloat16", "In msg nelems": 10, "Out msg nelems": 10, "Group size": 1})
                covered, last = 0, None
                for s, e in sorted(intervals):
                    if last is None or s >= last:
                        covered += e - s
                        last = e
                    elif e > last:
                        covered += e - last
                        last = e
                first = min(s for s, _ in intervals)
                end = max(e for _, e in intervals)
                busy[(r, it, b)], span[(r, it, b)] = covered, end - first
                arrivals.append(end + 2)
            coll_end = max(arrivals) + 20
            for r in range(ranks):
                window[(r, it, b)] = arrivals[r] - prev_end
                kernel(r, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
                       TP_STREAM, arrivals[r], coll_end - arrivals[r],
                       {"Collective name": "allreduce", "Process Group Name": "1",
                        "Process Group Description": pg_desc, "Process Group Ranks": pg_ranks,
                        "dtype": "BFloat16", "In msg nelems": 4096, "Out msg nelems": 4096,
                        "Group size": ranks})
            prev_end = coll_end
        if steps:
            for r in range(ranks):
                events[r].append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{first_step + it}",
                                  "pid": 1, "tid": 1, "ts": it_start - 60, "dur": prev_end - it_start,
                                  "args": {}})
                # real traces also carry the step as a GPU-side range (on GPU time, here lagging
                # far behind the CPU): it must not be taken for the CPU step
                events[r].append({"ph": "X", "cat": "gpu_user_annotation", "name": f"ProfilerStep#{first_step + it}",
                                  "pid": 0, "tid": COMPUTE, "ts": it_start + 5000, "dur": prev_end - it_start,
                                  "args": {}})
    for r in range(ranks):
        if not write(r):
            continue
        trace = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}],
                 "distributedInfo": {"backend": "nccl", "rank": r, "world_size": ranks},
                 "traceEvents": sorted(events[r], key=lambda e: e["ts"]), "displayTimeUnit": "ms"}
        (folder / f"rank-{r}.json").write_text(json.dumps(trace))
    return Job(folder, busy, span, window)


def noisy(seed: int, base: int = 200, spread: int = 30) -> Callable[[int, int, int, int], int]:
    """Kernel durations: base + independent integer noise per (rank, iteration, block, kernel)."""
    rng = np.random.default_rng(seed)
    table = rng.integers(0, spread, size=(64, 64, 16, 16))
    return lambda r, it, b, k: base + int(table[r, it, b, k])


def expected_z(job: Job, samples: list[list[int]], iterations: range, block: int,
               what: str = "busy") -> tuple[dict[tuple[int, int], float], float, float]:
    """z per (iteration, sample), s_pooled and the mean, straight from methodology §5 with loops."""
    times = getattr(job, what)
    ss, dof, total, count = 0.0, 0, 0.0, 0
    stats = {}
    for it in iterations:
        for s, ranks in enumerate(samples):
            x = [times[(r, it, block)] for r in ranks]
            mean = sum(x) / len(x)
            ss += sum((v - mean) ** 2 for v in x)
            dof += len(x) - 1
            total += sum(x)
            count += len(x)
            stats[(it, s)] = (max(x), mean)
    sd = math.sqrt(ss / dof)
    return {key: (mx - mean) / sd for key, (mx, mean) in stats.items()}, sd, total / count


PROGRAM = [
    [(NORM, COMPUTE), (GEMM, COMPUTE), (ADD, COMPUTE)],     # block 0: also holds the step boundary
    [(GEMM, COMPUTE), (NVJET, COMPUTE), (NORM, SIDE)],      # block 1: a side stream overlaps
    [(ADD, COMPUTE), (NORM, COMPUTE)],                      # block 2: no GEMM
]


@pytest.fixture(scope="module")
def job8(tmp_path_factory: pytest.TempPathFactory) -> Job:
    return write_job(tmp_path_factory.mktemp("job8"), ranks=8, iterations=6, program=PROGRAM, dur=noisy(1))


@pytest.fixture(scope="module")
def loaded8(job8: Job) -> dict:
    """job8 read and aligned once: keyword arguments for zscore_table / compute_zscores."""
    traces = load_traces(job8.folder)
    return {"traces": traces, "alignment": align_collectives(traces)}


@pytest.fixture(scope="module")
def table8(loaded8: dict) -> tuple[pd.DataFrame, object]:
    return compute_zscores(**loaded8)


# --- the pooled z-score formula -----------------------------------------------------------

def test_pooled_zscores_match_direct_computation() -> None:
    rng = np.random.default_rng(7)
    rows = []
    x = {}
    for block, scale in (("0:aaa", 100.0), ("1:bbb", 5000.0)):
        for inst in range(5):
            for sample in range(2):
                for j in range(4):
                    r = 2 * j + sample
                    x[(block, inst, sample, j)] = value = scale + rng.gumbel(0, scale / 50)
                    rows.append({"pg": "tp", "block": block, "instance": inst, "sample": sample, "rank": r,
                                 "busy_us": value, "gpu": "H100", "precision": "bf16", "position": 0,
                                 "signature": block[2:], "index": inst, "n_kernels": 3, "n_gemm_kernels": 1})
    table, zero = pooled_zscores(pd.DataFrame(rows), m=4)
    assert zero.empty and len(table) == 20
    for block in ("0:aaa", "1:bbb"):
        num = den = 0.0
        for inst in range(5):
            for sample in range(2):
                v = [x[(block, inst, sample, j)] for j in range(4)]
                mean = sum(v) / 4
                num += sum((a - mean) ** 2 for a in v)
                den += 3
        sd = math.sqrt(num / den)
        grand = sum(x[(block, i, s, j)] for i in range(5) for s in range(2) for j in range(4)) / 40
        for inst in range(5):
            for sample in range(2):
                v = [x[(block, inst, sample, j)] for j in range(4)]
                row = table[(table["block"] == block) & (table["instance"] == inst) & (table["sample"] == sample)]
                assert len(row) == 1
                row = row.iloc[0]
                assert row["z"] == pytest.approx((max(v) - sum(v) / 4) / sd, rel=1e-12)
                assert row["block_sd_us"] == pytest.approx(sd, rel=1e-12)
                assert row["block_mean_us"] == pytest.approx(grand, rel=1e-12)
                assert row["cv"] == pytest.approx(sd / grand, rel=1e-12)
                assert row["max_rank"] == 2 * int(np.argmax(v)) + sample
                assert row["dof"] == 30


def test_pooled_sd_helper_and_scale_invariance() -> None:
    x = np.array([[1.0, 2.0, 4.0, 7.0], [3.0, 3.0, 5.0, 5.0]])
    # squared deviations: row 1 mean 3.5 -> 6.25+2.25+0.25+12.25 = 21; row 2 mean 4 -> 4; dof 6
    assert pooled_sd(x) == pytest.approx(math.sqrt(25 / 6))
    assert pooled_sd(10 + 3 * x) == pytest.approx(3 * math.sqrt(25 / 6))
    with pytest.raises(InputError):
        pooled_sd(np.ones(4))


def test_identity_with_equal_times_is_reported_not_divided_by_zero() -> None:
    rows = [{"pg": "tp", "block": "0:a", "instance": i, "sample": 0, "rank": r, "busy_us": 10.0, "gpu": "H100",
             "precision": "bf16", "position": 0, "signature": "a", "index": i, "n_kernels": 1,
             "n_gemm_kernels": 1} for i in range(3) for r in range(4)]
    table, zero = pooled_zscores(pd.DataFrame(rows), m=4)
    assert table.empty and len(zero) == 3


# --- blocks cut from traces ----------------------------------------------------------------

def test_zscores_from_traces_equal_direct_computation_even_odd(job8: Job, table8) -> None:
    table, blocks = table8
    assert set(table["ranks"]) == {"0,2,4,6", "1,3,5,7"}
    assert (table["gpu"] == "H100").all() and (table["workload"] == "job80").all()
    # block 1 lies between AllReduce 0 and 1 of an iteration: position 1 in every ProfilerStep
    b1 = table[table["position"] == 1]
    assert b1["block"].nunique() == 1 and len(b1) == 12
    z, sd, mean = expected_z(job8, [[0, 2, 4, 6], [1, 3, 5, 7]], range(6), 1)
    for row in b1.itertuples():
        assert row.z == pytest.approx(z[(row.instance - 5, row.sample)], rel=1e-12)
        assert row.block_sd_us == pytest.approx(sd, rel=1e-12)
        assert row.block_mean_us == pytest.approx(mean, rel=1e-12)
        assert row.precision == "bf16" and row.n_gemm_kernels == 2 and row.has_gemm
    # block 0 closes at the first collective of a step: the first step has no opening collective
    b0 = table[table["position"] == 0]
    assert sorted(set(b0["instance"])) == [6, 7, 8, 9, 10]
    z0, sd0, _ = expected_z(job8, [[0, 2, 4, 6], [1, 3, 5, 7]], range(1, 6), 0)
    for row in b0.itertuples():
        assert row.z == pytest.approx(z0[(row.instance - 5, row.sample)], rel=1e-12)
    # block 2 has no GEMM: dropped and reported, never silently
    assert not (table["position"] == 2).any()
    dropped = blocks.dropped
    assert (dropped[dropped["reason"] == "no GEMM"].groupby("sample").size() == 6).all()


def test_busy_span_and_window_definitions(job8: Job, loaded8: dict) -> None:
    for what in ("busy", "span", "window"):
        table = zscore_table(**loaded8, time=what)
        z, sd, _ = expected_z(job8, [[0, 2, 4, 6], [1, 3, 5, 7]], range(6), 1, what)
        b1 = table[table["position"] == 1]
        assert len(b1) == 12 and (b1["time"] == what).all()
        for row in b1.itertuples():
            assert row.z == pytest.approx(z[(row.instance - 5, row.sample)], rel=1e-12)
            assert row.block_sd_us == pytest.approx(sd, rel=1e-12)
    # the side-stream kernel overlaps the compute stream: busy < sum of durations < span
    assert any(job8.busy[k] < job8.span[k] for k in job8.busy if k[2] == 1)


def test_per_rank_times_are_the_written_ones(job8: Job, loaded8: dict) -> None:
    blocks = cut_blocks(loaded8["traces"], loaded8["alignment"], keep_all=True)
    t = blocks.times
    assert len(t) == 8 * (6 * 3 - 1)
    for row in t.itertuples():
        key = (row.rank, row.instance - 5, row.position)
        assert row.busy_us == job8.busy[key]
        assert row.span_us == job8.span[key]
        assert row.window_us == job8.window[key]
        assert row.sample == row.rank % 2 and row.group_rank == row.rank


def test_three_samples_for_twelve_ranks(tmp_path: Path) -> None:
    job = write_job(tmp_path / "j12", ranks=12, iterations=3, program=PROGRAM[:2], dur=noisy(3))
    table = zscore_table(job.folder, m=4)
    samples = [[0, 3, 6, 9], [1, 4, 7, 10], [2, 5, 8, 11]]
    assert set(table["ranks"]) == {",".join(map(str, s)) for s in samples}
    z, sd, _ = expected_z(job, samples, range(3), 1)
    b1 = table[table["position"] == 1]
    assert len(b1) == 9
    for row in b1.itertuples():
        assert row.z == pytest.approx(z[(row.instance - 5, row.sample)], rel=1e-12)


def test_other_pg_nccl_kernels_are_not_compute(tmp_path: Path) -> None:
    job = write_job(tmp_path / "jo", ranks=4, iterations=3, program=PROGRAM[:2], dur=noisy(4),
                    other_pg_kernel=True)
    blocks = cut_blocks(load_traces(job.folder), pg="mesh_tp")
    t = blocks.times
    for row in t[t["position"] == 0].itertuples():
        assert row.busy_us == job.busy[(row.rank, row.instance - 5, 0)]
        assert row.n_kernels == 3


def test_iterations_from_repetition_without_profiler_steps(tmp_path: Path, table8) -> None:
    job = write_job(tmp_path / "nosteps", ranks=8, iterations=6, program=PROGRAM, dur=noisy(1), steps=False)
    table, blocks = compute_zscores(job.folder)
    assert "repetition" in next(iter(blocks.iterations.values()))
    with_steps = table8[0]
    # the same blocks with the same z-scores; identities are the same blocks, only the
    # phase of positions differs (counted from the first collective in the trace)
    assert len(table) == len(with_steps)
    assert sorted(np.round(table["z"], 9)) == sorted(np.round(with_steps["z"], 9))
    assert table["block"].nunique() == with_steps["block"].nunique() == 2


def test_signature_mismatch_is_dropped_per_sample(tmp_path: Path) -> None:
    program = [list(b) for b in PROGRAM[:2]]
    job_dir = tmp_path / "mis"
    write_job(job_dir, ranks=8, iterations=3, program=program, dur=noisy(5))
    # rank 3 ran another kernel in one block: rewrite its name in the file
    path = job_dir / "rank-3.json"
    trace = json.loads(path.read_text())
    hits = [e for e in trace["traceEvents"] if e.get("name") == NVJET]
    hits[1]["name"] = "nvjet_tst_64x64_64x8_2x1_v_bz_splitK_TNT"
    path.write_text(json.dumps(trace))
    table, blocks = compute_zscores(job_dir)
    bad = blocks.dropped[blocks.dropped["reason"] == "signature differs across ranks"]
    assert len(bad) == 1 and bad.iloc[0]["sample"] == 1 and "rank(s) 3" in bad.iloc[0]["detail"]
    # the other sample of that block instance is kept
    inst = bad.iloc[0]["instance"]
    kept = table[(table["instance"] == inst) & (table["position"] == 1)]
    assert list(kept["sample"]) == [0]


def test_missing_rank_makes_its_sample_incomplete(tmp_path: Path) -> None:
    job = write_job(tmp_path / "miss", ranks=8, iterations=3, program=PROGRAM[:2], dur=noisy(6),
                    write=lambda r: r != 5)
    with pytest.raises(TraceError, match=r"rank\(s\) 5 have no trace file"):  # the rank set, checked first
        zscore_table(job.folder)
    table, blocks = compute_zscores(job.folder, allow_partial=True)
    assert set(table["sample"]) == {0}
    inc = blocks.dropped[blocks.dropped["reason"] == "incomplete across ranks"]
    assert len(inc) > 0 and (inc["sample"] == 1).all() and inc["detail"].str.contains("5").all()


def test_every_sample_dropped_gives_an_empty_table_and_the_reasons(tmp_path: Path) -> None:
    job = write_job(tmp_path / "one", ranks=4, iterations=2, program=PROGRAM[:2], dur=noisy(10),
                    write=lambda r: r == 0)
    table, blocks = compute_zscores(job.folder, allow_partial=True)
    assert table.empty and list(table.columns)[:3] == ["z", "gpu", "precision"]
    assert len(blocks.dropped) == 3 and (blocks.dropped["reason"] == "incomplete across ranks").all()


def test_keep_all_and_extra_gemm_pattern(job8: Job, loaded8: dict) -> None:
    table = zscore_table(**loaded8, keep_all=True)
    b2 = table[table["position"] == 2]
    assert len(b2) == 12 and not b2["has_gemm"].any() and (b2["n_gemm_kernels"] == 0).all()
    table = zscore_table(**loaded8, gemm_patterns=[r"CUDAFunctor_add"])
    assert (table[table["position"] == 2]["n_gemm_kernels"] == 1).all()


def test_precision_override_and_dtype_fallback(job8: Job, loaded8: dict) -> None:
    table = zscore_table(**loaded8, precision="BFloat16")
    assert (table["precision"] == "bf16").all()
    table = zscore_table(**loaded8, precision="fp8")
    assert (table["precision"] == "fp8").all()
    # a GEMM the name rules do not read: precision from the collectives' dtype (BFloat16)
    table = zscore_table(**loaded8, keep_all=True, gemm_patterns=[r"CUDAFunctor_add"])
    assert (table[table["position"] == 2]["precision"] == "bf16").all()


def test_clear_errors(job8: Job, loaded8: dict) -> None:
    with pytest.raises(InputError, match="no such process group"):
        zscore_table(**loaded8, pg="nope")
    with pytest.raises(InputError, match="fewer than the sample size m=16"):
        zscore_table(**loaded8, m=16)
    # a group size that is not a multiple of m is cut into samples of m without replacement (issue 46)
    three = zscore_table(**loaded8, m=3)
    assert len(three) and all(len(r.split(",")) == 3 for r in three["ranks"])
    with pytest.raises(InputError, match="--time"):
        zscore_table(**loaded8, time="wall")
    with pytest.raises(InputError, match="unknown precision"):
        zscore_table(**loaded8, precision="fp12")
    with pytest.raises(InputError, match="not a valid regular expression"):
        zscore_table(**loaded8, gemm_patterns=["gemm("])


def test_default_pg_without_tp_description(tmp_path: Path) -> None:
    job = write_job(tmp_path / "dp", ranks=4, iterations=2, program=PROGRAM[:2], dur=noisy(8), pg_desc="default_pg")
    table, blocks = compute_zscores(job.folder)
    assert list(blocks.groups["pg"]) == ["1"] and len(table) > 0


def test_cli_writes_tables_and_reports_drops(job8: Job, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "z.parquet"
    rc = main(["-q", "blocks", str(job8.folder), "--pg", "mesh_tp", "--m", "4", "--workload", "demo",
               "-o", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "22 z-score(s) kept, 12 block sample(s) dropped" in text
    assert "12  1: no GEMM" in text
    table = pd.read_parquet(out)
    for column in ("z", "gpu", "precision", "workload", "block", "instance", "sample", "block_mean_us",
                   "block_sd_us", "cv", "max_us", "mean_us", "n_gemm_kernels", "has_gemm", "pg"):
        assert column in table.columns
    assert (table["workload"] == "demo").all() and len(table) == 22
    assert len(pd.read_parquet(tmp_path / "z_times.parquet")) == 22 * 4
    assert len(pd.read_parquet(tmp_path / "z_dropped.parquet")) == 12
    # a declared PG (as in `evtsync tax`) is the one cut by when no other is selected
    rc = main(["-q", "blocks", str(job8.folder), "--pg", "tp=0-7@24", "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert rc == 0 and summary["pg"] == ["tp"] and summary["n_zscores"] == 22 and summary["n_dropped"] == 12
    assert summary["dropped"] == [{"pg": "tp", "reason": "no GEMM", "count": 12}]
    assert main(["-q", "blocks", str(job8.folder), "--pg", "nope"]) == 2
    assert "no such process group" in capsys.readouterr().err


def test_real_dlrm_trace_blocks_are_accounted_for(traces_dir: Path) -> None:
    """DLRM, 8 V100 ranks, one step: ranks run different embedding kernels, so most blocks differ
    in signature; every block sample is either kept or dropped with a reason."""
    table, blocks = compute_zscores(traces_dir / "dlrm-8rank-v100", keep_all=True)
    n_blocks = (8 - 1) * 2
    assert len(table) + len(blocks.dropped) == n_blocks
    assert set(blocks.dropped["reason"]) <= {"signature differs across ranks", "no compute kernels"}
    assert (table["gpu"] == "V100").all() and (table["precision"] == "fp32").all()
    # (M - mean)/s is at most (m-1)/sqrt(m) * sqrt(J) when the pooled sd has J(m-1) dof
    bound = 3 / math.sqrt(4) * np.sqrt(table["n_samples"])
    assert len(table) > 0 and ((table["z"] > 0) & (table["z"] <= bound + 1e-12)).all()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 3_000)), min_size=1, max_size=12),
                min_size=1, max_size=6))
def test_busy_time_is_the_length_of_the_union(groups: list[list[tuple[int, int]]]) -> None:
    """The busy time of a block = the number of covered nanoseconds, on absolute ns timestamps."""
    from evtsync.blocks.cut import _covered_ns

    base = 1_717_200_000_000_000_000
    rows = sorted((g, base + s, base + s + d) for g, ivs in enumerate(groups) for s, d in ivs)
    group = np.array([r[0] for r in rows])
    ts = np.array([r[1] for r in rows], dtype=np.int64)
    end = np.array([r[2] for r in rows], dtype=np.int64)
    covered = _covered_ns(group, ts, end)
    for g, ivs in enumerate(groups):
        points = set()
        for s, d in ivs:
            points.update(range(s, s + d))
        assert int(covered[group == g].sum()) == len(points)


def test_one_iteration_when_nothing_repeats(tmp_path: Path) -> None:
    program = [[(GEMM, COMPUTE)], [(NVJET, COMPUTE), (ADD, COMPUTE)], [(GEMM, COMPUTE), (NORM, COMPUTE)]]
    job = write_job(tmp_path / "once", ranks=4, iterations=1, program=program, dur=noisy(9), steps=False)
    table, blocks = compute_zscores(job.folder)
    assert "one iteration" in next(iter(blocks.iterations.values()))
    assert sorted(table["position"]) == [1, 2] and (table["instance"] == 0).all()
    # one instance of one sample of 4: z is at most (m-1)/sqrt(m) = 1.5
    assert (table["z"] <= 1.5 + 1e-12).all() and (table["dof"] == 3).all()
