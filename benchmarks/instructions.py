"""Instructions per call, counted by callgrind: the deterministic figure behind a hot-path claim.

Wall-clock ratios on a shared VM swing 2x from run to run; instruction counts do not. Each
scenario builds its input and its ``Transcoder`` untimed, runs the measured call a few times
to warm up (lazy tables, first-call imports, the buffer pool), then counts the instructions
of ``--calls`` more calls between two callgrind toggles (a small shim compiled here with
``cc`` into ``benchmarks/data/``, calling ``CALLGRIND_TOGGLE_COLLECT``). Everything inside the
call is counted: the Python around the core, pyarrow, numpy, the core itself.

    python benchmarks/instructions.py                     # every scenario
    python benchmarks/instructions.py encode json --n 2000
    python benchmarks/instructions.py wide-encode --keep out/cg   # callgrind.out files kept
                                                                  # for callgrind_annotate

The script runs itself under ``valgrind --tool=callgrind`` (one process per scenario) and
prints instructions per call and per record. Compare two builds by running it in each
checkout; the counts move by well under 0.1% between runs of the same build.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus

SHIM = r"""
#include <valgrind/callgrind.h>
void wa_callgrind_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
"""
CHILD = "WIREARROW_INSTRUCTIONS_CHILD"


def shim() -> Path:
    out = corpus.DATA_DIR / "callgrind_shim.so"
    src = out.with_suffix(".c")
    if not out.exists() or not src.exists() or src.read_text() != SHIM:
        out.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(SHIM)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out


# -- scenarios: name -> (records in one call, the call) ------------------------------------


def _wirearrow() -> Any:
    from bench_flat import import_wirearrow

    return import_wirearrow()


def _openrtb_schema(wa: Any) -> Any:
    return wa.Schema.from_proto(
        str(corpus.PROTO_FILE), corpus.MESSAGE_NAME, import_paths=[str(corpus.SCHEMA_DIR)]
    )


def _encode(schema_of: Callable[[Any], Any], records_of: Callable[[int], list[bytes]],
            **options: Any) -> Callable[[int], tuple[int, Callable[[], Any]]]:
    def setup(n: int) -> tuple[int, Callable[[], Any]]:
        import pyarrow as pa

        wa = _wirearrow()
        tc = wa.Transcoder(schema_of(wa), **options)
        batch = tc.transcode(pa.array(records_of(n), pa.binary()))
        return n, lambda: tc.encode(batch)

    return setup


def _json(form: str) -> Callable[[int], tuple[int, Callable[[], Any]]]:
    def setup(n: int) -> tuple[int, Callable[[], Any]]:
        import pyarrow as pa
        from google.protobuf import json_format

        wa = _wirearrow()
        _, cls = corpus.load_schema()
        texts = [json_format.MessageToJson(cls.FromString(r), indent=None)
                 for r in corpus.generate(n, 0)]
        data: Any = pa.array(texts, pa.utf8()) if form == "array" else texts
        tc = wa.Transcoder(_openrtb_schema(wa))
        return n, lambda: tc.transcode(data, format="json")

    return setup


def _deep_schema(wa: Any) -> Any:
    import corpus_deep

    return wa.Schema.from_proto(
        str(corpus_deep.PROTO_FILE), corpus_deep.MESSAGE_NAME,
        import_paths=[str(corpus_deep.SCHEMA_DIR)],
    )


def _deep_records(n: int) -> list[bytes]:
    import corpus_deep

    return corpus_deep.generate(n, 0)


def _wide_schema(wa: Any) -> Any:
    import corpus_wide

    return wa.Schema.from_proto(
        str(corpus_wide.PROTO_FILE), corpus_wide.MESSAGE_NAME,
        import_paths=[str(corpus_wide.SCHEMA_DIR)],
    )


def _wide_records(n: int) -> list[bytes]:
    import corpus_wide

    return corpus_wide.generate(n, 0)


SCENARIOS: dict[str, tuple[int, Callable[[int], tuple[int, Callable[[], Any]]]]] = {
    # name: (default records a call, setup)
    "encode": (2000, _encode(_openrtb_schema, lambda n: corpus.generate(n, 0),
                             timestamp_unit="ns")),
    "encode-deep": (2000, _encode(_deep_schema, _deep_records, timestamp_unit="ns")),
    "wide-encode": (16, _encode(_wide_schema, _wide_records, max_depth=3)),
    "json": (1000, _json("list")),
    "json-array": (1000, _json("array")),
}


def child(name: str, n: int, calls: int) -> None:
    toggle = ctypes.CDLL(str(shim())).wa_callgrind_toggle
    records, call = SCENARIOS[name][1](n)
    for _ in range(3):
        call()
    toggle()
    for _ in range(calls):
        call()
    toggle()
    print(f"records={records}")


def count(name: str, n: int, calls: int, keep: Path | None) -> tuple[int, int]:
    out_dir = keep or Path(tempfile.mkdtemp(prefix="wa-callgrind-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / f"callgrind.out.{name}"
    cmd = [
        "valgrind", "--tool=callgrind", "--collect-atstart=no", f"--callgrind-out-file={out}",
        sys.executable, str(Path(__file__).resolve()), name, "--n", str(n), "--calls", str(calls),
    ]
    done = subprocess.run(cmd, env={**os.environ, CHILD: "1"}, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"{name}: valgrind failed:\n{done.stderr[-3000:]}")
    records = int(re.search(r"records=(\d+)", done.stdout).group(1))  # type: ignore[union-attr]
    total = None
    for line in out.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            total = int(line.split()[1])
    if total is None:
        raise RuntimeError(f"{name}: no totals in {out}")
    if keep is None:
        out.unlink()
        out_dir.rmdir()
    return records, total


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("scenarios", nargs="*", help=f"of {', '.join(SCENARIOS)} (default: all)")
    p.add_argument("--n", type=int, default=None, help="records a call (default per scenario)")
    p.add_argument("--calls", type=int, default=3, help="calls counted (default 3)")
    p.add_argument("--keep", type=Path, default=None, help="keep callgrind.out files here")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    names = args.scenarios or list(SCENARIOS)
    unknown = [s for s in names if s not in SCENARIOS]
    if unknown:
        sys.exit(f"unknown scenario(s) {unknown}; known: {', '.join(SCENARIOS)}")
    if os.environ.get(CHILD):
        child(names[0], args.n or SCENARIOS[names[0]][0], args.calls)
        return 0
    print("| scenario | records a call | instructions a call | a record |")
    print("|---|---|---|---|")
    for name in names:
        records, total = count(name, args.n or SCENARIOS[name][0], args.calls, args.keep)
        per_call = total / args.calls
        print(f"| {name} | {records:,} | {per_call:,.0f} | {per_call / max(records, 1):,.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
