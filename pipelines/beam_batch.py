"""Batch Beam pipeline: files of length-delimited protobuf records -> Parquet (+ dead letters).

    python pipelines/beam_batch.py --n 20000 --out out/beam             # generates the input
    python pipelines/beam_batch.py --n 20000 --out out/beam --corrupt 10   # 10 bad records
    python pipelines/beam_batch.py --input 'data/*.varint' --out out/beam --workers 2
    python pipelines/beam_batch.py --input 'gs://b/events/*.bin' --out gs://b/out \\
        --runner DataflowRunner --project P --region R --temp_location gs://b/tmp \\
        --extra_package dist/wirearrow-0.1.0-cp311-cp311-manylinux_2_28_x86_64.whl

Without --input, ``--n`` BidRequestEvent records are generated with benchmarks/corpus.py
into ``OUT/input/`` (a few files, so that reading is parallel). Writes ``OUT/parquet/``
(one file per bundle) and ``OUT/dead_letters/`` (one JSON line per bad record), then
prints the counts and where the time went (building the pipeline, the run; in the run,
each step's execution time as the runner measures it). Unknown flags are Beam pipeline
options; the default runner is FnApiRunner (local, offline).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

import wirearrow.beam as wab
from wirearrow.beam.transcode import METRICS_NAMESPACE  # the namespace of ToArrow's counters

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "pipelines"))  # (also when this file is imported as a module)
from stage_times import Clock, add_progress_option, beam_step_seconds, show_beam_progress  # noqa: E402

DEFAULT_PLAN = ROOT / "transforms" / "openrtb_flat.yaml"


def generate_input(
    directory: Path, n: int, files: int, framing: str, seed: int, corrupt: int = 0
) -> str:
    """Write ``n`` records over ``files`` files with benchmarks/corpus.py; returns a glob.

    The records are those of the Ray job for the same ``n``, ``seed`` and ``corrupt``
    (``corpus.generate(n, seed)``, the same ones broken), cut into consecutive slices: the
    two jobs read the same data and write the same rows.
    """
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import corpus

    messages = corpus.generate(n, seed=seed)
    corpus.break_records(messages, corrupt)
    corpus.write_split(directory, messages, files, framing)
    return str(directory / f"events-*.{framing}")


def dead_letter_json(letter: wab.DeadLetter) -> str:
    record = letter._asdict()
    raw = record.pop("raw")
    record["raw_hex"] = raw.hex() if raw is not None else None
    return json.dumps(record)


def build(
    p: beam.Pipeline, pattern: str, plan: str, framing: str, out: str, batch_size: int
) -> None:
    """The pipeline: read, transcode, write batches and dead letters."""
    records = p | "Read" >> wab.ReadFromDelimited(pattern, framing=framing)
    # Bad records go on as dead letters (a plan's default policy is to raise).
    transcode = wab.ToArrow(plan, batch_size=batch_size, on_error="dead_letter")
    result = records | "Transcode" >> transcode
    _ = result.batches | "WriteParquet" >> wab.WriteToParquetFiles(
        f"{out}/parquet", schema=result.schema
    )
    _ = (
        result.dead_letters
        | "DeadLetterJson" >> beam.Map(dead_letter_json)
        | "WriteDeadLetters" >> beam.io.WriteToText(f"{out}/dead_letters/dead", ".jsonl")
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", help="file pattern of framed records (default: generate)")
    parser.add_argument("--n", type=int, default=20_000, help="records to generate")
    parser.add_argument("--files", type=int, default=4, help="files to generate")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--corrupt", type=int, default=0, help="generated records to break")
    parser.add_argument("--framing", default="varint", choices=("varint", "u32le", "u32be"))
    parser.add_argument("--plan", default=str(DEFAULT_PLAN), help="YAML plan")
    parser.add_argument("--out", default="out/beam", help="output directory (any filesystem)")
    parser.add_argument("--batch-size", type=int, default=8192)
    parser.add_argument("--workers", type=int, default=1, help="local SDK worker processes")
    parser.add_argument("--write-only", action="store_true", help="only generate the input")
    add_progress_option(parser)
    args, beam_args = parser.parse_known_args(argv)

    pattern = args.input
    if pattern is None:
        pattern = generate_input(
            Path(args.out) / "input", args.n, args.files, args.framing, args.seed, args.corrupt
        )
        print(f"input: {args.n:,} records in {pattern}")
    if args.write_only:
        return 0

    options = PipelineOptions(beam_args)
    runner = None
    if not any(a.startswith("--runner") for a in beam_args):
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner

        runner = FnApiRunner()  # the default runner would download Prism
        if args.workers > 1:
            options = PipelineOptions(
                beam_args,
                direct_num_workers=args.workers,
                direct_running_mode="multi_processing",
            )
    show_beam_progress(args.progress)
    clock = Clock()
    with clock.stage("build"):  # the plan compiled, the pipeline's graph
        p = beam.Pipeline(runner=runner, options=options)
        build(p, pattern, args.plan, args.framing, args.out, args.batch_size)
    with clock.stage("run"):
        result = p.run()
        result.wait_until_finish()
    elapsed = clock.total

    counters = {
        c.key.metric.name: c.committed
        for c in result.metrics().query(beam.metrics.MetricsFilter())["counters"]
        if c.key.metric.namespace == METRICS_NAMESPACE
    }
    records_in = counters.get("records_in", 0)
    print(
        f"{records_in:,} records -> {counters.get('rows_out', 0):,} rows, "
        f"{counters.get('records_failed', 0):,} dead letters in {elapsed:.1f} s "
        f"({records_in / elapsed:,.0f} records/s, startup included)"
    )
    print(f"parquet: {args.out}/parquet/  dead letters: {args.out}/dead_letters/")
    # The runner's execution time of each step. ToArrow is a batched DoFn: the runner runs
    # it as the read's output fills, and counts its time in the read's step.
    steps = beam_step_seconds(
        result,
        {"read": "Read", "transcode": "Transcode", "write": "WriteParquet",
         "dead letters": "DeadLetterJson", "written": "WriteDeadLetters"},
    )  # fmt: skip
    print(f"time: {clock.line()}")
    print(
        f"steps: read and transcode {steps['read'] + steps['transcode']:.2f} s, write "
        f"{steps['write']:.2f} s, dead letters {steps['dead letters'] + steps['written']:.2f} s "
        "(as the runner times them); the rest of the run is Beam's (starting its workers, "
        "moving bundles)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
