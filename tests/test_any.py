"""``any_types``: an ``Any`` read as the message types it may hold.

The runtime is the oracle: a declared type's struct holds what ``Any.Unpack`` gives (the
type named after the last '/' of the type URL, ``Any.Is``), null where the URL names another
type or none; ``type_url`` and ``value`` stay as they came; bad bytes inside a matched value
fail that record with the path into it. Random schemas: test_differential.py.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from hypothesis import event, given, note
from hypothesis import strategies as st

import wirearrow as wa
from depth import randomized
from oracle import assert_rows_equal, expected_rows
from schemagen import compile_source, messages, schema_specs, tag, wire_bytes

SOURCE = """
syntax = "proto3";
package anyt;
import "google/protobuf/any.proto";
message Click { int32 x = 1; string label = 2; repeated int64 ids = 3; Inner inner = 4; }
message Inner { optional int32 depth = 1; google.protobuf.Any nested = 2; }
message View { string page = 1; }
message Other { int32 y = 1; }
message Event {
  string id = 1;
  google.protobuf.Any payload = 2;
  repeated google.protobuf.Any items = 3;
  map<string, google.protobuf.Any> extra = 4;
  oneof choice { google.protobuf.Any either = 5; int32 number = 6; }
}
"""

TYPES = ["anyt.Click", "anyt.View"]


@pytest.fixture
def anyt(compile_proto) -> tuple[wa.Schema, type, Any]:
    schema, cls = compile_proto(SOURCE, "anyt.Event")
    pool = schema.descriptor.file.pool
    from google.protobuf import message_factory

    def make(name: str) -> type:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))

    return schema, cls, make


def _events(cls: type, make: Any) -> list[Any]:
    Click, View, Other = make("anyt.Click"), make("anyt.View"), make("anyt.Other")
    out = []
    e = cls(id="a")
    e.payload.Pack(Click(x=5, label="hi", ids=[1, 2], inner={"depth": 3}))
    e.items.add().Pack(View(page="home"))
    e.items.add().Pack(Other(y=1))
    e.items.add().Pack(Click(x=-1))
    e.extra["k"].Pack(View(page="p"))
    e.either.Pack(Click(x=7))
    out.append(e)
    e = cls(id="b")  # another prefix: the runtime matches after the last '/'
    e.payload.Pack(View(page="v"), type_url_prefix="example.com/types/")
    out.append(e)
    e = cls(id="c")
    e.payload.Pack(Other(y=2))  # not declared: bytes only
    e.number = 4
    out.append(e)
    out.append(cls(id="d"))  # no Any at all
    e = cls(id="e")
    e.payload.type_url = "anyt.Click"  # no '/': names no type (Any.Is is false)
    e.payload.value = Click(x=1).SerializeToString()
    out.append(e)
    e = cls(id="f")
    e.payload.type_url = "type.googleapis.com/anyt.Click"  # no value: the empty message
    out.append(e)
    return out


def _unpacked(any_msg: Any, make: Any, name: str) -> dict | None:
    """What the runtime unpacks an Any to as `name`, as json_format's dict, or None."""
    cls = make(name)
    if not any_msg.Is(cls.DESCRIPTOR):
        return None
    m = cls()
    assert any_msg.Unpack(m)
    return json_format.MessageToDict(m, preserving_proto_field_name=True)


def _as_dict(struct: dict | None, cls_name: str) -> dict | None:
    """Our struct's value in json_format's shape (defaults left out, int64 as text)."""
    if struct is None:
        return None
    out: dict = {}
    for k, v in struct.items():
        if v in (None, 0, "", []) or (k == "inner" and v is None):
            continue
        if k == "ids":
            v = [str(i) for i in v]
        if k == "inner":
            v = {kk: vv for kk, vv in v.items() if vv is not None}
        out[k] = v
    return out


def test_whole_messages_unpack_declared_types(anyt) -> None:
    schema, cls, make = anyt
    events = _events(cls, make)
    tc = wa.Transcoder(schema, any_types=TYPES)
    rows = tc.transcode([e.SerializeToString() for e in events]).to_pylist()
    assert len(rows) == len(events)
    t = tc.arrow_schema.field("payload").type
    assert [f.name for f in t] == ["type_url", "value", "[anyt.Click]", "[anyt.View]"]
    for e, row in zip(events, rows, strict=True):
        for field, anys, got in (
            ("payload", [e.payload] if e.HasField("payload") else [], [row["payload"]]),
            ("items", list(e.items), row["items"]),
            ("extra", [e.extra[k] for k in e.extra], [v for _, v in row["extra"]]),
            ("either", [e.either] if e.HasField("either") else [], [row["either"]]),
        ):
            if not anys:
                assert got in ([None], []), field
                continue
            for a, g in zip(anys, got, strict=True):
                assert g["type_url"] == a.type_url
                assert g["value"] == a.value
                for name in TYPES:
                    want = _unpacked(a, make, name)
                    assert _as_dict(g[f"[{name}]"], name) == want, (e.id, field, name)


def test_paths_reach_inside(anyt) -> None:
    schema, cls, make = anyt
    events = _events(cls, make)
    tc = wa.Transcoder(
        schema,
        [
            "id",
            "payload[anyt.Click].x",
            "payload[anyt.Click].ids",
            "payload[anyt.Click].inner.depth",
            "payload[anyt.View].page",
            "payload.type_url",
        ],
        any_types=TYPES,
    )
    got = tc.transcode([e.SerializeToString() for e in events]).to_pydict()
    assert got["payload[anyt.Click].x"] == [5, None, None, None, None, 0]
    assert got["payload[anyt.Click].ids"] == [[1, 2], None, None, None, None, []]
    assert got["payload[anyt.Click].inner.depth"] == [3, None, None, None, None, None]
    assert got["payload[anyt.View].page"] == [None, "v", None, None, None, None]
    fan = wa.Transcoder(schema, ["id", "items[*][anyt.Click].x", "items[*].type_url"], any_types=TYPES)
    out = fan.transcode([events[0].SerializeToString()]).to_pydict()
    assert out["items[*][anyt.Click].x"] == [None, None, -1]
    assert out["items[*].type_url"] == [a.type_url for a in events[0].items]
    whole = wa.Transcoder(schema, ["payload[anyt.Click]"], any_types=TYPES)
    col = whole.transcode([events[0].SerializeToString()]).column(0).to_pylist()
    assert col[0]["x"] == 5 and col[0]["label"] == "hi"


def test_plan_errors_name_the_declared_types(anyt) -> None:
    schema, *_ = anyt
    with pytest.raises(wa.PlanError, match=r"any_types: 'anyt.Clik' is not a message.*anyt.Click"):
        wa.Transcoder(schema, ["id"], any_types=["anyt.Clik"])
    with pytest.raises(wa.PlanError, match=r"\[anyt.Other\] is not in any_types"):
        wa.Transcoder(schema, ["payload[anyt.Other].y"], any_types=TYPES)
    with pytest.raises(wa.PlanError, match=r"any_types=\['anyt.Click'\]"):
        wa.Transcoder(schema, ["payload[anyt.Click].x"])
    with pytest.raises(wa.PlanError, match="more than the limit"):
        wa.Transcoder(schema, ["id"], any_types=[f"a.T{i}" for i in range(65)])


def _record(*parts: tuple[int, int, bytes]) -> bytes:
    return b"".join(tag(number, wire) + value for number, wire, value in parts)


def _ld(b: bytes) -> bytes:
    assert len(b) < 128
    return bytes([len(b)]) + b


def test_bad_bytes_inside_a_matched_value_fail_their_record(anyt) -> None:
    schema, cls, make = anyt
    url = b"type.googleapis.com/anyt.Click"
    good = cls(id="ok").SerializeToString()
    truncated = _record((2, 2, _ld(_record((1, 2, _ld(url)), (2, 2, _ld(b"\x08"))))))
    garbage = _record((2, 2, _ld(_record((1, 2, _ld(url)), (2, 2, _ld(b"\x12\x05ab"))))))
    # the same bytes under an undeclared type are only bytes
    other = _record(
        (2, 2, _ld(_record((1, 2, _ld(b"type.googleapis.com/anyt.Other")), (2, 2, _ld(b"\x08")))))
    )
    records = [good, truncated, garbage, other, good]
    for columns in (None, ["id", "payload[anyt.Click].x"], ["id"]):
        tc = wa.Transcoder(schema, columns, any_types=TYPES, on_error="dead_letter")
        decoded = tc.decode(records)
        if columns == ["id"]:  # the plan does not read the Any: nothing to check
            assert decoded.rows.num_rows == 5
            continue
        assert decoded.rows.num_rows == 3
        letters = decoded.dead_letters.to_pylist()
        assert [d["index"] for d in letters] == [1, 2]
        assert [d["path"] for d in letters] == ["payload[anyt.Click].x", "payload[anyt.Click].label"]
        # the runtime refuses them too
        for bad in (truncated, garbage):
            any_msg = cls.FromString(bad).payload
            with pytest.raises(DecodeError):
                any_msg.Unpack(make("anyt.Click")())
    tc = wa.Transcoder(schema, any_types=TYPES, on_error="raise")
    with pytest.raises(wa.DecodeError, match=r"record 1.*payload\[anyt.Click\]"):
        tc.transcode(records)


def test_an_any_sent_twice_is_refused_not_misread(anyt) -> None:
    schema, cls, make = anyt
    a = cls()
    a.payload.Pack(make("anyt.Click")(x=1))
    b = cls()
    b.payload.Pack(make("anyt.Click")(label="z"))
    twice = a.SerializeToString() + b.SerializeToString()
    tc = wa.Transcoder(schema, any_types=TYPES, on_error="dead_letter")
    decoded = tc.decode([twice])
    assert decoded.rows.num_rows == 0
    assert "twice" in decoded.dead_letters.to_pylist()[0]["reason"]
    # without any_types the merge is the runtime's (last type_url, last value)
    plain = wa.Transcoder(schema, ["payload.value"]).transcode([twice]).column(0).to_pylist()
    assert plain == [cls.FromString(twice).payload.value]


def test_a_declared_type_is_not_unpacked_inside_itself(anyt) -> None:
    schema, cls, make = anyt
    tc = wa.Transcoder(schema, ["payload"], any_types=TYPES)
    inner = tc.arrow_schema.field("payload").type.field("[anyt.Click]").type.field("inner").type
    nested = inner.field("nested").type
    assert [f.name for f in nested] == ["type_url", "value"]
    # a path can still go there
    Click = make("anyt.Click")
    e = cls()
    c = Click(x=1)
    c.inner.nested.Pack(Click(x=2))
    e.payload.Pack(c)
    deep = wa.Transcoder(schema, ["payload[anyt.Click].inner.nested[anyt.Click].x"], any_types=TYPES)
    assert deep.transcode([e.SerializeToString()]).column(0).to_pylist() == [2]


def test_no_any_types_reads_as_before(anyt) -> None:
    schema, cls, make = anyt
    events = _events(cls, make)
    tc = wa.Transcoder(schema)
    t = tc.arrow_schema.field("payload").type
    assert t == pa.struct([("type_url", pa.utf8()), ("value", pa.binary())])
    rows = tc.transcode([e.SerializeToString() for e in events]).column("payload").to_pylist()
    assert rows[0] == {"type_url": events[0].payload.type_url, "value": events[0].payload.value}


def test_encode_round_trips_byte_identical(anyt) -> None:
    schema, cls, make = anyt
    events = _events(cls, make)
    for keep in (False, True):
        tc = wa.Transcoder(schema, any_types=TYPES, keep_unknown=keep)
        batch = tc.transcode([e.SerializeToString() for e in events])
        got = tc.encode(batch).to_pylist()
        assert got == [e.SerializeToString(deterministic=True) for e in events]


def test_encode_writes_a_declared_struct_where_value_is_null(anyt) -> None:
    schema, cls, make = anyt
    events = _events(cls, make)[:2]
    tc = wa.Transcoder(schema, any_types=TYPES)
    batch = tc.transcode([e.SerializeToString() for e in events])
    rows = batch.to_pylist()
    # a user's rows: the struct set, the raw value left out (null); another value changed
    rows[0]["payload"]["value"] = None
    rows[0]["payload"]["[anyt.Click]"]["x"] = 42
    rows[1]["payload"]["[anyt.View]"]["page"] = "ignored: the raw value wins"
    edited = pa.RecordBatch.from_pylist(rows, schema=batch.schema)
    back = [cls.FromString(b) for b in tc.encode(edited).to_pylist()]
    click = make("anyt.Click")()
    assert back[0].payload.Unpack(click) and click.x == 42 and click.label == "hi"
    want = events[0].payload
    assert back[0].payload.type_url == want.type_url
    want_click = make("anyt.Click")()
    want.Unpack(want_click)
    want_click.x = 42
    assert back[0].payload.value == want_click.SerializeToString(deterministic=True)
    assert back[1] == events[1]


# --------------------------------------------------------------------------------------------
# Random schemas: a generated message type declared in any_types, packed into Anys (with
# the wire noise schemagen writes, and truncated), against the runtime.

HOLDER = """
message ZzAnyHolder {{
  {label}google.protobuf.Any a = 1;
  repeated google.protobuf.Any many = 2;
}}
"""


def _holder_source(spec: Any) -> str:
    source = spec.render()
    header, _, rest = source.partition(f"package {spec.package};\n")
    imports = 'import "google/protobuf/any.proto";\n'
    label = "optional " if spec.syntax == "proto2" else ""
    return header + f"package {spec.package};\n" + imports + rest + HOLDER.format(label=label)


@randomized(8)
@given(data=st.data())
def test_random_types_in_anys_against_the_runtime(data: st.DataObject) -> None:
    spec = data.draw(schema_specs(), label="schema")
    source = _holder_source(spec)
    note(source)
    compiled = compile_source(source)
    root = compiled.message_class(spec.root)
    holder_cls = compiled.message_class(f"{spec.package}.ZzAnyHolder")
    values = data.draw(st.lists(messages(root.DESCRIPTOR), min_size=1, max_size=3), label="messages")
    prefixes = st.sampled_from(["type.googleapis.com/", "example.com/x/", "/", ""])
    holders = []
    for value in values:
        wire = data.draw(wire_bytes(value))
        cut = data.draw(st.integers(0, 3), label="bytes cut off the value")
        h = holder_cls()
        h.a.type_url = data.draw(prefixes) + spec.root
        h.a.value = wire[: len(wire) - cut] if cut < len(wire) else wire
        for _ in range(data.draw(st.integers(0, 2))):
            other = h.many.add()
            if data.draw(st.booleans()):
                other.type_url = "type.googleapis.com/" + spec.root
                other.value = data.draw(wire_bytes(value))
            else:  # an undeclared type: any bytes, never looked into
                other.type_url = "type.googleapis.com/gen.Undeclared"
                other.value = data.draw(st.binary(max_size=8))
        holders.append(h)
    note(f"holders: {[h.SerializeToString().hex() for h in holders]}")
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, f"{spec.package}.ZzAnyHolder")
    tc = wa.Transcoder(schema, any_types=[spec.root], on_error="dead_letter")
    decoded = tc.decode([h.SerializeToString() for h in holders])
    rows = iter(decoded.rows.to_pylist())
    letters = {d["index"]: d for d in decoded.dead_letters.to_pylist()}
    name = f"[{spec.root}]"
    struct_type = tc.arrow_schema.field("a").type.field(name).type
    struct_schema = pa.schema(list(struct_type))
    pairs = [(f.name, f.name) for f in struct_schema]
    for i, h in enumerate(holders):
        anys = [h.a, *h.many]
        unpacked = []
        for a in anys:
            m = root()
            try:
                ok = a.Unpack(m)
            except Exception:  # the runtime refuses the value: so must the record
                unpacked = None
                break
            unpacked.append(m if ok else None)
        if unpacked is None:
            event("a value the runtime refuses")
            assert i in letters, f"record {i}: the runtime refuses a value, we did not"
            assert letters[i]["path"].startswith(("a" + name, "many[")), letters[i]
            continue
        assert i not in letters, letters.get(i)
        row = next(rows)
        got = [row["a"], *row["many"]]
        for a, m, g in zip(anys, unpacked, got, strict=True):
            assert g["type_url"] == a.type_url and g["value"] == a.value
            if m is None:
                assert g[name] is None
                event("an Any of no declared type")
                continue
            event("an Any unpacked")
            want = expected_rows(root, [a.value], pairs)
            assert_rows_equal(struct_schema, [g[name]], want, "unpacked")
    assert next(rows, None) is None
    # encode: the raw values win, byte for byte the runtime's deterministic serialization
    kept = [h for i, h in enumerate(holders) if i not in letters]
    again = tc.encode(decoded.rows).to_pylist()
    assert again == [h.SerializeToString(deterministic=True) for h in kept]
    # JSON out: as json_format prints the message ({"@type": ..., fields} per Any), where it can
    pool = schema.descriptor.file.pool
    for k, h in enumerate(kept):
        try:
            want_text = json_format.MessageToJson(h, indent=None, descriptor_pool=pool)
        except Exception:  # an Any it cannot resolve or parse: nothing to compare
            continue
        event("JSON compared")
        assert tc.to_json(decoded.rows.slice(k, 1))[0].as_py() == want_text


def test_json_in_and_out_as_json_format(anyt) -> None:
    schema, cls, make = anyt
    events = _events(cls, make)[:3]  # (the runtime prints only Anys whose URL it resolves)
    tc = wa.Transcoder(schema, any_types=TYPES)
    pool = schema.descriptor.file.pool
    texts = [json_format.MessageToJson(e, indent=None, descriptor_pool=pool) for e in events]
    assert '"@type": "type.googleapis.com/anyt.Click"' in texts[0]
    from_json = tc.transcode(texts, format="json")
    from_wire = tc.transcode([e.SerializeToString(deterministic=True) for e in events])
    assert from_json.to_pylist() == from_wire.to_pylist()
    assert from_json.column("payload")[0].as_py()["[anyt.Click]"]["x"] == 5
    assert tc.to_json(from_wire).to_pylist() == texts
    # a struct set where the raw value is null prints as the runtime prints that message
    rows = from_wire.to_pylist()
    rows[0]["payload"]["value"] = None
    rows[0]["payload"]["[anyt.Click]"]["label"] = "edited"
    edited = pa.RecordBatch.from_pylist(rows, schema=from_wire.schema)
    printed = json_format.Parse(tc.to_json(edited)[0].as_py(), cls(), descriptor_pool=pool)
    want = cls()
    want.CopyFrom(events[0])
    click = make("anyt.Click")()
    want.payload.Unpack(click)
    click.label = "edited"
    want.payload.Pack(click, deterministic=True)
    assert printed == want


def test_a_later_oneof_member_unsets_the_unpacked_any(anyt) -> None:
    schema, cls, make = anyt
    first = cls()
    first.either.Pack(make("anyt.Click")(x=7))
    record = first.SerializeToString() + cls(number=4).SerializeToString()
    assert cls.FromString(record).WhichOneof("choice") == "number"
    for validate in ("plan", "full"):
        tc = wa.Transcoder(
            schema, ["either[anyt.Click].x", "either", "number"], any_types=TYPES, validate=validate
        )
        assert tc.transcode([record]).to_pylist() == [
            {"either[anyt.Click].x": None, "either": None, "number": 4}
        ]


def test_yaml_plans_declare_any_types(anyt, tmp_path) -> None:
    from wirearrow.config import load_plan

    _schema, cls, make = anyt
    e = cls(id="y")
    e.payload.Pack(make("anyt.View")(page="p"))
    (tmp_path / "anyt.proto").write_text(SOURCE)
    plan = load_plan(
        f"""
proto:
  file: {tmp_path / "anyt.proto"}
  message: anyt.Event
denormalizer:
  columns:
    - name: page
      path: payload[anyt.View].page
any_types: [anyt.View]
"""
    )
    assert plan.options["any_types"] == ("anyt.View",)
    rows = plan.transcoder().transcode([e.SerializeToString()]).to_pylist()
    assert rows == [{"page": "p"}]
    with pytest.raises(wa.PlanError, match="any_types"):
        load_plan(f"proto: {{file: {tmp_path / 'anyt.proto'}, message: anyt.Event}}\nany_types: anyt.View\n")
