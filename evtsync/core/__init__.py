"""Infrastructure that knows no stage: defaults, errors, table I/O, the parallel
map, progress, units, vocabularies, intervals, reference numbers, display.

Modules here import only the standard library, NumPy, pandas and each other;
any layer may import them (tests/project/test_architecture.py checks it).
"""
