"""Confluent framing costs (next to) nothing: the same records with and without the prefix.

    python benchmarks/bench_confluent.py [--n 50000] [--rounds 15]

Each round times one transcode of the bare records and one of the same records behind a
Confluent prefix (framing="confluent"), alternating, so both see the same machine load;
it prints the best and median per side and their ratios (prefixed / bare; 1.00 = as fast),
for a flat and a whole-message plan. It reports, it does not test.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time

import pyarrow as pa

import corpus
from bench_flat import PLANS, confluent_prefix, import_wirearrow


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    wa = import_wirearrow()
    schema = wa.Schema.from_proto(
        str(corpus.PROTO_FILE), corpus.MESSAGE_NAME, import_paths=[str(corpus.SCHEMA_DIR)]
    )
    messages = corpus.generate(args.n, seed=args.seed)
    prefix = confluent_prefix(schema)
    bare = pa.array(messages, pa.binary())
    framed = pa.array([prefix + m for m in messages], pa.binary())
    schemas = {1: schema}
    print(f"{args.n:,} {corpus.MESSAGE_NAME} records, prefix {prefix.hex()}, {args.rounds} rounds")
    print(f"{'plan':10} {'bare best':>10} {'prefixed best':>14} {'ratio':>6} "
          f"{'bare median':>12} {'prefixed median':>16} {'ratio':>6}")
    for plan, columns in (("flat-4", PLANS["flat-4"]), ("flat-15", PLANS["flat-15"]),
                          ("nested", None)):
        tc = wa.Transcoder(schema, None if columns is None else list(columns))
        runs = {
            "bare": lambda tc=tc: tc.transcode(bare),
            "prefixed": lambda tc=tc: tc.transcode(framed, framing="confluent", schemas=schemas),
        }
        assert runs["bare"]().equals(runs["prefixed"]())
        times: dict[str, list[float]] = {"bare": [], "prefixed": []}
        gc.disable()
        for _ in range(args.rounds):
            for name, run in runs.items():
                started = time.perf_counter()
                run()
                times[name].append(time.perf_counter() - started)
        gc.enable()
        b, p = times["bare"], times["prefixed"]
        print(f"{plan:10} {min(b) * 1e3:8.1f}ms {min(p) * 1e3:12.1f}ms {min(p) / min(b):6.3f} "
              f"{statistics.median(b) * 1e3:10.1f}ms {statistics.median(p) * 1e3:14.1f}ms "
              f"{statistics.median(p) / statistics.median(b):6.3f}")


if __name__ == "__main__":
    main()
