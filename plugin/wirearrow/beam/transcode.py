"""ToArrow: protobuf records in a PCollection -> Arrow record batches and dead letters; and
what every wirearrow.beam transform shares (DeadLetter, outputs, error policy, PlanFn)."""

# No `from __future__ import annotations`: Beam reads the DoFns' and PTransforms'
# annotations as type hints at run time.

import dataclasses
import inspect
import typing
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NamedTuple, Optional

import apache_beam as beam
import pyarrow as pa
from apache_beam import pvalue
from apache_beam.internal import pickler
from apache_beam.metrics import Metrics
from apache_beam.utils.windowed_value import WindowedValue

from wirearrow.beam import progress
from wirearrow.beam.batches import RecordArray
from wirearrow.cache import resolve_profile
from wirearrow.counts import Counts
from wirearrow.plans import resolve_plan
from wirearrow.sources.format import FIELDS, RecordFormat

METRICS_NAMESPACE = "wirearrow"
DEFAULT_BATCH_SIZE = 8192


class DeadLetter(NamedTuple):
    """A record that produced no rows, as a Beam Row (RowCoder): the columns of
    ``wirearrow.DEAD_LETTER_SCHEMA``, the element's ``key`` (as text) and a row element's
    Kafka position (None where unknown). docs/beam.md has each field."""

    # index shadows tuple.index (mypy says so): it is every engine's name for the position.
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

# A row element's Kafka position (ReadFromKafka(with_metadata=True)), DeadLetter's last four.
_POSITION = (("topic", str), ("partition", int), ("offset", int), ("timestamp", int))


def unpack(element: Any, column: str) -> tuple[Any, Any, tuple]:
    """(key, record, Kafka position) of an element: a record (bytes; str: protojson) as it
    is, a ``(key, bytes)`` pair, or a row: its ``column`` field, ``key`` and position
    (() when it has none of its fields)."""
    if isinstance(element, bytes | bytearray | memoryview | str) or element is None:
        return None, element, ()
    if isinstance(element, tuple) and not hasattr(element, "_fields"):
        if len(element) != 2:
            raise TypeError(f"ToArrow takes bytes, (key, bytes) or rows, not {element!r:.80}")
        return element[0], element[1], ()
    if not hasattr(element, column):
        raise TypeError(
            f"ToArrow: {type(element).__name__} element has no field {column!r} "
            "(pass column= to name the bytes field of a row)"
        )
    values = [getattr(element, name, None) for name, _ in _POSITION]
    position: tuple = ()
    if any(v is not None for v in values):
        position = tuple(v if v is None else t(v) for v, (_, t) in zip(values, _POSITION, strict=True))
    return getattr(element, "key", None), getattr(element, column), position


def dead_letter(
    element: Any, column: str, index: int, offset: int, path: str, reason: str, raw: Any = None
) -> DeadLetter:
    """The DeadLetter of ``element`` (its key as text, its Kafka position) with ``raw``, by
    default its record."""
    key, record, position = unpack(element, column)
    raw = record if raw is None else raw
    raw = raw.encode() if isinstance(raw, str) else None if raw is None else bytes(raw)
    if isinstance(key, bytes | bytearray | memoryview):
        key = bytes(key).decode("utf-8", "backslashreplace")
    key = None if key is None else str(key)
    return DeadLetter(index, offset, path, reason, raw, key, *position)


class Outputs(dict):
    """A transform's outputs by name, as Beam YAML reads them (the main one, and the dead
    letters under ``dead_letters`` or ``error_handling``'s name), as attributes too, with
    what the transform knows when the pipeline is built (``known``: ``schema``, ...)."""

    def __init__(self, main: str, pcoll: Any, dead: Any, dead_key: str, **known: Any) -> None:
        super().__init__({main: pcoll, dead_key: dead})
        self._dead_key = dead_key
        vars(self).update(known)

    @property
    def dead_letters(self) -> beam.PCollection:
        return self[self._dead_key]


def output(name: str, doc: str) -> Any:
    """An Outputs subclass's attribute for its output ``name``."""
    return property(lambda self: self[name], doc=doc)


class ArrowResult(Outputs):
    """ToArrow's outputs: ``batches``, ``dead_letters`` (:class:`DeadLetter`), ``schema``."""

    batches = output("batches", "pa.RecordBatch (or pa.Table: batch_type), each of .schema")


def errors(on_error: str | None, error_handling: Mapping[str, str] | None) -> tuple:
    """(the error policy to resolve the plan with, the dead-letter output's name). Beam
    YAML's convention: ``error_handling={"output": name}`` sends the bad records there, so
    it means dead_letter unless ``on_error`` says otherwise; neither: the plan's own."""
    if not error_handling:
        return on_error, "dead_letters"
    if set(error_handling) != {"output"}:
        raise ValueError(f"error_handling takes one key, output, not {sorted(error_handling)}")
    return on_error or "dead_letter", str(error_handling["output"])


def renamed(cls: type, old: str, why: str = "") -> type:
    """``cls`` under its deprecated name ``old``: warns when made."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        message = f"wirearrow.beam.{old} is now {cls.__name__}{why}"
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        cls.__init__(self, *args, **kwargs)  # type: ignore[misc]

    doc = f"Deprecated name of :class:`{cls.__name__}`{why}."
    return type(old, (cls,), {"__init__": __init__, "__doc__": doc, "__module__": cls.__module__})


def with_keywords(init: Callable, keywords: list[inspect.Parameter]) -> None:
    """Give ``init`` (which takes ``**options``) the signature that names ``keywords`` in
    their place: for help(), IDEs and Beam YAML's config schema, from one definition."""
    params = [p for p in inspect.signature(init).parameters.values() if p.kind != p.VAR_KEYWORD]
    names = {p.name for p in params}
    init.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        params + [p for p in keywords if p.name not in names]
    )


def keywords_of(init: Callable, after: int) -> list[inspect.Parameter]:
    """The parameters of ``init`` after its first ``after`` (self, plan, ...), keyword-only:
    a transform's keywords another takes on (ToRows ToArrow's, FromRows FromArrow's)."""
    params = list(inspect.signature(init).parameters.values())[after:]
    return [p.replace(kind=p.KEYWORD_ONLY) for p in params]


class PlanFn(beam.DoFn):
    """A DoFn of a transcoder (and the format of its records), unpickled in setup(): Beam
    unpickles a DoFn several times on its way to a worker, and the plan is needed once
    per instance there (each process's parser cache compiles it once)."""

    def __init__(self, transcoder: Any, input: Any = None) -> None:
        super().__init__()
        self._shipped = pickler.dumps((transcoder, input))

    def setup(self) -> None:
        self._tc, self._format = pickler.loads(self._shipped)


# Counts' fields as ToArrow's metrics: rows_out is the sink's (rows in complete files, as
# rows made here can still be dropped downstream: a grouping's late data).
_METRIC_NAMES = {"rows_out": "rows_transcoded"}


class _TranscodeFn(PlanFn):
    """Buffers elements per window; decodes a batch at ``batch_size`` and at bundle end.
    Each output (batches; tagged ``dead_letters``) is in the window of its records, at the
    latest timestamp among them (in that window, never earlier than a record of it)."""

    def __init__(self, to_arrow: "ToArrow") -> None:
        # decode keeps nothing of a batch: the DoFns of a worker process share the
        # compiled plan and nothing else.
        super().__init__(to_arrow.transcoder, to_arrow.input)
        self._column = to_arrow.column
        self._carry, self._size = to_arrow.carry, to_arrow.batch_size
        self._tables = to_arrow.batch_type is pa.Table
        self._counts = [
            Metrics.counter(METRICS_NAMESPACE, _METRIC_NAMES.get(f.name, f.name))
            for f in dataclasses.fields(Counts)
        ]
        self._batches_out = Metrics.counter(METRICS_NAMESPACE, "batches_out")
        # Record batches received whole from a batch-producing source (ReadFromDelimited).
        self._arrays_in = Metrics.counter(METRICS_NAMESPACE, "record_arrays_in")

    def start_bundle(self) -> None:
        self._buffers: dict[Any, list] = {}  # window -> [latest timestamp, elements]

    def process(
        self,
        element: Any,
        window: Any = beam.DoFn.WindowParam,
        timestamp: Any = beam.DoFn.TimestampParam,
    ) -> Iterator[Any]:
        buf = self._buffers.get(window)
        if buf is None:
            buf = self._buffers[window] = [timestamp, []]
        elif timestamp > buf[0]:
            buf[0] = timestamp
        buf[1].append(element)
        if len(buf[1]) >= self._size:
            del self._buffers[window]
            yield from self._emit(buf, window)

    def finish_bundle(self) -> Iterator[Any]:
        buffers, self._buffers = self._buffers, {}
        for window, buf in buffers.items():
            yield from self._emit(buf, window)

    def _emit(self, buf: list, window: Any) -> Iterator[Any]:
        # WindowedValues: in finish_bundle there is no input element whose window Beam
        # could use, and in process the buffered records may be older than the current one.
        timestamp, elements = buf
        column = self._column
        if all(type(e) is bytes or type(e) is str for e in elements):  # (str: protojson)
            records = elements
        else:
            records = [unpack(e, column)[1] for e in elements]
        carry = {
            name: pa.array([_carried(e, name, column) for e in elements], t)
            for name, t in self._carry
        }
        batch, dead = self._decode(records, elements, carry or None)
        if batch.num_rows:
            yield WindowedValue(batch, timestamp, (window,))
        for letter in dead:
            yield pvalue.TaggedOutput("dead_letters", WindowedValue(letter, timestamp, (window,)))

    def _decode(self, records: Any, elements: list | None, carry: Any = None) -> tuple:
        """(rows, DeadLetters) of ``records``; ``elements``: where they came from (their
        keys and Kafka positions go into the dead letters)."""
        rows, dead, counts = self._tc.decode(records, self._format, carry=carry)
        letters = []
        if dead.num_rows:
            columns = [dead.column(i).to_pylist() for i in range(5)]  # DEAD_LETTER_SCHEMA's
            for index, offset, path, reason, raw in zip(*columns, strict=True):
                element = None if elements is None else elements[index]
                letters.append(dead_letter(element, self._column, index, offset, path, reason, raw=raw))
        for counter, value in zip(self._counts, counts.values(), strict=True):
            counter.inc(value)
        self._batches_out.inc()
        progress.TOTALS.add(counts)  # the worker's progress line, while the job runs
        return (pa.Table.from_batches([rows]) if self._tables else rows), letters


class _TranscodeBatchesFn(_TranscodeFn):
    """_TranscodeFn that also takes whole RecordArrays (Beam's batched DoFns): fused after
    a producer of batches (ReadFromDelimited), no per-record call at all."""

    def get_input_batch_type(self, input_element_type: Any) -> Any:
        return RecordArray

    @beam.DoFn.yields_elements
    def process_batch(self, batch: RecordArray) -> Iterator[Any]:
        # A batch is homogeneous in window and timestamp: Beam gives every output the
        # batch's own, so plain values (and TaggedOutputs of plain values) are right here.
        array, size = batch.array, self._size
        self._arrays_in.inc()
        for start in range(0, len(array), size):
            rows, dead = self._decode(array.slice(start, size), None)
            if rows.num_rows:
                yield rows
            for letter in dead:
                yield pvalue.TaggedOutput("dead_letters", letter)


def _carried(element: Any, name: str, column: str) -> Any:
    """The carry= field ``name`` of a row element (``"key"``: a pair's key, or the row's)."""
    if isinstance(element, bytes | bytearray | memoryview | str):
        raise TypeError("ToArrow(carry=) takes rows (the fields to carry), not bytes")
    if name == "key":
        return unpack(element, column)[0]
    if not hasattr(element, name):
        raise TypeError(f"ToArrow(carry=): {type(element).__name__} element has no field {name!r}")
    return getattr(element, name)


def _carry_fields(carry: Any) -> tuple:
    """carry= as ((name, Arrow type or None), ...)."""
    if isinstance(carry, str):
        raise TypeError("carry= is a list of field names (or a mapping name -> Arrow type)")
    if not isinstance(carry, Mapping):
        return tuple((str(name), None) for name in carry)
    for name, t in carry.items():
        if not isinstance(t, pa.DataType):
            raise TypeError(f"carry= {name!r}: expected a pyarrow type, not {t!r}")
    return tuple((str(name), t) for name, t in carry.items())


class ToArrow(beam.PTransform):
    """Protobuf records (``bytes``, ``(key, bytes)`` pairs or rows with a bytes field
    ``column``) to Arrow record batches, with the records that fail on the side: an
    :class:`ArrowResult` (``.batches``, ``.dead_letters``, ``.schema``, known before the
    pipeline runs).

    ``plan``: anything ``wirearrow.plans.resolve_plan`` takes, resolved and compiled here
    (the workers receive its spec). ``input``: a ``wirearrow.RecordFormat`` (default: the
    plan's ``input:``), its fields as keywords over it. ``on_error``: default
    "dead_letter" with ``error_handling`` (Beam YAML's ``{"output": name}``), else the
    plan's policy. ``carry``: row fields repeated on their record's rows (names, or a
    mapping name -> Arrow type). ``profile``: a saved parser profile or ParserCache.
    ``batch_type``: ``pa.RecordBatch`` or ``pa.Table``. docs/beam.md has the details.
    """

    def __init__(
        self,
        plan: Any,
        input: Any = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        on_error: Optional[str] = None,  # noqa: UP045 (Beam YAML reads these annotations)
        error_handling: Optional[Mapping[str, str]] = None,  # noqa: UP045
        carry: Any = (),
        profile: Optional[Any] = None,  # noqa: UP045
        batch_type: Any = pa.RecordBatch,
        **input_options: Any,
    ) -> None:
        super().__init__()
        if batch_type not in (pa.RecordBatch, pa.Table):
            raise ValueError(f"batch_type must be pa.RecordBatch or pa.Table, not {batch_type!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        if "field" in input_options:
            raise TypeError("ToArrow(field=) is now column=, the record column's name everywhere")
        policy, self._dead_key = errors(on_error, error_handling)
        cache = None if profile is None else resolve_profile(profile)
        resolved = resolve_plan(plan, on_error=policy, cache=cache)
        fmt = RecordFormat.one_by_one(resolved.input, input, **input_options)
        self.transcoder, self.input = resolved.transcoder, fmt.replace(column=None)
        self.column = fmt.column or "value"
        self.batch_size, self.batch_type = int(batch_size), batch_type
        # A wrong combination of input options fails here, where the pipeline is built.
        self.schema = self.transcoder.decode([], self.input).rows.schema
        self.carry = _carry_fields(carry)
        taken = set(self.schema.names) & {name for name, _ in self.carry}
        if taken:
            raise ValueError(f"carry= fields clash with the plan's output: {sorted(taken)}")
        if all(t is not None for _, t in self.carry):
            for name, t in self.carry:
                self.schema = self.schema.append(pa.field(name, t))

    def expand(self, pcoll: beam.PCollection):  # -> ArrowResult (Beam reads annotations)
        t = pcoll.element_type
        batched = t in (bytes, typing.ByteString) or getattr(t, "type", None) is bytes
        if self.carry and batched:
            raise TypeError("ToArrow(carry=) takes rows (the fields to carry), not bytes")
        fn = (_TranscodeBatchesFn if batched else _TranscodeFn)(self)
        outputs = pcoll | "Transcode" >> beam.ParDo(fn).with_output_types(
            self.batch_type, dead_letters=DeadLetter
        ).with_outputs("dead_letters", main="batches")
        # Beam 2.77 flushes a DoFn's buffers for batched consumers (process_batch) before
        # it calls finish_bundle(), so a bundle's last batch, emitted there, would never
        # reach a batched DoFn fused after _TranscodeFn. Passed on from a Map's process(),
        # it is flushed when the Map finishes, after _TranscodeFn.
        batches = outputs.batches | "Handover" >> beam.Map(_same).with_output_types(self.batch_type)
        return ArrowResult(
            "batches", batches, outputs.dead_letters, self._dead_key, schema=self.schema
        )


def _same(batch: Any) -> Any:
    return batch


with_keywords(
    ToArrow.__init__,
    [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=Any)
        for name, f in FIELDS.items()
    ],
)
