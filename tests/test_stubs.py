"""Every compiled module has a stub, and .ci/typecheck.sh runs stubtest on it."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = ROOT / "plugin" / "wirearrow" / "_core"


def test_every_extension_has_a_stub_that_stubtest_checks() -> None:
    script = (ROOT / ".ci" / "typecheck.sh").read_text()
    modules = sorted(p.stem for p in CORE.glob("*.pyx"))
    assert modules, "no extensions found"
    assert [m for m in modules if not (CORE / f"{m}.pyi").is_file()] == []
    assert [m for m in modules if f"wirearrow._core.{m}" not in script.split()] == []
