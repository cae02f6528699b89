"""Streams of length-delimited protobuf records: framed buffers, files and byte streams.

Everything that reads framed records goes through here -- ``Transcoder.transcode(buf,
framing=...)``, :func:`read_delimited`, the command line, the Ray datasource and Beam's
``ReadFromDelimited``:

* :func:`split_framed` -- the whole records of one buffer, as (starts, ends), no copy;
* :class:`FrameReader` -- the whole records of a stream (a file, a pyarrow stream, a
  Beam filesystem stream), one block at a time, the cut record of each block carried into
  the next, optionally only a byte range ``[start, end)``; a stream that does not end on a
  record boundary leaves a :class:`Tail` (a truncated last record, or a length prefix
  that cannot be a length), which the caller raises, skips or dead-letters;
* :func:`plan_pieces` -- record-aligned byte ranges of about a given size, for parallel
  readers: a length-delimited stream has no sync marker, so a reader starting mid-file
  could not find the next record by itself.

Only this module (and the transcoder) call the framing core.
"""

from __future__ import annotations

import functools
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from wirearrow._core.framing import FRAMINGS as _CODES
from wirearrow._core.framing import TRAILERS, compact, frame, prefix, split
from wirearrow.schema import Schema
from wirearrow.sources.compression import compression_name, compression_of, decompress
from wirearrow.sources.confluent import confluent_prefix
from wirearrow.sources.confluent import message_index as message_index_of
from wirearrow.sources.sniff import (
    LOOK_BYTES,
    LOOK_RECORDS,
    SNIFF_BYTES,
    SNIFF_RECORDS,
    hint,
    mostly_malformed,
    suspect,
    well_formed,
)

__all__ = [
    "FRAMINGS",
    "TRAILERS",
    "FrameReader",
    "Frames",
    "Piece",
    "Tail",
    "check_framing",
    "corrupt_reason",
    "frame_records",
    "looks_like",
    "misframed",
    "plan_pieces",
    "read_delimited",
    "record_framer",
    "records_array",
    "split_framed",
    "split_framed_prefix",
]

# The stream framings, in the core's order of codes (varint, u32le, u32be, tfrecord).
FRAMINGS: tuple[str, ...] = tuple(_CODES)
BLOCK_BYTES = 8 * 1024 * 1024
# A dead letter of a tail keeps at most this much of it (the rest is counted in its size).
MAX_TAIL_RAW = 16 * 1024 * 1024
_BYTE_AT = re.compile(r"^byte (\d+): (.*)$", re.S)
# How much of a stream's start is kept to say what the data looks like when it fails.
SAMPLE_BYTES = 1024 * 1024


def looks_like(sample: bytes, framing: str, whole: bool) -> str:
    """Words for what the start of a stream that failed as ``framing`` looks like ("" when
    nothing better is known): compressed, protojson text, or another framing (Confluent
    records included) that reads it well (sources.sniff). ``whole``: the sample is the
    whole stream."""
    words = hint(sample, framing=framing, whole=whole)
    return f"; {words}" if words else ""


def check_framing(framing: object) -> str:
    """``framing`` if it is a stream framing, else a ValueError naming them."""
    if framing not in _CODES:
        raise ValueError(f"framing must be one of {', '.join(FRAMINGS)}, not {framing!r}")
    return framing


def _framing_code(framing: str) -> int:
    return _CODES[check_framing(framing)]


_NONE_CORRUPT = np.zeros(0, dtype=np.int64)


def _split(view: memoryview, framing: str) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """(starts, ends, consumed, positions of the records whose checksum fails)."""
    starts, ends, consumed, flags = split(view, _framing_code(framing))
    as_int64 = np.frombuffer
    corrupt = _NONE_CORRUPT
    if flags is not None and len(flags):
        corrupt = np.flatnonzero(np.frombuffer(memoryview(flags), np.uint8))
    return as_int64(memoryview(starts), np.int64), as_int64(memoryview(ends), np.int64), consumed, corrupt


def split_framed(buffer: object, framing: str) -> tuple[np.ndarray, np.ndarray, int]:
    """(starts, ends, consumed) of the whole records in a framed buffer, without copying.

    `consumed` < len(buffer) means the buffer ends inside a record (a truncated stream).
    A length prefix that cannot be a length raises ValueError("byte N: why"), and so does
    a TFRecord whose data CRC does not match (readers that keep the other records use
    :func:`split_framed_prefix`).
    """
    view = memoryview(buffer).cast("B")  # type: ignore[arg-type]
    starts, ends, consumed, corrupt = _split(view, framing)
    if len(corrupt):
        first = int(corrupt[0])
        frame_at = int(ends[first - 1]) + TRAILERS[framing] if first else 0
        raise ValueError(f"byte {frame_at}: {_corrupt_reason(framing)} (record {first})")
    return starts, ends, consumed


def _corrupt_reason(framing: str) -> str:
    return f"{framing} record whose data CRC32C does not match"


def split_framed_prefix(
    buffer: object, framing: str
) -> tuple[np.ndarray, np.ndarray, int, tuple[int, str] | None, np.ndarray]:
    """split_framed that keeps the whole records before a bad length prefix.

    Returns (starts, ends, consumed, problem, corrupt): ``problem`` is None when the
    records end at ``consumed`` for want of bytes (a truncated tail, or none), else (the
    byte offset of the prefix that cannot be a length, why): nothing from ``consumed`` on
    can be framed. ``corrupt``: positions (into starts) of the records framed soundly whose
    data checksum fails (TFRecord), each a bad record of its own.
    """
    view = memoryview(buffer).cast("B")  # type: ignore[arg-type]
    try:
        return _with_problem(_split(view, framing), None)
    except ValueError as err:
        match = _BYTE_AT.match(str(err))
        if not match:
            raise
        bad = int(match.group(1))
    return _with_problem(_split(view[:bad], framing), (bad, match.group(2)))


def _with_problem(
    parts: tuple[np.ndarray, np.ndarray, int, np.ndarray], problem: tuple[int, str] | None
) -> tuple[np.ndarray, np.ndarray, int, tuple[int, str] | None, np.ndarray]:
    starts, ends, consumed, corrupt = parts
    return starts, ends, consumed, problem, corrupt


def corrupt_reason(framing: str, frame_at: int) -> str:
    """Why a record framed soundly but failing its checksum is bad, naming its frame's
    byte offset."""
    return f"{_corrupt_reason(framing)} at byte {frame_at}"


def frame_records(
    records: pa.Array | pa.ChunkedArray,
    framing: str,
    *,
    schema_id: int | None = None,
    message_index: Sequence[int] = (0,),
) -> pa.Buffer | pa.Array:
    """Frame records (a BinaryArray, e.g. what ``Transcoder.encode`` returns) in C, without
    a Python object per record: the inverse of :func:`split_framed` / :func:`read_delimited`.

    ``framing``: "varint" (protobuf's writeDelimitedTo), "u32le", "u32be" or "tfrecord"
    (TensorFlow's TFRecord, with its masked CRC32Cs) returns one ``pa.Buffer`` holding the
    framed stream (write it to a file as it is). "confluent" returns a BinaryArray of the
    same records, each with the Confluent prefix of ``schema_id`` and ``message_index``
    (the message's path in the schema's file; :func:`wirearrow.sources.confluent.message_index`),
    as Kafka values. A null record is not a record: ValueError naming it.
    """
    if isinstance(records, pa.ChunkedArray):
        records = records.combine_chunks() if records.num_chunks != 1 else records.chunk(0)
    if not isinstance(records, pa.Array):
        records = pa.array(records, pa.binary())
    t = records.type
    if pa.types.is_binary(t) or pa.types.is_string(t):
        width: type[np.signedinteger[Any]] = np.int32
    elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        width = np.int64
    elif pa.types.is_binary_view(t) or pa.types.is_string_view(t):
        records, width = records.cast(pa.large_binary()), np.int64
    else:
        raise TypeError(f"records must be binary, not {t}")
    if records.null_count:
        row = int(np.flatnonzero(~np.asarray(records.is_valid().to_numpy(zero_copy_only=False)))[0])
        raise ValueError(f"record {row} is null: a null is not a record and cannot be framed")
    n = len(records)
    _, offsets_buf, data_buf = records.buffers()
    if offsets_buf is None:  # an empty array built without buffers
        offsets = np.zeros(n + 1, dtype=np.int64)
    else:
        offsets = np.frombuffer(offsets_buf, dtype=width)[records.offset : records.offset + n + 1]
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
    data = memoryview(data_buf if data_buf is not None else b"").cast("B")
    if framing == "confluent":
        if schema_id is None:
            raise ValueError("framing='confluent' needs schema_id= (the registry's id)")
        head = confluent_prefix(schema_id, message_index)
        out_offsets, values, large = prefix(data, offsets, head)
        kind = pa.large_binary() if large else pa.binary()
        return pa.Array.from_buffers(
            kind, n, [None, pa.py_buffer(out_offsets), pa.py_buffer(values)]
        )
    if schema_id is not None:
        raise ValueError("schema_id= is for framing='confluent'")
    return pa.py_buffer(frame(data, offsets, _framing_code(framing)))


def record_framer(
    schema: Schema,
    framing: str | None = None,
    *,
    schema_id: int | None = None,
    message_index: Sequence[int] | None = None,
) -> Callable[[pa.Array], pa.Array]:
    """How records made one by one (a column of a table, a stream's elements: what an
    encoder makes for Kafka) are framed: as they are (``framing=None``) or each with the
    Confluent prefix of ``schema_id`` and ``message_index`` (default: the path of
    ``schema``'s message in its file). Every argument is checked here, not at the first
    batch. Returns records -> records."""
    if framing is None:
        if schema_id is not None or message_index is not None:
            raise ValueError("schema_id= and message_index= are for framing='confluent'")
        return _as_they_are
    if framing != "confluent":
        raise ValueError(f"framing of records one by one: None or 'confluent', not {framing!r}")
    if schema_id is None:
        raise ValueError("framing='confluent' needs schema_id= (the registry's id)")
    index = message_index_of(schema) if message_index is None else tuple(message_index)
    framer = functools.partial(
        frame_records, framing=framing, schema_id=schema_id, message_index=index
    )
    framer(pa.array([], pa.binary()))  # a bad id or index raises now
    return framer


def _as_they_are(records: pa.Array) -> pa.Array:
    return records


def records_array(buffer: object, starts: np.ndarray, ends: np.ndarray) -> pa.Array:
    """The records ``buffer[starts[i]:ends[i]]`` as one BinaryArray (one C copy of each;
    a LargeBinaryArray past 2 GiB)."""
    offsets, values, large = compact(memoryview(buffer).cast("B"), starts, ends)  # type: ignore[arg-type]
    kind = pa.large_binary() if large else pa.binary()
    return pa.Array.from_buffers(
        kind, len(starts), [None, pa.py_buffer(offsets), pa.py_buffer(values)]
    )


@dataclass(slots=True)
class Tail:
    """The part of a stream that is not whole records: from ``offset`` to the end.

    ``size``: its bytes; ``raw``: the first MAX_TAIL_RAW of them; ``reason``: why it is
    not a record, in words that name the byte offset.
    """

    offset: int
    size: int
    raw: bytes
    reason: str


@dataclass(frozen=True, slots=True)
class Frames:
    """Whole records of a stream: ``data`` starts at byte ``offset`` of the stream, on a
    record boundary; record i is ``data[starts[i]:ends[i]]`` (its frame starts right
    after the previous frame's end -- the record's end plus ``trailer`` bytes of checksum
    -- or at 0). ``corrupt``: positions of the records whose checksum fails (TFRecord):
    framed soundly, but each a bad record the reader accounts for (:func:`corrupt_reason`).
    """

    data: bytes
    offset: int
    starts: np.ndarray
    ends: np.ndarray
    corrupt: np.ndarray = field(default_factory=lambda: _NONE_CORRUPT)
    trailer: int = 0

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def frame_ends(self) -> np.ndarray:
        """Offset in ``data`` just past each record's frame (where the next one starts)."""
        return self.ends + self.trailer if self.trailer else self.ends

    @property
    def frame_starts(self) -> np.ndarray:
        """Stream offset of each record's frame (its length prefix)."""
        out = np.empty(len(self.ends), dtype=np.int64)
        if len(out):
            out[0] = 0
            out[1:] = self.frame_ends[:-1]
        return out + self.offset

    def records(self, lo: int = 0, hi: int | None = None) -> pa.Array:
        """Records ``lo:hi`` as a BinaryArray (one copy, prefixes dropped)."""
        return records_array(self.data, self.starts[lo:hi], self.ends[lo:hi])

    def framed(self, lo: int = 0, hi: int | None = None) -> memoryview:
        """Records ``lo:hi`` as they are in the stream, prefixes included (no copy)."""
        hi = len(self) if hi is None else hi
        ends = self.frame_ends
        start = int(ends[lo - 1]) if lo else 0
        return memoryview(self.data)[start : int(ends[hi - 1]) if hi else start]


class FrameReader:
    """Whole records of a framed stream, a block at a time, never the whole stream at once.

    ``stream``: anything with ``read(n)`` (a binary file, a pyarrow ``NativeFile``, a Beam
    filesystem stream, a :class:`~wirearrow.sources.compression.DecompressedStream`, whose break
    becomes the tail); with ``start`` it must also ``seek``. ``end``: stop there (a record
    boundary found by :func:`plan_pieces`); a stream that ends before it raises ValueError
    (the file changed). ``size``: the stream's size when known (only to size the tail).

    Iterating yields :class:`Frames`. A record larger than a block is read whole (the
    next read grows to hold it). After iteration ``position`` is the stream offset past
    the last whole record, and ``tail`` is set when the stream (or the range) does not end
    on a record boundary: from there on nothing can be read as records.
    """

    def __init__(
        self,
        stream: Any,
        framing: str,
        *,
        block_bytes: int = BLOCK_BYTES,
        start: int = 0,
        end: int | None = None,
        size: int | None = None,
        name: str = "the stream",
    ) -> None:
        _framing_code(framing)
        self.stream = stream
        self.framing = framing
        self._trailer = TRAILERS[framing]
        self.block_bytes = max(int(block_bytes), 1)
        self.start = start
        self.end = end
        self.size = size
        self.name = name
        self.position = start
        self.tail: Tail | None = None
        self._left = None if end is None else end - start
        self._sample: bytes | None = None  # the stream's first bytes, for looks_like

    def _read(self, n: int) -> bytes:
        if self._left is not None:
            n = min(n, self._left)
            if n <= 0:
                return b""
        block = self.stream.read(n) or b""
        if self._left is not None:
            if not block:
                raise ValueError(
                    f"{self.name}: ends at byte {self.end - self._left}, before the planned "  # type: ignore[operator]
                    f"{self.end} (did the file change while it was read?)"
                )
            self._left -= len(block)
        return bytes(block)

    def __iter__(self) -> Iterator[Frames]:
        if self.start:
            self.stream.seek(self.start)
        carry = b""
        base = self.start  # stream offset of carry[0]
        want = self.block_bytes
        while True:
            block = self._read(want)
            if not block:
                break
            if self._sample is None and not self.start:
                self._sample = block[:SAMPLE_BYTES]
            data = carry + block if carry else block
            starts, ends, consumed, problem, corrupt = split_framed_prefix(data, self.framing)
            if problem is not None:
                # A length prefix that cannot be a length: the records before it are good,
                # nothing after it can be framed.
                if len(starts):
                    yield Frames(data, base, starts, ends, corrupt, self._trailer)
                self.position = base + consumed
                bad, why = problem
                self.tail = self._tail(base + consumed, data[consumed:], f"{why} at byte {base + bad}")
                return
            if len(starts):
                yield Frames(data, base, starts, ends, corrupt, self._trailer)
            carry = data[consumed:]
            base += consumed
            self.position = base
            # A record larger than what is held: read enough at once to finish it.
            want = max(self.block_bytes, len(carry)) if not len(starts) else self.block_bytes
        broken = getattr(self.stream, "broken", None)
        if broken is not None:
            # A decompressing stream that broke off (compression.DecompressedStream): the
            # records before the break were yielded; the break, with the cut record's
            # bytes if any, is the tail.
            if carry:
                broken += f"; {len(carry):,} bytes of a cut record from byte {base:,}"
            self.tail = Tail(offset=base, size=len(carry), raw=bytes(carry[:MAX_TAIL_RAW]), reason=broken)
            return
        if carry:
            self.tail = self._tail(
                base,
                carry,
                f"truncated {self.framing} stream: the record at byte {base} runs past the "
                f"end of {self.name}",
            )

    def _tail(self, offset: int, head: bytes, reason: str) -> Tail:
        """The tail from ``offset`` (``head``: its bytes already read) to the end."""
        raw = bytes(head[:MAX_TAIL_RAW])
        if len(raw) < MAX_TAIL_RAW:
            raw += self._read(MAX_TAIL_RAW - len(raw))
        if self.size is not None and self.end is None:
            size = self.size - offset
        else:  # not a regular file, or a range: count what is left
            size = max(len(head), len(raw))
            while chunk := self._read(self.block_bytes):
                size += len(chunk)
        if size > len(raw):
            reason += f" ({size:,} bytes left; the dead letter keeps the first {len(raw):,})"
        else:
            reason += f" ({size:,} bytes left)"
        if self._sample is not None:
            whole = self.size is not None and self.size == len(self._sample)
            reason += looks_like(self._sample, self.framing, whole)
        return Tail(offset=offset, size=size, raw=raw, reason=reason)


@dataclass(frozen=True, slots=True)
class Piece:
    """Whole records of a stream: bytes ``[start, end)``, ``records`` of them."""

    start: int
    end: int
    records: int


def plan_pieces(
    stream: Any, framing: str, piece_bytes: int, *, block_bytes: int = BLOCK_BYTES, name: str = ""
) -> tuple[list[Piece], Tail | None]:
    """Record-aligned pieces of about ``piece_bytes`` covering a stream's whole records.

    One sequential pass through :class:`FrameReader` (the same C splitter the readers
    use: ~memory speed once the bytes are in); only the cut points are kept, never the
    records. Returns the pieces (at least one, possibly empty) and the stream's tail.
    """
    reader = FrameReader(stream, framing, block_bytes=block_bytes, name=name or "the stream")
    pieces: list[Piece] = []
    piece_start = 0
    first_record = 0  # index of the first record of the current piece
    seen = 0  # records read so far
    for frames in reader:
        frame_ends = frames.frame_ends + frames.offset  # stream offset just past each record
        while True:
            k = int(np.searchsorted(frame_ends, piece_start + piece_bytes, side="left"))
            if k >= len(frame_ends):
                break
            cut = int(frame_ends[k])
            pieces.append(Piece(piece_start, cut, seen + k + 1 - first_record))
            piece_start, first_record = cut, seen + k + 1
        seen += len(frames)
    if reader.position > piece_start or not pieces:
        pieces.append(Piece(piece_start, reader.position, seen - first_record))
    return pieces, reader.tail


def read_delimited(
    source: str | os.PathLike[str] | bytes | bytearray | memoryview | pa.Buffer,
    framing: str = "varint",
    *,
    compression: str = "auto",
) -> pa.BinaryArray:
    """Read every record of a length-delimited file or buffer into a BinaryArray (one copy).

    framing: "varint" (protobuf's writeDelimitedTo), "u32le" or "u32be" (4-byte lengths),
    "tfrecord" (TensorFlow's TFRecord; both CRC32Cs of every record are checked).
    compression: "auto" (a file: by its suffix, .gz .bz2 .zst .xz .deflate; a buffer: none),
    "none" or a codec (wirearrow.sources.compression), as every other reader takes it.
    A stream that ends inside a record, a broken compressed stream, or a TFRecord whose CRC
    does not match raises ValueError naming the byte offset (the engines' readers and
    ``Transcoder.decode`` keep the good records and make the rest a dead letter instead).
    When most of the first records are not protobuf wire data and the bytes read well
    another way (another framing, Confluent prefixes, JSON text), a UserWarning says so.
    Records over 2 GiB in total come back as a LargeBinaryArray.
    """
    check_framing(framing)
    codec = compression_name(compression)
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        codec = compression_of(path, codec)
        with pa.memory_map(path, "r") as f:
            buffer: object = f.read_buffer()
        name = path
    else:
        buffer, name = source, "the buffer"
        codec = "none" if codec == "auto" else codec
    if codec != "none":
        buffer, broken = decompress(buffer, codec, name)
        if broken is not None:
            raise ValueError(broken.replace(" (the records before it are kept)", ""))
    view = memoryview(buffer).cast("B")  # type: ignore[arg-type]
    try:
        starts, ends, consumed = split_framed(view, framing)
    except ValueError as err:  # a prefix that cannot be a length: say what the data looks like
        hint = looks_like(bytes(view[:SAMPLE_BYTES]), framing, len(view) <= SAMPLE_BYTES)
        if not hint:
            raise
        raise ValueError(f"{err}{hint}") from None
    if consumed != len(view):
        raise ValueError(
            f"truncated {framing} stream: the record at byte {consumed} runs past the end "
            f"({len(view) - consumed} bytes left)"
            + looks_like(bytes(view[:SAMPLE_BYTES]), framing, len(view) <= SAMPLE_BYTES)
        )
    words = misframed(view, starts, ends, framing)
    if words:
        warnings.warn(f"{name}: {words}", UserWarning, stacklevel=2)
    return records_array(view, starts, ends)


def misframed(view: memoryview, starts: np.ndarray, ends: np.ndarray, framing: str) -> str:
    """Words for records split soundly from ``view`` by ``framing`` of which most of the
    first are not protobuf wire data, when the bytes read well another way; "" otherwise.
    Every read_delimited call looks, so the look is the cheapest that tells (~1 us): the
    first tags of the first record (a wrong framing leaves a length's bytes there), then
    of a few more; only a bad look leads to the guess, which reads more."""

    def records(n: int) -> list[memoryview]:
        return [view[s:e] for s, e in zip(starts[:n].tolist(), ends[:n].tolist(), strict=True)]

    if not len(starts):
        return ""
    if not suspect(view) and (
        well_formed(view[int(starts[0]) : int(ends[0])], LOOK_BYTES)
        or not mostly_malformed(records(LOOK_RECORDS))
    ):
        return ""
    first = records(SNIFF_RECORDS)
    bad = sum(not well_formed(r) for r in first)
    words = hint(
        bytes(view[:SNIFF_BYTES]), framing=framing, whole=len(view) <= SNIFF_BYTES, strict=True
    )
    if not words:
        return ""
    return f"{bad} of the first {len(first)} {framing} records are not protobuf wire data; {words}"
