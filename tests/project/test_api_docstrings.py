"""The public API's docstrings are numpydoc: a Parameters section naming every parameter.

The functions checked are the ones users call: every function exported by ``evtsync``
(``evtsync.__all__``, the names docs/api.md shows) and the public methods of ``BayesFit``.
Each docstring must have a ``Parameters`` section (numpydoc underline) that names every
parameter of :func:`inspect.signature` (``self`` aside; ``*args``/``**kwargs`` as written in
the signature), a ``Returns`` section when the function returns something, and no entry for a
parameter the function does not have.
"""

from __future__ import annotations

import inspect
import re

import pytest

import evtsync

SECTION = re.compile(r"^(\w[\w ]*)\n-+\n", re.MULTILINE)
#: A numpydoc parameter line: "name : type" or "name" alone, or "a, b : type", unindented.
ENTRY = re.compile(r"^(\*{0,2}\w+(?:, \*{0,2}\w+)*)(?: :.*)?$")


#: The public functions, named without importing them (issue 48: collecting this file imported
#: the fitting stack): evtsync's functions are lower-case, its classes CamelCase
#: (test_public_functions_are_the_lower_case_names checks it).
API = sorted(name for name in evtsync.__all__ if name[0].islower()) + [
    f"BayesFit.{name}" for name in ("save", "load", "cell_draws", "cell_parameters")]


def _api_object(name: str) -> object:
    """The public function called ``name`` (``BayesFit.x``: the method)."""
    obj: object = evtsync
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def test_public_functions_are_the_lower_case_names() -> None:
    for name in evtsync.__all__:
        assert inspect.isfunction(getattr(evtsync, name)) == name[0].islower(), name


def _sections(doc: str) -> dict[str, str]:
    """Section title -> its body, for the numpydoc sections of a (dedented) docstring."""
    marks = list(SECTION.finditer(doc))
    return {m.group(1): doc[m.end(): marks[i + 1].start() if i + 1 < len(marks) else len(doc)]
            for i, m in enumerate(marks)}


def _documented(section: str) -> set[str]:
    names: set[str] = set()
    for line in section.splitlines():
        if line and not line[0].isspace():
            match = ENTRY.match(line)
            assert match, f"not a numpydoc parameter line: {line!r}"
            names.update(n.strip() for n in match.group(1).split(","))
    return names


def _signature_names(func: object) -> set[str]:
    out = set()
    for p in inspect.signature(func).parameters.values():
        if p.name in ("self", "cls"):
            continue
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        out.add(prefix + p.name)
    return out


def test_the_api_list_covers_what_users_call() -> None:
    # the names docs/api.md and the issue name; a rename must update this list knowingly
    for name in ("load_traces", "compute_tax", "attribute", "compute_zscores", "zscore_table",
                 "mle_cell_table", "fit_table", "tau_table", "bandwidth_table", "run_pipeline",
                 "BayesFit.load", "BayesFit.save", "BayesFit.cell_draws"):
        assert name in API


@pytest.mark.parametrize("name", sorted(API))
def test_docstring_has_numpydoc_parameters(name: str) -> None:
    func = _api_object(name)
    doc = inspect.getdoc(func) or ""
    sections = _sections(doc)
    expected = _signature_names(func)
    if expected:
        assert "Parameters" in sections, f"{name}: no 'Parameters' section"
        documented = _documented(sections["Parameters"])
        assert expected - documented == set(), f"{name}: parameters not documented"
        assert documented - expected == set(), f"{name}: documents parameters it does not have"
    returns = inspect.signature(func).return_annotation
    if returns not in (None, "None", inspect.Signature.empty):
        assert "Returns" in sections, f"{name}: no 'Returns' section"
    for title in sections:
        assert title in ("Parameters", "Returns", "Raises", "Yields", "Notes", "Examples", "See Also"), \
            f"{name}: unknown section {title!r}"


def test_the_checker_sees_a_missing_parameter() -> None:
    def sample(a: int, b: int = 0, **options: object) -> int:
        """Add.

        Parameters
        ----------
        a : int
            First.
        **options
            Ignored.

        Returns
        -------
        int
        """
        return a + b

    documented = _documented(_sections(inspect.getdoc(sample) or "")["Parameters"])
    assert _signature_names(sample) - documented == {"b"}
