"""The way back of ToArrow / ToRows: Arrow record batches (FromArrow) or schema'd Beam rows
(FromRows) -> protobuf records, and whole-message batches -> protojson text (ToJson).
docs/beam.md, "The write half"."""

# No `from __future__ import annotations`: Beam reads the DoFns' and PTransforms'
# annotations as type hints at run time.

import inspect
import io
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple, Optional

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam import pvalue
from apache_beam.metrics import Metrics

from wirearrow.beam.rows import VALUE_ERRORS, RowsToArrow, RowValueError, whole_message
from wirearrow.beam.transcode import (
    DEFAULT_BATCH_SIZE,
    METRICS_NAMESPACE,
    Outputs,
    PlanFn,
    errors,
    keywords_of,
    output,
    with_keywords,
)
from wirearrow.encoder import Encoder
from wirearrow.errors import EncodeError
from wirearrow.sources.framing import record_framer


class EncodeDeadLetter(NamedTuple):
    """A row that could not be encoded, as a Beam Row (RowCoder): its ``index`` in its
    batch, the ``path`` of the column, the ``reason`` and the ``row`` as a one-row Arrow
    IPC stream (None for a FromRows row that never became Arrow). docs/beam.md."""

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


class _EncodeFn(PlanFn):
    """pa.RecordBatch / pa.Table -> protobuf records (bytes, or (key, bytes) with
    ``key_column``); tagged output ``dead_letters``: EncodeDeadLetter."""

    def __init__(self, from_arrow: "FromArrow") -> None:
        super().__init__(from_arrow.transcoder)
        self._key_column, self._frame = from_arrow.key_column, from_arrow.frame
        self._policy = from_arrow.transcoder.spec.on_error
        self._rows_in = Metrics.counter(METRICS_NAMESPACE, "rows_in")
        self._records_out = Metrics.counter(METRICS_NAMESPACE, "records_out")
        self._rows_failed = Metrics.counter(METRICS_NAMESPACE, "rows_failed")

    def process(self, batch: Any) -> Iterator[Any]:
        if not isinstance(batch, pa.RecordBatch | pa.Table):
            raise TypeError(f"FromArrow takes pa.RecordBatch or pa.Table, not {type(batch)}")
        for part in batch.to_batches() if isinstance(batch, pa.Table) else [batch]:
            keys = None
            if self._key_column is not None:
                keys = part.column(self._key_column).to_pylist()
                part = part.drop_columns([self._key_column])
            yield from self._emit(part, keys, [], None)

    def _emit(
        self,
        batch: pa.RecordBatch,
        keys: list | None,
        dead: list,
        positions: Any,
    ) -> Iterator[Any]:
        """Encode ``batch``. ``dead``: letters of rows that never became Arrow, and
        ``positions`` the input position of each row of ``batch`` (None: the same)."""
        self._rows_in.inc(batch.num_rows + len(dead))
        try:  # bad rows cost a pass or two more over the rows around them
            values, failures = self._tc.encode(batch, on_error="dead_letter")
            columns = [failures.column(c).to_pylist() for c in ("row", "path", "reason")]
            failed = list(zip(*columns, strict=True))
        except EncodeError as err:
            if err.row is not None:
                raise
            # The batch's schema does not fit (an error of no row): every row fails so.
            values = pa.nulls(batch.num_rows, pa.binary())
            failed = [(row, err.path, err.reason) for row in range(batch.num_rows)]
        failed = [
            (row if positions is None else positions[row], path, why, row)
            for row, path, why in failed
        ]
        kept = np.flatnonzero(np.asarray(values.is_valid()))
        if failed:
            values = values.filter(values.is_valid())
        if self._policy == "raise" and (dead or failed):
            first = min([(d.index, d.path, d.reason) for d in dead] + [f[:3] for f in failed])
            raise EncodeError(first[2], row=first[0], path=first[1])
        self._rows_failed.inc(len(dead) + len(failed))
        values = self._frame(values)
        self._records_out.inc(len(values))
        records = values.to_pylist()
        yield from (
            records if keys is None else zip([keys[i] for i in kept.tolist()], records, strict=True)
        )
        if self._policy == "dead_letter":  # skip: counted, not kept
            for letter in dead:
                yield pvalue.TaggedOutput("dead_letters", letter)
            for index, path, reason, row in failed:
                letter = EncodeDeadLetter(index, path, reason, _ipc_row(batch, row))
                yield pvalue.TaggedOutput("dead_letters", letter)


class _EncodeRowsFn(_EncodeFn):
    """Lists of Beam rows (BatchElements' batches, one window each) -> records: each list
    becomes one Arrow batch of the plan's schema (RowsToArrow), encoded together."""

    def setup(self) -> None:
        super().setup()
        self._to_arrow = RowsToArrow(self._tc.arrow_schema)

    def process(self, rows: list) -> Iterator[Any]:
        dead: list[EncodeDeadLetter] = []
        try:
            batch, good = self._to_arrow(rows), list(range(len(rows)))
        except VALUE_ERRORS:
            batch, dead, good = self._row_by_row(rows)
        keys = None
        if self._key_column is not None:
            keys = [getattr(rows[i], self._key_column, None) for i in good]
        yield from self._emit(batch, keys, dead, None if len(good) == len(rows) else good)

    def _row_by_row(self, rows: list) -> tuple[pa.RecordBatch, list, list[int]]:
        """Some row holds a value of the wrong type: find it (them) one row at a time."""
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


class EncodeResult(Outputs):
    """FromArrow's / FromRows' outputs: ``records`` and ``dead_letters`` (EncodeDeadLetter)."""

    records = output("records", "PCollection[bytes] (``(key, bytes)`` with ``key_column``)")


class FromArrow(beam.PTransform):
    """Arrow record batches (pa.RecordBatch or pa.Table elements of a whole-message schema,
    e.g. ToArrow's) -> protobuf records, one per row, each byte-identical to the runtime's
    ``SerializeToString(deterministic=True)``: an :class:`EncodeResult`.

    ``plan``: a ``wirearrow.Schema``, a message class, a whole-message plan or Transcoder.
    ``on_error``: as for ToArrow (rows that cannot be encoded: raise, skip -- counted in
    ``rows_failed`` -- or dead_letter). ``key_column``: a column not in the message whose
    value keys ``(key, bytes)`` output pairs (``WriteToKafka``'s). ``framing``: None or
    "confluent" (with ``schema_id`` and ``message_index``, default: the message's path).
    """

    _fn_class: Any = _EncodeFn

    def __init__(
        self,
        plan: Any,
        on_error: Optional[str] = None,  # noqa: UP045 (Beam YAML reads these annotations)
        key_column: Optional[str] = None,  # noqa: UP045
        framing: Optional[str] = None,  # noqa: UP045
        schema_id: Optional[int] = None,  # noqa: UP045
        message_index: Optional[Sequence[int]] = None,  # noqa: UP045
        error_handling: Optional[Mapping[str, str]] = None,  # noqa: UP045
    ) -> None:
        super().__init__()
        policy, self._dead_key = errors(on_error, error_handling)
        self.transcoder = whole_message(plan, on_error=policy)
        self.key_column = key_column
        self.frame = record_framer(
            self.transcoder.schema, framing, schema_id=schema_id, message_index=message_index
        )

    def expand(self, pcoll: beam.PCollection):  # -> EncodeResult (Beam reads annotations)
        record_type: Any = bytes if self.key_column is None else tuple[Any, bytes]
        fn = self._fn_class(self)
        outputs = pcoll | "Encode" >> beam.ParDo(fn).with_output_types(
            record_type, dead_letters=EncodeDeadLetter
        ).with_outputs("dead_letters", main="records")
        return EncodeResult("records", outputs.records, outputs.dead_letters, self._dead_key)


class FromRows(FromArrow):
    """Schema'd Beam rows (ToRows' or ``message_row_type``'s, ``beam.Row`` or any object
    with the fields by name) -> protobuf records: gathered per window into lists of up to
    ``batch_size`` (``beam.BatchElements``), each one Arrow batch (:class:`RowsToArrow`)
    encoded as by :class:`FromArrow`, whose arguments it takes. A row holding a value of
    the wrong type is a dead letter (``row`` None, ``reason`` quoting it)."""

    _fn_class = _EncodeRowsFn

    def __init__(self, plan: Any, batch_size: int = DEFAULT_BATCH_SIZE, **options: Any) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size}")
        super().__init__(plan, **options)
        self._batch_size = int(batch_size)

    def expand(self, pcoll: beam.PCollection):  # -> EncodeResult
        batches = pcoll | "Batch" >> beam.BatchElements(
            min_batch_size=1, max_batch_size=self._batch_size
        )
        return super().expand(batches)


with_keywords(FromRows.__init__, keywords_of(FromArrow.__init__, 2))  # (self, plan)


class _ToJsonFn(PlanFn):
    def __init__(self, transcoder: Any, options: dict) -> None:
        super().__init__(transcoder)
        self._options = options

    def process(self, batch: pa.RecordBatch | pa.Table) -> Iterator[str]:
        yield from self._tc.to_json(batch, **self._options).to_pylist()


# Encoder.to_json's keyword options, declared there once.
_JSON_OPTIONS = keywords_of(Encoder.to_json, 2)  # (self, batch)


class ToJson(beam.PTransform):
    """Whole-message batches (ToArrow of a plan without columns) -> protojson text, one line
    per row: what ``json_format.MessageToJson`` prints, with ``Encoder.to_json``'s options
    (``indent=None``: one line). ``plan``: as for FromArrow. docs/json.md."""

    def __init__(self, plan: Any, **options: Any) -> None:
        super().__init__()
        self._tc = whole_message(plan)
        inspect.Signature(_JSON_OPTIONS).bind(**options)  # unknown options fail here
        self._options = options

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        fn = _ToJsonFn(self._tc, self._options)
        return pcoll | "ToJson" >> beam.ParDo(fn).with_output_types(str)


with_keywords(ToJson.__init__, [p.replace(annotation=Any) for p in _JSON_OPTIONS])
