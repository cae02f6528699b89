"""The round trip on Ray: read protobuf records, transform them in Arrow, write protobuf back.

    framed input file -> wirearrow.ray.read_delimited -> transcode (whole messages)
      -> filter (bids with 2+ impressions) and project (the user dropped), in pyarrow
      -> wirearrow.ray.write_delimited(framing="tfrecord")  [rows that cannot be encoded:
         dead letters beside, as Parquet]
      -> (with --kafka) wirearrow.ray.encode(framing="confluent") -> produce to a topic

then checks every record written against the protobuf runtime's bytes of the same
messages, transformed the same way (``SerializeToString(deterministic=True)``).

    python pipelines/ray_write_pipeline.py --n 5000 --out out/ray_write
    python pipelines/ray_write_pipeline.py --n 5000 --out out/ray_write --kafka local
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "pipelines"))

import local_ray  # noqa: E402
from stage_times import Clock, add_progress_option, show_ray_progress  # noqa: E402

import corpus  # noqa: E402
import wirearrow as wa  # noqa: E402
from wirearrow.sources.confluent import confluent_prefix  # noqa: E402


def schema() -> wa.Schema:
    return wa.Schema.from_proto(
        corpus.PROTO_FILE, corpus.MESSAGE_NAME, import_paths=[corpus.SCHEMA_DIR]
    )


def keep_and_scrub(batch: pa.Table) -> pa.Table:
    """The transformation: bids with two impressions or more, without the user (PII)."""
    batch = batch.filter(pc.greater_equal(pc.list_value_length(batch["imp"]), 2))
    i = batch.schema.get_field_index("user")
    return batch.set_column(i, batch.field(i), pa.nulls(batch.num_rows, batch.field(i).type))


def expected(records: list[bytes]) -> list[bytes]:
    """The same transformation with the protobuf runtime, message by message (the oracle)."""
    from google.protobuf import message_factory

    cls = message_factory.GetMessageClass(schema().descriptor)
    out = []
    for record in records:
        msg = cls.FromString(record)
        if len(msg.imp) >= 2:
            msg.ClearField("user")
            out.append(msg.SerializeToString(deterministic=True))
    return out


def run(
    n: int, seed: int, out: Path, kafka: str | None = None, clock: Clock | None = None
) -> dict[str, int]:
    import ray

    import wirearrow.ray as war

    out.mkdir(parents=True, exist_ok=True)
    records = corpus.generate(n, seed)
    source = out / "input" / "events.varint"
    source.parent.mkdir(exist_ok=True)
    source.write_bytes(wa.frame_records(pa.array(records), "varint"))
    want = Counter(expected(records))

    clock = clock or Clock()
    with clock.stage("plan"):
        tc = wa.Transcoder(schema())  # whole messages: what encode writes back
        job = war.transcode(war.read_delimited(str(source), "varint"), tc)
        scrubbed = job.rows.map_batches(keep_and_scrub, batch_format="pyarrow")
    t0 = time.perf_counter()
    with clock.stage("run"):  # read, transcode, filter, encode, write: streamed in Ray's tasks
        stats = war.write_delimited(
            scrubbed, out / "tfrecord", tc, "tfrecord", on_error="dead_letter"
        )
    seconds = time.perf_counter() - t0
    with clock.stage("check"):
        back = war.read_delimited(str(out / "tfrecord"), "tfrecord")
        got = Counter(
            r for ref in back.to_arrow_refs() for r in ray.get(ref).column("value").to_pylist()
        )
    if got != want:
        raise SystemExit(f"check failed: {sum(got.values())} records written, {len(want)} expected")
    counts = {
        "records_in": n,
        "rows_written": stats.records_ok,
        "rows_failed": stats.records_failed,
        "files": len(stats.files),
    }
    print(f"input:  {n:,} records in {source}")
    print(
        f"files:  {stats.records_ok:,} TFRecords in {len(stats.files)} file(s) under "
        f"{out / 'tfrecord'} ({stats.bytes_out / 1e6:,.2f} MB, {seconds:.2f} s for the job)"
    )
    print(f"failed: {stats.records_failed:,} rows ({stats.dead_letters:,} dead letters)")
    print("check:  every record equals the runtime's bytes of the same transformed message")
    if kafka:
        with clock.stage("kafka"):
            counts["produced"] = produce(kafka, scrubbed, tc, want)
    print(f"time:   {clock.line()}")
    print(
        f"tasks:  transcode {job.job_stats().transcode_seconds:.2f} s; the rest of the run is "
        "reading, the filter, encoding and writing the TFRecords, and Ray's own"
    )
    return counts


def produce(bootstrap: str, rows, tc: wa.Transcoder, want: Counter) -> int:
    """Encode Confluent-framed values in Ray, produce them, consume them back and compare."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    import wirearrow.ray as war

    local = None
    if bootstrap == "local":
        from local_kafka import LocalKafka

        local = LocalKafka()
        local.__enter__()
        bootstrap = local.bootstrap
    try:
        head = confluent_prefix(1)
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        sent = 0
        encoded = war.encode(rows, tc, framing="confluent", schema_id=1).rows
        for batch in encoded.iter_batches(batch_format="pyarrow"):
            for value in batch["record"].to_pylist():
                producer.produce("bids-scrubbed", value=value)
                sent += 1
            producer.poll(0)
        producer.flush(60)
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ray-write-check"})
        consumer.assign([TopicPartition("bids-scrubbed", 0, 0)])
        got: Counter = Counter()
        while sum(got.values()) < sent:
            msg = consumer.poll(10)
            if msg is None:
                raise SystemExit(f"kafka: {sum(got.values())} of {sent} consumed")
            got[msg.value()] += 1
        consumer.close()
        if got != Counter({head + r: k for r, k in want.items()}):
            raise SystemExit("kafka check failed: the values differ from the runtime's bytes")
        print(
            f"kafka:  {sent:,} Confluent-framed values produced to bids-scrubbed and "
            "consumed back, equal to the runtime's bytes"
        )
        return sent
    finally:
        if local is not None:
            local.__exit__(None, None, None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=5000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=Path("out/ray_write"))
    p.add_argument("--kafka", default=None, help="bootstrap servers, or 'local' (noida-db)")
    add_progress_option(p)
    args = p.parse_args(argv)
    import ray

    clock = Clock()
    if not ray.is_initialized():
        with clock.stage("Ray start"):
            local_ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    show_ray_progress(args.progress)
    run(args.n, args.seed, args.out, args.kafka, clock)
    return 0


if __name__ == "__main__":
    sys.exit(main())
