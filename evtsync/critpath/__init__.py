"""Critical-path attribution (methodology §4): why the straggler of a collective was late.

- :mod:`~evtsync.critpath.dag`: the per-rank event DAG (CPU exclusive slices, stream,
  cross-stream, launch and synchronization edges, critical parents);
- :mod:`~evtsync.critpath.walk`: the walk back to the previous collective, the cross-rank
  keys and the tiling of a path into own and wait segments;
- :mod:`~evtsync.critpath.tasks`: the per-rank tasks (straggler sides, fastest sides) and
  their combination into each collective's time accounting;
- :mod:`~evtsync.critpath.categories`: the extendable table of cause categories;
- :mod:`~evtsync.critpath.attribution`: :func:`attribute`, the whole analysis as tables;
- :mod:`~evtsync.critpath.validate`: the path-vs-tax regression (methodology §4 a);
- :mod:`~evtsync.critpath.inject`: delay injection into a copy of a trace set (methodology §4 b);
- :mod:`~evtsync.critpath.replay`: what-if without stragglers, a replay of every rank's program with
  the straggler ops at their typical duration (docs/critical-path.md §8).
"""

from __future__ import annotations

from evtsync.critpath.attribution import AttributionResult, attribute, build_dags, summarize
from evtsync.critpath.categories import add_pattern, classify_gpu, patterns, reset_patterns
from evtsync.critpath.dag import RankDAG, Vocabulary, build_rank_dag
from evtsync.critpath.inject import InjectResult, inject_delay, inject_sweep
from evtsync.critpath.replay import FirstScreen, WhatIfResult, first_screen, what_if
from evtsync.critpath.validate import fit_line, regress_path_on_tax

__all__ = ["AttributionResult", "FirstScreen", "InjectResult", "RankDAG", "Vocabulary", "WhatIfResult", "add_pattern",
           "attribute", "build_dags", "build_rank_dag", "classify_gpu", "first_screen", "fit_line", "inject_delay",
           "inject_sweep", "patterns", "regress_path_on_tax", "reset_patterns", "summarize", "what_if"]
