"""Kill tests of the tables' commit protocol: a job (tests/table_job.py) killed with SIGKILL at
random points, started again until it finishes, must leave the same rows and dead letters as
a clean run: each record once, none lost (EXCEPT ALL both ways, by DuckDB reading the tables).

Release tier (slow): each run is a few processes of pyiceberg / deltalake start-up.
WIREARROW_KILL_RUNS sets the number of killed jobs per format (default 3); the figures of a
run are printed (pytest -s shows them).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyiceberg", reason="the iceberg extra is not installed")
pytest.importorskip("deltalake", reason="the delta extra is not installed")

import pyarrow as pa

import table_readers
from wirearrow import tables
from wirearrow.sources.framing import frame_records

pytestmark = pytest.mark.slow

JOB = Path(__file__).resolve().parent / "table_job.py"
N_RECORDS = 2_000
CORRUPT_EVERY = 37
RUNS = int(os.environ.get("WIREARROW_KILL_RUNS", "3"))


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import corpus

    records = corpus.generate(N_RECORDS, seed=11)
    records = [b"\xff\xff\xff" if i % CORRUPT_EVERY == 5 else r for i, r in enumerate(records)]
    path = tmp_path_factory.mktemp("kill") / "bids.bin"
    path.write_bytes(frame_records(pa.array(records, pa.binary()), "varint").to_pybytes())
    return path


def _job(corpus_file: Path, fmt: str, where: Path, log: Path, batch: int, commit_every: int) -> list[str]:
    return [
        sys.executable, str(JOB), str(corpus_file), "--format", fmt, "--where", str(where),
        "--batch", str(batch), "--commit-every", str(commit_every), "--log", str(log),
    ]  # fmt: skip


def _lines(log: Path) -> list[tuple[float, str]]:
    out = []
    for line in log.read_text().splitlines() if log.exists() else []:
        stamp, _, what = line.partition(" ")
        out.append((float(stamp), what))
    return out


def _last(log: Path) -> str:
    lines = _lines(log)
    return lines[-1][1] if lines else "start-up"


def _started(log: Path, before: int, proc: subprocess.Popen) -> bool:
    """Wait until the job (its log had ``before`` lines) read its positions; False if it
    ended first."""
    while proc.poll() is None:
        if len(_lines(log)) > before:
            return True
        time.sleep(0.02)
    return False


def _tables(fmt: str, where: Path) -> tuple[tables.TableSink, tables.TableSink]:
    sys.path.insert(0, str(JOB.parent))
    import table_job

    rows, dead = tables.open_sinks(table_job.output(fmt, str(where)))
    assert dead is not None
    return rows, dead


def _scan(con, sink: tables.TableSink) -> str:
    if isinstance(sink, tables.IcebergSink):
        return f"iceberg_scan('{sink.table().metadata_location}')"
    assert isinstance(sink, tables.DeltaSink)
    return f"delta_scan('{sink.uri}')"


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_killed_jobs_leave_each_record_once(tmp_path: Path, corpus_file: Path, fmt: str) -> None:
    rng = random.Random(f"{os.environ.get('WIREARROW_KILL_SEED', '32')}-{fmt}")
    batch, commit_every = 40, 2
    clean = tmp_path / "clean"
    subprocess.run(_job(corpus_file, fmt, clean, tmp_path / "clean.log", batch, commit_every), check=True)
    clean_lines = _lines(tmp_path / "clean.log")
    work_seconds = clean_lines[-1][0] - clean_lines[0][0]  # from reading positions to done
    con = table_readers.connect()
    clean_rows, clean_dead = _tables(fmt, clean)
    report = []
    for run in range(RUNS):
        where = tmp_path / f"run{run}"
        log = tmp_path / f"run{run}.log"
        kills: list[str] = []
        starts = 0
        while True:
            starts += 1
            before = len(_lines(log))
            proc = subprocess.Popen(_job(corpus_file, fmt, where, log, batch, commit_every))
            try:
                # Up to 4 kills a run, then the job is let finish. Most at a random time of
                # its work (a batch, a commit, between the two tables' commits), one in six
                # during its start-up (opening the tables, reading positions).
                if len(kills) < 4:
                    if rng.random() < 1 / 6:
                        time.sleep(rng.uniform(0.1, 2.0))
                    elif _started(log, before, proc):
                        # within what is left of the work: the job resumed at position P
                        # (its first line of this start; it may have logged more since)
                        resumed = int(_lines(log)[before][1].removeprefix("resume "))
                        left = work_seconds * (1 - resumed / N_RECORDS)
                        time.sleep(rng.uniform(0.0, left * 0.95))
                    if proc.poll() is None:
                        proc.send_signal(signal.SIGKILL)
                        proc.wait()
                        kills.append(_last(log) if len(_lines(log)) > before else "start-up")
                        continue
                proc.wait()
            finally:  # a failure here leaves no job running
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            assert proc.returncode == 0, f"the job failed ({proc.returncode}); log: {_last(log)}"
            break
        rows, dead = _tables(fmt, where)
        compared = []
        for got, want in ((rows, clean_rows), (dead, clean_dead)):
            a, b = _scan(con, got), _scan(con, want)
            if got is dead:  # a dead letter's batch index differs with the batching
                a = f"SELECT carry.position, path, reason, raw FROM {a}"
                b = f"SELECT carry.position, path, reason, raw FROM {b}"
            else:
                a, b = f"SELECT * FROM {a}", f"SELECT * FROM {b}"
            extra, missing = table_readers.except_all(con, a, b)
            n = con.sql(f"SELECT count(*) FROM ({b})").fetchone()[0]
            compared.append((n, extra, missing))
        report.append((run, starts, kills, compared))
        (rows_n, rows_extra, rows_missing), (dead_n, dead_extra, dead_missing) = compared
        assert (rows_extra, rows_missing, dead_extra, dead_missing) == (0, 0, 0, 0), report[-1]
        assert rows_n + dead_n == N_RECORDS
        # no record twice: position is unique in each table, and in only one of them
        dup = con.sql(
            f"SELECT count(*) - count(DISTINCT position) FROM {_scan(con, rows)}"
        ).fetchone()[0]
        assert dup == 0
    for run, starts, kills, compared in report:
        print(f"{fmt} run {run}: {starts} starts, killed at {kills}; rows/dead compared "
              f"{compared[0][0]}/{compared[1][0]}, extra/missing {compared[0][1:]}/{compared[1][1:]}")
