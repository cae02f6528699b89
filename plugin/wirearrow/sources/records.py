"""Any accepted input, as the decoder takes it: one buffer and each record's bounds.

:class:`RecordReader` turns what ``Transcoder.decode`` is given (a BinaryArray, a list of
bytes, a table's column, any Arrow producer, one framed -- possibly compressed -- buffer,
protojson texts, Confluent-prefixed records, base and custom record pairs) into
:class:`Records`: a buffer, the start and end of every record in it, each record's
position in the input, and the records refused before decoding (null, cut short, bad
checksum, bad prefix, bad JSON), each with its reason. Nothing is copied that need not be:
an Arrow array is read where it lies.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from wirearrow._core.framing import (
    MERGE_OK,
    MERGE_UNDECLARED,
    array_bounds,
    merge_custom,
    pack_records,
)
from wirearrow.errors import DecodeError
from wirearrow.schema import Schema
from wirearrow.sources.compression import decompress
from wirearrow.sources.confluent import SchemaIds, refused, strip_prefixes
from wirearrow.sources.format import BINARY, RecordFormat
from wirearrow.sources.framing import TRAILERS, corrupt_reason, split_framed_prefix
from wirearrow.sources.protojson import JsonReader

__all__ = ["Failure", "RecordReader", "Records", "arrow_input"]

# A record refused: why (index, offset, path, reason), and its bytes when they are kept.
Failure = tuple[DecodeError, "bytes | None"]


@dataclass(slots=True)
class Records:
    """A batch of records: ``data[starts[i]:ends[i]]`` is record ``index[i]`` of the input.

    ``failures``: the records refused before decoding. With Confluent prefixes,
    ``raw_starts`` is where each record's prefix starts (its dead letter keeps it, its
    offsets count from it), ``schema_ids`` its schema id and ``lookup`` the schema of each.
    ``given_index``: ``index`` as given, None for 0 .. n-1 (made when first read: an
    Arrow array's records, none refused, need it only for errors and record positions,
    and it is an int64 a record held through the whole call; benchmarks/README.md,
    "Threads").
    """

    data: memoryview
    starts: np.ndarray
    ends: np.ndarray
    given_index: np.ndarray | None
    failures: list[Failure] = field(default_factory=list)
    raw_starts: np.ndarray | None = None
    schema_ids: np.ndarray | None = None
    lookup: SchemaIds | None = None

    @property
    def index(self) -> np.ndarray:
        """Each record's position in the input."""
        if self.given_index is None:
            self.given_index = np.arange(len(self.starts), dtype=np.int64)
        return self.given_index

    @index.setter
    def index(self, index: np.ndarray) -> None:
        self.given_index = index

    def subset(self, mask: np.ndarray) -> Records:
        """The records where ``mask`` is true, as a batch of their own (no failures)."""
        return Records(
            self.data,
            self.starts[mask],
            self.ends[mask],
            self.index[mask],
            [],
            None if self.raw_starts is None else self.raw_starts[mask],
            None if self.schema_ids is None else self.schema_ids[mask],
            self.lookup,
        )

    @property
    def n_in(self) -> int:
        """Records given: those to decode and those refused."""
        return len(self.starts) + len(self.failures)

    def keep(self, mask: np.ndarray) -> None:
        """Keep only the records where ``mask`` is true (the others are accounted for)."""
        self.starts, self.ends, self.given_index = self.starts[mask], self.ends[mask], self.index[mask]
        if self.raw_starts is not None:
            self.raw_starts = self.raw_starts[mask]
        if self.schema_ids is not None:
            self.schema_ids = self.schema_ids[mask]

    def raw(self, position: int) -> bytes:
        """Record ``position``'s whole bytes (its Confluent prefix included)."""
        starts = self.starts if self.raw_starts is None else self.raw_starts
        return bytes(self.data[starts[position] : self.ends[position]])


class RecordReader:
    """Reads the inputs of one schema into :class:`Records`. Keeps what is worth keeping
    between batches (the JSON tables, the schema ids seen), not what a batch held."""

    def __init__(self, schema: Schema) -> None:
        self._schema = schema
        self._plain = schema.custom_numbers is None  # not merged with a custom message
        self._lock = threading.Lock()
        self._json: dict[bool, JsonReader] = {}  # by ignore_unknown_fields
        # The schemas= of recent Confluent batches, by identity (held, so ids stay unique).
        self._schema_ids: dict[int, tuple[object, SchemaIds]] = {}

    def read(self, messages: object, fmt: RecordFormat, custom: object = None) -> Records:
        if fmt is BINARY and custom is None and self._plain:
            # The common case, decided at once: an Arrow array of records as they are.
            wide = _ARRAYS.get(type(messages))
            if wide is not None:
                return _array_records(messages, wide)
        messages = arrow_input(messages, fmt.column)
        custom_numbers = self._schema.custom_numbers
        if (custom is None) != (custom_numbers is None):
            raise ValueError(
                "custom= takes the custom records of a schema merged with "
                "Schema.with_custom_message()"
                if custom is not None
                else f"{self._schema.message_name} is merged with a custom message: "
                "give its records as transcode(base_records, custom=custom_records)"
            )
        if custom is not None and custom_numbers is not None:  # (checked together above)
            if fmt.framing is not None or fmt.format != "binary":
                raise ValueError("custom= takes binary records, without framing= or format=")
            return _merged_records(messages, arrow_input(custom, None), custom_numbers)
        if fmt.format == "json":
            return self._json_records(messages, fmt.ignore_unknown_fields)
        framing = fmt.buffer_framing
        broken = None
        if framing is not None and fmt.compression not in ("auto", "none"):
            messages, broken = decompress(messages, fmt.compression)
        records = _records(messages, framing, broken)
        if fmt.confluent:
            self._strip_prefixes(records, fmt.schemas)
        return records

    def _strip_prefixes(self, records: Records, schemas: object) -> None:
        ids = self._schema_ids_of(schemas)
        message = self._schema.message_name
        data = records.data
        raw_starts = records.starts
        starts, schema_ids, status = strip_prefixes(ids, message, data, raw_starts, records.ends)
        records.starts, records.raw_starts, records.schema_ids = starts, raw_starts, schema_ids
        records.lookup = ids
        bad = refused(status)
        if not len(bad):
            return
        for pos in bad:  # a refused record's start is its own: the raw bytes are all of it
            raw = bytes(data[raw_starts[pos] : records.ends[pos]])
            reason = ids.reason(int(status[pos]), raw, message)
            records.failures.append(
                (DecodeError(reason, index=int(records.index[pos]), offset=0, path=""), raw)
            )
        keep = np.ones(len(starts), dtype=bool)
        keep[bad] = False
        records.keep(keep)

    def _schema_ids_of(self, schemas: object) -> SchemaIds:
        """``schemas`` as SchemaIds, the same one for the same object (its look-ups kept)."""
        if isinstance(schemas, SchemaIds):
            return schemas
        with self._lock:
            held = self._schema_ids.get(id(schemas))
            if held is None or held[0] is not schemas:
                if len(self._schema_ids) > 8:  # schemas= objects seen: a handful
                    self._schema_ids.clear()
                held = (schemas, SchemaIds(schemas))  # type: ignore[arg-type]
                self._schema_ids[id(schemas)] = held
        return held[1]

    def _json_records(self, messages: object, ignore_unknown: bool) -> Records:
        reader = self._json.get(ignore_unknown)
        if reader is None:
            reader = JsonReader(self._schema.descriptor, ignore_unknown_fields=ignore_unknown)
            self._json[ignore_unknown] = reader
        wire, index, failures = reader.to_wire(messages)
        records = _records(wire, None)
        records.index, records.failures = index, failures
        return records


# Arrays of records that arrow_input passes on unchanged, by class: whether their offsets
# are 64-bit.
_ARRAYS = {pa.BinaryArray: False, pa.StringArray: False, pa.LargeBinaryArray: True, pa.LargeStringArray: True}


def arrow_input(messages: object, column: str | None) -> object:
    """Arrow producers as pyarrow arrays (imported through the C interfaces, no copy); a
    table's record column (``column``; None: its only column, else ``value``); anything
    else as it is."""
    if column is None and type(messages) in _ARRAYS:  # the common case, decided at once
        return messages
    if isinstance(messages, bytes | bytearray | memoryview | pa.Buffer | list | tuple):
        if column is not None:
            raise TypeError("column= names a column of a table, not of a list or a buffer")
        return messages
    if not isinstance(messages, pa.Array | pa.ChunkedArray | pa.Table | pa.RecordBatch):
        if hasattr(messages, "__arrow_c_array__"):
            messages = pa.array(messages)
        elif hasattr(messages, "__arrow_c_stream__"):
            messages = pa.chunked_array(messages)
    if isinstance(messages, pa.Array | pa.ChunkedArray) and pa.types.is_struct(messages.type):
        # A table exported as one struct array or a stream of them (DuckDB, Polars frames).
        chunks = messages.chunks if isinstance(messages, pa.ChunkedArray) else [messages]
        messages = pa.Table.from_batches(
            [pa.RecordBatch.from_struct_array(c) for c in chunks], schema=pa.schema(messages.type)
        )
    if isinstance(messages, pa.Table | pa.RecordBatch):
        names = messages.schema.names
        if column is None:
            if len(names) == 1:
                column = names[0]
            elif "value" in names:
                column = "value"
            else:
                raise TypeError(f"a table of records needs column= (one of {names})")
        if column not in names:
            raise KeyError(f"no column {column!r} in the records (columns: {names})")
        messages = messages.column(column)
    elif column is not None:
        raise TypeError(f"column= names a column of a table, not of {type(messages).__name__}")
    if isinstance(messages, pa.Array | pa.ChunkedArray) and (
        pa.types.is_binary_view(messages.type) or pa.types.is_string_view(messages.type)
    ):
        messages = messages.cast(pa.large_binary())
    return messages


def _records(messages: object, framing: str | None, broken: str | None = None) -> Records:
    """Any input but JSON as Records; ``framing``: one buffer of framed records (``broken``:
    why its decompression broke off)."""
    if framing is not None:
        return _framed(memoryview(messages).cast("B"), framing, broken)  # type: ignore[arg-type]
    if isinstance(messages, pa.ChunkedArray):
        messages = messages.combine_chunks() if messages.num_chunks != 1 else messages.chunk(0)
    if isinstance(messages, bytes | bytearray | memoryview | pa.Buffer):
        raise TypeError(
            "one buffer of records needs framing= ('varint', 'u32le', 'u32be' or 'tfrecord')"
        )
    if not isinstance(messages, pa.Array):
        return _from_python(messages)
    wide = _ARRAYS.get(type(messages))
    if wide is None:
        t = messages.type
        if pa.types.is_binary(t) or pa.types.is_string(t):
            wide = False
        elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
            wide = True
        else:
            raise TypeError(f"records must be binary, not {t}")
    return _array_records(messages, wide)


def _array_records(messages: pa.Array, wide: bool) -> Records:
    """The records of a binary or string array, read where they lie (nulls refused)."""
    _, offsets_buf, data_buf = messages.buffers()
    data = memoryview(data_buf if data_buf is not None else b"").cast("B")
    bounds = np.frombuffer(
        memoryview(array_bounds(offsets_buf, messages.offset, len(messages), wide)), dtype=np.int64
    )
    if not len(bounds):  # (no records: no bounds either)
        bounds = np.zeros(1, dtype=np.int64)
    records = Records(data, bounds[:-1], bounds[1:], None)
    if messages.null_count:
        valid = np.asarray(messages.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        for i in np.flatnonzero(~valid):
            records.failures.append((_refusal("null record", int(i)), None))
        records.keep(valid)
    return records


def _framed(view: memoryview, framing: str, broken: str | None = None) -> Records:
    starts, ends, consumed, problem, corrupt = split_framed_prefix(view, framing)
    records = Records(view, starts, ends, None)
    if len(corrupt):
        # Framed soundly but failing its checksum (TFRecord): a bad record of its own.
        frame_at = np.concatenate(([0], ends[:-1] + TRAILERS[framing]))
        for pos in corrupt:
            reason = corrupt_reason(framing, int(frame_at[pos]))
            records.failures.append((_refusal(reason, int(pos)), bytes(view[starts[pos] : ends[pos]])))
        keep = np.ones(len(starts), dtype=bool)
        keep[corrupt] = False
        records.keep(keep)
    if consumed != len(view) or broken is not None:
        # Nothing after a truncated record, a bad prefix or a compressed stream's break
        # can be framed: the rest is one bad record, after the good ones before it.
        if broken is not None:
            reason = broken
        elif problem is not None:
            reason = f"{problem[1]} at byte {problem[0]}"
        else:
            reason = f"truncated {framing} stream: the last record runs past the end"
        records.failures.append((_refusal(reason, len(starts)), bytes(view[consumed:])))
    return records


def _from_python(messages: object) -> Records:
    """A sequence of bytes-like records: one exact-size copy into a contiguous buffer."""
    items = messages if isinstance(messages, list | tuple) else list(messages)  # type: ignore[call-overload]
    try:
        data, starts_buf, ends_buf, nulls = pack_records(items)
    except TypeError as err:
        raise TypeError(f"records must be bytes-like: {err}") from None
    starts = np.frombuffer(memoryview(starts_buf), dtype=np.int64)
    ends = np.frombuffer(memoryview(ends_buf), dtype=np.int64)
    records = Records(memoryview(data), starts, ends, None)
    if nulls:
        for i in nulls:
            records.failures.append((_refusal("null record", int(i)), None))
        keep = np.ones(len(starts), dtype=bool)
        keep[nulls] = False
        records.keep(keep)
    return records


def _merged_records(base: object, custom: object, numbers: tuple[tuple[int, int], ...]) -> Records:
    """(base, custom) record pairs as the merged message's records: the custom bytes
    renumbered after the base bytes, pairs that cannot be merged failures."""
    b = _records(base, None)
    c = _records(custom, None)  # its failures are nulls: no custom fields
    n, n_custom = b.n_in, c.n_in
    if n_custom != n:
        raise ValueError(f"custom= has {n_custom} records, messages has {n}: give one per record")
    c_s, c_e = np.zeros(n, np.int64), np.zeros(n, np.int64)
    c_s[c.index], c_e[c.index] = c.starts, c.ends
    c_starts, c_ends = c_s[b.index], c_e[b.index]
    table = np.zeros(max(old for old, _ in numbers) + 1 if numbers else 1, np.int32)
    for old, new in numbers:
        table[old] = new
    data, starts_buf, ends_buf, status_buf, where_buf, fields_buf = merge_custom(
        b.data, b.starts, b.ends, c.data, c_starts, c_ends, table
    )
    starts = np.frombuffer(memoryview(starts_buf), dtype=np.int64)
    ends = np.frombuffer(memoryview(ends_buf), dtype=np.int64)
    status = np.frombuffer(memoryview(status_buf), dtype=np.int32)
    records = Records(memoryview(data), starts, ends, b.index, b.failures)
    bad = np.flatnonzero(status != MERGE_OK)
    if len(bad):
        where = np.frombuffer(memoryview(where_buf), dtype=np.int64)
        fields = np.frombuffer(memoryview(fields_buf), dtype=np.int64)
        for pos in bad:
            reason = (
                f"custom field number {int(fields[pos])} is not declared by the custom message"
                if status[pos] == MERGE_UNDECLARED
                else "malformed custom message bytes"
            )
            base_len = int(b.ends[pos] - b.starts[pos])
            err = DecodeError(
                reason, index=int(b.index[pos]), offset=base_len + int(where[pos]), path=""
            )
            raw = bytes(b.data[b.starts[pos] : b.ends[pos]]) + bytes(
                c.data[c_starts[pos] : c_ends[pos]]
            )
            records.failures.append((err, raw))
        records.keep(status == MERGE_OK)
    records.starts, records.ends = np.ascontiguousarray(records.starts), np.ascontiguousarray(records.ends)
    return records


def _refusal(reason: str, index: int) -> DecodeError:
    return DecodeError(reason, index=index, offset=0, path="")
