"""Trace files with their given ranks, held compactly, and the natural order of file names.

Issue 48 (memory flat in the number of files): a list of ``(Path, rank)`` holds ~570 bytes of
``pathlib`` objects per file (the path, its string, its cached parts), ~2.3 MB at 4,096 NCCL
Inspector logs, and sorting a folder by tuple keys peaked at ~4 MB. :class:`FileList` keeps
each folder's prefix once, the names in one string and the ranks in an array (~16 bytes a file
beyond the name: its end offset and rank, 8 bytes each, as ``nbytes`` counts) and makes each
``(Path, rank)`` when it is read; :func:`natural_name_key` is a file name's natural sort key as
one string.
"""

from __future__ import annotations

import bisect
import itertools
import os
import re
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

_DIGITS_RE = re.compile(r"(\d+)")
_NO_RANK = -1  # a file whose rank is read from its content (given ranks are digits: >= 0)


def natural_name_key(name: str) -> str:
    """Sort key of a file name with its numbers compared as numbers: ``trace_2`` before
    ``trace_10`` (a plain string sort puts ``trace_10`` first, which numbered ranks wrongly
    from the 11th file on).

    The order is that of the tuple of the name's parts, ``(1, int(digits))`` for a run of
    digits and ``(0, text)`` for the text between (text before a number at the same place,
    a shorter tuple first), encoded as one string (one object a name, not a tuple of tuples:
    issue 48): a text part as ``"\\0" + text + "\\0"`` (no file name holds a NUL), a number as
    ``"\\1"``, the count of its digits as one character, then its digits without leading zeros.
    """
    out = []
    for part in _DIGITS_RE.split(name):
        if not part:
            continue
        if part.isdigit():
            digits = str(int(part))
            out.append(f"\1{chr(len(digits))}{digits}")
        else:
            out.append(f"\0{part}\0")
    return "".join(out)


def child_prefix(folder: Path) -> str:
    """What ``str(folder / name)`` puts before ``name`` (``pathlib``'s rule: nothing for ``.``,
    no second separator after the root)."""
    text = str(folder)
    if text == ".":
        return ""
    return text if text.endswith(os.sep) else text + os.sep


class FileList(Sequence[tuple[Path, int | None]]):
    """Files, each with the rank the user gave it (None: read from the file), as a sequence of
    ``(Path, rank)`` made when read; held as one prefix string per run of files of one folder,
    the names joined in one string with their end offsets, and the ranks in an int64 array.
    """

    def __init__(self, names: Iterable[str] = (), ranks: Iterable[int | None] = (),
                 runs: Sequence[tuple[int, str | None]] = ((0, None),)) -> None:
        """``names``, ``ranks`` (one per name), ``runs``: ``(first index, prefix)`` of each run
        of names listed in one folder (the prefix :func:`child_prefix` gives), or of files named
        one by one (prefix None: each name is a whole path)."""
        names = names if isinstance(names, list) else list(names)
        self._text = "".join(names)
        self._ends = array("q", itertools.accumulate(map(len, names)))
        self._ranks = array("q", (_NO_RANK if r is None else r for r in ranks))
        self._starts = array("q", (s for s, _ in runs))
        self._prefixes = [p for _, p in runs]
        if len(self._ranks) != len(self._ends):
            raise ValueError(f"FileList: {len(self._ends)} names but {len(self._ranks)} ranks")

    @classmethod
    def of(cls, files: Iterable[tuple[str | os.PathLike[str], int | None]]) -> FileList:
        """A FileList of ``(path, rank)`` pairs (each path kept whole)."""
        if isinstance(files, FileList):
            return files
        pairs = [(str(Path(p)), r) for p, r in files]
        return cls([p for p, _ in pairs], [r for _, r in pairs])

    def __len__(self) -> int:
        return len(self._ends)

    def path_str(self, i: int) -> str:
        """File ``i``'s path as ``str(Path)`` writes it (``0 <= i < len``)."""
        ends = self._ends
        name = self._text[ends[i - 1] if i else 0:ends[i]]
        starts = self._starts
        prefix = self._prefixes[0 if len(starts) == 1 else bisect.bisect_right(starts, i) - 1]
        return name if prefix is None else prefix + name

    def is_named(self, i: int) -> bool:
        """Whether file ``i`` was named one by one (not found by listing a folder)."""
        starts = self._starts
        return self._prefixes[0 if len(starts) == 1 else bisect.bisect_right(starts, i) - 1] is None

    def path(self, i: int) -> Path:
        """File ``i``'s path."""
        return Path(self.path_str(i))

    def rank(self, i: int) -> int | None:
        """The rank the user gave file ``i`` (None: read from the file)."""
        r = self._ranks[i]
        return None if r == _NO_RANK else r

    @property
    def paths(self) -> Sequence[Path]:
        """The files' paths, each made when read."""
        return _View(self, self.path)

    @property
    def ranks(self) -> Sequence[int | None]:
        """The given ranks."""
        return _View(self, self.rank)

    @overload
    def __getitem__(self, i: int) -> tuple[Path, int | None]: ...

    @overload
    def __getitem__(self, i: slice) -> list[tuple[Path, int | None]]: ...

    def __getitem__(self, i: int | slice) -> tuple[Path, int | None] | list[tuple[Path, int | None]]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("FileList index out of range")
        return self.path(i), self.rank(i)

    def __iter__(self) -> Iterator[tuple[Path, int | None]]:
        for i in range(len(self)):
            yield self.path(i), self.rank(i)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        head = ", ".join(repr(self[k]) for k in range(min(3, len(self))))
        return f"FileList([{head}{', ...' if len(self) > 3 else ''}], {len(self)} files)"

    def nbytes(self) -> int:
        """Bytes held (the names' string, the offsets and ranks, the prefixes)."""
        import sys

        return (sys.getsizeof(self._text) + self._ends.itemsize * len(self._ends)
                + self._ranks.itemsize * len(self._ranks) + sum(sys.getsizeof(p) for p in self._prefixes if p))


class _View(Sequence[Any]):
    """One column of a :class:`FileList` (paths or ranks), made when read."""

    def __init__(self, files: FileList, get: Any) -> None:
        self._files, self._get = files, get

    def __len__(self) -> int:
        return len(self._files)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._get(k) for k in range(*i.indices(len(self)))]
        if i < 0:
            i += len(self)
        if not 0 <= i < len(self):
            raise IndexError("index out of range")
        return self._get(i)

    def __iter__(self) -> Iterator[Any]:
        return map(self._get, range(len(self)))
