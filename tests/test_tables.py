"""The table sinks (wirearrow.tables): Iceberg on a SQLite SQL catalog and Delta, in process.

What a reader of each table sees is checked with the writer's own library and with DuckDB's
iceberg and delta extensions (an independent reader). The commit protocol's crash points are
walked one by one here (an exception at each step, then a restarted job); tests/test_tables_kill.py
kills real processes at random points.
"""

from __future__ import annotations

import decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import wirearrow as wa
from wirearrow import tables

pytest.importorskip("pyiceberg", reason="the iceberg extra is not installed")
pytest.importorskip("deltalake", reason="the delta extra is not installed")

import table_readers  # tests/ on sys.path (pytest's rootdir insertion)
from wirearrow.field_ids import FIELD_ID
from wirearrow.tables.types import storable_schema

FORMATS = ("iceberg", "delta")


def ids(f: pa.Field) -> dict[str, int]:
    """path -> PARQUET:field_id of ``f`` and every field under it."""
    out: dict[str, int] = {}

    def visit(field: pa.Field, path: str) -> None:
        if field.metadata and FIELD_ID in field.metadata:
            out[path] = int(field.metadata[FIELD_ID])
        t = field.type
        if pa.types.is_struct(t):
            for i in range(t.num_fields):
                visit(t.field(i), f"{path}.{t.field(i).name}")
        elif pa.types.is_map(t):
            visit(t.key_field, f"{path}.key")
            visit(t.item_field, f"{path}.value")
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            visit(t.value_field, f"{path}.element")

    visit(f, f.name)
    return out


def with_id(f: pa.Field, fid: int) -> pa.Field:
    return f.with_metadata({FIELD_ID: str(fid).encode()})


def sink_of(fmt: str, where: Path, name: str = "bids", **kw) -> tables.TableSink:
    if fmt == "iceberg":
        return tables.IcebergSink(f"events.{name}", warehouse=str(where / "warehouse"), **kw)
    return tables.DeltaSink(str(where / name), **kw)


def read(sink: tables.TableSink) -> pa.Table:
    """The table's rows by the writer's own library."""
    if isinstance(sink, tables.IcebergSink):
        return sink.table().scan().to_arrow()
    assert isinstance(sink, tables.DeltaSink)
    return sink.table().to_pyarrow_table()


def duck(sink: tables.TableSink, con=None) -> pa.Table:
    """The table's rows by DuckDB."""
    if isinstance(sink, tables.IcebergSink):
        return table_readers.iceberg_scan(sink.table().metadata_location, con)
    assert isinstance(sink, tables.DeltaSink)
    return table_readers.delta_scan(sink.uri, con)


def sorted_rows(table: pa.Table, key: str) -> list[dict]:
    return table.sort_by(key).to_pylist()


# ---- types --------------------------------------------------------------------------------


def test_storable_types_hold_every_value(tmp_path: Path) -> None:
    """Types neither format has map to ones that hold every value: uint64's top, uint32's,
    durations, dictionaries, times, second timestamps; ids kept on the way."""
    data = pa.table(
        {
            "u64": pa.array([0, 2**64 - 1, None], pa.uint64()),
            "u32": pa.array([0, 2**32 - 1, 7], pa.uint32()),
            "dur": pa.array([1, -5, None], pa.duration("us")),
            "enum": pa.array(["A", "B", None]).dictionary_encode(),
            "tod": pa.array([0, 86_399_999_999, None], pa.time64("us")),
            "tod_ns": pa.array([1, 86_399_999_999_999, None], pa.time64("ns")),
            "ts": pa.array([0, 1_700_000_000, None], pa.timestamp("s", tz="UTC")),
            "n": pa.array([1, 2, 3], pa.int64()),
        }
    )
    data = data.cast(pa.schema([with_id(f, i + 1) for i, f in enumerate(data.schema)]))
    for fmt in FORMATS:
        sink = sink_of(fmt, tmp_path)
        sink.append(data)
        back = read(sink).sort_by("n")
        assert back.column("u64").to_pylist() == [decimal.Decimal(0), decimal.Decimal(2**64 - 1), None]
        assert back.column("u32").to_pylist() == [0, 2**32 - 1, 7]
        assert back.column("dur").to_pylist() == [1, -5, None]
        assert back.column("enum").to_pylist() == ["A", "B", None]
        assert back.column("ts").cast(pa.int64()).to_pylist() == [0, 1_700_000_000 * 10**6, None]
        tod = back.column("tod")
        assert (tod.cast(pa.int64()) if fmt == "iceberg" else tod).to_pylist() == [0, 86_399_999_999, None]
        # Iceberg's time holds microseconds: a ns time of day is its count of nanoseconds
        assert back.column("tod_ns").to_pylist() == [1, 86_399_999_999_999, None]
        schema, dropped = storable_schema(data.schema, fmt)
        assert dropped == () and [ids(f) for f in schema] == [ids(f) for f in data.schema]


# ---- Iceberg: the plan's ids, partitions, evolution ----------------------------------------


def nested_rows(bid_schema: wa.Schema, bid_corpus: list[bytes], n: int = 120) -> pa.Table:
    tc = wa.Transcoder(bid_schema)
    return pa.Table.from_batches([tc.decode(bid_corpus[:n]).rows])


def numbered(schema: pa.Schema, start: int = 100) -> pa.Schema:
    """``schema`` with an id on every field, as the plan gives them (here: made up, in a
    range the table would not choose)."""
    counter = iter(range(start, start + 100_000))

    def field(f: pa.Field) -> pa.Field:
        t = f.type
        if pa.types.is_struct(t):
            t = pa.struct([field(t.field(i)) for i in range(t.num_fields)])
        elif pa.types.is_map(t):
            t = pa.map_(field(t.key_field), field(t.item_field))
        elif pa.types.is_list(t):
            t = pa.list_(field(t.value_field))
        return pa.field(f.name, t, f.nullable, {FIELD_ID: str(next(counter)).encode()})

    return pa.schema([field(f) for f in schema])


def test_iceberg_keeps_the_plans_field_ids(tmp_path: Path, bid_schema, bid_corpus) -> None:
    rows = nested_rows(bid_schema, bid_corpus)
    rows = rows.cast(numbered(rows.schema))
    sink = tables.IcebergSink("events.bids", warehouse=str(tmp_path / "wh"))
    done = sink.append(rows, {"k": 120})
    assert done.rows == 120 and done.files == 1
    table = sink.table()
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    stored = schema_to_pyarrow(table.schema())
    # every field of the rows, nested ones, list elements, map keys and values: its own id
    assert [ids(f) for f in stored] == [ids(f) for f in storable_schema(rows.schema, "iceberg")[0]]
    # the data files carry them too
    [task] = list(table.scan().plan_files())
    footer = pq.read_schema(task.file.file_path.removeprefix("file://"))
    assert ids(footer.field("imp")) == ids(stored.field("imp"))
    # both readers see the rows
    expect = rows.sort_by("id").to_pylist()
    back = read(sink)
    assert back.num_rows == 120
    con = table_readers.connect()
    seen = duck(sink, con)
    assert sorted(seen.column("id").to_pylist()) == sorted(rows.column("id").to_pylist())
    assert sorted_rows(back.select(["id", "at", "cur", "ext"]), "id") == [
        {k: r[k] for k in ("id", "at", "cur", "ext")} for r in expect
    ]


def test_iceberg_partition_spec_from_the_plan(tmp_path: Path, bid_schema, bid_corpus) -> None:
    rows = nested_rows(bid_schema, bid_corpus)
    sink = tables.IcebergSink(
        "events.bids", warehouse=str(tmp_path / "wh"),
        partition=("day(timestamp)", "bucket(4, id)", "device.geo.country"),
    )  # fmt: skip
    sink.append(rows)
    table = sink.table()
    spec = table.spec()
    assert [(f.name, str(f.transform)) for f in spec.fields] == [
        ("timestamp_day", "day"),
        ("id_bucket", "bucket[4]"),
        ("device_geo_country", "identity"),
    ]
    files = [t.file for t in table.scan().plan_files()]
    days = {f.partition[0] for f in files}
    expect_days = set(
        (rows.column("timestamp").cast(pa.int64()).to_numpy(zero_copy_only=False) // 86_400_000_000).tolist()
    )
    assert days == expect_days and len(files) >= len(days)
    # a filter on the partition column prunes files
    one_day = sorted(expect_days)[0]
    import datetime

    start = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(days=one_day)
    scan = table.scan(row_filter=f"timestamp >= '{start.isoformat()}' and timestamp < "
                      f"'{(start + datetime.timedelta(days=1)).isoformat()}'")  # fmt: skip
    assert {t.file.partition[0] for t in scan.plan_files()} == {one_day}
    with pytest.raises(tables.TableSchemaError, match="no column 'nope'"):
        tables.IcebergSink("events.other", catalog=sink.catalog, partition=("nope",)).append(rows)
    with pytest.raises(tables.TableSchemaError, match="day does not apply to id"):
        tables.IcebergSink("events.other2", catalog=sink.catalog, partition=("day(id)",)).append(rows)


def test_iceberg_evolves_by_field_id(tmp_path: Path) -> None:
    """A new version's fields are added (nested ones too), int and float widen, a narrower
    batch goes into the wider column, a renamed field (same id) keeps its column, and a
    change Iceberg cannot follow is refused naming the column."""
    v1 = pa.schema([
        with_id(pa.field("id", pa.int32()), 1),
        with_id(pa.field("score", pa.float32()), 2),
        with_id(pa.field("geo", pa.struct([with_id(pa.field("country", pa.utf8()), 4)])), 3),
    ])  # fmt: skip
    sink = tables.IcebergSink("events.v", warehouse=str(tmp_path / "wh"))
    sink.append(pa.table({"id": [1], "score": [0.5], "geo": [{"country": "FR"}]}).cast(v1))
    v2 = pa.schema([
        with_id(pa.field("id", pa.int64()), 1),
        with_id(pa.field("points", pa.float64()), 2),  # renamed, widened
        with_id(pa.field("geo", pa.struct([
            with_id(pa.field("country", pa.utf8()), 4), with_id(pa.field("city", pa.utf8()), 6),
        ])), 3),
        with_id(pa.field("tags", pa.list_(with_id(pa.field("element", pa.utf8()), 8))), 7),
    ])  # fmt: skip
    sink.append(pa.table({"id": [2**40], "points": [1.25], "geo": [{"country": "DE", "city": "Bonn"}],
                          "tags": [["a"]]}).cast(v2))  # fmt: skip
    sink.append(pa.table({"id": [3], "score": [2.0], "geo": [None]}).cast(v1))  # narrower, old name
    schema = sink.table().schema()
    assert str(schema.find_field(1).field_type) == "long"
    assert schema.find_field(2).name == "score" and str(schema.find_field(2).field_type) == "double"
    assert schema.find_field(6).name == "city" and schema.find_field(8) is not None
    back = read(sink).sort_by("id").to_pylist()
    assert back == [
        {"id": 1, "score": 0.5, "geo": {"country": "FR", "city": None}, "tags": None},
        {"id": 3, "score": 2.0, "geo": None, "tags": None},
        {"id": 2**40, "score": 1.25, "geo": {"country": "DE", "city": "Bonn"}, "tags": ["a"]},
    ]
    bad = pa.schema([with_id(pa.field("id", pa.utf8()), 1)])
    with pytest.raises(tables.TableSchemaError, match="column id: the table holds long, the rows have string"):
        sink.append(pa.table({"id": ["x"]}).cast(bad))
    taken = pa.schema([with_id(pa.field("geo", pa.int32()), 99)])
    with pytest.raises(tables.TableSchemaError, match="column geo: the rows' field id 99"):
        sink.append(pa.table({"geo": [1]}).cast(taken))
    assert read(sink).num_rows == 3  # refused rows left nothing


def test_rows_without_ids_get_table_ids(tmp_path: Path) -> None:
    """Arrow data without field ids (any producer's) is matched to the table's columns by
    name; new columns get new ids."""
    sink = tables.IcebergSink("events.plain", warehouse=str(tmp_path / "wh"))
    sink.append(pa.table({"a": [1], "s": [{"x": 1}]}))
    sink.append(pa.table({"a": [2], "s": [{"x": 2, "y": "n"}], "b": ["z"]}))
    schema = sink.table().schema()
    assert [f.name for f in schema.fields] == ["a", "s", "b"]
    assert len({f.field_id for f in schema.fields}) == 3
    assert read(sink).sort_by("a").to_pylist() == [
        {"a": 1, "s": {"x": 1, "y": None}, "b": None},
        {"a": 2, "s": {"x": 2, "y": "n"}, "b": "z"},
    ]


# ---- Delta -----------------------------------------------------------------------------


def test_delta_tables(tmp_path: Path, bid_schema, bid_corpus) -> None:
    rows = nested_rows(bid_schema, bid_corpus)
    sink = tables.DeltaSink(str(tmp_path / "bids"), partition=("at",))
    sink.append(rows, {"k": 120})
    dt = sink.table()
    assert dt.metadata().partition_columns == ["at"]
    back = read(sink)
    assert sorted(back.column("id").to_pylist()) == sorted(rows.column("id").to_pylist())
    seen = duck(sink)
    assert seen.num_rows == 120
    assert sorted(seen.column("at").to_pylist()) == sorted(rows.column("at").to_pylist())
    assert sorted(seen.column("id").to_pylist()) == sorted(rows.column("id").to_pylist())
    # no field ids in the files (Delta matches by name; DuckDB's delta reader takes ids in
    # the files of a table without column mapping as its own, and reads nulls)
    assert rows.schema.field("id").metadata  # the rows have them
    for path in sink.table().file_uris():
        assert all(not ids(f) for f in pq.read_schema(path))
    # a new column (nested too) is added; a type change is refused
    sink.append(pa.table({"id": ["new"], "at": pa.array([2], pa.int32()), "extra": [1.5]}))
    assert read(sink).filter(pa.compute.equal(pa.compute.field("id"), "new")).column("extra").to_pylist() == [1.5]
    with pytest.raises(tables.TableSchemaError, match="column at: the Delta table holds int32"):
        sink.append(pa.table({"id": ["x"], "at": ["text"]}))
    with pytest.raises(tables.TableSchemaError, match="partition column 'nope'"):
        tables.DeltaSink(str(tmp_path / "p"), partition=("nope",)).append(rows)


# ---- commits and positions ---------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_positions_and_conflicts(tmp_path: Path, fmt: str) -> None:
    one = sink_of(fmt, tmp_path)
    assert one.committed() == tables.Positions()
    data = pa.table({"n": [1, 2]})
    done = one.append(data, {tables.kafka_key("bids", 0): 2, tables.kafka_key("bids", 1): 7})
    assert done.positions.kafka_offsets() == {"bids": {0: 2, 1: 7}}
    # a commit records the whole map, advanced (never backwards)
    done = one.append(data, {tables.kafka_key("bids", 1): 3, tables.kafka_key("bids", 2): 1})
    assert done.positions.kafka_offsets() == {"bids": {0: 2, 1: 7, 2: 1}}
    two = sink_of(fmt, tmp_path)
    assert two.committed() == done.positions
    assert not two.uncommitted(tables.kafka_key("bids", 1), 6)
    assert two.uncommitted(tables.kafka_key("bids", 1), 7)
    two.append(data, {tables.kafka_key("bids", 0): 4})
    # one read positions before two committed: its commit would repeat records
    with pytest.raises(tables.CommitConflict, match="another job of app id 'wirearrow'"):
        one.append(data, {tables.kafka_key("bids", 0): 4})
    assert read(one).num_rows == 6
    assert one.committed()[tables.kafka_key("bids", 0)] == 4
    # another app id keeps its own positions in the same table
    other = sink_of(fmt, tmp_path, app_id="backfill")
    assert other.committed() == tables.Positions()
    other.append(data, {"batch:backfill": 1})
    assert one.committed()[tables.kafka_key("bids", 0)] == 4
    assert other.committed().next == {"batch:backfill": 1}
    one.append(data, {tables.kafka_key("bids", 0): 6})  # other's commit is no conflict


@pytest.mark.parametrize("fmt", FORMATS)
def test_staged_files_are_invisible(tmp_path: Path, fmt: str) -> None:
    sink = sink_of(fmt, tmp_path)
    sink.append(pa.table({"n": [1]}), {"k": 1})
    writer = sink.prepare(pa.schema([pa.field("n", pa.int64())]))
    staged = writer.write(pa.table({"n": [2, 3]}))
    assert staged.rows == 2 and len(staged.files) == 1
    assert read(sink).column("n").to_pylist() == [1]
    assert duck(sink).column("n").to_pylist() == [1]
    # staged files travel (a worker writes, the driver commits)
    import pickle

    staged = pickle.loads(pickle.dumps(staged))
    writer2 = pickle.loads(pickle.dumps(writer))
    more = writer2.write(pa.table({"n": [4]}))
    sink.commit([staged, more], {"k": 4})
    assert sorted(read(sink).column("n").to_pylist()) == [1, 2, 3, 4]
    assert sorted(duck(sink).column("n").to_pylist()) == [1, 2, 3, 4]


# ---- TableWriter: rows and dead letters, each record once ---------------------------------

CORRUPT = b"\xff\xff\xff"


def batches(corpus: list[bytes], size: int) -> list[tuple[list[bytes], np.ndarray]]:
    """The corpus with every 7th record corrupt, in batches: (records, positions)."""
    records = [CORRUPT if i % 7 == 3 else r for i, r in enumerate(corpus)]
    return [
        (records[i : i + size], np.arange(i, min(i + size, len(records))))
        for i in range(0, len(records), size)
    ]


def run_job(tc: wa.Transcoder, sinks, work, key: str, stop_after=None, commit_every: int = 2):
    """A job over ``work`` from where the tables say: the writer's resume position.
    ``stop_after(writer, i)`` may raise to crash it."""
    writer = tables.TableWriter(*sinks(), commit_every=commit_every)
    start = writer.resume()[key]
    for i, (records, positions) in enumerate(work):
        if positions[-1] < start:
            continue  # a real source seeks there
        decoded = tc.decode(records, record_index=True, carry={"position": pa.array(positions)})
        writer.write(decoded, key, positions)
        if stop_after is not None:
            stop_after(writer, i)
    writer.close()
    return writer


class Crash(Exception):
    pass


CRASHES = [("staged", 2), ("rows", 3), ("both", 1), ("rows", 6), ("staged", 6), ("both", 6)]


@pytest.mark.parametrize(
    "fmt, crashes",
    [
        ("iceberg", CRASHES[1:2]),
        ("delta", CRASHES[3:4]),
        pytest.param("iceberg", CRASHES, marks=pytest.mark.slow),
        pytest.param("delta", CRASHES, marks=pytest.mark.slow),
    ],
)
def test_table_writer_crash_points(tmp_path: Path, fmt: str, crashes, bid_schema, bid_corpus) -> None:
    """A job crashed at a step of the protocol (after staging, after the rows' commit,
    after both), then restarted: each record is in exactly one table, once."""
    tc = wa.Transcoder(bid_schema, columns=["id", "at"], on_error="dead_letter")
    work = batches(bid_corpus[:140], 20)
    key = tables.file_key("corpus.bin")
    want_rows = [i for i in range(140) if i % 7 != 3]
    want_dead = [i for i in range(140) if i % 7 == 3]

    def crash_at(point: str, batch: int):
        def stop(writer: tables.TableWriter, i: int) -> None:
            if i != batch:
                return
            if point == "rows":  # the rows' table committed, the dead letters' not
                writer.rows.commit(writer._positions)
            elif point == "both":
                writer.commit()
            raise Crash

        return stop

    for n, (point, batch) in enumerate(crashes):
        where = tmp_path / f"run{n}"
        with pytest.raises(Crash):
            run_job(tc, lambda where=where: open_pair(fmt, where), work, key, crash_at(point, batch))
        writer = run_job(tc, lambda where=where: open_pair(fmt, where), work, key)
        rows, dead = writer.rows.sink, writer.dead.sink  # type: ignore[union-attr]
        assert sorted(read(rows).column("position").to_pylist()) == want_rows, (point, batch)
        dead_positions = sorted(c["position"] for c in read(dead).column("carry").to_pylist())
        assert dead_positions == want_dead, (point, batch)
        assert rows.committed()[key] == dead.committed()[key] == 140
        if n == 0:  # what a reader sees: each row once, with its values
            clean = run_job(tc, lambda: open_pair(fmt, tmp_path / "clean"), work, key)
            con = table_readers.connect()
            con.register("seen", duck(rows, con))
            con.register("clean", duck(clean.rows.sink, con))
            assert table_readers.except_all(con, "SELECT * FROM seen", "SELECT * FROM clean") == (0, 0)


def open_pair(fmt: str, where: Path):
    out = (
        wa.Output(format="iceberg", table="events.bids", warehouse=str(where / "wh"))
        if fmt == "iceberg"
        else wa.Output(format="delta", table=str(where / "bids"))
    )
    return tables.open_sinks(out)


# ---- a real database as the catalog -------------------------------------------------------


@pytest.mark.postgres
def test_iceberg_on_a_postgres_catalog(tmp_path: Path, postgres_url: str, bid_schema, bid_corpus) -> None:
    """The SQL catalog on Postgres: tables, commits and positions as on SQLite, and two
    sinks of one app id conflict through the database."""
    rows = nested_rows(bid_schema, bid_corpus, 50)
    name = f"events.pg_{tmp_path.name.replace('-', '_')}"
    out = wa.Output(format="iceberg", table=name, catalog=postgres_url, warehouse=str(tmp_path / "wh"),
                    partition=("day(timestamp)",))  # fmt: skip
    one, _ = tables.open_sinks(out, dead_letters=False)
    one.append(rows, {"k": 50})
    two, _ = tables.open_sinks(out, dead_letters=False)
    assert two.committed()["k"] == 50
    assert read(two).num_rows == 50
    two.append(rows.slice(0, 10), {"k": 60})
    with pytest.raises(tables.CommitConflict):
        one.append(rows.slice(0, 10), {"k": 60})
    seen = duck(two)
    assert seen.num_rows == 60
    # the catalog's own tables are in Postgres: another process's view
    import sqlalchemy

    engine = sqlalchemy.create_engine(postgres_url)
    with engine.connect() as con:
        found = con.execute(sqlalchemy.text(
            "SELECT table_name FROM iceberg_tables WHERE table_namespace = 'events'")).fetchall()
    engine.dispose()
    assert (name.split(".")[1],) in found


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_a_commit_id_seen_again_commits_nothing(tmp_path: Path, fmt: str) -> None:
    """A unit of work committed, then committed again (its retry, from a sink of its own):
    the second finds its id among the table's commits and makes none; another id commits."""
    sink = sink_of(fmt, tmp_path)
    data = pa.table({"id": ["a", "b"]})
    staged = sink.prepare(data.schema).write(data)
    first = sink.commit([staged], commit_id="job:0-60000000:0")
    again = sink_of(fmt, tmp_path).commit([staged], commit_id="job:0-60000000:0")
    assert first.version is not None and first.rows == 2
    assert again.version is None and again.rows == 0
    assert sink.scan().num_rows == 2
    other = sink_of(fmt, tmp_path).commit([sink.prepare(data.schema).write(data)], commit_id="job:0-60000000:1")
    assert other.version is not None and sink.scan().num_rows == 4


def test_source_columns_positions_and_what_is_left() -> None:
    rows = pa.table({
        "topic": ["bids", "bids", "wins", "bids"], "partition": [0, 1, 0, 0],
        "offset": pa.array([5, 9, 2, 7], pa.int64()),
    })  # fmt: skip
    kafka = tables.source_columns("kafka")
    assert kafka.positions(rows).next == {"kafka:bids:0": 8, "kafka:bids:1": 10, "kafka:wins:0": 3}
    committed = tables.Positions({"kafka:bids:0": 6, "kafka:wins:0": 3})
    assert kafka.uncommitted(rows, committed).tolist() == [False, True, False, True]
    files = pa.table({"file": ["a.bin", "b.bin", "a.bin"], "offset": pa.array([0, 40, 90], pa.int64())})
    at = tables.source_columns("file").positions(files)
    assert at[tables.file_key("a.bin")] == 91 and at[tables.file_key("b.bin")] == 41
    with pytest.raises(KeyError, match="carry it"):
        kafka.positions(files)
    with pytest.raises(ValueError, match="'kafka', 'file'"):
        tables.source_columns("s3")
