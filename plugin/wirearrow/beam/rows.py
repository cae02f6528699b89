"""ToRows: Arrow record batches -> schema'd Beam rows (a NamedTuple registered with RowCoder)."""

import keyword
import re
import typing
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.utils.timestamp import Timestamp

from wirearrow.beam.transcode import DEFAULT_BATCH_SIZE, ToArrow, dead_letter_tag

# =========================================================================== ToRows

Converter = Callable[[pa.Array], list]

# Integer widths Beam has no type for, and the signed type that holds every value.
_WIDER_SIGNED = {
    pa.uint8(): np.int16,
    pa.uint16(): np.int32,
    pa.uint32(): np.int64,
}
_SIGNED = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64}
_MICROS_PER = {"s": 1_000_000, "ms": 1_000, "us": 1, "ns": None}


def _pylist(array: pa.Array) -> list:
    return array.to_pylist()


def _to_micros(unit: str) -> Callable[[pa.Array], list]:
    """Integers of ``unit`` as microseconds (nanoseconds are floored), nulls kept."""
    factor = _MICROS_PER[unit]

    def convert(array: pa.Array) -> list:
        values = array.cast(pa.int64()).to_pylist()
        if factor is None:
            return [None if v is None else v // 1000 for v in values]
        if factor == 1:
            return values
        return [None if v is None else v * factor for v in values]

    return convert


def _timestamps(unit: str) -> Converter:
    micros = _to_micros(unit)

    def convert(array: pa.Array) -> list:
        return [None if v is None else Timestamp(micros=v) for v in micros(array)]

    return convert


def _uint64_bits(array: pa.Array) -> list:
    # Same bits, read as int64 (what Java's protobuf runtime and Beam Java's proto schemas
    # do): values above 2**63 - 1 come out negative.
    return array.view(pa.int64()).to_pylist()


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


def _beam_type(t: pa.DataType, where: str) -> tuple[Any, Converter] | None:
    """(Beam-compatible Python type, converter of an Arrow array of ``t``), or None to drop.

    Dropped: the null type (a struct with no fields is a row with no fields).
    """
    if t in _SIGNED:
        return _SIGNED[t], _pylist
    if t in _WIDER_SIGNED:
        return _WIDER_SIGNED[t], _pylist
    if t == pa.uint64():
        return np.int64, _uint64_bits
    if pa.types.is_float16(t):
        return np.float32, lambda a: a.cast(pa.float32()).to_pylist()
    if pa.types.is_float32(t):
        return np.float32, _pylist
    if pa.types.is_float64(t):
        return np.float64, _pylist
    if pa.types.is_boolean(t):
        return bool, _pylist
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return str, _pylist
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return bytes, _pylist
    if pa.types.is_timestamp(t):
        return Timestamp, _timestamps(t.unit)
    if pa.types.is_duration(t):
        return np.int64, _to_micros(t.unit)
    if pa.types.is_time(t):
        return np.int64, _to_micros(t.unit)  # microseconds since midnight
    if pa.types.is_date(t):
        return _date_type(), _pylist
    if pa.types.is_decimal(t):
        import decimal

        return decimal.Decimal, _pylist
    if pa.types.is_dictionary(t):
        inner = _beam_type(t.value_type, where)
        if inner is None:
            return None
        hint, convert = inner
        return hint, lambda a: convert(a.dictionary_decode())
    if pa.types.is_map(t):
        return _map_type(t, where)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _list_type(t, where)
    if pa.types.is_struct(t):
        return _struct_type(t, where)
    if pa.types.is_null(t):
        return None
    raise TypeError(f"{where}: no Beam schema type for Arrow {t}")


def _date_type() -> Any:
    import datetime

    return datetime.date


def _nullable(hint: Any, nullable: bool) -> Any:
    return Optional[hint] if nullable else hint  # noqa: UP045


def _list_type(t: pa.DataType, where: str) -> tuple[Any, Converter] | None:
    inner = _beam_type(t.value_type, f"{where}[*]")
    if inner is None:
        return None
    hint, convert_values = inner
    hint = _nullable(hint, t.value_field.nullable)

    def convert(array: pa.Array) -> list:
        values = convert_values(array.flatten())  # honours slicing, skips null lists
        out: list = []
        pos = 0
        for length in array.value_lengths().to_pylist():
            if length is None:
                out.append(None)
            else:
                out.append(values[pos : pos + length])
                pos += length
        return out

    return typing.Sequence[hint], convert  # type: ignore[valid-type]  # built at run time


def _map_type(t: pa.MapType, where: str) -> tuple[Any, Converter] | None:
    key = _beam_type(t.key_type, f"{where}.key")
    item = _beam_type(t.item_type, f"{where}[*]")
    if key is None or item is None:
        return None
    key_hint, convert_keys = key
    item_hint, convert_items = item
    item_hint = _nullable(item_hint, t.item_field.nullable)

    # pyarrow has no flatten for maps that honours slicing: view it as a list of entries.
    entries_type = pa.list_(pa.field("entries", pa.struct([t.key_field, t.item_field]), False))

    def convert(array: pa.Array) -> list:
        as_list = array.cast(entries_type)
        entries = as_list.flatten()
        keys = convert_keys(entries.field(0))
        items = convert_items(entries.field(1))
        out: list = []
        pos = 0
        for length in as_list.value_lengths().to_pylist():
            if length is None:
                out.append(None)
            else:
                out.append(
                    dict(zip(keys[pos : pos + length], items[pos : pos + length], strict=True))
                )
                pos += length
        return out

    return typing.Mapping[key_hint, item_hint], convert  # type: ignore[valid-type]


def _struct_type(t: pa.StructType, where: str) -> tuple[Any, Converter] | None:
    fields = [t.field(i) for i in range(t.num_fields)]
    row_class, kept, converters = _row_fields(fields, where)
    if not kept:  # an empty message: a row with no fields (RowCoder takes those)
        return row_class, lambda array: [
            row_class() if ok else None for ok in array.is_valid().to_pylist()
        ]

    def convert(array: pa.Array) -> list:
        # flatten() folds the struct's nulls into its children's, and honours slicing.
        children = array.flatten()
        columns = [
            convert_child(children[i]) for i, convert_child in zip(kept, converters, strict=True)
        ]
        valid = array.is_valid().to_pylist()
        return [
            row_class(*values) if ok else None
            for ok, values in zip(valid, zip(*columns, strict=True), strict=True)
        ]

    return row_class, convert


def _row_fields(fields: list[pa.Field], where: str) -> tuple[type, list[int], list[Converter]]:
    """A NamedTuple class for ``fields``, the kept field positions and their converters."""
    taken: set[str] = set()
    members: list[tuple[str, Any]] = []
    kept: list[int] = []
    converters: list[Converter] = []
    for i, f in enumerate(fields):
        path = f"{where}.{f.name}" if where else f.name
        mapped = _beam_type(f.type, path)
        if mapped is None:
            continue
        hint, convert = mapped
        members.append((_identifier(f.name, taken), _nullable(hint, f.nullable)))
        kept.append(i)
        converters.append(convert)
    name = "Row_" + (re.sub(r"\W+", "_", where).strip("_") or "root")
    return _picklable(NamedTuple(name, members)), kept, converters  # type: ignore[arg-type]


def _picklable(cls: type) -> type:
    """Let instances of a dynamically made row class pickle (by value, like Beam's own).

    Rows normally travel with RowCoder; a coder for an untyped PCollection pickles them,
    and pickle finds no ``wirearrow.beam.<name>`` to refer to. They come back as instances
    of a namedtuple with the same name and fields (so attribute access still works).
    """
    cls.__reduce__ = _row_reduce  # type: ignore[method-assign, assignment]
    return cls


def _row_reduce(self: Any) -> tuple:
    return _rebuild_row, (type(self).__name__, self._fields, tuple(self))


_ROW_CLASSES: dict[tuple[str, tuple[str, ...]], type] = {}


def _rebuild_row(name: str, fields: tuple[str, ...], values: tuple) -> Any:
    cls = _ROW_CLASSES.get((name, fields))
    if cls is None:
        import collections

        cls = _ROW_CLASSES[(name, fields)] = _picklable(collections.namedtuple(name, fields))
    return cls(*values)


def row_type(schema: pa.Schema, name: str = "WirearrowRow") -> type:
    """The NamedTuple type (a Beam schema) of rows of Arrow ``schema``, as ToRows builds it.

    Mapping (Beam has no unsigned integers and no nanosecond instant): int8..int64 as is;
    uint8 -> INT16, uint16 -> INT32, uint32 -> INT64, uint64 -> INT64 with the same bits
    (values over 2**63-1 read negative); timestamps -> beam Timestamp (MicrosInstant,
    nanoseconds floored to microseconds); durations and times of day -> int64 microseconds;
    date -> datetime.date; enums (int32) as int32; lists -> Sequence, maps -> Mapping,
    structs -> nested rows (an empty message: a row with no fields); null columns are dropped. Field names that are not
    Python identifiers are rewritten ("imp[*].id" -> "imp_id").
    """
    return _row_converter(schema, name)[0]


def _row_converter(schema: pa.Schema, name: str) -> tuple[type, Callable[[pa.RecordBatch], list]]:
    built = _row_fields(list(schema), "")
    _, kept, converters = built
    if not kept:
        raise TypeError("no column of this schema has a Beam type: cannot build rows")
    # The top-level type gets the requested name (nested ones are named by their path).
    fields = list(built[0].__annotations__.items())
    cls = _picklable(NamedTuple(name, fields))  # type: ignore[arg-type]

    def convert(batch: pa.RecordBatch) -> list:
        columns = [c(batch.column(i)) for i, c in zip(kept, converters, strict=True)]
        return [cls(*values) for values in zip(*columns, strict=True)]

    return cls, convert


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
        self._convert = _row_converter(self._schema, self._name)[1]

    def process(self, batch: pa.RecordBatch) -> Iterator[Any]:
        yield from self._convert(batch)


class RowsResult(dict):
    """What :class:`ToRows` returns: ``rows``, ``dead_letters`` and ``row_type``."""

    def __init__(
        self,
        rows: beam.PCollection,
        dead_letters: beam.PCollection,
        row_type: type,
        dead_letter_key: str = "dead_letters",
    ) -> None:
        super().__init__({"rows": rows, dead_letter_key: dead_letters})
        self.row_type = row_type
        self._dead_letter_key = dead_letter_key

    @property
    def rows(self) -> beam.PCollection:
        return self["rows"]

    @property
    def dead_letters(self) -> beam.PCollection:
        return self[self._dead_letter_key]


class ToRows(beam.PTransform):
    """Protobuf records to Beam rows whose schema comes from the plan's Arrow schema.

    Takes what :class:`ToArrow` takes. Returns a :class:`RowsResult`: ``.rows`` (a
    schema'd PCollection of ``.row_type``, a NamedTuple registered with RowCoder) and
    ``.dead_letters``. See :func:`row_type` for the type mapping.

    Args:
        plan: as for ToArrow.
        batch_size: as for ToArrow.
        on_error: as for ToArrow.
        field: as for ToArrow.
        error_handling: as for ToArrow.
        type_name: the name of the row type.
    """

    def __init__(
        self,
        plan: Any,
        batch_size: int = DEFAULT_BATCH_SIZE,
        on_error: Optional[str] = None,  # noqa: UP045
        field: str = "value",
        error_handling: Optional[Mapping[str, str]] = None,  # noqa: UP045
        type_name: str = "WirearrowRow",
    ) -> None:
        super().__init__()
        self._to_arrow = ToArrow(plan, batch_size, on_error, field, error_handling)
        self._type_name = type_name
        self.row_type = row_type(self._to_arrow.schema, type_name)
        beam.coders.registry.register_coder(self.row_type, beam.coders.RowCoder)
        self._dead_key = dead_letter_tag(error_handling)

    def expand(self, pcoll: beam.PCollection):  # -> RowsResult (Beam reads annotations)
        arrow = pcoll | "ToArrow" >> self._to_arrow
        rows = arrow.batches | "ToRows" >> beam.ParDo(
            _RowsFn(self._to_arrow.schema, self._type_name)
        ).with_output_types(self.row_type)
        return RowsResult(rows, arrow.dead_letters, self.row_type, self._dead_key)
