"""encode on the benchmarks' other shapes, byte for byte against the runtime's deterministic
serialization: the second OpenRTB corpus (custom value types from another package, seven
levels of nesting, a oneof of messages, maps of messages, wrappers, Duration) and the wide
recursive message read whole at every max_depth (the levels below the cut as bytes), whole
batches and slices of them (arrays at an offset)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import corpus_deep  # benchmarks/, put on sys.path by conftest.py
import corpus_wide
import wirearrow as wa


def _schema(module) -> wa.Schema:
    return wa.Schema.from_proto(
        str(module.PROTO_FILE), module.MESSAGE_NAME, import_paths=[str(module.SCHEMA_DIR)]
    )


def _expected(module, records: list[bytes]) -> list[bytes]:
    _, cls = module.load_schema()
    return [cls.FromString(r).SerializeToString(deterministic=True) for r in records]


@pytest.mark.parametrize("unit", ["us", "ns"])
def test_the_deep_openrtb_corpus_encodes_as_the_runtime(unit: str) -> None:
    records = corpus_deep.generate(80, seed=3)
    expected = _expected(corpus_deep, records)
    tc = wa.Transcoder(_schema(corpus_deep), timestamp_unit=unit)
    batch = tc.transcode(pa.array(records, pa.binary()))
    assert tc.encode(batch).to_pylist() == expected
    assert tc.encode(batch.slice(17, 40)).to_pylist() == expected[17:57]


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_the_wide_recursive_message_encodes_as_the_runtime(depth: int) -> None:
    records = corpus_wide.generate(16, seed=depth)
    expected = _expected(corpus_wide, records)
    tc = wa.Transcoder(_schema(corpus_wide), max_depth=depth)
    batch = tc.transcode(pa.array(records, pa.binary()))
    assert tc.encode(batch).to_pylist() == expected
    assert tc.encode(batch.slice(5, 7)).to_pylist() == expected[5:12]
    one = tc.encode(batch.slice(15))
    assert one.to_pylist() == expected[15:]
