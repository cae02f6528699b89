"""transcode(carry=): per-record values repeated on every row of the record (issue 18
item 5), kept on its dead letters, and equal to what the record index says."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from google.protobuf import message_factory

import wirearrow as wa
from wirearrow.dead_letters import DEAD_LETTER_SCHEMA

PROTO = """\
syntax = "proto3";
package carry_t;
message Item { string sku = 1; repeated int32 qty = 2; }
message Order { string id = 1; repeated Item items = 2; map<string, int64> tags = 3; }
"""


@pytest.fixture(scope="module")
def schema(tmp_path_factory) -> wa.Schema:
    root = tmp_path_factory.mktemp("carry")
    (root / "order.proto").write_text(PROTO)
    return wa.Schema.from_proto(root / "order.proto", "Order")


def orders(schema: wa.Schema, n_items: list[int]) -> list[bytes]:
    cls = message_factory.GetMessageClass(schema.descriptor)
    out = []
    for i, n in enumerate(n_items):
        order = cls(id=f"o{i}")
        for j in range(n):
            order.items.add(sku=f"s{i}.{j}", qty=list(range(j % 3)))
        out.append(order.SerializeToString())
    return out


def test_flat_rows_repeat_their_records_values(schema: wa.Schema) -> None:
    tc = wa.Transcoder(schema, ["id", "items[*].sku"])
    records = orders(schema, [2, 0, 3])
    carry = pa.table({"offset": pa.array([100, 101, 102], pa.int64()), "topic": ["a", "b", "c"]})
    rows = tc.transcode(pa.array(records, pa.binary()), carry=carry)
    assert rows.schema.names == ["id", "items[*].sku", "offset", "topic"]
    assert rows.schema.field("offset").type == pa.int64()
    assert rows.to_pydict() == {
        "id": ["o0", "o0", "o1", "o2", "o2", "o2"],
        "items[*].sku": ["s0.0", "s0.1", None, "s2.0", "s2.1", "s2.2"],
        "offset": [100, 100, 101, 102, 102, 102],
        "topic": ["a", "a", "b", "c", "c", "c"],
    }


@pytest.mark.parametrize(
    "as_given",
    [
        lambda t: t,
        lambda t: t.to_batches()[0],
        lambda t: t.to_pydict(),
        lambda t: {name: t.column(name) for name in t.column_names},  # chunked arrays
        lambda t: pa.concat_tables([t.slice(0, 1), t.slice(1)]),  # two chunks
    ],
    ids=["table", "record batch", "dict of lists", "dict of chunked", "chunked table"],
)
def test_every_form_of_carry(schema: wa.Schema, as_given) -> None:
    tc = wa.Transcoder(schema, ["items[*].sku"])
    carry = pa.table({"k": [7, 8, 9]})
    rows = tc.transcode(orders(schema, [1, 2, 1]), carry=as_given(carry))
    assert rows.column("k").to_pylist() == [7, 8, 8, 9]


def test_carry_names_columns_of_the_records_table(schema: wa.Schema) -> None:
    tc = wa.Transcoder(schema, ["items[*].sku"])
    batch = pa.table({"partition": [0, 1], "value": orders(schema, [2, 1]), "offset": [5, 9]})
    rows = tc.transcode(batch, column="value", carry=["partition", "offset"])
    assert rows.to_pydict() == {
        "items[*].sku": ["s0.0", "s0.1", "s1.0"],
        "partition": [0, 0, 1],
        "offset": [5, 5, 9],
    }


def test_nested_mode_attaches_one_row_per_record(schema: wa.Schema) -> None:
    tc = wa.Transcoder(schema)
    rows = tc.transcode(orders(schema, [2, 0]), carry={"file": ["x.bin", "y.bin"]})
    assert rows.schema.names[-1] == "file"
    assert rows.select(["id", "file"]).to_pylist() == [
        {"id": "o0", "file": "x.bin"},
        {"id": "o1", "file": "y.bin"},
    ]


def test_dead_letters_keep_their_carried_values(schema: wa.Schema) -> None:
    tc = wa.Transcoder(schema, ["id", "items[*].sku"], on_error="dead_letter")
    good = orders(schema, [1, 1, 1])
    records = [good[0], b"\x0a\xff", good[1], None, good[2]]
    # A Kafka offset named like the dead letters' own offset column: no clash (a struct).
    carry = {"offset": [10, 11, 12, 13, 14]}
    rows = tc.transcode(records, carry=carry)
    assert rows.to_pydict() == {
        "id": ["o0", "o1", "o2"],
        "items[*].sku": ["s0.0", "s1.0", "s2.0"],
        "offset": [10, 12, 14],
    }
    tc.transcode([b"\xff"])  # a call without carry: its dead letter carries nothing
    tc.transcode([good[0], b"\xff"], carry={"offset": [20, 21], "topic": ["t", "t"]})
    dead = tc.dead_letters()
    assert dead.column_names == ["index", "offset", "path", "reason", "raw", "carry"]
    assert dead.column("index").to_pylist() == [1, 3, 0, 1]
    assert dead.column("carry").to_pylist() == [
        {"offset": 11, "topic": None},
        {"offset": 13, "topic": None},
        None,
        {"offset": 21, "topic": "t"},
    ]
    # and with no carry at all, the dead letters keep their usual schema
    tc.transcode([b"\xff"])
    assert tc.dead_letters().schema == DEAD_LETTER_SCHEMA


def test_carry_agrees_with_the_record_index(schema: wa.Schema) -> None:
    """On random fan-outs (strict rejections re-decode the rest), every row's carried value
    is its record's: carry[k][record_index] == k."""
    rng = random.Random(18)
    tc = wa.Transcoder(
        schema,
        [
            "id",
            "items[*].sku",
            "items[*].qty[*]",
            wa.Column("items[1].sku", name="second", strict=True),
        ],
        on_error="skip",
    )
    for _ in range(20):
        n_items = [rng.randrange(0, 5) for _ in range(rng.randrange(1, 30))]
        records = orders(schema, n_items)
        keys = [rng.randrange(10**6) for _ in records]
        rows = tc.transcode(records, record_index=True, carry={"k": keys})
        got = rows.column("k").to_pylist()
        assert got == [keys[i] for i in rows.column("_record_index").to_pylist()]
        # strict: records with fewer than two items are bad, the others fan out
        assert set(rows.column("_record_index").to_pylist()) == {
            i for i, n in enumerate(n_items) if n >= 2
        }


def test_carry_errors(schema: wa.Schema) -> None:
    tc = wa.Transcoder(schema, ["id"])
    records = orders(schema, [1, 1])
    with pytest.raises(ValueError, match=r"carry= has 3 rows, the batch has 2 records"):
        tc.transcode(records, carry={"k": [1, 2, 3]})
    with pytest.raises(ValueError, match=r"not in the output: \['id'\]"):
        tc.transcode(records, carry={"id": [1, 2]})
    with pytest.raises(ValueError, match=r"not in the output: \['_record_index'\]"):
        tc.transcode(records, record_index=True, carry={"_record_index": [1, 2]})
    with pytest.raises(TypeError, match=r"column names takes them from a table"):
        tc.transcode(records, carry=["offset"])
    with pytest.raises(KeyError, match=r"do not have: \['nope'\]"):
        tc.transcode(pa.table({"value": records}), column="value", carry=["nope"])
    with pytest.raises(TypeError, match=r"carry= takes a pa.Table"):
        tc.transcode(records, carry=42)


def test_cli_source_and_offset_columns(schema: wa.Schema, tmp_path) -> None:
    import struct

    import pyarrow.parquet as pq

    from wirearrow.cli import main

    (tmp_path / "order.proto").write_text(PROTO)
    (tmp_path / "plan.yaml").write_text(
        "proto: {file: order.proto, message: Order}\n"
        "denormalizer: {columns: [{name: id, path: id}, {name: sku, path: 'items[*].sku'}]}\n"
        "errors: skip\n"
    )
    records = orders(schema, [2, 1, 0])
    records.insert(1, b"\xff")  # a bad record: no rows, its neighbours' offsets unchanged
    data, starts = b"", []
    for record in records:
        starts.append(len(data))
        data += struct.pack("<I", len(record)) + record
    (tmp_path / "in.u32le").write_bytes(data)
    out = tmp_path / "out.parquet"
    argv = ["transcode", str(tmp_path / "plan.yaml"), str(tmp_path / "in.u32le"), "-o", str(out)]
    assert main([*argv, "--framing", "u32le", "--source-column", "file",
                 "--offset-column", "at", "--no-progress"]) == 0  # fmt: skip
    assert pq.read_table(out).to_pydict() == {
        "id": ["o0", "o0", "o1", "o2"],
        "sku": ["s0.0", "s0.1", "s1.0", None],
        "file": [str(tmp_path / "in.u32le")] * 4,
        "at": [starts[0], starts[0], starts[2], starts[3]],
    }
    assert main([*argv, "--framing", "u32le", "--source-column", "id"]) == 2


@pytest.mark.beam
def test_beam_rows_carry_their_fields(schema: wa.Schema) -> None:
    beam = pytest.importorskip("apache_beam")
    from apache_beam.runners.portability.fn_api_runner import FnApiRunner
    from apache_beam.testing.util import assert_that

    import wirearrow.beam as wab

    records = orders(schema, [2, 0, 1])
    elements = [
        beam.Row(value=r, topic="t", partition=i % 2, offset=100 + i)
        for i, r in enumerate([*records, b"\xff"])
    ]
    tc = wa.Transcoder(schema, ["id", "items[*].sku"], on_error="dead_letter")
    typed = wab.ToArrow(tc, carry={"offset": pa.int64(), "partition": pa.int64()})
    assert typed.schema.names == ["id", "items[*].sku", "offset", "partition"]

    def rows(batches) -> list[tuple]:
        return sorted(t for b in batches for t in zip(*b.to_pydict().values(), strict=True))

    def check(want):
        def check(batches) -> None:
            assert rows(batches) == want

        return check

    with beam.Pipeline(runner=FnApiRunner()) as p:
        got = p | beam.Create(elements) | "typed" >> typed
        assert_that(
            got.batches,
            check([("o0", "s0.0", 100, 0), ("o0", "s0.1", 100, 0), ("o1", None, 101, 1),
                   ("o2", "s2.0", 102, 0)]),
            label="typed",
        )  # fmt: skip
        inferred = p | "again" >> beam.Create(elements) | "named" >> wab.ToArrow(tc, carry=["topic"])
        assert_that(
            inferred.batches,
            check([("o0", "s0.0", "t"), ("o0", "s0.1", "t"), ("o1", None, "t"), ("o2", "s2.0", "t")]),
            label="inferred",
        )
    with pytest.raises(ValueError, match=r"clash with the plan's output: \['id'\]"):
        wab.ToArrow(tc, carry=["id"])


def test_with_rows_puts_each_dead_letters_row_beside_it() -> None:
    from wirearrow.dead_letters import with_rows

    dead = pa.table(
        [pa.array([2, 0]), pa.array([0, 0]), pa.array(["", ""]), pa.array(["x", "y"]),
         pa.nulls(2, pa.binary())],
        schema=DEAD_LETTER_SCHEMA,
    )
    rows = pa.table({"file": ["a", "b", "c"], "offset": [0, 10, 20]})
    out = with_rows(dead, "source", rows)
    assert out.column("source").to_pylist() == [{"file": "c", "offset": 20}, {"file": "a", "offset": 0}]
    assert with_rows(dead, "source", rows.select([])) is dead
