"""Command-line interface: ``evtsync COMMAND ...``.

Thin by design: each module of this package registers one command (or command group)
through ``register(subparsers)`` and calls the library. Commands are discovered from the
modules here, so adding a command means adding a module. Errors of the package
(:class:`evtsync.errors.EvtsyncError`) are printed as one line on stderr with a non-zero
exit status and no traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from collections.abc import Sequence

from evtsync import __version__
from evtsync.errors import EvtsyncError

log = logging.getLogger("evtsync")


def build_parser() -> argparse.ArgumentParser:
    """The full argument parser, with every command module registered."""
    parser = argparse.ArgumentParser(
        prog="evtsync",
        description="Measure, explain and predict the synchronization tax of collectives "
        "in GPU scale-up domains.",
    )
    parser.add_argument("--version", action="version", version=f"evtsync {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars, warnings only")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debugging detail")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(module, "register"):
            modules.append(module)
    modules.sort(key=lambda m: (getattr(m, "ORDER", 50), m.__name__))
    for module in modules:
        module.register(sub)
    for command in sub.choices.values():
        _add_global_options(command)
    return parser


def _add_global_options(parser: argparse.ArgumentParser) -> None:
    """Accept -q/-v after the command too (``evtsync tax … -q``), in nested groups as well.

    The defaults are suppressed so that the value given before the command stays.
    """
    present = {opt for action in parser._actions for opt in action.option_strings}
    if "-q" not in present and "--quiet" not in present:
        parser.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                            help="no progress bars, warnings only")
    if "-v" not in present and "--verbose" not in present:
        parser.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                            help="log debugging detail")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _add_global_options(child)


def _configure_logging(verbose: bool, quiet: bool) -> None:
    level = logging.DEBUG if verbose else (logging.WARNING if quiet else logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("evtsync: %(levelname)s: %(message)s"))
    root = logging.getLogger("evtsync")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``evtsync`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 2
    _configure_logging(args.verbose, args.quiet)
    if args.quiet:
        from evtsync.progress import set_progress

        set_progress(False)
    try:
        return int(args.handler(args) or 0)
    except EvtsyncError as exc:
        print(f"evtsync: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("evtsync: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
