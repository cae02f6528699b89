"""Kill tests on a real broker: pipelines/kafka_tables.py (Kafka -> Iceberg / Delta, two schema
versions) killed with SIGKILL at random points -- during its start-up, while it reads and
stages batches, during a commit, between the rows' and the dead letters' commits, after a
commit -- and started again until it finishes, must leave the same tables as a clean run:
each record once, none lost.

The tables are compared with the clean run's by both readers: the format's own library
(pyiceberg's scan, deltalake) as multisets of whole rows, and DuckDB's iceberg / delta
readers with EXCEPT ALL both ways; each (partition, offset) in exactly one of the rows and
the dead letters. The broker is noida-db (the session's kafka_broker fixture, started and
stopped by its PID); the job is one process, killed by its PID.

Release tier (slow: a few job start-ups per run). WIREARROW_KILL_RUNS sets the killed runs
per format (default 2; WIREARROW_KILL_RUNS_FILES those of the files job, default 1), WIREARROW_KILL_SEED the kill points; the figures are printed
(pytest -s shows them).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("pyiceberg", reason="the iceberg extra is not installed")
pytest.importorskip("deltalake", reason="the delta extra is not installed")
pytest.importorskip("confluent_kafka")

import table_readers

ROOT = Path(__file__).resolve().parent.parent
PIPELINE = ROOT / "pipelines" / "kafka_tables.py"
sys.path.insert(0, str(PIPELINE.parent))

import kafka_tables  # noqa: E402

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

N_RECORDS = 1_200
PARTITIONS = 3
CORRUPT_EVERY = 37
BATCH = 100  # records per batch: 12 batches
COMMIT_EVERY = 2  # batches per commit: 6 commits of each table in a clean run
RUNS = int(os.environ.get("WIREARROW_KILL_RUNS", "2"))
MAX_KILLS = 4  # a run's kills; then it is let finish


@pytest.fixture(scope="module")
def topic(kafka_broker: str) -> tuple[str, str, set[tuple[int, int]]]:
    """A topic of the pipeline's records (both versions, some cut short) on the broker."""
    name = f"kill-bids-{os.getpid()}"
    produced = kafka_tables.produce(kafka_broker, name, N_RECORDS, PARTITIONS, CORRUPT_EVERY)
    assert len(produced) == N_RECORDS
    return kafka_broker, name, produced


def _command(bootstrap: str, topic: str, out: Path, fmt: str) -> list[str]:
    return [
        sys.executable, str(PIPELINE), "--bootstrap", bootstrap, "--topic", topic, "--no-produce",
        "--out", str(out), "--format", fmt, "--batch", str(BATCH), "--commit-every", str(COMMIT_EVERY),
    ]  # fmt: skip


def _lines(log: Path) -> list[str]:
    """The job's steps so far (its stdout, every start of a run appended)."""
    if not log.exists():
        return []
    return [line for line in log.read_text().splitlines() if line.split(":")[0] in STEPS]


STEPS = {"resume", "commit", "committed", "landed", "table"}


def kill_point(last: str | None) -> str:
    """Where the job was when it died, from the last step it printed."""
    if last is None:
        return "start-up"
    if last.startswith("resume"):
        return "reading/staging"
    if last.startswith("commit:"):
        return "rows' commit"
    if last.startswith("committed:"):  # the rows' table commits first, then the dead letters'
        return "after commit" if "dead_letters" in last.split("->")[0] else "between commits"
    return "finishing"


# Where a kill is aimed: a step the job prints, and the k-th of them in this start.
AIMS = {
    "reading/staging": "resume",  # after it: reading, decoding, staging batches
    "rows' commit": "commit:",  # printed just before the batch whose write commits
    "between commits": "committed-rows",  # the rows' table committed, the dead letters' not
    "after commit": "committed-dead",
}


def _is(line: str, step: str) -> bool:
    if step.startswith("committed-"):
        if not line.startswith("committed:"):
            return False
        dead = "dead_letters" in line.split("->")[0]
        return dead == (step == "committed-dead")
    return line.startswith(step)


def _committed_share(out: Path, fmt: str) -> float:
    """The share of the topic the rows' table has committed (0 before its first commit)."""
    from wirearrow import tables

    try:
        rows, _ = tables.open_sinks(kafka_tables.output(out, fmt))
        offsets = rows.committed().kafka_offsets() if rows.exists() else {}
    except Exception:  # a table being created when the job died
        return 0.0
    return sum(sum(p.values()) for p in offsets.values()) / N_RECORDS


def _run(command: list[str], out: Path, fmt: str, log: Path, rng: random.Random, commits: int) -> tuple[int, list[str]]:
    """Start the job until it finishes, killing it up to MAX_KILLS times at random points:
    (starts, kill points, each named by the last step the job printed before it died)."""
    kills: list[str] = []
    starts = 0
    while True:
        starts += 1
        before = len(_lines(log))
        left = max(1, round(commits * (1 - _committed_share(out, fmt))))
        errors = log.with_suffix(f".{starts}.err")
        with open(log, "a") as sink, open(errors, "w") as err:
            proc = subprocess.Popen(command, stdout=sink, stderr=err)
        try:
            if len(kills) < MAX_KILLS:
                aim = rng.choice(["start-up", *AIMS])
                if aim == "start-up":  # opening the tables, the consumer
                    time.sleep(rng.uniform(0.2, 2.5))
                else:
                    step, k = AIMS[aim], (1 if aim == "reading/staging" else rng.randint(1, left))
                    while proc.poll() is None and sum(_is(x, step) for x in _lines(log)[before:]) < k:
                        time.sleep(0.002)
                    if aim in ("reading/staging", "rows' commit"):
                        time.sleep(rng.uniform(0.0, 0.2 if aim == "reading/staging" else 0.05))
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
                    new = _lines(log)[before:]
                    kills.append(kill_point(new[-1] if new else None))
                    continue
            proc.wait(timeout=300)
        finally:  # a failure here leaves no job running
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 0, (
            f"the job failed ({proc.returncode}): {log.read_text()[-2000:]}\n{errors.read_text()[-3000:]}"
        )
        return starts, kills


def _multiset(table) -> Counter:
    return Counter(json.dumps(row, sort_keys=True, default=repr) for row in table.to_pylist())


def _duckdb_source(fmt: str, out: Path) -> tuple[str, str]:
    """DuckDB's scans of the rows' and the dead letters' tables of a run under ``out``."""
    from wirearrow import tables

    rows, dead = tables.open_sinks(kafka_tables.output(out, fmt))
    assert dead is not None
    if fmt == "iceberg":
        return tuple(f"iceberg_scan('{s.table().metadata_location}')" for s in (rows, dead))  # type: ignore[return-value]
    return tuple(f"delta_scan('{s.uri}')" for s in (rows, dead))  # type: ignore[return-value]


# A dead letter's index and offset are its place in its batch: the batching differs
# between runs, the record (partition, offset) and what was wrong do not.
DEAD = 'carry."partition", carry."offset", path, reason, raw'


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_killed_kafka_jobs_leave_each_record_once(tmp_path: Path, topic, fmt: str) -> None:
    bootstrap, name, produced = topic
    rng = random.Random(f"{os.environ.get('WIREARROW_KILL_SEED', '32')}-kafka-{fmt}")
    clean = tmp_path / "clean"
    clean_log = tmp_path / "clean.log"
    with open(clean_log, "w") as sink:
        subprocess.run(_command(bootstrap, name, clean, fmt), check=True, stdout=sink, stderr=subprocess.DEVNULL)
    commits = sum(_is(line, "commit:") for line in _lines(clean_log))
    clean_rows, clean_dead = kafka_tables.read(kafka_tables.output(clean, fmt))
    assert kafka_tables.check(produced, clean_rows, clean_dead)["rows"] == clean_rows.num_rows
    # both versions in the one table: v2's field set for v2's records only
    assert 0 < clean_rows.column("source_app").null_count < clean_rows.num_rows
    con = table_readers.connect()
    clean_scan, clean_dead_scan = _duckdb_source(fmt, clean)
    report = []
    for run in range(RUNS):
        out = tmp_path / f"run{run}"
        log = tmp_path / f"run{run}.log"
        starts, kills = _run(_command(bootstrap, name, out, fmt), out, fmt, log, rng, commits)
        # a start after a commit resumed from the offsets the tables hold, not from 0; a
        # start before any commit, from the first offsets. A kill between a batch's
        # "commit:" and its "committed:" lines may leave either (the tables commit before
        # the job prints that they did): no claim on the starts after it until then.
        committed = committing = False
        for line in _lines(log):
            committed = committed or line.startswith("committed:")
            committing = committing or line.startswith("commit:")
            if line.startswith("resume") and (committed or not committing):
                assert ("first offsets" in line) != committed, line
        # the format's own reader: the same multiset of whole rows and dead letters
        rows, dead = kafka_tables.read(kafka_tables.output(out, fmt))
        own = (_multiset(rows) - _multiset(clean_rows), _multiset(clean_rows) - _multiset(rows))
        dead_cols = ["carry", "path", "reason", "raw"]
        own_dead = (
            _multiset(dead.select(dead_cols)) - _multiset(clean_dead.select(dead_cols)),
            _multiset(clean_dead.select(dead_cols)) - _multiset(dead.select(dead_cols)),
        )
        # DuckDB: EXCEPT ALL both ways, rows whole, dead letters by record
        scan, dead_scan = _duckdb_source(fmt, out)
        extra, missing = table_readers.except_all(con, f"SELECT * FROM {scan}", f"SELECT * FROM {clean_scan}")
        dead_extra, dead_missing = table_readers.except_all(
            con, f"SELECT {DEAD} FROM {dead_scan}", f"SELECT {DEAD} FROM {clean_dead_scan}"
        )
        dup = con.sql(f'SELECT count(*) - count(DISTINCT ("partition", "offset")) FROM {scan}').fetchone()[0]
        n_rows = con.sql(f"SELECT count(*) FROM {scan}").fetchone()[0]
        n_dead = con.sql(f"SELECT count(*) FROM {dead_scan}").fetchone()[0]
        figures = {
            "run": run, "starts": starts, "kills": kills, "rows": n_rows, "dead_letters": n_dead,
            "duckdb extra/missing": (extra, missing, dead_extra, dead_missing),
            "own reader extra/missing": tuple(sum(c.values()) for c in (*own, *own_dead)),
            "duplicates": dup,
        }  # fmt: skip
        report.append(figures)
        assert (extra, missing, dead_extra, dead_missing) == (0, 0, 0, 0), figures
        assert figures["own reader extra/missing"] == (0, 0, 0, 0), figures
        assert dup == 0 and n_rows + n_dead == N_RECORDS, figures
        assert kafka_tables.check(produced, rows, dead)["produced"] == N_RECORDS
    for figures in report:
        print(f"kafka -> {fmt}: {json.dumps(figures)}")
    # the kills landed at more than one kind of point over the runs
    assert len({k for f in report for k in f["kills"]}) >= 2 or RUNS < 2, report


# ---- files: pipelines/kafka_pipeline.py (Ray Data -> Parquet, committed by rename) -------

FILES_PIPELINE = ROOT / "pipelines" / "kafka_pipeline.py"
FILES_RUNS = int(os.environ.get("WIREARROW_KILL_RUNS_FILES", "1"))
FILES_MAX_KILLS = 3
FILES_AIMS = ("writing", "commit", "start-up", "committed")


@pytest.fixture(scope="module")
def files_topics(kafka_broker: str) -> tuple[str, str, int, dict[str, set[tuple[int, int]]]]:
    """The files pipeline's two topics (plain and Confluent-framed) on the broker."""
    pytest.importorskip("ray")
    import kafka_pipeline

    name = f"kill-files-{os.getpid()}"
    produced, schema_id = kafka_pipeline.produce(kafka_broker, name, 600, PARTITIONS, CORRUPT_EVERY)
    return kafka_broker, name, schema_id, produced


def _files_step(line: str) -> str | None:
    """A step of the files pipeline's stderr (``TOPIC: resume|run N: writing|commit|committed``)."""
    _, _, what = line.partition(": ")
    for step in ("resume", "run"):
        if what.startswith(step):
            return what.split(": ")[1].split(" ")[0].rstrip(",") if step == "run" else "resume"
    return None


def _files_lines(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if _files_step(line)] if log.exists() else []


def _files_kill_point(lines: list[str]) -> str:
    if not lines:
        return "start-up (Ray's)"
    topic, _, _ = lines[-1].partition(": ")
    step = _files_step(lines[-1])
    where = {"resume": "reading", "writing": "writing (Ray tasks)", "commit": "the rename",
             "committed": "after a commit"}[step or "resume"]  # fmt: skip
    return f"{where} ({'plain' if topic.endswith('-plain') else 'framed'})"


@pytest.mark.ray
def test_killed_kafka_file_jobs_leave_each_record_once(tmp_path: Path, files_topics) -> None:
    """The Ray job into Parquet, killed (SIGKILL to its process group: the driver and the
    Ray it started) while Ray writes, at the rename that commits, between the topics, after
    a commit, and started again: the committed runs hold each record once, as a clean run."""
    import kafka_pipeline

    bootstrap, name, schema_id, produced = files_topics
    rng = random.Random(f"{os.environ.get('WIREARROW_KILL_SEED', '32')}-kafka-files")

    def command(out: Path) -> list[str]:
        return [sys.executable, str(FILES_PIPELINE), "--bootstrap", bootstrap, "--topic", name,
                "--no-produce", "--schema-id", str(schema_id), "--out", str(out), "--no-progress"]  # fmt: skip

    clean = tmp_path / "clean"
    subprocess.run(command(clean), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    con = table_readers.connect()
    topics = [f"{name}-plain", name]
    report = []
    for run in range(FILES_RUNS):
        out = tmp_path / f"run{run}"
        log = tmp_path / f"files{run}.log"
        kills: list[str] = []
        starts = 0
        while True:
            starts += 1
            before = len(_files_lines(log))
            with open(log, "a") as err:
                proc = subprocess.Popen(command(out), stdout=subprocess.DEVNULL, stderr=err,
                                        start_new_session=True)  # fmt: skip
            try:
                # Where to aim, in turn over the kills (each kind in every few runs): while
                # Ray writes, at the rename that commits, Ray's start-up, just after the
                # rename; in a random one of the topics still to commit.
                left = sum(not kafka_pipeline.committed_runs(out / t) for t in topics)
                if len(kills) < FILES_MAX_KILLS and left:
                    aim = FILES_AIMS[(run + len(kills)) % len(FILES_AIMS)]
                    k = rng.randint(1, left)
                    if aim == "start-up":
                        time.sleep(rng.uniform(0.5, 8.0))
                    while aim != "start-up" and proc.poll() is None and sum(
                        _files_step(x) == aim for x in _files_lines(log)[before:]
                    ) < k:
                        time.sleep(0.005)
                    time.sleep(rng.uniform(0.0, 4.0) if aim == "writing" else 0.0)
                    if proc.poll() is None:
                        os.killpg(proc.pid, signal.SIGKILL)  # the job's own group
                        proc.wait()
                        kills.append(_files_kill_point(_files_lines(log)[before:]))
                        continue
                proc.wait(timeout=600)
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            assert proc.returncode == 0, log.read_text()[-3000:]
            break
        compared = {}
        for topic in topics:
            got, want = out / topic, clean / topic
            assert not (got / ".partial").exists()  # the last start finished: no leftovers
            rows_glob = "read_parquet('{}/runs/*/rows/*.parquet')"
            dead_glob = "read_parquet('{}/runs/*/dead_letters.parquet')"
            extra, missing = table_readers.except_all(
                con, f"SELECT * FROM {rows_glob.format(got)}", f"SELECT * FROM {rows_glob.format(want)}"
            )
            dead_cols = 'source."partition", source."offset", reason, raw'
            dead_extra, dead_missing = table_readers.except_all(
                con, f"SELECT {dead_cols} FROM {dead_glob.format(got)}",
                f"SELECT {dead_cols} FROM {dead_glob.format(want)}",
            )  # fmt: skip
            n_rows = con.sql(f"SELECT count(*) FROM {rows_glob.format(got)}").fetchone()[0]
            dup = con.sql(
                f'SELECT count(*) - count(DISTINCT ("partition", "offset")) FROM {rows_glob.format(got)}'
            ).fetchone()[0]
            rows, dead = kafka_pipeline.read_committed(got)
            counts = kafka_pipeline.check_exactly_once(produced[topic], rows, dead)
            compared[topic] = {"runs": len(kafka_pipeline.committed_runs(got)), "rows": n_rows,
                               "dead_letters": counts["dead_letters"], "duplicates": dup,
                               "extra/missing": (extra, missing, dead_extra, dead_missing)}  # fmt: skip
            assert (extra, missing, dead_extra, dead_missing, dup) == (0, 0, 0, 0, 0), compared
        report.append({"run": run, "starts": starts, "kills": kills, "topics": compared})
    for figures in report:
        print(f"kafka -> files: {json.dumps(figures)}")
