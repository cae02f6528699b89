"""String and bytes columns: the decoder writes Arrow's offsets while it copies the values,
so every way a value can be replaced, dropped or rolled back must leave offsets that match
what the protobuf runtime reads. Each case is checked against the runtime's parse, and
every array is validated in full (offsets non-decreasing and inside the data)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from google.protobuf import json_format

import wirearrow as wa
from schemagen import compile_source, delimited, tag, varint

SOURCE = """
syntax = "proto3";
package t;
message Item {
  string name = 1;
  bytes blob = 2;
  int32 n = 3;
}
message Rec {
  string id = 1;
  repeated Item items = 2;
  oneof choice {
    string text = 3;
    int64 number = 4;
    string other = 5;
  }
  optional string note = 6;
  map<string, string> labels = 7;
  Item main = 8;
}
"""


def _item(
    name: bytes | None = None, blob: bytes | None = None, n: int | None = None, extra: bytes = b""
) -> bytes:
    body = b""
    if name is not None:
        body += delimited(1, name)
    if blob is not None:
        body += delimited(2, blob)
    if n is not None:
        body += tag(3, 0) + varint(n)
    return body + extra


def _label(key: bytes, value: bytes) -> bytes:
    return delimited(7, delimited(1, key) + delimited(2, value))


# Records written by hand: fields repeated on the wire (last one wins), oneof members
# replacing each other, sparse values and empty strings between present ones.
RECORDS = [
    delimited(1, b"first") + delimited(1, b"second") + delimited(1, b"third"),
    delimited(2, _item(name=b"a")) + delimited(2, _item(n=5)) + delimited(2, _item(name=b"")),
    delimited(3, b"text one") + tag(4, 0) + varint(7),  # text then number
    delimited(3, b"dropped") + delimited(5, b"other wins") + delimited(3, b"text wins"),
    delimited(5, b"x" * 40) + delimited(3, b"y" * 33),  # long values
    tag(4, 0) + varint(1) + delimited(3, b"after number"),
    b"",  # all empty
    delimited(6, b"note") + delimited(6, b"note, later"),
    _label(b"k", b"v1") + _label(b"j", b"w") + _label(b"k", b"v2"),  # repeated key
    delimited(8, _item(name=b"m1", blob=b"\x00\xff")) + delimited(8, _item(name=b"m2")),
    delimited(2, _item(name=b"i" * 20, blob=b"b1") + _item(name=b"j" * 17))
    + delimited(1, b"id"),  # name twice in one item
    delimited(3, b"last") + delimited(3, b""),  # overwritten by empty
]


@pytest.fixture(scope="module")
def compiled():
    return compile_source(SOURCE)


def _expected(compiled, records: list[bytes]) -> list[dict]:
    cls = compiled.message_class("t.Rec")
    return [cls.FromString(r) for r in records]


def _check(batch: pa.RecordBatch, messages: list) -> None:
    for column in batch.columns:
        column.validate(full=True)
    rows = batch.to_pylist()
    assert len(rows) == len(messages)
    for row, msg in zip(rows, messages, strict=True):
        assert row["id"] == msg.id
        assert row["note"] == (msg.note if msg.HasField("note") else None)
        which = msg.WhichOneof("choice")
        assert row["text"] == (msg.text if which == "text" else None)
        assert row["other"] == (msg.other if which == "other" else None)
        assert row["number"] == (msg.number if which == "number" else None)
        assert [(i["name"], i["blob"], i["n"]) for i in row["items"]] == [
            (i.name, i.blob, i.n) for i in msg.items
        ]
        assert dict(row["labels"]) == dict(msg.labels)
        if msg.HasField("main"):
            assert (row["main"]["name"], row["main"]["blob"]) == (msg.main.name, msg.main.blob)
        else:
            assert row["main"] is None


def test_replaced_and_dropped_values_match_the_runtime(compiled) -> None:
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, "t.Rec")
    tc = wa.Transcoder(schema)
    # twice: the second batch is sized (and prefetched) from the first one
    for records in (RECORDS, RECORDS * 50):
        batch = tc.transcode(records)
        _check(batch, _expected(compiled, records))


def test_bad_records_leave_no_bytes_behind(compiled) -> None:
    """A record that fails after it replaced or appended strings is rolled back: the next
    record's values start where the last good record's ended."""
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, "t.Rec")
    bad = [
        delimited(1, b"gone") + delimited(1, b"gone too") + tag(9, 7),  # reserved wire type
        delimited(2, _item(name=b"gone")) + delimited(3, b"\xff\xfe"),  # invalid UTF-8
        delimited(3, b"gone") + delimited(5, b"gone") + b"\x0a\x05ab",  # truncated
        delimited(8, _item(name=b"gone", extra=b"\x0a\x7f")),  # length overruns
    ]
    records = []
    for i, good in enumerate(RECORDS):
        records.append(good)
        records.append(bad[i % len(bad)])
    good_only = records[0::2]
    tc = wa.Transcoder(schema, on_error="skip")
    for _ in range(2):
        batch = tc.transcode(records)
        _check(batch, _expected(compiled, good_only))
    assert tc.stats.records_failed == 2 * len(RECORDS)
    assert tc.stats.records_ok == 2 * len(RECORDS)


def test_fanned_out_strings_are_copied_per_row(compiled) -> None:
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, "t.Rec")
    tc = wa.Transcoder(schema, columns=["id", "items[*].name", "items[*].blob", "note"])
    batch = tc.transcode(RECORDS)
    for column in batch.columns:
        column.validate(full=True)
    want = []
    for msg in _expected(compiled, RECORDS):
        note = msg.note if msg.HasField("note") else None
        if not msg.items:
            want.append((msg.id, None, None, note))
        for item in msg.items:
            want.append((msg.id, item.name, item.blob, note))
    got = list(zip(*(batch.column(i).to_pylist() for i in range(4)), strict=True))
    assert got == want


def test_unknown_fields_of_merged_messages_concatenate(compiled) -> None:
    """Unknown fields of a singular sub-message seen twice, with known strings of the same
    and other messages written in between, come back in wire order."""
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, "t.Rec")
    unknown_a = tag(50, 0) + varint(1)
    unknown_b = delimited(51, b"raw")
    record = (
        delimited(8, _item(name=b"m1", extra=unknown_a))
        + delimited(2, _item(name=b"other", extra=unknown_b))
        + delimited(1, b"id")
        + delimited(8, _item(blob=b"bb", extra=unknown_b))
        + unknown_a
    )
    tc = wa.Transcoder(schema, keep_unknown=True)
    records = [record, delimited(8, _item(extra=unknown_b)), record]
    batch = tc.transcode(records)
    for column in batch.columns:
        column.validate(full=True)
    rows = batch.to_pylist()
    assert rows[0]["main"]["_unknown"] == unknown_a + unknown_b
    assert rows[0]["items"][0]["_unknown"] == unknown_b
    assert rows[0]["_unknown"] == unknown_a
    assert rows[1]["main"]["_unknown"] == unknown_b
    assert rows[2] == rows[0]
    back = tc.encode(batch)
    cls = compiled.message_class("t.Rec")
    for raw, original in zip(back.to_pylist(), records, strict=True):
        assert json_format.MessageToDict(cls.FromString(raw)) == json_format.MessageToDict(
            cls.FromString(original)
        )
        assert cls.FromString(raw).SerializeToString(deterministic=True) == cls.FromString(
            original
        ).SerializeToString(deterministic=True)


@pytest.mark.parametrize("length", [1, 3, 4, 7, 8, 15, 16, 31, 32, 33, 40, 63, 64, 65, 100])
def test_utf8_is_checked_at_every_length_and_position(compiled, length: int) -> None:
    """Short values are copied and checked word by word, in overlapping head and tail
    words: a bad byte anywhere must be seen, and multi-byte text must pass."""
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, "t.Rec")
    tc = wa.Transcoder(schema, columns=["id"], on_error="dead_letter")
    records = []
    for position in range(length):
        value = bytearray(b"a" * length)
        value[position] = 0xFF
        records.append(delimited(1, bytes(value)))
    text = ("é" * length).encode()[:length]
    text = text.decode("utf-8", errors="ignore").encode()  # whole characters only
    records.append(delimited(1, text))
    records.append(delimited(1, b"b" * length))
    batch = tc.transcode(records)
    assert batch.column(0).to_pylist() == [text.decode(), "b" * length]
    dead = tc.dead_letters()
    assert dead.num_rows == length
    assert all("UTF-8" in reason for reason in dead.column("reason").to_pylist())
