"""Streaming Beam pipeline: a simulated unbounded source -> windowed Parquet files.

    python pipelines/beam_streaming.py --n 20000 --out out/beam-stream
    python pipelines/beam_streaming.py --n 5000 --window 30 --late 200 --shards 2

The source is a TestStream replaying ``--n`` generated BidRequestEvent records (about
``--rate`` per second of event time) with the watermark following them, like a Pub/Sub or
Kafka consumer would; ``--late`` records arrive after their window closed (within the
allowed lateness, so they are written in a late firing), and a few corrupt records go to
the dead letters. It runs on the direct runner's streaming engine (BundleBasedDirectRunner:
FnApiRunner does not run TestStream), offline.

Output: ``OUT/parquet/part-<window start>-<window end>-<firing>-<shard>-of-<shards>.parquet``,
one complete file per window, firing and shard, and a per-window summary printed at the end,
then the run's balance, counted from the files: records in = records with rows + dead
letters + late records (a record missing from all three is reported as vanished).
With a real source (``beam.io.ReadFromPubSub(...)`` instead of the TestStream) the same
transforms run on Dataflow: see docs/beam.md.
"""

from __future__ import annotations

import argparse
import collections
import random
import shutil
import sys
from pathlib import Path

import apache_beam as beam
import pyarrow.parquet as pq
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
from apache_beam.testing.test_stream import TestStream
from apache_beam.transforms import trigger, window

import wirearrow.beam as wab

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "pipelines"))  # (also when this file is imported as a module)
from stage_times import Clock, add_progress_option, show_beam_progress  # noqa: E402

DEFAULT_PLAN = ROOT / "transforms" / "openrtb_flat.yaml"
CORRUPT = [bytes([0x00]), bytes([0x0A, 0x05, 0x41])]  # field number 0; string past the end


def simulated_source(
    n: int, rate: float, window_s: int, late: int, seed: int
) -> tuple[TestStream, int]:
    """TestStream of ``n`` records at ``rate``/s of event time, in steps of ~1 s, and how
    many records it sends (the corrupt ones too)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import corpus

    records = corpus.generate(n, seed=seed)
    rng = random.Random(seed)
    late_ids = set(rng.sample(range(n), min(late, n)))
    stream = TestStream()
    late_batch: list = []
    step = max(1, int(rate))
    sent = n
    for start in range(0, n, step):
        now = start / rate
        events = []
        for i in range(start, min(start + step, n)):
            event_time = i / rate
            if i in late_ids:  # delivered one window later than its event time
                late_batch.append(window.TimestampedValue(records[i], event_time))
            else:
                events.append(window.TimestampedValue(records[i], event_time))
        if start % (step * 7) == 0:  # now and then a corrupt record
            events.append(window.TimestampedValue(CORRUPT[start // (step * 7) % 2], now))
            sent += 1
        stream.add_elements(events)
        stream.advance_watermark_to(now)
        if late_batch and now - late_batch[0].timestamp.micros / 1e6 > window_s:
            stream.add_elements(late_batch)
            late_batch = []
    if late_batch:
        stream.add_elements(late_batch)
    return stream.advance_watermark_to_infinity(), sent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="records to replay")
    parser.add_argument("--rate", type=float, default=100.0, help="records per event-time second")
    parser.add_argument("--window", type=int, default=60, help="fixed window, seconds")
    parser.add_argument("--lateness", type=int, default=600, help="allowed lateness, seconds")
    parser.add_argument("--late", type=int, default=50, help="records that arrive late")
    parser.add_argument("--shards", type=int, default=2, help="files per window firing")
    parser.add_argument("--plan", default=str(DEFAULT_PLAN))
    parser.add_argument("--out", default="out/beam-stream")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--split-late",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="route records later than the allowed lateness to OUT/late/ as dead letters "
        "(wab.SplitLate; on by default, so none vanishes uncounted: --no-split-late drops "
        "them at the sinks' grouping, as Beam does, for 28-47%% less CPU)",
    )
    parser.add_argument(
        "--keep-too-late",
        action="store_true",
        help="the sinks keep the batches of records later than the allowed lateness under "
        "OUT/parquet/_late/ and OUT/dead_letters/_late/ (WriteToParquetFiles(late_dir=...))",
    )
    add_progress_option(parser)
    args, beam_args = parser.parse_known_args(argv)
    show_beam_progress(args.progress)

    options = PipelineOptions(beam_args)
    options.view_as(StandardOptions).streaming = True
    from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner

    for name in ("parquet", "dead_letters", "late"):  # this job's outputs of an earlier run
        shutil.rmtree(Path(args.out, name), ignore_errors=True)
    clock = Clock()
    with clock.stage("generate"):
        source, sent = simulated_source(args.n, args.rate, args.window, args.late, args.seed)
    with clock.stage("run"), beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as p:
        records = (
            p
            | "Events" >> source
            | "Window"
            >> beam.WindowInto(
                window.FixedWindows(args.window),
                trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                allowed_lateness=args.lateness,
                accumulation_mode=trigger.AccumulationMode.DISCARDING,
            )
        )
        if args.split_late:
            # Records later than the allowed lateness would vanish at the sink's grouping:
            # SplitLate makes them counted dead letters (records_late) instead.
            split = records | "SplitLate" >> wab.SplitLate()
            _ = split["late"] | "WriteLate" >> wab.WriteDeadLetters(
                f"{args.out}/late", file_prefix="late"
            )
            records = split["on_time"]
        result = records | "Transcode" >> wab.ToArrow(args.plan, on_error="dead_letter")
        # Without SplitLate or late_dir, records later than the allowed lateness are dropped
        # by the sinks' grouping, uncounted (Beam's behaviour). late_dir keeps what comes
        # after its window expired under _late/, counted (rows_late, dead_letters_late).
        late_dir = "_late" if args.keep_too_late else None
        _ = result.batches | "WriteParquet" >> wab.WriteToParquetFiles(
            f"{args.out}/parquet", schema=result.schema, shards=args.shards, late_dir=late_dir
        )
        _ = result.dead_letters | "WriteDeadLetters" >> wab.WriteDeadLetters(
            f"{args.out}/dead_letters", late_dir=late_dir
        )
    elapsed = clock.total

    per_window: dict[str, list[int]] = collections.defaultdict(list)
    files = sorted(Path(args.out, "parquet").glob("*.parquet"))
    for f in files:
        window_name = "-".join(f.name.split("-")[1:3])
        per_window[window_name].append(pq.read_metadata(f).num_rows)
    for name, rows in sorted(per_window.items()):
        print(f"  window {name}: {len(rows)} files, {sum(rows):,} rows")
    print(f"{len(files)} Parquet files in {args.out}/parquet/ ({elapsed:.1f} s)")
    # The direct runner times no step: the driver's stages (the replay is the run).
    print(f"time:         {clock.line()}")
    print_balance(Path(args.out), sent, args.split_late, args.keep_too_late)
    return 0


def _count(directory: Path, column: str | None = None) -> tuple[int, set]:
    """Rows of the Parquet files in ``directory``, and the distinct values of ``column``."""
    rows, values = 0, set()
    for f in sorted(directory.glob("*.parquet")):
        rows += pq.read_metadata(f).num_rows
        if column and column in pq.read_schema(f).names:
            values.update(pq.read_table(f, columns=[column]).column(column).to_pylist())
    return rows, values


def print_balance(out: Path, sent: int, split_late: bool, keep_too_late: bool) -> None:
    """Records in, rows (and the records they came from, by request_id), dead letters and
    late records of the run, from its files: the three must add up to the records in."""
    rows, ids = _count(out / "parquet", "request_id")
    dead, _ = _count(out / "dead_letters")
    late = late_rows = 0
    if split_late:  # SplitLate's dead letters: one per record
        late, _ = _count(out / "late")
    if keep_too_late:  # the sinks' late files: rows (by record) and dead letters
        late_rows, late_ids = _count(out / "parquet" / "_late", "request_id")
        late += len(late_ids) + _count(out / "dead_letters" / "_late")[0]
    print(f"records in:   {sent:,}")
    late_text = f" ({late_rows:,} rows)" if keep_too_late else ""
    print(f"rows:         {rows:,}, from {len(ids):,} records")
    print(f"dead letters: {dead:,}")
    print(f"late records: {late:,}{late_text}")
    if not ids and rows:
        print("balance:      not counted (no request_id column in the rows)")
        return
    accounted = len(ids) + dead + late
    verdict = (
        "every record accounted for"
        if accounted == sent
        else (f"{sent - accounted:,} records vanished (too late, dropped by the windows' grouping)")
    )
    print(
        f"balance:      {len(ids):,} + {dead:,} + {late:,} = {accounted:,} of {sent:,}: {verdict}"
    )

    return 0


if __name__ == "__main__":
    raise SystemExit(main())
