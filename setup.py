"""Only the Cython extensions live here; all metadata is in pyproject.toml.

Knobs (environment variables):
  WIREARROW_DEBUG=1     bounds checks and wraparound on, -O0 -g: CI runs the malformed-input
                        tests against this build.
  WIREARROW_ANNOTATE=1  write cython -a HTML next to each .pyx (look for yellow in hot loops).
  WIREARROW_SANITIZE=1  build with AddressSanitizer / UBSan (run python with LD_PRELOAD=libasan).
  WIREARROW_CYTHONIZE=1 from an sdist, regenerate the C from the .pyx (default: the shipped C).
  WIREARROW_NO_ACCELERATOR=1  build without the optional C++ accelerator (below).

The accelerator (_core/accelerator.pyx, C++) is optional: it is built against the Arrow C++
headers and libraries of the pyarrow importable at build time (pyproject.toml puts pyarrow in
the isolated build environment), records that pyarrow's version, and is used only with it
(wirearrow.accelerator). Without pyarrow's headers, under WIREARROW_SANITIZE (pyarrow's
libraries are not instrumented: the sanitized run tests the pure path), or if it fails to
compile, everything else is built and one line says so.

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
ACCELERATOR = "accelerator"


def say(message: str) -> None:
    print(f"wirearrow: {message}", file=sys.stderr, flush=True)


def pyarrow_linkage() -> dict | None:
    """How to compile and link against the pyarrow importable now, or None (said why)."""
    if os.environ.get("WIREARROW_NO_ACCELERATOR") == "1":
        return say("building without the accelerator (WIREARROW_NO_ACCELERATOR=1)")
    if SANITIZE:
        return say("building without the accelerator (WIREARROW_SANITIZE: pyarrow is not instrumented)")
    if sys.platform == "win32":
        return say("building without the accelerator (not supported on Windows yet)")
    try:
        import numpy  # pyarrow's Cython declarations include its NumPy interop headers
        import pyarrow
    except ImportError as e:
        return say(f"building without the accelerator ({e.name} is not importable at build time)")
    include = pyarrow.get_include()
    if not (Path(include) / "arrow" / "api.h").is_file() or not (
        Path(pyarrow.__file__).parent / "lib.pxd"
    ).is_file():
        return say(f"building without the accelerator (no Arrow C++ headers in {include})")
    # pyarrow's wheels ship the versioned libraries only (libarrow.so.2500, no libarrow.so
    # for -larrow; pyarrow.create_library_symlinks() would write into pyarrow's directory):
    # link the file itself. Its soname ties the module to that Arrow release.
    link = []
    dirs = pyarrow.get_library_dirs()
    for name in pyarrow.get_libraries():
        found = sorted(
            (p for d in dirs for p in Path(d).glob(f"lib{name}.*") if p.suffix != ".a"),
            key=lambda p: len(p.name),
        )
        if not found:
            return say(f"building without the accelerator (no lib{name} in {dirs})")
        link.append(f"-l:{found[0].name}" if found[0].name != f"lib{name}.so" else f"-l{name}")
    # Installed, the module sits in site-packages/wirearrow/_core, pyarrow's libraries in
    # site-packages/pyarrow (pyarrow is imported first anyway, which loads them).
    rpath = ["-Wl,-rpath,$ORIGIN/../../pyarrow"] if sys.platform.startswith("linux") else []
    return {
        "include_dirs": [include, numpy.get_include()],
        "library_dirs": dirs,
        "extra_link_args": link_args + link + rpath,
        "define_macros": [("WIREARROW_PYARROW_VERSION", f'"{pyarrow.__version__}"')],
        "version": pyarrow.__version__,
    }


def accelerator_extension(source_suffix: str, linkage: dict) -> Extension:
    return Extension(
        f"wirearrow._core.{ACCELERATOR}",
        [f"plugin/wirearrow/_core/{ACCELERATOR}{source_suffix}"],
        language="c++",
        include_dirs=linkage["include_dirs"],
        library_dirs=linkage["library_dirs"],
        define_macros=linkage["define_macros"],
        # Arrow's headers need C++17 up to pyarrow 22, C++20 (std::span) from 23 on.
        extra_compile_args=compile_args + ["-std=c++20", "-Wno-unused-variable"],
        extra_link_args=linkage["extra_link_args"],
        optional=True,  # a failed compile leaves the pure path, not a failed install
    )


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


def accelerator(cython: bool) -> list[Extension]:
    linkage = pyarrow_linkage()
    if linkage is None:
        return []
    say(f"building the accelerator against pyarrow {linkage['version']}")
    if not cython:
        if not (CORE / f"{ACCELERATOR}.cpp").is_file():
            say("building without the accelerator (no accelerator.cpp and no Cython)")
            return []
        return [accelerator_extension(".cpp", linkage)]
    try:
        built = cythonize(
            [accelerator_extension(".pyx", linkage)],
            compiler_directives=directives,
            annotate=ANNOTATE,
            build_dir="build/cython-debug" if DEBUG else None,
        )
        for ext in built:  # (cythonize's copies lose it)
            ext.optional = True
        return built
    except Exception as e:  # noqa: BLE001 (Cython raises several kinds; any means: skip it)
        say(f"building without the accelerator (Cython failed on it: {e})")
        return []


def extensions() -> list[Extension]:
    if use_cython():
        return accelerator(True) + cythonize(
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
    return accelerator(False) + [extension(name, ".c") for name in EXTENSIONS]


# The six modules compile in parallel (the decoder alone is most of a minute at -O3).
setup(ext_modules=extensions(), options={"build_ext": {"parallel": os.cpu_count() or 1}})
