"""Point-to-point transfers (gloo ``send`` / ``recv``): each op's peer, the transfers of a main
thread, and their pairing across ranks (docs/critical-path.md §7 and §8, assumption 3; issue 46).

One home for the replay (:mod:`evtsync.critpath.replay`, pairs as edges) and attribution
(:func:`peer_cause`, the blame of a point-to-point wait routed to the peer's cause).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from evtsync.trace.p2p import read_p2p_peers
from evtsync.trace.tables import C10D_P2P_NAMES, GLOO_P2P_NAMES
from evtsync.trace.traceset import TraceSet

#: a rank's point-to-point transfers: window, kind (send / recv), peer, arrival_ns (the c10d::send /
#: c10d::recv_ op's start), start_ns and end_ns (the gloo:send / gloo:recv event)
P2P_COLUMNS = ["window", "kind", "peer", "arrival_ns", "start_ns", "end_ns"]


def transfers(main: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, int]]:
    """The point-to-point transfers of one main thread (P2P_COLUMNS): each ``c10d::send`` /
    ``c10d::recv_`` op with its peer (``peer`` column, :func:`peer_column`) and the ``gloo:send`` /
    ``gloo:recv`` event that runs it — the first one on the thread starting at or after the op's start
    and before the next op (docs/critical-path.md §8, assumption 3); the ops not made transfers, by
    reason."""
    names = main["name"].astype(str).to_numpy()
    is_op = np.isin(names, list(C10D_P2P_NAMES))
    not_used: dict[str, int] = {}
    if not is_op.any():
        return pd.DataFrame(columns=P2P_COLUMNS), not_used
    win = main["window"].to_numpy(np.int64) if "window" in main else np.zeros(len(main), np.int64)
    peer = main["peer"].to_numpy(np.int64) if "peer" in main else np.full(len(main), -1, np.int64)
    ts, end = main["ts_ns"].to_numpy(np.int64), main["end_ns"].to_numpy(np.int64)
    rows = []
    for w in np.unique(win[is_op]).tolist():
        o = np.flatnonzero(is_op & (win == w))
        o = o[np.argsort(ts[o], kind="stable")]
        g = np.flatnonzero(np.isin(names, list(GLOO_P2P_NAMES)) & (win == w))
        g = g[np.argsort(ts[g], kind="stable")]
        g_ts = ts[g]
        for n, i in enumerate(o.tolist()):
            nxt = ts[o[n + 1]] if n + 1 < len(o) else np.iinfo(np.int64).max
            j = int(np.searchsorted(g_ts, ts[i], side="left"))
            if j >= len(g) or g_ts[j] >= nxt:
                reason = "point-to-point ops without their gloo:send / gloo:recv event"
                not_used[reason] = not_used.get(reason, 0) + 1
                continue
            if peer[i] < 0:
                reason = "point-to-point ops without a peer rank"
                not_used[reason] = not_used.get(reason, 0) + 1
                continue
            rows.append((int(w), "send" if names[i] == "c10d::send" else "recv", int(peer[i]), int(ts[i]),
                         int(ts[g[j]]), int(end[g[j]])))
    return pd.DataFrame(rows, columns=P2P_COLUMNS), not_used


def peer_column(ops: pd.DataFrame, traces: TraceSet, rank: int) -> tuple[pd.DataFrame, dict[str, int]]:
    """``ops`` (one rank's CPU ops) with a ``peer`` column: the peer rank of each point-to-point op
    read from the rank's files (:func:`evtsync.trace.p2p.read_p2p_peers`, matched by window and
    ``External id``), -1 elsewhere; the files are read only when the rank has such ops."""
    names = ops["name"].astype(str).to_numpy()
    is_op = np.isin(names, list(C10D_P2P_NAMES))
    if not is_op.any():
        return ops, {}
    files = traces.ranks[traces.ranks["rank"].to_numpy() == rank]
    found, missing = [], {}
    for path, w in zip(files["path"], files["window"] if "window" in files else [0] * len(files), strict=True):
        got, miss = read_p2p_peers(path)
        found.append(got.assign(window=int(w)))
        for k, v in miss.items():
            missing[k] = missing.get(k, 0) + v
    peers = pd.concat(found, ignore_index=True).drop_duplicates(["window", "external_id"]) if found else None
    win = ops["window"].to_numpy(np.int64) if "window" in ops else np.zeros(len(ops), np.int64)
    lookup = {} if peers is None else {(int(w), int(e)): int(p) for w, e, p in
                                       zip(peers["window"], peers["external_id"], peers["peer"], strict=True)}
    ext = ops["external_id"].to_numpy(np.int64)
    col = np.array([lookup.get((int(w), int(e)), -1) if hit else -1 for w, e, hit in
                    zip(win, ext, is_op, strict=True)], dtype=np.int64)
    return ops.assign(peer=col), missing


@dataclass(frozen=True)
class Pair:
    """One transfer paired across ranks: rows of the sender's and the receiver's transfers."""

    src: int
    dst: int
    window: int
    k: int
    send_row: int
    recv_row: int


def pair_transfers(by_rank: dict[int, pd.DataFrame | None], counts: list[dict[str, int]] | None = None
                   ) -> tuple[list[Pair], dict[str, int]]:
    """Per window and (src, dst), the k-th send of src to dst with the k-th recv on dst from src
    (in arrival order); the transfers left unpaired, by reason, added to ``counts`` (each rank's
    ops not made transfers)."""
    not_used: dict[str, int] = {}

    def count(reason: str, n: int) -> None:
        if n:
            not_used[reason] = not_used.get(reason, 0) + n

    for c in counts or []:
        for k, v in c.items():
            count(k, v)
    pairs: list[Pair] = []
    # (window, src, dst) -> rows of the sends on src and of the recvs on dst
    ends: dict[tuple[int, int, int], tuple[list[int], list[int]]] = {}
    for rank, tr in by_rank.items():
        if tr is None or tr.empty:
            continue
        kind, peer = tr["kind"].to_numpy(), tr["peer"].to_numpy(np.int64)
        win, order = tr["window"].to_numpy(np.int64), np.argsort(tr["arrival_ns"].to_numpy(np.int64), kind="stable")
        for i in order.tolist():
            p = int(peer[i])
            if p not in by_rank or p == rank:
                count("point-to-point transfers whose peer rank is not in the traces", 1)
                continue
            send = kind[i] == "send"
            key = (int(win[i]), rank, p) if send else (int(win[i]), p, rank)
            ends.setdefault(key, ([], []))[0 if send else 1].append(i)
    for (w, src, dst), (sends, recvs) in sorted(ends.items()):
        n = min(len(sends), len(recvs))
        count("point-to-point sends without a matching recv on the peer (more sends than recvs)", len(sends) - n)
        count("point-to-point recvs without a matching send on the peer (more recvs than sends)", len(recvs) - n)
        pairs.extend(Pair(src, dst, w, k, sends[k], recvs[k]) for k in range(n))
    return pairs, not_used
