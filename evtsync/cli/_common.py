"""Argument groups shared by the commands that read traces."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evtsync.core.defaults import END_TOLERANCE_US, RANKS_PER_HOST
from evtsync.core.errors import InputError


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
    group.add_argument("--rank-from", type=_rank_from, default="file", metavar="{file,order,nvtx:REGEX}",
                       help="where each file's rank comes from: file (distributedInfo.rank; Nsight Systems: "
                            "the rank its NVTX ranges or marks name, 'rank 3'; else the file name; default), "
                            "order (the i-th file is rank i) or nvtx:REGEX (Nsight Systems: REGEX's first "
                            "group in the NVTX texts); a TRACES entry RANK=PATH gives one file's rank")
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
                            "is unchanged, and of report figures and `evtsync run`'s stage results, "
                            "reused when their inputs and the code are unchanged (default: "
                            "$EVTSYNC_CACHE_DIR, else ~/.cache/evtsync); entries are used only when "
                            "signed with your key (a shared folder: docs/security.md)")
    group.add_argument("--no-cache", action="store_true",
                       help="read every trace (and draw every report figure, compute every stage "
                            "of `evtsync run`), neither using nor writing the cache")


def _rank_from(value: str) -> str:
    """``--rank-from``: file, order or nvtx:REGEX (the pattern checked here)."""
    from evtsync.trace.ranks import nvtx_rank_pattern

    if value in ("file", "order"):
        return value
    try:
        if nvtx_rank_pattern(value) is not None:
            return value
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    raise argparse.ArgumentTypeError(f"{value!r}: expected file, order or nvtx:REGEX")


def reading_options(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments of load_traces from parsed arguments (scale options if present)."""
    options: dict[str, Any] = {"salvage": args.salvage, "jobs": args.jobs,
                               "rank_from": args.rank_from, "comm_kernels": list(args.comm_kernel)}
    if hasattr(args, "scheduler"):
        from evtsync.trace.cache_dir import default_cache_dir

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
    from evtsync.core.parallel import optional_dask

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
    from evtsync.sync.collectives import PGOverride

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
    from evtsync.predict.hockney import get_topology

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


def emit_json(value: Any, file: Any = None, indent: int | None = 2) -> None:
    """Print ``value`` as strict JSON (:func:`evtsync.core.tableio.json_text`: missing values as
    ``null``, never ``NaN``; no ``default=str``) on ``file`` (standard output): what every
    ``--json`` of the command line prints, so that a strict parser reads every command's output."""
    from evtsync.core.tableio import json_text

    print(json_text(value, indent=indent), file=sys.stdout if file is None else file)


# --------------------------------------------------------------------------- the CLI convention
# (docs/cli.md, "Conventions"; tests/cli/test_cli_convention.py checks every command against it)

#: What ``-o/--out`` names, per command: a table (.parquet/.csv, chosen by the suffix; siblings
#: PATH_<part> where the command writes several), a folder, a file of another kind, or a path the
#: command checks itself (a folder, or a fit's .nc file).
OUT_KINDS = ("table", "folder", "file", "own")

#: ``--host-cores`` of ``attribute --what-if`` and ``run`` (docs/critical-path.md §8, "Ranks sharing cores")
HOST_CORES_HELP = ("on a CPU (gloo) job: the host's layout, so that the what-if replay models ranks sharing a core "
                   "(processor sharing; docs/critical-path.md §8): N (N cores, ranks pinned in contiguous blocks), "
                   "N:shared (all ranks share N cores), or RANKS:CORES;... (e.g. 0-1:1;2-3:1). Without it op "
                   "durations are independent; the output says which")


class DeprecatedAlias(argparse.Action):
    """The old spelling of an option (``--output``, ``--ci-level``): hidden from ``--help``,
    stores into the new option's destination and says on stderr that it is deprecated."""

    def __init__(self, option_strings: list[str], dest: str, new: str = "", **kwargs: Any) -> None:
        self.new = new
        kwargs["help"] = argparse.SUPPRESS
        kwargs["default"] = argparse.SUPPRESS
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"evtsync: warning: {option_string} is deprecated; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def add_out_argument(parser: argparse.ArgumentParser | Any, kind: str, help: str, *, required: bool = False,
                     metavar: str | None = None, old: tuple[str, ...] = ()) -> None:
    """``-o/--out``, the output of every command (``kind``: one of :data:`OUT_KINDS`), with the
    command's old spellings ``old`` as hidden deprecated aliases. ``required`` is checked after
    parsing (:func:`evtsync.cli._check_outputs`), so that an alias satisfies it too."""
    if kind not in OUT_KINDS:
        raise ValueError(f"unknown output kind {kind!r}")
    metavar = metavar or ("DIR" if kind == "folder" else "PATH")
    parser.add_argument("-o", "--out", dest="out", metavar=metavar, default=None,
                        help=help + (" (required)" if required else ""))
    for spelling in old:
        parser.add_argument(spelling, dest="out", action=DeprecatedAlias, new="-o/--out", metavar=metavar)
    parser.set_defaults(out_kind=kind, out_required=required)


def add_level_argument(parser: argparse.ArgumentParser | Any, what: str = "central interval level",
                       old: tuple[str, ...] = ()) -> None:
    """``--level``, the one interval level of every command (default :data:`INTERVAL_LEVEL`),
    with old spellings (``--ci-level``) as hidden deprecated aliases."""
    from evtsync.core.defaults import INTERVAL_LEVEL

    parser.add_argument("--level", type=interval_level, default=INTERVAL_LEVEL, metavar="P",
                        help=f"{what} in (0, 1) (default {INTERVAL_LEVEL:g}, as every interval of evtsync)")
    for spelling in old:
        parser.add_argument(spelling, dest="level", type=interval_level, action=DeprecatedAlias, new="--level",
                            metavar="P")


def byte_size(text: str) -> float:
    """argparse type of every size option: :func:`evtsync.core.units.parse_bytes` (1G = 10^9 bytes,
    1Gi = 2^30), a parse error otherwise."""
    from evtsync.core.units import parse_bytes

    try:
        return parse_bytes(text, "size in bytes")
    except InputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def level_of(args: argparse.Namespace) -> float:
    """The interval level of a command line: its ``--level``, else the one default."""
    from evtsync.core.defaults import INTERVAL_LEVEL

    level = getattr(args, "level", None)
    return INTERVAL_LEVEL if level is None else float(level)


def interval_level(text: str) -> float:
    """argparse type of ``--level``: a number in (0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a level in (0, 1), e.g. 0.9; got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"expected a level in (0, 1), e.g. 0.9; got {text!r}")
    return value


class ListOption(argparse.Action):
    """A list option: values separated by spaces or commas alike (``--topology full ring`` ==
    ``--topology full,ring``), repeatable (each use extends the list). ``item`` converts each
    value (a parse error names the option), ``choices`` checks it; ``examples`` (two values) is
    what the convention test parses both ways."""

    def __init__(self, option_strings: list[str], dest: str, item: Any = str, examples: tuple[str, ...] = (),
                 item_choices: Any = None, **kwargs: Any) -> None:
        self.item, self.examples, self.item_choices = item, tuple(examples), item_choices
        kwargs.setdefault("nargs", "+")
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        current = getattr(namespace, self.dest, None)
        items = [] if current is None or current is self.default else list(current)
        for value in values if isinstance(values, list) else [values]:
            for part in str(value).split(","):
                part = part.strip()
                if not part:
                    continue
                if self.item_choices is not None and part not in self.item_choices:
                    raise argparse.ArgumentError(self, f"invalid choice {part!r} (choose from "
                                                       f"{', '.join(map(str, self.item_choices))})")
                try:
                    items.append(self.item(part))
                except (ValueError, argparse.ArgumentTypeError) as exc:
                    raise argparse.ArgumentError(self, f"{part!r}: {exc}") from None
        setattr(namespace, self.dest, items)
def add_estimator_argument(parser: argparse.ArgumentParser, help_text: str | None = None) -> None:
    """``--estimator centred|paper|rankmodel|ranktail``: which estimator of tau(n) (:data:`evtsync.predict.tables.ESTIMATORS`);
    ``help_text`` replaces the text of the commands that compute tau(n) (``evtsync report`` only reads it)."""
    from evtsync.core.defaults import DEFAULT_ESTIMATOR, ESTIMATOR_NAMES

    parser.add_argument("--estimator", choices=list(ESTIMATOR_NAMES), default=None,
                        help=help_text or f"estimator of tau(n) (default {DEFAULT_ESTIMATOR}): rankmodel (the "
                             "hierarchical rank model of every rank's value, for a job of n ranks from the same fleet: "
                             "the run's fit, or fitted to a z-score table), ranktail (its per-cell comparator: a "
                             "generalized Pareto tail, no rank or shared effects), centred (the GEV of the centred "
                             "maximum y: needs a GEV fit of column y) or paper (the paper's b·E_(n/m) of z: biased low "
                             "at n > m, needs a fit of column z). Unless named, rows the rank model cannot give (a GEV "
                             "fit without its z-score table, a table without columns u and u_scale, a cell with too few "
                             "values) fall back to the centred "
                             "estimator of the GEV fit, labelled and warned; a named estimator is obeyed strictly")


@contextlib.contextmanager
def private_tempdir() -> Iterator[Path]:
    """Send every temporary file of this process and of the processes it starts into a private
    folder of the system's temporary folder, removed at the end: PyTensor's numba backend leaves
    one ``tmpXXXXXXXX`` source file per compiled function in ``$TMPDIR`` (~17 per fit, issue 33)."""
    import multiprocessing.util
    import os
    import shutil
    import tempfile

    # multiprocessing's own folder (its fork server's socket) stays where it is: multiprocessing
    # removes it itself at exit, after this folder is gone
    multiprocessing.util.get_temp_dir()
    path = Path(tempfile.mkdtemp(prefix="evtsync-", dir=tempfile.gettempdir()))
    saved_env, saved_dir = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = str(path), str(path)
    try:
        yield path
    finally:
        tempfile.tempdir = saved_dir
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env
        shutil.rmtree(path, ignore_errors=True)
