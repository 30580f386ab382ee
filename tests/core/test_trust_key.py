"""The result cache's signing key: its ownership and permissions are checked before it is used
(issue 47, docs/security.md "Cache entries: signatures"). The tests run as root, which may
``os.chown`` a file to another uid; each key lives in the test's own temporary folder."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from evtsync.core.trust import KEY_ENV, SigningKeyError, sign, signing_key

OTHER_UID = 4242  # no such user here: "someone else"
KEY_TEXT = "ab" * 32 + "\n"  # 64 hex characters, as a made key holds


@pytest.fixture
def default_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The key at its default place ($XDG_CONFIG_HOME/evtsync/cache-key), made there by evtsync."""
    monkeypatch.delenv(KEY_ENV, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    signing_key()
    key = tmp_path / "config" / "evtsync" / "cache-key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and key.stat().st_uid == os.geteuid()
    return key


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")


def test_control_a_key_of_yours_mode_0600_is_used(default_key: Path) -> None:
    assert len(sign(b"x")) == 64


def test_a_key_owned_by_someone_else_is_refused(default_key: Path) -> None:
    """Before: only the mode was checked, so a 0600 key that another user owns (and so can
    rewrite, then sign entries your runs serve) was used."""
    _need_root()
    os.chown(default_key, OTHER_UID, -1)
    with pytest.raises(SigningKeyError, match=rf"{default_key}: owned by uid {OTHER_UID}, not by you"):
        signing_key()


def test_a_key_readable_by_its_group_is_refused_unless_a_team_key(default_key: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """0600 for your own key (before: 0640 was used); 0640 only for a key named by $EVTSYNC_CACHE_KEY."""
    os.chmod(default_key, 0o640)
    with pytest.raises(SigningKeyError, match=r"readable or writable by others \(mode -rw-r-----\); chmod 600"):
        signing_key()
    monkeypatch.setenv(KEY_ENV, str(default_key))
    assert len(signing_key()) == 32


@pytest.mark.parametrize("mode", [0o777, 0o775])
def test_a_key_in_a_folder_others_can_write_is_refused(default_key: Path, mode: int) -> None:
    """Whoever can write the key's folder can put a key of theirs in its place."""
    os.chmod(default_key.parent, mode)
    try:
        if mode == 0o775:  # group-writable is allowed for your private group only: use a group that is not
            _need_root()
            os.chown(default_key.parent, -1, 4243)
        with pytest.raises(SigningKeyError, match=rf"its folder {default_key.parent} is writable by"):
            signing_key()
    finally:
        os.chmod(default_key.parent, 0o700)


def test_control_a_teams_key_owned_by_its_administrator_is_used(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/security.md's team setup: a key named by $EVTSYNC_CACHE_KEY, owned by whoever
    administers it, mode 0640, in a folder only its owner can write."""
    _need_root()
    folder = tmp_path / "team"
    folder.mkdir(mode=0o750)
    key = folder / "evtsync-cache-key"
    key.write_text(KEY_TEXT)
    os.chmod(key, 0o640)
    os.chown(key, OTHER_UID, -1)
    os.chown(folder, OTHER_UID, -1)
    monkeypatch.setenv(KEY_ENV, str(key))
    assert len(signing_key()) == 32
    key.chmod(0o644)  # readable by anyone: refused even for a team
    with pytest.raises(SigningKeyError, match="readable or writable by others"):
        signing_key()
