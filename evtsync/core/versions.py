"""The installed versions of packages: a fit's provenance, the result cache's keys."""

from __future__ import annotations

from collections.abc import Sequence


def package_versions(names: Sequence[str]) -> dict[str, str]:
    """Python's version and each package's of ``names`` (``absent`` when not installed)."""
    import platform
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out
