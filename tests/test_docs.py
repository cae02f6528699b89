"""The examples in docs/*.md are real: run each page's ```pycon blocks as one doctest.

A page's blocks share one namespace and run in order, from a scratch directory holding

- every ```proto block that starts with a ``// name.proto`` line, from all pages (a page may
  use a schema defined on another page), written as ``name.proto``;
- ``ev.u32le``: the 200-record corpus of the quick start
  (``python benchmarks/corpus.py --n 200 --out ev.u32le``);
- symlinks to the repository's ``examples/`` and ``benchmarks/``.

A block preceded by ``<!-- doctest: requires MODULE -->`` is left out when MODULE cannot
be imported. Outputs are compared with ELLIPSIS and NORMALIZE_WHITESPACE; a failure shows
the doctest report with the page's own line numbers.
"""

from __future__ import annotations

import doctest
import importlib.util
import re
import sys
from pathlib import Path

import pytest

import corpus  # benchmarks/, put on sys.path by conftest.py

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "docs").glob("*.md"))
LINKED = ("examples", "benchmarks")
CORPUS_RECORDS = 200
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

PROTO_BLOCK = re.compile(r"^```proto\n// (\S+\.proto)\n(.*?)^```$", re.S | re.M)
PYCON_BLOCK = re.compile(
    r"^(?:<!-- doctest: requires (?P<module>[\w.]+) -->\n)?```pycon\n(?P<body>.*?)^```$",
    re.S | re.M,
)


def protos() -> dict[str, str]:
    """The `// name.proto` source blocks of every page."""
    found: dict[str, str] = {}
    for page in PAGES:
        for name, body in PROTO_BLOCK.findall(page.read_text()):
            if found.setdefault(name, body) != body:
                raise AssertionError(f"{page.name}: {name} is defined differently on two pages")
    return found


def examples(page: Path) -> tuple[str, list[str]]:
    """The page's pycon blocks, every other line blanked so line numbers stay the page's.

    Also the modules whose absence left a block out.
    """
    text = page.read_text()
    lines = [""] * (text.count("\n") + 1)
    missing = []
    for block in PYCON_BLOCK.finditer(text):
        module = block.group("module")
        if module and importlib.util.find_spec(module) is None:
            missing.append(module)
            continue
        first = text.count("\n", 0, block.start("body"))
        for k, line in enumerate(block.group("body").splitlines()):
            lines[first + k] = line
    return "\n".join(lines), missing


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_examples(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source, missing = examples(page)
    test = doctest.DocTestParser().get_doctest(
        source, {"__name__": page.stem}, page.name, str(page), 0
    )
    if not test.examples:
        pytest.skip(f"no runnable examples ({', '.join(missing) or 'none written'})")

    for name, body in protos().items():
        (tmp_path / name).write_text(body)
    corpus.write_corpus(tmp_path / "ev.u32le", CORPUS_RECORDS, seed=0, framing="u32le")
    for name in LINKED:
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    # Pages may extend sys.path and import generated modules: undo both afterwards.
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)

    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    try:
        runner.run(test, out=report.append)
    finally:
        for name in set(sys.modules) - before:
            module = sys.modules[name]
            places = [getattr(module, "__file__", None) or "", *getattr(module, "__path__", [])]
            if any(str(place).startswith(str(tmp_path)) for place in places):
                del sys.modules[name]
    if runner.failures:
        pytest.fail(
            f"{runner.failures} of {runner.tries} examples failed in {page.name}:\n"
            + "".join(report),
            pytrace=False,
        )
