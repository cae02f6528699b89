"""bytes fields that hold text (issue 33): ``bytes_as_string`` reads them as utf8 columns
wherever they are (a column, a struct's child, a list, a map's value), a value that is not
UTF-8 failing its record; ``encode`` writes the text back as the same bytes."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wirearrow as wa

PROTO = """
syntax = "proto3";
package bs;
message Item { bytes blob = 1; string name = 2; }
message Event {
  bytes payload = 1;
  repeated Item items = 2;
  map<string, bytes> attrs = 3;
  bytes raw = 4;
  int32 n = 5;
  repeated bytes many = 6;
  oneof body { bytes text = 7; int64 code = 8; }
}
"""
TEXT_FIELDS = ["bs.Event.payload", "bs.Item.blob", "bs.Event.AttrsEntry.value", "bs.Event.many",
               "bs.Event.text"]  # fmt: skip


@pytest.fixture
def bs(compile_proto):
    return compile_proto(PROTO, "bs.Event")


def test_bytes_fields_read_as_text_in_every_position(bs) -> None:
    schema, Event = bs
    tc = wa.Transcoder(schema, bytes_as_string=TEXT_FIELDS, on_error="dead_letter")
    t = tc.arrow_schema
    assert t.field("payload").type == pa.utf8() and t.field("raw").type == pa.binary()
    assert t.field("items").type.value_type.field("blob").type == pa.utf8()
    assert t.field("attrs").type.item_type == pa.utf8()
    assert t.field("many").type.value_type == pa.utf8() and t.field("text").type == pa.utf8()
    records = [
        Event(payload=b"item-0", items=[{"blob": "é".encode()}], attrs={"k": b"v"}, raw=b"\xff",
              many=[b"a", b""], text=b"t").SerializeToString(),
        Event(payload=b"\xff").SerializeToString(),  # not UTF-8: the record fails
        Event(attrs={"k": b"\xc3"}).SerializeToString(),  # (in a map value too)
        Event(many=[b"ok", b"\xe2\x82"]).SerializeToString(),
        Event(code=5).SerializeToString(),
    ]  # fmt: skip
    batch = tc.transcode(records)
    rows = batch.to_pylist()
    assert rows[0]["payload"] == "item-0" and rows[0]["items"][0]["blob"] == "é"
    assert rows[0]["attrs"] == [("k", "v")] and rows[0]["raw"] == b"\xff"
    assert rows[0]["many"] == ["a", ""] and rows[0]["text"] == "t"
    assert rows[1]["text"] is None and rows[1]["payload"] == ""
    dead = tc.dead_letters().to_pylist()
    assert [(d["index"], d["path"]) for d in dead] == [(1, "payload"), (2, "attrs[0].value"), (3, "many[1]")]
    assert {d["reason"] for d in dead} == {"invalid UTF-8 in a string field"}
    # encode writes the text back as the same bytes: byte-identical records
    assert [bytes(r) for r in tc.encode(batch).to_pylist()] == [records[0], records[4]]
    # a flat plan reads them as text too, and compares them as text in filters
    flat = wa.Transcoder(schema, columns=["payload", "items[*].blob", "items[?(.blob == 'é')].name"],
                         bytes_as_string=TEXT_FIELDS)  # fmt: skip
    assert flat.arrow_schema.types[:2] == [pa.utf8(), pa.utf8()]
    assert flat.transcode(records[:1]).to_pylist() == [
        {"payload": "item-0", "items[*].blob": "é", "items[?(.blob == 'é')].name": ""}
    ]


def test_without_the_option_bytes_stay_bytes(bs) -> None:
    schema, Event = bs
    batch = wa.Transcoder(schema, columns=["payload"]).transcode([Event(payload=b"\xff").SerializeToString()])
    assert batch.to_pylist() == [{"payload": b"\xff"}]


def test_names_are_checked_against_the_schema(bs, tmp_path) -> None:
    schema, _ = bs
    for names, message in [
        (["bs.Event.n"], "'bs.Event.n' is an int32 field, not bytes"),
        (["bs.Event.paylod"], "'bs.Event.paylod' is not a field (did you mean 'bs.Event.payload'?)"),
        (["payload"], "'payload' is not a field (did you mean 'bs.Event.payload'?)"),
        (["zz"], "'zz' is not a field (the bytes fields: bs.Event.AttrsEntry.value, bs.Event.many,"),
        ("bs.Event.payload", "must be a list of field full names"),
    ]:
        with pytest.raises(wa.PlanError, match=message.replace("(", r"\(").replace(")", r"\)").replace("?", r"\?")):
            wa.Transcoder(schema, bytes_as_string=names)  # type: ignore[arg-type]
    # one order: the same plan whatever the order of the names
    a = wa.Transcoder(schema, bytes_as_string=["bs.Item.blob", "bs.Event.payload"])
    b = wa.Transcoder(schema, bytes_as_string={"bs.Event.payload", "bs.Item.blob"})
    assert a.spec == b.spec and a.spec.bytes_as_string == ("bs.Event.payload", "bs.Item.blob")


def test_the_yaml_key(bs, tmp_path) -> None:
    _schema, Event = bs
    proto = tmp_path / "bs.proto"
    proto.write_text(PROTO)
    head = f"proto: {{file: {proto}, message: bs.Event}}\n"
    plan = wa.load_plan(head + "bytes_as_string: [bs.Event.payload]\ndenormalizer: {columns: [{path: payload}]}\n")
    assert plan.transcoder().transcode([Event(payload=b"hi").SerializeToString()]).to_pylist() == [
        {"payload": "hi"}
    ]
    with pytest.raises(wa.PlanError, match="<string>:2: bytes_as_string: expected a list of strings"):
        wa.load_plan(head + "bytes_as_string: bs.Event.payload\n")
    with pytest.raises(wa.PlanError, match=r"<string>:4: bytes_as_string\[1\]: must not be empty"):
        wa.load_plan(head + "bytes_as_string:\n  - bs.Event.payload\n  - ''\n")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(st.one_of(st.binary(max_size=6), st.text(max_size=4).map(str.encode)), min_size=1, max_size=8))
def test_agrees_with_the_runtime_on_any_bytes(bs, values: list[bytes]) -> None:
    """Each value: its UTF-8 text where bytes.decode accepts it (as the runtime reads the
    bytes), else a failed record; encode gives back the runtime's bytes."""
    schema, Event = bs
    records = [Event(payload=v, many=[v, b"x"]).SerializeToString() for v in values]
    tc = wa.Transcoder(schema, columns=["payload", "many"], bytes_as_string=TEXT_FIELDS,
                       on_error="dead_letter")  # fmt: skip
    batch = tc.transcode(records)
    expected, failed = [], []
    for i, v in enumerate(values):
        try:
            expected.append({"payload": v.decode("utf-8"), "many": [v.decode("utf-8"), "x"]})
        except UnicodeDecodeError:
            failed.append(i)
    assert batch.to_pylist() == expected
    assert tc.dead_letters().column("index").to_pylist() == failed
    whole = wa.Transcoder(schema, bytes_as_string=TEXT_FIELDS, on_error="skip")
    kept = [r for i, r in enumerate(records) if i not in failed]
    assert [bytes(r) for r in whole.encode(whole.transcode(records)).to_pylist()] == kept
