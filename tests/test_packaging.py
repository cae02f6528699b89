"""The sdist builds a wheel with or without Cython, and a wheel holds no C or Cython sources.

Nothing is compiled here (seconds, not minutes): setup.py runs its dry-run build_ext
(`-n`: the compiler commands printed, not run) and build_py (what a wheel packs besides the
extensions). .ci/wheel.sh builds, repairs and installs the real wheels.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "plugin" / "wirearrow" / "_core"
EXTENSIONS = sorted(p.stem for p in CORE.glob("*.pyx"))
PXD = sorted(p.name for p in CORE.glob("*.pxd"))

# setup.py run with Cython unimportable (a None in sys.modules makes the import fail).
NO_CYTHON = (
    "import sys, runpy; sys.modules['Cython'] = sys.modules['Cython.Build'] = None; "
    "sys.argv[0] = 'setup.py'; runpy.run_path('setup.py', run_name='__main__')"
)


def setup_py(cwd: Path, *args: str, cython: bool = True, env: dict | None = None):
    command = [sys.executable, "setup.py", *args] if cython else [
        sys.executable, "-c", NO_CYTHON, *args
    ]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("WIREARROW_")}
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**environment, **(env or {})})


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
    expected = {f"{core}{e}.{s}" for e in EXTENSIONS for s in ("pyx", "c", "pyi")}
    expected |= {core + p for p in PXD}
    assert sorted(expected - names) == []
    assert {"LICENSE", "pyproject.toml", "setup.py", "plugin/wirearrow/py.typed",
            "plugin/wirearrow/playground/static/index.html"} <= names
    assert [n for n in names if n.endswith((".so", ".pyd", ".html")) and "static" not in n] == []


def compiled_sources(output: str) -> list[str]:
    """The source file of each compiler command a dry-run build_ext printed."""
    return sorted(
        Path(word).name
        for line in output.splitlines() if " -c " in line
        for word in line.split() if word.endswith((".c", ".pyx"))
    )


@pytest.mark.parametrize("cython", [True, False], ids=["with-cython", "without-cython"])
def test_a_wheel_builds_from_the_sdist_from_its_shipped_c(unpacked, cython) -> None:
    done = setup_py(unpacked, "-n", "build_ext", "--force", cython=cython)
    assert done.returncode == 0, done.stderr
    assert compiled_sources(done.stdout + done.stderr) == sorted(f"{e}.c" for e in EXTENSIONS)
    assert "Cythonizing" not in done.stdout + done.stderr


def test_in_a_checkout_without_cython_or_c_the_build_says_what_is_missing(unpacked, tmp_path):
    tree = tmp_path / "checkout"
    subprocess.run(["cp", "-r", str(unpacked), str(tree)], check=True)
    (tree / "PKG-INFO").unlink()  # a git checkout: no PKG-INFO, no generated C
    for c in (tree / "plugin" / "wirearrow" / "_core").glob("*.c"):
        c.unlink()
    done = setup_py(tree, "-n", "build_ext", cython=False)
    assert done.returncode != 0
    assert "needs Cython" in done.stderr
    assert "decoder.c" in done.stderr


def test_without_cython_the_debug_build_refuses_rather_than_ship_release_c(unpacked) -> None:
    done = setup_py(unpacked, "-n", "build_ext", cython=False, env={"WIREARROW_DEBUG": "1"})
    assert done.returncode != 0
    assert "WIREARROW_DEBUG" in done.stderr


def test_a_wheel_packs_stubs_but_no_c_or_cython_sources(unpacked, tmp_path) -> None:
    lib = tmp_path / "lib"
    done = setup_py(unpacked, "-q", "build_py", "--build-lib", str(lib))
    assert done.returncode == 0, done.stderr
    core = lib / "wirearrow" / "_core"
    packed = sorted(p.name for p in core.iterdir())
    assert [n for n in packed if n.endswith((".c", ".pyx", ".pxd"))] == []
    assert sorted(e for e in EXTENSIONS if f"{e}.pyi" not in packed) == []
    assert (lib / "wirearrow" / "py.typed").is_file()
    assert (lib / "wirearrow" / "playground" / "static" / "index.html").is_file()
