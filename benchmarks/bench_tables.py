"""Records per second into an Iceberg table: wirearrow against what a Ray user writes today.

Every row is the same job on the same corpus file, in this one run, the rows alternating:
the file of length-delimited ``BidRequestEvent`` records becomes the 16 columns of
``transforms/openrtb_flat.yaml`` and lands in an Iceberg table (pyiceberg's SQL catalog on
SQLite, a local warehouse) with one commit:

* ``Ray write_iceberg`` (what a user writes today): ``wirearrow.ray.read_delimited``, a
  ``map_batches`` step that parses each record with the protobuf runtime and builds the
  columns in Python lists (``bench_ray.DIYProtobuf``, checked equal to wirearrow's rows),
  then Ray Data's own ``Dataset.write_iceberg``;
* ``wirearrow + write_iceberg``: the same Ray job with ``wirearrow.ray.transcode`` as the
  map step (Ray's writer unchanged: what the decode alone is worth);
* ``wirearrow.ray write_table``: the same Ray job with wirearrow's own table write
  (``wirearrow.ray.write_table``: the tasks that decode write the data files, the driver
  commits once with the job's positions; the rows carry ``file`` and ``offset`` for them);
* ``wirearrow TableWriter``: ``wirearrow.tables.TableWriter`` in one Python process, no
  Ray: read the file, ``Transcoder.decode`` a batch at a time, stage each batch's data file,
  commit once at the end with the job's positions (what makes a restarted job resume;
  Ray's writer records none).

Each job writes a table of its own, created empty beforehand (no job pays the creation),
and the table is read back to count its rows. One local Ray (``ray.init(num_cpus=--cpus)``)
for the run: a cold job of each, then ``--reps`` warm rounds; the warm medians are the
headline, their ratios the figures (target >= 3x).

Run ``python benchmarks/bench_tables.py --help``; ``--quick`` is a smoke run.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

import corpus
from bench_ray import BATCH_SIZE, FRAMING, PLAN, DIYProtobuf, check_equal

BASELINE = "Ray write_iceberg"
WRITE_TABLE = "wirearrow.ray write_table"
METHODS = (BASELINE, "wirearrow + write_iceberg", WRITE_TABLE, "wirearrow TableWriter")
_DIY: list[DIYProtobuf] = []


def diy(batch: pa.Table) -> pa.Table:
    """The DIY map step as a task function, built once per worker process."""
    if not _DIY:
        _DIY.append(DIYProtobuf())
    return _DIY[0](batch)


def catalog_kwargs(warehouse: Path) -> dict[str, str]:
    """pyiceberg's SQL catalog on SQLite in the warehouse: what write_iceberg loads."""
    return {
        "name": "bench",
        "type": "sql",
        "uri": f"sqlite:///{warehouse / 'catalog.db'}",
        "warehouse": f"file://{warehouse}",
    }


def prepare(method: str, warehouse: Path, name: str, schema: pa.Schema) -> None:
    """Create table ``bench.NAME`` empty, with the schema of the rows it will get."""
    from pyiceberg.catalog import load_catalog

    from wirearrow import tables

    if method in ("wirearrow TableWriter", WRITE_TABLE):
        tables.IcebergSink(f"bench.{name}", catalog=catalog_kwargs(warehouse)).prepare(schema)
        return
    catalog = load_catalog(**catalog_kwargs(warehouse))
    catalog.create_namespace_if_not_exists("bench")
    catalog.create_table(f"bench.{name}", schema=schema)


def job(method: str, path: Path, warehouse: Path, name: str) -> float:
    """One job into table ``bench.NAME``: its seconds."""
    import wirearrow as wa
    import wirearrow.ray as war
    from wirearrow import tables

    t0 = time.perf_counter()
    if method == "wirearrow TableWriter":
        tc = wa.load_plan(PLAN).transcoder()
        records = wa.read_delimited(str(path), framing=FRAMING)
        key = tables.file_key(str(path))
        sink = tables.IcebergSink(f"bench.{name}", catalog=catalog_kwargs(warehouse))
        with tables.TableWriter(sink, commit_every=1 << 30) as writer:  # one commit, at close
            for lo in range(0, len(records), BATCH_SIZE):
                part = records.slice(lo, BATCH_SIZE)
                writer.write(tc.decode(part, record_index=True), key, range(lo, lo + len(part)))
    elif method == WRITE_TABLE:
        ds = war.read_delimited(str(path), framing=FRAMING, include_location=True)
        result = war.transcode(ds, str(PLAN), batch_size=BATCH_SIZE, carry=["file", "offset"])
        out = wa.Output(format="iceberg", table=f"bench.{name}", catalog=catalog_kwargs(warehouse))
        war.write_table(result, out, source="file")
    else:
        ds = war.read_delimited(str(path), framing=FRAMING)
        if method == BASELINE:
            rows = ds.map_batches(diy, batch_format="pyarrow", zero_copy_batch=True, batch_size=BATCH_SIZE)
        else:
            rows = war.transcode(ds, str(PLAN), batch_size=BATCH_SIZE).rows
        rows.write_iceberg(f"bench.{name}", catalog_kwargs=catalog_kwargs(warehouse))
    return time.perf_counter() - t0


def count(warehouse: Path, name: str) -> int:
    from pyiceberg.catalog import load_catalog

    table = load_catalog(**catalog_kwargs(warehouse)).load_table(f"bench.{name}")
    return sum(int(s.summary["added-records"]) for s in table.snapshots() if s.summary is not None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--n", type=int, default=None, help="records (default 200,000; --quick 20,000)")
    p.add_argument("--reps", type=int, default=None, help="warm rounds (default 5; --quick 1)")
    p.add_argument("--cpus", type=float, default=2, help="ray.init(num_cpus=...)")
    p.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", type=Path, help="also write every measurement here")
    args = p.parse_args(argv)
    n = args.n or (20_000 if args.quick else 200_000)
    reps = args.reps or (1 if args.quick else 5)
    methods = [m for m in METHODS if m in args.methods]

    import ray

    import wirearrow as wa

    print(check_equal(min(n, 2_000)), file=sys.stderr)
    work = Path(tempfile.mkdtemp(prefix="bench-tables-"))
    path = work / f"bids.{FRAMING}"
    corpus.write_corpus(path, n, seed=0, framing=FRAMING)
    warehouse = work / "warehouse"
    warehouse.mkdir()
    sample = pa.table({"value": pa.array(corpus.generate(50, seed=0), pa.binary())})
    ours = wa.load_plan(PLAN).transcoder().transcode(sample["value"]).schema
    schemas = {m: ours for m in METHODS}
    schemas[BASELINE] = DIYProtobuf()(sample).schema
    schemas[WRITE_TABLE] = ours.append(pa.field("file", pa.string())).append(pa.field("offset", pa.int64()))
    want_rows = pa.Table.from_batches(
        [wa.load_plan(PLAN).transcoder().transcode(wa.read_delimited(str(path), framing=FRAMING))]
    ).num_rows
    if any(m != "wirearrow TableWriter" for m in methods):
        # a Ray of its own: never join a cluster someone started on this machine
        ray.init(address="local", num_cpus=args.cpus, include_dashboard=False, log_to_driver=False)
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        ctx.print_on_execution_start = False
        logging.getLogger("ray.data").setLevel(logging.WARNING)  # a line per commit step
    times: dict[str, list[float]] = {m: [] for m in methods}
    cold: dict[str, float] = {}
    try:
        for i in range(1 + reps):
            # alternate the order: a trend in the machine's load hits every row alike
            for method in methods if i % 2 == 0 else list(reversed(methods)):
                name = f"t{METHODS.index(method)}_{i}"
                prepare(method, warehouse, name, schemas[method])
                seconds = job(method, path, warehouse, name)
                got = count(warehouse, name)
                if got != want_rows:
                    raise SystemExit(f"{method}: {got:,} rows in the table, {want_rows:,} expected")
                (times[method].append(seconds) if i else cold.__setitem__(method, seconds))
                print(f"    {method}, run {i}: {seconds:.2f} s", file=sys.stderr)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    warm = {m: statistics.median(times[m]) for m in methods}
    load = os.getloadavg()
    print(f"\n{n:,} records of {corpus.MESSAGE_NAME} ({want_rows:,} rows of {PLAN.name}) -> an "
          f"Iceberg table (SQLite catalog), one commit; Ray {args.cpus:g} CPUs; "
          f"load {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}")  # fmt: skip
    print(f"{'method':<28} {'cold s':>8} {'warm s':>8} {'best s':>8} {'warm rec/s':>12}")
    for m in methods:
        print(f"{m:<28} {cold[m]:>8.2f} {warm[m]:>8.2f} {min(times[m]):>8.2f} {n / warm[m]:>12,.0f}")
    ratios = {m: warm[BASELINE] / warm[m] for m in methods if BASELINE in warm and m != BASELINE}
    for m, ratio in ratios.items():
        print(f"{m} vs {BASELINE} after a protobuf decode: {ratio:.2f}x (target >= 3x)")
    if args.json:
        args.json.write_text(json.dumps({
            "n": n, "rows": want_rows, "cpus": args.cpus, "load": load,
            "machine": platform.platform(), "cold": cold, "warm": times, "ratios": ratios,
        }, indent=2))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
