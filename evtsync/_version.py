"""The package version, in one place (pyproject.toml reads it; import-free)."""

__version__ = "0.1.0"
