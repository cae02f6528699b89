"""Only the Cython extensions live here; all metadata is in pyproject.toml.

Knobs (environment variables):
  WIREARROW_DEBUG=1     bounds checks and wraparound on, -O0 -g: CI runs the malformed-input
                        tests against this build.
  WIREARROW_ANNOTATE=1  write cython -a HTML next to each .pyx (look for yellow in hot loops).
  WIREARROW_SANITIZE=1  build with AddressSanitizer / UBSan (run python with LD_PRELOAD=libasan).
"""

import os
import sys

from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("WIREARROW_DEBUG") == "1"
ANNOTATE = os.environ.get("WIREARROW_ANNOTATE") == "1"
SANITIZE = os.environ.get("WIREARROW_SANITIZE") == "1"

EXTENSIONS = ["decoder", "buffers", "rows", "framing", "encoder", "jsonwire"]

compile_args = ["-O0", "-g"] if DEBUG else ["-O3"]
link_args = []
if SANITIZE:
    compile_args += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
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

extensions = [
    Extension(
        f"wirearrow._core.{name}",
        [f"plugin/wirearrow/_core/{name}.pyx"],
        extra_compile_args=compile_args + (FORCE_INLINE if name == "decoder" else []),
        extra_link_args=link_args,
    )
    for name in EXTENSIONS
]

setup(
    ext_modules=cythonize(
        extensions,
        compiler_directives=directives,
        annotate=ANNOTATE,
        include_path=["plugin"],
    )
)
