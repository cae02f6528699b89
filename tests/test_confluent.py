"""framing="confluent": records as Confluent's serializers write them to Kafka.

The records come from confluent-kafka's own ProtobufSerializer (tests/confluent_data.py);
the oracle for the rows is the transcoder on the bare payloads (the protobuf runtime's
serialization of the same messages), itself checked against upb by the differential tests.
"""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

import wirearrow as wa
from wirearrow.sources.confluent import SchemaIds

pytest.importorskip("confluent_kafka.schema_registry.protobuf")

import confluent_data


@pytest.fixture(scope="module")
def versions() -> tuple[wa.Schema, wa.Schema]:
    return confluent_data.schemas()


@pytest.fixture(scope="module")
def data(versions):
    return confluent_data.orders(*versions)


def test_rows_equal_the_bare_payloads_for_every_schema_version(versions, data) -> None:
    v1, v2 = versions
    framed, payloads, ids = data
    assert {r[1:5] for r in framed} == {b"\0\0\0\1", b"\0\0\0\2"}  # two registered versions
    tc = wa.Transcoder(v2)
    for records in (framed, pa.array(framed, pa.binary()), pa.array(framed, pa.large_binary())):
        got = tc.transcode(records, framing="confluent", schemas={1: v1, 2: v2}, schema_id=True)
        want = tc.transcode(payloads).to_pylist()
        # each version is decoded with its own schema: a field v1 does not have (total) is
        # null for its records, not v2's default (docs/evolution.md)
        for row, sid in zip(want, ids, strict=True):
            if sid == 1:
                row["total"] = None
        assert got.drop_columns(["_schema_id"]).to_pylist() == want
        assert got.schema.remove(got.schema.get_field_index("_schema_id")).equals(tc.arrow_schema)
        assert got.column("_schema_id").to_pylist() == ids
    flat = wa.Transcoder(v2, ["id", "lines[*].note.text"])
    got = flat.transcode(framed, framing="confluent", schemas={1: v1, 2: v2}, record_index=True)
    assert got.drop_columns(["_record_index"]).equals(flat.transcode(payloads))


def test_nested_message_types_follow_the_index_path(versions) -> None:
    from google.protobuf import message_factory

    v1, _ = versions
    producer = confluent_data.Producer()
    line_schema = v1.message("shop.Order.Line")
    Line = message_factory.GetMessageClass(line_schema.descriptor)
    Order = message_factory.GetMessageClass(v1.descriptor)
    line = producer.serialize(Line(sku="a", qty=3), topic="lines")
    order = producer.serialize(Order(id="x"), topic="orders")
    assert line[5:8] == b"\x04\x02\x00"  # the path [1, 0]: Order (second message), Line
    line_id = int.from_bytes(line[1:5], "big")
    order_id = int.from_bytes(order[1:5], "big")
    schemas = {line_id: line_schema, order_id: v1}
    tc = wa.Transcoder(line_schema, on_error="dead_letter")
    rows = tc.transcode([line, order], framing="confluent", schemas=schemas)
    assert rows.to_pylist() == [{"sku": "a", "qty": 3}]
    (dead,) = tc.dead_letters().to_pylist()
    assert dead["index"] == 1 and dead["raw"] == order
    assert dead["reason"] == (
        f"Confluent schema id {order_id}, message index [1] names shop.Order, not shop.Order.Line"
    )


def test_bad_prefixes_are_dead_letters_with_their_reason(versions, data) -> None:
    v1, v2 = versions
    framed, payloads, _ = data
    good = framed[1]
    other = b"\x00\x00\x00\x00\x01\x00" + b"\x0a\x01z"  # index [0]: shop.Other
    bad = [
        (b"\x01" + good[1:], "not Confluent framing: magic byte 0x01, not 0"),
        (good[:4], "truncated Confluent prefix (4 bytes)"),
        (good[:5], "truncated Confluent prefix (5 bytes)"),
        (b"\x00\x00\x00\x00\x07" + good[5:], "Confluent schema id 7 is not mapped to a schema"),
        (other, "Confluent schema id 1, message index [0] names shop.Other, not shop.Order"),
        (b"\x00\x00\x00\x00\x01\x01" + good[6:], "bad Confluent message-index array"),
        (b"\x00\x00\x00\x00\x01\x06\x02", "truncated Confluent prefix (7 bytes)"),
        (payloads[1], "not Confluent framing: magic byte 0x0a, not 0"),  # a bare payload
        (b"", "truncated Confluent prefix (0 bytes)"),
    ]
    records = [good] + [r for r, _ in bad] + [good[:7] + b"\xff"]
    tc = wa.Transcoder(v2, on_error="dead_letter")
    rows = tc.transcode(records, framing="confluent", schemas={1: v1, 2: v2})
    assert rows.column("id").to_pylist() == ["o1"]
    dead = tc.dead_letters().to_pylist()
    assert [(d["index"], d["reason"], d["raw"]) for d in dead[:-1]] == [
        (i + 1, reason, raw) for i, (raw, reason) in enumerate(bad)
    ]
    # A payload error counts its offset from the record's first byte, prefix included.
    assert dead[-1]["index"] == len(records) - 1 and dead[-1]["offset"] == 7
    assert dead[-1]["raw"] == records[-1]
    s = tc.stats
    assert (s.records_in, s.records_ok, s.records_failed) == (len(records), 1, len(records) - 1)
    with pytest.raises(wa.DecodeError, match=r"record 1.*magic byte 0x01"):
        wa.Transcoder(v2).transcode(records, framing="confluent", schemas={1: v1, 2: v2})


def test_a_lookup_function_is_asked_once_per_new_id(versions, data) -> None:
    v1, v2 = versions
    framed, _payloads, _ = data
    asked: list[int] = []

    def lookup(schema_id: int) -> wa.Schema | None:
        asked.append(schema_id)
        return {1: v1, 2: v2}.get(schema_id)

    tc = wa.Transcoder(v2, on_error="skip")
    stray = b"\x00\x00\x00\x00\x09" + framed[0][5:]
    want = wa.Transcoder(v2).transcode(framed, framing="confluent", schemas={1: v1, 2: v2})
    for _ in range(3):
        rows = tc.transcode([*framed, stray], framing="confluent", schemas=lookup)
        assert rows.equals(want)
    assert sorted(asked) == [1, 2, 9]
    ids = SchemaIds(lookup)
    assert pickle.loads(pickle.dumps(SchemaIds({1: v1}))).schema(1) == v1
    assert ids.schema(2) == v2 and ids.schema(5) is None


def test_wrong_arguments_are_refused(versions, data) -> None:
    v1, v2 = versions
    framed, _, _ = data
    tc = wa.Transcoder(v2)
    with pytest.raises(ValueError, match="needs schemas="):
        tc.transcode(framed, framing="confluent")
    with pytest.raises(ValueError, match="schemas= is for framing='confluent'"):
        tc.transcode(framed, schemas={1: v1})
    with pytest.raises(ValueError, match="unsigned 32-bit"):
        tc.transcode(framed, framing="confluent", schemas={-1: v1})
    with pytest.raises(TypeError, match=r"not a wirearrow\.Schema"):
        tc.transcode(framed, framing="confluent", schemas={1: "shop.Order"})
    with pytest.raises(ValueError, match="different column names"):
        tc.transcode(
            framed, framing="confluent", schemas={1: v1}, schema_id="x", record_index="x"
        )
