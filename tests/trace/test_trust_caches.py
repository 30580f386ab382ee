"""No code is loaded from a cache folder someone else can write (issue 47, item 2; docs/security.md).

The attack: plant a pickle in ``<cache>/models`` (``pickle.load`` runs what it names) or a
compiled module as ``<cache>/scanner/_evtsync_scan_*.so`` (loading it runs its constructors),
in a folder writable by a group that is not the user's private group, or owned by another user
(the tests run as root: ``os.chown`` to another uid). Each planted payload would create a marker
file; the marker's absence is the proof that it did not run. A control plants the same payload
in a private folder, where it does run: the check, not the payload, is what stops it.
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
from pathlib import Path

import pytest

from evtsync.core.trust import unsafe_reason
from evtsync.evt import nutpie_numba
from evtsync.trace import scan

OTHER_UID = 4242  # no such user here: "someone else"
OTHER_GID = 4243  # no such group: not the user's private group


class _Payload:
    """A pickle that, when loaded, creates ``marker`` (as a real attack would run a shell)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _private(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    return folder


def _make_unsafe(folder: Path, how: str, planted: Path) -> None:
    if how != "folder writable by others" and os.geteuid() != 0:
        pytest.skip("giving a file to another user or group needs root")
    if how == "folder writable by others":
        os.chmod(folder, 0o703)
    elif how == "group-writable folder":
        os.chown(folder, -1, OTHER_GID)
        os.chmod(folder, 0o770)
    elif how == "folder of another user":
        os.chown(folder, OTHER_UID, -1)
    elif how == "file of another user":
        os.chown(planted, OTHER_UID, -1)
    elif how == "group-writable file":
        os.chown(planted, -1, OTHER_GID)
        os.chmod(planted, 0o664)
    else:
        raise AssertionError(how)


WAYS = ["folder writable by others", "group-writable folder", "folder of another user", "file of another user",
        "group-writable file"]


@pytest.mark.parametrize("how", WAYS)
def test_a_planted_model_pickle_does_not_run(tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("cloudpickle")
    models = _private(tmp_path / "cache" / "models")
    marker = tmp_path / "pwned"
    planted = models / "entry.pkl"
    planted.write_bytes(pickle.dumps(_Payload(marker)))
    _make_unsafe(models, how, planted)
    assert unsafe_reason(planted) is not None
    with caplog.at_level("WARNING", logger="evtsync"):
        assert nutpie_numba._load_functions(planted) is None
    assert not marker.exists()
    assert any("not loaded from" in r.getMessage() and "chmod go-w" in r.getMessage() for r in caplog.records)


def test_control_a_pickle_in_a_private_folder_is_loaded(tmp_path: Path) -> None:
    """The same payload in a folder of the user's own runs (so the test above can fail)."""
    pytest.importorskip("cloudpickle")
    models = _private(tmp_path / "cache" / "models")
    marker = tmp_path / "pwned"
    planted = models / "entry.pkl"
    planted.write_bytes(pickle.dumps(_Payload(marker)))
    nutpie_numba._load_functions(planted)
    assert marker.exists()


def test_no_pickle_is_written_into_a_folder_others_can_write(tmp_path: Path) -> None:
    pytest.importorskip("cloudpickle")
    models = _private(tmp_path / "cache" / "models")
    _make_unsafe(models, "folder writable by others", models)
    nutpie_numba._store_functions(models / "entry.pkl", (1, 2))
    assert list(models.iterdir()) == []


def _compile_planted_module(target: Path, marker: Path, tmp_path: Path) -> None:
    """A shared object whose constructor (run when it is loaded) creates ``marker``."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the planted module")
    source = tmp_path / "planted.c"
    source.write_text('#include <stdio.h>\n__attribute__((constructor)) static void planted(void) {\n'
                      f'    FILE *f = fopen("{marker}", "w"); if (f) fclose(f);\n}}\n')
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(target), str(source)], check=True,
                   capture_output=True, timeout=60)


@pytest.mark.parametrize("how", WAYS)
def test_a_planted_scanner_module_does_not_run(tmp_path: Path, how: str) -> None:
    folder = _private(tmp_path / "cache" / "scanner")
    marker = tmp_path / "pwned"
    planted = scan.ahead_of_time_path(folder)
    _compile_planted_module(planted, marker, tmp_path)
    _make_unsafe(folder, how, planted)
    with pytest.raises(RuntimeError, match="compiled trace scanner: not loaded from .*chmod go-w"):
        scan.load_ahead_of_time(folder)
    assert not marker.exists()
    with pytest.raises(RuntimeError, match="not loaded from"):  # nor built there (then loaded)
        scan.build_ahead_of_time(folder)
    assert not marker.exists()


def test_control_a_module_in_a_private_folder_is_loaded(tmp_path: Path) -> None:
    folder = _private(tmp_path / "cache" / "scanner")
    marker = tmp_path / "pwned"
    _compile_planted_module(scan.ahead_of_time_path(folder), marker, tmp_path)
    with pytest.raises(ImportError):  # it runs, then is no Python module
        scan.load_ahead_of_time(folder)
    assert marker.exists()


def test_a_folder_above_that_others_can_write_is_unsafe(tmp_path: Path) -> None:
    """Whoever can write a folder above the cache can rename the cache away and put theirs."""
    above = _private(tmp_path / "shared")
    cache = _private(above / "cache")
    assert unsafe_reason(cache) is None
    os.chmod(above, 0o703)
    assert "above" in str(unsafe_reason(cache / "x.pkl"))
    os.chmod(above, 0o1777)  # sticky, as /tmp: no one renames what is not theirs
    assert unsafe_reason(cache / "x.pkl") is None


def test_a_doctored_trace_cache_entry_is_not_read(tmp_path: Path, traces_dir: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    """The per-rank table cache: kernel durations x10, the Parquet file's size and SHA-256 updated
    in ``meta.json`` as anyone who can write the cache could. The entry's signature (the user's
    key) no longer matches: the trace is read again, with a warning, and the tables are the trace's."""
    import json

    import pandas as pd

    from evtsync.trace.cache import META, read_rank_cached
    from evtsync.trace.readers import read_rank

    trace = next(p for p in sorted((traces_dir / "dlrm-8rank-v100").iterdir()) if p.name.endswith((".json", ".gz")))
    cache = tmp_path / "cache"
    truth = read_rank(trace, False)
    read_rank_cached(trace, False, str(cache))  # stores the entry
    (meta_path,) = cache.rglob(META)
    kernels = meta_path.parent / "kernels.parquet"
    table = pd.read_parquet(kernels)
    assert table["dur_ns"].sum() > 0
    table["dur_ns"] = table["dur_ns"] * 10
    table.to_parquet(kernels, index=False)
    meta = json.loads(meta_path.read_text())
    meta["files"]["kernels"] = {"size": kernels.stat().st_size,
                                "sha256": __import__("hashlib").sha256(kernels.read_bytes()).hexdigest()}
    meta_path.write_text(json.dumps(meta))
    with caplog.at_level("WARNING", logger="evtsync.trace"):
        got = read_rank_cached(trace, False, str(cache))
    assert any("not trusted" in r.getMessage() for r in caplog.records)
    assert got.kernels["dur_ns"].sum() == truth.kernels["dur_ns"].sum()
