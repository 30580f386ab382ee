"""``evtsync models``: the model specifications available to ``fit --model`` and ``run``."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``models`` command."""
    p = sub.add_parser("models", help="list the model specifications shipped with evtsync (or of --models-dir)",
                       description="List the Bayesian model specifications that `evtsync fit --model NAME` and "
                       "`evtsync run` use: those shipped with the package, or the *.toml files of --models-dir.")
    p.add_argument("--models-dir", metavar="DIR", default=None,
                   help="folder of model specifications (default: the models shipped with evtsync)")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handler of ``evtsync models``."""
    from evtsync.evt.catalog import list_models, models_dir

    folder = models_dir(args.models_dir)
    entries = list_models(folder)
    if args.json:
        from evtsync.cli._common import emit_json

        emit_json([{"name": e.name, "file": str(e.path), "family": e.family, "description": e.description}
                   for e in entries])
        return 0
    print(f"{len(entries)} model specification(s) in {folder}:")
    width = max((len(e.path.stem) for e in entries), default=0)
    family_width = max((len(e.family) for e in entries), default=0)  # "rankmodel" is wider than the GEV families
    for e in entries:
        print(f"  {e.path.stem:<{width}}  {e.family:<{family_width}}  {e.description}")
    return 0
