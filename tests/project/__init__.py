"""Checks of the repository as a whole: layering, docs, API reference, types."""
