"""Arrow -> protobuf wire bytes: wirearrow's encode against what users would pick instead.

Every row runs in this one process, single-threaded, on the same in-memory corpus, each
starting from what it already holds, untimed. ``--corpus openrtb`` (the default) is
``corpus.generate(n, seed)``, OpenRTB-style ``BidRequestEvent``, ~1 KB a message;
``--corpus deep`` is ``corpus_deep.generate(n, seed)``, OpenRTB 2.6 with custom value types
and more nesting, ~2.2 KB a message; ``--corpus wide`` is ``corpus_wide.generate(16)``, a
~150-field recursive message read whole with ``max_depth=3`` (~4,600 arrays), 16 records a
call: what a call costs beyond its records. The rows:

* wirearrow ``Transcoder.encode`` of the whole-message RecordBatch (``timestamp_unit="ns"``,
  the exact round trip) -> ``pa.BinaryArray``;
* the protobuf runtime (upb) serializing already-parsed messages: a
  ``SerializeToString()`` loop, and with ``deterministic=True`` (what wirearrow matches);
* ptars ``record_batch_to_array`` of its own nested RecordBatch;
* protarrow ``record_batch_to_messages`` of its own RecordBatch, then a serialize loop.

The runtime's plain ``SerializeToString()`` loop is the baseline of the ratio column; the
targets are wirearrow >= 4x the deterministic loop (the output wirearrow matches byte for
byte) and >= 3x ptars. Timing is bench_flat's: ``timeit``-style autorange (the
calibration is the warm-up), ``--repeat`` measurements with the GC off, median reported.
Before timing, each library's output is checked against the runtime's deterministic bytes
(equal, or only "same messages" when its field order or map order differs).

    python benchmarks/bench_encode.py [--corpus openrtb|deep] [--n 50000] [--quick] [--only REGEX]
                                      [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conditions
import corpus
import corpus_deep
import corpus_wide
from bench_flat import import_wirearrow, library_versions, machine_info, measure

Runner = Callable[[], Any]
# name -> (corpus module: generate(n, seed), load_schema(), PROTO_FILE, SCHEMA_DIR,
# MESSAGE_NAME; the Transcoder's options; messages by default, and with --quick)
CORPORA: dict[str, tuple[Any, dict[str, Any], int, int]] = {
    "openrtb": (corpus, {"timestamp_unit": "ns"}, 50_000, 5_000),
    "deep": (corpus_deep, {"timestamp_unit": "ns"}, 50_000, 5_000),
    # request-sized batches of a wide recursive message: the fixed cost of a call
    "wide": (corpus_wide, {"timestamp_unit": "ns", "max_depth": 3}, 16, 16),
}
SOURCE: Any = corpus  # the corpus of this run and its Transcoder options (set by run())
OPTIONS: dict[str, Any] = {}


@dataclass
class Row:
    method: str
    library: str
    setup: Callable[[list[bytes]], tuple[Runner, Callable[[Any], list[bytes]]]] = field(repr=False)
    note: str = ""


@dataclass
class Result:
    method: str
    note: str
    status: str = "ok"
    error: str | None = None
    number: int = 0
    times: list[float] = field(default_factory=list)
    msg_per_s: float | None = None
    mb_per_s: float | None = None
    ratio: float | None = None
    identical: str = ""


def _messages(records: list[bytes]) -> list[Any]:
    _, cls = SOURCE.load_schema()
    return [cls.FromString(r) for r in records]


def setup_wirearrow(records: list[bytes]):
    wa = import_wirearrow()
    schema = wa.Schema.from_proto(
        str(SOURCE.PROTO_FILE), SOURCE.MESSAGE_NAME, import_paths=[str(SOURCE.SCHEMA_DIR)]
    )
    tc = wa.Transcoder(schema, **OPTIONS)
    batch = tc.transcode(pa.array(records, pa.binary()))
    return (lambda: tc.encode(batch)), (lambda out: out.to_pylist())


def setup_runtime(deterministic: bool):
    def setup(records: list[bytes]):
        messages = _messages(records)
        if deterministic:
            return (lambda: [m.SerializeToString(deterministic=True) for m in messages]), list
        return (lambda: [m.SerializeToString() for m in messages]), list

    return setup


def setup_ptars(records: list[bytes]):
    import ptars

    _, cls = SOURCE.load_schema()
    handler = ptars.HandlerPool([cls.DESCRIPTOR.file]).get_for_message(cls.DESCRIPTOR)
    batch = handler.array_to_record_batch(pa.array(records, pa.binary()))
    return (lambda: handler.record_batch_to_array(batch)), (lambda out: out.to_pylist())


def setup_protarrow(records: list[bytes]):
    import protarrow

    _, cls = SOURCE.load_schema()
    batch = protarrow.messages_to_record_batch(_messages(records), cls)

    def run() -> list[bytes]:
        return [m.SerializeToString() for m in protarrow.record_batch_to_messages(batch, cls)]

    return run, list


ROWS = [
    Row("wirearrow encode (RecordBatch -> BinaryArray)", "wirearrow", setup_wirearrow),
    Row("protobuf SerializeToString() loop", "protobuf", setup_runtime(False), "baseline"),
    Row("protobuf SerializeToString(deterministic=True) loop", "protobuf", setup_runtime(True)),
    Row("ptars record_batch_to_array", "ptars", setup_ptars),
    Row("protarrow record_batch_to_messages + serialize", "protarrow", setup_protarrow),
]


def _same(got: list[bytes], want: list[bytes], cls: type) -> str:
    if got == want:
        return "identical"
    if len(got) == len(want) and all(
        cls.FromString(g) == cls.FromString(w) for g, w in zip(got, want, strict=True)
    ):
        return "same messages"
    return "DIFFERENT"


def run(args: argparse.Namespace) -> list[Result]:
    global SOURCE, OPTIONS
    SOURCE, OPTIONS, _, _ = CORPORA[args.corpus]
    records = SOURCE.generate(args.n, args.seed)
    payload = sum(map(len, records))
    _, cls = SOURCE.load_schema()
    canonical = [cls.FromString(r).SerializeToString(deterministic=True) for r in records]
    pattern = re.compile(args.only) if args.only else None
    results = []
    for row in ROWS:
        if pattern and not pattern.search(row.method) and row.note != "baseline":
            continue
        result = Result(row.method, row.note)
        try:
            runner, to_bytes = row.setup(records)
            result.identical = _same(to_bytes(runner()), canonical, cls)
            result.number, result.times, _ = measure(
                runner, min_time=args.min_time, repeat=args.repeat, max_time=args.max_time
            )
        except ImportError as exc:
            result.status, result.error = "unavailable", str(exc)
        except Exception as exc:
            result.status, result.error = "error", f"{type(exc).__name__}: {exc}"
        if result.times:
            median = statistics.median(result.times)
            result.msg_per_s = len(records) / median
            result.mb_per_s = payload / median / 1e6
        results.append(result)
    base = next((r for r in results if r.note == "baseline" and r.msg_per_s), None)
    for r in results:
        if base is not None and r.msg_per_s:
            r.ratio = r.msg_per_s / base.msg_per_s
    return results


def render(results: Sequence[Result]) -> str:
    lines = [
        "| method | msg/s | MB/s | ms a call | x runtime serialize | output |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        if r.status != "ok":
            lines.append(f"| {r.method} | {r.status}: {r.error} | | | | |")
            continue
        lines.append(
            f"| {r.method} | {r.msg_per_s:,.0f} | {r.mb_per_s:,.0f} | "
            f"{statistics.median(r.times) * 1e3:,.3f} | {r.ratio:.2f} | "
            f"{r.identical} |"
        )
    return "\n".join(lines)


def target_lines(results: Sequence[Result], corpus_name: str = "openrtb", n: int = 0) -> list[str]:
    """wirearrow against the deterministic serialize loop (>= 4x) and ptars (>= 3x); on the
    wide corpus, a 16-record call within 4 ms."""
    if corpus_name == "wide":
        found = next((r for r in results if r.method.startswith("wirearrow") and r.times), None)
        if found is None:
            return []
        ms = statistics.median(found.times) * 1e3
        verdict = "met" if ms <= 4.0 else "NOT met"
        return [f"target wirearrow encode of {n} records <= 4 ms: {ms:.2f} ms ({verdict})"]

    def rate(prefix: str) -> float | None:
        found = next((r for r in results if r.method.startswith(prefix) and r.msg_per_s), None)
        return found.msg_per_s if found is not None else None

    wirearrow = rate("wirearrow")
    lines = []
    for name, prefix, target in (
        ("runtime SerializeToString(deterministic=True)", "protobuf SerializeToString(det", 4.0),
        ("ptars", "ptars", 3.0),
    ):
        other = rate(prefix)
        if wirearrow is None or other is None:
            continue
        ratio = wirearrow / other
        verdict = "met" if ratio >= target else "NOT met"
        lines.append(f"target wirearrow encode >= {target:g}x {name}: {ratio:.2f}x ({verdict})")
    return lines


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=None,
                   help="messages (default 50,000, 5,000 with --quick; wide: 16)")
    p.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    p.add_argument("--corpus", choices=sorted(CORPORA), default="openrtb",
                   help="openrtb (corpus.py, default), deep (corpus_deep.py) or wide "
                   "(corpus_wide.py, 16 records a call, max_depth=3)")
    p.add_argument("--quick", action="store_true", help="small corpus, short runs: a smoke test")
    p.add_argument("--repeat", type=int, default=None, help="measurements per row (default 7)")
    p.add_argument("--min-time", type=float, default=None, help="seconds per measurement")
    p.add_argument("--max-time", type=float, default=30.0, help="budget per row (seconds)")
    p.add_argument("--only", default=None, help="regex: rows whose method matches (+ baseline)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args(argv)
    _, _, full, quick = CORPORA[args.corpus]
    args.n = args.n or (quick if args.quick else full)
    args.repeat = args.repeat or (3 if args.quick else 7)
    args.min_time = args.min_time or (0.05 if args.quick else 0.2)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = conditions.begin(quick=args.quick, busy_cores=1)
    results = run(args)
    print(f"{args.corpus} corpus, {args.n:,} messages, seed {args.seed}; {machine_info()}")
    print(f"load average {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(render(results))
    targets = target_lines(results, args.corpus, args.n)
    for line in targets:
        print(line)
    if args.json is not None:
        payload = {
            "benchmark": "bench_encode",
            "conditions": conditions.end(started),
            "corpus": args.corpus,
            "n": args.n,
            "machine": machine_info(),
            "versions": library_versions(),
            "results": [asdict(r) for r in results],
            "targets": targets,
        }
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
