"""Compute blocks between the collectives of a process group (cut.py) and the
pooled z-scores of their maxima (zscores.py), methodology §5.
"""
