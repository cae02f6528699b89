"""ReadFromDelimited: files of length-delimited records on any Beam filesystem."""

import logging
import warnings
from collections.abc import Iterator
from typing import Any, NamedTuple, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from wirearrow.beam.batches import RecordArray, concat_records
from wirearrow.beam.transcode import DEFAULT_BATCH_SIZE, METRICS_NAMESPACE
from wirearrow.sources.compression import compression_name, compression_of, open_decompressed
from wirearrow.sources.format import RecordFormat
from wirearrow.sources.framing import (
    FrameReader,
    Frames,
    Tail,
    check_framing,
    corrupt_reason,
    plan_pieces,
)

_LOG = logging.getLogger(__name__)
DEFAULT_CHUNK_BYTES = 64 * 1024 * 1024
# Reads go through the Beam filesystem in blocks of this size: big enough that object
# stores serve them at full speed, small enough to bound a reader's memory.
_READ_BLOCK_BYTES = 8 * 1024 * 1024


# =========================================================================== ReadFromDelimited


class _Chunk(NamedTuple):
    """A byte range of whole frames of one file; end < 0: to the end (compressed files)."""

    path: str
    start: int
    end: int
    compression: str


def _truncated(path: str, tail: Tail, policy: str) -> None:
    text = f"{path}: {tail.reason}"
    if policy == "raise":
        raise ValueError(text)
    Metrics.counter(METRICS_NAMESPACE, "truncated_files").inc()
    _LOG.warning("%s; skipped", text)


class _PlanChunksFn(beam.DoFn):
    """FileMetadata -> the _Chunks of the file (record-aligned byte ranges).

    A length-prefixed stream cannot be resynchronised from an arbitrary offset, so the
    split points are found by a pass over the frame lengths of files larger than one chunk;
    smaller files, and compressed ones (not seekable), are one chunk.
    """

    def __init__(self, framing: str, compression: str, chunk_bytes: int, truncated: str) -> None:
        super().__init__()
        self._framing = framing
        self._compression = compression
        self._chunk_bytes = chunk_bytes
        self._truncated = truncated

    def process(self, metadata: Any) -> Iterator[_Chunk]:
        path, size = metadata.path, metadata.size_in_bytes
        compression = compression_of(path, self._compression)
        if compression != "none":
            yield _Chunk(path, 0, -1, compression)
            return
        if size <= self._chunk_bytes:
            if size:
                yield _Chunk(path, 0, size, compression)
            return
        with FileSystems.open(
            path, "application/octet-stream", CompressionTypes.UNCOMPRESSED
        ) as stream:
            pieces, tail = plan_pieces(
                stream, self._framing, self._chunk_bytes, block_bytes=_READ_BLOCK_BYTES, name=path
            )
        if tail is not None:
            _truncated(path, tail, self._truncated)
        for piece in pieces:
            if piece.end > piece.start:
                yield _Chunk(path, piece.start, piece.end, compression)


class _ReadChunkFn(beam.DoFn):
    """_Chunk -> its records, in batches of ``batch_size`` (RecordArray).

    Yields batches (Beam's batched DoFns): a consumer that takes RecordArrays, as ToArrow
    does, receives them as they are (one C copy per record, from the file buffer into the
    array, and no Python object per record); any other consumer receives single ``bytes``.
    """

    def __init__(self, framing: str, batch_size: int, truncated: str) -> None:
        super().__init__()
        self._framing = framing
        self._batch_size = batch_size
        self._truncated = truncated
        self._records = Metrics.counter(METRICS_NAMESPACE, "records_read")
        self._bytes = Metrics.counter(METRICS_NAMESPACE, "bytes_read")

    def get_output_batch_type(self, input_element_type: Any) -> Any:
        return RecordArray

    def infer_output_type(self, input_type: Any) -> Any:
        return bytes

    @beam.DoFn.yields_batches
    def process(self, chunk: _Chunk) -> Iterator[RecordArray]:
        path, start, end, compression = chunk
        self._pending: list[pa.Array] = []  # records of the next batch, fewer than batch_size
        self._pending_count = 0
        with FileSystems.open(
            path, "application/octet-stream", CompressionTypes.UNCOMPRESSED
        ) as raw:
            # Our decompression, not Beam's: a cut or corrupt stream is then the reader's
            # tail (records before it kept, the break counted) instead of an exception.
            stream: Any = raw
            if compression != "none":
                stream = open_decompressed(raw, compression, name="the file")
            reader = FrameReader(
                stream,
                self._framing,
                block_bytes=_READ_BLOCK_BYTES,
                start=start,
                end=end if end >= 0 else None,
                name=path,
            )
            for frames in reader:
                # whole records, prefixes (and TFRecord's CRCs) included
                self._bytes.inc(int(frames.frame_ends[-1]))
                if len(frames.corrupt):
                    frames = self._without_corrupt(path, frames)
                yield from self._batches(frames)
        if self._pending_count:
            yield self._emit(self._pending)
        if reader.tail is not None:
            _truncated(path, reader.tail, self._truncated)

    def _without_corrupt(self, path: str, frames: Frames) -> Frames:
        """A TFRecord whose data CRC fails: raised, or (truncated="skip") logged, counted
        and left out, like a truncated tail."""
        at = frames.frame_starts[frames.corrupt]
        if self._truncated == "raise":
            raise ValueError(f"{path}: {corrupt_reason(self._framing, int(at[0]))}")
        Metrics.counter(METRICS_NAMESPACE, "corrupt_records").inc(len(frames.corrupt))
        for offset in at.tolist():
            _LOG.warning("%s: %s; skipped", path, corrupt_reason(self._framing, offset))
        keep = np.ones(len(frames), dtype=bool)
        keep[frames.corrupt] = False
        return Frames(frames.data, frames.offset, frames.starts[keep], frames.ends[keep])

    def _batches(self, frames: Frames) -> Iterator[RecordArray]:
        """Batches of exactly batch_size records; the rest waits in self._pending."""
        size, lo, n = self._batch_size, 0, len(frames)
        while lo < n:
            take = min(size - self._pending_count, n - lo)
            self._pending.append(frames.records(lo, lo + take))
            self._pending_count += take
            lo += take
            if self._pending_count == size:
                yield self._emit(self._pending)

    def _emit(self, pieces: list[pa.Array]) -> RecordArray:
        # A batch spans two blocks at most once per block: that one is concatenated (a
        # second copy); every other batch is one compact() of the block's records.
        array = concat_records(pieces)
        self._pending, self._pending_count = [], 0
        self._records.inc(len(array))
        return RecordArray(array)


class ReadFromDelimited(beam.PTransform):
    """Length-delimited records from files on any Beam filesystem: PCollection[bytes].

    Every record of every file matching ``file_pattern`` comes out exactly once. Files are
    split into record-aligned chunks of about ``chunk_bytes``, read in parallel: files
    larger than a chunk get one extra sequential pass over their length prefixes to find
    the cut points. Compressed files cannot be split: each is read whole by one worker, as
    a stream (bounded memory). A file that ends inside a record, a compressed stream that
    is cut short or corrupt, or a TFRecord whose data CRC fails raises ValueError naming
    the file and the offset; with ``truncated="skip"`` the whole records before it are
    read and the tail is logged and counted in the ``truncated_files`` metric (a bad
    TFRecord is left out, logged and counted in ``corrupt_records``).

    Args:
        file_pattern: a path or glob, e.g. "gs://bucket/events/*.bin".
        framing: "varint" (protobuf's writeDelimitedTo, the default), "u32le", "u32be" or
            "tfrecord" (TensorFlow's TFRecord, as Beam's ``WriteToTFRecord`` writes it;
            CRCs checked).
        compression: "auto" (by the extension: .gz, .bz2, .zst, .xz, .deflate; the
            default), "none", "gzip", "bz2", "zstd", "xz", "deflate", or a Beam
            CompressionTypes value. zstd needs ``zstandard``.
        chunk_bytes: target size of the byte ranges read in parallel.
        batch_size: records per batch handed to batch-aware consumers (ToArrow).
        truncated: "raise" or "skip".
        allow_empty: whether a pattern that matches no file is allowed.
        input: a ``wirearrow.RecordFormat`` (a plan's ``input:``) whose framing (its
            ``stream_framing``) and compression are the defaults of the two above.
    """

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
            | "PlanChunks"
            >> beam.ParDo(
                _PlanChunksFn(self._framing, self._compression, self._chunk_bytes, self._truncated)
            )
            # Spread the chunks over the workers: without this fusion break, one worker
            # would read (and transcode) everything the single match element leads to.
            | "Distribute" >> beam.Reshuffle()
        )
        return chunks | "ReadChunks" >> beam.ParDo(
            _ReadChunkFn(self._framing, self._batch_size, self._truncated)
        ).with_output_types(bytes)


class ReadDelimited(ReadFromDelimited):
    """Deprecated name of :class:`ReadFromDelimited` (Beam names its sources ReadFrom...)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        warnings.warn(
            "wirearrow.beam.ReadDelimited is now ReadFromDelimited", DeprecationWarning, stacklevel=2
        )
        super().__init__(*args, **kwargs)
