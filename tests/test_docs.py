"""The examples in docs/*.md are real: run each page's ```pycon blocks as one doctest.

A page's blocks share one namespace and run in order, from a scratch directory holding

- every ```proto block that starts with a ``// name.proto`` line, from all pages (a page may
  use a schema defined on another page), written as ``name.proto``;
- ``ev.u32le``: the 200-record corpus of the quick start
  (``python benchmarks/corpus.py --n 200 --out ev.u32le``);
- symlinks to the repository's ``examples/`` and ``benchmarks/``.

A block preceded by ``<!-- doctest: requires MODULE [MODULE...] -->`` is left out when a
MODULE cannot be imported. Outputs are compared with ELLIPSIS and NORMALIZE_WHITESPACE; a failure shows
the doctest report with the page's own line numbers.

```console blocks run too, in the same kind of scratch directory, one bash per block:
each ``$ command`` line is run and its stdout and stderr together are compared with the
lines under it (the same flags). ``wirearrow`` and ``python`` are this interpreter's. A
block preceded by ``<!-- console: setup COMMAND -->`` runs COMMAND first (unseen);
``<!-- doctest: skip (why) -->`` leaves a block out (a command that serves until stopped,
timings). A block preceded by ``<!-- file: NAME -->`` is written to the scratch directory
as NAME before the page's console blocks run.
"""

from __future__ import annotations

import doctest
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import corpus  # benchmarks/, put on sys.path by conftest.py

ROOT = Path(__file__).resolve().parent.parent
# Where this process imports wirearrow from (the checkout's plugin/ for the editable install,
# site-packages for the minimal install's wheel): the commands run that one, not the source tree.
IMPORTED_FROM = Path(importlib.util.find_spec("wirearrow").origin).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md"))
LINKED = ("examples", "benchmarks")
CORPUS_RECORDS = 200
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE

PROTO_BLOCK = re.compile(r"^```proto\n// (\S+\.proto)\n(.*?)^```$", re.S | re.M)
PYCON_BLOCK = re.compile(
    r"^(?:<!-- doctest: requires (?P<module>[\w. ]+?) -->\n)?```pycon\n(?P<body>.*?)^```$",
    re.S | re.M,
)


CONSOLE_BLOCK = re.compile(
    r"^(?:<!-- (?:(?P<skip>doctest: skip[^>]*)|console: setup (?P<setup>.*?)) -->\n)?"
    r"```console\n(?P<body>.*?)^```$",
    re.S | re.M,
)
FILE_BLOCK = re.compile(r"^<!-- file: (?P<name>[\w.-]+) -->\n```\w*\n(?P<body>.*?)^```$", re.S | re.M)
# The engine pages run Ray and Beam locally: their own deprecation warnings are not ours
# (test_ray and test_beam ignore the same).
pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:apache_beam.*"),
    pytest.mark.filterwarnings("ignore::PendingDeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning:apache_beam.*"),
]
CONSOLE_PAGES = [p for p in PAGES if "```console" in p.read_text()]
COMMAND_TIMEOUT = 300  # seconds for one console block


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
        absent = [m for m in (block.group("module") or "").split() if importlib.util.find_spec(m) is None]
        if absent:
            missing.extend(absent)
            continue
        first = text.count("\n", 0, block.start("body"))
        for k, line in enumerate(block.group("body").splitlines()):
            lines[first + k] = line
    return "\n".join(lines), missing


def scratch(directory: Path) -> None:
    """The pages' working directory: their .proto files, the corpus, examples/ benchmarks/."""
    for name, body in protos().items():
        (directory / name).write_text(body)
    corpus.write_corpus(directory / "ev.u32le", CORPUS_RECORDS, seed=0, framing="u32le")
    for name in LINKED:
        (directory / name).symlink_to(ROOT / name, target_is_directory=True)


def engine_marks(page: Path) -> list[pytest.MarkDecorator]:
    """A page whose examples require Ray or Beam runs them: its test is in the engines tier."""
    required = {m for block in PYCON_BLOCK.finditer(page.read_text()) for m in (block.group("module") or "").split()}
    return [pytest.mark.ray] * ("ray" in required) + [pytest.mark.beam] * ("apache_beam" in required)


@pytest.mark.parametrize("page", [pytest.param(p, marks=engine_marks(p), id=p.name) for p in PAGES])
def test_page_examples(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source, missing = examples(page)
    test = doctest.DocTestParser().get_doctest(
        source, {"__name__": page.stem}, page.name, str(page), 0
    )
    if not test.examples:
        if page in CONSOLE_PAGES:
            pytest.skip("its examples are commands: test_page_commands runs them")
        pytest.skip(f"no runnable examples ({', '.join(missing) or 'none written'})")

    scratch(tmp_path)
    monkeypatch.chdir(tmp_path)
    # A page starts (and stops) its own Ray, as a reader's session would: not the tests'
    # shared one (engine_fixtures.ray_local starts that again when the next test needs it).
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
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


def _shims(directory: Path) -> Path:
    """``wirearrow`` and ``python`` commands that run this interpreter on this checkout."""
    bin_dir = directory / ".bin"
    bin_dir.mkdir()
    for name, command in (("python", ""), ("wirearrow", " -m wirearrow")):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}"{command} "$@"\n')
        shim.chmod(0o755)
    return bin_dir


@pytest.mark.console
@pytest.mark.parametrize("page", CONSOLE_PAGES, ids=[p.name for p in CONSOLE_PAGES])
def test_page_commands(page: Path, tmp_path: Path) -> None:
    text = page.read_text()
    scratch(tmp_path)
    for block in FILE_BLOCK.finditer(text):
        (tmp_path / block.group("name")).write_text(block.group("body"))
    env = dict(os.environ)
    env["PATH"] = f"{_shims(tmp_path)}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(IMPORTED_FROM), env.get("PYTHONPATH")]))
    checker = doctest.OutputChecker()
    ran = 0
    for block in CONSOLE_BLOCK.finditer(text):
        if block.group("skip"):
            continue
        line0 = text.count("\n", 0, block.start("body")) + 1
        commands: list[tuple[int, str, list[str]]] = []
        for k, line in enumerate(block.group("body").splitlines()):
            if line.startswith("$ "):
                commands.append((line0 + k, line[2:], []))
            elif commands:
                commands[-1][2].append(line)
        script = ["exec 2>&1", block.group("setup") or ":"]
        for i, (_, command, _) in enumerate(commands):
            # The marker keeps the previous command's exit status for `echo $?`.
            script += [f"__status=$?; echo '@@@{i}'; (exit $__status)", command]
        result = subprocess.run(
            ["bash", "-c", "\n".join(script)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
        )
        outputs = re.split(r"^@@@\d+\n", result.stdout, flags=re.M)[1:]
        assert len(outputs) == len(commands), result.stdout
        for (line, command, want), got in zip(commands, outputs, strict=True):
            expected = "\n".join(want) + "\n" if want else ""
            if not checker.check_output(expected, got, FLAGS):
                pytest.fail(
                    f"{page.name}:{line}: $ {command}\nexpected:\n{expected}got:\n{got}",
                    pytrace=False,
                )
            ran += 1
    if not ran:
        pytest.skip("every console block is marked skip")
