"""FromArrow / FromRows: Arrow record batches or schema'd Beam rows -> protobuf records.

The way back of ToArrow / ToRows: each row becomes one serialized message
(``Transcoder.encode``: byte-identical to the runtime's deterministic serialization),
plain or in the Confluent wire format, and a row that cannot be encoded becomes an
:class:`EncodeDeadLetter` instead of failing the bundle.
"""

# No `from __future__ import annotations`: Beam reads the DoFns' and PTransforms'
# annotations as type hints at run time.

import io
import pickle
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from wirearrow.beam.schemas import VALUE_ERRORS, RowsToArrow, RowValueError, message_transcoder
from wirearrow.beam.transcode import (
    DEFAULT_BATCH_SIZE,
    METRICS_NAMESPACE,
    _resolve_transcoder,
    dead_letter_tag,
)
from wirearrow.errors import EncodeError
from wirearrow.transcoder import Transcoder

ON_ERROR = ("dead_letter", "skip", "raise")


class EncodeDeadLetter(NamedTuple):
    """A row that could not be encoded: a Beam Row (schema'd, RowCoder).

    ``index`` is the row's position in the batch it was encoded with (for FromRows: in
    the rows buffered together), ``path`` the column of the offending value
    (``points[3].x``, as :class:`~wirearrow.EncodeError` names it; "" for the whole row),
    ``reason`` the error text, ``row`` the row itself as an Arrow IPC stream of one row
    (``pa.ipc.open_stream(row).read_all()``), or None when the row did not even become
    Arrow (a FromRows value of the wrong type: ``reason`` quotes it).
    """

    index: int  # type: ignore[assignment]  # the dead-letter schemas' name for the position
    path: str
    reason: str
    row: Optional[bytes]  # noqa: UP045 (Beam's typehint conversion needs typing.Optional)


beam.coders.registry.register_coder(EncodeDeadLetter, beam.coders.RowCoder)


def _ipc_row(batch: pa.RecordBatch, row: int) -> bytes:
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch.slice(row, 1))
    return sink.getvalue()


def encode_rows(
    tc: Transcoder, batch: pa.RecordBatch
) -> tuple[pa.Array, np.ndarray, list[tuple[int, str, str]]]:
    """(records of the rows that encode, their row positions, (row, path, reason) of the
    others): ``encode(on_error="dead_letter")``, whose bad rows cost a pass or two more over
    the rows around them. A batch whose schema does not fit (an error with no row) makes
    every row a dead letter with that reason."""
    try:
        records, failures = tc.encode(batch, on_error="dead_letter")
    except EncodeError as err:
        if err.row is not None:
            raise
        failed = [(i, err.path, err.reason) for i in range(batch.num_rows)]
        return pa.array([], pa.binary()), np.zeros(0, np.int64), failed
    if not failures.num_rows:
        return records, np.arange(len(records), dtype=np.int64), []
    kept = np.flatnonzero(np.asarray(records.is_valid()))
    failed = list(
        zip(
            failures.column("row").to_pylist(),
            failures.column("path").to_pylist(),
            failures.column("reason").to_pylist(),
            strict=True,
        )
    )
    return records.filter(records.is_valid()), kept, failed


class _EncodeFn(beam.DoFn):
    """pa.RecordBatch / pa.Table -> protobuf records (bytes, or (key, bytes) with
    ``key_column``); tagged output ``dead_letters``: EncodeDeadLetter."""

    def __init__(self, spec: bytes, key_column: Optional[str]) -> None:  # noqa: UP045
        super().__init__()
        # The Transcoder travels pickled and is unpickled (its plan compiled, once per
        # worker process by the process's parser cache) in setup().
        self._spec = spec
        self._key_column = key_column
        self._rows_in = Metrics.counter(METRICS_NAMESPACE, "rows_in")
        self._records_out = Metrics.counter(METRICS_NAMESPACE, "records_out")
        self._rows_failed = Metrics.counter(METRICS_NAMESPACE, "rows_failed")

    def setup(self) -> None:
        self._tc: Transcoder
        self._tc, self._on_error, confluent = pickle.loads(self._spec)
        self._frame = None if confluent is None else _confluent_framing(*confluent)

    def process(self, batch: Any) -> Iterator[Any]:
        if isinstance(batch, pa.Table):
            for part in batch.to_batches():
                yield from self._encode(part)
            return
        if not isinstance(batch, pa.RecordBatch):
            raise TypeError(f"FromArrow takes pa.RecordBatch or pa.Table, not {type(batch)}")
        yield from self._encode(batch)

    def _encode(self, batch: pa.RecordBatch) -> Iterator[Any]:
        keys = None
        if self._key_column is not None:
            keys = batch.column(self._key_column).to_pylist()
            batch = batch.drop_columns([self._key_column])
        yield from self._emit(batch, keys, [], None)

    def _emit(
        self,
        batch: pa.RecordBatch,
        keys: Optional[list],  # noqa: UP045
        dead: list,
        positions: Optional[list[int]],  # noqa: UP045
    ) -> Iterator[Any]:
        """Encode ``batch``. ``dead``: letters of rows that never became Arrow, and
        ``positions`` the input position of each row of ``batch`` (None: the same)."""
        self._rows_in.inc(batch.num_rows + len(dead))
        values, kept, failed = encode_rows(self._tc, batch)

        def position(row: int) -> int:
            return row if positions is None else positions[row]

        if self._on_error == "raise" and (dead or failed):
            first = min(
                [(d.index, d.path, d.reason) for d in dead]
                + [(position(row), path, reason) for row, path, reason in failed]
            )
            raise EncodeError(first[2], row=first[0], path=first[1])
        self._rows_failed.inc(len(dead) + len(failed))
        if self._frame is not None:
            values = self._frame(values)
        self._records_out.inc(len(values))
        records = values.to_pylist()
        if keys is None:
            yield from records
        else:
            yield from zip([keys[i] for i in kept.tolist()], records, strict=True)
        if self._on_error != "dead_letter":  # skip: counted, not kept
            return
        for letter in dead:
            yield pvalue.TaggedOutput("dead_letters", letter)
        for row, path, reason in failed:
            letter = EncodeDeadLetter(position(row), path, reason, _ipc_row(batch, row))
            yield pvalue.TaggedOutput("dead_letters", letter)


class _EncodeRowsFn(_EncodeFn):
    """Lists of Beam rows (BatchElements' batches, one window each) -> records: each list
    becomes one Arrow batch of the plan's schema (RowsToArrow), encoded together."""

    def setup(self) -> None:
        super().setup()
        self._to_arrow = RowsToArrow(self._tc.arrow_schema)

    def process(self, rows: list) -> Iterator[Any]:
        batch, dead, good = self._rows_batch(rows)
        keys = None
        if self._key_column is not None:
            keys = [getattr(rows[i], self._key_column, None) for i in good]
        yield from self._emit(batch, keys, dead, None if len(good) == len(rows) else good)

    def _rows_batch(self, rows: list) -> tuple[pa.RecordBatch, list, list[int]]:
        try:
            return self._to_arrow(rows), [], list(range(len(rows)))
        except VALUE_ERRORS:
            pass
        # Some row holds a value of the wrong type: find it (them) one row at a time.
        good: list[int] = []
        parts: list[pa.RecordBatch] = []
        dead: list[EncodeDeadLetter] = []
        for i, row in enumerate(rows):
            try:
                parts.append(self._to_arrow([row]))
                good.append(i)
            except RowValueError as err:
                reason = f"{err.reason} (the row: {row!r:.300})"
                dead.append(EncodeDeadLetter(i, err.path, reason, None))
            except VALUE_ERRORS as err:  # not a field's value: the row itself
                dead.append(EncodeDeadLetter(i, "", f"{err} (the row: {row!r:.300})", None))
        schema = self._to_arrow.schema
        if not parts:
            return pa.RecordBatch.from_pylist([], schema=schema), dead, good
        batch = pa.Table.from_batches(parts, schema=schema).combine_chunks().to_batches()[0]
        return batch, dead, good


class EncodeResult(dict):
    """What FromArrow / FromRows return: ``records`` and ``dead_letters``."""

    def __init__(
        self, records: beam.PCollection, dead_letters: beam.PCollection, dead_key: str
    ) -> None:
        super().__init__({"records": records, dead_key: dead_letters})
        self._dead_key = dead_key

    @property
    def records(self) -> beam.PCollection:
        """PCollection[bytes] (``(key, bytes)`` with ``key_column``)."""
        return self["records"]

    @property
    def dead_letters(self) -> beam.PCollection:
        """PCollection[EncodeDeadLetter]."""
        return self[self._dead_key]


def _confluent_framing(schema_id: int, message_index: Sequence[int]) -> Any:
    from wirearrow.sources.framing import frame_records

    def frame(values: pa.Array) -> pa.Array:
        return frame_records(
            values, "confluent", schema_id=schema_id, message_index=message_index
        )

    return frame


def _encoder_spec(
    plan: Any,
    on_error: str,
    framing: Optional[str],  # noqa: UP045
    schema_id: Optional[int],  # noqa: UP045
    message_index: Optional[Sequence[int]],  # noqa: UP045
) -> tuple[Transcoder, bytes]:
    """(the launcher-side Transcoder of ``plan``, what the DoFns unpickle in setup)."""
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be one of {list(ON_ERROR)}, not {on_error!r}")
    tc = message_transcoder(_resolve_transcoder(plan, None))
    confluent = None
    if framing == "confluent":
        from wirearrow.sources.confluent import message_index as index_of

        if schema_id is None:
            raise ValueError("framing='confluent' needs schema_id= (the registry's id)")
        path = tuple(message_index) if message_index is not None else index_of(tc.schema)
        confluent = (schema_id, path)
        _confluent_framing(*confluent)(pa.array([], pa.binary()))  # refuses a bad id here
    elif framing is not None:
        raise ValueError(f"framing must be None or 'confluent', not {framing!r}")
    elif schema_id is not None or message_index is not None:
        raise ValueError("schema_id= and message_index= are for framing='confluent'")
    return tc, pickle.dumps((tc, on_error, confluent), protocol=pickle.HIGHEST_PROTOCOL)


_ENCODE_ARGS = """
    Args:
        plan: the message: a whole-message YAML plan (no ``columns``), a
            ``wirearrow.Schema``, a generated message class, or a whole-message
            ``wirearrow.Transcoder`` (its options, e.g. ``timestamp_unit``, say what the
            columns hold). Compiled once per worker process.
        on_error: "dead_letter" (default: rows that cannot be encoded go to
            ``.dead_letters``), "skip" (counted in the ``rows_failed`` metric) or "raise"
            (an :class:`~wirearrow.EncodeError` naming the row and column fails the bundle).
        key_column: a column (field) not in the message whose value becomes the key of
            ``(key, bytes)`` output pairs, what ``WriteToKafka`` takes.
        framing: None (the messages as they are) or "confluent": each record in the
            Confluent Schema Registry wire format (magic byte, ``schema_id``, the message
            index), what Confluent's deserializers read from Kafka.
        schema_id: the registry's id of the schema (with ``framing="confluent"``).
        message_index: the message's index path in its file; default: computed from the
            schema (``(0,)`` for the file's first message).
        error_handling: Beam YAML's ``{"output": name}``: names the dead-letter output.
"""


class FromArrow(beam.PTransform):
    """Arrow record batches (pa.RecordBatch or pa.Table elements, e.g. ToArrow's
    ``.batches`` of a whole-message plan) -> protobuf records, one per row.

    Each record is byte-identical to the protobuf runtime's
    ``SerializeToString(deterministic=True)`` of the message the row holds
    (docs/round-trip.md). Returns an :class:`EncodeResult`: ``.records`` (bytes, or
    ``(key, bytes)`` with ``key_column``) and ``.dead_letters`` (:class:`EncodeDeadLetter`).
    """

    __doc__ = (__doc__ or "") + _ENCODE_ARGS

    def __init__(
        self,
        plan: Any,
        on_error: str = "dead_letter",
        key_column: Optional[str] = None,  # noqa: UP045 (Beam YAML reads these annotations)
        framing: Optional[str] = None,  # noqa: UP045
        schema_id: Optional[int] = None,  # noqa: UP045
        message_index: Optional[Sequence[int]] = None,  # noqa: UP045
        error_handling: Optional[Mapping[str, str]] = None,  # noqa: UP045
    ) -> None:
        super().__init__()
        self.transcoder, self._spec = _encoder_spec(
            plan, on_error, framing, schema_id, message_index
        )
        self._key_column = key_column
        self._dead_key = dead_letter_tag(error_handling)

    def _fn(self) -> beam.DoFn:
        return _EncodeFn(self._spec, self._key_column)

    def expand(self, pcoll: beam.PCollection):  # -> EncodeResult (Beam reads annotations)
        record_type: Any = bytes if self._key_column is None else tuple[Any, bytes]
        outputs = pcoll | "Encode" >> beam.ParDo(self._fn()).with_output_types(
            record_type, dead_letters=EncodeDeadLetter
        ).with_outputs("dead_letters", main="records")
        return EncodeResult(outputs.records, outputs.dead_letters, self._dead_key)


class FromRows(FromArrow):
    """Schema'd Beam rows (ToRows' rows, ``message_row_type`` rows, ``beam.Row`` or any
    object with the fields by name) -> protobuf records, one per row.

    Rows are gathered per window into lists of up to ``batch_size``
    (``beam.BatchElements``), each converted to one Arrow batch of the message's schema
    (the inverse of ToRows' type mapping) and encoded like :class:`FromArrow`'s. A row
    holding a value of the wrong type is a dead letter (``row`` None, ``reason`` quotes
    it). ``batch_size``: rows per batch at most; the other arguments are FromArrow's.
    """

    __doc__ = (__doc__ or "") + _ENCODE_ARGS

    def __init__(self, plan: Any, batch_size: int = DEFAULT_BATCH_SIZE, **options: Any) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        super().__init__(plan, **options)
        self._batch_size = int(batch_size)

    def _fn(self) -> beam.DoFn:
        return _EncodeRowsFn(self._spec, self._key_column)

    def expand(self, pcoll: beam.PCollection):  # -> EncodeResult
        batches = pcoll | "Batch" >> beam.BatchElements(
            min_batch_size=1, max_batch_size=self._batch_size
        )
        return super().expand(batches)
