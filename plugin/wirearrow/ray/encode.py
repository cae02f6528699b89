"""The write half in Ray Data: Arrow rows -> protobuf records (:class:`Encode`,
:func:`encode`), -> files of framed records (:func:`write_delimited`), -> protojson text
(:class:`ToJson`)."""

from __future__ import annotations

import hashlib
import os
import posixpath
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import ray
from ray.data import Dataset
from ray.data.datasource import BlockBasedFileDatasink

from wirearrow.counts import Counts
from wirearrow.dead_letters import DEAD_LETTER_SCHEMA
from wirearrow.errors import EncodeError
from wirearrow.plans import PlanLike, Resolved
from wirearrow.ray.datasource import filesystem_of
from wirearrow.ray.job import (
    Step,
    TranscodeResult,
    resolve,
    run_job,
    with_source,
    write_dead_letters,
)
from wirearrow.ray.ledger import Ledger
from wirearrow.sources.confluent import message_index as message_index_of
from wirearrow.sources.framing import check_framing, frame_records
from wirearrow.transcoder import Transcoder

__all__ = ["DelimitedDatasink", "Encode", "ToJson", "WriteStats", "encode", "write_delimited"]

# The column Encode writes the records to, unless told.
RECORD_COLUMN = "record"


def rows_key(batch: pa.Table) -> str:
    """A name of a batch of rows by its content (the same rows give the same key on any
    worker, in any attempt): its row count, schema and first, middle and last rows."""
    n = batch.num_rows
    h = hashlib.blake2b(digest_size=12)
    h.update(n.to_bytes(8, "little"))
    h.update(str(batch.schema).encode())
    if n:
        h.update(repr(batch.take(sorted({0, n // 2, n - 1})).to_pylist()).encode())
    return h.hexdigest()


def encode_rows(
    tc: Transcoder, batch: pa.Table, carry: Sequence[str] = ()
) -> tuple[pa.Array, np.ndarray, pa.Table | None]:
    """(records of the good rows of ``batch`` -- its columns but ``carry`` --, positions of
    the bad rows, their dead letters or None) under ``tc``'s policy: ``DEAD_LETTER_SCHEMA``
    (``index``: the row in the batch; ``path`` and ``reason`` from the EncodeError; ``raw``
    null) plus ``source``, the whole input row."""
    rows = batch.drop_columns(list(carry)) if carry else batch
    if tc.spec.on_error == "raise":
        try:
            return tc.encode(rows), np.zeros(0, dtype=np.int64), None
        except EncodeError as err:
            if err.row is not None and hasattr(err, "add_note"):  # Python 3.11+
                err.add_note(f"input row: {batch.slice(err.row, 1).to_pylist()[0]}")
            raise
    records, failures = tc.encode(rows, on_error="dead_letter")
    bad = failures.column("row")
    if not len(bad):
        return records, np.zeros(0, dtype=np.int64), None
    dead = None
    if tc.spec.on_error == "dead_letter":
        n = len(bad)
        zeros, nulls = pa.array(np.zeros(n, dtype=np.int64)), pa.nulls(n, pa.binary())
        columns = [bad, zeros, failures.column("path"), failures.column("reason"), nulls]
        dead = with_source(pa.table(columns, schema=DEAD_LETTER_SCHEMA), batch, "")
    return records.drop_null(), bad.to_numpy(), dead


class Encode(Step):
    """A callable class for ``Dataset.map_batches``: a batch of rows -> a batch of records.

    ``plan``: a whole-message plan (best an ``ObjectRef`` from
    :func:`~wirearrow.ray.put_plan`); the batch's columns are the message's fields, but
    ``carry``: columns carried onto the output as they are (a Kafka key). Returns ``carry``
    and ``column``: one record per row, byte-identical to the runtime's
    ``SerializeToString(deterministic=True)``; with ``framing="confluent"``, prefixed with
    ``schema_id`` and ``message_index`` (default: the message's path in its file).
    ``on_error`` overrides the plan's policy ("raise": the EncodeError names the row and
    column; "skip"; "dead_letter": to ``dead_letters`` and/or ``ledger``, as
    :class:`~wirearrow.ray.Transcode`'s, ``source`` the whole row). ``stats.bytes_in``:
    the bytes of the records written.
    """

    def __init__(
        self,
        plan: PlanLike | Resolved | ray.ObjectRef,
        column: str = RECORD_COLUMN,
        *,
        carry: Sequence[str] = (),
        framing: str | None = None,
        schema_id: int | None = None,
        message_index: Sequence[int] | None = None,
        on_error: str | None = None,
        dead_letters: str | os.PathLike[str] | None = None,
        filesystem: pafs.FileSystem | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        super().__init__(plan, on_error, dead_letters, filesystem, ledger)
        self._tc.encoder  # noqa: B018 (a flat plan fails here, not on the first batch)
        self._column = column
        self._carry = list(carry)
        if column in self._carry:
            raise ValueError(f"column {column!r} is also a carry= column")
        if framing not in (None, "confluent"):
            raise ValueError(f'a record column\'s framing is None or "confluent", not {framing!r}')
        if (framing is None) != (schema_id is None):
            raise ValueError('framing="confluent" and schema_id= go together')
        self._framing = framing
        self._schema_id = schema_id
        self._message_index = (
            tuple(message_index) if message_index is not None else message_index_of(self._tc.schema)
        )
        if framing is not None:  # checked now, not on the first batch
            self._frame(pa.array([], pa.binary()))

    def _frame(self, records: pa.Array) -> pa.Array:
        if self._framing is None:
            return records
        return frame_records(
            records, self._framing, schema_id=self._schema_id, message_index=self._message_index
        )

    def __call__(self, batch: pa.Table) -> pa.Table:
        started = time.perf_counter()
        batch = self._table(batch)
        missing = [name for name in self._carry if name not in batch.column_names]
        if missing:
            raise KeyError(f"carry columns not in the batch: {missing}")
        records, failures, dead = encode_rows(self._tc, batch, self._carry)
        records = self._frame(records)
        out = batch.select(self._carry)
        if len(failures):
            good = np.ones(batch.num_rows, dtype=bool)
            good[failures] = False
            out = out.filter(pa.array(good))
        out = out.append_column(pa.field(self._column, records.type), pa.chunked_array([records]))
        self._account(rows_key(batch), _counts(batch, failures, records, dead), dead, started)
        return out


def _counts(batch: pa.Table, failures: np.ndarray, records: pa.Array, dead: Any) -> Counts:
    """The counts of rows encoded: ``bytes_in`` is the bytes of the records written."""
    n, failed = batch.num_rows, len(failures)
    size = int(pc.sum(pc.binary_length(records)).as_py() or 0) if len(records) else 0
    dead_letters = dead.num_rows if dead is not None else 0
    return Counts(n, n - failed, failed, n - failed, size, dead_letters)


def encode(
    ds: Dataset,
    plan: PlanLike | ray.ObjectRef,
    column: str = RECORD_COLUMN,
    *,
    carry: Sequence[str] = (),
    framing: str | None = None,
    schema_id: int | None = None,
    message_index: Sequence[int] | None = None,
    on_error: str | None = None,
    dead_letters: str | os.PathLike[str] | None = None,
    filesystem: pafs.FileSystem | None = None,
    batch_size: int | None = None,
    **map_batches_args: Any,
) -> TranscodeResult:
    """:class:`Encode` the rows of ``ds`` on Ray tasks (one per worker process and job):
    a :class:`~wirearrow.ray.TranscodeResult` whose ``rows`` are ``carry`` and ``column``,
    with the job's counts and the rows that could not be encoded. Other keywords go to
    ``map_batches``."""
    resolved = resolve(plan, on_error)
    args = {
        "column": column, "carry": tuple(carry), "framing": framing, "schema_id": schema_id,
        "message_index": message_index,
    }
    return run_job(
        ds, Encode, resolved, args, dead_letters, filesystem, "tasks", None, None, batch_size,
        None, map_batches_args,
    )


class ToJson:
    """``ds.map_batches(ToJson(plan), batch_format="pyarrow")``: a whole-message plan's
    rows (other columns ignored) -> the text ``json_format.MessageToJson`` prints for each
    with the same ``options``, in the string column ``column``."""

    def __init__(self, plan: PlanLike | ray.ObjectRef, column: str = "json", **options: Any) -> None:
        self._tc = resolve(plan).transcoder
        self._column = column
        self._options = options

    def __call__(self, batch: pa.Table) -> pa.Table:
        if isinstance(batch, pa.RecordBatch):
            batch = pa.Table.from_batches([batch])
        texts = self._tc.to_json(batch.select(self._tc.arrow_schema.names), **self._options)
        return pa.table({self._column: texts})



@dataclass(frozen=True, slots=True, kw_only=True)
class WriteStats(Counts):
    """What :func:`write_delimited` wrote: the counts of its rows (``records_ok``: records
    written; ``bytes_in``: their bytes), ``bytes_out``: the files' bytes, and the files."""

    bytes_out: int = 0
    files: tuple[str, ...] = ()
    dead_letter_files: tuple[str, ...] = ()



class DelimitedDatasink(BlockBasedFileDatasink):
    """Rows -> files of framed protobuf records, one per write task (the sink of
    :func:`write_delimited`, which says what each argument does); ``result``: the
    :class:`WriteStats` of the write."""

    def __init__(
        self,
        path: str,
        plan: Transcoder | None,
        framing: str = "varint",
        *,
        column: str | None = None,
        dead_letters: str | None = None,
        filesystem: pafs.FileSystem | None = None,
        **datasink_args: Any,
    ) -> None:
        check_framing(framing)
        if (plan is None) == (column is None):
            raise ValueError("write_delimited takes a plan (rows to encode) or column= "
                             "(records already encoded), one of them")
        if plan is not None:
            plan.encoder  # noqa: B018 (a flat plan fails here, not in a write task)
        extension = "tfrecord" if framing == "tfrecord" else "bin"
        super().__init__(path, filesystem=filesystem, file_format=extension, **datasink_args)
        self._plan = plan
        self._framing = framing
        self._column = column
        self._dead_path = dead_letters or posixpath.join(path, "_dead_letters")
        self._parts: list[WriteStats] = []
        self._writing = ""
        self.result = WriteStats()

    def get_name(self) -> str:
        return f"WriteDelimited({self._framing})"

    def open_output_stream(self, path: str) -> pa.NativeFile:
        self._writing = path  # the file write_block_to_file writes
        return super().open_output_stream(path)

    # Returns what the task wrote (Ray hands the returns to on_write_complete), where Ray's
    # file datasinks return None.
    def write(self, blocks: Iterable[Any], ctx: Any) -> list[WriteStats]:  # type: ignore[override]
        self._parts = []
        super().write(blocks, ctx)
        return self._parts

    def write_block_to_file(self, block: Any, file: pa.NativeFile) -> None:
        table = block.to_arrow()
        failures, letters = np.zeros(0), None
        dead_files: tuple[str, ...] = ()
        if self._plan is None:
            records = table.column(self._column).combine_chunks()
        else:
            records, failures, letters = encode_rows(self._plan, table)
            if letters is not None:
                given = None if "://" in self._dead_path else self.filesystem
                fs, root = filesystem_of(self._dead_path, given)
                fs.create_dir(root, recursive=True)
                dead_files = (write_dead_letters(fs, root, letters, rows_key(table)),)
        data = frame_records(records, self._framing)
        file.write(data)
        counts = _counts(table, failures, records, letters)
        self._parts.append(WriteStats(
            *counts.values(), bytes_out=len(data), files=(self._writing,),
            dead_letter_files=dead_files,
        ))

    def on_write_complete(self, write_result: Any) -> None:
        super().on_write_complete(write_result)
        parts = [part for parts in write_result.write_returns for part in (parts or ())]
        self.result = WriteStats(
            *Counts.total(parts).values(), bytes_out=sum(p.bytes_out for p in parts),
            files=tuple(sorted(f for p in parts for f in p.files)),
            dead_letter_files=tuple(sorted(f for p in parts for f in p.dead_letter_files)),
        )


def write_delimited(
    ds: Dataset,
    path: str | os.PathLike[str],
    plan: PlanLike | ray.ObjectRef | None = None,
    framing: str = "varint",
    *,
    column: str | None = None,
    on_error: str | None = None,
    dead_letters: str | os.PathLike[str] | None = None,
    filesystem: pafs.FileSystem | None = None,
    min_rows_per_file: int | None = None,
    ray_remote_args: dict[str, Any] | None = None,
    concurrency: int | None = None,
) -> WriteStats:
    """Write ``ds`` as files of framed records under ``path`` (a directory or URI), one
    per write task, ``framing`` "varint", "u32le", "u32be" or "tfrecord"; the readers'
    ``read_delimited`` read them back. ``plan``: a whole-message plan, the rows encoded in
    the write tasks; or ``column``: a column of records already encoded. Rows that cannot
    be encoded follow ``on_error`` (default: the plan's); dead letters go to Parquet under
    ``dead_letters`` (default ``<path>/_dead_letters/``). Returns the :class:`WriteStats`.
    """
    tc = None
    if plan is not None:
        tc = resolve(plan, on_error).transcoder
    elif on_error is not None:
        raise ValueError("on_error= is for rows to encode (a plan), not for column=")
    sink = DelimitedDatasink(
        os.fspath(path),
        tc,
        framing,
        column=column,
        dead_letters=os.fspath(dead_letters) if dead_letters is not None else None,
        filesystem=filesystem,
        min_rows_per_file=min_rows_per_file,
    )
    ds.write_datasink(sink, ray_remote_args=ray_remote_args, concurrency=concurrency)
    return sink.result
