"""The sdist builds a wheel with or without Cython, and a wheel holds no C or Cython sources.

Nothing is compiled here (seconds, not minutes): setup.py runs with setuptools.setup
replaced by a print of the extensions' sources (what build_ext would compile), and runs
build_py (what a wheel packs besides the extensions). .ci/wheel.sh builds, repairs and
installs the real wheels.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

# The release tier, in one process: setup.py sdist and build_py write their staging
# directories into the checkout itself, so two of these builds must never run at once.
pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "plugin" / "wirearrow" / "_core"
EXTENSIONS = sorted(p.stem for p in CORE.glob("*.pyx"))
# The optional accelerator is C++ (its generated source a .cpp); setup.py builds it only when
# the pyarrow it runs with has Arrow's C++ headers (and NumPy's), as the test venvs' pyarrow
# wheels do: the same test as setup.py's, so a machine without them expects the six alone.
ACCELERATOR = "accelerator"
C_EXTENSIONS = [e for e in EXTENSIONS if e != ACCELERATOR]


def _accelerator_buildable() -> bool:
    try:
        import numpy  # noqa: F401
        import pyarrow
    except ImportError:
        return False
    return (Path(pyarrow.get_include()) / "arrow" / "api.h").is_file()


def compiled(core: str = "plugin/wirearrow/_core/", accelerator: bool | None = None) -> list[str]:
    """The sources build_ext compiles: each C extension's .c, and the accelerator's .cpp."""
    with_accelerator = _accelerator_buildable() if accelerator is None else accelerator
    return sorted([f"{core}{e}.c" for e in C_EXTENSIONS]
                  + ([f"{core}{ACCELERATOR}.cpp"] if with_accelerator else []))
PXD = sorted(p.name for p in CORE.glob("*.pxd"))

# setup.py with Cython unimportable (a None in sys.modules makes the import fail).
NO_CYTHON = "import sys; sys.modules['Cython'] = sys.modules['Cython.Build'] = None\n"
# setup.py with setup() printing the sources of its extensions instead of building them.
SOURCES = """
import json, runpy, setuptools
setuptools.setup = lambda ext_modules, **_: print(json.dumps(
    sorted(src for ext in ext_modules for src in ext.sources)))
runpy.run_path("setup.py", run_name="__main__")
"""


def run(cwd: Path, command: list[str], env: dict | None = None):
    environment = {k: v for k, v in os.environ.items() if not k.startswith("WIREARROW_")}
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**environment, **(env or {})})


def setup_py(cwd: Path, *args: str):
    return run(cwd, [sys.executable, "setup.py", *args])


def extension_sources(cwd: Path, cython: bool = True, env: dict | None = None):
    """What build_ext would compile, and the process (for its exit code and stderr)."""
    done = run(cwd, [sys.executable, "-c", ("" if cython else NO_CYTHON) + SOURCES], env)
    sources = json.loads(done.stdout.splitlines()[-1]) if done.returncode == 0 else None
    return sources, done


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    """The sdist, built as `python -m build --sdist` would (setuptools' sdist command)."""
    out = tmp_path_factory.mktemp("sdist")
    done = setup_py(ROOT, "-q", "sdist", "--dist-dir", str(out))
    assert done.returncode == 0, done.stderr
    [archive] = out.glob("wirearrow-*.tar.gz")
    return archive


@pytest.fixture(scope="module")
def unpacked(sdist, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(sdist) as tar:
        tar.extractall(out, filter="data")
    [tree] = out.iterdir()
    return tree


def test_the_sdist_carries_sources_c_and_stubs_of_every_extension(sdist) -> None:
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    core = "plugin/wirearrow/_core/"
    assert EXTENSIONS
    expected = {f"{core}{e}.{s}" for e in C_EXTENSIONS for s in ("pyx", "c", "pyi")}
    expected |= {f"{core}{ACCELERATOR}.{s}" for s in ("pyx", "cpp", "pyi")}
    expected |= {core + p for p in PXD}
    assert sorted(expected - names) == []
    assert {"LICENSE", "pyproject.toml", "setup.py", "plugin/wirearrow/py.typed",
            "plugin/wirearrow/playground/static/index.html"} <= names
    assert [n for n in names if n.endswith((".so", ".pyd", ".html")) and "static" not in n] == []


@pytest.mark.parametrize("cython", [True, False], ids=["with-cython", "without-cython"])
def test_a_wheel_builds_from_the_sdist_from_its_shipped_c(unpacked, cython) -> None:
    sources, done = extension_sources(unpacked, cython=cython)
    assert done.returncode == 0, done.stderr
    assert sources == compiled()
    assert "Cythonizing" not in done.stdout + done.stderr


def test_from_the_sdist_cythonize_on_request_regenerates_the_c(unpacked, tmp_path) -> None:
    pytest.importorskip("Cython")  # (the minimal install builds from the shipped .c)
    tree = tmp_path / "sdist"
    shutil.copytree(unpacked, tree)
    (tree / "plugin" / "wirearrow" / "_core" / "rows.pyx").touch()  # newer than its .c
    shipped, done = extension_sources(tree)
    assert "Cythonizing" not in done.stdout + done.stderr
    sources, done = extension_sources(tree, env={"WIREARROW_CYTHONIZE": "1"})
    assert done.returncode == 0, done.stderr
    assert "Cythonizing plugin/wirearrow/_core/rows.pyx" in done.stdout + done.stderr
    # cythonize hands build_ext the .c it (re)generated from each .pyx.
    assert sources == shipped == compiled()


def test_in_a_checkout_the_extensions_are_cythonized() -> None:
    sources, done = extension_sources(ROOT)
    assert done.returncode == 0, done.stderr
    assert sources == compiled()


def test_without_the_accelerator_the_rest_builds_and_one_line_says_so() -> None:
    sources, done = extension_sources(ROOT, env={"WIREARROW_NO_ACCELERATOR": "1"})
    assert done.returncode == 0, done.stderr
    assert sources == compiled(accelerator=False)
    assert "building without the accelerator (WIREARROW_NO_ACCELERATOR=1)" in done.stderr


def test_in_a_checkout_without_cython_or_c_the_build_says_what_is_missing(unpacked, tmp_path):
    tree = tmp_path / "checkout"
    shutil.copytree(unpacked, tree)
    (tree / "PKG-INFO").unlink()  # a git checkout: no PKG-INFO, no generated C
    for c in (tree / "plugin" / "wirearrow" / "_core").glob("*.c"):
        c.unlink()
    sources, done = extension_sources(tree, cython=False)
    assert sources is None
    assert "needs Cython" in done.stderr
    assert "decoder.c," in done.stderr


def test_without_cython_the_debug_build_refuses_rather_than_ship_release_c(unpacked) -> None:
    sources, done = extension_sources(unpacked, cython=False, env={"WIREARROW_DEBUG": "1"})
    assert sources is None
    assert "WIREARROW_DEBUG" in done.stderr


def test_a_wheel_packs_stubs_but_no_c_or_cython_sources(unpacked, tmp_path) -> None:
    lib = tmp_path / "lib"
    done = setup_py(unpacked, "-q", "build_py", "--build-lib", str(lib))
    assert done.returncode == 0, done.stderr
    core = lib / "wirearrow" / "_core"
    packed = sorted(p.name for p in core.iterdir())
    assert [n for n in packed if n.endswith((".c", ".cpp", ".pyx", ".pxd"))] == []
    assert sorted(e for e in EXTENSIONS if f"{e}.pyi" not in packed) == []
    assert (lib / "wirearrow" / "py.typed").is_file()
    assert (lib / "wirearrow" / "playground" / "static" / "index.html").is_file()
