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
    found: list[pd.DataFrame] = []
    missing: dict[str, int] = {}
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


@dataclass(frozen=True)
class PeerCause:
    """Where the blame of a point-to-point wait goes (docs/critical-path.md §7): the peer rank that
    arrived late at the transfer and its main thread's largest (kind, name) between the waiter's
    arrival and the peer's (``extra_us`` of it in that interval), after ``hops`` transfers; or, with
    ``rank`` None, why the chain stops (``reason``)."""

    rank: int | None
    cause: str | None = None
    category: str | None = None
    extra_us: float = 0.0
    hops: int = 0
    reason: str | None = None


#: the most point-to-point hops followed from one wait (a pipeline of N stages needs N - 1)
MAX_P2P_HOPS = 64


def peer_cause(rank: int, at_ns: int, slices: dict[int, pd.DataFrame], by_rank: dict[int, pd.DataFrame],
               pairs: list[Pair], kinds: tuple[str, ...]) -> PeerCause:
    """Follow a point-to-point wait of ``rank`` (its slice starting at ``at_ns``) to the peer of its
    transfer: the peer's largest (kind, name) on its main thread (``slices``: per rank its tiled
    slices, kind as an index into ``kinds``) from this rank's arrival at the transfer to the peer's;
    where that is itself a point-to-point wait, on to its peer (at most :data:`MAX_P2P_HOPS`). Stops
    with a reason where the transfer is not found or not paired, or the peer arrived first."""
    partner: dict[tuple[int, int], tuple[int, int]] = {}
    for p in pairs:
        partner[(p.src, p.send_row)] = (p.dst, p.recv_row)
        partner[(p.dst, p.recv_row)] = (p.src, p.send_row)
    wait = kinds.index("collective_wait")
    hops, seen = 0, set()
    found: PeerCause | None = None
    while hops < MAX_P2P_HOPS:
        tr = by_rank.get(rank)
        hit = np.flatnonzero((tr["start_ns"].to_numpy(np.int64) <= at_ns) & (tr["end_ns"].to_numpy(np.int64) > at_ns)) \
            if tr is not None and len(tr) else np.zeros(0, np.int64)
        if not hit.size:
            return found or PeerCause(None, hops=hops, reason=f"no point-to-point transfer of rank {rank} holds the "
                                                                   "wait")
        assert tr is not None  # a transfer was found in it
        i = int(hit[0])
        if (rank, i) in seen:
            return found or PeerCause(None, hops=hops, reason="the transfers wait for each other (a cycle)")
        seen.add((rank, i))
        other = partner.get((rank, i))
        if other is None:
            return found or PeerCause(None, hops=hops, reason=f"its transfer on rank {rank} is not paired with the "
                                                                  "peer's (counted in the what-if's not_used)")
        peer, j = other
        mine, theirs = int(tr["arrival_ns"].iat[i]), int(by_rank[peer]["arrival_ns"].iat[j])
        hops += 1
        if theirs <= mine:
            return found or PeerCause(None, hops=hops, reason=(
                f"rank {peer} arrived at the transfer {(mine - theirs) / 1000.0:,.0f} µs before rank {rank}: the "
                "wait is the transfer itself, not the peer's lateness"))
        sl = slices[peer]
        s = np.maximum(sl["start_ns"].to_numpy(np.int64), mine)
        e = np.minimum(sl["end_ns"].to_numpy(np.int64), theirs)
        keep = e > s
        if not keep.any():
            return found or PeerCause(None, hops=hops, reason=f"rank {peer} has no main-thread time before it arrived")
        part = pd.DataFrame({"kind": sl["kind"].to_numpy()[keep], "name": sl["name"].to_numpy()[keep],
                             "start": s[keep], "dur": (e - s)[keep]})
        totals = part.groupby(["kind", "name"], sort=False)["dur"].sum()
        (kind, name), total = totals.idxmax(), int(totals.max())
        found = PeerCause(peer, str(name), kinds[int(kind)], total / 1000.0, hops)
        if int(kind) != wait or str(name).split(" ", 1)[-1] not in ("send", "recv"):
            return found
        # the peer itself waited in a point-to-point transfer: follow it from its longest piece
        mine_part = part[(part["kind"] == kind) & (part["name"] == name)]
        rank, at_ns = peer, int(mine_part["start"].iat[int(np.argmax(mine_part["dur"].to_numpy()))])
    return found or PeerCause(None, hops=hops, reason=f"more than {MAX_P2P_HOPS} point-to-point hops")
