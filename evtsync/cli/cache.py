"""``evtsync cache``: where the per-rank trace cache and the run's stage result cache are, how big,
and pruning or clearing them."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "cache", help="the trace cache and the stage result cache: folders, sizes; --prune to their caps, --clear",
        description="Show the per-rank trace cache (Parquet tables of each trace read, reused while the trace "
        "is unchanged; files under 256 KiB, $EVTSYNC_CACHE_MIN_BYTES, are decoded each time instead): its folder ($EVTSYNC_CACHE_DIR, else $XDG_CACHE_HOME/evtsync, else ~/.cache/evtsync), "
        "entries and size. Every command that reads traces prunes it to its cap after reading "
        "($EVTSYNC_CACHE_MAX_BYTES, default 2 GiB), least recently used first. Also the stage result cache "
        "of `evtsync run` (its results/ folder: a stage's outputs, copied into another run folder whose stage "
        "has the same inputs, parameters and code), pruned to its cap after each store "
        "($EVTSYNC_RESULT_CACHE_MAX_BYTES, default 2 GiB), least recently used first.")
    parser.add_argument("--dir", metavar="DIR", default=None, help="the cache folder (default: as above)")
    parser.add_argument("--prune", action="store_true",
                        help="remove entries of other evtsync versions and stale temporaries, then the least "
                             "recently used beyond each cache's cap (or --max-size)")
    parser.add_argument("--max-size", metavar="SIZE", default=None,
                        help="cap of each cache for --prune, e.g. 500M or 4GiB (default $EVTSYNC_CACHE_MAX_BYTES "
                             "for the trace cache, $EVTSYNC_RESULT_CACHE_MAX_BYTES for the result cache, else "
                             "2 GiB each)")
    parser.add_argument("--clear", action="store_true",
                        help="remove every entry of both caches (folders they did not write are left alone)")
    parser.add_argument("--build-scanner", action="store_true",
                        help="build the compiled trace scanner of this evtsync version into the cache's scanner/ "
                             "folder now (otherwise built on the first large read; needs numba and a C compiler)")
    parser.add_argument("--json", action="store_true", help="print the state as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from evtsync.core.errors import InputError
    from evtsync.core.trust import key_file
    from evtsync.core.units import parse_bytes
    from evtsync.pipeline.resultcache import ResultCache, result_cache_max_bytes
    from evtsync.trace.cache import RankCache, cache_max_bytes
    from evtsync.trace.cache_dir import default_cache_dir

    if args.clear and (args.prune or args.max_size):
        raise InputError("give --clear or --prune [--max-size SIZE], not both")
    if args.max_size and not args.prune:
        raise InputError("--max-size is the cap of --prune: give --prune too")
    cache = RankCache(Path(args.dir) if args.dir else default_cache_dir())
    results = ResultCache(cache.folder / "results")
    scanner = None
    if args.build_scanner:
        from evtsync.trace import scan

        try:
            scanner = str(scan.build_ahead_of_time(cache.folder / "scanner"))
        except RuntimeError as exc:
            raise InputError(f"the trace scanner could not be built: {exc}") from None
    removed = freed = result_removed = result_freed = 0
    if args.clear:
        removed, freed = cache.prune(0, stale_after_s=0.0)
        result_removed, result_freed = results.prune(0, stale_after_s=0.0)
    elif args.prune:
        given = int(parse_bytes(args.max_size, "--max-size")) if args.max_size else None
        removed, freed = cache.prune(cache_max_bytes() if given is None else given)
        result_removed, result_freed = results.prune(result_cache_max_bytes() if given is None else given)
    entries = cache.entries()
    kept = results.entries()
    state: dict[str, Any] = {"folder": str(cache.folder), "entries": len(entries),
                             "bytes": sum(e.size for e in entries), "cap_bytes": cache_max_bytes(),
                             "removed_entries": removed, "freed_bytes": freed, "scanner_built": scanner,
                             "result_cache": {"folder": str(results.folder), "entries": len(kept),
                                              "bytes": sum(e.size for e in kept), "cap_bytes": result_cache_max_bytes(),
                                              "stages": sorted({e.stage for e in kept}),
                                              "removed_entries": result_removed, "freed_bytes": result_freed},
                             "signing_key": str(key_file())}
    if args.json:
        from evtsync.cli._common import emit_json

        emit_json(state)
        return 0
    print(f"trace cache {state['folder']}: {state['entries']} entr{'y' if state['entries'] == 1 else 'ies'}, "
          f"{state['bytes'] / 2**20:.1f} MiB (cap {state['cap_bytes'] / 2**30:.2f} GiB)")
    rc = state["result_cache"]
    print(f"result cache {rc['folder']}: {rc['entries']} entr{'y' if rc['entries'] == 1 else 'ies'}, "
          f"{rc['bytes'] / 2**20:.1f} MiB (cap {rc['cap_bytes'] / 2**30:.2f} GiB)"
          + (f"; stages {', '.join(rc['stages'])}" if rc["stages"] else ""))
    print(f"entries are used only when signed with the key {state['signing_key']} (docs/security.md)")
    if scanner:
        print(f"trace scanner built: {scanner}")
    if args.prune or args.clear:
        print(f"removed {removed} entr{'y' if removed == 1 else 'ies'} ({freed / 2**20:.1f} MiB)")
        print(f"removed {result_removed} result entr{'y' if result_removed == 1 else 'ies'} "
              f"({result_freed / 2**20:.1f} MiB)")
    return 0
