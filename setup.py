"""Only the Cython extensions live here; all metadata is in pyproject.toml.

Knobs (environment variables):
  WIREARROW_DEBUG=1     bounds checks and wraparound on, -O0 -g: CI runs the malformed-input
                        tests against this build.
  WIREARROW_ANNOTATE=1  write cython -a HTML next to each .pyx (look for yellow in hot loops).
  WIREARROW_SANITIZE=1  build with AddressSanitizer / UBSan (run python with LD_PRELOAD=libasan).
  WIREARROW_CYTHONIZE=1 from an sdist, regenerate the C from the .pyx (default: the shipped C).

From a git checkout the extensions are cythonized (the .c files are gitignored). From an
sdist, or without Cython, they build from the generated .c files the sdist ships (the classic
fallback: a worker with only a C compiler can still install from the sdist).
"""

import os
import sys
from pathlib import Path

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:
    cythonize = None

DEBUG = os.environ.get("WIREARROW_DEBUG") == "1"
ANNOTATE = os.environ.get("WIREARROW_ANNOTATE") == "1"
SANITIZE = os.environ.get("WIREARROW_SANITIZE") == "1"

EXTENSIONS = ["decoder", "buffers", "rows", "framing", "encoder", "jsonwire"]

# -g0: Python's own CFLAGS carry -g, which made each module ~6x its code (2.2 MB of DWARF
# for the decoder's 0.4 MB); GCC's code is the same with or without it. Symbols stay (perf).
compile_args = ["-O0", "-g"] if DEBUG else ["-O3", "-g0"]
link_args = []
if SANITIZE:
    compile_args += ["-g", "-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
    link_args += ["-fsanitize=address,undefined"]
if sys.platform == "win32":
    compile_args, link_args = [], []

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": DEBUG,
    "initializedcheck": DEBUG,
    "cdivision": True,
    "embedsignature": True,
}

# The decoder's per-value helpers (store_string above all) are `cdef inline`, but GCC keeps
# the larger ones out of line: a call per string value cost ~2 ms of a 50k-record nested
# batch (~6%). Forced inline, each call site is also specialised (UTF-8 checked or not).
FORCE_INLINE = (
    [] if DEBUG or sys.platform == "win32" else ["-DCYTHON_INLINE=__attribute__((always_inline)) inline"]
)

CORE = Path(__file__).resolve().parent / "plugin" / "wirearrow" / "_core"


def extension(name: str, source_suffix: str) -> Extension:
    return Extension(
        f"wirearrow._core.{name}",
        [f"plugin/wirearrow/_core/{name}{source_suffix}"],
        extra_compile_args=compile_args + (FORCE_INLINE if name == "decoder" else []),
        extra_link_args=link_args,
    )


def use_cython() -> bool:
    if cythonize is None or not all((CORE / f"{n}.pyx").is_file() for n in EXTENSIONS):
        return False
    # An sdist (PKG-INFO next to setup.py) ships C generated from the very .pyx it ships.
    # Cythonizing again in pip's build environment would regenerate all of it anyway (the
    # freshly installed Cython's own .pxd look newer than our .c): minutes for nothing.
    from_sdist = (CORE.parents[2] / "PKG-INFO").is_file()
    return not from_sdist or DEBUG or ANNOTATE or os.environ.get("WIREARROW_CYTHONIZE") == "1"


def extensions() -> list[Extension]:
    if use_cython():
        return cythonize(
            [extension(name, ".pyx") for name in EXTENSIONS],
            compiler_directives=directives,
            annotate=ANNOTATE,
            include_path=["plugin"],
            # The debug directives are baked into the generated C, and cythonize regenerates
            # only when a .pyx is newer than its .c: the debug C goes elsewhere, so it is
            # really regenerated with bounds checks, and the in-tree .c (the ones an sdist
            # ships) always hold the release directives.
            build_dir="build/cython-debug" if DEBUG else None,
        )
    missing = [f"{n}.c" for n in EXTENSIONS if not (CORE / f"{n}.c").is_file()]
    if missing:
        sys.exit(
            "wirearrow: building the extensions needs Cython>=3.0.10 (pip install Cython), "
            f"or the generated C sources an sdist ships; missing: {', '.join(missing)}"
        )
    if DEBUG or ANNOTATE:
        sys.exit("wirearrow: WIREARROW_DEBUG / WIREARROW_ANNOTATE need Cython (pip install Cython)")
    return [extension(name, ".c") for name in EXTENSIONS]


# The six modules compile in parallel (the decoder alone is most of a minute at -O3).
setup(ext_modules=extensions(), options={"build_ext": {"parallel": os.cpu_count() or 1}})
