"""A fit file given by a user never hangs evtsync (issue 47, docs/security.md): a fit that this
user's evtsync wrote carries a signature file (``fit.nc.sig``: its size and SHA-256, signed with
the user's key) and is read in this process; any other (written before signatures, by someone
else, copied alone, changed since) is read first in a separate process with a time limit.

The file that makes libhdf5 loop forever is tried only in a subprocess (tests/cli/test_fuzz_files.py),
so that a regression fails there instead of hanging the suite; here every file read ends."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import evtsync.evt.fitfile as fitfile
from evtsync.core.errors import FitError
from evtsync.core.trust import KEY_ENV, file_signature_problem, sign_file, signature_path
from evtsync.evt.fit import tree_from_draws
from evtsync.evt.fitfile import hdf5_superblock_at, load_fit, save_fit

CORPUS = Path(__file__).resolve().parents[1] / "data" / "damaged"
MU = np.arange(40, dtype=float).reshape(2, 20) / 10  # the draws, known here
SIGMA = 1 + np.arange(40, dtype=float).reshape(2, 20) / 100


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    z = np.linspace(-1, 3, 30)
    tree = tree_from_draws({"mu": MU, "sigma": SIGMA}, pd.DataFrame({"cell": ["all"]}), z,
                           np.zeros(30, dtype=int), family="gumbel")
    return save_fit(tree, tmp_path / "fit")


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files read first in a separate process (the real one runs: a spy, not a stub)."""
    calls: list[Path] = []
    real = fitfile._read_in_child

    def spy(p: Path, skip: tuple[str, ...], why: str) -> None:
        calls.append(p)
        real(p, skip, why)

    monkeypatch.setattr(fitfile, "_read_in_child", spy)
    return calls


def _draws(path: Path) -> np.ndarray:
    return load_fit(path)["posterior"]["mu"].values


def test_a_fit_written_here_is_signed_and_read_in_this_process(saved: Path, children: list[Path]) -> None:
    sig = signature_path(saved)
    assert sig.name == "fit.nc.sig" and sig.is_file()
    listing = json.loads(sig.read_text())
    assert listing["file"] == "fit.nc" and listing["bytes"] == saved.stat().st_size
    assert file_signature_problem(saved) is None
    np.testing.assert_array_equal(_draws(saved), MU)
    assert children == []  # the normal path starts no process


def test_a_fit_copied_alone_is_read_first_in_a_separate_process(saved: Path, tmp_path: Path,
                                                                 children: list[Path]) -> None:
    alone = tmp_path / "elsewhere" / "gev.nc"
    alone.parent.mkdir()
    shutil.copyfile(saved, alone)
    assert "no signature file gev.nc.sig" in (file_signature_problem(alone) or "")
    np.testing.assert_array_equal(_draws(alone), MU)
    assert children == [alone]
    assert not signature_path(alone).exists()  # nothing is written beside a file evtsync did not write


def test_a_signature_of_another_key_or_another_content_is_not_trusted(saved: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      children: list[Path]) -> None:
    sig = signature_path(saved)
    listing = json.loads(sig.read_text())
    listing["sha256"] = "0" * 64  # edited by someone without the key: its signature no longer matches
    sig.write_text(json.dumps(listing))
    assert "not made with your key" in (file_signature_problem(saved) or "")
    with monkeypatch.context() as other:
        other.setenv(KEY_ENV, str(tmp_path / "other" / "key"))
        sign_file(saved)  # signed with another user's key
    assert "not made with your key" in (file_signature_problem(saved) or "")
    np.testing.assert_array_equal(_draws(saved), MU)
    assert children == [saved]


def test_a_fit_changed_after_it_was_signed_is_not_trusted(saved: Path, children: list[Path]) -> None:
    data = bytearray(saved.read_bytes())
    data[-1] ^= 0x01  # the last byte: libhdf5 reads on (or refuses) without looping
    saved.write_bytes(bytes(data))
    assert "changed after fit.nc.sig was signed (its SHA-256 differs)" in (file_signature_problem(saved) or "")
    try:
        load_fit(saved)
    except FitError as exc:
        assert str(saved) in str(exc) and "\n" not in str(exc)
    assert children == [saved]


def test_a_damaged_file_is_refused_by_the_separate_process_in_one_line(children: list[Path]) -> None:
    """The corpus's fit cut in half (no signature): refused with the error of the read, made in
    the other process and said here; a text file and a zeroed header have no HDF5 superblock and
    are refused in this process (libhdf5 parses no metadata of them)."""
    cut = CORPUS / "fit" / "truncated.nc"
    with pytest.raises(FitError, match=rf"^{cut}: cannot read as a netCDF fit .*truncated file"):
        load_fit(cut)
    assert children == [cut]
    for name in ("text.nc", "zeroed-header.nc"):
        with pytest.raises(FitError, match="cannot read as a netCDF fit"):
            load_fit(CORPUS / "fit" / name)
    assert children == [cut]


def test_the_superblock_is_found_where_the_specification_allows(tmp_path: Path, saved: Path) -> None:
    assert hdf5_superblock_at(saved) == 0
    moved = tmp_path / "userblock.nc"
    moved.write_bytes(bytes(512) + saved.read_bytes())  # a 512-byte user block before it
    assert hdf5_superblock_at(moved) == 512
    odd = tmp_path / "odd.nc"
    odd.write_bytes(bytes(700) + saved.read_bytes())  # 700: no place libhdf5 looks
    assert hdf5_superblock_at(odd) is None
    assert hdf5_superblock_at(CORPUS / "fit" / "text.nc") is None


@pytest.mark.parametrize("value", ["0", "-3", "soon", "inf", "nan"])
def test_a_bad_time_limit_is_named(saved: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    alone = tmp_path / "alone.nc"
    shutil.copyfile(saved, alone)
    monkeypatch.setenv(fitfile.READ_TIMEOUT_ENV, value)
    with pytest.raises(FitError, match=rf"EVTSYNC_FIT_READ_TIMEOUT={value!r}: expected a positive number"):
        load_fit(alone)


def test_the_time_limit_grows_with_the_file() -> None:
    assert fitfile.read_timeout_s(0) == fitfile.READ_TIMEOUT_S
    assert fitfile.read_timeout_s(100_000_000) == fitfile.READ_TIMEOUT_S + 100 * fitfile.READ_TIMEOUT_PER_MB_S


def test_a_fit_written_with_other_outputs_all_or_nothing_is_signed(tmp_path: Path, saved: Path,
                                                                  children: list[Path]) -> None:
    """Inside all_or_nothing (``evtsync ranks -o``) the file reaches its name only at the end of
    the block: its signature is made from the temporary file's bytes and appears with it."""
    from evtsync.core.tableio import all_or_nothing

    tree = load_fit(saved)
    dest = tmp_path / "together" / "fit.nc"
    with all_or_nothing():
        save_fit(tree, dest)
        assert not dest.exists() and not signature_path(dest).exists()
    assert file_signature_problem(dest) is None
    np.testing.assert_array_equal(_draws(dest), MU)
    assert children == []
