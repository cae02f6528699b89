"""The Transcoder: compile a plan once, transcode many batches of protobuf records to Arrow."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, NamedTuple, overload

import numpy as np
import pyarrow as pa

from wirearrow._core.decoder import POLICY_RAISE, POLICY_SKIP, STATUS_TEXT, decode
from wirearrow._core.framing import (
    MERGE_OK,
    MERGE_UNDECLARED,
    array_bounds,
    merge_custom,
    pack_records,
)
from wirearrow.cache import ParserCache, default_cache
from wirearrow.confluent import SchemaIds, SchemaLookup, refused, strip_prefixes
from wirearrow.delimited import TRAILERS, corrupt_reason, split_framed_prefix
from wirearrow.errors import DecodeError, EncodeError
from wirearrow.options import ON_ERROR, OPTIONS, options_doc, unknown_options
from wirearrow.plan.assemble import Assembler, BadRecords
from wirearrow.plan.compiler import Column, CompiledPlan, deepest_whole_read
from wirearrow.plan.encoding import EncodingPlan
from wirearrow.protojson import JsonReader, check_format, to_json
from wirearrow.schema import Schema
from wirearrow.spec import TranscodeSpec, as_columns

__all__ = [
    "DEAD_LETTER_SCHEMA",
    "ENCODE_FAILURE_SCHEMA",
    "ON_ERROR",
    "Encoded",
    "Stats",
    "TranscodeSpec",
    "Transcoder",
    "max_depth_limit",
]


def max_depth_limit(schema: Schema, well_known_types: bool = True) -> int:
    """The largest ``max_depth`` at which ``Transcoder(schema, max_depth=...)`` (whole
    messages) fits the plan-size bound; 0 when even 1 does not (select fields by path)."""
    return deepest_whole_read(schema.descriptor, well_known_types)


DEAD_LETTER_SCHEMA = pa.schema(
    [
        pa.field("index", pa.int64(), nullable=False),
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("path", pa.utf8(), nullable=False),
        pa.field("reason", pa.utf8(), nullable=False),
        pa.field("raw", pa.binary()),
    ]
)

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


@dataclass(slots=True)
class Stats:
    """Cumulative counts; records_in == records_ok + records_failed, always.

    ``precision_lost``: Timestamp / Duration values decoded with nanoseconds the column's
    unit cannot hold, and so truncated (``timestamp_unit="ns"`` or
    ``well_known_types=False`` lose none; docs/types.md).
    ``strings_not_utf8``: values of strings the schema does not validate (proto2, editions
    ``utf8_validation = NONE``) that were not UTF-8, and so were moved to their message's
    unknown fields instead of the utf8 column (with the later values of a repeated field
    of the same message, which follow them there; docs/types.md).
    """

    records_in: int = 0
    records_ok: int = 0
    records_failed: int = 0
    rows_out: int = 0
    bytes_in: int = 0
    precision_lost: int = 0
    strings_not_utf8: int = 0


class Transcoder:
    """Protobuf records -> Arrow record batches, for one schema and one plan.

    ``columns`` is the flat plan: path strings or :class:`Column`; without it the whole
    message is read, one row per record, one column per top-level field. The other keywords
    are the options below. ``cache``: the :class:`~wirearrow.ParserCache` that compiles the
    plan (once per process, shared by every transcoder of the same schema and plan) and
    learns its buffer sizes; default: the process-wide cache
    (``wirearrow.cache.default_cache``).

    ``Transcoder(spec)`` takes a :class:`~wirearrow.TranscodeSpec` (the columns and every
    option in one value) instead; ``tc.spec`` gives it back.
    """

    def __init__(
        self,
        schema: Schema | TranscodeSpec,
        columns: Sequence[str | Column] | None = None,
        *,
        cache: ParserCache | None = None,
        **options: Any,
    ) -> None:
        if isinstance(schema, TranscodeSpec):
            if columns is not None or options:
                raise TypeError(
                    "Transcoder(spec) takes its columns and options from the spec: "
                    "use spec.replace(...) to change them"
                )
            spec = schema
        else:
            unknown = unknown_options(options)
            if unknown:
                raise TypeError(f"Transcoder got unknown options: {', '.join(unknown)}")
            spec = TranscodeSpec(schema, as_columns(columns), **options)
        self._spec = spec
        self._cache = cache if cache is not None else default_cache()
        if not isinstance(self._cache, ParserCache):
            raise TypeError(f"cache must be a wirearrow.ParserCache, not {type(cache).__name__}")
        self._entry = self._cache.entry(spec)
        self._plan: CompiledPlan = self._entry.plan
        self._lock = threading.Lock()
        self._stats = Stats()
        self._dead: list[tuple[int, int, str, str, bytes | None]] = []
        # Carried values of dead letters: (position of the first in _dead, their rows).
        self._dead_carry: list[tuple[int, pa.Table]] = []
        self._encoding_plans: dict[pa.Schema, EncodingPlan] = {}
        self._json_readers: dict[bool, JsonReader] = {}  # by ignore_unknown_fields
        # The schemas= of recent confluent batches, by identity (held, so ids stay unique).
        self._schema_ids: dict[int, tuple[object, SchemaIds]] = {}

    def replace(self, **changes: Any) -> Transcoder:
        """A transcoder of ``spec.replace(**changes)`` on the same cache (this one if nothing
        changes). Counts and dead letters are not carried over."""
        spec = self._spec.replace(**changes)
        if spec == self._spec:
            return self
        return Transcoder(spec, cache=self._cache)

    # -- pickling: ship the spec, rebuild the tables on the worker ---------------------

    def __reduce__(self) -> tuple:
        # The default cache is per process: the worker's own is used. A given cache travels
        # by identity (one instance per process, see ParserCache.__reduce__).
        cache = None if self._cache is default_cache() else self._cache
        return (_rebuild, (self._spec, cache))

    @property
    def cache(self) -> ParserCache:
        """The parser cache this transcoder's plan lives in."""
        return self._cache

    # -- public API ---------------------------------------------------------------------

    @property
    def spec(self) -> TranscodeSpec:
        """Everything that decides what this transcoder does (frozen, picklable)."""
        return self._spec

    @property
    def schema(self) -> Schema:
        return self._spec.schema

    @property
    def arrow_schema(self) -> pa.Schema:
        return self._plan.schema

    @property
    def stats(self) -> Stats:
        with self._lock:
            s = self._stats
            return replace(s)

    def dead_letters(self) -> pa.Table:
        """The dead letters gathered so far (on_error="dead_letter"), and forget them.

        When some came from a ``transcode(..., carry=)`` call, a struct column ``carry``
        holds each one's carried values (null for those transcoded without).
        """
        with self._lock:
            rows, self._dead = self._dead, []
            carried, self._dead_carry = self._dead_carry, []
        columns: list[Sequence[object]] = list(zip(*rows, strict=True)) if rows else [[]] * 5
        table = pa.table(
            [pa.array(c, type=f.type) for c, f in zip(columns, DEAD_LETTER_SCHEMA, strict=True)],
            schema=DEAD_LETTER_SCHEMA,
        )
        if carried:
            table = table.append_column(_CARRY, _carried_struct(carried, len(rows)))
        return table

    def transcode(
        self,
        messages: object,
        *,
        framing: str | None = None,
        record_index: bool | str = False,
        format: str = "binary",
        ignore_unknown_fields: bool = False,
        schemas: SchemaLookup | SchemaIds | None = None,
        schema_id: bool | str = False,
        column: str | None = None,
        carry: object = None,
        custom: object = None,
    ) -> pa.RecordBatch:
        """Decode a batch of records into one RecordBatch with ``arrow_schema``.

        messages: a BinaryArray / LargeBinaryArray (fastest), a ChunkedArray of those, a
        list of bytes-like objects, or one framed buffer with ``framing=`` ("varint",
        "u32le", "u32be", "tfrecord"). A null record is a bad record ("null record"); a
        TFRecord whose data CRC does not match is a bad record saying so (one whose length
        CRC does not match ends the stream: the rest is one bad record).

        Any Arrow producer works too: an object with ``__arrow_c_array__`` or
        ``__arrow_c_stream__`` (a Polars Series, a nanoarrow or arro3 array), a
        ``RecordBatch``/``Table`` or a table-like producer (a Polars DataFrame, a DuckDB
        relation) with ``column=`` naming the binary column (not needed when it has one
        column). Binary, large binary and string arrays are read where they lie;
        ``binary_view`` (Polars' layout) is cast once to large binary, since its values do
        not sit in one buffer; a stream of several chunks is joined once.

        ``framing="confluent"``: each record (of an array or a list) is in the Confluent
        Schema Registry wire format, as Confluent's serializers write it to Kafka. The
        prefix is stripped without copying the payload; ``schemas`` says which schema ids
        are accepted: a ``{schema_id: Schema}`` mapping, a function ``schema_id -> Schema
        | None`` or a :class:`~wirearrow.confluent.SchemaIds`. A record whose id is not
        mapped, whose magic byte is not 0, whose prefix is cut short or whose message index
        names another message than the plan's is a bad record saying so. ``schema_id``:
        True adds an int64 column ``_schema_id`` (a string: that name) with each row's
        schema id. Dead letters keep the whole record, prefix included, and their offsets
        count from the record's first byte.

        ``record_index``: also say which input record each row came from -- True adds an
        int64 column ``_record_index`` after the plan's columns (a string: that name),
        the record's position in ``messages`` (a record fans out into any number of rows,
        a bad one into none; the same numbering as the dead letters' ``index``).

        ``carry``: values that belong to each record (a Kafka offset, an ingestion time, a
        source file), repeated on every row the record fans out into, as columns after the
        plan's (and after ``record_index`` / ``schema_id``): a ``pa.Table``, ``RecordBatch``
        or mapping of name -> array (anything ``pa.table`` takes) with one row per input
        record, or, when ``messages`` is a table, a list of the names of its other columns.
        Bad records have no rows; their dead letters keep the values in a struct column
        ``carry`` (see :meth:`dead_letters`). Done with one Arrow ``take`` per batch on the
        rows' record positions.

        ``custom``: for a schema merged with a custom message
        (:meth:`Schema.with_custom_message`), each record's custom message bytes, aligned
        with ``messages`` (the base messages; same input forms, no framing): each pair is
        read as one merged message. A custom record holding a field number its message
        does not declare, or that is malformed, is a bad record; ``None`` is no custom
        fields. A dead letter's ``raw`` is the base bytes followed by the custom bytes.

        ``format="json"``: each record is protojson text (a string/binary array or a list of
        str/bytes; see docs/json.md), accepted exactly when ``json_format.Parse`` accepts it
        (``ignore_unknown_fields`` as there) and read as the binary form of that message.
        """
        index_name = self._extra_column("record_index", record_index, _RECORD_INDEX)
        id_name = self._extra_column("schema_id", schema_id, _SCHEMA_ID)
        if index_name is not False and index_name == id_name:
            raise ValueError("record_index and schema_id need different column names")
        prefixed = framing == "confluent"
        if prefixed != (schemas is not None):
            raise ValueError(
                "framing='confluent' needs schemas= (the schema of each Confluent schema id)"
                if prefixed
                else "schemas= is for framing='confluent'"
            )
        if id_name is not False and not prefixed:
            raise ValueError("schema_id= is for framing='confluent'")
        carried = None if carry is None else _carry_table(carry, messages)
        if carried is not None:
            taken = {*self._plan.schema.names, index_name, id_name}
            clash = sorted(name for name in carried.column_names if name in taken)
            if clash or len(set(carried.column_names)) != carried.num_columns:
                raise ValueError(
                    f"carry= columns must have names of their own, not in the output: {clash}"
                    if clash
                    else f"carry= has duplicate column names: {carried.column_names}"
                )
        messages = _arrow_input(messages, column)
        custom_numbers = self._spec.schema.custom_numbers
        if (custom is None) != (custom_numbers is None):
            raise ValueError(
                "custom= takes the custom records of a schema merged with "
                "Schema.with_custom_message()"
                if custom is not None
                else f"{self._spec.schema.message_name} is merged with a custom message: "
                "give its records as transcode(base_records, custom=custom_records)"
            )
        if custom is not None and (framing is not None or format != "binary"):
            raise ValueError("custom= takes binary records, without framing= or format=")
        if custom is not None and custom_numbers is not None:  # (checked together above)
            data, starts, ends, index, failures = _merged_records(
                messages, _arrow_input(custom, None), custom_numbers
            )
        elif check_format(format) == "json":
            if prefixed:
                raise ValueError("framing='confluent' is for binary records, not format='json'")
            data, starts, ends, index, failures = self._json_records(
                messages, bool(ignore_unknown_fields)
            )
        else:
            data, starts, ends, index, failures = _records(messages, None if prefixed else framing)
        raw_starts = record_ids = None
        if prefixed:
            raw_starts = starts
            ids = self._schema_ids_of(schemas)
            starts, record_ids, status = strip_prefixes(
                ids, self._spec.schema.message_name, data, starts, ends
            )
            failed_prefixes = refused(status)
            if len(failed_prefixes):
                failures += self._refused(ids, data, starts, ends, index, status, failed_prefixes)
                keep = np.ones(len(starts), dtype=bool)
                keep[failed_prefixes] = False
                starts, ends, index = starts[keep], ends[keep], index[keep]
                raw_starts, record_ids = raw_starts[keep], record_ids[keep]
        n_in = len(index) + len(failures)
        if carried is not None and carried.num_rows != n_in:
            raise ValueError(
                f"carry= has {carried.num_rows} rows, the batch has {n_in} records: give one "
                "row per record"
            )
        n_bytes = -1  # the first decode's input_bytes: every record, before any is rejected
        raising = self._spec.on_error == "raise"
        entry = self._entry
        while True:
            result = decode(
                self._plan.program,
                data,
                starts,
                ends,
                POLICY_RAISE if raising else POLICY_SKIP,
                0,
                *entry.capacities(len(starts)),
                # Whole messages: the decoder's buffers are most of the output and come
                # back whole with the next batch. A flat plan drops most of them within
                # the call: pooled, they would lift its peak memory (docs/memory.md).
                pooled=self._spec.columns is None,
            )
            if n_bytes < 0:
                n_bytes = result.input_bytes
            failed = [(self._error(e, index, starts, raw_starts), e[0]) for e in result.errors]
            # (read before assembly releases the arenas column by column)
            arena_bytes = [len(a) if a is not None else 0 for a in result.col_arena]
            group_counts = result.group_counts
            rejected: list[tuple[DecodeError, int]] = []
            assembler = Assembler(self._plan, result, data)
            try:
                columns, n_rows, positions = assembler.columns(
                    row_records=index_name is not False
                    or id_name is not False
                    or carried is not None
                )
            except BadRecords as bad:
                first: dict[int, tuple[str, str]] = {}
                for position, reason, path in bad.problems:
                    first.setdefault(position, (reason, path))
                rejected = [
                    (DecodeError(reason, index=int(index[pos]), offset=0, path=path), pos)
                    for pos, (reason, path) in first.items()
                ]
            if raising:
                # The lowest bad record wins, whatever rejected it: the decoder stopped at its
                # first error, and plan checks ran on the records decoded before it.
                errors = [e for e, _ in failed + rejected + failures]
                if errors:
                    raise min(errors, key=lambda e: e.index)
                break
            failed += rejected
            failures += [
                (err, self._raw(data, starts if raw_starts is None else raw_starts, ends, pos))
                for err, pos in failed
            ]
            if not rejected:
                break
            # Drop the records the plan rejected (and the wire failures, already rolled back)
            # and decode the rest again: rare, only for strict columns and range errors.
            keep = np.ones(len(starts), dtype=bool)
            keep[[pos for _, pos in failed]] = False
            starts, ends, index = starts[keep], ends[keep], index[keep]
            if raw_starts is not None and record_ids is not None:
                raw_starts, record_ids = raw_starts[keep], record_ids[keep]
        entry.learn_sizes(result.records, group_counts, arena_bytes)
        self._account(
            n_in, failures, n_rows, n_bytes, assembler.precision_lost, carried, result.moved
        )
        rows = pa.RecordBatch.from_arrays(columns, schema=self._plan.schema)
        if positions is not None and index_name is not False:
            rows = rows.append_column(
                pa.field(index_name, pa.int64(), nullable=False), pa.array(index[positions])
            )
        if positions is not None and id_name is not False and record_ids is not None:
            rows = rows.append_column(
                pa.field(id_name, pa.int64(), nullable=False), pa.array(record_ids[positions])
            )
        if positions is not None and carried is not None:
            values = carried.take(pa.array(index[positions]))
            for field, values_of in zip(carried.schema, values.columns, strict=True):
                rows = rows.append_column(field, values_of.combine_chunks())
        return rows

    def _extra_column(self, option: str, value: bool | str, default: str) -> str | bool:
        name = default if value is True else value
        if name is not False and (not isinstance(name, str) or name in self._plan.schema.names):
            raise ValueError(
                f"{option} must be True or a column name not in the plan, not {value!r}"
            )
        return name

    def _schema_ids_of(self, schemas: object) -> SchemaIds:
        """``schemas`` as SchemaIds, the same one for the same object (its look-ups kept)."""
        if isinstance(schemas, SchemaIds):
            return schemas
        with self._lock:
            held = self._schema_ids.get(id(schemas))
            if held is None or held[0] is not schemas:
                if len(self._schema_ids) > 8:  # schemas= objects seen: a handful
                    self._schema_ids.clear()
                held = (schemas, SchemaIds(schemas))  # type: ignore[arg-type]
                self._schema_ids[id(schemas)] = held
        return held[1]

    def _refused(
        self,
        ids: SchemaIds,
        data: memoryview,
        starts: np.ndarray,
        ends: np.ndarray,
        index: np.ndarray,
        status: np.ndarray,
        positions: np.ndarray,
    ) -> list[tuple[DecodeError, bytes | None]]:
        """The records whose Confluent prefix was refused, with the reason (a refused
        record's start is its own: the raw bytes are the whole record)."""
        out: list[tuple[DecodeError, bytes | None]] = []
        message = self._spec.schema.message_name
        for pos in positions:
            raw = bytes(data[starts[pos] : ends[pos]])
            reason = ids.reason(int(status[pos]), raw, message)
            out.append((DecodeError(reason, index=int(index[pos]), offset=0, path=""), raw))
        return out

    def _json_records(self, messages: object, ignore_unknown: bool):
        reader = self._json_readers.get(ignore_unknown)
        if reader is None:
            reader = JsonReader(self._spec.schema.descriptor, ignore_unknown_fields=ignore_unknown)
            self._json_readers[ignore_unknown] = reader
        wire, index, failures = reader.to_wire(messages)
        data, starts, ends, _, _ = _records(wire, None)
        return data, starts, ends, index, failures

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
            self._spec.schema.descriptor,
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
        if self._spec.columns is not None:
            raise EncodeError(
                "encode needs a whole-message Transcoder (no columns=): a flat plan does "
                "not hold every field of the message",
                row=None,
                path="",
            )
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
        plans = self._encoding_plans
        plan = plans.get(schema)
        if plan is None:
            plan = EncodingPlan(self._spec.schema.descriptor, schema)
            with self._lock:
                if len(plans) > 16:  # schemas seen in one process: a handful
                    plans.clear()
                plans[schema] = plan
        return plan

    def _raw(
        self, data: memoryview, starts: np.ndarray, ends: np.ndarray, pos: int
    ) -> bytes | None:
        if self._spec.on_error != "dead_letter":
            return None
        return bytes(data[starts[pos] : ends[pos]])

    # -- errors and accounting ----------------------------------------------------------

    def _error(
        self, err: tuple, index: np.ndarray, starts: np.ndarray, raw_starts: np.ndarray | None
    ) -> DecodeError:
        position, status, offset, stack = err
        if raw_starts is not None:  # count from the record's first byte, prefix included
            offset += int(starts[position] - raw_starts[position])
        return DecodeError(
            STATUS_TEXT.get(status, f"status {status}"),
            index=int(index[position]),
            offset=int(offset),
            path=self._render(stack),
        )

    def _render(self, stack: list[tuple[int, int, int]]) -> str:
        parts: list[str] = []
        for node_id, number, element in stack:
            if number == 0:
                continue
            fd = self._plan.nodes[node_id].message.fields_by_number.get(number)
            name = fd.name if fd is not None else f"#{number}"
            parts.append(f"{name}[{element}]" if element >= 0 else name)
        return ".".join(parts)

    def _account(
        self,
        n_in: int,
        failures: list[tuple[DecodeError, bytes | None]],
        n_rows: int,
        n_bytes: int,
        precision_lost: int,
        carried: pa.Table | None = None,
        strings_not_utf8: int = 0,
    ) -> None:
        dead = []
        dead_carried = None
        if self._spec.on_error == "dead_letter":
            dead = sorted(
                ((e.index, e.offset, e.path, e.reason, raw) for e, raw in failures),
                key=lambda row: row[0],
            )
            if carried is not None and dead:
                dead_carried = carried.take(pa.array([row[0] for row in dead], pa.int64()))
        with self._lock:
            s = self._stats
            s.records_in += n_in
            s.records_failed += len(failures)
            s.records_ok += n_in - len(failures)
            s.rows_out += n_rows
            s.bytes_in += n_bytes
            s.precision_lost += precision_lost
            s.strings_not_utf8 += strings_not_utf8
            if dead_carried is not None:
                self._dead_carry.append((len(self._dead), dead_carried))
            self._dead.extend(dead)


def _init_signature() -> inspect.Signature:
    """``Transcoder.__init__``'s signature with every option as a keyword (for help(), IDEs
    and notebooks), from the one table of options."""
    params = list(inspect.signature(Transcoder.__init__).parameters.values())
    keywords = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type)
        for name, f in OPTIONS.items()
    ]
    return inspect.Signature([*params[:4], *keywords])  # self, schema, columns, cache


Transcoder.__init__.__signature__ = _init_signature()  # type: ignore[attr-defined]
Transcoder.__doc__ = f"{Transcoder.__doc__}\n    {options_doc()}\n"


def _rebuild(spec: TranscodeSpec, cache: ParserCache | None) -> Transcoder:
    return Transcoder(spec, cache=cache)


_EMPTY = np.zeros(0, dtype=np.int64)
_RECORD_INDEX = "_record_index"
_CARRY = "carry"  # the dead letters' column of carried values
_SCHEMA_ID = "_schema_id"


def _merged_records(base: object, custom: object, numbers: tuple[tuple[int, int], ...]):
    """(base, custom) record pairs as the merged message's records, like _records: the
    custom bytes renumbered after the base bytes, pairs that cannot be merged failures."""
    b_data, b_starts, b_ends, b_index, failures = _records(base, None)
    c_data, c_starts, c_ends, c_index, c_nulls = _records(custom, None)  # None: no fields
    n, n_custom = len(b_index) + len(failures), len(c_index) + len(c_nulls)
    if n_custom != n:
        raise ValueError(f"custom= has {n_custom} records, messages has {n}: give one per record")
    c_s, c_e = np.zeros(n, np.int64), np.zeros(n, np.int64)
    c_s[c_index], c_e[c_index] = c_starts, c_ends
    c_starts, c_ends = c_s[b_index], c_e[b_index]
    table = np.zeros(max(old for old, _ in numbers) + 1 if numbers else 1, np.int32)
    for old, new in numbers:
        table[old] = new
    data, starts_buf, ends_buf, status_buf, where_buf, fields_buf = merge_custom(
        b_data, b_starts, b_ends, c_data, c_starts, c_ends, table
    )
    starts = np.frombuffer(memoryview(starts_buf), dtype=np.int64)
    ends = np.frombuffer(memoryview(ends_buf), dtype=np.int64)
    status = np.frombuffer(memoryview(status_buf), dtype=np.int32)
    bad = np.flatnonzero(status != MERGE_OK)
    if len(bad):
        where = np.frombuffer(memoryview(where_buf), dtype=np.int64)
        fields = np.frombuffer(memoryview(fields_buf), dtype=np.int64)
        for pos in bad:
            reason = (
                f"custom field number {int(fields[pos])} is not declared by the custom message"
                if status[pos] == MERGE_UNDECLARED
                else "malformed custom message bytes"
            )
            base_len = int(b_ends[pos] - b_starts[pos])
            err = DecodeError(
                reason, index=int(b_index[pos]), offset=base_len + int(where[pos]), path=""
            )
            raw = bytes(b_data[b_starts[pos] : b_ends[pos]]) + bytes(
                c_data[c_starts[pos] : c_ends[pos]]
            )
            failures.append((err, raw))
        keep = status == MERGE_OK
        starts, ends, b_index = starts[keep], ends[keep], b_index[keep]
    return memoryview(data), np.ascontiguousarray(starts), np.ascontiguousarray(ends), b_index, failures


def _carry_table(carry: object, messages: object) -> pa.Table:
    """``transcode(carry=)`` as a Table: given as one, a RecordBatch, a mapping of name ->
    array, or the names of columns of ``messages`` (a table)."""
    if isinstance(carry, pa.Table):
        return carry
    if isinstance(carry, pa.RecordBatch):
        return pa.Table.from_batches([carry])
    if isinstance(carry, list | tuple) and all(isinstance(name, str) for name in carry):
        if not isinstance(messages, pa.Table | pa.RecordBatch):
            raise TypeError(
                "carry= as column names takes them from a table of records; with other "
                "records give the values (a pa.Table or a mapping of name -> array)"
            )
        missing = [name for name in carry if name not in messages.schema.names]
        if missing:
            raise KeyError(f"carry= names columns the records do not have: {missing}")
        table = messages.select(list(carry))
        return table if isinstance(table, pa.Table) else pa.Table.from_batches([table])
    if isinstance(carry, dict) or hasattr(carry, "keys"):
        try:
            return pa.table(carry)
        except (TypeError, ValueError, pa.ArrowException) as err:
            raise TypeError(f"carry= values are not Arrow columns of one length: {err}") from None
    if hasattr(carry, "__arrow_c_stream__") or hasattr(carry, "__arrow_c_array__"):
        return pa.table(carry)  # a Polars / DuckDB / nanoarrow table
    raise TypeError(
        "carry= takes a pa.Table, a RecordBatch, a mapping of name -> array or a list of "
        f"column names, not {type(carry).__name__}"
    )


def _carried_struct(segments: list[tuple[int, pa.Table]], n: int) -> pa.StructArray:
    """The dead letters' ``carry`` column: ``n`` rows, where each segment (first position,
    rows) says what the dead letters from one carry= call carried; null elsewhere. Calls
    that carried different columns or types are unified (missing columns null)."""
    schema = pa.unify_schemas([rows.schema for _, rows in segments], promote_options="permissive")
    parts: list[pa.Table] = []
    valid = np.zeros(n, dtype=bool)
    done = 0
    for start, rows in segments:
        if start > done:
            parts.append(schema.empty_table().take(pa.nulls(start - done, pa.int64())))
        parts.append(
            pa.table(
                [
                    rows.column(f.name).cast(f.type)
                    if f.name in rows.column_names
                    else pa.nulls(rows.num_rows, f.type)
                    for f in schema
                ],
                schema=schema,
            )
        )
        valid[start : start + rows.num_rows] = True
        done = start + rows.num_rows
    if n > done:
        parts.append(schema.empty_table().take(pa.nulls(n - done, pa.int64())))
    table = pa.concat_tables(parts).combine_chunks()
    return pa.StructArray.from_arrays(
        [c.combine_chunks() for c in table.columns],
        fields=list(schema),
        mask=pa.array(~valid),
    )


def _arrow_input(messages: object, column: str | None) -> object:
    """Arrow producers as pyarrow arrays (imported through the C interfaces, no copy);
    anything else as it is."""
    if isinstance(messages, bytes | bytearray | memoryview | pa.Buffer | list | tuple):
        if column is not None:
            raise TypeError("column= names a column of a table, not of a list or a buffer")
        return messages
    if not isinstance(messages, pa.Array | pa.ChunkedArray | pa.Table | pa.RecordBatch):
        if hasattr(messages, "__arrow_c_array__"):
            messages = pa.array(messages)
        elif hasattr(messages, "__arrow_c_stream__"):
            messages = pa.chunked_array(messages)
    if isinstance(messages, pa.Array | pa.ChunkedArray) and pa.types.is_struct(messages.type):
        # A table exported as one struct array or a stream of them (DuckDB, Polars frames).
        chunks = messages.chunks if isinstance(messages, pa.ChunkedArray) else [messages]
        messages = pa.Table.from_batches(
            [pa.RecordBatch.from_struct_array(c) for c in chunks], schema=pa.schema(messages.type)
        )
    if isinstance(messages, pa.Table | pa.RecordBatch):
        names = messages.schema.names
        if column is None:
            if len(names) != 1:
                raise TypeError(f"a table of records needs column= (one of {names})")
            column = names[0]
        if column not in names:
            raise KeyError(f"no column {column!r} in the records (columns: {names})")
        messages = messages.column(column)
    elif column is not None:
        raise TypeError(f"column= names a column of a table, not of {type(messages).__name__}")
    if isinstance(messages, pa.Array | pa.ChunkedArray) and (
        pa.types.is_binary_view(messages.type) or pa.types.is_string_view(messages.type)
    ):
        messages = messages.cast(pa.large_binary())
    return messages


def _records(messages: object, framing: str | None):
    """Normalise any accepted input to (data, starts, ends, record index, extra failures).

    extra failures are records rejected before decoding (null records, a truncated frame),
    as (DecodeError, raw bytes or None).
    """
    if framing is not None:
        view = memoryview(messages).cast("B")  # type: ignore[arg-type]
        starts, ends, consumed, problem, corrupt = split_framed_prefix(view, framing)
        index = np.arange(len(starts), dtype=np.int64)
        extra: list[tuple[DecodeError, bytes | None]] = []
        if len(corrupt):
            # Framed soundly but failing its checksum (TFRecord): a bad record of its own.
            frame_at = np.concatenate(([0], ends[:-1] + TRAILERS[framing]))
            for pos in corrupt:
                reason = corrupt_reason(framing, int(frame_at[pos]))
                err = DecodeError(reason, index=int(pos), offset=0, path="")
                extra.append((err, bytes(view[starts[pos] : ends[pos]])))
            keep = np.ones(len(starts), dtype=bool)
            keep[corrupt] = False
            starts, ends, index = starts[keep], ends[keep], index[keep]
        if consumed != len(view):
            # Nothing after a truncated record or a bad prefix can be framed: the rest of
            # the buffer is one bad record, after the good ones before it.
            reason = (
                f"{problem[1]} at byte {problem[0]}"
                if problem is not None
                else f"truncated {framing} stream: the last record runs past the end"
            )
            err = DecodeError(reason, index=len(starts), offset=0, path="")
            extra.append((err, bytes(view[consumed:])))
        return view, starts, ends, index, extra
    if isinstance(messages, pa.ChunkedArray):
        messages = messages.combine_chunks() if messages.num_chunks != 1 else messages.chunk(0)
    if isinstance(messages, bytes | bytearray | memoryview | pa.Buffer):
        raise TypeError(
            "one buffer of records needs framing= ('varint', 'u32le', 'u32be' or 'tfrecord')"
        )
    if not isinstance(messages, pa.Array):
        return _from_python(messages)
    t = messages.type
    if pa.types.is_binary(t) or pa.types.is_string(t):
        wide = False
    elif pa.types.is_large_binary(t) or pa.types.is_large_string(t):
        wide = True
    else:
        raise TypeError(f"records must be binary, not {t}")
    n = len(messages)
    _, offsets_buf, data_buf = messages.buffers()
    data = memoryview(data_buf if data_buf is not None else b"").cast("B")
    bounds = array_bounds(offsets_buf, messages.offset, n, wide)
    starts, ends, index = (np.frombuffer(memoryview(b), dtype=np.int64) for b in bounds)
    extra = []
    if messages.null_count:
        valid = np.asarray(messages.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        for i in np.flatnonzero(~valid):
            extra.append((DecodeError("null record", index=int(i), offset=0, path=""), None))
        starts, ends, index = starts[valid], ends[valid], index[valid]
    return data, starts, ends, index, extra


def _from_python(messages: object):
    """A sequence of bytes-like records: one exact-size copy into a contiguous buffer."""
    items = messages if isinstance(messages, list | tuple) else list(messages)  # type: ignore[call-overload]
    try:
        data, starts_buf, ends_buf, nulls = pack_records(items)
    except TypeError as err:
        raise TypeError(f"records must be bytes-like: {err}") from None
    starts = np.frombuffer(memoryview(starts_buf), dtype=np.int64)
    ends = np.frombuffer(memoryview(ends_buf), dtype=np.int64)
    index = np.arange(len(starts), dtype=np.int64)
    extra: list[tuple[DecodeError, bytes | None]] = []
    if nulls:
        for i in nulls:
            extra.append((DecodeError("null record", index=int(i), offset=0, path=""), None))
        keep = np.ones(len(starts), dtype=bool)
        keep[nulls] = False
        starts, ends, index = starts[keep], ends[keep], index[keep]
    return memoryview(data), starts, ends, index, extra
