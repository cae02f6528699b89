"""The Encoder: Arrow rows -> protobuf records (and protojson text), the inverse of a
whole-message decode.

Each value is byte-identical to the protobuf runtime's ``SerializeToString(deterministic=
True)`` of the message its row holds (docs/round-trip.md). The encoding plan of each batch
schema is built once and kept (a handful per process).
"""

from __future__ import annotations

import threading
from typing import Literal, NamedTuple, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from wirearrow.counts import Counts
from wirearrow.dead_letters import DEAD_LETTER_SCHEMA
from wirearrow.errors import EncodeError
from wirearrow.plan.encoding import EncodingPlan
from wirearrow.schema import Schema
from wirearrow.sources.protojson import to_json

__all__ = ["ENCODE_FAILURE_SCHEMA", "Encoded", "Encoder"]

# The rows encode(on_error="dead_letter") could not encode: the row of the batch, the
# column path of the offending value and why (what EncodeError says).
ENCODE_FAILURE_SCHEMA = pa.schema(
    [
        pa.field("row", pa.int64(), nullable=False),
        pa.field("path", pa.utf8(), nullable=False),
        pa.field("reason", pa.utf8(), nullable=False),
    ]
)


class Encoded(NamedTuple):
    """What ``encode(batch, on_error="dead_letter")`` returns: ``records``, one per row
    (null for a row that could not be encoded), and ``failures`` (ENCODE_FAILURE_SCHEMA),
    one row per null record."""

    records: pa.Array
    failures: pa.Table

    def dead_letters(self) -> pa.Table:
        """The failures as dead letters (``DEAD_LETTER_SCHEMA``): ``index`` the row, ``offset``
        0 and ``raw`` null (a row is not a record)."""
        rows, paths, reasons = self.failures.columns
        n = len(rows)
        zeros, nulls = pa.array(np.zeros(n, dtype=np.int64)), pa.nulls(n, pa.binary())
        return pa.table([rows, zeros, paths, reasons, nulls], schema=DEAD_LETTER_SCHEMA)

    def counts(self, dead_letters: bool = False) -> Counts:
        """This encode as :class:`~wirearrow.Counts`: every row a record in, ``records_ok``
        the rows encoded, ``rows_out`` the records made and ``bytes_in`` their bytes (what
        a decode of them reads); ``dead_letters``: whether the failures were kept."""
        n, failed = len(self.records), self.failures.num_rows
        size = pc.sum(pc.binary_length(self.records)).as_py() if n else 0
        kept = failed if dead_letters else 0
        return Counts(n, n - failed, failed, n - failed, int(size or 0), kept)


class Encoder:
    """Arrow rows of ``schema``'s message (as a whole-message decode gives them) ->
    protobuf records. ``Transcoder.encode`` and ``to_json`` use the transcoder's."""

    def __init__(self, schema: Schema) -> None:
        self._schema = schema
        self._lock = threading.Lock()
        self._plans: list[EncodingPlan] = []  # the latest first

    def to_json(
        self,
        batch: pa.RecordBatch | pa.Table | pa.StructArray,
        *,
        preserving_proto_field_name: bool = False,
        always_print_fields_with_no_presence: bool = False,
        use_integers_for_enums: bool = False,
        indent: int | None = None,
    ) -> pa.StringArray:
        """Arrow rows -> protojson text, one per row, equal to ``json_format.MessageToJson``.

        The rows are encoded as by :meth:`encode` (same rules and errors), then printed with
        the runtime's ``MessageToJson`` and these options (``indent=None``: one line each,
        for NDJSON sinks). See docs/json.md.
        """
        return to_json(
            self._schema.descriptor,
            self.encode(batch),
            preserving_proto_field_name=preserving_proto_field_name,
            always_print_fields_with_no_presence=always_print_fields_with_no_presence,
            use_integers_for_enums=use_integers_for_enums,
            indent=indent,
        )

    @overload
    def encode(
        self,
        batch: pa.RecordBatch | pa.Table | pa.StructArray,
        *,
        on_error: Literal["raise"] = "raise",
    ) -> pa.Array: ...

    @overload
    def encode(
        self, batch: pa.RecordBatch | pa.Table | pa.StructArray, *, on_error: Literal["dead_letter"]
    ) -> Encoded: ...

    def encode(
        self, batch: pa.RecordBatch | pa.Table | pa.StructArray, *, on_error: str = "raise"
    ) -> pa.Array | Encoded:
        """Arrow rows -> protobuf bytes: one serialized message per row, as a BinaryArray.

        The inverse of whole-message ``transcode``: ``batch`` has this transcoder's
        ``arrow_schema`` (plus ``_unknown`` columns when they were kept), as a RecordBatch,
        a Table (encoded chunk by chunk) or a StructArray (a null row is an error). Each
        value is byte-identical to the protobuf runtime's
        ``SerializeToString(deterministic=True)`` of the message the row holds; a
        LargeBinaryArray when the batch serializes to over 2 GiB. Rows that cannot be
        encoded (a null list element or map key, an enum name the enum does not declare, a
        timestamp outside Timestamp's range) raise :class:`EncodeError` naming the row and
        the column. See docs/round-trip.md.

        ``on_error="dead_letter"``: a row that cannot be encoded does not fail the batch;
        returns :class:`Encoded` -- the records (a null where a row failed) and the
        failures (row, column path, reason). A batch without bad rows costs what the plain
        call costs (one pass in C, no Python per row); each bad row costs a pass or two more
        over the rows around it (the core stops at a bad row: the rest is encoded again).
        """
        if on_error == "dead_letter":
            return self._encode_rows(batch)
        if on_error != "raise":
            raise ValueError(f'encode\'s on_error is "raise" or "dead_letter", not {on_error!r}')
        if isinstance(batch, pa.Table):
            chunks = [self.encode(b) for b in batch.to_batches()]
            if not chunks:
                return self.encode(pa.RecordBatch.from_pylist([], schema=batch.schema))
            large = any(pa.types.is_large_binary(c.type) for c in chunks)
            if large:
                chunks = [c.cast(pa.large_binary()) for c in chunks]
            return pa.concat_arrays(chunks)
        if isinstance(batch, pa.StructArray):
            if batch.null_count:
                row = int(np.flatnonzero(~np.asarray(batch.is_valid()))[0])
                raise EncodeError("a null row is not a message", row=row, path="")
            batch = pa.RecordBatch.from_struct_array(batch)
        if not isinstance(batch, pa.RecordBatch):
            raise TypeError(f"encode takes a RecordBatch, Table or StructArray, not {type(batch)}")
        return self._encoding_plan(batch.schema).encode(batch)

    def _encode_rows(self, batch: pa.RecordBatch | pa.Table | pa.StructArray) -> Encoded:
        """encode(on_error="dead_letter"): the core stops at a batch's first bad row, so the
        rows before it are encoded, the row is recorded, and the rest is encoded again."""
        pieces: list[pa.Array] = []
        failures: list[tuple[int, str, str]] = []
        null_rows = None
        if isinstance(batch, pa.StructArray):
            if batch.null_count:
                # A null row is not a message: its failure, and its record, are set below.
                null_rows = ~np.asarray(batch.is_valid())
                batch = batch.filter(pa.array(~null_rows))
            batch = pa.RecordBatch.from_struct_array(batch)
        if not isinstance(batch, pa.RecordBatch | pa.Table):
            raise TypeError(f"encode takes a RecordBatch, Table or StructArray, not {type(batch)}")
        chunks = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        if not chunks:
            chunks = [pa.RecordBatch.from_pylist([], schema=batch.schema)]
        base = 0
        for chunk in chunks:
            self._encode_slice(chunk, base, pieces, failures)
            base += chunk.num_rows
        if any(pa.types.is_large_binary(p.type) for p in pieces):
            pieces = [p.cast(pa.large_binary()) for p in pieces]
        records = pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)
        if null_rows is not None:
            # Back to the rows of the StructArray: the rows kept, in order, and the nulls.
            kept = np.flatnonzero(~null_rows)
            failures = [(int(kept[row]), path, why) for row, path, why in failures]
            failures += [(int(r), "", "a null row is not a message") for r in np.flatnonzero(null_rows)]
            failures.sort()
            where = np.full(len(null_rows), -1, dtype=np.int64)
            where[kept] = np.arange(len(kept))
            records = records.take(pa.array(where, mask=null_rows))
        rows, paths, reasons = zip(*failures, strict=True) if failures else ((), (), ())
        table = pa.table(
            [pa.array(rows, pa.int64()), pa.array(paths, pa.utf8()), pa.array(reasons, pa.utf8())],
            schema=ENCODE_FAILURE_SCHEMA,
        )
        return Encoded(records, table)

    def _encode_slice(
        self,
        batch: pa.RecordBatch,
        base: int,
        pieces: list[pa.Array],
        failures: list[tuple[int, str, str]],
    ) -> None:
        start, n = 0, batch.num_rows
        while True:
            rest = batch.slice(start)
            try:
                pieces.append(self.encode(rest))
                return
            except EncodeError as err:
                if err.row is None:  # the batch's schema does not fit: no row is good
                    raise
                bad, path, reason = err.row, err.path, err.reason
            if bad:  # the rows before the bad one encode (split again if one does not)
                self._encode_slice(batch.slice(start, bad), base + start, pieces, failures)
            failures.append((base + start + bad, path, reason))
            pieces.append(pa.nulls(1, pa.binary()))
            start += bad + 1
            if start >= n:
                return

    def _encoding_plan(self, schema: pa.Schema) -> EncodingPlan:
        # Found by comparing schemas: hashing one formats every type as text, which took
        # ~20 ms a call for a wide recursive message (a few thousand arrays).
        for plan in self._plans:
            if plan.schema.equals(schema):
                return plan
        plan = EncodingPlan(self._schema.descriptor, schema)
        with self._lock:  # a new list: a reader iterating the old one is not disturbed
            self._plans = [plan, *self._plans[:15]]  # a handful per process
        return plan

