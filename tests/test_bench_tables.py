"""benchmarks/bench_tables.py runs every job into its own Iceberg table, checks each table's
row count and prints the ratios (no timing asserted: benchmarks/ measures, tests do not)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.mark.bench
def test_bench_tables_prints_every_method_and_the_ratios(tmp_path) -> None:
    pytest.importorskip("pyiceberg", reason="the iceberg extra is not installed")
    pytest.importorskip("ray", reason="the ray extra is not installed")
    out = tmp_path / "tables.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_tables.py"), "--n", "3000", "--reps", "1",
         "--json", str(out)],
        cwd=BENCH, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "identical rows" in proc.stderr
    methods = re.findall(
        r"^(Ray write_iceberg|wirearrow \+ write_iceberg|wirearrow\.ray write_table|wirearrow TableWriter) +[\d.]+ ",
        proc.stdout, re.M,
    )  # fmt: skip
    assert methods == ["Ray write_iceberg", "wirearrow + write_iceberg", "wirearrow.ray write_table",
                       "wirearrow TableWriter"]  # fmt: skip
    ratios = re.findall(r"^(.+) vs Ray write_iceberg after a protobuf decode: [\d.]+x \(target >= 3x\)$",
                        proc.stdout, re.M)  # fmt: skip
    assert ratios == ["wirearrow + write_iceberg", "wirearrow.ray write_table", "wirearrow TableWriter"]
    saved = json.loads(out.read_text())
    assert saved["n"] == 3000 and saved["rows"] > 3000 and len(saved["warm"]) == 4
