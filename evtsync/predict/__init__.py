"""Predictions from a fit: tau(n), B* and predicted vs measured (tables.py,
methodology §7), Hockney's model and the topologies (hockney.py, §8), the
former names of the tables (posterior.py).
"""
