"""Extensions: paths ``[pkg.ext]``, ``extensions=True`` (columns), encode, protojson in/out.

The runtime (upb) is the oracle: with ``extensions=True`` a record decodes to what the
runtime holds and encodes to its ``SerializeToString(deterministic=True)`` (fields by
number, then extensions by number *descending*, then unknown fields); without it the
extensions are unknown fields, and ``keep_unknown=True`` still gives the runtime's bytes.
Random proto2 / editions schemas with extensions: test_differential.py and test_encode.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf import json_format

import wirearrow as wa
from schemagen import tag, varint

EXT = """
syntax = "proto2";
package ext;
enum Level { LOW = 0; HIGH = 1; }
message Leaf { required int32 id = 1; optional string label = 2; }
message M {
  optional int32 a = 1;
  repeated M kids = 2;
  map<string, int32> counts = 3;
  optional int32 z = 300;
  extensions 100 to 199;
}
message Plain { optional int32 x = 1; }
extend M {
  optional int32 e1 = 150;
  optional string e2 = 120;
  repeated int32 e3 = 110 [packed = true];
  optional M e4 = 130;
  optional Level level = 140;
  optional Leaf leaf = 160;
  repeated Leaf leaves = 170;
}
message Scope {
  extend M { optional bytes inner = 180; }
}
"""


@pytest.fixture
def ext(compile_proto) -> tuple[wa.Schema, type, Any]:
    schema, cls = compile_proto(EXT, "ext.M")
    pool = schema.descriptor.file.pool
    return schema, cls, pool.FindExtensionByName


def _full(cls: type, find: Any) -> Any:
    m = cls(a=1, z=5)
    m.Extensions[find("ext.e1")] = 7
    m.Extensions[find("ext.e2")] = "hi"
    m.Extensions[find("ext.e3")].extend([1, 2])
    m.Extensions[find("ext.e4")].a = 9
    m.Extensions[find("ext.e4")].Extensions[find("ext.e1")] = 3
    m.Extensions[find("ext.level")] = 1
    m.Extensions[find("ext.leaf")].id = 4
    m.Extensions[find("ext.Scope.inner")] = b"\x00"
    m.kids.add().Extensions[find("ext.e2")] = "k"
    m.counts["c"] = 1
    return m


def _record(*parts: tuple[int, int, bytes]) -> bytes:
    return b"".join(tag(number, wire) + value for number, wire, value in parts)


def test_paths_reach_extensions(ext) -> None:
    schema, cls, find = ext
    m = _full(cls, find)
    tc = wa.Transcoder(
        schema,
        ["a", "[ext.e1]", "[ext.e3]", "[ext.e4].a", "[ext.e4][ext.e1]", "[ext.e2]",
         "kids[*][ext.e2]", "kids[0].[ext.e2]", "[ext.Scope.inner]", "[ext.leaf]"],
    )  # fmt: skip
    assert tc.transcode([m.SerializeToString(), b""]).to_pylist() == [
        {"a": 1, "[ext.e1]": 7, "[ext.e3]": [1, 2], "[ext.e4].a": 9, "[ext.e4][ext.e1]": 3,
         "[ext.e2]": "hi", "kids[*][ext.e2]": "k", "kids[0].[ext.e2]": "k",
         "[ext.Scope.inner]": b"\x00", "[ext.leaf]": {"id": 4, "label": None}},
        {"a": None, "[ext.e1]": None, "[ext.e3]": [], "[ext.e4].a": None,
         "[ext.e4][ext.e1]": None, "[ext.e2]": None, "kids[*][ext.e2]": None,
         "kids[0].[ext.e2]": None, "[ext.Scope.inner]": None, "[ext.leaf]": None},
    ]  # fmt: skip


def test_extension_path_errors(ext) -> None:
    schema, _, _ = ext
    with pytest.raises(wa.PlanError) as err:
        wa.Transcoder(schema, ["[ext.e9]", "a[ext.e1]", "counts[c]", "[ext.Plain.x]"])
    problems = err.value.problems
    assert "no extension '[ext.e9]' of message ext.M in the schema (did you mean" in problems[0]
    assert "'a' is a scalar: it has no fields" in problems[1]
    assert """map 'counts': [c] is read as an extension; quote string keys: ["c"]""" in problems[2]
    assert "no extension '[ext.Plain.x]' of message ext.M" in problems[3]
    plain = wa.Schema.from_descriptor_set(schema.file_descriptor_set, "ext.Plain")
    with pytest.raises(wa.PlanError, match=r"'\[ext.e1\]': message ext.Plain declares no extensions"):
        wa.Transcoder(plain, ["[ext.e1]"])


def test_whole_messages_with_extensions(ext) -> None:
    schema, cls, find = ext
    m = _full(cls, find)
    tc = wa.Transcoder(schema, extensions=True, max_depth=2)
    names = ["a", "kids", "counts", "z", "[ext.e3]", "[ext.e2]", "[ext.e4]", "[ext.level]",
             "[ext.e1]", "[ext.leaf]", "[ext.leaves]", "[ext.Scope.inner]"]  # fmt: skip
    assert tc.arrow_schema.names == names  # fields, then the extensions by number
    kids = tc.arrow_schema.field("kids").type.value_type
    assert [kids.field(i).name for i in range(kids.num_fields)] == names
    row = tc.transcode([m.SerializeToString()]).to_pylist()[0]
    assert (row["[ext.e1]"], row["[ext.e3]"], row["[ext.level]"]) == (7, [1, 2], 1)
    assert row["[ext.e4]"]["[ext.e1]"] == 3 and row["kids"][0]["[ext.e2]"] == "k"
    assert wa.Transcoder(schema, max_depth=2).arrow_schema.names == ["a", "kids", "counts", "z"]


def test_encode_writes_extensions_as_the_runtime_does(ext) -> None:
    """upb writes fields by number, then extensions by number descending, then unknown
    fields: z (300) before every extension, 170 before 110."""
    schema, cls, find = ext
    m = _full(cls, find)
    m.Extensions[find("ext.leaves")].add(id=1)
    unknown = _record((250, 0, b"\x01"))
    wire = m.SerializeToString() + unknown
    want = cls.FromString(wire).SerializeToString(deterministic=True)
    assert want.index(tag(300, 0)) < want.index(tag(170, 2)) < want.index(tag(110, 2))
    for keep in (True, False):
        tc = wa.Transcoder(schema, extensions=True, keep_unknown=keep, max_depth=2)
        out = tc.encode(tc.transcode([wire]))[0].as_py()
        assert out == (want if keep else cls.FromString(m.SerializeToString()).SerializeToString(
            deterministic=True
        ))  # fmt: skip


def test_extensions_kept_as_unknown_fields_encode_in_the_runtimes_order(ext) -> None:
    """Without extensions=True they are unknown fields, in wire order; encode puts them as
    the runtime does: merged, packed as declared, by number descending, before the rest."""
    schema, cls, _find = ext
    wire = _record(
        (110, 0, b"\x01"),  # e3, unpacked (declared packed)
        (199, 0, b"\x09"),  # an undeclared number in the range: unknown for everyone
        (120, 2, b"\x02hi"),
        (150, 0, b"\x07"),
        (250, 0, b"\x01"),
        (130, 2, b"\x02\x08\x01"),  # e4 {a: 1}
        (110, 0, b"\x02"),
        (150, 0, b"\x08"),  # e1 again: last wins
        (130, 2, b"\x03\xe0\x12\x02"),  # e4 {z: 2}: merged with the first
        (1, 0, b"\x05"),
    )
    want = cls.FromString(wire).SerializeToString(deterministic=True)
    tc = wa.Transcoder(schema, keep_unknown=True, max_depth=2)
    batch = tc.transcode([wire, b"\x08\x01"])
    assert batch.column("_unknown")[0].as_py() == wire[: -len(_record((1, 0, b"\x05")))]
    assert tc.encode(batch).to_pylist() == [want, b"\x08\x01"]
    # a message extension missing a required field: the runtime will not serialize it
    leaf = _record((160, 2, varint(2) + _record((2, 2, b"\x00"))))
    with pytest.raises(wa.EncodeError) as err:
        tc.encode(tc.transcode([leaf]))
    assert "a required field is null in extension [ext.leaf] (kept among the unknown fields)" in (
        err.value.reason
    )


def test_protojson_reads_and_writes_extension_names(ext) -> None:
    schema, cls, _find = ext
    texts = [
        '{"a": 1, "[ext.e1]": 5, "[ext.e3]": [1, 2], "[ext.e4]": {"[ext.e1]": 2, "a": 3}}',
        '{"[ext.Scope.inner]": "AAE=", "[ext.level]": "HIGH", "kids": [{"[ext.e2]": "x"}]}',
        '{"[ext.e1]": null}',
    ]
    tc = wa.Transcoder(schema, extensions=True, max_depth=2)
    out = tc.encode(tc.transcode(texts, format="json")).to_pylist()
    assert out == [
        json_format.Parse(t, cls()).SerializeToString(deterministic=True) for t in texts
    ]
    printed = tc.to_json(tc.transcode(texts, format="json")).to_pylist()
    assert printed == [json_format.MessageToJson(cls.FromString(o), indent=None) for o in out]
    assert json.loads(printed[0])["[ext.e4]"] == {"a": 3, "[ext.e1]": 2}
    flat = wa.Transcoder(schema, ["[ext.e1]"], on_error="dead_letter")
    bad = ['{"[ext.e9]": 1}', '{"[ext.e1]": "x"}']
    assert flat.transcode(bad, format="json").num_rows == 0
    reasons = [d["reason"] for d in flat.dead_letters().to_pylist()]
    assert 'has no field named "[ext.e9]"' in reasons[0]
    assert flat.transcode(bad[:1], format="json", ignore_unknown_fields=True).num_rows == 1
    plain = wa.Schema.from_descriptor_set(schema.file_descriptor_set, "ext.Plain")
    with pytest.raises(wa.DecodeError, match=r"Message type ext\.Plain does not have extensions"):
        wa.Transcoder(plain).transcode(['{"[ext.e1]": 1}'], format="json")


def test_extensions_in_yaml(tmp_path) -> None:
    (tmp_path / "ext.proto").write_text(EXT)
    (tmp_path / "plan.yaml").write_text(
        "proto: {file: ext.proto, message: ext.M}\nextensions: true\nmax_depth: 1\n"
    )
    tc = wa.load_plan(tmp_path / "plan.yaml").transcoder()
    assert tc.spec.extensions and "[ext.e1]" in tc.arrow_schema.names


def test_an_extension_column_left_out_is_not_written(ext) -> None:
    schema, cls, find = ext
    m = _full(cls, find)
    tc = wa.Transcoder(schema, extensions=True, max_depth=1)
    batch = tc.transcode([m.SerializeToString()])
    i = batch.schema.get_field_index("[ext.e1]")
    back = cls.FromString(tc.encode(batch.remove_column(i))[0].as_py())
    assert not back.HasExtension(find("ext.e1")) and back.Extensions[find("ext.e2")] == "hi"
