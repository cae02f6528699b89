"""The message shapes of benchmarks/bench_shapes.py are what they say, and the benchmark
(with its tag walk, which now walks groups) runs and reports every cell. No timing is
asserted: benchmarks/ measures, tests do not."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import wirearrow as wa

BENCH = Path(__file__).resolve().parent.parent / "benchmarks"
sys.path.insert(0, str(BENCH))

import shapes  # noqa: E402


def test_shapes_have_the_sizes_and_contents_described() -> None:
    small = shapes.SHAPES["small"].generate(50)
    assert 200 <= sum(map(len, small)) / len(small) <= 300
    assert small == shapes.SHAPES["small"].generate(50)  # seeded
    large = shapes.SHAPES["large"].generate(4, seed=1)
    envelope = shapes.SHAPES["large"].message_class()
    assert all(100 <= len(envelope.FromString(r).span) <= 300 for r in large)
    assert 60_000 <= sum(map(len, large)) / len(large) <= 110_000
    wide = shapes.SHAPES["wide"].message_class()
    assert len(wide.DESCRIPTOR.fields) >= 140
    record = wide.FromString(shapes.SHAPES["wide"].generate(1)[0])
    assert record.HasField("child") and record.child.ListFields()


def test_large_group_and_message_shapes_decode_to_the_same_spans() -> None:
    """large-msg holds large's values with a sub-message in place of the group: wirearrow
    reads both to the same span rows (the group is decoded, not skipped)."""
    out = {}
    for name in ("large", "large-msg"):
        shape = shapes.SHAPES[name]
        tc = wa.Transcoder(wa.Schema.from_message(shape.message_class()))
        out[name] = tc.transcode(pa.array(shape.generate(2, seed=3), pa.binary()))
    spans = out["large"].column("span").to_pylist()
    assert sum(map(len, spans)) >= 200
    assert spans == out["large-msg"].column("span").to_pylist()
    assert out["large"].drop_columns(["span"]).equals(out["large-msg"].drop_columns(["span"]))


def _python_tags(data: bytes, descriptor, end_group: int = 0) -> tuple[int, int]:
    """(tags, bytes read) of a message or group, walked as tagwalk.pyx walks it."""
    from google.protobuf.internal.decoder import _DecodeVarint

    pos = tags = 0
    while pos < len(data):
        tag, pos = _DecodeVarint(data, pos)
        tags += 1
        number, wt = tag >> 3, tag & 7
        field = descriptor.fields_by_number.get(number) if descriptor else None
        sub = field.message_type if field is not None else None
        if wt == 0:
            _, pos = _DecodeVarint(data, pos)
        elif wt == 1:
            pos += 8
        elif wt == 5:
            pos += 4
        elif wt == 2:
            n, pos = _DecodeVarint(data, pos)
            if sub is not None:
                tags += _python_tags(data[pos : pos + n], sub)[0]
            pos += n
        elif wt == 3:
            inner, used = _python_tags(data[pos:], sub, number)
            tags += inner
            pos += used
        elif wt == 4:
            assert number == end_group
            return tags, pos
    return tags, pos


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("cc") is None, reason="the tag walk is compiled with cc")
def test_tag_walk_counts_every_tag_of_groups_and_the_benchmark_reports_every_cell(tmp_path) -> None:
    import numpy as np

    from bench_nested import build_tagwalk, walk_tables

    walker = build_tagwalk(str(tmp_path))
    for name in ("large", "medium", "wide"):
        shape = shapes.SHAPES[name]
        descriptor = shape.message_class().DESCRIPTOR
        records = shape.generate(2, seed=5)
        arr = pa.array(records, pa.binary())
        _, off, data = arr.buffers()
        offsets = np.frombuffer(off, dtype=np.int32)[:3].astype(np.int64)
        got = walker.walk_all(np.frombuffer(data, dtype=np.uint8), offsets, *walk_tables(descriptor))
        assert got == sum(_python_tags(r, descriptor)[0] for r in records), name
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_shapes.py"), "--shapes", "small", "large",
         "--bulk", "32", "--large-bulk", "2", "--min-time", "0.001", "--repeat", "1"],
        cwd=BENCH, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    rows = re.findall(r"^ +(\d+) \|(.*)$", proc.stdout, re.M)
    assert [int(b) for b, _ in rows] == [1, 16, 32, 1, 2], proc.stdout
    assert not any(re.search(r"\s-(\s|$)", cells) for _, cells in rows), proc.stdout
