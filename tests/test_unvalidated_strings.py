"""Strings the schema does not validate (proto2, editions ``utf8_validation = NONE``): the
runtime (upb) accepts any bytes in them, so no such record is rejected. By default a value
that is not UTF-8 cannot be in its utf8 column: it is moved to the message's unknown fields
(counted in ``stats.strings_not_utf8``) and ``keep_unknown=True`` + ``encode`` gives the
runtime's message back. With ``unvalidated_strings="binary"`` the columns hold the bytes as
they came, and ``encode`` gives the runtime's deterministic bytes back; ``"reject"`` makes
such a record bad. Validated strings (proto3, editions default) are still checked."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import wirearrow as wa
from depth import examples
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
  oneof o { string os = 6; int32 oi = 7; N on = 8; string ot = 9; }
  repeated N rn = 10;
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


@settings(max_examples=examples(8), deadline=None, database=None, suppress_health_check=list(HealthCheck))
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
    # default: utf8 columns; bytes that are not UTF-8 cannot be in one: moved to _unknown
    tc = wa.Transcoder(schema, on_error="dead_letter")
    assert tc.arrow_schema.field("s").type == pa.utf8()
    batch = tc.transcode([delimited(1, b"\xc3\x28"), delimited(1, b"ok")])
    assert batch.column("s").to_pylist() == [None, "ok"]
    assert (tc.stats.records_failed, tc.stats.strings_not_utf8) == (0, 1)
    assert tc.dead_letters().num_rows == 0
    # "reject": such a record is bad, as before
    tc = wa.Transcoder(schema, on_error="dead_letter", unvalidated_strings="reject")
    assert tc.arrow_schema.field("s").type == pa.utf8()
    assert tc.transcode([delimited(1, b"\xc3\x28"), delimited(1, b"ok")]).num_rows == 1
    assert tc.dead_letters().column("reason").to_pylist() == ["invalid UTF-8 in a string field"]
    assert tc.stats.strings_not_utf8 == 0
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


def test_filters_compare_what_the_column_holds(proto2) -> None:
    """A filter compares a string with a text literal as its column reads it: a binary
    column's bytes with the literal's UTF-8, a utf8 column's text, where a value that is not
    UTF-8 is null (moved to the unknown fields) and so matches nothing. No record fails."""
    schema, _ = proto2
    tc = wa.Transcoder(
        schema, ['n[?(.t == "é")].t', "s"], unvalidated_strings="binary", on_error="skip"
    )
    assert tc.arrow_schema.field("s").type == pa.binary()
    good = delimited(4, delimited(1, "é".encode())) + delimited(1, b"\xff")
    bad = delimited(4, delimited(1, b"\xff"))
    assert tc.transcode([good, bad]).to_pylist() == [
        {'n[?(.t == "é")].t': "é".encode(), "s": b"\xff"},
        {'n[?(.t == "é")].t': None, "s": None},
    ]
    assert tc.stats.records_failed == 0
    tc = wa.Transcoder(schema, ['n[?(.t != "é")].t', "s", "n._unknown"], on_error="skip")
    assert tc.transcode([good, bad]).to_pylist() == [
        {'n[?(.t != "é")].t': None, "s": None, "n._unknown": None},
        {'n[?(.t != "é")].t': None, "s": None, "n._unknown": delimited(1, b"\xff")},
    ]
    assert (tc.stats.records_failed, tc.stats.strings_not_utf8) == (0, 2)
    strict = wa.Transcoder(schema, ['n[?(.t == "a")].t'], unvalidated_strings="reject",
                           on_error="skip")  # fmt: skip
    assert strict.transcode([good, bad]).num_rows == 1
    assert strict.stats.records_failed == 1


# -- the default: values that are not UTF-8 move to the unknown fields ---------------------

_BAD = (b"\xc3\x28", b"\xff", b"\xed\xa0\x80", b"a\x80", b"\xf4\x90\x80\x80")


@st.composite
def _moving_record(draw) -> tuple[bytes, int]:
    """Occurrences of the string fields of u2.M (and of N.t inside n, rn), any of them not
    UTF-8, in any order; with how many values the decoder moves (see docs/types.md)."""
    text = st.sampled_from(["", "a", "é", "日本"]).map(str.encode)
    value = st.one_of(text, st.sampled_from(_BAD))
    fields = st.sampled_from(["s", "r", "n", "os", "oi", "on", "ot", "rn", "b"])
    wire, moved = b"", 0
    repeated_moved = False
    for name in draw(st.lists(fields, max_size=8)):
        if name in ("n", "on", "rn"):
            inner = draw(st.lists(value, max_size=2))
            moved += sum(1 for v in inner if v in _BAD)
            number = {"n": 4, "on": 8, "rn": 10}[name]
            wire += delimited(number, b"".join(delimited(1, v) for v in inner))
        elif name == "oi":
            wire += bytes([7 << 3]) + bytes([draw(st.integers(0, 127))])
        elif name == "b":
            wire += delimited(5, draw(st.sampled_from(_BAD)))  # bytes: never moved
        else:
            v = draw(value)
            if name == "r":
                repeated_moved = repeated_moved or v in _BAD
                moved += repeated_moved  # the later elements follow a moved one
            else:
                moved += v in _BAD
            wire += delimited({"s": 1, "r": 2, "os": 6, "ot": 9}[name], v)
    return wire, moved


def _view(message) -> dict:
    """The runtime's message as the columns read it: a string that is not UTF-8 (the runtime
    gives it as bytes) is null; a list ends before its first such element."""

    def text(v):
        return None if isinstance(v, bytes) else v

    def n(sub):
        return {"t": text(sub.t) if sub.HasField("t") else None}

    r = list(message.r)
    cut = [i for i, v in enumerate(r) if isinstance(v, bytes)]
    case = message.WhichOneof("o")
    return {
        "s": text(message.s) if message.HasField("s") else None,
        "r": r[: cut[0]] if cut else r,
        "n": n(message.n) if message.HasField("n") else None,
        "b": message.b if message.HasField("b") else None,
        "os": text(message.os) if case == "os" else None,
        "oi": message.oi if case == "oi" else None,
        "on": n(message.on) if case == "on" else None,
        "ot": text(message.ot) if case == "ot" else None,
        "rn": [n(x) for x in message.rn],
    }


def _drop_unknown(row):
    if isinstance(row, dict):
        return {k: _drop_unknown(v) for k, v in row.items() if k != "_unknown"}
    if isinstance(row, list):
        return [_drop_unknown(v) for v in row]
    return row


@settings(max_examples=examples(19), deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(records=st.lists(_moving_record(), min_size=1, max_size=5))
def test_not_utf8_moves_to_the_unknown_fields(proto2, records) -> None:
    schema, cls = proto2
    wire = [w for w, _ in records]
    runtime = [cls.FromString(w) for w in wire]  # upb accepts every one of these records
    want = [_view(m) for m in runtime]
    moved = sum(k for _, k in records)
    columns = ["s", "r", "n", "b", "os", "oi", "on", "ot", "rn"]
    for keep_unknown in (True, False):
        for validate in ("plan", "full"):
            for on_error in ("raise", "skip", "dead_letter"):
                tc = wa.Transcoder(schema, keep_unknown=keep_unknown, validate=validate,
                                   on_error=on_error)  # fmt: skip
                batch = tc.transcode(wire)
                got = [{k: r[k] for k in columns} for r in _drop_unknown(batch.to_pylist())]
                assert got == want
                s = tc.stats
                assert (s.records_failed, s.strings_not_utf8) == (0, moved)
                if on_error == "dead_letter":
                    assert tc.dead_letters().num_rows == 0
                if keep_unknown:
                    # every moved value is in _unknown: the runtime reads the message back
                    back = [cls.FromString(e) for e in tc.encode(batch).to_pylist()]
                    assert back == runtime
        # flat mode reads the same, with or without the unknown fields selected
        paths = columns + (["_unknown", "n._unknown"] if keep_unknown else [])
        flat = wa.Transcoder(schema, paths, validate="full", on_error="skip")
        got = [{k: r[k] for k in columns} for r in _drop_unknown(flat.transcode(wire).to_pylist())]
        assert got == want
        assert (flat.stats.records_failed, flat.stats.strings_not_utf8) == (0, moved)


def test_byte_identical_where_the_order_allows(proto2) -> None:
    """A moved value is re-encoded after the known fields, as the runtime serializes unknown
    fields: a record whose moved values come last is given back byte for byte."""
    schema, cls = proto2
    wire = delimited(2, b"a") + delimited(4, delimited(1, b"\xff"))
    wire += delimited(1, b"\xc3\x28") + delimited(2, b"\xff") + delimited(2, b"b")
    tc = wa.Transcoder(schema, keep_unknown=True)
    batch = tc.transcode([wire])
    row = batch.to_pylist()[0]
    assert (row["s"], row["r"], row["n"]["t"]) == (None, ["a"], None)
    assert row["n"]["_unknown"] == delimited(1, b"\xff")
    assert row["_unknown"] == delimited(1, b"\xc3\x28") + delimited(2, b"\xff") + delimited(2, b"b")
    assert tc.stats.strings_not_utf8 == 4
    assert tc.encode(batch).to_pylist() == [wire]
    assert cls.FromString(tc.encode(batch).to_pylist()[0]) == cls.FromString(wire)


def test_flat_fan_out_and_unknown_column(proto2) -> None:
    """Flat plans: a moved element is no row of the fan-out; `_unknown`, when selected, holds
    it; the columns do not depend on whether `_unknown` is selected."""
    schema, _ = proto2
    wire = [delimited(2, b"a") + delimited(2, b"\xff") + delimited(2, b"b") + delimited(1, b"\xff"),
            delimited(2, b"c")]  # fmt: skip
    plain = wa.Transcoder(schema, ["r[*]", "s"])
    assert plain.transcode(wire).to_pylist() == [{"r[*]": "a", "s": None}, {"r[*]": "c", "s": None}]
    assert plain.stats.strings_not_utf8 == 3
    kept = wa.Transcoder(schema, ["r[*]", "s", "_unknown"], validate="full")
    assert kept.transcode(wire).column("_unknown").to_pylist() == [
        delimited(2, b"\xff") + delimited(2, b"b") + delimited(1, b"\xff"), None
    ]


def test_a_oneof_read_in_part_keeps_the_same_unknown_fields(proto2) -> None:
    """A flat plan reading one member of a oneof: the members it does not read still unset
    it, and what follows a moved member is copied after it, as in the whole message."""
    schema, cls = proto2
    wire = [delimited(6, b"\xff") + bytes([7 << 3, 5]) + delimited(6, b"ok"),
            delimited(6, b"\xff") + bytes([7 << 3, 5])]  # fmt: skip
    whole = wa.Transcoder(schema, keep_unknown=True).transcode(wire)
    flat = wa.Transcoder(schema, ["os", "_unknown"]).transcode(wire)
    assert flat.column("os").to_pylist() == ["ok", None]
    assert flat.column("_unknown").to_pylist() == whole.column("_unknown").to_pylist()
    assert [cls.FromString(w).WhichOneof("o") for w in wire] == ["os", "oi"]


def test_an_unset_oneof_member_takes_its_unknown_fields_along(proto2) -> None:
    """on {t: not UTF-8}, then oi unsets on, then on {} again: the runtime holds an empty on;
    the first occurrence's unknown fields (the moved t, or any unknown field) go with it."""
    schema, cls = proto2
    for inner in (delimited(1, b"\xc3\x28"), b"\x98\x06\x01"):  # t; field 99 = 1
        wire = delimited(4, b"") + delimited(8, inner) + bytes([7 << 3, 0]) + delimited(8, b"")
        tc = wa.Transcoder(schema, keep_unknown=True)
        batch = tc.transcode([wire])
        assert batch.to_pylist()[0]["on"] == {"t": None, "_unknown": None}
        assert [cls.FromString(e) for e in tc.encode(batch).to_pylist()] == [cls.FromString(wire)]


def test_records_failing_later_count_nothing(proto2) -> None:
    """A record that fails for another reason is rolled back with the values it moved."""
    schema, _ = proto2
    truncated = delimited(1, b"\xff") + bytes([2 << 3 | 2, 5]) + b"ab"
    tc = wa.Transcoder(schema, on_error="skip")
    batch = tc.transcode([truncated, delimited(2, b"\xff") + delimited(2, b"x"), delimited(1, b"ok")])
    assert batch.column("r").to_pylist() == [[], []]
    assert batch.column("s").to_pylist() == [None, "ok"]
    assert (tc.stats.records_failed, tc.stats.strings_not_utf8) == (1, 2)


def test_editions_none_moves_verify_rejects(editions) -> None:
    schema, cls = editions
    tc = wa.Transcoder(schema, keep_unknown=True, on_error="dead_letter")
    ok = delimited(1, b"\xff\xfe") + delimited(2, "é".encode())
    bad = delimited(2, b"\xff")
    batch = tc.transcode([ok, bad])
    assert batch.to_pylist() == [{"none": None, "checked": "é", "_unknown": delimited(1, b"\xff\xfe")}]
    assert tc.dead_letters().column("index").to_pylist() == [1]
    assert tc.stats.strings_not_utf8 == 1
    assert [cls.FromString(e) for e in tc.encode(batch).to_pylist()] == [cls.FromString(ok)]


def test_a_map_entry_holding_such_a_string_is_an_unknown_field_of_the_parent(proto2) -> None:
    """upb inserts the entry as it came; a utf8 map column cannot hold it, so the whole
    entry becomes an unknown field of the parent (written as upb writes it: last key and
    value, key first), counted; keep_unknown + encode parses to the runtime's map."""
    schema, cls = proto2
    bad_value = delimited(2, b"\xff") + delimited(1, b"k")
    bad_key = delimited(1, b"a\x80b") + delimited(2, b"v")
    wire = [
        delimited(3, delimited(1, b"ok") + delimited(2, b"x")) + delimited(3, bad_value),
        delimited(3, bad_key) + delimited(1, b"s"),
        delimited(3, delimited(1, b"\xff") + delimited(1, b"fine") + delimited(2, b"y")),
    ]
    assert [len(cls.FromString(w).m) for w in wire] == [2, 1, 1]  # upb inserts them all
    tc = wa.Transcoder(schema, keep_unknown=True, on_error="raise")
    batch = tc.transcode(wire)
    assert batch.column("m").to_pylist() == [[("ok", "x")], [], []]
    entries = [delimited(1, b"k") + delimited(2, b"\xff"), bad_key,
               delimited(1, b"fine") + delimited(2, b"y")]  # fmt: skip
    assert batch.column("_unknown").to_pylist() == [delimited(3, e) for e in entries]
    assert tc.stats.strings_not_utf8 == 3
    encoded = tc.encode(batch).to_pylist()
    assert [cls.FromString(e) for e in encoded] == [cls.FromString(w) for w in wire]
    # A flat plan drops the same entries and keeps the same unknown fields.
    flat = wa.Transcoder(schema, ["m[*]", "_unknown"], on_error="raise")
    read = flat.transcode(wire)
    assert read.column("m[*]").to_pylist() == ["x", None, None]
    assert read.column("_unknown").to_pylist() == batch.column("_unknown").to_pylist()
    assert flat.stats.strings_not_utf8 == 3
    # Without the unknown fields the entry is dropped, the record kept.
    plain = wa.Transcoder(schema, on_error="raise")
    assert plain.transcode(wire).column("m").to_pylist() == [[("ok", "x")], [], []]
    assert plain.stats.strings_not_utf8 == 3
    strict = wa.Transcoder(schema, unvalidated_strings="reject", on_error="skip")
    strict.transcode(wire)
    assert strict.stats.records_failed == 3
