"""wirearrow.parquet: streaming writes, many row groups, schemas Parquet can always store."""

from __future__ import annotations

import io

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import wirearrow as wa
from wirearrow.parquet import (
    ParquetSchemaWarning,
    ParquetSink,
    writable_schema,
    write_parquet,
)


@pytest.fixture(scope="module")
def nested(bid_schema, bid_corpus) -> list[pa.RecordBatch]:
    """Whole-message batches of the 300-record corpus, 50 records each."""
    tc = wa.Transcoder(bid_schema)
    return [tc.transcode(bid_corpus[i : i + 50]) for i in range(0, len(bid_corpus), 50)]


def test_nested_batches_read_back_with_pyarrow_and_duckdb(tmp_path, nested) -> None:
    path = tmp_path / "nested.parquet"
    summary = write_parquet(iter(nested), path, row_group_size=64)
    expected = pa.Table.from_batches(nested)

    assert summary.rows == expected.num_rows == 300
    assert summary.row_groups == 5  # 4 x 64 + 44
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == 5
    assert [meta.row_group(i).num_rows for i in range(5)] == [64, 64, 64, 64, 44]
    assert meta.row_group(0).column(0).compression == "ZSTD"
    assert summary.bytes == path.stat().st_size

    back = pq.read_table(path)
    assert back.schema.names == expected.schema.names
    assert back.to_pylist() == expected.to_pylist()

    # DuckDB reads the same values: aggregates over nested columns, and a record in full.
    got = duckdb.sql(
        f"""select count(*), count(device.geo.country), sum(len(imp)), sum(tmax),
                   count(*) filter (where test), sum(cardinality(ext))
            from '{path}'"""
    ).fetchall()[0]
    imp_lengths = pc.list_value_length(expected["imp"]).fill_null(0)
    assert got == (
        300,
        pc.count(pc.struct_field(pc.struct_field(expected["device"], "geo"), "country")).as_py(),
        pc.sum(imp_lengths).as_py(),
        pc.sum(expected["tmax"]).as_py(),
        pc.sum(pc.fill_null(expected["test"], False).cast(pa.int64())).as_py(),
        sum(len(m or ()) for m in expected["ext"].to_pylist()),
    )
    deals = duckdb.sql(
        f"select [d.id for d in i.pmp.deals] from (select unnest(imp) as i from '{path}') "
        "where i.pmp is not null"
    ).fetchall()
    expected_deals = [
        [d["id"] for d in imp["pmp"]["deals"]]
        for row in expected.to_pylist()
        for imp in row["imp"]
        if imp["pmp"] is not None
    ]
    assert sorted(r[0] for r in deals) == sorted(expected_deals)
    ids = duckdb.sql(f"select id from '{path}'").fetchall()
    assert [r[0] for r in ids] == expected["id"].to_pylist()


def test_flat_table_and_single_batch(tmp_path, bid_schema, bid_corpus) -> None:
    batch = wa.Transcoder(bid_schema, columns=["id", "imp[*].id", "imp[*].banner.w"]).transcode(
        bid_corpus
    )
    one = write_parquet(batch, tmp_path / "batch.parquet", compression="snappy")
    table = write_parquet(pa.Table.from_batches([batch]), tmp_path / "table.parquet")
    assert one.rows == table.rows == batch.num_rows
    assert one.row_groups == table.row_groups == 1
    for path in ("batch.parquet", "table.parquet"):
        assert pq.read_table(tmp_path / path).to_pylist() == batch.to_pylist()
        count = duckdb.sql(
            f"""select count(*), count(distinct "imp[*].id") from '{tmp_path / path}'"""
        ).fetchall()[0]
        assert count == (batch.num_rows, len(set(batch.column(1).drop_null().to_pylist())))


def test_sink_writes_full_row_groups_as_it_goes(tmp_path) -> None:
    schema = pa.schema([pa.field("x", pa.int64())])
    sink = ParquetSink(tmp_path / "s.parquet", schema, row_group_size=20)
    for i in range(10):  # ten batches of 7 rows
        sink.write(pa.record_batch([pa.array(range(7 * i, 7 * i + 7))], schema=schema))
        # Never more than one row group's worth held back.
        assert sink.rows - sink.row_groups * 20 < 20
    assert sink.row_groups == 3
    summary = sink.close()
    assert summary.row_groups == 4 and summary.rows == 70
    meta = pq.ParquetFile(tmp_path / "s.parquet").metadata
    assert [meta.row_group(i).num_rows for i in range(4)] == [20, 20, 20, 10]
    assert pq.read_table(tmp_path / "s.parquet")["x"].to_pylist() == list(range(70))
    assert sink.close() is summary  # closing twice is harmless
    with pytest.raises(ValueError, match="closed"):
        sink.write(pa.record_batch([pa.array([1])], schema=schema))


def test_sink_writes_to_a_file_it_is_given_and_leaves_it_open(tmp_path) -> None:
    """What an engine's filesystem hands out (Beam's fileio): the sink writes there, from
    where the file stands, and leaves closing it to its owner."""
    with open(tmp_path / "f.parquet", "wb") as f:
        sink = ParquetSink(f, row_group_size=2)
        for i in range(3):
            sink.write(pa.record_batch({"x": [i, i]}))
        summary = sink.close()
        assert not f.closed and summary.bytes == f.tell() > 0
        assert summary.path == str(tmp_path / "f.parquet") and summary.row_groups == 3
        with pytest.raises(ValueError, match="footer"):
            sink.write(pa.record_batch({"x": [9]}))
    assert pq.read_table(tmp_path / "f.parquet")["x"].to_pylist() == [0, 0, 1, 1, 2, 2]
    buffer = io.BytesIO(b"head")
    buffer.seek(4)
    assert (
        ParquetSink(buffer, pa.schema([("x", pa.int8())])).close().bytes
        == len(buffer.getvalue()) - 4
    )


def test_sink_flushes_early_on_bytes(tmp_path) -> None:
    schema = pa.schema([pa.field("s", pa.binary())])
    batch = pa.record_batch([pa.array([b"x" * 1000] * 10)], schema=schema)
    with ParquetSink(
        tmp_path / "b.parquet", schema, row_group_size=1_000_000, max_buffer_bytes=25_000
    ) as sink:
        for _ in range(6):
            sink.write(batch)
    assert sink.close().row_groups == 2  # 30 rows hold ~30 KB: flushed twice
    assert pq.read_table(tmp_path / "b.parquet").num_rows == 60


def test_context_manager_and_lazy_schema(tmp_path) -> None:
    batch = pa.record_batch({"a": [1, 2, 3]})
    with ParquetSink(tmp_path / "lazy.parquet") as sink:
        assert sink.schema is None
        sink.write(batch)
        sink.write(batch.slice(0, 0))
    assert sink.close().rows == 3
    with pytest.raises(ValueError, match="schema"):
        sink2 = ParquetSink(tmp_path / "other.parquet")
        sink2.write(batch)
        sink2.write(pa.record_batch({"b": [1.5]}))


def test_empty_input(tmp_path) -> None:
    schema = pa.schema([pa.field("a", pa.int32())])
    summary = write_parquet(iter([]), tmp_path / "empty.parquet", schema=schema)
    assert (summary.rows, summary.row_groups) == (0, 0)
    assert pq.read_table(tmp_path / "empty.parquet").schema == schema
    assert duckdb.sql(f"select count(*) from '{tmp_path / 'empty.parquet'}'").fetchall()[0] == (0,)
    with pytest.raises(ValueError, match="no schema"):
        write_parquet([], tmp_path / "none.parquet")


def test_empty_structs_are_dropped_with_a_warning(tmp_path, compile_proto) -> None:
    schema, Msg = compile_proto(
        'syntax = "proto3"; import "google/protobuf/empty.proto";'
        "message E {} message Holder { E e = 1; int32 n = 2; } message OnlyEmpty { E e = 1; }"
        "message M { E e = 1; google.protobuf.Empty g = 2; int32 x = 3; Holder h = 4;"
        " repeated E es = 5; map<string, E> em = 6; OnlyEmpty oe = 7; repeated Holder hs = 8; }",
        "M",
    )
    tc = wa.Transcoder(schema)
    records = [
        Msg(e={}, x=1, h={"n": 5, "e": {}}, es=[{}], em={"k": {}}, hs=[{"n": 1}]),
        Msg(x=2),
    ]
    batch = tc.transcode([m.SerializeToString() for m in records])
    target, dropped = writable_schema(batch.schema)
    assert dropped == ("e", "g", "h.e", "es", "em", "oe", "hs[*].e")
    assert target.names == ["x", "h", "hs"]

    path = tmp_path / "empty-structs.parquet"
    with pytest.warns(ParquetSchemaWarning, match=r"dropped from the output: e, g, h\.e, es"):
        summary = write_parquet(batch, path)
    assert summary.dropped == dropped
    assert pq.read_table(path).to_pylist() == [
        {"x": 1, "h": {"n": 5}, "hs": [{"n": 1}]},
        {"x": 2, "h": None, "hs": []},
    ]
    assert duckdb.sql(f"select x, h.n from '{path}' order by x").fetchall() == [
        (1, 5),
        (2, None),
    ]


def test_nothing_left_to_write(tmp_path) -> None:
    batch = pa.record_batch([pa.array([{}], type=pa.struct([]))], names=["e"])
    with pytest.warns(ParquetSchemaWarning), pytest.raises(ValueError, match="no column left"):
        write_parquet(batch, tmp_path / "x.parquet")


def test_non_nullable_children_under_null_parents(tmp_path) -> None:
    """Non-nullable fields become nullable, at every depth; values are kept."""
    inner = pa.struct([pa.field("id", pa.string(), nullable=False)])
    t = pa.struct(
        [
            pa.field("a", pa.int64(), nullable=False),
            pa.field("inner", inner, nullable=False),
            pa.field("items", pa.list_(pa.field("item", inner, nullable=False))),
            pa.field("m", pa.map_(pa.string(), inner)),
        ]
    )
    rows = [
        {"a": 1, "inner": {"id": "x"}, "items": [{"id": "y"}], "m": [("k", {"id": "z"})]},
        None,
        {"a": 2, "inner": {"id": ""}, "items": None, "m": None},
    ]
    schema = pa.schema([pa.field("s", t, nullable=False), pa.field("n", pa.int8(), nullable=False)])
    batch = pa.record_batch([pa.array(rows, type=t), pa.array([1, 2, 3], pa.int8())], schema=schema)

    target, dropped = writable_schema(schema)
    assert dropped == ()

    def all_nullable(f: pa.Field, in_map_key: bool = False) -> bool:
        if not f.nullable and not in_map_key:
            return False
        t = f.type
        if pa.types.is_struct(t):
            return all(all_nullable(t.field(i)) for i in range(t.num_fields))
        if pa.types.is_map(t):
            return all_nullable(t.key_field, True) and all_nullable(t.item_field)
        if pa.types.is_list(t):
            return all_nullable(t.value_field)
        return True

    assert all(all_nullable(f) for f in target)
    path = tmp_path / "nullable.parquet"
    write_parquet(batch, path)
    back = pq.read_table(path)
    assert back.column("s").to_pylist() == batch.column("s").to_pylist()
    assert back.column("n").to_pylist() == [1, 2, 3]
    assert duckdb.sql(f"select s.inner.id, s.m['k'].id from '{path}'").fetchall() == [
        ("x", "z"),
        (None, None),
        ("", None),
    ]
