"""The model catalog: the specifications (``models/*.toml``) shipped with the package.

``models/`` lives at the top level of the repository (the product's layout). A built wheel
carries it as package data at ``evtsync/models/`` (``setup.py`` copies it there), read with
:mod:`importlib.resources`; a clone or an editable install reads the repository's folder
beside the package. ``--models-dir`` (``models_dir=``) overrides both.

    from evtsync.evt.catalog import list_models, resolve_model
    [m.name for m in list_models()]            # ['frechet', 'gev', 'gev-hier-gpu-precision', ...]
    path = resolve_model("gev-hier-gpu-precision")   # a name, or a path to any .toml file
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from evtsync.core.errors import InputError, ModelSpecError

#: Folder of the packaged specifications inside the installed package.
PACKAGE_FOLDER = "models"


@dataclass(frozen=True)
class ModelEntry:
    """One specification of a models folder: its name, file, family and description."""

    name: str
    path: Path
    family: str
    description: str


def default_models_dir() -> Path:
    """The folder of the shipped specifications: the wheel's package data, else the checkout's.

    Raises ``InputError`` when neither exists (a broken installation).
    """
    packaged = resources.files("evtsync") / PACKAGE_FOLDER
    if packaged.is_dir():
        return Path(str(packaged))
    checkout = Path(str(resources.files("evtsync"))).parent / PACKAGE_FOLDER
    if checkout.is_dir():
        return checkout
    raise InputError(f"no model specifications found: neither {packaged} (installed package) nor "
                     f"{checkout} (source checkout) exists; reinstall evtsync or pass --models-dir DIR")


def models_dir(folder: str | os.PathLike[str] | None = None) -> Path:
    """``folder`` when given (checked to be a folder), else :func:`default_models_dir`."""
    if folder is None:
        return default_models_dir()
    path = Path(folder)
    if not path.is_dir():
        raise InputError(f"--models-dir {path}: no such folder")
    return path


def model_paths(folder: str | os.PathLike[str] | None = None) -> list[Path]:
    """The GEV model specifications of a models folder (its ``*.toml`` files), sorted by name: the
    rank model's specification (``family = "rankmodel"``, :func:`evtsync.evt.spec.load_rank_spec`)
    is not one of them; :func:`list_models` lists it too."""
    from evtsync.core.defaults import RANK_FAMILY

    return [p for p in _toml_paths(folder) if _read(p).get("family") != RANK_FAMILY]


def _toml_paths(folder: str | os.PathLike[str] | None) -> list[Path]:
    return sorted(models_dir(folder).glob("*.toml"))


def _read(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ModelSpecError(f"{path}: not a readable TOML file: {exc}") from exc


def list_models(folder: str | os.PathLike[str] | None = None) -> list[ModelEntry]:
    """Every specification of a models folder with its family and description (not validated),
    the rank model's (family ``rankmodel``) among them.

    Parameters
    ----------
    folder : path or None, default None
        The models folder; None: :func:`default_models_dir`.

    Returns
    -------
    list of ModelEntry
        Name, file, family and description of each ``*.toml`` file.

    Raises
    ------
    ModelSpecError
        A file that is not readable TOML.
    InputError
        ``folder`` is not a folder.
    """
    entries = []
    for path in _toml_paths(folder):
        raw = _read(path)
        entries.append(ModelEntry(name=str(raw.get("name", path.stem)), path=path,
                                  family=str(raw.get("family", "?")),
                                  description=str(raw.get("description", ""))))
    return entries


def resolve_model(name_or_path: str | os.PathLike[str], folder: str | os.PathLike[str] | None = None) -> Path:
    """The specification file of ``name_or_path``: an existing file, or a name in the models folder.

    Parameters
    ----------
    name_or_path : str or path
        A specification file, or a model's name: the file's stem (``gev-hier-gpu-precision``)
        or its ``name`` key.
    folder : path or None, default None
        The models folder to look in; None: :func:`default_models_dir`.

    Returns
    -------
    pathlib.Path
        The specification file.

    Raises
    ------
    InputError
        An unknown name (the message lists the names available), or ``folder`` is not a folder.
    """
    text = str(name_or_path)
    path = Path(text)
    if path.is_file():
        return path
    if text.endswith(".toml") or os.sep in text:
        raise InputError(f"--model {text}: no such model specification file")
    entries = list_models(folder)
    for entry in entries:
        if text in (entry.path.stem, entry.name):
            return entry.path
    names = ", ".join(e.path.stem for e in entries) or "none"
    raise InputError(f"--model {text}: no such model in {models_dir(folder)} (available: {names})")
