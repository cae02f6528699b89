"""Every message shape at every batch size, in one run: wirearrow against ptars, upb's parse
and the C tag walk, decode and encode, with the ratios side by side.

Shapes (``shapes.py``): ``small`` (~250 B, sparse scalars), ``medium`` (OpenRTB, ~1 KB),
``large`` (~85 KB, a repeated group of string-heavy spans), ``large-msg`` (the same
records, the group as a repeated sub-message), ``wide`` (146 fields, recursive, read whole
at ``max_depth=3``). Batch sizes: 1, 16 and a bulk batch (16,384 records; ``large`` and
``large-msg`` 1,024, ~85 MB, set by ``--large-bulk``).

Decode columns, time per record of each:

* ``wirearrow``: ``Transcoder(schema).transcode(BinaryArray)``, the whole message;
* ``ptars``: ``array_to_record_batch(BinaryArray)`` (Rust). ptars 0.0.25 does not read
  groups (an empty list in every record of ``large``): see ``large-msg`` for the same
  values as a sub-message, which it reads;
* ``upb``: the protobuf runtime's ``FromString`` on each record (no Arrow);
* ``tag walk``: ``tagwalk.pyx``, every tag of every message and group, nothing stored.

Ratios: ``x ptars`` and ``x upb`` are how many times faster wirearrow is; ``walk/wa`` is
wirearrow's time over the tag walk's (the target of issue 34: <= 2.5 on OpenRTB).

Encode columns (``--no-encode`` to skip): ``Transcoder.encode`` of wirearrow's own output,
the runtime's ``SerializeToString`` of parsed messages, ptars ``record_batch_to_array`` of
its own output; ``x ser`` and ``x ptars`` as above.

Timing: per cell, calls are grouped until one measurement lasts ``--min-time`` (the
calibration is the warm-up), then ``--repeat`` measurements are taken and the fastest
is kept (a shared VM only ever slows a run down), within ``--max-time`` a cell. Nothing
here asserts on a time. Run ``uptime`` first: on a busy machine the ratios say little.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

import shapes

HERE = Path(__file__).resolve().parent
BATCHES = (1, 16)


@dataclass
class Cell:
    shape: str
    batch: int
    method: str
    seconds: float | None  # per call, best of the repeats
    note: str = ""

    @property
    def per_record_us(self) -> float | None:
        return None if self.seconds is None else self.seconds / self.batch * 1e6


@dataclass
class Run:
    cells: list[Cell] = field(default_factory=list)

    def get(self, shape: str, batch: int, method: str) -> float | None:
        for c in self.cells:
            if (c.shape, c.batch, c.method) == (shape, batch, method):
                return c.seconds
        return None


def measure(fn: Callable[[], object], min_time: float, repeat: int, max_time: float) -> float:
    """Seconds of one call: the fastest of `repeat` timed groups of calls."""
    number = 1
    deadline = time.perf_counter() + max_time
    while True:  # calibration (and warm-up)
        t = _timed(fn, number)
        if t >= min_time or number >= 1 << 20:
            break
        number *= 2 if t * 2 >= min_time else 10
    best = t / number
    for _ in range(repeat):
        if time.perf_counter() > deadline:
            break
        best = min(best, _timed(fn, number) / number)
    return best


def _timed(fn: Callable[[], object], number: int) -> float:
    gc_on = gc.isenabled()
    gc.disable()
    try:
        t = time.perf_counter()
        for _ in range(number):
            fn()
        return time.perf_counter() - t
    finally:
        if gc_on:
            gc.enable()


def tag_walker(build_dir: str):
    from bench_nested import build_tagwalk

    return build_tagwalk(build_dir)


def walk_tables(descriptor) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from bench_nested import walk_tables as tables

    return tables(descriptor)


def run_shape(name: str, bulk: int, args: argparse.Namespace, walker, run: Run) -> None:
    import wirearrow as wa

    shape = shapes.SHAPES[name]
    cls = shape.message_class()
    records = shape.generate(bulk, args.seed)
    kw = {} if shape.max_depth is None else {"max_depth": shape.max_depth}
    tc = wa.Transcoder(wa.Schema.from_message(cls), **kw)
    handler = None
    try:
        import ptars

        handler = ptars.HandlerPool([cls.DESCRIPTOR.file]).get_for_message(cls.DESCRIPTOR)
    except ImportError as err:
        print(f"  ptars not available ({err})", file=sys.stderr)
    dense, dense_len, child = walk_tables(cls.DESCRIPTOR)
    size = sum(map(len, records)) / len(records)
    print(f"{name}: {shape.what}; {len(records):,} records, mean {size:,.0f} B", flush=True)
    for batch in sorted({b for b in (*BATCHES, bulk) if b <= bulk}):
        methods = _methods(tc, handler, walker, (dense, dense_len, child), cls, records[:batch],
                           args.encode)
        for method, fn in methods:
            note = ""
            try:
                seconds = measure(fn, args.min_time, args.repeat, args.max_time)
            except Exception as err:
                seconds, note = None, f"{type(err).__name__}: {err}"[:120]
            run.cells.append(Cell(name, batch, method, seconds, note))
        _print_row(run, name, batch, args.encode)


def _methods(tc, handler, walker, tables, cls, part: list[bytes],
             encode: bool) -> list[tuple[str, Callable[[], object]]]:
    """The timed calls of one batch (`part`), by column."""
    batch = len(part)
    arr = pa.array(part, pa.binary())
    _, off_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(off_buf, dtype=np.int32)[: batch + 1].astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8)
    from_string = cls.FromString
    out = tc.transcode(arr)
    methods: list[tuple[str, Callable[[], object]]] = [
        ("wirearrow", lambda: tc.transcode(arr)),
        ("upb", lambda: [from_string(m) for m in part]),
        ("tag walk", lambda: walker.walk_all(data, offsets, *tables)),
    ]
    ptars_out = None
    if handler is not None:
        ptars_out = handler.array_to_record_batch(arr)
        methods.insert(1, ("ptars", lambda: handler.array_to_record_batch(arr)))
    if encode:
        # Encode columns: each tool's own output back to bytes (the hook for issue 34's
        # encode targets: the same cells, in the same run as the decode ones).
        parsed = [from_string(m) for m in part]
        methods += [
            ("encode wirearrow", lambda: tc.encode(out)),
            ("encode upb", lambda: [m.SerializeToString() for m in parsed]),
        ]
        if ptars_out is not None:
            methods.append(("encode ptars", lambda: handler.record_batch_to_array(ptars_out)))
    return methods


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:6.2f}" if a and b else "     -"


def _us(s: float | None, batch: int) -> str:
    return f"{s / batch * 1e6:9.2f}" if s else "        -"


def _print_row(run: Run, shape: str, batch: int, encode: bool) -> None:
    g = lambda m: run.get(shape, batch, m)  # noqa: E731
    wa_, pt, upb, walk = g("wirearrow"), g("ptars"), g("upb"), g("tag walk")
    line = (f"  {batch:>6} | {_us(wa_, batch)} {_us(pt, batch)} {_us(upb, batch)} {_us(walk, batch)}"
            f" | {_ratio(pt, wa_)} {_ratio(upb, wa_)} {_ratio(wa_, walk)}")
    if encode:
        e_wa, e_upb, e_pt = g("encode wirearrow"), g("encode upb"), g("encode ptars")
        line += (f" | {_us(e_wa, batch)} {_us(e_upb, batch)} {_us(e_pt, batch)}"
                 f" | {_ratio(e_upb, e_wa)} {_ratio(e_pt, e_wa)}")
    print(line, flush=True)


def header(encode: bool) -> str:
    h = ("   batch |  wa us/r  ptars us/r  upb us/r  walk us/r |  x ptars  x upb walk/wa")
    if encode:
        h += " |  enc wa   enc upb  enc ptars |  x ser  x ptars"
    return h


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="+", default=list(shapes.SHAPES),
                        choices=list(shapes.SHAPES))
    parser.add_argument("--bulk", type=int, default=16384, help="the large batch size")
    parser.add_argument("--large-bulk", type=int, default=1024,
                        help="the large batch size of large / large-msg (~85 KB records)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-time", type=float, default=0.2)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--max-time", type=float, default=15.0)
    parser.add_argument("--no-encode", dest="encode", action="store_false")
    parser.add_argument("--json", help="write every cell here")
    args = parser.parse_args(argv)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    import wirearrow as wa

    versions = {"python": platform.python_version(), "pyarrow": pa.__version__,
                "wirearrow": getattr(wa, "__version__", "?")}
    try:
        import google.protobuf
        import ptars

        versions |= {"protobuf": google.protobuf.__version__,
                     "ptars": getattr(ptars, "__version__", "?")}
    except ImportError:
        pass
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.2f}' for x in load) if load else '?'}; "
          + ", ".join(f"{k} {v}" for k, v in versions.items()))
    print("us/r: microseconds a record (best of the repeats); x ptars / x upb / x ser: "
          "wirearrow's speed over theirs; walk/wa: wirearrow's time over the tag walk's")
    run = Run()
    with tempfile.TemporaryDirectory(prefix="wirearrow-tagwalk-") as build_dir:
        walker = tag_walker(build_dir)
        print(header(args.encode))
        for name in args.shapes:
            bulk = args.large_bulk if name.startswith("large") else args.bulk
            run_shape(name, bulk, args, walker, run)
    load_after = os.getloadavg() if hasattr(os, "getloadavg") else None
    if load_after:
        print(f"load average after the run: {' '.join(f'{x:.2f}' for x in load_after)}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"load": load, "load_after": load_after, "versions": versions,
             "cells": [asdict(c) | {"per_record_us": c.per_record_us} for c in run.cells]},
            indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
