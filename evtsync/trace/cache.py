"""Per-rank tables cached as Parquet, so a second analysis of the same traces skips the JSON.

An entry is a folder named by a key: the SHA-256 of the trace file's resolved path, size,
modification time (ns), inode and status-change time (ns), a hash of its content sampled
(its first and last 64 KiB and 4 KiB at 32 evenly spaced offsets), the ``salvage`` flag,
the evtsync version with a hash of the reader's source files, and the cache format. Editing,
replacing or touching a trace therefore misses the cache, even when the editor restores the
modification time (the status-change time cannot be set back, issue 33); so does a new
evtsync version or any change to the reader's code. The whole content is not hashed: that
would read the whole file on every run, a good part of what the cache saves.

The cache is capped: after each load its entries beyond ``$EVTSYNC_CACHE_MAX_BYTES`` (default
2 GiB) are removed, least recently used first, and entries of other evtsync versions (never
read again) go first; ``evtsync cache --prune`` does the same on demand, ``--clear`` empties it.

Entry layout: ``kernels.parquet``, ``cpu_ops.parquet``, ``runtime.parquet``,
``syncs.parquet`` and ``meta.json`` (rank info, pg_config, skipped counts, the warnings
the reader logged, each Parquet file's size and SHA-256, the categorical dtypes), signed with
the user's key (:func:`evtsync.core.trust.sign_listing`, docs/security.md): an entry that
someone without the key wrote or edited, hashes included, is never read. An entry
is written into a temporary folder and renamed into place, so readers never see half an
entry. A damaged or untrusted entry (missing file, wrong size or hash, unreadable Parquet or
JSON, no signature of this key) is reported with a warning, removed and rebuilt from the trace.

Default folder: ``$EVTSYNC_CACHE_DIR``, else ``$XDG_CACHE_HOME/evtsync``, else
``~/.cache/evtsync`` (the trace folders are often read-only shared storage); ``--cache DIR``
chooses another (on a Dask cluster: a folder every worker can write), ``--no-cache`` none.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
else:  # pandas at its first use: the Inspector tax reads its logs without it (issue 48)
    from evtsync.core.lazy import pd

from evtsync.core.tableio import file_sha256
from evtsync.trace.cache_dir import CACHE_MIN_ENV
from evtsync.trace.readers import read_rank
from evtsync.trace.tables import RankTables

log = logging.getLogger(__name__)

#: Bumped whenever the cached tables' layout changes; part of every key.
CACHE_FORMAT = 2
TABLES = ("kernels", "cpu_ops", "runtime", "syncs")
META = "meta.json"
#: In the cache folder: the cap of the last prune. A store removes it (the folder grew), so a load
#: that only read hits, under an unchanged cap, skips walking every entry (~0.1 ms each).
PRUNED_MARK = ".pruned"


@functools.cache
def _version() -> str:
    """The evtsync version plus a hash of the reader's source: any change to how tables
    are built (even without a version bump, e.g. in a development checkout) misses."""
    from evtsync._version import __version__

    digest = hashlib.sha256()
    for module in ("decode.py", "tables.py", "schema.py", "ranks.py", "cache.py"):
        digest.update((Path(__file__).parent / module).read_bytes())
    return f"{__version__}+{digest.hexdigest()[:16]}"


def _sampled_digest(path: Path, span: int = 1 << 16, samples: int = 32, block: int = 1 << 12) -> str:
    """SHA-256 of the first and last ``span`` bytes and of ``block`` bytes at ``samples`` evenly
    spaced offsets between: catches a rewrite within the mtime's granularity (a gzip file ends
    with the CRC and length of all its data) and most edits of a plain JSON file, for ~200 KiB
    read whatever the file's size."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        digest.update(fh.read(span))
        size = fh.seek(0, os.SEEK_END)
        for i in range(1, samples + 1):
            fh.seek(span + (size - 2 * span) * i // (samples + 1) if size > 2 * span else 0)
            digest.update(fh.read(block))
        fh.seek(max(0, size - span))
        digest.update(fh.read(span))
    return digest.hexdigest()


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, np.bool_):
        return bool(value)
    raise TypeError(f"cannot store {type(value).__name__} in the cache metadata")


@dataclass(frozen=True)
class RankCache:
    """A cache folder of per-rank tables."""

    folder: Path

    def key(self, path: str | os.PathLike[str], salvage: bool, rank: int | None = None) -> str:
        """The entry name of a trace file as it is now (path, size, mtime, version, and the
        rank the user gave it, if any)."""
        resolved = Path(path).resolve()
        stat = resolved.stat()
        material = json.dumps({"path": str(resolved), "size": stat.st_size,
                               "mtime_ns": stat.st_mtime_ns, "inode": stat.st_ino, "ctime_ns": stat.st_ctime_ns,
                               "sampled": _sampled_digest(resolved),
                               "salvage": bool(salvage), "rank": rank,
                               "version": _version(), "format": CACHE_FORMAT}, sort_keys=True)
        return hashlib.sha256(material.encode()).hexdigest()

    def entry(self, key: str) -> Path:
        return self.folder / key[:2] / key

    def load(self, path: str | os.PathLike[str], salvage: bool,
             rank: int | None = None) -> tuple[RankTables, list[list[Any]]] | None:
        """The cached tables and logged warnings of ``path``, or None (miss or damaged entry)."""
        entry = self.entry(self.key(path, salvage, rank))
        if not entry.is_dir():
            return None
        from evtsync.core.trust import SigningKeyError, warn_once

        try:
            hit = _read_entry(entry)
        except SigningKeyError as exc:
            warn_once(f"trace cache {self.folder}: not used, every trace is read ({exc})")
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("%s: damaged cache entry %s (%s); rebuilding it from the trace",
                        path, entry, exc)
            shutil.rmtree(entry, ignore_errors=True)
            return None
        with contextlib.suppress(OSError):  # a read-only cache is still read
            os.utime(entry)  # last use, for pruning the least recently used first
        return hit

    def store(self, path: str | os.PathLike[str], salvage: bool, tables: RankTables,
              messages: list[list[Any]], rank: int | None = None) -> Path:
        """Write the entry of ``path`` atomically (temporary folder renamed into place)."""
        entry = self.entry(self.key(path, salvage, rank))
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", suffix=".tmp", dir=entry.parent))
        try:
            files = {}
            dtypes = {}
            for name in TABLES:
                frame: pd.DataFrame = getattr(tables, name)
                target = tmp / f"{name}.parquet"
                frame.to_parquet(target, index=False)
                files[name] = {"size": target.stat().st_size, "sha256": file_sha256(target)}
                dtypes[name] = {col: str(frame[col].cat.categories.dtype)
                                for col in frame.columns
                                if isinstance(frame[col].dtype, pd.CategoricalDtype)}
            meta = {"format": CACHE_FORMAT, "version": _version(), "source": str(path),
                    "rank": tables.rank, "info": tables.info, "pg_config": tables.pg_config,
                    "skipped": tables.skipped, "untabulated": tables.untabulated,
                    "log": messages, "files": files,
                    "category_dtypes": dtypes}
            from evtsync.core.trust import sign_listing

            # signed with the user's key: an entry someone else wrote or edited is never read
            meta = sign_listing(json.loads(json.dumps(meta, default=_jsonable)))
            (tmp / META).write_text(json.dumps(meta))
            try:
                os.rename(tmp, entry)
            except OSError:
                if not entry.is_dir():
                    raise
                shutil.rmtree(tmp, ignore_errors=True)  # another process stored it first
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        with contextlib.suppress(OSError):
            (self.folder / PRUNED_MARK).unlink(missing_ok=True)  # grown: the next load prunes
        return entry


    def entries(self) -> list[CacheEntry]:
        """Every entry of the folder (complete or not), with its size, last use and version."""
        found: list[CacheEntry] = []
        if not self.folder.is_dir():
            return found
        for shard in self.folder.iterdir():
            if not (shard.is_dir() and len(shard.name) == 2):
                continue
            for entry in shard.iterdir():
                try:
                    if not entry.is_dir():
                        continue
                    size = sum(f.stat().st_size for f in entry.iterdir() if f.is_file())
                    last_used = entry.stat().st_mtime
                except OSError:  # removed meanwhile by another process
                    continue
                try:
                    version = str(json.loads((entry / META).read_text()).get("version", ""))
                except (OSError, ValueError):
                    version = ""  # a temporary folder of a killed writer, or a damaged entry
                found.append(CacheEntry(entry, size, last_used, version))
        return found

    def prune_if_grown(self, max_bytes: int) -> tuple[int, int]:
        """:meth:`prune`, unless nothing was stored since the last prune to the same cap (hits
        only reorder the entries, they never add bytes). Returns (entries removed, bytes freed)."""
        mark = self.folder / PRUNED_MARK
        with contextlib.suppress(OSError, ValueError):
            if int(mark.read_text()) == max_bytes:
                return 0, 0
        with contextlib.suppress(OSError):  # before pruning: a store meanwhile removes it again
            mark.write_text(str(max_bytes))
        return self.prune(max_bytes)

    def prune(self, max_bytes: int, stale_after_s: float = 3600.0) -> tuple[int, int]:
        """Remove entries until the folder holds at most ``max_bytes``: first those of other
        evtsync versions or reader code (never read again) and temporaries of killed writers
        older than ``stale_after_s``, then the least recently used. Returns (entries removed,
        bytes freed)."""
        import time

        now, current = time.time(), _version()
        entries = self.entries()
        # another version's entries are never read again; a folder without metadata is a killed
        # writer's temporary (or a damaged entry) once it is old, else maybe a writer's at work
        unusable = [e for e in entries if e.version != current
                    and (e.version or now - e.last_used > stale_after_s)]
        doomed = list(unusable) + least_recently_used_beyond([e for e in entries if e.version == current], max_bytes)
        for e in doomed:
            shutil.rmtree(e.path, ignore_errors=True)
        freed = sum(e.size for e in doomed)
        if doomed:
            log.info("trace cache %s: removed %d entr%s (%d bytes)", self.folder, len(doomed),
                     "y" if len(doomed) == 1 else "ies", freed)
        return len(doomed), freed


def least_recently_used_beyond(entries: list[Any], max_bytes: int) -> list[Any]:
    """The entries to remove so that the others hold at most ``max_bytes``: the least recently
    used first (each entry has ``size`` in bytes and ``last_used``, epoch seconds)."""
    kept = sorted(entries, key=lambda e: e.last_used)
    total = sum(e.size for e in kept)
    doomed = []
    while kept and total > max_bytes:
        oldest = kept.pop(0)
        doomed.append(oldest)
        total -= oldest.size
    return doomed


@dataclass(frozen=True)
class CacheEntry:
    """One folder of the cache: where, its size in bytes, its last use (epoch s), its evtsync version."""

    path: Path
    size: int
    last_used: float
    version: str


#: Size the cache is pruned to after each load unless ``$EVTSYNC_CACHE_MAX_BYTES`` says otherwise.
DEFAULT_CACHE_MAX_BYTES = 2 << 30
CACHE_MAX_ENV = "EVTSYNC_CACHE_MAX_BYTES"


def cache_max_bytes() -> int:
    """The cache's cap: ``$EVTSYNC_CACHE_MAX_BYTES`` (e.g. ``500M``, ``4GiB``), else 2 GiB."""
    from evtsync.core.units import parse_bytes

    text = os.environ.get(CACHE_MAX_ENV)
    return DEFAULT_CACHE_MAX_BYTES if not text else int(parse_bytes(text, f"${CACHE_MAX_ENV}"))


#: Trace files smaller than this are decoded on every read and never cached (issue 48): a cache
#: entry costs ~20-25 ms to verify and load (four parquet tables, hashes) whatever the trace's
#: size, and writing one more, while decoding costs ~0.1 ms per KB of gzipped Kineto trace
#: (measured 2026-12-06: 8 ms for a 60 KB DLRM rank, 17 ms at 124 KB, 121 ms at 1.15 MB; the
#: cache load 16-25 ms for the same files; docs/performance/cli.md): below ~250 KB the cache
#: is slower than the trace itself.
DEFAULT_CACHE_MIN_BYTES = 256 << 10


def cache_min_bytes() -> int:
    """Files below this size bypass the cache: ``$EVTSYNC_CACHE_MIN_BYTES`` (``0``: cache every
    file; ``1MiB``, ...),
    else :data:`DEFAULT_CACHE_MIN_BYTES`."""
    from evtsync.core.units import parse_bytes

    text = os.environ.get(CACHE_MIN_ENV, "").strip()
    if not text:
        return DEFAULT_CACHE_MIN_BYTES
    return 0 if text == "0" else int(parse_bytes(text, f"${CACHE_MIN_ENV}"))


def _read_entry(entry: Path) -> tuple[RankTables, list[list[Any]]]:
    from evtsync.core.trust import listing_problem

    meta = json.loads((entry / META).read_text())
    if meta.get("format") != CACHE_FORMAT:
        raise ValueError(f"cache format {meta.get('format')}, expected {CACHE_FORMAT}")
    untrusted = listing_problem(meta)
    if untrusted is not None:
        raise ValueError(f"not trusted: {untrusted}")
    frames = {}
    for name in TABLES:
        target = entry / f"{name}.parquet"
        expected = meta["files"][name]
        if target.stat().st_size != expected["size"] or file_sha256(target) != expected["sha256"]:
            raise ValueError(f"{target.name} does not match its recorded size and hash")
        frame = pd.read_parquet(target)
        for col, dtype in meta["category_dtypes"][name].items():
            frame[col] = _restore_categorical(frame[col], dtype)
        frames[name] = frame
    tables = RankTables(rank=int(meta["rank"]), info=meta["info"], pg_config=meta["pg_config"],
                        skipped={k: int(v) for k, v in meta["skipped"].items()},
                        untabulated=[[str(ph), str(cat), int(n)] for ph, cat, n in meta["untabulated"]], **frames)
    return tables, meta["log"]


def _restore_categorical(column: pd.Series, categories_dtype: str) -> pd.Series:
    """The categorical exactly as stored: Parquet may change the categories' dtype."""
    if not isinstance(column.dtype, pd.CategoricalDtype):
        column = column.astype("category")
    cats = column.cat.categories
    if str(cats.dtype) == categories_dtype:
        return column
    log.debug("restoring categories dtype %s of %s", categories_dtype, column.name)
    wanted = pd.Index(list(cats), dtype=categories_dtype)
    return pd.Series(pd.Categorical.from_codes(column.cat.codes.to_numpy(), categories=wanted),
                     name=column.name)


class _Recorder(logging.Handler):
    """Keeps the warnings the reader logs while one file is read (to replay on a cache hit).

    Only records of the reading thread are kept: other threads of the same process (a
    threaded Dask worker) may be reading other files at the same time.
    """

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.thread = threading.get_ident()
        self.records: list[list[Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.records.append([record.levelno, record.name, record.getMessage()])


def _below_cache_size(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is too small to be worth a cache entry (an unreadable file is not: the
    reading path reports it)."""
    try:
        return os.stat(path).st_size < cache_min_bytes()
    except OSError:
        return False


def read_rank_cached(path: str | os.PathLike[str], salvage: bool, cache_dir: str | None,
                     rank: int | None = None, rank_from: str | None = None) -> RankTables:
    """Tables of one trace file from the cache, or read (and cached) when missing (a
    ``rank_from`` ``nvtx:REGEX`` reads past the cache: the rank depends on the pattern; a file
    smaller than :func:`cache_min_bytes` too: decoding it is cheaper than its cache entry).

    The warnings logged when the file was first read (rank from the file name, salvaged
    events, ...) are logged again on a hit, so a cached run says what an uncached one says.
    """
    from evtsync.core.trust import SigningKeyError

    if cache_dir is None or rank_from or _below_cache_size(path):
        return read_rank(path, salvage, rank, rank_from)
    cache = RankCache(Path(cache_dir))
    hit = cache.load(path, salvage, rank)
    if hit is not None:
        tables, messages = hit
        for level, name, message in messages:
            logging.getLogger(name).log(level, "%s", message)
        log.debug("%s: tables from the cache", path)
        return tables
    recorder = _Recorder()
    reader_log = logging.getLogger("evtsync.trace")
    reader_log.addHandler(recorder)
    try:
        tables = read_rank(path, salvage, rank)
    finally:
        reader_log.removeHandler(recorder)
    try:
        cache.store(path, salvage, tables, recorder.records, rank)
    except (OSError, SigningKeyError) as exc:
        log.warning("%s: could not write the cache entry in %s (%s); continuing without it",
                    path, cache_dir, exc)
    return tables
