"""wirearrow.beam.WriteToTable: ToArrow's batches and dead letters into Iceberg and Delta
tables, one commit per window firing: batch on FnApiRunner (pinned), streaming with
TestStream on the direct runner's streaming engine (FnApiRunner does not run TestStream).
Rows + dead letters in the tables = records in, read back by DuckDB's readers; a firing
committed again (a retry) commits nothing; a failed pipeline leaves nothing visible."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

beam = pytest.importorskip("apache_beam")
pytest.importorskip("pyiceberg", reason="the iceberg extra is not installed")
pytest.importorskip("deltalake", reason="the delta extra is not installed")

from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions  # noqa: E402
from apache_beam.runners.direct.direct_runner import BundleBasedDirectRunner  # noqa: E402
from apache_beam.runners.portability.fn_api_runner import FnApiRunner  # noqa: E402
from apache_beam.testing import test_stream  # noqa: E402
from apache_beam.transforms import trigger, window  # noqa: E402

import table_readers  # noqa: E402  (tests/ is on sys.path)
import wirearrow as wa  # noqa: E402
import wirearrow.beam as wab  # noqa: E402
from wirearrow import tables  # noqa: E402

pytestmark = [
    pytest.mark.beam,
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::PendingDeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::FutureWarning"),
]

ROOT = Path(__file__).resolve().parent.parent
PLAN = {
    "proto": {
        "file": "bidrequest.proto",
        "message": "BidRequestEvent",
        "import_paths": [str(ROOT / "examples" / "schema")],
    },
    "denormalizer": {
        "columns": [
            {"name": "id", "path": "id"},
            {"name": "at", "path": "at"},
            {"name": "imp_id", "path": "imp[*].id"},  # several rows per record
        ]
    },
}
COLS = 'id, "at", imp_id'  # ("at": a word of DuckDB's SQL)
BAD = bytes([0x00])  # field number 0: every plan rejects it


def output(fmt: str, tmp_path: Path) -> wa.Output:
    if fmt == "iceberg":
        return wa.Output(format="iceberg", table="events.bids", warehouse=str(tmp_path / "wh"))
    return wa.Output(format="delta", table=str(tmp_path / "bids"))


def scan(sink: tables.TableSink) -> str:
    if isinstance(sink, tables.IcebergSink):
        return f"iceberg_scan('{sink.table().metadata_location}')"
    assert isinstance(sink, tables.DeltaSink)
    return f"delta_scan('{sink.uri}')"


def commit_ids(sink: tables.TableSink) -> list[str]:
    key = f"wirearrow.commit-id.{sink.app_id}"
    if isinstance(sink, tables.IcebergSink):
        found = [s.summary.additional_properties.get(key) for s in sink.table().snapshots()]
    else:
        found = [h.get(key) for h in sink.table().history()]
    return [i for i in found if i is not None]


def plain(records: list[bytes]) -> pa.Table:
    """The rows a plain decode of the records makes."""
    from wirearrow.plans import resolve_plan

    tc = resolve_plan(PLAN, on_error="skip").transcoder
    return pa.Table.from_batches([tc.transcode(records)])


def batch_job(records: list[bytes], out: wa.Output, job: str | None = None, fail_after_commit: bool = False) -> None:
    with beam.Pipeline(runner=FnApiRunner()) as p:
        result = p | beam.Create(records) | wab.ToArrow(PLAN, on_error="dead_letter", batch_size=16)
        commits = result.batches | "Rows" >> wab.WriteToTable(out, schema=result.schema, job=job)
        dead = result.dead_letters | "Dead" >> wab.WriteToTable(out, dead_letters=True, job=job)
        if fail_after_commit:
            def fail(commit):
                raise RuntimeError("the worker died after the commit")
            _ = (commits, dead) | beam.Flatten() | beam.Map(fail)


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_batch_pipeline_one_commit_rows_and_dead_letters(tmp_path: Path, bid_corpus, fmt: str) -> None:
    records = list(bid_corpus[:100]) + [BAD] * 3
    out = output(fmt, tmp_path)
    batch_job(records, out)
    rows, dead = tables.open_sinks(out)
    assert dead is not None
    con = table_readers.connect()
    con.register("want", plain(records))
    assert table_readers.except_all(
        con, f"SELECT {COLS} FROM {scan(rows)}", f"SELECT {COLS} FROM want"
    ) == (0, 0)  # fmt: skip
    letters = con.sql(f"SELECT raw, reason FROM {scan(dead)}").fetchall()
    assert [raw for raw, _ in letters] == [BAD] * 3 and all(reason for _, reason in letters)
    # rows + dead letters = records in: each good record's id once among the rows
    ids = con.sql(f"SELECT count(DISTINCT id) FROM {scan(rows)}").fetchone()[0]
    assert ids + len(letters) == len(records)
    assert len(commit_ids(rows)) == len(commit_ids(dead)) == 1  # one firing: the global window's
    assert rows.scan().num_rows == plain(records).num_rows  # the format's own reader too


@pytest.mark.parametrize("fmt", ["iceberg", "delta"])
def test_a_firing_committed_again_commits_nothing(tmp_path: Path, bid_corpus, fmt: str) -> None:
    """A pipeline that fails after its commits, run again as the same job (the retry of a
    committed firing): nothing is committed twice. Under a new job name it appends."""
    records = [*bid_corpus[:40], BAD]
    out = output(fmt, tmp_path)
    with pytest.raises(Exception, match="died after the commit"):
        batch_job(records, out, job="bids-day-1", fail_after_commit=True)
    rows, dead = tables.open_sinks(out)
    assert dead is not None
    n = plain(records).num_rows
    assert rows.scan().num_rows == n and dead.scan().num_rows == 1
    batch_job(records, out, job="bids-day-1")
    assert rows.scan().num_rows == n and dead.scan().num_rows == 1
    assert commit_ids(rows) == ["bids-day-1:global:0"]
    batch_job(records, out)  # a job of its own: its records again
    assert rows.scan().num_rows == 2 * n and dead.scan().num_rows == 2


def test_a_pipeline_failing_before_its_commit_leaves_nothing_visible(tmp_path: Path, bid_corpus) -> None:
    records = list(bid_corpus[:40])
    out = output("delta", tmp_path)

    last = plain(records[-1:]).column("id")[0].as_py()

    def fail_late(batch):  # once the batches before it were staged
        if last in batch.column("id").to_pylist():
            raise RuntimeError("the worker died before the commit")
        return batch

    with pytest.raises(Exception, match="died before the commit"), beam.Pipeline(runner=FnApiRunner()) as p:
        result = p | beam.Create(records) | wab.ToArrow(PLAN, batch_size=8)
        _ = result.batches | beam.Map(fail_late) | wab.WriteToTable(out, schema=result.schema)
    sink = tables.open_sink(out)
    assert not sink.exists() or sink.scan().num_rows == 0  # files may exist; no commit has them


def test_streaming_one_commit_per_window_firing(tmp_path: Path, bid_corpus) -> None:
    records = bid_corpus[:50]
    stream = (
        test_stream.TestStream()
        .add_elements([window.TimestampedValue(r, 10 + i) for i, r in enumerate(records[:20])])
        .add_elements([window.TimestampedValue(r, 70 + i) for i, r in enumerate(records[20:40])])
        .advance_watermark_to(125)  # windows [0, 60) and [60, 120) fire
        .add_elements([window.TimestampedValue(r, 30) for r in records[40:45]])  # late, allowed
        .add_elements([window.TimestampedValue(r, 130 + i) for i, r in enumerate(records[45:50])])
        .add_elements([window.TimestampedValue(BAD, 140)])
        .advance_watermark_to_infinity()
    )
    options = PipelineOptions()
    options.view_as(StandardOptions).streaming = True
    out = output("iceberg", tmp_path)
    with beam.Pipeline(runner=BundleBasedDirectRunner(), options=options) as p:
        result = (
            p
            | stream
            | beam.WindowInto(
                window.FixedWindows(60),
                trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                accumulation_mode=trigger.AccumulationMode.DISCARDING,
                allowed_lateness=300,
            )
            | wab.ToArrow(PLAN, on_error="dead_letter", batch_size=8)
        )
        _ = result.batches | "Rows" >> wab.WriteToTable(out, schema=result.schema, job="stream")
        _ = result.dead_letters | "Dead" >> wab.WriteToTable(out, dead_letters=True, job="stream")
    rows, dead = tables.open_sinks(out)
    assert dead is not None
    firings = commit_ids(rows)
    # one commit per firing: three windows on time, one late firing of the first
    assert len(firings) == len(set(firings)) == 4
    assert sorted(f.rsplit(":", 1)[1] for f in firings) == ["0", "0", "0", "1"]
    assert [f.split(":")[1] for f in commit_ids(dead)] == ["120000000-180000000"]
    con = table_readers.connect()
    con.register("want", plain(list(records)))
    assert table_readers.except_all(
        con, f"SELECT {COLS} FROM {scan(rows)}", f"SELECT {COLS} FROM want"
    ) == (0, 0)  # fmt: skip
    assert con.sql(f"SELECT count(*) FROM {scan(dead)}").fetchone()[0] == 1


def test_accumulating_panes_and_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="iceberg or delta"):
        wab.WriteToTable(wa.Output(path=str(tmp_path / "x")))
    with pytest.raises(ValueError, match="accumulating"), beam.Pipeline(runner=FnApiRunner()) as p:
        _ = (
            p
            | beam.Create([pa.record_batch({"id": ["a"]})])
            | beam.WindowInto(
                window.GlobalWindows(),
                trigger=trigger.Repeatedly(trigger.AfterCount(1)),
                accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
            )
            | wab.WriteToTable(output("delta", tmp_path))
        )
