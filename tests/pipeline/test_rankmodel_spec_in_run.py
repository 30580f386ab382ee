"""`evtsync run --models-dir DIR` with a ``rankmodel.toml`` in DIR fits the rank model with that
specification (its sampler settings and priors), and the stage's result key holds the file's text, so
a changed prior is never served a fit made under another; without one, the shipped file is used."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from evtsync.evt.catalog import default_models_dir
from evtsync.evt.spec import RANK_SPEC_FILE
from evtsync.pipeline import stages
from evtsync.pipeline.options import RunOptions


def _run(**options: object) -> SimpleNamespace:
    return SimpleNamespace(options=RunOptions(**options))


def test_the_models_dir_rank_spec_is_used_and_keyed_by_its_text(tmp_path: Path) -> None:
    shipped = default_models_dir() / RANK_SPEC_FILE
    text = shipped.read_text(encoding="utf-8")
    assert "draws = 2000" in text  # the hand edit below changes exactly this line
    (tmp_path / RANK_SPEC_FILE).write_text(text.replace("draws = 2000", "draws = 321"), encoding="utf-8")
    settings = stages._rankmodel_settings(_run(models_dir=tmp_path))
    assert settings["spec"] == str(tmp_path / RANK_SPEC_FILE) and settings["draws"] == 321
    assert stages._rankmodel_settings(_run(models_dir=tmp_path, draws=50))["draws"] == 50  # the user's flag wins
    default = stages._rankmodel_settings(_run())
    assert default["spec"] == str(shipped) and default["draws"] == 2000
    # a folder of GEV models only: the shipped rank model
    assert stages._rankmodel_settings(_run(models_dir=tmp_path / "none"))["spec"] == str(shipped)
    keyed = stages._rankmodel_params(_run(models_dir=tmp_path))
    assert keyed["spec_text"] != stages._rankmodel_params(_run())["spec_text"]
