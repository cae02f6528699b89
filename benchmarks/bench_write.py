"""The write half: Arrow rows -> protobuf records -> files (and Kafka, and through Ray),
wirearrow against what users write today, in one run on one corpus.

What users write today, per row: ``batch.to_pylist()`` (a dict per row), the message
built from the dict (``cls(**row)``: None values dropped, map columns turned back into
dicts), ``SerializeToString()``, then the framing in Python (a varint length before each
record, or TFRecord's two masked CRC32Cs with ``google_crc32c``, as Beam's tfrecordio
does). wirearrow: ``Transcoder.encode`` (C, byte-identical to the runtime's
``SerializeToString(deterministic=True)``) then ``wirearrow.frame_records`` (C). Both
write the same file; before timing, the two files are checked to hold the same messages.

Rows (msg/s; the ratio column divides by the Python path of the same framing):

* in process: rows -> varint file, rows -> TFRecord file;
* ``--kafka BOOTSTRAP`` (or ``--kafka local``: a noida-db broker started for the run, as
  the tests do): rows -> Confluent-framed Kafka values -> ``Producer.produce`` + flush;
* ``--ray``: a 2-CPU local Ray, rows in a Dataset -> ``wirearrow.ray.write_delimited``
  against ``map_batches`` of the Python path + writing the framed bytes per block.

    python benchmarks/bench_write.py [--n 20000] [--quick] [--kafka local] [--ray]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus
from bench_flat import import_wirearrow, machine_info, measure


def _masked_crc(data: bytes) -> int:
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def python_frame(records: list[bytes], framing: str) -> bytes:
    """What a user's loop writes (Beam's _TFRecordUtil.write_record for TFRecord)."""
    if framing == "varint":
        return b"".join(corpus.frame(records, "varint"))
    out = []
    for r in records:
        length = struct.pack("<Q", len(r))
        out += [length, struct.pack("<I", _masked_crc(length)), r, struct.pack("<I", _masked_crc(r))]
    return b"".join(out)


def map_fields(cls: type) -> dict[str, Any]:
    """{field name: sub-tree} of the map fields and messages holding them, for _clean."""
    tree: dict[str, Any] = {}
    for fd in cls.DESCRIPTOR.fields:
        if fd.message_type is None:
            continue
        if fd.message_type.GetOptions().map_entry:
            tree[fd.name] = "map"
        elif fd.message_type.full_name.startswith("google.protobuf."):
            continue
        else:
            sub = map_fields(fd.message_type._concrete_class)
            if sub:
                tree[fd.name] = sub
    return tree


def _clean(row: dict[str, Any], maps: dict[str, Any]) -> dict[str, Any]:
    """A row dict as the message constructor takes it: no Nones, maps as dicts."""
    out = {}
    for k, v in row.items():
        if v is None:
            continue
        kind = maps.get(k)
        if kind == "map":
            v = dict(v)
        elif kind is not None:
            v = [_clean(x, kind) for x in v] if isinstance(v, list) else _clean(v, kind)
        out[k] = v
    return out


def python_encode(table: pa.Table, cls: type, maps: dict[str, Any]) -> list[bytes]:
    return [cls(**_clean(row, maps)).SerializeToString() for row in table.to_pylist()]


def same_messages(a: list[bytes], b: list[bytes], cls: type) -> bool:
    return len(a) == len(b) and all(
        cls.FromString(x) == cls.FromString(y) for x, y in zip(a, b, strict=True)
    )


def timed(label: str, run: Callable[[], Any], n: int, args: argparse.Namespace) -> float:
    _, times, _ = measure(run, min_time=args.min_time, repeat=args.repeat, max_time=args.max_time)
    rate = n / statistics.median(times)
    print(f"  {label:<62} {rate:>12,.0f} msg/s")
    return rate


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=None, help="rows (default 20,000; 2,000 --quick)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--repeat", type=int, default=None)
    p.add_argument("--min-time", type=float, default=None)
    p.add_argument("--max-time", type=float, default=20.0)
    p.add_argument("--kafka", default=None, help="bootstrap servers, or 'local' (noida-db)")
    p.add_argument("--ray", action="store_true", help="also through a local 2-CPU Ray")
    args = p.parse_args(argv)
    args.n = args.n or (2_000 if args.quick else 20_000)
    args.repeat = args.repeat or (3 if args.quick else 5)
    args.min_time = args.min_time or (0.05 if args.quick else 0.2)

    wa = import_wirearrow()
    schema = wa.Schema.from_proto(
        str(corpus.PROTO_FILE), corpus.MESSAGE_NAME, import_paths=[str(corpus.SCHEMA_DIR)]
    )
    _, cls = corpus.load_schema()
    tc = wa.Transcoder(schema)
    records = corpus.generate(args.n, args.seed)
    table = pa.Table.from_batches([tc.transcode(records)])
    maps = map_fields(cls)
    print(f"{args.n:,} rows, seed {args.seed}; {machine_info()}")

    ratios: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.bin"
        print("in process: Arrow rows -> framed file")
        for framing in ("varint", "tfrecord"):

            def ours(framing: str = framing) -> None:
                out.write_bytes(wa.frame_records(tc.encode(table), framing))

            def theirs(framing: str = framing) -> None:
                out.write_bytes(python_frame(python_encode(table, cls, maps), framing))

            ours()
            mine = wa.read_delimited(out, framing).to_pylist()
            theirs()
            assert same_messages(mine, wa.read_delimited(out, framing).to_pylist(), cls)
            a = timed(f"wirearrow encode + frame_records ({framing})", ours, args.n, args)
            b = timed(f"to_pylist -> cls(**row) -> SerializeToString -> frame ({framing})",
                      theirs, args.n, args)
            ratios.append(f"file {framing}: wirearrow / python = {a / b:.2f}x")
        if args.kafka:
            ratios += bench_kafka(args, wa, tc, table, cls, maps)
        if args.ray:
            ratios += bench_ray(args, wa, tc, table, cls, maps, Path(tmp))
    print("\n".join(ratios))
    return 0


def bench_kafka(args, wa, tc, table, cls, maps) -> list[str]:
    from confluent_kafka import Producer

    local = None
    bootstrap = args.kafka
    if bootstrap == "local":
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "pipelines"))
        from local_kafka import LocalKafka

        local = LocalKafka()
        local.__enter__()
        bootstrap = local.bootstrap
    from wirearrow.sources.confluent import confluent_prefix

    head = confluent_prefix(1)
    try:
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

        def send(values: list[bytes]) -> None:
            for v in values:
                producer.produce("bench-write", value=v)
                producer.poll(0)
            producer.flush(60)

        def ours() -> None:
            send(wa.frame_records(tc.encode(table), "confluent", schema_id=1).to_pylist())

        def theirs() -> None:
            send([head + r for r in python_encode(table, cls, maps)])

        print("Kafka: Arrow rows -> Confluent-framed values -> produce + flush")
        a = timed("wirearrow encode + frame_records(confluent) + produce", ours, args.n, args)
        b = timed("python encode + prefix + produce", theirs, args.n, args)
        return [f"kafka: wirearrow / python = {a / b:.2f}x"]
    finally:
        if local is not None:
            local.__exit__(None, None, None)


def bench_ray(args, wa, tc, table, cls, maps, tmp: Path) -> list[str]:
    import ray

    import wirearrow.ray as war

    # The workers import this module by name (its functions travel by reference).
    here = str(Path(__file__).resolve().parent)
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": path}})
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        ds = ray.data.from_arrow(table).repartition(4).materialize()
        runs = iter(range(10**6))

        def ours() -> None:
            war.write_delimited(ds, tmp / f"ours{next(runs)}", tc, "varint")

        def theirs() -> None:
            target = tmp / f"theirs{next(runs)}"
            target.mkdir()

            def write(batch: pa.Table) -> pa.Table:
                # message classes do not pickle: each worker compiles the schema, once
                cls, maps = _worker_schema()
                data = python_frame(python_encode(batch, cls, maps), "varint")
                name = f"{time.monotonic_ns()}.bin"
                (target / name).write_bytes(data)
                return pa.table({"bytes": [len(data)]})

            ds.map_batches(write, batch_format="pyarrow", batch_size=None).materialize()

        print("Ray (2 CPUs): Dataset of rows -> framed files")
        one = 1 if args.quick else 3
        a = statistics.median(_wall(ours) for _ in range(one))
        b = statistics.median(_wall(theirs) for _ in range(one))
        print(f"  {'wirearrow.ray.write_delimited (varint)':<62} {args.n / a:>12,.0f} msg/s")
        print(f"  {'map_batches(python encode + frame) -> files':<62} {args.n / b:>12,.0f} msg/s")
        return [f"ray files: wirearrow / python = {b / a:.2f}x (job wall time, incl. Ray overhead)"]
    finally:
        ray.shutdown()


@functools.cache
def _worker_schema() -> tuple[type, dict[str, Any]]:
    _, cls = corpus.load_schema()
    return cls, map_fields(cls)


def _wall(run: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


if __name__ == "__main__":
    import bench_write  # run as the module, so that Ray workers find its functions

    sys.exit(bench_write.main())
