"""Shared matplotlib set-up: headless backend, consistent style, atomic saving."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from evtsync.tableio import atomic_path  # noqa: E402

FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def new_figure(width: float = 6.4, height: float = 4.2, **kwargs: Any) -> tuple[Any, Any]:
    """A figure and axes with the package's default size."""
    return plt.subplots(figsize=(width, height), **kwargs)


def save_figure(fig: Any, path: str | os.PathLike[str], dpi: int = 130) -> Path:
    """Save a figure atomically (format from the extension) and close it."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in FIGURE_SUFFIXES:
        from evtsync.errors import InputError

        raise InputError(f"{path}: figure name must end in {', '.join(FIGURE_SUFFIXES)}")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=suffix[1:], dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return path
