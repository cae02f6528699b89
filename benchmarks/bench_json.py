"""protojson -> Arrow: wirearrow's JSON input against what users would pick instead.

Every row runs in this one process, single-threaded, on the same corpus
(``corpus.generate(n, seed)``, OpenRTB-style ``BidRequestEvent``) written as protojson with
``json_format.MessageToJson(indent=None)`` (~1.7 KB a record), each starting from what it
already holds, untimed:

* the baseline: ``json_format.Parse`` + ``SerializeToString`` per record, then wirearrow's
  binary transcode of the bytes (what one does today to get protojson into wirearrow);
* wirearrow ``transcode(records, format="json")`` from a ``list[str]`` and from a
  ``pa.StringArray``, whole message and a 4-column flat plan;
* ``JsonReader.to_wire`` alone (JSON -> wire bytes, no Arrow), ``json.loads`` alone (the
  parser of ``json_format.Parse``) and ``orjson.loads`` alone (the parser wirearrow uses
  when it gives what ``json.loads`` gives: the floor of this design);
* ``pyarrow.json.read_json`` of the same NDJSON (schema inferred: it knows no protojson
  rules, int64 strings stay strings, enums names, Timestamps text).

Before timing, wirearrow's JSON output is checked against its binary output (same Arrow).
Timing is bench_flat's: autorange, ``--repeat`` measurements with the GC off, median.

    python benchmarks/bench_json.py [--n 20000] [--quick] [--only REGEX] [--json out.json]
"""

from __future__ import annotations

import argparse
import io
import json
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
from bench_flat import import_wirearrow, library_versions, machine_info, measure

FLAT = ["id", "imp[*].id", "imp[*].bidfloor", "device.geo.country"]


@dataclass
class Corpus:
    texts: list[str]
    binary: list[bytes]
    ndjson: bytes


@dataclass
class Result:
    method: str
    note: str = ""
    status: str = "ok"
    error: str | None = None
    number: int = 0
    times: list[float] = field(default_factory=list)
    msg_per_s: float | None = None
    mb_per_s: float | None = None
    ratio: float | None = None
    check: str = ""


def _transcoder(columns: list[str] | None = None):
    wa = import_wirearrow()
    schema = wa.Schema.from_proto(
        str(corpus.PROTO_FILE), corpus.MESSAGE_NAME, import_paths=[str(corpus.SCHEMA_DIR)]
    )
    return wa.Transcoder(schema, columns)


def setup_baseline(columns: list[str] | None):
    def setup(c: Corpus):
        from google.protobuf import json_format

        pool, cls = corpus.load_schema()
        tc = _transcoder(columns)

        def run() -> pa.RecordBatch:
            wire = [json_format.Parse(t, cls(), descriptor_pool=pool).SerializeToString()
                    for t in c.texts]
            return tc.transcode(pa.array(wire, pa.binary()))

        return run, "baseline"

    return setup


def setup_wirearrow(form: str, columns: list[str] | None):
    def setup(c: Corpus):
        tc = _transcoder(columns)
        records = pa.array(c.texts, pa.utf8()) if form == "array" else c.texts
        want = tc.transcode(pa.array(c.binary, pa.binary()))
        got = tc.transcode(records, format="json")
        check = "same Arrow as binary" if got.equals(want) else "DIFFERENT from binary"
        return (lambda: tc.transcode(records, format="json")), check

    return setup


def setup_to_wire(c: Corpus):
    import_wirearrow()
    from wirearrow.sources.protojson import JsonReader

    reader = JsonReader(_transcoder().schema.descriptor)
    return (lambda: reader.to_wire(c.texts)), ""


def setup_json_loads(c: Corpus):
    return (lambda: [json.loads(t) for t in c.texts]), "no protobuf rules"


def setup_orjson(c: Corpus):
    import orjson

    return (lambda: [orjson.loads(t) for t in c.texts]), "no protobuf rules"


def setup_pyarrow_json(c: Corpus):
    from pyarrow import json as pj

    return (lambda: pj.read_json(io.BytesIO(c.ndjson))), "inferred schema, no protojson rules"


ROWS: list[tuple[str, Callable[[Corpus], tuple[Callable[[], Any], str]]]] = [
    ("json_format.Parse + SerializeToString + wirearrow transcode", setup_baseline(None)),
    ("wirearrow transcode(format='json'), list[str]", setup_wirearrow("list", None)),
    ("wirearrow transcode(format='json'), StringArray", setup_wirearrow("array", None)),
    ("json_format.Parse + ... + wirearrow transcode, flat 4 columns", setup_baseline(FLAT)),
    ("wirearrow transcode(format='json'), flat 4 columns", setup_wirearrow("list", FLAT)),
    ("wirearrow JsonReader.to_wire (JSON -> wire bytes only)", setup_to_wire),
    ("json.loads loop (json_format's parser)", setup_json_loads),
    ("orjson.loads loop", setup_orjson),
    ("pyarrow.json.read_json (NDJSON)", setup_pyarrow_json),
]


def build_corpus(n: int, seed: int) -> Corpus:
    from google.protobuf import json_format

    _, cls = corpus.load_schema()
    binary = corpus.generate(n, seed)
    texts = [json_format.MessageToJson(cls.FromString(b), indent=None) for b in binary]
    return Corpus(texts, binary, "\n".join(texts).encode())


def run(args: argparse.Namespace) -> list[Result]:
    c = build_corpus(args.n, args.seed)
    payload = len(c.ndjson)
    pattern = re.compile(args.only) if args.only else None
    results = []
    for method, setup in ROWS:
        baseline = method.startswith("json_format")
        if pattern and not pattern.search(method) and not baseline:
            continue
        result = Result(method)
        try:
            runner, result.check = setup(c)
            result.number, result.times, _ = measure(
                runner, min_time=args.min_time, repeat=args.repeat, max_time=args.max_time
            )
        except ImportError as exc:
            result.status, result.error = "not available", str(exc)
        except Exception as exc:
            result.status, result.error = "error", f"{type(exc).__name__}: {exc}"
        if result.times:
            median = statistics.median(result.times)
            result.msg_per_s = len(c.texts) / median
            result.mb_per_s = payload / median / 1e6
        results.append(result)
    # each row against the baseline of its plan (whole message or flat)
    bases = [r for r in results if r.method.startswith("json_format") and r.msg_per_s]
    for r in results:
        flat = "flat" in r.method
        base = next((b for b in bases if ("flat" in b.method) == flat), None)
        if base is not None and r.msg_per_s:
            r.ratio = r.msg_per_s / base.msg_per_s
    return results


def render(results: Sequence[Result]) -> str:
    lines = [
        "| method | records/s | MB/s of JSON | x json_format path | check |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        if r.status != "ok":
            lines.append(f"| {r.method} | {r.status}: {r.error} | | | |")
            continue
        ratio = f"{r.ratio:.2f}" if r.ratio is not None else ""
        lines.append(
            f"| {r.method} | {r.msg_per_s:,.0f} | {r.mb_per_s:,.1f} | {ratio} | {r.check} |"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=None, help="records (default 20,000; 2,000 --quick)")
    p.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    p.add_argument("--quick", action="store_true", help="small corpus, short runs: a smoke test")
    p.add_argument("--repeat", type=int, default=None, help="measurements per row (default 5)")
    p.add_argument("--min-time", type=float, default=None, help="seconds per measurement")
    p.add_argument("--max-time", type=float, default=60.0, help="budget per row (seconds)")
    p.add_argument("--only", default=None, help="regex: rows whose method matches (+ baselines)")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args(argv)
    args.n = args.n or (2_000 if args.quick else 20_000)
    args.repeat = args.repeat or (3 if args.quick else 5)
    args.min_time = args.min_time or (0.05 if args.quick else 0.2)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = conditions.begin(quick=args.quick, busy_cores=1, compared=("orjson",))
    results = run(args)
    print(f"{args.n:,} records, seed {args.seed}; {machine_info()}")
    print(render(results))
    targets = []
    for r in results:
        if r.method.startswith("wirearrow transcode") and r.ratio is not None:
            verdict = "met" if r.ratio >= 5 else "NOT met"
            targets.append(f"target {r.method} >= 5x json_format path: {r.ratio:.2f}x ({verdict})")
    for line in targets:
        print(line)
    if args.json is not None:
        payload = {"benchmark": "bench_json", "conditions": conditions.end(started),
                   "n": args.n, "machine": machine_info(), "versions": library_versions(),
                   "results": [asdict(r) for r in results], "targets": targets}
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
