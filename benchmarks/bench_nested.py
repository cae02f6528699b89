"""Nested decode: protobuf wire bytes -> Arrow holding the whole message, side by side.

Every row runs in this one process, single-threaded, on the same in-memory corpus as
``bench_flat.py`` (``corpus.generate(n, seed)``, OpenRTB-style ``BidRequestEvent``):

* wirearrow nested (``Transcoder(schema)`` without columns), from a ``pa.BinaryArray`` (fast
  path) and from a ``list[bytes]``;
* ptars (Rust, bytes -> nested Arrow), from a list and from a BinaryArray;
* pybufarrow's nested mode (``append`` per message, then ``flush``);
* protarrow ``messages_to_record_batch`` on messages parsed beforehand, and the same with
  the parse included (what bytes -> Arrow costs with it);
* the protobuf runtime's ``FromString`` alone (no Arrow at all);
* a C loop that walks every tag of every nested message and stores nothing
  (``tagwalk.pyx``, compiled at run time into a temporary directory): the ceiling for any
  decoder that touches every field.

Timing, table and ``--json`` follow ``bench_flat.py`` (whose machinery this reuses). The
target lines compare wirearrow from a BinaryArray with ptars from a BinaryArray (>= 3x) and
the tag walk with wirearrow (<= 2.5x, issue 34 item 2). Run ``python benchmarks/bench_nested.py --help``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import re
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

import conditions
import corpus
from bench_flat import (
    BINARY_ARRAY,
    COMPARED,
    LIST,
    Benchmark,
    Corpus,
    Result,
    Runner,
    _find,
    _fmt_rate,
    import_wirearrow,
    print_header,
    run_benchmark,
    setup_protobuf_parse,
    setup_ptars,
    setup_pybufarrow_nested,
    write_json,
)

NESTED = "nested"
TAGWALK = "C tag walk"
TAGWALK_SOURCE = Path(__file__).resolve().parent / "tagwalk.pyx"


# --------------------------------------------------------------------------- rows


def setup_wirearrow(form: str):
    def setup(c: Corpus) -> Runner:
        wa = import_wirearrow()
        schema = wa.Schema.from_proto(
            str(corpus.PROTO_FILE), corpus.MESSAGE_NAME, import_paths=[str(corpus.SCHEMA_DIR)]
        )
        tc = wa.Transcoder(schema)  # no columns: the whole message, one row per record
        data = c.array if form == BINARY_ARRAY else c.messages
        return lambda: tc.transcode(data)

    return setup


def setup_protarrow_convert(c: Corpus) -> Runner:
    import protarrow

    _, cls = corpus.load_schema()
    parsed = [cls.FromString(m) for m in c.messages]  # untimed: conversion alone
    return lambda: protarrow.messages_to_record_batch(parsed, cls)


def setup_protarrow_total(c: Corpus) -> Runner:
    import protarrow

    _, cls = corpus.load_schema()
    from_string, messages = cls.FromString, c.messages
    return lambda: protarrow.messages_to_record_batch([from_string(m) for m in messages], cls)


def build_tagwalk(build_dir: str) -> ModuleType:
    """Compile tagwalk.pyx (-O3, as wirearrow's own extensions) and import it."""
    from Cython.Build import cythonize
    from setuptools import Distribution, Extension

    src = Path(build_dir) / "tagwalk.pyx"
    shutil.copy(TAGWALK_SOURCE, src)
    ext = Extension("tagwalk", [str(src)], extra_compile_args=["-O3"])
    with contextlib.redirect_stdout(io.StringIO()):
        modules = cythonize([ext], quiet=True, compiler_directives={"language_level": 3})
        dist = Distribution({"ext_modules": modules, "script_name": "bench_nested.py"})
        cmd = dist.get_command_obj("build_ext")
        cmd.build_lib = cmd.build_temp = build_dir
        dist.run_command("build_ext")
    spec = importlib.util.spec_from_file_location("tagwalk", cmd.get_ext_fullpath("tagwalk"))
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def walk_tables(descriptor: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dense start, dense length, child node) of every message type reachable from the
    root: child[dense[m] + number] is the node of sub-message field `number`, else -1."""
    nodes: dict[str, int] = {descriptor.full_name: 0}
    order = [descriptor]
    rows: list[list[int]] = []
    for message in order:  # grows while iterating: breadth-first over message fields
        width = max((f.number for f in message.fields), default=0) + 1
        row = [-1] * width
        for f in message.fields:
            sub = f.message_type
            if sub is None:
                continue
            if sub.full_name not in nodes:
                nodes[sub.full_name] = len(order)
                order.append(sub)
            row[f.number] = nodes[sub.full_name]
        rows.append(row)
    lengths = np.array([len(r) for r in rows], dtype=np.int32)
    starts = np.zeros(len(rows), dtype=np.int32)
    np.cumsum(lengths[:-1], out=starts[1:])
    return starts, lengths, np.array([x for r in rows for x in r], dtype=np.int32)


def setup_tagwalk(build_dir: str):
    def setup(c: Corpus) -> Runner:
        walker = build_tagwalk(build_dir)
        _, cls = corpus.load_schema()
        dense, dense_len, child = walk_tables(cls.DESCRIPTOR)
        _, offsets_buf, data_buf = c.array.buffers()
        offsets = np.frombuffer(offsets_buf, dtype=np.int32)[: c.n + 1].astype(np.int64)
        data = np.frombuffer(data_buf, dtype=np.uint8)
        return lambda: walker.walk_all(data, offsets, dense, dense_len, child)

    return setup


def all_benchmarks(build_dir: str) -> list[Benchmark]:
    whole = "full message as nested Arrow"
    return [
        Benchmark(
            "wirearrow", NESTED, BINARY_ARRAY, "wirearrow", setup_wirearrow(BINARY_ARRAY), whole
        ),
        Benchmark("wirearrow", NESTED, LIST, "wirearrow", setup_wirearrow(LIST), whole),
        Benchmark("ptars", NESTED, BINARY_ARRAY, "ptars", setup_ptars(BINARY_ARRAY), whole),
        Benchmark("ptars", NESTED, LIST, "ptars", setup_ptars(LIST), whole),
        Benchmark(
            "pybufarrow nested",
            NESTED,
            LIST,
            "pybufarrow",
            setup_pybufarrow_nested,
            "HyperType; one ctypes call per message; absent fields read as defaults",
        ),
        Benchmark(
            "protarrow convert",
            NESTED,
            "parsed messages",
            "protarrow",
            setup_protarrow_convert,
            "messages_to_record_batch on messages parsed before timing",
        ),
        Benchmark(
            "protarrow parse+convert",
            NESTED,
            LIST,
            "protarrow",
            setup_protarrow_total,
            "FromString on every message, then messages_to_record_batch",
        ),
        Benchmark(
            "protobuf FromString",
            "parse only",
            LIST,
            "protobuf",
            setup_protobuf_parse,
            "no Arrow at all; each message dropped at once",
        ),
        Benchmark(
            TAGWALK,
            "walk only",
            BINARY_ARRAY,
            "Cython",
            setup_tagwalk(build_dir),
            "every tag of every nested message, nothing stored (the ceiling)",
        ),
    ]


# --------------------------------------------------------------------------- reporting


def render_table(results: Sequence[Result], baseline: Result) -> str:
    header = ("method", "plan", "input", "msg/s", "best", "MB/s", "x ptars", "rows", "out MB")
    rows: list[tuple[str, ...]] = []
    for r in results:
        lead = (r.method, r.plan, r.input_form)
        if r.status != "ok":
            label = "not available" if r.status == "unavailable" else "error"
            rows.append((*lead, f"{label} ({r.error})"))
            continue
        ratio = r.msg_per_s / baseline.msg_per_s if baseline.msg_per_s else None  # type: ignore[operator]
        rows.append(
            (
                *lead,
                _fmt_rate(r.msg_per_s),
                _fmt_rate(r.best_msg_per_s),
                f"{r.mb_per_s:,.0f}" if r.mb_per_s is not None else "-",
                f"{ratio:.2f}" if ratio is not None else "-",
                f"{r.rows:,}" if r.rows is not None else "-",
                f"{r.output_bytes / 1e6:.1f}" if r.output_bytes is not None else "-",
            )
        )
    full = [header, *(row for row in rows if len(row) == len(header))]
    widths = [max(len(row[i]) for row in full) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        cells = [
            row[i].rjust(widths[i]) if i >= 3 else row[i].ljust(widths[i])
            for i in range(min(len(row), len(header)))
        ]
        return "  ".join(cells).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), sep, *map(line, rows)])


def target_lines(results: Sequence[Result]) -> list[str]:
    wa = _find(results, "wirearrow", NESTED, BINARY_ARRAY)
    wa_list = _find(results, "wirearrow", NESTED, LIST)
    pt = _find(results, "ptars", NESTED, BINARY_ARRAY)
    pt_list = _find(results, "ptars", NESTED, LIST)
    walk = _find(results, TAGWALK, "walk only", BINARY_ARRAY)

    def ratio(a: Result, b: Result, best: bool = False) -> str:
        if a.msg_per_s is None or b.msg_per_s is None:
            missing = a if a.msg_per_s is None else b
            return f"n/a ({missing.method} {missing.input_form}: {missing.status})"
        if best:
            return f"{(a.best_msg_per_s or 0) / (b.best_msg_per_s or 1):.2f}x"
        return f"{a.msg_per_s / b.msg_per_s:.2f}x"

    return [
        f"nested decode, wirearrow / ptars (BinaryArray): {ratio(wa, pt)} (target >= 3x)"
        f"  [best vs best: {ratio(wa, pt, best=True)};"
        f" list[bytes] vs list[bytes]: {ratio(wa_list, pt_list)}]",
        f"tag walk / wirearrow nested (BinaryArray): {ratio(walk, wa)} (target <= 2.5x)"
        f"  [best vs best: {ratio(walk, wa, best=True)}]",
    ]


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="Nested decode (bytes -> Arrow, whole message): wirearrow vs alternatives."
    )
    p.add_argument(
        "--records", type=int, default=None, help="messages (default 50,000; 5,000 --quick)"
    )
    p.add_argument("--seed", type=int, default=0, help="corpus seed (default 0)")
    p.add_argument("--quick", action="store_true", help="small corpus, short runs: a smoke test")
    p.add_argument("--repeat", type=int, default=None, help="measurements per row (default 7)")
    p.add_argument(
        "--min-time", type=float, default=None, help="seconds per measurement (default 0.3)"
    )
    p.add_argument(
        "--max-time", type=float, default=None, help="seconds budget per row (default 20)"
    )
    p.add_argument("--only", default=None, help="regex: run rows whose method matches")
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = p.parse_args(argv)
    quick = args.quick
    args.records = args.records if args.records is not None else (5_000 if quick else 50_000)
    args.repeat = args.repeat or (3 if quick else 7)
    args.min_time = args.min_time or (0.05 if quick else 0.3)
    args.max_time = args.max_time or (2.0 if quick else 20.0)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.started = conditions.begin(quick=args.quick, busy_cores=1, compared=(*COMPARED, "Cython"))
    c = Corpus.from_messages(corpus.generate(args.records, args.seed))
    machine, versions = print_header(c, args)
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="wirearrow-tagwalk-") as build_dir:
        benchmarks = [
            b for b in all_benchmarks(build_dir) if not args.only or re.search(args.only, b.method)
        ]
        for b in benchmarks:
            print(f"  running {b.key} ...", file=sys.stderr, flush=True)
            r, out = run_benchmark(b, c, args)
            results.append(r)
            del out

    print(render_table(results, _find(results, "ptars", NESTED, BINARY_ARRAY)))
    print()
    for i, r in enumerate(results, 1):
        if r.note:
            print(f"  [{i}] {r.method} ({r.input_form}): {r.note}")
    print()
    targets = target_lines(results)
    for line in targets:
        print(line)
    if args.json:
        write_json(args, (machine, versions), c, results, targets, benchmark="bench_nested")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
