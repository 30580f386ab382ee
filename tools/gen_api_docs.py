"""Write docs/api-reference.md: every public name of ``evtsync``, from its signature and docstring.

    python tools/gen_api_docs.py            # rewrite docs/api-reference.md
    python tools/gen_api_docs.py --check    # exit 1 when it is out of date

The public names are those of ``evtsync.__all__`` (imported on first use by the package, all
imported here). Classes list their public methods and properties. ``docs/api.md`` is the
hand-written guide; this page is the reference that cannot drift from the code.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "api-reference.md"


def _doc(obj: object) -> str:
    return _numpydoc_markdown(inspect.cleandoc(inspect.getdoc(obj) or "(no docstring)"))


def _numpydoc_markdown(doc: str) -> str:
    """numpydoc sections (``Parameters`` over a dashed underline, then ``name : type`` lines with
    indented descriptions) as Markdown: a bold title and one list item per entry."""
    lines = doc.split("\n")
    out: list[str] = []
    in_section = False
    i = 0
    while i < len(lines):
        line = lines[i]
        underline = lines[i + 1] if i + 1 < len(lines) else ""
        if line.strip() and underline and set(underline) == {"-"} and len(underline) == len(line):
            out += ["", f"**{line}**", ""] if out and out[-1] else [f"**{line}**", ""]
            in_section, i = True, i + 2
            continue
        if in_section and line and not line[0].isspace():
            name, _, kind = line.partition(" : ")
            out.append(f"- `{name}`" + (f" ({kind})" if kind else ""))
        elif in_section and line.strip():
            out.append("  " + line.strip())
        elif not (in_section and not line):
            out.append(line)
        i += 1
    return "\n".join(out)


def _signature(obj: object) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


def _members(cls: type) -> list[tuple[str, object]]:
    out = []
    for name, member in sorted(vars(cls).items()):
        if name.startswith("_"):
            continue
        if isinstance(member, property | classmethod | staticmethod) or inspect.isfunction(member):
            out.append((name, member))
    return out


def render() -> str:
    """The Markdown text of docs/api-reference.md."""
    sys.path.insert(0, str(ROOT))
    evtsync = importlib.import_module("evtsync")
    out = ["# API reference", "",
           "Generated from the docstrings by `tools/gen_api_docs.py` (do not edit by hand; "
           "`tests/project/test_api_reference.py` checks it is current). The guide is [api.md](api.md).", ""]
    names = sorted(n for n in evtsync.__all__ if not n.startswith("_"))
    out.append(" · ".join(f"[`{n}`](#{n.lower()})" for n in names))
    out.append("")
    for name in names:
        obj = getattr(evtsync, name)
        module = getattr(obj, "__module__", "evtsync")
        kind = "class" if inspect.isclass(obj) else "function"
        out += [f"## {name}", "", f"`{module}.{name}{_signature(obj)}` — {kind}", "", _doc(obj), ""]
        if inspect.isclass(obj):
            for mname, member in _members(obj):
                target = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                sig = "" if isinstance(member, property) else _signature(target)
                label = "property" if isinstance(member, property) else "method"
                first = _doc(target).split("\n\n")[0].replace("\n", " ")
                out.append(f"- `{mname}{sig}` ({label}) — {first}")
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text = render()
    if "--check" in argv:
        current = DOC.read_text(encoding="utf-8") if DOC.is_file() else ""
        if current != text:
            print(f"{DOC} is out of date: run python tools/gen_api_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text, encoding="utf-8")
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
