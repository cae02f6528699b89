"""Kafka -> Ray Data -> wirearrow -> Parquet, plain and Confluent-framed protobuf values.

    python pipelines/kafka_pipeline.py --out out/kafka                   # its own local broker
    python pipelines/kafka_pipeline.py --bootstrap host:9092 --out out/kafka --no-produce

Produces ``--n`` BidRequestEvent records (benchmarks/corpus.py) to two topics of
``--partitions`` partitions: ``TOPIC-plain`` (bare protobuf values) and ``TOPIC`` (the
Confluent Schema Registry wire format, written by confluent-kafka's own
``ProtobufSerializer`` against its in-process mock registry), every ``--corrupt-every``-th
value corrupted. Then for each topic ``ray.data.read_kafka`` -> ``wirearrow.ray.transcode``
-> Parquet under ``OUT/<topic>/rows``, with ``topic``, ``partition``, ``offset``,
``timestamp`` and ``key`` on every row and in every dead letter (``OUT/<topic>/dead``).
Finally it checks that every produced record is in the rows or the dead letters, exactly
once, and prints the counts. Without ``--bootstrap`` a noida-db broker is started on a
free loopback port for the run (pipelines/local_kafka.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import wirearrow as wa
import wirearrow.ray as war

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import local_ray  # noqa: E402
from local_kafka import LocalKafka  # noqa: E402
from stage_times import (  # noqa: E402
    Clock,
    add_progress_option,
    ray_parquet_sink,
    show_ray_progress,
)

import corpus  # noqa: E402

KAFKA_COLUMNS = ["topic", "partition", "offset", "timestamp", "key"]
PLAN_COLUMNS = ["id", "device.geo.country"]  # one row per record: counts compare exactly


def schema() -> wa.Schema:
    return wa.Schema.from_proto(
        corpus.PROTO_FILE, corpus.MESSAGE_NAME, import_paths=[corpus.SCHEMA_DIR]
    )


def corrupt(value: bytes, i: int, framed: bool) -> bytes:
    """A value no reader can take, of a kind that varies with i."""
    kinds = [b"\xff\xff\xff", value[: len(value) // 2]]
    if framed:
        kinds += [b"\x01" + value[1:], value[:1] + b"\x00\x00\x00\x63" + value[5:]]
    return kinds[i % len(kinds)]


def produce(
    bootstrap: str, topic: str, n: int, partitions: int, corrupt_every: int, seed: int = 0
) -> tuple[dict[str, set[tuple[int, int]]], int]:
    """Write the records to ``topic-plain`` and ``topic``: the (partition, offset) of every
    record the broker acknowledged, by topic, and the schema id the serializer registered."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka.schema_registry._sync.mock_schema_registry_client import (
        MockSchemaRegistryClient,
    )
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf import message_factory

    topics = {f"{topic}-plain": False, topic: True}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(t, num_partitions=partitions, replication_factor=1) for t in topics]
    ).values():
        future.result(timeout=30)
    cls = message_factory.GetMessageClass(schema().descriptor)
    registry = MockSchemaRegistryClient({"url": "mock://pipeline"})
    serializer = ProtobufSerializer(cls, registry, {})
    acked: dict[str, set[tuple[int, int]]] = {t: set() for t in topics}
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acked[msg.topic()].add((msg.partition(), msg.offset()))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, payload in enumerate(corpus.generate(n, seed=seed)):
        for name, framed in topics.items():
            value = payload
            if framed:
                ctx = SerializationContext(name, MessageField.VALUE)
                value = serializer(cls.FromString(payload), ctx)
            if corrupt_every and i % corrupt_every == corrupt_every - 1:
                value = corrupt(value, i // corrupt_every, framed)
            producer.produce(
                name,
                value=value,
                key=f"k{i}".encode(),
                partition=i % partitions,
                on_delivery=delivered,
            )
        producer.poll(0)
    producer.flush(60)
    if failed:
        raise RuntimeError(f"{len(failed)} records not delivered: {failed[:3]}")
    # The schema's imports were registered first (as references): its id is not 1.
    return acked, registry.get_latest_version(f"{topic}-value").schema_id


def run(
    bootstrap: str, topic: str, out: Path, schema_id: int | None, seconds: dict | None = None
) -> tuple[pa.Table, pa.Table | None, Any]:
    """One topic through Ray: (rows, dead letters, counts), also written under ``out``.
    ``schema_id``: the values are Confluent-framed, with that schema id. ``seconds``: set
    to where the time went (the run; in its tasks: reading, transcoding, writing)."""
    import ray

    s = schema()
    tc = wa.Transcoder(s, PLAN_COLUMNS, on_error="dead_letter")
    ds = ray.data.read_kafka(topics=[topic], bootstrap_servers=bootstrap)
    # The dead letters' source is every input column but the value: these five (the
    # headers map arrives as an empty struct, which Parquet cannot hold).
    ds = ds.select_columns(["value", *KAFKA_COLUMNS])
    # Any other schema id than the one registered is a dead letter.
    confluent: dict[str, Any] = {}
    if schema_id is not None:
        confluent = {"framing": "confluent", "schemas": {schema_id: s}, "schema_id": True}
    result = war.transcode(ds, tc, carry=KAFKA_COLUMNS, batch_size=256, **confluent)
    clock = Clock()
    sink = ray_parquet_sink(str(out / "rows"))
    with clock.stage("run"):  # read, transcode and write, streamed together in Ray's tasks
        result.rows.write_datasink(sink)
    if seconds is not None:
        transcode = result.job_stats().transcode_seconds
        seconds.update(
            run=round(clock.stages["run"], 3),
            read=round(max(sink.seconds["blocks"] - transcode, 0.0), 3),
            transcode=round(transcode, 3),
            write=round(sink.seconds["write"], 3),
        )
    rows = pq.read_table(out / "rows")
    dead = (
        pa.concat_tables([ray.get(ref) for ref in result.dead_letters.to_arrow_refs()])
        if result.job_stats().records_failed
        else None
    )
    if dead is not None:
        pq.write_table(dead, out / "dead.parquet")
    return rows, dead, result.job_stats()


def check_exactly_once(
    produced: set[tuple[int, int]], rows: pa.Table, dead: pa.Table | None
) -> dict[str, int]:
    """Every produced record in the rows or the dead letters, exactly once (raises if not)."""
    in_rows = list(
        zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(), strict=True)
    )
    in_dead = []
    if dead is not None:
        in_dead = [(d["partition"], d["offset"]) for d in dead.column("source").to_pylist()]
    problems = []
    if len(set(in_rows)) != len(in_rows):
        problems.append("a record has two rows")
    if len(set(in_dead)) != len(in_dead):
        problems.append("a record is dead-lettered twice")
    if set(in_rows) & set(in_dead):
        problems.append("a record is both a row and a dead letter")
    if set(in_rows) | set(in_dead) != produced:
        problems.append(
            f"{len(produced - set(in_rows) - set(in_dead))} produced records missing, "
            f"{len((set(in_rows) | set(in_dead)) - produced)} never produced"
        )
    if problems:
        raise AssertionError("; ".join(problems))
    return {"produced": len(produced), "rows": len(in_rows), "dead_letters": len(in_dead)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", help="a broker; default: start noida-db for the run")
    parser.add_argument("--topic", default="bids")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--corrupt-every", type=int, default=50)
    parser.add_argument("--no-produce", action="store_true", help="read what is on the topics")
    parser.add_argument("--schema-id", type=int, help="with --no-produce: of TOPIC's values")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--num-cpus", type=int, default=2)
    add_progress_option(parser)
    args = parser.parse_args(argv)
    import ray

    broker = LocalKafka() if args.bootstrap is None else None
    bootstrap = args.bootstrap or broker.__enter__().bootstrap  # type: ignore[union-attr]
    try:
        produced: dict[str, set[tuple[int, int]]] = {}
        schema_id = args.schema_id
        clock = Clock()
        if not args.no_produce:
            with clock.stage("produce"):
                produced, schema_id = produce(
                    bootstrap, args.topic, args.n, args.partitions, args.corrupt_every
                )
        with clock.stage("Ray start"):
            local_ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
        show_ray_progress(args.progress)
        report: dict[str, Any] = {}
        for name, sid in ((f"{args.topic}-plain", None), (args.topic, schema_id)):
            seconds: dict[str, float] = {}
            with clock.stage(f"{name}"):
                rows, dead, stats = run(bootstrap, name, args.out / name, sid, seconds)
            report[name] = {
                "records_in": stats.records_in,
                "rows_out": stats.rows_out,
                "records_failed": stats.records_failed,
            }
            if produced:
                report[name].update(check_exactly_once(produced[name], rows, dead))
            # Where the time went: the run, and in its tasks (summed) the read, transcode
            # and write (the rest of the run is Ray's).
            report[name]["seconds"] = seconds
        report["seconds"] = {k: round(v, 3) for k, v in clock.stages.items()}
        print(json.dumps(report, indent=2))
        ray.shutdown()
    finally:
        if broker is not None:
            broker.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
