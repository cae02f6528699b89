"""benchmarks/plot.py: PNGs and the docs page from the benchmarks' --json output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.bench  # the benchmarks' tooling: the release tier


@pytest.fixture(scope="module")
def plot():
    pytest.importorskip("matplotlib")  # here, not at collection: the unit tier never needs it
    import plot  # benchmarks/, put on sys.path by conftest.py

    return plot


MACHINE = {"cpu": "Test CPU 9000", "cores": 2, "usable_cores": 2, "python": "CPython 3.11"}


def _row(method: str, plan: str, form: str, rate: float, ratio: float | None, **extra) -> dict:
    return {"method": method, "plan": plan, "input_form": form, "status": "ok",
            "msg_per_s": rate, "ratio": ratio, **extra}  # fmt: skip


def test_figures_of_any_run(plot, tmp_path: Path) -> None:
    flat = tmp_path / "flat.json"
    flat.write_text(json.dumps({
        "machine": MACHINE,
        "targets": ["4-col vs pybufarrow: 3.4x (target >= 20x)"],
        "results": [
            _row("wirearrow", "flat-4", "BinaryArray", 2.5e5, 3.4, peak_ratio=0.3, peak_extra_bytes=1e5),
            _row("pybufarrow flat", "flat-4", "list[bytes]", 7e4, 1.0, peak_ratio=2.0, peak_extra_bytes=4e6),
            _row("wirearrow", "flat-15", "BinaryArray", 1.5e5, 2.0),
            {"method": "ptars", "plan": "nested", "status": "not available (no module)"},
        ],
    }))  # fmt: skip
    encode = tmp_path / "encode.json"  # no machine, no plan, no memory
    encode.write_text(json.dumps({"n": 10, "results": [
        {"method": "wirearrow encode", "msg_per_s": 1e5, "ratio": 2.5},
        {"method": "runtime serialize", "msg_per_s": 4e4, "ratio": 1.0},
    ]}))  # fmt: skip
    out = tmp_path / "img"
    assert plot.main([str(flat), str(encode), "--out", str(out)]) == 0
    made = sorted(p.name for p in out.iterdir())
    assert made == ["encode-throughput.png", "flat-memory.png", "flat-throughput.png"]
    for png in out.iterdir():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000


def test_publish_writes_the_pngs_the_page_and_the_readme_lines(plot, tmp_path: Path) -> None:
    import conditions

    run = {
        "conditions": {
            "date": "2026-12-08 03:10 UTC", "machine": {**MACHINE, "memory_gb": 23.4},
            "versions": {"wirearrow": "0.9.0"}, "quick": False, "busy_cores": 1,
            "load_before": [0.12, 0.2, 0.3], "load_after": [1.02, 0.6, 0.4],
        },
        "targets": ["4-col vs pybufarrow: 31.9x (target >= 20x)"],
        "results": [_row("wirearrow", "flat-4", "BinaryArray", 2.65e6, 31.9),
                    _row("pybufarrow flat", "flat-4", "list[bytes]", 8.3e4, 1.0)],
    }  # fmt: skip
    figures = tmp_path / "figures.json"
    figures.write_text(json.dumps({"thresholds": conditions.thresholds(), "runs": {"flat": run}}))
    page, readme, images = tmp_path / "page.md", tmp_path / "README.md", tmp_path / "img"
    readme.write_text(f"# x\n\n{plot.README_BEGIN}\n{plot.README_END}\n\nrest\n")
    plot.publish(figures, page=page, images=images, readme=readme)
    assert sorted(p.name for p in images.iterdir()) == ["flat-throughput.png"]
    text = page.read_text()
    assert "Test CPU 9000, 2 cores, 23.4 GB; full run" in text
    assert "- 4-col vs pybufarrow: 31.9x (target >= 20x) (2026-12-08 03:10 UTC, load 0.12 before, 1.02 after)" in text
    assert "![flat-throughput](img/benchmarks/flat-throughput.png)" in text
    assert "- flat: 4-col vs pybufarrow: 31.9x" in readme.read_text()
    assert readme.read_text().endswith("\n\nrest\n")


def test_a_run_with_no_measured_row_is_an_error(plot, tmp_path: Path) -> None:
    empty = tmp_path / "x.json"
    empty.write_text(json.dumps({"results": [{"method": "a", "status": "not available"}]}))
    with pytest.raises(ValueError, match="no measured rows"):
        plot.figures(empty, tmp_path)
