"""ReadFromDelimited: files of length-delimited records on any Beam filesystem."""

import logging
from collections.abc import Iterator
from typing import Any, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from wirearrow.beam.batches import RecordArray, concat_records
from wirearrow.beam.transcode import DEFAULT_BATCH_SIZE, METRICS_NAMESPACE, renamed
from wirearrow.sources.compression import compression_name
from wirearrow.sources.files import FilePiece, file_pieces, piece_reader
from wirearrow.sources.format import RecordFormat
from wirearrow.sources.framing import Frames, check_framing, corrupt_reason

_LOG = logging.getLogger(__name__)
DEFAULT_CHUNK_BYTES = 64 * 1024 * 1024
# Reads go through the Beam filesystem in blocks of this size: big enough that object
# stores serve them at full speed, small enough to bound a reader's memory.
_READ_BLOCK_BYTES = 8 * 1024 * 1024


def _open(path: str) -> Any:
    # Raw bytes: decompression is ours, not Beam's, so that a cut or corrupt stream is the
    # reader's tail (the records before it kept, the break counted), not an exception.
    return FileSystems.open(path, "application/octet-stream", CompressionTypes.UNCOMPRESSED)


class _ReadFn(beam.DoFn):
    """The settings of a ReadFromDelimited, and what its steps do with a broken file."""

    def __init__(self, read: "ReadFromDelimited") -> None:
        super().__init__()
        self._framing, self._truncated = read._framing, read._truncated
        self._compression, self._chunk_bytes = read._compression, read._chunk_bytes
        self._batch_size = read._batch_size

    def _broken(self, path: str, reason: str, metric: str, count: int = 1) -> None:
        """A truncated file or a corrupt TFRecord: raised, or with truncated="skip" logged
        and counted in ``metric``."""
        if self._truncated == "raise":
            raise ValueError(f"{path}: {reason}")
        Metrics.counter(METRICS_NAMESPACE, metric).inc(count)
        _LOG.warning("%s: %s; skipped", path, reason)


class _PlanChunksFn(_ReadFn):
    """FileMetadata -> the file's record-aligned pieces (``file_pieces``: a file larger
    than a chunk is cut by a pass over its frame lengths; a smaller or compressed one is
    one piece)."""

    def process(self, metadata: Any) -> Iterator[FilePiece]:
        path = metadata.path
        pieces, tail = file_pieces(
            path,
            metadata.size_in_bytes,
            self._framing,
            self._compression,
            self._chunk_bytes,
            lambda: _open(path),
            block_bytes=_READ_BLOCK_BYTES,
        )
        if tail is not None:
            self._broken(path, tail.reason, "truncated_files")
        yield from pieces


class _ReadChunkFn(_ReadFn):
    """FilePiece -> its records in RecordArrays of ``batch_size`` (Beam's batched DoFns): a
    consumer that takes them, as ToArrow does, gets them whole (one C copy per record, no
    Python object per record); any other gets single ``bytes``."""

    def setup(self) -> None:
        self._records = Metrics.counter(METRICS_NAMESPACE, "records_read")
        self._bytes = Metrics.counter(METRICS_NAMESPACE, "bytes_read")

    def get_output_batch_type(self, input_element_type: Any) -> Any:
        return RecordArray

    def infer_output_type(self, input_type: Any) -> Any:
        return bytes

    @beam.DoFn.yields_batches
    def process(self, piece: FilePiece) -> Iterator[RecordArray]:
        path = piece.path
        pending: list[pa.Array] = []  # records of the next batch, fewer than batch_size
        count, size = 0, self._batch_size
        with _open(path) as raw:
            reader = piece_reader(raw, piece, self._framing, block_bytes=_READ_BLOCK_BYTES)
            for frames in reader:
                # whole records, prefixes (and TFRecord's CRCs) included
                self._bytes.inc(int(frames.frame_ends[-1]))
                if len(frames.corrupt):
                    frames = self._without_corrupt(path, frames)
                lo = 0
                while lo < len(frames):  # batches of exactly batch_size records
                    take = min(size - count, len(frames) - lo)
                    pending.append(frames.records(lo, lo + take))
                    count, lo = count + take, lo + take
                    if count == size:
                        yield self._batch(pending)
                        pending, count = [], 0
        if count:
            yield self._batch(pending)
        if reader.tail is not None:
            self._broken(path, reader.tail.reason, "truncated_files")

    def _without_corrupt(self, path: str, frames: Frames) -> Frames:
        """Frames without the TFRecords whose data CRC fails (each one _broken)."""
        at = frames.frame_starts[frames.corrupt].tolist()
        self._broken(path, corrupt_reason(self._framing, at[0]), "corrupt_records", len(at))
        for offset in at[1:]:
            _LOG.warning("%s: %s; skipped", path, corrupt_reason(self._framing, offset))
        keep = np.ones(len(frames), dtype=bool)
        keep[frames.corrupt] = False
        return Frames(frames.data, frames.offset, frames.starts[keep], frames.ends[keep])

    def _batch(self, pieces: list[pa.Array]) -> RecordArray:
        # A batch spans two blocks at most once per block: that one is concatenated (a
        # second copy); every other batch is one compact() of the block's records.
        array = concat_records(pieces)
        self._records.inc(len(array))
        return RecordArray(array)


class ReadFromDelimited(beam.PTransform):
    """Length-delimited records from files on any Beam filesystem: PCollection[bytes], every
    record of every file matching ``file_pattern`` exactly once, in record-aligned chunks
    of about ``chunk_bytes`` read in parallel (a compressed file is one chunk, streamed),
    handed to ToArrow as RecordArrays of ``batch_size``. ``framing`` and ``compression``
    (defaults: ``input``'s, a ``wirearrow.RecordFormat`` such as a plan's ``input:``) as
    RecordFormat names them. A file that ends inside a record, a broken compressed stream
    or a TFRecord whose CRC fails raises ValueError naming the file and offset; with
    ``truncated="skip"`` the records before it are read and the break is logged and
    counted (``truncated_files``, ``corrupt_records``). ``allow_empty``: a pattern may
    match no file. docs/beam.md, "ReadFromDelimited"."""

    def __init__(
        self,
        file_pattern: str,
        framing: Optional[str] = None,  # noqa: UP045 (Beam YAML reads these annotations)
        compression: Optional[str] = None,  # noqa: UP045
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        batch_size: int = DEFAULT_BATCH_SIZE,
        truncated: str = "raise",
        allow_empty: bool = False,
        input: Any = None,
    ) -> None:
        super().__init__()
        fmt = RecordFormat.of(input)
        self._framing = check_framing(framing or fmt.stream_framing)
        self._compression = compression_name(compression or fmt.compression)
        if truncated not in ("raise", "skip"):
            raise ValueError(f"truncated must be 'raise' or 'skip', not {truncated!r}")
        if chunk_bytes < 1 or batch_size < 1:
            raise ValueError("chunk_bytes and batch_size must be positive")
        self._pattern = file_pattern
        self._chunk_bytes = int(chunk_bytes)
        self._batch_size = int(batch_size)
        self._truncated = truncated
        self._allow_empty = allow_empty

    def expand(self, pbegin: beam.pvalue.PBegin) -> beam.PCollection:
        empty = (
            fileio.EmptyMatchTreatment.ALLOW
            if self._allow_empty
            else fileio.EmptyMatchTreatment.DISALLOW
        )
        chunks = (
            pbegin
            | "Match" >> fileio.MatchFiles(self._pattern, empty_match_treatment=empty)
            | "PlanChunks" >> beam.ParDo(_PlanChunksFn(self))
            # Spread the chunks over the workers: without this fusion break, one worker
            # would read (and transcode) everything the single match element leads to.
            | "Distribute" >> beam.Reshuffle()
        )
        return chunks | "ReadChunks" >> beam.ParDo(_ReadChunkFn(self)).with_output_types(bytes)


ReadDelimited = renamed(ReadFromDelimited, "ReadDelimited", " (Beam names its sources ReadFrom...)")
