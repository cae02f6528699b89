"""The thread benchmarks run and report what they say they measure (no timing asserted:
benchmarks/ measures, tests do not)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"


def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=BENCH,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.bench
@pytest.mark.skipif(shutil.which("cc") is None, reason="gil_held.py compiles its shim with cc")
def test_gil_held_reports_held_time_and_the_two_thread_wait() -> None:
    proc = run("gil_held.py", "--plans", "flat-4", "nested", "--batch", "512", "--repeat", "2")
    assert proc.returncode == 0, proc.stderr
    rows = {}
    for line in proc.stdout.splitlines():
        m = re.match(
            r"(flat-4|nested) +([\d.]+) \[ *[\d.]+\] +([\d.]+) \[ *[\d.]+\] +([\d.]+)% +(\d+) "
            r"+([\d.]+)x +([\d.]+) +([\d.]+)%$",
            line,
        )
        if m:
            rows[m.group(1)] = [float(x) for x in m.groups()[1:]]
    assert set(rows) == {"flat-4", "nested"}, proc.stdout
    for cpu, held, share, releases, bound, wait, wait_share in rows.values():
        assert 0 < held <= cpu
        assert abs(share / 100 - held / cpu) < 0.02  # (printed rounded)
        assert abs(bound - 2 / (1 + share / 100)) < 0.02
        # The decoder releases the GIL in every batch, and the shim sees it.
        assert releases >= 1
        assert wait >= 0 and 0 <= wait_share < 100


@pytest.mark.bench
def test_bench_threads_prints_every_way_and_the_target_lines(tmp_path) -> None:
    out = tmp_path / "threads.json"
    proc = run(
        "bench_threads.py", "--plans", "flat-4", "--batch", "8192", "--batches", "2",
        "--repeat", "1", "--json", str(out),
    )
    assert proc.returncode == 0, proc.stderr
    ways = re.findall(r"^flat-4 +8,192 (1 thread|2 threads, shared|2 threads, own) ", proc.stdout, re.M)
    assert ways == ["1 thread", "2 threads, shared", "2 threads, own"]
    targets = re.findall(
        r"^scaling, flat-4, batch 8,192, 2 threads, (shared|own): [\d.]+x \(target >= 1\.8x; "
        r"zlib [\d.]+x, decoder alone [\d.]+x\)$",
        proc.stdout,
        re.M,
    )
    assert targets == ["shared", "own"]
    assert out.exists() and '"scaling"' in out.read_text()


def test_bench_threads_runs_every_way_on_the_same_kept_threads(monkeypatch) -> None:
    import threading

    monkeypatch.syspath_prepend(str(BENCH))
    import bench_threads

    seen: list[list[int]] = []

    def job(into: list[int]):
        return lambda: into.append(threading.get_ident())

    for _ in range(3):
        one: list[int] = []
        two: list[int] = []
        assert bench_threads.run_threads([job(one)]) >= 0
        bench_threads.run_threads([job(two), job(two)])
        seen.append(one + sorted(two))
    assert len(set(seen[0][1:])) == 2  # two threads at once
    assert seen[0] == seen[1] == seen[2]  # the same threads every time, started once
    assert threading.get_ident() not in seen[0]

    def fails() -> None:
        raise KeyError("from a worker")

    with pytest.raises(KeyError, match="from a worker"):
        bench_threads.run_threads([fails, job([])])
    bench_threads.run_threads([job([])])  # and the workers still serve
