"""Print an inventory of PyTorch profiler (Kineto) trace files, with the standard library only.

Purpose
    Establish, from the files themselves, what a trace contains: top-level keys,
    distributedInfo, time units and timestamp types, event phases and categories, argument
    names per category, the collective-related events and their threads, whether any event
    names a process group, and how the CPU-side c10d op relates to the gloo work on a
    worker thread. Written for docs/trace-inventory-torch2.13-gloo.md (issue 8). Not part of
    the evtsync package; it must not depend on it.

Usage
    python3 tools/inventory_trace.py FILE [FILE ...]
        one inventory per file
    python3 tools/inventory_trace.py --ranks tests/data/gloo-torch2.13/rank-*.json.gz
        the same, then a cross-rank section: each gloo collective is assigned to a PG by the
        worker thread it ran on (gloo threads in creation order <-> pg_config order), and per
        rank and PG the ordered sequences are printed and compared index by index (names,
        Input Dims, end-time and duration spread; same host, so one clock).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import statistics
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

COLLECTIVE_PATTERN = re.compile(
    r"c10d|gloo|nccl|rccl|record_param_comms|all_?reduce|all_?gather|reduce_?scatter|"
    r"broadcast|barrier|all_?to_?all|send|recv|_functional",
    re.IGNORECASE,
)
PG_ARG_PATTERN = re.compile(r"process group|pg|group|collective|rank|seq", re.IGNORECASE)
MAX_LIST = 40


def load(path: Path) -> dict[str, Any]:
    """Read a .json or .json.gz trace."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def type_name(value: Any) -> str:
    """Short JSON type name of a value."""
    return type(value).__name__


def describe_numbers(values: list[Any]) -> str:
    """Types, min and max of a list of JSON numbers."""
    if not values:
        return "none"
    types = Counter(type_name(v) for v in values)
    nums = [v for v in values if isinstance(v, (int, float))]
    return f"types {dict(types)}, min {min(nums)!r}, max {max(nums)!r}"


def end(event: dict[str, Any]) -> float:
    """End time of a complete event."""
    return event["ts"] + event.get("dur", 0)


def is_collective(name: str) -> bool:
    """Whether an event name looks communication-related."""
    return bool(COLLECTIVE_PATTERN.search(name))


def thread_names(events: list[dict[str, Any]]) -> dict[Any, list[str]]:
    """tid -> the thread_name metadata values (there can be several per tid)."""
    names: dict[Any, list[str]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[e.get("tid")].append(e.get("args", {}).get("name"))
    return names


def main_thread(events: list[dict[str, Any]]) -> Any:
    """The thread holding the ProfilerStep annotations."""
    steps = Counter(e["tid"] for e in events if str(e.get("name", "")).startswith("ProfilerStep#"))
    return steps.most_common(1)[0][0] if steps else None


def short_dims(event: dict[str, Any]) -> str:
    """Input Dims without empty entries, as text."""
    dims = event.get("args", {}).get("Input Dims")
    if dims is None:
        return "-"
    return json.dumps([d for d in dims if d != []])


def inventory(path: Path) -> dict[str, Any]:
    """Print the inventory of one file; return what the cross-rank section needs."""
    trace = load(path)
    print(f"\n{'=' * 100}\n{path}\n{'=' * 100}")
    print("top-level keys (type):", ", ".join(f"{k} ({type_name(v)})" for k, v in trace.items()))
    for key in ("schemaVersion", "displayTimeUnit", "baseTimeNanoseconds", "traceName",
                "record_shapes", "host_name", "trace_id"):
        if key in trace:
            print(f"  {key}: {trace[key]!r}")
    if "deviceProperties" in trace:
        print(f"  deviceProperties: {len(trace['deviceProperties'])} entries;",
              json.dumps(trace["deviceProperties"])[:300])
    other = [k for k in trace if k not in {"schemaVersion", "displayTimeUnit", "baseTimeNanoseconds",
                                          "traceName", "record_shapes", "host_name", "trace_id",
                                          "deviceProperties", "distributedInfo", "traceEvents"}]
    for key in other:
        print(f"  {key}: {json.dumps(trace[key])[:300]}")
    dist_info = trace.get("distributedInfo")
    print("distributedInfo:")
    if dist_info is None:
        print("  absent")
    else:
        for key, value in dist_info.items():
            if key != "pg_config":
                print(f"  {key}: {value!r}")
        pg_config = dist_info.get("pg_config") or []
        print(f"  pg_config: {len(pg_config)} entries; entry keys {sorted({k for p in pg_config for k in p})}")
        for pg in pg_config[:MAX_LIST]:
            print(f"    {json.dumps(pg)}")
        if len(pg_config) > MAX_LIST:
            print(f"    ... {len(pg_config) - MAX_LIST} more")

    events = trace.get("traceEvents", [])
    print(f"traceEvents: {len(events)} events")
    print("  event keys:", dict(Counter(k for e in events for k in e)))
    print("  ph:", dict(Counter(e.get("ph") for e in events)))
    print("  ts:", describe_numbers([e["ts"] for e in events if "ts" in e]))
    print("  dur:", describe_numbers([e["dur"] for e in events if "dur" in e]))
    print("  pid types:", dict(Counter(type_name(e.get("pid")) for e in events)),
          " tid types:", dict(Counter(type_name(e.get("tid")) for e in events)))
    if "baseTimeNanoseconds" in trace:
        first = min(e["ts"] for e in events if e.get("ph") == "X")
        print(f"  first X ts + baseTimeNanoseconds/1000 = {first + trace['baseTimeNanoseconds'] / 1000:.1f}"
              " µs since the epoch")

    by_cat: dict[Any, list[dict[str, Any]]] = defaultdict(list)
    for e in events:
        by_cat[(e.get("ph"), e.get("cat"))].append(e)
    print("(ph, cat): count; argument names (count)")
    for (ph, cat), evs in sorted(by_cat.items(), key=lambda kv: -len(kv[1])):
        args = Counter(a for e in evs for a in e.get("args", {}))
        print(f"  ({ph}, {cat}): {len(evs)}; args {dict(args)}")
        if ph in ("M", "i") or cat in ("Trace", None):
            for name, count in Counter(e.get("name") for e in evs).items():
                print(f"      name {name!r} x{count}")

    names = thread_names(events)
    print("threads (tid: names; events per category):")
    per_thread = defaultdict(Counter)
    for e in events:
        if e.get("ph") == "X":
            per_thread[e.get("tid")][e.get("cat")] += 1
    for tid in sorted(per_thread, key=str):
        print(f"  {tid}: {names.get(tid, ['(no thread_name)'])}; {dict(per_thread[tid])}")

    pg_args = Counter(a for e in events for a in e.get("args", {}) if PG_ARG_PATTERN.search(a))
    print("argument names anywhere that mention group/pg/collective/rank/seq:", dict(pg_args) or "none")

    collectives = [e for e in events if e.get("ph") == "X" and is_collective(str(e.get("name", "")))]
    print("collective-related X events (name, cat): count, threads, argument names")
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for e in collectives:
        grouped[(e["name"], e.get("cat"))].append(e)
    for (name, cat), evs in sorted(grouped.items()):
        durs = [e.get("dur", 0) for e in evs]
        print(f"  {name!r} [{cat}]: {len(evs)}; tids {dict(Counter(e['tid'] for e in evs))}; "
              f"dur median {statistics.median(durs):.1f} max {max(durs):.1f}")
        print(f"      args {sorted({a for e in evs for a in e.get('args', {})})}")
        sample = evs[0].get("args", {})
        print(f"      first: {json.dumps({k: v for k, v in sample.items() if k != 'Ev Idx'})[:400]}")

    main_tid = main_thread(events)
    c10d_ops = sorted((e for e in collectives if e["tid"] == main_tid and e.get("cat") == "cpu_op"
                       and e["name"].startswith("c10d::")), key=lambda e: e["ts"])
    gloo_ops = sorted((e for e in collectives if e["tid"] != main_tid and e["name"].startswith("gloo:")),
                      key=lambda e: e["ts"])
    if main_tid is not None and (c10d_ops or gloo_ops):
        relate(events, main_tid, c10d_ops, gloo_ops)
    rank = dist_info.get("rank") if dist_info else None
    return {"rank": rank, "dist_info": dist_info, "c10d": c10d_ops, "gloo": gloo_ops,
            "main_tid": main_tid, "events": events}


def enclosing(events: list[dict[str, Any]], tid: Any, inner: dict[str, Any]) -> list[str]:
    """Names of the X events on thread tid whose interval contains inner's, outermost first."""
    found = [e for e in events if e.get("ph") == "X" and e.get("tid") == tid and e is not inner
             and e["ts"] <= inner["ts"] and end(e) >= end(inner)]
    found.sort(key=lambda e: (e["ts"], -e.get("dur", 0)))
    return [e["name"] for e in found]


def pair_c10d_with_gloo(c10d_ops: list[dict[str, Any]], gloo_ops: list[dict[str, Any]]
                        ) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    """Pair each c10d op with the first unused gloo event that starts at or after it."""
    pairs, used = [], set()
    for op in c10d_ops:
        match = None
        for i, g in enumerate(gloo_ops):
            if i not in used and g["ts"] >= op["ts"]:
                match = g
                used.add(i)
                break
        pairs.append((op, match))
    return pairs


def relate(events: list[dict[str, Any]], main_tid: Any, c10d_ops: list[dict[str, Any]],
           gloo_ops: list[dict[str, Any]]) -> None:
    """Print how main-thread c10d ops relate to gloo worker-thread annotations."""
    print(f"c10d ops on the main thread {main_tid} and gloo annotations on worker threads, in time order:")
    print("  (start gap = gloo.ts - c10d.ts, end gap = gloo end - c10d end, resume = start of the next"
          " main-thread event after the c10d op - gloo end, µs; nested = gloo inside c10d)")
    print(f"  {'#':>3} {'c10d op':28} {'dims':22} {'c10d dur':>9} {'gloo event':17} {'tid':>7} "
          f"{'gloo dur':>9} {'start gap':>9} {'end gap':>9} {'resume':>7} nested  main-thread parents")
    main_starts = sorted(e["ts"] for e in events if e.get("ph") == "X" and e.get("tid") == main_tid)
    resumes = []
    for i, (op, g) in enumerate(pair_c10d_with_gloo(c10d_ops, gloo_ops)):
        parents = [n for n in enclosing(events, main_tid, op) if not n.startswith("ProfilerStep#")]
        if g is None:
            print(f"  {i:>3} {op['name']:28} {short_dims(op):22} {op['dur']:9.1f}  (no gloo event)")
            continue
        nested = g["ts"] >= op["ts"] and end(g) <= end(op)
        resume = next((t for t in main_starts if t >= end(op)), float("nan")) - end(g)
        resumes.append(resume)
        print(f"  {i:>3} {op['name']:28} {short_dims(op)[:22]:22} {op['dur']:9.1f} {g['name']:17} "
              f"{g['tid']:>7} {g['dur']:9.1f} {g['ts'] - op['ts']:9.1f} {end(g) - end(op):9.1f} "
              f"{resume:7.1f} {'yes' if nested else 'no ':3}     {' > '.join(parents)[:60]}")
    print(f"  {len(c10d_ops)} c10d ops, {len(gloo_ops)} gloo events")
    if resumes:
        print(f"  main thread resumes after gloo end by: min {min(resumes):.1f}, median "
              f"{statistics.median(resumes):.1f}, max {max(resumes):.1f} µs")
    worker_ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op" and e["tid"] != main_tid]
    nesting = Counter((e["name"], " > ".join(enclosing(events, e["tid"], e)) or "(top level)")
                      for e in worker_ops)
    print(f"cpu_op events on worker threads: {len(worker_ops)}; (name, enclosing events on its thread):")
    for (name, parents), count in sorted(nesting.items()):
        print(f"  {count} x {name} in {parents}")


def gloo_threads_by_pg(result: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    """tid -> pg_config entry, by creation order: gloo worker tids ascending, in equal chunks.

    Each ProcessGroupGloo starts its own worker threads (named pt_gloo_runloop in torch 2.13;
    without that name, the threads that carry gloo:* events are used) when it is created, and pg_config lists the groups this rank belongs to in creation order; so the
    i-th chunk of ascending tids belongs to the i-th entry. This is an inference from thread
    ids, not a field of the trace: the caller validates it across ranks.
    """
    names = thread_names(result["events"])
    tids = sorted(t for t, ns in names.items() if any("pt_gloo_runloop" in str(n) for n in ns))
    if not tids:  # older torch names them differently (a 2024 trace: pt_main_thread)
        tids = sorted({g["tid"] for g in result["gloo"]})
    pg_config = (result["dist_info"] or {}).get("pg_config") or []
    if not pg_config or not tids or len(tids) % len(pg_config):
        print(f"  rank {result['rank']}: {len(tids)} gloo threads, {len(pg_config)} pg_config entries: "
              "cannot chunk")
        return {}
    per_pg = len(tids) // len(pg_config)
    return {tid: pg_config[i // per_pg] for i, tid in enumerate(tids)}


def cross_rank(results: list[dict[str, Any]]) -> None:
    """Assign gloo events to PGs by worker thread; compare the per-PG sequences across ranks."""
    print(f"\n{'=' * 100}\ncross-rank: gloo events assigned to PGs by worker thread, "
          f"compared index by index across member ranks (same host clock)\n{'=' * 100}")
    pg_by_name: dict[str, dict[str, Any]] = {}
    for r in results:
        for pg in (r["dist_info"] or {}).get("pg_config", []):
            pg_by_name[pg["pg_name"]] = pg
    print("process groups found in pg_config (union over ranks):")
    for name, pg in sorted(pg_by_name.items()):
        print(f"  pg_name {name!r} desc {pg['pg_desc']!r} ranks {pg['ranks']}")
    print("ranks present:", sorted(r["rank"] for r in results))

    sequences: dict[str, dict[int, list[dict[str, Any]]]] = defaultdict(dict)
    print("worker threads -> PG (ascending tids in equal chunks, in pg_config order):")
    for r in sorted(results, key=lambda x: x["rank"]):
        thread_pg = gloo_threads_by_pg(r)
        chunks: dict[str, list[Any]] = defaultdict(list)
        for tid, pg in thread_pg.items():
            chunks[pg["pg_desc"]].append(tid)
        print(f"  rank {r['rank']}: " + "; ".join(f"{d} {t}" for d, t in chunks.items()))
        c10d_of = {id(g): op for op, g in pair_c10d_with_gloo(r["c10d"], r["gloo"]) if g is not None}
        per_pg: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for g in r["gloo"]:
            pg = thread_pg.get(g["tid"])
            desc = pg["pg_desc"] if pg else "UNASSIGNED"
            per_pg[desc].append({"gloo": g, "c10d": c10d_of.get(id(g))})
        for desc, seq in per_pg.items():
            sequences[desc][r["rank"]] = seq

    main_seqs = {r["rank"]: [(op["name"], short_dims(op)) for op in r["c10d"]] for r in results}
    print(f"main-thread c10d op sequences (name, Input Dims): lengths "
          f"{ {k: len(v) for k, v in sorted(main_seqs.items())} }; identical across ranks: "
          f"{len({tuple(v) for v in main_seqs.values()}) == 1}")
    print("worker thread used by consecutive collectives of one PG (per rank, PG):")
    for desc in sorted(sequences):
        for rank in sorted(sequences[desc]):
            tids = [s["gloo"]["tid"] for s in sequences[desc][rank]]
            alternating = all(a != b for a, b in zip(tids, tids[1:], strict=False))
            print(f"  rank {rank} {desc}: {len(set(tids))} threads, strictly alternating: {alternating}")
    print("per rank and PG: ordered collectives as (main-thread c10d op, its Input Dims) -> gloo event")
    for desc in sorted(sequences):
        for rank in sorted(sequences[desc]):
            seq = sequences[desc][rank]
            items = [f"{s['c10d']['name'] if s['c10d'] else '?'}{short_dims(s['c10d']) if s['c10d'] else ''}"
                     f"->{s['gloo']['name']}" for s in seq]
            print(f"  rank {rank} {desc}: {len(seq)} collectives")
            runs: list[list[Any]] = []
            for item in items:
                if runs and runs[-1][0] == item:
                    runs[-1][1] += 1
                else:
                    runs.append([item, 1])
            for item, count in runs:
                print(f"      {count} x {item}")

    print("agreement across member ranks, index by index (end = ts + dur of the gloo event, µs):")
    for desc in sorted(sequences):
        members = sequences[desc]
        lengths = {rank: len(seq) for rank, seq in members.items()}
        keys = {rank: [(s["gloo"]["name"], json.dumps(s["gloo"].get("args", {}).get("Input Dims")),
                        s["c10d"]["name"] if s["c10d"] else None) for s in seq]
                for rank, seq in members.items()}
        same = len({tuple(k) for k in keys.values()}) == 1
        n = min(lengths.values())
        end_spread = [max(end(members[r][i]["gloo"]) for r in members)
                      - min(end(members[r][i]["gloo"]) for r in members) for i in range(n)]
        dur_spread = [max(members[r][i]["gloo"]["dur"] for r in members)
                      - min(members[r][i]["gloo"]["dur"] for r in members) for i in range(n)]
        print(f"  {desc}: lengths {lengths}; identical (gloo name, Input Dims, c10d op) sequences: {same}")
        if n and len(members) > 1:
            print(f"      end-time spread across members: median {statistics.median(end_spread):.1f}, "
                  f"max {max(end_spread):.1f}; duration spread (max d - min d): median "
                  f"{statistics.median(dur_spread):.1f}, max {max(dur_spread):.1f}")
            print("      end spread per index:", " ".join(f"{v:.0f}" for v in end_spread))
            print("      dur spread per index:", " ".join(f"{v:.0f}" for v in dur_spread))
    print("control: same index, wrong partner (TP/FSDP swapped or partner from another PG) — end-time spread")
    for desc in sorted(sequences):
        members = sequences[desc]
        if len(members) < 2:
            continue
        others = [r for r in results if r["rank"] not in members]
        for rank in sorted(members):
            for other in others:
                other_seq = [s for d, m in sequences.items() if d != desc for rr, seq in m.items()
                             if rr == other["rank"] for s in seq]
                mine = members[rank]
                same_kind = [s for s in other_seq if s["gloo"]["name"] == mine[0]["gloo"]["name"]]
                if not same_kind:
                    continue
                gaps = [min(abs(end(m["gloo"]) - end(o["gloo"])) for o in same_kind) for m in mine]
                print(f"  {desc} rank {rank} vs nearest same-name gloo event on non-member rank "
                      f"{other['rank']}: median {statistics.median(gaps):.1f} µs")
            break


def main() -> int:
    """Parse arguments, print one inventory per file, then the cross-rank section if asked."""
    parser = argparse.ArgumentParser(description="Inventory of Kineto trace files (stdlib only).")
    parser.add_argument("files", nargs="+", type=Path)
    parser.add_argument("--ranks", action="store_true",
                        help="the files are ranks of one job on one host: add the cross-rank section")
    args = parser.parse_args()
    results = [inventory(path) for path in args.files]
    if args.ranks:
        cross_rank(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
