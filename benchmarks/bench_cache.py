"""The parser cache: a new process's first batch with and without a saved profile, the
steady state, and compile time.

Single process, single thread, the flat-15 plan of bench_flat and whole messages, on the
neutral corpus (``corpus.generate``) and the skewed one (``corpus.generate_skewed``:
producer field order, large strings, many absent fields).

* steady state: a transcoder on a fresh ``ParserCache()`` (each batch sized by the one
  before it, what every transcoder gets) against one on a cache loaded from a saved profile
  (``ParserCache.load``); rows take turns batch by batch (so that drift of the machine and
  allocator state hit all rows alike) and the median batch time is reported;
* first batch: a new process's first batch (a fresh cache and transcoder per batch, the
  compile not timed, the buffer pool emptied), with nothing known against a cache loaded
  from the saved profile, whose sizes allocate every buffer once, at its final size.

Compile time: building N transcoders of the plan with one shared cache (one compile) vs a
new cache each (N compiles).

Run ``python benchmarks/bench_cache.py [--n 20000] [--rounds 7] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa

import corpus
from bench_flat import PLANS, import_wirearrow


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=20_000, help="records per batch")
    p.add_argument("--batches", type=int, default=5, help="batches per round")
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument(
        "--plans", default="flat-15,nested", help=f"comma-separated: {', '.join(PLANS)}, nested"
    )
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    wa = import_wirearrow()
    schema = wa.Schema.from_proto(
        str(corpus.PROTO_FILE), corpus.MESSAGE_NAME, import_paths=[str(corpus.SCHEMA_DIR)]
    )
    report: dict = {"n": args.n, "plans": {}}
    corpora = {
        name: pa.array(gen(args.n, 0), pa.binary())
        for name, gen in (("neutral", corpus.generate), ("skewed", corpus.generate_skewed))
    }
    for plan in args.plans.split(","):
        columns = list(PLANS[plan]) if plan != "nested" else None
        report["plans"][plan] = {
            name: run(wa, schema, columns, batch, args) for name, batch in corpora.items()
        }
        for name, row in report["plans"][plan].items():
            print(f"{plan:8s} {name:8s} {row['line']}")
    columns = list(PLANS["flat-15"])
    k = 50
    t0 = time.perf_counter()
    shared = wa.ParserCache()
    for _ in range(k):
        wa.Transcoder(schema, columns, cache=shared)
    with_cache = (time.perf_counter() - t0) / k
    t0 = time.perf_counter()
    for _ in range(k):
        wa.Transcoder(schema, columns, cache=wa.ParserCache())
    without = (time.perf_counter() - t0) / k
    report["compile_ms_per_transcoder"] = {
        "shared_cache": with_cache * 1e3,
        "no_cache": without * 1e3,
    }
    print(
        f"transcoder construction: {without * 1e3:.3f} ms each without a shared cache "
        f"(one compile each), {with_cache * 1e3:.3f} ms with one ({k} transcoders, 1 compile)"
    )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


def run(wa, schema, columns, batch, args) -> dict:
    """Steady state (fresh / loaded) and first batch (cold / loaded) on one plan and corpus."""
    recorder = wa.ParserCache()
    wa.Transcoder(schema, columns, cache=recorder).transcode(batch)
    with tempfile.TemporaryDirectory() as tmp:
        saved = Path(tmp) / "profile.json"
        recorder.save(saved)
        tcs = {
            "fresh": wa.Transcoder(schema, columns, cache=wa.ParserCache()),
            "loaded": wa.Transcoder(schema, columns, cache=wa.ParserCache.load(saved)),
        }
        reference = tcs["fresh"].transcode(batch)
        for tc in tcs.values():
            assert tc.transcode(batch).equals(reference)
        times = alternate(tcs, lambda tc: tc, args.rounds * args.batches, batch)
        rates = {k: args.n / statistics.median(v) for k, v in times.items()}
        # The first batch in a fresh process, compile excluded.
        makers = {
            "cold": lambda: wa.ParserCache(),
            "profile loaded": lambda: wa.ParserCache.load(saved),
        }

        def first_batch(make):
            tc = wa.Transcoder(schema, columns, cache=make())
            # A new process starts with an empty buffer pool (docs/memory.md).
            limit = wa.buffer_pool()["limit"]
            wa.buffer_pool(limit=0)
            wa.buffer_pool(limit=limit)
            return tc

        cold = alternate(makers, first_batch, args.rounds * 2, batch)
    cold_rates = {k: args.n / statistics.median(v) for k, v in cold.items()}
    steady = rates["loaded"] / rates["fresh"] - 1
    gain = cold_rates["profile loaded"] / cold_rates["cold"] - 1
    row = {
        "bytes_per_record": batch.nbytes / len(batch),
        "msg_per_s": {k: round(v) for k, v in rates.items()},
        "loaded_vs_fresh": round(steady, 4),
        "first_batch_msg_per_s": {k: round(v) for k, v in cold_rates.items()},
        "first_batch_loaded_vs_cold": round(gain, 4),
    }
    row["line"] = (
        f"{batch.nbytes / len(batch):6.0f} B/msg  steady: "
        + "  ".join(f"{k} {v / 1e6:.3f}M msg/s" for k, v in rates.items())
        + f"  loaded/fresh {steady:+.1%}"
        + f"\n{'':17s} first batch: cold {cold_rates['cold'] / 1e6:.3f}M msg/s, "
        + f"profile loaded {cold_rates['profile loaded'] / 1e6:.3f}M ({gain:+.1%})"
    )
    return row


def alternate(rows: dict, prepare, turns: int, batch) -> dict[str, list[float]]:
    """Seconds of ``prepare(rows[key]).transcode(batch)`` per row, one batch per row in
    turn, the starting row rotating: allocator and cache state left by one row's batch lands
    on every row alike. ``prepare`` is not timed."""
    keys = list(rows)
    times: dict[str, list[float]] = {k: [] for k in keys}
    for r in range(turns):
        for key in keys[r % len(keys) :] + keys[: r % len(keys)]:
            tc = prepare(rows[key])
            t0 = time.perf_counter()
            tc.transcode(batch)
            times[key].append(time.perf_counter() - t0)
    return times


if __name__ == "__main__":
    raise SystemExit(main())
