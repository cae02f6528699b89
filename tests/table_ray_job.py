"""A Ray job the kill tests kill (the driver, with SIGKILL): a file of varint-framed
BidRequestEvent records -> wirearrow.ray.transcode -> wirearrow.ray.write_table into a rows
table and a dead-letter table (Iceberg on a SQLite catalog, or Delta), a commit every K
blocks, on a local Ray of its own (2 CPUs). Started again, it skips what the tables hold.

    python tests/table_ray_job.py INPUT --format iceberg --where DIR [--blocks N] [--commit-every K]

``--log`` gets a line per step (``ray`` once Ray is up, ``commit TABLE ROWS`` after each
commit, ``done``), each after its time.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import ray

import wirearrow as wa
import wirearrow.ray as war

sys.path.insert(0, str(Path(__file__).resolve().parent))
from table_job import COLUMNS, EXAMPLES, output


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("input")
    p.add_argument("--format", choices=("iceberg", "delta"), required=True)
    p.add_argument("--where", required=True)
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--commit-every", type=int, default=1)
    p.add_argument("--log", default=None)
    args = p.parse_args(argv)
    log = open(args.log, "a", buffering=1) if args.log else None  # noqa: SIM115

    def say(line: str) -> None:
        if log is not None:
            log.write(f"{time.time():.3f} {line}\n")

    # a Ray of its own (never a cluster someone started on this machine): it goes with
    # this process, killed or not
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)  # fmt: skip
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    ctx.print_on_execution_start = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    say("ray")
    schema = wa.Schema.from_proto(EXAMPLES / "bidrequest.proto", "BidRequestEvent", import_paths=[EXAMPLES])
    tc = wa.Transcoder(schema, columns=COLUMNS, on_error="dead_letter")
    ds = war.read_delimited(args.input, framing="varint", include_location=True,
                            override_num_blocks=args.blocks)  # fmt: skip
    job = war.transcode(ds, tc, carry=["file", "offset"])
    out = output(args.format, args.where).replace(commit_every=args.commit_every)
    done = war.write_table(job, out, source="file",
                           on_commit=lambda c: say(f"commit {c.table} {c.rows}"))  # fmt: skip
    say(f"done {done.rows} {done.dead_letters} skipped {done.skipped_rows} {done.skipped_dead_letters}")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
