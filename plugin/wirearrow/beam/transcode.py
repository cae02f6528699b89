"""ToArrow: protobuf records in a PCollection -> Arrow record batches and dead letters."""

# No `from __future__ import annotations`: Beam reads the DoFns' and PTransforms'
# annotations as type hints at run time.

import pickle
import typing
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple, Optional

import apache_beam as beam
import pyarrow as pa
from apache_beam import pvalue
from apache_beam.metrics import Metrics
from apache_beam.transforms import window as beam_window
from apache_beam.typehints.batch import BATCH_CONVERTER_REGISTRY, BatchConverter
from apache_beam.utils.timestamp import Timestamp
from apache_beam.utils.windowed_value import WindowedValue
from google.protobuf.descriptor import Descriptor

from wirearrow.cache import resolve_profile
from wirearrow.schema import Schema
from wirearrow.transcoder import Transcoder

METRICS_NAMESPACE = "wirearrow"
DEFAULT_BATCH_SIZE = 8192


# =========================================================================== dead letters


class DeadLetter(NamedTuple):
    """A record that produced no rows: a Beam Row (schema'd, RowCoder).

    ``index`` is the record's position in the batch it was transcoded with and ``offset``
    the byte inside the record where decoding failed (docs/errors.md); ``path`` the field
    path, ``reason`` the error text, ``raw`` the record's bytes (None for a null record).
    ``key`` is the element's key for ``(key, bytes)`` input or a row's ``key`` field (as
    text), else None. ``topic``, ``partition``, ``kafka_offset`` and ``timestamp`` (ms) are
    a row element's fields of those names (``offset`` for ``kafka_offset``), as in
    ``ReadFromKafka(with_metadata=True)``'s rows: where to find the record again in Kafka;
    None for other elements.
    """

    # A field named index shadows tuple.index (mypy says so); it is the dead-letter
    # schema's name for the record's position, in every engine.
    index: int  # type: ignore[assignment]
    offset: int
    path: str
    reason: str
    raw: Optional[bytes]  # noqa: UP045 (Beam's typehint conversion needs typing.Optional)
    key: Optional[str]  # noqa: UP045
    topic: Optional[str] = None  # noqa: UP045
    partition: Optional[int] = None  # noqa: UP045
    kafka_offset: Optional[int] = None  # noqa: UP045
    timestamp: Optional[int] = None  # noqa: UP045


beam.coders.registry.register_coder(DeadLetter, beam.coders.RowCoder)


# Where a row element came from (ReadFromKafka(with_metadata=True)'s fields), kept per
# buffered record only for rows; a DeadLetter's fields after ``key``.
_ORIGIN_FIELDS = ("topic", "partition", "offset", "timestamp")


def _int_or_none(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def _origin(element: Any) -> tuple | None:
    """(topic, partition, offset, timestamp) of a row element, None when it has none."""
    values = tuple(getattr(element, name, None) for name in _ORIGIN_FIELDS)
    if all(v is None for v in values):
        return None
    topic, partition, offset, timestamp = values
    return (
        None if topic is None else str(topic),
        _int_or_none(partition),
        _int_or_none(offset),
        _int_or_none(timestamp),
    )


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
    if isinstance(plan, Schema | Descriptor) or hasattr(plan, "DESCRIPTOR"):
        # A schema or message class: the whole message (docs/beam.md, Beam schemas).
        schema = plan if isinstance(plan, Schema) else Schema.from_message(plan)
        return Transcoder(schema, on_error=on_error or "dead_letter")
    from wirearrow.config import load_plan  # YAML machinery: only where plans are built

    config = load_plan(plan)  # type: ignore[arg-type]
    policy = on_error or "dead_letter"
    return config.with_options(on_error=policy).transcoder()


# =========================================================================== batches


class RecordArray:
    """A batch of records as one Arrow ``BinaryArray``: ReadFromDelimited's batch type.

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


def same_binary_type(arrays: list[pa.Array]) -> list[pa.Array]:
    if len({a.type for a in arrays}) == 1:
        return arrays
    return [a.cast(pa.large_binary()) for a in arrays]


class _RecordArrayConverter(BatchConverter):
    def __init__(self) -> None:
        super().__init__(RecordArray, bytes)

    def produce_batch(self, elements: Any) -> RecordArray:
        return RecordArray(pa.array(list(elements), pa.binary()))

    def explode_batch(self, batch: RecordArray) -> Iterator[bytes]:
        return iter(batch.array.to_pylist())

    def combine_batches(self, batches: Any) -> RecordArray:
        return RecordArray(pa.concat_arrays(same_binary_type([b.array for b in batches])))

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
        """PCollection[pa.RecordBatch] (or pa.Table: ``batch_type``), each of :attr:`schema`."""
        return self["batches"]

    @property
    def dead_letters(self) -> beam.PCollection:
        """PCollection[DeadLetter]."""
        return self[self._dead_letter_key]


class _Buffer:
    """The records of one window waiting for a batch, and their latest timestamp."""

    __slots__ = ("carried", "keys", "origins", "records", "timestamp")

    def __init__(self, timestamp: Timestamp) -> None:
        self.records: list = []
        self.keys: list = []
        self.origins: list = []  # per record: _origin() of a row element, else None
        self.carried: list = []  # per record: the tuple of its carry= fields
        self.timestamp = timestamp


class _TranscodeFn(beam.DoFn):
    """Buffers records per window; transcodes a batch at ``batch_size`` and at bundle end.

    Main output: pa.RecordBatch. Tagged output ``dead_tag``: DeadLetter. Each output is in
    the window of its records, with the latest timestamp among them (which lies in that
    window, and is never earlier than a record it came from).
    """

    def __init__(
        self,
        spec: bytes,
        batch_size: int,
        field: str,
        dead_tag: str,
        tables: bool = False,
        carry: tuple = (),
    ) -> None:
        super().__init__()
        # (name, Arrow type or None: inferred) of each row field carried onto the rows.
        self._carry = carry
        # The Transcoder travels pickled (its spec, and its cache by identity). Each DoFn
        # instance unpickles its own in setup(), with its own counts and dead letters; the
        # plan is compiled once per worker process, by the process's parser cache.
        self._spec = spec
        self._batch_size = batch_size
        self._field = field
        self._dead_tag = dead_tag
        self._tables = tables  # emit pa.Table (what Beam's WriteToParquetBatched takes)
        self._records_in = Metrics.counter(METRICS_NAMESPACE, "records_in")
        # rows_out is the sink's (WriteToParquetFiles): rows in complete files. The rows
        # made here can still be dropped downstream (a grouping's late data).
        self._rows_transcoded = Metrics.counter(METRICS_NAMESPACE, "rows_transcoded")
        self._records_failed = Metrics.counter(METRICS_NAMESPACE, "records_failed")
        self._batches_out = Metrics.counter(METRICS_NAMESPACE, "batches_out")
        # Record batches received whole from a batch-producing source (ReadFromDelimited).
        self._arrays_in = Metrics.counter(METRICS_NAMESPACE, "record_arrays_in")

    def setup(self) -> None:
        self._tc: Transcoder
        # and the transcode() arguments of its input (format, framing)
        self._tc, self._input = pickle.loads(self._spec)
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
        if type(element) is bytes or type(element) is str:  # (str: protojson text)
            if self._carry:
                raise TypeError("ToArrow(carry=) takes rows (the fields to carry), not bytes")
            buf.records.append(element)
            buf.keys.append(None)
            buf.origins.append(None)
        else:
            key, record, origin = self._unpack(element)
            buf.records.append(record)
            buf.keys.append(key)
            buf.origins.append(origin)
            if self._carry:
                buf.carried.append(self._carried(element, key))
        if len(buf.records) >= self._batch_size:
            del self._buffers[window]
            yield from self._emit(buf, window)

    def _unpack(self, element: Any) -> tuple[Any, Any, tuple | None]:
        """(key, record, origin) of a (key, bytes) pair or a Row; a bytes-like record as
        is. ``origin``: a row's Kafka position (_origin), for its dead letter."""
        if isinstance(element, bytes | bytearray | memoryview | str) or element is None:
            return None, element, None
        if isinstance(element, tuple) and not hasattr(element, "_fields"):
            if len(element) != 2:
                raise TypeError(f"ToArrow takes bytes, (key, bytes) or rows, not {element!r:.80}")
            return element[0], element[1], None
        try:
            # ReadFromKafka(with_metadata=True) rows carry their key, topic, partition,
            # offset and timestamp: dead letters name them.
            record = getattr(element, self._field)
        except AttributeError:
            raise TypeError(
                f"ToArrow: {type(element).__name__} element has no field {self._field!r} "
                "(pass field= to name the bytes field of a row)"
            ) from None
        return getattr(element, "key", None), record, _origin(element)

    def _carried(self, element: Any, key: Any) -> tuple:
        """The carry= fields of a row element (``key``: a pair's key, or the row's)."""
        values = []
        for name, _ in self._carry:
            if name == "key":
                values.append(key)
            elif hasattr(element, name):
                values.append(getattr(element, name))
            else:
                raise TypeError(
                    f"ToArrow(carry=): {type(element).__name__} element has no field {name!r}"
                )
        return tuple(values)

    def finish_bundle(self) -> Iterator[Any]:
        buffers, self._buffers = self._buffers, {}
        for window, buf in buffers.items():
            yield from self._emit(buf, window)

    def _emit(self, buf: _Buffer, window: Any) -> Iterator[Any]:
        # Outputs are WindowedValues: in finish_bundle there is no input element whose
        # window Beam could use, and in process the buffered records may be older than
        # the current one.
        windows, timestamp = (window,), buf.timestamp
        batch, dead = self._transcode(buf.records, buf.keys, buf.origins, buf.carried)
        if batch.num_rows:
            yield WindowedValue(batch, timestamp, windows)
        for letter in dead:
            yield pvalue.TaggedOutput(self._dead_tag, WindowedValue(letter, timestamp, windows))

    def _transcode(
        self,
        records: Any,
        keys: list | None,
        origins: list | None = None,
        carried: list | None = None,
    ) -> tuple[pa.RecordBatch, list]:
        tc = self._tc
        before = tc.stats
        carry = None
        if self._carry:
            columns = list(zip(*carried, strict=True)) if carried else [()] * len(self._carry)
            carry = pa.table(
                [pa.array(v, type=t) for v, (_, t) in zip(columns, self._carry, strict=True)],
                names=[name for name, _ in self._carry],
            )
        batch = tc.transcode(records, carry=carry, **self._input)
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
                origin = (origins[index[i]] if origins else None) or ()
                dead.append(
                    DeadLetter(index[i], offset[i], path[i], reason[i], raw[i], key, *origin)
                )
        self._records_in.inc(after.records_in - before.records_in)
        self._records_failed.inc(after.records_failed - before.records_failed)
        self._rows_transcoded.inc(batch.num_rows)
        self._batches_out.inc(1)
        if self._tables:
            return pa.Table.from_batches([batch]), dead
        return batch, dead


class _TranscodeBytesFn(_TranscodeFn):
    """_TranscodeFn that also takes whole batches of bytes (Beam's batched DoFns).

    When the producer emits batches (ReadFromDelimited does) and is fused with this DoFn, Beam
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

    Input: a PCollection of ``bytes`` records, of ``(key, bytes)`` pairs (``ReadFromKafka``'s
    ``KV``), or of rows with a bytes field named ``field`` (default ``"value"``; the rows of
    ``ReadFromKafka(with_metadata=True)``, whose ``key`` goes into the dead letters).

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
        format: "binary" (protobuf records) or "json" (protojson text records, str or
            bytes; see docs/json.md), with ``ignore_unknown_fields`` as json_format's.
        framing: "confluent": each record is in the Confluent Schema Registry wire format
            (what Confluent's serializers write to Kafka), with ``schemas`` (a
            ``{schema_id: Schema}`` mapping or a look-up function) and ``schema_id`` (True
            or a column name: each row's schema id), as in ``Transcoder.transcode``.
        batch_type: the type of ``.batches``' elements: ``pa.RecordBatch`` or ``pa.Table``
            (what Beam's ``WriteToParquetBatched`` takes). Either way a downstream
            ``process_batch(self, batch: pa.Table)`` gets them as Beam batches
            (docs/beam.md).
        carry: fields of the row elements to repeat on every row of their record, after the
            plan's columns, e.g. ``["topic", "partition", "offset"]`` of
            ``ReadFromKafka(with_metadata=True)`` rows (``"key"`` is also a pair's key): a
            list of names (Arrow types inferred per batch) or a mapping name -> Arrow type
            (fixed types, in ``.schema`` too). See ``Transcoder.transcode(carry=)``.
    """

    def __init__(
        self,
        plan: Any,
        batch_size: int = DEFAULT_BATCH_SIZE,
        on_error: Optional[str] = None,  # noqa: UP045 (Beam YAML reads these annotations)
        field: str = "value",
        error_handling: Optional[Mapping[str, str]] = None,  # noqa: UP045
        profile: Optional[Any] = None,  # noqa: UP045
        format: str = "binary",
        ignore_unknown_fields: bool = False,
        framing: Optional[str] = None,  # noqa: UP045
        schemas: Optional[Any] = None,  # noqa: UP045
        schema_id: Any = False,
        batch_type: Any = pa.RecordBatch,
        carry: Any = (),
    ) -> None:
        super().__init__()
        if batch_type not in (pa.RecordBatch, pa.Table):
            raise ValueError(f"batch_type must be pa.RecordBatch or pa.Table, not {batch_type!r}")
        self._batch_type = batch_type
        if format not in ("binary", "json"):
            raise ValueError(f'format must be "binary" or "json", not {format!r}')
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        transcoder = _resolve_transcoder(plan, on_error)
        if profile is not None:
            transcoder = Transcoder(transcoder.spec, cache=resolve_profile(profile))
        input_args: dict[str, Any] = {}
        if format != "binary" or ignore_unknown_fields:
            input_args = {"format": format, "ignore_unknown_fields": ignore_unknown_fields}
        if framing is not None or schemas is not None or schema_id is not False:
            input_args |= {"framing": framing, "schemas": schemas, "schema_id": schema_id}
            # A wrong combination fails here, where the pipeline is built.
            self.schema = transcoder.transcode([], **input_args).schema
        else:
            self.schema = transcoder.arrow_schema
        self._carry = _carry_fields(carry)
        taken = set(self.schema.names) & {name for name, _ in self._carry}
        if taken:
            raise ValueError(f"carry= fields clash with the plan's output: {sorted(taken)}")
        if all(t is not None for _, t in self._carry):
            for name, t in self._carry:
                self.schema = self.schema.append(pa.field(name, t))
        self._spec = pickle.dumps((transcoder, input_args), protocol=pickle.HIGHEST_PROTOCOL)
        self._batch_size = int(batch_size)
        self._field = field
        self._dead_key = dead_letter_tag(error_handling)

    def expand(self, pcoll: beam.PCollection):  # -> ArrowResult (Beam reads annotations)
        fn_class = _TranscodeBytesFn if _is_bytes_type(pcoll.element_type) else _TranscodeFn
        if self._carry and fn_class is _TranscodeBytesFn:
            raise TypeError("ToArrow(carry=) takes rows (the fields to carry), not bytes")
        tables = self._batch_type is pa.Table
        fn = fn_class(
            self._spec, self._batch_size, self._field, "dead_letters", tables, self._carry
        )
        outputs = pcoll | "Transcode" >> beam.ParDo(fn).with_output_types(
            self._batch_type, dead_letters=DeadLetter
        ).with_outputs("dead_letters", main="batches")
        batches = outputs.batches | "Handover" >> beam.ParDo(_HandoverFn()).with_output_types(
            self._batch_type
        )
        return ArrowResult(batches, outputs.dead_letters, self.schema, self._dead_key)


class _HandoverFn(beam.DoFn):
    """Passes batches on, from process() only.

    Beam 2.77 flushes a DoFn's buffers for batched consumers (``process_batch``) before
    it calls finish_bundle(), so what _TranscodeFn emits there (a bundle's last batch)
    would never reach a batched DoFn fused after it. Emitted from this DoFn's process(),
    those batches are flushed when this one finishes, after _TranscodeFn.
    """

    def process(self, batch: Any) -> Iterator[Any]:
        yield batch


def _carry_fields(carry: Any) -> tuple:
    """carry= as ((name, Arrow type or None), ...)."""
    if isinstance(carry, str):
        raise TypeError("carry= is a list of field names (or a mapping name -> Arrow type)")
    if isinstance(carry, Mapping):
        for name, t in carry.items():
            if not isinstance(t, pa.DataType):
                raise TypeError(f"carry= {name!r}: expected a pyarrow type, not {t!r}")
        return tuple((str(name), t) for name, t in carry.items())
    return tuple((str(name), None) for name in carry)


def dead_letter_tag(error_handling: Mapping[str, str] | None) -> str:
    if not error_handling:
        return "dead_letters"
    if set(error_handling) != {"output"}:
        raise ValueError(f"error_handling takes one key, output, not {sorted(error_handling)}")
    return str(error_handling["output"])
