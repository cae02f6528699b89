"""Schema merging with a custom message (issue 18 item 6, bufarrow-behaviour §6): the base
message's fields plus the custom message's, renumbered as the reference does, records as
(base, custom) byte pairs, checked against the protobuf runtime; map fields work and an
undeclared custom field number is a bad record (the reference's quirk Q13, fixed)."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import pyarrow as pa
import pytest
from google.protobuf import json_format, message_factory

import wirearrow as wa
from wirearrow.config import load_plan

BASE = """\
syntax = "proto3";
package cm_base;
message Item { string id = 1; double price = 2; }
message Order {
  string name = 1;
  repeated Item items = 2;
  int64 seq = 7;
  map<string, int64> tags = 3;
  optional int32 opt = 4;
  oneof pick { string a = 5; Item b = 6; }
  enum Level { LOW = 0; HIGH = 1; }
  Level level = 8;
}
"""
CUSTOM = """\
syntax = "proto3";
package cm_custom;
message Extra {
  enum Kind { K0 = 0; K1 = 1; }
  message Note { string text = 1; repeated int32 marks = 2; }
  int64 event_ts = 1;
  string source_id = 2;
  repeated Note notes = 5;
  map<string, Note> by_key = 3;
  optional Kind kind = 4;
  oneof via { string url = 6; int64 code = 7; }
}
"""
# The reference's observed example: base numbers {1, 2, 7, 3} + custom {1, 2, 5} -> 8, 9, 10.
REF_BASE = (
    'syntax = "proto3";\nmessage B { string a = 1; string b = 2; int64 seq = 7; string d = 3; }\n'
)
REF_CUSTOM = 'syntax = "proto3";\nmessage C { int64 x = 1; string y = 2; bool z = 5; }\n'


@pytest.fixture(scope="module")
def protos(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("custom")
    for name, text in (
        ("base.proto", BASE), ("custom.proto", CUSTOM), ("ref_b.proto", REF_BASE),
        ("ref_c.proto", REF_CUSTOM),
    ):  # fmt: skip
        (root / name).write_text(text)
    return root


@pytest.fixture(scope="module")
def merged(protos: Path) -> tuple[wa.Schema, wa.Schema, wa.Schema]:
    base = wa.Schema.from_proto(protos / "base.proto", "Order")
    custom = wa.Schema.from_proto(protos / "custom.proto", "Extra")
    return base, custom, base.with_custom_message(custom)


def test_renumbered_as_the_reference(protos: Path) -> None:
    base = wa.Schema.from_proto(protos / "ref_b.proto", "B")
    custom = wa.Schema.from_proto(protos / "ref_c.proto", "C")
    m = base.with_custom_message(custom)
    assert m.message_name == "BCustom"  # no package
    assert [(f.name, f.number) for f in m.descriptor.fields] == [
        ("a", 1), ("b", 2), ("seq", 7), ("d", 3), ("x", 8), ("y", 9), ("z", 10),
    ]  # fmt: skip
    assert m.custom_numbers == ((1, 8), (2, 9), (5, 10))
    assert base.custom_numbers is None


def test_nested_types_enums_and_maps_are_rescoped(merged) -> None:
    _, _, m = merged
    d = m.descriptor
    assert d.full_name == "OrderCustom"
    assert {t.name for t in d.nested_types} == {"TagsEntry", "Note", "ByKeyEntry"}
    assert {e.name for e in d.enum_types} == {"Level", "Kind"}
    assert d.fields_by_name["tags"].message_type.GetOptions().map_entry
    assert d.fields_by_name["by_key"].message_type.full_name == "OrderCustom.ByKeyEntry"
    assert d.fields_by_name["kind"].enum_type.full_name == "OrderCustom.Kind"
    assert d.fields_by_name["level"].enum_type.full_name == "OrderCustom.Level"
    # oneofs: both real ones, and proto3 optional fields keep their presence
    assert {o.name for o in d.oneofs} >= {"pick", "via"}
    assert d.fields_by_name["kind"].has_presence and d.fields_by_name["opt"].has_presence
    assert not d.fields_by_name["event_ts"].has_presence


def test_the_merged_schema_pickles_and_fingerprints_its_numbers(merged) -> None:
    base, custom, m = merged
    again = pickle.loads(pickle.dumps(m))
    assert again == m and again.custom_numbers == m.custom_numbers
    plain = wa.Schema.from_descriptor_set(m.file_descriptor_set, m.message_name)
    assert plain.custom_numbers is None and plain != m  # same descriptors, no renumbering
    assert base.with_custom_message(custom) == m


def random_pair(rng: random.Random, Base, Custom) -> tuple[bytes, bytes]:
    b = Base(name=rng.choice(["", "n", "név"]), seq=rng.randrange(-5, 10**12))
    for i in range(rng.randrange(3)):
        b.items.add(id=f"i{i}", price=rng.random())
    for i in range(rng.randrange(3)):
        b.tags[f"k{i}"] = rng.randrange(100)
    if rng.random() < 0.5:
        b.opt = rng.randrange(-3, 3)
    if rng.random() < 0.3:
        b.a = "x"
    elif rng.random() < 0.3:
        b.b.id = "bb"
    b.level = rng.randrange(2)
    c = Custom(event_ts=rng.randrange(10**15), source_id=rng.choice(["", "s"]))
    for i in range(rng.randrange(3)):
        c.notes.add(text=f"t{i}", marks=list(range(rng.randrange(3))))
    for i in range(rng.randrange(2)):
        c.by_key[f"q{i}"].text = "v"
    if rng.random() < 0.5:
        c.kind = rng.randrange(2)
    if rng.random() < 0.3:
        c.url = "u"
    elif rng.random() < 0.3:
        c.code = 9
    # deterministic: map entries in key order on the wire, as in the oracle's bytes
    custom = c.SerializeToString(deterministic=True) if rng.random() < 0.9 else b""
    return b.SerializeToString(deterministic=True), custom


def oracle(Merged, base: bytes, custom: bytes, Custom) -> bytes:
    """The protobuf runtime's merged message: the base parsed as it, the custom fields set
    by name (their names are the merged message's)."""
    out = Merged.FromString(base)
    json_format.ParseDict(
        json_format.MessageToDict(Custom.FromString(custom), preserving_proto_field_name=True),
        out,
    )
    return out.SerializeToString(deterministic=True)


@pytest.mark.parametrize(
    "columns",
    [
        None,
        ["name", "items[*].id", "seq", "tags", "opt", "event_ts", "notes[*].text",
         "notes[*].marks[*]", 'by_key["q0"].text', "kind", "url", "code", "level"],
    ],
    ids=["nested", "flat"],
)  # fmt: skip
def test_pairs_read_as_the_runtime_merges_them(merged, columns) -> None:
    m = merged[2]
    Base, Custom, Merged = (message_factory.GetMessageClass(s.descriptor) for s in merged)
    rng = random.Random(6)
    pairs = [random_pair(rng, Base, Custom) for _ in range(60)]
    got = wa.Transcoder(m, columns).transcode(
        pa.array([p[0] for p in pairs], pa.binary()), custom=[p[1] for p in pairs]
    )
    plain = wa.Schema.from_descriptor_set(m.file_descriptor_set, m.message_name)
    want = wa.Transcoder(plain, columns).transcode([oracle(Merged, b, c, Custom) for b, c in pairs])
    assert got.schema == want.schema
    for name, a, b in zip(got.schema.names, got.columns, want.columns, strict=True):
        assert a.equals(b), name


def test_undeclared_or_malformed_custom_bytes_are_bad_records(merged) -> None:
    m = merged[2]
    Base, Custom, _ = (message_factory.GetMessageClass(s.descriptor) for s in merged)
    b = Base(name="n", seq=3).SerializeToString()
    good = Custom(event_ts=5).SerializeToString()
    # Field 8 (varint 9): the reference would pass it through as the merged field 8
    # (event_ts's new number); field 7 of Extra is declared (code), 9 is not.
    undeclared = bytes([0x48, 0x09])  # field 9, varint 9
    truncated = bytes([0x12, 0x05, 0x41])  # source_id, length 5, one byte
    tc = wa.Transcoder(m, ["name", "seq", "event_ts"], on_error="dead_letter")
    rows = tc.transcode([b, b, b, b, b], custom=[good, undeclared, truncated, None, b""])
    assert rows.to_pydict() == {"name": ["n"] * 3, "seq": [3] * 3, "event_ts": [5, 0, 0]}
    dead = tc.dead_letters().to_pylist()
    assert [(d["index"], d["offset"], d["reason"]) for d in dead] == [
        (1, len(b), "custom field number 9 is not declared by the custom message"),
        (2, len(b), "malformed custom message bytes"),
    ]
    assert dead[0]["raw"] == b + undeclared
    assert tc.stats.records_failed == 2
    with pytest.raises(wa.DecodeError, match=r"custom field number 9") as info:
        wa.Transcoder(m, ["name"]).transcode([b], custom=[undeclared])
    assert (info.value.index, info.value.offset) == (0, len(b))


def test_groups_in_the_custom_message_are_renumbered_whole(tmp_path: Path) -> None:
    (tmp_path / "b2.proto").write_text('syntax = "proto2";\nmessage B2 { optional int32 a = 1; }\n')
    (tmp_path / "c2.proto").write_text(
        'syntax = "proto2";\nmessage C2 {\n  optional group G = 1 { optional int32 x = 2;\n'
        "    optional group H = 3 { optional int32 y = 4; } }\n  optional int32 z = 5;\n}\n"
    )
    base = wa.Schema.from_proto(tmp_path / "b2.proto", "B2")
    custom = wa.Schema.from_proto(tmp_path / "c2.proto", "C2")
    m = base.with_custom_message(custom)
    assert m.custom_numbers == ((1, 2), (5, 3))
    C2 = message_factory.GetMessageClass(custom.descriptor)
    c = C2(z=7)
    c.g.x = 1
    c.g.h.y = 2
    rows = wa.Transcoder(m, ["a", "g.x", "g.h.y", "z"]).transcode(
        [bytes([0x08, 0x01])], custom=[c.SerializeToString()]
    )
    assert rows.to_pylist() == [{"a": 1, "g.x": 1, "g.h.y": 2, "z": 7}]


def test_merge_errors(tmp_path: Path, merged) -> None:
    base, _, m = merged
    with pytest.raises(wa.SchemaError, match=r"field name conflict: name"):
        base.with_custom_message(base)
    (tmp_path / "clash.proto").write_text(
        'syntax = "proto3";\nmessage K { message Note { int32 q = 1; } int32 other = 1; }\n'
    )
    clash = wa.Schema.from_proto(tmp_path / "clash.proto", "K")
    with pytest.raises(wa.SchemaError, match=r"nested type name conflict: Note"):
        m.message("cm_custom.Extra").with_custom_message(clash)
    (tmp_path / "p2.proto").write_text('syntax = "proto2";\nmessage P2 { optional int32 w = 1; }\n')
    with pytest.raises(wa.SchemaError, match=r"must have the same syntax"):
        base.with_custom_message(wa.Schema.from_proto(tmp_path / "p2.proto", "P2"))
    with pytest.raises(wa.SchemaError, match=r"already merged"):
        m.with_custom_message(clash)
    with pytest.raises(ValueError, match=r"is merged with a custom message: give its records"):
        wa.Transcoder(m).transcode([b""])
    with pytest.raises(ValueError, match=r"custom= takes the custom records of a schema merged"):
        wa.Transcoder(base).transcode([b""], custom=[b""])
    with pytest.raises(ValueError, match=r"custom= has 2 records, messages has 1"):
        wa.Transcoder(m).transcode([b""], custom=[b"", b""])


def test_yaml_custom_message_flat_plan_and_workers(protos: Path) -> None:
    plan = load_plan(
        "proto: {file: base.proto, message: Order}\n"
        "custom_message: {file: custom.proto, message: Extra}\n"
        "denormalizer:\n  columns:\n    - {name: name, path: name}\n"
        "    - {name: ts, path: event_ts}\n    - {name: note, path: 'notes[*].text'}\n",
        base_dir=protos,
    )
    tc = plan.transcoder()
    assert tc.schema.message_name == "OrderCustom"
    Base = message_factory.GetMessageClass(
        wa.Schema.from_proto(protos / "base.proto", "Order").descriptor
    )
    Custom = message_factory.GetMessageClass(
        wa.Schema.from_proto(protos / "custom.proto", "Extra").descriptor
    )
    c = Custom(event_ts=42)
    c.notes.add(text="a")
    c.notes.add(text="b")
    args = ([Base(name="n").SerializeToString()],)
    kwargs = {"custom": [c.SerializeToString()]}
    want = [{"name": "n", "ts": 42, "note": "a"}, {"name": "n", "ts": 42, "note": "b"}]
    assert tc.transcode(*args, **kwargs).to_pylist() == want
    worker = pickle.loads(pickle.dumps(tc))  # the renumbering travels with the schema
    assert worker.transcode(*args, **kwargs).to_pylist() == want
    with pytest.raises(
        wa.SchemaError, match=r"<string>:2: custom_message.message: message 'Extr' not found"
    ):
        load_plan(
            "proto: {file: base.proto, message: Order}\n"
            "custom_message: {file: custom.proto, message: Extr}\n",
            base_dir=protos,
        ).schema()


def test_cli_check_takes_a_custom_plan_and_transcode_says_why_not(protos: Path, capsys) -> None:
    from wirearrow.cli import main

    (protos / "merged.yaml").write_text(
        "proto: {file: base.proto, message: Order}\n"
        "custom_message: {file: custom.proto, message: Extra}\n"
        "denormalizer: {columns: [{name: ts, path: event_ts}]}\n"
    )
    assert main(["check", str(protos / "merged.yaml")]) == 0
    assert "OrderCustom" in capsys.readouterr().out
    (protos / "in.bin").write_bytes(b"")
    code = main(
        ["transcode", str(protos / "merged.yaml"), str(protos / "in.bin"), "-o", str(protos / "o")]
    )
    assert code == 2
    assert "custom_message plans read (base, custom) record pairs" in capsys.readouterr().err


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("bad varint")
        value |= (data[pos] & 0x7F) << shift
        pos += 1
        if data[pos - 1] < 0x80:
            return value, pos
        shift += 7


def _put_varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes(out) + bytes([value])


def _skip(data: bytes, pos: int, field: int, wire_type: int) -> tuple[int, int]:
    """(end of the value, start of its closing tag for a group) or ValueError."""
    if wire_type == 0:
        return _varint(data, pos)[1], -1
    if wire_type in (1, 5):
        end = pos + (8 if wire_type == 1 else 4)
    elif wire_type == 2:
        length, pos = _varint(data, pos)
        end = pos + length
    elif wire_type == 3:
        while True:
            at = pos
            tag, pos = _varint(data, pos)
            if tag > 0xFFFFFFFF:
                raise ValueError("tag")
            if tag & 7 == 4:
                if tag >> 3 != field:
                    raise ValueError("mismatched end group")
                return pos, at
            pos = _skip(data, pos, tag >> 3, tag & 7)[0]
    else:
        raise ValueError("wire type")
    if end > len(data):
        raise ValueError("truncated")
    return end, -1


def _reference_merge(custom: bytes, numbers: dict[int, int]) -> bytes | None:
    """The renumbering in plain Python, field by field (None: undeclared or malformed):
    what merge_custom must produce."""
    out, pos = b"", 0
    try:
        while pos < len(custom):
            tag, after = _varint(custom, pos)
            field, wire_type = tag >> 3, tag & 7
            if tag > 0xFFFFFFFF or field not in numbers or wire_type == 4:
                return None
            end, closing = _skip(custom, after, field, wire_type)
            new = numbers[field]
            if wire_type == 3:
                body = custom[after:closing] + _put_varint((new << 3) | 4)
            else:
                body = custom[after:end]
            out += _put_varint((new << 3) | wire_type) + body
            pos = end
    except ValueError:
        return None
    return out


@pytest.mark.malformed
def test_random_custom_bytes_never_crash_and_match_a_reference_renumbering(merged) -> None:
    import numpy as np

    from wirearrow._core.framing import MERGE_OK, merge_custom

    m = merged[2]
    numbers = dict(m.custom_numbers)
    table = np.zeros(max(numbers) + 1, np.int32)
    for old, new in numbers.items():
        table[old] = new
    rng = random.Random(18)
    alphabet = [0x08, 0x10, 0x12, 0x1A, 0x2A, 0x3B, 0x3C, 0x0B, 0x0C, 0x80, 0xFF, 0x01, 0x00, 0x05]
    customs = [
        bytes(
            rng.choice(alphabet) if rng.random() < 0.7 else rng.randrange(256)
            for _ in range(rng.randrange(12))
        )
        for _ in range(3000)
    ]
    base = b"\x0a\x01n"
    data = memoryview(base * len(customs)).cast("B")
    b_starts = np.arange(len(customs), dtype=np.int64) * len(base)
    c_data = b"".join(customs)
    c_ends = np.cumsum([len(c) for c in customs]).astype(np.int64)
    c_starts = np.concatenate(([0], c_ends[:-1])).astype(np.int64)
    out, starts, ends, status, _, _ = merge_custom(
        data, b_starts, b_starts + len(base), memoryview(c_data).cast("B"), c_starts, c_ends, table
    )
    out_b = bytes(memoryview(out))
    starts = np.frombuffer(memoryview(starts), np.int64)
    ends = np.frombuffer(memoryview(ends), np.int64)
    status = np.frombuffer(memoryview(status), np.int32)
    accepted = 0
    for i, custom in enumerate(customs):
        want = _reference_merge(custom, numbers)
        if status[i] == MERGE_OK:
            accepted += 1
            assert want is not None and out_b[starts[i] : ends[i]] == base + want, custom
        else:
            assert starts[i] == ends[i]
            assert want is None or not custom, custom
    assert accepted > 100  # the corpus exercises both sides
    # and through the transcoder: every pair is rows or a counted bad record
    tc = wa.Transcoder(m, ["name", "event_ts"], on_error="skip")
    rows = tc.transcode([base] * len(customs), custom=customs, record_index=True)
    assert tc.stats.records_in == len(customs)
    assert tc.stats.records_ok + tc.stats.records_failed == len(customs)
    assert set(rows.column("_record_index").to_pylist()) <= {
        i for i in range(len(customs)) if status[i] == MERGE_OK
    }
