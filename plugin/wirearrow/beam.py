"""Apache Beam transforms: protobuf records to Arrow record batches, Beam rows and Parquet.

    import apache_beam as beam
    import wirearrow.beam as wab

    with beam.Pipeline(options=opts) as p:
        records = p | wab.ReadDelimited("gs://bucket/events/*.bin", framing="varint")
        result = records | wab.ToArrow("transforms/openrtb_flat.yaml", batch_size=8192)
        result.batches | wab.WriteToParquet("gs://bucket/out/", schema=result.schema)
        result.dead_letters | beam.Map(str) | beam.io.WriteToText("gs://bucket/dead/")

The public PTransforms only wire the graph; the work happens in private DoFns whose heavy
state (the compiled plan) is built in ``setup()`` on the worker. docs/beam.md is the guide.
"""

import hashlib
import keyword
import logging
import pickle
import random
import re
import typing
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam import pvalue
from apache_beam.io import fileio
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics
from apache_beam.options.value_provider import StaticValueProvider
from apache_beam.transforms import trigger as beam_trigger
from apache_beam.transforms import window as beam_window
from apache_beam.typehints.batch import BATCH_CONVERTER_REGISTRY, BatchConverter
from apache_beam.utils.shared import Shared
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue

from wirearrow.cache import resolve_profile
from wirearrow.delimited import FRAMINGS, FrameReader, Frames, Tail, plan_pieces
from wirearrow.transcoder import Transcoder

__all__ = [
    "ArrowResult",
    "DeadLetter",
    "ReadDelimited",
    "RecordArray",
    "RowsResult",
    "ToArrow",
    "ToRows",
    "WriteToParquet",
    "row_type",
]

_LOG = logging.getLogger(__name__)

METRICS_NAMESPACE = "wirearrow"
DEFAULT_BATCH_SIZE = 8192
DEFAULT_CHUNK_BYTES = 64 * 1024 * 1024
# Reads go through the Beam filesystem in blocks of this size: big enough that object
# stores serve them at full speed, small enough to bound a reader's memory.
_READ_BLOCK_BYTES = 8 * 1024 * 1024


# =========================================================================== dead letters


class DeadLetter(NamedTuple):
    """A record that produced no rows: a Beam Row (schema'd, RowCoder).

    ``index`` is the record's position in the batch it was transcoded with and ``offset``
    the byte inside the record where decoding failed (docs/errors.md); ``path`` the field
    path, ``reason`` the error text, ``raw`` the record's bytes (None for a null record).
    ``key`` is the element's key for ``(key, bytes)`` input (as text), else None.
    """

    index: int
    offset: int
    path: str
    reason: str
    raw: Optional[bytes]  # noqa: UP045 (Beam's typehint conversion needs typing.Optional)
    key: Optional[str]  # noqa: UP045


beam.coders.registry.register_coder(DeadLetter, beam.coders.RowCoder)


def _key_text(key: object) -> str | None:
    if key is None or isinstance(key, str):
        return key
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key).decode("utf-8", "backslashreplace")
    return str(key)


# =========================================================================== plans


def _resolve_transcoder(plan: object, on_error: str | None) -> Transcoder:
    """The launcher-side Transcoder of ``plan``; its pickle is what the workers get.

    A plan (path, YAML text, mapping, PlanConfig) is loaded here, on the machine that builds
    the pipeline, so the workers need neither the YAML file nor the .proto files: the
    Transcoder pickles as its descriptor set and column list.
    """
    if isinstance(plan, Transcoder):
        if on_error is not None:
            raise ValueError("on_error= applies to a plan; a Transcoder keeps its own policy")
        return plan
    from wirearrow.config import load_plan  # YAML machinery: only where plans are built

    config = load_plan(plan)  # type: ignore[arg-type]
    policy = on_error or "dead_letter"
    return config.with_options(on_error=policy).transcoder()


def _private_copy(shared: Transcoder) -> Transcoder:
    """A Transcoder of ``shared``'s spec, with its own counters and dead letters.

    ``Transcoder.dead_letters()`` hands out (and forgets) every dead letter gathered since
    the last call, so two threads on one instance could take each other's. Each DoFn
    instance gets its own; the compiled plan is shared through the parser cache (a hit).
    """
    return Transcoder(shared.spec, cache=shared.cache)


# =========================================================================== batches


class RecordArray:
    """A batch of records as one Arrow ``BinaryArray``: ReadDelimited's batch type.

    Beam's batched DoFns pass batches between fused DoFns that both take them, so records
    go from the file buffer to the transcoder with no Python object per record. A DoFn
    that takes single elements gets each record as ``bytes`` instead (Beam explodes the
    batch). Beam's own pyarrow Array converter cannot be used: it asks arrays for
    ``num_rows`` (Beam 2.77).
    """

    __slots__ = ("array",)

    def __init__(self, array: pa.Array) -> None:
        self.array = array

    def __len__(self) -> int:
        return len(self.array)

    def __repr__(self) -> str:
        return f"RecordArray({len(self.array)} records, {self.array.nbytes} bytes)"


class _RecordArrayConverter(BatchConverter):
    def __init__(self) -> None:
        super().__init__(RecordArray, bytes)

    def produce_batch(self, elements: Any) -> RecordArray:
        return RecordArray(pa.array(list(elements), pa.binary()))

    def explode_batch(self, batch: RecordArray) -> Iterator[bytes]:
        return iter(batch.array.to_pylist())

    def combine_batches(self, batches: Any) -> RecordArray:
        return RecordArray(pa.concat_arrays(_same_type([b.array for b in batches])))

    def get_length(self, batch: RecordArray) -> int:
        return len(batch.array)

    def estimate_byte_size(self, batch: RecordArray) -> int:
        return batch.array.nbytes


def _record_array_converter(element_type: Any, batch_type: Any) -> BatchConverter:
    if batch_type is not RecordArray:
        raise TypeError("batch type must be wirearrow.beam.RecordArray")
    if element_type is not bytes:
        raise TypeError(f"RecordArray batches hold bytes, not {element_type}")
    return _RecordArrayConverter()


if "wirearrow.RecordArray" not in BATCH_CONVERTER_REGISTRY:  # a module reload registers once
    BatchConverter.register(name="wirearrow.RecordArray")(_record_array_converter)


# =========================================================================== ToArrow


class ArrowResult(dict):
    """What :class:`ToArrow` returns: ``batches``, ``dead_letters`` and ``schema``.

    A dict of the two PCollections (so Beam YAML sees named outputs ``batches`` and
    ``dead_letters``, or the ``error_handling`` output name) with attribute access.
    """

    def __init__(
        self,
        batches: beam.PCollection,
        dead_letters: beam.PCollection,
        schema: pa.Schema,
        dead_letter_key: str = "dead_letters",
    ) -> None:
        super().__init__({"batches": batches, dead_letter_key: dead_letters})
        self.schema = schema
        self._dead_letter_key = dead_letter_key

    @property
    def batches(self) -> beam.PCollection:
        """PCollection[pa.RecordBatch], each with :attr:`schema`."""
        return self["batches"]

    @property
    def dead_letters(self) -> beam.PCollection:
        """PCollection[DeadLetter]."""
        return self[self._dead_letter_key]


class _Buffer:
    """The records of one window waiting for a batch, and their latest timestamp."""

    __slots__ = ("keys", "records", "timestamp")

    def __init__(self, timestamp: Timestamp) -> None:
        self.records: list = []
        self.keys: list = []
        self.timestamp = timestamp


class _TranscodeFn(beam.DoFn):
    """Buffers records per window; transcodes a batch at ``batch_size`` and at bundle end.

    Main output: pa.RecordBatch. Tagged output ``dead_tag``: DeadLetter. Each output is in
    the window of its records, with the latest timestamp among them (which lies in that
    window, and is never earlier than a record it came from).
    """

    def __init__(self, spec: bytes, batch_size: int, field: str, dead_tag: str) -> None:
        super().__init__()
        # The Transcoder travels pickled: unpickling compiles the plan, which happens once
        # per worker process, in setup(), through the Shared cache.
        self._spec = spec
        self._spec_hash = hashlib.sha256(spec).hexdigest()
        self._shared = Shared()
        self._batch_size = batch_size
        self._field = field
        self._dead_tag = dead_tag
        self._records_in = Metrics.counter(METRICS_NAMESPACE, "records_in")
        self._rows_out = Metrics.counter(METRICS_NAMESPACE, "rows_out")
        self._records_failed = Metrics.counter(METRICS_NAMESPACE, "records_failed")
        self._batches_out = Metrics.counter(METRICS_NAMESPACE, "batches_out")
        # Record batches received whole from a batch-producing source (ReadDelimited).
        self._arrays_in = Metrics.counter(METRICS_NAMESPACE, "record_arrays_in")

    def _compile(self) -> Transcoder:
        return pickle.loads(self._spec)

    def setup(self) -> None:
        # Shared keeps only a weak reference: this strong one keeps the plan alive for as
        # long as any DoFn instance of this process uses it.
        self._prototype = self._shared.acquire(self._compile, tag=self._spec_hash)
        self._tc = _private_copy(self._prototype)
        self._buffers: dict[beam_window.BoundedWindow, _Buffer] = {}

    def start_bundle(self) -> None:
        self._buffers = {}

    def process(
        self,
        element: Any,
        window: Any = beam.DoFn.WindowParam,
        timestamp: Any = beam.DoFn.TimestampParam,
    ) -> Iterator[Any]:
        buf = self._buffers.get(window)
        if buf is None:
            buf = self._buffers[window] = _Buffer(timestamp)
        elif timestamp > buf.timestamp:
            buf.timestamp = timestamp
        if type(element) is bytes:
            buf.records.append(element)
            buf.keys.append(None)
        else:
            key, record = self._unpack(element)
            buf.records.append(record)
            buf.keys.append(key)
        if len(buf.records) >= self._batch_size:
            del self._buffers[window]
            yield from self._emit(buf.records, buf.keys, buf.timestamp, window)

    def _unpack(self, element: Any) -> tuple[Any, Any]:
        """(key, record) of a (key, bytes) pair or a Row; a bytes-like record as is."""
        if isinstance(element, bytes | bytearray | memoryview) or element is None:
            return None, element
        if isinstance(element, tuple) and not hasattr(element, "_fields"):
            if len(element) != 2:
                raise TypeError(f"ToArrow takes bytes, (key, bytes) or rows, not {element!r:.80}")
            return element
        try:
            return None, getattr(element, self._field)
        except AttributeError:
            raise TypeError(
                f"ToArrow: {type(element).__name__} element has no field {self._field!r} "
                "(pass field= to name the bytes field of a row)"
            ) from None

    def finish_bundle(self) -> Iterator[Any]:
        buffers, self._buffers = self._buffers, {}
        for window, buf in buffers.items():
            yield from self._emit(buf.records, buf.keys, buf.timestamp, window)

    def _emit(self, records: list, keys: list, timestamp: Any, window: Any) -> Iterator[Any]:
        # Outputs are WindowedValues: in finish_bundle there is no input element whose
        # window Beam could use, and in process the buffered records may be older than
        # the current one.
        windows = (window,)
        batch, dead = self._transcode(records, keys)
        if batch.num_rows:
            yield WindowedValue(batch, timestamp, windows)
        for letter in dead:
            yield pvalue.TaggedOutput(self._dead_tag, WindowedValue(letter, timestamp, windows))

    def _transcode(self, records: Any, keys: list | None) -> tuple[pa.RecordBatch, list]:
        tc = self._tc
        before = tc.stats
        batch = tc.transcode(records)
        after = tc.stats
        dead = []
        table = tc.dead_letters()
        if table.num_rows:
            index = table.column("index").to_pylist()
            offset = table.column("offset").to_pylist()
            path = table.column("path").to_pylist()
            reason = table.column("reason").to_pylist()
            raw = table.column("raw").to_pylist()
            for i in range(table.num_rows):
                key = _key_text(keys[index[i]]) if keys else None
                dead.append(DeadLetter(index[i], offset[i], path[i], reason[i], raw[i], key))
        self._records_in.inc(after.records_in - before.records_in)
        self._records_failed.inc(after.records_failed - before.records_failed)
        self._rows_out.inc(batch.num_rows)
        self._batches_out.inc(1)
        return batch, dead


class _TranscodeBytesFn(_TranscodeFn):
    """_TranscodeFn that also takes whole batches of bytes (Beam's batched DoFns).

    When the producer emits batches (ReadDelimited does) and is fused with this DoFn, Beam
    hands over its RecordArrays as they are: no per-record call at all. Otherwise Beam calls
    process() per record, as for any DoFn.
    """

    def get_input_batch_type(self, input_element_type: Any) -> Any:
        return RecordArray

    @beam.DoFn.yields_elements
    def process_batch(self, batch: RecordArray) -> Iterator[Any]:
        # A batch is homogeneous in window and timestamp: Beam gives every output the
        # batch's own, so plain values (and TaggedOutputs of plain values) are right here.
        array, size = batch.array, self._batch_size
        self._arrays_in.inc()
        for start in range(0, len(array), size):
            part = array.slice(start, size) if len(array) > size else array
            table, dead = self._transcode(part, None)
            if table.num_rows:
                yield table
            for letter in dead:
                yield pvalue.TaggedOutput(self._dead_tag, letter)


def _is_bytes_type(element_type: Any) -> bool:
    return (
        element_type in (bytes, typing.ByteString) or getattr(element_type, "type", None) is bytes
    )


class ToArrow(beam.PTransform):
    """Protobuf records to Arrow record batches, with the records that fail on the side.

    Input: a PCollection of ``bytes`` records, of ``(key, bytes)`` pairs, or of rows with a
    bytes field named ``field`` (default ``"value"``).

    Returns an :class:`ArrowResult`: ``.batches`` (pa.RecordBatch, each of at most
    ``batch_size`` records' rows and of ``.schema``), ``.dead_letters`` (:class:`DeadLetter`
    rows) and ``.schema``, the plan's Arrow schema, known before the pipeline runs.

    Args:
        plan: a YAML plan (file path, YAML text or mapping, see docs/yaml.md), a
            ``wirearrow.PlanConfig`` or a ``wirearrow.Transcoder``. Loaded and compiled
            here, where the pipeline is built; the workers receive the compiled schema.
        batch_size: records per transcoded batch (an upper bound: the end of a bundle
            flushes whatever is buffered).
        on_error: "dead_letter" (default, whatever the plan says), "skip" or "raise" (a
            bad record fails the bundle). Not allowed with a Transcoder.
        field: the bytes field of row elements.
        error_handling: Beam YAML's ``{"output": name}``: names the dead-letter output.
        profile: a saved parser profile (path, read here) or a ``wirearrow.ParserCache``:
            the plan is compiled on that cache, which travels with the DoFn and is one
            instance per worker process (its profile shared by the process's DoFns, see
            docs/cache.md).
    """

    def __init__(
        self,
        plan: Any,
        batch_size: int = DEFAULT_BATCH_SIZE,
        on_error: Optional[str] = None,  # noqa: UP045 (Beam YAML reads these annotations)
        field: str = "value",
        error_handling: Optional[Mapping[str, str]] = None,  # noqa: UP045
        profile: Optional[Any] = None,  # noqa: UP045
    ) -> None:
        super().__init__()
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        transcoder = _resolve_transcoder(plan, on_error)
        if profile is not None:
            transcoder = Transcoder(transcoder.spec, cache=resolve_profile(profile))
        self.schema: pa.Schema = transcoder.arrow_schema
        self._spec = pickle.dumps(transcoder, protocol=pickle.HIGHEST_PROTOCOL)
        self._batch_size = int(batch_size)
        self._field = field
        self._dead_key = _error_output(error_handling)

    def expand(self, pcoll: beam.PCollection):  # -> ArrowResult (Beam reads annotations)
        fn_class = _TranscodeBytesFn if _is_bytes_type(pcoll.element_type) else _TranscodeFn
        fn = fn_class(self._spec, self._batch_size, self._field, "dead_letters")
        outputs = pcoll | "Transcode" >> beam.ParDo(fn).with_output_types(
            pa.RecordBatch, dead_letters=DeadLetter
        ).with_outputs("dead_letters", main="batches")
        return ArrowResult(outputs.batches, outputs.dead_letters, self.schema, self._dead_key)


def _error_output(error_handling: Mapping[str, str] | None) -> str:
    if not error_handling:
        return "dead_letters"
    if set(error_handling) != {"output"}:
        raise ValueError(f"error_handling takes one key, output, not {sorted(error_handling)}")
    return str(error_handling["output"])


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

    Dropped: structs with no fields (Beam rows need one) and the null type.
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

    return typing.Sequence[hint], convert


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

    return typing.Mapping[key_hint, item_hint], convert


def _struct_type(t: pa.StructType, where: str) -> tuple[Any, Converter] | None:
    fields = [t.field(i) for i in range(t.num_fields)]
    built = _row_fields(fields, where)
    if built is None:
        return None
    row_class, kept, converters = built

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


def _row_fields(
    fields: list[pa.Field], where: str
) -> tuple[type, list[int], list[Converter]] | None:
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
    if not members:
        return None
    name = "Row_" + (re.sub(r"\W+", "_", where).strip("_") or "root")
    return _picklable(NamedTuple(name, members)), kept, converters  # type: ignore[misc]


def _picklable(cls: type) -> type:
    """Let instances of a dynamically made row class pickle (by value, like Beam's own).

    Rows normally travel with RowCoder; a coder for an untyped PCollection pickles them,
    and pickle finds no ``wirearrow.beam.<name>`` to refer to. They come back as instances
    of a namedtuple with the same name and fields (so attribute access still works).
    """
    cls.__reduce__ = _row_reduce  # type: ignore[method-assign]
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
    structs -> nested rows; structs with no fields are dropped. Field names that are not
    Python identifiers are rewritten ("imp[*].id" -> "imp_id").
    """
    return _row_converter(schema, name)[0]


def _row_converter(schema: pa.Schema, name: str) -> tuple[type, Callable[[pa.RecordBatch], list]]:
    built = _row_fields(list(schema), "")
    if built is None:
        raise TypeError("no column of this schema has a Beam type: cannot build rows")
    _, kept, converters = built
    # The top-level type gets the requested name (nested ones are named by their path).
    fields = list(built[0].__annotations__.items())
    cls = _picklable(NamedTuple(name, fields))  # type: ignore[misc]

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
        self._dead_key = _error_output(error_handling)

    def expand(self, pcoll: beam.PCollection):  # -> RowsResult (Beam reads annotations)
        arrow = pcoll | "ToArrow" >> self._to_arrow
        rows = arrow.batches | "ToRows" >> beam.ParDo(
            _RowsFn(self._to_arrow.schema, self._type_name)
        ).with_output_types(self.row_type)
        return RowsResult(rows, arrow.dead_letters, self.row_type, self._dead_key)


# =========================================================================== ReadDelimited


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
        compression = self._compression
        if compression == CompressionTypes.AUTO:
            compression = CompressionTypes.detect_compression_type(path)
        if compression != CompressionTypes.UNCOMPRESSED:
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
        with FileSystems.open(path, "application/octet-stream", compression) as stream:
            reader = FrameReader(
                stream,
                self._framing,
                block_bytes=_READ_BLOCK_BYTES,
                start=start,
                end=end if end >= 0 else None,
                name=path,
            )
            for frames in reader:
                self._bytes.inc(int(frames.ends[-1]))  # whole records, prefixes included
                yield from self._batches(frames)
        if self._pending_count:
            yield self._emit(self._pending)
        if reader.tail is not None:
            _truncated(path, reader.tail, self._truncated)

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
        array = pieces[0] if len(pieces) == 1 else pa.concat_arrays(_same_type(pieces))
        self._pending, self._pending_count = [], 0
        self._records.inc(len(array))
        return RecordArray(array)


def _same_type(arrays: list[pa.Array]) -> list[pa.Array]:
    if len({a.type for a in arrays}) == 1:
        return arrays
    return [a.cast(pa.large_binary()) for a in arrays]


class ReadDelimited(beam.PTransform):
    """Length-delimited records from files on any Beam filesystem: PCollection[bytes].

    ``framing``: "varint" (protobuf's writeDelimitedTo), "u32le" or "u32be". Every record
    of every file matching ``file_pattern`` comes out exactly once.

    Files are split into record-aligned chunks of about ``chunk_bytes``, read in parallel:
    files larger than a chunk get one extra sequential pass over their length prefixes to
    find the cut points. Compressed files (by extension with ``compression="auto"``) are
    read whole by one worker. A file that ends inside a record raises ValueError (with
    ``truncated="skip"``: the whole records are read and the tail is logged and counted).

    Args:
        file_pattern: a path or glob, e.g. "gs://bucket/events/*.bin".
        framing: "varint", "u32le" or "u32be".
        compression: "auto" (from the extension) or a Beam CompressionTypes value.
        chunk_bytes: target size of the byte ranges read in parallel.
        batch_size: records per batch handed to batch-aware consumers (ToArrow).
        truncated: "raise" or "skip".
        allow_empty: whether a pattern that matches no file is allowed.
    """

    def __init__(
        self,
        file_pattern: str,
        framing: str = "varint",
        compression: str = "auto",
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        batch_size: int = DEFAULT_BATCH_SIZE,
        truncated: str = "raise",
        allow_empty: bool = False,
    ) -> None:
        super().__init__()
        if framing not in FRAMINGS:
            raise ValueError(f"framing must be one of {sorted(FRAMINGS)}, not {framing!r}")
        if truncated not in ("raise", "skip"):
            raise ValueError(f"truncated must be 'raise' or 'skip', not {truncated!r}")
        if chunk_bytes < 1 or batch_size < 1:
            raise ValueError("chunk_bytes and batch_size must be positive")
        self._pattern = file_pattern
        self._framing = framing
        self._compression = compression
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


# =========================================================================== Parquet


class _ParquetFileSink(fileio.FileSink):
    """fileio FileSink writing record batches to one Parquet file.

    Batches are buffered up to ``row_group_size`` rows and written as one row group;
    flush() writes the rest and the footer. fileio calls flush() once, just before it
    closes the file; a Parquet footer can be written only once, so a write after flush()
    is an error rather than a silently broken file.
    """

    def __init__(
        self, schema: pa.Schema | None, compression: str | None, row_group_size: int
    ) -> None:
        self._source_schema = schema
        self._compression = compression or "none"
        self._row_group_size = row_group_size

    def create_metadata(self, destination: str, full_file_name: str) -> Any:
        # Parquet compresses inside the file: the file itself is never wrapped.
        return fileio.FileMetadata(
            mime_type="application/vnd.apache.parquet",
            compression_type=CompressionTypes.UNCOMPRESSED,
        )

    def open(self, fh: Any) -> None:
        self._fh = fh
        self._writer: Any = None
        self._schema: pa.Schema | None = None
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._finished = False
        if self._source_schema is not None:
            self._start(self._source_schema)

    def _start(self, schema: pa.Schema) -> None:
        import pyarrow.parquet as pq

        from wirearrow.parquet import writable_schema

        target, _ = writable_schema(schema)
        if not len(target):
            raise ValueError("no column left to write: Parquet cannot store this schema")
        self._source_schema = schema
        self._schema = target
        self._writer = pq.ParquetWriter(self._fh, target, compression=self._compression)

    def write(self, record: Any) -> None:
        if self._finished:
            raise ValueError("a Parquet file cannot take more rows after flush() wrote its footer")
        batch = record[1] if isinstance(record, tuple) else record
        if isinstance(batch, pa.Table):
            for part in batch.to_batches():
                self.write(part)
            return
        if self._writer is None:
            self._start(batch.schema)
        self._pending.append(self._conform(batch))
        self._pending_rows += batch.num_rows
        if self._pending_rows >= self._row_group_size:
            self._write_pending()

    def _conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        assert self._schema is not None and self._source_schema is not None
        if batch.schema.equals(self._schema):
            return batch
        if not batch.schema.equals(self._source_schema):
            raise ValueError(
                f"batch schema differs from the file's:\n{batch.schema}\n"
                f"-- expected --\n{self._source_schema}"
            )
        # Same fields, made Parquet-writable (nullable, empty structs dropped).
        columns = []
        for f in self._schema:
            column = batch.column(f.name)
            columns.append(column if column.type.equals(f.type) else column.cast(f.type))
        return pa.RecordBatch.from_arrays(columns, schema=self._schema)

    def _write_pending(self) -> None:
        if not self._pending:
            return
        table = pa.Table.from_batches(self._pending, schema=self._schema)
        self._writer.write_table(table, row_group_size=self._row_group_size)
        self._pending, self._pending_rows = [], 0

    def flush(self) -> None:
        if self._finished:
            return
        if self._writer is None:
            raise ValueError("no batch and no schema: cannot write a Parquet file")
        self._write_pending()
        self._writer.close()  # the footer; the file handle stays open for fileio to close
        self._finished = True


class _SinkFactory:
    """fileio's sink argument: a fresh _ParquetFileSink per file (fileio instantiates a
    FileSink subclass without arguments, so the settings travel in this callable)."""

    def __init__(self, schema: pa.Schema | None, compression: str | None, row_group_size: int):
        self.schema = schema
        self.compression = compression
        self.row_group_size = row_group_size

    def __call__(self, destination: Any) -> _ParquetFileSink:
        return _ParquetFileSink(self.schema, self.compression, self.row_group_size)


class _AssignShardFn(beam.DoFn):
    """batch -> (shard, batch), round robin from a random start (spreads the writers)."""

    def __init__(self, shards: int) -> None:
        super().__init__()
        self._shards = shards

    def setup(self) -> None:
        self._next = random.randrange(self._shards)

    def process(self, batch: pa.RecordBatch) -> Iterator[tuple[int, pa.RecordBatch]]:
        shard = self._next
        self._next = (shard + 1) % self._shards
        yield shard, batch


class _FiringFn(beam.DoFn):
    """(shard, [batches]) of one window firing -> (destination, batch) for each batch.

    The destination names the firing (pane index) and the shard, so every firing of a
    window, late ones included, gets its own files: fileio alone names files by window
    and shard only, and a late firing would overwrite the on-time file.
    """

    def __init__(self, shards: int) -> None:
        super().__init__()
        self._shards = shards

    def process(
        self, element: tuple[int, Any], pane: Any = beam.DoFn.PaneInfoParam
    ) -> Iterator[tuple[str, pa.RecordBatch]]:
        shard, batches = element
        destination = f"{pane.index}-{shard:05d}-of-{self._shards:05d}"
        for batch in batches:
            yield destination, batch


def _window_text(window: Any) -> str:
    if isinstance(window, beam_window.GlobalWindow):
        return ""
    start = window.start.to_utc_datetime().strftime("%Y%m%dT%H%M%S.%f")
    end = window.end.to_utc_datetime().strftime("%Y%m%dT%H%M%S.%f")
    return f"-{start}Z-{end}Z"


class _FileNaming:
    """fileio file naming: ``{prefix}[-{window start}-{window end}]-{firing}-{shard}.parquet``.

    Batch, one file per bundle: ``part-00000-of-00003.parquet``. Windowed or sharded:
    ``part-20240601T000000.000000Z-20240601T000100.000000Z-0-00001-of-00002.parquet``
    (firing 0 is the first pane of the window, later ones are late or repeated firings).
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    def __call__(
        self, window: Any, pane: Any, shard: int, total: int, compression: Any, destination: Any
    ) -> str:
        head = f"{self.prefix}{_window_text(window)}"
        if destination is None:
            return f"{head}-{shard:05d}-of-{total:05d}.parquet"
        # One file per destination is the rule; fileio numbers extras (spilled writers).
        extra = f"-{shard}" if total > 1 else ""
        return f"{head}-{destination}{extra}.parquet"


class _DeleteDirFn(beam.DoFn):
    def __init__(self, directory: str) -> None:
        super().__init__()
        self._directory = directory

    def process(self, _: Any) -> Iterator[Any]:
        try:
            FileSystems.delete([self._directory])
        except Exception as err:  # a leftover empty temp directory is harmless
            _LOG.info("could not delete %s: %s", self._directory, err)
        return iter(())


class WriteToParquet(beam.PTransform):
    """Record batches to Parquet files under ``path`` (any Beam filesystem).

    Bounded input in the global window (batch jobs): one file per bundle, named
    ``part-00000-of-0000N.parquet``, no shuffle. Windowed or unbounded input (streaming),
    or ``shards=`` given: the batches of each window firing are grouped into ``shards``
    files (default 1), **one complete Parquet file per window, firing and shard**: late
    firings (allowed lateness) add files, never rewrite one. Files are written to a
    temporary directory and renamed into place when complete (fileio.WriteToFiles), so
    ``path`` never holds a file without its footer. Accumulating triggers are refused
    (each firing would repeat earlier rows).

    Returns the PCollection of fileio.FileResult of the files written.

    Args:
        path: the output directory.
        schema: the batches' Arrow schema (``ToArrow(...).schema``); default: the first
            batch's. Fields Parquet cannot store (structs with no fields) are dropped.
        shards: files per window firing (grouping by shard costs a shuffle).
        file_prefix: file names start with this.
        compression: Parquet codec ("zstd", "snappy", "gzip", "none", ...).
        row_group_size: rows per row group (at most).
        max_writers_per_bundle: files one bundle may have open at once (fileio's limit).
    """

    def __init__(
        self,
        path: str,
        schema: Optional[pa.Schema] = None,  # noqa: UP045
        shards: Optional[int] = None,  # noqa: UP045
        file_prefix: str = "part",
        compression: str = "zstd",
        row_group_size: int = 128_000,
        max_writers_per_bundle: int = 64,
    ) -> None:
        super().__init__()
        if shards is not None and shards < 1:
            raise ValueError(f"shards must be at least 1, not {shards}")
        self._path = path
        self._schema = schema
        self._shards = shards
        self._prefix = file_prefix
        self._compression = compression
        self._row_group_size = int(row_group_size)
        self._max_writers = int(max_writers_per_bundle)

    def expand(self, batches: beam.PCollection) -> beam.PCollection:
        windowing = batches.windowing
        if windowing.accumulation_mode == beam_trigger.AccumulationMode.ACCUMULATING:
            raise ValueError(
                "WriteToParquet: accumulating panes would write every earlier row of a window "
                "again with each firing; use accumulation_mode=DISCARDING"
            )
        per_bundle = (
            self._shards is None
            and batches.is_bounded
            and isinstance(windowing.windowfn, beam_window.GlobalWindows)
            and isinstance(windowing.triggerfn, beam_trigger.DefaultTrigger)
        )
        if per_bundle:
            destination = None
            elements = batches
        else:
            shards = self._shards or 1
            elements = (
                batches
                | "AssignShard" >> beam.ParDo(_AssignShardFn(shards))
                | "GroupByWindowAndShard" >> beam.GroupByKey()
                | "NameFiring" >> beam.ParDo(_FiringFn(shards))
            )
            destination = _first
        # Our own temporary directory (fileio's default is the same place), so that a
        # bounded job can remove it once every file is in place.
        temp_dir = FileSystems.join(self._path, f".temp-wirearrow-{uuid.uuid4().hex}")
        results = elements | "WriteFiles" >> fileio.WriteToFiles(
            self._path,
            file_naming=_FileNaming(self._prefix),
            destination=destination,
            temp_directory=StaticValueProvider(str, temp_dir),
            sink=_SinkFactory(self._schema, self._compression, self._row_group_size),
            max_writers_per_bundle=self._max_writers,
        )
        if batches.is_bounded:
            # Once every file is in place (a count over all of them is a barrier), remove
            # the temporary directory, which fileio leaves behind.
            _ = (
                results
                | "WindowAll" >> beam.WindowInto(beam_window.GlobalWindows())
                | "AllWritten" >> beam.combiners.Count.Globally()
                | "DeleteTemp" >> beam.ParDo(_DeleteDirFn(temp_dir))
            )
        return results


def _first(element: tuple[str, Any]) -> str:
    return element[0]
