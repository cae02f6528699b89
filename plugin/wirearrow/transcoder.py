"""The Transcoder: compile a plan once, decode many batches of protobuf records to Arrow.

``decode`` is the stateless core every adapter calls: a batch in, its rows, dead letters and
counts out, as one value (:class:`Decoded`). ``transcode`` is the convenience for users: the
rows, with the counts added to ``stats`` and the dead letters kept for ``dead_letters()``.
How the records arrive is a :class:`~wirearrow.RecordFormat` (or its fields as keywords);
``encode`` / ``to_json`` go back through the schema's :class:`~wirearrow.encoder.Encoder`.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Sequence
from operator import add
from typing import Any, Literal, NamedTuple, overload

import numpy as np
import pyarrow as pa

from wirearrow._core.decoder import ANY_TYPE_LEVEL, POLICY_RAISE, POLICY_SKIP, STATUS_TEXT, decode
from wirearrow.accelerator import record_batch
from wirearrow.cache import ParserCache, default_cache
from wirearrow.carry import (
    RECORD_INDEX,
    SCHEMA_ID,
    carry_table,
    check_carried,
    extra_column_name,
    extra_fields,
    with_row_columns,
)
from wirearrow.counts import Counts
from wirearrow.dead_letters import concat_dead_letters, dead_letter_table
from wirearrow.encoder import Encoded, Encoder
from wirearrow.errors import DecodeError, EncodeError
from wirearrow.options import OPTIONS, options_doc, unknown_options
from wirearrow.plan.assemble import Assembler, BadRecords
from wirearrow.plan.compiler import Column, CompiledPlan, deepest_whole_read
from wirearrow.schema import Schema
from wirearrow.sources.format import BINARY, RecordFormat
from wirearrow.sources.records import Failure, RecordReader, Records
from wirearrow.spec import TranscodeSpec, as_columns
from wirearrow.versions import Router

__all__ = ["Decoded", "Transcoder", "max_depth_limit"]


def max_depth_limit(
    schema: Schema, well_known_types: bool = True, extensions: bool = False
) -> int:
    """The largest ``max_depth`` at which ``Transcoder(schema, max_depth=...)`` (whole
    messages) fits the plan-size bound; 0 when even 1 does not (select fields by path)."""
    return deepest_whole_read(schema.descriptor, well_known_types, extensions)


class Decoded(NamedTuple):
    """What :meth:`Transcoder.decode` returns for one batch: ``rows`` (``arrow_schema``,
    then any extra columns), ``dead_letters`` (``DEAD_LETTER_SCHEMA``, plus ``carry``; empty
    unless ``on_error="dead_letter"``) and ``counts``. Every record given is in one of the
    first two: ``counts.records_in == counts.records_ok + counts.records_failed``."""

    rows: pa.RecordBatch
    dead_letters: pa.Table
    counts: Counts


class Transcoder:
    """Protobuf records -> Arrow record batches, for one schema and one plan.

    ``columns`` is the flat plan: path strings or :class:`Column`; without it the whole
    message is read, one row per record, one column per top-level field. The other keywords
    are the options below. ``cache``: the :class:`~wirearrow.ParserCache` that compiles the
    plan (once per process, shared by every transcoder of the same schema and plan) and
    learns its buffer sizes; default: the process-wide cache
    (``wirearrow.cache.default_cache``).

    ``Transcoder(spec)`` takes a :class:`~wirearrow.TranscodeSpec` (the columns and every
    option in one value) instead; ``tc.spec`` gives it back. A transcoder can be shared by
    threads: ``decode`` keeps nothing of a batch, and ``transcode``'s sums are locked.
    """

    def __init__(
        self,
        schema: Schema | TranscodeSpec,
        columns: Sequence[str | Column] | None = None,
        *,
        cache: ParserCache | None = None,
        versions: Sequence[Schema] = (),
        **options: Any,
    ) -> None:
        if isinstance(schema, TranscodeSpec):
            if columns is not None or options or versions:
                raise TypeError(
                    "Transcoder(spec) takes its columns, versions and options from the "
                    "spec: use spec.replace(...) to change them"
                )
            spec = schema
        else:
            unknown = unknown_options(options)
            if unknown:
                raise TypeError(f"Transcoder got unknown options: {', '.join(unknown)}")
            spec = TranscodeSpec(schema, as_columns(columns), tuple(versions), **options)
        self._spec = spec
        self._cache = cache if cache is not None else default_cache()
        if not isinstance(self._cache, ParserCache):
            raise TypeError(f"cache must be a wirearrow.ParserCache, not {type(cache).__name__}")
        self._entry = self._cache.entry(spec)
        self._plan: CompiledPlan = self._entry.plan
        self._names = frozenset(self._plan.schema.names)  # the extra columns' names must differ
        self._reader = RecordReader(spec.schema)
        self._encoder: Encoder | None = None
        self._lock = threading.Lock()
        # transcode's sums, in Counts' field order: a tuple per call adds up without a
        # Counts value per call (a frozen dataclass costs a Python call a field).
        self._sums: tuple[int, ...] = Counts().values()
        self._dead: list[pa.Table] = []
        # Schema versions (wirearrow.versions), each decoded by a transcoder of its own.
        self._router = Router(spec, self._cache)
        self._version_transcoders: dict[int, Transcoder] = {0: self}
        # the extra columns' fields (with their field ids), by the batch's schema and names
        self._extras: dict[tuple, list[pa.Field]] = {}

    def replace(self, **changes: Any) -> Transcoder:
        """A transcoder of ``spec.replace(**changes)`` on the same cache (this one if nothing
        changes). Counts and dead letters are not carried over."""
        spec = self._spec.replace(**changes)
        if spec == self._spec:
            return self
        return Transcoder(spec, cache=self._cache)

    def __reduce__(self) -> tuple:
        # Ship the spec; the worker compiles it. The default cache is per process: the
        # worker's own is used. A given cache travels by identity (ParserCache.__reduce__).
        cache = None if self._cache is default_cache() else self._cache
        return (_rebuild, (self._spec, cache))

    @property
    def cache(self) -> ParserCache:
        """The parser cache this transcoder's plan lives in."""
        return self._cache

    @property
    def spec(self) -> TranscodeSpec:
        """Everything that decides what this transcoder does (frozen, picklable)."""
        return self._spec

    @property
    def schema(self) -> Schema:
        return self._spec.schema

    @property
    def arrow_schema(self) -> pa.Schema:
        """The schema of the rows (before extra columns): the plan's, or with schema
        versions their superset (which grows when a record names a new version)."""
        versions = self._router.versions
        return self._plan.schema if versions is None else versions.schema

    @property
    def stats(self) -> Counts:
        """The counts of every ``transcode`` call so far (``decode`` adds nothing)."""
        with self._lock:
            return Counts(*self._sums)

    def dead_letters(self) -> pa.Table:
        """The dead letters of the ``transcode`` calls so far (on_error="dead_letter"), and
        forget them. When some came from a ``transcode(..., carry=)`` call, a struct column
        ``carry`` holds each one's carried values (null for those transcoded without)."""
        with self._lock:
            tables, self._dead = self._dead, []
        return concat_dead_letters(tables)

    def transcode(self, messages: object, input: RecordFormat | None = None, **kwargs: Any) -> pa.RecordBatch:
        """:meth:`decode`, keeping the counts in ``stats`` and the dead letters for
        :meth:`dead_letters`; returns the rows."""
        rows, dead, counts = self._decoded(messages, input, **kwargs)
        with self._lock:
            self._sums = tuple(map(add, self._sums, counts))
            if dead.num_rows:
                self._dead.append(dead)
        return rows

    def decode(
        self,
        messages: object,
        input: RecordFormat | None = None,
        *,
        record_index: bool | str = False,
        carry: object = None,
        custom: object = None,
        **input_options: Any,
    ) -> Decoded:
        """Decode a batch of records: its rows, its dead letters and its counts.

        ``messages``: a BinaryArray / LargeBinaryArray (fastest), a ChunkedArray of those, a
        list of bytes-like objects, a table (its record ``column``) or any Arrow producer
        (``__arrow_c_array__`` / ``__arrow_c_stream__``: Polars, DuckDB, nanoarrow), or one
        framed buffer (``framing=``, possibly compressed). ``input`` says how the records
        arrive (:class:`~wirearrow.RecordFormat`: format, framing, compression, Confluent
        schema ids, the record column), or give its fields as keywords
        (``decode(buf, framing="varint")``). A null record, a record framed soundly but
        failing its checksum, a bad Confluent prefix or JSON text are bad records saying
        so; a stream cut short is one bad record after the good ones. See docs/quickstart.md.

        ``record_index``: True adds an int64 column ``_record_index`` (a string: that name)
        after the plan's: each row's record, its position in ``messages`` (the dead letters'
        ``index``). With ``schema_id`` (Confluent), each row's schema id follows it.

        ``carry``: values that belong to each record (a Kafka offset, a source file),
        repeated on every row the record fans out into, after those columns: a
        ``pa.Table``, ``RecordBatch`` or mapping of name -> array with one row per record,
        or, when ``messages`` is a table, the names of its other columns. A bad record's
        values go to its dead letter's struct column ``carry``.

        ``custom``: for a schema merged with a custom message
        (:meth:`Schema.with_custom_message`), each record's custom message bytes, aligned
        with ``messages``: each pair is read as one merged message (a dead letter's ``raw``
        is the base bytes followed by the custom bytes).

        Under ``on_error="raise"`` the first bad record raises :class:`DecodeError`.
        """
        rows, dead, counts = self._decoded(
            messages, input, record_index=record_index, carry=carry, custom=custom, **input_options
        )
        return Decoded(rows, dead, Counts(*counts))

    def _decoded(
        self,
        messages: object,
        input: RecordFormat | None = None,
        *,
        record_index: bool | str = False,
        carry: object = None,
        custom: object = None,
        **input_options: Any,
    ) -> tuple[pa.RecordBatch, pa.Table, tuple[int, ...]]:
        """:meth:`decode`, its counts as a tuple in :class:`Counts`' field order."""
        # The default format (binary records as they are) needs no look-up.
        fmt = BINARY if input is None and not input_options else RecordFormat.of(input, **input_options)
        index_name = id_name = None
        if record_index is not False or fmt.schema_id is not False:
            names = self._output_names()
            index_name = extra_column_name("record_index", record_index, RECORD_INDEX, names)
            id_name = extra_column_name("schema_id", fmt.schema_id, SCHEMA_ID, names)
            if index_name is not None and index_name == id_name:
                raise ValueError("record_index and schema_id need different column names")
        carried = None if carry is None else carry_table(carry, messages)
        if carried is not None:
            check_carried(carried, {*self._output_names(), index_name, id_name})
        records = self._reader.read(messages, fmt, custom)
        if carried is not None and carried.num_rows != records.n_in:
            raise ValueError(
                f"carry= has {carried.num_rows} rows, the batch has {records.n_in} records: "
                "give one row per record"
            )
        n_in = records.n_in
        want_positions = index_name is not None or id_name is not None or carried is not None
        route = None if records.lookup is None else self._router.route(records.lookup)
        ids: np.ndarray | None = None
        if route is not None:
            rows, row_records, ids, failures, n_bytes, precision_lost, not_utf8 = (
                self._router.decode(records, route, self._decode_version, self._spec.on_error)
            )
        else:
            columns, positions, failures, n_bytes, precision_lost, not_utf8 = self._decode(
                records, want_positions
            )
            versions = self._router.versions
            if versions is None:
                rows = record_batch(columns, self._plan.schema)
            else:  # the plan's own version, in the superset's columns
                state = versions.state
                conform = state.conformers[0]
                if conform is not None:
                    columns = conform(columns, len(columns[0]) if columns else 0)
                rows = record_batch(columns, state.schema)
            if positions is not None:
                row_records = records.index[positions]
                ids = records.schema_ids[positions] if records.schema_ids is not None else None
        if want_positions:
            if ids is None:  # not Confluent records: no schema id column
                id_name = None
            key = (rows.schema, index_name, id_name, None if carried is None else carried.schema)
            fields = self._extras.get(key)
            if fields is None:
                fields = extra_fields(rows.schema, index_name, id_name, key[3])
                if len(self._extras) > 16:  # carried schemas that vary: keep a few
                    self._extras.clear()
                self._extras[key] = fields
            rows = with_row_columns(rows, fields, row_records, index_name, ids, id_name, carried)
        keep = self._spec.on_error == "dead_letter"
        dead = dead_letter_table(failures if keep else (), carried)
        n_failed = len(failures)
        # Counts' fields, in order: records in, ok, failed, rows out, bytes in, dead letters,
        # precision lost, strings not UTF-8.
        return rows, dead, (
            n_in, n_in - n_failed, n_failed, rows.num_rows, n_bytes, dead.num_rows,
            precision_lost, not_utf8,
        )

    def _output_names(self) -> frozenset[str]:
        """The rows' column names, which extra columns must not take."""
        versions = self._router.versions
        return self._names if versions is None else frozenset(versions.schema.names)

    def _decode(
        self, records: Records, want_positions: bool
    ) -> tuple[list[pa.Array], np.ndarray | None, list[Failure], int, int, int]:
        """The decoder over ``records``, then the Arrow columns; records the plan rejects
        (strict columns, range errors) are taken out and the rest decoded again."""
        raising = self._spec.on_error == "raise"
        keep_raw = self._spec.on_error == "dead_letter"
        failures = records.failures
        entry = self._entry
        n_bytes = -1  # the first decode's: every record, before any is rejected
        while True:
            result = decode(
                self._plan.program,
                records.data,
                records.starts,
                records.ends,
                POLICY_RAISE if raising else POLICY_SKIP,
                0,
                *entry.capacities(len(records.starts)),
                # Whole messages: the decoder's buffers are most of the output and come
                # back whole with the next batch. A flat plan drops most of them within
                # the call: pooled, they would lift its peak memory (docs/memory.md).
                pooled=self._spec.columns is None,
            )
            if n_bytes < 0:
                n_bytes = result.input_bytes
            failed = [(self._error(e, records), e[0]) for e in result.errors] if result.errors else []
            rejected: list[tuple[DecodeError, int]] = []
            assembler = Assembler(self._plan, result, records.data)
            try:
                columns, _, positions = assembler.columns(row_records=want_positions)
            except BadRecords as bad:
                first: dict[int, tuple[str, str]] = {}
                for position, reason, path in bad.problems:
                    first.setdefault(position, (reason, path))
                rejected = [
                    (DecodeError(reason, index=int(records.index[pos]), offset=0, path=path), pos)
                    for pos, (reason, path) in first.items()
                ]
            if raising:
                # The lowest bad record wins, whatever rejected it: the decoder stopped at its
                # first error, and plan checks ran on the records decoded before it.
                errors = [e for e, _ in failed + rejected] + [e for e, _ in failures]
                if errors:
                    raise min(errors, key=lambda e: e.index)
                break
            failed += rejected
            failures = failures + [
                (err, records.raw(pos) if keep_raw else None) for err, pos in failed
            ]
            if not rejected:
                break
            # Drop the records the plan rejected (and the wire failures, already rolled back)
            # and decode the rest again: rare, only for strict columns, range errors and
            # values an expression cannot compute.
            keep = np.ones(len(records.starts), dtype=bool)
            keep[[pos for _, pos in failed]] = False
            records.keep(keep)
        entry.learn_sizes(result.records, result.group_sizes, result.arena_bytes)
        return columns, positions, failures, n_bytes, assembler.precision_lost, result.moved

    def _decode_version(
        self, version: int, part: Records
    ) -> tuple[list[pa.Array], np.ndarray | None, list[Failure], int, int, int]:
        """Version ``version``'s records of a batch, with that version's own plan."""
        transcoder = self._version_transcoders.get(version)
        if transcoder is None:
            assert self._router.versions is not None
            transcoder = Transcoder(self._router.versions.spec(version), cache=self._cache)
            self._version_transcoders[version] = transcoder
        return transcoder._decode(part, True)

    # -- back to protobuf ----------------------------------------------------------------

    @property
    def encoder(self) -> Encoder:
        """The :class:`~wirearrow.encoder.Encoder` of this schema (whole messages only)."""
        if self._spec.columns is not None:
            raise EncodeError(
                "encode needs a whole-message Transcoder (no columns=): a flat plan does "
                "not hold every field of the message",
                row=None,
                path="",
            )
        if self._encoder is None:
            self._encoder = Encoder(self._spec.schema)
        return self._encoder

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
        """Arrow rows -> protobuf bytes, one serialized message per row
        (:meth:`Encoder.encode <wirearrow.encoder.Encoder.encode>`; docs/round-trip.md)."""
        return self.encoder.encode(batch, on_error=on_error)  # type: ignore[call-overload]

    def to_json(self, batch: pa.RecordBatch | pa.Table | pa.StructArray, **options: Any) -> pa.StringArray:
        """Arrow rows -> protojson text, one per row
        (:meth:`Encoder.to_json <wirearrow.encoder.Encoder.to_json>`; docs/json.md)."""
        return self.encoder.to_json(batch, **options)

    # -- errors --------------------------------------------------------------------------

    def _error(self, err: tuple, records: Records) -> DecodeError:
        position, status, offset, stack = err
        if records.raw_starts is not None:  # count from the record's first byte, prefix included
            offset += int(records.starts[position] - records.raw_starts[position])
        return DecodeError(
            STATUS_TEXT.get(status, f"status {status}"),
            index=int(records.index[position]),
            offset=int(offset),
            path=self._render(stack),
        )

    def _render(self, stack: list[tuple[int, int, int]]) -> str:
        parts: list[str] = []
        for node_id, number, element in stack:
            if number == 0:
                continue
            node = self._plan.nodes[node_id]
            if number >= ANY_TYPE_LEVEL:  # inside an Any's value, read as a declared type
                parts.append(f"[{list(node.any_types)[number - ANY_TYPE_LEVEL]}]")
                continue
            fd = node.message.fields_by_number.get(number)
            name = fd.name if fd is not None else f"#{number}"
            parts.append(f"{name}[{element}]" if element >= 0 else name)
        # (as paths write them: an Any's declared type, [pkg.Click], takes no dot)
        return ".".join(parts).replace(".[", "[")


def _init_signature() -> inspect.Signature:
    """``Transcoder.__init__``'s signature with every option as a keyword (for help(), IDEs
    and notebooks), from the one table of options."""
    params = list(inspect.signature(Transcoder.__init__).parameters.values())
    keywords = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=f.default, annotation=f.type)
        for name, f in OPTIONS.items()
    ]
    return inspect.Signature([*params[:5], *keywords])  # self, schema, columns, cache, versions


Transcoder.__init__.__signature__ = _init_signature()  # type: ignore[attr-defined]
Transcoder.__doc__ = f"{Transcoder.__doc__}\n    {options_doc()}\n"


def _rebuild(spec: TranscodeSpec, cache: ParserCache | None) -> Transcoder:
    return Transcoder(spec, cache=cache)
