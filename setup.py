"""Build hook: ship the repository's top-level ``models/`` inside the wheel as ``evtsync/models/``.

Everything else about the package is declared in pyproject.toml. ``models/`` stays at the top
level of the repository (the product's layout); :mod:`evtsync.evt.catalog` finds the copy in
an installed wheel through ``importlib.resources`` and the original in a checkout.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithModels(build_py):
    """``build_py`` that also copies ``models/*.toml`` into the built package."""

    def run(self) -> None:
        super().run()
        dest = Path(self.build_lib) / "evtsync" / "models"
        dest.mkdir(parents=True, exist_ok=True)
        for spec in sorted((ROOT / "models").glob("*.toml")):
            shutil.copy2(spec, dest / spec.name)


setup(cmdclass={"build_py": BuildPyWithModels})
