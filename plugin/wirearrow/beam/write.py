"""WriteToDelimited: protobuf records -> framed files (varint, u32le/be, TFRecord) on any
Beam filesystem, sharded and named like Beam's own file sinks."""

from typing import Any, Optional

import apache_beam as beam
import pyarrow as pa
from apache_beam import coders
from apache_beam.io import filebasedsink, iobase
from apache_beam.io.filesystem import CompressionTypes

from wirearrow.beam.batches import RecordArray
from wirearrow.sources.framing import check_framing, frame_records

# Records are framed in C a block at a time: a block this big is written at once.
_BLOCK_BYTES = 4 * 1024 * 1024


class _FramedFile:
    """One output file: records are gathered and framed a block at a time (frame_records:
    no Python loop per record); close() writes the rest and closes the file."""

    def __init__(self, handle: Any, framing: str) -> None:
        self._handle = handle
        self._framing = framing
        self._pending: list[bytes] = []
        self._bytes = 0

    def add(self, record: Any) -> None:
        if isinstance(record, RecordArray):
            self._flush()
            self._write(record.array)
            return
        if not isinstance(record, bytes):
            if not isinstance(record, bytearray | memoryview):
                raise TypeError(
                    f"WriteToDelimited writes bytes records, not {type(record).__name__}"
                )
            record = bytes(record)
        self._pending.append(record)
        self._bytes += len(record)
        if self._bytes >= _BLOCK_BYTES:
            self._flush()

    def _flush(self) -> None:
        if self._pending:
            records, self._pending, self._bytes = self._pending, [], 0
            self._write(pa.array(records, pa.binary()))

    def _write(self, records: pa.Array) -> None:
        self._handle.write(frame_records(records, self._framing))

    def close(self) -> None:
        self._flush()
        self._handle.close()


class _DelimitedSink(filebasedsink.FileBasedSink):
    def __init__(self, file_path_prefix: str, framing: str, **options: Any) -> None:
        super().__init__(file_path_prefix, coder=coders.BytesCoder(), **options)
        self._framing = framing

    def open(self, temp_path: str) -> _FramedFile:
        return _FramedFile(super().open(temp_path), self._framing)

    def write_record(self, file_handle: _FramedFile, value: Any) -> None:
        file_handle.add(value)

    def close(self, file_handle: _FramedFile) -> None:
        file_handle.close()


class WriteToDelimited(beam.PTransform):
    """Protobuf records (bytes, e.g. FromArrow's ``.records``) -> files of records framed
    by ``framing`` ("varint", "u32le", "u32be", "tfrecord"), read by ReadFromDelimited
    (and ``tfrecord`` by Beam's ``ReadFromTFRecord``), framed in C a block at a time.
    Written like Beam's file sinks, with ``WriteToTFRecord``'s arguments and naming
    (``out/part-00000-of-00004.tfrecord``, renamed into place when complete). Returns
    the PCollection of the file names. docs/beam.md, "The write half"."""

    def __init__(
        self,
        file_path_prefix: str,
        framing: str = "varint",
        file_name_suffix: str = "",
        num_shards: int = 0,
        shard_name_template: Optional[str] = None,  # noqa: UP045 (Beam YAML reads these)
        compression_type: str = CompressionTypes.AUTO,
        triggering_frequency: Optional[int] = None,  # noqa: UP045
    ) -> None:
        super().__init__()
        check_framing(framing)
        self._sink = _DelimitedSink(
            file_path_prefix,
            framing,
            file_name_suffix=file_name_suffix,
            num_shards=num_shards,
            shard_name_template=shard_name_template,
            compression_type=compression_type,
            triggering_frequency=triggering_frequency,
        )

    def expand(self, records: beam.PCollection) -> beam.PCollection:
        sink = self._sink
        if not records.is_bounded and sink.shard_name_template == (
            filebasedsink.DEFAULT_SHARD_NAME_TEMPLATE
        ):
            # Beam's own sinks do the same: one set of files per window.
            sink.shard_name_template = filebasedsink.DEFAULT_WINDOW_SHARD_NAME_TEMPLATE
            sink.shard_name_format = sink._template_to_format(sink.shard_name_template)
            sink.shard_name_glob_format = sink._template_to_glob_format(
                sink.shard_name_template
            )
        return records | iobase.Write(sink)
