"""pipelines/kafka_tables.py on a real broker: two schema versions' Confluent-framed records
into one Iceberg / Delta table, their superset; a second run resumes from the offsets the
tables' last commits recorded, and a run after more records were produced lands only those.
(The SIGKILL tests of the same job: tests/test_kafka_kill.py, release tier.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("pyiceberg", reason="the iceberg extra is not installed")
pytest.importorskip("deltalake", reason="the delta extra is not installed")
pytest.importorskip("confluent_kafka")

import corpus

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "pipelines"))

import kafka_tables  # noqa: E402

pytestmark = [pytest.mark.kafka]


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_two_versions_land_once_and_a_run_resumes(
    kafka_broker: str, tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from google.protobuf import message_factory

    topic, n = f"versions-{fmt}", 120
    args = ["--bootstrap", kafka_broker, "--topic", topic, "--out", str(tmp_path), "--format", fmt,
            "--n", str(n), "--partitions", "2", "--corrupt-every", "10", "--batch", "25"]  # fmt: skip
    assert kafka_tables.main(args) == 0
    first = capsys.readouterr().out
    assert "resume: from the first offsets" in first
    assert f"landed: {n} records in -> {n - n // 10} rows and {n // 10} dead letters" in first
    assert '"produced": 120' in first  # the job's own check passed
    out = kafka_tables.output(tmp_path, fmt)
    rows, dead = kafka_tables.read(out)
    assert rows.num_rows == n - n // 10 and dead.num_rows == n // 10
    # The superset: v1's names, at widened to int64, source_app only in v2's records.
    assert rows.schema.field("at").type == "int64" and "tmax" in rows.schema.names
    assert "timeout_ms" not in rows.schema.names
    # Each row against its record as its own version's runtime class reads it: the record
    # number is the key (k{i}), version 2 from n // 2 on.
    v1 = message_factory.GetMessageClass(kafka_tables.schemas()[kafka_tables.V1].descriptor)
    payloads = corpus.generate(n, seed=32)
    for row in rows.select(["key", "id", "at", "tmax", "source_app", "partition", "offset"]).to_pylist():
        i = int(row["key"][1:])
        want = v1.FromString(payloads[i])
        assert (row["id"], row["at"], row["tmax"]) == (want.id, want.at, want.tmax)
        assert row["source_app"] == (f"app-{i % 7}" if i >= n // 2 else None)
        assert row["partition"] == i % 2
    assert sorted(int(c["key"][1:]) for c in dead.column("carry").to_pylist()) == list(range(9, n, 10))

    # Again: nothing new; it resumes at the offsets the tables hold, and writes nothing.
    assert kafka_tables.main([*args, "--no-produce"]) == 0
    again = capsys.readouterr().out
    assert 'resume: {"0": 60, "1": 60}' in again
    assert "landed: 0 records in" in again
    # More records on the topic: only those land.
    kafka_tables.produce(kafka_broker, topic, 10, 2, 0)
    assert kafka_tables.main([*args, "--no-produce"]) == 0
    more = capsys.readouterr().out
    assert 'resume: {"0": 60, "1": 60}' in more and "landed: 10 records in -> 10 rows" in more
    rows, dead = kafka_tables.read(out)
    keys = list(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(), strict=True))
    assert len(keys) == len(set(keys)) == n - n // 10 + 10
