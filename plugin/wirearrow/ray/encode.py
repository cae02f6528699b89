"""The write half in Ray Data: Arrow rows -> protobuf records (:class:`Encode`,
:func:`encode`), files of framed records (:func:`write_delimited`), protojson text
(:class:`ToJson`). docs/ray.md, Writing protobuf back."""

from __future__ import annotations

import hashlib
import os
import posixpath
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import ray
from ray.data import Dataset
from ray.data.datasource import BlockBasedFileDatasink

from wirearrow.counts import Counts
from wirearrow.encoder import ENCODE_FAILURE_SCHEMA, Encoded
from wirearrow.errors import EncodeError
from wirearrow.plans import PlanLike, Resolved
from wirearrow.ray.job import (
    Step,
    TranscodeResult,
    resolve,
    run_job,
    with_source,
    write_dead_letters,
)
from wirearrow.ray.ledger import Ledger
from wirearrow.sources.files import filesystem_of
from wirearrow.sources.framing import check_framing, frame_records, record_framer
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
) -> tuple[pa.Array, pa.Array | None, Counts, pa.Table | None]:
    """``batch`` (its columns but ``carry``) encoded under ``tc``'s policy: (the records of
    its good rows, which rows those are -- None: all --, the counts, the dead letters with
    ``source``: the whole row). Under "raise" the EncodeError names the input row."""
    rows = batch.drop_columns(list(carry)) if carry else batch
    if tc.spec.on_error == "raise":
        try:
            encoded = Encoded(tc.encode(rows), ENCODE_FAILURE_SCHEMA.empty_table())
        except EncodeError as err:
            if err.row is not None and hasattr(err, "add_note"):  # Python 3.11+
                err.add_note(f"input row: {batch.slice(err.row, 1).to_pylist()[0]}")
            raise
    else:
        encoded = tc.encode(rows, on_error="dead_letter")
    kept = tc.spec.on_error == "dead_letter"
    counts = encoded.counts(dead_letters=kept)
    if not encoded.failures.num_rows:
        return encoded.records, None, counts, None
    dead = with_source(encoded.dead_letters(), batch, "") if kept else None
    good = encoded.records.is_valid()
    return encoded.records.filter(good), good, counts, dead


class Encode(Step):
    """``Dataset.map_batches(Encode, batch_format="pyarrow")``: a batch of rows of a
    whole-message plan (and ``carry`` columns) -> ``carry`` and ``column``, one record per
    row, plain or with ``framing="confluent"`` (``schema_id``, ``message_index``); bad rows
    as :class:`~wirearrow.ray.Transcode`'s (docs/ray.md, Writing protobuf back)."""

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
        self._column, self._carry = column, list(carry)
        if column in self._carry:
            raise ValueError(f"column {column!r} is also a carry= column")
        self._frame = record_framer(
            self._tc.schema, framing, schema_id=schema_id, message_index=message_index
        )

    def __call__(self, batch: pa.Table) -> pa.Table:
        started = time.perf_counter()
        batch = self._table(batch)
        missing = [name for name in self._carry if name not in batch.column_names]
        if missing:
            raise KeyError(f"carry columns not in the batch: {missing}")
        records, good, counts, dead = encode_rows(self._tc, batch, self._carry)
        out = batch.select(self._carry)
        if good is not None:
            out = out.filter(good)
        records = self._frame(records)
        out = out.append_column(pa.field(self._column, records.type), pa.chunked_array([records]))
        self._account(rows_key(batch), counts, dead, started)
        return out


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
    """:class:`Encode` the rows of ``ds`` on Ray tasks: a :class:`TranscodeResult` of
    ``carry`` and ``column``. Other keywords go to ``map_batches``."""
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
    rows -> ``json_format.MessageToJson``'s text with ``options``, in ``column``."""

    def __init__(self, plan: PlanLike | ray.ObjectRef, column: str = "json", **options: Any) -> None:
        self._tc = resolve(plan).transcoder
        self._column = column
        self._options = options

    def __call__(self, batch: pa.Table) -> pa.Table:
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
    :func:`write_delimited`); ``result``: the :class:`WriteStats` of the write."""

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
        dead_files: tuple[str, ...] = ()
        if self._plan is None:
            records = table.column(self._column).combine_chunks()
            counts = Encoded(records, ENCODE_FAILURE_SCHEMA.empty_table()).counts()
        else:
            records, _, counts, letters = encode_rows(self._plan, table)
            if letters is not None:
                given = None if "://" in self._dead_path else self.filesystem
                fs, root = filesystem_of(self._dead_path, given)
                fs.create_dir(root, recursive=True)
                dead_files = (write_dead_letters(fs, root, letters, rows_key(table)),)
        data = frame_records(records, self._framing)
        file.write(data)
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
    """Write ``ds`` as files of framed records under ``path`` (a directory or URI), one per
    write task: the rows encoded with a whole-message ``plan``, or a ``column`` of records
    already encoded; dead letters as Parquet under ``dead_letters`` (default
    ``<path>/_dead_letters/``). Returns the :class:`WriteStats` (docs/ray.md)."""
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
