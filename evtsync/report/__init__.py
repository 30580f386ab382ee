"""Figures and reports (HTML / Markdown) built from evtsync's tables and fits."""
