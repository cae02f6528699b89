"""Flat mode against the oracle (tests/oracle.py), on random messages and random schemas.

(a) The fixed rich schema (tests/protos/rich.proto) with hand-written plans, then with random
    plans; (b) random proto2 / proto3 / edition-2023 schemas with random plans. Every record
    is written by schemagen's encoder with random wire variations (packed vs unpacked,
    split sub-messages, overridden values and map entries, unknown fields), and every batch is fed as a list
    of bytes, a BinaryArray and a sliced BinaryArray (non-zero offset), plus the other input
    forms for the rich schema. Cells are compared with the Arrow type the column has: NaN
    equals NaN, float32 after rounding through numpy.float32.

Example counts are the unit tier's; WIREARROW_TEST_DEPTH multiplies them (tests/depth.py).
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import event, given, note
from hypothesis import strategies as st

import wirearrow as wa
from depth import randomized
from oracle import arrow_shape, assert_rows_equal, expected_arrow_type, expected_rows
from schemagen import (
    compile_file,
    compile_source,
    messages,
    plans,
    schema_specs,
    varint,
    wire_bytes,
)
from wirearrow.plan.types import field_name, fields_of

RICH = pathlib.Path(__file__).parent / "protos" / "rich.proto"
ROOT = "wirearrow.tests.rich.Root"



def _inputs(wire: list[bytes], every_form: bool) -> Iterator[tuple[str, Any, dict[str, Any]]]:
    """The same records in each input form ``transcode`` accepts."""
    yield "list[bytes]", list(wire), {}
    yield "BinaryArray", pa.array(wire, pa.binary()), {}
    # Junk around the slice: reading outside it would fail or add rows.
    padded = pa.array([b"\xff\xff", *wire, b"\x08"], pa.binary())
    yield "sliced BinaryArray", padded.slice(1, len(wire)), {}
    if every_form:
        yield "LargeBinaryArray", pa.array(wire, pa.large_binary()), {}
        half = len(wire) // 2
        chunks = [pa.array(wire[:half], pa.binary()), pa.array(wire[half:], pa.binary())]
        yield "ChunkedArray", pa.chunked_array(chunks, pa.binary()), {}
        framed = b"".join(varint(len(record)) + record for record in wire)
        yield "varint-framed buffer", framed, {"framing": "varint"}
        u32 = b"".join(len(record).to_bytes(4, "little") + record for record in wire)
        yield "u32le-framed buffer", u32, {"framing": "u32le"}


def check_transcoder(
    make: Callable[[], wa.Transcoder],
    message_class: Any,
    wire: list[bytes],
    columns: Sequence[Any],
    every_form: bool = False,
    extensions: bool = False,
) -> None:
    """Compare a fresh transcoder with the oracle on ``wire``, in each input form.

    ``columns`` are path texts or ``(path, name)`` pairs, as the transcoder was given them;
    ``extensions``: the transcoder's option of that name.
    """
    pairs = [(c, c) if isinstance(c, str) else tuple(c) for c in columns]
    want = expected_rows(message_class, wire, pairs, extensions)
    event("one row per record" if len(want) == len(wire) else "fan-out adds rows")
    tc = make()
    descriptor = message_class.DESCRIPTOR
    assert tc.arrow_schema.names == [name for _, name in pairs]
    for (path, name), field in zip(pairs, tc.arrow_schema, strict=True):
        expected = expected_arrow_type(descriptor, path, extensions)
        assert arrow_shape(field.type) == arrow_shape(expected), (
            f"type of {name!r}: {field.type} vs {expected}"
        )
    records_in = rows_out = 0
    for label, data, kwargs in _inputs(wire, every_form):
        batch = tc.transcode(data, **kwargs)
        assert batch.schema.equals(tc.arrow_schema), label
        batch.validate(full=True)
        assert_rows_equal(batch.schema, batch.to_pylist(), want, label)
        records_in += len(wire)
        rows_out += len(want)
        stats = tc.stats
        assert (stats.records_in, stats.rows_out, stats.records_failed) == (records_in, rows_out, 0)


# --------------------------------------------------------------------------------------------
# (a) The rich schema

_SCALARS = [
    "double", "float", "int32", "int64", "uint32", "uint64", "sint32", "sint64",
    "fixed32", "fixed64", "sfixed32", "sfixed64", "bool", "string", "bytes", "enum",
]  # fmt: skip

FIXED_PLANS = {
    "correlated": ["id", "imp[*].id", "imp[*].deals[*].id"],
    "correlated-reversed": ["imp[*].deals[*].id", "imp[*].id", "id"],
    "lockstep-and-cross": ["imp[*].id", "cur[*]", "imp[*].banner.w", "imp[*].deals[*].price"],
    "cross-outer-first": ["cur[*]", "imp[*].deals[*].seats[*].code", "imp[*].deals[*].id"],
    "siblings-under-one-element": [
        "imp[*].deals[*].tags[*]",
        "imp[*].deals[*].seats[*].row",
        "imp[*].deals[*].id",
        "imp[*].codes[*]",
    ],
    "fixed-indices": [
        "imp[0].id",
        "imp[-1].id",
        "imp[5].id",
        "imp[0].deals[*].id",
        "imp[-1].deals[0:2].price",
        "imp[1].banner.formats[-1]",
    ],
    "index-prefix-then-sibling-fan-outs": ["imp[0].id", "cur[*]", "imp[0].deals[*].id"],
    "slices": [
        "imp[1:].id",
        "imp[::-1].w",
        "imp[:2].color",
        "imp[*].id",
        "imp[:].w",
        "cur[3:0:-1]",
    ],
    "filters": [
        "imp[?(.w > 1)].id",
        'imp[?(.w > 1)].deals[?(.price > -1.5 && .id != "")].id',
        "imp[?(.color == 1 || !.id)].bidfloor",
        'imp[?(.banner.w >= 2 || .id == "a")].banner',
        "device.geo[?(.lat > 0.5)].country",
    ],
    "first-and-last-match": [
        "imp[*].id",
        "imp[?(.w > 1)][0].id",
        "imp[?(.w > 1)][-1].id",
        "imp[?(.w > 1)][1].banner",
        'imp[*].deals[?(.id != "")][0].price',
        'imp[*].deals[?(.id != "")][-1].seats[*].code',
        "imp[?(.color == 1)][0]",
    ],
    "maps": [
        "counts",
        'counts["a"]',
        "counts[*]",
        "deal_by_num[*].id",
        "deal_by_num[1].tags",
        "flags[true]",
        "flags[false]",
        "blobs[7]",
        "colors_by_code[-1]",
        "colors_by_code",
    ],
    "maps-nested": [
        "imp[*].deal_by_id[*].seats[*].code",
        'imp[*].deal_by_id["a"].w',
        "imp_by_id[*].deals[*].id",
        "imp_by_id[-1].banner",
        "imp_by_id",
    ],
    "oneof-optional-enums": ["s", "n", "d", "d.id", "c", "opt", "color", "colors", "colors[*]"],
    "well-known-types": [
        "ts",
        "dur",
        "w_int64",
        "w_string",
        "w_bool",
        "w_double",
        "w_bytes",
        "w_uint32",
        "w_float",
        "mask",
        "any",
        "times",
        "times[*]",
        "times_by_id",
        "times_by_id[0]",
        "ts.seconds",
        "any.type_url",
    ],
    "structs-and-lists": ["scalars", "scalar_list[*].f_float", "opts", "lists", "device", "imp"],
    "every-scalar": [
        *(f"scalars.f_{k}" for k in _SCALARS),
        *(f"opts.o_{k}" for k in _SCALARS),
        *(f"lists.l_{k}" for k in _SCALARS),
    ],
    "every-repeated-scalar-fanned": [f"lists.l_{k}[*]" for k in _SCALARS[:8]],
    "presence-chain": [
        "device.geo.country",
        "device.geo.city",
        "device.ua",
        "device.geo",
        "big",
        "flag",
    ],
    "whole-elements": ["imp[*]", "imp[*].deals", "imp[*].banner", "imp[*].codes", "imp[0]"],
    "explicit-root-and-names": [
        "(wirearrow.tests.rich.Root).id",
        ("imp[*].id", "imp_id"),
        ("imp[*].deals[*].id", "deal_id"),
    ],
}


@pytest.fixture(scope="module")
def rich() -> tuple[wa.Schema, Any]:
    schema = wa.Schema.from_proto(str(RICH), ROOT, import_paths=[str(RICH.parent)])
    return schema, compile_file(str(RICH)).message_class(ROOT)


def _columns(plan: Sequence[Any]) -> list[Any]:
    return [c if isinstance(c, str) else wa.Column(c[0], name=c[1]) for c in plan]


@randomized(3)
@given(data=st.data())
def test_rich_fixed_plans(rich: tuple[wa.Schema, Any], data: st.DataObject) -> None:
    """Every fixed plan on the same records: drawing rich messages costs far more than
    checking a plan on them, so each plan sees more messages for the time."""
    schema, root = rich
    values = data.draw(
        st.lists(messages(root.DESCRIPTOR), min_size=1, max_size=4), label="messages"
    )
    wire = [data.draw(wire_bytes(value)) for value in values]
    validate = data.draw(st.sampled_from(["plan", "full"]), label="validate")
    note(f"wire: {[w.hex() for w in wire]}")
    for plan_name, plan in FIXED_PLANS.items():
        try:
            check_transcoder(
                lambda plan=plan: wa.Transcoder(schema, columns=_columns(plan), validate=validate),
                root,
                wire,
                [c if isinstance(c, str) else (c[0], c[1]) for c in plan],
                every_form=True,
            )
        except AssertionError as failure:
            raise AssertionError(f"plan {plan_name!r}: {failure}") from failure


@randomized(8)
@given(data=st.data())
def test_rich_random_plans(rich: tuple[wa.Schema, Any], data: st.DataObject) -> None:
    schema, root = rich
    plan = data.draw(plans(root.DESCRIPTOR), label="plan")
    values = data.draw(
        st.lists(messages(root.DESCRIPTOR), min_size=1, max_size=3), label="messages"
    )
    wire = [data.draw(wire_bytes(value)) for value in values]
    note(f"wire: {[w.hex() for w in wire]}")
    check_transcoder(lambda: wa.Transcoder(schema, columns=plan), root, wire, plan)


def test_rich_empty_input(rich: tuple[wa.Schema, Any]) -> None:
    schema, _ = rich
    tc = wa.Transcoder(schema, columns=["id", "imp[*].id"])
    batch = tc.transcode([])
    assert batch.num_rows == 0
    assert batch.schema.equals(tc.arrow_schema)


def test_rich_column_order_never_changes_values(rich: tuple[wa.Schema, Any]) -> None:
    """Permuting columns permutes the rows' loop order but never pairs values differently."""
    schema, root = rich
    message = root(id="r")
    for i in range(3):
        imp = message.imp.add(id=f"i{i}", w=i)
        for j in range(i):
            imp.deals.add(id=f"d{i}{j}")
    message.cur.extend(["x", "y"])
    wire = [message.SerializeToString()]
    columns = ["imp[*].deals[*].id", "cur[*]", "imp[*].id", "id"]
    baseline = None
    for order in ([0, 1, 2, 3], [2, 3, 0, 1], [1, 0, 3, 2], [3, 2, 1, 0]):
        plan = [columns[i] for i in order]
        rows = wa.Transcoder(schema, columns=plan).transcode(wire).to_pylist()
        assert rows == expected_rows(root, wire, plan)
        tuples = sorted(tuple(row[c] or "" for c in columns) for row in rows)
        baseline = baseline or tuples
        assert tuples == baseline
    # One row per deal with its own impression, plus a null-deal row for i0; x2 for cur.
    assert len(baseline) == (1 + 1 + 2) * 2


# --------------------------------------------------------------------------------------------
# (b) Random schemas


@randomized(10)
@given(data=st.data())
def test_random_schemas(data: st.DataObject) -> None:
    spec = data.draw(schema_specs(), label="schema")
    source = spec.render()
    note(source)
    compiled = compile_source(source)
    root = compiled.message_class(spec.root)
    plan = data.draw(plans(root.DESCRIPTOR), label="plan")
    names = data.draw(st.booleans(), label="rename columns")
    columns = [(path, f"c{i}" if names else path) for i, path in enumerate(plan)]
    values = data.draw(
        st.lists(messages(root.DESCRIPTOR), min_size=1, max_size=4), label="messages"
    )
    wire = [data.draw(wire_bytes(value)) for value in values]
    note(f"wire: {[w.hex() for w in wire]}")
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, spec.root)
    check_transcoder(
        lambda: wa.Transcoder(schema, columns=[wa.Column(p, name=n) for p, n in columns]),
        root,
        wire,
        columns,
    )


# --------------------------------------------------------------------------------------------
# (c) Whole messages (nested mode): one row per record, every field, against the runtime


@randomized(4)
@given(data=st.data())
def test_rich_whole_message(rich: tuple[wa.Schema, Any], data: st.DataObject) -> None:
    schema, root = rich
    values = data.draw(
        st.lists(messages(root.DESCRIPTOR), min_size=1, max_size=3), label="messages"
    )
    wire = [data.draw(wire_bytes(value)) for value in values]
    note(f"wire: {[w.hex() for w in wire]}")
    columns = [fd.name for fd in root.DESCRIPTOR.fields]
    check_transcoder(lambda: wa.Transcoder(schema), root, wire, columns)


@randomized(8)
@given(data=st.data())
def test_random_schemas_whole_message(data: st.DataObject) -> None:
    spec = data.draw(schema_specs(), label="schema")
    note(spec.render())
    compiled = compile_source(spec.render())
    root = compiled.message_class(spec.root)
    values = data.draw(
        st.lists(messages(root.DESCRIPTOR), min_size=1, max_size=4), label="messages"
    )
    wire = [data.draw(wire_bytes(value)) for value in values]
    note(f"wire: {[w.hex() for w in wire]}")
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, spec.root)
    columns = [fd.name for fd in root.DESCRIPTOR.fields]
    check_transcoder(lambda: wa.Transcoder(schema), root, wire, columns)


# --------------------------------------------------------------------------------------------
# (d) Extensions: paths through them, and whole messages with extensions=True


@randomized(5)
@given(data=st.data())
def test_random_schemas_with_extensions(data: st.DataObject) -> None:
    spec = data.draw(schema_specs(extensions=True), label="schema")
    source = spec.render()
    note(source)
    compiled = compile_source(source)
    root = compiled.message_class(spec.root)
    values = data.draw(
        st.lists(messages(root.DESCRIPTOR), min_size=1, max_size=4), label="messages"
    )
    wire = [data.draw(wire_bytes(value)) for value in values]
    note(f"wire: {[w.hex() for w in wire]}")
    schema = wa.Schema.from_descriptor_set(compiled.descriptor_set, spec.root)
    plan = data.draw(plans(root.DESCRIPTOR), label="plan")
    extensions = data.draw(st.booleans(), label="extensions=True")
    check_transcoder(
        lambda: wa.Transcoder(schema, columns=plan, extensions=extensions),
        root,
        wire,
        plan,
        extensions=extensions,
    )
    columns = [field_name(f) for f in fields_of(root.DESCRIPTOR, True)]
    check_transcoder(
        lambda: wa.Transcoder(schema, extensions=True), root, wire, columns, extensions=True
    )
