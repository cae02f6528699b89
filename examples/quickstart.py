"""Transcode a file of length-delimited OpenRTB BidRequestEvent records to Parquet.

python benchmarks/corpus.py --n 20000 --out out/events.u32le
python examples/quickstart.py out/events.u32le --out out/bids.parquet
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import wirearrow as wa

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("events", help="a file of length-delimited BidRequestEvent records")
    ap.add_argument("--framing", default="u32le", choices=["varint", "u32le", "u32be"])
    ap.add_argument("--out", default="out/bids.parquet")
    args = ap.parse_args(argv)

    schema = wa.Schema.from_proto(
        HERE / "schema" / "bidrequest.proto", "BidRequestEvent", import_paths=[HERE / "schema"]
    )
    tc = wa.Transcoder(
        schema,
        columns=[
            "id",
            wa.Column("imp[*].id", name="imp_id"),
            wa.Column("imp[*].bidfloor", name="bidfloor"),
            wa.Column("imp[*].pmp.deals[*].id", name="deal_id"),
            wa.Column("device.geo.country", name="country"),
            wa.Column("timestamp", name="event_time"),
        ],
        on_error="dead_letter",
    )
    print(tc.arrow_schema)

    started = time.perf_counter()
    records = wa.read_delimited(args.events, framing=args.framing)
    batch = tc.transcode(records)
    elapsed = time.perf_counter() - started

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_batches([batch]), args.out)
    s = tc.stats
    print(
        f"{s.records_in:,} records -> {s.rows_out:,} rows ({s.records_failed} failed) "
        f"in {elapsed * 1000:.0f} ms ({s.records_in / elapsed:,.0f} records/s); wrote {args.out}"
    )
    dead = tc.dead_letters()
    if dead.num_rows:
        print(dead.select(["index", "offset", "path", "reason"]).to_pandas().head())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
