"""Two of upb's unknown-field rules, against the runtime, byte for byte where it is.

1. An undeclared value of a closed enum (proto2, editions `enum_type = CLOSED`) is an
   unknown field: singular and unpacked as it came, packed one varint record per value;
   it leaves the field unset (and a oneof's case untouched).
2. A map entry upb does not insert (it holds an unknown field: another number, or the key or
   value under another wire type, or an undeclared closed-enum value) is an unknown field of
   the parent, whole, written as upb writes the entry back (key, value, the entry's unknown
   fields), and not in the map.

Each case: nested with and without keep_unknown (both validate modes), encode against the
runtime's serialization (after DiscardUnknownFields() without keep_unknown), flat columns
against the runtime's parsed values.
"""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import message_factory

import wirearrow as wa
from oracle import assert_rows_equal, expected_rows, runtime_unknown
from schemagen import compile_source
from wirearrow.plan.types import is_repeated

PROTO2 = """
syntax = "proto2";
package t;
enum E { Z = 0; A = 1; B = 2; BIG = 1000; NEG = -3; }
message V { optional int32 a = 1; optional int32 b = 2; }
message M {
  optional E e = 1 [default = B];
  repeated E r = 2;
  repeated E p = 3 [packed = true];
  map<int32, E> me = 4;
  oneof o { E oe = 5; int32 oi = 6; }
  map<int32, int32> mi = 7;
  map<string, V> mv = 8;
  optional V v = 9;
  map<string, string> ms = 10;
  optional int32 after = 11;
}
"""

EDITIONS = """
edition = "2023";
package w;
enum E { option features.enum_type = CLOSED; Z = 0; A = 1; }
enum Open { OZ = 0; OA = 1; }
message M {
  map<int32, int32> mi = 2;
  map<int32, E> me = 3;
  E e = 4;
  repeated E r = 5;
  Open open = 6;
  repeated E u = 7 [features.repeated_field_encoding = EXPANDED];
}
"""

PROTO3 = """
syntax = "proto3";
package u;
message V { int32 a = 1; int32 b = 2; }
message M {
  map<int32, V> mv = 1;
  map<int32, int32> mi = 2;
  map<string, string> ms = 3;
  map<bool, double> mb = 4;
  map<sint32, fixed64> mz = 5;
}
"""

# (schema, record hex): each is decided by one of the rules above.
CASES = [
    # closed enum, singular: undeclared alone, after a declared one, 10-byte negative,
    # padded value, padded tag, a declared negative one
    (PROTO2, "0805"),
    (PROTO2, "0801 0805"),
    (PROTO2, "0805 0801"),
    (PROTO2, "08fbffffffffffffffff01"),
    (PROTO2, "088500"),
    (PROTO2, "88800005"),
    (PROTO2, "08fdffffffffffffffff01"),
    (PROTO2, "08e807"),
    # unpacked and packed repeated
    (PROTO2, "1001 1005 1002"),
    (PROTO2, "1a03 010502"),
    (PROTO2, "1a04 01050702 1001"),
    (PROTO2, "1a0c 05fbffffffffffffffff01 01"),
    (PROTO2, "1a03 850001"),
    (PROTO2, "1a02 0509"),
    # a oneof: an undeclared value does not take the case
    (PROTO2, "3007 2805"),
    (PROTO2, "3007 2801"),
    (PROTO2, "2a00 2801 3007 2805"),
    (PROTO2, "2801 2805"),
    # map value: undeclared closed enum -> the entry whole; declared stays
    (PROTO2, "2204 0801 1005"),
    (PROTO2, "2204 0801 1001"),
    (PROTO2, "2206 0801 1005 1001"),
    (PROTO2, "2206 0801 1001 1005"),
    # map entries with an unknown field (proto2: key and value have presence)
    (PROTO2, "3a06 0800 1000 1801"),
    (PROTO2, "3a04 1000 1801"),
    (PROTO2, "3a02 1801"),
    (PROTO2, "3a06 1801 0803 1004"),
    (PROTO2, "3a08 0801 0803 1004 1801"),
    (PROTO2, "3a07 0d01000000 1002"),
    (PROTO2, "3a09 088100 1002 1b 0801 1c"),
    (PROTO2, "3a04 0801 1004 3a04 0802 2001 3a04 0803 1005"),
    (PROTO2, "5801 3a04 0801 1801 5802"),
    (PROTO2, "4206 1200 0a00 1801"),
    (PROTO2, "4209 0a0161 12020802 1801"),
    (PROTO2, "4a03 0a0178 0801"),
    (PROTO2, "5208 0a0161 120162 2001"),
    # the value message's own unknown field is the value's, the entry is inserted
    (PROTO2, "4209 0a0161 1204 0801 2805"),
    # editions: explicit presence, closed enum, open enum keeps its number
    (EDITIONS, "1206 0800 1000 1801"),
    (EDITIONS, "1204 0800 1801"),
    (EDITIONS, "1a04 0800 1005"),
    (EDITIONS, "2005"),
    (EDITIONS, "2a03 050106"),
    (EDITIONS, "3005"),
    (EDITIONS, "3801 3805 3800"),
    # proto3: implicit presence, a zero key or value is not written back
    (PROTO3, "1206 0800 1000 1801"),
    (PROTO3, "1206 0801 1000 1801"),
    (PROTO3, "1204 0800 1805"),
    (PROTO3, "0a04 1200 1801"),
    (PROTO3, "0a04 1801 1200"),
    (PROTO3, "1a06 0a00 1200 1801"),
    (PROTO3, "1a08 0a016b 120161 1801"),
    (PROTO3, "220d 0801 11000000000000f03f 1801"),
    (PROTO3, "220d 0800 110000000000000080 1801"),
    (PROTO3, "2a0d 0803 110100000000000000 2005"),
    (PROTO3, "2a08 08ffffffff0f 1801"),
    (PROTO3, "2a0d 08ffffffffffffffffff01 1801"),
    (PROTO3, "2a0f 08feffffff0f 110200000000000000"),
]

# A message value sent twice, or not in its canonical order: upb writes the entry back with
# the value re-serialized; wirearrow writes the value's bytes as they came (which parse as
# the same value), so only the parsed entry is compared.
NOT_CANONICAL = [
    (PROTO2, "mv", "4208 1204 0801 0802 1801"),
    (PROTO2, "mv", "420a 1202 0801 1202 0803 1801"),
    (PROTO3, "mv", "0a08 1204 1001 0801 1801"),
]

_ROOTS = {PROTO2: "t.M", EDITIONS: "w.M", PROTO3: "u.M"}


def _wire(hex_text: str) -> bytes:
    return bytes.fromhex(hex_text.replace(" ", ""))


def _setup(source: str) -> tuple[wa.Schema, Any]:
    compiled = compile_source(source)
    root = _ROOTS[source]
    return wa.Schema.from_descriptor_set(compiled.descriptor_set, root), compiled.message_class(
        root
    )


def _discarded(message: Any) -> Any:
    copy = type(message)()
    copy.CopyFrom(message)
    copy.DiscardUnknownFields()
    return copy


@pytest.mark.parametrize("validate", ["plan", "full"])
@pytest.mark.parametrize(("source", "record"), CASES)
def test_nested_keeps_what_upb_keeps(source: str, record: str, validate: str) -> None:
    schema, cls = _setup(source)
    raw = _wire(record)
    message = cls.FromString(raw)
    tc = wa.Transcoder(schema, keep_unknown=True, validate=validate)
    batch = tc.transcode([raw])
    row = batch.to_pylist()[0]
    assert row["_unknown"] == runtime_unknown(message)
    encoded = tc.encode(batch)[0].as_py()
    assert encoded == message.SerializeToString(deterministic=True)
    assert cls.FromString(encoded) == message
    # without keep_unknown: what the runtime has after DiscardUnknownFields()
    tc = wa.Transcoder(schema, validate=validate)
    batch = tc.transcode([raw])
    assert tc.encode(batch)[0].as_py() == _discarded(message).SerializeToString(deterministic=True)
    assert tc.stats.records_failed == 0


@pytest.mark.parametrize(("source", "name", "record"), NOT_CANONICAL)
def test_an_entry_kept_whole_holds_the_same_value(source: str, name: str, record: str) -> None:
    schema, cls = _setup(source)
    raw = _wire(record)
    message = cls.FromString(raw)
    tc = wa.Transcoder(schema, keep_unknown=True)
    batch = tc.transcode([raw])
    ours = cls.FromString(batch.to_pylist()[0]["_unknown"])
    theirs = cls.FromString(runtime_unknown(message))
    field = cls.DESCRIPTOR.fields_by_name[name]
    entry_cls = message_factory.GetMessageClass(field.message_type)
    ours_entries = _entries(ours, field.number, entry_cls)
    theirs_entries = _entries(theirs, field.number, entry_cls)
    assert ours_entries == theirs_entries and ours_entries
    assert not getattr(cls.FromString(tc.encode(batch)[0].as_py()), field.name)


def _entries(message: Any, number: int, entry_cls: type) -> list[tuple[Any, bytes]]:
    # The unknown fields of `message` that are entries of map `number`, parsed as entries.
    from google.protobuf.internal import decoder as pb_decoder

    data = runtime_unknown(message) or b""
    out = []
    pos = 0
    while pos < len(data):
        tag, pos = pb_decoder._DecodeVarint(data, pos)
        assert tag == number << 3 | 2
        size, pos = pb_decoder._DecodeVarint(data, pos)
        entry = entry_cls.FromString(data[pos : pos + size])
        out.append((entry, runtime_unknown(entry)))
        pos += size
    return out


def _flat_paths(cls: Any) -> list[str]:
    paths = []
    for fd in cls.DESCRIPTOR.fields:
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            value = fd.message_type.fields_by_number[2]
            paths.append(f"{fd.name}[*]" + (".a" if value.message_type is not None else ""))
        elif fd.message_type is not None:
            paths.append(f"{fd.name}.a")
        elif is_repeated(fd):
            paths.append(f"{fd.name}[*]")
        else:
            paths.append(fd.name)
    return paths


@pytest.mark.parametrize(("source", "record"), CASES)
def test_flat_columns_read_what_upb_reads(source: str, record: str) -> None:
    schema, cls = _setup(source)
    raw = _wire(record)
    for path in _flat_paths(cls):
        # one column at a time: each fans out on its own
        for validate in ("plan", "full"):
            batch = wa.Transcoder(schema, [path], validate=validate).transcode([raw])
            want = expected_rows(cls, [raw], [path])
            assert_rows_equal(batch.schema, batch.to_pylist(), want, f"{path} {validate}")


@pytest.mark.parametrize(("source", "record"), CASES + [(s, r) for s, _, r in NOT_CANONICAL])
def test_the_unknown_fields_by_path_are_upbs(source: str, record: str) -> None:
    # A flat plan that reads `_unknown` and nothing else: the maps are not read, their
    # entries are still looked into (the ones upb does not insert are unknown fields).
    schema, cls = _setup(source)
    raw = _wire(record)
    message = cls.FromString(raw)
    for validate in ("plan", "full"):
        got = wa.Transcoder(schema, ["_unknown"], validate=validate).transcode([raw])
        want = runtime_unknown(message)
        if (source, record) in [(s, r) for s, _, r in NOT_CANONICAL]:
            assert (got.column(0)[0].as_py() is None) == (want is None)
        else:
            assert got.column(0).to_pylist() == [want], validate


# Entries upb does not insert are still checked as upb checks them: a bad one is a bad record.
BAD = [
    (PROTO3, "1a05 0a01ff 1801"),  # invalid UTF-8 in a proto3 key, beside an unknown field
    (PROTO3, "1a05 1801 0a01ff"),
    (PROTO2, "3a04 1801 1005"[:-2]),  # truncated inside the entry
    (PROTO2, "3a03 1801 1c"),  # a stray end-group tag after the unknown field
    (PROTO2, "3a04 0801 1a05"),  # an unknown field whose length runs past the entry
    (PROTO2, "4207 1205 0801 08"),  # the value message cut short
    (PROTO2, "1a02 0580"),  # a packed closed-enum run cut inside a varint
    (PROTO2, "1001 1080"),  # an unpacked closed-enum value cut short
]


@pytest.mark.parametrize("validate", ["plan", "full"])
@pytest.mark.parametrize(("source", "record"), BAD)
def test_bad_entries_and_values_are_bad_records(source: str, record: str, validate: str) -> None:
    from google.protobuf.message import DecodeError

    schema, cls = _setup(source)
    raw = _wire(record)
    with pytest.raises(DecodeError):
        cls.FromString(raw)
    for keep in (True, False):
        tc = wa.Transcoder(schema, keep_unknown=keep, validate=validate, on_error="dead_letter")
        assert tc.transcode([raw]).num_rows == 0
        (letter,) = tc.dead_letters().to_pylist()
        assert letter["raw"] == raw and letter["reason"]


def test_an_error_in_a_closed_enum_list_names_its_element() -> None:
    schema, _ = _setup(PROTO2)
    tc = wa.Transcoder(schema, on_error="dead_letter")
    tc.transcode([_wire("1001 1005 1002 1080")])  # r: 1, (5 undeclared), 2, then cut short
    (letter,) = tc.dead_letters().to_pylist()
    assert letter["path"] == "r[2]" and letter["offset"] == 6, letter
