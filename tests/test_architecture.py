"""docs/architecture.md lists what the code has: every option of ``Options`` and every module
of the package, each with the first sentence of its docstring (the module map is generated:
``python tests/test_architecture.py`` rewrites it after a module is added or renamed)."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "plugin" / "wirearrow"
MAP_BEGIN = (
    "<!-- module-map: written by tests/test_architecture.py from the modules' docstrings -->"
)
OPTIONS_BEGIN = "<!-- options-list: the fields of wirearrow.options.Options, in order -->"
END = "<!-- end -->"


def _docstring(path: Path) -> str:
    text = path.read_text()
    if path.suffix == ".py":
        doc = ast.get_docstring(ast.parse(text)) or ""
    else:  # .pyx: Cython, not Python syntax; its docstring is its first string
        m = re.match(r'\s*(?:#[^\n]*\n\s*)*(?:[rR]?"""(.*?)""")', text, re.S)
        doc = m.group(1) if m else ""
    first = " ".join(doc.strip().split("\n\n")[0].split())
    m = re.match(r"(.+?[.!?])(\s|$)", first)
    return (m.group(1) if m else first).replace("|", "\\|")


def modules() -> list[Path]:
    """Every module of the package (Python and Cython), by path; package inits left out."""
    found = [*PACKAGE.rglob("*.py"), *PACKAGE.rglob("*.pyx")]
    return sorted(p for p in found if p.name not in ("__init__.py", "__main__.py")
                  and "static" not in p.parts)  # fmt: skip


def module_table() -> str:
    rows = ["| module | what it is (its docstring's first sentence) |", "|---|---|"]
    for path in modules():
        rows.append(f"| `{path.relative_to(PACKAGE).as_posix()}` | {_docstring(path)} |")
    return "\n".join(rows)


def _block(text: str, begin: str) -> str:
    start = text.index(begin) + len(begin) + 1
    return text[start : text.index("\n" + END, start)]


def test_the_module_map_is_every_module() -> None:
    assert _block(PAGE.read_text(), MAP_BEGIN) == module_table(), (
        "docs/architecture.md's module map is out of date: python tests/test_architecture.py"
    )
    assert all(_docstring(p) for p in modules()), "a module without a docstring"


def test_the_options_listed_are_the_options() -> None:
    from wirearrow.options import OPTIONS

    listed = re.findall(r"`(\w+)`", _block(PAGE.read_text(), OPTIONS_BEGIN))
    assert listed == list(OPTIONS)


if __name__ == "__main__":
    text = PAGE.read_text()
    start = text.index(MAP_BEGIN) + len(MAP_BEGIN) + 1
    PAGE.write_text(text[:start] + module_table() + text[text.index("\n" + END, start) :])
    sys.exit(0)
