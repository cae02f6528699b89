"""A job the kill tests kill: a file of varint-framed BidRequestEvent records into a rows
table and a dead-letter table (Iceberg on a SQLite catalog, or Delta), a batch at a time,
committing every few batches, resuming from the tables' positions when started again.

    python tests/table_job.py INPUT --format iceberg --where DIR [--batch N] [--commit-every K]

Each record's position is its number in the file (the key: the file); rows and dead letters
carry it (``position``), so the tables can be compared with a clean run record by record.
``--log`` gets a line per step (``write B`` before batch B is handed over, ``staged B`` or
``committed B`` after, each after its time) so the killer knows where the job was when it
died.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

import wirearrow as wa
from wirearrow import tables
from wirearrow.sources.framing import read_delimited

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "schema"
COLUMNS = ["id", "at", "tmax", "device.geo.country", "timestamp", "imp[0].bidfloor"]


def output(fmt: str, where: str) -> wa.Output:
    if fmt == "iceberg":
        return wa.Output(format="iceberg", table="events.bids", warehouse=os.path.join(where, "wh"),
                         partition=("day(timestamp)",))  # fmt: skip
    return wa.Output(format="delta", table=os.path.join(where, "bids"))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("input")
    p.add_argument("--format", choices=("iceberg", "delta"), required=True)
    p.add_argument("--where", required=True)
    p.add_argument("--batch", type=int, default=50)
    p.add_argument("--commit-every", type=int, default=1)
    p.add_argument("--log", default=None)
    args = p.parse_args(argv)
    log = open(args.log, "a", buffering=1) if args.log else None  # noqa: SIM115

    def say(line: str) -> None:
        if log is not None:
            log.write(f"{time.time():.3f} {line}\n")

    schema = wa.Schema.from_proto(EXAMPLES / "bidrequest.proto", "BidRequestEvent", import_paths=[EXAMPLES])
    tc = wa.Transcoder(schema, columns=COLUMNS, on_error="dead_letter")
    records = read_delimited(args.input, "varint")
    key = tables.file_key(args.input)
    writer = tables.TableWriter.open(output(args.format, args.where).replace(commit_every=args.commit_every))
    start = writer.resume()[key]
    say(f"resume {start}")
    for b, lo in enumerate(range(start, len(records), args.batch)):
        hi = min(lo + args.batch, len(records))
        positions = np.arange(lo, hi, dtype=np.int64)
        decoded = tc.decode(records.slice(lo, hi - lo), record_index=True,
                            carry={"position": pa.array(positions)})  # fmt: skip
        say(f"write {b}")  # stages the batch, and commits when it is the K-th
        commits = writer.write(decoded, key, positions)
        say(f"{'committed' if commits else 'staged'} {b}")
    writer.close()
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
