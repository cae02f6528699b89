"""WriteToParquetFiles: Arrow record batches -> Parquet files on any Beam filesystem, batch or
streaming (docs/beam.md)."""

import copy
import logging
import operator
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

from wirearrow.beam.late import LateGuardFn, split_expired
from wirearrow.beam.transcode import METRICS_NAMESPACE, renamed
from wirearrow.dead_letters import DEAD_LETTER_SCHEMA
from wirearrow.parquet import ParquetSink

_LOG = logging.getLogger(__name__)


class ParquetFileSink(fileio.FileSink):
    """fileio's sink: each file a ``wirearrow.parquet.ParquetSink`` on fileio's handle,
    whose rows are counted in the ``metric`` counter once its footer is written (rows in
    complete files, not rows that reached the sink). fileio makes each file's sink with
    :meth:`per_file` (given an instance, it would make one without arguments)."""

    def __init__(
        self,
        schema: pa.Schema | None,
        compression: str | None,
        row_group_size: int,
        metric: str | None = None,
    ) -> None:
        self._schema, self._compression, self._rows = schema, compression, row_group_size
        self._metric = metric

    def per_file(self, destination: Any) -> "ParquetFileSink":
        return copy.copy(self)

    def create_metadata(self, destination: str, full_file_name: str) -> Any:
        # Parquet compresses inside the file: the file itself is never wrapped.
        return fileio.FileMetadata(
            mime_type="application/vnd.apache.parquet",
            compression_type=CompressionTypes.UNCOMPRESSED,
        )

    def open(self, fh: Any) -> None:
        self._sink = ParquetSink(fh, self._schema, row_group_size=self._rows, compression=self._compression)
        self._written: int | None = None

    def write(self, record: Any) -> None:
        self._sink.write(record[1] if isinstance(record, tuple) else record)

    def flush(self) -> None:
        # fileio calls flush() just before it closes the file: the footer goes here, once.
        if self._written is None:
            self._written = self._sink.close().rows
            if self._metric and self._written:
                Metrics.counter(METRICS_NAMESPACE, self._metric).inc(self._written)


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


def _name_firing(
    element: tuple[int, Any], shards: int, pane: Any = beam.DoFn.PaneInfoParam
) -> Iterator[tuple[str, pa.RecordBatch]]:
    """(shard, [batches]) of one window firing -> (destination, batch) for each batch. The
    destination names the firing (pane index) and the shard, so every firing of a window,
    late ones included, gets its own files: fileio alone names files by window and shard
    only, and a late firing would overwrite the on-time file."""
    shard, batches = element
    destination = f"{pane.index}-{shard:05d}-of-{shards:05d}"
    for batch in batches:
        yield destination, batch


def _window_text(window: Any) -> str:
    if isinstance(window, beam_window.GlobalWindow):
        return ""
    start = window.start.to_utc_datetime().strftime("%Y%m%dT%H%M%S.%f")
    end = window.end.to_utc_datetime().strftime("%Y%m%dT%H%M%S.%f")
    return f"-{start}Z-{end}Z"


class _FileNaming:
    """fileio file naming: ``{prefix}[-{window start}-{window end}]-{firing}-{shard}.parquet``
    (batch: ``part-00000-of-00003.parquet``, one file per bundle)."""

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


def _delete(_: Any, directory: str) -> list:
    try:
        FileSystems.delete([directory])
    except Exception as err:  # a leftover empty temp directory is harmless
        _LOG.info("could not delete %s: %s", directory, err)
    return []


class WriteToParquetFiles(beam.PTransform):
    """Record batches to Parquet files under ``path`` (any Beam filesystem), each written to
    a temporary directory and renamed into place when complete. Bounded input in the global
    window: one file per bundle (``part-00000-of-0000N.parquet``); windowed or unbounded
    input, or ``shards`` given: one file per window, firing and shard (late firings add
    files); accumulating panes are refused. ``schema``: ``ToArrow(...).schema`` (default:
    the first batch's). The rows of complete files are counted in ``rows_metric``.
    ``late_dir`` (e.g. ``"_late"``; unbounded windowed input): a batch whose window expired,
    which the grouping would drop uncounted, is written whole under ``path/late_dir``, its
    rows counted in ``late_metric``. Returns fileio's FileResults. docs/beam.md has the
    file names and what the late guard costs.
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
        self._path, self._shards, self._rows_metric = path, shards, rows_metric
        self._late_dir, self._late_metric = late_dir, late_metric
        # How the files are written, those of late_dir too.
        self._files: dict[str, Any] = {
            "schema": schema,
            "file_prefix": file_prefix,
            "compression": compression,
            "row_group_size": int(row_group_size),
            "max_writers_per_bundle": int(max_writers_per_bundle),
        }

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        windowing, files = batches.windowing, self._files
        if windowing.accumulation_mode == beam_trigger.AccumulationMode.ACCUMULATING:
            raise ValueError(
                "WriteToParquetFiles: accumulating panes would write every earlier row of a window "
                "again with each firing; use accumulation_mode=DISCARDING"
            )
        global_window = isinstance(windowing.windowfn, beam_window.GlobalWindows)
        destination, elements = None, batches
        if not (
            self._shards is None
            and batches.is_bounded
            and global_window
            and isinstance(windowing.triggerfn, beam_trigger.DefaultTrigger)
        ):
            shards = self._shards or 1
            if self._late_dir is not None and not batches.is_bounded and not global_window:
                guard = LateGuardFn(windowing)  # late batches go on whole
                batches, late = split_expired(batches, guard, pa.RecordBatch)
                _ = late | "WriteTooLate" >> WriteToParquetFiles(
                    FileSystems.join(self._path, self._late_dir),
                    shards=1,
                    rows_metric=self._late_metric,
                    **files,
                )
            elements = (
                batches
                | "AssignShard" >> beam.ParDo(_AssignShardFn(shards))
                | "GroupByWindowAndShard" >> beam.GroupByKey()
                | "NameFiring" >> beam.FlatMap(_name_firing, shards)
            )
            destination = operator.itemgetter(0)  # (destination, batch)
        # Our own temporary directory (fileio's default is the same place), so that a
        # bounded job can remove it once every file is in place.
        temp_dir = FileSystems.join(self._path, f".temp-wirearrow-{uuid.uuid4().hex}")
        results = elements | "WriteFiles" >> fileio.WriteToFiles(
            self._path,
            file_naming=_FileNaming(files["file_prefix"]),
            destination=destination,
            temp_directory=StaticValueProvider(str, temp_dir),
            sink=ParquetFileSink(
                files["schema"], files["compression"], files["row_group_size"], self._rows_metric
            ).per_file,
            max_writers_per_bundle=files["max_writers_per_bundle"],
        )
        if batches.is_bounded:
            # Once every file is in place (a count over all of them is a barrier), remove
            # the temporary directory, which fileio leaves behind.
            _ = (
                results
                | "WindowAll" >> beam.WindowInto(beam_window.GlobalWindows())
                | "AllWritten" >> beam.combiners.Count.Globally()
                | "DeleteTemp" >> beam.FlatMap(_delete, temp_dir)
            )
        return results


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


def dead_letter_batch(letter: Any) -> pa.RecordBatch:
    # Dead letters are rare: one small batch each; the window firing gathers them into
    # one file.
    return pa.RecordBatch.from_pylist([letter._asdict()], schema=DEAD_LETTER_FILE_SCHEMA)


class WriteDeadLetters(beam.PTransform):
    """:class:`~wirearrow.beam.DeadLetter` rows to Parquet files under ``path`` with the
    columns of batch dead letters (``DEAD_LETTER_SCHEMA``) plus ``key`` and the Kafka
    position, written by :class:`WriteToParquetFiles` (its arguments taken; rows counted
    in ``dead_letters_out``, late ones in ``dead_letters_late``), named ``dead-...``."""

    def __init__(self, path: str, file_prefix: str = "dead", **parquet_args: Any) -> None:
        super().__init__()
        self._path = path
        self._args = {
            "late_metric": "dead_letters_late",
            "rows_metric": "dead_letters_out",
            **parquet_args,
            "schema": DEAD_LETTER_FILE_SCHEMA,
            "file_prefix": file_prefix,
        }

    def expand(self, letters: beam.PCollection) -> beam.PCollection:
        batches = letters | "ToBatches" >> beam.Map(dead_letter_batch).with_output_types(
            pa.RecordBatch
        )
        return batches | "Write" >> WriteToParquetFiles(self._path, **self._args)


# Beam's own transform (beam.io.WriteToParquet, and Beam YAML's) has this name.
WriteToParquet = renamed(
    WriteToParquetFiles, "WriteToParquet", " (Beam's own transform is called WriteToParquet)"
)
