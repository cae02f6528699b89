"""The table layouts are described once (wirearrow._core.layout): every field a builder puts
in a row must arrive in the extension's C struct, and read back as the same record."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import wirearrow as wa
import wirearrow.plan.program as program_module
from wirearrow._core import decoder, encoder, layout

# Every kind of table row, each field away from its "nothing" value somewhere: a oneof (clear lists), a repeated message (a group, a child), a group
# field, a sub-message (presence), packed scalars, kept unknown fields, a closed enum (its
# value set) and a map (its entry rules).
_SOURCE = """
syntax = "proto2";
package layout;
enum Color { RED = 0; BLUE = 5; HUGE = 1000; }
enum Shade { DARK = 0; LIGHT = 1; }
message Inner { optional int32 a = 1 [default = 7]; optional string s = 2; }
message Outer {
  optional int64 id = 1 [default = -3];
  oneof pick { int32 x = 2; string y = 3; Inner z = 4; }
  repeated Inner items = 5;
  optional group G = 6 { optional fixed32 f = 7; }
  repeated int32 packed = 8 [packed = true];
  optional Inner one = 9;
  map<string, int64> m = 10;
  map<string, Inner> mi = 14;
  optional Color color = 11;
  map<int32, Color> colors = 12;
  map<int32, Shade> shades = 13;
  optional bytes blob = 2000;
}
"""


def _built_programs(monkeypatch: pytest.MonkeyPatch, schema: wa.Schema, **options) -> list:
    seen: list = []
    real = program_module.Program

    def recording(*args):
        built = real(*args)
        seen.append((args, built))
        return built

    monkeypatch.setattr(program_module, "Program", recording)
    # a cache of its own: compiled here, not taken from an earlier test
    wa.Transcoder(schema, cache=wa.ParserCache(), **options).transcode([b""])
    assert seen, "no program was built"
    return seen


@pytest.mark.parametrize(
    "options", [{}, {"keep_unknown": True}, {"validate": "full"}, {"max_nesting": 7}]
)
def test_every_decoder_row_arrives_field_by_field(
    monkeypatch: pytest.MonkeyPatch, compile_proto, options: dict
) -> None:
    schema, _ = compile_proto(_SOURCE, "layout.Outer")
    for args, program in _built_programs(monkeypatch, schema, **options):
        entries, nodes, _dense, defaults, _clear, columns, _groups, max_nesting, sets, specs, anys = args
        assert [program.entry(i) for i in range(program.n_entries)] == list(entries)
        assert [program.node(i) for i in range(program.n_nodes)] == list(nodes)
        assert [program.column(i) for i in range(program.n_cols)] == list(columns)
        assert [program.default(i) for i in range(program.n_defaults)] == list(defaults)
        assert program.max_nesting == max_nesting == options.get("max_nesting", 100)
        assert [program.enum_set(i) for i in range(program.n_enum_sets)] == list(sets)
        assert [program.map_spec(i) for i in range(program.n_map_specs)] == list(specs)
        assert [program.any_spec(i) for i in range(program.n_any_specs)] == list(anys)


def test_the_schema_above_sets_every_field_somewhere(
    monkeypatch: pytest.MonkeyPatch, compile_proto
) -> None:
    # So that a field dropped on the way from builder to struct would show above. (Defaults
    # that are not all zero bytes need implicit presence and a non-zero default, which protoc
    # refuses, proto3 and map entries needing a zero first enum value: see the test below.)
    schema, _ = compile_proto(_SOURCE, "layout.Outer")
    args = [a for a, _ in _built_programs(monkeypatch, schema, keep_unknown=True)]
    records = (
        (layout.DecodeEntry, 0),
        (layout.DecodeNode, 1),
        (layout.DecodeColumn, 5),
        (layout.DecodeMapSpec, 9),
    )
    for record, at in records:
        rows = [row for a in args for row in a[at]]
        # (a proto2 map's key and value have presence: implicit is proto3's, whose entries
        # tests/test_upb_unknown_rules.py writes back)
        skip = {"defaults", "n_defaults", "key_implicit", "value_implicit"}
        for name in set(record._fields) - skip:
            assert {getattr(r, name) for r in rows} - {0, -1}, f"{record.__name__}.{name}"
    # both ranges of a value set: the bit mask (0..63) and the sorted rest
    assert {v for a in args for es in a[8] for v in es.values} >= {0, 5, 1000}


def test_defaults_arrive_and_fill_their_column() -> None:
    value = struct.pack("<i", 42).ljust(16, b"\0")
    entries = [
        layout.DecodeEntry(
            number=1,
            wire_type=0,
            kind=decoder.KIND["varint32"],
            flags=0,
            column=0,
            child=-1,
            group=-1,
            clear=-1,
            n_clear=0,
            aux=-1,
        )
    ]
    nodes = [
        layout.DecodeNode(
            entries=0,
            n_entries=1,
            dense=0,
            dense_len=2,
            group=0,
            presence=-1,
            defaults=1,
            n_defaults=1,
            unknown=-1,
        )
    ]
    defaults = [
        layout.DecodeDefault(column=0, value=bytes(16)),
        layout.DecodeDefault(column=0, value=value),
    ]
    columns = [layout.DecodeColumn(width=4, group=0)]
    program = decoder.Program(entries, nodes, [-1, 0], defaults, [], columns, [-1], 5)
    assert [program.default(i) for i in range(program.n_defaults)] == defaults
    assert program.node(0) == nodes[0]
    data = np.frombuffer(b"\x08\x05", dtype=np.uint8)  # record 1: field 1 = 5
    starts, ends = np.array([0, 0], dtype=np.int64), np.array([0, 2], dtype=np.int64)
    result = decoder.decode(program, data, starts, ends, decoder.POLICY_RAISE)
    assert np.frombuffer(result.col_values[0], dtype=np.int32).tolist() == [42, 5]


def test_a_row_of_another_width_is_refused(monkeypatch: pytest.MonkeyPatch, compile_proto) -> None:
    schema, _ = compile_proto(_SOURCE, "layout.Outer")
    (args, _), *_ = _built_programs(monkeypatch, schema)
    entries, nodes, *rest = args
    with pytest.raises(TypeError):
        decoder.Program([tuple(e)[:-1] for e in entries], nodes, *rest)
    with pytest.raises(TypeError):
        decoder.Program(entries, [(*n, 0) for n in nodes], *rest)


def _matrix(record: type, rows: list) -> np.ndarray:
    return np.array(rows, dtype=np.int64).reshape(-1, len(record._fields))


def test_every_encoder_row_arrives_field_by_field() -> None:
    # Distinct values in every field (in range where the loader checks them).
    specs = [
        layout.EncodeSpec(parent=i - 1, access=i % 3, child=i + 1, layout=i % 6, wide=i % 2)
        for i in range(12)
    ]
    entries = [
        layout.EncodeEntry(
            tag=(i + 1) << 3 | 2,
            end_tag=(i + 1) << 3 | 4,
            kind=encoder.KIND["message"],
            shape=encoder.SHAPE["repeated"],
            presence=encoder.PRESENCE["always"],
            col=i,
            elem=11 - i,
            child=1,
            oneof=i + 2,
            check=encoder.CHECK["none"],
            aux=encoder.MAP_KEYS["string"] - i,
            scale=1000 * i + 7,
        )
        for i in range(3)
    ]
    entries.append(
        entries[0]._replace(
            kind=encoder.KIND["time"], check=encoder.CHECK["timestamp"],
            aux=encoder.TIME_PART["nanos"] | 8 << 8, scale=1000,
        )
    )
    entries.append(entries[0]._replace(check=encoder.CHECK["enum"], aux=1))
    nodes = [layout.EncodeNode(first=0, n_entries=2), layout.EncodeNode(first=2, n_entries=3)]
    plan = encoder.Plan(
        _matrix(layout.EncodeSpec, specs),
        _matrix(layout.EncodeEntry, entries),
        _matrix(layout.EncodeNode, nodes),
        [(0, 5), (-3, 1, 70)],
    )
    assert plan.tables() == (specs, entries, nodes)
    assert plan.n_enum_sets == 2
    assert (encoder.SPEC_WIDTH, encoder.COL_WIDTH, encoder.ENTRY_WIDTH, encoder.NODE_WIDTH) == (
        5, 6, 12, 2,
    )


def test_the_encoder_refuses_malformed_tables() -> None:
    specs = np.zeros((1, len(layout.EncodeSpec._fields)), dtype=np.int64)
    entries = np.zeros((0, len(layout.EncodeEntry._fields)), dtype=np.int64)
    nodes = np.zeros((1, len(layout.EncodeNode._fields)), dtype=np.int64)
    with pytest.raises(ValueError, match="malformed tables"):
        encoder.Plan(specs[:, 1:], entries, nodes)
    later = _matrix(layout.EncodeSpec, [layout.EncodeSpec(1, 1, 0, 0, 0), (0, 0, 0, 0, 0)])
    with pytest.raises(ValueError, match="before its parent"):
        encoder.Plan(later, entries, nodes)
    entry = layout.EncodeEntry(8, 0, encoder.KIND["time"], 0, 1, 0, -1, -1, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="temporal entry"):  # no unit, no width
        encoder.Plan(specs, _matrix(layout.EncodeEntry, [entry]), nodes)
    with pytest.raises(ValueError, match="closed enum"):
        bad = entry._replace(kind=0, check=encoder.CHECK["enum"], aux=3)
        encoder.Plan(specs, _matrix(layout.EncodeEntry, [bad]), nodes, [(0, 1)])


def test_an_encoding_plan_builds_the_rows_the_encoder_reads(compile_proto) -> None:
    from wirearrow.plan.encoding import EncodingPlan, _spec_row

    schema, cls = compile_proto(_SOURCE, "layout.Outer")
    tc = wa.Transcoder(schema)
    plan = EncodingPlan(schema.descriptor, tc.arrow_schema)
    specs, entries, nodes = plan._core.tables()
    assert specs == [_spec_row(spec) for spec in plan._t.specs]
    assert entries == plan._t.entries
    assert nodes == plan._t.nodes
    # and the whole trip still encodes what the runtime parses back
    msg = cls(id=5, y="why", packed=[1, 2, 3], m={"k": 9})
    msg.items.add(a=1, s="one")
    msg.G.f = 11
    table = tc.transcode([msg.SerializeToString()])
    assert cls.FromString(tc.encode(table)[0].as_py()) == msg


def test_the_encoder_binds_every_array_where_pyarrow_has_it(compile_proto) -> None:
    # The core finds each array's buffers in the exported batch, a struct's offset composed
    # into its children's: what pyarrow gives for the same array (field() applies it).
    import pyarrow as pa

    from wirearrow.plan.encoding import EncodingPlan

    schema, cls = compile_proto(_SOURCE, "layout.Outer")
    tc = wa.Transcoder(schema)
    messages = []
    for i in range(7):
        msg = cls(id=i, packed=list(range(i)), m={str(k): k for k in range(i % 3)})
        if i % 2:
            msg.one.a = i
            msg.items.add(s="x" * i)
        messages.append(msg.SerializeToString())
    batch = tc.transcode(messages).slice(2, 4)
    plan = EncodingPlan(schema.descriptor, batch.schema)
    bound = plan._core.columns(batch, lambda spec, present: None)
    arrays: dict = {}
    absent: list[bool] = []
    for i, spec in enumerate(plan._t.specs):
        array = plan._array(batch, i, arrays)
        got = bound[i]
        # Under an array with no value in any slot, nothing is read: not bound (all zero).
        parent = plan._array(batch, spec.parent, arrays) if spec.access != "column" else None
        absent.append(parent is not None and (
            absent[spec.parent] or len(parent) == 0 or (
                plan._t.specs[spec.parent].access != "values"
                and parent.null_count == len(parent))))
        if absent[i]:
            assert got == type(got)(0, 0, 0, 0, 0, 0), spec
            continue
        buffers = array.buffers()
        assert got.offset == array.offset, spec
        assert got.validity == (buffers[0].address if array.null_count else 0), spec
        if spec.layout in ("fixed", "bool"):
            assert got.values == buffers[1].address
        elif spec.layout in ("binary", "list"):
            assert got.offsets == buffers[1].address
        if spec.layout == "binary":
            assert got.values == (buffers[2].address if buffers[2] is not None else 0)
    assert any(b.offset for b in bound) and pa.types.is_struct(batch.schema.field("one").type)
    assert any(absent) and not all(absent)
