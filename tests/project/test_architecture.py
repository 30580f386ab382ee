"""The package's layering, read from the source with ``ast`` (issue 13).

- the import graph of evtsync's modules has no cycle (every import counts, also those inside
  functions; only ``if TYPE_CHECKING:`` blocks are left out, since they never run), and neither has
  the graph of its packages (each module collapsed to its package under ``evtsync``: trace, evt,
  pipeline, report, plots, ...; a top-level module stands for itself). No allow-list: a loop fails;
- no library module imports :mod:`evtsync.cli` (the CLI sits on top; nothing imports it);
- nothing in :mod:`evtsync.evt` imports :mod:`evtsync.plots` or :mod:`evtsync.report`;
- library code neither prints nor takes ``argparse`` namespaces;
- every module sits in the package of its stage (no loose top-level module), ``core/`` imports
  only ``core/``, and the tests mirror the packages: tests/<package>/ imports evtsync.<package>,
  tests/project/ checks the repository as a whole (issue 31).
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "evtsync"


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found: set[str] = set()

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rsplit(".", 1)[0] if "." in target else ""
        return target or None

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.startswith("evtsync"):
                        found.add(resolve(alias.name) or alias.name)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")
                    anchor = anchor[: len(anchor) - (child.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                if base.startswith("evtsync"):
                    for alias in child.names:
                        target = resolve(f"{base}.{alias.name}")
                        found.add(target if target and target != base and f"{base}.{alias.name}" in modules
                                  else resolve(base) or base)
            visit(child)

    visit(tree)
    found.discard(name)
    return {m for m in found if m in modules}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_the_graph_is_read() -> None:
    graph = _graph()
    # a hand-checked edge of each kind: top-level, function-level, relative-free "from pkg import mod"
    assert "evtsync.core.errors" in graph["evtsync.evt.bayesfit"]
    assert "evtsync.evt.catalog" in graph["evtsync.cli._bayes"]
    assert "evtsync.evt.gev" in graph["evtsync.predict.gevtau"]


def _package_of(module: str) -> str:
    """The package under ``evtsync`` a module belongs to (``evtsync.report.sections.tax`` ->
    ``evtsync.report``); a top-level module (``evtsync._version``) is its own."""
    return ".".join(module.split(".")[:2])


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph collapsed to packages; imports inside one package are left out."""
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        package = _package_of(module)
        out.setdefault(package, set()).update(_package_of(t) for t in targets)
        out[package].discard(package)
    return out


def test_import_graph_has_no_cycle() -> None:
    cycles = _cycles(_graph())
    assert not cycles, f"import cycles: {cycles}"


def test_package_graph_has_no_cycle() -> None:
    graph = _graph()
    cycles = _cycles(_package_graph(graph))
    edges = {c: sorted(f"{m} -> {t}" for m, ts in graph.items() for t in ts
                       if _package_of(m) in c and _package_of(t) in c and _package_of(m) != _package_of(t))
             for c in map(tuple, cycles)}
    assert not cycles, f"package loops (with the imports that make them): {edges}"


def test_the_package_graph_is_read() -> None:
    """Hand-checked: modules collapse to their package, a top-level module stays itself, and a
    loop through two packages that no module-level cycle shows is found."""
    assert _package_of("evtsync.report.sections.summary") == "evtsync.report"
    assert _package_of("evtsync._version") == "evtsync._version"
    packages = _package_graph(_graph())
    assert "evtsync.trace" in packages["evtsync.blocks"]           # blocks reads the kernel naming of trace/
    assert "evtsync.runfolder" in packages["evtsync.report"]       # the report reads the run-folder contract
    assert "evtsync.report" not in packages["evtsync.runfolder"]
    planted = {"p.a.x": {"p.b.y"}, "p.b.z": {"p.a.w"}, "p.a.w": set(), "p.b.y": set()}
    assert _cycles(planted) == []
    assert _cycles(_package_graph(planted)) == [["p.a", "p.b"]]


def test_the_cycle_finder_finds_a_planted_loop() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


def test_nothing_imports_the_cli() -> None:
    graph = _graph()
    offenders = {m: sorted(t for t in deps if t.startswith("evtsync.cli"))
                 for m, deps in graph.items() if not m.startswith(("evtsync.cli", "evtsync.__main__"))}
    assert not {m: d for m, d in offenders.items() if d}


def test_statistics_never_import_plots_or_report() -> None:
    graph = _graph()
    offenders = {m: sorted(t for t in deps if t.startswith(("evtsync.plots", "evtsync.report")))
                 for m, deps in graph.items() if m.startswith("evtsync.evt")}
    assert not {m: d for m, d in offenders.items() if d}


def test_library_neither_prints_nor_takes_namespaces() -> None:
    for name, path in _modules().items():
        if name.startswith("evtsync.cli") or name == "evtsync.__main__":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        prints = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Call)
                  and isinstance(n.func, ast.Name) and n.func.id == "print"]
        assert not prints, f"{path}: print() at lines {prints}"
        assert "argparse" not in path.read_text(encoding="utf-8"), f"{path} uses argparse"


def test_citations_stay_inside_the_repository() -> None:
    """Docstrings, help texts and report captions cite docs/methodology.md (§1–§9), which states
    every definition; the SPEC file they once cited is not shipped (issue 31, item 5)."""
    import re

    root = PKG.parent
    methodology = (root / "docs" / "methodology.md").read_text(encoding="utf-8")
    for n in range(1, 10):
        assert f"### §{n} " in methodology, f"docs/methodology.md lacks its section §{n}"
    offenders = [f"{p.relative_to(root)}:{i}" for p in sorted(PKG.rglob("*.py"))
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if re.search(r"\bSPEC\b(?!IAL)", line)]
    assert not offenders, "cites a file outside the repository (use 'methodology §N'): " + ", ".join(offenders)


# --- relayout: the layout of packages and tests (issue 31) ---
TESTS = PKG.parent / "tests"
#: The test folder of checks of the repository as a whole (layering, docs, API reference, types).
PROJECT = "project"
#: Test modules whose imports do not show the package they test: file name -> its folder
#: (every module of tests/project/ is listed; relayout.py wrote the list from the placement).
TEST_HOMES: dict[str, str] = {
    "test_api_docstrings.py": "project",
    "test_api_reference.py": "project",
    "test_architecture.py": "project",
    "test_bad_inputs.py": "cli",
    "test_cli_attribute_plot.py": "cli",
    "test_cli_exit.py": "cli",
    "test_collection_light.py": "project",
    "test_display.py": "core",
    "test_docs_commands.py": "project",
    "test_examples.py": "project",
    "test_hypothesis_scan.py": "project",
    "test_notebook.py": "project",
    "test_rankmodel_draws.py": "evt",
    "test_rankmodel_starts.py": "evt",
    "test_report_cli_docs.py": "report",
    "test_run_partial_ranks.py": "pipeline",
    "test_study_bad_workload.py": "pipeline",
    "test_tax_cli_stragglers.py": "sync",
    "test_tax_lazy_pandas.py": "sync",
    "test_test_isolation.py": "project",
    "test_typecheck.py": "project",
    "test_wheel_install.py": "project",
}
#: The only modules at the top of the package.
TOP_LEVEL = {"__init__.py", "__main__.py", "_version.py"}


def _packages() -> set[str]:
    """The packages under ``evtsync`` (its folders that hold Python modules)."""
    return {p.name for p in PKG.iterdir() if p.is_dir() and p.name != "__pycache__" and any(p.rglob("*.py"))}


def _imported_packages(path: Path) -> set[str]:
    """The packages of ``evtsync`` a module imports (anywhere in it, functions included)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return {n.split(".")[1] for n in names if n.startswith("evtsync.")} & _packages()


def test_no_loose_modules() -> None:
    """Every module sits in the package of its stage (docs/architecture.md, "The layout")."""
    loose = sorted(p.name for p in PKG.glob("*.py") if p.name not in TOP_LEVEL)
    assert not loose, f"modules at the top of evtsync/ (put each in its stage's package): {loose}"


def test_core_knows_no_stage() -> None:
    """core/ imports only core/: any layer may import it, so it may import no layer."""
    graph = _graph()
    offenders = {m: sorted(t for t in deps if _package_of(t) != "evtsync.core")
                 for m, deps in graph.items() if _package_of(m) == "evtsync.core"}
    assert not {m: d for m, d in offenders.items() if d}


def test_tests_mirror_the_packages() -> None:
    """tests/<package>/test_*.py imports evtsync.<package> (or is in TEST_HOMES with its folder)."""
    packages = _packages()
    top = sorted(p.name for p in TESTS.glob("test_*.py"))
    assert not top, f"test modules outside a package's folder: {top}"
    misplaced = []
    for path in sorted(TESTS.glob("*/test_*.py")):
        folder = path.parent.name
        if folder not in packages | {PROJECT}:
            misplaced.append(f"{path.relative_to(TESTS)}: evtsync has no package {folder!r}")
        elif path.name in TEST_HOMES:
            if TEST_HOMES[path.name] != folder:
                misplaced.append(f"{path.relative_to(TESTS)}: TEST_HOMES puts it in {TEST_HOMES[path.name]!r}")
        elif folder == PROJECT or folder not in _imported_packages(path):
            misplaced.append(f"{path.relative_to(TESTS)}: imports {sorted(_imported_packages(path))}, "
                             f"not evtsync.{folder} (move it, or list it in TEST_HOMES)")
    assert not misplaced, "\n".join(misplaced)
    stale = sorted(n for n, f in TEST_HOMES.items() if not (TESTS / f / n).is_file())
    assert not stale, f"TEST_HOMES names test modules that are not there: {stale}"
    nested = sorted(str(p.relative_to(TESTS)) for p in TESTS.glob("*/*/test_*.py")
                    if p.parts[-3] != "data")
    assert not nested, f"test modules below a package's folder: {nested}"


def test_every_package_has_a_test_folder() -> None:
    missing = sorted(p for p in _packages() if not any((TESTS / p).glob("test_*.py")))
    assert not missing, f"packages without tests/<package>/test_*.py: {missing}"


def test_the_test_placement_is_read() -> None:
    """Hand-checked: the tax tests import sync/, conftest.py trace/ and core/ (the cache folder's and
    the signing key's environment variables) and pipeline/ (the session's tiny demo, inside its
    fixture), the report helpers report/ and plots/ (the placeholder figures)."""
    assert "sync" in _imported_packages(TESTS / "sync" / "test_tax.py")
    assert _imported_packages(TESTS / "conftest.py") == {"trace", "core", "pipeline"}
    assert _imported_packages(TESTS / "report_checks.py") == {"report", "plots"}
# --- end relayout ---
