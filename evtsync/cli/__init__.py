"""Command-line interface: ``evtsync COMMAND ...``.

Thin by design: each module of this package registers one command (or command group)
through ``register(subparsers)`` and calls the library. :data:`COMMANDS` lists them; only the
module of the command being run is imported (``--version``, ``--help`` and a mistyped
command import none, and so no NumPy, pandas or SciPy: issue 16), and a command module
imports the library inside its handler, so that parsing stays light. Errors of the package
(:class:`evtsync.core.errors.EvtsyncError`) are printed as one line on stderr with a non-zero
exit status and no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from evtsync._version import __version__
from evtsync.core.errors import EvtsyncError

if TYPE_CHECKING:
    from evtsync.core.progress import BarSafeHandler

log = logging.getLogger("evtsync")

#: Every command: name -> (module of this package, one-line help), in the order of ``--help``.
#: The help must equal the one the module registers (tests/cli/test_cli_startup.py checks it).
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "the main job: traces -> tax -> attribution -> z-scores -> fits -> predictions -> report"),
    "report": ("report", "HTML report (figures embedded) and Markdown summary of a run folder or a fit"),
    "tax": ("tax", "synchronization tax of every collective (methodology §3)"),
    "breakdown": ("breakdown", "per-rank time breakdown: compute, communication, sync wait, idle"),
    "attribute": ("attribute", "why the straggler was late: critical-path attribution (methodology §4)"),
    "blocks": ("blocks", "compute blocks between collectives and pooled z-scores (methodology §5)"),
    "inject": ("inject", "copy a trace set with a known delay before one CPU launch (methodology §4 b)"),
    "models": ("models", "list the model specifications shipped with evtsync (or of --models-dir)"),
    "fit": ("fit", "fit a Gumbel/GEV model to block maxima (z-scores): MLE or Bayesian"),
    "compare": ("compare", "compare Bayesian fits by PSIS-LOO: ELPD differences with SE, Pareto k, verdict"),
    "ranks": ("ranks", "the rank model: persistently slow ranks, variance shares, tail shape and tau(n) per GPU x precision"),
    "predict": ("predict", "predicted tax tau(n) per GPU x precision, with intervals (default estimator: rankmodel)"),
    "bandwidth": ("bandwidth", "optimal bandwidth B* with the synchronization tax vs Hockney's, per topology and n"),
    "diff": ("diff", "compare the tax of two runs: shifts with intervals and a verdict per PG role"),
    "nccl-tests": ("nccltests", "parse nccl-tests logs; stats, verdicts, alpha/B, run plans"),
    "synth": ("synth", "write a synthetic multi-rank Kineto trace set with ground truth"),
    "cache": ("cache", "the trace cache and the stage result cache: folders, sizes; --prune to their caps, --clear"),
}

#: Options of ``evtsync`` itself (before the command); none takes a value.
_GLOBAL_FLAGS = {"-q", "--quiet", "-v", "--verbose", "-h", "--help", "--version"}
QUIET_HELP = "no progress bars or status lines: warnings, errors and the results only"
VERBOSE_HELP = "say what each step does (log level INFO); -vv adds debugging detail"


def command_of(argv: Sequence[str]) -> str | None:
    """The command named in ``argv`` (the first word that is not a global option), if any."""
    for token in argv:
        if token in _GLOBAL_FLAGS or (token.startswith("-v") and set(token[1:]) == {"v"}):  # -v, -vv, -vvv
            continue
        return token if token in COMMANDS else None
    return None


def build_parser(command: str | None = "*") -> argparse.ArgumentParser:
    """The argument parser.

    ``command="*"`` (the default) registers every command module in full (docs, tests);
    a command name registers that one in full and the others by name and help only;
    ``None`` registers none in full (``--help``, ``--version``).
    """
    parser = argparse.ArgumentParser(
        prog="evtsync",
        description="Measure, explain and predict the synchronization tax of collectives "
        "in GPU scale-up domains.",
    )
    parser.add_argument("--version", action="version", version=f"evtsync {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help=QUIET_HELP)
    parser.add_argument("-v", "--verbose", action="count", default=0, help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        if command == "*" or command == name:
            importlib.import_module(f"{__name__}.{module_name}").register(sub)
        else:
            sub.add_parser(name, help=help_text)
    for name, child in sub.choices.items():
        if command == "*" or command == name:
            _add_global_options(child)
    return parser


def _add_global_options(parser: argparse.ArgumentParser) -> None:
    """Accept -q/-v after the command too (``evtsync tax … -q``), in nested groups as well.

    The defaults are suppressed so that the value given before the command stays.
    """
    present = {opt for action in parser._actions for opt in action.option_strings}
    if "-q" not in present and "--quiet" not in present:
        parser.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help=QUIET_HELP)
    if "-v" not in present and "--verbose" not in present:
        parser.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help=VERBOSE_HELP)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _add_global_options(child)


def _configure_logging(verbose: int, quiet: bool) -> BarSafeHandler:
    """A quiet terminal by default (issue 34): warnings and errors; ``-v`` adds what the stages
    do (INFO), ``-vv`` debugging detail. Records are whole lines above any progress bar."""
    from evtsync.core.progress import BarSafeHandler

    level = logging.DEBUG if verbose >= 2 else (logging.INFO if verbose == 1 and not quiet else logging.WARNING)
    handler = BarSafeHandler()
    handler.setFormatter(logging.Formatter("evtsync: %(levelname)s: %(message)s"))
    root = logging.getLogger("evtsync")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False
    return handler


def _check_outputs(command: str | None, args: argparse.Namespace, argv: Sequence[str] = ()) -> None:
    """Every output path of the command line checked before any work starts (issue 18): an
    existing folder where a file is expected, a file where a folder is, a place that cannot be
    written (``/proc``, a read-only folder) — one line naming the option.

    ``-o/--out`` is checked by the kind its command declared (:func:`evtsync.cli._common.add_out_argument`:
    a table by suffix, a folder, another file, or ``own`` for the commands that check it themselves).
    """
    from evtsync.core.errors import InputError
    from evtsync.core.tableio import check_output_dir, check_output_file, table_format

    out, kind = getattr(args, "out", None), getattr(args, "out_kind", None)
    if getattr(args, "out_required", False) and not out:
        raise InputError(f"{command}: give the output with -o/--out")
    # the error names the option as it was typed
    option = next((t.partition("=")[0] for t in argv if t.partition("=")[0] in ("-o", "--out", "--output")),
                  "-o/--out")
    if isinstance(out, str) and out and kind != "own":
        if kind == "folder":
            check_output_dir(out, option)
        else:
            check_output_file(out, option)
            if kind == "table":
                table_format(out)  # .parquet or .csv, before the work rather than at the write after it
    for attr, option in (("plot", "--plot"), ("plot_path", "--plot-path"), ("out_dir", "OUT_DIR"),
                         ("html", "--html")):
        value = getattr(args, attr, None)
        if not isinstance(value, str) or not value:
            continue
        if attr.startswith("plot"):  # a figure name must end in a figure format, before any sampling or reading
            from evtsync.plots.base import figure_format

            figure_format(value)
        (check_output_dir if attr == "out_dir" else check_output_file)(value, option)


def _route_warnings() -> None:
    """Library warnings (NumPy's RuntimeWarning on an empty slice, pandas', PyMC's) go to the
    log at debug level instead of the terminal: evtsync says what went wrong in its own words,
    and ``-v`` still shows them."""
    import warnings

    def show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        log.debug("%s: %s (%s:%s)", category.__name__, message, filename, lineno)

    warnings.showwarning = show


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``evtsync`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(command_of(argv))
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    handler = _configure_logging(args.verbose, args.quiet)
    _route_warnings()
    try:
        return _run_command(parser, args, argv)
    finally:  # each warning said once above; here how often it came (issue 49)
        for line in handler.repeat_lines():
            print(line, file=sys.stderr)


def _run_command(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: list[str]) -> int:
    """The command's handler with the CLI's error handling: one line and an exit status, no traceback."""
    if args.quiet:
        from evtsync.core.progress import set_progress

        set_progress(False)
    from evtsync.cli._common import private_tempdir

    try:
        _check_outputs(command_of(argv), args, argv)
        with private_tempdir():  # what libraries leave in $TMPDIR goes with it
            return int(args.handler(args) or 0)
    except EvtsyncError as exc:
        print(f"evtsync: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:  # the reader of the output went away (``| head``): not an error
        return 0
    except OSError as exc:  # an environment failure not turned into an EvtsyncError where it happened
        from evtsync.core.errors import OutputError
        from evtsync.core.tableio import one_line_reason

        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"evtsync: error: {where}{one_line_reason(exc)}", file=sys.stderr)
        return OutputError.exit_code
    except KeyboardInterrupt:
        print("evtsync: interrupted", file=sys.stderr)
        return 130


def console_main() -> NoReturn:
    """The ``evtsync`` program (its console script and ``python -m evtsync``): :func:`main`, then
    :func:`exit_without_teardown` with its status. Calling :func:`main` from Python returns instead."""
    exit_without_teardown(main())


def exit_without_teardown(code: int) -> NoReturn:
    """End the process with ``code`` as the interpreter's own exit would, less the teardown that
    frees every object and module one at a time (issue 48: ~0.4 s of CPU once the fitting stack is
    imported, ~1 s after a demo run, for memory the process gives back at once anyway): the
    non-daemon threads are joined and the exit handlers run (``atexit``: multiprocessing's
    finalizers — pools, fork server, resource tracker —, logging's flush and close, temporary
    folders), the standard streams are flushed, then ``os._exit``."""
    import atexit
    import os
    import threading

    if not callable(getattr(atexit, "_run_exitfuncs", None)):  # another interpreter: its own exit, teardown and all
        sys.exit(code)
    try:
        shutdown = getattr(threading, "_shutdown", None)  # what the interpreter's exit calls first
        if shutdown is not None:
            shutdown()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                if stream is not None:
                    stream.flush()
            except (OSError, ValueError):  # a closed pipe (``| head``) or stream: nothing more to say
                pass
        os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    console_main()
