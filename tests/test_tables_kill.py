"""Kill tests of the tables' commit protocol: a job (tests/table_job.py) killed with SIGKILL at
random points, started again until it finishes, must leave the same rows and dead letters as
a clean run: each record once, none lost (EXCEPT ALL both ways, by DuckDB reading the tables).

Release tier (slow): each run is a few processes of pyiceberg / deltalake start-up.
WIREARROW_KILL_RUNS sets the number of killed jobs per format (default 3; the Ray jobs',
each a local Ray started again, WIREARROW_KILL_RAY_RUNS, default 1); the figures of a run
are printed (pytest -s shows them).
"""

from __future__ import annotations

import contextlib
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
import wirearrow as wa
from wirearrow import tables
from wirearrow.sources.framing import frame_records

pytestmark = pytest.mark.slow

JOB = Path(__file__).resolve().parent / "table_job.py"
N_RECORDS = 2_000
CORRUPT_EVERY = 37
RUNS = int(os.environ.get("WIREARROW_KILL_RUNS", "3"))
RAY_RUNS = int(os.environ.get("WIREARROW_KILL_RAY_RUNS", "1"))
RAY_JOB = Path(__file__).resolve().parent / "table_ray_job.py"


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


PLAN = """\
proto:
  file: {examples}/bidrequest.proto
  message: BidRequestEvent
  import_paths: [{examples}]
denormalizer:
  columns:
    - {{name: id, path: id}}
    - {{name: at, path: at}}
    - {{name: country, path: device.geo.country}}
    - {{name: timestamp, path: timestamp}}
    - {{name: imp_id, path: "imp[*].id"}}
input:
  framing: varint
errors:
  policy: dead_letter
"""


class PythonJob:
    """tests/table_job.py: a TableWriter loop logging each step."""

    name = "job"
    position = "position"  # the rows' and the dead letters' (in carry) record position
    dead_position = "carry.position"
    one_row_per_record = True  # (the plan's columns make one row of each record)
    runs = RUNS
    new_session = False  # a job whose processes outlive it gets a session of its own

    def __init__(self, corpus_file: Path, fmt: str, tmp: Path) -> None:
        self.corpus_file, self.fmt = corpus_file, fmt

    def command(self, where: Path, log: Path) -> list[str]:
        return _job(self.corpus_file, self.fmt, where, log, 40, 2)

    def tables(self, where: Path) -> tuple[tables.TableSink, tables.TableSink]:
        return _tables(self.fmt, where)

    @property
    def size(self) -> int:
        """The input's positions: records."""
        return N_RECORDS

    def progress(self, where: Path, log: Path, lines: int, files: int) -> int:
        """Steps done since it started: its log's new lines."""
        return len(_lines(log)) - lines

    def pause(self, rng: random.Random) -> float:
        """How long after its step the kill lands: a moment into the next step."""
        return rng.uniform(0.0, 0.3)

    def kill_point(self, where: Path, log: Path, lines: int) -> str:
        """Where it was when it died: its log's last line."""
        return _last(log) if len(_lines(log)) > lines else "start-up"


class CommandJob(PythonJob):
    """``wirearrow transcode --to FMT``: a commit every 2 batches of 40 records; no log (the
    kill point is read back from the table: how far into the file its commits got)."""

    name = "cli"
    position = '"offset"'  # --offset-column: the record's byte in the file (quoted: SQL's word)
    dead_position = "file_offset"
    one_row_per_record = False  # imp[*].id

    def __init__(self, corpus_file: Path, fmt: str, tmp: Path) -> None:
        super().__init__(corpus_file, fmt, tmp)
        self.plan = tmp / "plan.yaml"
        examples = Path(__file__).resolve().parent.parent / "examples" / "schema"
        self.plan.write_text(PLAN.format(examples=examples))

    def output(self, where: Path) -> list[str]:
        if self.fmt == "iceberg":
            return ["--to", "iceberg", "--warehouse", str(where / "wh"), "--table", "events.bids",
                    "--partition", "day(timestamp)"]  # fmt: skip
        return ["--to", "delta", "--table", str(where / "bids")]

    def command(self, where: Path, log: Path) -> list[str]:
        return [
            sys.executable, "-m", "wirearrow", "transcode", str(self.plan), str(self.corpus_file),
            *self.output(where), "--batch-size", "40", "--commit-every", "2",
            "--offset-column", "offset", "--no-progress",
        ]  # fmt: skip

    @property
    def size(self) -> int:
        """The input's positions: bytes."""
        return self.corpus_file.stat().st_size

    def progress(self, where: Path, log: Path, lines: int, files: int) -> int:
        """Steps done since it started: the data files it wrote (one per batch staged)."""
        return _data_files(where) - files

    def kill_point(self, where: Path, log: Path, lines: int) -> str:
        """How far the rows' table got when it died."""
        return f"{_share(self, where):.0%} committed"

    def tables(self, where: Path) -> tuple[tables.TableSink, tables.TableSink]:
        if self.fmt == "iceberg":
            out = wa.Output(format="iceberg", table="events.bids", warehouse=str(where / "wh"))
        else:
            out = wa.Output(format="delta", table=str(where / "bids"))
        rows, dead = tables.open_sinks(out)
        assert dead is not None
        return rows, dead


class RayJob(CommandJob):
    """tests/table_ray_job.py: a Ray driver (its own local Ray, 2 CPUs) writing the file's
    8 blocks with wirearrow.ray.write_table, a commit per block, the dead letters last. A
    kill lands after a random number of data files written by its tasks or of its commits;
    the driver is killed, and its Ray goes with it (the processes of its session that are
    left are stopped by PID)."""

    name = "ray"
    position = '"offset"'  # read_delimited(include_location=True): the record's byte
    dead_position = "source.offset"
    one_row_per_record = True
    runs = RAY_RUNS
    new_session = True

    def __init__(self, corpus_file: Path, fmt: str, tmp: Path) -> None:
        PythonJob.__init__(self, corpus_file, fmt, tmp)

    def command(self, where: Path, log: Path) -> list[str]:
        return [sys.executable, str(RAY_JOB), str(self.corpus_file), "--format", self.fmt,
                "--where", str(where), "--blocks", "8", "--commit-every", "1", "--log", str(log)]  # fmt: skip

    def progress(self, where: Path, log: Path, lines: int, files: int) -> int:
        """Steps done since it started: data files written by its tasks and commits."""
        return _data_files(where) - files + len(_lines(log)) - lines

    def pause(self, rng: random.Random) -> float:
        # Its steps come within milliseconds of each other (the blocks' files in parallel,
        # then the commits): a longer pause would land after the last one every time.
        return rng.uniform(0.0, 0.005)

    def kill_point(self, where: Path, log: Path, lines: int) -> str:
        new = [what for _, what in _lines(log)[lines:]]
        commits = sum(1 for what in new if what.startswith("commit"))
        if not new:
            return "start-up"
        return f"{_share(self, where):.0%} committed, {commits} commit(s) of this start"

    def tables(self, where: Path) -> tuple[tables.TableSink, tables.TableSink]:
        return _tables(self.fmt, where)


def _reap(session: int) -> None:
    """Stop what is left of a killed job's session (its Ray: the driver's death stops it
    within seconds; what is still there after 20 s is killed by PID)."""
    deadline = time.monotonic() + 20
    while True:
        left = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if os.getsid(int(entry)) == session:
                        left.append(int(entry))
                except OSError:  # gone meanwhile
                    pass
        if not left:
            return
        if time.monotonic() > deadline:
            for pid in left:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 5
        time.sleep(0.2)


def _data_files(where: Path) -> int:
    return sum(1 for _ in where.rglob("*.parquet")) if where.exists() else 0


def _reach(job: PythonJob, where: Path, log: Path, lines: int, files: int, target: int,
           proc: subprocess.Popen) -> bool:  # fmt: skip
    """Wait until the job has done ``target`` steps; False if it ended first."""
    while proc.poll() is None:
        if job.progress(where, log, lines, files) >= target:
            return True
        time.sleep(0.01)
    return False


def _share(job: PythonJob, where: Path) -> float:
    """The share of the input the rows' table committed."""
    try:
        rows, _ = job.tables(where)
        done = rows.committed()[tables.file_key(job.corpus_file)] if rows.exists() else 0
    except Exception:  # a table being created when the job died
        return 0.0
    return done / job.size


@pytest.mark.parametrize(
    "kind",
    [PythonJob, CommandJob, pytest.param(RayJob, marks=pytest.mark.ray)],
    ids=["job", "cli", "ray"],
)
@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_killed_jobs_leave_each_record_once(tmp_path: Path, corpus_file: Path, fmt: str, kind) -> None:
    job = kind(corpus_file, fmt, tmp_path)
    rng = random.Random(f"{os.environ.get('WIREARROW_KILL_SEED', '32')}-{fmt}-{job.name}")
    clean = tmp_path / "clean"
    subprocess.run(job.command(clean, tmp_path / "clean.log"), check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL if job.new_session else None)  # fmt: skip
    # A kill lands after a random number of the job's steps (log lines, data files: not a
    # time, which the machine's load would make meaningless), a moment into the next one.
    steps = job.progress(clean, tmp_path / "clean.log", 0, 0)
    con = table_readers.connect()
    clean_rows, clean_dead = job.tables(clean)
    report = []
    for run in range(job.runs):
        where = tmp_path / f"run{run}"
        log = tmp_path / f"run{run}.log"
        kills: list[str] = []
        starts = 0
        while True:
            starts += 1
            before, files = len(_lines(log)), _data_files(where)
            left = max(1, round(steps * (1 - _share(job, where))))
            with open(log.with_suffix(".err"), "ab") as err:  # (Ray's chatter: read on failure)
                proc = subprocess.Popen(
                    job.command(where, log), stdout=subprocess.DEVNULL,
                    stderr=err if job.new_session else None, start_new_session=job.new_session,
                )  # fmt: skip
            try:
                # Up to 4 kills a run, then the job is let finish. Most after a random step
                # of its work (a batch staged, a commit, between the two tables' commits),
                # one in six during its start-up (opening the tables, reading positions).
                if len(kills) < 4:
                    if rng.random() < 1 / 6:
                        time.sleep(rng.uniform(0.1, 2.0))
                    elif _reach(job, where, log, before, files, rng.randint(1, left), proc):
                        time.sleep(job.pause(rng))
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
                        kills.append(job.kill_point(where, log, before))
                        continue
                proc.wait()
            finally:  # a failure here leaves no job running
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                if job.new_session:
                    _reap(proc.pid)
            assert proc.returncode == 0, (
                f"the job failed ({proc.returncode}); log: {_last(log)}; "
                f"{log.with_suffix('.err').read_text()[-3000:] if job.new_session else ''}"
            )
            break
        rows, dead = job.tables(where)
        compared = []
        for got, want in ((rows, clean_rows), (dead, clean_dead)):
            a, b = _scan(con, got), _scan(con, want)
            if got is dead:  # a dead letter's batch index differs with the batching
                a = f"SELECT {job.dead_position}, path, reason, raw FROM {a}"
                b = f"SELECT {job.dead_position}, path, reason, raw FROM {b}"
            else:
                a, b = f"SELECT * FROM {a}", f"SELECT * FROM {b}"
            extra, missing = table_readers.except_all(con, a, b)
            n = con.sql(f"SELECT count(*) FROM ({b})").fetchone()[0]
            compared.append((n, extra, missing))
        report.append((run, starts, kills, compared))
        (_, rows_extra, rows_missing), (dead_n, dead_extra, dead_missing) = compared
        assert (rows_extra, rows_missing, dead_extra, dead_missing) == (0, 0, 0, 0), report[-1]
        # every record: in the rows (its distinct positions) or a dead letter, once
        records = con.sql(
            f"SELECT count(DISTINCT {job.position}) FROM {_scan(con, rows)}"
        ).fetchone()[0]
        assert records + dead_n == N_RECORDS
        if job.one_row_per_record:  # no position twice
            dup = con.sql(
                f"SELECT count(*) - count(DISTINCT {job.position}) FROM {_scan(con, rows)}"
            ).fetchone()[0]
            assert dup == 0
    for run, starts, kills, compared in report:
        print(f"{fmt} {job.name} run {run}: {starts} starts, killed at {kills}; rows/dead "
              f"compared {compared[0][0]}/{compared[1][0]}, extra/missing "
              f"{compared[0][1:]}/{compared[1][1:]}")
