"""Read nccl-tests output (text tables of every version, and the ``-J`` JSON report).

Real logs are pasted by users in many states: prefixed by MPI or launchers (``0: ``,
``[1,0]<stdout>:``, host names), re-indented, interleaved with NCCL INFO and MPI lines,
without header or footer, truncated, or holding several runs. The parser therefore reads
line by line with a small state machine per output stream, recognises table rows from the
right-hand end of the line (so unknown prefixes do no harm), keeps every measurement it
can, and lists every line it skipped with the reason. A file with no table at all is an
:class:`~evtsync.core.errors.NcclTestsError` that says what the file holds instead.

Result: one long table, one row per measurement (a table line gives an out-of-place and an
in-place measurement), with the run, the ``-N`` cycle, the source line number and a flag
when algbw/busbw disagree with size/time and the collective's busbw factor (methodology §9).
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evtsync.core.errors import NcclTestsError
from evtsync.core.vocabulary import DTYPE_BYTES, nccl_tests_name

if TYPE_CHECKING:  # pandas is imported only when a DataFrame is asked for (CLI start-up cost)
    import pandas as pd

log = logging.getLogger("evtsync.nccltests.parse")

#: Collectives whose printed count is the per-rank share (size = count * wordsize * n).
PER_RANK_COUNT = ("all_gather", "reduce_scatter", "alltoall", "gather", "scatter")
#: Collectives whose printed count covers the whole buffer (size = count * wordsize).
FULL_COUNT = ("all_reduce", "broadcast", "reduce", "sendrecv", "hypercube")
KNOWN_COLLECTIVES = PER_RANK_COUNT + FULL_COUNT

#: Bytes per element of nccl-tests' ``type`` names: the shared vocabulary's table.
WORD_SIZES = DTYPE_BYTES

MEASUREMENT_COLUMNS = [
    "run", "cycle", "line", "size", "count", "type", "redop", "root", "placement",
    "time_us", "algbw_gbps", "busbw_gbps", "wrong", "error",
    "i_min_us", "i_max_us", "i_p99_us", "i_cv_pct", "bw_flag",
]  # fmt: skip


def normalise_collective(name: str) -> str:
    """Canonical nccl-tests collective name (``all_reduce``, ``alltoall`` ...) from a test/binary
    name or the traces' spelling (``AllReduce``): :func:`evtsync.core.vocabulary.nccl_tests_name`."""
    return nccl_tests_name(name)


def busbw_factor(collective: str, n_ranks: int) -> float:
    """nccl-tests' busbw/algbw factor (methodology §9): AllReduce 2(n-1)/n; AllGather, ReduceScatter,
    AlltoAll, Gather, Scatter (n-1)/n; Broadcast, Reduce, SendRecv 1."""
    c = normalise_collective(collective)
    if n_ranks < 1:
        raise NcclTestsError(f"busbw factor needs at least one rank, got {n_ranks}")
    if c == "all_reduce":
        return 2.0 * (n_ranks - 1) / n_ranks
    if c in ("all_gather", "reduce_scatter", "alltoall", "gather", "scatter", "hypercube"):
        return (n_ranks - 1) / n_ranks
    if c in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    raise NcclTestsError(f"unknown collective {collective!r}; known: {', '.join(KNOWN_COLLECTIVES)}")


@dataclass(frozen=True)
class SkippedLine:
    """A line of the log the parser did not use, with the reason."""

    line: int
    text: str
    reason: str
    #: a result row (or what is left of one) whose measurements are lost, or a row whose values
    #: are impossible: counted by :attr:`ParsedLog.damaged`, refused by ``stats`` unless asked
    damaged: bool = False


#: Reasons of lines that are damaged result rows (:attr:`SkippedLine.damaged`).
DAMAGED_ROW = "incomplete or malformed table row (truncated?)"
DAMAGED_VALUES = "damaged table row (unreadable values)"
DAMAGED_IN_TABLE = "unreadable line inside a result table"
CUT_BY_FAILURE = "table row cut by a failure message"


@dataclass
class RunInfo:
    """Metadata of one nccl-tests run (one process sweep) found in a log."""

    index: int
    stream: str = ""
    first_line: int = 0
    last_line: int = 0
    tests_version: str | None = None
    nccl_version: str | None = None
    collective: str | None = None
    collective_source: str | None = None
    n_ranks: int | None = None
    n_ranks_source: str | None = None
    gpus: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    n_threads: int | None = None
    n_gpus_per_process: int | None = None
    min_bytes: int | None = None
    max_bytes: int | None = None
    step: str | None = None
    warmup_iters: int | None = None
    iters: int | None = None
    agg_iters: int | None = None
    validation: int | None = None
    graph: int | None = None
    blocking: str | None = None
    per_iteration: bool = False
    cputime: bool = False
    old_error_column: bool = False
    has_header: bool = False
    has_table_header: bool = False
    has_footer: bool = False
    out_of_bounds: int | None = None
    out_of_bounds_ok: bool | None = None
    avg_busbw_gbps: float | None = None
    n_rows: int = 0
    n_cycles: int = 0
    n_flagged: int = 0
    #: 'current' (algbw = size/time) or 'old' (pre-2.x all_gather/reduce_scatter: algbw =
    #: size*(n-1)/n/time, busbw = algbw); None when not checked
    bw_convention: str | None = None
    #: unit the log printed times in: 'us', or 'ms' (the first generation); ``time_us`` is in µs
    time_unit: str = "us"
    time_unit_source: str | None = None
    #: the run's first root-cause line (CUDA/NCCL/MPI error) when it aborted, else None
    failure: str | None = None
    failure_line: int | None = None
    failure_host: str | None = None
    failure_ranks: list[int] = field(default_factory=list)
    #: launcher lines reporting the abort (srun/mpirun), context of ``failure``
    failure_context: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """True when the run aborted (a failure line) or its footer says FAILED."""
        return self.failure is not None or self.out_of_bounds_ok is False

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return asdict(self)


@dataclass
class ParsedLog:
    """Measurements, run metadata and skipped lines of one nccl-tests log.

    ``rows`` holds one dict per measurement (columns :data:`MEASUREMENT_COLUMNS`);
    :attr:`measurements` is the same as a pandas DataFrame, built on first use so that
    reading a log does not pay for importing pandas. ``warnings`` lists what the log held
    but no run could use (a table header or footer without result rows).
    """

    path: str
    format: str
    runs: list[RunInfo]
    rows: list[dict[str, Any]]
    skipped: list[SkippedLine]
    warnings: list[str] = field(default_factory=list)
    #: rows kept whose values are impossible (a ``#wrong`` that is not a count), as damaged lines
    bad_values: list[SkippedLine] = field(default_factory=list)
    _table: Any = field(default=None, init=False, repr=False, compare=False)

    @property
    def damaged(self) -> list[SkippedLine]:
        """Every damaged result row, by line: rows lost (skipped as malformed, cut, or unreadable
        inside a table) and rows kept with impossible values; ``stats`` counts and names them."""
        return sorted([s for s in self.skipped if s.damaged] + self.bad_values, key=lambda s: s.line)

    @property
    def measurements(self) -> pd.DataFrame:
        """The measurements as a DataFrame (one row per table line and placement)."""
        if self._table is None:
            import pandas as pd

            self._table = pd.DataFrame.from_records(self.rows, columns=MEASUREMENT_COLUMNS)
        return self._table

    @property
    def n_table_lines(self) -> int:
        """Number of table lines read (each gives one measurement per placement)."""
        return len({(r["run"], r["line"]) for r in self.rows})

    @property
    def failed_runs(self) -> list[RunInfo]:
        """Runs that aborted or whose footer says FAILED."""
        return [r for r in self.runs if r.failed]

    def run(self, index: int | None = None) -> RunInfo:
        """The run with this index; with None, the only run (or the first, with a warning)."""
        if index is None:
            if len(self.runs) > 1:
                log.warning("%s holds %d runs; using run 0", self.path, len(self.runs))
            return self.runs[0]
        for r in self.runs:
            if r.index == index:
                return r
        raise NcclTestsError(f"{self.path}: no run {index}; runs are 0..{len(self.runs) - 1}")

    def to_dict(self, *, with_rows: bool = True) -> dict[str, Any]:
        """JSON-ready summary (measurements as a list of records, NaN as None)."""
        out: dict[str, Any] = {
            "path": self.path,
            "format": self.format,
            "n_table_lines": self.n_table_lines,
            "runs": [r.to_dict() for r in self.runs],
            "warnings": list(self.warnings),
            "skipped": [asdict(s) for s in self.skipped],
            "damaged": [asdict(s) for s in self.damaged],
        }
        if with_rows:
            out["measurements"] = [
                {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
                for r in self.rows
            ]
        return out


# --------------------------------------------------------------------------- tokens

_INT = re.compile(r"^\d+$")
_SINT = re.compile(r"^-?\d+$")
_WORD = re.compile(r"^(?!(?:nan|inf)$)[A-Za-z_][A-Za-z0-9_]*$", re.IGNORECASE)
_NUM = re.compile(r"^[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)$", re.IGNORECASE)
_DATE = re.compile(r"^\d{4}-\d\d-\d\d$")
_TIME = re.compile(r"^\d\d:\d\d:\d\d$")


def _is_wrong(tok: str) -> bool:
    return tok == "N/A" or bool(_NUM.match(tok))


def _half_ulp(tok: str) -> float:
    """Half a unit in the last printed place of a number token (its rounding error bound)."""
    t = tok.lower().lstrip("+-")
    if "nan" in t or "inf" in t:
        return math.inf
    mantissa, _, exp = t.partition("e")
    decimals = len(mantissa.partition(".")[2])
    try:
        return 0.5 * 10.0 ** (-decimals) * 10.0 ** (int(exp) if exp else 0)
    except OverflowError:
        return math.inf


def _to_float(tok: str) -> float:
    return math.nan if tok == "N/A" else float(tok)


@dataclass(frozen=True)
class _Layout:
    """Leading columns of a table row (size, count, type, [redop], [root]), then two
    groups (out-of-place, in-place) of time, algbw, busbw, #wrong/error [, i_min, i_max,
    i_p99, i_cv%]."""

    name: str
    has_redop: bool
    has_root: bool
    per_iter: bool

    @property
    def lead(self) -> int:
        return 3 + self.has_redop + self.has_root

    @property
    def group(self) -> int:
        return 8 if self.per_iter else 4

    @property
    def width(self) -> int:
        return self.lead + 2 * self.group


_STD = _Layout("standard", True, True, False)
_PERITER = _Layout("per-iteration", True, True, True)
#: nccl-tests before the common header (2.x era): all_reduce / reduce_scatter print redop only
_OLD = _Layout("no-root", True, False, False)
_OLD_PERITER = _Layout("no-root per-iteration", True, False, True)
#: ... broadcast prints root only
_OLD_ROOT = _Layout("root, no redop", False, True, False)
#: ... all_gather prints neither
_OLD_BARE = _Layout("no redop, no root", False, False, False)
_LAYOUTS = (_STD, _PERITER, _OLD, _OLD_PERITER, _OLD_ROOT, _OLD_BARE)
_MIN_ROW_TOKENS = min(lay.width for lay in _LAYOUTS)


def _match_row(tokens: list[str], prefer: _Layout | None) -> tuple[_Layout, list[str]] | None:
    """Match the right-hand end of a token list against the table layouts."""
    if len(tokens) >= 2 and _DATE.match(tokens[-2]) and _TIME.match(tokens[-1]):
        tokens = tokens[:-2]  # report_timestamps column
    order = ([prefer] if prefer else []) + [lay for lay in _LAYOUTS if lay is not prefer]
    for lay in order:
        if len(tokens) < lay.width:
            continue
        cand = tokens[-lay.width :]
        if not (_INT.match(cand[0]) and _INT.match(cand[1]) and _WORD.match(cand[2])):
            continue
        if len(cand[0]) > 19 or len(cand[1]) > 19:
            continue  # beyond int64: not a byte count nccl-tests can print
        pos = 3
        if lay.has_redop:
            if not _WORD.match(cand[pos]):
                continue
            pos += 1
        if lay.has_root:
            if not _SINT.match(cand[pos]) or len(cand[pos]) > 11:
                continue
            pos += 1
        ok = True
        for _ in range(2):
            g = cand[pos : pos + lay.group]
            if not (all(_NUM.match(x) for x in g[:3]) and _is_wrong(g[3]) and all(_NUM.match(x) for x in g[4:])):
                ok = False
                break
            pos += lay.group
        if ok:
            return lay, cand
    return None


_ROW_START = re.compile(r"(?:^|[\s:>])\d+\s+\d+\s+[A-Za-z_]\w*\s+(?:[A-Za-z_]\w*|-?\d+)(?:\s+-?\d+)?(?:\s|$)")

# --------------------------------------------------------------------------- line kinds

_PREFIXES = (
    (re.compile(r"^\s*\[\d+,(\d+)\]<(?:stdout|stderr)>:\s?"), "rank "),
    (re.compile(r"^\s*(\d+):\s"), "task "),
    (re.compile(r"^\s*\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?\s"), None),
)
_NTHREAD = re.compile(r"(?:^|[\s:>\]])#\s*nThread\s+(\d+)\s+nGpus\s+(\d+)")
_MINMAX = re.compile(r"minBytes\s+(\d+)\s+maxBytes\s+(\d+)")
_STEP = re.compile(r"step:\s*(\d+)\((factor|bytes)\)")
_ITERS = re.compile(r"warmup iters:\s*(\d+)\s+iters:\s*(\d+)")
_AGG = re.compile(r"agg iters:\s*(\d+)")
_VALID = re.compile(r"validation:\s*(\d+)")
_GRAPH = re.compile(r"graph:\s*(\d+)")
_TESTS_VERSION = re.compile(r"(?:^|[\s:>\]])#\s*nccl-tests version\s+(\S+)")
_STARTING = re.compile(r"(?:^|[\s:>\]])#\s*Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"(?:^|[\s:>\]])#\s*Collective test concluded")
_NCCL_VERSION = re.compile(r"NCCL version\s+(\d+\.\d+\.\d+)(\S*)")
_BLOCKING = re.compile(r"(?:^|[\s:>\]])#\s*Blocking Enabled:\s*(.*?)\s*$")
_PER_ITER = re.compile(r"(?:^|[\s:>\]])#\s*Per-Iteration Report")
_RANK = re.compile(
    r"#\s*Rank\s+(\d+)\s+(?:Group\s+(\d+)\s+)?(?:Pid\s+(\d+)\s+)?on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$"
)
_OOB = re.compile(r"(?:^|[\s:>\]])#\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_AVG_BW = re.compile(r"(?:^|[\s:>\]])#\s*Avg bus bandwidth\s*:\s*"
                     r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)(?=\s|$)")
_NCCL_LINE = re.compile(r"NCCL (?:INFO|WARN|ERROR|TRACE)")
#: a test binary: ``all_reduce_perf`` (nccl-tests), ``all_reduce_test`` (NCCL 1's own tests)
_PERF_NAME = re.compile(r"\b([a-z_]+)_(?:perf|test)(?:_mpi)?\b")
#: NCCL 1's device lines: ``#   Device  0 ->  0 [0x0a] GeForce GTX TITAN X``
_DEVICE_V1 = re.compile(r"#\s*Device\s+(\d+)\s+->\s+(\d+)\s+\[([^\]]*)\]\s*(.*?)\s*$")


def _strip_prefix(text: str) -> tuple[str, str]:
    """Remove known launcher prefixes; return (stream key, remainder)."""
    stream = ""
    changed = True
    while changed:
        changed = False
        for pattern, label in _PREFIXES:
            m = pattern.match(text)
            if m:
                if label is not None:
                    stream = label + m.group(1)
                text = text[m.end() :]
                changed = True
    return stream, text


def _header_layout(rest: str) -> dict[str, bool] | None:
    """Column-header line of the table: which columns it announces, else None.

    Generations: ``size count type redop root ... #wrong`` (today), ``size count type
    [redop] [root] ... error`` (2.x era), ``bytes N type op ... res`` (NCCL 1's tests and the
    first nccl-tests: times in ms).
    """
    first_gen = bool(re.search(r"\bbytes\b", rest) and re.search(r"\bN\b", rest))
    if not first_gen and (not re.search(r"\bsize\b", rest) or not re.search(r"\bcount\b", rest)):
        return None
    if not (re.search(r"\b(?:cpu)?time\b", rest) and "algbw" in rest):
        return None
    return {
        "has_redop": bool(re.search(r"\bredop\b|\bop\b", rest)),
        "has_root": bool(re.search(r"\broot\b", rest)),
        "per_iter": "i_min" in rest,
        "cputime": "cputime" in rest,
        "old_error": bool(re.search(r"\berror\b|\bres\b", rest)) and "#wrong" not in rest,
        "time_ms": first_gen,
    }


# --------------------------------------------------------------------------- state machine


class _RunState:
    def __init__(self, index: int, stream: str, line: int) -> None:
        self.info = RunInfo(index=index, stream=stream, first_line=line, last_line=line)
        self.rows: list[dict[str, Any]] = []
        self.layout: _Layout | None = None
        self.ranks: dict[int, tuple[str, str]] = {}
        self.block: tuple[str, str, int] | None = None
        self.block_cycles: dict[tuple[str, str, int], int] = {}
        self.last_size = -1
        self.seen: set[tuple[int, int]] = set()
        self.layouts: set[_Layout] = set()
        self.rank_details: dict[int, tuple[str, str, int | None, int]] = {}
        self.first_row_line = 0

    def add_row(self, lay: _Layout, cand: list[str], line_no: int) -> None:
        size, count = int(cand[0]), int(cand[1])
        dtype = cand[2]
        # a layout without the redop column is a collective without reduction
        redop = cand[3] if lay.has_redop else "none"
        root = int(cand[lay.lead - 1]) if lay.has_root else -1
        self.layouts.add(lay)
        block = (dtype, redop, root)
        if block != self.block:
            self.block = block
            self.block_cycles[block] = self.block_cycles.get(block, -1) + 1
            self.seen = set()
            self.last_size = -1
        elif size < self.last_size or (size > 0 and (size, count) in self.seen):
            self.block_cycles[block] += 1
            self.seen = set()
        self.seen.add((size, count))
        self.last_size = size
        cycle = self.block_cycles[block]
        pos = lay.lead
        for placement in ("out-of-place", "in-place"):
            g = cand[pos : pos + lay.group]
            pos += lay.group
            rec: dict[str, Any] = {
                "run": self.info.index, "cycle": cycle, "line": line_no, "size": size,
                "count": count, "type": dtype, "redop": redop, "root": root,
                "placement": placement, "time_us": _to_float(g[0]),
                "algbw_gbps": _to_float(g[1]), "busbw_gbps": _to_float(g[2]),
                "wrong": math.nan, "error": math.nan,
                "i_min_us": math.nan, "i_max_us": math.nan, "i_p99_us": math.nan,
                "i_cv_pct": math.nan, "bw_flag": "",
                "_ulp": (_half_ulp(g[0]), _half_ulp(g[1]), _half_ulp(g[2])),
            }  # fmt: skip
            if self.info.old_error_column:
                rec["error"] = _to_float(g[3])
            else:
                rec["wrong"] = _to_float(g[3])
            if lay.per_iter:
                rec["i_min_us"], rec["i_max_us"] = _to_float(g[4]), _to_float(g[5])
                rec["i_p99_us"], rec["i_cv_pct"] = _to_float(g[6]), _to_float(g[7])
            self.rows.append(rec)
        self.info.last_line = line_no


_TEST_FAILURE = re.compile(r"(?:(?<=\s)|^)(?:(\S+?):\s+)?Test (?:(CUDA|NCCL|MPI|HIP|CURAND)\s+)?failure\s+(\S+)(?:\s+'([^']*)')?")
_FAILURE_STACK = re.compile(r"\.\.\s+(\S+)\s+pid\s+(\d+):\s+Test failure\s+(\S+)")
_NCCL_WARN = re.compile(r"(?:^|\s)([^\s:]+):(\d+):(\d+)\s+\[(\d+)\].*?NCCL WARN\s+(.*\S)")
_WARN_IS_ERROR = re.compile(r"fail|error|abort|timeout|timed out", re.IGNORECASE)
_MPI_ABORT = re.compile(r"MPI_ABORT was invoked on rank (\d+)|(?:^|\s)\*\*\* Process received signal \*\*\*"
                        r"|Segmentation fault|Bus error|terminate called after", re.IGNORECASE)
_LAUNCHER = re.compile(r"srun: error:.*|(?:mpirun|prterun|orterun) (?:noticed|detected|has exited).*"
                       r"|Primary job\s+terminated.*|.*\bExited with exit code [1-9]\d*.*", re.IGNORECASE)


@dataclass
class _Failure:
    line: int
    text: str
    kind: str  # 'test' (nccl-tests' own 'Test X failure'), 'nccl-warn', 'abort'
    host: str | None = None
    pid: int | None = None
    device: int | None = None
    stream: str = ""


def _failure_of(rest: str, line_no: int, stream: str) -> _Failure | None:
    if m := _TEST_FAILURE.search(rest):
        what = f"Test {m.group(2) + ' ' if m.group(2) else ''}failure {m.group(3)}"
        if m.group(4) is not None:
            what += f" '{m.group(4)}'"
        return _Failure(line_no, what, "test", host=m.group(1), stream=stream)
    if (m := _NCCL_WARN.search(rest)) and _WARN_IS_ERROR.search(m.group(5)):
        return _Failure(line_no, f"NCCL WARN {m.group(5)}", "nccl-warn", host=m.group(1), pid=int(m.group(2)),
                        device=int(m.group(4)), stream=stream)
    if m := _MPI_ABORT.search(rest):
        return _Failure(line_no, rest.strip()[:200], "abort", stream=stream)
    return None


def parse_text(text: str, *, path: str = "<text>", collective: str | None = None,
               n_ranks: int | None = None) -> ParsedLog:
    """Parse nccl-tests text output (any version, prefixed or pasted) into a :class:`ParsedLog`."""
    streams: dict[str, _RunState] = {}
    finished: list[_RunState] = []
    skipped: list[SkippedLine] = []
    failures: list[_Failure] = []
    stacks: dict[int, tuple[str, int]] = {}  # line -> (host, pid) of '.. host pid N: Test failure'
    launcher: list[tuple[int, str]] = []
    counter = [0]

    def new_state(stream: str, line_no: int) -> _RunState:
        old = streams.get(stream)
        if old is not None and (old.rows or old.info.has_header or old.info.has_table_header):
            finished.append(old)
        st = _RunState(counter[0], stream, line_no)
        counter[0] += 1
        streams[stream] = st
        return st

    def state(stream: str, line_no: int) -> _RunState:
        return streams.get(stream) or new_state(stream, line_no)

    all_lines = text.splitlines()
    for line_no, raw in enumerate(all_lines, start=1):
        line = raw.replace("\x00", "").rstrip("\r\n")
        if not line.strip():
            continue
        stream, rest = _strip_prefix(line)
        tokens = rest.split()
        st = streams.get(stream)
        prefer = st.layout if st else None
        matched = _match_row(tokens, prefer) if len(tokens) >= _MIN_ROW_TOKENS else None
        if matched is not None:
            st = state(stream, line_no)
            lay, cand = matched
            if st.layout is None:
                st.layout = lay
            if not st.rows:
                st.first_row_line = line_no
            st.add_row(lay, cand, line_no)
            continue
        if any(w in rest for w in ("ailure", "WARN", "ABORT", "abort", "signal", "fault", "Bus error", "terminate")):
            if m := _FAILURE_STACK.search(rest):
                stacks[line_no] = (m.group(1), int(m.group(2)))
                skipped.append(SkippedLine(line_no, line[:300], "failure stack line"))
                continue
            if (fail := _failure_of(rest, line_no, stream)) is not None:
                failures.append(fail)
                cut = _ROW_START.search(rest[: rest.find("Test ")]) if "Test " in rest else None
                reason = CUT_BY_FAILURE if cut else "failure message"
                skipped.append(SkippedLine(line_no, line[:300], reason, damaged=bool(cut)))
                continue
        if _LAUNCHER.search(rest):
            launcher.append((line_no, rest.strip()[:200]))
            skipped.append(SkippedLine(line_no, line[:300], "launcher error line"))
            continue
        if ("#" in rest or _NCCL_VERSION.search(rest)) and _consume_meta(
            rest, stream, line_no, streams, state, new_state
        ):
            continue
        damaged = False
        if _ROW_START.search(rest):
            reason, damaged = DAMAGED_ROW, True
        elif _NCCL_LINE.search(rest) is None and _row_like(rest):
            # a row with a garbled token, or a row behind a "#": its measurements are lost
            reason, damaged = DAMAGED_VALUES, True
        elif _NCCL_LINE.search(rest):
            reason = "NCCL log line"
        elif rest.lstrip().startswith("#"):
            reason = "comment line"
        elif _names_in(rest):
            reason = "line naming a test binary"
        else:
            reason = "not nccl-tests output"
        skipped.append(SkippedLine(line_no, line[:300], reason, damaged=damaged))

    for st in streams.values():
        if st.rows or st.info.has_header or st.info.has_table_header or st.info.has_footer:
            finished.append(st)
    finished.sort(key=lambda s: s.info.index)
    with_rows = [s for s in finished if s.rows]
    if not with_rows:
        if failures or launcher:
            desc = _describe_failure(failures, stacks, launcher, finished)
            raise NcclTestsError(f"{path}: no nccl-tests result table found; the run failed before its first "
                                 f"result row: {desc}")
        raise NcclTestsError(f"{path}: no nccl-tests result table found; {_describe_instead(text, finished)}")
    warnings = _rowless_warnings(finished)
    # renumber runs 0..k-1 in file order
    runs: list[RunInfo] = []
    records: list[dict[str, Any]] = []
    previous_end = 0
    for new_index, st in enumerate(with_rows):
        st.info.index = new_index
        for rec in st.rows:
            rec["run"] = new_index
        # the log's own words about this run lie between the previous run's last row and this run's first
        _finish_run(st, text, path, collective, n_ranks, all_lines, previous_end)
        previous_end = max(previous_end, st.info.last_line)
        runs.append(st.info)
        records.extend(st.rows)
    _assign_failures(with_rows, failures, stacks, launcher)
    for rec in records:
        rec.pop("_ulp", None)
    spans = [(st.first_row_line, st.info.last_line) for st in with_rows]
    skipped = [SkippedLine(s.line, s.text, DAMAGED_IN_TABLE, damaged=True)
               if s.reason == "not nccl-tests output" and any(a < s.line < b for a, b in spans) else s
               for s in skipped]
    return ParsedLog(path=path, format="text", runs=runs, rows=records, skipped=skipped, warnings=warnings,
                     bad_values=_bad_values(records, all_lines))


#: Numbers on a line, beyond which a line that is not a readable row is a damaged one (a row has
#: at least 11: size, count, root and two groups of four).
_DAMAGED_NUMBERS = 6


def _row_like(rest: str) -> bool:
    """Whether a line no layout reads is what is left of a result row: at least
    :data:`_DAMAGED_NUMBERS` numbers, and, behind a ``#``, numbers for most of its words (a
    comment such as the command line ``-b 8 -e 8G -f 2 -g 1`` has words between its numbers)."""
    text = rest.strip()
    comment = text.startswith("#")
    words = text.lstrip("#").split()
    numbers = sum(1 for t in words if _NUM.match(t))
    return numbers >= _DAMAGED_NUMBERS and (not comment or numbers >= 0.6 * len(words))


def _bad_values(records: list[dict[str, Any]], all_lines: list[str] | None = None) -> list[SkippedLine]:
    """Rows whose ``#wrong`` is not a count (negative, fractional, infinite: ``-1e309``), one
    entry per line: such a row cannot say the run was correct."""
    out: dict[int, SkippedLine] = {}
    for rec in records:
        wrong = rec["wrong"]
        if math.isnan(wrong) or (wrong >= 0 and math.isfinite(wrong) and wrong == int(wrong)):
            continue
        line = rec["line"]
        text = all_lines[line - 1][:300] if all_lines and 0 < line <= len(all_lines) else ""
        out.setdefault(line, SkippedLine(line, text, f"#wrong that is not a count of wrong values ({wrong:g}, "
                                         f"{rec['placement']}; the row is kept and fails correctness)", damaged=True))
    return list(out.values())


def _rowless_warnings(finished: list[_RunState]) -> list[str]:
    """Say what a header, device list or footer without result rows held (never drop it silently)."""
    out = []
    for st in finished:
        if st.rows:
            continue
        info = st.info
        held = [w for w, ok in (("a '# nThread' header", info.has_header), ("a column header", info.has_table_header),
                                ("a footer", info.has_footer)) if ok]
        if not held:
            continue
        what = f"lines {info.first_line}..{info.last_line}" if info.last_line > info.first_line else f"line {info.first_line}"
        msg = f"{what}: {' and '.join(held)} with no result rows that could be read"
        if info.out_of_bounds_ok is False:
            msg += f" (its footer says FAILED: {info.out_of_bounds} out-of-bounds values)"
        out.append(msg)
    return out


def _rank_of(host: str | None, pid: int | None, device: int | None, states: list[_RunState]) -> list[int]:
    ranks: set[int] = set()
    for st in states:
        for rank, (h, _gpu, p, dev) in st.rank_details.items():
            if pid is not None and p == pid and (host is None or h == host) and (device is None or dev == device):
                ranks.add(rank)
    return sorted(ranks)


def _where(fail: _Failure, stacks: dict[int, tuple[str, int]], states: list[_RunState]) -> tuple[str, str | None, list[int]]:
    host, pid = fail.host, fail.pid
    if pid is None:  # nccl-tests prints '.. host pid N: Test failure' right after its failure line
        nxt = [ln for ln in stacks if ln > fail.line and (host is None or stacks[ln][0] == host)]
        if nxt:
            host, pid = stacks[min(nxt)]
    ranks = _rank_of(host, pid, fail.device, states)
    parts = [f"line {fail.line}"]
    if host:
        parts.append(f"host {host}")
    if ranks:
        parts.append(("rank " if len(ranks) == 1 else "ranks ") + ",".join(map(str, ranks)))
    elif fail.stream:
        parts.append(fail.stream)
    if pid is not None:
        parts.append(f"pid {pid}")
    return ", ".join(parts), host, ranks


def _root_cause(failures: list[_Failure]) -> _Failure | None:
    """The first root-cause line: the earliest CUDA/NCCL/MPI error, preferring nccl-tests' own
    'Test X failure' and NCCL's WARN lines over generic abort messages."""
    for kinds in (("test", "nccl-warn"), ("abort",)):
        cands = [f for f in failures if f.kind in kinds]
        if cands:
            return min(cands, key=lambda f: f.line)
    return None


def _describe_failure(failures: list[_Failure], stacks: dict[int, tuple[str, int]],
                      launcher: list[tuple[int, str]], states: list[_RunState]) -> str:
    cause = _root_cause(failures)
    context = f"; launcher: {launcher[0][1]!r} (line {launcher[0][0]})" if launcher else ""
    if cause is None:
        return f"root cause not in the log{context}"
    where, _, _ = _where(cause, stacks, states)
    return f"{cause.text!r} ({where}){context}"


def _assign_failures(runs: list[_RunState], failures: list[_Failure], stacks: dict[int, tuple[str, int]],
                     launcher: list[tuple[int, str]]) -> None:
    """Attach each failure (and the launcher lines after it) to the run it interrupted: the
    run of the same stream, else the last run that started before the failure line."""
    if not failures and not launcher:
        return
    by_run: dict[int, list[_Failure]] = {}
    for f in failures:
        same = [st for st in runs if st.info.stream == f.stream and st.info.first_line <= f.line]
        before = same or [st for st in runs if st.info.first_line <= f.line] or runs[:1]
        target = max(before, key=lambda st: st.info.first_line)
        by_run.setdefault(target.info.index, []).append(f)
    used: set[int] = set()  # launcher lines already given as context
    for st in runs:
        mine = by_run.get(st.info.index, [])
        cause = _root_cause(mine)
        info = st.info
        if cause is not None:
            where, host, ranks = _where(cause, stacks, runs)
            info.failure = f"{cause.text} ({where})"
            info.failure_line, info.failure_host, info.failure_ranks = cause.line, host, ranks
            end = min((r.info.first_line for r in runs if r.info.first_line > cause.line), default=math.inf)
            context = [(ln, t) for ln, t in launcher if cause.line < ln < end]
            info.failure_context = [f"line {ln}: {t}" for ln, t in context]
            used.update(ln for ln, _ in context)
            if len(mine) > 1:
                info.warnings.append(f"{len(mine)} failure line(s) from this run; the first root cause is shown")
    for ln, t in launcher:  # a launcher error without a root-cause line: the run before it aborted
        if ln in used:
            continue
        before = [st for st in runs if st.info.first_line <= ln] or runs[:1]
        info = max(before, key=lambda st: st.info.first_line).info
        if info.failure is None:
            info.failure = f"aborted, root cause not in the log (line {ln}: {t})"
            info.failure_line = ln
        info.failure_context.append(f"line {ln}: {t}")


def _consume_meta(rest: str, stream: str, line_no: int, streams: dict[str, _RunState],
                  state: Any, new_state: Any) -> bool:
    """Apply a metadata/header/footer line to the stream's run; False if not one."""
    st: _RunState | None = streams.get(stream)
    if m := _TESTS_VERSION.search(rest):
        if st is None or st.rows or st.info.tests_version or st.info.has_header:
            st = new_state(stream, line_no)
        st.info.tests_version = m.group(1)
        return True
    if m := _STARTING.search(rest):
        if st is None or st.rows or st.info.collective_source == "header" or st.info.has_header:
            st = new_state(stream, line_no)
        st.info.collective = normalise_collective(m.group(1))
        st.info.collective_source = "header"
        return True
    if m := _NTHREAD.search(rest):
        if st is None or st.rows or st.info.has_header:
            st = new_state(stream, line_no)
        info = st.info
        info.has_header = True
        info.n_threads, info.n_gpus_per_process = int(m.group(1)), int(m.group(2))
        if mm := _MINMAX.search(rest):
            info.min_bytes, info.max_bytes = int(mm.group(1)), int(mm.group(2))
        if mm := _STEP.search(rest):
            info.step = f"{mm.group(1)}({mm.group(2)})"
        if mm := _ITERS.search(rest):
            info.warmup_iters, info.iters = int(mm.group(1)), int(mm.group(2))
        if mm := _AGG.search(rest):
            info.agg_iters = int(mm.group(1))
        if mm := _VALID.search(rest):
            info.validation = int(mm.group(1))
        if mm := _GRAPH.search(rest):
            info.graph = int(mm.group(1))
        return True
    if m := _RANK.search(rest):
        # device lines after result rows belong to the next run (its first lines were cut)
        st = new_state(stream, line_no) if st is None or st.rows else st
        st.ranks[int(m.group(1))] = (m.group(4), m.group(7))
        st.rank_details[int(m.group(1))] = (m.group(4), m.group(7), int(m.group(3)) if m.group(3) else None,
                                            int(m.group(5)))
        return True
    if m := _DEVICE_V1.search(rest):
        st = new_state(stream, line_no) if st is None or st.rows else st
        st.ranks[int(m.group(1))] = ("", m.group(4))
        st.rank_details[int(m.group(1))] = ("", m.group(4), None, int(m.group(2)))
        return True
    if m := _NCCL_VERSION.search(rest):
        nccl_info = bool(_NCCL_LINE.search(rest))
        if nccl_info and st is None:
            return False
        if st is None or (st.rows and not nccl_info):
            st = new_state(stream, line_no)
        st.info.nccl_version = m.group(1) + m.group(2)
        return True
    if m := _BLOCKING.search(rest):
        state(stream, line_no).info.blocking = m.group(1)
        return True
    if _PER_ITER.search(rest):
        state(stream, line_no).info.per_iteration = True
        return True
    if cols := _header_layout(rest):
        if st is None or st.rows:
            st = new_state(stream, line_no)
        st.info.has_table_header = True
        if cols["time_ms"]:
            st.info.time_unit, st.info.time_unit_source = "ms", "column header (bytes N ... res generation)"
        st.info.cputime = cols["cputime"]
        st.info.old_error_column = cols["old_error"]
        st.info.per_iteration = st.info.per_iteration or cols["per_iter"]
        st.layout = next((lay for lay in _LAYOUTS if lay.has_redop == cols["has_redop"]
                          and lay.has_root == cols["has_root"] and lay.per_iter == cols["per_iter"]), None)
        return True
    if m := _OOB.search(rest):
        st = state(stream, line_no)
        st.info.has_footer = True
        st.info.out_of_bounds = int(m.group(1))
        st.info.out_of_bounds_ok = int(m.group(1)) == 0 if m.group(2) is None else m.group(2) == "OK"
        return True
    if m := _AVG_BW.search(rest):
        st = state(stream, line_no)
        st.info.has_footer = True
        st.info.avg_busbw_gbps = float(m.group(1))
        return True
    if _CONCLUDED.search(rest):
        return True
    stripped = rest.strip()
    if re.fullmatch(r"#\s*Using devices\s*", stripped):
        if st is not None and st.rows:
            new_state(stream, line_no)
        return True
    if stripped == "#":
        return True
    units_line = re.fullmatch(r"#[\s(]*B\)\s+\(elements\).*", stripped)
    return bool(units_line or re.search(r"out-of-place\s+.*in-place", stripped))


def _describe_instead(text: str, states: list[_RunState]) -> str:
    """One-line description of what a table-less log holds (for the error message)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("# source:")]
    if not lines:
        return "the file is empty"
    joined = " ".join(lines)
    if m := re.search(r"There are not enough slots available in the system to satisfy the (\d+)\s*slots", joined):
        return (f"found instead an Open MPI launch failure: not enough slots for the {m.group(1)} "
                "processes requested (no process ran)")
    if m := re.search(r"(mpirun|prterun|srun|orterun)[^.]*?(noticed|error|failed)[^.]*\.", joined, re.IGNORECASE):
        return f"found instead a launcher failure: {m.group(0)[:200]!r}"
    if m := re.search(r"Test (?:NCCL|CUDA) failure[^\n]*", text):
        return f"found instead an nccl-tests failure: {m.group(0).strip()[:200]!r}"
    for ln in lines:
        if _header_layout(ln):  # a column header names an 'error' column: not an error message
            continue
        if re.search(r"NCCL WARN|\berror\b|failed|Segmentation fault|Aborted", ln, re.IGNORECASE):
            return f"found instead an error message: {ln[:200]!r}"
    if any(s.info.has_header or s.info.has_table_header for s in states):
        return "found a header but no result rows (run killed or output cut before the table?)"
    return f"found instead {len(lines)} line(s) of other text, first: {lines[0][:120]!r}"


def _finish_run(st: _RunState, text: str, path: str, collective: str | None, n_ranks: int | None,
                all_lines: list[str] | None = None, previous_end: int = 0) -> None:
    """Decide collective and rank count, count cycles, and flag inconsistent rows."""
    info = st.info
    if st.ranks:
        info.hosts = sorted({h for h, _ in st.ranks.values()})
        info.gpus = sorted({g for _, g in st.ranks.values()})
    _decide_collective(info, st, text, path, collective, all_lines or [], previous_end)
    _decide_ranks(info, st, n_ranks)
    _decide_time_unit(info, st.rows)
    info.n_rows = len({r["line"] for r in st.rows})
    info.n_cycles = 1 + max(r["cycle"] for r in st.rows)
    _flag_rows(info, st.rows)
    _check_sizes(info, st.rows)


def announced_sizes(min_bytes: int, max_bytes: int, step: str) -> int | None:
    """How many message sizes a header's ``minBytes``, ``maxBytes`` and ``step`` announce
    (``2(factor)``: min, 2 min, ... up to max; ``N(bytes)``: min, min + N, ...); None when unknown."""
    m = re.fullmatch(r"(\d+)\((factor|bytes)\)", step or "")
    if not m or min_bytes <= 0 or max_bytes < min_bytes:
        return None
    value = int(m.group(1))
    if m.group(2) == "bytes":
        return max_bytes // value - min_bytes // value + 1 if value > 0 else None
    if value < 2:
        return None
    count, size = 0, min_bytes
    while size <= max_bytes:
        count, size = count + 1, size * value
    return count


def _check_sizes(info: RunInfo, rows: list[dict[str, Any]]) -> None:
    """Warn when a run's table holds fewer sizes than its header announced: a log cut short
    (a truncated paste, a killed run) would otherwise read as a complete sweep."""
    if info.min_bytes is None or info.max_bytes is None or info.step is None:
        return
    expected = announced_sizes(info.min_bytes, info.max_bytes, info.step)
    found = len({r["size"] for r in rows})
    if expected is not None and found < expected:
        largest = max(r["size"] for r in rows)
        message = (f"the table holds {found} of the {expected} sizes its header announces (minBytes "
                   f"{info.min_bytes}, maxBytes {info.max_bytes}, step {info.step}); the largest is {largest} "
                   f"bytes{'' if info.has_footer else ' and there is no footer'}: a truncated log?")
        info.warnings.append(message)
        log.warning("run %d: %s", info.index, message)


def _decide_time_unit(info: RunInfo, rows: list[dict[str, Any]]) -> None:
    """Convert the times of a run printed in ms (the first generation) to µs. Known from the
    column header, else from the data: algbw [GB/s] x time / size [B] is ~1e-3 when the time is
    in µs (times the (n-1)/n of the old convention at most) and ~1e-6 when it is in ms."""
    if info.time_unit_source is None and not info.cputime:
        ratios = sorted(r["algbw_gbps"] * r["time_us"] / r["size"] for r in rows
                        if r["size"] > 0 and r["algbw_gbps"] >= 0.1 and r["time_us"] > 0)
        if ratios and ratios[len(ratios) // 2] < 3e-5:
            info.time_unit, info.time_unit_source = "ms", "data (algbw x time / size)"
            info.warnings.append("times read as milliseconds: algbw = size/time holds only in ms "
                                 "(the first nccl-tests generation); time_us is converted")
    if info.time_unit == "ms":
        for r in rows:
            for key in ("time_us", "i_min_us", "i_max_us", "i_p99_us"):
                r[key] *= 1000.0
            ut, ua, ub = r["_ulp"]
            r["_ulp"] = (ut * 1000.0, ua, ub)


def _count_class(rows: list[dict[str, Any]]) -> tuple[str | None, int | None]:
    """Whether printed count covers the whole buffer ('full') or one rank's share ('per-rank', n)."""
    ratios = []
    for r in rows:
        ws = WORD_SIZES.get(r["type"].lower())
        if ws and r["count"] > 0 and r["size"] > 0:
            ratios.append(r["size"] / (r["count"] * ws))
    if not ratios:
        return None, None
    med = sorted(ratios)[len(ratios) // 2]
    if abs(med - 1.0) < 1e-9:
        return "full", None
    n = round(med)
    if n >= 2 and abs(med - n) < 1e-6:
        return "per-rank", n
    return None, None


def _names_in(line: str) -> list[str]:
    """Known collectives a log line names as nccl-tests binaries (``all_reduce_perf`` ...)."""
    names = []
    for m in _PERF_NAME.finditer(line):
        c = normalise_collective(m.group(1))
        if c in KNOWN_COLLECTIVES and c not in names:
            names.append(c)
    return names


def _named_before(all_lines: list[str], start: int, stop: int) -> tuple[str | None, str | None]:
    """The collective named by the nearest line before a run's first row (command line,
    ``Running: ... all_reduce_perf``, ``===begin all_gather_perf test===``), looking back no
    further than the previous run; (name, source) or (None, reason it is ambiguous)."""
    for i in range(stop - 1, max(start, 0) - 1, -1):
        names = _names_in(all_lines[i]) if i < len(all_lines) else []
        if len(names) == 1:
            return names[0], f"log line {i + 1}: {all_lines[i].strip()[:80]}"
        if len(names) > 1:
            return None, f"line {i + 1} names {', '.join(names)}"
    return None, None


def _from_table(st: _RunState, cls: str | None) -> tuple[str | None, str]:
    """The collective the table's own columns imply, or None with what it could be."""
    lays = st.layouts
    redops = {r["redop"].lower() for r in st.rows}
    roots = {r["root"] for r in st.rows}
    reduces = bool(redops - {"none"})
    if lays and all(not lay.has_redop and lay.has_root for lay in lays):
        return "broadcast", "old layout with root and no redop column"
    if lays and all(not lay.has_redop and not lay.has_root for lay in lays):
        return None, "all_gather or alltoall (old layout without redop and root columns)"
    if lays and all(lay.has_redop and not lay.has_root for lay in lays):
        if cls == "full":
            return "all_reduce", "old layout with redop and no root column, full count"
        if cls == "per-rank":
            return "reduce_scatter", "old layout with redop and no root column, per-rank count"
        return None, "all_reduce or reduce_scatter"
    rooted = bool(roots) and min(roots) >= 0
    if cls == "full":
        if reduces and roots == {-1}:
            return "all_reduce", "redop and root -1, full count"
        if reduces and rooted:
            return "reduce", "redop and a root, full count"
        if not reduces and rooted:
            return "broadcast", "no redop and a root, full count"
        return None, "sendrecv or hypercube (no redop, no root, full count)"
    if cls == "per-rank":
        if reduces:
            return "reduce_scatter", "redop, per-rank count"
        if rooted:
            return None, "gather or scatter (no redop, a root, per-rank count)"
        return None, "all_gather or alltoall (no redop, no root, per-rank count)"
    return None, "table count column not readable"


def _decide_collective(info: RunInfo, st: _RunState, text: str, path: str, collective: str | None,
                       all_lines: list[str], previous_end: int = 0) -> None:
    """Collective of a run, from the log's own words first: --collective, the run's
    ``# Collective test starting`` header, the nearest line naming a binary before its first
    row, the table's columns; the file name only when these leave it open."""
    rows = st.rows
    cls, _ = _count_class(rows)
    table_name, table_why = _from_table(st, cls)
    if collective:
        info.collective, info.collective_source = normalise_collective(collective), "given"
    elif info.collective is None:
        first = st.first_row_line or info.first_line
        near, near_why = _named_before(all_lines, previous_end, first - 1) if all_lines else (None, None)
        whole = _names_in(text) if text else []
        stem = Path(path).name.lower()
        file_names = [c for c in sorted(KNOWN_COLLECTIVES, key=len, reverse=True)
                      if re.search(rf"(?:^|[^a-z]){c.replace('_', '_?')}(?:[^a-z]|$)", stem)]
        if near:
            info.collective, info.collective_source = near, near_why
        elif table_name:
            info.collective, info.collective_source = table_name, f"table columns ({table_why})"
        elif len(whole) == 1 and not near_why:
            info.collective, info.collective_source = whole[0], "only collective named in the log"
        elif file_names:
            info.collective, info.collective_source = file_names[0], "file name"
            if near_why:
                info.warnings.append(f"collective ambiguous in the log ({near_why}); took {file_names[0]} "
                                     "from the file name (give --collective to be sure)")
        else:
            why = near_why or table_why
            info.warnings.append(f"collective not named in the log and not inferable from the table ({why}); "
                                 "give --collective")
    if info.collective and table_name and info.collective != table_name and info.collective_source != "given":
        info.warnings.append(f"{info.collective} ({info.collective_source}) disagrees with the table's columns, "
                             f"which say {table_name} ({table_why})")
    elif info.collective and cls:
        expected = "per-rank" if info.collective in PER_RANK_COUNT else "full"
        if info.collective in KNOWN_COLLECTIVES and expected != cls:
            info.warnings.append(f"{info.collective} ({info.collective_source}) disagrees with the "
                                 f"table, whose count column is {cls}")


def _decide_ranks(info: RunInfo, st: _RunState, n_ranks: int | None) -> None:
    if n_ranks:
        info.n_ranks, info.n_ranks_source = int(n_ranks), "given"
        return
    if info.n_ranks:  # already known (JSON device list)
        return
    if st.ranks:
        info.n_ranks, info.n_ranks_source = max(st.ranks) + 1, "device lines"
        return
    cls, n = _count_class(st.rows)
    if cls == "per-rank" and n:
        info.n_ranks, info.n_ranks_source = n, "size/count ratio"
        return
    if info.collective in ("all_reduce", "all_gather", "reduce_scatter", "alltoall", "gather", "scatter"):
        ratios = sorted(r["busbw_gbps"] / r["algbw_gbps"] for r in st.rows
                        if r["algbw_gbps"] >= 10 and math.isfinite(r["busbw_gbps"]))
        if ratios:
            ratio = ratios[len(ratios) // 2]
            scale = 2.0 if info.collective == "all_reduce" else 1.0
            if scale - ratio > 0:
                est = scale / (scale - ratio)
                n = round(est)
                if n >= 2 and abs(busbw_factor(info.collective, n) - ratio) < 0.01 * ratio + 0.002:
                    info.n_ranks, info.n_ranks_source = n, "busbw/algbw ratio"
                    info.warnings.append(f"rank count not in the log; {n} inferred from busbw/algbw")
                    return
    info.warnings.append("rank count unknown (no device lines); busbw factor check skipped")


#: collectives whose algbw nccl-tests of the 2.x era computed from count*(n-1) bytes with busbw = algbw
#: (all_gather.cu / reduce_scatter.cu GetBw: baseBw = count*typesize*(nranks-1)/sec, factor 1);
#: today algbw = size/time and busbw = algbw*(n-1)/n, so busbw is the same number either way.
_OLD_BW_COLLECTIVES = ("all_gather", "reduce_scatter")


def _row_problems(r: dict[str, Any], alg_share: float, factor: float | None, cputime: bool) -> list[str]:
    ut, ua, ub = r["_ulp"]
    t, alg, bus = r["time_us"], r["algbw_gbps"], r["busbw_gbps"]
    problems = []
    if not cputime and r["size"] > 0 and t > 0 and math.isfinite(t) and math.isfinite(alg):
        expected = r["size"] * alg_share / t / 1e3
        tol = ua + expected * ut / max(t - ut, 1e-12) + 1e-9
        if abs(alg - expected) > tol:
            what = "size/time" if alg_share == 1.0 else f"size x {alg_share:.4g}/time"
            problems.append(f"algbw {alg:g} != {what} {expected:.4g}")
    if factor is not None and math.isfinite(alg) and math.isfinite(bus):
        tol = ub + factor * ua + 1e-9
        if abs(bus - factor * alg) > tol:
            problems.append(f"busbw {bus:g} != algbw x {factor:.4g} = {factor * alg:.4g}")
    return problems


def _flag_rows(info: RunInfo, rows: list[dict[str, Any]]) -> None:
    """Flag rows whose algbw disagrees with size/time or busbw with algbw x factor.

    For all_gather/reduce_scatter the run is checked under both nccl-tests conventions
    (today's and the 2.x era's, see :data:`_OLD_BW_COLLECTIVES`) and the one the log follows
    is kept in ``info.bw_convention``.
    """
    factor = None
    if info.collective in KNOWN_COLLECTIVES and info.n_ranks:
        factor = busbw_factor(info.collective, info.n_ranks)
    conventions = [("current", 1.0, factor)]
    if factor is not None and info.collective in _OLD_BW_COLLECTIVES and info.n_ranks and info.n_ranks > 1:
        conventions.append(("old", (info.n_ranks - 1) / info.n_ranks, 1.0))
    best: tuple[int, str, list[list[str]]] | None = None
    for name, share, fac in conventions:
        found = [_row_problems(r, share, fac, info.cputime) for r in rows]
        n_bad = sum(1 for p in found if p)
        if best is None or n_bad < best[0]:
            best = (n_bad, name, found)
    assert best is not None
    n_flagged, name, found = best
    info.bw_convention = name if factor is not None else None
    if name == "old":
        info.warnings.append(f"algbw follows the old nccl-tests convention for {info.collective} "
                             "(algbw = size x (n-1)/n / time, busbw = algbw); busbw is comparable with today's")
    for r, problems in zip(rows, found, strict=True):
        r["bw_flag"] = "; ".join(problems)
    info.n_flagged = n_flagged
    if n_flagged:
        info.warnings.append(f"{n_flagged} measurement(s) with algbw/busbw inconsistent with "
                             "size/time or the busbw factor (see bw_flag)")


# --------------------------------------------------------------------------- JSON (-J)


def _nccl_code_to_version(code: Any) -> str | None:
    if not isinstance(code, int) or code <= 0:
        return None
    if code >= 10000:
        return f"{code // 10000}.{(code // 100) % 100}.{code % 100}"
    return f"{code // 1000}.{(code // 100) % 10}.{code % 100}"


def _jfloat(v: Any) -> float:
    if v is None:
        return math.nan
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def parse_json(text: str, *, path: str = "<json>", collective: str | None = None,
               n_ranks: int | None = None) -> ParsedLog:
    """Parse the ``-J`` JSON report of nccl-tests into a :class:`ParsedLog`."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NcclTestsError(f"{path}: not valid nccl-tests JSON (line {exc.lineno}, column "
                             f"{exc.colno}: {exc.msg}); an interrupted run leaves the report unclosed") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise NcclTestsError(f"{path}: JSON without a 'results' list; not an nccl-tests -J report")
    cfg_raw = doc.get("config")
    cfg: dict = cfg_raw if isinstance(cfg_raw, dict) else {}
    info = RunInfo(index=0, has_header=bool(cfg))
    info.nccl_version = _nccl_code_to_version(doc.get("nccl_version"))
    args_raw = doc.get("args")
    args: list = args_raw if isinstance(args_raw, list) else []
    if collective:
        info.collective, info.collective_source = normalise_collective(collective), "given"
    elif args and isinstance(args[0], str):
        info.collective, info.collective_source = normalise_collective(args[0]), "command line in log"
    for key, attr in (("nthreads", "n_threads"), ("ngpus", "n_gpus_per_process"), ("minimum_bytes", "min_bytes"),
                      ("maximum_bytes", "max_bytes"), ("warmup_iters", "warmup_iters"), ("iterations", "iters"),
                      ("aggregated_iterations", "agg_iters"), ("validation", "validation"), ("graph", "graph")):
        if isinstance(cfg.get(key), int):
            setattr(info, attr, cfg[key])
    if "step_factor" in cfg:
        info.step = f"{cfg['step_factor']}(factor)"
    elif "step_bytes" in cfg:
        info.step = f"{cfg['step_bytes']}(bytes)"
    if str(cfg.get("blocking_collectives", "false")).lower() == "true":
        info.blocking = "enabled"
    info.per_iteration = str(cfg.get("per_iter_timing", "false")).lower() == "true"
    devices_raw = cfg.get("devices")
    devices: list = devices_raw if isinstance(devices_raw, list) else []
    devs = [d for d in devices if isinstance(d, dict)]
    if devs:
        info.hosts = sorted({str(d.get("hostname", "")) for d in devs})
        info.gpus = sorted({str(d.get("device_info", "")) for d in devs})
    st = _RunState(0, "", 0)
    st.info = info
    skipped: list[SkippedLine] = []
    for i, res in enumerate(doc["results"]):
        try:
            cand, per_iter = _json_row(res)
        except (KeyError, TypeError, ValueError) as exc:
            skipped.append(SkippedLine(i, json.dumps(res)[:300], f"result entry {i} incomplete: {exc}",
                                       damaged=True))
            continue
        info.cputime = info.cputime or "cpu_time" in (res.get("out_of_place") or res.get("in_place") or {})
        lay = _PERITER if per_iter else _STD
        st.add_row(lay, cand, i)
    if not st.rows:
        raise NcclTestsError(f"{path}: JSON report has no usable result entries")
    for r in st.rows:
        r["_ulp"] = (5e-7, 5e-7, 5e-7)
    oob = doc.get("out_of_bounds")
    if isinstance(oob, dict) and isinstance(oob.get("count"), int):
        info.has_footer = True
        info.out_of_bounds = oob["count"]
        info.out_of_bounds_ok = oob["count"] == 0
    avg = doc.get("average_bus_bandwidth")
    if isinstance(avg, dict):
        info.avg_busbw_gbps = _jfloat(avg.get("bandwidth"))
    errors = doc.get("errors")
    if isinstance(errors, list) and errors:  # the report's own list of failures
        first = errors[0]
        info.failure = (json.dumps(first) if not isinstance(first, str) else first)[:300] + " (JSON 'errors')"
        if len(errors) > 1:
            info.warnings.append(f"{len(errors)} entries in the report's 'errors'; the first is shown")
    _decide_ranks_json(info, devs, n_ranks)
    _finish_run(st, "", path, collective, n_ranks)
    for r in st.rows:
        r.pop("_ulp", None)
    return ParsedLog(path=path, format="json", runs=[info], rows=st.rows, skipped=skipped,
                     bad_values=_bad_values(st.rows))


def _decide_ranks_json(info: RunInfo, devs: list[dict[str, Any]], n_ranks: int | None) -> None:
    if n_ranks:
        info.n_ranks, info.n_ranks_source = n_ranks, "given"
    elif devs and all(isinstance(d.get("rank"), int) for d in devs):
        info.n_ranks, info.n_ranks_source = max(d["rank"] for d in devs) + 1, "device list"


def _json_row(res: dict[str, Any]) -> tuple[list[str], bool]:
    """Turn one JSON result entry into the token list of a text row."""
    def num(v: Any) -> str:
        f = _jfloat(v)
        return "nan" if math.isnan(f) else repr(f)

    cand = [str(int(res["size"])), str(int(res["count"])), str(res["type"]), str(res["redop"]),
            str(int(str(res.get("root", "-1")).strip() or -1))]
    per_iter = "out_of_place_per_iter" in res or "in_place_per_iter" in res
    for key in ("out_of_place", "in_place"):
        body = res.get(key) or {}
        t = body.get("time", body.get("cpu_time"))
        wrong = body.get("nwrong")
        cand += [num(t), num(body.get("alg_bw")), num(body.get("bus_bw")), "N/A" if wrong is None else num(wrong)]
        if per_iter:
            pi = res.get(f"{key}_per_iter") or {}
            cand += [num(pi.get("min_us")), num(pi.get("max_us")), num(pi.get("p99_us")), num(pi.get("cv_pct"))]
    return cand, per_iter


# --------------------------------------------------------------------------- entry point


#: Bytes of a file looked at before parsing it line by line (:func:`_refuse_binary`).
SNIFF_BYTES = 1 << 16
#: The first bytes of binary files users give by mistake (an nsys export, a compressed file, a fit).
BINARY_MAGIC = {b"SQLite format 3\x00": "an SQLite database (an Nsight Systems export?)",
                b"\x1f\x8b": "gzip-compressed (decompress it first)", b"PK\x03\x04": "a zip archive",
                b"\x89HDF": "an HDF5/netCDF file (an evtsync fit?)", b"CDF\x01": "a netCDF file",
                b"CDF\x02": "a netCDF file", b"\x7fELF": "an executable (ELF)", b"PAR1": "a Parquet table",
                b"\x89PNG": "a PNG image", b"%PDF": "a PDF document", b"\xfd7zXZ": "xz-compressed",
                b"BZh": "bzip2-compressed", b"(\xb5/\xfd": "zstd-compressed"}
#: Share of control bytes (other than tab, newline, carriage return, form feed and NUL, which
#: killed jobs leave in logs) above which the start of a file is binary, not a log.
BINARY_SHARE = 0.1


def _refuse_binary(path: Path, head: bytes) -> None:
    """Refuse a binary file from its first bytes, before any line is parsed: a 2 MB SQLite
    file cost 33 s of regular expressions before this (issue 47)."""
    for magic, what in BINARY_MAGIC.items():
        if head.startswith(magic):
            raise NcclTestsError(f"{path}: {what}, not an nccl-tests log (a text file of the benchmark's output)")
    if not head:
        return
    control = sum(head.count(bytes([c])) for c in (*range(1, 9), 11, *range(14, 32), 127))
    if control > BINARY_SHARE * len(head):
        raise NcclTestsError(f"{path}: binary content ({control} control bytes in its first {len(head)}), not an "
                             "nccl-tests log (a text file of the benchmark's output)")


def parse_log(path: str | Path, *, collective: str | None = None, n_ranks: int | None = None) -> ParsedLog:
    """Read an nccl-tests log (text or ``-J`` JSON) from a file.

    ``collective`` and ``n_ranks`` override what the log says (needed for headerless pastes
    of all_gather/alltoall, where the table alone cannot tell them apart).
    """
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            _refuse_binary(p, fh.read(SNIFF_BYTES))
            fh.seek(0)
            data = fh.read()
    except IsADirectoryError:
        raise NcclTestsError(f"{p}: a folder, not an nccl-tests log (give the log file)") from None
    except OSError as exc:
        raise NcclTestsError(f"{p}: cannot read: {exc.strerror or exc}") from exc
    text = data.decode("utf-8", errors="replace")
    if text.lstrip().startswith("{"):
        return parse_json(text, path=str(p), collective=collective, n_ranks=n_ranks)
    return parse_text(text, path=str(p), collective=collective, n_ranks=n_ranks)
