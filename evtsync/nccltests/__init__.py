"""nccl-tests logs: parsing, statistics and verdicts, alpha/B fits, and a run planner.

A side entrance to evtsync (methodology §9): ``parse`` reads any nccl-tests output, ``stats``
applies the seed's stability rules (median, P95, cycle and iteration CV, CV <= 5%),
``alpha`` fits T(S) = p*alpha + q*S/B for the Hockney model of methodology §8, and ``plan``
writes and runs a balanced experiment matrix.
"""

from __future__ import annotations

from evtsync.nccltests.parse import ParsedLog, RunInfo, SkippedLine, busbw_factor, parse_log

__all__ = ["ParsedLog", "RunInfo", "SkippedLine", "busbw_factor", "parse_log"]
