"""What evtsync trusts on disk, and the checks that stand for it (docs/security.md).

One home for four checks:

- :func:`contained`: a path named by a file (a run manifest's outputs, a result-cache listing, an
  nccl-tests plan's logs) is relative, has no ``..``, and stays inside its folder once resolved
  (a link out of the folder counts as outside). Nothing is read, written or deleted through a
  path that fails it.
- :func:`unsafe_reason`: a folder (or a file in it) that evtsync loads code from — the compiled
  models' pickles, the compiled trace scanner — must belong to the current user and be writable
  by nobody else, nor may a folder above it let another user replace it.
- :func:`sign` / :func:`verify`: HMAC-SHA256 with a per-user key kept outside every cache
  (:func:`key_file`, created ``0600`` on first use): a result-cache entry is served only when its
  listing carries a signature made with this key, so an entry that someone else wrote or edited
  is never served.
- :func:`sign_file` / :func:`file_signature_problem`: a file evtsync writes (a fit) gets a
  signature file beside it (``fit.nc.sig``: its name, size and SHA-256, signed as a listing), so
  that a reader knows, before it parses a byte, that this user's evtsync wrote it unchanged
  (a fit without one is read first in a separate process: :mod:`evtsync.evt.fitfile`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from evtsync.core.errors import InputError

log = logging.getLogger(__name__)

#: The environment variable naming the signing key's file (a team's shared key: docs/security.md).
KEY_ENV = "EVTSYNC_CACHE_KEY"
#: The key file's name in ``$XDG_CONFIG_HOME/evtsync`` (else ``~/.config/evtsync``).
KEY_NAME = "cache-key"
#: Bytes of a key made on first use (hex-encoded in its file).
KEY_BYTES = 32
#: The fewest characters a key file may hold.
MIN_KEY_CHARS = 32


# --------------------------------------------------------------------------- containment

def containment_problem(root: str | os.PathLike[str], rel: object) -> str | None:
    """Why ``rel`` is not a path inside the folder ``root`` (None when it is): not a non-empty
    string, absolute, a ``..`` step, a backslash or NUL, or resolving (links followed) outside
    or to the folder itself."""
    if not isinstance(rel, str) or not rel:
        return "not a non-empty relative path"
    pure = PurePosixPath(rel)
    if pure.is_absolute():
        return "an absolute path"
    if ".." in pure.parts:
        return "it climbs out with '..'"
    if "\\" in rel or "\0" in rel:
        return "it holds a backslash or NUL"
    try:
        base = Path(root).resolve()
        target = (base / rel).resolve()
    except (OSError, RuntimeError) as exc:  # a link loop, a name too long
        return f"it cannot be resolved ({exc})"
    if target == base:
        return "it names the folder itself"
    return None if target.is_relative_to(base) else "it leads out of the folder through a link"


def contained(root: str | os.PathLike[str], rel: object, what: str, hint: str = "") -> Path:
    """``root / rel`` when ``rel`` stays inside ``root`` (:func:`containment_problem`); else an
    :class:`~evtsync.core.errors.InputError` naming ``what`` (the file that named it), the path,
    why, and ``hint`` (what to do)."""
    problem = containment_problem(root, rel)
    if problem is not None:
        raise InputError(f"{what} names {rel!r}, which is not inside {root} ({problem}); refused: nothing "
                         f"is read, written or deleted through it{'; ' + hint if hint else ''}")
    return Path(root) / str(rel)


# --------------------------------------------------------------------------- ownership

def _private_group(gid: int, uid: int) -> bool:
    """Whether ``gid`` is the user's private group (named as the user, the user's primary group,
    no other member): the default of many Linux systems (umask 002), where group-writable
    means writable by the user alone."""
    import grp
    import pwd

    try:
        group, me = grp.getgrgid(gid), pwd.getpwuid(uid)
    except KeyError:
        return False
    return group.gr_name == me.pw_name and gid == me.pw_gid and set(group.gr_mem) <= {me.pw_name}


def _mode_problem(st: os.stat_result, uid: int, *, ancestor: bool) -> str | None:
    if st.st_uid != uid and not (ancestor and st.st_uid == 0):
        return f"owned by uid {st.st_uid}, not by you (uid {uid})"
    mode = st.st_mode
    if ancestor and stat.S_ISDIR(mode) and mode & stat.S_ISVTX:
        return None  # /tmp: no one renames or removes what is not theirs
    who = [w for w, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if mode & bit]
    if who == ["group"] and _private_group(st.st_gid, uid):
        return None
    if who:
        return f"writable by {' and '.join(who)} (mode {stat.filemode(mode)}, group id {st.st_gid})"
    return None


def unsafe_reason(path: str | os.PathLike[str]) -> str | None:
    """Why code must not be loaded from ``path`` (a folder or a file), or None.

    ``path`` itself (links followed) must belong to the current user and be writable by nobody
    else; every folder above it must belong to the user or to root and be writable by nobody
    else unless it has the sticky bit (``/tmp``), where no one can rename what is not theirs.
    Writable by the group is allowed when the group is the user's private group (its name is the
    user's, it is the user's primary group and has no other member). A path that does not exist
    yet is judged by the folders above it."""
    uid = os.geteuid()
    target = Path(path).resolve()
    try:
        problem = _mode_problem(os.stat(target), uid, ancestor=False)
    except FileNotFoundError:
        problem = None
    except OSError as exc:
        return f"{target}: cannot be checked ({exc.strerror or exc})"
    if problem is not None:
        return f"{target} is {problem}"
    for folder in target.parents:
        try:
            st = os.stat(folder)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"{folder}: cannot be checked ({exc.strerror or exc})"
        problem = _mode_problem(st, uid, ancestor=True)
        if problem is not None:
            return f"{folder} (above {target}) is {problem}"
    return None


_warned: set[str] = set()


def warn_once(message: str) -> None:
    """Log ``message`` as a warning once per process (a refused folder is met once per file)."""
    if message not in _warned:
        _warned.add(message)
        log.warning("%s", message)


def private_folder_problem(path: str | os.PathLike[str], what: str) -> str | None:
    """:func:`unsafe_reason` of a cache folder evtsync loads ``what`` (code) from, as the message
    a user acts on (logged once by the caller with :func:`warn_once`), or None."""
    reason = unsafe_reason(path)
    if reason is None:
        return None
    return (f"{what}: not loaded from {path}, because {reason}; whoever can write there could make evtsync run "
            f"their code. Make it yours and private (chown $USER FOLDER; chmod go-w FOLDER) or point "
            f"$EVTSYNC_CACHE_DIR at a folder of your own (docs/security.md)")


# --------------------------------------------------------------------------- signing

class SigningKeyError(InputError):
    """The signing key cannot be made, read, or is open to others."""


def key_file() -> Path:
    """The signing key's file: ``$EVTSYNC_CACHE_KEY``, else ``$XDG_CONFIG_HOME/evtsync/cache-key``,
    else ``~/.config/evtsync/cache-key``. Outside every cache folder, so that who can write a
    cache cannot read or replace the key."""
    given = os.environ.get(KEY_ENV)
    if given:
        return Path(given)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "evtsync" / KEY_NAME


def _make_key(path: Path) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except FileExistsError:
        return  # another process made it first
    with os.fdopen(fd, "w") as fh:
        fh.write(secrets.token_hex(KEY_BYTES) + "\n")
    log.info("made the result cache's signing key %s (mode 0600)", path)


_keys: dict[tuple[str, int, int], bytes] = {}


def key_problem(path: Path, st: os.stat_result, *, team: bool) -> str | None:
    """Why the signing key file ``path`` (``st``: its :func:`os.stat`, links followed) must not be
    used (None when it may), docs/security.md:

    - a regular file;
    - owned by you (uid :func:`os.geteuid`), unless it is a team's key named by
      ``$EVTSYNC_CACHE_KEY`` (``team``), which its administrator owns;
    - mode ``0600`` (or ``0400``): no bit for group or others; a team's key may also be readable
      by its group (``0640``), never writable by it nor readable by others;
    - in a folder that belongs to you, to root or to the key's owner and that no one else can write
      (unless it has the sticky bit, as ``/tmp``): whoever could replace the key could sign entries."""
    uid = os.geteuid()
    mode = stat.filemode(st.st_mode)
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != uid and not team:
        return (f"owned by uid {st.st_uid}, not by you (uid {uid}): its owner could replace it and sign cache "
                f"entries; remove it to have a key of your own made, or name a team's key with ${KEY_ENV} "
                "(docs/security.md)")
    loose = stat.S_IWGRP | stat.S_IWOTH | stat.S_IROTH | (0 if team else stat.S_IRGRP)
    if st.st_mode & loose:
        return (f"readable or writable by others (mode {mode}); chmod 600 {path} (640 for a team's key named by "
                f"${KEY_ENV}, docs/security.md)")
    folder = path.resolve().parent
    try:
        fst = os.stat(folder)
    except OSError as exc:
        return f"its folder {folder} cannot be checked ({exc.strerror or exc})"
    if fst.st_uid not in (uid, 0, st.st_uid):
        return f"its folder {folder} is owned by uid {fst.st_uid}, who could replace the key"
    if not fst.st_mode & stat.S_ISVTX:
        who = [w for w, bit in (("group", stat.S_IWGRP), ("others", stat.S_IWOTH)) if fst.st_mode & bit]
        if who == ["group"] and _private_group(fst.st_gid, uid):
            who = []
        if who:
            return (f"its folder {folder} is writable by {' and '.join(who)} (mode {stat.filemode(fst.st_mode)}), "
                    f"who could replace the key; chmod go-w {folder}")
    return None


def signing_key() -> bytes:
    """The per-user signing key (:func:`key_file`), made on first use (``0600``, in a ``0700``
    folder). Refused (:class:`SigningKeyError`) for any :func:`key_problem` (not a regular file,
    not yours, open to others, in a folder others can write) or when it holds fewer than 32
    characters."""
    path = key_file()
    try:
        if not path.exists():
            _make_key(path)
        st = os.stat(path)
    except OSError as exc:
        raise SigningKeyError(f"signing key {path}: cannot be made or read ({exc.strerror or exc})") from exc
    problem = key_problem(path, st, team=bool(os.environ.get(KEY_ENV)))
    if problem is not None:
        raise SigningKeyError(f"signing key {path}: {problem}")
    stamp = (str(path), st.st_mtime_ns, st.st_ino)
    if stamp not in _keys:
        try:
            text = path.read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise SigningKeyError(f"signing key {path}: unreadable ({exc})") from exc
        if len(text) < MIN_KEY_CHARS:
            raise SigningKeyError(f"signing key {path}: holds {len(text)} characters, fewer than 32; remove it to have "
                            "a new one made")
        _keys[stamp] = hashlib.sha256(text.encode()).digest()
    return _keys[stamp]


def sign(data: bytes) -> str:
    """HMAC-SHA256 of ``data`` with :func:`signing_key`, hex."""
    return hmac.new(signing_key(), data, hashlib.sha256).hexdigest()


def verify(data: bytes, signature: object) -> bool:
    """Whether ``signature`` is :func:`sign` of ``data`` (compared in constant time)."""
    return isinstance(signature, str) and hmac.compare_digest(sign(data), signature)


#: The field of a signed listing (a cache entry's description) holding its :func:`sign`.
SIGNATURE = "hmac"


def _listing_bytes(listing: dict[str, Any]) -> bytes:
    rest = {k: v for k, v in listing.items() if k != SIGNATURE}
    return json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str).encode()


def sign_listing(listing: dict[str, Any]) -> dict[str, Any]:
    """``listing`` (a cache entry's description: its files' SHA-256 and what it says) as JSON reads
    it back, with :data:`SIGNATURE`: the HMAC-SHA256 of the rest, canonical JSON, with
    :func:`signing_key`. Raises :class:`SigningKeyError` when the key cannot be used."""
    plain = json.loads(json.dumps({k: v for k, v in listing.items() if k != SIGNATURE}, default=str))
    return {**plain, SIGNATURE: sign(_listing_bytes(plain))}


def listing_problem(listing: dict[str, Any]) -> str | None:
    """Why a listing read from a cache is not trusted (None when :func:`sign_listing` made it with
    this user's key): unsigned, or signed with another key (written or edited by someone without
    it). Raises :class:`SigningKeyError` when the key cannot be used (then nothing is trusted)."""
    if SIGNATURE not in listing:
        return "its listing is not signed"
    if verify(_listing_bytes(listing), listing[SIGNATURE]):
        return None
    return f"its listing's signature was not made with your key {key_file()}"


# --------------------------------------------------------------------------- signed files

#: What a signature file is (its ``format`` field).
SIGNED_FILE_FORMAT = "evtsync-signed-file/1"
#: The suffix of the signature file written beside a file evtsync wrote (``fit.nc.sig``).
SIGNATURE_SUFFIX = ".sig"
#: The largest signature file read (a few hundred bytes are written).
MAX_SIGNATURE_BYTES = 4096


def signature_path(path: str | os.PathLike[str]) -> Path:
    """The signature file of ``path``: ``fit.nc`` -> ``fit.nc.sig`` (:func:`sign_file`)."""
    p = Path(path)
    return p.with_name(p.name + SIGNATURE_SUFFIX)


def sign_file(path: str | os.PathLike[str], content: str | os.PathLike[str] | None = None) -> Path | None:
    """Write beside ``path``, a file evtsync writes, its signature file (:func:`signature_path`):
    the file's name, size and SHA-256 as a listing signed with :func:`sign_listing`, atomically
    (inside :func:`~evtsync.core.tableio.all_or_nothing`, with the other outputs). ``content``:
    where the bytes are now, when not yet at ``path`` (the temporary file of
    :func:`~evtsync.core.tableio.atomic_path`). A reader then knows, before it parses a byte of
    the file, that this user's evtsync wrote it and that it is unchanged
    (:func:`file_signature_problem`). Returns None, with a warning, when the key cannot be used:
    the file is then read as one from elsewhere (docs/security.md)."""
    from evtsync.core.tableio import file_sha256, write_text_atomic

    p = Path(path)
    data = Path(content) if content is not None else p
    try:
        listing = sign_listing({"format": SIGNED_FILE_FORMAT, "file": p.name, "bytes": data.stat().st_size,
                                "sha256": file_sha256(data)})
    except SigningKeyError as exc:
        warn_once(f"{p}: written without its signature file ({exc}); evtsync reads it as a file from elsewhere, "
                  "in a separate process with a time limit (docs/security.md)")
        return None
    return write_text_atomic(signature_path(p), json.dumps(listing, sort_keys=True) + "\n")


def file_signature_problem(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` is not known to be a file that this user's evtsync wrote and that is unchanged
    since (None when it is): its signature file (:func:`sign_file`) is missing, unreadable, not
    signed with this user's key, names another file, or the file's size or SHA-256 differ from
    the ones signed. A signing key that cannot be used is a reason too (nothing is trusted)."""
    p = Path(path)
    sig = signature_path(p)
    try:
        if not sig.is_file():
            return f"it has no signature file {sig.name}"
        if sig.stat().st_size > MAX_SIGNATURE_BYTES:
            return f"its signature file {sig.name} is larger than {MAX_SIGNATURE_BYTES} bytes"
        listing = json.loads(sig.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return f"its signature file {sig.name} is unreadable ({exc})"
    if not isinstance(listing, dict) or listing.get("format") != SIGNED_FILE_FORMAT:
        return f"{sig.name} is not an evtsync signature file"
    try:
        problem = listing_problem(listing)
    except SigningKeyError as exc:
        return f"the signing key cannot be used ({exc})"
    if problem is not None:
        return f"{sig.name}: {problem}"
    if listing.get("file") != p.name:
        return f"{sig.name} signs {listing.get('file')!r}, not {p.name!r}"
    try:
        size = p.stat().st_size
    except OSError as exc:
        return f"it cannot be read ({exc.strerror or exc})"
    if size != listing.get("bytes"):
        return f"it changed after {sig.name} was signed ({size} bytes, {listing.get('bytes')} signed)"
    from evtsync.core.tableio import file_sha256

    if file_sha256(p) != listing.get("sha256"):
        return f"it changed after {sig.name} was signed (its SHA-256 differs)"
    return None
