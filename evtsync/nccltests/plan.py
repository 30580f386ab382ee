"""Experiment planner and runner for nccl-tests, after the seed's design (seed 004).

Each *matrix* varies one factor (warmup ``-w``, iterations ``-n``, blocking ``-z``,
instrumentation ``-I``, CPU affinity, background noise) and holds the rest at the seed's
defaults. Variants are run in a balanced order so that no value is tied to one execution
position (the seed's rejected first round confounded warmup with GPU clock ramp-up):

* ``latin``: cyclic Latin square, k replicates, every variant once in every position;
* ``mirror``: replicate pairs run forward then backward (equal mean position for every
  variant, so a linear drift cancels); for an odd number of variants each pair starts from a
  rotated order, and 4 replicates are the default, because with 2 the middle variant would
  always run in the middle.

``run_plan`` executes the commands where the binary exists, one process at a time, each
output stored atomically per variant and replicate, plus ``index.json`` and a pooled
per-variant summary (cycles of all replicates of a variant pooled, as in the seed).

**A plan is a script**: running it executes the commands it lists. ``run_plan`` therefore runs
only what a plan of ``build_plan`` holds, an nccl-tests binary (``*_perf``, ``*_perf_mpi``),
optionally behind the launchers and pinning wrappers of :data:`WRAPPERS` (``mpirun``, ``srun``,
``taskset``, ...); anything else (``sh -c ...``, an interpreter, any other program) is refused
unless the caller passes ``allow_any_command=True`` (``--allow-any-command``). Whatever the
commands, every log is written under the output folder: a log path that is absolute or climbs
out of it (``../../x.log``) is refused before anything runs.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evtsync.core.errors import EvtsyncError, NcclTestsError
from evtsync.core.progress import progress
from evtsync.nccltests.parse import parse_log

if TYPE_CHECKING:  # pandas (and the table writer that needs it) load only when a plan runs
    import pandas as pd

log = logging.getLogger("evtsync.nccltests.plan")

PLAN_VERSION = 1
BURNER = ["sh", "-c", "while :; do :; done"]


@dataclass(frozen=True)
class Matrix:
    """One factor varied over its values, with the ordering design."""

    name: str
    values: tuple[str, ...]
    design: str
    replicates: int


#: The seed's matrices (values as strings; 'affinity' values are CPU ids, 'noise' are modes).
DEFAULT_MATRICES: dict[str, tuple[tuple[str, ...], str]] = {
    "warmup": (("0", "1", "5", "20"), "latin"),
    "iterations": (("1", "5", "20", "100"), "mirror"),
    "blocking": (("0", "1", "2", "3"), "mirror"),
    "instrumentation": (("0", "1"), "mirror"),
    "affinity": (("0", "1"), "mirror"),
    "noise": (("idle", "same-core", "remote"), "mirror"),
}
_FLAGS = {"warmup": "-w", "iterations": "-n", "blocking": "-z", "instrumentation": "-I"}


@dataclass
class PlanSettings:
    """Fixed part of every command (the seed's defaults)."""

    binary: str
    #: sizes in evtsync's convention (evtsync.core.units: ``Mi`` = 2^20, ``M`` = 10^6); passed to
    #: nccl-tests as exact byte counts, since its own ``1M`` means 2^20
    min_bytes: str = "1Mi"
    max_bytes: str = "64Mi"
    step_factor: int = 64
    gpus: int = 4
    cycles: int = 10
    datatype: str = "float"
    op: str = "sum"
    warmup: int = 5
    iterations: int = 20
    blocking: int = 0
    instrumentation: int = 1
    cpu: int | None = 0
    remote_cpu: int = 1
    average: int = 3
    extra: list[str] = field(default_factory=list)


def latin_orders(k: int) -> list[list[int]]:
    """Cyclic Latin square: replicate r runs variant (i + r) mod k at position i."""
    return [[(i + r) % k for i in range(k)] for r in range(k)]


def mirrored_orders(k: int, replicates: int) -> list[list[int]]:
    """Forward/backward pairs; pair j starts from the order rotated by j."""
    orders = []
    for r in range(replicates):
        pair = r // 2
        forward = [(i + pair) % k for i in range(k)]
        orders.append(forward if r % 2 == 0 else forward[::-1])
    return orders


def design_orders(matrix: Matrix) -> list[list[int]]:
    """Variant index per position, one list per replicate."""
    k = len(matrix.values)
    if matrix.design == "latin":
        base = latin_orders(k)
        return [base[r % k] for r in range(matrix.replicates)]
    if matrix.design == "mirror":
        return mirrored_orders(k, matrix.replicates)
    raise NcclTestsError(f"unknown design {matrix.design!r} for matrix {matrix.name}; use 'latin' or 'mirror'")


def default_replicates(values: tuple[str, ...], design: str) -> int:
    """Replicates that balance positions: k for a Latin square, 2 (even k) or 4 (odd k) mirrored."""
    k = len(values)
    if design == "latin":
        return k
    return 2 if k % 2 == 0 else 4


def check_balance(matrix: Matrix, orders: list[list[int]]) -> None:
    """Raise when some variant would always occupy the same execution position."""
    if len(matrix.values) < 2 or len(orders) < 2:
        raise NcclTestsError(f"matrix {matrix.name}: needs >= 2 values and >= 2 replicates for a balanced order")
    for v, name in enumerate(matrix.values):
        positions = {order.index(v) for order in orders}
        if len(positions) == 1:
            raise NcclTestsError(f"matrix {matrix.name}: variant {name} would always run at position "
                                 f"{positions.pop()}; use more replicates or the latin design")


def _command(settings: PlanSettings, matrix: str, value: str) -> tuple[list[str], int | None, int | None]:
    """(argv, benchmark CPU, noise CPU) for one variant."""
    opts = {"warmup": settings.warmup, "iterations": settings.iterations,
            "blocking": settings.blocking, "instrumentation": settings.instrumentation}
    cpu = settings.cpu
    noise_cpu = None
    if matrix in _FLAGS:
        opts[matrix] = int(value)
    elif matrix == "affinity":
        cpu = int(value)
    elif matrix == "noise":
        if value == "same-core":
            noise_cpu = cpu if cpu is not None else 0
        elif value == "remote":
            noise_cpu = settings.remote_cpu
        elif value != "idle":
            raise NcclTestsError(f"noise variant {value!r}: expected idle, same-core or remote")
    else:
        raise NcclTestsError(f"unknown matrix {matrix!r}; known: {', '.join(DEFAULT_MATRICES)}")
    from evtsync.core.units import nccl_tests_size

    argv = [settings.binary, "-b", nccl_tests_size(settings.min_bytes), "-e", nccl_tests_size(settings.max_bytes), "-f", str(settings.step_factor),
            "-g", str(settings.gpus), "-w", str(opts["warmup"]), "-n", str(opts["iterations"]),
            "-N", str(settings.cycles), "-c", "1", "-I", str(opts["instrumentation"]),
            "-z", str(opts["blocking"]), "-d", settings.datatype, "-o", settings.op,
            "-a", str(settings.average), "-C", "0", *settings.extra]
    if cpu is not None:
        argv = ["taskset", "-c", str(cpu), *argv]
    return argv, cpu, noise_cpu


def build_plan(settings: PlanSettings, matrices: list[str] | None = None,
               replicates: dict[str, int] | None = None, designs: dict[str, str] | None = None) -> dict[str, Any]:
    """The command matrix as a JSON-ready dict: entries in execution order."""
    names = matrices or list(DEFAULT_MATRICES)
    entries: list[dict[str, Any]] = []
    mats = []
    for name in names:
        if name not in DEFAULT_MATRICES:
            raise NcclTestsError(f"unknown matrix {name!r}; known: {', '.join(DEFAULT_MATRICES)}")
        values, design = DEFAULT_MATRICES[name]
        if name == "affinity":
            values = (str(settings.cpu if settings.cpu is not None else 0), str(settings.remote_cpu))
        design = (designs or {}).get(name, design)
        reps = (replicates or {}).get(name) or default_replicates(values, design)
        matrix = Matrix(name, values, design, reps)
        orders = design_orders(matrix)
        check_balance(matrix, orders)
        mats.append(asdict(matrix))
        for rep, order in enumerate(orders):
            for pos, v in enumerate(order):
                value = values[v]
                argv, cpu, noise_cpu = _command(settings, name, value)
                entries.append({
                    "order": len(entries), "matrix": name, "variant": value, "replicate": rep,
                    "position": pos, "argv": argv, "cpu": cpu, "noise_cpu": noise_cpu,
                    "log": f"{name}/{value}/rep{rep}.log",
                })  # fmt: skip
    return {"version": PLAN_VERSION, "settings": asdict(settings), "matrices": mats, "entries": entries}


def load_plan(path: str | Path) -> dict[str, Any]:
    """Read a plan written by ``build_plan``/``evtsync nccl-tests plan``."""
    p = Path(path)
    try:
        plan = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise NcclTestsError(f"{p}: cannot read plan: {exc}") from exc
    if not isinstance(plan, dict) or plan.get("version") != PLAN_VERSION or not isinstance(plan.get("entries"), list):
        raise NcclTestsError(f"{p}: not an evtsync nccl-tests plan (version {PLAN_VERSION})")
    return plan


#: Programs a plan may put before the nccl-tests binary: MPI and Slurm launchers, pinning.
WRAPPERS = frozenset({"mpirun", "mpiexec", "orterun", "prterun", "srun", "taskset", "numactl"})
#: nccl-tests binaries: ``all_reduce_perf``, ``alltoall_perf``, ``sendrecv_perf_mpi``, ...
NCCL_TESTS_BINARY_RE = re.compile(r"^[a-z][a-z0-9_]*_perf(_mpi)?$")
#: Never accepted as an option value before the binary: they would run code of their own.
_INTERPRETERS = re.compile(r"^(sh|bash|dash|zsh|ksh|csh|tcsh|fish|env|xargs|eval|exec|sudo|su|nohup|"
                           r"python[0-9.]*|perl|ruby|node|lua|awk|gawk)$")


def _tool_of(argv: list[str]) -> tuple[str | None, str]:
    """The nccl-tests binary a command runs, or None with the reason it is not one.

    The command is wrappers (each with its options, which start with ``-``, and their values)
    followed by the binary; the first other word, or an interpreter anywhere before the binary,
    makes it something else.
    """
    after_option = False
    for word in argv:
        name = os.path.basename(word)
        if NCCL_TESTS_BINARY_RE.match(name):
            return word, ""
        if name in WRAPPERS:
            after_option = False
            continue
        if _INTERPRETERS.match(name):
            return None, f"it runs {word!r}"
        if word.startswith("-"):
            after_option = "=" not in word
            continue
        if after_option and shutil.which(word) is None:  # the value of the option before it, not a program
            after_option = False
            continue
        return None, f"it runs {word!r}, which is neither an nccl-tests binary nor one of {', '.join(sorted(WRAPPERS))}"
    return None, "it names no nccl-tests binary (*_perf)"


def check_plan(entries: list[dict[str, Any]], out: Path, allow_any_command: bool = False) -> None:
    """Refuse, before anything runs, a plan entry whose log would lie outside ``out`` and, unless
    ``allow_any_command``, one whose command is not an nccl-tests binary behind :data:`WRAPPERS`."""
    from evtsync.core.trust import containment_problem

    root = out.resolve()
    for e in entries:
        where = f"plan entry {e.get('order', '?')}"
        argv, log_rel = e.get("argv"), e.get("log")
        if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
            raise NcclTestsError(f"{where}: 'argv' must be a non-empty list of strings, got {argv!r}")
        if not isinstance(log_rel, str) or not log_rel:
            raise NcclTestsError(f"{where}: 'log' must be a relative file path, got {log_rel!r}")
        problem = containment_problem(root, log_rel)  # one check for every path a file names
        if problem is not None:
            raise NcclTestsError(f"{where}: log {log_rel!r} lies outside the output folder {out} ({problem}); a "
                                 "plan writes only under --out (relative paths without '..')")
        if not allow_any_command:
            tool, why = _tool_of(argv)
            if tool is None:
                raise NcclTestsError(f"{where}: refusing to run {' '.join(argv)!r}: {why}; a plan is a script "
                                     "and runs only nccl-tests binaries (pass --allow-any-command to run it "
                                     "anyway, if you trust whoever wrote it)")


def _check_executables(plan: dict[str, Any]) -> None:
    needed = set()
    for e in plan["entries"]:
        argv = e["argv"]
        needed.add(argv[0])
        if argv[0] == "taskset" and len(argv) > 3:
            needed.add(argv[3])
        if e.get("noise_cpu") is not None:
            needed.add("taskset")
    for exe in sorted(needed):
        if os.sep in exe:
            if not (Path(exe).is_file() and os.access(exe, os.X_OK)):
                raise NcclTestsError(f"benchmark binary not found or not executable: {exe}")
        elif shutil.which(exe) is None:
            raise NcclTestsError(f"executable not found on PATH: {exe}")


@dataclass
class RunReport:
    """What ``run_plan`` did: one record per command, and the pooled per-variant summary."""

    out_dir: str
    records: list[dict[str, Any]]
    summary: pd.DataFrame

    @property
    def n_failed(self) -> int:
        """Commands that failed (non-zero exit, timeout, or no parsable table)."""
        return sum(r["status"] != "ok" for r in self.records)


def _writers() -> tuple[Any, Any]:
    from evtsync.core.tableio import write_table, write_text_atomic

    return write_table, write_text_atomic


def run_plan(plan: dict[str, Any], out_dir: str | Path, *, timeout_s: float = 600.0,
             only_matrix: str | None = None, allow_any_command: bool = False) -> RunReport:
    """Execute a plan's commands in order, store each output under ``out_dir``, and summarise per
    variant. The plan is checked first (:func:`check_plan`): only nccl-tests binaries run unless
    ``allow_any_command``, and no log is written outside ``out_dir``."""
    out = Path(out_dir)
    entries = [e for e in plan["entries"] if only_matrix is None or e.get("matrix") == only_matrix]
    if not entries:
        raise NcclTestsError(f"plan has no entries{' for matrix ' + only_matrix if only_matrix else ''}")
    check_plan(entries, out, allow_any_command)
    _check_executables({"entries": entries})
    write_table, write_text_atomic = _writers()
    records = []
    for e in progress(entries, desc="nccl-tests runs", total=len(entries), unit="run"):
        records.append(_run_one(e, out, timeout_s))
        write_text_atomic(out / "index.json", json.dumps({"plan": plan.get("settings"), "runs": records}, indent=1))
    summary = summarise_outputs(out, records)
    if not summary.empty:
        write_table(summary, out / "summary.csv")
    return RunReport(out_dir=str(out), records=records, summary=summary)


def _run_one(entry: dict[str, Any], out: Path, timeout_s: float) -> dict[str, Any]:
    rec = {k: entry[k] for k in ("order", "matrix", "variant", "replicate", "position", "log", "argv")}
    burner = None
    start = time.monotonic()
    try:
        if entry.get("noise_cpu") is not None:
            burner = subprocess.Popen(["taskset", "-c", str(entry["noise_cpu"]), *BURNER],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        proc = subprocess.run(entry["argv"], capture_output=True, timeout=timeout_s, check=False)
        text = proc.stdout.decode("utf-8", "replace")
        if proc.stderr:
            text += proc.stderr.decode("utf-8", "replace")
        rec["returncode"] = proc.returncode
    except subprocess.TimeoutExpired as exc:
        text = (exc.stdout or b"").decode("utf-8", "replace") if isinstance(exc.stdout, bytes) else ""
        rec["returncode"] = None
        rec["status"] = f"timeout after {timeout_s:g} s"
    except OSError as exc:
        text = ""
        rec["returncode"] = None
        rec["status"] = f"could not start: {exc}"
    finally:
        if burner is not None:
            burner.terminate()
            try:
                burner.wait(timeout=5)
            except subprocess.TimeoutExpired:
                burner.kill()
                burner.wait()
    rec["seconds"] = round(time.monotonic() - start, 3)
    log_path = out / entry["log"]
    _writers()[1](log_path, text)
    if "status" not in rec:
        if rec["returncode"] != 0:
            rec["status"] = f"exit status {rec['returncode']}"
        else:
            try:
                parsed = parse_log(log_path)
                aborted = [r.failure for r in parsed.runs if r.failure]
                rec["status"] = f"run aborted: {aborted[0]}" if aborted else "ok"
                rec["rows"] = parsed.n_table_lines
            except EvtsyncError as exc:
                rec["status"] = f"no table: {exc}"
    if rec["status"] != "ok":
        log.warning("run %d (%s=%s rep %d): %s", entry["order"], entry["matrix"], entry["variant"],
                    entry["replicate"], rec["status"])
    return rec


def summarise_outputs(out: Path, records: list[dict[str, Any]]) -> pd.DataFrame:
    """Per matrix and variant: stats over the pooled cycles of all successful replicates."""
    import pandas as pd

    from evtsync.nccltests.stats import size_stats

    frames = []
    groups: dict[tuple[str, str], list[Any]] = {}
    for r in records:
        if r["status"] == "ok":
            groups.setdefault((r["matrix"], r["variant"]), []).append(parse_log(out / r["log"]))
    for (matrix, variant), logs in groups.items():
        s = size_stats(logs, pool_runs=True)
        s.insert(0, "variant", variant)
        s.insert(0, "matrix", matrix)
        s.insert(2, "n_processes", len(logs))
        frames.append(s)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
