"""``evtsync diff``: direction, intervals and refusals against known truths.

- Synthetic runs whose only difference is the stated GEMM noise (``cv``): the tax must come out
  ``higher`` for the noisier run and its interval must contain the generated difference; the
  generated difference is the difference of the population medians, estimated from the ground
  truth of long independent runs of the same two configurations (slow test), or checked for
  direction only (fast test).
- Runs of different TP size: no verdict, with the reason.
- Hand-built tables: too few collectives, a role present on one side only, a different GPU
  refused unless allowed; the bootstrap against a hand-computed median difference.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from evtsync.core.errors import InputError
from evtsync.runfolder.diff import RunTables, diff_tax, load_side, straggler_statistics
from evtsync.synth import SynthConfig, synthesize


def _run(tmp_path, name: str, **kw):
    return synthesize(SynthConfig.build(**kw), tmp_path / name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("diff")
    return {
        "a": _run(tmp, "a", seed=1, iterations=20, cv=0.02),
        "a2": _run(tmp, "a2", seed=7, iterations=20, cv=0.02),
        "b": _run(tmp, "b", seed=2, iterations=20, cv=0.04),
        "tp8": _run(tmp, "tp8", seed=3, iterations=20, tp=8),
    }


def _side(res, label):
    return load_side(res.traces_dir, label, cache=None)


def test_noisier_gemms_give_a_higher_tax(runs):
    table = diff_tax(_side(runs["a"], "a"), _side(runs["b"], "b"))
    row = table.set_index("role").loc["mesh_tp"]
    assert row["verdict"] == "higher"
    # the measured medians are those of the ground truth (tax per collective, µs)
    for key, res in (("median_a_us", runs["a"]), ("median_b_us", runs["b"])):
        truth = np.median([c["tau_max_us"] for c in res.truth["collectives"]])
        assert row[key] == pytest.approx(truth, abs=1.0)
    assert row["d_median_lo_us"] < row["d_median_us"] < row["d_median_hi_us"]
    assert row["level"] == 0.9


def test_same_configuration_other_seed_is_no_difference(runs):
    table = diff_tax(_side(runs["a"], "a"), _side(runs["a2"], "a2"))
    assert table["verdict"].tolist() == ["no difference"]


def test_different_tp_size_is_refused(runs):
    table = diff_tax(_side(runs["a"], "a"), _side(runs["tp8"], "tp8"))
    row = table.iloc[0]
    assert row["verdict"] == "no verdict"
    assert "group size differs (4 vs 8)" in row["reason"]
    allowed = diff_tax(_side(runs["a"], "a"), _side(runs["tp8"], "tp8"), allow=["group_size"]).iloc[0]
    assert allowed["verdict"] in {"lower", "higher", "no difference"} and "allowed" in allowed["reason"]


def _table(tau, pg="0", desc="TP", coll="AllReduce", n_ranks=4, nbytes=1024, gpu=None, straggler=None):
    tau = np.asarray(tau, dtype=float)
    t = pd.DataFrame({"pg": pg, "pg_desc": desc, "collective": coll, "index": np.arange(len(tau)),
                      "n_ranks": n_ranks, "bytes": nbytes, "tau_max_us": tau, "valid": True})
    if straggler is not None:
        t["straggler_rank"] = straggler
    if gpu:
        t["gpu"] = gpu
    return t


def test_too_few_collectives_and_one_sided_roles():
    a = RunTables("a", pd.concat([_table(np.arange(10.0)), _table(np.arange(30.0), pg="1", desc="EP",
                                                                   coll="AllToAll")]))
    b = RunTables("b", _table(np.arange(10.0) + 5))
    table = diff_tax(a, b).set_index("role")
    assert table.loc["TP", "verdict"] == "no verdict"
    assert "too few collectives (10 vs 10" in table.loc["TP", "reason"]
    assert table.loc["EP", "verdict"] == "no verdict" and table.loc["EP", "reason"] == "only in a"


def test_gpu_difference_needs_allow():
    rng = np.random.default_rng(0)
    a = RunTables("a", _table(rng.gamma(4, 50, 200), gpu="H100"))
    b = RunTables("b", _table(rng.gamma(4, 50, 200) + 100, gpu="H200"))
    refused = diff_tax(a, b).iloc[0]
    assert refused["verdict"] == "no verdict" and "GPU differs (H100 vs H200)" in refused["reason"]
    allowed = diff_tax(a, b, allow=["gpu"]).iloc[0]
    assert allowed["verdict"] == "higher" and "GPU differs (H100 vs H200), allowed" in allowed["reason"]
    with pytest.raises(InputError, match="cannot allow"):
        diff_tax(a, b, allow=["colour"])


def test_bootstrap_interval_against_hand_values():
    # two samples of 101 values: medians 50 and 60 exactly; a shift of 10 everywhere
    a = RunTables("a", _table(np.arange(101.0)))
    b = RunTables("b", _table(np.arange(101.0) + 10))
    row = diff_tax(a, b, n_boot=4000).iloc[0]
    assert row["d_median_us"] == 10.0
    assert row["d_median_lo_us"] < 10.0 < row["d_median_hi_us"]
    # the bootstrap sd of a median of n uniform values on [0, 100]: ~ 100 / (2 sqrt(n)) each side
    half_width = (row["d_median_hi_us"] - row["d_median_lo_us"]) / 2
    expected = 1.645 * np.sqrt(2) * 100 / (2 * np.sqrt(101))
    assert half_width == pytest.approx(expected, rel=0.3)
    assert row["verdict"] == "no difference"  # 10 is inside the noise of 101 draws on [0, 100]


def test_straggler_statistics_by_hand():
    t = _table(np.ones(6), straggler=[0, 0, 1, 2, 2, 0])
    rate, distinct = straggler_statistics(t)
    assert rate == pytest.approx(3 / 5) and distinct == 3


def test_cli_json_and_bad_input(runs, tmp_path):
    cmd = [sys.executable, "-m", "evtsync", "-q", "diff", str(runs["a"].traces_dir), str(runs["b"].traces_dir),
           "--no-cache", "--json", "--html", str(tmp_path / "diff.html")]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["rows"][0]["verdict"] == "higher" and out["level"] == 0.9
    page = (tmp_path / "diff.html").read_text()
    assert "data:image/png;base64," in page and "higher" in page and 'name="viewport"' in page
    fake_run = tmp_path / "run"
    fake_run.mkdir()
    (fake_run / "manifest.json").write_text('{"format": "evtsync-run/1"}')  # a run that wrote nothing yet
    proc = subprocess.run([sys.executable, "-m", "evtsync", "-q", "diff", str(fake_run), str(runs["b"].traces_dir)],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "holds no tax table" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_interval_covers_the_population_difference(tmp_path):
    """Coverage over 10 pairs of 20-iteration runs of the population difference of medians
    (estimated from 2 x 400-iteration runs of the same configurations)."""
    pop = {}
    for cv, seed in ((0.02, 1001), (0.04, 1002)):
        res = _run(tmp_path, f"pop{cv}", seed=seed, iterations=400, cv=cv)
        pop[cv] = np.median([c["tau_max_us"] for c in res.truth["collectives"]])
    truth = pop[0.04] - pop[0.02]
    covered = 0
    for i in range(10):
        a = _run(tmp_path, f"a{i}", seed=10 + 2 * i, iterations=20, cv=0.02)
        b = _run(tmp_path, f"b{i}", seed=11 + 2 * i, iterations=20, cv=0.04)
        row = diff_tax(_side(a, "a"), _side(b, "b"), seed=i).iloc[0]
        assert row["verdict"] == "higher"
        covered += row["d_median_lo_us"] <= truth <= row["d_median_hi_us"]
    # nominal 90%: 10 replicates give >= 7 with probability 0.99
    assert covered >= 7, (covered, truth)


def test_cli_fit_level_diff_finds_a_shifted_xi(tmp_path, runs):
    from evtsync.evt.bayesfit import save_fit
    from evtsync.evt.fit import tree_from_draws

    rng = np.random.default_rng(5)
    cells = pd.DataFrame({"cell": ["H200|bf16"], "gpu": ["H200"], "precision": ["bf16"]})
    z = rng.gumbel(size=40)
    paths = []
    for name, xi in (("a", 0.05), ("b", 0.35)):  # B's shape is 0.3 higher, posterior sd 0.01
        draws = {"mu": rng.normal(0, 0.01, (2, 200, 1)), "sigma": np.exp(rng.normal(0, 0.01, (2, 200, 1))),
                 "xi": rng.normal(xi, 0.01, (2, 200, 1))}
        tree = tree_from_draws(draws, cells, z, np.zeros(len(z), dtype=int), model_name=name)
        paths.append(save_fit(tree, tmp_path / name))
    proc = subprocess.run([sys.executable, "-m", "evtsync", "-q", "diff", str(runs["a"].traces_dir),
                           str(runs["a2"].traces_dir), "--no-cache", "--json", "--fit-a", str(paths[0]),
                           "--fit-b", str(paths[1]), "--block-sd-us", "18", "--n", "8", "64"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = {(r["quantity"], r["n"]): r for r in json.loads(proc.stdout)["fits"]}
    xi = rows[("xi", None)]
    assert xi["verdict"] == "higher" and xi["d_lo"] < 0.3 < xi["d_hi"]
    assert rows[("tau_us", 64)]["verdict"] == "higher"


def _fake_run(folder, side, tree, b_us: float, alpha_us: float = 5.0, size_bytes: float = 2**28, eps: float = -0.5):
    """A run folder as `evtsync run` leaves it, reduced to what `diff` reads: the tax table, the
    block scales, the topologies of its B* table, one finished fit and the prediction stage's
    inputs of B*."""
    from evtsync.evt.bayesfit import save_fit

    (folder / "tables").mkdir(parents=True)
    side.collectives.to_parquet(folder / "tables" / "tax_collectives.parquet")
    pd.DataFrame({"gpu": ["H200"], "precision": ["bf16"], "b_us": [b_us]}).to_parquet(
        folder / "tables" / "block_scale.parquet")
    pd.DataFrame({"topology": ["full", "ring", "torus3d"], "n": 64}).to_parquet(folder / "tables" / "bstar.parquet")
    from evtsync.core.tableio import file_sha256

    fit = save_fit(tree, folder / "fits" / "gumbel.nc")
    manifest = {"format": "evtsync-run/1", "options": {"m": 4},  # outputs with their SHA-256, as a run records
                "stages": {"fit-gumbel": {"status": "done", "outputs": {"fits/gumbel.nc": file_sha256(fit)}},
                           "prediction": {"status": "done", "summary": {
                               "alpha_us": alpha_us, "bytes": size_bytes, "bytes_source": "median message size",
                               "eps": eps}}}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def _evtsync(args: list[str], capsys: pytest.CaptureFixture[str]) -> subprocess.CompletedProcess[str]:
    """``evtsync ARGS`` run in this process through the CLI's ``main``: its exit status and what it
    printed, as ``subprocess.run`` gives them (a child process would import the package again,
    ~3-4 s of CPU each; test_cli_json_and_bad_input runs the real command)."""
    from evtsync.cli import main

    capsys.readouterr()
    status = main(args)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(args, status, out, err)


def test_cli_run_folders_with_fits_give_delta_bstar(runs, tmp_path, capsys):
    """Two run folders with fits: Δξ, Δτ and ΔB* with A's b, alpha, S and eps and every topology;
    B's tail is heavier (Gumbel mu 1.6 vs 0.8), so its tax is higher and its B* lower, by the
    amounts computed by hand from the Gumbel mean maximum."""
    from tests.runfolder.test_diff_fits import _gumbel_tree, _hand_bstar_gbps

    ra = _fake_run(tmp_path / "ra", _side(runs["a"], "a"), _gumbel_tree(0.8, 0.45), b_us=20.0)
    rb = _fake_run(tmp_path / "rb", _side(runs["a2"], "a2"), _gumbel_tree(1.6, 0.45, seed=1), b_us=40.0,
                   alpha_us=99.0)
    html = tmp_path / "diff.html"
    proc = _evtsync(["-q", "diff", str(ra), str(rb), "--json", "--n", "64", "--html", str(html)], capsys)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["rows"][0]["verdict"] == "no difference"  # the tax tables: two seeds of one configuration
    assert {(r["quantity"], r["verdict"]) for r in doc["fits"]} == {("xi", "no difference"), ("tau_us", "higher")}
    rows = {r["topology"]: r for r in doc["bstar"]}
    assert set(rows) == {"full", "ring", "torus3d"} and {r["verdict"] for r in rows.values()} == {"lower"}
    full = rows["full"]
    assert full["block_sd_us"] == 20.0 and full["alpha_us"] == 5.0 and full["bytes"] == 2**28  # A's, not B's
    hand = (_hand_bstar_gbps(1.6, 0.45, 20.0, 64, 4, 5.0, 2.0, -0.5)
            - _hand_bstar_gbps(0.8, 0.45, 20.0, 64, 4, 5.0, 2.0, -0.5))
    assert full["d_median_gbps"] == pytest.approx(hand, rel=2e-3)
    assert "alpha 5 µs from A's run" in doc["bstar_inputs"] and "S from A's run" in doc["bstar_inputs"]
    assert any("block_scale" in n for n in doc["fit_notes"])
    assert any("alpha (µs) 5 in A, 99 in B" in n for n in doc["fit_notes"])  # B's own alpha is said, not hidden
    page = html.read_text()
    assert "Fit level: ΔB*" in page and "Fit level: Δξ and Δτ(n)" in page and page.count("<picture>") == 2  # two figures, each with its narrow rendering
    # flags win over the run's inputs, as in `evtsync bandwidth`
    proc = _evtsync(["-q", "diff", str(ra), str(rb), "--json", "--n", "64", "--topology", "full", "--alpha-us", "2",
                     "--bytes", "1GiB", "--block-sd-us", "10"], capsys)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["bstar"]
    assert (row["alpha_us"], row["bytes"], row["block_sd_us"]) == (2.0, 2**30, 10.0)
    # --own-b: each run's measured b (A 20 µs, B 40 µs), so ΔB* is the change of the whole tax
    cmd = ["-q", "diff", str(ra), str(rb), "--n", "64", "--topology", "full", "--own-b"]
    proc = _evtsync([*cmd, "--json"], capsys)
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)["bstar"]
    hand = (_hand_bstar_gbps(1.6, 0.45, 40.0, 64, 4, 5.0, 2.0, -0.5)
            - _hand_bstar_gbps(0.8, 0.45, 20.0, 64, 4, 5.0, 2.0, -0.5))
    assert (row["block_sd_us"], row["block_sd_b_us"]) == (20.0, 40.0)
    assert row["d_median_gbps"] == pytest.approx(hand, rel=2e-3) and row["verdict"] == "lower"
    text = _evtsync(cmd, capsys)  # the printed table, as a user reads it
    assert text.returncode == 0 and "A's b per cell H200|bf16 20 µs; B's b per cell H200|bf16 40 µs" in text.stdout
    assert "ΔB* (GB/s) per cell" in text.stdout and "lower:" in text.stdout


def test_cli_delta_bstar_needs_its_inputs_for_trace_sets(runs, tmp_path, capsys):
    from evtsync.evt.bayesfit import save_fit
    from tests.runfolder.test_diff_fits import _gumbel_tree

    fa, fb = save_fit(_gumbel_tree(0.8, 0.45), tmp_path / "fa"), save_fit(_gumbel_tree(0.8, 0.45), tmp_path / "fb")
    cmd = ["-q", "diff", str(runs["a"].traces_dir), str(runs["a2"].traces_dir), "--no-cache", "--fit-a", str(fa),
           "--fit-b", str(fb), "--block-sd-us", "20", "--n", "64"]
    proc = _evtsync([*cmd, "--json"], capsys)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["bstar"] is None and "give --topology, --alpha-us or --alpha-from, --bytes" in doc["bstar_note"]
    text = _evtsync(cmd, capsys).stdout
    assert "ΔB*: not computed: give --topology" in text


def _study_folder(folder, workloads: dict[str, np.ndarray]):
    """A run folder reduced to what `diff` reads of a study: the tax table with a workload column."""
    (folder / "tables").mkdir(parents=True)
    pd.concat([_table(tau).assign(workload=name) for name, tau in workloads.items()], ignore_index=True).to_parquet(
        folder / "tables" / "tax_collectives.parquet")
    (folder / "manifest.json").write_text(json.dumps({"format": "evtsync-run/1"}))
    return folder


def test_cli_study_folders_compare_matching_workloads(tmp_path, capsys):
    """README's `evtsync diff fits/before fits/after` on studies of several workloads (issue 34):
    each workload of both is compared with its namesake, the one-sided one is named, and two
    studies without a workload in common are refused naming the workloads to choose from."""
    from evtsync.cli import main

    base = np.arange(101.0)
    a = _study_folder(tmp_path / "before", {"H100-bf16": base, "H200-bf16": base})
    b = _study_folder(tmp_path / "after", {"H100-bf16": base + 200.0, "H200-bf16": base, "B200-fp8": base})
    assert main(["diff", str(a), str(b), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    verdicts = {row["workload"]: row["verdict"] for row in doc["rows"]}
    assert verdicts == {"H100-bf16": "higher", "H200-bf16": "no difference"}
    assert {row["workload"]: row["d_median_us"] for row in doc["rows"]} == {"H100-bf16": 200.0, "H200-bf16": 0.0}
    assert main(["diff", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert "workload H100-bf16:" in text and "workload B200-fp8 is only in B: not compared" in text
    c = _study_folder(tmp_path / "other", {"A100-fp32": base, "A100-bf16": base})
    assert main(["diff", str(a), str(c)]) == 2
    err = capsys.readouterr().err
    assert "H100-bf16, H200-bf16" in err and "A100-bf16, A100-fp32" in err and "--workload-a" in err
    assert main(["diff", str(a), str(c), "--workload-a", "H100-bf16", "--workload-b", "A100-bf16", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"][0]["verdict"] == "no difference"


def test_cli_ranktail_diff_labels_n_beyond_the_rank_values(runs, tmp_path, capsys):
    """`diff --fit-a/--fit-b` with z-score tables (ranktail): a row whose n exceeds the fewer of the
    two cells' rank values (counted here from the tables' comma-joined column u) is printed with
    "[beyond the data]" and a note naming N; a row within them is not."""
    import evtsync

    paths, counts = [], []
    for key in ("a", "a2"):
        z = evtsync.zscore_table(evtsync.load_traces(runs[key].traces_dir))
        counts.append(sum(len(str(v).split(",")) for v in z["u"]))
        paths.append(tmp_path / f"{key}.parquet")
        z.to_parquet(paths[-1])
    n_fewest = min(counts)
    within, beyond = 4 * (n_fewest // 8), 4 * (n_fewest // 4 + 1)  # multiples of m = 4 on each side of N
    proc = _evtsync(["-q", "diff", str(runs["a"].traces_dir), str(runs["a2"].traces_dir), "--no-cache",
                     "--fit-a", str(paths[0]), "--fit-b", str(paths[1]), "--block-sd-us", "18",
                     "--n", str(within), str(beyond)], capsys)
    assert proc.returncode == 0, proc.stderr
    lines = {n: line for line in proc.stdout.splitlines() for n in (within, beyond) if f"tau(n={n})" in line}
    assert "[beyond the data]" in lines[beyond] and "[beyond the data]" not in lines[within]
    assert f"{n_fewest})" in next(line for line in proc.stdout.splitlines() if line.startswith("note: beyond the data"))
