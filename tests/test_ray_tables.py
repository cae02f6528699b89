"""wirearrow.ray.write_table on a local 2-CPU Ray: Ray's tasks write the data files, the
driver commits them; the tables read back by pyiceberg / deltalake and by DuckDB's readers
hold what a plain run of the same job makes (EXCEPT ALL both ways); a job that dies before
its commit leaves the table at its last commit, and a job run again writes nothing twice.
(SIGKILLs of the driver: tests/test_tables_kill.py, release tier.)"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import corpus  # benchmarks/, put on sys.path by conftest.py
import wirearrow as wa
from wirearrow import tables
from wirearrow.sources.framing import frame_records

ray = pytest.importorskip("ray")
war = pytest.importorskip("wirearrow.ray")
pytest.importorskip("pyiceberg", reason="the iceberg extra is not installed")
pytest.importorskip("deltalake", reason="the delta extra is not installed")

import table_readers  # noqa: E402  (tests/ is on sys.path)

pytestmark = [
    pytest.mark.ray,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

N = 300
BAD = {7, 150, 299}
COLUMNS = ["id", "at", "device.geo.country", "timestamp"]
BLOCKS = 4


@pytest.fixture(scope="module")
def input_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    records = corpus.generate(N, seed=21)
    for i in BAD:
        records[i] = b"\xff\xff\xff"
    path = tmp_path_factory.mktemp("ray-tables") / "bids.varint"
    path.write_bytes(frame_records(pa.array(records, pa.binary()), "varint").to_pybytes())
    return path


def job(input_file: Path):
    ds = war.read_delimited(str(input_file), framing="varint", include_location=True,
                            override_num_blocks=BLOCKS)  # fmt: skip
    tc = wa.Transcoder(wa.Schema.from_proto(corpus.PROTO_FILE, corpus.MESSAGE_NAME,
                                            import_paths=[corpus.SCHEMA_DIR]), COLUMNS)  # fmt: skip
    return war.transcode(ds, tc, carry=["file", "offset"], on_error="dead_letter")


def output(fmt: str, tmp_path: Path, **fields) -> wa.Output:
    if fmt == "iceberg":
        return wa.Output(format="iceberg", table="events.bids", warehouse=str(tmp_path / "wh"),
                         partition=("day(timestamp)",), **fields)  # fmt: skip
    return wa.Output(format="delta", table=str(tmp_path / "bids"), **fields)


def scan(sink: tables.TableSink) -> str:
    """The table as DuckDB's own reader sees it."""
    if isinstance(sink, tables.IcebergSink):
        return f"iceberg_scan('{sink.table().metadata_location}')"
    assert isinstance(sink, tables.DeltaSink)
    return f"delta_scan('{sink.uri}')"


@pytest.fixture(scope="module")
def plain(input_file: Path, _ray_for_the_session) -> tuple[pa.Table, pa.Table]:
    """A plain run of the same job: its rows and dead letters, collected here."""
    result = job(input_file)
    rows = pa.concat_tables(ray.get(result.rows.to_arrow_refs()))
    dead = pa.concat_tables(ray.get(result.dead_letters.to_arrow_refs()))
    assert rows.num_rows == N - len(BAD) and dead.num_rows == len(BAD)
    # known before the job ran (write_table prepares the table with it): what it made
    assert result.schema is not None and result.schema.equals(rows.schema, check_metadata=True)
    return rows, dead


def _same_as_plain(con, out: wa.Output, plain: tuple[pa.Table, pa.Table]) -> None:
    rows, dead = tables.open_sinks(out)
    assert dead is not None
    want_rows, want_dead = plain
    con.register("want_rows", want_rows)
    con.register("want_dead", pa.table({
        "offset": want_dead.column("source").combine_chunks().field("offset"),
        "reason": want_dead.column("reason"), "raw": want_dead.column("raw"),
    }))  # fmt: skip
    cols = ", ".join(f'"{name}"' for name in want_rows.column_names)  # the plan's and carry's
    assert table_readers.except_all(con, f"SELECT {cols} FROM {scan(rows)}", f"SELECT {cols} FROM want_rows") == (0, 0)
    assert table_readers.except_all(
        con, f"SELECT source.offset, reason, raw FROM {scan(dead)}",
        'SELECT "offset", reason, raw FROM want_dead',
    ) == (0, 0)  # fmt: skip
    # the format's own library reads the same
    assert rows.scan().num_rows == want_rows.num_rows and dead.scan().num_rows == len(BAD)


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_write_table_once_per_record(ray_local, tmp_path: Path, input_file: Path, plain, fmt: str) -> None:
    out = output(fmt, tmp_path)
    done = war.write_table(job(input_file), out, source="file")
    assert done.rows == N - len(BAD)  # one row per record with these columns
    assert done.dead_letters == len(BAD) and done.dead_table == out.dead_letter_table
    assert len(done.commits) == 1 and len(done.dead_commits) == 1  # one commit per job
    key = tables.file_key(input_file)
    assert tables.resume(out)[key] == done.positions[key] > 0
    con = table_readers.connect()
    _same_as_plain(con, out, plain)
    # the same job again: every record is covered, nothing is written twice
    again = war.write_table(job(input_file), out, source="file")
    assert again.rows == 0 and again.skipped_rows == N - len(BAD) and again.commits == ()
    assert again.dead_letters == 0 and again.skipped_dead_letters == len(BAD)
    _same_as_plain(con, out, plain)


def test_commit_every_n_blocks_in_order(ray_local, tmp_path: Path, input_file: Path, plain) -> None:
    out = output("delta", tmp_path, commit_every=1)
    seen: list[tables.Commit] = []
    done = war.write_table(job(input_file), out, source="file", on_commit=seen.append)
    assert len(done.commits) == BLOCKS  # a commit per block, each its own table version
    assert seen == [*done.commits, *done.dead_commits]
    key = tables.file_key(input_file)
    positions = [c.positions[key] for c in done.commits]
    assert positions == sorted(positions) and positions[-1] == done.positions[key]
    assert sum(c.rows for c in done.commits) == N - len(BAD)
    _same_as_plain(table_readers.connect(), out, plain)


class Died(Exception):
    pass


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_a_job_dying_between_commits_leaves_the_last_one(
    ray_local, tmp_path: Path, input_file: Path, plain, fmt: str
) -> None:
    """A job that dies after its second commit (of four): readers see those two commits'
    rows and nothing of the files written after them; the job run again writes the rest."""
    out = output(fmt, tmp_path, commit_every=1)
    made: list[tables.Commit] = []

    def die_after_two(commit: tables.Commit) -> None:
        made.append(commit)
        if len(made) == 2:
            raise Died

    with pytest.raises(Died):
        war.write_table(job(input_file), out, source="file", on_commit=die_after_two)
    rows, dead = tables.open_sinks(out)
    assert dead is not None
    assert not dead.exists() or dead.scan().num_rows == 0  # the dead letters come last
    con = table_readers.connect()
    visible = con.sql(f"SELECT count(*) FROM {scan(rows)}").fetchone()[0]
    assert visible == made[0].rows + made[1].rows == rows.scan().num_rows
    assert 0 < visible < N - len(BAD)
    key = tables.file_key(input_file)
    assert rows.committed()[key] == made[1].positions[key]
    # every record once after the run that finishes
    done = war.write_table(job(input_file), out, source="file")
    assert done.skipped_rows == visible and done.rows == N - len(BAD) - visible
    assert done.dead_letters == len(BAD)
    _same_as_plain(con, out, plain)


def test_rows_of_a_plain_dataset_and_its_errors(ray_local, tmp_path: Path) -> None:
    """Any Dataset of Arrow rows goes in (no source: each call appends); a Parquet output
    is refused with what to use instead."""
    ds = ray.data.from_arrow(pa.table({"id": ["a", "b", "c"], "n": [1, 2, 3]}))
    out = wa.Output(format="delta", table=str(tmp_path / "plain"))
    done = war.write_table(ds, out)
    assert done.rows == 3 and done.dead_table is None and done.dead_commits == ()
    assert sorted(tables.open_sink(out).scan().column("id").to_pylist()) == ["a", "b", "c"]
    with pytest.raises(ValueError, match="format iceberg or delta"):
        war.write_table(ds, wa.Output(path=str(tmp_path / "files")))
    with pytest.raises(ValueError, match="TranscodeResult"):
        war.write_table(ds, out, dead_letters=True)
    with pytest.raises(KeyError, match="carry it"):
        war.write_table(ds, out, source="kafka")
