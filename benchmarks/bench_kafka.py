"""The Ray Kafka job against what a user writes today, same broker, same run.

    python benchmarks/bench_kafka.py [--n 20000] [--rounds 3] [--bootstrap host:port]

Produces ``--n`` BidRequestEvent records to a topic (Confluent-framed, as Confluent's
serializers write them) on a local noida-db broker (or ``--bootstrap``), then times, in
alternating rounds, two Ray jobs that read the topic with ``ray.data.read_kafka`` and
count the rows of the same two columns:

* ``wirearrow``: ``wirearrow.ray.transcode(..., framing="confluent")``;
* ``DIY``: ``map_batches`` stripping the prefix, parsing each value with the protobuf
  runtime and building the columns with pyarrow.

Both include reading from the broker and Ray's scheduling: the ratio is the job's, not the
decoder's. It reports, it does not test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "pipelines"))

from bench_flat import import_wirearrow  # noqa: E402

COLUMNS = ["id", "device.geo.country"]


def diy_batch(schema_bytes: bytes, message: str):
    """The map_batches function a user writes: protobuf parse per record, then pyarrow."""

    def run(batch: pa.Table) -> pa.Table:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        cls = _CLASSES.get(message)
        if cls is None:
            pool = descriptor_pool.DescriptorPool()
            for f in descriptor_pb2.FileDescriptorSet.FromString(schema_bytes).file:
                pool.Add(f)
            cls = _CLASSES[message] = message_factory.GetMessageClass(
                pool.FindMessageTypeByName(message)
            )
        ids, countries = [], []
        for value in batch.column("value").to_pylist():
            m = cls.FromString(value[6:])  # magic, schema id, index [0]
            ids.append(m.id)
            countries.append(m.device.geo.country if m.HasField("device") else None)
        return pa.table({"id": ids, "device_geo_country": countries})

    return run


_CLASSES: dict[str, type] = {}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--bootstrap")
    args = parser.parse_args()
    import kafka_pipeline
    import ray
    from local_kafka import LocalKafka

    wa = import_wirearrow()
    import wirearrow.ray as war

    broker = LocalKafka() if args.bootstrap is None else None
    bootstrap = args.bootstrap or broker.__enter__().bootstrap  # type: ignore[union-attr]
    try:
        _, schema_id = kafka_pipeline.produce(bootstrap, "bench", args.n, args.partitions, 0)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        ray.data.DataContext.get_current().enable_progress_bars = False
        schema = kafka_pipeline.schema()
        tc = wa.Transcoder(schema, COLUMNS)

        def wirearrow_job() -> int:
            ds = ray.data.read_kafka(topics=["bench"], bootstrap_servers=bootstrap)
            out = war.transcode(ds, tc, framing="confluent", schemas={schema_id: schema})
            return out.rows.count()

        def diy_job() -> int:
            ds = ray.data.read_kafka(topics=["bench"], bootstrap_servers=bootstrap)
            fn = diy_batch(schema.file_descriptor_set, schema.message_name)
            return ds.map_batches(fn, batch_format="pyarrow", batch_size=8192).count()

        jobs = {"wirearrow": wirearrow_job, "DIY protobuf + pyarrow": diy_job}
        times: dict[str, list[float]] = {name: [] for name in jobs}
        for _ in range(args.rounds):
            for name, job in jobs.items():
                started = time.perf_counter()
                rows = job()
                times[name].append(time.perf_counter() - started)
                assert rows == args.n, (name, rows)
        ray.shutdown()
    finally:
        if broker is not None:
            broker.__exit__(None, None, None)
    base = min(times["DIY protobuf + pyarrow"])
    print(f"{args.n:,} Confluent-framed records, {args.partitions} partitions, "
          f"{args.rounds} rounds (read_kafka included)")
    for name, t in times.items():
        print(f"{name:24} best {min(t):7.2f} s  median {statistics.median(t):7.2f} s  "
              f"{args.n / min(t):9,.0f} rec/s  x DIY {base / min(t):5.2f}")


if __name__ == "__main__":
    main()
