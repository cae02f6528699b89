"""The Arrow types a table can hold: wirearrow's output schema made storable, losslessly.

Iceberg and Delta have no unsigned integers, no durations and no dictionaries, and Delta no
time of day. Each such type maps to the narrowest type that holds every value, never one
that wraps or truncates:

==========================  ===================  =======================================
Arrow (wirearrow)           Iceberg              Delta
==========================  ===================  =======================================
uint8, uint16               int                  int
uint32 (protobuf uint32)    long                 long
uint64 (protobuf uint64)    decimal(20, 0)       decimal(20, 0)
duration[unit]              long (units)         long (units)
dictionary<int32, utf8>     string               string
time64[us] (TimeOfDay)      time                 long (microseconds)
time64[ns] (TimeOfDay, ns)  long (nanoseconds)   long (nanoseconds)
timestamp[s / ms]           timestamp (us)       timestamp (us)
empty struct                dropped (as Parquet) dropped
==========================  ===================  =======================================

Field metadata (``PARQUET:field_id``) is kept on every field, so the table's columns keep
the plan's field ids.
"""

from __future__ import annotations

import pyarrow as pa

from wirearrow.field_ids import with_missing_ids
from wirearrow.parquet import writable_schema

__all__ = ["storable", "storable_schema"]


def _type(t: pa.DataType, fmt: str) -> pa.DataType:
    if pa.types.is_dictionary(t):
        return _type(t.value_type, fmt)
    if pa.types.is_unsigned_integer(t):
        if t.bit_width <= 16:
            return pa.int32()
        if t.bit_width == 32:
            return pa.int64()
        return pa.decimal128(20, 0)
    if pa.types.is_duration(t):
        return pa.int64()
    if pa.types.is_time(t):
        if fmt == "delta" or t.unit == "ns":  # (Iceberg's time is microseconds)
            return pa.int64()
        return pa.time64("us")
    if pa.types.is_timestamp(t) and t.unit in ("s", "ms"):
        return pa.timestamp("us", tz=t.tz)
    if pa.types.is_struct(t):
        return pa.struct([_field(t.field(i), fmt) for i in range(t.num_fields)])
    if pa.types.is_map(t):
        return pa.map_(
            _field(t.key_field, fmt).with_nullable(False), _field(t.item_field, fmt),
            keys_sorted=t.keys_sorted,
        )  # fmt: skip
    if pa.types.is_large_list(t):
        return pa.large_list(_field(t.value_field, fmt))
    if pa.types.is_list(t):
        return pa.list_(_field(t.value_field, fmt))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(_field(t.value_field, fmt))
    return t


def _field(f: pa.Field, fmt: str) -> pa.Field:
    return pa.field(f.name, _type(f.type, fmt), nullable=f.nullable, metadata=f.metadata)


def storable_schema(schema: pa.Schema, fmt: str) -> tuple[pa.Schema, tuple[str, ...]]:
    """``schema`` as a table of ``fmt`` ("iceberg" / "delta") can hold it, and the paths of
    the fields dropped (empty structs, which Parquet cannot store). Columns added to
    wirearrow's rows without an id (an engine's Kafka offset) get the id of their name
    (wirearrow.field_ids), as carried columns do."""
    writable, dropped = writable_schema(with_missing_ids(schema))
    return pa.schema([_field(f, fmt) for f in writable], metadata=schema.metadata), dropped


def storable(data: pa.Table | pa.RecordBatch, target: pa.Schema) -> pa.Table:
    """``data`` as a table of schema ``target`` (a :func:`storable_schema` of its schema):
    columns picked by name, cast where the type changed (casts here never lose a value)."""
    table = data if isinstance(data, pa.Table) else pa.Table.from_batches([data])
    if table.schema.equals(target, check_metadata=True):
        return table
    columns = []
    for f in target:
        column = table.column(f.name)
        if not column.type.equals(f.type):
            column = column.cast(f.type)
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=target)
