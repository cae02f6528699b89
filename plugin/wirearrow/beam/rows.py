"""Beam rows: ToRows (Arrow batches -> schema'd rows), the row type of a plan or a whole
message, and RowsToArrow (rows back to Arrow), through one mapping between Arrow types and
Beam's, both ways (:func:`_mapped`): Beam has no unsigned integers and no nanosecond
instants. docs/beam.md, "ToRows", has the table."""

import collections
import datetime
import decimal
import functools
import keyword
import re
import typing
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.utils.timestamp import Timestamp

from wirearrow.beam.transcode import Outputs, ToArrow, keywords_of, output, with_keywords
from wirearrow.plans import resolve_plan
from wirearrow.transcoder import Transcoder

# What Arrow and Python raise for a value of the wrong type or range.
VALUE_ERRORS = (pa.ArrowException, TypeError, ValueError, OverflowError, AttributeError)


class RowValueError(ValueError):
    """A row holds a value its field's type cannot take; ``path`` names the field."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class _Mapped(NamedTuple):
    """A Beam type for an Arrow type, and the conversions of a column both ways."""

    hint: Any  # the Python type hint (Beam schema type) of a value
    to_python: Callable[[pa.Array], list]  # an Arrow array -> its values (None: null)
    to_arrow: Callable[[Sequence[Any]], pa.Array]  # values (None: null) -> an Arrow array


# Integer widths Beam has no type for get the signed type that holds every value.
_INTS = {
    pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
    pa.uint8(): np.int16, pa.uint16(): np.int32, pa.uint32(): np.int64,
}  # fmt: skip
# Types whose Python values Beam takes as they are: (test, hint).
_PLAIN = (
    (pa.types.is_float32, np.float32),
    (pa.types.is_float64, np.float64),
    (pa.types.is_boolean, bool),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), str),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), bytes),
    (pa.types.is_fixed_size_binary, bytes),
    (pa.types.is_date, datetime.date),
    (pa.types.is_decimal, decimal.Decimal),
)
_MICROS_PER = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": None}
_PYLIST = pa.Array.to_pylist


def _nullable(hint: Any, nullable: bool) -> Any:
    return Optional[hint] if nullable else hint  # noqa: UP045


def _mapped(t: pa.DataType, where: str) -> _Mapped | None:
    """The Beam side of Arrow type ``t`` (``where``: its field path, for errors), or None
    for a type rows leave out (null: always null on the way back)."""

    def as_is(values: Sequence[Any]) -> pa.Array:
        return pa.array(values, t)

    if t in _INTS:
        return _Mapped(_INTS[t], _PYLIST, as_is)
    if t == pa.uint64():
        # Same bits, read as int64 (what Java's protobuf runtime and Beam Java's proto
        # schemas do): values above 2**63 - 1 come out negative.
        return _Mapped(
            np.int64,
            lambda a: a.view(pa.int64()).to_pylist(),
            lambda v: pa.array(v, pa.int64()).view(pa.uint64()),
        )
    if pa.types.is_float16(t):
        return _Mapped(
            np.float32,
            lambda a: a.cast(pa.float32()).to_pylist(),
            lambda v: pa.array(v, pa.float32()).cast(t),
        )
    for test, hint in _PLAIN:
        if test(t):
            return _Mapped(hint, _PYLIST, as_is)
    if pa.types.is_timestamp(t) or pa.types.is_duration(t) or pa.types.is_time(t):
        return _micros(t)
    if pa.types.is_dictionary(t):
        inner = _mapped(t.value_type, where)
        if inner is None:
            return None
        return _Mapped(
            inner.hint,
            lambda a: inner.to_python(a.dictionary_decode()),
            lambda v: inner.to_arrow(v).dictionary_encode().cast(t),
        )
    if pa.types.is_map(t):
        return _map(t, where)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _list(t, where)
    if pa.types.is_struct(t):
        return _struct(t, where)
    if pa.types.is_null(t):
        return None
    raise TypeError(f"{where}: no Beam schema type for Arrow {t}")


def _micros(t: pa.DataType) -> _Mapped:
    """Timestamps as beam Timestamps (MicrosInstant); durations and times of day as int64
    microseconds. Nanoseconds are floored; the way back is exact for what rows hold."""
    factor = _MICROS_PER[t.unit]
    if pa.types.is_timestamp(t):
        micros_type: pa.DataType = pa.timestamp("us", t.tz)
    else:
        micros_type = pa.duration("us") if pa.types.is_duration(t) else pa.time64("us")

    def micros(array: pa.Array) -> list:
        values = array.cast(pa.int64()).to_pylist()
        if factor is None:
            return [None if v is None else v // 1000 for v in values]
        return values if factor == 1 else [None if v is None else v * factor for v in values]

    def to_python(array: pa.Array) -> list:
        if not pa.types.is_timestamp(t):
            return micros(array)
        return [None if v is None else Timestamp(micros=v) for v in micros(array)]

    def to_arrow(values: Sequence[Any]) -> pa.Array:
        ints = [v if v is None or isinstance(v, int) else v.micros for v in values]
        array = pa.array(ints, pa.int64()).view(micros_type)
        # The units ToRows converted from are exact multiples: the cast is lossless.
        return array if micros_type.equals(t) else array.cast(t)

    return _Mapped(Timestamp if pa.types.is_timestamp(t) else np.int64, to_python, to_arrow)


def _split(values: list, lengths: list) -> list:
    """``values`` cut into consecutive lists of ``lengths`` (None: a null list)."""
    out: list = []
    pos = 0
    for length in lengths:
        if length is None:
            out.append(None)
        else:
            out.append(values[pos : pos + length])
            pos += length
    return out


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


def _list(t: pa.DataType, where: str) -> _Mapped | None:
    inner = _mapped(t.value_type, f"{where}[*]")
    if inner is None:
        return None

    def to_python(array: pa.Array) -> list:
        # flatten() honours slicing and skips null lists
        return _split(inner.to_python(array.flatten()), array.value_lengths().to_pylist())

    def to_arrow(values: Sequence[Any]) -> pa.Array:
        if pa.types.is_fixed_size_list(t):
            return pa.array(values, t)
        offsets, mask, items = _offsets(values)
        return pa.ListArray.from_arrays(offsets, inner.to_arrow(items), type=t, mask=mask)

    hint: Any = _nullable(inner.hint, t.value_field.nullable)
    return _Mapped(typing.Sequence[hint], to_python, to_arrow)


def _map(t: pa.MapType, where: str) -> _Mapped | None:
    key = _mapped(t.key_type, f"{where}.key")
    item = _mapped(t.item_type, f"{where}[*]")
    if key is None or item is None:
        return None
    # pyarrow has no flatten for maps that honours slicing: view it as a list of entries.
    entries_type = pa.list_(pa.field("entries", pa.struct([t.key_field, t.item_field]), False))

    def to_python(array: pa.Array) -> list:
        as_list = array.cast(entries_type)
        entries = as_list.flatten()
        pairs = zip(key.to_python(entries.field(0)), item.to_python(entries.field(1)), strict=True)
        lists = _split(list(pairs), as_list.value_lengths().to_pylist())
        return [None if one is None else dict(one) for one in lists]

    def to_arrow(values: Sequence[Any]) -> pa.Array:
        offsets, mask, pairs = _offsets([None if v is None else list(v.items()) for v in values])
        keys, items = key.to_arrow([k for k, _ in pairs]), item.to_arrow([i for _, i in pairs])
        return pa.MapArray.from_arrays(offsets, keys, items, type=t, mask=mask)

    key_hint: Any = key.hint
    item_hint: Any = _nullable(item.hint, t.item_field.nullable)
    return _Mapped(typing.Mapping[key_hint, item_hint], to_python, to_arrow)


def _struct(t: pa.StructType, where: str) -> _Mapped:
    """A nested row (an empty message: a row with no fields, which RowCoder takes)."""
    fields = list(t)
    row = _Row(fields, where)

    def to_python(array: pa.Array) -> list:
        valid = array.is_valid().to_pylist()
        if not row.names:
            return [row.cls() if ok else None for ok in valid]
        # flatten() folds the struct's nulls into its children's, and honours slicing.
        rows = row.to_rows(array.flatten())
        return [r if ok else None for ok, r in zip(valid, rows, strict=True)]

    def to_arrow(values: Sequence[Any]) -> pa.Array:
        nulls = [v is None for v in values]
        if not fields:  # no child to take the length from
            return pa.array([None if null else {} for null in nulls], t)
        mask = pa.array(nulls, pa.bool_()) if any(nulls) else None
        return pa.StructArray.from_arrays(row.to_columns(values), fields=fields, mask=mask)

    return _Mapped(row.cls, to_python, to_arrow)


class _Row:
    """The row type (a NamedTuple) of some Arrow fields, and their conversions: columns ->
    rows, rows -> columns. Fields rows leave out (null type) are null on the way back."""

    def __init__(self, fields: list[pa.Field], where: str, name: str | None = None) -> None:
        self.fields = fields
        self.mapped = []  # per field: (path, _Mapped or None)
        self.names: list[str] = []  # the row's field name of each kept field
        taken: set[str] = set()
        members = []
        for f in fields:
            path = f"{where}.{f.name}" if where else f.name
            mapped = _mapped(f.type, path)
            self.mapped.append((path, mapped))
            if mapped is not None:
                self.names.append(_identifier(f.name, taken))
                members.append((self.names[-1], _nullable(mapped.hint, f.nullable)))
        name = name or "Row_" + (re.sub(r"\W+", "_", where).strip("_") or "root")
        self.cls = _picklable(NamedTuple(name, members))  # type: ignore[arg-type]

    def to_rows(self, columns: Sequence[pa.Array]) -> list:
        values = [m.to_python(c) for c, (_, m) in zip(columns, self.mapped, strict=True) if m]
        return [self.cls(*row) for row in zip(*values, strict=True)]

    def to_columns(self, rows: Sequence[Any]) -> list[pa.Array]:
        names = iter(self.names)
        columns = []
        for f, (path, mapped) in zip(self.fields, self.mapped, strict=True):
            if mapped is None:
                columns.append(pa.nulls(len(rows), f.type))
                continue
            # Rows are read by field name: a NamedTuple, a beam.Row or any object with them.
            name = next(names)
            values = [None if r is None else getattr(r, name, None) for r in rows]
            try:
                columns.append(mapped.to_arrow(values))
            except RowValueError:
                raise
            except VALUE_ERRORS as err:  # the innermost field that failed names it
                raise RowValueError(path, str(err)) from err
        return columns


def _identifier(name: str, taken: set[str]) -> str:
    """A NamedTuple field name for an Arrow field name ("imp[*].id" -> "imp_id")."""
    base = re.sub(r"\W+", "_", name).strip("_") or "field"
    if base[0].isdigit():
        base = f"f_{base}"
    if keyword.iskeyword(base):
        base += "_"
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}_{n}", n + 1
    taken.add(candidate)
    return candidate


def _picklable(cls: type) -> type:
    """Let instances of a dynamically made row class pickle, by value: a coder for an
    untyped PCollection pickles them, and pickle finds no ``wirearrow.beam.<name>``. They
    come back as a namedtuple of the same name and fields."""
    cls.__reduce__ = _row_reduce  # type: ignore[method-assign, assignment]
    return cls


def _row_reduce(self: Any) -> tuple:
    return _rebuild_row, (type(self).__name__, self._fields, tuple(self))


@functools.cache
def _row_class(name: str, fields: tuple[str, ...]) -> type:
    return _picklable(collections.namedtuple(name, fields))


def _rebuild_row(name: str, fields: tuple[str, ...], values: tuple) -> Any:
    return _row_class(name, fields)(*values)


def _top_row(schema: pa.Schema, name: str) -> _Row:
    row = _Row(list(schema), "", name)
    if not row.names:
        raise TypeError("no column of this schema has a Beam type: cannot build rows")
    return row


def row_type(schema: pa.Schema, name: str = "WirearrowRow") -> type:
    """The NamedTuple type (a Beam schema) of rows of Arrow ``schema``, as ToRows builds it
    (docs/beam.md, "ToRows", has the mapping of types and names)."""
    return _top_row(schema, name).cls


def whole_message(plan: Any, on_error: str | None = None, **options: Any) -> Transcoder:
    """The whole-message Transcoder of ``plan``: a wirearrow ``Schema``, a generated message
    class, a ``Descriptor``, a whole-message YAML plan or Transcoder (no ``columns``), with
    ``options`` (``timestamp_unit``, ``enums``, ...)."""
    transcoder = resolve_plan(plan, on_error=on_error).transcoder
    if options:
        transcoder = transcoder.replace(**options)
    if transcoder.spec.columns is not None:
        raise ValueError("a Beam schema of a message needs a whole-message plan (no columns=)")
    return transcoder


def message_row_type(message: Any, name: str | None = None, **options: Any) -> type:
    """The Beam schema (a NamedTuple registered with RowCoder) of a whole protobuf message
    (``message`` and ``options`` as for :func:`whole_message`; docs/beam.md, "Beam schemas
    from protobuf")."""
    transcoder = whole_message(message, **options)
    cls = row_type(
        transcoder.arrow_schema, name or transcoder.schema.message_name.rsplit(".", 1)[-1]
    )
    beam.coders.registry.register_coder(cls, beam.coders.RowCoder)
    return cls


class RowsToArrow:
    """Beam rows -> a pa.RecordBatch of ``schema``: the inverse of ToRows' conversion, by
    field name (any object with the fields; a missing one is null). A value of the wrong
    type raises :class:`RowValueError` naming the field."""

    def __init__(self, schema: pa.Schema) -> None:
        self.schema = schema
        self._row = _Row(list(schema), "")

    def __call__(self, rows: Sequence[Any]) -> pa.RecordBatch:
        return pa.RecordBatch.from_arrays(self._row.to_columns(list(rows)), schema=self.schema)


class _RowsFn(beam.DoFn):
    """pa.RecordBatch -> one row (NamedTuple) per Arrow row."""

    def __init__(self, schema: pa.Schema, name: str) -> None:
        super().__init__()
        self._schema = schema
        self._name = name

    def setup(self) -> None:
        # The row class is rebuilt here from the Arrow schema, not unpickled: it is a
        # dynamically made class, and rebuilding works with every pickler. RowCoder reads
        # the fields by name, so it encodes these rows under the registered schema.
        self._row = _top_row(self._schema, self._name)

    def process(self, batch: pa.RecordBatch) -> Iterator[Any]:
        yield from self._row.to_rows(batch.columns)


class RowsResult(Outputs):
    """ToRows' outputs: ``rows``, ``dead_letters`` (DeadLetter) and ``row_type``."""

    rows = output("rows", "a schema'd PCollection of .row_type (NamedTuple, RowCoder)")


class ToRows(beam.PTransform):
    """Protobuf records to Beam rows of the plan's Arrow schema (:func:`row_type`): takes
    :class:`ToArrow`'s arguments and ``type_name``; returns ``.rows`` (schema'd, RowCoder),
    ``.dead_letters`` and ``.row_type``."""

    def __init__(
        self, plan: Any, input: Any = None, *, type_name: str = "WirearrowRow", **options: Any
    ) -> None:
        super().__init__()
        self._to_arrow = ToArrow(plan, input, **options)
        self._type_name = type_name
        self.row_type = row_type(self._to_arrow.schema, type_name)
        beam.coders.registry.register_coder(self.row_type, beam.coders.RowCoder)

    def expand(self, pcoll: beam.PCollection):  # -> RowsResult (Beam reads annotations)
        arrow = pcoll | "ToArrow" >> self._to_arrow
        rows = arrow.batches | "ToRows" >> beam.ParDo(
            _RowsFn(self._to_arrow.schema, self._type_name)
        ).with_output_types(self.row_type)
        return RowsResult("rows", rows, arrow.dead_letters, arrow._dead_key, row_type=self.row_type)


with_keywords(ToRows.__init__, keywords_of(ToArrow.__init__, 3))  # (self, plan, input)
