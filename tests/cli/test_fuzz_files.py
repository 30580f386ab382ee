"""The fuzz suite of every reader (issue 47): Kineto JSON traces, NCCL Inspector logs, Nsight
Systems SQLite exports, nccl-tests logs, run folders (their manifest.json) and fit files (.nc).

Two parts, both through the CLI's ``main`` in this process (no subprocess per example):

- a corpus of damaged files kept in tests/data/damaged (its README says how each was made), each
  with the outcome a user gets: a one-line error naming the cause, or a documented salvage;
- hypothesis mutations of intact seeds (bytes flipped, cut, inserted; a JSON value, an SQLite
  cell, a token of a result row replaced), each of which must end in exit 0, or exit 2 with
  exactly one ``evtsync: error:`` line, and never an exception (a traceback).

Derandomized and bounded (a few dozen examples per reader, on files of a few KB) so that the
suite stays within its share of the default run (issue 47: <= 60 s for the fuzz tests).
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evtsync.cli import main
from tests.conftest import DATA, TRACES

CORPUS = Path(__file__).resolve().parents[1] / "data" / "damaged"
SEEDS = CORPUS / "seeds"
NCCL_LOG = DATA / "nccl-tests" / "all_reduce_H100_2x8_gcp-a3mega-ztan.txt"
ERROR_LINE = re.compile(r"^evtsync(?: [\w -]+)?: error: ")


def fuzz(examples: int) -> settings:
    """Settings of one fuzz test: reproducible (derandomized, no example database) and bounded."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``evtsync -q ARGV`` in this process: the exit status, stdout and stderr, after checking
    the contract (exit 0, or 2 with exactly one error line; no traceback: an exception escaping
    ``main`` fails the test with it)."""
    capsys.readouterr()
    status = main(["-q", *argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err[-2000:]
    assert status in (0, 2), (argv, status, err[-800:])
    if status:
        errors = [line for line in err.splitlines() if ERROR_LINE.match(line)]
        assert len(errors) == 1, (argv, err[-800:])
    return status, out, err


# --------------------------------------------------------------------------- the corpus

#: Each damaged file or folder of the corpus (relative to it), the command run on it (``{}`` is
#: its path), and what the user must get: ("error", words of the one error line) or ("salvage",
#: words of the output) for the documented salvages.
CASES: list[tuple[str, list[str], str, str]] = [
    ("kineto/rank0-array-top.json", ["tax", "0={}"], "error", "not a Kineto trace"),
    ("kineto/rank0-cut-mid-event.json", ["tax", "0={}"], "error", "rerun with --salvage"),
    ("kineto/rank0-cut.json.gz", ["tax", "0={}"], "error", "gzip stream ends early"),
    ("kineto/rank0-deep-args.json", ["tax", "0={}"], "error", "nested deeper"),
    ("kineto/rank0-deep.json", ["tax", "0={}"], "error", "nested deeper"),
    ("kineto/rank0-empty.json", ["tax", "0={}"], "error", "empty file"),
    ("kineto/rank0-huge-dur.json", ["tax", "0={}"], "error", "out of range"),
    ("kineto/rank0-no-trace-events.json", ["tax", "0={}"], "error", "not a Kineto trace"),
    ("kineto/rank0-not-json.json", ["tax", "0={}"], "error", "not JSON"),
    ("kineto/rank0-text-ts.json", ["tax", "0={}"], "error", "is not a Kineto event"),
    ("kineto/rank0-zeroed.json.gz", ["tax", "0={}"], "error", "not JSON"),
    ("inspector/cut-last-line", ["tax", "{}"], "error", "not one complete job"),
    ("inspector/deep-line", ["tax", "{}"], "error", "line 2: not an NCCL Inspector record (JSON nested too deeply"),
    ("inspector/exec-time-1e18", ["tax", "{}"], "error", "line 3: coll_exec_time_us 1e+18 is too large"),
    ("inspector/garbage-line", ["tax", "{}"], "error", "line 3: not an NCCL Inspector record"),
    # documented salvage (docs/user-guide.md §7, --salvage): the line that is no record is skipped and counted
    ("inspector/garbage-line", ["tax", "{}", "--salvage"], "salvage", "skipped 1"),
    ("inspector/rank-above-n-ranks", ["tax", "{}"], "error", "rank 7 is not below n_ranks 4"),
    ("inspector/sn-beyond-int64", ["tax", "{}"], "error", "line 2: not an NCCL Inspector record"),
    ("nsys/blob-string", ["tax", "0={}/rank0.sqlite"], "error", "table StringIds, column value, row 1"),
    ("nsys/no-kernel-table", ["tax", "0={}/rank0.sqlite"], "error", "no table CUPTI_ACTIVITY_KIND_KERNEL"),
    ("nsys/real-in-correlation", ["tax", "0={}/rank0.sqlite"], "error",
     "table CUPTI_ACTIVITY_KIND_RUNTIME, column correlationId, row 2: expected an integer, found real 2.5"),
    ("nsys/text-in-kernel-start", ["attribute", "0={}/rank0.sqlite"], "error",
     "table CUPTI_ACTIVITY_KIND_KERNEL, column start, row 3: expected an integer, found text 'abc'"),
    ("nsys/text-named-sqlite", ["tax", "{}"], "error", "rank0.sqlite starts with b'not a database"),
    ("nsys/truncated", ["tax", "0={}/rank0.sqlite"], "error", "truncated Nsight Systems export"),
    ("nsys/zeroed-header", ["tax", "0={}/rank0.sqlite"], "error", "zero bytes"),
    ("nccltests/cut-mid-row.txt", ["nccl-tests", "stats", "{}"], "error", "line(s) 41"),
    ("nccltests/empty.txt", ["nccl-tests", "stats", "{}"], "error", "the file is empty"),
    ("nccltests/garbage-mid-table.txt", ["nccl-tests", "stats", "{}"], "error", "line(s) 35"),
    ("nccltests/garbled-rows.txt", ["nccl-tests", "stats", "{}"], "error", "11 damaged result row(s), line(s) 40-50"),
    # documented salvage (docs/nccl-tests.md): --allow-damaged computes without them, naming them
    ("nccltests/garbled-rows.txt", ["nccl-tests", "stats", "{}", "--allow-damaged"], "salvage",
     "DAMAGED: 11 result row(s)"),
    ("nccltests/garbled-rows.txt", ["nccl-tests", "alpha", "{}"], "error", "line(s) 40-50"),
    ("nccltests/garbage-mid-table.txt", ["nccl-tests", "compare", "{}", "{}"], "error", "line(s) 35"),
    ("nccltests/sqlite-named-txt.txt", ["nccl-tests", "stats", "{}"], "error", "an SQLite database"),
    ("nccltests/wrong-beyond-float.txt", ["nccl-tests", "stats", "{}"], "error", "line(s) 36"),
    ("runfolder/a-list", ["report", "{}", "-o", "OUT"], "error", "not an evtsync run manifest"),
    ("runfolder/binary", ["report", "{}", "-o", "OUT"], "error", "unreadable run manifest"),
    ("runfolder/not-json", ["diff", "{}", "{}"], "error", "unreadable run manifest"),
    ("runfolder/other-format", ["report", "{}", "-o", "OUT"], "error", "not an evtsync run manifest"),
    ("runfolder/outputs-not-a-mapping", ["report", "{}", "-o", "OUT"], "error", "'outputs' is list, not a mapping"),
    ("runfolder/stage-entry-not-a-mapping", ["diff", "{}", "{}"], "error", "stage 'tax' is int, not a mapping"),
    ("runfolder/stages-not-a-mapping", ["report", "{}", "-o", "OUT"], "error", "'stages' is list, not a mapping"),
    ("fit/flipped-bytes.nc", ["predict", "{}", "--n", "8"], "error", "cannot read as a netCDF fit"),
    ("fit/text.nc", ["report", "{}", "-o", "OUT"], "error", "cannot read as a netCDF fit"),
    ("fit/truncated.nc", ["predict", "{}", "--n", "8"], "error", "truncated file"),
    ("fit/zeroed-header.nc", ["report", "{}", "-o", "OUT"], "error", "file signature not found"),
]


@pytest.mark.parametrize(("entry", "argv", "kind", "words"), CASES, ids=[f"{c[0]}: {' '.join(c[1])}" for c in CASES])
def test_damaged_corpus(entry: str, argv: list[str], kind: str, words: str, tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    path = CORPUS / entry
    args = [a.replace("{}", str(path)).replace("OUT", str(tmp_path / "out")) for a in argv]
    if args[0] in ("tax", "attribute", "diff"):
        args.append("--no-cache")
    status, out, err = run_cli(args, capsys)
    if kind == "error":
        assert status == 2
        line = next(x for x in err.splitlines() if ERROR_LINE.match(x))
        assert words in line, line
        assert str(path) in line or entry.startswith("inspector/cut") or entry.startswith("inspector/rank"), line
    else:
        assert status == 0 and words in out + err, (out + err)[-1500:]


#: Corpus files that send libhdf5 into a loop that never returns when read in the test's own
#: process: tried only in a subprocess with a time limit (:func:`test_a_fit_that_hangs_libhdf5`).
HANGING = ["fit/heap-zeroed-hangs.nc"]
#: The limit of the reading process in that test (``$EVTSYNC_FIT_READ_TIMEOUT``, seconds), and
#: the guard of the whole command: a regression (the file read in evtsync's own process again)
#: fails the test after GUARD_S instead of hanging the suite.
HANG_LIMIT_S, GUARD_S = 3, 120


def test_every_corpus_entry_has_a_case() -> None:
    """A file added to the corpus without a case here would test nothing."""
    on_disk = {str(p.relative_to(CORPUS)) for kind in CORPUS.iterdir() if kind.is_dir() and kind.name != "seeds"
               for p in kind.iterdir()}
    assert on_disk == {entry for entry, *_ in CASES} | set(HANGING)


@pytest.mark.parametrize("entry", HANGING)
def test_a_fit_that_hangs_libhdf5_is_refused_in_time(entry: str, tmp_path: Path) -> None:
    """Issue 47: a standalone fit whose HDF5 metadata is damaged where no checksum covers it
    (64 bytes zeroed in its global heap) made `predict`, `report`, `compare` (and the rank
    model's reader) hang forever. Now
    a fit without a valid signature is read first in a separate process killed after the time
    limit: each command ends, exit 2, with the one-line error naming the file and the limit.
    Run as subprocesses, at the same time, each under a guard of GUARD_S."""
    import os
    import subprocess
    import sys

    path = CORPUS / entry
    commands = {"predict": ["predict", str(path), "--n", "8"],
                "report": ["report", str(path), "-o", str(tmp_path / "out")],
                "compare": ["compare", str(path), str(SEEDS / "fit.nc")]}
    env = {**os.environ, "EVTSYNC_FIT_READ_TIMEOUT": str(HANG_LIMIT_S)}
    # the rank model's reader (no command reads a rank-model fit back): its error, as the CLI would say it
    rank_model = ("import sys; from evtsync.core.errors import InputError; from evtsync.evt.rankmodel import "
                  "load_rank_model\ntry:\n    load_rank_model(sys.argv[1])\nexcept InputError as exc:\n"
                  "    sys.exit(print('evtsync: error:', exc, file=sys.stderr) or 2)")
    argvs = {name: [sys.executable, "-m", "evtsync", "-q", *argv] for name, argv in commands.items()}
    argvs["load_rank_model"] = [sys.executable, "-c", rank_model, str(path)]
    running = {name: subprocess.Popen(argv, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      stdin=subprocess.DEVNULL)
               for name, argv in argvs.items()}
    ended: dict[str, tuple[int, str]] = {}
    try:
        for name, proc in running.items():
            try:
                _, err = proc.communicate(timeout=GUARD_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"`{' '.join(argvs[name][1:])}` did not end in {GUARD_S} s: the damaged fit "
                            "was read in evtsync's own process (it hangs in libhdf5)")
            ended[name] = (proc.returncode, err)
    finally:
        for proc in running.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for name, (status, err) in ended.items():
        assert "Traceback" not in err, (name, err[-2000:])
        errors = [line for line in err.splitlines() if ERROR_LINE.match(line)]
        assert status == 2 and len(errors) == 1, (name, status, err[-800:])
        assert f"{path}: reading the HDF5 metadata did not finish in {HANG_LIMIT_S} s: the file is damaged" in errors[0]
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())  # report wrote nothing


# --------------------------------------------------------------------------- byte mutations

#: One edit of a file's bytes: (what, where as a fraction of the length, bytes).
edits = st.lists(st.tuples(st.sampled_from(["flip", "cut", "insert", "zero", "delete"]),
                           st.floats(0, 1, allow_nan=False), st.binary(min_size=1, max_size=8)),
                 min_size=1, max_size=3)


def mutated(data: bytes, changes: list[tuple[str, float, bytes]]) -> bytes:
    """``data`` with ``changes`` applied in turn (positions relative to the current length)."""
    out = bytearray(data)
    for what, where, chunk in changes:
        at = min(int(where * len(out)), max(len(out) - 1, 0))
        if what == "flip" and out:
            out[at] ^= chunk[0] or 1
        elif what == "cut":
            del out[at:]
        elif what == "insert":
            out[at:at] = chunk
        elif what == "zero":
            out[at: at + 64 * len(chunk)] = bytes(len(out[at: at + 64 * len(chunk)]))
        elif what == "delete":
            del out[at: at + len(chunk)]
    return bytes(out)


@pytest.fixture(scope="module")
def kineto_seed() -> bytes:
    """DLRM rank 0 (a real trace) cut to its header, its first 40 events and its communication
    (the NCCL kernels and annotations, ``record_param_comms``), as JSON: small, and it reaches
    the alignment and the tax."""
    path = sorted((TRACES / "dlrm-8rank-v100").glob("*.json.gz"))[0]
    doc = json.loads(gzip.decompress(path.read_bytes()))
    events = doc["traceEvents"]
    doc["traceEvents"] = events[:40] + [e for e in events[40:] if any(
        word in str(e.get("name", "")) for word in ("nccl", "record_param_comms", "c10d"))]
    return json.dumps(doc).encode()


@fuzz(20)
@given(changes=edits, compress=st.booleans())
def test_kineto_bytes(kineto_seed: bytes, tmp_path_factory: pytest.TempPathFactory,
                      capsys: pytest.CaptureFixture[str], changes: list, compress: bool) -> None:
    data = mutated(kineto_seed, changes)
    path = tmp_path_factory.mktemp("kineto") / ("rank0.json.gz" if compress else "rank0.json")
    path.write_bytes(gzip.compress(data) if compress else data)
    run_cli(["tax", f"0={path}", "--no-cache", "--jobs", "1", "--allow-partial"], capsys)


@fuzz(25)
@given(changes=edits)
def test_inspector_bytes(tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str],
                         changes: list) -> None:
    logs = tmp_path_factory.mktemp("insp") / "logs"
    shutil.copytree(SEEDS / "inspector", logs)
    target = sorted(logs.iterdir())[1]
    target.write_bytes(mutated(target.read_bytes(), changes))
    run_cli(["tax", str(logs), "--no-cache", "--jobs", "1"], capsys)


json_values = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                        st.sampled_from([1e18, -1.0, 1e308, 2**63, 2**64 - 1, "", "AllReduce", [], {}]),
                        st.text(max_size=6), st.lists(st.integers(), max_size=2))
#: Fields of an Inspector record the reader uses (dotted paths).
RECORD_FIELDS = ["header.id", "header.rank", "header.n_ranks", "header.nnodes", "header.comm_name",
                 "metadata.hostname", "metadata.pid", "metadata.dump_timestamp_us", "coll_perf.coll",
                 "coll_perf.coll_sn", "coll_perf.coll_exec_time_us", "coll_perf.coll_msg_size_bytes",
                 "coll_perf.coll_timing_source", "coll_perf", "header", "metadata"]


@fuzz(30)
@given(line=st.integers(0, 3), field=st.sampled_from(RECORD_FIELDS), value=json_values,
       salvage=st.booleans())
def test_inspector_values(tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str],
                          line: int, field: str, value: Any, salvage: bool) -> None:
    logs = tmp_path_factory.mktemp("insp") / "logs"
    shutil.copytree(SEEDS / "inspector", logs)
    target = sorted(logs.iterdir())[1]
    records = [json.loads(x) for x in target.read_text().splitlines()]
    where = records[line]
    *parents, last = field.split(".")
    for key in parents:
        where = where[key]
    where[last] = value
    target.write_text("".join(json.dumps(r) + "\n" for r in records))
    run_cli(["tax", str(logs), "--no-cache", "--jobs", "1", *(["--salvage"] if salvage else [])], capsys)


#: Cells of the export the reader uses: (table, column).
EXPORT_CELLS = [("CUPTI_ACTIVITY_KIND_KERNEL", c) for c in ("start", "end", "deviceId", "streamId", "correlationId",
                                                             "globalPid", "demangledName")] + \
               [("CUPTI_ACTIVITY_KIND_RUNTIME", c) for c in ("start", "end", "globalTid", "correlationId", "nameId")] + \
               [("NVTX_EVENTS", c) for c in ("start", "end", "eventType", "globalTid", "textId", "text")] + \
               [("StringIds", "id"), ("StringIds", "value"), ("TARGET_INFO_GPU", "name"),
                ("TARGET_INFO_SESSION_START_TIME", "utcEpochNs")]
sql_values = st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False), st.text(max_size=6),
                       st.binary(max_size=4))


@fuzz(30)
@given(cell=st.sampled_from(EXPORT_CELLS), value=sql_values, row=st.integers(1, 4), bytes_too=st.booleans(),
       changes=edits)
def test_nsys_cells_and_bytes(tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str],
                              cell: tuple[str, str], value: Any, row: int, bytes_too: bool, changes: list) -> None:
    export = tmp_path_factory.mktemp("nsys") / "rank0.sqlite"
    shutil.copyfile(SEEDS / "rank0.sqlite", export)
    table, column = cell
    conn = sqlite3.connect(export)
    try:
        with conn:
            conn.execute(f'UPDATE OR IGNORE "{table}" SET "{column}" = ? WHERE rowid = ?', (value, row))
    except sqlite3.IntegrityError:  # a value the column refuses (a text INTEGER PRIMARY KEY): left intact
        pass
    finally:
        conn.close()
    if bytes_too:
        export.write_bytes(mutated(export.read_bytes(), changes))
    run_cli(["tax", f"0={export}", "--no-cache", "--jobs", "1"], capsys)


# --------------------------------------------------------------------------- nccl-tests logs

ROW_LINES = range(25, 56)  # NCCL_LOG's 31 result rows, read by hand
tokens = st.one_of(st.text(alphabet="0123456789.-+eE#@xaN/A ", min_size=0, max_size=6),
                   st.sampled_from(["nan", "inf", "-1e309", "N/A", "#", "float", "sum", "99999999999999999999"]))


@fuzz(40)
@given(line=st.sampled_from(list(ROW_LINES)), column=st.integers(0, 12), token=tokens)
def test_nccl_tests_a_row_is_read_or_named(tmp_path_factory: pytest.TempPathFactory,
                                           capsys: pytest.CaptureFixture[str], line: int, column: int,
                                           token: str) -> None:
    """Issue 47 (8), as a property: one token of a result row replaced by anything, the row is
    either read or named as damaged (and ``stats`` then refuses without --allow-damaged); no row
    disappears silently."""
    from evtsync.nccltests.parse import parse_log

    lines = NCCL_LOG.read_text().splitlines()
    fields = lines[line - 1].split()
    fields[column] = token
    lines[line - 1] = "  ".join(fields)
    path = tmp_path_factory.mktemp("nccl") / "log.txt"
    path.write_text("\n".join(lines) + "\n")
    status, _, err = run_cli(["nccl-tests", "stats", str(path)], capsys)
    try:
        parsed = parse_log(path)
    except Exception as exc:  # noqa: BLE001 - only the package's one-line errors are allowed
        from evtsync.core.errors import EvtsyncError

        assert isinstance(exc, EvtsyncError) and status == 2
        return
    read = {r["line"] for r in parsed.rows}
    named = {d.line for d in parsed.damaged}
    assert all(n in read or n in named for n in ROW_LINES if n != line or lines[line - 1].strip())
    assert line in read or line in named or not lines[line - 1].strip()
    if named:
        assert status == 2 and "--allow-damaged" in err


@fuzz(30)
@given(changes=edits, allow=st.booleans())
def test_nccl_tests_bytes(tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str],
                          changes: list, allow: bool) -> None:
    path = tmp_path_factory.mktemp("nccl") / "log.txt"
    path.write_bytes(mutated(NCCL_LOG.read_bytes(), changes))
    run_cli(["nccl-tests", "stats", str(path), *(["--allow-damaged"] if allow else [])], capsys)
    run_cli(["nccl-tests", "parse", str(path)], capsys)


# --------------------------------------------------------------------------- run folders and fits

manifest_values = st.recursive(json_values, lambda inner: st.one_of(st.lists(inner, max_size=2),
                                                                   st.dictionaries(st.text(max_size=4), inner,
                                                                                   max_size=2)), max_leaves=4)
MANIFEST_PATHS = ["stages", "stages.tax", "stages.tax.outputs", "stages.tax.status", "stages.tax.failed_workloads",
                  "stage_order", "workloads", "options", "format", "history", "file_hashes", "demo"]


@fuzz(30)
@given(field=st.sampled_from(MANIFEST_PATHS), value=manifest_values)
def test_manifest_values(tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str],
                         field: str, value: Any) -> None:
    """A run folder whose manifest holds anything where a field belongs: ``diff`` and the
    manifest's readers give a one-line error (or compare, for a harmless change)."""
    from evtsync.core.errors import EvtsyncError
    from evtsync.runfolder.layout import incomplete_notes, read_verified_manifest

    run = tmp_path_factory.mktemp("run")
    manifest = {"format": "evtsync-run/1", "stage_order": ["tax"], "workloads": [],
                "stages": {"tax": {"status": "done", "key": "k", "outputs": {}, "reason": ""}}}
    where = manifest
    *parents, last = field.split(".")
    for key in parents:
        where = where[key]
    where[last] = value
    (run / "manifest.json").write_text(json.dumps(manifest))
    try:
        incomplete_notes(read_verified_manifest(run))
    except EvtsyncError as exc:
        assert "\n" not in str(exc)
    run_cli(["diff", str(run), str(run), "--no-cache"], capsys)


#: Edits of a fit file that libhdf5 survives in this process: a cut anywhere, bytes appended,
#: and damage to the superblock (its first 512 bytes). Zeroed or flipped bytes in metadata
#: further in can send libhdf5 (1.14; a global heap has no checksum) into a loop that never
#: returns (found by this suite: an attribute read that hangs), which no Python code can
#: interrupt: evtsync reads such a file, when it carries no valid signature, in a separate
#: process with a time limit; the corpus's case runs in a subprocess,
#: :func:`test_a_fit_that_hangs_libhdf5_is_refused_in_time`.
fit_edits = st.lists(st.one_of(
    st.tuples(st.just("cut"), st.floats(0, 1, allow_nan=False), st.binary(min_size=1, max_size=1)),
    st.tuples(st.just("insert"), st.just(1.0), st.binary(min_size=1, max_size=64)),
    st.tuples(st.sampled_from(["flip", "zero"]), st.floats(0, 0.02, allow_nan=False), st.binary(min_size=1, max_size=4))),
    min_size=1, max_size=3)


@fuzz(20)
@given(changes=fit_edits)
def test_fit_bytes(tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str],
                   changes: list) -> None:
    """A fit file cut, extended or with its superblock damaged: read (its checksums match) or
    refused in one line, never an h5py/h5netcdf exception or its "Exception ignored" traceback
    (the corpus holds one with bytes flipped in the middle, refused by its metadata checksum)."""
    from evtsync.core.trust import sign_file

    path = tmp_path_factory.mktemp("fit") / "fit.nc"
    path.write_bytes(mutated((SEEDS / "fit.nc").read_bytes(), changes))
    sign_file(path)  # read in this process, as a fit evtsync wrote (the corpus tries unsigned ones)
    run_cli(["predict", str(path), "--n", "8"], capsys)
