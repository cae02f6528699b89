"""Streaming Parquet output with bounded memory.

:class:`ParquetSink` takes record batches one at a time and writes full row groups as soon
as it holds enough rows, so memory stays at about one row group however much goes
through it. :func:`write_parquet` is the one-call form for a batch, a table or an iterable
of batches.

Any Arrow schema wirearrow produces can be written:

* Parquet cannot store a struct with no fields (an empty message type, ``google.protobuf.Empty``):
  such fields are dropped, with a :class:`ParquetSchemaWarning` naming them; so is a list or
  map whose elements are such structs, and a struct left with no fields once they are gone.
* Every field is made nullable (map keys excepted, which Parquet requires), since pyarrow
  rejects some non-nullable children under nullable parents.
* Field ids (``PARQUET:field_id``, wirearrow.field_ids) are written as the schema carries
  them; when it carries some, every field gets one (docs/evolution.md).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from wirearrow.field_ids import with_missing_ids

__all__ = [
    "PARQUET_COMPRESSIONS",
    "ParquetSchemaWarning",
    "ParquetSink",
    "ParquetSummary",
    "writable_schema",
    "write_parquet",
]

DEFAULT_ROW_GROUP_SIZE = 128_000
DEFAULT_COMPRESSION = "zstd"
# The Parquet codecs a sink writes with (pyarrow's names; "none": uncompressed).
PARQUET_COMPRESSIONS = ("none", "snappy", "gzip", "brotli", "lz4", "zstd")
# Rows are also flushed as a row group when the buffered batches reach this many bytes,
# so wide or deeply nested rows cannot make one row group hold gigabytes.
DEFAULT_MAX_BUFFER_BYTES = 256 * 1024 * 1024


class ParquetSchemaWarning(UserWarning):
    """Fields were dropped because Parquet cannot store them."""


@dataclass(frozen=True, slots=True)
class ParquetSummary:
    """What a :class:`ParquetSink` (or :func:`write_parquet`) wrote."""

    path: str
    rows: int
    row_groups: int
    bytes: int
    schema: pa.Schema
    dropped: tuple[str, ...] = field(default=())


# --------------------------------------------------------------------------- schema


def writable_schema(schema: pa.Schema) -> tuple[pa.Schema, tuple[str, ...]]:
    """The schema Parquet can store, and the paths of the fields dropped to get it.

    Dropped: structs with no fields, lists / maps of them, structs left empty by that.
    Every field comes back nullable except map keys. A schema with field ids gets one on
    every field (columns added after the decode, an engine's Kafka offset: the id of their
    name, wirearrow.field_ids). Does not warn.
    """
    dropped: list[str] = []
    fields = []
    for f in schema:
        new = _writable_field(f, f.name, dropped)
        if new is not None:
            fields.append(new)
    return with_missing_ids(pa.schema(fields, metadata=schema.metadata)), tuple(dropped)


def _writable_field(f: pa.Field, where: str, dropped: list[str]) -> pa.Field | None:
    t = _writable_type(f.type, where, dropped)
    if t is None:
        # Name only the outermost field dropped, not the empty ones inside it as well.
        dropped[:] = [d for d in dropped if not _inside(d, where)]
        dropped.append(where)
        return None
    return pa.field(f.name, t, nullable=True, metadata=f.metadata)


def _inside(path: str, where: str) -> bool:
    return path.startswith(where) and path[len(where) : len(where) + 1] in (".", "[")


def _writable_type(t: pa.DataType, where: str, dropped: list[str]) -> pa.DataType | None:
    """``t`` made writable, or None when nothing of it can be stored."""
    if pa.types.is_struct(t):
        children = []
        for i in range(t.num_fields):
            child = t.field(i)
            new = _writable_field(child, f"{where}.{child.name}", dropped)
            if new is not None:
                children.append(new)
        return pa.struct(children) if children else None
    if pa.types.is_map(t):
        item = _writable_type(t.item_type, f"{where}[*]", dropped)
        if item is None:
            return None
        key = t.key_field
        return pa.map_(
            pa.field(key.name, key.type, nullable=False, metadata=key.metadata),
            pa.field(t.item_field.name, item, nullable=True, metadata=t.item_field.metadata),
            keys_sorted=t.keys_sorted,
        )
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        value_field = t.value_field
        item = _writable_type(value_field.type, f"{where}[*]", dropped)
        if item is None:
            return None
        new_field = pa.field(value_field.name, item, nullable=True, metadata=value_field.metadata)
        if pa.types.is_fixed_size_list(t):
            return pa.list_(new_field, t.list_size)
        return pa.large_list(new_field) if pa.types.is_large_list(t) else pa.list_(new_field)
    return t


def _empty_children_dropped(names: Iterable[str]) -> str:
    return "Parquet cannot store a struct with no fields; dropped from the output: " + ", ".join(
        names
    )


# --------------------------------------------------------------------------- writing


class ParquetSink:
    """Write record batches to one Parquet file as they come, a row group at a time.

    ``path``: a file path, or a binary file open for writing (a Beam filesystem's, say),
    which stays open. ``schema``: the schema of the batches; without it, the first
    batch's. The file is created when the schema is known (at once, or at the first batch). Batches are buffered
    until ``row_group_size`` rows (or ``max_buffer_bytes``) are held, then written as one
    row group; :meth:`close` writes the rest and the footer. A sink closed without any
    batch but with a schema writes a valid file with no rows.

    Use as a context manager; on an exception the file is closed but left as it is.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | BinaryIO,
        schema: pa.Schema | None = None,
        *,
        row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
        compression: str | None = DEFAULT_COMPRESSION,
        compression_level: int | None = None,
        max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES,
    ) -> None:
        if row_group_size < 1:
            raise ValueError(f"row_group_size must be at least 1, not {row_group_size}")
        self._file: BinaryIO | None = None
        if isinstance(path, str | os.PathLike):
            self.path = os.fspath(path)
        else:  # written from where it stands: its bytes are counted from there
            self._file, self._start = path, path.tell()
            self.path = str(getattr(path, "name", "") or "a stream")
        self.row_group_size = int(row_group_size)
        self.compression = "none" if compression is None else compression
        self.compression_level = compression_level
        self.max_buffer_bytes = int(max_buffer_bytes)
        self._source_schema: pa.Schema | None = None
        self._schema: pa.Schema | None = None
        self._dropped: tuple[str, ...] = ()
        self._writer: pq.ParquetWriter | None = None
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._rows = 0
        self._row_groups = 0
        self._closed = False
        self._summary: ParquetSummary | None = None
        if schema is not None:
            self.open(schema)

    # -- lifecycle -----------------------------------------------------------------------

    def open(self, schema: pa.Schema) -> ParquetSink:
        """Create the file for batches of ``schema`` (done by the first write otherwise)."""
        if self._closed:
            raise ValueError(f"{self.path}: the sink is closed")
        if self._writer is not None:
            if not schema.equals(self._source_schema):
                raise ValueError(f"{self.path}: the sink is already open with another schema")
            return self
        target, dropped = writable_schema(schema)
        if dropped:
            warnings.warn(_empty_children_dropped(dropped), ParquetSchemaWarning, stacklevel=3)
        if not len(target):
            raise ValueError(
                f"{self.path}: no column left to write: Parquet cannot store "
                + ", ".join(dropped or ["a schema with no fields"])
            )
        self._source_schema = schema
        self._schema = target
        self._dropped = dropped
        self._writer = pq.ParquetWriter(
            self.path if self._file is None else self._file,
            target,
            compression=self.compression,
            compression_level=self.compression_level,
        )
        return self

    def __enter__(self) -> ParquetSink:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    @property
    def schema(self) -> pa.Schema | None:
        """The schema written to the file (after dropping and relaxing), once known."""
        return self._schema

    @property
    def dropped(self) -> tuple[str, ...]:
        return self._dropped

    @property
    def rows(self) -> int:
        """Rows accepted so far (written or buffered)."""
        return self._rows + self._pending_rows

    @property
    def row_groups(self) -> int:
        """Row groups written to the file so far."""
        return self._row_groups

    # -- data ------------------------------------------------------------------------------

    def write(self, data: pa.RecordBatch | pa.Table) -> None:
        """Add a batch (or a table's batches); writes every full row group it completes."""
        if self._closed:
            raise ValueError(f"{self.path}: the sink is closed (its footer is written)")
        if isinstance(data, pa.Table):
            for batch in data.to_batches():
                self.write(batch)
            if data.num_rows == 0 and self._writer is None:
                self.open(data.schema)
            return
        if not isinstance(data, pa.RecordBatch):
            raise TypeError(f"expected a pyarrow RecordBatch or Table, not {type(data).__name__}")
        if self._writer is None:
            self.open(data.schema)
        batch = self._conform(data)
        if batch.num_rows == 0:
            return
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        self._pending_bytes += batch.nbytes
        while self._pending_rows >= self.row_group_size:
            self._flush(self.row_group_size)
        if self._pending_rows and self._pending_bytes >= self.max_buffer_bytes:
            self._flush(self._pending_rows)

    def close(self) -> ParquetSummary:
        """Write what is buffered and the footer; returns the summary (again if closed)."""
        if self._summary is not None:
            return self._summary
        if self._writer is None:
            raise ValueError(f"{self.path}: nothing written and no schema: cannot create a file")
        while self._pending_rows:
            self._flush(min(self._pending_rows, self.row_group_size))
        self._writer.close()  # a file given open stays open
        self._closed = True
        assert self._schema is not None
        self._summary = ParquetSummary(
            path=self.path,
            rows=self._rows,
            row_groups=self._row_groups,
            bytes=(
                os.path.getsize(self.path)
                if self._file is None
                else self._file.tell() - self._start
            ),
            schema=self._schema,
            dropped=self._dropped,
        )
        return self._summary

    def abort(self) -> None:
        """Stop without writing what is buffered; the file is closed, possibly incomplete."""
        self._closed = True
        self._pending = []
        self._pending_rows = self._pending_bytes = 0
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()

    # -- internals -------------------------------------------------------------------------

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with the file's schema: empty structs dropped, fields nullable."""
        assert self._source_schema is not None and self._schema is not None
        if not batch.schema.equals(self._source_schema):
            raise ValueError(
                f"{self.path}: batch schema differs from the file's:\n"
                f"{batch.schema}\n-- expected --\n{self._source_schema}"
            )
        if batch.schema.equals(self._schema):
            return batch
        columns = []
        for f in self._schema:
            column = batch.column(f.name)
            if not column.type.equals(f.type):
                column = column.cast(f.type)
            columns.append(column)
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)

    def _flush(self, n: int) -> None:
        """Write the first ``n`` buffered rows as one row group."""
        assert self._writer is not None and self._schema is not None
        taken: list[pa.RecordBatch] = []
        need = n
        while need:
            batch = self._pending[0]
            if batch.num_rows <= need:
                taken.append(self._pending.pop(0))
                need -= batch.num_rows
            else:
                taken.append(batch.slice(0, need))
                self._pending[0] = batch.slice(need)
                need = 0
        table = pa.Table.from_batches(taken, schema=self._schema)
        # One call, at most row_group_size rows: exactly one row group.
        self._writer.write_table(table, row_group_size=max(n, 1))
        self._rows += n
        self._row_groups += 1
        self._pending_rows -= n
        self._pending_bytes = sum(b.nbytes for b in self._pending)


def write_parquet(
    batches_or_table: pa.RecordBatch | pa.Table | Iterable[pa.RecordBatch],
    path: str | os.PathLike[str],
    *,
    schema: pa.Schema | None = None,
    row_group_size: int = DEFAULT_ROW_GROUP_SIZE,
    compression: str | None = DEFAULT_COMPRESSION,
) -> ParquetSummary:
    """Write a RecordBatch, a Table, or an iterable of batches (consumed lazily) to ``path``.

    Memory stays bounded by about one row group: batches from an iterator are written as
    they arrive. ``schema`` is needed only for an iterable that may yield no batch.
    Returns a :class:`ParquetSummary` (rows, row groups, bytes, dropped fields).
    """
    if isinstance(batches_or_table, pa.RecordBatch | pa.Table):
        items: Iterable[pa.RecordBatch | pa.Table] = [batches_or_table]
        if schema is None:
            schema = batches_or_table.schema
    else:
        items = batches_or_table
    with ParquetSink(path, schema, row_group_size=row_group_size, compression=compression) as sink:
        for item in items:
            sink.write(item)
    return sink.close()
