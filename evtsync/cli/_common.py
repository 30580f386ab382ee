"""Argument groups shared by the commands that read traces."""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from evtsync.defaults import END_TOLERANCE_US, RANKS_PER_HOST
from evtsync.errors import InputError


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1 (``--ranks-per-host 0`` would divide by zero later)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def nonnegative_float(text: str) -> float:
    """argparse type: a finite number >= 0 (a tolerance, a delay)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def add_trace_arguments(parser: argparse.ArgumentParser, required: bool = True, jobs_help: str | None = None) -> None:
    """TRACES plus the reading and alignment options (``jobs_help``: what ``--jobs`` also sets)."""
    parser.add_argument("traces", nargs="+" if required else "*", metavar="TRACES",
                        help="trace files and/or folders of them, one file per rank: Kineto JSON (.json, "
                             ".json.gz), Nsight Systems SQLite exports (.sqlite), or NCCL Inspector logs "
                             "(.log, .jsonl, gzipped; one per process); recognised by content")
    group = parser.add_argument_group("reading and alignment")
    group.add_argument("--salvage", action="store_true",
                       help="keep the complete events of files cut mid-write (reports what was dropped)")
    group.add_argument("-j", "--jobs", type=int, default=None, metavar="N",
                       help=jobs_help or "local reader processes (default: one per core; in-process for "
                                         "small sets; 1: in this process)")
    group.add_argument("--pg", action="append", default=[], metavar="NAME=RANKS[@STREAM]",
                       help="declare a process group, e.g. tp=0-3@84 (repeatable); overrides the trace")
    group.add_argument("--allow-partial", action="store_true",
                       help="align PGs over the ranks present when member ranks have no trace")
    group.add_argument("--no-strict", dest="strict", action="store_false",
                       help="flag count/type mismatches instead of stopping")
    group.add_argument("--end-tolerance-us", type=nonnegative_float, default=END_TOLERANCE_US,
                       help=f"end-time agreement tolerance across ranks (default {END_TOLERANCE_US:g})")
    group.add_argument("--ranks-per-host", type=positive_int, default=RANKS_PER_HOST,
                       help="ranks sharing a clock when traces do not name their host "
                            f"(default {RANKS_PER_HOST})")
    group.add_argument("--rank-from", choices=("file", "order"), default="file",
                       help="where each file's rank comes from: file (distributedInfo.rank, else the "
                            "file name; default) or order (the i-th file is rank i); a TRACES entry "
                            "RANK=PATH gives one file's rank")
    group.add_argument("--comm-kernel", action="append", default=[], metavar="REGEX=KIND",
                       help="count kernels whose name matches REGEX as communication of kind KIND "
                            "(e.g. 'my_a2a=AllToAll'; repeatable), besides NCCL/RCCL, DeepEP, NVSHMEM "
                            "and all-to-all kernels")


def add_scale_arguments(parser: argparse.ArgumentParser) -> None:
    """Where reading runs (process pool, Dask) and the per-rank Parquet cache."""
    group = parser.add_argument_group("execution and cache (docs/scaling.md)")
    group.add_argument("--workers", type=int, default=None, metavar="N",
                       help="run on a local Dask cluster of N worker processes, started for "
                            "the run (needs evtsync[dask])")
    group.add_argument("--scheduler", metavar="ADDRESS", default=None,
                       help="run on the Dask cluster at ADDRESS (default: "
                            "$DASK_SCHEDULER_ADDRESS if set); 'local' starts a local cluster "
                            "of one worker per core. Without Dask options: a local process "
                            "pool (--jobs)")
    group.add_argument("--cache", metavar="DIR", default=None,
                       help="folder of cached per-rank tables (Parquet), reused when the trace "
                            "is unchanged (default: $EVTSYNC_CACHE_DIR, else ~/.cache/evtsync)")
    group.add_argument("--no-cache", action="store_true",
                       help="read every trace (and draw every report figure), neither using nor "
                            "writing the cache")


def reading_options(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of load_traces from parsed arguments (scale options if present)."""
    options: dict[str, Any] = {"salvage": args.salvage, "jobs": args.jobs,
                               "rank_from": args.rank_from, "comm_kernels": list(args.comm_kernel)}
    if hasattr(args, "scheduler"):
        from evtsync.trace.cache import default_cache_dir

        options["scheduler"] = args.scheduler
        options["workers"] = args.workers
        options["cache"] = None if args.no_cache else (args.cache or default_cache_dir())
    return options


def enter_dask(options: dict[str, Any], stack: contextlib.ExitStack) -> Any:
    """The Dask backend of a run (``--workers``, ``--scheduler`` or the environment), or None.

    The cluster stays open until ``stack`` closes, so that reading and the per-PG tasks
    that follow share it; ``options`` (from :func:`reading_options`) then read through its
    client.
    """
    from evtsync.parallel import optional_dask

    backend = stack.enter_context(optional_dask(options.get("scheduler"), options.get("workers"),
                                                options.get("jobs")))
    if backend is None:
        return None
    print(f"running on {backend.name}", file=sys.stderr)
    options.pop("scheduler", None)
    options.pop("workers", None)
    options.pop("jobs", None)
    options["client"] = backend.client
    return backend


def align_options(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of align_collectives from parsed arguments."""
    from evtsync.collectives import PGOverride

    return {
        "overrides": [PGOverride.parse(text) for text in args.pg],
        "end_tolerance_us": args.end_tolerance_us,
        "strict": args.strict,
        "allow_partial": args.allow_partial,
        "ranks_per_host": args.ranks_per_host,
    }


def sibling_path(path: str, tag: str) -> str:
    """``out/tax.parquet`` + ``ranks`` -> ``out/tax_ranks.parquet`` (same format)."""
    lower = path.lower()
    for suffix in (".csv.gz", ".parquet", ".pq", ".csv"):
        if lower.endswith(suffix):
            return f"{path[: -len(suffix)]}_{tag}{path[-len(suffix):]}"
    return f"{path}_{tag}"


def parse_topologies(values: list[str]) -> list[str]:
    """Topology names from repeated / comma-separated --topology values, validated."""
    from evtsync.hockney import get_topology

    names: list[str] = []
    for value in values:
        for part in value.split(","):
            if part.strip():
                name = get_topology(part).name
                if name not in names:
                    names.append(name)
    return names


def parse_domain_sizes(values: list[str]) -> list[int]:
    """Domain sizes n from --n values (each >= 2), in the order given."""
    sizes: list[int] = []
    for value in values:
        for part in value.split(","):
            if not part.strip():
                continue
            try:
                n = int(part)
            except ValueError as exc:
                raise InputError(f"--n: {part!r} is not an integer domain size") from exc
            if n < 2:
                raise InputError(f"--n: domain size must be >= 2; got {n}")
            sizes.append(n)
    if not sizes:
        raise InputError("--n: no domain size given")
    return sizes


def alpha_us_from_args(args: argparse.Namespace) -> float:
    """alpha in µs from --alpha-us or from an nccl-tests log (--alpha-from)."""
    if args.alpha_us is not None:
        if not args.alpha_us >= 0:
            raise InputError(f"--alpha-us must be >= 0 µs; got {args.alpha_us}")
        return float(args.alpha_us)
    from evtsync.nccltests.alpha import alpha_from_log

    return float(alpha_from_log(args.alpha_from).alpha_us)
