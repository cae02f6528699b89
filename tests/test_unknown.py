"""Unknown fields: the `_unknown` pseudo-field and keep_unknown, against the protobuf runtime
(oracle.runtime_unknown: the bytes the runtime kept for each message)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import wirearrow as wa
from depth import randomized
from oracle import check_unknown, runtime_unknown
from schemagen import compile_source, delimited, messages, schema_specs, tag, varint, wire_bytes


def _extra_unknown(draw: Any, used: set[int]) -> bytes:
    number = draw(st.sampled_from([n for n in (77, 4000, 2**29 - 1) if n not in used]))
    kind = draw(st.sampled_from(["varint", "bytes", "fixed32", "group"]))
    if kind == "varint":
        return tag(number, 0) + varint(draw(st.integers(0, 2**64 - 1)))
    if kind == "bytes":
        return delimited(number, draw(st.binary(max_size=40)))
    if kind == "fixed32":
        return tag(number, 5) + draw(st.binary(min_size=4, max_size=4))
    return tag(number, 3) + tag(1, 0) + varint(5) + tag(number, 4)


@randomized(8)
@given(data=st.data())
def test_random_schemas_keep_every_unknown_field(data: st.DataObject) -> None:
    spec = data.draw(schema_specs(), label="schema")
    note(spec.render())
    compiled = compile_source(spec.render())
    root = compiled.message_class(spec.root)
    values = data.draw(st.lists(messages(root.DESCRIPTOR), min_size=1, max_size=4))
    used = {fd.number for fd in root.DESCRIPTOR.fields}
    wire = []
    for value in values:
        body = data.draw(wire_bytes(value))
        # unknown fields before, between (after the first record) and after the known ones
        head = data.draw(st.lists(st.builds(lambda: None), max_size=1))
        tail = data.draw(st.lists(st.builds(lambda: None), max_size=2))
        wire.append(
            b"".join(_extra_unknown(data.draw, used) for _ in head)
            + body
            + b"".join(_extra_unknown(data.draw, used) for _ in tail)
        )
    note(f"wire: {[w.hex() for w in wire]}")
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, spec.root)
    # (binary: the generated strings that are not UTF-8 stay in their columns, so the
    # unknown fields are the runtime's; by default they would move there, tests/
    # test_unvalidated_strings.py)
    tc = wa.Transcoder(schema, keep_unknown=True, unvalidated_strings="binary")
    batch = tc.transcode(wire)
    assert batch.schema.names[-1] == "_unknown"
    for row, raw in zip(batch.to_pylist(), wire, strict=True):
        check_unknown(row, root.FromString(raw))
    # The pseudo-field by path reads the same bytes as the whole-message column.
    flat = wa.Transcoder(schema, ["_unknown"], unvalidated_strings="binary").transcode(wire)
    assert flat.column(0).equals(batch.column("_unknown"))


PROTO = """
syntax = "proto2";
package u;
message Inner { optional int32 x = 1; repeated int32 packed = 2 [packed = true]; }
message Outer {
  optional int32 a = 1;
  optional Inner inner = 2;
  repeated Inner items = 3;
  map<string, Inner> by_name = 4;
  optional group G = 5 { optional int32 y = 6; }
  optional string s = 7;
  oneof pick { int32 n = 8; Inner m = 9; }
}
"""

UNKNOWN_VARINT = tag(1000, 0) + varint(300)
UNKNOWN_BYTES = delimited(1001, b"abc")


@pytest.fixture
def outer(compile_proto):
    return compile_proto(PROTO, "u.Outer")


def test_whole_message_schema_has_unknown_in_every_struct(outer) -> None:
    schema, _ = outer
    t = wa.Transcoder(schema, keep_unknown=True).arrow_schema
    assert t.names[-1] == "_unknown" and t.field("_unknown").type == pa.binary()
    assert t.field("inner").type.field("_unknown").type == pa.binary()
    assert t.field("items").type.value_type.field("_unknown").type == pa.binary()
    assert t.field("by_name").type.item_type.field("_unknown").type == pa.binary()
    assert t.field("g").type.field("_unknown").type == pa.binary()
    plain = wa.Transcoder(schema).arrow_schema
    assert "_unknown" not in plain.names
    assert plain.field("inner").type.get_field_index("_unknown") == -1


def test_merged_occurrences_concatenate_in_wire_order(outer) -> None:
    schema, Outer = outer
    first = delimited(2, tag(1, 0) + varint(1) + UNKNOWN_VARINT)
    second = delimited(2, UNKNOWN_BYTES + tag(1, 0) + varint(2))
    between = tag(1, 0) + varint(9) + delimited(3, UNKNOWN_VARINT)  # items[0] has its own
    raw = first + between + second
    rows = wa.Transcoder(schema, keep_unknown=True).transcode([raw]).to_pylist()
    assert rows[0]["inner"]["x"] == 2
    assert rows[0]["inner"]["_unknown"] == UNKNOWN_VARINT + UNKNOWN_BYTES
    assert rows[0]["items"][0]["_unknown"] == UNKNOWN_VARINT
    check_unknown(rows[0], Outer.FromString(raw))


def test_groups_map_values_and_oneof_members_keep_theirs(outer) -> None:
    schema, Outer = outer
    group = tag(5, 3) + tag(6, 0) + varint(4) + UNKNOWN_VARINT + tag(5, 4)
    entry = delimited(4, delimited(1, b"k") + delimited(2, UNKNOWN_BYTES))
    member = delimited(9, UNKNOWN_VARINT)
    unknown_group = tag(2000, 3) + UNKNOWN_BYTES + tag(2000, 4)
    raw = group + entry + member + unknown_group
    row = wa.Transcoder(schema, keep_unknown=True).transcode([raw]).to_pylist()[0]
    assert row["g"] == {"y": 4, "_unknown": UNKNOWN_VARINT}
    assert row["by_name"] == [("k", {"x": None, "packed": [], "_unknown": UNKNOWN_BYTES})]
    assert row["m"]["_unknown"] == UNKNOWN_VARINT
    assert row["_unknown"] == unknown_group
    check_unknown(row, Outer.FromString(raw))


def test_flat_paths_read_unknown_fields_and_tell_unread_known_fields_apart(outer) -> None:
    schema, Outer = outer
    # `a` (known, unread), a known field with another wire type (unknown to the runtime too),
    # a packed run of the unread Inner.packed, and real unknown fields.
    inner = tag(2, 2) + varint(2) + varint(1) + varint(2) + tag(1, 5) + b"\x01\x02\x03\x04"
    raw = tag(1, 0) + varint(5) + UNKNOWN_VARINT + delimited(2, inner) + delimited(7, b"s")
    tc = wa.Transcoder(schema, ["s", "_unknown", "inner._unknown"])
    rows = tc.transcode([raw, tag(1, 0) + varint(1)]).to_pylist()
    message = Outer.FromString(raw)
    assert rows[0] == {
        "s": "s",
        "_unknown": runtime_unknown(message),
        "inner._unknown": runtime_unknown(message.inner),
    }
    assert rows[0]["inner._unknown"] == tag(1, 5) + b"\x01\x02\x03\x04"
    assert rows[1] == {"s": None, "_unknown": None, "inner._unknown": None}


def test_flat_keep_unknown_adds_the_record_column(outer) -> None:
    schema, _ = outer
    tc = wa.Transcoder(schema, ["a", "inner"], keep_unknown=True)
    assert tc.arrow_schema.names == ["a", "inner", "_unknown"]
    row = tc.transcode([tag(1, 0) + varint(3) + UNKNOWN_BYTES]).to_pylist()[0]
    assert row["_unknown"] == UNKNOWN_BYTES and row["inner"] is None


def test_bad_record_leaves_no_unknown_bytes_behind(outer) -> None:
    schema, _ = outer
    bad = UNKNOWN_VARINT + delimited(2, UNKNOWN_BYTES + tag(1, 2))  # truncated inside inner
    good = tag(1, 0) + varint(1)
    tc = wa.Transcoder(schema, keep_unknown=True, on_error="skip")
    rows = tc.transcode([bad, good, bad, good + UNKNOWN_BYTES]).to_pylist()
    assert [r["_unknown"] for r in rows] == [None, UNKNOWN_BYTES]
    assert [r["inner"] for r in rows] == [None, None]
    assert tc.stats.records_failed == 2


def test_pseudo_field_errors_and_real_fields_named_unknown(compile_proto, outer) -> None:
    schema, _ = outer
    with pytest.raises(wa.PlanError, match="raw bytes"):
        wa.Transcoder(schema, ["inner._unknown.x"])
    own, Own = compile_proto(
        'syntax = "proto3"; package o; message O { int32 _unknown = 1; int32 b = 2; }', "o.O"
    )
    assert wa.Transcoder(own, ["_unknown"]).transcode(
        [Own(_unknown=4).SerializeToString()]
    ).to_pylist() == [{"_unknown": 4}]
    with pytest.raises(wa.PlanError, match="_unknown"):
        wa.Transcoder(own, keep_unknown=True)
    with pytest.raises(wa.PlanError, match="_unknown"):
        wa.Transcoder(own, ["b"], keep_unknown=True)


def test_keep_unknown_survives_pickling_and_yaml(outer, tmp_path) -> None:
    import pickle

    schema, _ = outer
    tc = pickle.loads(pickle.dumps(wa.Transcoder(schema, keep_unknown=True)))
    assert tc.arrow_schema.names[-1] == "_unknown"
    proto = tmp_path / "u.proto"
    proto.write_text(PROTO)
    plan = wa.load_plan(f"proto: {{file: {proto}, message: u.Outer}}\nkeep_unknown: true\n")
    assert plan.transcoder().arrow_schema.names[-1] == "_unknown"
    with pytest.raises(wa.PlanError, match="keep_unknown"):
        wa.load_plan(f"proto: {{file: {proto}, message: u.Outer}}\nkeep_unknown: 1\n")
