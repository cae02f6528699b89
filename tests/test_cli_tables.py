"""``wirearrow transcode ... --to iceberg | --to delta``: files of records into tables, from
the flags or the plan's ``output:``, a commit per file, a run started again writing nothing
twice. In process (``main``); tests/test_tables_kill.py kills the command itself."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import corpus  # benchmarks/, put on sys.path by conftest.py
from wirearrow import tables
from wirearrow.cli import main
from wirearrow.sources.framing import frame_records

pytest.importorskip("pyiceberg", reason="the iceberg extra is not installed")
pytest.importorskip("deltalake", reason="the delta extra is not installed")

import table_readers  # tests/ is on sys.path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "schema"
CORRUPT_AT = (3, 50)


def plan_text(output: str = "") -> str:
    return f"""\
proto:
  file: {EXAMPLES / "bidrequest.proto"}
  message: BidRequestEvent
  import_paths: [{EXAMPLES}]
denormalizer:
  columns:
    - {{name: id, path: id}}
    - {{name: country, path: device.geo.country}}
    - {{name: timestamp, path: timestamp}}
    - {{name: imp_id, path: "imp[*].id"}}
errors:
  policy: dead_letter
{output}"""


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name, seed in (("a.bin", 1), ("b.bin", 2)):
        records = corpus.generate(120, seed=seed)
        for i in CORRUPT_AT:
            records[i] = b"\xff\xff\xff"
        data = frame_records(pa.array(records, pa.binary()), "varint").to_pybytes()
        if name == "b.bin":
            data += b"\x80"  # a cut length prefix: the file's tail is one more dead letter
        (tmp_path / name).write_bytes(data)
    (tmp_path / "plan.yaml").write_text(plan_text())
    return tmp_path


def transcode(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    code = main(["transcode", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_into_iceberg_from_flags_resumes(work: Path, capsys) -> None:
    flags = ["--to", "iceberg", "--warehouse", "wh", "--table", "events.bids",
             "--partition", "day(timestamp)", "--batch-size", "50"]  # fmt: skip
    code, out, err = transcode(capsys, "plan.yaml", "a.bin", *flags)
    assert code == 0, err
    assert "240 records in" not in out and "120 records in" in out
    assert "-> iceberg table events.bids (1 commit(s)" in out
    assert "dead letters -> iceberg table events.bids_dead_letters" in out
    sink = tables.IcebergSink("events.bids", warehouse="wh")
    dead = tables.IcebergSink("events.bids_dead_letters", warehouse="wh")
    rows_a = sink.table().scan().to_arrow().num_rows
    assert dead.table().scan().to_arrow().num_rows == len(CORRUPT_AT)
    assert [f.name for f in sink.table().spec().fields] == ["timestamp_day"]
    # the same files again, and a new one: a's records are skipped, b's written once
    code, out, err = transcode(capsys, "plan.yaml", "a.bin", "b.bin", *flags)
    assert code == 0, err
    assert "120 records already in the table skipped" in out
    assert out.startswith("121 records in")  # b: 120 records and its cut tail
    rows = sink.table().scan().to_arrow()
    dead_rows = dead.table().scan().to_arrow()
    assert dead_rows.num_rows == 2 * len(CORRUPT_AT) + 1
    assert sorted(set(dead_rows.column("file").to_pylist())) == ["a.bin", "b.bin"]  # as given
    assert "truncated varint stream" in dead_rows.filter(
        pa.compute.equal(dead_rows.column("file_offset"), max(dead_rows.column("file_offset").to_pylist()))
    ).column("reason")[0].as_py()
    # what DuckDB reads: each record's rows once
    seen = table_readers.iceberg_scan(sink.table().metadata_location)
    assert seen.num_rows == rows.num_rows > rows_a
    counts = {}
    for rid in seen.column("id").to_pylist():
        counts[rid] = counts.get(rid, 0) + 1
    expect = {}
    for rid in rows.column("id").to_pylist():
        expect[rid] = expect.get(rid, 0) + 1
    assert counts == expect
    # positions: the byte after each file's last record (b: its whole size, tail included)
    positions = sink.committed()
    assert positions[tables.file_key("a.bin")] == (work / "a.bin").stat().st_size
    assert positions[tables.file_key("b.bin")] == (work / "b.bin").stat().st_size


def test_into_delta_from_the_plan(work: Path, capsys) -> None:
    (work / "plan.yaml").write_text(plan_text("output:\n  format: delta\n  table: tables/bids\n"))
    code, out, err = transcode(capsys, "plan.yaml", "a.bin", "b.bin", "--commit-every", "2",
                               "--batch-size", "30")  # fmt: skip
    assert code == 0, err
    assert "-> delta table " in out and "tables/bids" in out
    rows = table_readers.delta_scan(str(work / "tables" / "bids"))
    dead = table_readers.delta_scan(str(work / "tables" / "bids_dead_letters"))
    assert dead.num_rows == 2 * len(CORRUPT_AT) + 1
    code, out, err = transcode(capsys, "plan.yaml", "a.bin", "b.bin")
    assert code == 0, err
    assert "241 records already in the table skipped" in out
    assert table_readers.delta_scan(str(work / "tables" / "bids")).num_rows == rows.num_rows


def test_yaml_catalog_properties_and_flag_errors(work: Path, capsys) -> None:
    (work / "plan.yaml").write_text(plan_text(
        "output:\n  format: iceberg\n  table: events.bids\n  catalog:\n    type: sql\n"
        f"    uri: sqlite:///{work}/cat.db\n    warehouse: file://{work}/wh2\n"
    ))  # fmt: skip
    code, out, err = transcode(capsys, "plan.yaml", "a.bin")
    assert code == 0, err
    assert (work / "cat.db").exists() and (work / "wh2" / "events").is_dir()
    # -o alone turns the run to Parquet files, whatever the plan's table
    code, out, err = transcode(capsys, "plan.yaml", "a.bin", "-o", "files")
    assert code == 0, err
    assert out.rstrip().endswith("files.dead_letters.parquet")
    assert (work / "files" / "a.parquet").exists()
    cases = {
        ("--table", "x.y"): "--table is for a table output (--to iceberg or --to delta)",
        ("--to", "iceberg", "--table", "bids", "--warehouse", "wh"): "--table 'bids' must be NAMESPACE.NAME",
        ("--to", "delta", "--table", "t", "--partition", "day(timestamp)"): "delta partitions by columns",
        ("--to", "iceberg", "--warehouse", "wh"): "--to iceberg needs --table",
        ("--to", "delta", "--table", "t", "--dead-letters", "d.parquet"): "--dead-letter-table",
        ("--to", "iceberg", "--table", "a.b", "--catalog", "uri=x", "--catalog", "sqlite:///y"):
            "give a URL or name, or KEY=VALUE properties",
    }  # fmt: skip
    (work / "plan.yaml").write_text(plan_text())
    for flags, message in cases.items():
        code, _out, err = transcode(capsys, "plan.yaml", "a.bin", *flags)
        assert code == 2 and message in err, (flags, err)


def test_schema_change_refused_names_the_column(work: Path, capsys) -> None:
    flags = ["--to", "delta", "--table", "t"]
    assert transcode(capsys, "plan.yaml", "a.bin", *flags)[0] == 0
    (work / "plan2.yaml").write_text(plan_text().replace("path: device.geo.country", "path: at"))
    code, _out, err = transcode(capsys, "plan2.yaml", "b.bin", *flags)
    assert code == 1 and "column country: the Delta table holds" in err
