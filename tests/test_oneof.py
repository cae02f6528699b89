"""Which member of a oneof is set: a path naming the oneof, and nested mode's `oneof_case`.

The runtime's ``WhichOneof`` is the oracle, on fixed schemas here and on random proto2 /
proto3 / editions schemas in test_differential.py (paths ending on a oneof) and below
(whole messages with ``oneof_case=True``, read and encoded back).
"""

from __future__ import annotations

import os
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

import wirearrow as wa
from schemagen import compile_source, messages, schema_specs, wire_bytes
from wirearrow.plan.types import real_oneofs

FEATURE = """
syntax = "proto3";
package feat;
import "google/protobuf/timestamp.proto";
import "google/protobuf/struct.proto";
message Feature {
  oneof kind {
    int64 int_value = 1;
    string str_value = 2;
    Tags tags = 3;
    google.protobuf.Timestamp at = 4;
    google.protobuf.Struct js = 5;
  }
  optional int32 weight = 6;
  oneof other { bool flag = 7; }
}
message Tags { repeated string tag = 1; }
message Doc {
  map<string, Feature> feature = 1;
  repeated Feature list = 2;
  Feature one = 3;
  oneof top { string name = 4; int32 number = 5; }
}
"""


@pytest.fixture
def doc(compile_proto) -> tuple[wa.Schema, type, Any]:
    schema, cls = compile_proto(FEATURE, "feat.Doc")
    record = cls()
    record.feature["age"].int_value = 3
    record.feature["name"].str_value = ""  # set, to its default
    record.feature["none"].weight = 1
    record.list.add().tags.tag.append("x")
    record.list.add().at.seconds = 5
    record.list.add().js.update({"a": 1})
    record.list.add()
    record.number = 0
    return schema, cls, record


def test_a_path_naming_a_oneof_reads_the_member_set(doc) -> None:
    schema, _cls, record = doc
    tc = wa.Transcoder(
        schema,
        ['feature["age"].kind', 'feature["name"].kind', 'feature["none"].kind',
         "list[*].kind", "one.kind", "top", "list[*].other"],
    )  # fmt: skip
    for field in tc.arrow_schema:
        assert field.type == pa.dictionary(pa.int32(), pa.utf8())
    batch = tc.transcode([record.SerializeToString(), b""])
    rows = [tuple(row.values()) for row in batch.to_pylist()]
    assert rows == [
        ("int_value", "str_value", None, "tags", None, "number", None),
        ("int_value", "str_value", None, "at", None, "number", None),
        ("int_value", "str_value", None, "js", None, "number", None),
        ("int_value", "str_value", None, None, None, "number", None),
        (None, None, None, None, None, None, None),
    ]
    # the dictionary is every member, in declaration order, whatever the batch holds
    column = batch.column("list[*].kind")
    assert column.dictionary.to_pylist() == ["int_value", "str_value", "tags", "at", "js"]
    assert column.indices.to_pylist()[:3] == [2, 3, 4]


def test_the_last_member_on_the_wire_is_the_one_set(doc) -> None:
    schema, cls, _ = doc
    tags = cls.DESCRIPTOR.fields_by_name["one"].message_type.fields_by_name["tags"]
    member = bytes([tags.number << 3 | 2, 2, 0x0A, 0])  # tags { tag: "" }
    inner = b"\x08\x07" + member + b"\x10\x01" + b"\x12\x01x"  # int, tags, then str_value
    record = b"\x1a" + bytes([len(inner)]) + inner
    assert cls.FromString(record).one.WhichOneof("kind") == "str_value"
    tc = wa.Transcoder(schema, ["one.kind", "one.str_value", "one.tags", "one.int_value"])
    assert tc.transcode([record]).to_pylist() == [
        {"one.kind": "str_value", "one.str_value": "x", "one.tags": None, "one.int_value": None}
    ]


def test_a_path_through_a_oneof_names_its_members(doc) -> None:
    schema, _, _ = doc
    with pytest.raises(wa.PlanError) as err:
        wa.Transcoder(schema, ['feature["age"].kind.int_value'])
    assert (
        "'kind' is a oneof of feat.Feature (members: 'int_value', 'str_value', 'tags', 'at', "
        "'js'): it reads which member is set; to read a value, name the member"
    ) in str(err.value)
    with pytest.raises(wa.PlanError, match=r"field 'knd' not in message feat.Feature \(did you mean 'kind'\?\)"):
        wa.Transcoder(schema, ["one.knd"])


def test_a_proto3_optional_is_no_oneof(compile_proto) -> None:
    schema, _ = compile_proto(
        'syntax = "proto3"; package o; message M { optional int32 x = 1; }', "o.M"
    )
    assert [o.name for o in schema.descriptor.oneofs] == ["_x"]
    assert real_oneofs(schema.descriptor) == ()
    with pytest.raises(wa.PlanError, match=r"field '_x' not in message o\.M"):
        wa.Transcoder(schema, ["_x"])
    assert wa.Transcoder(schema, oneof_case=True).arrow_schema.names == ["x"]


def test_oneof_case_columns_in_every_struct(doc) -> None:
    schema, _cls, record = doc
    tc = wa.Transcoder(schema, oneof_case=True)
    assert tc.arrow_schema.names == ["feature", "list", "one", "name", "number", "top_case"]
    feature = tc.arrow_schema.field("one").type
    assert [feature.field(i).name for i in range(feature.num_fields)] == [
        "int_value", "str_value", "tags", "at", "js", "kind_case", "weight", "flag", "other_case",
    ]  # fmt: skip
    row = tc.transcode([record.SerializeToString()]).to_pylist()[0]
    assert row["top_case"] == "number"
    assert [f["kind_case"] for f in row["list"]] == ["tags", "at", "js", None]
    assert {k: v["kind_case"] for k, v in row["feature"]} == {
        "age": "int_value", "name": "str_value", "none": None,
    }  # fmt: skip
    assert row["one"] is None
    assert wa.Transcoder(schema).arrow_schema.names == ["feature", "list", "one", "name", "number"]


def test_encode_writes_the_member_the_case_names(doc) -> None:
    schema, cls, record = doc
    tc = wa.Transcoder(schema, oneof_case=True)
    batch = tc.transcode([record.SerializeToString()])
    assert tc.encode(batch)[0].as_py() == record.SerializeToString(deterministic=True)
    rows = batch.to_pylist()
    # another member named: it is written, the one the row held is not (no need to null it)
    rows[0]["list"][0]["int_value"] = 9
    rows[0]["list"][0]["kind_case"] = "int_value"
    rows[0]["top_case"] = None  # none: `number` is not written
    back = cls.FromString(tc.encode(pa.RecordBatch.from_pylist(rows, schema=batch.schema))[0].as_py())
    assert back.list[0].WhichOneof("kind") == "int_value" and back.list[0].int_value == 9
    assert back.WhichOneof("top") is None
    assert back.list[1] == record.list[1]


@pytest.mark.parametrize(
    ("where", "value", "reason"),
    [
        ("kind_case", "tags", "the case names 'tags', which is null"),
        ("kind_case", "bogus", "'bogus' is not a member of the oneof (int_value, str_value, tags, at, js)"),
    ],
)  # fmt: skip
def test_a_case_naming_a_null_member_or_no_member_is_an_error(doc, where, value, reason) -> None:
    schema, _cls, record = doc
    tc = wa.Transcoder(schema, oneof_case=True)
    batch = tc.transcode([record.SerializeToString()] * 2)
    rows = batch.to_pylist()
    rows[1]["list"][1][where] = value
    bad = pa.RecordBatch.from_pylist(rows, schema=batch.schema)
    with pytest.raises(wa.EncodeError) as err:
        tc.encode(bad)
    assert (err.value.row, err.value.path, err.value.reason) == (1, "list[1].kind_case", reason)
    out = tc.encode(bad, on_error="dead_letter")
    assert out.records.is_null().to_pylist() == [False, True]
    assert out.failures.to_pylist() == [{"row": 1, "path": "list[1].kind_case", "reason": reason}]


def test_the_case_column_may_be_plain_strings(doc) -> None:
    schema, _cls, record = doc
    tc = wa.Transcoder(schema, oneof_case=True)
    batch = tc.transcode([record.SerializeToString()])
    i = batch.schema.get_field_index("top_case")
    plain = batch.set_column(i, "top_case", batch.column(i).cast(pa.utf8()))
    assert tc.encode(plain)[0].as_py() == record.SerializeToString(deterministic=True)
    wrong = batch.set_column(i, "top_case", pa.array([1], pa.int32()))
    with pytest.raises(wa.EncodeError, match="top_case: schema mismatch: expected string"):
        tc.encode(wrong)


def test_a_field_named_like_a_case_column_is_a_plan_error(compile_proto) -> None:
    schema, _ = compile_proto(
        'syntax = "proto3"; package o; message M { oneof k { int32 a = 1; } int32 k_case = 2; '
        "M inner = 3; }",
        "o.M",
    )
    with pytest.raises(wa.PlanError, match="has a field named 'k_case'"):
        wa.Transcoder(schema, oneof_case=True, max_depth=2)
    wa.Transcoder(schema, ["k"])  # the path is fine


def test_oneof_case_in_yaml(tmp_path) -> None:
    (tmp_path / "f.proto").write_text(FEATURE)
    (tmp_path / "plan.yaml").write_text(
        "proto: {file: f.proto, message: feat.Doc}\noneof_case: true\n"
    )
    tc = wa.load_plan(tmp_path / "plan.yaml").transcoder()
    assert tc.spec.oneof_case and "top_case" in tc.arrow_schema.names
    (tmp_path / "bad.yaml").write_text("proto: {file: f.proto, message: feat.Doc}\noneof_case: 1\n")
    with pytest.raises(wa.PlanError, match="oneof_case"):
        wa.load_plan(tmp_path / "bad.yaml")


# --------------------------------------------------------------------------------------------
# Random schemas: whole messages with oneof_case, against the runtime


def _cases(descriptor: Any, row: dict, message: Any) -> None:
    """Every struct's `<oneof>_case` is the runtime's WhichOneof (strings the schema does
    not validate read as binary: none moves to the unknown fields)."""
    for oneof in real_oneofs(descriptor):
        member = message.WhichOneof(oneof.name)
        assert row[f"{oneof.name}_case"] == member, (descriptor.full_name, oneof.name)
    for fd in descriptor.fields:
        if fd.message_type is None or not isinstance(row.get(fd.name), dict | list):
            continue
        value, held = row[fd.name], getattr(message, fd.name)
        if fd.message_type.GetOptions().map_entry:
            continue  # (map values: checked through the encode round trip)
        if fd.is_repeated:
            for sub, item in zip(value, held, strict=True):
                if isinstance(sub, dict):
                    _cases(fd.message_type, sub, item)
        elif isinstance(value, dict):
            _cases(fd.message_type, value, held)


_SCALE = float(os.environ.get("WIREARROW_HYPOTHESIS_SCALE", "1"))


@settings(
    max_examples=max(1, int(40 * _SCALE)),
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    phases=[p for p in Phase if p is not Phase.shrink]
    if os.environ.get("WIREARROW_HYPOTHESIS_SHRINK", "1") == "0"
    else list(Phase),
)
@given(data=st.data())
def test_random_schemas_oneof_case(data: st.DataObject) -> None:
    spec = data.draw(schema_specs(), label="schema")
    note(spec.render())
    compiled = compile_source(spec.render())
    root = compiled.message_class(spec.root)
    values = data.draw(st.lists(messages(root.DESCRIPTOR), min_size=1, max_size=4))
    wire = [data.draw(wire_bytes(v)) for v in values]
    note(f"wire: {[w.hex() for w in wire]}")
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, spec.root)
    tc = wa.Transcoder(schema, oneof_case=True, keep_unknown=True, unvalidated_strings="binary")
    batch = tc.transcode(wire)
    for row, record in zip(batch.to_pylist(), wire, strict=True):
        _cases(root.DESCRIPTOR, row, root.FromString(record))
    plain = wa.Transcoder(schema, keep_unknown=True, unvalidated_strings="binary")
    assert tc.encode(batch).to_pylist() == plain.encode(plain.transcode(wire)).to_pylist()
