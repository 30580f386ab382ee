"""Bad input, table-driven, the long list (issue 18): each case damages a copy of the real data in
tests/data/public (copies of the public data) (or gives a bad argument or output path) and runs the CLI in this process, as
``evtsync -q ARGS…``. Every case asserts

- a non-zero exit status (2 for bad input; the run's own codes where a stage or workload failed),
- exactly one error line on stderr (``evtsync: error: …``, argparse's ``evtsync CMD: error: …``, or
  the run's ``FAILED stage: …``) that matches a hand-written pattern of the culprit and the cause,
- no exception escaping the CLI (that is what a traceback would be), no library warning printed,
- no temporary file left, no input file touched, and nothing written outside the case's folder.

tests/cli/test_bad_inputs.py runs a few of the same kinds of cases in a subprocess (the real terminal).
The copies are made in a temporary folder; tests/data/public (copies of the public data) is never written.
"""

from __future__ import annotations

import fcntl
import gzip
import json
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.cli import main
from tests.conftest import DATA, TRACES, file_hashes, full_data_file, link_session_scanner

DLRM = TRACES / "dlrm-8rank-v100"
NCCL = DATA / "nccl-tests"
pytestmark = pytest.mark.skipif(not DLRM.is_dir(), reason=f"shared data not found at {DLRM}")

ERROR_LINE = re.compile(r"^(evtsync: error: |evtsync [\w -]+: error: |  FAILED [\w-]+: )")


# --------------------------------------------------------------------------- helpers that damage copies

def _load(path: Path) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def _save(doc: dict, path: Path) -> None:
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh, allow_nan=True)


def _dlrm(tmp: Path) -> Path:
    out = tmp / "dlrm"
    if not out.is_dir():
        shutil.copytree(DLRM, out)
    return out


def _rank_file(folder: Path, rank: int) -> Path:
    return next(folder.glob(f"worker{rank}_*.json.gz"))


def _edit_doc(tmp: Path, rank: int, edit: Callable[[dict], None]) -> Path:
    folder = _dlrm(tmp)
    path = _rank_file(folder, rank)
    doc = _load(path)
    edit(doc)
    _save(doc, path)
    return folder


def _nccl(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and str(e.get("name", "")).startswith("nccl")]


def _kernels(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e.get("ph") == "X"]


def _raw_edit(tmp: Path, rank: int, edit: Callable[[bytes], bytes], plain: bool = False) -> Path:
    folder = _dlrm(tmp)
    path = _rank_file(folder, rank)
    raw = edit(gzip.decompress(path.read_bytes()))
    if plain:
        path.unlink()
        path = folder / path.name.removesuffix(".gz")
        path.write_bytes(raw)
    else:
        path.write_bytes(gzip.compress(raw))
    return folder


def tax(*extra: str) -> Callable[[Path], list[str]]:
    """``tax`` of the intact DLRM set with extra arguments."""
    return lambda tmp: ["tax", str(DLRM), "--no-cache", *extra]


def on_doc(rank: int, edit: Callable[[dict], None], command: str = "tax") -> Callable[[Path], list[str]]:
    return lambda tmp: [command, str(_edit_doc(tmp, rank, edit)), "--no-cache"]


def on_raw(rank: int, edit: Callable[[bytes], bytes], plain: bool = False) -> Callable[[Path], list[str]]:
    return lambda tmp: ["tax", str(_raw_edit(tmp, rank, edit, plain)), "--no-cache"]


def on_folder(edit: Callable[[Path], None], command: str = "tax", *extra: str) -> Callable[[Path], list[str]]:
    def make(tmp: Path) -> list[str]:
        folder = _dlrm(tmp)
        edit(folder)
        return [command, str(folder), "--no-cache", *extra]
    return make


def _setter(where: Callable[[dict], list[dict]], index: int, key: str, value: object) -> Callable[[dict], None]:
    def edit(doc: dict) -> None:
        where(doc)[index][key] = value
    return edit


def _drop_rank(*ranks: int) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        for r in ranks:
            _rank_file(folder, r).unlink()
    return edit


def _fit_dir(tmp: Path, name: str = "fit", seed: int = 0) -> Path:
    """A small Bayesian fit (draws given, no sampling) written as `evtsync fit` writes one."""
    from evtsync.evt.bayesfit import save_fit
    from evtsync.evt.fit import tree_from_draws

    rng = np.random.default_rng(seed)
    z = rng.gumbel(size=50)
    tree = tree_from_draws({"mu": rng.normal(0, 0.1, (2, 20)), "sigma": np.exp(rng.normal(0, 0.1, (2, 20)))},
                           pd.DataFrame({"cell": ["all"]}), z, np.zeros(50, dtype=int), family="gumbel")
    save_fit(tree, tmp / name)
    return tmp / name


def _altered_fit(tmp: Path) -> Path:
    import h5py

    folder = _fit_dir(tmp)
    with h5py.File(folder / "fit.nc", "r+") as fh:
        fh["posterior/mu"][0, 0] = 42.0
    return folder


def _zscores(tmp: Path, values: list[float] | None = None, column: str = "z") -> Path:
    rng = np.random.default_rng(1)
    z = rng.gumbel(size=80) if values is None else np.asarray(values, float)
    path = tmp / "z.csv"
    pd.DataFrame({column: z, "gpu": "H200", "precision": "bf16"}).to_csv(path, index=False)
    return path


def _file(tmp: Path, name: str = "afile", text: str = "x") -> Path:
    path = tmp / name
    path.write_text(text)
    return path


def _run_dir(tmp: Path, manifest: str | None) -> Path:
    folder = tmp / "runout"
    folder.mkdir()
    if manifest is not None:
        (folder / "manifest.json").write_text(manifest)
    return folder


def _nccl_log(tmp: Path, text: str) -> Path:
    return _file(tmp, "nccl.log", text)


# --------------------------------------------------------------------------- the cases

@dataclass
class Case:
    """A damaged input or bad argument, and what the one error line must say."""

    name: str
    make: Callable[[Path], list[str]]  # builds the input in tmp, returns the CLI arguments
    expect: str  # regex the error line must match (case-insensitive): the culprit and the cause
    status: int = 2  # expected exit status


def _dup_rank(folder: Path) -> None:
    shutil.copy(_rank_file(folder, 3), folder / "worker3_again.json.gz")


def _swap_world(doc: dict) -> None:
    doc["distributedInfo"]["world_size"] = 16


def _rank_beyond(doc: dict) -> None:
    doc["distributedInfo"]["rank"] = 9


def _no_kernels(doc: dict) -> None:
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("cat") != "kernel"]


def _all_twice(doc: dict) -> None:
    doc["traceEvents"] = doc["traceEvents"] + [dict(e) for e in _nccl(doc)]


def _nan_ts(doc: dict) -> None:
    _kernels(doc)[3]["ts"] = float("nan")


def _inf_dur(doc: dict) -> None:
    _kernels(doc)[3]["dur"] = float("inf")


def _events_not_list(doc: dict) -> None:
    doc["traceEvents"] = {"oops": 1}


def _event_not_object(doc: dict) -> None:
    doc["traceEvents"].insert(5, 42)


def _no_trace_events(doc: dict) -> None:
    del doc["traceEvents"]


def _bad_utf8(raw: bytes) -> bytes:
    i = raw.find(b'"name": "') + 9
    return raw[:i] + b"\xff\xfe" + raw[i:]


def _cut_end(raw: bytes) -> bytes:
    return raw[: len(raw) - 50]


def _missing_comma(raw: bytes) -> bytes:
    i = raw.find(b'"dur"', len(raw) * 3 // 4)
    return raw[:i - 2] + raw[i - 1:]  # the comma before "dur" removed


def _gzip_cut(folder: Path) -> None:
    path = _rank_file(folder, 2)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _empty_file(folder: Path) -> None:
    _rank_file(folder, 4).write_bytes(b"")


def _garbage(folder: Path) -> None:
    _rank_file(folder, 5).write_bytes(gzip.compress(bytes(range(256)) * 8))


def _json_list(folder: Path) -> None:
    _rank_file(folder, 6).write_bytes(gzip.compress(b"[1, 2, 3]"))


def _lock_run(tmp: Path) -> list[str]:
    folder = _run_dir(tmp, json.dumps({"format": "evtsync-run/1", "stages": {}}))
    fh = open(folder / ".lock", "w")  # noqa: SIM115 - held for the duration of the case
    fcntl.flock(fh, fcntl.LOCK_EX)
    _HELD.append(fh)
    return ["report", str(folder)]


_HELD: list = []


def _models_empty(tmp: Path) -> list[str]:
    (tmp / "models").mkdir()
    return ["run", str(DLRM), "--no-cache", "--out", str(tmp / "out"), "--models-dir", str(tmp / "models")]


def _models_bad_toml(tmp: Path) -> list[str]:
    (tmp / "models").mkdir()
    (tmp / "models" / "broken.toml").write_text("name = [unclosed\n")
    return ["fit", str(_zscores(tmp)), "--model", "broken", "--models-dir", str(tmp / "models")]


def _study_all_bad(tmp: Path) -> list[str]:
    study = tmp / "study"
    for name in ("one", "two"):
        shutil.copytree(DLRM, study / name)
        _rank_file(study / name, 5).unlink()
    return ["run", str(study), "--no-cache", "--out", str(tmp / "out"), "--model", "gumbel", "--no-report"]


CASES = [
    # ---- rank sets: incomplete, foreign, empty
    Case("missing rank 0", on_folder(_drop_rank(0)), r"rank\S* 0\b.*no trace file"),
    Case("missing rank 7", on_folder(_drop_rank(7)), r"rank\S* 7\b.*no trace file"),
    Case("missing ranks 2 and 6", on_folder(_drop_rank(2, 6)), r"rank\S* 2,6\b.*no trace file"),
    Case("missing rank, breakdown", on_folder(_drop_rank(5), "breakdown"), r"rank\S* 5\b.*no trace file"),
    Case("missing rank, blocks", on_folder(_drop_rank(5), "blocks"), r"rank\S* 5\b.*no trace file"),
    Case("missing rank, attribute", lambda tmp: [*on_folder(_drop_rank(5), "attribute")(tmp), "-o", str(tmp / "a.csv")],
         r"rank\S* 5\b.*no trace file"),
    Case("missing rank, run", lambda tmp: ["run", str(on_folder(_drop_rank(5))(tmp)[1]), "--no-cache", "--out",
                                           str(tmp / "out"), "--model", "gumbel", "--no-report"],
         r"FAILED tax: .*rank\S* 5\b.*no trace file", status=1),
    Case("study whose every workload is bad", _study_all_bad, r"FAILED tax: .*every workload failed.*one: .*rank\S* 5",
         status=1),
    Case("same rank twice", on_folder(_dup_rank), r"rank 3\b.*(twice|more than one|duplicate)"),
    Case("world sizes disagree", on_doc(2, _swap_world), r"world size: 7 file\(s\) say 8, but rank 2 \(\S*worker2_\S*\): 16$"),
    Case("rank beyond the world size", on_doc(2, _rank_beyond), r"rank\S* \[?9\]?.*world size 8"),
    Case("rank without kernels", on_doc(4, _no_kernels), r"rank 4\b.*worker4_.*no GPU kernels"),
    Case("two ranks of 128", lambda tmp: ["tax", str(TRACES / "two-of-128-ranks"), "--no-cache"],
         r"rank\S* 2-127 have no trace file"),
    Case("foreign B200 rank", on_folder(lambda f: (_rank_file(f, 7).unlink(), shutil.copy(
        full_data_file("traces/single-rank/tracelens_b200_rank0of8_pg_fields.json.gz"), f / "worker7_b200.json.gz"))),
        r"(another job|world size|rank).*worker7_b200|worker7_b200.*(another job|world size)"),
    Case("foreign rank, diff", lambda tmp: ["diff", str(DLRM), str(on_folder(lambda f: (
        _rank_file(f, 3).unlink(), shutil.copy(full_data_file("traces/single-rank/hta_rank3of8.json.gz"), f / "worker3_x.json.gz")))(tmp)[1]),
        "--no-cache"], r"worker3_x"),
    Case("empty rank, blocks", on_doc(2, lambda d: d.update(traceEvents=[]), "blocks"), r"worker2_.*empty"),
    Case("kernels without dur, attribute", lambda tmp: [*on_doc(4, lambda d: [k.pop("dur") for k in _kernels(d)],
                                                                "attribute")(tmp), "-o", str(tmp / "a.csv")],
         r"(rank 4|worker4_).*dur"),
    # ---- event timing: the cause, not "missing or extra collective?"
    Case("zero duration NCCL kernel", on_doc(1, _setter(_nccl, 0, "dur", 0)), r"(rank 1\b|worker1_).*zero duration"),
    Case("negative timestamp", on_doc(3, _setter(_kernels, 5, "ts", -1e30)), r"(rank 3\b|worker3_).*absurd timestamp"),
    Case("duration 1e30", on_doc(3, _setter(_kernels, 5, "dur", 1e30)), r"(rank 3\b|worker3_).*absurd.*dur"),
    Case("timestamp as text", on_doc(5, _setter(_kernels, 5, "ts", "soon")),
         r"worker5_.*the event at decompressed byte \d+ is not a Kineto event.*got `str`.*at `ts`"),
    Case("duration as text", on_doc(5, _setter(_nccl, 1, "dur", "long")),
         r"worker5_.*the event at decompressed byte \d+ is not a Kineto event.*at `dur`.*ncclKernel"),
    Case("NaN timestamp", on_doc(6, _nan_ts), r"(rank 6\b|worker6_).*(NaN|non-finite|finite)"),
    Case("infinite duration", on_doc(6, _inf_dur), r"(rank 6\b|worker6_).*(inf|non-finite|finite)"),
    Case("every NCCL kernel twice", on_doc(0, _all_twice), r"worker0_.*duplicate events"),
    Case("negative duration of a compute kernel", on_doc(2, _setter(_kernels, 0, "dur", -1)),
         r"(rank 2\b|worker2_).*negative duration"),
    Case("absurd baseTimeNanoseconds", on_doc(1, lambda d: d.update(baseTimeNanoseconds=1e30)),
         r"worker1_.*baseTimeNanoseconds"),
    # ---- JSON: the file and the true position
    Case("JSON cut at the end", on_raw(3, _cut_end), r"worker3_.*(truncated|cut|incomplete|byte)"),
    Case("JSON missing comma", on_raw(3, _missing_comma), r"worker3_.*byte \d+"),
    Case("JSON error, plain .json", on_raw(3, _missing_comma, plain=True), r"worker3_.*\.json\b.*byte \d+"),
    Case("invalid UTF-8", on_raw(4, _bad_utf8), r"worker4_.*(UTF-8|utf-8|decode)"),
    Case("traceEvents null", on_doc(1, lambda d: d.update(traceEvents=None)), r"worker1_.*traceEvents"),
    Case("gzip cut in half", on_folder(_gzip_cut), r"worker2_.*(gzip|compressed|truncated|cut)"),
    Case("empty file", on_folder(_empty_file), r"worker4_.*(empty|no data|0 bytes)"),
    Case("random bytes", on_folder(_garbage), r"worker5_"),
    Case("JSON list, not a trace", on_folder(_json_list), r"worker6_.*(object|not a .*trace)"),
    Case("no traceEvents", on_doc(2, _no_trace_events), r"worker2_.*traceEvents"),
    Case("traceEvents not a list", on_doc(2, _events_not_list), r"worker2_.*traceEvents.*(list|array)"),
    Case("an event that is a number", on_doc(2, _event_not_object),
         r"worker2_.*the event at decompressed byte \d+ is not a Kineto event \(Expected `object`, got `int`\): 42"),
    Case("no such trace folder", lambda tmp: ["tax", str(tmp / "nothing"), "--no-cache"],
         r"nothing.*no such file"),
    Case("folder without traces", lambda tmp: ["tax", str((tmp / "empty").mkdir() or tmp / "empty"), "--no-cache"],
         r"empty.*(no trace|holds no)"),
    # ---- arguments
    Case("pg empty ranks", tax("--pg", "tp="), r"--pg 'tp='"),
    Case("pg without a name", tax("--pg", "=0-3"), r"--pg '=0-3'"),
    Case("pg stream not a number", tax("--pg", "tp=0-3@abc"), r"--pg 'tp=0-3@abc'.*stream"),
    Case("pg reversed range", tax("--pg", "tp=3-0"), r"--pg 'tp=3-0'"),
    Case("pg rank twice", tax("--pg", "tp=0,0,1"), r"--pg 'tp=0,0,1'.*(twice|duplicate|repeat)"),
    Case("pg ranks absent from the traces", tax("--pg", "tp=0-15"), r"PG tp: member rank\S* 8,9,.*15 .*no trace"),
    Case("pg letters", tax("--pg", "tp=a-b"), r"--pg 'tp=a-b'"),
    Case("rank-from unknown", tax("--rank-from", "guess"), r"--rank-from.*guess"),
    Case("comm-kernel bad regex", tax("--comm-kernel", "([=allreduce"), r"--comm-kernel.*\(\["),
    Case("comm-kernel without =", tax("--comm-kernel", "allreduce"), r"--comm-kernel.*allreduce"),
    Case("comm-kernel empty regex", tax("--comm-kernel", "=AllToAll"), r"--comm-kernel '=AllToAll'.*REGEX=KIND"),
    Case("end tolerance negative", tax("--end-tolerance-us", "-5"), r"--end-tolerance-us.*-5"),
    Case("ranks per host zero", tax("--ranks-per-host", "0"), r"--ranks-per-host.*0"),
    Case("jobs zero", tax("-j", "0"), r"(-j|--jobs).*0"),
    Case("jobs not a number", tax("-j", "many"), r"-j.*many"),
    Case("blocks m = 1", lambda tmp: ["blocks", str(DLRM), "--no-cache", "--m", "1"], r"--m.*1"),
    Case("blocks gemm pattern bad regex", lambda tmp: ["blocks", str(DLRM), "--no-cache", "--gemm-pattern", "(("],
         r"--gemm-pattern.*\(\("),
    Case("run m = 0", lambda tmp: ["run", str(DLRM), "--out", str(tmp / "o"), "--m", "0"], r"--m 0"),
    Case("run eps positive", lambda tmp: ["run", str(DLRM), "--out", str(tmp / "o"), "--eps", "0.5"], r"--eps 0.5"),
    Case("run draws zero", lambda tmp: ["run", str(DLRM), "--out", str(tmp / "o"), "--draws", "0"], r"--draws.*0"),
    Case("run two block PGs", lambda tmp: ["run", str(DLRM), "--out", str(tmp / "o"), "--pg", "a", "--pg", "b"],
         r"--pg.*a, b"),
    Case("run unknown model", lambda tmp: ["run", str(DLRM), "--no-cache", "--out", str(tmp / "o"), "--model", "nope"],
         r"--model nope"),
    Case("diff level 1.5", lambda tmp: ["diff", str(DLRM), str(DLRM), "--no-cache", "--level", "1.5"],
         r"level.*1.5"),
    Case("diff one fit only", lambda tmp: ["diff", str(DLRM), str(DLRM), "--no-cache", "--fit-a", str(tmp)],
         r"--fit-a.*--fit-b"),
    Case("diff unknown workload", lambda tmp: ["diff", str(DLRM), str(DLRM), "--no-cache", "--workload-a", "w"],
         r"--workload"),
    Case("bandwidth n = 0", lambda tmp: ["bandwidth", "--topology", "full", "--n", "0", "--alpha-us", "5",
                                         "--bytes", "1e9", "--tau-us", "10"], r"--n.*0"),
    Case("bandwidth negative alpha", lambda tmp: ["bandwidth", "--topology", "full", "--n", "8", "--alpha-us", "-1",
                                                  "--bytes", "1e9", "--tau-us", "10"], r"--alpha-us.*-1"),
    Case("bandwidth zero bytes", lambda tmp: ["bandwidth", "--topology", "full", "--n", "8", "--alpha-us", "5",
                                              "--bytes", "0", "--tau-us", "10"], r"--bytes.*0"),
    Case("bandwidth unknown topology", lambda tmp: ["bandwidth", "--topology", "star", "--n", "8", "--alpha-us", "5",
                                                    "--bytes", "1e9", "--tau-us", "10"], r"star"),
    Case("bandwidth eps outside (-1, 0)", lambda tmp: ["bandwidth", "--topology", "full", "--n", "8", "--alpha-us",
                                                       "5", "--bytes", "1e9", "--tau-us", "10", "--eps", "2"],
         r"--eps.*2"),
    Case("bandwidth gev sigma negative", lambda tmp: ["bandwidth", "--topology", "full", "--n", "8", "--alpha-us", "5",
                                                      "--bytes", "1e9", "--gev", "0", "-1", "0.1",
                                                      "--block-sd-us", "18"], r"--gev: the scale sigma must be > 0; got -1"),
    Case("bandwidth xi exactly 1", lambda tmp: ["bandwidth", "--topology", "ring", "--n", "8", "--alpha-us", "5",
                                                "--bytes", "1e9", "--gev", "0.9", "0.35", "1", "--block-sd-us", "18"],
         r"xi.*(>= ?1|≥ ?1).*infinite|infinite.*xi"),
    Case("predict level 0", lambda tmp: ["predict", str(_fit_dir(tmp)), "--n", "8", "--block-sd-us", "10",
                                         "--level", "0"], r"level.*0"),
    Case("predict n not a multiple of m", lambda tmp: ["predict", str(_fit_dir(tmp)), "--n", "6", "--block-sd-us",
                                                       "10"], r"multiple of m = 4.*\[6\]"),
    Case("predict negative block sd", lambda tmp: ["predict", str(_fit_dir(tmp)), "--n", "8", "--block-sd-us", "-3"],
         r"--block-sd-us.*-3"),
    Case("synth tp does not divide ranks", lambda tmp: ["synth", str(tmp / "s"), "--ranks", "8", "--tp", "3"],
         r"--tp 3.*--ranks 8"),
    Case("synth zero ranks", lambda tmp: ["synth", str(tmp / "s"), "--ranks", "0"], r"--ranks.*0"),
    Case("inject unknown rank", lambda tmp: ["inject", str(DLRM), "-o", str(tmp / "inj"), "--rank", "9",
                                             "--delay-ms", "1"], r"rank 9"),
    Case("inject delay out of range", lambda tmp: ["inject", str(DLRM), "-o", str(tmp / "inj"), "--rank", "1",
                                                   "--delay-ms", "50"], r"delay 50000.* us is outside 0\.\.20000"),
    # ---- output paths, checked before any work
    Case("run --out under /proc", lambda tmp: ["run", str(DLRM), "--out", "/proc/evtsync-run"], r"/proc/evtsync-run"),
    Case("tax -o is a folder", lambda tmp: ["tax", str(DLRM), "--no-cache", "-o", str(tmp)],
         r"-o .*/in\b.*folder"),
    Case("tax -o unknown format", lambda tmp: ["tax", str(DLRM), "--no-cache", "-o", str(tmp / "t.xlsx")],
         r"t\.xlsx.*(format|parquet|csv)"),
    Case("tax -o under a file", lambda tmp: ["tax", str(DLRM), "--no-cache", "-o", str(_file(tmp) / "t.csv")],
         r"afile/t\.csv"),
    Case("breakdown -o is a folder", lambda tmp: ["breakdown", str(DLRM), "--no-cache", "-o", str(tmp)],
         r"-o.*folder"),
    Case("blocks -o under /proc", lambda tmp: ["blocks", str(DLRM), "--no-cache", "-o", "/proc/x/z.csv"], r"/proc/x"),
    Case("attribute -o under /proc", lambda tmp: ["attribute", str(DLRM), "--no-cache", "-o", "/proc/x/a.csv"],
         r"/proc/x"),
    Case("report --out is a file", lambda tmp: ["report", str(_fit_dir(tmp)), "--out", str(_file(tmp))],
         r"afile.*(not a folder|is a file|exists)"),
    Case("synth OUT_DIR is a file", lambda tmp: ["synth", str(_file(tmp))], r"afile"),
    Case("synth OUT_DIR under /proc", lambda tmp: ["synth", "/proc/evtsync-synth"], r"/proc/evtsync-synth"),
    Case("nccl-tests parse --out unwritable", lambda tmp: ["nccl-tests", "parse",
                                                           str(NCCL / "all_reduce_H100_2x8_gcp-a3mega-ztan.txt"),
                                                           "--out", "/proc/n.csv"], r"/proc/n\.csv"),
    Case("nccl-tests stats --out a folder", lambda tmp: ["nccl-tests", "stats",
                                                         str(NCCL / "all_reduce_H100_2x8_gcp-a3mega-ztan.txt"),
                                                         "--out", str(tmp)], r"--out.*folder"),
    Case("fit --out an existing file", lambda tmp: ["fit", str(_zscores(tmp)), "--model", "gumbel", "--out",
                                                    str(_file(tmp))], r"afile"),
    Case("fit --plot unknown format", lambda tmp: ["fit", str(_zscores(tmp)), "--mle", "--plot", str(tmp / "p.gif")],
         r"p\.gif"),
    Case("diff -o under /proc", lambda tmp: ["diff", str(DLRM), str(DLRM), "--no-cache", "-o", "/proc/d.csv"],
         r"/proc/d\.csv"),
    Case("diff --html a folder", lambda tmp: ["diff", str(DLRM), str(DLRM), "--no-cache", "--html", str(tmp)],
         r"--html.*folder"),
    Case("compare --out unknown format", lambda tmp: ["compare", str(_fit_dir(tmp)), str(_fit_dir(tmp, "fit2", 1)), "--out",
                                                      str(tmp / "c.txt")], r"c\.txt"),
    Case("predict --out a folder", lambda tmp: ["predict", str(_fit_dir(tmp)), "--n", "8", "--block-sd-us", "10",
                                                "--out", str(tmp)], r"--out.*folder"),
    Case("inject -o an existing file", lambda tmp: ["inject", str(DLRM), "-o", str(_file(tmp)), "--rank", "1",
                                                    "--delay-ms", "1"], r"afile"),
    # ---- run folders, models and fits
    Case("corrupt manifest", lambda tmp: ["run", str(DLRM), "--out", str(_run_dir(tmp, "{not json")), "--no-cache"],
         r"manifest\.json.*unreadable.*--force"),
    Case("manifest of another program", lambda tmp: ["run", str(DLRM), "--out",
                                                      str(_run_dir(tmp, '{"format": "other/2"}')), "--no-cache"],
         r"manifest\.json.*not an evtsync run manifest.*--force"),
    Case("report of a folder being written", _lock_run, r"runout: an `evtsync run` is writing this folder"),
    Case("report of an empty folder", lambda tmp: ["report", str(_run_dir(tmp, None))],
         r"runout.*(no manifest|not a run folder|fit)"),
    Case("report of a corrupt manifest", lambda tmp: ["report", str(_run_dir(tmp, "[]"))],
         r"manifest\.json.*not an evtsync run manifest"),
    Case("models-dir empty", _models_empty, r"models.*holds no model specifications"),
    Case("models-dir missing", lambda tmp: ["models", "--models-dir", str(tmp / "none")], r"none"),
    Case("model spec broken TOML", _models_bad_toml, r"broken\.toml"),
    Case("fit of an altered file used by predict", lambda tmp: ["predict", str(_altered_fit(tmp)), "--n", "8",
                                                                "--block-sd-us", "10"], r"fit\.nc.*altered"),
    Case("compare a fit with itself", lambda tmp: ["compare", str(_fit_dir(tmp)), str(tmp / "fit")],
         r"fit.* are the same fit .*given twice"),
    Case("compare one fit", lambda tmp: ["compare", str(_fit_dir(tmp))], r"(two|2)"),
    Case("predict of a CSV", lambda tmp: ["predict", str(_zscores(tmp)), "--n", "8", "--block-sd-us", "10"],
         r"z\.csv"),
    Case("fit without the column", lambda tmp: ["fit", str(_zscores(tmp, column="x")), "--mle", "--column", "z"],
         r"z\.csv.*column.*z|column 'z'"),
    Case("fit of too few maxima", lambda tmp: ["fit", str(_zscores(tmp, [0.1, 0.5, 0.2])), "--mle"],
         r"z\.csv: column 'z': .*at least 5 block maxima; got 3"),
    Case("fit of NaN only", lambda tmp: ["fit", str(_zscores(tmp, [float("nan")] * 40)), "--mle"],
         r"(NaN|finite|no value)"),
    Case("fit of maxima of order 1e300", lambda tmp: ["fit", str(_zscores(tmp, [1e300 * (i + 1) for i in range(40)])),
                                                      "--mle"], r"z\.csv.*'z'.*beyond .*double precision.*rescale"),
    Case("fit of maxima of order 1e-300", lambda tmp: ["fit", str(_zscores(tmp, [1e-300 * (i + 1) for i in range(40)])),
                                                       "--mle"], r"z\.csv.*'z'.*beyond .*double precision.*rescale"),
    Case("fit of equal maxima", lambda tmp: ["fit", str(_zscores(tmp, [1.0] * 40)), "--mle"],
         r"z\.csv: all 40 values of 'z' are equal"),
    Case("fit of a missing table", lambda tmp: ["fit", str(tmp / "none.csv"), "--mle"], r"none\.csv.*no such file"),
    # ---- nccl-tests logs
    Case("nccl-tests log without a table", lambda tmp: ["nccl-tests", "parse", str(_nccl_log(tmp, "hello\n"))],
         r"nccl\.log"),
    Case("nccl-tests MPI failure", lambda tmp: ["nccl-tests", "parse",
                                                str(NCCL / "bad_all_reduce_unknown_2x8_meta-gcm-mpi-slots-failure.txt")],
         r"mpi-slots-failure"),
    Case("nccl-tests missing file", lambda tmp: ["nccl-tests", "parse", str(tmp / "none.txt")], r"none\.txt"),
]


@pytest.fixture(scope="module")
def shared_before() -> dict[str, str]:
    return file_hashes(DATA)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_one_line(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                            monkeypatch: pytest.MonkeyPatch) -> None:
    work = tmp_path / "in"
    work.mkdir()
    monkeypatch.setenv("EVTSYNC_CACHE_DIR", str(link_session_scanner(tmp_path / "cache")))  # the session's scanner: built once
    home = tmp_path / "cwd"
    home.mkdir()
    monkeypatch.chdir(home)
    try:
        argv = case.make(work)
        capsys.readouterr()
        before = file_hashes(work)
        try:
            status = main(["-q", *argv])
        except SystemExit as exc:  # argparse
            status = exc.code
        out, err = capsys.readouterr()
    finally:
        for fh in _HELD:
            fh.close()
        _HELD.clear()
    assert status == case.status, f"exit {status}; stderr: {err[-1500:]}; stdout: {out[-800:]}"
    assert "Warning" not in err, err
    errors = [line for line in err.splitlines() if ERROR_LINE.match(line)]
    assert len(errors) == 1, err
    assert re.search(case.expect, errors[0], re.IGNORECASE), errors[0]
    after = file_hashes(work)
    changed = {k for k in before if after.get(k) != before[k]}
    assert not changed, f"input files touched: {changed}"
    if case.status == 2:  # refused: nothing written at all (a run's own stage failures write their record)
        assert set(after) <= set(before), f"written although refused: {set(after) - set(before)}"
    assert not list(tmp_path.rglob("*.tmp")), "temporary files left"
    assert not list(home.iterdir()), f"written into the working folder: {list(home.iterdir())}"


def test_an_event_against_the_schema_is_located_where_it_is(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Not "near byte 3027" (the start of traceEvents) wherever it is: the byte where the event starts."""
    folder = _edit_doc(tmp_path, 5, _setter(_kernels, -3, "ts", "soon"))
    raw = gzip.decompress(_rank_file(folder, 5).read_bytes())
    truth = raw.find(b'"soon"')
    start = raw.rfind(b'{"ph"', 0, truth)
    assert main(["-q", "tax", str(folder), "--no-cache"]) == 2
    found = re.search(r"decompressed byte (\d+)", capsys.readouterr().err)
    assert found and int(found.group(1)) == start, (found, start, truth)


def test_no_case_touched_the_shared_data(shared_before: dict[str, str]) -> None:
    assert file_hashes(DATA) == shared_before


def test_a_run_keeps_user_tmp_files_under_out(tmp_path: Path) -> None:
    """`evtsync run` removes only its own temporaries: a user's ``.draft.tmp`` in a subfolder of --out
    (and in the run folder itself) survives."""
    out = tmp_path / "out"
    (out / "sub").mkdir(parents=True)
    drafts = [out / "sub" / ".draft.tmp", out / ".notes.tmp", out / "tables-mine.tmp"]
    for p in drafts:
        p.write_text("mine")
    # --force: a folder of the user's files is refused as --out otherwise (issue 33)
    assert main(["-q", "run", str(DLRM), "--no-cache", "--out", str(out), "--model", "gumbel", "--no-report",
                 "--force"]) == 0
    assert all(p.read_text() == "mine" for p in drafts)
