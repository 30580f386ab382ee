"""The run folder's contract: what a run folder holds and how to read it, for every reader.

The pipeline writes a run folder; the report, ``evtsync diff`` and the CLI read one. All of
them go through this package, which imports neither the pipeline nor the report:

- :mod:`~evtsync.runfolder.layout` — where each stage's outputs live, the manifest and queries on
  it (status, missing ranks, failed workloads, the main model), the digest of the code a run was
  made with;
- :mod:`~evtsync.runfolder.summary` — the run's answer table (one row per GPU × precision), as
  the summary stage writes it and the report and ``evtsync run --json`` read it.
"""
