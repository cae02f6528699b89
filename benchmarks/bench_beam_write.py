"""The Beam write half: Arrow rows -> protobuf records -> TFRecord files, against what users
write today.

Every row is a whole Beam pipeline on the local FnApiRunner (in-process), over the same
Arrow batches: ``BidRequestEvent`` records (``corpus.py``, 100,000 by default) read whole
by ``Transcoder.transcode`` and cut into batches of 8,192 rows, given to ``beam.Create``:

* ``wirearrow``: ``FromArrow(schema)`` -> ``WriteToDelimited(framing="tfrecord")``;
* ``wirearrow rows``: the same batches as Beam rows (``ToRows``' type, made outside the
  timing) -> ``FromRows(schema)`` -> ``WriteToDelimited``;
* ``DIY protobuf``: rows to dicts (``to_pylist``) -> message objects built field by field
  (maps, Timestamps, nested messages) -> ``SerializeToString(deterministic=True)`` ->
  ``beam.io.WriteToTFRecord``;
* ``floor``: the batches to ``beam.Map(len)``: what the runner costs to move them.

Every pipeline's files are read back and compared with the runtime's bytes of the input
records (the same multiset). Runs are interleaved; each row reports the median of
``--repeat`` runs, startup included, and the ratio to wirearrow's.

    python benchmarks/bench_beam_write.py --quick      # 20,000 records, 1 run per row
    python benchmarks/bench_beam_write.py              # 100,000 records, 3 runs per row
"""

import argparse
import datetime
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import apache_beam as beam
import pyarrow as pa
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from google.protobuf import message_factory

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import corpus  # noqa: E402
import wirearrow as wa  # noqa: E402
import wirearrow.beam as wab  # noqa: E402

BATCH = 8192
SCHEMA_DIR = HERE.parent / "examples" / "schema"


def message_from_dict(cls: type, values: dict) -> Any:
    """What users write: an Arrow row's Python values into a message, field by field."""
    message = cls()
    for fd in message.DESCRIPTOR.fields:
        value = values.get(fd.name)
        if value is None:
            continue
        target = fd.message_type
        if target is not None and target.GetOptions().map_entry:
            entries = getattr(message, fd.name)
            item = target.fields_by_name["value"]
            for k, v in value:
                if item.message_type is None:
                    entries[k] = v
                else:
                    entries[k].CopyFrom(message_from_dict(entries[k].__class__, v))
        elif target is not None and target.full_name == "google.protobuf.Timestamp":
            getattr(message, fd.name).FromDatetime(value.astimezone(datetime.UTC))
        elif target is not None:
            kind = message_factory.GetMessageClass(target)
            if fd.is_repeated:
                getattr(message, fd.name).extend(message_from_dict(kind, v) for v in value)
            else:
                getattr(message, fd.name).CopyFrom(message_from_dict(kind, value))
        elif fd.is_repeated:
            getattr(message, fd.name).extend(value)
        else:
            setattr(message, fd.name, value)
    return message


class _SerializeFn(beam.DoFn):
    """DIY: each row of each batch -> dict -> message -> bytes."""

    def __init__(self, descriptor_set: bytes, message: str) -> None:
        self._descriptor_set = descriptor_set
        self._message = message

    def setup(self) -> None:
        schema = wa.Schema.from_descriptor_set(self._descriptor_set, self._message)
        self._cls = message_factory.GetMessageClass(schema.descriptor)

    def process(self, batch: pa.RecordBatch) -> Iterator[bytes]:
        for row in batch.to_pylist():
            yield message_from_dict(self._cls, row).SerializeToString(deterministic=True)


Builder = Callable[[beam.Pipeline, str], None]


def builders(schema: wa.Schema, batches: list, rows: list) -> dict[str, Builder]:
    descriptor_set = schema.file_descriptor_set

    def ours(p: beam.Pipeline, out: str) -> None:
        records = (p | beam.Create(batches) | wab.FromArrow(schema)).records
        _ = records | wab.WriteToDelimited(out, framing="tfrecord", num_shards=1)

    def ours_rows(p: beam.Pipeline, out: str) -> None:
        records = (p | beam.Create(rows) | wab.FromRows(schema, batch_size=BATCH)).records
        _ = records | wab.WriteToDelimited(out, framing="tfrecord", num_shards=1)

    def diy(p: beam.Pipeline, out: str) -> None:
        fn = _SerializeFn(descriptor_set, schema.message_name)
        records = p | beam.Create(batches) | beam.ParDo(fn)
        _ = records | beam.io.WriteToTFRecord(out, num_shards=1)

    def floor(p: beam.Pipeline, out: str) -> None:
        _ = p | beam.Create(batches) | beam.Map(len)

    return {"wirearrow": ours, "wirearrow rows": ours_rows, "DIY protobuf": diy, "floor": floor}


def run_once(build: Builder, out: str) -> float:
    start = time.perf_counter()
    with beam.Pipeline(runner=FnApiRunner()) as p:
        build(p, out)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=None, help="records (100,000; 20,000 --quick)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=None, help="runs per row (3; 1 --quick)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    n = args.n or (20_000 if args.quick else 100_000)
    repeat = args.repeat or (1 if args.quick else 3)

    schema = wa.Schema.from_proto(
        SCHEMA_DIR / "bidrequest.proto", "BidRequestEvent", import_paths=[SCHEMA_DIR]
    )
    cls = message_factory.GetMessageClass(schema.descriptor)
    # Beam instants hold microseconds: records whose Timestamps do, so every path is exact.
    records = []
    for r in corpus.generate(n, seed=args.seed):
        m = cls.FromString(r)
        if m.HasField("timestamp"):
            m.timestamp.nanos -= m.timestamp.nanos % 1000
        records.append(m.SerializeToString())
    expected = sorted(cls.FromString(r).SerializeToString(deterministic=True) for r in records)
    tc = wa.Transcoder(schema)
    # One transcode per batch: a slice of one big batch would pickle all of its buffers.
    batches = [tc.transcode(records[i : i + BATCH]) for i in range(0, len(records), BATCH)]
    to_rows = wab.rows._top_row(tc.arrow_schema, "BidRequestEvent").to_rows
    rows = [row for b in batches for row in to_rows(b.columns)]
    rows_type = wab.message_row_type(schema)
    rows = [rows_type(*r) for r in rows]

    runs: dict[str, list[float]] = {}
    work = Path(tempfile.mkdtemp(prefix="bench-beam-write-"))
    try:
        todo = builders(schema, batches, rows)
        for round_ in range(repeat):
            for name, build in todo.items():
                out = work / f"{name.replace(' ', '_')}-{round_}" / "part"
                runs.setdefault(name, []).append(run_once(build, str(out)))
                print(f"  {name}: {runs[name][-1]:.2f} s", file=sys.stderr, flush=True)
                if name == "floor":
                    continue
                files = sorted(out.parent.iterdir())
                got = sorted(
                    r for f in files for r in wa.read_delimited(f.read_bytes(), "tfrecord").to_pylist()
                )
                if got != expected:
                    print(f"{name}: output differs from the runtime's bytes", file=sys.stderr)
                    return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)

    floor = statistics.median(runs["floor"])
    base = statistics.median(runs["wirearrow"])
    net_base = max(base - floor, 1e-9)
    print(f"{n:,} BidRequestEvent rows -> TFRecord files, FnApiRunner in-process, median of {repeat}")
    print("(net: minus the floor's time, the runner's own cost of the same batches)")
    print(f"{'pipeline':<16} {'seconds':>8} {'x wirearrow':>12} {'net s':>8} {'net x':>7}")
    for name, times in runs.items():
        t = statistics.median(times)
        net = f"{t - floor:8.2f} {(t - floor) / net_base:7.2f}" if name != "floor" else ""
        print(f"{name:<16} {t:8.2f} {t / base:12.2f} {net}")
    print("every output: the same records as the runtime's SerializeToString(deterministic=True)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
