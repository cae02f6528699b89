"""Beam schemas from protobuf: the row type of a whole message, and Beam rows back to Arrow.

The row type of a message is :func:`~wirearrow.beam.row_type` of the whole-message
Arrow schema (docs/types.md), so ToRows, FromRows and the Arrow transforms agree on every
field. :class:`RowsToArrow` inverts ToRows' conversion (uint64 bits, micros, nested rows)
so that rows a pipeline kept or built become a batch that ``Transcoder.encode`` takes.
"""

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from apache_beam import coders

from wirearrow.beam.rows import _beam_type, _row_fields, row_type
from wirearrow.schema import Schema
from wirearrow.transcoder import Transcoder

# A column of Python values (one per row, None = null) -> an Arrow array of one type.
FromPython = Callable[[Sequence[Any]], pa.Array]


def message_transcoder(message: Any, **options: Any) -> Transcoder:
    """The whole-message Transcoder of ``message``: a wirearrow ``Schema``, a generated
    message class or instance, a ``Descriptor``, or a Transcoder (returned as it is, which
    must have no ``columns=``). ``options`` are Transcoder options (``timestamp_unit``,
    ``enums``, ...)."""
    if isinstance(message, Transcoder):
        if options:
            raise ValueError("options apply to a schema; a Transcoder keeps its own")
        transcoder = message
    else:
        schema = message if isinstance(message, Schema) else Schema.from_message(message)
        transcoder = Transcoder(schema, **options)
    if transcoder.spec.columns is not None:
        raise ValueError(
            "a Beam schema of a message needs a whole-message Transcoder (no columns=)"
        )
    return transcoder


def message_row_type(message: Any, name: str | None = None, **options: Any) -> type:
    """The Beam schema (a NamedTuple registered with RowCoder) of a whole protobuf message.

    ``message`` as for :func:`message_transcoder`. Nested messages are nested rows,
    repeated fields ``Sequence``, maps ``Mapping``, oneof members nullable fields; enums
    are int32 numbers (``enums="name"``: their names, str); the well-known types as
    docs/types.md maps them, then as :func:`~wirearrow.beam.row_type` maps Arrow types to
    Beam's (Timestamp -> MicrosInstant, Duration -> int64 microseconds, uint64 -> int64
    bits); an empty message is a row with no fields.
    """
    transcoder = message_transcoder(message, **options)
    type_name = name or transcoder.schema.message_name.rsplit(".", 1)[-1]
    cls = row_type(transcoder.arrow_schema, type_name)
    coders.registry.register_coder(cls, coders.RowCoder)
    return cls


# =========================================================================== rows -> Arrow


def _scalar(t: pa.DataType) -> FromPython:
    def convert(values: Sequence[Any]) -> pa.Array:
        return pa.array(values, t)

    return convert


def _uint64_from_bits(values: Sequence[Any]) -> pa.Array:
    # ToRows writes uint64 as the int64 of the same bits: read them back the same way.
    return pa.array(values, pa.int64()).view(pa.uint64())


def _from_micros(t: pa.DataType) -> FromPython:
    """Microsecond integers (or beam Timestamps) -> ``t`` (timestamp, duration, time)."""
    if pa.types.is_timestamp(t):
        micros_type: pa.DataType = pa.timestamp("us", t.tz)
    elif pa.types.is_duration(t):
        micros_type = pa.duration("us")
    else:
        micros_type = pa.time64("us")

    def convert(values: Sequence[Any]) -> pa.Array:
        ints = [v if v is None or isinstance(v, int) else v.micros for v in values]
        array = pa.array(ints, pa.int64()).view(micros_type)
        # The units ToRows converted from are exact multiples: the cast is lossless.
        return array if micros_type.equals(t) else array.cast(t)

    return convert


def _dictionary(t: pa.DictionaryType) -> FromPython:
    values_of = _from_python(t.value_type, "")

    def convert(values: Sequence[Any]) -> pa.Array:
        return values_of(values).dictionary_encode().cast(t)

    return convert


def _offsets(values: Sequence[Any]) -> tuple[np.ndarray, pa.Array | None, list]:
    """(int32 offsets, null mask or None, flattened items) of a column of sequences."""
    lengths = np.fromiter((0 if v is None else len(v) for v in values), np.int64, len(values))
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError("over 2**31 list items in one batch of rows")
    nulls = [v is None for v in values]
    mask = pa.array(nulls, pa.bool_()) if any(nulls) else None
    items = [item for v in values if v is not None for item in v]
    return offsets.astype(np.int32), mask, items


def _list(t: pa.ListType, where: str) -> FromPython:
    items_of = _from_python(t.value_type, f"{where}[*]")

    def convert(values: Sequence[Any]) -> pa.Array:
        offsets, mask, items = _offsets(values)
        return pa.ListArray.from_arrays(offsets, items_of(items), type=t, mask=mask)

    return convert


def _map(t: pa.MapType, where: str) -> FromPython:
    keys_of = _from_python(t.key_type, f"{where}.key")
    items_of = _from_python(t.item_type, f"{where}[*]")

    def convert(values: Sequence[Any]) -> pa.Array:
        entries = [None if v is None else list(v.items()) for v in values]
        offsets, mask, pairs = _offsets(entries)
        keys = keys_of([k for k, _ in pairs])
        items = items_of([i for _, i in pairs])
        return pa.MapArray.from_arrays(offsets, keys, items, type=t, mask=mask)

    return convert


def _struct(t: pa.StructType, where: str) -> FromPython:
    fields = [t.field(i) for i in range(t.num_fields)]
    children = _children(fields, where)

    def convert(values: Sequence[Any]) -> pa.Array:
        nulls = [v is None for v in values]
        if not fields:  # an empty message: no child to take the length from
            return pa.array([None if null else {} for null in nulls], t)
        arrays = [child(values) for child in children]
        mask = pa.array(nulls, pa.bool_()) if any(nulls) else None
        return pa.StructArray.from_arrays(arrays, fields=fields, mask=mask)

    return convert


def _children(fields: list[pa.Field], where: str) -> list[Callable[[Sequence[Any]], pa.Array]]:
    """Per field: rows (or None) -> the field's array. Fields ToRows leaves out are null."""
    row_class, kept, _ = _row_fields(fields, where)
    row_fields: tuple[str, ...] = row_class._fields  # type: ignore[attr-defined]  # a NamedTuple
    names = dict(zip(kept, row_fields, strict=True))
    out = []
    for i, f in enumerate(fields):
        path = f"{where}.{f.name}" if where else f.name
        if i not in names:
            out.append(_nulls(f.type))
            continue
        out.append(_field_of(names[i], path, _from_python(f.type, path)))
    return out


def _nulls(t: pa.DataType) -> Callable[[Sequence[Any]], pa.Array]:
    def convert(rows: Sequence[Any]) -> pa.Array:
        return pa.nulls(len(rows), t)

    return convert


class RowValueError(ValueError):
    """A row holds a value its field's type cannot take; ``path`` names the field."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


# What Arrow and Python raise for a value of the wrong type or range.
VALUE_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError, AttributeError)


def _field_of(
    name: str, path: str, values_of: FromPython
) -> Callable[[Sequence[Any]], pa.Array]:
    def convert(rows: Sequence[Any]) -> pa.Array:
        # Rows are read by field name: a NamedTuple, a beam.Row or any object with them.
        values = [None if r is None else getattr(r, name, None) for r in rows]
        try:
            return values_of(values)
        except RowValueError:
            raise
        except VALUE_ERRORS as err:  # the innermost field that failed names it
            raise RowValueError(path, str(err)) from err

    return convert


def _from_python(t: pa.DataType, where: str) -> FromPython:
    """The inverse of rows.py's ``_beam_type`` converter for Arrow type ``t``."""
    if _beam_type(t, where) is None:  # a type ToRows leaves out: always null
        return _nulls(t)
    if t == pa.uint64():
        return _uint64_from_bits
    if pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_time(t):
        return _from_micros(t)
    if pa.types.is_float16(t):
        return lambda values: pa.array(values, pa.float32()).cast(t)
    if pa.types.is_dictionary(t):
        return _dictionary(t)
    if pa.types.is_map(t):
        return _map(t, where)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _list(t, where)
    if pa.types.is_struct(t):
        return _struct(t, where)
    return _scalar(t)


class RowsToArrow:
    """Beam rows -> a pa.RecordBatch of ``schema``: the inverse of ToRows' conversion.

    Fields are read by name (the names :func:`~wirearrow.beam.row_type` gives), so rows of
    the row type, ``beam.Row`` objects and other NamedTuples with those fields all work; a
    missing field is null. A value of the wrong type raises :class:`RowValueError` naming
    the field (FromRows turns those into dead letters).
    """

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._children = _children(list(schema), "")

    def __call__(self, rows: Sequence[Any]) -> pa.RecordBatch:
        rows = list(rows)
        arrays = [child(rows) for child in self._children]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)
