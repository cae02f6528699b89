"""Ray Data pipeline: files of length-delimited protobuf records -> Parquet (+ dead letters).

    python pipelines/ray_pipeline.py --n 50000 --out out/ray            # generates the input
    python pipelines/ray_pipeline.py --n 50000 --out out/ray --corrupt 25   # with bad records
    python pipelines/ray_pipeline.py --input 's3://b/events/*.varint' --out s3://b/out \\
        --address auto                                                  # on a Ray cluster

Without --input, ``--n`` BidRequestEvent records are generated with benchmarks/corpus.py
into ``OUT/input/events.varint`` (one file: the reader splits it across read tasks at
record boundaries). The job reads it with ``wirearrow.ray.read_delimited``, transcodes it
with ``transforms/openrtb_flat.yaml`` (``--plan``) on Ray tasks (``--compute actors``:
an actor pool), and writes ``OUT/rows/`` (Parquet, one file per block) and ``OUT/dead_letters/`` (Parquet, one
file per batch that had bad records: the reason, the raw bytes, and the file and byte
offset of the record). It prints the counts and where the time went (Ray's start, the
plan, the run; in the run's tasks: reading, transcoding, writing), checks that every record
is in the rows or in the dead letters, and exits 1 if not.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

import ray

import wirearrow.ray as war

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "pipelines"))  # (also when this file is imported as a module)
import local_ray  # noqa: E402
from stage_times import (  # noqa: E402
    Clock,
    add_progress_option,
    ray_parquet_sink,
    show_ray_progress,
)

DEFAULT_PLAN = ROOT / "transforms" / "openrtb_flat.yaml"


def generate_input(path: Path, n: int, seed: int, framing: str, corrupt: int) -> int:
    """Write ``n`` records to ``path`` with benchmarks/corpus.py; ``corrupt`` of them broken.

    A broken record ends with a field whose length runs past the record's end, which the
    transcoder rejects (a dead letter). Returns the number of records written.
    """
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import corpus

    messages = corpus.generate(n, seed=seed)
    corpus.break_records(messages, corrupt)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.writelines(corpus.frame(messages, framing))
    tmp.replace(path)
    return len(messages)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--input", help="files, a directory or a glob, local or URI (default: generate)")
    p.add_argument("--n", type=int, default=50_000, help="records to generate (default 50,000)")
    p.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    p.add_argument("--corrupt", type=int, default=0, help="generated records to break (default 0)")
    p.add_argument("--framing", default="varint", choices=("varint", "u32le", "u32be"))
    p.add_argument("--plan", default=str(DEFAULT_PLAN), help="YAML plan (default openrtb_flat)")
    p.add_argument("--out", default="out/ray", help="output directory or URI (default out/ray)")
    p.add_argument("--address", default=None, help="Ray cluster to join (default: start one)")
    p.add_argument("--cpus", type=int, default=None, help="CPUs of the local Ray (default: all)")
    p.add_argument(
        "--compute",
        choices=("tasks", "actors"),
        default="tasks",
        help="transcode on Ray tasks (default) or on an actor pool",
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="tasks at once, or actors (default: Ray's; actors: 1..CPUs-1)",
    )
    add_progress_option(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    local_out = "://" not in args.out
    expected = None
    source = args.input
    if source is None:
        path = Path(args.out) / "input" / f"events.{args.framing}"
        expected = generate_input(path, args.n, args.seed, args.framing, args.corrupt)
        source = str(path)
        print(f"input:  {expected:,} records generated into {path}")
    rows_out = os.path.join(args.out, "rows")
    dead_out = os.path.join(args.out, "dead_letters")
    if local_out:  # a rerun replaces the outputs (Ray's writers append)
        for directory in (rows_out, dead_out):
            shutil.rmtree(directory, ignore_errors=True)

    clock = Clock()
    with clock.stage("Ray start"):
        local_ray.init(args.address, num_cpus=args.cpus, include_dashboard=False)
    show_ray_progress(args.progress)
    # transcode() also turns Ray Data's per-operator resource reservation off for this job
    # when the cluster has at most 4 CPUs: there it mostly holds the writes back (docs/ray.md).

    with clock.stage("plan"):  # the input split at record boundaries, the plan compiled
        ds = war.read_delimited(source, framing=args.framing, include_location=True)
        job = war.transcode(
            ds,
            args.plan,
            on_error="dead_letter",
            dead_letters=dead_out,
            compute=args.compute,
            concurrency=args.concurrency,
        )
    where = "Ray tasks"
    if job.pool is not None:
        where = f"{job.pool.min}..{job.pool.max} actor(s) of {job.pool.num_cpus:g} CPU"
    print(f"job:    {source} -> {Path(args.plan).name} on {where} -> {rows_out}")
    sink = ray_parquet_sink(rows_out)
    with clock.stage("run"):  # read, transcode and write, streamed together in Ray's tasks
        job.rows.write_datasink(sink)
    wall = clock.stages["run"]
    stats = job.job_stats()

    print(f"rows:   {stats.rows_out:,} rows written to {rows_out}")
    print(
        f"counts: {stats.records_in:,} records in, {stats.records_ok:,} ok, "
        f"{stats.records_failed:,} failed; {stats.dead_letters:,} dead letters in "
        f"{len(stats.dead_letter_files)} file(s) under {dead_out}"
    )
    print(
        f"work:   {stats.batches} batches on {stats.workers} worker(s) on {stats.nodes} "
        f"node(s) ({stats.compiles} plan compile(s)), "
        f"{stats.transcode_seconds:.2f} s transcoding"
    )
    print(f"time:   {clock.line()} ({stats.records_in / wall:,.0f} records/s in the run)")
    # In task mode Ray fuses read -> transcode -> write into each task: what a write task
    # waits for its blocks is their read and transcode. With actors the waits include
    # waiting for the actors.
    tasks = sink.seconds
    waits = tasks["blocks"] - (stats.transcode_seconds if job.pool is None else 0.0)
    read = "read" if job.pool is None else "read and waiting for the actors"
    print(
        f"tasks:  {read} {max(waits, 0.0):.2f} s, transcode {stats.transcode_seconds:.2f} s, "
        f"write {tasks['write']:.2f} s, summed over {tasks['tasks']} write task(s); the rest "
        "of the run is Ray's (starting workers, scheduling)"
    )
    ray.shutdown()

    complete = stats.records_ok + stats.dead_letters == stats.records_in
    if expected is not None:
        complete = complete and stats.records_in == expected
    if not complete:
        print("ERROR: records are missing from the rows and the dead letters", file=sys.stderr)
        return 1
    print("check:  every record is in the rows or in the dead letters")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
