"""The compiled columnar scanner (evtsync.trace.scan) decodes exactly what msgspec does.

Every trace of the shared data and of tests/data is decoded with the scanner and with the
msgspec path (``EVTSYNC_DECODER=msgspec``), at the default block size and at 5,000-byte
blocks, and the two :class:`DecodedTrace` must be identical: columns (values bit for bit,
dtypes, categories in order), counts, skips and truncation fields. Hand-written traces
exercise escapes, UTF-8, skipped nested values, number edge cases and every case the scanner
must decline (the block then goes through msgspec, so the results still agree); where the
values matter they are checked against ``json.loads`` of the same text.
"""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from evtsync.core.errors import TraceError
from evtsync.trace import decode
from tests.conftest import FULL_TRACES, full_data_file
from tests.conftest import TRACES as DATA  # the public traces copied into tests/data/public

ROOT = Path(__file__).resolve().parents[2]
TRACES = sorted(p for folder in (FULL_TRACES, ROOT / "tests" / "data") if folder.is_dir()
                for p in folder.rglob("*") if p.name.endswith((".json", ".json.gz")))


def _decode(path: Path, monkeypatch: pytest.MonkeyPatch, decoder: str, **kw):
    monkeypatch.setenv(decode.DECODER_ENV, decoder)
    before = dict(decode._SCAN_STATS)
    try:
        result: object = decode.decode_file(path, **kw)
    except TraceError as exc:
        result = ("error", str(exc))
    stats = {k: v - before.get(k, 0) for k, v in decode._SCAN_STATS.items() if v != before.get(k, 0)}
    return result, stats


def _same_column(a: object, b: object, where: str) -> None:
    if isinstance(a, pd.Categorical):
        assert isinstance(b, pd.Categorical), where
        assert list(a.categories) == list(b.categories), where
        assert a.categories.dtype == b.categories.dtype, where
        assert a.codes.dtype == b.codes.dtype and np.array_equal(a.codes, b.codes), where
        return
    assert isinstance(a, np.ndarray) and isinstance(b, np.ndarray), where
    assert a.dtype == b.dtype, f"{where}: {a.dtype} vs {b.dtype}"
    assert a.shape == b.shape, where
    assert a.tobytes() == b.tobytes(), where  # bit for bit (floats: -0.0 and rounding included)


def assert_same_trace(fast: object, slow: object) -> None:
    """Two decodings are identical (or raise the same error)."""
    if isinstance(slow, tuple):
        assert fast == slow
        return
    assert isinstance(fast, decode.DecodedTrace) and isinstance(slow, decode.DecodedTrace)
    for name in ("path", "header", "category_counts", "untabulated", "n_events", "skipped",
                 "truncated_at", "dropped_bytes", "bytes_read"):
        assert getattr(fast, name) == getattr(slow, name), name
    assert fast.columns.keys() == slow.columns.keys()
    for table, cols in slow.columns.items():
        assert list(fast.columns[table]) == list(cols), table
        for name, column in cols.items():
            _same_column(fast.columns[table][name], column, f"{table}.{name}")


def _both(path: Path, monkeypatch: pytest.MonkeyPatch, **kw):
    fast, stats = _decode(path, monkeypatch, "scanner", **kw)
    slow, slow_stats = _decode(path, monkeypatch, "msgspec", **kw)
    assert not slow_stats  # the switch turns the scanner off
    assert_same_trace(fast, slow)
    return fast, stats


@pytest.mark.parametrize("block_size", [decode.BLOCK_SIZE, 5000])
@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_every_trace_decodes_identically(path: Path, block_size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    _both(path, monkeypatch, block_size=block_size)


def test_the_real_traces_are_mostly_scanned(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast path is used on real data (not declined wholesale)."""
    _, stats = _both(full_data_file("traces/single-rank/hta_v100_allreduce_rank1of2.json.gz"), monkeypatch)
    assert stats.get("scanned", 0) >= 50 and sum(stats.values()) - stats["scanned"] <= 1, stats


def _all_scanned(stats: dict[str, int]) -> bool:
    """Every block went through the scanner (a small file is two blocks: up to the last event
    separator, then the last event)."""
    return stats.get("scanned", 0) >= 1 and set(stats) == {"scanned"}


def _write(tmp_path: Path, events_text: str, name: str = "t.json") -> Path:
    path = tmp_path / name
    path.write_text('{"schemaVersion": 1, "traceEvents": [' + events_text + "]}", encoding="utf-8")
    return path


def _kernel(**fields: object) -> dict:
    ev = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 2,
          "args": {"device": 0, "stream": 7, "correlation": 1}}
    ev.update(fields)
    return ev


def _text(events: list[object]) -> str:
    return ", ".join(json.dumps(e, ensure_ascii=False) for e in events)


def test_escaped_and_unicode_names_match_json_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    raw_names = [r'"a\"quoted\""', r'"back\\slash"', r'"caf\u00e9"', r'"emoji \ud83d\ude00"',
                 '"café ☃ 𝄞 direct"', r'"tab\tnew\nline\/slash"', '"plain"', r'"caf\u00e9"', '"café"']
    events = ", ".join(
        f'{{"ph": "X", "cat": "cpu_op", "name": {n}, "pid": 1, "tid": 1, "ts": {i}, "dur": 1}}'
        for i, n in enumerate(raw_names))
    path = _write(tmp_path, events)
    fast, stats = _both(path, monkeypatch)
    assert _all_scanned(stats)
    expected = [json.loads(n) for n in raw_names]
    assert list(np.asarray(fast.columns["cpu"]["name"])) == expected


def test_skipped_nested_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = [
        _kernel(extra={"a": [1, {"b": "]}{[\"", "c": [[], {}]}], "d": None, "e": True}, more=[-1.5e-3, "x}"]),
        {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 2, "ts": 5, "dur": 1,
         "args": {"Input Dims": [[2, 3], []], "Input type": ["float", ""], "External id": 9,
                  "Call stack": "a;b\\c", "Sequence number": 4, "nested": {"External id": 77}}},
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        {"ph": "s", "cat": "ac2g", "id": 1, "pid": 1, "tid": 2, "ts": 5, "bp": "e"},
    ]
    fast, stats = _both(_write(tmp_path, _text(events)), monkeypatch)
    assert _all_scanned(stats)
    assert fast.columns["cpu"]["external_id"].tolist() == [9]  # not the nested one
    assert fast.columns["cpu"]["seq"].tolist() == [4]
    assert fast.n_events == 4


def _float_cases() -> list[str]:
    return ["0.5", "-0.0", "0.0", "1e22", "1e23", "9007199254740992.0", "9007199254740993.0",
            "1717203601201123.456", "5600128963848.155", "1.7976931348623157e308", "5e-324",
            "123456789012345678901234567890.5", "1E-22", "1e-23", "-12.5e+3", "0.1", "2.2250738585072014e-308",
            "0.30000000000000004", "4.35", "100.0", "1e0", "-1E2", "1e-400", "-1e-400",
            "2.4703282292062328e-324", "123456789012345678901234567890e-50", "-0", "0e5"]


def test_floats_are_bit_identical_to_json_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    texts = _float_cases()
    rng = np.random.default_rng(7)
    for _ in range(300):  # random decimals on both sides of the 2**53 and 10**±22 limits
        digits = "".join(rng.choice(list("0123456789"), size=int(rng.integers(1, 21))))
        digits = digits.lstrip("0") or "0"
        point = int(rng.integers(0, len(digits) + 1))
        text = digits[:point] + "." + digits[point:] if 0 < point < len(digits) else digits + ".0"
        texts.append(text + (f"e{int(rng.integers(-30, 30))}" if rng.random() < 0.3 else ""))
    events = ", ".join(f'{{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": {t}, '
                       f'"dur": {t}, "args": {{"stream": 7}}}}' for t in texts)
    fast, stats = _both(_write(tmp_path, events), monkeypatch)
    assert _all_scanned(stats)
    ts = fast.columns["gpu"]["ts"]
    assert ts.dtype == np.float64
    expected = np.array([json.loads(t) for t in texts], dtype=np.float64)
    assert ts.tobytes() == expected.tobytes()
    assert math.copysign(1.0, ts[1]) == -1.0  # -0.0 kept


def test_integers_and_int64_edges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    values = [0, -1, 1, 2**53 + 1, 2**63 - 1, -(2**63), -5, 10**18, 999999999999999999]
    events = _text([_kernel(ts=v, dur=1, pid=v, args={"correlation": v, "stream": 7}) for v in values])
    fast, stats = _both(_write(tmp_path, events), monkeypatch)
    assert _all_scanned(stats)
    gpu = fast.columns["gpu"]
    assert gpu["ts"].dtype == np.int64 and gpu["ts"].tolist() == values
    assert gpu["pid"].tolist() == values and gpu["correlation"].tolist() == values


def test_mixed_int_and_float_times_follow_the_block_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = _text([_kernel(ts=2**53 + 1, dur=3), _kernel(ts=1.5, dur=2), _kernel(ts=7, dur=1)])
    fast, _ = _both(_write(tmp_path, events), monkeypatch)
    assert fast.columns["gpu"]["ts"].tolist() == [float(2**53 + 1), 1.5, 7.0]
    assert fast.columns["gpu"]["dur"].dtype == np.int64


def test_string_arguments_of_other_types(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = _text([
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
         "args": {"Process Group Name": 0, "Process Group Description": None, "Collective name": "allreduce",
                  "dtype": "Float", "Process Group Ranks": "[0, 1]", "In msg nelems": 8, "Group size": 2}},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": 2, "dur": 1,
         "args": {"Process Group Name": "0", "External id": None}},
    ])
    fast, stats = _both(_write(tmp_path, events), monkeypatch)
    assert _all_scanned(stats)
    assert list(np.asarray(fast.columns["cpu"]["pg_name"])) == ["0", "0"]
    assert fast.columns["cpu"]["external_id"].tolist() == [-1, -1]


DECLINED = {
    "string pid on a tabulated event": (_kernel(pid="stream 7"), "pid or tid that is not an integer"),
    "float in an int argument": (_kernel(args={"stream": 7.0}), "outside the fast grammar"),
    "string in an int argument": (_kernel(args={"stream": "7"}), "outside the fast grammar"),
    "bool in an int argument": (_kernel(args={"stream": True}), "outside the fast grammar"),
    "null name": (_kernel(name=None), "outside the fast grammar"),
    "args null": (_kernel(args=None), "outside the fast grammar"),
    "args array": (_kernel(args=[1]), "outside the fast grammar"),
    "unknown phase": ({"ph": "Q", "cat": "kernel", "name": "k"}, "known phase"),
    "no phase": ({"cat": "kernel", "name": "k", "ts": 1, "dur": 1}, "known phase"),
    "missing dur": ({k: v for k, v in _kernel().items() if k != "dur"}, "without numeric ts/dur"),
    "null ts": (_kernel(ts=None), "without numeric ts/dur"),
    "string ts": (_kernel(ts="5"), "outside the fast grammar"),
    "integer beyond int64": (_kernel(ts=2**63), "outside the fast grammar"),
    "float pid": (_kernel(pid=1.0), "outside the fast grammar"),
    "float in a string argument": (_kernel(args={"stream": 7, "dtype": 1.5}), "outside the fast grammar"),
    "non-string category": ({"ph": "i", "cat": 5, "name": "x", "ts": 1}, "category that is not a string"),
    "huge float": (_kernel(ts=1e400), "float out of range"),
}


@pytest.mark.parametrize("case", sorted(DECLINED))
def test_declined_blocks_still_match(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    event, reason = DECLINED[case]
    text = _text([_kernel(), event, _kernel(ts=20)]) if case != "huge float" else (
        _text([_kernel()]) + ', {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1e400, "dur": 1}')
    _, stats = _both(_write(tmp_path, text), monkeypatch)
    declined = {k: v for k, v in stats.items() if k != "scanned"}
    # (a block msgspec rejects is tried again after the exact structural scan: declined twice)
    assert declined and all(reason in k for k in declined), stats


RAW_DECLINED = {
    "duplicate key": ('{"ph": "X", "ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}', "duplicate"),
    "duplicate arg": ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1, '
                      '"args": {"stream": 1, "stream": 2}}', "duplicate"),
    "escaped key": ('{"ph": "X", "c\\u0061t": "kernel", "name": "k", "ts": 1, "dur": 1}', "escaped key"),
    "escaped phase": ('{"ph": "\\u0058", "cat": "kernel", "name": "k", "ts": 1, "dur": 1}', "known phase"),
    "lone surrogate": ('{"ph": "X", "cat": "kernel", "name": "a\\ud800b", "ts": 1, "dur": 1}', "surrogate"),
    "control character": ('{"ph": "X", "cat": "kernel", "name": "a\tb", "ts": 1, "dur": 1}', "control"),
    "non-object entry": ('[1, 2]', "not an object"),
    "leading zero": ('{"ph": "X", "cat": "kernel", "name": "k", "ts": 01, "dur": 1}', "invalid JSON"),
    "NaN": ('{"ph": "X", "cat": "kernel", "name": "k", "ts": NaN, "dur": 1}', "invalid JSON"),
}


@pytest.mark.parametrize("case", sorted(RAW_DECLINED))
def test_raw_declined_blocks_still_match(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text, reason = RAW_DECLINED[case]
    path = _write(tmp_path, _text([_kernel()]) + ", " + text + ", " + _text([_kernel(ts=30)]))
    fast, stats = _both(path, monkeypatch)
    declined = {k: v for k, v in stats.items() if k != "scanned"}
    assert declined and all(reason in k for k in declined), stats


def test_invalid_utf8_is_declined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "bad.json"
    body = b'{"ph": "X", "cat": "kernel", "name": "a\xff\xfeb", "pid": 0, "tid": 7, "ts": 1, "dur": 1}'
    path.write_bytes(b'{"traceEvents": [' + body + b"]}")
    _, stats = _both(path, monkeypatch)
    assert "scanned" not in stats and stats


def test_gzip_and_small_blocks_cut_inside_strings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = [_kernel(name=f"kernel }}, {{ \"{i}\" é", ts=i, dur=1.25 * i,
                      args={"stream": 7, "Collective name": "all,reduce}, {", "x": [i, {"y": "}, {"}]})
              for i in range(400)]
    path = tmp_path / "t.json.gz"
    path.write_bytes(gzip.compress(('{"traceEvents": [' + _text(events) + "]}").encode()))
    for block_size in (300, 1000, 5000):
        fast, _ = _both(path, monkeypatch, block_size=block_size)
        assert fast.n_events == 400


def test_truncated_file_same_with_and_without_salvage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = '{"traceEvents": [' + _text([_kernel(ts=i) for i in range(200)]) + "]}"
    path = tmp_path / "cut.json"
    path.write_text(text[: len(text) * 2 // 3])
    for salvage in (False, True):
        _both(path, monkeypatch, salvage=salvage, block_size=2000)


def test_blocks_beyond_the_first_capacities(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many unique strings, and many tiny events, in one block: the scanner's arrays grow
    (it scans again) and the results still agree."""
    unique = _text([_kernel(name=f"kernel number {i}", ts=i, args={"stream": 7, "dtype": f"t{i}"})
                    for i in range(6000)])
    tiny = ", ".join('{"ph":"i","ts":1}' for _ in range(60000))
    path = _write(tmp_path, unique + ", " + tiny)
    fast, stats = _both(path, monkeypatch)
    assert _all_scanned(stats)
    assert fast.n_events == 66000
    assert len(set(np.asarray(fast.columns["gpu"]["name"]))) == 6000


@pytest.fixture
def compiled_scan_block(monkeypatch: pytest.MonkeyPatch):
    """The compiled ``scan_block`` this installation loads (ahead of time, built into the
    cache the first time, or just in time): what the fakes below hand to the ``auto`` rule."""
    monkeypatch.setenv(decode.DECODER_ENV, "scanner")
    scanner = decode._fast_scanner(load=True)
    assert scanner is not None
    monkeypatch.delenv(decode.DECODER_ENV)
    return scanner.scan_block


class _FakeBuilds:
    """The ahead-of-time module of an empty cache: absent until built (``fails``: the build
    fails); counts the builds and the just-in-time loads asked for."""

    def __init__(self, scan_block, monkeypatch: pytest.MonkeyPatch, *, fails: bool = False) -> None:
        from evtsync.trace import scan

        self.built, self.builds, self.jit_loads, self.scan_block = False, 0, 0, scan_block
        self.fails = fails
        monkeypatch.setattr(scan, "load_ahead_of_time", lambda directory=None: self.scan_block if self.built else None)
        monkeypatch.setattr(scan, "build_ahead_of_time", self.build)
        monkeypatch.setattr(scan, "build_failure", lambda directory=None: None)
        monkeypatch.setattr(scan, "jit_scan_block", self.jit)
        monkeypatch.setattr(decode, "_scanner_state", {})

    def build(self, directory=None) -> None:
        self.builds += 1
        if self.fails:
            raise RuntimeError("no C compiler (test)")
        self.built = True

    def jit(self):
        self.jit_loads += 1
        return self.scan_block


def test_without_a_working_scanner_msgspec_decodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A scanner that cannot load (here: its ahead-of-time build failed before, and numba's
    JIT is disabled) leaves every block to msgspec, with a warning, instead of failing or
    running the scanner as slow Python; the failed build is not tried again."""
    import numba

    from evtsync.trace import scan

    monkeypatch.setenv("EVTSYNC_CACHE_DIR", str(tmp_path))
    marker = scan.ahead_of_time_path().with_suffix(".failed")
    marker.parent.mkdir(parents=True)
    marker.write_text("exit 1: error: command 'gcc' failed\n")
    monkeypatch.setattr(scan, "build_ahead_of_time", lambda directory=None: pytest.fail("built again"))
    monkeypatch.setattr(decode, "_scanner_state", {})
    monkeypatch.setattr(numba.config, "DISABLE_JIT", True)
    assert decode.prepare_fast_decoder() is False
    assert decode._scanner_state == {"ahead-of-time failed": True, "jit failed": True}
    before = dict(decode._SCAN_STATS)
    trace = decode.decode_file(DATA / "edge-cases" / "triton.json.gz")
    assert trace.n_events > 0 and dict(decode._SCAN_STATS) == before


def test_auto_uses_a_built_scanner_from_a_small_size(compiled_scan_block, monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` (the default) with the ahead-of-time module built: used from SCANNER_MIN_BYTES
    (1 MiB; its load is ~1 ms), then for every file of the process; a tiny trace alone is
    msgspec's; ``msgspec`` wins over all."""
    path = DATA / "edge-cases" / "triton.json.gz"
    assert decode.json_bytes_estimate(path) < decode.SCANNER_MIN_BYTES
    fake = _FakeBuilds(compiled_scan_block, monkeypatch)
    fake.built = True
    before = dict(decode._SCAN_STATS)
    decode.decode_file(path)
    assert dict(decode._SCAN_STATS) == before and "scanner" not in decode._scanner_state
    assert decode.use_fast_decoder_for(decode.SCANNER_MIN_BYTES - 1) is False
    assert decode.use_fast_decoder_for(decode.SCANNER_MIN_BYTES) is True
    assert decode._scanner_state["scanner"].how == "ahead-of-time"
    assert (fake.builds, fake.jit_loads) == (0, 0)
    decode.decode_file(path)
    assert decode._SCAN_STATS["scanned"] > before.get("scanned", 0)
    monkeypatch.setenv(decode.DECODER_ENV, "msgspec")
    assert decode.use_fast_decoder_for(1 << 40) is False


def test_auto_builds_the_scanner_once_for_a_real_trace(compiled_scan_block, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not built yet: below SCANNER_BUILD_MIN_BYTES msgspec decodes (no build, no numba);
    from it the module is built once and used."""
    fake = _FakeBuilds(compiled_scan_block, monkeypatch)
    assert decode.use_fast_decoder_for(decode.SCANNER_BUILD_MIN_BYTES - 1) is False
    assert (fake.builds, fake.jit_loads) == (0, 0) and decode._scanner_state == {}
    assert decode.use_fast_decoder_for(decode.SCANNER_BUILD_MIN_BYTES) is True
    assert fake.builds == 1 and fake.jit_loads == 0
    assert decode._scanner_state["scanner"].how == "ahead-of-time"


def test_auto_falls_back_to_numba_where_the_build_fails(compiled_scan_block, monkeypatch: pytest.MonkeyPatch) -> None:
    """The build failed (no C compiler): numba's just-in-time scanner only for work that pays
    its ~1.1 s load (JIT_SCANNER_MIN_BYTES), and the build is not tried again in the process."""
    fake = _FakeBuilds(compiled_scan_block, monkeypatch, fails=True)
    assert decode.use_fast_decoder_for(decode.JIT_SCANNER_MIN_BYTES - 1) is False
    assert fake.builds == 1 and fake.jit_loads == 0
    assert decode.use_fast_decoder_for(decode.JIT_SCANNER_MIN_BYTES) is True
    assert fake.builds == 1 and fake.jit_loads == 1
    assert decode._scanner_state["scanner"].how == "just-in-time"


@pytest.mark.slow
def test_the_ahead_of_time_build_loads_without_numba_and_decodes_identically(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The real build (numba's AOT compiler in a child process, ~10-20 s of CPU) writes one
    module; a fresh process loads it without importing numba and decodes the V100 trace
    exactly as the msgspec path does."""
    import os
    import pickle
    import subprocess
    import sys

    from evtsync.trace import scan

    v100 = full_data_file("traces/single-rank/hta_v100_allreduce_rank1of2.json.gz")  # the full set only: skips without
    built = scan.build_ahead_of_time(tmp_path / "scanner")
    assert built == scan.ahead_of_time_path(tmp_path / "scanner") and built.is_file()
    left = {p.name for p in (tmp_path / "scanner").iterdir()}
    assert left == {built.name, built.with_suffix(".lock").name}  # no temporary left behind
    child = f"""
import pickle, sys
from evtsync.trace import decode
assert decode.use_fast_decoder_for(decode.SCANNER_MIN_BYTES)
assert decode._scanner_state["scanner"].how == "ahead-of-time", decode._scanner_state
trace = decode.decode_file({str(v100)!r})
assert "numba" not in sys.modules and decode._SCAN_STATS["scanned"] >= 50, decode._SCAN_STATS
sys.stdout.buffer.write(pickle.dumps(trace))
"""
    env = {**os.environ, "EVTSYNC_CACHE_DIR": str(tmp_path), "EVTSYNC_DECODER": "auto"}
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, check=False, env=env)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    slow, _ = _decode(v100, monkeypatch, "msgspec")
    assert_same_trace(pickle.loads(done.stdout), slow)


def test_the_decompressed_size_estimate_reads_the_gzip_trailer(tmp_path: Path) -> None:
    import gzip

    text = b'{"traceEvents": [' + b", ".join([b'{"ph": "i", "ts": 1}'] * 5000) + b"]}"
    plain, packed = tmp_path / "t.json", tmp_path / "t.json.gz"
    plain.write_bytes(text)
    packed.write_bytes(gzip.compress(text))
    assert decode.json_bytes_estimate(plain) == len(text)
    assert decode.json_bytes_estimate(packed) == len(text)  # not the compressed size
    assert packed.stat().st_size < len(text) // 10


def test_a_study_read_from_the_cache_does_not_load_the_scanner(compiled_scan_block, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``load_traces`` announces its JSON to the ``auto`` rule, which loads the scanner when a
    file is really decoded: a first read decodes (and loads it, the threshold lowered here), a
    second read from the warm cache decodes nothing and loads nothing."""
    from evtsync.trace.traceset import load_traces

    study = DATA / "dlrm-8rank-v100"
    monkeypatch.delenv(decode.DECODER_ENV, raising=False)
    monkeypatch.setattr(decode, "SCANNER_MIN_BYTES", 1 << 20)  # the study is ~7 MB of JSON
    _FakeBuilds(compiled_scan_block, monkeypatch).built = True
    first = load_traces(study, jobs=1, cache=tmp_path / "cache")
    assert "scanner" in decode._scanner_state
    monkeypatch.setattr(decode, "_scanner_state", {})
    again = load_traces(study, jobs=1, cache=tmp_path / "cache")
    assert decode._scanner_state == {}
    assert len(again.kernels) == len(first.kernels) > 0
    assert decode._expected["json_bytes"] == 0  # the announcement ends with the reading


def test_a_failed_build_is_recorded_and_not_run_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A build whose compiler fails (here the interpreter itself is /bin/false) raises a clear
    error, records why beside the module, and the next call reports that without building."""
    import sys

    from evtsync.trace import scan

    monkeypatch.setattr(sys, "executable", "/bin/false")
    with pytest.raises(RuntimeError, match=r"building the ahead-of-time trace scanner failed \(exit 1: no output\)"):
        scan.build_ahead_of_time(tmp_path)
    assert scan.build_failure(tmp_path) == "exit 1: no output"
    assert not scan.ahead_of_time_path(tmp_path).exists()
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")  # would fail differently if run
    with pytest.raises(RuntimeError, match=r"\(exit 1: no output\)"):
        scan.build_ahead_of_time(tmp_path)


def test_building_the_scanner_by_hand_is_a_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 32 item 4: ``python -m evtsync.trace.scan`` no longer writes to standard output (a
    library module prints nothing); ``evtsync cache --build-scanner`` builds into the cache's
    scanner/ folder and says where."""
    import json as json_

    from evtsync.cli import main
    from evtsync.trace import scan

    built: list[Path] = []

    def fake_build(directory: Path | None = None) -> Path:
        assert directory is not None
        built.append(directory)
        return directory / "scanner_module.so"

    monkeypatch.setattr(scan, "build_ahead_of_time", fake_build)
    assert main(["cache", "--dir", str(tmp_path), "--build-scanner", "--json"]) == 0
    assert built == [tmp_path / "scanner"]
    assert json_.loads(capsys.readouterr().out)["scanner_built"] == str(tmp_path / "scanner" / "scanner_module.so")
    source = Path(scan.__file__).read_text()
    assert "sys.stdout" not in source and "print(" not in source


def test_a_deferred_build_uses_a_built_scanner_but_builds_none(compiled_scan_block, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Inside ``scanner_build_deferred`` (the bundled demo's read): not built, even a read above
    SCANNER_BUILD_MIN_BYTES is msgspec's (also in the pool's cost model) and builds nothing (nor
    loads numba below JIT_SCANNER_MIN_BYTES); after the block the same read builds it once; a
    scanner built already is used inside the block as anywhere."""
    from evtsync.trace import scan

    fake = _FakeBuilds(compiled_scan_block, monkeypatch)
    monkeypatch.setattr(scan, "ahead_of_time_path", lambda directory=None: tmp_path / "not-built.so")
    with decode.scanner_build_deferred():
        assert decode.reading_work([decode.SCANNER_BUILD_MIN_BYTES]).cpu_s == pytest.approx(
            decode.READ_CPU_S["msgspec"][0] + decode.SCANNER_BUILD_MIN_BYTES * decode.READ_CPU_S["msgspec"][1])
        assert decode.use_fast_decoder_for(decode.SCANNER_BUILD_MIN_BYTES) is False
        assert (fake.builds, fake.jit_loads) == (0, 0) and "scanner" not in decode._scanner_state
    assert decode.use_fast_decoder_for(decode.SCANNER_BUILD_MIN_BYTES) is True
    assert (fake.builds, fake.jit_loads) == (1, 0)
    monkeypatch.setattr(decode, "_scanner_state", {})  # a new process: built now, not loaded yet
    with decode.scanner_build_deferred():
        assert decode.use_fast_decoder_for(decode.SCANNER_BUILD_MIN_BYTES) is True
    assert fake.builds == 1 and decode._scanner_state["scanner"].how == "ahead-of-time"
