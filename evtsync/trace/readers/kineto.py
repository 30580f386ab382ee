"""PyTorch profiler (Kineto) JSON traces: one file per rank (``.json``, ``.json.gz``)."""

from __future__ import annotations

import os

from evtsync.trace.decode import decode_file, json_bytes_estimate
from evtsync.trace.tables import RankTables, build_rank_tables


class KinetoReader:
    """Kineto Chrome-trace JSON (``traceEvents``), decoded by :mod:`evtsync.trace.decode`."""

    name = "kineto"
    description = "PyTorch profiler (Kineto) JSON traces"
    suffixes: tuple[str, ...] = (".json", ".json.gz")
    produces = "ranks"

    def sniff(self, head: bytes) -> bool:
        """A JSON object or array (the more specific JSON sources are sniffed first)."""
        text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
        return text[:1] in (b"{", b"[")

    def read(self, path: str | os.PathLike[str], *, salvage: bool = False, rank: int | None = None,
             rank_from: str | None = None) -> RankTables:
        """Decode one trace file into its rank's tables (``rank_from`` does not apply: a trace
        names its rank in ``distributedInfo``, else its file name does)."""
        return build_rank_tables(decode_file(os.fspath(path), salvage=salvage), rank=rank)

    def cost(self, path: str | os.PathLike[str]) -> int:
        """The JSON bytes to decode (a gzip file's recorded inflated size)."""
        return json_bytes_estimate(os.fspath(path))


KINETO = KinetoReader()
