"""Parquet field ids (wirearrow.field_ids): every field carries one, valid for Iceberg
(positive 32-bit, unique over the whole schema) and stable (the same protobuf field path
gets the same id in every run, process and schema version)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import wirearrow as wa
from depth import examples, randomized
from wirearrow.field_ids import (
    ELEMENT,
    FIELD_ID,
    UNKNOWN,
    check_unique,
    field_id,
    field_id_of,
    field_ids,
    number_step,
    with_missing_ids,
    with_unique_ids,
)
from wirearrow.parquet import ParquetSink, writable_schema

PROTO = """
syntax = "proto3";
package fid;
import "google/protobuf/timestamp.proto";
message Geo { string country = 1; float lat = 2; }
message Device { string ua = 1; Geo geo = 7; repeated string tags = 3; }
message Deal { string id = 1; double floor = 2; repeated string seats = 3; }
message Imp { string id = 1; repeated Deal deals = 2; map<string, Deal> named = 3; }
message Event {
  int64 id = 1;
  repeated Imp imp = 2;
  Device device = 5;
  map<string, int32> counts = 6;
  google.protobuf.Timestamp at = 9;
  repeated int32 codes = 12;
  oneof kind { string a = 20; Geo b = 21; }
}
"""


def _schema(tmp_path, text: str = PROTO, name: str = "event.proto") -> wa.Schema:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return wa.Schema.from_proto(path, "Event")


def _every_field(schema: pa.Schema) -> list[tuple[str, pa.Field]]:
    out = []

    def walk(f: pa.Field, path: str) -> None:
        out.append((path, f))
        t = f.type
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                walk(t.field(i), f"{path}.{t.field(i).name}")
        elif pa.types.is_map(t):
            walk(t.key_field, f"{path}[key]")
            walk(t.item_field, f"{path}[value]")
        elif pa.types.is_list(t):
            walk(t.value_field, f"{path}[*]")

    for f in schema:
        walk(f, f.name)
    return out


def _assert_valid(schema: pa.Schema) -> dict[str, int]:
    """Every field has an id in 1..2**31-1, no two share one."""
    ids = {}
    for path, f in _every_field(schema):
        i = field_id_of(f)
        assert i is not None, f"{path} has no field id"
        assert 1 <= i <= 2**31 - 1, f"{path}: {i}"
        ids[path] = i
    assert len(set(ids.values())) == len(ids), "duplicate field ids"
    return ids


# ---- the scheme ---------------------------------------------------------------------------


def test_top_level_fields_keep_their_number_and_ids_are_pinned() -> None:
    assert field_id((number_step(1),)) == 1
    assert field_id((number_step(536_870_911),)) == 536_870_911
    # Pinned: a change here changes the ids of every table written so far.
    assert field_id((number_step(2), ELEMENT)) == 536870985
    assert field_id((number_step(2), ELEMENT, number_step(2), ELEMENT, number_step(1))) == 536908363
    assert field_id((UNKNOWN,)) == 536870922
    assert field_id(("imp_id",)) == 1997582099
    deep = tuple(number_step(n) for n in (100, 200, 300, 400))
    assert field_id(deep) == 1722114255 and 2**30 <= field_id(deep) < 2**31 - 2**24


@settings(max_examples=examples(25), deadline=None)
@given(
    st.lists(
        st.lists(st.integers(0, 40), min_size=1, max_size=5).map(tuple),
        min_size=2,
        max_size=40,
        unique=True,
    )
)
def test_packed_keys_never_share_an_id(keys) -> None:
    packed = [k for k in keys if not (len(k) == 1 and k[0] > UNKNOWN) and field_id(k) < 2**30]
    assert len({field_id(k) for k in packed}) == len(packed)
    for k in keys:
        assert 1 <= field_id(k) < 2**31 - 2**24  # headroom for a table's own new ids


def test_a_hash_collision_moves_one_field_to_a_reproducible_free_id(tmp_path) -> None:
    # These two names hash to one id (found by search). Of the two, the one first by
    # (depth, path) keeps it, whatever the column order; the other moves to a probed id
    # that depends only on its path and the id it lost.
    lost = field_id(("c23225",))
    assert field_id(("c38832",)) == lost
    schema = _schema(tmp_path)
    seen = []
    for columns in (
        [wa.Column("id", "c23225"), wa.Column("device.ua", "c38832")],
        [wa.Column("device.ua", "c38832"), wa.Column("id", "c23225")],
    ):
        ids = field_ids(wa.Transcoder(schema, columns=columns).arrow_schema)
        assert ids["c23225"] == lost
        assert ids["c38832"] != lost and 2**30 <= ids["c38832"] < 2**31 - 2**24
        seen.append(ids["c38832"])
    assert seen[0] == seen[1]
    # field_ids=False writes none, so nothing collides
    tc = wa.Transcoder(
        schema, columns=[wa.Column("id", "c23225"), wa.Column("device.ua", "c38832")], field_ids=False
    )
    assert all(f.metadata is None for f in tc.arrow_schema)


def test_a_moved_id_never_lands_on_a_taken_one_and_hand_set_ids_are_refused() -> None:
    def fid(name: str, i: int, t: pa.DataType | None = None) -> pa.Field:
        return pa.field(name, t or pa.int64(), metadata={FIELD_ID: str(i).encode()})

    taken = 2**30 + 5
    schema = pa.schema([fid("a", taken), fid("b", taken), fid("s", 7, pa.struct([fid("x", taken)]))])
    out = with_unique_ids(schema)
    ids = field_ids(out)
    assert ids["a"] == taken and len(set(ids.values())) == 4  # "s.x" is deeper: it moves too
    assert ids["s"] == 7
    # the columns named movable move first, even when shallower
    ids = field_ids(with_unique_ids(schema, movable={"a"}))
    assert ids["b"] == taken and ids["a"] != taken
    check_unique(out)
    with pytest.raises(wa.PlanError, match="set by hand"):
        with_unique_ids(pa.schema([fid("a", 3), fid("b", 3)]))


# ---- what the transcoder produces -------------------------------------------------------------


def test_whole_message_fields_all_carry_unique_ids(tmp_path) -> None:
    schema = _schema(tmp_path)
    for options in ({}, {"keep_unknown": True}, {"well_known_types": False, "enums": "name"}):
        tc = wa.Transcoder(schema, **options)
        ids = _assert_valid(tc.arrow_schema)
        assert ids["id"] == 1 and ids["imp"] == 2 and ids["device"] == 5 and ids["a"] == 20
        if options.get("keep_unknown"):
            assert ids["_unknown"] == field_id((UNKNOWN,))
            assert ids["device._unknown"] == field_id((number_step(5), UNKNOWN))
        # a map's key and value, a list's element
        assert {"counts[key]", "counts[value]", "imp[*]", "imp[*].named[value].seats[*]"} <= set(ids)
        rows = tc.transcode([b""])
        assert rows.schema.equals(tc.arrow_schema, check_metadata=True)


def test_flat_columns_expressions_and_extra_columns_carry_ids(tmp_path) -> None:
    schema = _schema(tmp_path)
    tc = wa.Transcoder(
        schema,
        columns=[
            "id",
            "imp[*].id",
            "imp[*].deals",
            "device",
            "counts",
            wa.Column(name="n", expr=wa.fn.len(wa.fn.path("imp[*].deals"))),
        ],
        keep_unknown=True,
    )
    ids = _assert_valid(tc.arrow_schema)
    assert ids["id"] == field_id(("id",))  # a flat column is the plan's: keyed by its name
    assert ids["device.geo.country"] == field_id(("device", number_step(7), number_step(1)))
    decoded = tc.decode(
        [b"\x08\x01"], record_index=True, carry={"offset": pa.array([7]), "meta": pa.array([{"k": 1}])}
    )
    out = _assert_valid(decoded.rows.schema)
    assert out["_record_index"] == field_id(("_record_index",))
    assert out["meta.k"] == field_id(("meta", "k"))


def test_the_same_field_path_has_the_same_id_in_every_version(tmp_path) -> None:
    v1 = _schema(tmp_path, PROTO, "v1.proto")
    v2_text = PROTO.replace("string ua = 1;", "string user_agent = 1; int32 dpi = 8;").replace(
        "message Geo { string country = 1; float lat = 2; }",
        "message Geo { string country = 1; float lat = 2; string city = 3; }",
    )
    v2 = _schema(tmp_path, v2_text, "v2.proto")
    a = field_ids(wa.Transcoder(v1).arrow_schema)
    b = field_ids(wa.Transcoder(v2).arrow_schema)
    renamed = {"device.ua": "device.user_agent"}
    for path, i in a.items():
        assert b[renamed.get(path, path)] == i, path
    new = set(b) - {renamed.get(p, p) for p in a}
    assert new == {"device.dpi", "device.geo.city", "b.city"}
    assert not set(b[p] for p in new) & set(a.values())  # new fields never reuse an id


def test_ids_are_the_same_in_another_process(tmp_path) -> None:
    schema = _schema(tmp_path)
    here = field_ids(wa.Transcoder(schema, columns=["imp[*].deals", "device"]).arrow_schema)
    code = (
        "import json, sys, wirearrow as wa\n"
        "from wirearrow.field_ids import field_ids\n"
        f"s = wa.Schema.from_proto({str(tmp_path / 'event.proto')!r}, 'Event')\n"
        "print(json.dumps(field_ids(wa.Transcoder(s, columns=['imp[*].deals', 'device']).arrow_schema)))\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    import json

    assert json.loads(out.stdout) == here


def test_field_ids_false_and_missing_ids_filled(tmp_path) -> None:
    schema = _schema(tmp_path)
    plain = wa.Transcoder(schema, field_ids=False).arrow_schema
    assert not any(f.metadata for _, f in _every_field(plain))
    assert with_missing_ids(plain).equals(plain, check_metadata=True)  # off stays off
    mixed = pa.schema([*wa.Transcoder(schema).arrow_schema, pa.field("kafka", pa.struct([("p", pa.int32())]))])
    filled = with_missing_ids(mixed)
    ids = _assert_valid(filled)
    assert ids["kafka.p"] == field_id(("kafka", "p"))
    check_unique(filled)


# ---- what Parquet and Iceberg see -----------------------------------------------------------


def _parquet_ids(path) -> dict[str, int]:
    return field_ids(pq.read_schema(path))


def test_every_parquet_writer_stores_the_ids(tmp_path) -> None:
    schema = _schema(tmp_path)
    tc = wa.Transcoder(schema, on_error="dead_letter")
    rows = tc.transcode([b"\x08\x05", b"\xff"])
    want = field_ids(tc.arrow_schema)
    wa.write_parquet(rows, tmp_path / "one.parquet")
    assert _parquet_ids(tmp_path / "one.parquet") == want
    with ParquetSink(tmp_path / "sink.parquet") as sink:
        sink.write(rows)
    assert _parquet_ids(tmp_path / "sink.parquet") == want
    # pyarrow reads them back as the Parquet schema's field_id
    assert pq.ParquetFile(tmp_path / "one.parquet").schema.column(0).path == "id"
    dead = tc.dead_letters()
    wa.write_parquet(dead, tmp_path / "dead.parquet")
    assert _parquet_ids(tmp_path / "dead.parquet") == {
        "index": 1, "offset": 2, "path": 3, "reason": 4, "raw": 5
    }


def test_the_cli_writes_the_ids(tmp_path) -> None:
    schema_path = tmp_path / "event.proto"
    schema_path.write_text(textwrap.dedent(PROTO))
    data = tmp_path / "in.bin"
    data.write_bytes(b"\x02\x08\x05" * 3)  # three varint-framed records
    out = tmp_path / "out.parquet"
    from wirearrow.cli import main

    plan = tmp_path / "plan.yaml"
    plan.write_text("proto: {file: event.proto, message: Event}\n")
    assert main(["transcode", str(plan), str(data), "-o", str(out)]) == 0
    want = field_ids(wa.Transcoder(_schema(tmp_path)).arrow_schema)
    assert _parquet_ids(out) == want


def test_iceberg_accepts_the_schema(tmp_path) -> None:
    pyarrow_io = pytest.importorskip("pyiceberg.io.pyarrow")
    schema = _schema(tmp_path)
    for tc in (
        wa.Transcoder(schema, keep_unknown=True),
        wa.Transcoder(schema, columns=["id", "imp[*].deals", "counts", "device"]),
    ):
        arrow = writable_schema(tc.arrow_schema)[0]
        iceberg = pyarrow_io.pyarrow_to_schema(arrow)
        got = {f.field_id for f in _iceberg_fields(iceberg)}
        assert got == set(field_ids(arrow).values())


def _iceberg_fields(schema):
    from pyiceberg.types import ListType, MapType, StructType

    out = []

    def walk(t):
        if isinstance(t, StructType):
            for f in t.fields:
                out.append(f)
                walk(f.field_type)
        elif isinstance(t, ListType):
            out.append(t.element_field)
            walk(t.element_type)
        elif isinstance(t, MapType):
            out.extend([t.key_field, t.value_field])
            walk(t.key_type)
            walk(t.value_type)

    walk(schema.as_struct())
    return out


def test_metadata_key_is_pyarrows(tmp_path) -> None:
    assert FIELD_ID == b"PARQUET:field_id"
    f = pa.field("x", pa.int32(), metadata={FIELD_ID: b"42"})
    pq.write_table(pa.table({"x": pa.array([1], pa.int32())}, schema=pa.schema([f])), tmp_path / "x.parquet")
    assert pq.ParquetFile(tmp_path / "x.parquet").metadata.schema.column(0).path == "x"
    assert field_id_of(pq.read_schema(tmp_path / "x.parquet").field("x")) == 42


# ---- random schemas: the compiler's ids against ids computed from the descriptor ------------


def _mapped_value(fd) -> bool:
    """Whether a field (a map: its value) is read as a well-known type's Arrow value."""
    from wirearrow.plan.types import WELL_KNOWN

    d = fd.message_type
    if d is not None and d.GetOptions().map_entry:
        d = d.fields_by_number[2].message_type
    return d is not None and WELL_KNOWN.get(d.full_name, "any") != "any"


def _expected_ids(descriptor, keep_unknown: bool, extensions: bool = False) -> dict[str, int]:
    """{path: id} of a whole-message output, walked from the descriptor alone (the keys of
    docs/evolution.md): the oracle the compiler's keying is checked against. ``extensions``:
    the extensions declared for a message are fields of it (`[pkg.ext]`), keyed by their
    numbers."""
    from wirearrow.field_ids import MAP_KEY, MAP_VALUE
    from wirearrow.plan.types import is_repeated

    def fields(d) -> list:
        declared = d.file.pool.FindAllExtensions(d) if extensions else []
        return [*d.fields, *sorted(declared, key=lambda f: f.number)]

    def name(fd) -> str:
        return f"[{fd.full_name}]" if fd.is_extension else fd.name

    def join(path: str, fd) -> str:
        return f"{path}.{name(fd)}" if path else name(fd)

    out: dict[str, int] = {}
    # the well-known types of schemagen are leaves (Timestamp, Duration, the wrappers)

    def message(d, path: str, key: tuple) -> None:
        for fd in fields(d):
            field(fd, join(path, fd), (*key, number_step(fd.number)))
        if keep_unknown:
            p = f"{path}._unknown" if path else "_unknown"
            out[p] = field_id((*key, UNKNOWN))
            # the fields read as a well-known type's value: what the value cannot hold, in
            # `_unknown_wkt` (keyed by its name), child by the field's number
            rests = [fd for fd in fields(d) if _mapped_value(fd)]
            if rests:
                p = f"{path}._unknown_wkt" if path else "_unknown_wkt"
                rest_key = (*key, "_unknown_wkt")
                out[p] = field_id(rest_key)
                for fd in rests:
                    shaped(fd, join(p, fd), (*rest_key, number_step(fd.number)))

    def value(fd, path: str, key: tuple) -> None:
        out[path] = field_id(key)
        d = fd.message_type
        if d is not None and not d.full_name.startswith("google.protobuf."):
            message(d, path, key)

    def shaped(fd, path: str, key: tuple) -> None:
        """A field's place without its value's children (a binary, a list or a map of them)."""
        out[path] = field_id(key)
        d = fd.message_type
        if d is not None and d.GetOptions().map_entry:
            out[f"{path}[key]"] = field_id((*key, MAP_KEY))
            out[f"{path}[value]"] = field_id((*key, MAP_VALUE))
        elif is_repeated(fd):
            out[f"{path}[*]"] = field_id((*key, ELEMENT))

    def field(fd, path: str, key: tuple) -> None:
        d = fd.message_type
        if d is not None and d.GetOptions().map_entry:
            out[path] = field_id(key)
            value(d.fields_by_number[1], f"{path}[key]", (*key, MAP_KEY))
            value(d.fields_by_number[2], f"{path}[value]", (*key, MAP_VALUE))
        elif is_repeated(fd):
            out[path] = field_id(key)
            value(fd, f"{path}[*]", (*key, ELEMENT))
        else:
            value(fd, path, key)

    message(descriptor, "", ())
    return out


@randomized(4)
@given(data=st.data())
def test_random_schemas_ids_follow_the_field_numbers(tmp_path_factory, data) -> None:
    from schemagen import compile_source, plans, schema_specs

    extensions = data.draw(st.booleans(), label="extensions")
    spec = data.draw(schema_specs(extensions=extensions), label="schema")
    compiled = compile_source(spec.render())
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, spec.root)
    descriptor = compiled.message_class(spec.root).DESCRIPTOR
    keep_unknown = data.draw(st.booleans(), label="keep_unknown")
    whole = wa.Transcoder(schema, keep_unknown=keep_unknown, extensions=extensions).arrow_schema
    assert field_ids(whole) == _expected_ids(descriptor, keep_unknown, extensions)
    _assert_valid(whole)
    # a flat plan over the same schema: every field has an id, no two share one
    paths = data.draw(plans(descriptor), label="plan")
    flat = wa.Transcoder(schema, columns=[wa.Column(p, name=f"c{i}") for i, p in enumerate(paths)])
    _assert_valid(flat.arrow_schema)
    # and a Parquet file stores them as they are
    path = tmp_path_factory.mktemp("p") / "rows.parquet"
    wa.write_parquet(wa.Transcoder(schema, keep_unknown=keep_unknown).transcode([b""]), path)
    stored = _parquet_ids(path)
    assert stored.items() <= field_ids(whole).items() and stored


def test_extension_columns_and_added_columns_are_keyed_as_documented(compile_proto) -> None:
    """An extension read as a field is keyed by its number at the top level as below it; a
    oneof's case and `_unknown_wkt` by their names, `_unknown_wkt`'s children by the numbers
    of their fields (docs/evolution.md)."""
    schema, _ = compile_proto(
        'syntax = "proto2"; package fx; import "google/protobuf/timestamp.proto";\n'
        "message Doc { optional Doc child = 2; oneof k { int32 a = 3; string b = 4; }\n"
        "  optional google.protobuf.Timestamp at = 5; extensions 100 to 199; }\n"
        "extend Doc { optional int32 score = 100; }",
        "fx.Doc",
    )
    tc = wa.Transcoder(schema, extensions=True, oneof_case=True, keep_unknown=True, max_depth=2)
    ids = field_ids(tc.arrow_schema)
    assert ids["[fx.score]"] == 100
    assert ids["child.[fx.score]"] == field_id((number_step(2), number_step(100)))
    assert ids["k_case"] == field_id(("k_case",))
    assert ids["child.k_case"] == field_id((number_step(2), "k_case"))
    assert ids["_unknown_wkt.at"] == field_id(("_unknown_wkt", number_step(5)))
    _assert_valid(tc.arrow_schema)
