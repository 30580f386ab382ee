"""The result cache serves no doctored number (issue 47, item 3; docs/security.md).

The attack: in a result-cache entry, multiply ``tables/tax_collectives.parquet``'s tax (``tau_*``) by 10 and
write the new file's SHA-256 into the entry's listing (``result-cache.json``), as anyone who can
write the cache could. Before the fix a run into a new folder copied it (the report showed a 10x
tax, exit 0). Now an entry is trusted only when its listing is signed (HMAC-SHA256) with the
user's key, kept outside the cache: the doctored entry is not used, a warning says so, the stage
is computed again, and the table is the one computed from the traces (compared here with the
first run's file, and with 10x of it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
from pathlib import Path

import pandas as pd
import pytest

from evtsync.core.trust import KEY_ENV, signing_key
from evtsync.pipeline import RunOptions, build_stages
from evtsync.pipeline.engine import Run, execute
from evtsync.pipeline.resultcache import RESULT_META, ResultCache

TAX = "tables/tax_collectives.parquet"


def _tax_only(run: Run) -> list:
    """The real tax stage alone (the pipeline's own; its cheap part)."""
    return [s for s in build_stages(run) if s.name == "tax"]


def _run(out: Path, cache: Path, traces: Path) -> tuple[Run, list[str]]:
    events: list[str] = []
    run = Run(RunOptions(traces=[str(traces)], out=out, result_cache=str(cache), report=False),
              on_stage=lambda e: events.append(e.action))
    execute(run, _tax_only)
    return run, events


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _doctor(cache: Path) -> Path:
    """Multiply the cached tax by 10 and put the new file's SHA-256 in the listing; the entry."""
    (entry,) = [e.path for e in ResultCache(cache).entries() if e.stage == "tax"]
    table_path = entry / "files" / TAX
    table = pd.read_parquet(table_path)
    assert table["tau_max_us"].abs().sum() > 0  # the tax of each collective (docs/methodology.md)
    for c in ("tau_max_us", "tau_med_us", "mean_delay_us"):
        table[c] = table[c] * 10
    table.to_parquet(table_path)
    meta = json.loads((entry / RESULT_META).read_text())
    meta["files"][TAX] = _sha(table_path)
    (entry / RESULT_META).write_text(json.dumps(meta, indent=1))
    return entry


def test_a_doctored_entry_is_recomputed_with_a_warning(tmp_path: Path, traces_dir: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    traces, cache = traces_dir / "dlrm-8rank-v100", tmp_path / "cache"
    first, events = _run(tmp_path / "one", cache, traces)
    assert events == ["start", "ran"]
    truth = pd.read_parquet(first.out / TAX)
    _doctor(cache)
    with caplog.at_level(logging.WARNING, logger="evtsync.pipeline.resultcache"):
        second, events = _run(tmp_path / "two", cache, traces)
    assert events == ["start", "ran"]  # computed, not copied
    assert "reused_from_cache" not in second.manifest["stages"]["tax"]
    assert any("not trusted" in r.getMessage() and "not made with your key" in r.getMessage() for r in caplog.records)
    got = pd.read_parquet(second.out / TAX)
    pd.testing.assert_frame_equal(got, truth)  # the number computed from the traces, not 10x it
    assert got["tau_max_us"].median() == truth["tau_max_us"].median() > 0
    assert _sha(second.out / TAX) == _sha(first.out / TAX)
    # the doctored entry (the user's own folder) was replaced by a signed one: the next run copies it
    third, events = _run(tmp_path / "three", cache, traces)
    assert events == ["cached"]
    pd.testing.assert_frame_equal(pd.read_parquet(third.out / TAX), truth)


def test_an_unsigned_or_foreign_key_entry_is_not_served(tmp_path: Path, traces_dir: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """An entry signed with another key (another user's cache, or the listing re-signed by
    someone without this key) is not served; nor is one without a signature."""
    traces, cache = traces_dir / "dlrm-8rank-v100", tmp_path / "cache"
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "someone-else" / "key"))
    _run(tmp_path / "one", cache, traces)  # stored under someone else's key
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "mine" / "key"))
    _, events = _run(tmp_path / "two", cache, traces)
    assert events == ["start", "ran"]
    (entry,) = [e.path for e in ResultCache(cache).entries()]
    meta = json.loads((entry / RESULT_META).read_text())
    del meta["hmac"]
    (entry / RESULT_META).write_text(json.dumps(meta))
    _, events = _run(tmp_path / "three", cache, traces)
    assert events == ["start", "ran"]


def test_the_key_is_made_private_outside_the_cache_and_one_open_to_others_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, traces_dir: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    key = tmp_path / "config" / "evtsync" / "cache-key"
    monkeypatch.delenv(KEY_ENV)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert len(signing_key()) == 32
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    traces, cache = traces_dir / "dlrm-8rank-v100", tmp_path / "cache"
    _run(tmp_path / "one", cache, traces)
    os.chmod(key, 0o644)  # readable by anyone: anyone could sign entries
    with caplog.at_level(logging.WARNING, logger="evtsync"):
        _, events = _run(tmp_path / "two", cache, traces)
    assert events == ["start", "ran"]  # never served with a key others can read
    assert any("readable or writable by others" in r.getMessage() for r in caplog.records)
    assert [e.stage for e in ResultCache(cache).entries()] == ["tax"]  # the user's entry is kept


def test_a_doctored_figure_cache_entry_is_not_used(tmp_path: Path) -> None:
    """The report's figure cache: a figure replaced, its hash updated in the entry's listing."""
    from evtsync.report.context import FIGURE_META, FigureCache

    cache = FigureCache(tmp_path / "figures")
    png = tmp_path / "drawn.png"
    png.write_bytes(b"\x89PNG the true figure")
    cache.store("k", png, None)
    entry = tmp_path / "figures" / "k"
    (entry / "figure.png").write_bytes(b"\x89PNG a false figure")
    meta = json.loads((entry / FIGURE_META).read_text())
    meta["files"]["figure.png"] = _sha(entry / "figure.png")
    (entry / FIGURE_META).write_text(json.dumps(meta))
    dest = tmp_path / "out.png"
    assert cache.fetch("k", dest, None) is False and not dest.exists()
    cache.store("k", png, None)  # the figure drawn again is kept, signed: used
    assert cache.fetch("k", dest, None) is True and dest.read_bytes() == png.read_bytes()
