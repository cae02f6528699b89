"""wirearrow in Apache Beam: the batch pipeline (files -> Parquet) against what users write.

Every row is a whole Beam pipeline on the local FnApiRunner, in-process and with 2 SDK worker
processes, over the same files of length-delimited ``BidRequestEvent`` records (written by
``corpus.py``, 200,000 by default), all read with ``wirearrow.beam.ReadFromDelimited``:

* ``wirearrow``: ``ToArrow(flat-15 plan)`` -> ``wirearrow.beam.WriteToParquetFiles``;
* ``DIY protobuf``: a DoFn parsing each record with the protobuf runtime into one dict per
  output row (same rows and columns as the plan) -> ``beam.io.WriteToParquet``;
* ``DIY pybufarrow``: a DoFn buffering records, ``append_denorm`` each and ``flush_denorm``
  per batch (HyperType) -> ``beam.io.WriteToParquetBatched`` (pybufarrow cross-joins the
  nested fan-out, so it writes more rows: see benchmarks/README.md);
* ``floor (identity)``: ``beam.Map(lambda r: r)`` after the read: what the runner costs to
  move each record through one step;
* ``read only``: the source alone (its batches have no consumer).

Runs are interleaved (every row once, then again) and each row reports the median and best
of ``--repeat`` runs, startup included (a pipeline with nothing in it is timed as well).
"Where the time goes" times the pieces outside Beam, single-threaded, on the same data.

    python benchmarks/bench_beam.py --quick      # 20,000 records, 1 run per row
    python benchmarks/bench_beam.py              # 200,000 records, 3 runs per row
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.transforms import window
from apache_beam.utils.windowed_value import WindowedValue

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import conditions  # noqa: E402
import corpus  # noqa: E402
import wirearrow as wa  # noqa: E402
import wirearrow.beam as wab  # noqa: E402
from bench_flat import PLANS  # noqa: E402

# flat-15 of bench_flat.py: nested fan-out (one row per deal, next to its impression).
PLAN = PLANS["flat-15"]
BATCH = 8192
FRAMING = "varint"


# --------------------------------------------------------------------------- DIY DoFns
# What a Beam user writes today. Self-contained (no import of this module on the workers):
# the message class is rebuilt in setup() from the serialized descriptor set.


class ProtobufRowsFn(beam.DoFn):
    """One protobuf parse per record, one dict per output row (the flat-15 rows)."""

    def __init__(self, descriptor_set: bytes, message: str) -> None:
        self._descriptor_set = descriptor_set
        self._message = message

    def setup(self) -> None:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

        pool = descriptor_pool.DescriptorPool()
        for f in descriptor_pb2.FileDescriptorSet.FromString(self._descriptor_set).file:
            pool.Add(f)
        cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(self._message))
        self._parse = cls.FromString

    def process(self, raw: bytes) -> Iterator[dict]:
        m = self._parse(raw)
        has = m.HasField
        device = m.device if has("device") else None
        ts = m.timestamp if has("timestamp") else None
        common = {
            "id": m.id,
            "device.geo.country": device.geo.country
            if device is not None and device.HasField("geo")
            else None,
            "device.os": device.os if device is not None else None,
            "user.id": m.user.id if has("user") else None,
            "site.publisher.id": m.site.publisher.id
            if has("site") and m.site.HasField("publisher")
            else None,
            "timestamp": ts.seconds * 1_000_000 + ts.nanos // 1000 if ts is not None else None,
            "at": m.at,
            "tmax": m.tmax,
            "technicalprovider.id": m.technicalprovider.id if has("technicalprovider") else None,
        }
        empty = {
            "imp[*].id": None,
            "imp[*].banner.w": None,
            "imp[*].banner.h": None,
            "imp[*].video.w": None,
            "imp[*].pmp.deals[*].id": None,
            "imp[*].pmp.deals[*].bidfloor": None,
        }
        if not m.imp:  # left join: a request without impressions is still one row
            yield {**common, **empty}
        for imp in m.imp:
            banner = imp.banner if imp.HasField("banner") else None
            head = {
                **common,
                "imp[*].id": imp.id,
                "imp[*].banner.w": banner.w if banner is not None else None,
                "imp[*].banner.h": banner.h if banner is not None else None,
                "imp[*].video.w": imp.video.w if imp.HasField("video") else None,
            }
            deals = imp.pmp.deals
            if not deals:
                yield {**head, "imp[*].pmp.deals[*].id": None, "imp[*].pmp.deals[*].bidfloor": None}
            for d in deals:
                yield {
                    **head,
                    "imp[*].pmp.deals[*].id": d.id,
                    "imp[*].pmp.deals[*].bidfloor": d.bidfloor,
                }


class PybufarrowFn(beam.DoFn):
    """Buffers records; append_denorm each, flush_denorm per batch -> a pa.Table."""

    def __init__(self, schema_dir: str, batch_size: int) -> None:
        self._schema_dir = schema_dir
        self._batch_size = batch_size

    def setup(self) -> None:
        import pybufarrow

        args = ("bidrequest.proto", "BidRequestEvent", [self._schema_dir])
        self._tc = pybufarrow.Transcoder.from_proto_file(
            *args, denorm_columns=list(PLAN_COLUMNS), hyper_type=pybufarrow.HyperType(*args)
        )

    def start_bundle(self) -> None:
        self._buffer: list[bytes] = []

    def process(self, raw: bytes) -> Iterator[pa.Table]:
        self._buffer.append(raw)
        if len(self._buffer) >= self._batch_size:
            yield self._flush()

    def finish_bundle(self) -> Iterator[WindowedValue]:
        if self._buffer:
            yield WindowedValue(
                self._flush(), window.GlobalWindow().max_timestamp(), (window.GlobalWindow(),)
            )

    def _flush(self) -> pa.Table:
        append = self._tc.append_denorm
        for m in self._buffer:
            append(m)
        self._buffer = []
        batch = self._tc.flush_denorm()
        # pybufarrow names columns by their last path segment (several "id"s): rename.
        return pa.Table.from_batches([batch.rename_columns(list(PLAN_COLUMNS))])


PLAN_COLUMNS = PLAN


class DropBatchesFn(beam.DoFn):
    """Consumes the source's batches as they are (no per-record call): the read floor."""

    def get_input_batch_type(self, input_element_type: Any) -> Any:
        return wab.RecordArray

    @beam.DoFn.yields_elements
    def process_batch(self, batch: wab.RecordArray) -> Iterator[Any]:
        return iter(())


# --------------------------------------------------------------------------- pipelines


def schema_of_plan() -> tuple[wa.Schema, wa.Transcoder]:
    schema = wa.Schema.from_proto(
        str(corpus.PROTO_FILE), corpus.MESSAGE_NAME, import_paths=[str(corpus.SCHEMA_DIR)]
    )
    return schema, wa.Transcoder(schema, columns=list(PLAN), on_error="dead_letter")


def nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_nullable(True) for f in schema])


def pybufarrow_schema(sample: list[bytes]) -> pa.Schema:
    fn = PybufarrowFn(str(corpus.SCHEMA_DIR), BATCH)
    fn.setup()
    fn.start_bundle()
    fn._buffer.extend(sample)
    return fn._flush().schema


Builder = Callable[[beam.Pipeline, str, str], None]


def builders(tc: wa.Transcoder, pb_schema: pa.Schema) -> dict[str, Builder]:
    descriptor_set = tc.schema.file_descriptor_set
    arrow_schema = nullable(tc.arrow_schema)

    def read(p: beam.Pipeline, pattern: str) -> beam.PCollection:
        return p | "Read" >> wab.ReadFromDelimited(pattern, FRAMING, batch_size=BATCH)

    def wirearrow_(p: beam.Pipeline, pattern: str, out: str) -> None:
        result = read(p, pattern) | wab.ToArrow(tc, batch_size=BATCH)
        _ = result.batches | wab.WriteToParquetFiles(out, schema=result.schema)

    def diy_protobuf(p: beam.Pipeline, pattern: str, out: str) -> None:
        rows = read(p, pattern) | beam.ParDo(ProtobufRowsFn(descriptor_set, corpus.MESSAGE_NAME))
        _ = rows | beam.io.WriteToParquet(
            f"{out}/part", arrow_schema, codec="zstd", file_name_suffix=".parquet"
        )

    def diy_pybufarrow(p: beam.Pipeline, pattern: str, out: str) -> None:
        tables = read(p, pattern) | beam.ParDo(PybufarrowFn(str(corpus.SCHEMA_DIR), BATCH))
        _ = tables | beam.io.WriteToParquetBatched(
            f"{out}/part", pb_schema, codec="zstd", file_name_suffix=".parquet"
        )

    def wirearrow_no_sink(p: beam.Pipeline, pattern: str, out: str) -> None:
        _ = (read(p, pattern) | wab.ToArrow(tc, batch_size=BATCH)).batches

    def floor(p: beam.Pipeline, pattern: str, out: str) -> None:
        _ = read(p, pattern) | beam.Map(lambda r: r)

    def read_only(p: beam.Pipeline, pattern: str, out: str) -> None:
        _ = read(p, pattern) | beam.ParDo(DropBatchesFn())

    def empty(p: beam.Pipeline, pattern: str, out: str) -> None:
        _ = p | beam.Create([]) | beam.Map(lambda r: r)

    return {
        "wirearrow": wirearrow_,
        "DIY protobuf": diy_protobuf,
        "DIY pybufarrow": diy_pybufarrow,
        "wirearrow, no sink": wirearrow_no_sink,
        "floor (identity)": floor,
        "read only": read_only,
        "empty pipeline": empty,
    }


def run_once(build: Builder, pattern: str, out: str, workers: int) -> float:
    shutil.rmtree(out, ignore_errors=True)
    if workers > 1:
        options = PipelineOptions(
            direct_num_workers=workers, direct_running_mode="multi_processing"
        )
    else:
        options = PipelineOptions()
    started = time.perf_counter()
    p = beam.Pipeline(runner=FnApiRunner(), options=options)
    build(p, pattern, out)
    p.run().wait_until_finish()
    return time.perf_counter() - started


# --------------------------------------------------------------------------- pieces


def where_the_time_goes(files: list[Path], tc: wa.Transcoder, descriptor_set: bytes) -> dict:
    """Single-threaded costs of the pieces, outside Beam, on the same records."""
    from wirearrow.sources.framing import read_delimited

    out: dict[str, float] = {}
    t = time.perf_counter()
    arrays = [read_delimited(f, FRAMING) for f in files]
    out["read + split files (read_delimited)"] = time.perf_counter() - t
    records = [r for a in arrays for r in a.to_pylist()]
    t = time.perf_counter()
    batches = [a.slice(i, BATCH) for a in arrays for i in range(0, len(a), BATCH)]
    batches = [tc.transcode(b) for b in batches]
    out["wirearrow transcode, BinaryArrays of 8192"] = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        wa.write_parquet(iter(batches), Path(tmp) / "x.parquet")
        out["wirearrow.write_parquet of the batches (zstd)"] = time.perf_counter() - t
    fn = ProtobufRowsFn(descriptor_set, corpus.MESSAGE_NAME)
    fn.setup()
    t = time.perf_counter()
    dicts = [row for r in records for row in fn.process(r)]
    out["protobuf parse into dicts (DIY DoFn body)"] = time.perf_counter() - t
    t = time.perf_counter()
    pa.Table.from_pylist(dicts[:200_000], schema=nullable(tc.arrow_schema))
    out[f"dicts -> Arrow ({min(len(dicts), 200_000):,} rows)"] = time.perf_counter() - t
    return out


# --------------------------------------------------------------------------- main


def corpus_files(n: int, seed: int, files: int) -> list[Path]:
    directory = corpus.DATA_DIR / f"beam-{n}-{seed}"
    paths = [directory / f"events-{i:05d}.{FRAMING}" for i in range(files)]
    if not all(p.exists() for p in paths):
        per_file = -(-n // files)
        for i, path in enumerate(paths):
            count = min(per_file, n - i * per_file)
            corpus.write_corpus(path, count, seed=seed + i, framing=FRAMING)
    return paths


def check_outputs(out_dir: Path, tc: wa.Transcoder) -> list[str]:
    """wirearrow's and the DIY protobuf's Parquet files: same rows, any order."""

    def rows(name: str) -> list:
        files = sorted(Path(out_dir, name).glob("*.parquet"))
        table = pa.concat_tables([pq.read_table(f) for f in files])
        table = table.cast(nullable(tc.arrow_schema))
        return sorted(map(repr, table.to_pylist()))

    lines = []
    try:
        a, b = rows("wirearrow"), rows("DIY protobuf")
        verdict = "identical rows" if a == b else "ROWS DIFFER"
        lines.append(
            f"check: wirearrow vs DIY protobuf Parquet: {verdict} ({len(a):,} / {len(b):,})"
        )
    except Exception as err:  # a missing row (--only) or an unreadable file
        lines.append(f"check: not done ({err})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=None, help="records (200,000; 20,000 --quick)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--files", type=int, default=4, help="input files")
    parser.add_argument("--repeat", type=int, default=None, help="runs per row (3; 1 --quick)")
    parser.add_argument("--workers", default="1,2", help="SDK worker processes per mode")
    parser.add_argument("--only", default=None, help="regex over row names")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    n = args.n or (20_000 if args.quick else 200_000)
    repeat = args.repeat or (1 if args.quick else 3)
    modes = [int(w) for w in args.workers.split(",")]
    started = conditions.begin(quick=args.quick, busy_cores=max(modes))
    # Worker processes import wirearrow and this directory's modules from here.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), str(HERE.parent / "plugin"), os.environ.get("PYTHONPATH", "")]
    )

    files = corpus_files(n, args.seed, args.files)
    pattern = str(files[0].parent / f"events-*.{FRAMING}")
    payload = sum(f.stat().st_size for f in files)
    schema, tc = schema_of_plan()
    pb_schema = pybufarrow_schema(corpus.generate(50, seed=1))
    rows = {
        k: v for k, v in builders(tc, pb_schema).items() if not args.only or re.search(args.only, k)
    }
    print(f"corpus: {n:,} records in {len(files)} files, {payload / 1e6:.1f} MB ({FRAMING})")
    print(f"plan:   flat-15 ({len(PLAN)} columns, one row per deal); batch {BATCH}")
    print(f"runner: FnApiRunner, in-process and multi-process; {os.cpu_count()} cores")
    print(f"timing: median (best) of {repeat} interleaved runs, startup included\n", flush=True)

    times: dict[tuple[str, int], list[float]] = {}
    out_root = Path(tempfile.mkdtemp(prefix="bench-beam-", dir=corpus.DATA_DIR))
    try:
        for r in range(repeat):
            for workers in modes:
                for name, build in rows.items():
                    print(
                        f"  run {r + 1}/{repeat}: {name}, {workers} worker(s) ...",
                        file=sys.stderr,
                        flush=True,
                    )
                    out = str(out_root / name)
                    times.setdefault((name, workers), []).append(
                        run_once(build, pattern, out, workers)
                    )
        checks = check_outputs(out_root, tc)
    finally:
        shutil.rmtree(out_root, ignore_errors=True)

    results = []
    for (name, workers), ts in times.items():
        results.append(
            {"pipeline": name, "workers": workers, "median_s": statistics.median(ts),
             "best_s": min(ts), "runs": ts}
        )  # fmt: skip
    med = {(r["pipeline"], r["workers"]): r["median_s"] for r in results}

    def net(name: str, workers: int) -> float | None:
        """Seconds beyond the empty pipeline of the same mode (startup, worker launch)."""
        t, empty = med.get((name, workers)), med.get(("empty pipeline", workers))
        return None if t is None or empty is None else max(t - empty, 1e-9)

    header = (
        f"{'pipeline':<20} {'workers':>7} {'records/s':>10} {'best':>10} {'seconds':>8} "
        f"{'net rec/s':>10}  {'vs DIY pb':>9} {'vs floor':>8}"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        name, workers = r["pipeline"], r["workers"]
        if name == "empty pipeline":
            print(f"{name:<20} {workers:>7} {'':>10} {'':>10} {r['median_s']:8.2f}")
            continue
        pb, fl = med.get(("DIY protobuf", workers)), med.get(("floor (identity)", workers))
        n_net = net(name, workers)
        print(
            f"{name:<20} {workers:>7} {n / r['median_s']:>10,.0f} {n / r['best_s']:>10,.0f} "
            f"{r['median_s']:8.2f} {n / n_net if n_net else 0:>10,.0f}  "
            + (f"{pb / r['median_s']:>8.2f}x" if pb else f"{'':>9}")
            + (f" {r['median_s'] / fl:>7.2f}x" if fl else "")
        )
    print(
        "\nrecords/s, seconds: whole pipeline, startup included (median; best = fastest run)."
        "\nnet rec/s: records / (seconds - the empty pipeline's seconds in the same mode)."
        "\nvs DIY pb: times faster than the DIY protobuf pipeline; vs floor: time relative to"
        "\nthe identity pipeline (lower is better). Both ratios on whole-pipeline medians."
    )
    for line in checks:
        print(line)

    targets = []
    for workers in modes:
        w, pb, fl = (
            med.get((k, workers)) for k in ("wirearrow", "DIY protobuf", "floor (identity)")
        )
        ws = med.get(("wirearrow, no sink", workers))
        wn, pbn, fln, wsn = (
            net(k, workers)
            for k in ("wirearrow", "DIY protobuf", "floor (identity)", "wirearrow, no sink")
        )
        if w and pb and wn and pbn:
            targets.append(
                f"{workers} worker(s): wirearrow vs DIY protobuf {pb / w:.1f}x "
                f"(net of startup {pbn / wn:.1f}x)  target >= 3x"
            )
        if w and fl and wn and fln:
            targets.append(
                f"{workers} worker(s): wirearrow vs floor {w / fl:.2f}x (net {wn / fln:.2f}x)  "
                "target <= 1.3x"
            )
        if ws and fl and wsn and fln:
            targets.append(
                f"{workers} worker(s): wirearrow without the Parquet sink vs floor {ws / fl:.2f}x "
                f"(net {wsn / fln:.2f}x)"
            )
    print()
    for line in targets:
        print(line)

    print("\nwhere the time goes (single thread, outside Beam, same records):")
    pieces = where_the_time_goes(files, tc, schema.file_descriptor_set)
    for what, seconds in pieces.items():
        print(f"  {what:<52} {seconds:6.2f} s  ({n / seconds:>12,.0f} records/s)")
    if args.json:
        args.json.write_text(
            json.dumps({"benchmark": "bench_beam", "conditions": conditions.end(started), "n": n,
                        "results": results, "pieces": pieces, "targets": targets}, indent=2)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
