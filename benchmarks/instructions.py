"""Instructions one call costs, counted by callgrind: deterministic where wall time on a
shared VM is not (the before / after figures of benchmarks/README.md come from here).

    python benchmarks/instructions.py --shape large --n 200 --what decode transcode

For each shape and call it runs valgrind twice on the same process script, once making
the call ``--calls`` times more than the other, after the same warm-up (the transcoder
built, one transcode done so that buffer sizes are learned), and prints the difference
divided by that number: the instructions of one call, the warm-up and the interpreter's
start cancelled out. ``decode`` is the core decoder call alone (as ``transcode`` makes
it), ``transcode`` the whole public call, ``encode`` ``Transcoder.encode`` of the batch's
output. Records come from ``shapes.py`` (same ``--n`` and ``--seed``, same bytes).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _child(shape_name: str, records: str, what: str, calls: int) -> None:
    sys.path.insert(0, str(HERE))
    import numpy as np
    import pyarrow as pa

    import shapes
    import wirearrow as wa
    from wirearrow._core.decoder import POLICY_SKIP, decode

    shape = shapes.SHAPES[shape_name]
    with pa.memory_map(records) as source:
        arr = pa.ipc.open_file(source).read_all().column(0).combine_chunks()
    n = len(arr)
    kw = {} if shape.max_depth is None else {"max_depth": shape.max_depth}
    tc = wa.Transcoder(wa.Schema.from_message(shape.message_class()), **kw)
    batch = tc.transcode(arr)
    if what == "decode":
        _, offsets, data = arr.buffers()
        off = np.frombuffer(offsets, dtype=np.int32)[: n + 1].astype(np.int64)
        raw = np.frombuffer(data, dtype=np.uint8)
        program, entry = tc._plan.program, tc._entry
        caps = entry.capacities(n)
        run = lambda: decode(program, raw, off[:-1], off[1:], POLICY_SKIP, 0, *caps,  # noqa: E731
                             pooled=True)
    elif what == "transcode":
        run = lambda: tc.transcode(arr)  # noqa: E731
    else:
        run = lambda: tc.encode(batch)  # noqa: E731
    run()
    for _ in range(calls):
        run()


def count(shape: str, n: int, seed: int, what: str, calls: int) -> float:
    """Instructions of one call (see the module's docstring)."""
    sys.path.insert(0, str(HERE))
    import pyarrow as pa

    import shapes

    totals = []
    with tempfile.TemporaryDirectory() as tmp:
        records = Path(tmp) / "records.arrow"  # generated once, outside valgrind
        table = pa.table({"r": pa.array(shapes.SHAPES[shape].generate(n, seed), pa.binary())})
        with pa.OSFile(str(records), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
            w.write_table(table)
        for k in (0, calls):
            out = Path(tmp) / "cg.out"
            cmd = [
                "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                sys.executable, __file__, "--child", shape, str(records), what, str(k),
            ]  # fmt: skip
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                                  env={**os.environ, "PYTHONHASHSEED": "0"})
            found = re.search(r"Collected : (\d+)", proc.stderr)
            if proc.returncode != 0 or not found:
                raise RuntimeError(f"valgrind failed ({proc.returncode}): {proc.stderr[-2000:]}")
            totals.append(int(found.group(1)))
    return (totals[1] - totals[0]) / calls


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        shape, records, what, calls = sys.argv[2:6]
        _child(shape, records, what, int(calls))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", nargs="+", default=["large"])
    parser.add_argument("--n", type=int, default=200, help="records a batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--what", nargs="+", default=["decode", "transcode"],
                        choices=["decode", "transcode", "encode"])
    parser.add_argument("--calls", type=int, default=2, help="calls counted (the difference)")
    args = parser.parse_args(argv)
    for shape in args.shape:
        for what in args.what:
            per_call = count(shape, args.n, args.seed, what, args.calls)
            print(f"{shape:10} n={args.n:<6} {what:10} {per_call / 1e6:10.2f}M instructions a call"
                  f"  ({per_call / args.n:,.0f} a record)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
