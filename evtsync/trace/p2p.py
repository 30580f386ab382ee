"""The peer of each point-to-point op of a Kineto trace (docs/critical-path.md §6, §8; issue 46).

Kineto records the arguments of ``c10d::send`` / ``c10d::recv_`` in ``args["Concrete Inputs"]``:
``["", "", "<peer rank>", "<tag>"]`` (torch 2.13, checked on tests/data/gloo-pipeline/pp3 with
``json``). The main reader (:mod:`evtsync.trace.decode`) reads no list-valued argument, for its
cost: here only the events of those names are decoded, found by their name in the file's bytes,
and only when the CPU-op table holds such ops (:func:`p2p_peers`). The op is matched to its row
of the CPU-op table by its ``External id`` (unique per file).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd

from evtsync.trace.decode import _Source
from evtsync.trace.tables import C10D_P2P_NAMES

log = logging.getLogger(__name__)

P2P_PEER_COLUMNS = ["external_id", "name", "peer"]
_DECODER = json.JSONDecoder()


def _text(path: Path) -> str:
    """The file's decompressed text, read through the trace decoder's source
    (:class:`evtsync.trace.decode._Source`: plain or gzip, multi-member gzip included); a truncated or
    corrupt gzip gives what it holds before the damage, with a warning."""
    source = _Source(path)
    try:
        parts = []
        while block := source.read(1 << 20):
            parts.append(block)
    finally:
        source.close()
    if source.eof_error:
        log.warning("%s: %s; point-to-point peers read from the data before it", path, source.eof_error)
    return b"".join(parts).decode("utf-8", errors="replace")


def read_p2p_peers(path: str | Path) -> tuple[pd.DataFrame, dict[str, int]]:
    """Per ``c10d::send`` / ``c10d::recv_`` event of one file: its ``External id``, name and peer
    rank (``Concrete Inputs[2]``), and the events whose peer could not be read, by reason."""
    text = _text(Path(path))
    rows: list[tuple[int, str, int]] = []
    missing: dict[str, int] = {}
    for name in sorted(C10D_P2P_NAMES):
        needle = f'"{name}"'
        at = text.find(needle)
        while at >= 0:
            start = text.rfind("{", 0, at)
            at_next = text.find(needle, at + len(needle))
            try:
                event, _ = _DECODER.raw_decode(text, start)
            except (ValueError, IndexError):
                event = None
            if isinstance(event, dict) and event.get("name") == name and event.get("ph") == "X":
                args = event.get("args")
                args = args if isinstance(args, dict) else {}
                try:
                    rows.append((int(args["External id"]), name, int(args["Concrete Inputs"][2])))
                except (TypeError, ValueError, IndexError, KeyError):
                    reason = "point-to-point ops without a peer rank in args['Concrete Inputs'][2]"
                    missing[reason] = missing.get(reason, 0) + 1
            at = at_next
    return pd.DataFrame(rows, columns=P2P_PEER_COLUMNS), missing
