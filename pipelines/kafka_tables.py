"""Kafka -> wirearrow -> an Iceberg (or Delta) table, exactly once, two schema versions in one
table.

    python pipelines/kafka_tables.py --out out/kafka-tables                  # its own broker
    python pipelines/kafka_tables.py --out out/kafka-tables --format delta
    python pipelines/kafka_tables.py --bootstrap host:9092 --topic bids --no-produce --out out/t

Produces ``--n`` BidRequestEvent records (benchmarks/corpus.py) to ``TOPIC`` (``--partitions``
partitions) in the Confluent wire format: the first half by a producer of version 1 (schema
id 1: examples/schema/bidrequest.proto), the rest by one that upgraded to version 2 (schema
id 2: examples/schema_v2/bidrequest.proto: ``at`` widened to int64, ``tmax`` renamed
``timeout_ms``, ``source_app`` added); every ``--corrupt-every``-th value is cut short.

Then consumes the topic into ``events.bids`` (a SQLite catalog under ``OUT/warehouse``;
``--format delta``: ``OUT/delta/bids``): whole messages, one row per record, the superset of
both versions (v1's names, ``at`` as int64, ``source_app`` null in v1's rows), with
``topic``, ``partition``, ``offset``, ``kafka_timestamp`` and ``key`` on every row; bad records go
to ``events.bids_dead_letters`` (their Kafka columns in ``carry``). Every ``--commit-every``
batches of ``--batch`` records, each table commits once, recording the next offset of every
partition with the commit (the Iceberg snapshot summary / Delta app transactions). A run
starts from the offsets the tables' last commits recorded (not from the consumer group's
offsets, not from 0) and reads to the end the topic had when it started: a run killed
anywhere and started again with the same arguments writes no record twice and skips none.

It prints the offsets it resumed from, each commit, the records in, rows and dead letters,
and (when it produced the records) checks every one is in the tables once. Without
``--bootstrap`` a noida-db broker is started for the run (pipelines/local_kafka.py), so the
topic, and the run's resumption, live only as long as that run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import wirearrow as wa
from wirearrow import tables
from wirearrow.sources.confluent import confluent_prefix, message_index

ROOT = Path(__file__).resolve().parent.parent
SCHEMA_DIR = ROOT / "examples" / "schema"
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from local_kafka import LocalKafka  # noqa: E402

import corpus  # noqa: E402

KAFKA_COLUMNS = ["topic", "partition", "offset", "kafka_timestamp", "key"]  # the message has its own timestamp
V1, V2 = 1, 2  # the schema ids of the two producers


def schemas() -> dict[int, wa.Schema]:
    """Schema id -> version of BidRequestEvent."""
    v1 = wa.Schema.from_proto(SCHEMA_DIR / "bidrequest.proto", "BidRequestEvent", import_paths=[SCHEMA_DIR])
    v2 = wa.Schema.from_proto(ROOT / "examples" / "schema_v2" / "bidrequest.proto", "BidRequestEvent",
                              import_paths=[SCHEMA_DIR])  # fmt: skip
    return {V1: v1, V2: v2}


def transcoder() -> wa.Transcoder:
    """Whole messages of either version: v1 is the reference (its names), v2 a version named
    up front, so the table has the superset's columns from its first commit."""
    versions = schemas()
    return wa.Transcoder(versions[V1], versions=[versions[V2]], on_error="dead_letter")


def output(out: Path, fmt: str, commit_every: int = 1) -> wa.Output:
    """The tables of a run under ``out``."""
    if fmt == "iceberg":
        return wa.Output(format="iceberg", table="events.bids", warehouse=str(out / "warehouse"),
                         partition=("day(timestamp)",), commit_every=commit_every)  # fmt: skip
    return wa.Output(format="delta", table=str(out / "delta" / "bids"), commit_every=commit_every)


def values(n: int, corrupt_every: int, seed: int = 32) -> Iterator[bytes]:
    """The Kafka values: record ``i`` of version 1 for the first half, version 2 (written by
    v2's own message class, ``source_app`` set) for the rest; every ``corrupt_every``-th cut
    short (a field runs past the end)."""
    from google.protobuf import message_factory

    versions = schemas()
    prefix = {sid: confluent_prefix(sid, message_index(s)) for sid, s in versions.items()}
    v2 = message_factory.GetMessageClass(versions[V2].descriptor)
    for i, payload in enumerate(corpus.generate(n, seed=seed)):
        if i < n // 2:
            value = prefix[V1] + payload
        else:
            message = v2.FromString(payload)
            message.source_app = f"app-{i % 7}"
            value = prefix[V2] + message.SerializeToString()
        if corrupt_every and i % corrupt_every == corrupt_every - 1:
            value = value[: len(value) // 2]
        yield value


def produce(bootstrap: str, topic: str, n: int, partitions: int, corrupt_every: int) -> set[tuple[int, int]]:
    """Write the records (record ``i`` to partition ``i % partitions``); the (partition,
    offset) of every record the broker acknowledged."""
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        try:
            future.result(timeout=30)
        except KafkaException as err:  # producing more to a topic made before is fine
            if err.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
    acked: set[tuple[int, int]] = set()
    failed: list[str] = []

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            failed.append(str(err))
        else:
            acked.add((msg.partition(), msg.offset()))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, value in enumerate(values(n, corrupt_every)):
        producer.produce(topic, value=value, key=f"k{i}".encode(), partition=i % partitions,
                         on_delivery=delivered)  # fmt: skip
        producer.poll(0)
    producer.flush(60)
    if failed:
        raise RuntimeError(f"{len(failed)} records not delivered: {failed[:3]}")
    return acked


def batches(
    bootstrap: str, topic: str, start: dict[int, int], size: int, idle_seconds: float = 30.0
) -> Iterator[pa.Table]:
    """The topic from ``start`` (partition -> next offset; a partition not in it from its
    first offset) to the end each partition had when this began, as tables of the Kafka
    columns and ``value``, up to ``size`` records each. The consumer's group offsets are
    neither read nor committed: the tables' commits are the only record of progress."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"wirearrow-{topic}",  # required by the client; never committed to
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
    })  # fmt: skip
    try:
        meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise RuntimeError(f"topic {topic!r} is not on {bootstrap}")
        partitions = sorted(meta.partitions)
        end = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
        # where each partition's reading is: resumed, or from its first record
        at = {p: start.get(p, 0) for p in partitions}
        open_parts = {p for p in partitions if at[p] < end[p]}
        consumer.assign([TopicPartition(topic, p, start.get(p, OFFSET_BEGINNING)) for p in sorted(open_parts)])
        idle_since = time.monotonic()
        while open_parts:
            messages = consumer.consume(num_messages=size, timeout=1.0)
            records = []
            for m in messages:
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise RuntimeError(f"Kafka: {m.error()}")
                p, offset = m.partition(), m.offset()
                if p not in open_parts or offset >= end[p]:
                    continue  # past the end this run reads to (the next run's)
                records.append(m)
                at[p] = offset + 1
                if at[p] >= end[p]:
                    open_parts.discard(p)
            if records:
                idle_since = time.monotonic()
                yield _table(records)
            elif time.monotonic() - idle_since > idle_seconds:
                raise RuntimeError(f"no records for {idle_seconds:.0f} s before the topic's end: {at} of {end}")
    finally:
        consumer.close()


def _table(messages: list[Any]) -> pa.Table:
    """The Kafka columns and the value of a batch of consumed messages."""
    stamps = [m.timestamp()[1] for m in messages]
    return pa.table({
        "value": pa.array([m.value() for m in messages], pa.binary()),
        "topic": pa.array([m.topic() for m in messages], pa.utf8()),
        "partition": pa.array([m.partition() for m in messages], pa.int32()),
        "offset": pa.array([m.offset() for m in messages], pa.int64()),
        # Iceberg keeps microseconds: the broker's milliseconds widened
        "kafka_timestamp": pa.array(np.asarray(stamps, dtype=np.int64) * 1000, pa.timestamp("us", tz="UTC")),
        "key": pa.array([m.key() for m in messages], pa.binary()),
    })  # fmt: skip


def land(
    bootstrap: str, topic: str, out: wa.Output, batch_size: int = 500, say: Callable[[str], None] = print
) -> dict[str, Any]:
    """One run: from the offsets of the tables' last commits to the end of the topic, into
    the tables. Returns what it did (records in, rows, dead letters, commits, resumed from)."""
    tc = transcoder()
    versions = schemas()
    done = {"records_in": 0, "rows": 0, "dead_letters": 0, "commits": 0, "skipped": 0}
    with tables.TableWriter.open(out) as writer:
        resumed = writer.resume().kafka_offsets().get(topic, {})
        done["resumed_from"] = {str(p): o for p, o in sorted(resumed.items())}
        say(f"resume: {json.dumps(done['resumed_from']) if resumed else 'from the first offsets'}")
        handed = 0  # batches handed over: the writer commits every commit_every of them
        for batch in batches(bootstrap, topic, resumed, batch_size):
            decoded = tc.decode(batch, column="value", framing="confluent", schemas=versions,
                                record_index=True, carry=KAFKA_COLUMNS)  # fmt: skip
            keys = [tables.kafka_key(topic, p) for p in batch.column("partition").to_pylist()]
            handed += 1
            if handed % writer.commit_every == 0:
                say(f"commit: batch {handed}")
            commits = writer.write(decoded, keys, batch.column("offset"))
            counts = decoded.counts
            done["records_in"] += counts.records_in
            done["rows"] += counts.rows_out
            done["dead_letters"] += counts.dead_letters
            for commit in commits:
                done["commits"] += 1
                say(f"committed: {commit.table} -> {json.dumps(commit.positions.kafka_offsets().get(topic, {}))}")
        if handed % writer.commit_every:
            say("commit: the rest")
        for commit in writer.close():
            done["commits"] += 1
            say(f"committed: {commit.table} -> {json.dumps(commit.positions.kafka_offsets().get(topic, {}))}")
        done["skipped"] = writer.skipped
    return done


def read(out: wa.Output) -> tuple[pa.Table, pa.Table]:
    """The rows and the dead letters the tables hold now (by the format's own library)."""
    rows, dead = tables.open_sinks(out)
    assert dead is not None
    return rows.scan(), dead.scan()


def check(produced: set[tuple[int, int]], rows: pa.Table, dead: pa.Table) -> dict[str, int]:
    """Every produced record in the rows or the dead letters, once (raises if not)."""
    in_rows = list(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(), strict=True))
    in_dead = [(c["partition"], c["offset"]) for c in dead.column("carry").to_pylist()] if dead.num_rows else []
    problems = []
    if len(set(in_rows)) != len(in_rows):
        problems.append(f"{len(in_rows) - len(set(in_rows))} records have two rows")
    if len(set(in_dead)) != len(in_dead):
        problems.append("a record is dead-lettered twice")
    if set(in_rows) & set(in_dead):
        problems.append("a record is both a row and a dead letter")
    missing = produced - set(in_rows) - set(in_dead)
    extra = (set(in_rows) | set(in_dead)) - produced
    if missing or extra:
        problems.append(f"{len(missing)} produced records missing, {len(extra)} never produced")
    if problems:
        raise AssertionError("; ".join(problems))
    return {"produced": len(produced), "rows": len(in_rows), "dead_letters": len(in_dead)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--bootstrap", help="a broker; default: start noida-db for the run")
    parser.add_argument("--topic", default="bids")
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--corrupt-every", type=int, default=50)
    parser.add_argument("--no-produce", action="store_true", help="land what is on the topic")
    parser.add_argument("--format", choices=("iceberg", "delta"), default="iceberg")
    parser.add_argument("--batch", type=int, default=500, help="records per batch")
    parser.add_argument("--commit-every", type=int, default=1, help="batches per commit")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    def say(line: str) -> None:
        print(line, flush=True)

    out = output(args.out, args.format, args.commit_every)
    broker = LocalKafka() if args.bootstrap is None else None
    bootstrap = args.bootstrap or broker.__enter__().bootstrap  # type: ignore[union-attr]
    try:
        produced: set[tuple[int, int]] = set()
        if not args.no_produce:
            produced = produce(bootstrap, args.topic, args.n, args.partitions, args.corrupt_every)
            say(f"produced: {len(produced):,} records to {args.topic} (schema ids {V1} and {V2})")
        t0 = time.perf_counter()
        done = land(bootstrap, args.topic, out, args.batch, say)
        where = out.table if args.format == "delta" else f"{out.table} (warehouse {out.warehouse})"
        say(f"landed: {done['records_in']:,} records in -> {done['rows']:,} rows and "
            f"{done['dead_letters']:,} dead letters, {done['commits']} commit(s) into {args.format} "
            f"{where} in {time.perf_counter() - t0:.1f} s")  # fmt: skip
        rows, dead = read(out)
        if produced:
            say(f"check: every produced record once: {json.dumps(check(produced, rows, dead))}")
        v2_rows = rows.num_rows - rows.column("source_app").null_count
        say(f"table: {rows.num_rows:,} rows ({v2_rows:,} of version 2: source_app set), "
            f"{dead.num_rows:,} dead letters; at is {rows.schema.field('at').type}")  # fmt: skip
    finally:
        if broker is not None:
            broker.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
