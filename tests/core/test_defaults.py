"""One home per default (issue 31): every shared default lives in ``evtsync.core.defaults`` and is
imported elsewhere. The package's syntax tree is scanned for these values written again as
literals (a parameter ``m=4``, ``eps=-0.5``, ``level=0.9``, an option's default, a convergence
threshold, the sampler or topology lists, a model name); the table itself is validated.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from evtsync.core import defaults

PACKAGE = Path(__file__).resolve().parents[2] / "evtsync"

#: Parameter, field and keyword names whose literal value must come from evtsync.core.defaults.
NAMED = {"m": defaults.DEFAULT_M, "eps": defaults.DEFAULT_EPS, "level": defaults.INTERVAL_LEVEL,
         "ci_level": defaults.INTERVAL_LEVEL, "sampler": defaults.DEFAULT_SAMPLER}
#: Options whose default must be a name from evtsync.core.defaults, never a literal.
OPTIONS = {"--m", "--eps", "--level", "--ci-level", "--sampler"}
#: The home of the topologies' names, p, q and labels (the defaults table names the run's set).
TOPOLOGY_HOME = "evtsync/predict/hockney.py"


def _literal(node: ast.AST) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return None


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def _text(node: ast.AST) -> str:
    return ast.unparse(node).lower()


def _is_default(value: object, default: object) -> bool:
    if isinstance(default, str):
        return value == default
    return isinstance(value, int | float) and not isinstance(value, bool) and value == default


def scan(source: str, rel: str) -> list[str]:
    """Where ``source`` (the file ``rel``) writes a shared default as a literal: one line each."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found: list[str] = []

    def flag(node: ast.AST, what: str) -> None:
        found.append(f"{rel}:{node.lineno}: {what}")

    samplers, topologies = set(defaults.SAMPLERS), set(defaults.RUN_TOPOLOGIES)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = [*zip(positional[len(positional) - len(args.defaults):], args.defaults, strict=True),
                     *((a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is not None)]
            for arg, value in pairs:
                if arg.arg in NAMED and _is_default(_literal(value), NAMED[arg.arg]):
                    flag(value, f"parameter {arg.arg}={_literal(value)!r}")
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            if node.target.id in NAMED and _is_default(_literal(node.value), NAMED[node.target.id]):
                flag(node, f"field {node.target.id} = {_literal(node.value)!r}")
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name, value = node.targets[0].id, _literal(node.value)
            if name.endswith("LEVEL") and _is_default(value, defaults.INTERVAL_LEVEL):
                flag(node, f"{name} = {value!r}")
        elif isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg in NAMED and _is_default(_literal(kw.value), NAMED[kw.arg]):
                    flag(kw.value, f"keyword {kw.arg}={_literal(kw.value)!r}")
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and first.value in OPTIONS:
                for kw in node.keywords:
                    if kw.arg == "default" and _literal(kw.value) not in (None, [], ()):
                        flag(kw.value, f"option {first.value} default {_literal(kw.value)!r}")
            if (isinstance(node.func, ast.Attribute) and node.func.attr == "get" and len(node.args) == 2
                    and _literal(node.args[0]) == "level" and _literal(node.args[1]) is not None):
                flag(node, f".get('level', {_literal(node.args[1])!r})")
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            names = " ".join(_text(s) for s in sides if _literal(s) is None)
            for side in sides:
                value = _literal(side)
                if ("rhat" in names or "r_hat" in names) and value == defaults.RHAT_MAX:
                    flag(node, f"R-hat threshold {value}")
                if "ess" in names and value == defaults.ESS_MIN:
                    flag(node, f"ESS threshold {value}")
        elif isinstance(node, ast.Constant) and id(node) not in docs and node.value == defaults.POPULATION_MODEL:
            flag(node, f"model name {node.value!r}")
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            values = {_literal(e) for e in node.elts if isinstance(e, ast.Constant)}
            if values == samplers and len(node.elts) == len(samplers):
                flag(node, "the sampler list")
            if topologies <= values and rel != TOPOLOGY_HOME:
                flag(node, "the topology list")
        if isinstance(node, ast.Dict) and rel != TOPOLOGY_HOME:
            keys = {_literal(k) for k in node.keys if isinstance(k, ast.Constant)}
            if topologies <= keys:
                flag(node, "topology names or labels")
    return found


def test_no_shared_default_is_written_outside_its_home() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        if rel != "evtsync/core/defaults.py":
            found += scan(path.read_text(encoding="utf-8"), rel)
    assert not found, "shared defaults written as literals (import them from evtsync.core.defaults):\n" + "\n".join(found)


@pytest.mark.parametrize("source, what", [
    ("def f(x, m=4): pass", "parameter m=4"),
    ("def f(*, level=0.9): pass", "parameter level=0.9"),
    ("class C:\n    eps: float = -0.5", "field eps"),
    ("p.add_argument('--m', type=int, default=8)", "option --m default 8"),
    ("p.add_argument('--sampler', choices=('pymc', 'nutpie'))", "the sampler list"),
    ("ok = fit.r_hat <= 1.01", "R-hat threshold"),
    ("bad = ess_bulk < 400", "ESS threshold"),
    ("PPC_LEVEL = 0.9", "PPC_LEVEL = 0.9"),
    ("lvl = attrs.get('level', 0.9)", ".get('level', 0.9)"),
    ("TOPOLOGIES = ('full', 'ring', 'torus3d')", "the topology list"),
    ("names = {'full': 'fully connected', 'ring': 'ring', 'torus3d': '3D torus'}", "topology names"),
    ("model = 'gev-hier-gpu-precision'", "model name"),
    ("tau = predict(n, m=4)", "keyword m=4"),
    ("class S:\n    sampler: str = 'nutpie'", "field sampler"),
])
def test_the_scan_finds_each_kind_of_literal(source: str, what: str) -> None:
    assert any(what in line for line in scan(source, "evtsync/x.py")), scan(source, "evtsync/x.py")


@pytest.mark.parametrize("source", [
    "def f(x, m=DEFAULT_M): pass",
    "q = np.quantile(x, 0.9)",            # the P90 quantile is not an interval level
    "legend(bbox_to_anchor=(1.01, 1.0))",  # a figure's coordinates are not an R-hat
    "grid = np.linspace(a, b, 400)",
    '"""The gev-hier-gpu-precision model."""',
    "_PACKAGES = ('evtsync', 'pymc', 'nutpie', 'numpy')",
])
def test_the_scan_leaves_other_uses_alone(source: str) -> None:
    assert scan(source, "evtsync/x.py") == []


def test_the_table_is_validated() -> None:
    assert defaults.check_defaults(dict(defaults.DEFAULTS)) == defaults.DEFAULTS
    for name, bad in (("INTERVAL_LEVEL", 90), ("DEFAULT_EPS", 0.5), ("DEFAULT_SAMPLER", "hmc"), ("DEFAULT_M", 1),
                      ("RHAT_MAX", 0.99), ("MAIN_MODEL_PREFERENCE", ("gev", "gumbel")),
                      ("PAPER_MODEL", "gev")):
        with pytest.raises(ValueError, match=name):
            defaults.check_defaults({**defaults.DEFAULTS, name: bad})


def test_the_table_names_what_the_package_knows() -> None:
    """The run's topologies are hockney's, its samplers the fit's, its models shipped ones."""
    from evtsync.evt.catalog import list_models, models_dir
    from evtsync.predict.hockney import TOPOLOGIES, topology_label

    assert set(defaults.RUN_TOPOLOGIES) <= set(TOPOLOGIES)
    assert [topology_label(t) for t in defaults.RUN_TOPOLOGIES] == ["fully connected", "ring", "3D torus"]
    shipped = {e.path.stem for e in list_models(models_dir(None))}
    assert set(defaults.MAIN_MODEL_PREFERENCE) <= shipped
