"""Strings the schema does not validate (proto2, editions ``utf8_validation = NONE``): the
runtime (upb) accepts any bytes in them. With ``unvalidated_strings="binary"`` no such record
is rejected, the columns hold the bytes as they came, and ``encode`` gives the runtime's
deterministic bytes back; validated strings (proto3, editions default) are still checked."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wirearrow as wa
from schemagen import compile_source, delimited

PROTO2 = """
syntax = "proto2";
package u2;
message N { optional string t = 1; }
message M {
  optional string s = 1;
  repeated string r = 2;
  map<string, string> m = 3;
  optional N n = 4;
  optional bytes b = 5;
}
"""

EDITIONS = """
edition = "2023";
package ue;
message M {
  string none = 1 [features.utf8_validation = NONE];
  string checked = 2;
}
"""


@pytest.fixture(scope="module")
def proto2() -> tuple[wa.Schema, type]:
    compiled = compile_source(PROTO2)
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, "u2.M")
    return schema, compiled.message_class("u2.M")


@pytest.fixture(scope="module")
def editions() -> tuple[wa.Schema, type]:
    compiled = compile_source(EDITIONS)
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, "ue.M")
    return schema, compiled.message_class("ue.M")


def _record(draw, blobs) -> tuple[bytes, dict]:
    s = draw(st.none() | blobs)
    r = draw(st.lists(blobs, max_size=3))
    m = draw(st.lists(st.tuples(blobs, blobs), max_size=3))
    t = draw(st.none() | blobs)
    wire = b""
    if s is not None:
        wire += delimited(1, s)
    for x in r:
        wire += delimited(2, x)
    for k, v in m:
        wire += delimited(3, delimited(1, k) + delimited(2, v))
    if t is not None:
        wire += delimited(4, delimited(1, t))
    # the map as the runtime reads it: a key seen again replaces the earlier entry
    entries = dict(m)
    row = {"s": s, "r": r, "m": list(entries.items()), "n": None if t is None else {"t": t}}
    return wire, row


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_bytes_round_trip_as_the_runtime(proto2, data) -> None:
    schema, cls = proto2
    blobs = st.binary(max_size=6) | st.sampled_from([b"\xc3\x28", b"\xff", b"\xed\xa0\x80"])
    records = [data.draw(st.composite(_record)(blobs)) for _ in range(data.draw(st.integers(1, 4)))]
    wire = [w for w, _ in records]
    for validate in ("plan", "full"):
        tc = wa.Transcoder(schema, validate=validate, unvalidated_strings="binary")
        batch = tc.transcode(wire)  # on_error="raise": no record is rejected
        for got, (_, want) in zip(batch.to_pylist(), records, strict=True):
            assert {k: got[k] for k in want} == {**want, "m": got["m"]}
            assert sorted(got["m"]) == sorted(want["m"])
        # the runtime parses each record, and encode gives its deterministic bytes
        expected = [cls.FromString(w).SerializeToString(deterministic=True) for w in wire]
        assert tc.encode(batch).to_pylist() == expected
        flat = wa.Transcoder(schema, ["s", "r[*]", "m[*]", "n.t"], validate=validate,
                             unvalidated_strings="binary")  # fmt: skip
        assert flat.transcode(wire).num_rows >= len(wire)


def test_types_and_the_default(proto2) -> None:
    schema, _ = proto2
    binary = wa.Transcoder(schema, unvalidated_strings="binary").arrow_schema
    assert binary.field("s").type == pa.binary()
    assert binary.field("r").type == pa.list_(pa.binary())
    assert binary.field("m").type == pa.map_(pa.binary(), pa.binary())
    assert binary.field("n").type == pa.struct([("t", pa.binary())])
    # default: utf8 columns; bytes that are not UTF-8 cannot be in one, so the record is bad
    tc = wa.Transcoder(schema, on_error="dead_letter")
    assert tc.arrow_schema.field("s").type == pa.utf8()
    assert tc.transcode([delimited(1, b"\xc3\x28"), delimited(1, b"ok")]).num_rows == 1
    assert tc.dead_letters().column("reason").to_pylist() == ["invalid UTF-8 in a string field"]
    with pytest.raises(wa.PlanError, match="unvalidated_strings must be one of"):
        wa.Transcoder(schema, unvalidated_strings="latin1")


def test_validated_strings_are_still_checked(editions) -> None:
    schema, cls = editions
    tc = wa.Transcoder(schema, unvalidated_strings="binary", on_error="dead_letter")
    t = tc.arrow_schema
    assert (t.field("none").type, t.field("checked").type) == (pa.binary(), pa.utf8())
    ok = delimited(1, b"\xff\xfe") + delimited(2, "é".encode())
    bad = delimited(2, b"\xff")
    batch = tc.transcode([ok, bad])
    assert batch.to_pylist() == [{"none": b"\xff\xfe", "checked": "é"}]
    assert tc.dead_letters().column("index").to_pylist() == [1]
    assert tc.encode(batch).to_pylist() == [cls.FromString(ok).SerializeToString(deterministic=True)]
    # a binary column cannot be encoded into a string the runtime validates
    wrong = pa.RecordBatch.from_pydict(
        {"none": pa.array([b""]), "checked": pa.array([b"\xff"])}
    )
    with pytest.raises(wa.EncodeError, match="checked"):
        tc.encode(wrong)


def test_filters_read_strings_as_text(proto2) -> None:
    """A filter compares a string with a text literal: that field is checked to be UTF-8."""
    schema, _ = proto2
    tc = wa.Transcoder(
        schema, ['n[?(.t == "a")].t', "s"], unvalidated_strings="binary", on_error="skip"
    )
    assert tc.arrow_schema.field("s").type == pa.binary()
    good = delimited(4, delimited(1, b"a")) + delimited(1, b"\xff")
    bad = delimited(4, delimited(1, b"\xff"))
    assert tc.transcode([good, bad]).to_pylist() == [{'n[?(.t == "a")].t': b"a", "s": b"\xff"}]
    assert tc.stats.records_failed == 1
