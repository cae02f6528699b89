"""Transcoder.encode: Arrow rows -> protobuf bytes, against the protobuf runtime.

For a runtime message m, ``tc.encode(tc.transcode([m.SerializeToString()]))`` must equal
``m.SerializeToString(deterministic=True)`` byte for byte, also when the input bytes are
non-canonical (schemagen's ``wire_bytes``: other field order, unpacked, split messages,
overridden values, unknown fields, which decode drops). Schemas: the fixed ones in
tests/protos/ and random proto2 / proto3 / edition-2023 schemas from schemagen. Timestamps
and Durations are compared at the default unit (us) after truncating the runtime message's
nanos to whole microseconds (what that unit keeps), and exactly with ``timestamp_unit="ns"``.

Example counts are the unit tier's; WIREARROW_TEST_DEPTH multiplies them (tests/depth.py).
"""

from __future__ import annotations

import functools
import json
import pathlib
import random
from typing import Any

import google.type.date_pb2
import numpy as np
import pyarrow as pa
import pytest
from google.protobuf import message_factory
from hypothesis import given, note
from hypothesis import strategies as st

import wirearrow as wa
from depth import randomized
from schemagen import compile_source, messages, schema_specs, tag, varint, wire_bytes
from wirearrow.plan.types import is_repeated

PROTOS = pathlib.Path(__file__).parent / "protos"
GAPIS = str(pathlib.Path(google.type.date_pb2.__file__).parents[2])



@functools.cache  # once a process: protoc is a subprocess, and examples ask again and again
def _schema(file: str, name: str) -> tuple[wa.Schema, type]:
    schema = wa.Schema.from_proto(PROTOS / file, name, import_paths=[GAPIS])
    return schema, message_factory.GetMessageClass(schema.descriptor)


@pytest.fixture(scope="module")
def rich() -> tuple[wa.Schema, type]:
    return _schema("rich.proto", "wirearrow.tests.rich.Root")


@pytest.fixture(scope="module")
def wkt() -> tuple[wa.Schema, type]:
    return _schema("roundtrip.proto", "wirearrow.tests.roundtrip.Wkt")


@pytest.fixture(scope="module")
def maps() -> tuple[wa.Schema, type]:
    return _schema("roundtrip.proto", "wirearrow.tests.roundtrip.Maps")


def truncated(message: Any, per_second: int = 1_000_000) -> Any:
    """A copy whose Timestamp / Duration nanos keep only what `per_second` units hold."""
    copy = type(message)()
    copy.CopyFrom(message)
    _truncate(copy, 1_000_000_000 // per_second)
    return copy


def _truncate(message: Any, step: int) -> None:
    name = message.DESCRIPTOR.full_name
    if name == "google.protobuf.Timestamp":
        message.nanos -= message.nanos % step
        return
    if name == "google.protobuf.Duration":  # nanos share the sign of seconds: toward zero
        sign = -1 if message.nanos < 0 else 1
        message.nanos = sign * (abs(message.nanos) - abs(message.nanos) % step)
        return
    for fd, value in message.ListFields():
        if fd.message_type is None:
            continue
        if fd.message_type.GetOptions().map_entry:
            if fd.message_type.fields_by_number[2].message_type is not None:
                for item in value.values():
                    _truncate(item, step)
        elif is_repeated(fd):
            for item in value:
                _truncate(item, step)
        else:
            _truncate(value, step)


def assert_round_trip(tc: wa.Transcoder, wire: list[bytes], expected: list[bytes]) -> None:
    batch = tc.transcode(wire)
    out = tc.encode(batch)
    assert pa.types.is_binary(out.type) and out.null_count == 0
    got = out.to_pylist()
    for i, (g, e) in enumerate(zip(got, expected, strict=True)):
        assert g == e, f"row {i}:\n got {g.hex(' ')}\nwant {e.hex(' ')}"
    # the same rows from a sliced batch and a chunked table
    if len(wire) > 1:
        assert tc.encode(batch.slice(1)).to_pylist() == expected[1:]
        table = pa.Table.from_batches([batch.slice(0, 1), batch.slice(1)])
        assert tc.encode(table).to_pylist() == expected


# --------------------------------------------------------------------------------------------
# Parity: fixed schemas


@randomized(8)
@given(data=st.data())
def test_rich_round_trip(rich: tuple[wa.Schema, type], data: st.DataObject) -> None:
    schema, cls = rich
    values = data.draw(st.lists(messages(cls.DESCRIPTOR), min_size=1, max_size=4))
    values = [truncated(v) for v in values]
    canonical = [v.SerializeToString(deterministic=True) for v in values]
    tc = wa.Transcoder(schema)
    assert_round_trip(tc, [v.SerializeToString() for v in values], canonical)
    # non-canonical wire bytes decode to the same messages
    wire = [data.draw(wire_bytes(v)) for v in values]
    expected = [cls.FromString(w).SerializeToString(deterministic=True) for w in wire]
    note(f"wire: {[w.hex() for w in wire]}")
    assert_round_trip(tc, wire, [_drop_unknown(cls, e) for e in expected])
    # keeping the unknown fields: the round trip is exact, inside well-known types too
    assert_round_trip(wa.Transcoder(schema, keep_unknown=True), wire, [_exact(cls, w) for w in wire])


def _drop_unknown(cls: type, data: bytes) -> bytes:
    message = cls.FromString(data)
    message.DiscardUnknownFields()
    return message.SerializeToString(deterministic=True)


@randomized(5)
@given(data=st.data())
def test_wkt_round_trip(wkt: tuple[wa.Schema, type], data: st.DataObject) -> None:
    schema, cls = wkt
    values = data.draw(st.lists(messages(cls.DESCRIPTOR, max_depth=3), min_size=1, max_size=3))
    for value in values:
        _fill_special(data, value)
    values = [truncated(v) for v in values]
    tc = wa.Transcoder(schema)
    expected = [v.SerializeToString(deterministic=True) for v in values]
    assert_round_trip(tc, [v.SerializeToString() for v in values], expected)


def _exact(cls: type, wire: bytes) -> bytes:
    return cls.FromString(wire).SerializeToString(deterministic=True)


@randomized(5)
@given(data=st.data())
def test_plain_well_known_types_round_trip_exactly(
    wkt: tuple[wa.Schema, type], rich: tuple[wa.Schema, type], data: st.DataObject
) -> None:
    """well_known_types=False: the runtime's deterministic bytes for every valid message --
    no truncated nanos, out-of-range Timestamps or invalid Dates set aside, no JSON-able
    Struct values picked: the fields as they are, unknown ones inside them included."""
    for schema, cls in (wkt, rich):
        values = data.draw(st.lists(messages(cls.DESCRIPTOR, max_depth=3), min_size=1, max_size=3))
        wire = [data.draw(wire_bytes(v)) for v in values]
        note(f"{cls.DESCRIPTOR.full_name} wire: {[w.hex() for w in wire]}")
        # Struct and Value are recursive messages like any other: cut, as bytes, below 3
        tc = wa.Transcoder(schema, keep_unknown=True, well_known_types=False, max_depth=3)
        assert_round_trip(tc, wire, [_exact(cls, w) for w in wire])


def test_plain_well_known_types_schema(wkt: tuple[wa.Schema, type]) -> None:
    schema, cls = wkt
    tc = wa.Transcoder(schema, well_known_types=False, max_depth=2)
    t = tc.arrow_schema
    assert t.field("ts").type == pa.struct([("seconds", pa.int64()), ("nanos", pa.int32())])
    assert t.field("dur").type == t.field("ts").type
    assert t.field("w_string").type == pa.struct([("value", pa.utf8())])
    assert t.field("w_list").type == pa.list_(pa.struct([("value", pa.int32())]))
    assert t.field("mask").type == pa.struct([("paths", pa.list_(pa.utf8()))])
    assert pa.types.is_struct(t.field("val").type)
    assert t.field("date").type == pa.struct(
        [("year", pa.int32()), ("month", pa.int32()), ("day", pa.int32())]
    )
    # a value no mapped unit holds: 9999-12-31T23:59:59.123456789, and Date 0000-13-00
    message = cls()
    message.ts.seconds, message.ts.nanos = 253_402_300_799, 123_456_789
    message.date.month = 13
    row = tc.transcode([message.SerializeToString()]).to_pylist()[0]
    assert row["ts"] == {"seconds": 253_402_300_799, "nanos": 123_456_789}
    assert row["date"] == {"year": 0, "month": 13, "day": 0}
    assert row["dur"] is None and row["w_string"] is None
    # flat mode: the same struct, and its fields by path
    flat = wa.Transcoder(schema, ["ts", "ts.nanos", "w_list[*]"], well_known_types=False)
    message.w_list.add(value=7)
    got = flat.transcode([message.SerializeToString()]).to_pylist()
    assert got == [{"ts": row["ts"], "ts.nanos": 123_456_789, "w_list[*]": {"value": 7}}]
    # the mapped default reads the wrapper as its value
    mapped = wa.Transcoder(schema, ["w_list[*]"])
    assert mapped.transcode([message.SerializeToString()]).to_pylist() == [{"w_list[*]": 7}]


def _fill_special(data: st.DataObject, value: Any) -> None:
    """JSON-mapped fields: kinds a JSON text holds exactly (numbers are doubles)."""
    json_values = st.recursive(
        st.one_of(
            st.none(), st.booleans(), st.floats(allow_nan=False, allow_infinity=False), st.text()
        ),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)
        ),
        max_leaves=6,
    )
    # google.type.Date / TimeOfDay map to date32 / time64: only valid values round-trip
    if value.HasField("date"):
        day = data.draw(st.dates())
        value.date.year, value.date.month, value.date.day = day.year, day.month, day.day
    if value.HasField("tod"):
        time = data.draw(st.times())
        value.tod.hours, value.tod.minutes = time.hour, time.minute
        value.tod.seconds, value.tod.nanos = time.second, time.microsecond * 1000
    value.ClearField("st")
    value.ClearField("val")
    value.ClearField("lv")
    value.ClearField("vals")
    value.ClearField("val_by_key")
    if data.draw(st.booleans()):
        value.st.update(data.draw(st.dictionaries(st.text(max_size=3), json_values, max_size=3)))
    if data.draw(st.booleans()):
        value.lv.extend(data.draw(st.lists(json_values, max_size=3)))
    kinds = st.sampled_from(["null", "number", "string", "bool", "struct", "list"])
    if data.draw(st.booleans()):
        _set_value(data, value.val, data.draw(kinds), json_values)
    for _ in range(data.draw(st.integers(0, 3))):
        element = value.vals.add()
        if data.draw(st.integers(0, 4)):  # else: a Value with no kind (decodes as null)
            _set_value(data, element, data.draw(kinds), json_values)
    for key in data.draw(st.lists(st.text(max_size=2), max_size=3, unique=True)):
        _set_value(data, value.val_by_key[key], data.draw(kinds), json_values)


def _set_value(data: st.DataObject, target: Any, kind: str, json_values: Any) -> None:
    if kind == "null":
        target.null_value = 0
    elif kind == "number":
        target.number_value = data.draw(st.floats(allow_nan=False, allow_infinity=False))
    elif kind == "string":
        target.string_value = data.draw(st.text(max_size=4))
    elif kind == "bool":
        target.bool_value = data.draw(st.booleans())
    elif kind == "struct":
        target.struct_value.update(data.draw(st.dictionaries(st.text(max_size=2), json_values)))
    else:
        target.list_value.extend(data.draw(st.lists(json_values, max_size=3)))


_KEYS = {
    "k_int32": st.integers(-(2**31), 2**31 - 1),
    "k_int64": st.integers(-(2**63), 2**63 - 1),
    "k_uint32": st.integers(0, 2**32 - 1),
    "k_uint64": st.integers(0, 2**64 - 1),
    "k_sint32": st.integers(-(2**31), 2**31 - 1),
    "k_sint64": st.integers(-(2**63), 2**63 - 1),
    "k_fixed32": st.integers(0, 2**32 - 1),
    "k_fixed64": st.integers(0, 2**64 - 1),
    "k_sfixed32": st.integers(-(2**31), 2**31 - 1),
    "k_sfixed64": st.integers(-(2**63), 2**63 - 1),
    "k_bool": st.booleans(),
    "k_string": st.one_of(st.sampled_from(["", "a", "aa", "ab", "b", "é", "z", "\x7f"]), st.text()),
}


@randomized(5)
@given(data=st.data())
def test_maps_of_every_key_kind(maps: tuple[wa.Schema, type], data: st.DataObject) -> None:
    """Entry order is upb's deterministic order, for every key type; key and value always."""
    schema, cls = maps
    values = []
    for _ in range(data.draw(st.integers(1, 3))):
        message = cls()
        for name, keys in _KEYS.items():
            small = (
                st.one_of(st.sampled_from([0, 1, -1, 2**31 - 1]), keys)
                if name != "k_bool"
                else keys
            )
            for key in data.draw(st.lists(small, max_size=6, unique=True)):
                try:
                    container = getattr(message, name)
                    if name == "k_string":
                        container[key].x = data.draw(st.integers(-2, 2))
                    else:
                        container[key] = data.draw(st.sampled_from(["", "v"]))
                except (ValueError, TypeError):
                    pass  # a small value out of this key type's range
        for key in data.draw(st.lists(st.text(max_size=2), max_size=3, unique=True)):
            message.signs[key] = data.draw(st.sampled_from([0, 1, -1, -(2**31), 5]))
        message.sign = data.draw(st.sampled_from([0, 1, -1, -(2**31)]))
        message.sign_list.extend(data.draw(st.lists(st.sampled_from([0, -1, -(2**31), 7]))))
        values.append(message)
    tc = wa.Transcoder(schema)
    expected = [v.SerializeToString(deterministic=True) for v in values]
    assert_round_trip(tc, [v.SerializeToString() for v in values], expected)
    names = wa.Transcoder(schema, enums="name")
    assert_round_trip(names, [v.SerializeToString() for v in values], expected)


def test_map_order_matches_runtime_examples(maps: tuple[wa.Schema, type]) -> None:
    schema, cls = maps
    message = cls(
        k_int32={-1: "a", -7: "b", 2**31 - 1: "c", 0: "", 5: "d"},
        k_uint64={0: "", 1: "a", 2**64 - 1: "b", 2**63: "c"},
        k_bool={True: "", False: ""},
        k_string={k: {} for k in ["b", "a", "ab", "", "é", "z", "aa", "ba"]},
    )
    tc = wa.Transcoder(schema)
    out = tc.encode(tc.transcode([message.SerializeToString()]))
    assert out[0].as_py() == message.SerializeToString(deterministic=True)
    entries = tc.transcode([out[0].as_py()]).column("k_string")[0].as_py()  # wire order
    assert [key for key, _ in entries] == ["aa", "ab", "a", "ba", "b", "z", "é", ""]


def test_map_order_long_maps_and_sliced_batches(maps: tuple[wa.Schema, type]) -> None:
    # Maps over the core's insertion-sort limit (64 entries) take the general sort; a slice
    # of a batch starts its keys at an array offset.
    schema, cls = maps
    rng = random.Random(5)
    messages = []
    for size in (0, 1, 3, 64, 65, 200, 2):
        strings = {
            "".join(rng.choice("ab\u00e9") for _ in range(rng.randint(0, 4))) for _ in range(size)
        }
        messages.append(
            cls(
                k_int32={rng.randint(-(2**31), 2**31 - 1): "v" for _ in range(size)},
                k_uint64={rng.randint(0, 2**64 - 1): "" for _ in range(size)},
                k_bool={rng.random() < 0.5: "" for _ in range(min(size, 2))},
                k_string={k: {} for k in strings},
            )
        )
    tc = wa.Transcoder(schema)
    batch = tc.transcode([m.SerializeToString() for m in messages])
    expected = [m.SerializeToString(deterministic=True) for m in messages]
    assert tc.encode(batch).to_pylist() == expected
    for lo, hi in ((1, 3), (4, 5), (6, 7), (2, 7)):
        assert tc.encode(batch.slice(lo, hi - lo)).to_pylist() == expected[lo:hi]


@pytest.mark.parametrize(
    ("file", "name"),
    [
        ("groups.proto", "wirearrow.tests.groups.G"),
        ("delimited.proto", "wirearrow.tests.delimited.D"),
    ],
)
@randomized(4)
@given(data=st.data())
def test_groups_and_delimited(file: str, name: str, data: st.DataObject) -> None:
    schema, cls = _schema(file, name)
    values = data.draw(st.lists(messages(cls.DESCRIPTOR), min_size=1, max_size=3))
    tc = wa.Transcoder(schema)
    # A proto2 `required` field may be missing: the runtime's SerializeToString refuses
    # such a message, and so does encode.
    complete = [v for v in values if v.IsInitialized()]
    if complete:
        expected = [v.SerializeToString(deterministic=True) for v in complete]
        assert_round_trip(tc, [v.SerializePartialToString() for v in complete], expected)
    partial = [v for v in values if not v.IsInitialized()]
    if partial:
        batch = tc.transcode([v.SerializePartialToString() for v in partial])
        with pytest.raises(wa.EncodeError, match=r"required field .* is null"):
            tc.encode(batch)


def test_group_wire_shape() -> None:
    schema, cls = _schema("groups.proto", "wirearrow.tests.groups.G")
    message = cls(r="x", plain=[1, -1], packed=[1, -1])
    message.item.name = "n"
    message.item.nums.extend([1, 2])
    message.entry.add(id=3).deep.flag = False
    message.entry.add()
    data = message.SerializeToString(deterministic=True)
    assert bytes([0x13]) in data and bytes([0x14]) in data  # start / end group of field 2
    tc = wa.Transcoder(schema)
    assert tc.encode(tc.transcode([data]))[0].as_py() == data


@randomized(3)
@given(data=st.data())
def test_recursion_cut_round_trips(data: st.DataObject) -> None:
    schema, cls = _schema("roundtrip.proto", "wirearrow.tests.roundtrip.Tree")
    leaves = st.builds(lambda v: cls(v=v), st.integers(-5, 5))
    trees = st.recursive(
        leaves,
        lambda inner: st.builds(
            lambda v, left, kids, named: _tree(cls, v, left, kids, named),
            st.integers(-5, 5),
            st.one_of(st.none(), inner),
            st.lists(inner, max_size=2),
            st.dictionaries(st.sampled_from(["", "a", "b"]), inner, max_size=2),
        ),
        max_leaves=12,
    )
    values = data.draw(st.lists(trees, min_size=1, max_size=3))
    expected = [v.SerializeToString(deterministic=True) for v in values]
    # an unknown field at every level, the cut ones included
    wire = [_with_unknown(v).SerializeToString() for v in values]
    for depth in (1, 2, 4):
        tc = wa.Transcoder(schema, max_depth=depth)
        assert_round_trip(tc, [v.SerializeToString() for v in values], expected)
        # keep_unknown=False drops them below the cut too, as DiscardUnknownFields()
        assert_round_trip(tc, wire, [_drop_unknown(cls, w) for w in wire])
        keep = wa.Transcoder(schema, max_depth=depth, keep_unknown=True)
        assert_round_trip(keep, wire, [_exact(cls, w) for w in wire])


@pytest.mark.parametrize("depth", [1, 2, 3, 4])
def test_a_sub_message_sent_twice_is_merged_at_and_below_the_cut(depth: int) -> None:
    """upb merges a singular message field that occurs twice; so does the decoder, for the
    levels it reads and for the bytes it keeps below a max_depth cut."""
    schema, cls = _schema("roundtrip.proto", "wirearrow.tests.roundtrip.Tree")
    first = cls(v=1)
    first.left.v = 2
    first.left.left.left.v = 3
    first.left.kids.add(v=4)
    second = cls()
    second.left.left.v = 5  # merges into left.left: its left (v=3) stays
    second.left.left.kids.add(v=6)
    second.left.named["n"].v = 7
    wire = [first.SerializeToString() + second.SerializeToString()]
    merged = cls.FromString(wire[0])
    assert merged.left.left.left.v == 3 and merged.left.left.v == 5  # the runtime merged
    for keep in (False, True):
        tc = wa.Transcoder(schema, max_depth=depth, keep_unknown=keep)
        assert_round_trip(tc, wire, [_exact(cls, wire[0])])
        tc = wa.Transcoder(schema, max_depth=depth, keep_unknown=keep, validate="full")
        assert_round_trip(tc, wire, [_exact(cls, wire[0])])


def test_a_struct_sent_twice_is_merged() -> None:
    """docs/fuzzing.md finding 10: `st` with one entry, then an empty `st`, is for upb the
    merged Struct (the entry kept); a Value sent twice merges too."""
    schema, cls = _schema("roundtrip.proto", "wirearrow.tests.roundtrip.Wkt")
    a, b, c = cls(), cls(), cls()
    a.st["k"] = True
    b.st.SetInParent()
    c.st["j"] = "x"
    a.val.struct_value["p"] = 1
    c.val.struct_value["q"] = 2
    wire = [a.SerializeToString() + b.SerializeToString() + c.SerializeToString()]
    tc = wa.Transcoder(schema, columns=["st", "val"])
    row = tc.transcode(wire).to_pylist()[0]
    assert json.loads(row["st"]) == {"j": "x", "k": True}
    assert json.loads(row["val"]) == {"p": 1, "q": 2}
    whole = wa.Transcoder(schema)
    assert_round_trip(whole, wire, [_exact(cls, wire[0])])


def test_struct_children_null_inside_and_only_with_their_struct() -> None:
    """A struct child null exactly where its struct is (the decoder's output: the encoder
    then skips the child's bit test) and one with nulls of its own inside valid structs
    (those fields are left out), over word and byte boundaries and from sliced batches."""
    schema, cls = _schema("roundtrip.proto", "wirearrow.tests.roundtrip.Tree")
    tc = wa.Transcoder(schema, max_depth=2)
    n = 150
    values = []
    for i in range(n):
        m = cls(v=i)
        if i % 3:
            m.left.v = i + 1
        values.append(m)
    batch = tc.transcode([m.SerializeToString() for m in values])
    assert tc.encode(batch).to_pylist() == [m.SerializeToString(deterministic=True) for m in values]
    left = batch.column("left")
    own = [i % 3 != 0 and i % 7 == 1 for i in range(n)]  # v null inside a valid `left`
    v = pa.array([None if i % 3 == 0 or own[i] else i + 1 for i in range(n)], pa.int32())
    children = [v if f.name == "v" else left.field(f.name) for f in left.type]
    mask = pa.array([i % 3 == 0 for i in range(n)])
    changed = pa.StructArray.from_arrays(children, fields=list(left.type), mask=mask)
    batch = batch.set_column(batch.schema.get_field_index("left"), batch.schema.field("left"), changed)
    for i in range(n):
        if own[i]:
            values[i].left.v = 0
            values[i].left.SetInParent()
    expected = [m.SerializeToString(deterministic=True) for m in values]
    assert sum(own) > 10
    for lo in (0, 1, 8, 64, 69):
        assert tc.encode(batch.slice(lo)).to_pylist() == expected[lo:], lo


def _with_unknown(tree: Any) -> Any:
    """A copy of a Tree whose every node also holds unknown field 100 (varint 7)."""
    copy = type(tree)()
    copy.CopyFrom(tree)
    nodes = [copy]
    while nodes:
        node = nodes.pop()
        node.MergeFromString(b"\xa0\x06\x07")
        nodes.extend([*([node.left] if node.HasField("left") else []), *node.kids])
        nodes.extend(node.named.values())
    return copy


def _tree(cls: type, v: int, left: Any, kids: list[Any], named: dict[str, Any]) -> Any:
    node = cls(v=v, kids=kids)
    if left is not None:
        node.left.CopyFrom(left)
    for key, value in named.items():
        node.named[key].CopyFrom(value)
    return node


def test_bidrequest_corpus_round_trips(bid_schema: wa.Schema, bid_class: type, bid_corpus) -> None:
    tc = wa.Transcoder(bid_schema)
    expected = [
        truncated(bid_class.FromString(r)).SerializeToString(deterministic=True) for r in bid_corpus
    ]
    assert_round_trip(tc, list(bid_corpus), expected)


def test_bidrequest_slices_span_blocks(bid_schema: wa.Schema, bid_class: type, bid_corpus) -> None:
    # Rows are encoded in blocks (of up to 256) and the next block's lines located through
    # every list's offsets: slices starting and ending inside blocks, over several of them.
    tc = wa.Transcoder(bid_schema)
    batch = tc.transcode(list(bid_corpus))
    expected = [
        truncated(bid_class.FromString(r)).SerializeToString(deterministic=True) for r in bid_corpus
    ]
    for lo, hi in ((0, 300), (37, 230), (63, 129), (64, 65), (1, 299), (250, 300)):
        assert tc.encode(batch.slice(lo, hi - lo)).to_pylist() == expected[lo:hi], (lo, hi)


def _large(t: pa.DataType) -> pa.DataType:
    """t with its strings, binaries and lists (maps' entries too) as their 64-bit-offset types."""
    if pa.types.is_string(t):
        return pa.large_string()
    if pa.types.is_binary(t):
        return pa.large_binary()
    if pa.types.is_list(t):
        f = t.value_field
        return pa.large_list(pa.field(f.name, _large(f.type), f.nullable))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _large(f.type), f.nullable) for f in t])
    return t


def test_large_offsets_encode_as_the_plain_types(
    bid_schema: wa.Schema, bid_class: type, bid_corpus
) -> None:
    # Columns with 64-bit offsets take the general path (the specialised handlers read int32
    # offsets), decided per call and per column: all columns widened, or only some.
    tc = wa.Transcoder(bid_schema)
    batch = tc.transcode(list(bid_corpus))
    expected = tc.encode(batch).to_pylist()
    assert expected == [
        truncated(bid_class.FromString(r)).SerializeToString(deterministic=True) for r in bid_corpus
    ]
    names = batch.schema.names
    for widened in (set(names), {"id", "imp"}, {"site"}):
        schema = pa.schema(
            [
                pa.field(f.name, _large(f.type) if f.name in widened else f.type, f.nullable)
                for f in batch.schema
            ]
        )
        assert schema != batch.schema, widened
        assert tc.encode(batch.cast(schema)).to_pylist() == expected, widened


# --------------------------------------------------------------------------------------------
# Parity: random schemas


@randomized(10)
@given(data=st.data())
def test_random_schemas_round_trip(data: st.DataObject) -> None:
    spec = data.draw(schema_specs(), label="schema")
    source = spec.render()
    note(source)
    compiled = compile_source(source)
    root = compiled.message_class(spec.root)
    values = data.draw(st.lists(messages(root.DESCRIPTOR), min_size=1, max_size=4))
    values = [truncated(v) for v in values]
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, spec.root)
    tc = wa.Transcoder(schema)
    expected = [v.SerializeToString(deterministic=True) for v in values]
    assert_round_trip(tc, [v.SerializeToString() for v in values], expected)
    wire = [data.draw(wire_bytes(v)) for v in values]
    note(f"wire: {[w.hex() for w in wire]}")
    # The wire may hold strings the schema does not validate that are not UTF-8: read as
    # binary, they are given back as they came; by default they move to the unknown fields
    # and the runtime parses the output to its own message (tests/test_unvalidated_strings.py)
    raw = "binary"
    tc = wa.Transcoder(schema, unvalidated_strings=raw)
    assert_round_trip(tc, wire, [_drop_unknown(root, w) for w in wire])
    exact = [_exact(root, w) for w in wire]
    assert_round_trip(wa.Transcoder(schema, keep_unknown=True, unvalidated_strings=raw), wire,
                      exact)  # fmt: skip
    plain = wa.Transcoder(schema, keep_unknown=True, well_known_types=False, max_depth=3,
                          unvalidated_strings=raw)  # fmt: skip
    assert_round_trip(plain, wire, [_exact(root, w) for w in wire])
    plain = wa.Transcoder(schema, keep_unknown=True, well_known_types=False, max_depth=3)
    back = plain.encode(plain.transcode(wire)).to_pylist()
    def canonical(b: bytes) -> bytes:  # (bytes, not messages: NaN != NaN)
        return root.FromString(b).SerializeToString(deterministic=True)

    assert [canonical(b) for b in back] == [canonical(w) for w in wire]


# --------------------------------------------------------------------------------------------
# Exactness: presence, floats, enums, units


def test_negative_zero_and_presence(maps: tuple[wa.Schema, type]) -> None:
    schema, cls = maps
    tc = wa.Transcoder(schema)
    values = [cls(d=-0.0, f=-0.0), cls(d=0.0), cls(a={}), cls(c=""), cls(sign=-1)]
    expected = [v.SerializeToString(deterministic=True) for v in values]
    assert expected[0] != b"" and expected[1] == b""  # the runtime compares bits
    assert_round_trip(tc, [v.SerializeToString() for v in values], expected)


def test_enum_names_round_trip_undeclared_numbers(rich: tuple[wa.Schema, type]) -> None:
    schema, cls = rich
    values = [cls(color=-3, colors=[0, 1, -3, 99, -(2**31)], c=42), cls(color=7)]
    tc = wa.Transcoder(schema, enums="name")
    batch = tc.transcode([v.SerializeToString() for v in values])
    assert batch.column("colors")[0].as_py() == [
        "COLOR_UNSPECIFIED",
        "RED",
        "INFRARED",
        "99",
        "-2147483648",
    ]
    expected = [truncated(v).SerializeToString(deterministic=True) for v in values]
    assert tc.encode(batch).to_pylist() == expected


@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_timestamp_units(wkt: tuple[wa.Schema, type], unit: str) -> None:
    """A unit coarser than ns drops the sub-unit nanos; with "ns" the round trip is exact."""
    schema, cls = wkt
    message = cls(
        ts={"seconds": 1_700_000_000, "nanos": 123_456_789},
        dur={"seconds": -5, "nanos": -987_654_321},
        tod={"hours": 23, "minutes": 59, "seconds": 59, "nanos": 999_999_999},
        times=[{"seconds": -1, "nanos": 1}, {"seconds": 0}],
        durs=[{"seconds": 0, "nanos": -1}, {"seconds": 1, "nanos": 1}],
    )
    tc = wa.Transcoder(schema, timestamp_unit=unit)
    out = tc.encode(tc.transcode([message.SerializeToString()]))[0].as_py()
    per_second = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[unit]
    want = truncated(message, per_second)
    if unit != "ns":  # TimeOfDay is time64[us] below "ns", time64[ns] with it
        want.tod.nanos -= want.tod.nanos % 1_000
    assert out == want.SerializeToString(deterministic=True)
    # ts, dur, tod, times[0], durs[0], durs[1] have nanos below a coarse unit (tod: below us)
    lost = {"s": 6, "ms": 6, "us": 6, "ns": 0}[unit]
    assert tc.stats.precision_lost == lost, unit
    if unit == "ns":
        assert want.ts.nanos == 123_456_789 and want.tod.nanos == 999_999_999


def test_time_of_day_is_exact_in_ns_and_counts_what_us_truncates(
    wkt: tuple[wa.Schema, type],
) -> None:
    # google.type.TimeOfDay: time64[ns] with timestamp_unit="ns" (every nano kept, and
    # encoded back), else time64[us] with the nanoseconds below a microsecond truncated
    # and counted in precision_lost, as Timestamps' are -- never silently.
    schema, cls = wkt
    records = [
        cls(tod={"minutes": 1, "nanos": 1}),  # the fuzz harness's case: one nanosecond
        cls(tod={"hours": 23, "nanos": 999_999_999}),
        cls(tod={"seconds": 5, "nanos": 7_000}),
        cls(),
    ]
    wire = [m.SerializeToString() for m in records]
    exact = wa.Transcoder(schema, columns=["tod"], timestamp_unit="ns")
    out = exact.transcode(wire)
    assert out.schema.field("tod").type == pa.time64("ns")
    want = [60_000_000_001, 82_800_999_999_999, 5_000_007_000, None]
    assert out.column("tod").cast(pa.int64()).to_pylist() == want
    assert exact.stats.precision_lost == 0
    whole = wa.Transcoder(schema, timestamp_unit="ns")
    encoded = whole.encode(whole.transcode(wire)).to_pylist()
    assert encoded == [m.SerializeToString(deterministic=True) for m in records]
    for unit in ("s", "ms", "us"):
        tc = wa.Transcoder(schema, columns=["tod"], timestamp_unit=unit)
        out = tc.transcode(wire)
        assert out.schema.field("tod").type == pa.time64("us"), unit
        want = [60_000_000, 82_800_999_999, 5_000_007, None]
        assert out.column("tod").cast(pa.int64()).to_pylist() == want, unit
        assert tc.stats.precision_lost == 2, unit  # 1 ns, and 999 ns of the second


def test_wkt_examples(wkt: tuple[wa.Schema, type]) -> None:
    schema, cls = wkt
    full = cls(
        w_int64={"value": 0},
        w_string={"value": "s"},
        w_bool={},
        w_bytes={"value": b"\x00"},
        w_float={"value": -0.0},
        mask={"paths": ["a.b", "c"]},
        date={"year": 2024, "month": 2, "day": 29},
        nothing={},
        empty={},
        w_list=[{"value": 0}, {"value": -3}],
    )
    full.any.type_url, full.any.value = "type.googleapis.com/x.Y", b"\x08\x09"
    full.st.update({"k": [1, "two", None, {"n": False}]})
    full.lv.append(1.5)
    full.val.string_value = "v"
    full.vals.add()  # no kind: decodes as null, encodes as an empty Value again
    full.vals.add().null_value = 0
    full.val_by_key["x"].bool_value = True
    full.val_by_key["e"]  # an empty Value as a map value
    old = cls(date={"year": 1, "month": 1, "day": 1}, mask={})
    tc = wa.Transcoder(schema)
    values = [full, old, cls()]
    expected = [v.SerializeToString(deterministic=True) for v in values]
    assert_round_trip(tc, [v.SerializeToString() for v in values], expected)


# --------------------------------------------------------------------------------------------
# Unknown fields: `_unknown` columns built by hand (decoded ones: the round trips above)

UNKNOWN_PROTO = """
syntax = "proto3";
package unk;
message Inner { int32 x = 1; }
message Outer {
  int32 a = 1;
  Inner one = 2;
  repeated Inner many = 3;
  map<string, Inner> by_key = 4;
}
"""


def test_unknown_fields_are_appended(compile_proto) -> None:
    schema, cls = compile_proto(UNKNOWN_PROTO, "unk.Outer")
    inner_cls = type(cls().one)
    u_root = tag(99, 0) + varint(300) + tag(100, 2) + varint(2) + b"hi"
    u_one = tag(50, 5) + b"\x01\x02\x03\x04"
    u_many = tag(7, 1) + bytes(8)
    u_value = tag(9, 3) + tag(1, 0) + varint(1) + tag(9, 4)  # a group
    inner_t = pa.struct([("x", pa.int32()), ("_unknown", pa.binary())])
    arrow_schema = pa.schema(
        [
            ("a", pa.int32()),
            ("one", inner_t),
            ("many", pa.list_(inner_t)),
            ("by_key", pa.map_(pa.string(), inner_t)),
            ("_unknown", pa.binary()),
        ]
    )
    rows = [
        {
            "a": 1,
            "one": {"x": 2, "_unknown": u_one},
            "many": [{"x": 0, "_unknown": None}, {"x": 3, "_unknown": u_many}],
            "by_key": [("k", {"x": 4, "_unknown": u_value})],
            "_unknown": u_root,
        },
        {"a": 0, "one": None, "many": [], "by_key": [], "_unknown": None},
    ]
    batch = pa.RecordBatch.from_pylist(rows, schema=arrow_schema)
    # the same messages built by the runtime from bytes carrying those unknown fields
    one = inner_cls.FromString(inner_cls(x=2).SerializeToString() + u_one)
    many = inner_cls.FromString(inner_cls(x=3).SerializeToString() + u_many)
    value = inner_cls.FromString(inner_cls(x=4).SerializeToString() + u_value)
    message = cls.FromString(cls(a=1).SerializeToString() + u_root)
    message.one.CopyFrom(one)
    message.many.add()
    message.many.append(many)
    message.by_key["k"].CopyFrom(value)
    expected = [message.SerializeToString(deterministic=True), b""]
    assert expected[0].endswith(u_root)
    assert wa.Transcoder(schema).encode(batch).to_pylist() == expected


def test_unknown_must_be_binary_and_last(compile_proto) -> None:
    schema, _ = compile_proto(UNKNOWN_PROTO, "unk.Outer")
    tc = wa.Transcoder(schema)
    batch = tc.transcode([b""])
    bad = batch.append_column("_unknown", pa.array([1], pa.int32()))
    with pytest.raises(wa.EncodeError, match="_unknown: schema mismatch: must be binary"):
        tc.encode(bad)


# --------------------------------------------------------------------------------------------
# Errors


def test_flat_transcoder_cannot_encode(rich: tuple[wa.Schema, type]) -> None:
    schema, _ = rich
    tc = wa.Transcoder(schema, columns=["id"])
    with pytest.raises(wa.EncodeError, match="whole-message Transcoder"):
        tc.encode(tc.transcode([b""]))


def test_schema_mismatch_names_the_field(maps: tuple[wa.Schema, type]) -> None:
    schema, _ = maps
    tc = wa.Transcoder(schema)
    batch = tc.transcode([b""])
    i = batch.schema.get_field_index("points")
    wrong = pa.array(
        [[{"x": 1, "y": 2.5}]], pa.list_(pa.struct([("x", pa.int32()), ("y", pa.float64())]))
    )
    with pytest.raises(
        wa.EncodeError, match=r"column points\[\]\.y: schema mismatch: expected int32, got double"
    ):
        tc.encode(batch.set_column(i, "points", wrong))
    with pytest.raises(wa.EncodeError, match=r"column sign: schema mismatch: field of .* missing"):
        tc.encode(batch.drop_columns(["sign"]))
    with pytest.raises(wa.EncodeError, match="column extra: schema mismatch: is not a field"):
        tc.encode(batch.append_column("extra", pa.array([1])))


def test_null_list_element_names_row_and_path(maps: tuple[wa.Schema, type]) -> None:
    schema, cls = maps
    tc = wa.Transcoder(schema)
    batch = tc.transcode([cls().SerializeToString()] * 20)
    t = batch.schema.field("points").type
    points = [[{"x": i, "y": 0}] * 5 for i in range(20)]
    points[17][3] = {"x": None, "y": 1}  # a null inside a present message: just absent
    i = batch.schema.get_field_index("points")
    assert tc.encode(batch.set_column(i, "points", pa.array(points, t))) is not None
    points[17][3] = None
    with pytest.raises(wa.EncodeError, match=r"^row 17, column points\[3\]: null element"):
        tc.encode(batch.set_column(i, "points", pa.array(points, t)))
    signs = [[0, 1]] * 20
    signs[4] = [1, None]
    i = batch.schema.get_field_index("sign_list")
    with pytest.raises(wa.EncodeError, match=r"^row 4, column sign_list\[1\]: null element"):
        tc.encode(batch.set_column(i, "sign_list", pa.array(signs, pa.list_(pa.int32()))))


def test_packed_values_and_a_null_element(rich: tuple[wa.Schema, type]) -> None:
    # Packed varints are written one by one, packed fixed-width values as one copy of their
    # slots; a null element anywhere is an error naming it, for each kind.
    schema, cls = rich
    tc = wa.Transcoder(schema)
    values = {
        "l_double": [1.5, -0.0, 2e300],
        "l_int32": [-1, 0, 300],
        "l_uint32": [0, 2**32 - 1, 5],
        "l_uint64": [2**64 - 1, 0, 1],
        "l_sint64": [-(2**63), 7, -1],
        "l_fixed32": [1, 0, 9],
        "l_sfixed32": [-3, 0, 2**31 - 1],
        "l_sfixed64": [-(2**63), 0, 1],
        "l_bool": [True, False, True],
    }
    messages = [cls(id=str(i)) for i in range(3)]
    for name, vs in values.items():
        getattr(messages[1].lists, name).extend(vs)
        getattr(messages[2].lists, name).extend(vs[:1])
    records = [m.SerializeToString(deterministic=True) for m in messages]
    batch = tc.transcode(records)
    assert tc.encode(batch).to_pylist() == records
    assert tc.encode(batch.slice(1)).to_pylist() == records[1:]  # element slots offset
    lists = batch.column("lists")
    for name in values:
        column = lists.field(name)
        held = column.to_pylist()
        held[1] = [*held[1][:2], None]
        children = [
            pa.array(held, column.type) if f.name == name else lists.field(f.name)
            for f in lists.type
        ]
        replaced = pa.StructArray.from_arrays(children, fields=list(lists.type))
        err = _encode_error(tc, batch, "lists", replaced)
        assert (err.row, err.path) == (1, f"lists.{name}[2]"), name


def test_null_map_key_and_value(maps: tuple[wa.Schema, type]) -> None:
    schema, _ = maps
    tc = wa.Transcoder(schema)
    batch = tc.transcode([b"", b""])
    i = batch.schema.get_field_index("k_int32")
    field = batch.schema.field(i)
    entries = pa.StructArray.from_arrays(
        [pa.array([1, 2], pa.int32()), pa.array(["a", None])], names=["key", "value"]
    )
    values = pa.MapArray.from_arrays(
        pa.array([0, 0, 2], pa.int32()), entries.field(0), entries.field(1)
    )
    with pytest.raises(
        wa.EncodeError, match=r"^row 1, column k_int32\[1\]\.value: null map key or value"
    ):
        tc.encode(batch.set_column(i, field.name, values.cast(field.type)))
    # a map of one entry is written without the key sort: the same error, the same names
    lone = pa.MapArray.from_arrays(
        pa.array([0, 1, 2], pa.int32()), entries.field(0), entries.field(1)
    )
    with pytest.raises(
        wa.EncodeError, match=r"^row 1, column k_int32\[0\]\.value: null map key or value"
    ):
        tc.encode(batch.set_column(i, field.name, lone.cast(field.type)))


def test_enum_name_not_in_enum(rich: tuple[wa.Schema, type]) -> None:
    schema, cls = rich
    tc = wa.Transcoder(schema, enums="name")
    batch = tc.transcode([cls(colors=[1]).SerializeToString()] * 3)
    i = batch.schema.get_field_index("colors")
    t = batch.schema.field(i).type
    names = pa.DictionaryArray.from_arrays(
        pa.array([0, 1, 0, 2], pa.int32()), ["RED", "GREEN", "BLUE"]
    )
    column = pa.ListArray.from_arrays(pa.array([0, 1, 2, 4], pa.int32()), names).cast(t)
    with pytest.raises(
        wa.EncodeError, match=r"^row 2, column colors\[1\]: 'BLUE' is not a value of enum"
    ):
        tc.encode(batch.set_column(i, "colors", column))


def test_timestamp_out_of_range(wkt: tuple[wa.Schema, type]) -> None:
    schema, _ = wkt
    tc = wa.Transcoder(schema, timestamp_unit="s")
    batch = tc.transcode([b"", b""])
    i = batch.schema.get_field_index("ts")
    far = pa.array([0, 253_402_300_800], pa.timestamp("s", tz="UTC"))  # 10000-01-01
    with pytest.raises(
        wa.EncodeError, match=r"^row 1, column ts: timestamp .* outside google.protobuf.Timestamp"
    ):
        tc.encode(batch.set_column(i, "ts", far))


def test_oneof_with_two_members(maps: tuple[wa.Schema, type]) -> None:
    schema, cls = maps
    tc = wa.Transcoder(schema)
    batch = tc.transcode([cls(a={"x": 1}).SerializeToString()])
    i = batch.schema.get_field_index("c")
    with pytest.raises(wa.EncodeError, match=r"^row 0, column a: more than one member of a oneof"):
        tc.encode(batch.set_column(i, "c", pa.array(["x"])))


def test_null_top_level_row(maps: tuple[wa.Schema, type]) -> None:
    schema, cls = maps
    tc = wa.Transcoder(schema)
    batch = tc.transcode([cls(sign=1).SerializeToString()] * 3)
    rows = batch.to_struct_array()
    assert tc.encode(rows).to_pylist() == [cls(sign=1).SerializeToString()] * 3
    mask = pa.array([False, True, False])
    nulled = pa.StructArray.from_arrays(rows.flatten(), fields=list(rows.type), mask=mask)
    with pytest.raises(wa.EncodeError, match=r"^row 1: a null row is not a message"):
        tc.encode(nulled)


def test_empty_batch(maps: tuple[wa.Schema, type]) -> None:
    schema, _ = maps
    tc = wa.Transcoder(schema)
    assert len(tc.encode(tc.transcode([]))) == 0
    assert len(tc.encode(tc.transcode([]).slice(0, 0))) == 0
    assert tc.encode(pa.Table.from_batches([], schema=tc.arrow_schema)).to_pylist() == []


def test_output_is_zero_copy_binary(maps: tuple[wa.Schema, type]) -> None:
    schema, cls = maps
    tc = wa.Transcoder(schema)
    out = tc.encode(tc.transcode([cls(sign=1).SerializeToString()] * 1000))
    out.validate(full=True)
    assert out.type == pa.binary() and len(out) == 1000
    assert np.all(np.diff(np.frombuffer(out.buffers()[1], np.int32)) == 2)


# -- what the runtime would not write (issue 15) -------------------------------------------

STRICT = """
syntax = "proto2";
package strict;
enum Color { RED = 0; GREEN = 1; }
message Inner { required int32 a = 1; optional string s = 2; }
message M {
  required int32 r = 1;
  optional Color c = 2;
  repeated Color cs = 3 [packed = true];
  optional Inner inner = 4;
  repeated Inner inners = 5;
  map<string, Color> cm = 6;
  optional string s = 7;
}
"""
UTF8 = """
syntax = "proto3";
package utf;
message P { string s = 1; repeated string ss = 2; map<string, string> m = 3; }
"""


def _encode_error(tc: wa.Transcoder, batch: pa.RecordBatch, column: str, value: pa.Array):
    replaced = batch.set_column(batch.schema.get_field_index(column), column, value)
    with pytest.raises(wa.EncodeError) as info:
        tc.encode(replaced)
    return info.value


def test_null_required_fields_are_errors(compile_proto) -> None:
    """SerializeToString refuses a message missing a required field: so does encode."""
    schema, cls = compile_proto(STRICT, "strict.M")
    message = cls(r=1, inner={"a": 2}, inners=[{"a": 3}])
    with pytest.raises(Exception, match="missing required fields"):
        cls().SerializeToString()
    tc = wa.Transcoder(schema)
    batch = tc.transcode([message.SerializeToString()])
    assert tc.encode(batch).to_pylist() == [message.SerializeToString(deterministic=True)]
    inner_t = batch.schema.field("inner").type
    for column, value, row, path in [
        ("r", pa.array([None], pa.int32()), 0, "r"),
        ("inner", pa.array([{"a": None, "s": "x"}], inner_t), 0, "inner.a"),
        ("inners", pa.array([[{"a": 1}, {"a": None}]], pa.list_(inner_t)), 0, "inners[1].a"),
    ]:
        err = _encode_error(tc, batch, column, value)
        assert (err.row, err.path) == (row, path)
        assert "required field strict." in err.reason and "is null" in err.reason
    # An absent optional message holding a required field is fine: nothing to write.
    absent = batch.set_column(3, "inner", pa.array([None], inner_t))
    assert cls.FromString(tc.encode(absent)[0].as_py()) == cls(r=1, inners=[{"a": 3}])


def test_undeclared_values_of_closed_enums_are_errors(compile_proto) -> None:
    schema, cls = compile_proto(STRICT, "strict.M")
    with pytest.raises(ValueError):
        cls(r=1).c = 7  # the runtime has no field to hold it
    tc = wa.Transcoder(schema)
    batch = tc.transcode([cls(r=1, c=1, cs=[0, 1], cm={"k": 1}).SerializeToString()])
    cm_t = batch.schema.field("cm").type
    for column, value, path, number in [
        ("c", pa.array([7], pa.int32()), "c", 7),
        ("cs", pa.array([[1, 9]], pa.list_(pa.int32())), "cs[1]", 9),
        ("cm", pa.array([[("k", 5)]], cm_t), "cm[0].value", 5),
    ]:
        err = _encode_error(tc, batch, column, value)
        assert (err.row, err.path) == (0, path)
        assert err.reason == f"{number} is not a value of closed enum strict.Color"
    names = wa.Transcoder(schema, enums="name")
    named = names.transcode([cls(r=1, c=1).SerializeToString()])
    decimal = pa.DictionaryArray.from_arrays(pa.array([0], pa.int32()), pa.array(["7"]))
    assert _encode_error(names, named, "c", decimal).reason == "'7' is not a value of enum strict.Color"


def test_invalid_utf8_in_a_checked_string_is_an_error(compile_proto) -> None:
    schema, _ = compile_proto(UTF8, "utf.P")
    tc = wa.Transcoder(schema)
    batch = tc.transcode([b"", b""])
    bad = pa.array([b"ok", b"\xff"], pa.binary()).view(pa.string())
    keys = pa.array(["k"])
    for column, value, path in [
        ("s", bad, "s"),
        ("ss", pa.ListArray.from_arrays([0, 0, 2], bad), "ss[1]"),
        ("m", pa.MapArray.from_arrays([0, 0, 1], keys, bad.slice(1)), "m[0].value"),
        ("m", pa.MapArray.from_arrays([0, 0, 1], bad.slice(1), keys), "m[0].key"),
    ]:
        err = _encode_error(tc, batch, column, value)
        assert (err.row, err.path) == (1, path)
        assert err.reason.startswith("invalid UTF-8 in a string field")
    # proto2 strings are not validated by the runtime: the bytes are written as they are.
    strict, strict_cls = compile_proto(STRICT, "strict.M")
    tc2 = wa.Transcoder(strict)
    row = tc2.transcode([strict_cls(r=1).SerializeToString()])
    out = tc2.encode(row.set_column(6, "s", bad.slice(1)))
    assert out.to_pylist() == [b"\x08\x01:\x01\xff"]


def test_strings_of_every_short_length_are_copied_and_validated(compile_proto) -> None:
    """The encoder copies and checks short strings by overlapping words (1-3, 4-7, 8-16
    bytes), longer ones up to 256 bytes by 16-byte pairs whose last overlaps, and longer
    still in a pass and a memcpy: every length to 40 and those around the pairs' and the
    threshold's edges, a non-ASCII character or an invalid byte at its start, middle and
    end, singular, repeated and map values alike."""
    schema, cls = compile_proto(UTF8, "utf.P")
    tc = wa.Transcoder(schema)
    lengths = [*range(41), 47, 48, 49, 63, 64, 65, 100, 255, 256, 257, 300]
    texts = []
    for n in lengths:
        texts.append(("abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGH" * 7)[:n])
        for at in {0, n // 2, max(n - 2, 0)} if n >= 2 else ():
            texts.append(texts[-1][:at] + "\u00e9" + texts[-1][at + 2 :])
    messages = [cls(s=t, ss=[t, t[::-1]], m={t: t[::-1]}) for t in texts]
    records = [m.SerializeToString(deterministic=True) for m in messages]
    assert tc.encode(tc.transcode(records)).to_pylist() == records
    batch = tc.transcode([b""])
    for n in lengths[1:]:
        for at in {0, n // 2, n - 1}:
            raw = bytearray(b"x" * n)
            raw[at] = 0xFF
            bad = pa.array([bytes(raw)], pa.binary()).view(pa.string())
            for column, value, path in [
                ("s", bad, "s"),
                ("ss", pa.ListArray.from_arrays([0, 1], bad), "ss[0]"),
                ("m", pa.MapArray.from_arrays([0, 1], pa.array(["k"]), bad), "m[0].value"),
            ]:
                err = _encode_error(tc, batch, column, value)
                assert (err.row, err.path) == (0, path), (n, at)
                assert err.reason.startswith("invalid UTF-8 in a string field")


def test_rows_too_wide_for_a_prefetch_block(compile_proto) -> None:
    """Rows are encoded in blocks whose cache lines are listed ahead; rows of ~5 KB pass a
    block's list of lines and shorten the blocks after it: every row is still written."""
    schema, cls = compile_proto(UTF8, "utf.P")
    tc = wa.Transcoder(schema)
    records = [
        cls(s=f"{i:05d}" * 1000, ss=["y" * (i % 300)], m={str(i): "v"}).SerializeToString(
            deterministic=True
        )
        for i in range(700)
    ]
    assert tc.encode(tc.transcode(records)).to_pylist() == records


def test_duplicated_column_names_are_errors(maps: tuple[wa.Schema, type]) -> None:
    schema, cls = maps
    tc = wa.Transcoder(schema)
    batch = tc.transcode([cls().SerializeToString()])
    doubled = pa.RecordBatch.from_arrays(
        [*batch.columns, batch.column(0)], names=[*batch.schema.names, batch.schema.names[0]]
    )
    with pytest.raises(wa.EncodeError, match="appears twice in the batch") as info:
        tc.encode(doubled)
    assert info.value.path == batch.schema.names[0] and info.value.row is None


@randomized(5)
@given(data=st.data())
def test_random_schemas_with_extensions_round_trip(data: st.DataObject) -> None:
    """Random proto2 / editions schemas with extensions: with extensions=True they are
    columns and come back as the runtime writes them; without it they are unknown fields,
    kept in `_unknown` in wire order, and encode still gives the runtime's bytes."""
    spec = data.draw(schema_specs(extensions=True), label="schema")
    source = spec.render()
    note(source)
    compiled = compile_source(source)
    root = compiled.message_class(spec.root)
    values = data.draw(st.lists(messages(root.DESCRIPTOR), min_size=1, max_size=4))
    wire = [data.draw(wire_bytes(truncated(v))) for v in values]
    note(f"wire: {[w.hex() for w in wire]}")
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, spec.root)
    exact = [_exact(root, w) for w in wire]
    for extensions in (True, False):
        tc = wa.Transcoder(schema, extensions=extensions, keep_unknown=True,
                           unvalidated_strings="binary")  # fmt: skip
        assert_round_trip(tc, wire, exact)
    tc = wa.Transcoder(schema, extensions=True, unvalidated_strings="binary")
    assert_round_trip(tc, wire, [_drop_unknown(root, w) for w in wire])
