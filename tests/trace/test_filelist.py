"""The compact file list and the natural order of file names (issue 48: memory flat in the
number of files), against pathlib and a tuple key written here."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from evtsync.trace.filelist import FileList, child_prefix, natural_name_key
from evtsync.trace.traceset import expand_inputs, list_inputs


def _tuple_key(name: str) -> tuple[tuple[int, int | str], ...]:
    """The natural key as a tuple of parts (the form natural_name_key encodes as one string)."""
    return tuple((1, int(part)) if part.isdigit() else (0, part) for part in re.split(r"(\d+)", name) if part)


NAMES = ["trace_10.json", "trace_2.json", "trace_02.json", "trace_2", "trace_", "trace", "trace_2a.json",
         "trace_2_1.json", "trace_2.json.gz", "10", "9", "009", "0", "00", "a", "a1", "a01b", "a1b", "ab1",
         "A1", "_1", "-1", "1-", "rank-0000-pid123.log", "rank-0000-pid45.log", "rank-001-pid9.log",
         "x\x01y", "x", "x1", "é2", "é10", "٣", "٢٠", "99999999999999999999", "100000000000000000000",
         "node-0000-pid100000.log", "node-0000-pid99999.log"]


def test_natural_name_key_orders_as_the_tuple_key() -> None:
    """Every pair of names compares the same way by the one-string key as by the tuple of parts
    (text before a number at the same place, numbers by value, a shorter tuple first); sorting
    random shuffles gives the same order (ties keep the input order: both sorts are stable)."""
    for a in NAMES:
        for b in NAMES:
            ka, kb = natural_name_key(a), natural_name_key(b)
            ta, tb = _tuple_key(a), _tuple_key(b)
            assert (ka < kb, ka == kb) == (ta < tb, ta == tb), (a, b)
    rng = random.Random(4)
    for _ in range(20):
        names = NAMES[:]
        rng.shuffle(names)
        assert sorted(names, key=natural_name_key) == sorted(names, key=_tuple_key)


@pytest.mark.parametrize("folder", [".", "/", "logs", "logs/run1", "/data/x", "..", "../a"])
def test_child_prefix_is_pathlibs(folder: str) -> None:
    assert child_prefix(Path(folder)) + "f.log" == str(Path(folder) / "f.log")


def test_file_list_is_a_sequence_of_path_rank_pairs(tmp_path: Path) -> None:
    """A folder's files (natural order), a file named alone and a given rank: the same pairs,
    element by element, as the list expand_inputs returns and as pathlib writes them; indexing
    from the end, slices, equality with a list, errors past the end."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("r10.json", "r2.json", "r1.json", "notes.txt"):
        (logs / name).write_text("{}")
    alone = tmp_path / "alone.json"
    alone.write_text("{}")
    args = [str(logs) + "/", f"7={alone}"]
    want = [(logs / "r1.json", None), (logs / "r2.json", None), (logs / "r10.json", None), (alone, 7)]
    files = list_inputs(args)
    assert isinstance(files, FileList) and len(files) == 4
    assert list(files) == want and files == want and expand_inputs(args) == want
    assert [str(p) for p in files.paths] == [str(p) for p, _ in want]
    assert list(files.ranks) == [None, None, None, 7]
    assert files[-1] == (alone, 7) and files[1:3] == want[1:3]
    assert [files.is_named(i) for i in range(4)] == [False, False, False, True]
    with pytest.raises(IndexError):
        files[4]
    ordered = list_inputs([logs], rank_from="order")
    assert list(ordered.ranks) == [0, 1, 2]
    assert FileList.of(want) == want and FileList.of(files) is files


def test_file_list_of_a_relative_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``.`` and ``./`` list names without a prefix, as pathlib writes them."""
    for name in ("b.json", "a.json"):
        (tmp_path / name).write_text("{}")
    monkeypatch.chdir(tmp_path)
    for arg in (".", "./"):
        assert [str(p) for p, _ in list_inputs([arg])] == ["a.json", "b.json"]


def test_file_list_of_a_symlinked_name_and_a_non_utf8_name(tmp_path: Path) -> None:
    """A folder's entry that is a symlink to a file elsewhere is listed by its own name (the link's
    path, not its target's); a name that is not UTF-8 (bytes, as os.fsdecode gives it: surrogate
    escapes) is listed in natural order and its path opens the file. Skipped where the filesystem
    refuses such a name."""
    import os

    logs, elsewhere = tmp_path / "logs", tmp_path / "elsewhere"
    logs.mkdir()
    elsewhere.mkdir()
    for name in ("r1.json", "r10.json"):
        (logs / name).write_text("{}")
    (elsewhere / "target.json").write_text('{"linked": 1}')
    (logs / "r3.json").symlink_to(elsewhere / "target.json")
    raw = b"r2\xff.json"  # not UTF-8
    try:
        with open(os.path.join(os.fsencode(logs), raw), "w") as out:
            out.write('{"odd": 2}')
    except OSError:
        pytest.skip("this filesystem refuses a non-UTF-8 file name")
    odd = os.fsdecode(raw)
    files = list_inputs([logs])
    assert [p.name for p, _ in files] == ["r1.json", odd, "r3.json", "r10.json"]
    assert files.path_str(2) == str(logs / "r3.json") and files.path(2).is_symlink()
    assert files.path(2).read_text() == '{"linked": 1}'
    assert files.path_str(1) == str(logs / odd) and files.path(1).read_text() == '{"odd": 2}'
    assert os.fsencode(files.path_str(1)) == os.path.join(os.fsencode(logs), raw)
