"""The parser cache: throughput untuned / tuned / from a saved profile, and compile time.

Single process, single thread, flat-15 plan of bench_flat, on the neutral corpus
(``corpus.generate``) and the skewed one (``corpus.generate_skewed``: producer field order,
large strings, many absent fields). Every row decodes the same batches; rows take turns batch
by batch (so that drift of the machine and allocator state hit all rows alike) and the median
batch time is reported.

* untuned: ``ParserCache(tune="off")`` (what a transcoder without ``cache=`` gets);
* tuned: ``ParserCache(tune="auto")`` (1 % sampling), warmed up until it has retuned;
* loaded: a fresh cache from the tuned one's ``save()``, as a new job would start.

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
    p.add_argument("--plan", default="flat-15", choices=sorted(PLANS))
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args()
    wa = import_wirearrow()
    schema = wa.Schema.from_proto(
        str(corpus.PROTO_FILE), corpus.MESSAGE_NAME, import_paths=[str(corpus.SCHEMA_DIR)]
    )
    columns = list(PLANS[args.plan])
    report: dict = {"n": args.n, "plan": args.plan, "corpora": {}}
    for name, gen in (("neutral", corpus.generate), ("skewed", corpus.generate_skewed)):
        batch = pa.array(gen(args.n, 0), pa.binary())
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
        report["corpora"][name] = {
            "bytes_per_record": batch.nbytes / len(batch),
            "msg_per_s": {k: round(v) for k, v in rates.items()},
            "tuned_vs_untuned": round(rates["tuned"] / rates["untuned"] - 1, 4),
            "loaded_vs_untuned": round(rates["loaded"] / rates["untuned"] - 1, 4),
            "profiling_overhead_of_decode": plan_stats["profiling_overhead"],
        }
        print(
            f"{name:8s} {batch.nbytes / len(batch):6.0f} B/msg  "
            + "  ".join(f"{k} {v / 1e6:.3f}M msg/s" for k, v in rates.items())
            + f"  tuned/untuned {rates['tuned'] / rates['untuned'] - 1:+.1%}"
            + f"  loaded/untuned {rates['loaded'] / rates['untuned'] - 1:+.1%}"
            + f"  walker/decode {plan_stats['profiling_overhead']:.2%}"
        )
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


if __name__ == "__main__":
    raise SystemExit(main())
