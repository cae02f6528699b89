"""Kafka on a real broker: produce -> ray.data.read_kafka -> wirearrow.ray.transcode ->
Parquet (pipelines/kafka_pipeline.py), plain and Confluent-framed values, some corrupt;
every produced record in the rows or the dead letters, exactly once."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest

import wirearrow as wa

ray = pytest.importorskip("ray")
pytest.importorskip("confluent_kafka.schema_registry.protobuf")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "pipelines"))

import kafka_pipeline  # noqa: E402

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.ray,
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*"),
]


def test_kafka_job_every_record_once(kafka_broker: str, ray_local, tmp_path: Path) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    n, partitions = 120, 3
    produced, schema_id = kafka_pipeline.produce(
        kafka_broker, "orders", n, partitions, corrupt_every=10
    )
    assert {p for p, _ in produced["orders"]} == set(range(partitions))
    consumer = Consumer({"bootstrap.servers": kafka_broker, "group.id": "check"})
    for topic, sid in (("orders-plain", None), ("orders", schema_id)):
        rows, dead, stats = kafka_pipeline.run(kafka_broker, topic, tmp_path / topic, sid)
        counts = kafka_pipeline.check_exactly_once(produced[topic], rows, dead)
        assert counts["produced"] == n and counts["dead_letters"] >= n // 10 // 2
        assert stats.records_in == n and stats.records_failed == counts["dead_letters"]
        assert set(rows.column("topic").to_pylist()) == {topic}
        # The oracle: the in-process transcoder on the values as the broker holds them.
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        values: dict[tuple[int, int], tuple[bytes, bytes, int]] = {}
        while len(values) < n:
            msg = consumer.poll(10)
            assert msg is not None and msg.error() is None
            values[(msg.partition(), msg.offset())] = (msg.value(), msg.key(), msg.timestamp()[1])
        keys = list(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(),
                        strict=True))
        tc = wa.Transcoder(kafka_pipeline.schema(), kafka_pipeline.PLAN_COLUMNS)
        framing = {} if sid is None else {
            "framing": "confluent", "schemas": {sid: kafka_pipeline.schema()}
        }
        want = tc.transcode([values[k][0] for k in keys], **framing)
        got = rows.select(kafka_pipeline.PLAN_COLUMNS)
        assert got.to_pylist() == pa.Table.from_batches([want]).to_pylist()
        assert rows.column("key").to_pylist() == [values[k][1] for k in keys]
        assert rows.column("timestamp").to_pylist() == [values[k][2] for k in keys]
        if sid is not None:
            assert set(rows.column("_schema_id").to_pylist()) == {sid}
        # Every dead letter names its record: topic, partition, offset, timestamp, key.
        for letter in dead.to_pylist():
            source = letter["source"]
            value, key, timestamp = values[(source["partition"], source["offset"])]
            assert (source["topic"], source["key"], source["timestamp"]) == (topic, key, timestamp)
            assert letter["raw"] == value and letter["reason"]
        # Committed by rename: one run directory, with the offsets it read to.
        out = tmp_path / topic
        assert [r.name for r in kafka_pipeline.committed_runs(out)] == ["000001"]
        assert kafka_pipeline.committed_offsets(out) == {p: n // partitions for p in range(partitions)}
        assert not (out / ".partial").exists()
        # Started again (what a killed run left in .partial/ beside it): nothing new is
        # read, nothing is written twice, the leftovers are gone.
        (out / ".partial" / "000002" / "rows").mkdir(parents=True)
        (out / ".partial" / "000002" / "rows" / "half.parquet").write_bytes(b"PAR1")
        again, again_dead, again_stats = kafka_pipeline.run(kafka_broker, topic, out, sid)
        assert again_stats is None and again is not None and again.num_rows == rows.num_rows
        assert again_dead is not None and again_dead.num_rows == dead.num_rows
        assert not (out / ".partial").exists()
        # More records on the topic: the next run reads only those, from the committed
        # offsets, into a second run directory.
        producer = Producer({"bootstrap.servers": kafka_broker})
        acked: set[tuple[int, int]] = set()

        def delivered(err, msg, acked=acked) -> None:
            assert err is None
            acked.add((msg.partition(), msg.offset()))

        for i in range(2 * partitions):
            value = values[keys[i]][0]  # a good record's value, again
            producer.produce(topic, value=value, key=b"more", partition=i % partitions,
                             on_delivery=delivered)  # fmt: skip
        producer.flush(30)
        more, more_dead, more_stats = kafka_pipeline.run(kafka_broker, topic, out, sid)
        assert more_stats is not None and more_stats.records_in == 2 * partitions
        assert [r.name for r in kafka_pipeline.committed_runs(out)] == ["000001", "000002"]
        assert kafka_pipeline.check_exactly_once(produced[topic] | acked, more, more_dead)["rows"] == (
            rows.num_rows + 2 * partitions
        )
        assert kafka_pipeline.committed_offsets(out) == {p: n // partitions + 2 for p in range(partitions)}
    consumer.close()
