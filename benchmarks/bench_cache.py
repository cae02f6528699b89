"""The parser cache: throughput untuned / tuned / from a saved profile, and compile time.

Single process, single thread, flat-15 plan of bench_flat, on the neutral corpus
(``corpus.generate``) and the skewed one (``corpus.generate_skewed``: producer field order,
large strings, many absent fields). Every row decodes the same batches; rows take turns batch
by batch (so that drift of the machine and allocator state hit all rows alike) and the median
batch time is reported.

* untuned: ``ParserCache(tune="off")`` (what a transcoder without ``cache=`` gets);
* tuned: ``ParserCache(tune="auto")`` (1 % sampling), warmed up until it has retuned;
* loaded: a fresh cache from the tuned one's ``save()``, as a new job would start.

Cold start: the first batch of a new process (a fresh cache and transcoder per batch, the
compile not timed, the buffer pool emptied), with nothing known (``tune="off"``) against a cache loaded from the
saved profile, whose sizes allocate every buffer once, at its final size.

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
    shared = wa.ParserCache(tune="off")
    for _ in range(k):
        wa.Transcoder(schema, columns, cache=shared)
    with_cache = (time.perf_counter() - t0) / k
    t0 = time.perf_counter()
    for _ in range(k):
        wa.Transcoder(schema, columns, cache=wa.ParserCache(tune="off"))
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
    """Steady state (untuned / tuned / loaded) and cold start on one plan and corpus."""
    tuned_cache = wa.ParserCache(tune="auto", retune_every=args.n)
    tcs = {
        "untuned": wa.Transcoder(schema, columns, cache=wa.ParserCache(tune="off")),
        "tuned": wa.Transcoder(schema, columns, cache=tuned_cache),
    }
    for _ in range(3):
        tcs["tuned"].transcode(batch)  # profile, retune
    assert tuned_cache.stats()["plans"][0]["tuning_version"] >= 1
    with tempfile.TemporaryDirectory() as tmp:
        tuned_cache.save(Path(tmp) / "profile.json")
        loaded = wa.ParserCache.load(Path(tmp) / "profile.json")
    tcs["loaded"] = wa.Transcoder(schema, columns, cache=loaded)
    reference = tcs["untuned"].transcode(batch)
    for tc in tcs.values():
        assert tc.transcode(batch).equals(reference)
    times: dict[str, list[float]] = {k: [] for k in tcs}
    keys = list(tcs)
    for r in range(args.rounds * args.batches):
        # one batch per row in turn, the starting row rotating: allocator and cache
        # state left by one row's batch lands on every row alike
        for key in keys[r % 3 :] + keys[: r % 3]:
            t0 = time.perf_counter()
            tcs[key].transcode(batch)
            times[key].append(time.perf_counter() - t0)
    rates = {k: args.n / statistics.median(v) for k, v in times.items()}
    plan_stats = tuned_cache.stats()["plans"][0]
    row = {
        "bytes_per_record": batch.nbytes / len(batch),
        "msg_per_s": {k: round(v) for k, v in rates.items()},
        "tuned_vs_untuned": round(rates["tuned"] / rates["untuned"] - 1, 4),
        "loaded_vs_untuned": round(rates["loaded"] / rates["untuned"] - 1, 4),
        "profiling_overhead_of_decode": plan_stats["profiling_overhead"],
    }
    row["line"] = (
        f"{batch.nbytes / len(batch):6.0f} B/msg  "
        + "  ".join(f"{k} {v / 1e6:.3f}M msg/s" for k, v in rates.items())
        + f"  tuned/untuned {rates['tuned'] / rates['untuned'] - 1:+.1%}"
        + f"  loaded/untuned {rates['loaded'] / rates['untuned'] - 1:+.1%}"
        + f"  walker/decode {plan_stats['profiling_overhead']:.2%}"
    )
    # Cold start: the first batch in a fresh process, compile excluded.
    with tempfile.TemporaryDirectory() as tmp:
        tuned_cache.save(Path(tmp) / "profile.json")
        cold: dict[str, list[float]] = {"cold": [], "cold, profile loaded": []}
        for r in range(args.rounds * 2):
            for key in list(cold)[r % 2 :] + list(cold)[: r % 2]:
                cache = (
                    wa.ParserCache(tune="off")
                    if key == "cold"
                    else wa.ParserCache.load(Path(tmp) / "profile.json")
                )
                tc = wa.Transcoder(schema, columns, cache=cache)
                # A new process starts with an empty buffer pool (docs/memory.md).
                limit = wa.buffer_pool()["limit"]
                wa.buffer_pool(limit=0)
                wa.buffer_pool(limit=limit)
                t0 = time.perf_counter()
                tc.transcode(batch)
                cold[key].append(time.perf_counter() - t0)
    cold_rates = {k: args.n / statistics.median(v) for k, v in cold.items()}
    gain = cold_rates["cold, profile loaded"] / cold_rates["cold"] - 1
    row["cold_msg_per_s"] = {k: round(v) for k, v in cold_rates.items()}
    row["cold_loaded_vs_cold"] = round(gain, 4)
    row["line"] += (
        f"\n{'':17s} first batch: cold {cold_rates['cold'] / 1e6:.3f}M msg/s, "
        f"profile loaded {cold_rates['cold, profile loaded'] / 1e6:.3f}M ({gain:+.1%})"
    )
    return row


if __name__ == "__main__":
    raise SystemExit(main())
