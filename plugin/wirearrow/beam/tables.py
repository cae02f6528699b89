"""WriteToTable: Arrow record batches (or dead letters) into an Iceberg or Delta table, one
atomic commit per window firing, batch or streaming.

    result = records | wab.ToArrow(plan, on_error="dead_letter")
    out = wa.Output(format="iceberg", table="events.bids", warehouse="gs://bucket/wh",
                    catalog={"type": "rest", "uri": "https://catalog"})
    result.batches | "Rows" >> wab.WriteToTable(out, schema=result.schema)
    result.dead_letters | "Dead" >> wab.WriteToTable(out, dead_letters=True)

A thin use of :mod:`wirearrow.tables`. Each bundle writes the data files of its batches,
one set per window (the sink's picklable FileWriter; the table created or evolved by the
worker that first needs it), and hands on only what it wrote (:class:`~wirearrow.tables.
Staged`); a GroupByKey gathers a window firing's staged files, and one commit makes them
visible with the firing's id (the writer's job, the window, the pane) in the commit. A
commit retried after it succeeded (the worker died before Beam recorded it) finds that id
among the table's recent commits and commits nothing: each firing is committed once. The
files of a failed bundle are never committed (readers never see them). docs/tables.md.
"""

# No `from __future__ import annotations`: Beam reads the DoFns' annotations at run time.

import uuid
from collections.abc import Iterator
from typing import Any, Optional

import apache_beam as beam
import pyarrow as pa
from apache_beam.metrics import Metrics
from apache_beam.transforms import trigger as beam_trigger
from apache_beam.transforms import window as beam_window
from apache_beam.utils.windowed_value import WindowedValue

from wirearrow.beam.parquet import DEAD_LETTER_FILE_SCHEMA, dead_letter_batch
from wirearrow.beam.transcode import METRICS_NAMESPACE
from wirearrow.output import Output
from wirearrow.tables import Commit, FileWriter, TableSink, open_sink

__all__ = ["WriteToTable"]

# A bundle's batches of one window are written as one data file; past this many bytes of
# Arrow data held, each window's batches so far are written (a batch runner's bundle can be
# a whole input).
FLUSH_BYTES = 128 << 20


class _SinkFn(beam.DoFn):
    """A DoFn holding one table's sink, opened in setup() on the worker."""

    def __init__(self, output: Output, table: str) -> None:
        super().__init__()
        self._output = output
        self._table = table

    def setup(self) -> None:
        self._sink: TableSink = open_sink(self._output, self._table)


class _StageFn(_SinkFn):
    """Batches -> data files, per window of the bundle: a Staged value in that window."""

    def __init__(self, output: Output, table: str, schema: Optional[pa.Schema]) -> None:  # noqa: UP045
        super().__init__(output, table)
        self._schema = schema

    def setup(self) -> None:
        super().setup()
        self._writers: dict[pa.Schema, FileWriter] = {}
        if self._schema is not None:  # the table exists before the first firing
            self._writer(self._schema)

    def start_bundle(self) -> None:
        self._held: dict[Any, list[pa.RecordBatch]] = {}
        self._bytes = 0

    def _writer(self, schema: pa.Schema) -> FileWriter:
        found = self._writers.get(schema)
        if found is None:
            found = self._writers[schema] = self._sink.prepare(schema)
        return found

    def _write(self, batches: list[pa.RecordBatch]) -> Iterator[Any]:
        by_schema: dict[pa.Schema, list[pa.RecordBatch]] = {}
        for b in batches:
            by_schema.setdefault(b.schema, []).append(b)
        for schema, group in by_schema.items():
            yield self._writer(schema).write(pa.Table.from_batches(group, schema))

    def process(self, batch: Any, window: Any = beam.DoFn.WindowParam) -> Iterator[Any]:
        batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        kept = [b for b in batches if b.num_rows]
        if kept:
            self._held.setdefault(window, []).extend(kept)
            self._bytes += sum(b.nbytes for b in kept)
        if self._bytes >= FLUSH_BYTES:
            yield from self._flush()

    def _flush(self) -> Iterator[Any]:
        held, self._held, self._bytes = self._held, {}, 0
        for window, batches in held.items():
            for staged in self._write(batches):
                yield WindowedValue((None, staged), window.max_timestamp(), (window,))

    def finish_bundle(self) -> Iterator[Any]:
        yield from self._flush()


class _CommitFn(_SinkFn):
    """One window firing's staged files -> one commit, unless one of the table's recent
    commits already has this firing's id (a retry)."""

    def __init__(self, output: Output, table: str, job: str) -> None:
        super().__init__(output, table)
        self._job = job
        self._rows = Metrics.counter(METRICS_NAMESPACE, "table_rows_committed")
        self._commits = Metrics.counter(METRICS_NAMESPACE, "table_commits")

    def process(
        self, element: Any, window: Any = beam.DoFn.WindowParam,
        pane: Any = beam.DoFn.PaneInfoParam,
    ) -> Iterator[Commit]:  # fmt: skip
        _, staged = element  # (None, the firing's Staged values): the GroupByKey's output
        firing = f"{self._job}:{_window_text(window)}:{pane.index}"
        # A firing records no positions (its id is what makes it once): read the app id's
        # anew, which another writer of the table (a Ray job of the same app id) may move.
        self._sink.committed()
        done = self._sink.commit(list(staged), commit_id=firing)
        if done.version is not None:
            self._rows.inc(done.rows)
            self._commits.inc()
        yield done


def _window_text(window: Any) -> str:
    if isinstance(window, beam_window.GlobalWindow):
        return "global"
    return f"{window.start.micros}-{window.end.micros}"


class WriteToTable(beam.PTransform):
    """Record batches into ``output``'s table (:class:`wirearrow.Output` of format
    ``iceberg`` or ``delta``, or its fields as keywords): one commit per window firing (a
    bounded pipeline in the global window: one commit at the end). ``schema``: the
    batches' (ToArrow's ``result.schema``), to create the table before the first batch;
    default: each batch's own.

    ``dead_letters=True``: the input is ToArrow's dead letters (:class:`~wirearrow.beam.
    DeadLetter`), written to the output's dead-letter table with the columns of
    :class:`~wirearrow.beam.WriteDeadLetters`' files.

    ``job``: what the commits' ids start with. Default: a new name each time the pipeline
    is built, so a pipeline run again writes its records again; a name of your own, the
    same for every run of the same job (``"bids-2026-12-06"``), makes a batch job run again
    commit nothing it committed before. Accumulating panes are refused (each firing would
    commit the files of the earlier ones again). Returns the PCollection of the
    :class:`~wirearrow.tables.Commit` values made, one per firing.
    """

    def __init__(
        self, output: Optional[Output] = None, *, schema: Optional[pa.Schema] = None,  # noqa: UP045
        dead_letters: bool = False, job: Optional[str] = None, **output_fields: Any,  # noqa: UP045
    ) -> None:  # fmt: skip
        super().__init__()
        self._output = Output.of(output, **output_fields)
        if not self._output.is_table:
            raise ValueError("WriteToTable writes an iceberg or delta table: give format= and table=")
        table = self._output.dead_letter_table if dead_letters else self._output.table
        if table is None:
            raise ValueError(f"an {self._output.format} output needs its table")
        self._table = table
        self._dead = dead_letters
        self._schema = DEAD_LETTER_FILE_SCHEMA if dead_letters else schema
        self._job = job if job is not None else uuid.uuid4().hex[:16]
        if ":" in self._job:
            raise ValueError(f"job is a name without ':', not {self._job!r}")

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        if pcoll.windowing.accumulation_mode == beam_trigger.AccumulationMode.ACCUMULATING:
            raise ValueError(
                "WriteToTable: accumulating panes would commit every earlier file of a window "
                "again with each firing; use accumulation_mode=DISCARDING"
            )
        batches = pcoll
        if self._dead:
            batches = pcoll | "ToBatches" >> beam.Map(dead_letter_batch).with_output_types(pa.RecordBatch)
        return (
            batches
            | "Stage" >> beam.ParDo(_StageFn(self._output, self._table, self._schema))
            | "Firing" >> beam.GroupByKey()
            | "Commit" >> beam.ParDo(_CommitFn(self._output, self._table, self._job))
        )
