"""Kafka -> Ray Data -> wirearrow -> Parquet, plain and Confluent-framed protobuf values.

    python pipelines/kafka_pipeline.py --out out/kafka                   # its own local broker
    python pipelines/kafka_pipeline.py --bootstrap host:9092 --out out/kafka --no-produce

Produces ``--n`` BidRequestEvent records (benchmarks/corpus.py) to two topics of
``--partitions`` partitions: ``TOPIC-plain`` (bare protobuf values) and ``TOPIC`` (the
Confluent Schema Registry wire format, written by confluent-kafka's own
``ProtobufSerializer`` against its in-process mock registry), every ``--corrupt-every``-th
value corrupted. Then for each topic ``ray.data.read_kafka`` -> ``wirearrow.ray.transcode``
-> Parquet, with ``topic``, ``partition``, ``offset``, ``timestamp`` and ``key`` on every
row and in every dead letter. Finally it checks that every produced record is in the rows
or the dead letters, exactly once, and prints the counts (the steps on stderr). Without
``--bootstrap`` a noida-db broker is started on a free loopback port for the run
(pipelines/local_kafka.py).

Output, per topic, committed by rename: a run reads from the offsets the last committed run
got to up to the topic's end when it starts, writes its rows, dead letters and those
offsets under ``OUT/<topic>/.partial/NNNNNN/`` and, when all are written, renames that to
``OUT/<topic>/runs/NNNNNN/`` (``rows/*.parquet``, ``dead_letters.parquet``,
``_kafka_offsets.json``). A run killed anywhere leaves nothing where readers look; started
again with the same arguments it writes no record twice and skips none. Read only complete
output with ``OUT/<topic>/runs/*/rows/*.parquet`` (docs/tables.md, "Files"). One job per
output directory at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
OFFSETS_FILE = "_kafka_offsets.json"  # in each committed run: the offsets it read


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


def topic_ends(bootstrap: str, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """The first and the next offset of every partition of ``topic`` now (its low and high
    watermarks)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "wirearrow-watermarks",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
        if meta is None or meta.error is not None or not meta.partitions:
            raise RuntimeError(f"topic {topic!r} is not on {bootstrap}")
        marks = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
                 for p in sorted(meta.partitions)}  # fmt: skip
    finally:
        consumer.close()
    return {p: low for p, (low, _) in marks.items()}, {p: high for p, (_, high) in marks.items()}


def committed_runs(out: Path) -> list[Path]:
    """The committed runs of a topic's output ``out``, oldest first: ``out/runs/NNNNNN/``,
    each moved into place whole (rows, dead letters, offsets) when its run finished."""
    runs = out / "runs"
    return sorted(p for p in runs.iterdir() if p.name.isdigit()) if runs.is_dir() else []


def committed_offsets(out: Path) -> dict[int, int]:
    """Partition -> the next offset the committed runs of ``out`` have not read (from the
    newest run's ``_kafka_offsets.json``; empty before the first)."""
    runs = committed_runs(out)
    if not runs:
        return {}
    offsets = json.loads((runs[-1] / OFFSETS_FILE).read_text())
    return {int(p): int(o) for p, o in offsets["next"].items()}


def read_committed(out: Path) -> tuple[pa.Table | None, pa.Table | None]:
    """The rows and the dead letters of every committed run of ``out`` (None: none), what
    a reader globbing ``out/runs/*/rows/*.parquet`` and ``out/runs/*/dead_letters.parquet``
    gets: never a run that did not finish."""
    runs = committed_runs(out)
    row_files = [f for r in runs for f in sorted((r / "rows").glob("*.parquet"))]
    dead_files = [r / "dead_letters.parquet" for r in runs if (r / "dead_letters.parquet").exists()]
    rows = pa.concat_tables([pq.read_table(f) for f in row_files], promote_options="permissive") if row_files else None
    dead = pa.concat_tables([pq.read_table(f) for f in dead_files], promote_options="permissive") if dead_files else None
    return rows, dead


def run(
    bootstrap: str, topic: str, out: Path, schema_id: int | None, seconds: dict | None = None,
    say: Any = None,
) -> tuple[pa.Table | None, pa.Table | None, Any]:  # fmt: skip
    """One run of one topic through Ray, from the offsets the committed runs under ``out``
    got to, to the topic's end now: (rows, dead letters) of every committed run, and this
    run's counts (None when there was nothing new). ``schema_id``: the values are
    Confluent-framed, with that schema id. ``seconds``: set to where the time went (the
    run; in its tasks: reading, transcoding, writing). ``say``: told the offsets it
    resumed from and each step.

    The run writes into ``out/.partial/NNNNNN/`` (its rows, its dead letters and the offsets
    it read, ``_kafka_offsets.json``) and, once all are written, renames that directory to
    ``out/runs/NNNNNN/``: one rename, so a run killed anywhere leaves either all of its
    output or none where readers look, and the next run starts at the offsets of the last
    run that finished."""
    import ray

    say = say or (lambda line: None)
    first, end = topic_ends(bootstrap, topic)
    resumed = committed_offsets(out)
    start = {p: max(resumed.get(p, first[p]), first[p]) for p in end}
    say(f"{topic}: resume: {json.dumps(resumed) if resumed else 'from the first offsets'}")
    # What a killed run left is not output: it is written again from the same offsets.
    shutil.rmtree(out / ".partial", ignore_errors=True)
    if all(start[p] >= end[p] for p in end):
        say(f"{topic}: nothing new")
        rows, dead = read_committed(out)
        return rows, dead, None
    runs = committed_runs(out)
    number = f"{int(runs[-1].name) + 1 if runs else 1:06d}"
    partial = out / ".partial" / number
    partial.mkdir(parents=True)

    s = schema()
    tc = wa.Transcoder(s, PLAN_COLUMNS, on_error="dead_letter")
    ds = ray.data.read_kafka(
        topics=[topic], bootstrap_servers=bootstrap,
        start_offset={topic: start}, end_offset={topic: end},
    )  # fmt: skip
    # The dead letters' source is every input column but the value: these five (the
    # headers map arrives as an empty struct, which Parquet cannot hold).
    ds = ds.select_columns(["value", *KAFKA_COLUMNS])
    # Any other schema id than the one registered is a dead letter.
    confluent: dict[str, Any] = {}
    if schema_id is not None:
        confluent = {"framing": "confluent", "schemas": {schema_id: s}, "schema_id": True}
    result = war.transcode(ds, tc, carry=KAFKA_COLUMNS, batch_size=256, **confluent)
    clock = Clock()
    sink = ray_parquet_sink(str(partial / "rows"))
    say(f"{topic}: run {number}: writing offsets {json.dumps(start)} to {json.dumps(end)}")
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
    if result.job_stats().records_failed:
        dead = pa.concat_tables([ray.get(ref) for ref in result.dead_letters.to_arrow_refs()])
        pq.write_table(dead, partial / "dead_letters.parquet")
    offsets = {"topic": topic, "start": start, "next": end}
    (partial / OFFSETS_FILE).write_text(json.dumps(offsets, indent=1))
    say(f"{topic}: run {number}: commit")
    (out / "runs").mkdir(exist_ok=True)
    os.rename(partial, out / "runs" / number)  # the commit
    partial.parent.rmdir()
    say(f"{topic}: run {number}: committed, next offsets {json.dumps(end)}")
    rows, dead = read_committed(out)
    return rows, dead, result.job_stats()


def check_exactly_once(
    produced: set[tuple[int, int]], rows: pa.Table | None, dead: pa.Table | None
) -> dict[str, int]:
    """Every produced record in the rows or the dead letters, exactly once (raises if not)."""
    in_rows = []
    if rows is not None:
        in_rows = list(zip(rows.column("partition").to_pylist(), rows.column("offset").to_pylist(),
                           strict=True))
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

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

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
                rows, dead, stats = run(bootstrap, name, args.out / name, sid, seconds, say)
            report[name] = {"records_in": 0, "rows_out": 0, "records_failed": 0}
            if stats is not None:  # this run's
                report[name] = {"records_in": stats.records_in, "rows_out": stats.rows_out,
                                "records_failed": stats.records_failed}
            # what the committed output holds now (this run's and earlier runs')
            report[name]["committed"] = {"runs": len(committed_runs(args.out / name)),
                                         "rows": rows.num_rows if rows is not None else 0,
                                         "dead_letters": dead.num_rows if dead is not None else 0}
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
