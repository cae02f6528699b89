"""_core is the hot path: it must not import pyarrow or any other module of ours (but the
optional accelerator, which is pyarrow's C++ put to use)."""

from __future__ import annotations

import re
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "plugin" / "wirearrow" / "_core"


def test_core_imports_nothing_from_the_cold_path() -> None:
    offenders = []
    for path in sorted(CORE.glob("*.p*")):
        # The optional accelerator is the bridge to pyarrow's C++ (built against it, loaded
        # only beside it, never by the other modules): not part of the nogil hot path.
        if path.stem == "accelerator":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = re.match(r"\s*(?:from|c?import)\s+([\w.]+)", line)
            if not m:
                continue
            mod = m.group(1)
            if mod.startswith("pyarrow") or (
                mod.startswith("wirearrow") and not mod.startswith("wirearrow._core")
            ):
                offenders.append(f"{path.name}:{n}: {line.strip()}")
    assert offenders == []


def test_nogil_helpers_are_noexcept() -> None:
    # A nogil cdef helper without noexcept makes Cython 3 re-acquire the GIL to check errors.
    bad = []
    for path in sorted(CORE.glob("*.pyx")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if line.startswith("cdef") and "nogil" in line and "noexcept" not in line:
                bad.append(f"{path.name}:{n}")
    assert bad == []
