"""Write tests/data/damaged: the corpus of damaged inputs of the fuzz suite (issue 47).

Run from anywhere: ``python tools/make_damaged_corpus.py`` (it replaces the folder). Every file
is derived from data already in the repository: the first events of DLRM rank 0
(tests/data/public/traces, MIT), a 4-rank synthetic job of ``evtsync.synth`` (its Inspector
logs and, through tests/nsys_writer.py, its rank 0 as an Nsight Systems export), a public
nccl-tests log (tests/data/public/nccl-tests; its first line names its source) and a small
synthetic fit. tests/data/damaged/README.md lists what each case is.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "tests" / "data" / "damaged"
PUBLIC = ROOT / "tests" / "data" / "public"


def kineto() -> None:
    dlrm = sorted((PUBLIC / "traces" / "dlrm-8rank-v100").glob("*.json.gz"))[0]
    doc = json.loads(gzip.decompress(dlrm.read_bytes()))
    small = {k: v for k, v in doc.items() if k != "traceEvents"}
    small["traceEvents"] = doc["traceEvents"][:40]
    text = json.dumps(small).encode()
    out = OUT / "kineto"
    (out / "rank0-deep.json").write_bytes(b"[" * 5000)
    (out / "rank0-deep-args.json").write_bytes(b'{"traceEvents": [{"ph": "X", "args": {"a": ' + b"[" * 3000
                                               + b"]" * 3000 + b"}}]}")
    (out / "rank0-cut-mid-event.json").write_bytes(text[: len(text) * 2 // 3])
    (out / "rank0-not-json.json").write_bytes(b"hello, this is not a trace\n")
    (out / "rank0-empty.json").write_bytes(b"")
    (out / "rank0-no-trace-events.json").write_bytes(b'{"schemaVersion": 1, "events": []}')
    (out / "rank0-array-top.json").write_bytes(b"[1, 2, 3]")
    packed = gzip.compress(text, mtime=0)
    (out / "rank0-cut.json.gz").write_bytes(packed[: len(packed) // 2])
    (out / "rank0-zeroed.json.gz").write_bytes(bytes(64) + packed[64:])
    for name, key, value in (("rank0-text-ts.json", "ts", "soon"), ("rank0-huge-dur.json", "dur", 10**30)):
        bad = json.loads(text)
        bad["traceEvents"][5][key] = value
        (out / name).write_bytes(json.dumps(bad).encode())


def inspector(logs: Path) -> None:
    def case(name: str, edit: Callable[[list[str]], None]) -> None:
        folder = OUT / "inspector" / name
        shutil.copytree(logs, folder)
        target = sorted(folder.iterdir())[1]
        lines = target.read_text().splitlines(keepends=True)
        edit(lines)
        target.write_text("".join(lines))

    def sub(n: int, old: str, new: str) -> Callable[[list[str]], None]:
        def edit(lines: list[str]) -> None:
            assert old in lines[n - 1], old
            lines[n - 1] = lines[n - 1].replace(old, new, 1)
        return edit

    line3 = sorted(logs.iterdir())[1].read_text().splitlines()[2]
    exec_old = line3[line3.index('"coll_exec_time_us":'):].split(",")[0]
    case("exec-time-1e18", sub(3, exec_old, '"coll_exec_time_us":1e18'))
    case("sn-beyond-int64", sub(2, '"coll_sn":1,', f'"coll_sn":{2**64 - 1},'))
    case("deep-line", sub(2, '"coll_perf":', '"x":' + "[" * 3000 + "]" * 3000 + ',"coll_perf":'))
    case("garbage-line", lambda lines: lines.insert(2, "garbage }{ not json\n"))
    case("cut-last-line", lambda lines: lines.__setitem__(-1, lines[-1][:60]))
    case("rank-above-n-ranks", sub(1, '"rank":1,', '"rank":7,'))


def nsys(good: Path) -> None:
    out = OUT / "nsys"
    for name, sql in (("text-in-kernel-start", "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'abc' WHERE rowid = 3;"),
                      ("real-in-correlation", "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = 2.5 WHERE rowid = 2;"),
                      ("blob-string", "UPDATE StringIds SET value = x'00ff' WHERE id = 1;"),
                      ("no-kernel-table", "DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL;")):
        (out / name).mkdir()
        shutil.copyfile(good, out / name / "rank0.sqlite")
        conn = sqlite3.connect(out / name / "rank0.sqlite")
        conn.executescript(sql)
        conn.execute("VACUUM")
        conn.close()
    data = good.read_bytes()
    for name, content in (("zeroed-header", bytes(100) + data[100:]), ("text-named-sqlite", b"not a database\n"),
                          ("truncated", data[: len(data) // 2])):
        (out / name).mkdir()
        (out / name / "rank0.sqlite").write_bytes(content)
    (OUT / "nccltests" / "sqlite-named-txt.txt").write_bytes(data[:8192])


def nccl_tests() -> None:
    base = (PUBLIC / "nccl-tests" / "all_reduce_H100_2x8_gcp-a3mega-ztan.txt").read_text().splitlines()

    def case(name: str, edit: Callable[[list[str]], None]) -> None:
        lines = list(base)
        edit(lines)
        (OUT / "nccltests" / name).write_text("\n".join(lines) + "\n")

    def garble(lines: list[str]) -> None:
        for i in range(39, 50):  # lines 40-50
            lines[i] = lines[i].replace("float", "fl@at")

    def wrong(lines: list[str]) -> None:
        fields = lines[35].split()
        fields[8] = "-1e309"
        lines[35] = "  ".join(fields)

    def cut(lines: list[str]) -> None:
        del lines[41:]
        lines[40] = lines[40][:50]

    case("garbled-rows.txt", garble)
    case("garbage-mid-table.txt", lambda lines: lines.insert(34, "xx garbage zz"))
    case("wrong-beyond-float.txt", wrong)
    case("cut-mid-row.txt", cut)
    (OUT / "nccltests" / "empty.txt").write_bytes(b"")


def run_folders() -> None:
    for name, text in (("not-json", b'{"format": "evtsync-run/1", "stages": {'), ("a-list", b"[1, 2]"),
                       ("other-format", b'{"format": "something-else/2"}'),
                       ("stages-not-a-mapping", b'{"format": "evtsync-run/1", "stages": [1, 2]}'),
                       ("stage-entry-not-a-mapping", b'{"format": "evtsync-run/1", "stages": {"tax": 5}}'),
                       ("outputs-not-a-mapping",
                        b'{"format": "evtsync-run/1", "stages": {"tax": {"status": "done", "outputs": [1]}}}'),
                       ("binary", bytes(range(256)))):
        (OUT / "runfolder" / name).mkdir()
        (OUT / "runfolder" / name / "manifest.json").write_bytes(text)


def fits(fit: Path) -> None:
    data = fit.read_bytes()
    out = OUT / "fit"
    (out / "zeroed-header.nc").write_bytes(bytes(512) + data[512:])
    (out / "truncated.nc").write_bytes(data[: len(data) // 2])
    (out / "text.nc").write_bytes(b"fit: none\n")
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 0xFF
    flipped[len(flipped) // 3] ^= 0x55
    (out / "flipped-bytes.nc").write_bytes(bytes(flipped))
    # 64 bytes zeroed inside the global heap collection (the variable-length strings of the
    # attributes; no checksum covers it), 1,065 bytes after its "GCOL" signature: libhdf5 1.14
    # then loops forever reading the attributes (found by the fuzz suite, issue 47)
    heap = bytearray(data)
    at = data.index(b"GCOL") + 1065
    heap[at: at + 64] = bytes(64)
    (out / "heap-zeroed-hangs.nc").write_bytes(bytes(heap))


def main() -> None:
    from evtsync.evt.bayesfit import save_fit
    from evtsync.evt.fit import tree_from_draws
    from evtsync.synth import SynthConfig, synthesize
    from evtsync.synth.inspector import write_inspector_logs
    from evtsync.trace.readers import read_rank
    from tests.nsys_writer import write_export

    shutil.rmtree(OUT, ignore_errors=True)
    for sub in ("kineto", "inspector", "nsys", "nccltests", "runfolder", "fit", "seeds"):
        (OUT / sub).mkdir(parents=True)
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        job = synthesize(SynthConfig.build(ranks=4, tp=4, iterations=1, layers=1, seed=0), tmp / "set")
        write_inspector_logs(job.traces_dir, tmp / "logs")
        write_export(read_rank(sorted(job.traces_dir.iterdir())[0]), tmp / "rank0.sqlite")
        rng = np.random.default_rng(0)
        z = rng.gumbel(size=50)
        tree = tree_from_draws({"mu": rng.normal(0, 0.1, (2, 20)), "sigma": np.exp(rng.normal(0, 0.1, (2, 20)))},
                               pd.DataFrame({"cell": ["all"]}), z, np.zeros(50, dtype=int), family="gumbel")
        save_fit(tree, tmp / "fit")
        kineto()
        inspector(tmp / "logs")
        nsys(tmp / "rank0.sqlite")
        nccl_tests()
        run_folders()
        fits(tmp / "fit" / "fit.nc")
        # the intact seeds the fuzz tests mutate
        shutil.copytree(tmp / "logs", OUT / "seeds" / "inspector")
        shutil.copyfile(tmp / "rank0.sqlite", OUT / "seeds" / "rank0.sqlite")
        shutil.copyfile(tmp / "fit" / "fit.nc", OUT / "seeds" / "fit.nc")
    print(f"{OUT}: {sum(p.stat().st_size for p in OUT.rglob('*') if p.is_file())} bytes")


if __name__ == "__main__":
    main()
