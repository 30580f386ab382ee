"""Stage results kept across run folders: a run in a fresh folder copies what another computed.

A stage of ``evtsync run`` whose outputs are a function of its key alone (its parameters, the
content of what it reads, evtsync's version and sources, the libraries whose numbers flow into
its outputs: :meth:`evtsync.pipeline.engine.Run.result_key`) is *shareable*
(:attr:`evtsync.pipeline.engine.Stage.shareable`): when it finishes ``done``, its output files
are kept here under that key, and a later run, in any folder, whose stage has the same key
copies them instead of computing them again. The same bytes as a computation would write,
except the provenance of when and how long the computation took (a fit's ``created`` and
``sampling_seconds``), which a copy carries from the computation it copies; the run's manifest
says where each copied stage was computed, when, and at what CPU cost
(``reused_from_cache``). Stages whose outputs name the run folder or read the manifest (the
summary, the report) are never kept; failures never are.

An entry is ``FOLDER/KEY/``: ``files/`` (the outputs, by their path relative to the run folder)
and :data:`RESULT_META`, a marker naming this cache, the key, the stage, each file's SHA-256 and
the stage's manifest entry (status, reason, summary, failed workloads, and under
``cached_from`` the run folder, date, wall and CPU seconds of the computation), signed: its
``hmac`` is the HMAC-SHA256 of the rest with the user's key, kept outside the cache
(:func:`evtsync.core.trust.sign_listing`). It is written into a temporary folder and renamed into
place. A fetch uses an entry only when its marker and key are this cache's, its listing carries a
signature made with this user's key (so one that someone else wrote or edited, hashes included, is
never served: docs/security.md), and every listed file is a plain file inside the entry (no link)
whose path stays inside the run folder (:func:`evtsync.core.trust.contained`) and whose SHA-256,
computed while it is copied, matches; the copies appear in the run folder together or not at
all. An untrusted or damaged entry is not used: the stage is computed again with a warning, and
the entry removed when it is the user's own; a folder this cache did not write is never read,
removed or overwritten.

The cache is capped at ``$EVTSYNC_RESULT_CACHE_MAX_BYTES`` (default 2 GiB): after each store the
least recently used entries (a fetch marks its entry used) are removed until the rest fit.
``evtsync cache --prune`` / ``--clear`` do the same on demand. Default folder:
``CACHE/results``, CACHE being ``--cache`` or :func:`~evtsync.trace.cache_dir.default_cache_dir`;
``evtsync run --no-result-cache`` (or ``--no-cache``) neither reads nor writes it, ``--force``
computes every stage (and keeps what it computes).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from evtsync.core.tableio import all_or_nothing, atomic_path

log = logging.getLogger("evtsync.pipeline.resultcache")

#: The entry's description file (marker, key, stage, files and their SHA-256, manifest entry).
RESULT_META = "result-cache.json"
#: The marker a :data:`RESULT_META` must carry: entries written by this cache, in this layout.
RESULT_CACHE_MARKER = "evtsync stage result cache, format 1"
#: The environment variable of the cap (bytes, e.g. ``500M``, ``4GiB``).
RESULT_CACHE_MAX_ENV = "EVTSYNC_RESULT_CACHE_MAX_BYTES"
#: The cap unless :data:`RESULT_CACHE_MAX_ENV` says otherwise.
DEFAULT_RESULT_CACHE_MAX_BYTES = 2 << 30
#: The libraries whose numbers (or file encodings) flow into the stages' outputs: their versions
#: are part of every key (evtsync's own sources are, by their digest).
KEY_LIBRARIES = ("numpy", "scipy", "pandas", "pyarrow", "pymc", "pytensor", "nutpie", "numba", "arviz",
                 "arviz-stats", "arviz-base", "xarray", "h5netcdf", "h5py", "netCDF4")


def result_cache_max_bytes() -> int:
    """The cap: ``$EVTSYNC_RESULT_CACHE_MAX_BYTES`` (e.g. ``500M``, ``4GiB``), else 2 GiB."""
    from evtsync.core.units import parse_bytes

    text = os.environ.get(RESULT_CACHE_MAX_ENV)
    return DEFAULT_RESULT_CACHE_MAX_BYTES if not text else int(parse_bytes(text, f"${RESULT_CACHE_MAX_ENV}"))


@lru_cache(maxsize=1)
def library_versions() -> dict[str, str]:
    """Python's version and those of :data:`KEY_LIBRARIES` (``absent`` when not installed)."""
    from evtsync.core.versions import package_versions

    return package_versions(KEY_LIBRARIES)


class _NoKey(Exception):
    """This user's signing key cannot be used: no entry can be checked (none is served)."""


def _signature_problem(meta: dict[str, Any]) -> str | None:
    """Why the entry's listing is not trusted (:func:`evtsync.core.trust.listing_problem`; None
    when it is signed with this user's key); :class:`_NoKey` when the key cannot be used."""
    from evtsync.core.trust import SigningKeyError, listing_problem

    try:
        return listing_problem(meta)
    except SigningKeyError as exc:
        raise _NoKey(str(exc)) from exc


def _owned(path: Path) -> bool:
    try:
        return path.lstat().st_uid == os.geteuid()
    except OSError:
        return False


class _Damaged(Exception):
    """An entry of this cache that cannot be used as it is."""


@dataclass(frozen=True)
class CachedResult:
    """A stage's result copied from the cache: the files written (relative to the run folder,
    with their SHA-256) and the manifest entry kept with them."""

    key: str
    outputs: dict[str, str]
    entry: dict[str, Any]
    folder: Path


@dataclass(frozen=True)
class ResultEntry:
    """One entry of the cache: where, its stage, size in bytes and last use (epoch seconds)."""

    path: Path
    stage: str
    size: int
    last_used: float


class ResultCache:
    """Stage results by key (see the module's description).

    Parameters
    ----------
    folder : path
        The cache's folder (``evtsync run`` uses ``CACHE/results``).
    max_bytes : int, optional
        The cap kept after each store (default :func:`result_cache_max_bytes`).
    """

    def __init__(self, folder: str | os.PathLike[str], max_bytes: int | None = None) -> None:
        self.folder = Path(folder)
        self.max_bytes = result_cache_max_bytes() if max_bytes is None else int(max_bytes)

    # ---- reading
    def _meta(self, entry: Path) -> dict[str, Any] | None:
        """The entry's description when this cache wrote it (marker, and key = folder name)."""
        if entry.is_symlink() or not entry.is_dir():
            return None
        try:
            meta = json.loads((entry / RESULT_META).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if isinstance(meta, dict) and meta.get("marker") == RESULT_CACHE_MARKER and meta.get("key") == entry.name:
            return meta
        return None

    def holds(self, key: str) -> bool:
        """Whether an entry of this cache has ``key`` (its files are checked only by :meth:`fetch`)."""
        meta = self._meta(self.folder / key)
        try:
            return meta is not None and _signature_problem(meta) is None
        except _NoKey:
            return False

    def holds_probe(self, probes: set[str]) -> set[str]:
        """The ``probes`` (:meth:`evtsync.pipeline.engine.Run.result_probe`: a stage's name,
        parameters, code and libraries, without its inputs) that some entry was stored with."""
        found: set[str] = set()
        for entry in self._listing():
            meta = self._meta(entry)
            if meta is not None and meta.get("probe") in probes:
                found.add(meta["probe"])
        return found

    def fetch(self, key: str, dest: Path) -> CachedResult | None:
        """Copy the entry of ``key`` into the run folder ``dest``: every file or none.

        Parameters
        ----------
        key : str
            The stage's result key (:meth:`evtsync.pipeline.engine.Run.result_key`).
        dest : pathlib.Path
            The run folder; each file goes to its path relative to it, atomically.

        Returns
        -------
        CachedResult or None
            What was copied, or None when there is no usable entry (none, not this cache's, or
            damaged: then removed, with a warning).
        """
        entry = self.folder / key
        if not entry.exists() and not entry.is_symlink():
            return None
        meta = self._meta(entry)
        if meta is None:
            log.warning("result cache: %s was not written by this cache (no %s with its marker and key): "
                        "left alone, the stage is computed", entry, RESULT_META)
            return None
        try:
            untrusted = _signature_problem(meta)
        except _NoKey as exc:
            from evtsync.core.trust import warn_once

            warn_once(f"result cache {self.folder}: not used, every stage is computed ({exc})")
            return None
        if untrusted is not None:
            # written or edited by someone without this user's key, or before entries were signed:
            # never served (docs/security.md). Removed when it is this user's (the computation
            # stores a signed one in its place); another user's is left alone
            mine = _owned(entry)
            log.warning("result cache entry %s (stage %s) is not trusted (%s): not used, the stage is computed%s",
                        entry, meta.get("stage", "?"), untrusted, " (and the entry replaced)" if mine else "")
            if mine:
                shutil.rmtree(entry, ignore_errors=True)
            return None
        try:
            outputs = self._copy_out(entry, meta, dest)
        except (_Damaged, KeyError, TypeError, AttributeError, ValueError) as exc:
            log.warning("result cache entry %s (stage %s) is damaged (%s): removed, the stage is computed",
                        entry, meta.get("stage", "?"), exc)
            shutil.rmtree(entry, ignore_errors=True)
            return None
        with contextlib.suppress(OSError):
            os.utime(entry / RESULT_META)  # used now: the last to be removed
        return CachedResult(key, outputs, dict(meta["entry"]), entry)

    def _copy_out(self, entry: Path, meta: dict[str, Any], dest: Path) -> dict[str, str]:
        files = meta["files"]
        if not isinstance(files, dict) or not isinstance(meta.get("entry"), dict):
            raise _Damaged("no file list or manifest entry")
        from evtsync.core.trust import containment_problem

        for rel in files:
            src = entry / "files" / str(rel)
            problem = containment_problem(entry / "files", rel) or containment_problem(dest, rel)
            try:
                plain = problem is None and stat.S_ISREG(os.lstat(src).st_mode)
            except OSError:
                plain = False
            if not plain:
                raise _Damaged(f"{rel!r}: not a plain file inside the entry and the run folder ({problem or 'a link'})")
        outputs = {}
        with all_or_nothing():  # the copies appear together, after every hash matched
            for rel, digest in files.items():
                with atomic_path(dest / rel) as tmp:
                    found = _copy_hashing(entry / "files" / rel, tmp)
                    if found != digest:
                        raise _Damaged(f"{rel} differs from its hash")
                outputs[rel] = found
        return outputs

    # ---- writing
    def store(self, key: str, stage: str, probe: str, run_folder: Path, outputs: dict[str, str],
              entry: dict[str, Any]) -> bool:
        """Keep a stage's outputs as the entry of ``key``; an entry already there is kept.

        Parameters
        ----------
        key : str
            The stage's result key.
        stage : str
            The stage's name.
        probe : str
            The stage's probe (:meth:`evtsync.pipeline.engine.Run.result_probe`).
        run_folder : pathlib.Path
            The run folder the outputs are in.
        outputs : dict
            Each output's path relative to ``run_folder`` and its SHA-256 (the manifest's).
        entry : dict
            What the manifest entry of a copy needs: status, reason, summary, failed workloads,
            and ``cached_from`` (where, when, wall and CPU seconds of this computation).

        Returns
        -------
        bool
            Whether the entry is there now.
        """
        target = self.folder / key
        if target.exists() or target.is_symlink():
            return self.holds(key)
        try:
            size = sum((run_folder / rel).stat().st_size for rel in outputs)
        except OSError as exc:
            log.warning("result cache: stage %s not kept (%s)", stage, exc)
            return False
        if size > self.max_bytes:
            log.info("result cache: stage %s's outputs (%d bytes) exceed the cap (%d): not kept", stage, size,
                     self.max_bytes)
            return False
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", suffix=".tmp", dir=self.folder))
        except OSError as exc:
            log.warning("result cache %s: not writable (%s); stage %s is not kept", self.folder, exc, stage)
            return False
        from evtsync.core.trust import SigningKeyError, containment_problem, sign_listing

        try:
            for rel, digest in outputs.items():
                problem = containment_problem(run_folder, rel)
                if problem is not None:
                    raise _Damaged(f"{rel!r}: not a path inside the run folder ({problem})")
                copy = tmp / "files" / rel
                copy.parent.mkdir(parents=True, exist_ok=True)
                if _copy_hashing(run_folder / rel, copy) != digest:  # changed since the stage wrote it
                    raise _Damaged(f"{rel} changed since stage {stage} wrote it")
            meta = {"marker": RESULT_CACHE_MARKER, "key": key, "stage": stage, "probe": probe, "files": outputs,
                    "bytes": size, "entry": entry}
            meta = sign_listing(meta)
            # not sorted: the outputs stay in the order the stage wrote them (the manifest's)
            (tmp / RESULT_META).write_text(json.dumps(meta, indent=1), encoding="utf-8")
            os.rename(tmp, target)
        except (OSError, _Damaged, SigningKeyError) as exc:  # stored first by another process, a full disk, …
            shutil.rmtree(tmp, ignore_errors=True)
            if not target.is_dir():
                log.warning("result cache %s: stage %s not kept (%s)", self.folder, stage, exc)
            return self.holds(key)
        self.prune(self.max_bytes)
        return True

    # ---- size
    def _listing(self) -> list[Path]:
        try:
            return [p for p in self.folder.iterdir() if not p.name.startswith(".")]
        except OSError:
            return []

    def entries(self) -> list[ResultEntry]:
        """This cache's entries (folders it did not write are not listed)."""
        found = []
        for path in self._listing():
            meta = self._meta(path)
            if meta is None:
                continue
            try:
                found.append(ResultEntry(path, str(meta.get("stage", "")), int(meta.get("bytes", 0)),
                                         (path / RESULT_META).stat().st_mtime))
            except (OSError, ValueError, TypeError):
                continue  # removed meanwhile
        return found

    def prune(self, max_bytes: int, stale_after_s: float = 3600.0) -> tuple[int, int]:
        """Remove this cache's least recently used entries until the rest hold at most
        ``max_bytes``, and temporaries of killed writers older than ``stale_after_s``. Returns
        (entries removed, bytes freed)."""
        import time

        from evtsync.trace.cache import least_recently_used_beyond

        doomed = least_recently_used_beyond(self.entries(), max_bytes)
        for e in doomed:
            shutil.rmtree(e.path, ignore_errors=True)
        with contextlib.suppress(OSError):
            for tmp in self.folder.glob(".*.tmp"):  # a writer killed between mkdtemp and rename
                if tmp.is_dir() and not tmp.is_symlink() and time.time() - tmp.stat().st_mtime >= stale_after_s:
                    shutil.rmtree(tmp, ignore_errors=True)
        freed = sum(e.size for e in doomed)
        if doomed:
            log.info("result cache %s: removed %d entr%s (%d bytes)", self.folder, len(doomed),
                     "y" if len(doomed) == 1 else "ies", freed)
        return len(doomed), freed


def _copy_hashing(src: Path, dst: Path, chunk_size: int = 1 << 22) -> str:
    """Copy ``src`` (not through a link) to ``dst`` and return the SHA-256 of the bytes copied.
    A file that cannot be read is :class:`_Damaged`; one that cannot be written raises ``OSError``."""
    digest = hashlib.sha256()
    try:
        fin = os.fdopen(os.open(src, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)), "rb")
    except OSError as exc:
        raise _Damaged(f"{src.name}: cannot be read ({exc.strerror or exc})") from exc
    with fin, open(dst, "wb") as fout:
        while True:
            try:
                chunk = fin.read(chunk_size)
            except OSError as exc:
                raise _Damaged(f"{src.name}: cannot be read ({exc.strerror or exc})") from exc
            if not chunk:
                break
            digest.update(chunk)
            fout.write(chunk)
    return digest.hexdigest()
