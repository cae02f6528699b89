"""WriteToParquetFiles: Arrow record batches -> Parquet files on any Beam filesystem, batch or
streaming."""

import logging
import random
import uuid
from collections.abc import Iterator
from typing import Any, Optional

import apache_beam as beam
import pyarrow as pa
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.options.value_provider import StaticValueProvider
from apache_beam.transforms import trigger as beam_trigger
from apache_beam.transforms import window as beam_window

from wirearrow.beam.late import _LateGuardFn, split_expired
from wirearrow.beam.transcode import METRICS_NAMESPACE, renamed
from wirearrow.dead_letters import DEAD_LETTER_SCHEMA

_LOG = logging.getLogger(__name__)


# =========================================================================== Parquet


class _ParquetFileSink(fileio.FileSink):
    """fileio FileSink writing record batches to one Parquet file.

    Batches are buffered up to ``row_group_size`` rows and written as one row group;
    flush() writes the rest and the footer, and adds the file's rows to the ``metric``
    counter (if any): the count is of rows in complete files, not of rows that reached
    the sink. fileio calls flush() once, just before it closes the file; a Parquet footer
    can be written only once, so a write after flush() is an error rather than a silently
    broken file.
    """

    def __init__(
        self,
        schema: pa.Schema | None,
        compression: str | None,
        row_group_size: int,
        metric: str | None = None,
    ) -> None:
        self._source_schema = schema
        self._compression = compression or "none"
        self._row_group_size = row_group_size
        self._metric = metric

    def create_metadata(self, destination: str, full_file_name: str) -> Any:
        # Parquet compresses inside the file: the file itself is never wrapped.
        return fileio.FileMetadata(
            mime_type="application/vnd.apache.parquet",
            compression_type=CompressionTypes.UNCOMPRESSED,
        )

    def open(self, fh: Any) -> None:
        self._fh = fh
        self._writer: Any = None
        self._schema: pa.Schema | None = None
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._rows = 0
        self._finished = False
        if self._source_schema is not None:
            self._start(self._source_schema)

    def _start(self, schema: pa.Schema) -> None:
        import pyarrow.parquet as pq

        from wirearrow.parquet import writable_schema

        target, _ = writable_schema(schema)
        if not len(target):
            raise ValueError("no column left to write: Parquet cannot store this schema")
        self._source_schema = schema
        self._schema = target
        self._writer = pq.ParquetWriter(self._fh, target, compression=self._compression)

    def write(self, record: Any) -> None:
        if self._finished:
            raise ValueError("a Parquet file cannot take more rows after flush() wrote its footer")
        batch = record[1] if isinstance(record, tuple) else record
        if isinstance(batch, pa.Table):
            for part in batch.to_batches():
                self.write(part)
            return
        if self._writer is None:
            self._start(batch.schema)
        self._pending.append(self._conform(batch))
        self._pending_rows += batch.num_rows
        self._rows += batch.num_rows
        if self._pending_rows >= self._row_group_size:
            self._write_pending()

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        assert self._schema is not None and self._source_schema is not None
        if batch.schema.equals(self._schema):
            return batch
        if not batch.schema.equals(self._source_schema):
            raise ValueError(
                f"batch schema differs from the file's:\n{batch.schema}\n"
                f"-- expected --\n{self._source_schema}"
            )
        # Same fields, made Parquet-writable (nullable, empty structs dropped).
        columns = []
        for f in self._schema:
            column = batch.column(f.name)
            columns.append(column if column.type.equals(f.type) else column.cast(f.type))
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)

    def _write_pending(self) -> None:
        if not self._pending:
            return
        table = pa.Table.from_batches(self._pending, schema=self._schema)
        self._writer.write_table(table, row_group_size=self._row_group_size)
        self._pending, self._pending_rows = [], 0

    def flush(self) -> None:
        if self._finished:
            return
        if self._writer is None:
            raise ValueError("no batch and no schema: cannot write a Parquet file")
        self._write_pending()
        self._writer.close()  # the footer; the file handle stays open for fileio to close
        self._finished = True
        if self._metric and self._rows:
            Metrics.counter(METRICS_NAMESPACE, self._metric).inc(self._rows)


class _SinkFactory:
    """fileio's sink argument: a fresh _ParquetFileSink per file (fileio instantiates a
    FileSink subclass without arguments, so the settings travel in this callable)."""

    def __init__(
        self,
        schema: pa.Schema | None,
        compression: str | None,
        row_group_size: int,
        metric: str | None = None,
    ):
        self.schema = schema
        self.compression = compression
        self.row_group_size = row_group_size
        self.metric = metric

    def __call__(self, destination: Any) -> _ParquetFileSink:
        return _ParquetFileSink(self.schema, self.compression, self.row_group_size, self.metric)


class _AssignShardFn(beam.DoFn):
    """batch -> (shard, batch), round robin from a random start (spreads the writers)."""

    def __init__(self, shards: int) -> None:
        super().__init__()
        self._shards = shards

    def setup(self) -> None:
        self._next = random.randrange(self._shards)

    def process(self, batch: pa.RecordBatch) -> Iterator[tuple[int, pa.RecordBatch]]:
        shard = self._next
        self._next = (shard + 1) % self._shards
        yield shard, batch


class _FiringFn(beam.DoFn):
    """(shard, [batches]) of one window firing -> (destination, batch) for each batch.

    The destination names the firing (pane index) and the shard, so every firing of a
    window, late ones included, gets its own files: fileio alone names files by window
    and shard only, and a late firing would overwrite the on-time file.
    """

    def __init__(self, shards: int) -> None:
        super().__init__()
        self._shards = shards

    def process(
        self, element: tuple[int, Any], pane: Any = beam.DoFn.PaneInfoParam
    ) -> Iterator[tuple[str, pa.RecordBatch]]:
        shard, batches = element
        destination = f"{pane.index}-{shard:05d}-of-{self._shards:05d}"
        for batch in batches:
            yield destination, batch


def _window_text(window: Any) -> str:
    if isinstance(window, beam_window.GlobalWindow):
        return ""
    start = window.start.to_utc_datetime().strftime("%Y%m%dT%H%M%S.%f")
    end = window.end.to_utc_datetime().strftime("%Y%m%dT%H%M%S.%f")
    return f"-{start}Z-{end}Z"


class _FileNaming:
    """fileio file naming: ``{prefix}[-{window start}-{window end}]-{firing}-{shard}.parquet``.

    Batch, one file per bundle: ``part-00000-of-00003.parquet``. Windowed or sharded:
    ``part-20240601T000000.000000Z-20240601T000100.000000Z-0-00001-of-00002.parquet``
    (firing 0 is the first pane of the window, later ones are late or repeated firings).
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __call__(
        self, window: Any, pane: Any, shard: int, total: int, compression: Any, destination: Any
    ) -> str:
        head = f"{self.prefix}{_window_text(window)}"
        if destination is None:
            return f"{head}-{shard:05d}-of-{total:05d}.parquet"
        # One file per destination is the rule; fileio numbers extras (spilled writers).
        extra = f"-{shard}" if total > 1 else ""
        return f"{head}-{destination}{extra}.parquet"


class _LateBatchFn(_LateGuardFn):
    """The sink's guard: a batch of a window already expired goes on whole (to the late
    files, whose writer counts its rows in the sink's late metric)."""


class _DeleteDirFn(beam.DoFn):
    def __init__(self, directory: str) -> None:
        super().__init__()
        self._directory = directory

    def process(self, _: Any) -> Iterator[Any]:
        try:
            FileSystems.delete([self._directory])
        except Exception as err:  # a leftover empty temp directory is harmless
            _LOG.info("could not delete %s: %s", self._directory, err)
        return iter(())


class WriteToParquetFiles(beam.PTransform):
    """Record batches to Parquet files under ``path`` (any Beam filesystem).

    Bounded input in the global window (batch jobs): one file per bundle, named
    ``part-00000-of-0000N.parquet``, no shuffle. Windowed or unbounded input (streaming),
    or ``shards=`` given: the batches of each window firing are grouped into ``shards``
    files (default 1), **one complete Parquet file per window, firing and shard**: late
    firings (allowed lateness) add files, never rewrite one. Files are written to a
    temporary directory and renamed into place when complete (fileio.WriteToFiles), so
    ``path`` never holds a file without its footer. Accumulating triggers are refused
    (each firing would repeat earlier rows). The rows of the complete files are counted
    in the ``rows_metric`` metric (``rows_out``): what the files hold, so rows dropped on
    the way (too late, see below) are not counted.

    **Too late** (``late_dir``, e.g. ``"_late"``; off by default): on windowed unbounded
    input, a batch whose window expired (its end plus the allowed lateness) before it
    arrived -- which the grouping would drop, uncounted -- is written whole under
    ``path/late_dir`` instead (a name starting with ``_`` keeps it out of readers of
    ``path``), one file per firing as it comes, its rows counted in the ``late_metric``
    metric. The check is one state read per batch, not per record (SplitLate's, and as
    exact: it knows the watermark whatever windows it has seen), but on the direct runner
    its steps cost as much: docs/beam.md. None: Beam's own behaviour (dropped, uncounted).

    Returns the PCollection of fileio.FileResult of the files written.

    Args:
        path: the output directory.
        schema: the batches' Arrow schema (``ToArrow(...).schema``); default: the first
            batch's. Fields Parquet cannot store (structs with no fields) are dropped.
        shards: files per window firing (grouping by shard costs a shuffle).
        file_prefix: file names start with this.
        compression: Parquet codec ("zstd", "snappy", "gzip", "none", ...).
        row_group_size: rows per row group (at most).
        max_writers_per_bundle: files one bundle may have open at once (fileio's limit).
        late_dir: where the batches of expired windows go (relative to ``path``), or None.
        late_metric: the counter of their rows (namespace ``wirearrow``).
        rows_metric: the counter of the rows in the complete files (None: no counter).
    """

    def __init__(
        self,
        path: str,
        schema: Optional[pa.Schema] = None,  # noqa: UP045
        shards: Optional[int] = None,  # noqa: UP045
        file_prefix: str = "part",
        compression: str = "zstd",
        row_group_size: int = 128_000,
        max_writers_per_bundle: int = 64,
        late_dir: Optional[str] = None,  # noqa: UP045
        late_metric: str = "rows_late",
        rows_metric: Optional[str] = "rows_out",  # noqa: UP045
    ) -> None:
        super().__init__()
        if shards is not None and shards < 1:
            raise ValueError(f"shards must be at least 1, not {shards}")
        self._path = path
        self._schema = schema
        self._shards = shards
        self._prefix = file_prefix
        self._compression = compression
        self._row_group_size = int(row_group_size)
        self._max_writers = int(max_writers_per_bundle)
        self._late_dir = late_dir
        self._late_metric = late_metric
        self._rows_metric = rows_metric

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        windowing = batches.windowing
        if windowing.accumulation_mode == beam_trigger.AccumulationMode.ACCUMULATING:
            raise ValueError(
                "WriteToParquetFiles: accumulating panes would write every earlier row of a window "
                "again with each firing; use accumulation_mode=DISCARDING"
            )
        per_bundle = (
            self._shards is None
            and batches.is_bounded
            and isinstance(windowing.windowfn, beam_window.GlobalWindows)
            and isinstance(windowing.triggerfn, beam_trigger.DefaultTrigger)
        )
        if per_bundle:
            destination = None
            elements = batches
        else:
            shards = self._shards or 1
            if (
                self._late_dir is not None
                and not batches.is_bounded
                and not isinstance(windowing.windowfn, beam_window.GlobalWindows)
            ):
                batches = self._keep_too_late(batches)
            elements = (
                batches
                | "AssignShard" >> beam.ParDo(_AssignShardFn(shards))
                | "GroupByWindowAndShard" >> beam.GroupByKey()
                | "NameFiring" >> beam.ParDo(_FiringFn(shards))
            )
            destination = _first
        # Our own temporary directory (fileio's default is the same place), so that a
        # bounded job can remove it once every file is in place.
        temp_dir = FileSystems.join(self._path, f".temp-wirearrow-{uuid.uuid4().hex}")
        results = elements | "WriteFiles" >> fileio.WriteToFiles(
            self._path,
            file_naming=_FileNaming(self._prefix),
            destination=destination,
            temp_directory=StaticValueProvider(str, temp_dir),
            sink=_SinkFactory(
                self._schema, self._compression, self._row_group_size, self._rows_metric
            ),
            max_writers_per_bundle=self._max_writers,
        )
        if batches.is_bounded:
            # Once every file is in place (a count over all of them is a barrier), remove
            # the temporary directory, which fileio leaves behind.
            _ = (
                results
                | "WindowAll" >> beam.WindowInto(beam_window.GlobalWindows())
                | "AllWritten" >> beam.combiners.Count.Globally()
                | "DeleteTemp" >> beam.ParDo(_DeleteDirFn(temp_dir))
            )
        return results


    def _keep_too_late(self, batches: beam.PCollection) -> beam.PCollection:
        """The batches whose window has not expired; the others are written to late_dir."""
        assert self._late_dir is not None
        guard = _LateBatchFn(batches.windowing, "late", None)
        on_time, late = split_expired(batches, guard, pa.RecordBatch)
        _ = late | "WriteTooLate" >> WriteToParquetFiles(
            FileSystems.join(self._path, self._late_dir),
            schema=self._schema,
            shards=1,
            file_prefix=self._prefix,
            compression=self._compression,
            row_group_size=self._row_group_size,
            max_writers_per_bundle=self._max_writers,
            late_dir=None,
            rows_metric=self._late_metric,
        )
        return on_time


def _first(element: tuple[str, Any]) -> str:
    return element[0]


# =========================================================================== dead letters

# The columns of a Beam dead-letter file: the core's DEAD_LETTER_SCHEMA (what Ray and the
# command line write) plus the element's key and Kafka position, as in DeadLetter.
DEAD_LETTER_FILE_SCHEMA = pa.schema(
    [
        *DEAD_LETTER_SCHEMA,
        pa.field("key", pa.utf8()),
        pa.field("topic", pa.utf8()),
        pa.field("partition", pa.int32()),
        pa.field("kafka_offset", pa.int64()),
        pa.field("timestamp", pa.int64()),
    ]
)


def _dead_letter_batch(letter: Any) -> pa.RecordBatch:
    # Dead letters are rare: one small batch each; the window firing gathers them into
    # one file.
    return pa.RecordBatch.from_pylist([letter._asdict()], schema=DEAD_LETTER_FILE_SCHEMA)


class WriteDeadLetters(beam.PTransform):
    """:class:`~wirearrow.beam.DeadLetter` rows to Parquet files under ``path``, with the
    columns of batch dead letters (``index, offset, path, reason, raw``, plus ``key`` and
    the Kafka position ``topic, partition, kafka_offset, timestamp``, null when unknown).

    Written like :class:`WriteToParquetFiles` (same naming, same atomic rename, its
    arguments taken; their rows counted in ``dead_letters_out``): batch jobs one file per
    bundle, streaming one file per window firing, e.g.
    ``dead-20240601T000000.000000Z-20240601T000100.000000Z-0-00000-of-00001.parquet``.
    """

    def __init__(self, path: str, file_prefix: str = "dead", **parquet_args: Any) -> None:
        super().__init__()
        self._path = path
        self._prefix = file_prefix
        self._args = parquet_args

    def expand(self, letters: beam.PCollection) -> beam.PCollection:
        return (
            letters
            | "ToBatches" >> beam.Map(_dead_letter_batch).with_output_types(pa.RecordBatch)
            | "Write"
            >> WriteToParquetFiles(
                self._path,
                schema=DEAD_LETTER_FILE_SCHEMA,
                file_prefix=self._prefix,
                **{
                    "late_metric": "dead_letters_late",
                    "rows_metric": "dead_letters_out",
                    **self._args,
                },
            )
        )


# =========================================================================== old names


# Beam's own transform (beam.io.WriteToParquet, and Beam YAML's) has this name.
WriteToParquet = renamed(
    WriteToParquetFiles, "WriteToParquet", " (Beam's own transform is called WriteToParquet)"
)
