"""The demo's synthetic study kept in the cache folder: a second demo on the same machine copies it.

The ``demo`` stage of ``evtsync run`` (no traces) writes the bundled synthetic study: its rank
traces and ground truths, the same bytes on every run with the same settings and code (fixed
seed). Synthesising them costs ~8 s of CPU; copying them, well under a second. An entry is kept
under ``FOLDER/KEY/``, where KEY is the SHA-256 of the study's name, its settings (the demo
stage's overrides), evtsync's version and the digest of evtsync's sources
(:func:`~evtsync.runfolder.layout.source_digest`): a change to any of them is another key, so an
entry is reused only by a demo that would synthesise the same files (docs/performance/run.md).

An entry holds ``files/`` (the study's files, by their path under ``inputs/demo``) and
:data:`DEMO_META`: a marker naming this cache, the key and each file's SHA-256. It is written
into a temporary folder and renamed into place. A fetch reuses an entry only when its marker and
key are this cache's and every listed file is a regular file (no link) whose SHA-256 matches;
a damaged entry of this cache is removed with a warning and the study is synthesised again, and a
folder this cache did not write is never read, removed or overwritten. A fetch marks its
entry used; a store keeps the :data:`DEMO_CACHE_KEEP` most recently used entries and removes
older ones of this cache (those of earlier code, which no key names again).
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
from pathlib import Path, PurePosixPath
from typing import Any

from evtsync.core.tableio import atomic_path, file_sha256

log = logging.getLogger("evtsync.pipeline.democache")

#: The entry's description file (marker, key, files and their SHA-256).
DEMO_META = "demo-cache.json"
#: The marker a :data:`DEMO_META` must carry: entries written by this cache, in this layout.
DEMO_CACHE_MARKER = "evtsync demo study cache, format 1"
#: Entries kept (the most recently used; ~16 MB each): an entry of older code is never read again.
DEMO_CACHE_KEEP = 3


def demo_key(study: str, overrides: dict[str, Any], code: str) -> str:
    """The cache key of a demo study: SHA-256 of its name, settings, evtsync's version and the
    digest ``code`` of evtsync's sources.

    Parameters
    ----------
    study : str
        The study's name (:data:`evtsync.synth.STUDIES`).
    overrides : dict
        The study's settings (:func:`evtsync.synth.study` keyword arguments).
    code : str
        The digest of evtsync's sources (:func:`evtsync.runfolder.layout.source_digest`).

    Returns
    -------
    str
        64 hexadecimal digits.
    """
    from evtsync._version import __version__

    text = json.dumps({"marker": DEMO_CACHE_MARKER, "study": study, "overrides": overrides, "version": __version__,
                       "code": code}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def _safe_rel(rel: str) -> bool:
    path = PurePosixPath(rel)
    return bool(rel) and not path.is_absolute() and ".." not in path.parts and "\\" not in rel


class DemoCache:
    """Demo studies written before, by :func:`demo_key` (see the module's description).

    Parameters
    ----------
    folder : path
        The cache's folder (``evtsync run`` uses ``CACHE/demo``, CACHE being ``--cache`` or
        :func:`~evtsync.trace.cache_dir.default_cache_dir`).
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)

    def fetch(self, key: str, dest: Path) -> list[Path] | None:
        """Copy the entry of ``key`` into ``dest`` (each file atomically).

        Parameters
        ----------
        key : str
            The study's key (:func:`demo_key`).
        dest : pathlib.Path
            The folder the study goes to (a run's ``inputs/demo``).

        Returns
        -------
        list of pathlib.Path or None
            The files written, or None when there is no usable entry (none, not this cache's,
            or damaged: then removed, with a warning).
        """
        entry = self.folder / key
        meta_path = entry / DEMO_META
        if not entry.is_dir() or entry.is_symlink():
            return None
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            ours = isinstance(meta, dict) and meta.get("marker") == DEMO_CACHE_MARKER and meta.get("key") == key
        except (OSError, ValueError):
            ours = False
        if not ours:
            log.warning("demo cache: %s was not written by this cache (no %s with its marker and key): "
                        "left alone, the demo study is synthesised", entry, DEMO_META)
            return None
        try:
            files = meta["files"]
            if not isinstance(files, dict) or not files:
                raise ValueError("no file listed")
            for rel, digest in files.items():
                src = entry / "files" / rel
                if not _safe_rel(rel) or not stat.S_ISREG(os.lstat(src).st_mode):
                    raise ValueError(f"{rel}: not a plain file inside the entry")
                if file_sha256(src) != digest:
                    raise ValueError(f"{rel} differs from its hash")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("demo cache entry %s is damaged (%s): removed, the demo study is synthesised", entry, exc)
            shutil.rmtree(entry, ignore_errors=True)
            return None
        with contextlib.suppress(OSError):
            os.utime(meta_path)  # used now: the last to be removed
        written = []
        for rel in files:
            target = dest / rel
            with atomic_path(target) as tmp:
                shutil.copyfile(entry / "files" / rel, tmp)
            written.append(target)
        return written

    def store(self, key: str, src: Path, files: list[Path]) -> None:
        """Keep ``files`` (under ``src``) as the entry of ``key``; an entry already there is kept.

        Parameters
        ----------
        key : str
            The study's key (:func:`demo_key`).
        src : pathlib.Path
            The folder the study was written to (a run's ``inputs/demo``).
        files : list of pathlib.Path
            Its files, each under ``src``.
        """
        entry = self.folder / key
        if entry.exists() or entry.is_symlink():
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=f".{key}.", dir=self.folder))
        except OSError as exc:
            log.warning("demo cache %s: not writable (%s); the study is not kept", self.folder, exc)
            return
        try:
            listed = {}
            for path in files:
                rel = path.relative_to(src).as_posix()
                target = tmp / "files" / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
                listed[rel] = file_sha256(target)
            (tmp / DEMO_META).write_text(json.dumps({"marker": DEMO_CACHE_MARKER, "key": key, "files": listed},
                                                    indent=1), encoding="utf-8")
            os.rename(tmp, entry)
        except OSError as exc:  # another process stored it first, or the cache is full
            shutil.rmtree(tmp, ignore_errors=True)
            if not entry.is_dir():
                log.warning("demo cache %s: entry not written (%s)", self.folder, exc)
            return
        self._keep_recent()

    def _keep_recent(self) -> None:
        """Remove this cache's entries beyond the :data:`DEMO_CACHE_KEEP` most recently used."""
        ours = []
        for entry in self.folder.iterdir():
            try:
                if entry.is_symlink() or not entry.is_dir():
                    continue
                meta_path = entry / DEMO_META
                meta = json.loads(meta_path.read_text(encoding="utf-8"))
                if isinstance(meta, dict) and meta.get("marker") == DEMO_CACHE_MARKER and meta.get("key") == entry.name:
                    ours.append((meta_path.stat().st_mtime, entry))
            except (OSError, ValueError):
                continue  # not an entry of this cache (or removed meanwhile): left alone
        for _, entry in sorted(ours, reverse=True)[DEMO_CACHE_KEEP:]:
            shutil.rmtree(entry, ignore_errors=True)
